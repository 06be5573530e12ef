//! kratix-sim: plays Kratix for ResourceBindings (spec §2, §12).
//!
//! Stateless and watch-driven: every decision is derived from the binding's live spec, labels,
//! annotations and status, so the simulator can restart at any time.
//!
//! On a binding whose `spec.version` (or the latest revision, for `latest`) differs from what
//! was applied: set `UpgradeSucceeded=Unknown/UpgradeInProgress`; after the delay set either
//! `lastAppliedVersion` and `True/UpgradeComplete`, or, when the annotation
//! `kratix-sim/fail-version` equals the target, `False/UpgradeFailed` with `failedVersion`.
//! A failed version is retried when the label `kratix.io/manual-reconciliation: "true"` is
//! present (it is removed when the retry starts) and, as Kratix does with
//! `workflows.reconcileAfterFailure` (on by default), by itself once the reconciliation interval
//! has passed since the failure (`retry_after_failure`; Kratix's default is 10 hours). A retry
//! clears `failedVersion` and sets `UpgradeSucceeded=Unknown`, as Kratix does. Without the target
//! PromiseRevision the binding stays in progress, as in Kratix.
//!
//! Health (spec §13.2): after a successful upgrade of a binding annotated `kratix-sim/health:
//! <state>`, and `kratix-sim/health-delay` (Go duration, default 0) after its success, a
//! HealthRecord named after the binding, in its namespace, says that state, with the check's
//! `lastRun` and, as Kratix's records, no version. `kratix-sim/health-records: N` writes N
//! records (`<binding>`, `<binding>-2`, …): the first says the annotated state, the others
//! `healthy`, as a resource with several health checks has. A changed annotation, or an upgrade
//! after the record, rewrites them; no annotation, none.
//!
//! Revisions (`revision_cleanup`, as Kratix's PromiseRevision controller): each revision carries
//! the finalizer `kratix.io/resource-request-cleanup` (unless annotated
//! `kratix.io/skip-resource-request-cleanup-on-delete: "true"`); deleting one deletes the
//! resources whose binding's `spec.version` is its version — their Resource Requests, or the
//! binding itself where its request is gone (or the Promise declares no request kind) — and then
//! lets the revision go. A floating binding (`spec.version: latest`) is not at any revision's
//! version.
//!
//! Resource Requests: [`requests`].

use std::sync::Arc;
use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;
use upgradeplan::api::kratix::{
    HealthRecord, PromiseRevision, ResourceBinding, LATEST_REVISION_LABEL, LATEST_VERSION, MANUAL_RECONCILIATION_LABEL,
    PROMISE_NAME_LABEL, UPGRADE_COMPLETE, UPGRADE_FAILED, UPGRADE_IN_PROGRESS, UPGRADE_SUCCEEDED,
};

/// Annotation: Go duration the simulated workflow takes for this binding.
pub const DELAY_ANNOTATION: &str = "kratix-sim/delay";
/// Annotation: the upgrade to this version fails.
pub const FAIL_VERSION_ANNOTATION: &str = "kratix-sim/fail-version";
/// Annotation: the health state the HealthRecord reports after a successful upgrade.
pub const HEALTH_ANNOTATION: &str = "kratix-sim/health";
/// Annotation: while present, an upgrade in progress does not finish (it has started; its delay
/// may have passed). Tests that assert a concurrency limit is *used* hold upgrades with it and
/// release them by removing it, so that no timing decides what they see.
pub const HOLD_ANNOTATION: &str = "kratix-sim/hold";
/// Annotation: how many HealthRecords the resource has (default 1); the first says the state of
/// [`HEALTH_ANNOTATION`], the others `healthy`.
pub const HEALTH_RECORDS_ANNOTATION: &str = "kratix-sim/health-records";
/// Annotation: Go duration between the upgrade's success and its HealthRecord.
pub const HEALTH_DELAY_ANNOTATION: &str = "kratix-sim/health-delay";
/// The states a HealthRecord may report (Kratix's enum).
pub const HEALTH_STATES: [&str; 5] = ["unknown", "ready", "unhealthy", "healthy", "degraded"];
/// Message of a simulated failure.
pub const FAILURE_MESSAGE: &str = "workflow failed: simulated";
pub(crate) const FIELD_MANAGER: &str = "kratix-sim";

pub mod requests;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Invalid(String),
}

/// How the simulator is configured.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Workflow duration when the binding has no `kratix-sim/delay` annotation.
    pub delay: Duration,
    /// Only bindings of this Promise (label `kratix.io/promise-name`); all when `None`.
    pub promise: Option<String>,
    /// Kratix's own retry of a failed workflow (`reconcileAfterFailure`): this long after the
    /// failure; never when `None` (`reconcileAfterFailure: false`).
    pub retry_after_failure: Option<Duration>,
    /// Deleting a PromiseRevision deletes the resources at its version, as Kratix does.
    pub revision_cleanup: bool,
    /// A new binding starts at the latest revision's version (Kratix's `pinned` strategy), not at
    /// `latest` (its default, `floating`).
    pub pinned: bool,
}

/// Kratix's finalizer on every PromiseRevision (`internal/controller/promise_controller.go`):
/// while it is there, a deleted revision's resources are deleted before the revision goes.
pub const RESOURCE_CLEANUP_FINALIZER: &str = "kratix.io/resource-request-cleanup";
/// A PromiseRevision annotated `"true"` is deleted without its resources (Kratix sets it when it
/// renames revisions).
pub const SKIP_CLEANUP_ANNOTATION: &str = "kratix.io/skip-resource-request-cleanup-on-delete";

