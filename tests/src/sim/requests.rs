//! kratix-sim's Resource Requests (spec §2): Kratix's dynamic resource-request controller, as far
//! as upgradeplan meets it. Checked against syntasso/kratix
//! `internal/controller/dynamic_resource_request_controller.go` (binding from request, deletion),
//! `internal/controller/shared.go` (finalizer names), `lib/objectutil/name.go` (the binding's name)
//! and `internal/controller/promise_controller.go` (the request CRD from `spec.api`).
//!
//! - **The request kind** is the CRD in the Promise's `spec.api`; kratix-sim applies it, as
//!   Kratix's Promise controller does, and then handles requests of that kind.
//! - **A request makes its binding**: found by its labels (`kratix.io/promise-name`,
//!   `kratix.io/resource-name`), else created with Kratix's deterministic name
//!   (`<request>-<promise>`, cut to 56 characters, then `-` and the first five hex digits of the
//!   MD5 of `<request>-<promise>`), so a request deleted and created again gets a binding of the
//!   same name. The binding's whole label map is rewritten from the request's on every reconcile
//!   (less Kratix's one-shot labels; a manual-reconciliation label on the binding is kept). Its
//!   `spec.version`, set once: the request's `status.resourceBindingVersion`, else the request's
//!   `kratix-sim/binding-version` (the version that was latest when it was created, pinned), else
//!   (pinned) the latest revision's version, else `latest` (Kratix's default, floating).
//! - **Deleting a request** runs its delete workflows (the request's `kratix-sim/delay`, else
//!   `--delay`, from its deletionTimestamp) while the binding stays, unmarked; then the binding is
//!   deleted and the request's finalizers go.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use md5::{Digest, Md5};
use serde_json::{json, Value};
use upgradeplan::api::kratix::{
    PromiseRevision, ResourceBinding, LATEST_REVISION_LABEL, LATEST_VERSION, MANUAL_RECONCILIATION_LABEL,
    PROMISE_NAME_LABEL, RESOURCE_NAME_LABEL,
};

use super::{SimError, DELAY_ANNOTATION, FIELD_MANAGER};

/// Kratix's request finalizer that runs the delete workflows (`internal/controller/shared.go`).
pub const DELETE_WORKFLOWS_FINALIZER: &str = "kratix.io/delete-workflows";
/// Kratix's request finalizer that deletes the binding once the workflows are done.
pub const BINDING_CLEANUP_FINALIZER: &str = "kratix.io/resource-binding-cleanup";
/// The request's status field Kratix records its binding's version in, and reads back when it
/// creates the binding again.
pub const BINDING_VERSION_STATUS: &str = "resourceBindingVersion";
/// kratix-sim's knob on a request: the version its binding starts at, as if the request had been
/// created while that version was the Promise's latest under Kratix's `pinned` strategy (how
/// tests and the demo make a world whose resources were created before the latest release).
pub const BINDING_VERSION_ANNOTATION: &str = "kratix-sim/binding-version";
/// Labels Kratix never copies from a request to its binding (one-shot triggers).
const ONE_SHOT_LABELS: [&str; 2] = [MANUAL_RECONCILIATION_LABEL, "kratix.io/workflow-run-from-start"];

/// Kratix's `GenerateDeterministicObjectName(name)`: the name cut to fit, then a five-digit hash.
pub fn deterministic_name(name: &str) -> String {
    const MAX: usize = 63 - 1 - 5;
    let hash = format!("{:x}", Md5::digest(name.as_bytes()));
    let mut cut = if name.len() > MAX { &name[..MAX - 1] } else { name };
    while cut.as_bytes().last().is_some_and(|c| !c.is_ascii_alphanumeric()) {
        cut = &cut[..cut.len() - 1];
    }
    format!("{cut}-{}", &hash[..5])
}

/// The name Kratix gives the binding of request `request` of `promise`.
pub fn binding_name(request: &str, promise: &str) -> String {
    deterministic_name(&format!("{request}-{promise}"))
}

/// The value of `kratix.io/resource-name` for request `request` (a name too long for a label
/// value is replaced by a bounded derivation of it).
pub fn resource_name_label(request: &str) -> String {
    if request.len() <= 63 {
        request.to_string()
    } else {
        deterministic_name(request)
    }
}

