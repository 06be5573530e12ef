//! Sends the engine's typed writes ([`upgradeplan::engine::write`]) to the API server, one
//! request each, with the write's own precondition and field manager, and says what a conflict
//! means: a binding changed since it was read is re-evaluated on the next pass, never
//! overwritten; a run or approval gone is no error. Nothing is decided here.

use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use upgradeplan::api::{UpgradeApproval, UpgradeRun};
use upgradeplan::engine::write::{ApprovalPatch, BindingPatch, Release, RunPatch};

use crate::context::Ctx;
use crate::error::Result;

pub(crate) fn field_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Sends one run patch: this run's own, or a request to an older run to stand down.
/// `None` when the run is gone (a deleted run needs neither).
pub(crate) async fn patch_run(client: &kube::Client, patch: &RunPatch) -> Result<Option<UpgradeRun>> {
    let api: Api<UpgradeRun> = Api::all(client.clone());
    match api
        .patch(&patch.run, &field_manager(), &Patch::Merge(patch.merge_patch()))
        .await
    {
        Ok(patched) => Ok(Some(patched)),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether run `name` is, on the API server, at `version` (false when it moved on or is gone).
pub(crate) async fn run_is_at(client: &kube::Client, name: &str, version: Option<&str>) -> Result<bool> {
    let api: Api<UpgradeRun> = Api::all(client.clone());
    let current = api.get_metadata_opt(name).await?;
    Ok(version.is_some() && current.and_then(|r| r.metadata.resource_version).as_deref() == version)
}

/// Creates a run the engine decided on (a revert, spec §13.7). Its name is fixed, so
/// AlreadyExists means an earlier pass (or another leader) created it: done.
pub(crate) async fn create_run(client: &kube::Client, run: &UpgradeRun) -> Result<()> {
    let api: Api<UpgradeRun> = Api::all(client.clone());
    let params = PostParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, run).await {
        Ok(created) => {
            tracing::info!(run = %created.name_any(), "created the run's revert");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            tracing::debug!(run = %run.name_any(), "the revert exists already");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Makes the run an owner of its UpgradeApprovals; one changed or deleted since it was read is
/// adopted on a later pass, from the new state.
pub(crate) async fn adopt_approvals(client: &kube::Client, patches: &[ApprovalPatch]) -> Result<()> {
    let api: Api<UpgradeApproval> = Api::all(client.clone());
    for patch in patches {
        match api
            .patch(&patch.approval, &field_manager(), &Patch::Merge(patch.merge_patch()))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                tracing::debug!(approval = %patch.approval, code = e.code, "approval changed meanwhile; adopting it on the next pass");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Deletes the run's snapshot ConfigMaps and releases its finalizer (the run then goes).
pub(crate) async fn release_run(ctx: &Ctx, run: &UpgradeRun, release: &Release) -> Result<()> {
    crate::snapshots::delete_snapshot(ctx, run).await?;
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    match api
        .patch(&release.run, &field_manager(), &Patch::Merge(release.merge_patch()))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {} // gone, or look again
        Err(e) => return Err(e.into()),
    }
    ctx.forget_run(&run.uid().unwrap_or_default());
    Ok(())
}

/// Sends one binding patch (its resourceVersion the precondition). Returns true on a conflict
/// or a binding gone (someone changed it first: the next reconcile re-evaluates; nothing is
/// overwritten).
pub(crate) async fn patch_binding(client: &kube::Client, patch: &BindingPatch) -> Result<bool> {
    // The reply (the whole binding) is not read: the watch brings the change to the cache, and
    // parsing thousands of replies would cost the controller's CPU beside the API server's.
    use upgradeplan::api::kratix::ResourceBinding;
    let url = ResourceBinding::url_path(&(), Some(&patch.resource.namespace));
    let request = kube::core::Request::new(url)
        .patch(
            &patch.resource.binding,
            &field_manager(),
            &Patch::Merge(patch.merge_patch()),
        )
        .map_err(kube::Error::BuildRequest)?;
    match client.request_text(request).await {
        Ok(_) => Ok(false),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
            tracing::debug!(binding = %patch.resource.display_name(), code = e.code, "binding changed or gone since the cache saw it; the next pass decides again");
            Ok(true)
        }
        Err(e) => Err(e.into()),
    }
}

/// Each write request by request, against a mocked API server: shapes, preconditions, field
/// managers, conflicts (the real control plane runs them end to end in tests/tests).
#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;
    use serde_json::{json, Value};
    use upgradeplan::api::UpgradeRun;
    use upgradeplan::engine::run::BindingAction;
    use upgradeplan::engine::snapshot::SnapshotResource;
    use upgradeplan::engine::write::{ApprovalPatch, BindingPatch, RunPatch};

    use super::{adopt_approvals, create_run, patch_binding, patch_run};

    /// A start of `team-a/db` (binding `db-binding`, resourceVersion 41) to v2.
    pub(crate) fn start() -> BindingPatch {
        let action = BindingAction {
            resource: Arc::new(SnapshotResource {
                namespace: "team-a".into(),
                name: "db".into(),
                binding: "db-binding".into(),
                last_applied_version: "v1".into(),
                spec_version: "v1".into(),
                target: None,
            }),
            resource_version: Some("41".into()),
            from: "v1".into(),
        };
        let now = "2026-06-01T10:00:00Z".parse().expect("a time");
        BindingPatch::start(&action, "v2", "run-1", now)
    }

    fn status(code: u16, reason: &str) -> Response<Body> {
        let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code});
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).expect("json")))
            .expect("a response")
    }

    /// What the mocked API server received: method, URI, content type, body.
    type Received = (String, String, String, Value);

    /// Sends `patch` to a mocked API server that answers `reply`; returns what the server
    /// received and what `patch_binding` made of the answer.
    async fn send(patch: BindingPatch, reply: Response<Body>) -> (Received, Result<bool, String>) {
        serve_one(reply, |client| async move {
            patch_binding(&client, &patch).await.map_err(|e| e.to_string())
        })
        .await
    }

    /// Runs `call` with a client whose API server answers one request with `reply`.
    async fn serve_one<T, F, Fut>(reply: Response<Body>, call: F) -> (Received, T)
    where
        F: FnOnce(kube::Client) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let server = tokio::spawn(async move {
            let (request, respond) = handle.next_request().await.expect("one request");
            let (parts, body) = request.into_parts();
            let body = body.collect().await.expect("the body").to_bytes();
            respond.send_response(reply);
            let content_type = parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok());
            (
                parts.method.to_string(),
                parts.uri.to_string(),
                content_type.unwrap_or_default().to_string(),
                serde_json::from_slice(&body).expect("a JSON body"),
            )
        });
        let answer = call(client).await;
        (server.await.expect("the server"), answer)
    }

    #[tokio::test]
    async fn a_start_is_one_merge_patch_of_the_binding_with_its_precondition_and_field_manager() {
        let patch = start();
        let ((method, uri, content_type, body), answer) = send(patch.clone(), status(200, "")).await;
        assert_eq!(method, "PATCH");
        assert_eq!(
            uri,
            "/apis/platform.kratix.io/v1alpha1/namespaces/team-a/resourcebindings/db-binding?&fieldManager=upgradeplan-controller"
        );
        assert_eq!(content_type, "application/merge-patch+json");
        assert_eq!(body, patch.merge_patch());
        assert_eq!(body["metadata"]["resourceVersion"], "41", "the precondition");
        assert_eq!(body["spec"]["version"], "v2");
        assert_eq!(answer, Ok(false), "sent, no conflict");
    }

    #[tokio::test]
    async fn a_binding_changed_or_gone_since_it_was_read_is_a_conflict_and_anything_else_an_error() {
        for (code, reason, want) in [(409, "Conflict", Ok(true)), (404, "NotFound", Ok(true))] {
            let (_, answer) = send(start(), status(code, reason)).await;
            assert_eq!(answer, want, "{code}");
        }
        let (_, answer) = send(start(), status(500, "InternalError")).await;
        assert!(
            answer.is_err(),
            "a server error is the pass's error (retried with backoff): {answer:?}"
        );
    }

    pub(crate) fn ok(object: Value) -> Response<Body> {
        Response::builder()
            .status(200)
            .body(Body::from(serde_json::to_vec(&object).expect("json")))
            .expect("a response")
    }

    #[tokio::test]
    async fn a_supersede_request_is_one_merge_patch_of_the_older_run_and_a_run_gone_is_no_error() {
        let patch = RunPatch::supersede("old", "new");
        let mut patched = UpgradeRun::new("old", Default::default());
        patched.metadata.resource_version = Some("8".into());
        let reply = ok(serde_json::to_value(&patched).expect("json"));
        let call = |patch: RunPatch| {
            move |client: kube::Client| async move {
                let answer = patch_run(&client, &patch).await.map_err(|e| e.to_string());
                answer.map(|run| run.and_then(|r| r.metadata.resource_version))
            }
        };
        let ((method, uri, content_type, body), answer) = serve_one(reply, call(patch.clone())).await;
        assert_eq!(method, "PATCH");
        assert_eq!(
            uri,
            "/apis/platform.syntasso.io/v1alpha1/upgraderuns/old?&fieldManager=upgradeplan-controller"
        );
        assert_eq!(content_type, "application/merge-patch+json");
        assert_eq!(body, patch.merge_patch());
        assert_eq!(answer, Ok(Some("8".into())), "the run's new resourceVersion");

        let (_, answer) = serve_one(status(404, "NotFound"), call(patch.clone())).await;
        assert_eq!(answer, Ok(None), "a run deleted meanwhile needs no patch");
        let (_, answer) = serve_one(status(500, "InternalError"), call(patch)).await;
        assert!(answer.is_err(), "a server error is the pass's error: {answer:?}");
    }

    #[tokio::test]
    async fn a_revert_is_created_once_and_one_that_exists_is_no_error() {
        let mut revert = UpgradeRun::new(
            "r-revert",
            upgradeplan::api::UpgradeRunSpec {
                revert_of: Some(upgradeplan::api::RevertOf {
                    name: "r".into(),
                    resources: upgradeplan::api::RevertResources::All,
                }),
                ..Default::default()
            },
        );
        revert.spec.upgrade_plan_ref.name = "p".into();
        let call = |run: UpgradeRun| {
            move |client: kube::Client| async move { create_run(&client, &run).await.map_err(|e| e.to_string()) }
        };
        let reply = ok(serde_json::to_value(&revert).expect("json"));
        let ((method, uri, content_type, body), answer) = serve_one(reply, call(revert.clone())).await;
        assert_eq!(method, "POST");
        assert_eq!(
            uri,
            "/apis/platform.syntasso.io/v1alpha1/upgraderuns?&fieldManager=upgradeplan-controller"
        );
        assert_eq!(content_type, "application/json");
        assert_eq!(body["spec"]["revertOf"], json!({"name": "r", "resources": "all"}));
        assert_eq!(answer, Ok(()));
        let (_, answer) = serve_one(status(409, "AlreadyExists"), call(revert.clone())).await;
        assert_eq!(answer, Ok(()), "created by an earlier pass: done");
        let (_, answer) = serve_one(status(500, "InternalError"), call(revert)).await;
        assert!(answer.is_err(), "a server error is the pass's error: {answer:?}");
    }

    #[tokio::test]
    async fn an_adoption_is_a_merge_patch_with_its_precondition_and_one_changed_or_gone_waits_for_a_later_pass() {
        let patch = ApprovalPatch {
            approval: "r-prod".into(),
            resource_version: Some("3".into()),
            owner_references: Vec::new(),
        };
        let mut approval = upgradeplan::api::UpgradeApproval::new("r-prod", Default::default());
        approval.metadata.resource_version = Some("4".into());
        let call = |patch: ApprovalPatch| {
            move |client: kube::Client| async move { adopt_approvals(&client, &[patch]).await.map_err(|e| e.to_string()) }
        };
        let reply = ok(serde_json::to_value(&approval).expect("json"));
        let ((method, uri, content_type, body), answer) = serve_one(reply, call(patch.clone())).await;
        assert_eq!(
            (method.as_str(), content_type.as_str()),
            ("PATCH", "application/merge-patch+json")
        );
        assert_eq!(
            uri,
            "/apis/platform.syntasso.io/v1alpha1/upgradeapprovals/r-prod?&fieldManager=upgradeplan-controller"
        );
        assert_eq!(body, patch.merge_patch());
        assert_eq!(answer, Ok(()));
        for (code, reason) in [(404, "NotFound"), (409, "Conflict")] {
            let (_, answer) = serve_one(status(code, reason), call(patch.clone())).await;
            assert_eq!(answer, Ok(()), "{code}: adopted on a later pass, from the new state");
        }
        let (_, answer) = serve_one(status(500, "InternalError"), call(patch)).await;
        assert!(answer.is_err(), "a server error is the pass's error: {answer:?}");
    }
}