/// What the simulator does next for one PromiseRevision (pure, so it is unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevisionStep {
    Idle,
    AddFinalizer,
    /// Delete these resources (namespace, binding, Resource Request): those still at the deleted
    /// revision's version — their requests, or their bindings where the request is gone.
    DeleteResources(Vec<(String, String, String)>),
    RemoveFinalizer,
}

/// Kratix's PromiseRevision reconcile, for revision `rev` and `bindings` (any, of any Promise).
pub fn decide_revision(rev: &PromiseRevision, bindings: &[Arc<ResourceBinding>]) -> RevisionStep {
    let skip = rev
        .annotations()
        .get(SKIP_CLEANUP_ANNOTATION)
        .is_some_and(|v| v == "true");
    let ours = rev.finalizers().iter().any(|f| f == RESOURCE_CLEANUP_FINALIZER);
    if rev.metadata.deletion_timestamp.is_none() {
        return if !skip && !ours {
            RevisionStep::AddFinalizer
        } else {
            RevisionStep::Idle
        };
    }
    if !ours {
        return RevisionStep::Idle;
    }
    let at_version: Vec<(String, String, String)> = bindings
        .iter()
        .filter(|b| !skip && promise_of(b) == rev.spec.promise_ref.name && b.spec.version == rev.spec.version)
        .map(|b| {
            (
                b.namespace().unwrap_or_default(),
                b.name_any(),
                b.spec.resource_ref.name.clone(),
            )
        })
        .collect();
    if at_version.is_empty() {
        RevisionStep::RemoveFinalizer
    } else {
        RevisionStep::DeleteResources(at_version)
    }
}

struct Ctx {
    client: Client,
    config: SimConfig,
    /// PromiseRevisions from a watch (no list per reconcile), and whether it has listed.
    revisions: kube::runtime::reflector::Store<PromiseRevision>,
    revisions_synced: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Resource Requests being deleted: their bindings' workflows do not run.
    deleting: requests::Deleting,
}

/// What the simulator does next for one binding (pure, so it is unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until the binding changes.
    Idle,
    /// Remove the retry label and start the upgrade again.
    Retry { target: String },
    /// Failed: Kratix re-runs the workflow by itself at this instant (`reconcileAfterFailure`).
    RetryAt { at: DateTime<Utc> },
    /// Failed, and the reconciliation interval has passed: start the upgrade again.
    RetryAfterFailure { target: String },
    /// The target's PromiseRevision is missing: stay in progress until it appears.
    WaitForRevision { target: String },
    /// Mark the upgrade to `target` in progress now.
    Start { target: String },
    /// In progress: finish at this instant.
    FinishAt { target: String, at: DateTime<Utc> },
    /// In progress and due, but held by [`HOLD_ANNOTATION`]: finish once it is removed.
    Held { target: String },
    /// Finish now: succeed or fail.
    Finish { target: String, fail: bool },
    /// A new resource (nothing applied, no upgrade condition): its first workflow ends then.
    DeployAt { at: DateTime<Utc> },
    /// A new resource's first workflow is done: Kratix records the version it applied, and no
    /// `UpgradeSucceeded` condition — only an upgrade writes one
    /// (`shouldRecordUpgradeSucceededCondition`, `internal/controller/dynamic_resource_request_controller.go`).
    Deployed { target: String },
}

/// Kratix's own messages (`syncResourceBindingUpgradeStatus` / `…InProgressStatus`); Kratix reads
/// the in-progress version back from this text (`InFlightVersion`), and so does the simulator.
fn in_progress_message(target: &str) -> String {
    format!("Upgrade to version {target} is in progress")
}

fn complete_message(applied: &str) -> String {
    format!("Resource is at version {applied}")
}

fn waiting_message(target: &str) -> String {
    format!("waiting for the PromiseRevision of version {target}")
}

/// Decides the next step. `target` is `spec.version` resolved (`latest` → the latest revision's
/// version; `None` when there is no latest revision yet); `revision_exists` tells whether the
/// target's PromiseRevision exists.
pub fn decide(
    b: &ResourceBinding,
    target: Option<&str>,
    revision_exists: bool,
    (delay, retry_after_failure): (Duration, Option<Duration>),
    now: DateTime<Utc>,
) -> Step {
    let Some(target) = target.filter(|t| !t.is_empty()) else {
        return Step::Idle;
    };
    let target = target.to_string();
    let cond = b.upgrade_condition();
    let retry = b.labels().get(MANUAL_RECONCILIATION_LABEL).is_some_and(|v| v == "true");
    let applied = b.last_applied_version() == target;
    // Kratix's binding controller acts only when the desired version differs from the Resource
    // Request's recorded one (which `lastAppliedVersion` mirrors) and was not the last failure's
    // (`internal/controller/resourcebinding_controller.go`): a failed workflow is left for its
    // retry after the interval, including when the binding was set back to the version applied
    // (a revert of a failed upgrade, unless it also asks with the label).
    let failed = cond.is_some_and(|c| c.status == "False") && (b.failed_version() == Some(target.as_str()) || applied);
    if retry {
        return Step::Retry { target };
    }
    if applied && cond.is_none_or(|c| c.status == "True") {
        return Step::Idle;
    }
    if failed {
        // Kratix re-runs a failed workflow once its reconciliation interval has passed since the
        // failure (`shouldForcePipelineRun` with `reconcileAfterFailure`).
        let due = retry_after_failure
            .zip(cond.and_then(|c| c.last_transition_time))
            .map(|(after, failed_at)| failed_at + chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX));
        return match due {
            Some(at) if at <= now => Step::RetryAfterFailure { target },
            Some(at) => Step::RetryAt { at },
            None => Step::Idle,
        };
    }
    if revision_exists && cond.is_none() && b.last_applied_version().is_empty() {
        let made = b
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(now, |t| upgradeplan::time::to_chrono(&t.0));
        let at = made + chrono::Duration::from_std(delay).unwrap_or_default();
        return if at <= now {
            Step::Deployed { target }
        } else {
            Step::DeployAt { at }
        };
    }
    if !revision_exists {
        let waiting = cond.is_some_and(|c| c.status == "Unknown" && c.message == waiting_message(&target));
        return if waiting {
            Step::Idle
        } else {
            Step::WaitForRevision { target }
        };
    }
    match cond {
        Some(c) if c.status == "Unknown" && c.message == in_progress_message(&target) => {
            let started = c.last_transition_time.unwrap_or(now);
            let at = started + chrono::Duration::from_std(delay).unwrap_or_default();
            if at <= now && b.annotations().contains_key(HOLD_ANNOTATION) {
                Step::Held { target }
            } else if at <= now {
                let fail = b
                    .annotations()
                    .get(FAIL_VERSION_ANNOTATION)
                    .is_some_and(|v| *v == target);
                Step::Finish { target, fail }
            } else {
                Step::FinishAt { target, at }
            }
        }
        _ => Step::Start { target },
    }
}