/// The request kind a test Promise declares in `spec.api` (Kratix's marketplace convention):
/// group `<promise>.marketplace.kratix.io`, version `v1alpha1`, kind the Promise's name in
/// CamelCase, plural its letters and digits.
pub fn request_kind(promise: &str) -> ApiResource {
    let kind: String = promise
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    let group = format!("{promise}.marketplace.kratix.io");
    ApiResource {
        api_version: format!("{group}/v1alpha1"),
        group,
        version: "v1alpha1".into(),
        plural: kind.to_ascii_lowercase(),
        kind,
    }
}

/// The CRD to put in a test Promise's `spec.api`: [`request_kind`], namespaced, any spec, and a
/// status subresource (Kratix writes the request's status).
pub fn request_crd(promise: &str) -> Value {
    let k = request_kind(promise);
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{}", k.plural, k.group)},
        "spec": {
            "group": k.group, "scope": "Namespaced",
            "names": {"kind": k.kind, "plural": k.plural, "singular": k.plural, "listKind": format!("{}List", k.kind)},
            "versions": [{"name": k.version, "served": true, "storage": true,
                          "subresources": {"status": {}},
                          "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                              "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                              "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
        }
    })
}

/// The binding request `rr` of `promise` should have, given the one that exists (found by its
/// labels) and the version a new binding starts at: `None` when the existing one is already so.
pub fn desired_binding(
    rr: &DynamicObject,
    promise: &str,
    existing: Option<&ResourceBinding>,
    new_version: &str,
) -> Option<ResourceBinding> {
    let request = rr.name_any();
    let namespace = rr.namespace().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = rr.labels().clone();
    for l in ONE_SHOT_LABELS {
        labels.remove(l);
    }
    labels.insert(PROMISE_NAME_LABEL.into(), promise.into());
    labels.insert(RESOURCE_NAME_LABEL.into(), resource_name_label(&request));
    if existing.is_some_and(|b| b.labels().get(MANUAL_RECONCILIATION_LABEL).is_some_and(|v| v == "true")) {
        labels.insert(MANUAL_RECONCILIATION_LABEL.into(), "true".into());
    }
    let mut binding = match existing {
        Some(b) => b.clone(),
        None => ResourceBinding::new(&binding_name(&request, promise), Default::default()),
    };
    binding.metadata.namespace = Some(namespace.clone());
    binding.metadata.labels = Some(labels);
    if binding.spec.version.is_empty() {
        let recorded = rr
            .data
            .pointer(&format!("/status/{BINDING_VERSION_STATUS}"))
            .and_then(Value::as_str);
        let pinned_then = rr.annotations().get(BINDING_VERSION_ANNOTATION).map(String::as_str);
        binding.spec.version = recorded
            .or(pinned_then)
            .filter(|v| !v.is_empty())
            .unwrap_or(new_version)
            .to_string();
    }
    binding.spec.promise_ref.name = promise.into();
    binding.spec.resource_ref.name = request;
    binding.spec.resource_ref.namespace = namespace;
    let same = existing.is_some_and(|e| serde_json::to_value(e).ok() == serde_json::to_value(&binding).ok());
    (!same).then_some(binding)
}

/// What kratix-sim does next for a request being deleted (pure, so it is unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeletionStep {
    /// Its delete workflows run until then.
    WorkflowsUntil(DateTime<Utc>),
    /// The delete workflows are done: drop their finalizer.
    WorkflowsDone,
    /// Delete the binding, then drop the binding clean-up finalizer.
    DeleteBinding,
    /// None of Kratix's finalizers is left.
    Gone,
}

/// Kratix's `deleteResources` for request `rr`, whose delete workflows take `delay`.
pub fn decide_deletion(rr: &DynamicObject, delay: Duration, now: DateTime<Utc>) -> DeletionStep {
    let has = |f: &str| rr.finalizers().iter().any(|x| x == f);
    if has(DELETE_WORKFLOWS_FINALIZER) {
        let since = rr
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| upgradeplan::time::to_chrono(&t.0))
            .unwrap_or(now);
        let due = since + chrono::Duration::from_std(delay).unwrap_or_default();
        return if now < due {
            DeletionStep::WorkflowsUntil(due)
        } else {
            DeletionStep::WorkflowsDone
        };
    }
    if has(BINDING_CLEANUP_FINALIZER) {
        return DeletionStep::DeleteBinding;
    }
    DeletionStep::Gone
}

