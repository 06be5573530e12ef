//! Run reconciliation: the I/O shell around [`lifecycle::step`] (spec §5). A pass gathers facts
//! from the caches (and the run's snapshot, [`crate::snapshots`]), asks the engine for the step,
//! and sends its typed writes in order: the run's own metadata, approvals adopted, supersede
//! requests, snapshot, binding patches, events, metrics, the run's status last, then the release.
//! No decision is taken here.

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Resource, ResourceExt};
use upgradeplan::api::kratix::{BindingFacts, HealthRecord};
use upgradeplan::api::{RunState, UpgradeApproval, UpgradeFreeze, UpgradeRun, RUN_FINALIZER};
use upgradeplan::engine::admission::{reads_gates, RunFacts};
use upgradeplan::engine::lifecycle::{self, events, KindsNeeded, SnapshotFact, Step, Write};
use upgradeplan::engine::run::texts;
use upgradeplan::engine::write::{ApprovalPatch, Attempt, BindingPatch, Release, RunPatch};

use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::events::EventType;

/// How many binding patches (and their events) are in flight at once.
const PATCH_CONCURRENCY: usize = 16;

pub async fn reconcile(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    // Caches must be complete before a decision: a binding missing from a half-filled cache
    // would look deleted.
    if !ctx.caches.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if !ctx.handles(&run) {
        return Ok(Action::await_change()); // another controller's run
    }
    if run.meta().deletion_timestamp.is_some() {
        // Not through kube's finalizer helper: the finalizer stays until the plan recorded the
        // cancelled run's result, which the plan's own reconcile writes (one writer per status).
        return deleted(run, ctx).await;
    }
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    finalizer(&api, RUN_FINALIZER, run, |event| async {
        match event {
            Finalizer::Apply(run) => pass(&run, &ctx).await,
            Finalizer::Cleanup(run) => deleted(run, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

impl lifecycle::Cluster for Ctx {
    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<dyn BindingFacts>> {
        Ctx::binding(self, namespace, name).map(|b| b as _)
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        Ctx::bindings_of(self, promise).into_iter().map(|b| b as _).collect()
    }
    fn revision_exists(&self, promise: &str, version: &str) -> bool {
        Ctx::revision_exists(self, promise, version)
    }
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        self.health_records_of(promise)
    }
    fn freezes(&self) -> Vec<Arc<UpgradeFreeze>> {
        self.caches.freezes.state()
    }
}

/// Gathers the facts, takes the engine's step and applies it.
async fn pass(run: &UpgradeRun, ctx: &Ctx) -> Result<Action> {
    // The pass's one reading of the decision clock: every timestamp of its step is this instant.
    let now = crate::clock::now();
    let status = run.status.clone().unwrap_or_default();
    let plan = ctx.plan(run.plan_name());
    let others: Vec<RunFacts> = ctx
        .runs_of(run.plan_name())
        .iter()
        .filter(|r| r.name_any() != run.name_any())
        .map(|r| RunFacts::of(r))
        .collect();
    let snapshot = crate::snapshots::gather_snapshot(ctx, run, &status).await?;
    // The plan the run follows: frozen once the snapshot exists, else the live one.
    let run_plan = match &snapshot {
        SnapshotFact::Found { frozen, .. } => Some(&frozen.plan),
        _ => plan.as_deref().map(|p| &p.spec),
    };
    // A kind the API server does not serve is a fact for the step (KindsServed, spec §14.2); a
    // list still to come is a short wait.
    let missing_kinds = match lifecycle::kinds_needed(
        run,
        run_plan,
        ctx.caches.health_kind.cache(),
        ctx.caches.approvals_kind.cache(),
    ) {
        KindsNeeded::Known(missing) => missing,
        KindsNeeded::ListPending { resource } => {
            tracing::debug!(run = %run.name_any(), "waiting for the {resource} cache");
            return Ok(Action::requeue(std::time::Duration::from_secs(5)));
        }
    };
    // A freeze must hold before anything starts; its list comes moments after the start (a
    // watch that cannot list freezes logs why).
    if !ctx.freezes_known() && !status.state.is_terminal() {
        tracing::debug!(run = %run.name_any(), "waiting for the UpgradeFreeze cache");
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    // Signal gates of the run's plan, read by the plan's active run only (see `reads_gates`).
    let gates = match run_plan.and_then(|p| p.gates.as_deref()) {
        Some(gates) if !gates.is_empty() && reads_gates(run) => {
            ctx.gates.read(run.plan_name(), gates, now, &ctx.metrics).await
        }
        _ => Vec::new(),
    };
    let approvals = ctx.approvals_of(run);
    let facts = lifecycle::Facts {
        plan: plan.as_deref(),
        others: &others,
        snapshot,
        gates: &gates,
        approvals: &approvals,
        missing_kinds: &missing_kinds,
        selector: ctx.selector.as_deref(),
        now,
    };
    let step = lifecycle::step(run, &facts, ctx);
    carry_out(ctx, run, step).await
}

/// A deleted run: cancelled by its own step, then, once its plan recorded it, its snapshot goes
/// and the finalizer is released.
async fn deleted(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    if !run.finalizers().iter().any(|f| f == RUN_FINALIZER) {
        return Ok(Action::await_change());
    }
    pass(&run, &ctx).await
}

/// Applies a step's writes in the order the engine gives them ([`Step::writes`]): everything
/// else first, the status last.
async fn carry_out(ctx: &Ctx, run: &UpgradeRun, step: Step) -> Result<Action> {
    let run_name = run.name_any();
    let plan_name = run.plan_name().to_string();
    // The run as this pass saw it; this pass's own writes to it move the version on. The status
    // write is conditional on it (see `apply_status_at`).
    let mut version = run.resource_version();
    let mut conflict = false;
    for write in step.writes(run.status.as_ref()) {
        match write {
            Write::Own(own) => {
                if let Some(patched) = patch_run(&ctx.client, own).await? {
                    version = patched.resource_version();
                }
            }
            Write::AdoptApprovals(patches) => adopt_approvals(&ctx.client, patches).await?,
            Write::Supersede(older) => {
                if patch_run(&ctx.client, older).await?.is_some() {
                    tracing::info!(run = %older.run, by = %run_name, "asked the older run to stand down");
                }
            }
            Write::Snapshot(shards, frozen) => {
                let versions = crate::snapshots::write_snapshot(ctx, run, shards).await?;
                if let (Some(uid), Ok(mut cache)) = (run.uid(), ctx.frozen.lock()) {
                    let verified = crate::context::Verified {
                        frozen: frozen.clone(),
                        versions,
                    };
                    cache.insert(uid, Arc::new(verified));
                }
            }
            Write::Bindings(patches, frozen) => {
                if !patches.is_empty() {
                    tracing::debug!(run = %run_name, patches = patches.len(), "patching bindings");
                }
                repair_announcements(ctx, run, &frozen.snapshot, &step.to).await;
                conflict = patch_bindings(ctx, run, patches).await?;
            }
            Write::FlushCounts => ctx.recorder.flush_counts(&run.uid().unwrap_or_default()).await,
            Write::Announce(a) => {
                let type_ = if a.warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                };
                if a.key.is_empty() {
                    ctx.announce_once(run, type_, a.reason, a.note.clone()).await;
                } else {
                    ctx.event_once(run, type_, a.reason, a.key.clone(), a.note.clone())
                        .await;
                }
            }
            Write::Gauges(gauges) => ctx.metrics.set_run_gauges(&plan_name, gauges),
            Write::Status(status) => {
                let written =
                    crate::context::apply_status_at::<UpgradeRun>(&ctx.client, &run_name, status, version.as_deref())
                        .await;
                match written {
                    // Computed from a copy older than the run: nothing of it is counted; the
                    // next pass, from the current run, decides again.
                    Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                        tracing::debug!(run = %run_name, "status computed from a stale copy of the run; looking again");
                        return Ok(Action::requeue(std::time::Duration::from_millis(200)));
                    }
                    other => other?,
                }
                if status.state == RunState::InProgress
                    && run.status.as_ref().map(|s| s.state) != Some(RunState::InProgress)
                {
                    tracing::info!(run = %run_name, plan = %plan_name, resources = status.total_resources, "snapshot taken; run in progress");
                }
            }
            Write::Count => ctx.count(run, &step),
            Write::Release(release) => {
                release_run(ctx, run, release).await?;
                return Ok(Action::await_change());
            }
        }
    }
    Ok(match (conflict, step.wake_at) {
        (true, _) => Action::requeue(std::time::Duration::from_millis(200)),
        (false, Some(at)) => Action::requeue(crate::clock::until(at)),
        (false, None) => Action::await_change(),
    })
}

fn field_manager() -> PatchParams {
    PatchParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// Sends one run patch: this run's own, or a request to an older run to stand down.
/// `None` when the run is gone (a deleted run needs neither).
async fn patch_run(client: &kube::Client, patch: &RunPatch) -> Result<Option<UpgradeRun>> {
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

/// Makes the run an owner of its UpgradeApprovals; one changed or deleted since it was read is
/// adopted on a later pass, from the new state.
async fn adopt_approvals(client: &kube::Client, patches: &[ApprovalPatch]) -> Result<()> {
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

/// Sends the step's binding patches, concurrently (bounded): a group of thousands starts at the
/// API server's pace, not one round trip at a time. Each carries its own precondition. Returns
/// whether any conflicted (the next pass re-evaluates; nothing is overwritten).
async fn patch_bindings(ctx: &Ctx, run: &UpgradeRun, patches: &[BindingPatch]) -> Result<bool> {
    // One pipeline for every patch, PATCH_CONCURRENCY in flight: no batch waits for its slowest
    // request before the next begins. Streams by index (a closure over borrowed items is not
    // provably Send across the await): only the futures in flight exist, however many thousands.
    let send = |i: usize| {
        let patch = &patches[i];
        async move { (patch, patch_binding(&ctx.client, patch).await) }
    };
    let mut sent = futures::stream::iter(0..patches.len())
        .map(send)
        .buffer_unordered(PATCH_CONCURRENCY);
    // An error does not abandon the patches in flight: they finish and are announced; the first
    // error is returned at the end.
    let mut conflict = false;
    let mut failed = None;
    while let Some((patch, result)) = sent.next().await {
        match result {
            Ok(true) => conflict = true,
            Ok(false) => {
                let Attempt::Start { from, to } = &patch.attempt else {
                    continue;
                };
                ctx.started(run, &patch.resource);
                let note = texts::resource_started(&patch.resource.display_name(), from, to);
                ctx.event(run, EventType::Normal, events::RESOURCE_UPGRADE_STARTED, note)
                    .await;
            }
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(conflict)
}

/// After a restart, announces the upgrades an earlier process started but whose
/// `ResourceUpgradeStarted` event a crash cut off (it came between the patch and the event).
/// Runs once per run per process, before this process starts anything for the run.
async fn repair_announcements(
    ctx: &Ctx,
    run: &UpgradeRun,
    snapshot: &upgradeplan::engine::snapshot::Snapshot,
    to: &str,
) {
    let recalled = match ctx.recall_announcements(run).await {
        Ok(r) => r,
        Err(e) => {
            // Announcements are best effort; the run must not wait on them. Retried next reconcile.
            tracing::warn!(run = %run.name_any(), error = %e, "listing the run's events failed; lost announcements are not repaired yet");
            return;
        }
    };
    if !recalled.first {
        return;
    }
    let missing = lifecycle::lost_start_announcements(run, snapshot, to, &recalled.announced, ctx);
    if !missing.is_empty() {
        tracing::info!(run = %run.name_any(), count = missing.len(), "announcing upgrades whose events a restart lost");
    }
    announce_starts(ctx, run, missing).await;
}

/// Deletes the run's snapshot ConfigMaps and releases its finalizer (the run then goes).
async fn release_run(ctx: &Ctx, run: &UpgradeRun, release: &Release) -> Result<()> {
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

/// Publishes `ResourceUpgradeStarted` events, as many at once as patches go out.
async fn announce_starts(ctx: &Ctx, run: &UpgradeRun, notes: Vec<String>) {
    let events: Vec<_> = notes
        .into_iter()
        .map(|note| ctx.event(run, EventType::Normal, events::RESOURCE_UPGRADE_STARTED, note))
        .collect();
    futures::stream::iter(events)
        .buffer_unordered(PATCH_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Sends one binding patch (its resourceVersion the precondition). Returns true on a conflict
/// or a binding gone (someone changed it first: the next reconcile re-evaluates; nothing is
/// overwritten).
async fn patch_binding(client: &kube::Client, patch: &BindingPatch) -> Result<bool> {
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

/// The object's key in [`Ctx::retries`].
pub fn retry_key(run: &UpgradeRun) -> String {
    format!("run/{}", run.name_any())
}

pub fn error_policy(run: Arc<UpgradeRun>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.retries.next_delay(&retry_key(&run));
    tracing::warn!(run = %run.name_any(), error = %err, kind = err.metric_label(), retry_in = ?delay, "run reconcile failed; retrying");
    Action::requeue(delay)
}

/// The controller's writes request by request, against a mocked API server: shapes, order,
/// preconditions, field managers, conflicts (the real control plane runs them end to end in
/// tests/tests).
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;
    use serde_json::{json, Value};
    use upgradeplan::api::UpgradeRun;
    use upgradeplan::engine::run::BindingAction;
    use upgradeplan::engine::snapshot::SnapshotResource;
    use upgradeplan::engine::write::{ApprovalPatch, BindingPatch, RunPatch};

    use super::{adopt_approvals, patch_binding, patch_run};

    fn start() -> BindingPatch {
        let action = BindingAction {
            resource: Arc::new(SnapshotResource {
                namespace: "team-a".into(),
                name: "db".into(),
                binding: "db-binding".into(),
                last_applied_version: "v1".into(),
                spec_version: "v1".into(),
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

    fn ok(object: Value) -> Response<Body> {
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

    /// A controller context whose API server is `service`, with empty caches.
    fn context(client: kube::Client) -> super::Ctx {
        super::Ctx {
            recorder: crate::events::Publisher::new(client.clone(), "upgradeplan-controller", "test".into()),
            client,
            snapshot_namespace: "kratix-platform-system".into(),
            selector: None,
            label_selector: None,
            caches: crate::caches::Stores::empty(),
            frozen: Default::default(),
            metrics: Arc::new(crate::metrics::Metrics::new()),
            resources: Default::default(),
            reported: Default::default(),
            announced: Default::default(),
            retries: Default::default(),
            gates: Arc::new(crate::gates::GateReader::new(None, std::time::Duration::from_secs(30))),
        }
    }

    /// Answers every request as the API server would for the objects this test writes, and
    /// records (method, path, body) in the order they arrive.
    async fn serve_all(
        mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
        log: Arc<std::sync::Mutex<Vec<(String, String, Value)>>>,
    ) {
        while let Some((request, respond)) = handle.next_request().await {
            let (parts, body) = request.into_parts();
            let bytes = body.collect().await.expect("the body").to_bytes();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let path = parts.uri.path().to_string();
            let reply = if parts.method == http::Method::GET {
                // The run's events, listed before announcing: none yet.
                json!({"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": []})
            } else if path.contains("/events") {
                body.clone()
            } else {
                let name = path
                    .rsplit('/')
                    .find(|s| *s != "status")
                    .unwrap_or_default()
                    .to_string();
                let (api_version, kind) = if path.contains("upgradeapprovals") {
                    ("platform.syntasso.io/v1alpha1", "UpgradeApproval")
                } else {
                    ("platform.syntasso.io/v1alpha1", "UpgradeRun")
                };
                json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "resourceVersion": "6"},
                       "spec": {"upgradePlanRef": {"name": "p"}, "group": "prod", "upgradeRunRef": {"name": "r"}}})
            };
            log.lock()
                .expect("the log")
                .push((parts.method.to_string(), path, body));
            respond.send_response(ok(reply));
        }
    }

    #[tokio::test]
    async fn a_step_is_sent_in_order_with_the_status_last_and_conditional_on_the_run_as_patched() {
        use upgradeplan::api::{RunState, UpgradeRunStatus};
        use upgradeplan::engine::lifecycle::{Announcement, Gauges, Step};

        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let server = tokio::spawn(serve_all(handle, log.clone()));

        let mut run = UpgradeRun::new("r", Default::default());
        run.metadata.uid = Some("r-uid".into());
        run.metadata.resource_version = Some("5".into());
        let mut own = RunPatch::of("r");
        own.labels.insert("platform.syntasso.io/plan".into(), "p".into());
        let step = Step {
            own,
            supersede: vec![RunPatch::supersede("old", "r")],
            write_snapshot: Vec::new(),
            frozen: None,
            adopt_approvals: vec![ApprovalPatch {
                approval: "r-prod".into(),
                resource_version: Some("3".into()),
                owner_references: Vec::new(),
            }],
            evaluation: None,
            binding_patches: Vec::new(),
            to: "v2".into(),
            announce: vec![Announcement {
                warning: false,
                reason: "UpgradeRunPending",
                note: "waiting".into(),
                key: String::new(),
            }],
            results: Vec::new(),
            gauges: Gauges::Keep,
            newly_superseded: false,
            finished: None,
            release: None,
            status: UpgradeRunStatus {
                state: RunState::Pending,
                ..Default::default()
            },
            wake_at: None,
        };
        let ctx = context(client);
        super::carry_out(&ctx, &run, step).await.expect("the step is sent");
        drop(ctx);
        server.await.expect("the server");

        let log = log.lock().expect("the log");
        let writes: Vec<(&str, &str)> = log
            .iter()
            .filter(|(method, _, _)| method != "GET")
            .map(|(method, path, _)| (method.as_str(), path.as_str()))
            .collect();
        let runs = "/apis/platform.syntasso.io/v1alpha1/upgraderuns";
        let events = writes.iter().filter(|(_, p)| p.contains("/events")).count();
        assert_eq!(events, 1, "one announcement: {writes:#?}");
        let others: Vec<_> = writes.iter().filter(|(_, p)| !p.contains("/events")).collect();
        assert_eq!(
            others,
            [
                &("PATCH", format!("{runs}/r").as_str()),
                &("PATCH", "/apis/platform.syntasso.io/v1alpha1/upgradeapprovals/r-prod"),
                &("PATCH", format!("{runs}/old").as_str()),
                &("PATCH", format!("{runs}/r/status").as_str()),
            ],
            "its own metadata first, then approvals and supersede requests, the status last"
        );
        let event_at = writes.iter().position(|(_, p)| p.contains("/events")).unwrap();
        assert_eq!(
            event_at,
            writes.len() - 2,
            "announced before the status is written: {writes:#?}"
        );
        let (_, _, status) = log.last().expect("the status write");
        assert_eq!(
            status["metadata"]["resourceVersion"], "6",
            "conditional on the run as its own patch left it: {status}"
        );
        assert_eq!(status["status"]["state"], "Pending");
    }
}