/// What the simulator does about a binding's HealthRecords (pure, so it is unit-tested).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthStep {
    Nothing,
    /// Write the records then.
    At(DateTime<Utc>),
    /// Write `count` records, the first saying `state`, the others `healthy`, now.
    Write {
        state: String,
        count: usize,
    },
}

/// Decides whether the binding's HealthRecords must be written: only after a successful upgrade
/// (`lastAppliedVersion` and `UpgradeSucceeded=True`), when annotated, once the delay has passed
/// since the success, and only if `first` (the record named after the binding) does not already
/// say the same from a check run since that success.
pub fn decide_health(b: &ResourceBinding, first: Option<&HealthRecord>, now: DateTime<Utc>) -> HealthStep {
    let Some(state) = b.annotations().get(HEALTH_ANNOTATION) else {
        return HealthStep::Nothing;
    };
    if !HEALTH_STATES.contains(&state.as_str()) {
        return HealthStep::Nothing;
    }
    let Some(succeeded) = b
        .upgrade_condition()
        .filter(|c| c.status == "True" && !b.last_applied_version().is_empty())
        .map(|c| c.last_transition_time.unwrap_or(now))
    else {
        return HealthStep::Nothing;
    };
    let since_success = |r: &HealthRecord| r.data.last_run.is_some_and(|t| t >= succeeded.timestamp());
    if first.is_some_and(|r| since_success(r) && r.data.state == *state) {
        return HealthStep::Nothing;
    }
    let delay = b
        .annotations()
        .get(HEALTH_DELAY_ANNOTATION)
        .and_then(|d| d.parse::<kube::core::Duration>().ok())
        .map(Duration::from)
        .unwrap_or_default();
    let at = succeeded + chrono::Duration::from_std(delay).unwrap_or_default();
    if at > now {
        return HealthStep::At(at);
    }
    let count = b
        .annotations()
        .get(HEALTH_RECORDS_ANNOTATION)
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    HealthStep::Write {
        state: state.clone(),
        count,
    }
}

/// The name of the `i`-th (from 0) HealthRecord of binding `name`.
pub fn health_record_name(name: &str, i: usize) -> String {
    match i {
        0 => name.to_string(),
        _ => format!("{name}-{}", i + 1),
    }
}