/// The Resource Requests (Promise, namespace, name) whose deletion is under way, shared with kratix-sim's
/// binding controller: Kratix runs no workflow of a request being deleted but its delete
/// workflows.
pub type Deleting = Arc<std::sync::Mutex<std::collections::HashSet<(String, String, String)>>>;

/// Whether `promise`'s request `namespace/name` is being deleted.
pub fn is_deleting(deleting: &Deleting, promise: &str, namespace: &str, name: &str) -> bool {
    let key = (promise.to_string(), namespace.to_string(), name.to_string());
    deleting.lock().is_ok_and(|set| set.contains(&key))
}

fn mark_deleting(deleting: &Deleting, (promise, namespace, name): (&str, &str, &str), under_way: bool) {
    if let Ok(mut set) = deleting.lock() {
        let key = (promise.to_string(), namespace.to_string(), name.to_string());
        if under_way {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }
}

struct RequestCtx {
    client: Client,
    promise: String,
    kind: ApiResource,
    delay: Duration,
    pinned: bool,
    deleting: Deleting,
}

fn pp() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    }
}

/// The binding of request `request` in `ns`, found by its labels as Kratix finds it.
async fn find_binding(ctx: &RequestCtx, ns: &str, request: &str) -> Result<Option<ResourceBinding>, SimError> {
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), ns);
    let lp = ListParams::default().labels(&format!(
        "{PROMISE_NAME_LABEL}={},{RESOURCE_NAME_LABEL}={}",
        ctx.promise,
        resource_name_label(request)
    ));
    Ok(api.list(&lp).await?.items.into_iter().next())
}

/// The version a new binding starts at: the latest revision's when pinned, else `latest`.
async fn new_binding_version(ctx: &RequestCtx) -> Result<String, SimError> {
    if !ctx.pinned {
        return Ok(LATEST_VERSION.to_string());
    }
    let api: Api<PromiseRevision> = Api::all(ctx.client.clone());
    let lp = ListParams::default().labels(&format!(
        "{PROMISE_NAME_LABEL}={},{LATEST_REVISION_LABEL}=true",
        ctx.promise
    ));
    let latest = api.list(&lp).await?.items.into_iter().next();
    Ok(latest.map_or_else(|| LATEST_VERSION.to_string(), |r| r.spec.version))
}

/// The request's finalizers replaced by `list`, conditional on the version read.
fn finalizers_patch(rr: &DynamicObject, list: Vec<String>) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"finalizers": list, "resourceVersion": rr.resource_version()}}))
}