/// Writes (server-side apply) the HealthRecords of `b` when [`decide_health`] says so, as
/// Kratix's health pipelines write theirs: `data` with the Promise, the Resource Request, the
/// state and when the check ran.
async fn report_health(b: &ResourceBinding, ctx: &Ctx) -> Result<Action, SimError> {
    if !b.annotations().contains_key(HEALTH_ANNOTATION) {
        return Ok(Action::await_change());
    }
    let ns = b.namespace().unwrap_or_default();
    let name = b.name_any();
    let api: Api<HealthRecord> = Api::namespaced(ctx.client.clone(), &ns);
    let first = api.get_opt(&name).await?;
    let now = Utc::now();
    match decide_health(b, first.as_ref(), now) {
        HealthStep::Nothing => Ok(Action::await_change()),
        HealthStep::At(at) => Ok(Action::requeue((at - now).to_std().unwrap_or_default())),
        HealthStep::Write { state, count } => {
            // The first last: it is the one `decide_health` reads, so a crash between the writes
            // writes them all again.
            for i in (0..count).rev() {
                let record = health_record_name(&name, i);
                let said = if i == 0 { state.as_str() } else { "healthy" };
                let body = json!({
                    "apiVersion": "platform.kratix.io/v1alpha1", "kind": "HealthRecord",
                    "metadata": {"name": record, "namespace": ns},
                    "data": {
                        "promiseRef": {"name": promise_of(b)},
                        "resourceRef": {"name": b.spec.resource_ref.name, "namespace": ns},
                        "state": said, "lastRun": now.timestamp(),
                    },
                });
                api.patch(&record, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
                    .await?;
            }
            tracing::info!(binding = %format!("{ns}/{name}"), %state, count, "health reported");
            Ok(Action::await_change())
        }
    }
}

fn binding_delay(b: &ResourceBinding, default: Duration) -> Duration {
    b.annotations()
        .get(DELAY_ANNOTATION)
        .and_then(|d| d.parse::<kube::core::Duration>().ok())
        .map(Duration::from)
        .unwrap_or(default)
}

fn promise_of(b: &ResourceBinding) -> String {
    b.labels()
        .get(PROMISE_NAME_LABEL)
        .cloned()
        .unwrap_or_else(|| b.spec.promise_ref.name.clone())
}

fn condition(status: &str, reason: &str, message: &str, now: DateTime<Utc>) -> serde_json::Value {
    json!([{"type": UPGRADE_SUCCEEDED, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}])
}

async fn reconcile(b: Arc<ResourceBinding>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    let ns = b.namespace().unwrap_or_default();
    let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), &ns);
    if !ctx.revisions_synced.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(Action::requeue(Duration::from_millis(100)));
    }
    let promise = promise_of(&b);
    let of_promise: Vec<Arc<PromiseRevision>> = ctx
        .revisions
        .state()
        .into_iter()
        .filter(|r| {
            r.labels()
                .get(PROMISE_NAME_LABEL)
                .map(String::as_str)
                .unwrap_or(&r.spec.promise_ref.name)
                == promise
        })
        .collect();
    let target = if b.spec.version == LATEST_VERSION {
        of_promise
            .iter()
            .find(|r| {
                r.labels().get(LATEST_REVISION_LABEL).is_some_and(|v| v == "true")
                    || r.status.as_ref().is_some_and(|s| s.latest)
            })
            .map(|r| r.spec.version.clone())
    } else {
        Some(b.spec.version.clone())
    };
    let revision_exists = target
        .as_ref()
        .is_some_and(|t| of_promise.iter().any(|r| &r.spec.version == t));
    let delay = binding_delay(&b, ctx.config.delay);
    let now = Utc::now();
    let name = b.name_any();
    // Kratix reconciles a request being deleted only to delete it (`deleteResources`): no
    // upgrade of its binding starts or finishes meanwhile; the binding goes with the request.
    let of_request = (&b.spec.resource_ref.namespace, &b.spec.resource_ref.name);
    let result = if requests::is_deleting(&ctx.deleting, &promise, of_request.0, of_request.1) {
        tracing::info!(binding = %format!("{ns}/{name}"), "its request is being deleted: no workflow runs");
        Ok(Action::requeue(Duration::from_secs(1)))
    } else {
        act(&b, &ctx, &api, target.as_deref(), revision_exists, delay, now).await
    };
    // What this reconcile wrote is written: tests wait for this line (with the version they
    // changed the binding to) before they check that nothing else happened.
    tracing::debug!(
        binding = %format!("{ns}/{name}"),
        resource_version = %b.resource_version().unwrap_or_default(),
        ok = result.is_ok(),
        "reconciled"
    );
    result
}

/// What Kratix writes to a binding for one [`Step`]: the retry label removed, and a merge patch
/// of its status. Pure: the simulator sends it, the deterministic simulation applies it.
#[derive(Debug, Clone, PartialEq)]
pub struct KratixWrites {
    pub remove_retry_label: bool,
    pub status: Option<serde_json::Value>,
}

pub fn writes(step: &Step, now: DateTime<Utc>) -> KratixWrites {
    // A new attempt clears the failed version, as Kratix does.
    let attempt = |target: &str| {
        json!({"failedVersion": null,
               "conditions": condition("Unknown", UPGRADE_IN_PROGRESS, &in_progress_message(target), now)})
    };
    let (remove_retry_label, status) = match step {
        Step::Idle | Step::RetryAt { .. } | Step::FinishAt { .. } | Step::Held { .. } | Step::DeployAt { .. } => {
            (false, None)
        }
        Step::Deployed { target } => (false, Some(json!({"lastAppliedVersion": target}))),
        Step::Retry { target } => (true, Some(attempt(target))),
        Step::RetryAfterFailure { target } => (false, Some(attempt(target))),
        Step::WaitForRevision { target } => (
            false,
            Some(json!({"conditions": condition("Unknown", UPGRADE_IN_PROGRESS, &waiting_message(target), now)})),
        ),
        Step::Start { target } => (
            false,
            Some(json!({"conditions": condition("Unknown", UPGRADE_IN_PROGRESS, &in_progress_message(target), now)})),
        ),
        Step::Finish { target, fail: true } => (
            false,
            Some(
                json!({"failedVersion": target, "conditions": condition("False", UPGRADE_FAILED, FAILURE_MESSAGE, now)}),
            ),
        ),
        Step::Finish { target, fail: false } => (
            false,
            Some(json!({"lastAppliedVersion": target, "failedVersion": null,
                        "conditions": condition("True", UPGRADE_COMPLETE, &complete_message(target), now)})),
        ),
    };
    KratixWrites {
        remove_retry_label,
        status,
    }
}

/// Carries out [`decide`]'s step for one binding.
async fn act(
    b: &ResourceBinding,
    ctx: &Ctx,
    api: &Api<ResourceBinding>,
    target: Option<&str>,
    revision_exists: bool,
    delay: Duration,
    now: DateTime<Utc>,
) -> Result<Action, SimError> {
    let ns = b.namespace().unwrap_or_default();
    let name = b.name_any();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    let step = decide(b, target, revision_exists, (delay, ctx.config.retry_after_failure), now);
    let w = writes(&step, now);
    // Each write is conditional on the binding as this reconcile read it, as Kratix's updates
    // are (controller-runtime's Update sends the resourceVersion): a copy older than the
    // simulator's own last write (a requeue that outran the watch) decides nothing. Without it,
    // every such requeue started the upgrade again, each write woke another stale reconcile,
    // and 10,000 bindings made 430,000 status writes before the bench's first phase ended.
    let mut version = b.resource_version();
    if w.remove_retry_label {
        let patch = json!({"metadata": {"labels": {MANUAL_RECONCILIATION_LABEL: null}, "resourceVersion": version}});
        match api.patch(&name, &pp, &Patch::Merge(patch)).await {
            Ok(patched) => version = patched.resource_version(),
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(STALE_COPY_WAIT)),
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(status) = w.status {
        let patch = json!({"metadata": {"resourceVersion": version}, "status": status});
        match api.patch_status(&name, &pp, &Patch::Merge(patch)).await {
            Ok(_) => {}
            Err(e) if is_conflict(&e) => return Ok(Action::requeue(STALE_COPY_WAIT)),
            Err(e) => return Err(e.into()),
        }
    }
    let binding = format!("{ns}/{name}");
    match step {
        Step::Idle => report_health(b, ctx).await,
        Step::Retry { target } => {
            tracing::info!(%binding, %target, "retry requested: upgrade restarted");
            Ok(Action::requeue(delay))
        }
        Step::Deployed { target } => {
            tracing::info!(%binding, %target, "new resource deployed");
            Ok(Action::await_change())
        }
        Step::RetryAt { at } | Step::FinishAt { at, .. } | Step::DeployAt { at } => {
            Ok(Action::requeue((at - now).to_std().unwrap_or_default()))
        }
        Step::RetryAfterFailure { target } => {
            tracing::info!(%binding, %target, "reconciliation interval passed: failed upgrade restarted");
            Ok(Action::requeue(delay))
        }
        Step::WaitForRevision { target } => {
            tracing::info!(%binding, %target, "waiting for PromiseRevision");
            Ok(Action::await_change())
        }
        Step::Start { target } => {
            tracing::info!(%binding, %target, ?delay, "upgrade started");
            Ok(Action::requeue(delay))
        }
        // Removing the annotation is a change of the binding: the watch wakes this reconcile.
        Step::Held { .. } => Ok(Action::await_change()),
        Step::Finish { target, fail: true } => {
            tracing::info!(%binding, %target, "upgrade failed (simulated)");
            Ok(Action::await_change())
        }
        Step::Finish { target, fail: false } => {
            tracing::info!(%binding, %target, "upgrade complete");
            Ok(Action::await_change())
        }
    }
}

/// Carries out [`decide_revision`]'s step for one PromiseRevision.
async fn reconcile_revision(rev: Arc<PromiseRevision>, ctx: Arc<Ctx>) -> Result<Action, SimError> {
    if !ctx.config.revision_cleanup {
        return Ok(Action::await_change());
    }
    let name = rev.name_any();
    let revisions: Api<PromiseRevision> = Api::all(ctx.client.clone());
    // Listed, not cached, as Kratix lists them (its Promise's label, and the field selector its
    // CRD serves for spec.version): a cache still filling would let a revision go with its
    // resources.
    let bindings: Api<ResourceBinding> = Api::all(ctx.client.clone());
    let lp = kube::api::ListParams::default()
        .labels(&format!("{PROMISE_NAME_LABEL}={}", rev.spec.promise_ref.name))
        .fields(&format!("spec.version={}", rev.spec.version));
    let at_version: Vec<Arc<ResourceBinding>> = bindings.list(&lp).await?.items.into_iter().map(Arc::new).collect();
    let pp = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..Default::default()
    };
    // The finalizer list is replaced whole, so the write is conditional on the version read.
    let finalizers = |list: Vec<String>| {
        Patch::Merge(json!({"metadata": {"finalizers": list, "resourceVersion": rev.resource_version()}}))
    };
    match decide_revision(&rev, &at_version) {
        RevisionStep::Idle => Ok(Action::await_change()),
        RevisionStep::AddFinalizer => {
            let mut list = rev.finalizers().to_vec();
            list.push(RESOURCE_CLEANUP_FINALIZER.to_string());
            revisions.patch(&name, &pp, &finalizers(list)).await?;
            Ok(Action::await_change())
        }
        RevisionStep::DeleteResources(resources) => {
            // Kratix deletes each Resource Request (its kind from the Promise's spec.api, else
            // the revision's copy of it), and the binding itself where the request is gone.
            let promises: Api<kube::api::DynamicObject> = Api::all_with(
                ctx.client.clone(),
                &kube::api::ApiResource::erase::<upgradeplan::api::kratix::Promise>(&()),
            );
            let promise = rev.spec.promise_ref.name.as_str();
            let kind = match promises.get_opt(promise).await? {
                Some(p) if p.data.pointer("/spec/api").is_some_and(|a| !a.is_null()) => {
                    Some(requests::request_kind(promise))
                }
                _ => None,
            };
            for (ns, binding, request) in &resources {
                let what = format!("{ns}/{binding}");
                if let Some(kind) = &kind {
                    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, kind);
                    match api.delete(request, &Default::default()).await {
                        Ok(_) => {
                            tracing::info!(revision = %name, request = %format!("{ns}/{request}"), "revision deleted: its resource's request deleted");
                            continue;
                        }
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                let api: Api<ResourceBinding> = Api::namespaced(ctx.client.clone(), ns);
                match api.delete(binding, &Default::default()).await {
                    Ok(_) => {
                        tracing::info!(revision = %name, binding = %what, "revision deleted: its resource deleted")
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Kratix's fast requeue: look again until none is left.
            Ok(Action::requeue(Duration::from_millis(500)))
        }
        RevisionStep::RemoveFinalizer => {
            let list = rev
                .finalizers()
                .iter()
                .filter(|f| *f != RESOURCE_CLEANUP_FINALIZER)
                .cloned()
                .collect();
            revisions.patch(&name, &pp, &finalizers(list)).await?;
            tracing::info!(revision = %name, "revision deleted: its resources are gone, the revision goes");
            Ok(Action::await_change())
        }
    }
}

fn revision_error_policy(rev: Arc<PromiseRevision>, err: &SimError, _: Arc<Ctx>) -> Action {
    tracing::warn!(revision = %rev.name_any(), error = %err, "revision reconcile failed; retrying");
    Action::requeue(Duration::from_millis(500))
}

/// How long a reconcile that read a stale copy waits before it reads again (the watch brings
/// the newer one first, usually).
const STALE_COPY_WAIT: Duration = Duration::from_secs(1);

/// The API server refused a write conditional on a resourceVersion that is no longer current.
fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == 409)
}

fn error_policy(b: Arc<ResourceBinding>, err: &SimError, _: Arc<Ctx>) -> Action {
    tracing::warn!(binding = %format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any()), error = %err, "reconcile failed; retrying");
    Action::requeue(Duration::from_millis(500))
}

/// 0.5 s doubling to 5 s, with jitter, for ever; reset by any event.
fn reconnect_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .into()
}