async fn reconcile(rr: Arc<DynamicObject>, ctx: Arc<RequestCtx>) -> Result<Action, SimError> {
    let ns = rr.namespace().unwrap_or_default();
    let name = rr.name_any();
    let requests: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &ns, &ctx.kind);
    let request = format!("{ns}/{name}");
    if rr.metadata.deletion_timestamp.is_some() {
        mark_deleting(&ctx.deleting, (&ctx.promise, &ns, &name), true);
        // Tests wait for this line before they look at the binding of a request being deleted.
        tracing::info!(
            %request,
            resource_version = %rr.resource_version().unwrap_or_default(),
            "request deletion under way"
        );
        let delay = rr
            .annotations()
            .get(DELAY_ANNOTATION)
            .and_then(|d| d.parse::<kube::core::Duration>().ok())
            .map_or(ctx.delay, Duration::from);
        let without = |f: &str| rr.finalizers().iter().filter(|x| *x != f).cloned().collect::<Vec<_>>();
        return match decide_deletion(&rr, delay, Utc::now()) {
            DeletionStep::WorkflowsUntil(due) => Ok(Action::requeue((due - Utc::now()).to_std().unwrap_or_default())),
            DeletionStep::WorkflowsDone => {
                requests
                    .patch(
                        &name,
                        &pp(),
                        &finalizers_patch(&rr, without(DELETE_WORKFLOWS_FINALIZER)),
                    )
                    .await?;
                tracing::info!(%request, "request deleted: delete workflows done");
                Ok(Action::await_change())
            }
            DeletionStep::DeleteBinding => {
                if let Some(b) = find_binding(&ctx, &ns, &name).await? {
                    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
                    match api.delete(&b.name_any(), &Default::default()).await {
                        Ok(_) => {
                            tracing::info!(%request, binding = %b.name_any(), "request deleted: its binding deleted")
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                requests
                    .patch(&name, &pp(), &finalizers_patch(&rr, without(BINDING_CLEANUP_FINALIZER)))
                    .await?;
                // The binding is gone: a request created again under this name starts afresh.
                mark_deleting(&ctx.deleting, (&ctx.promise, &ns, &name), false);
                Ok(Action::await_change())
            }
            DeletionStep::Gone => {
                mark_deleting(&ctx.deleting, (&ctx.promise, &ns, &name), false);
                Ok(Action::await_change())
            }
        };
    }
    let missing: Vec<&str> = [DELETE_WORKFLOWS_FINALIZER, BINDING_CLEANUP_FINALIZER]
        .into_iter()
        .filter(|f| !rr.finalizers().iter().any(|x| x == f))
        .collect();
    if !missing.is_empty() {
        let mut list = rr.finalizers().to_vec();
        list.extend(missing.iter().map(|f| f.to_string()));
        requests.patch(&name, &pp(), &finalizers_patch(&rr, list)).await?;
        return Ok(Action::await_change());
    }
    let existing = find_binding(&ctx, &ns, &name).await?;
    // A binding's version is set once: the revisions are listed only for a binding to create.
    let version = match &existing {
        Some(b) => b.spec.version.clone(),
        None => new_binding_version(&ctx).await?,
    };
    let bindings: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
    let bound = match desired_binding(&rr, &ctx.promise, existing.as_ref(), &version) {
        None => existing,
        Some(b) if existing.is_none() => {
            let pp = PostParams {
                field_manager: Some(FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            let created = bindings.create(&pp, &b).await?;
            tracing::info!(%request, binding = %created.name_any(), version = %created.spec.version, "binding created for request");
            Some(created)
        }
        Some(b) => {
            // The whole label map replaced (labels the request no longer has removed), on the
            // version read.
            let mut labels: serde_json::Map<String, Value> = existing
                .iter()
                .flat_map(|e| e.labels().keys())
                .map(|k| (k.clone(), Value::Null))
                .collect();
            for (k, v) in b.labels() {
                labels.insert(k.clone(), json!(v));
            }
            let patch = json!({"metadata": {"labels": labels, "resourceVersion": b.resource_version()},
                               "spec": serde_json::to_value(&b.spec).unwrap_or(Value::Null)});
            let updated = bindings.patch(&b.name_any(), &pp(), &Patch::Merge(patch)).await?;
            tracing::info!(%request, binding = %updated.name_any(), "binding relabelled from request");
            Some(updated)
        }
    };
    let recorded = rr
        .data
        .pointer(&format!("/status/{BINDING_VERSION_STATUS}"))
        .and_then(Value::as_str);
    if let Some(b) = bound.filter(|b| recorded != Some(b.spec.version.as_str())) {
        let status = json!({"status": {BINDING_VERSION_STATUS: b.spec.version}});
        requests.patch_status(&name, &pp(), &Patch::Merge(status)).await?;
    }
    Ok(Action::await_change())
}

fn error_policy(rr: Arc<DynamicObject>, err: &SimError, _: Arc<RequestCtx>) -> Action {
    let request = format!("{}/{}", rr.namespace().unwrap_or_default(), rr.name_any());
    tracing::warn!(%request, error = %err, "request reconcile failed; retrying");
    Action::requeue(Duration::from_millis(500))
}

/// Applies the request CRD in `api` (the Promise's `spec.api`) and waits until it is served.
async fn install_kind(client: &Client, api: &Value) -> Result<ApiResource, SimError> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition =
        serde_json::from_value(api.clone()).map_err(|e| SimError::Invalid(format!("spec.api: {e}")))?;
    let name = crd.name_any();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    crds.patch(&name, &pp, &Patch::Apply(&crd)).await?;
    let established = kube::runtime::conditions::is_crd_established();
    kube::runtime::wait::await_condition(crds, &name, established)
        .await
        .map_err(|e| SimError::Invalid(format!("CRD {name}: {e}")))?;
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .unwrap_or_default();
    let group = crd.spec.group.clone();
    Ok(ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version,
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    })
}

/// Handles the Resource Requests of every Promise (of `only`, when given) that declares a request
/// kind in `spec.api`, until `shutdown` resolves: one controller per Promise, started when the
/// Promise appears.
pub async fn run(
    client: Client,
    (only, delay, pinned): (Option<String>, Duration, bool),
    deleting: Deleting,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + Clone + 'static,
) {
    let promises: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<upgradeplan::api::kratix::Promise>(&()),
    );
    let config = match &only {
        Some(p) => watcher::Config::default().fields(&format!("metadata.name={p}")),
        None => watcher::Config::default(),
    };
    let mut started: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
    let mut events = std::pin::pin!(watcher(promises, config)
        .default_backoff()
        .applied_objects()
        .take_until(shutdown.clone()));
    while let Some(event) = events.next().await {
        let Ok(promise) = event else { continue };
        let name = promise.name_any();
        let Some(api) = promise.data.pointer("/spec/api").filter(|a| !a.is_null()).cloned() else {
            continue;
        };
        if started.get(&name).is_some_and(|h| !h.is_finished()) {
            continue;
        }
        let kind = match install_kind(&client, &api).await {
            Ok(kind) => kind,
            Err(e) => {
                tracing::warn!(promise = %name, error = %e, "request kind not installed");
                continue;
            }
        };
        tracing::info!(promise = %name, kind = %kind.kind, "handling Resource Requests");
        let ctx = Arc::new(RequestCtx {
            client: client.clone(),
            promise: name.clone(),
            kind: kind.clone(),
            delay,
            pinned,
            deleting: deleting.clone(),
        });
        let requests: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        let stop = shutdown.clone();
        started.insert(
            name,
            tokio::spawn(async move {
                Controller::new_with(requests, watcher::Config::default(), kind)
                    .graceful_shutdown_on(stop)
                    .run(reconcile, error_policy, ctx)
                    .for_each(|_| futures::future::ready(()))
                    .await
            }),
        );
    }
    for (_, h) in started {
        let _ = h.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kratix's `GenerateDeterministicObjectName` (`lib/objectutil/name.go`): MD5's first five hex
    /// digits; a long name cut to 56 characters and stripped of trailing non-alphanumerics.
    #[test]
    fn binding_names_are_kratixs() {
        let md5 = |s: &str| format!("{:x}", Md5::digest(s.as_bytes()));
        assert_eq!(
            binding_name("cache", "redis"),
            format!("cache-redis-{}", &md5("cache-redis")[..5])
        );
        assert_eq!(
            binding_name("cache", "redis"),
            binding_name("cache", "redis"),
            "deterministic"
        );
        let long = format!("{}-x", "a".repeat(60));
        let name = binding_name(&long, "redis");
        assert_eq!(name.len(), 56 + 6, "{name}");
        assert!(name.starts_with(&"a".repeat(56)));
        let dashed = format!("{}--b", "a".repeat(55));
        let name = deterministic_name(&dashed);
        assert_eq!(
            &name[..name.len() - 6],
            "a".repeat(55),
            "trailing dashes of the cut go: {name}"
        );
        assert_eq!(resource_name_label("cache"), "cache");
        assert_eq!(resource_name_label(&"r".repeat(70)).len(), 56 + 6);
    }

    #[test]
    fn request_kinds_follow_the_marketplace_convention() {
        let k = request_kind("redis");
        assert_eq!(
            (k.group.as_str(), k.kind.as_str(), k.plural.as_str()),
            ("redis.marketplace.kratix.io", "Redis", "redis")
        );
        let k = request_kind("e2e-ab12");
        assert_eq!((k.kind.as_str(), k.plural.as_str()), ("E2eAb12", "e2eab12"));
        assert_eq!(
            request_crd("redis")["metadata"]["name"],
            "redis.redis.marketplace.kratix.io"
        );
    }

    fn request(labels: &[(&str, &str)], status_version: Option<&str>) -> DynamicObject {
        let mut rr = DynamicObject::new("cache", &request_kind("redis")).within("apps");
        rr.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        if let Some(v) = status_version {
            rr.data = json!({"status": {BINDING_VERSION_STATUS: v}});
        }
        rr
    }

    /// Kratix's `updateResourceBinding`: labels rewritten whole from the request (less one-shot
    /// labels; a manual-reconciliation label on the binding kept), the version set once.
    #[test]
    fn a_binding_follows_its_request() {
        let rr = request(&[("env", "prod"), (MANUAL_RECONCILIATION_LABEL, "true")], None);
        let new = desired_binding(&rr, "redis", None, "latest").unwrap();
        assert_eq!(new.name_any(), binding_name("cache", "redis"));
        assert_eq!(new.spec.version, "latest", "floating by default");
        let want: BTreeMap<String, String> = [
            ("env", "prod"),
            (PROMISE_NAME_LABEL, "redis"),
            (RESOURCE_NAME_LABEL, "cache"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(new.labels(), &want, "the one-shot label is not copied");
        assert_eq!(
            (
                new.spec.resource_ref.namespace.as_str(),
                new.spec.resource_ref.name.as_str()
            ),
            ("apps", "cache")
        );
        assert!(
            desired_binding(&rr, "redis", Some(&new), "v9").is_none(),
            "nothing to change"
        );

        let mut upgraded = new.clone();
        upgraded.spec.version = "v2".into();
        upgraded.labels_mut().insert("stray".into(), "x".into());
        upgraded
            .labels_mut()
            .insert(MANUAL_RECONCILIATION_LABEL.into(), "true".into());
        let relabelled = request(&[("env", "dev")], None);
        let b = desired_binding(&relabelled, "redis", Some(&upgraded), "v9").unwrap();
        assert_eq!(b.spec.version, "v2", "the version is never reset");
        assert_eq!(b.labels().get("env").map(String::as_str), Some("dev"));
        assert!(!b.labels().contains_key("stray"), "the whole map is rewritten");
        assert_eq!(
            b.labels().get(MANUAL_RECONCILIATION_LABEL).map(String::as_str),
            Some("true")
        );

        let mut created_earlier = request(&[], None);
        created_earlier
            .annotations_mut()
            .insert(BINDING_VERSION_ANNOTATION.into(), "v0".into());
        assert_eq!(
            desired_binding(&created_earlier, "redis", None, "v2")
                .unwrap()
                .spec
                .version,
            "v0"
        );
        let restored = request(&[], Some("v1"));
        assert_eq!(
            desired_binding(&restored, "redis", None, "v2").unwrap().spec.version,
            "v1",
            "the recorded version first"
        );
        assert_eq!(
            desired_binding(&request(&[], None), "redis", None, "v2")
                .unwrap()
                .spec
                .version,
            "v2",
            "pinned"
        );
    }

    #[test]
    fn deletion_runs_the_workflows_then_removes_the_binding() {
        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let mut rr = request(&[], None);
        rr.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            upgradeplan::time::to_jiff(at("2026-06-01T10:00:00Z")),
        ));
        rr.metadata.finalizers = Some(vec![
            DELETE_WORKFLOWS_FINALIZER.into(),
            BINDING_CLEANUP_FINALIZER.into(),
        ]);
        let delay = Duration::from_secs(30);
        assert_eq!(
            decide_deletion(&rr, delay, at("2026-06-01T10:00:10Z")),
            DeletionStep::WorkflowsUntil(at("2026-06-01T10:00:30Z"))
        );
        assert_eq!(
            decide_deletion(&rr, delay, at("2026-06-01T10:00:30Z")),
            DeletionStep::WorkflowsDone
        );
        rr.metadata.finalizers = Some(vec![BINDING_CLEANUP_FINALIZER.into()]);
        assert_eq!(
            decide_deletion(&rr, delay, at("2026-06-01T10:00:31Z")),
            DeletionStep::DeleteBinding
        );
        rr.metadata.finalizers = None;
        assert_eq!(
            decide_deletion(&rr, delay, at("2026-06-01T10:00:31Z")),
            DeletionStep::Gone
        );
    }
}