/// Runs the simulator until `shutdown` resolves.
pub async fn run(
    client: Client,
    config: SimConfig,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let selector = config.promise.as_ref().map(|p| format!("{PROMISE_NAME_LABEL}={p}"));
    let mut wc = watcher::Config::default();
    if let Some(s) = &selector {
        wc = wc.labels(s);
    }
    let bindings: Api<ResourceBinding> = Api::all(client.clone());
    let revisions: Api<PromiseRevision> = Api::all(client.clone());
    // Kratix's client-go reflectors relist at once after "410 Expired"; kube-runtime backs off
    // first (up to 30 s by default). A short backoff keeps the simulator as prompt after an
    // API-server restart.
    let (store, writer) = kube::runtime::reflector::store::<ResourceBinding>();
    let binding_stream =
        kube::runtime::reflector::reflector(writer, watcher(bindings, wc.clone()).backoff(reconnect_backoff()))
            .applied_objects();
    let controller = Controller::for_stream(binding_stream, store.clone());
    // A new or changed revision wakes the bindings of its Promise (they may be waiting for it).
    let rev_config = match &selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let (rev_store, rev_writer) = kube::runtime::reflector::store::<PromiseRevision>();
    let synced = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = synced.clone();
    let rev_stream = kube::runtime::reflector::reflector(
        rev_writer,
        watcher(revisions.clone(), rev_config.clone()).backoff(reconnect_backoff()),
    )
    .inspect(move |ev| {
        if matches!(ev, Ok(watcher::Event::InitDone)) {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    })
    .touched_objects();
    let shutdown = futures::FutureExt::shared(shutdown);
    let shutdown_requests = shutdown.clone();
    let (promise, delay, pinned) = (config.promise.clone(), config.delay, config.pinned);
    let deleting = requests::Deleting::default();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        config,
        revisions: rev_store,
        revisions_synced: synced,
        deleting: deleting.clone(),
    });
    let revision_controller = Controller::new(revisions, rev_config.clone())
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_revision, revision_error_policy, ctx.clone())
        .for_each(|_| futures::future::ready(()));
    let binding_controller = controller
        .watches_stream(rev_stream, move |rev: PromiseRevision| {
            let promise = rev
                .labels()
                .get(PROMISE_NAME_LABEL)
                .cloned()
                .unwrap_or(rev.spec.promise_ref.name.clone());
            store
                .state()
                .into_iter()
                .filter(|b| promise_of(b) == promise)
                .map(|b| ObjectRef::from_obj(&*b))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()));
    let requests = requests::run(client, (promise, delay, pinned), deleting, shutdown_requests);
    tokio::join!(binding_controller, revision_controller, requests);
}

#[cfg(test)]
mod tests {
    use super::*;
    use upgradeplan::api::kratix::{BindingCondition, ResourceBindingSpec, ResourceBindingStatus};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn b(applied: &str, cond: Option<(&str, &str, &str)>, failed: Option<&str>) -> ResourceBinding {
        let mut b = ResourceBinding::new(
            "b",
            ResourceBindingSpec {
                version: "v2".into(),
                ..Default::default()
            },
        );
        b.status = Some(ResourceBindingStatus {
            last_applied_version: applied.into(),
            failed_version: failed.map(Into::into),
            conditions: cond
                .map(|(status, message, at)| BindingCondition {
                    type_: UPGRADE_SUCCEEDED.into(),
                    status: status.into(),
                    reason: String::new(),
                    message: message.into(),
                    last_transition_time: Some(utc(at)),
                })
                .into_iter()
                .collect(),
            health_status: None,
        });
        b
    }

    #[test]
    fn step_table() {
        let now = utc("2026-06-01T10:00:10Z");
        let d = Duration::from_secs(5);
        let t = |s: &str| s.to_string();
        let cases: Vec<(&str, ResourceBinding, bool, Step)> = vec![
            (
                "applied",
                b("v2", Some(("True", "", "2026-06-01T10:00:00Z")), None),
                true,
                Step::Idle,
            ),
            (
                "new version",
                b("v1", Some(("True", "", "2026-06-01T10:00:00Z")), None),
                true,
                Step::Start { target: t("v2") },
            ),
            (
                "no revision",
                b("v1", None, None),
                false,
                Step::WaitForRevision { target: t("v2") },
            ),
            (
                "still waiting",
                b(
                    "v1",
                    Some(("Unknown", &waiting_message("v2"), "2026-06-01T10:00:00Z")),
                    None,
                ),
                false,
                Step::Idle,
            ),
            (
                "revision appeared",
                b(
                    "v1",
                    Some(("Unknown", &waiting_message("v2"), "2026-06-01T10:00:00Z")),
                    None,
                ),
                true,
                Step::Start { target: t("v2") },
            ),
            (
                "in progress, not yet",
                b(
                    "v1",
                    Some(("Unknown", &in_progress_message("v2"), "2026-06-01T10:00:08Z")),
                    None,
                ),
                true,
                Step::FinishAt {
                    target: t("v2"),
                    at: utc("2026-06-01T10:00:13Z"),
                },
            ),
            (
                "in progress, due",
                b(
                    "v1",
                    Some(("Unknown", &in_progress_message("v2"), "2026-06-01T10:00:00Z")),
                    None,
                ),
                true,
                Step::Finish {
                    target: t("v2"),
                    fail: false,
                },
            ),
            (
                "failed is not retried",
                b(
                    "v1",
                    Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
                    Some("v2"),
                ),
                true,
                Step::Idle,
            ),
            (
                "set back to the version applied after a failure: Kratix leaves it (its Resource Request says that version)",
                b(
                    "v2",
                    Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
                    Some("v3"),
                ),
                true,
                Step::Idle,
            ),
            (
                "a failure of another version, then a new one: started at once",
                b(
                    "v1",
                    Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
                    Some("v3"),
                ),
                true,
                Step::Start { target: t("v2") },
            ),
        ];
        let held = |cond: (&str, &str, &str)| {
            let mut b = b("v1", Some(cond), None);
            b.annotations_mut().insert(HOLD_ANNOTATION.into(), "true".into());
            b
        };
        let in_progress = in_progress_message("v2");
        let cases = cases.into_iter().chain([
            (
                "held: still starts",
                held(("True", "", "2026-06-01T10:00:00Z")),
                true,
                Step::Start { target: t("v2") },
            ),
            (
                "held, not yet due",
                held(("Unknown", &in_progress, "2026-06-01T10:00:08Z")),
                true,
                Step::FinishAt {
                    target: t("v2"),
                    at: utc("2026-06-01T10:00:13Z"),
                },
            ),
            (
                "held, due: stays in progress",
                held(("Unknown", &in_progress, "2026-06-01T10:00:00Z")),
                true,
                Step::Held { target: t("v2") },
            ),
        ]);
        for (name, binding, rev, want) in cases {
            assert_eq!(decide(&binding, Some("v2"), rev, (d, None), now), want, "{name}");
        }
        let mut retry = b(
            "v1",
            Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
            Some("v2"),
        );
        retry.metadata.labels = Some([(MANUAL_RECONCILIATION_LABEL.to_string(), "true".to_string())].into());
        assert_eq!(
            decide(&retry, Some("v2"), true, (d, None), now),
            Step::Retry { target: t("v2") }
        );
        let mut failing = b(
            "v1",
            Some(("Unknown", &in_progress_message("v2"), "2026-06-01T10:00:00Z")),
            None,
        );
        failing.metadata.annotations = Some([(FAIL_VERSION_ANNOTATION.to_string(), "v2".to_string())].into());
        assert_eq!(
            decide(&failing, Some("v2"), true, (d, None), now),
            Step::Finish {
                target: t("v2"),
                fail: true
            }
        );
        assert_eq!(
            decide(&failing, None, true, (d, None), now),
            Step::Idle,
            "latest without a latest revision"
        );
        // A new resource: nothing applied, no condition: deployed after its workflow, recording
        // only lastAppliedVersion; timed from its creation.
        let mut new = b("", None, None);
        new.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            upgradeplan::time::to_jiff(utc("2026-06-01T10:00:08Z")),
        ));
        assert_eq!(
            decide(&new, Some("v2"), true, (d, None), now),
            Step::DeployAt {
                at: utc("2026-06-01T10:00:13Z")
            }
        );
        assert_eq!(
            decide(&new, Some("v2"), true, (d, None), utc("2026-06-01T10:00:13Z")),
            Step::Deployed { target: t("v2") }
        );
        assert_eq!(
            writes(&Step::Deployed { target: t("v2") }, now).status,
            Some(json!({"lastAppliedVersion": "v2"})),
            "no UpgradeSucceeded condition"
        );
    }

    /// Kratix's `reconcileAfterFailure`: a failed workflow runs again once the reconciliation
    /// interval has passed since the failure; turned off, never.
    #[test]
    fn failed_upgrades_are_retried_after_the_reconciliation_interval() {
        let failed = b(
            "v1",
            Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
            Some("v2"),
        );
        let d = Duration::from_secs(5);
        let hour = Some(Duration::from_secs(3600));
        let cases = [
            ("off", None, "2026-06-02T10:00:00Z", Step::Idle),
            (
                "before the interval",
                hour,
                "2026-06-01T10:59:59Z",
                Step::RetryAt {
                    at: utc("2026-06-01T11:00:00Z"),
                },
            ),
            (
                "at the interval",
                hour,
                "2026-06-01T11:00:00Z",
                Step::RetryAfterFailure { target: "v2".into() },
            ),
        ];
        for (case, after, now, want) in cases {
            assert_eq!(decide(&failed, Some("v2"), true, (d, after), utc(now)), want, "{case}");
        }
    }

    /// Kratix's PromiseRevision controller: the finalizer on every revision, and a deleted
    /// revision's resources deleted before it goes.
    #[test]
    fn revision_table() {
        let rev = |deleted: bool, finalizer: bool, skip: bool| -> PromiseRevision {
            serde_json::from_value(json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
                "metadata": {
                    "name": "redis-v1",
                    "finalizers": if finalizer { vec![RESOURCE_CLEANUP_FINALIZER] } else { vec![] },
                    "annotations": if skip { json!({SKIP_CLEANUP_ANNOTATION: "true"}) } else { json!({}) },
                    "deletionTimestamp": deleted.then_some("2026-06-01T10:00:00Z"),
                },
                "spec": {"promiseRef": {"name": "redis"}, "version": "v1", "promiseSpec": {}}
            }))
            .unwrap()
        };
        let binding = |name: &str, promise: &str, version: &str| -> Arc<ResourceBinding> {
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
                    "metadata": {"name": name, "namespace": "apps", "labels": {PROMISE_NAME_LABEL: promise}},
                    "spec": {"version": version, "promiseRef": {"name": promise}}
                }))
                .unwrap(),
            )
        };
        let world = [
            binding("at-v1", "redis", "v1"),
            binding("at-v2", "redis", "v2"),
            binding("floating", "redis", LATEST_VERSION),
            binding("other-promise", "postgres", "v1"),
        ];
        let none: [Arc<ResourceBinding>; 0] = [];
        let cases: [(&str, PromiseRevision, &[Arc<ResourceBinding>], RevisionStep); 7] = [
            (
                "a new revision gets the finalizer",
                rev(false, false, false),
                &world,
                RevisionStep::AddFinalizer,
            ),
            (
                "a revision that has it: nothing",
                rev(false, true, false),
                &world,
                RevisionStep::Idle,
            ),
            (
                "skipped: no finalizer",
                rev(false, false, true),
                &world,
                RevisionStep::Idle,
            ),
            (
                "deleted: only its Promise's resources at its version (not latest)",
                rev(true, true, false),
                &world,
                RevisionStep::DeleteResources(vec![("apps".into(), "at-v1".into(), String::new())]),
            ),
            (
                "deleted, none left: it goes",
                rev(true, true, false),
                &none,
                RevisionStep::RemoveFinalizer,
            ),
            (
                "deleted with the skip annotation: it goes, its resources stay",
                rev(true, true, true),
                &world,
                RevisionStep::RemoveFinalizer,
            ),
            (
                "deleted without the finalizer: not ours",
                rev(true, false, false),
                &world,
                RevisionStep::Idle,
            ),
        ];
        for (case, rev, bindings, want) in cases {
            assert_eq!(decide_revision(&rev, bindings), want, "{case}");
        }
    }

    #[test]
    fn health_table() {
        let now = utc("2026-06-01T10:00:10Z");
        let annotated = |state: &str, delay: Option<&str>, binding: ResourceBinding| {
            let mut b = binding;
            let mut a = std::collections::BTreeMap::from([(HEALTH_ANNOTATION.to_string(), state.to_string())]);
            if let Some(d) = delay {
                a.insert(HEALTH_DELAY_ANNOTATION.to_string(), d.to_string());
            }
            b.metadata.annotations = Some(a);
            b
        };
        let done = || b("v2", Some(("True", "", "2026-06-01T10:00:00Z")), None);
        // A record from a check run at `ran`.
        let record = |state: &str, ran: &str| HealthRecord {
            data: upgradeplan::api::kratix::HealthRecordData {
                state: state.into(),
                last_run: Some(utc(ran).timestamp()),
                ..Default::default()
            },
            ..Default::default()
        };
        let write = |state: &str| HealthStep::Write {
            state: state.into(),
            count: 1,
        };
        let mut three = annotated("unhealthy", None, done());
        three
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(HEALTH_RECORDS_ANNOTATION.into(), "3".into());
        let cases: Vec<(&str, ResourceBinding, Option<HealthRecord>, HealthStep)> = vec![
            ("no annotation: no record", done(), None, HealthStep::Nothing),
            (
                "after success: written",
                annotated("healthy", None, done()),
                None,
                write("healthy"),
            ),
            (
                "delay not yet passed",
                annotated("unhealthy", Some("30s"), done()),
                None,
                HealthStep::At(utc("2026-06-01T10:00:30Z")),
            ),
            (
                "delay passed",
                annotated("degraded", Some("5s"), done()),
                None,
                write("degraded"),
            ),
            (
                "still in progress: nothing yet",
                annotated(
                    "healthy",
                    None,
                    b(
                        "v1",
                        Some(("Unknown", &in_progress_message("v2"), "2026-06-01T10:00:00Z")),
                        None,
                    ),
                ),
                None,
                HealthStep::Nothing,
            ),
            (
                "failed upgrade: no record",
                annotated(
                    "healthy",
                    None,
                    b(
                        "v1",
                        Some(("False", FAILURE_MESSAGE, "2026-06-01T10:00:00Z")),
                        Some("v2"),
                    ),
                ),
                None,
                HealthStep::Nothing,
            ),
            (
                "already said since the upgrade",
                annotated("healthy", None, done()),
                Some(record("healthy", "2026-06-01T10:00:05Z")),
                HealthStep::Nothing,
            ),
            (
                "a record from before the upgrade is rewritten",
                annotated("healthy", None, done()),
                Some(record("healthy", "2026-06-01T09:00:00Z")),
                write("healthy"),
            ),
            (
                "the annotation changed: rewritten",
                annotated("ready", None, done()),
                Some(record("unknown", "2026-06-01T10:00:05Z")),
                write("ready"),
            ),
            (
                "three records",
                three,
                None,
                HealthStep::Write {
                    state: "unhealthy".into(),
                    count: 3,
                },
            ),
            (
                "not a state Kratix knows",
                annotated("fine", None, done()),
                None,
                HealthStep::Nothing,
            ),
        ];
        for (case, binding, record, want) in cases {
            assert_eq!(decide_health(&binding, record.as_ref(), now), want, "{case}");
        }
    }
}
