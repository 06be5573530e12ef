//! What both reconcilers share: the client, caches, the event recorder, and status writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use upgradeplan::api::kratix::{CachedBinding, HealthRecord, RevisionFact};
use upgradeplan::api::{RunState, UpgradeFreeze, UpgradePlan, UpgradeRun, FIELD_MANAGER};
use upgradeplan::engine::lifecycle::{Announced, Counts};
use upgradeplan::engine::snapshot::SnapshotResource;
use upgradeplan::engine::stage::ApprovalFact;

use crate::error::Result;
use crate::events::{EventType, Publisher, CLUSTER_SCOPED_EVENTS_NAMESPACE};
pub use upgradeplan::engine::snapshot::Frozen;

/// How long a reconcile waits before retrying while the caches are still filling.
pub const CACHE_WAIT: std::time::Duration = upgradeplan::send::CACHE_WAIT;

/// The key an object's reconciles are known by in [`Ctx::retries`] and the `reconciled key=…`
/// log line tests and operators wait for: `run/NAME`, `plan/NAME`, `freeze/NAME`, `budget/NAME`
/// (the kind without its `Upgrade` prefix; one key shape for every reconciler).
pub fn retry_key<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let kind = K::kind(&());
    let short = kind.strip_prefix("Upgrade").unwrap_or(&kind).to_lowercase();
    format!("{short}/{}", object.name_any())
}

/// What every reconciler does on an error: retry the object with its own exponential backoff,
/// and log its kind, name and the error's kind (the `UpgradeControllerReconcileErrors` runbook names
/// `reconcile failed; retrying`).
pub fn error_policy<K: Resource<DynamicType = ()>>(
    object: Arc<K>,
    err: &crate::error::Error,
    ctx: Arc<Ctx>,
) -> kube::runtime::controller::Action {
    let delay = ctx.retries.next_delay(&retry_key(&*object));
    let kind = K::kind(&());
    tracing::warn!(%kind, name = %object.name_any(), error = %err, error_kind = err.metric_label(), retry_in = ?delay, "reconcile failed; retrying");
    kube::runtime::controller::Action::requeue(delay)
}

/// Per-object delays before retrying a failed reconcile: doubling from [`RETRY_MIN`] up to
/// [`RETRY_MAX`], forgotten on the next success (client-go's per-item exponential limiter, with a
/// floor suited to API round trips). A broken API server sees fewer requests the longer it is
/// broken; one bad object does not slow the others.
#[derive(Default)]
pub struct RetryBackoff {
    failures: Mutex<HashMap<String, u32>>,
}

pub const RETRY_MIN: std::time::Duration = std::time::Duration::from_millis(500);
pub const RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

impl RetryBackoff {
    /// Records a failure of `key` and returns how long to wait before retrying it.
    pub fn next_delay(&self, key: &str) -> std::time::Duration {
        let failures = self
            .failures
            .lock()
            .map(|mut f| {
                let n = f.entry(key.to_string()).or_insert(0);
                *n = n.saturating_add(1);
                *n
            })
            .unwrap_or(1);
        RETRY_MIN
            .saturating_mul(2u32.saturating_pow(failures.saturating_sub(1).min(16)))
            .min(RETRY_MAX)
    }

    /// Forgets the failures of `key` (it reconciled).
    pub fn forget(&self, key: &str) {
        if let Ok(mut f) = self.failures.lock() {
            f.remove(key);
        }
    }
}

pub struct Ctx {
    pub client: Client,
    pub recorder: Publisher,
    pub snapshot_namespace: String,
    /// `--selector`: only plans matching it, and their runs, are ours.
    pub selector: Option<String>,
    /// `--selector`, parsed: which freezes' status this controller writes.
    pub label_selector: Option<upgradeplan::engine::selector::LabelSelector>,
    /// The caches, and whether they have their lists.
    pub caches: crate::caches::Stores,
    /// Snapshots by run UID, verified against their digests, with the resourceVersions of the
    /// ConfigMaps they were read from (or written at).
    pub frozen: Mutex<HashMap<String, Arc<Verified>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// What this process recorded of each run's resources, by run UID.
    pub resources: Mutex<HashMap<String, RunResources>>,
    /// What this process remembers of its runs between passes: the announcements it published,
    /// what earlier processes announced (read from each run's Events once per process), when it
    /// last wrote each status. The simulation's processes keep the same (spec §14.3).
    pub memory: Mutex<upgradeplan::send::RunMemory>,
    /// Retry delays of objects whose reconcile failed.
    pub retries: RetryBackoff,
    /// Starts sent under an UpgradeBudget and not in the binding cache yet; its lock makes the
    /// budgeted runs' decisions one at a time (spec §13.8).
    pub budget_ledger: Arc<tokio::sync::Mutex<crate::ledger::Ledger>>,
    /// Runs to reconcile now because a budget unit they wait for is free (the run controller
    /// reads the other end).
    pub budget_wakes: futures::channel::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<UpgradeRun>>,
    /// The plans' signal gates, read through Prometheus.
    pub gates: Arc<crate::gates::GateReader>,
    /// The resourceVersion of each run's cached copy the API server refused a write from (409),
    /// by run UID: the next pass reads the run from the API server instead of deciding from that
    /// copy again (a watch the API server holds while its cache starts kept it for 10 s).
    pub refused_copies: Mutex<HashMap<String, String>>,
    /// Binding patches in flight across every run (`run::PATCH_CONCURRENCY` permits): fifty
    /// plans' runs starting at once send as many requests at a time as one, instead of fifty
    /// times as many to one API server and one Kratix.
    pub binding_writes: tokio::sync::Semaphore,
}

/// A run's snapshot as verified, and the resourceVersion of each ConfigMap it came from.
pub struct Verified {
    pub frozen: Arc<Frozen>,
    pub versions: Vec<(String, String)>,
}

impl Ctx {
    /// What a scrape shows (spec §9.1), from the caches; `None` until they are filled.
    pub fn scrape_state(&self, now: chrono::DateTime<chrono::Utc>) -> Option<crate::metrics::State> {
        use upgradeplan::engine::{freeze, lifecycle};
        if !self.caches.synced.all() {
            return None;
        }
        let plans = self.caches.plans.state();
        let mut state = crate::metrics::State::default();
        for plan in &plans {
            let name = plan.name_any();
            let runs = self.runs_of(&name);
            let runs: Vec<&UpgradeRun> = runs.iter().map(AsRef::as_ref).collect();
            if runs
                .iter()
                .any(|r| !r.status.as_ref().is_some_and(|s| s.state.is_terminal()))
            {
                state.active.insert(name.clone());
            }
            let promise_found = self
                .caches
                .promises
                .get(&ObjectRef::new(&plan.spec.promise_ref.name))
                .is_some();
            let gauges = lifecycle::plan::gauges_of(plan, &runs, promise_found, self, now);
            state.plans.push((name, gauges));
        }
        if self.caches.freezes_kind.synced() {
            for f in self.caches.freezes.state() {
                if self.writes_status_of(&f) {
                    let s = freeze::step(&f, &plans, now);
                    state.freezes.push((f.name_any(), s.active, s.ready));
                }
            }
        }
        if self.caches.budgets_kind.synced() {
            for b in self.caches.budgets.state() {
                if self.writes_status_of_platform_object(b.labels()) && b.metadata.deletion_timestamp.is_none() {
                    let in_flight = crate::ledger::in_flight(&self.caches, &b);
                    let max = upgradeplan::engine::upgrade_budget::max_in_flight(&b);
                    state.budgets.push((b.name_any(), in_flight, max));
                }
            }
        }
        Some(state)
    }

    /// Whether this controller writes the freeze's status (and shows its gauges): every
    /// controller is held by every freeze, but a sharded one reports on those matching its
    /// `--selector`, as with plans; else two shards would overwrite each other's matchingPlans.
    pub fn writes_status_of(&self, freeze: &UpgradeFreeze) -> bool {
        freeze.metadata.deletion_timestamp.is_none() && self.writes_status_of_platform_object(freeze.labels())
    }

    /// Whether this controller reports on a platform object (a freeze, a budget) labelled
    /// `labels`: every one unsharded, those matching its `--selector` when sharded.
    pub fn writes_status_of_platform_object(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.label_selector.as_ref().is_none_or(|s| s.matches(labels))
    }

    /// Whether the budgets are known: listed, or not served (no budget can exist). Until then no
    /// run under budgets could be told apart from one under none, so no run starts anything.
    pub fn budgets_known(&self) -> bool {
        self.caches.budgets_kind.known()
    }

    pub fn plan(&self, name: &str) -> Option<Arc<UpgradePlan>> {
        self.caches.plans.get(&ObjectRef::new(name))
    }

    /// The Promise `run` works on: its frozen plan's once this process has read its snapshot
    /// (a promiseRef edited mid-run changes nothing of the run, spec §14.2), else its live
    /// plan's; `None` without either.
    pub fn promise_of_run(&self, run: &UpgradeRun) -> Option<String> {
        let frozen = run
            .uid()
            .and_then(|uid| self.frozen.lock().ok()?.get(&uid).cloned())
            .map(|v| v.frozen.plan.promise_ref.name.clone());
        frozen.or_else(|| self.plan(run.plan_name()).map(|p| p.spec.promise_ref.name.clone()))
    }

    /// The UpgradeRun named `name`, from the cache.
    pub fn run(&self, name: &str) -> Option<Arc<UpgradeRun>> {
        self.caches.runs.get(&ObjectRef::new(name))
    }

    /// Runs of `plan` (by label or, for runs not yet labelled, by reference).
    pub fn runs_of(&self, plan: &str) -> Vec<Arc<UpgradeRun>> {
        self.caches
            .runs
            .state()
            .into_iter()
            .filter(|r| r.plan_name() == plan)
            .collect()
    }

    /// Bindings of `promise`, all namespaces, from the cache (shared, never copied).
    pub fn bindings_of(&self, promise: &str) -> Vec<Arc<CachedBinding>> {
        self.caches.bindings.of_promise(promise)
    }

    pub fn binding(&self, namespace: &str, name: &str) -> Option<Arc<CachedBinding>> {
        self.caches.bindings.get(namespace, name)
    }

    /// Every PromiseRevision of `promise`, as the engine reads them (one being deleted included:
    /// it is never a target, spec §5.7).
    pub fn revisions_of(&self, promise: &str) -> Vec<RevisionFact> {
        self.caches
            .revisions
            .state()
            .iter()
            .filter(|r| r.promise() == promise)
            .map(|r| r.fact())
            .collect()
    }

    /// Every HealthRecord of `promise`.
    pub fn health_records_of(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        self.caches
            .health
            .state()
            .into_iter()
            .filter(|r| r.data.promise_ref.name == promise)
            .collect()
    }

    /// Whether each (ConfigMap, resourceVersion) is still the latest the watch has seen.
    pub fn snapshot_unchanged(&self, versions: &[(String, String)]) -> bool {
        versions.iter().all(|(name, version)| {
            let key = ObjectRef::new(name).within(&self.snapshot_namespace);
            self.caches
                .snapshot_meta
                .get(&key)
                .is_some_and(|cm| cm.metadata.resource_version.as_deref() == Some(version.as_str()))
        })
    }

    /// Whether the freezes are known: listed, or not served (no freeze can exist). Until then no
    /// run starts anything: a freeze that exists but is not yet in the cache must still hold.
    /// A controller upgraded before its CRDs so keeps running plans.
    pub fn freezes_known(&self) -> bool {
        self.caches.freezes_kind.known()
    }

    /// Publishes an event on `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: EventType, reason: &str, note: String) {
        if let Err(e) = self.recorder.publish(&obj.object_ref(&()), type_, reason, &note).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }

    /// What the events published about `run` (by any process) announced, listed from the API
    /// server; correlation of this process's Events goes on where the earlier process left off
    /// (the combined Event keeps counting).
    pub async fn list_announced(&self, run: &UpgradeRun) -> std::result::Result<Announced, kube::Error> {
        let uid = run.uid().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), CLUSTER_SCOPED_EVENTS_NAMESPACE);
        let events = api
            .list(&ListParams::default().fields(&format!("involvedObject.uid={uid}")))
            .await?;
        let recorded: Vec<crate::events::Recorded> =
            events.items.iter().filter_map(crate::events::Recorded::of).collect();
        self.recorder.remember(&uid, CLUSTER_SCOPED_EVENTS_NAMESPACE, &recorded);
        Ok(Announced::from_events(
            recorded.into_iter().map(|e| (e.reason, e.message, e.count)),
        ))
    }

    /// Forgets what was cached for a run that is finished or gone.
    pub fn forget_run(&self, uid: &str) {
        if let Ok(mut f) = self.frozen.lock() {
            f.remove(uid);
        }
        if let Ok(mut m) = self.memory.lock() {
            m.forget(uid);
        }
        if let Ok(mut r) = self.resources.lock() {
            r.remove(uid);
        }
        if let Ok(mut r) = self.refused_copies.lock() {
            r.remove(uid);
        }
    }

    /// The runs in progress that this controller handles: they share the progress writes
    /// (`lifecycle::progress_every`).
    pub fn runs_in_progress(&self) -> usize {
        self.caches
            .runs
            .state()
            .iter()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress) && self.handles(r))
            .count()
    }

    /// Records that the API server refused a write decided from `run` as cached (409 Conflict).
    pub fn refused_copy(&self, run: &UpgradeRun) {
        if let (Some(uid), Some(version), Ok(mut r)) = (run.uid(), run.resource_version(), self.refused_copies.lock()) {
            r.insert(uid, version);
        }
    }

    /// Whether a write from this very copy of `run` was refused before (and the cache has not
    /// moved on since): deciding from it again would be refused again. Forgets the refusal.
    pub fn copy_refused_before(&self, run: &UpgradeRun) -> bool {
        let (Some(uid), Some(version)) = (run.uid(), run.resource_version()) else {
            return false;
        };
        let Ok(mut r) = self.refused_copies.lock() else {
            return false;
        };
        r.remove(&uid).is_some_and(|refused| refused == version)
    }

    /// Whether starts `admitted` let through may still be sent now, by the run and the freezes as
    /// the caches have them and the clock (spec §14.1).
    pub fn still_admitted(
        &self,
        admitted: &upgradeplan::engine::admitted::Admitted,
    ) -> std::result::Result<(), upgradeplan::engine::admitted::Ended> {
        let run = self.run(&admitted.run);
        admitted.check(run.as_deref(), &self.caches.freezes.state(), crate::clock::now())
    }
}

/// What this process recorded of a run's resources, each by its entry in the run's snapshot
/// (shared with the frozen snapshot: a pointer per resource, not its names copied again; at
/// 100,000 resources the formatted keys were most of a run's bookkeeping).
#[derive(Default)]
pub struct RunResources {
    /// When this process started each resource's upgrade (the start of its duration).
    pub started: HashMap<Arc<SnapshotResource>, chrono::DateTime<chrono::Utc>>,
    /// Bindings this process patched for the run that the cache does not show changed yet.
    pub unseen: Vec<UnseenWrite>,
}

/// A binding patch the API server took, before the binding cache shows it: the ReplicaSet
/// controller's "expectations". A pass decided before the cache caught up would start those
/// resources again, and have every such patch refused by its precondition (at fifty plans under a
/// budget, 2,326 refused patches for 10,000 upgrades).
pub struct UnseenWrite {
    pub namespace: String,
    pub name: String,
    /// The binding's resourceVersion before the patch: any other (or none) is the cache caught up.
    pub before: Option<String>,
    pub sent: std::time::Instant,
}

/// How long a pass waits for the cache to show this process's own binding patches: past any
/// watch delay; a binding deleted meanwhile, or a watch re-listing, must not hold a run for long.
pub const UNSEEN_FOR: std::time::Duration = std::time::Duration::from_secs(5);

/// What this process observes of runs (spec §9.1): how long the upgrades it started took, and how
/// long runs took. The counters of runs and outcomes are read from the runs at scrape time
/// ([`upgradeplan::engine::counters`]).
impl Ctx {
    /// Observes what `step` of `run` finished.
    pub fn count(&self, run: &UpgradeRun, counts: &Counts<'_>) {
        let plan = run.plan_name();
        self.observe_durations(run, counts);
        if counts.superseded {
            tracing::info!(run = %run.name_any(), "run superseded");
        }
        if let Some(end) = counts.ended {
            let result = end.result.as_str();
            if let Some(seconds) = end.seconds {
                self.metrics
                    .run_duration
                    .with_label_values(&[plan, result])
                    .observe(seconds);
            }
            tracing::info!(run = %run.name_any(), state = result, "run finished");
            self.forget_run(&run.uid().unwrap_or_default());
        }
    }

    /// How long the upgrades this process started took.
    fn observe_durations(&self, run: &UpgradeRun, counts: &Counts<'_>) {
        let plan = run.plan_name();
        let Ok(mut runs) = self.resources.lock() else {
            return;
        };
        let ours = runs.entry(run.uid().unwrap_or_default()).or_default();
        // Taken out when it finishes: a duration is observed once.
        for resource in &counts.ended_otherwise {
            ours.started.remove(*resource);
        }
        for (resource, group) in &counts.succeeded {
            if let Some(began) = ours.started.remove(*resource) {
                let secs = (crate::clock::now() - began).num_milliseconds() as f64 / 1000.0;
                self.metrics
                    .resource_upgrade_duration
                    .with_label_values(&[plan, group])
                    .observe(secs);
            }
        }
    }

    /// The API server took `patch` of `run`'s binding: until the cache shows it, the run's passes
    /// wait ([`Ctx::awaits_own_writes`]).
    pub fn wrote_binding(&self, run: &UpgradeRun, patch: &upgradeplan::engine::write::BindingPatch) {
        if let Ok(mut runs) = self.resources.lock() {
            let ours = runs.entry(run.uid().unwrap_or_default()).or_default();
            ours.unseen.push(UnseenWrite {
                namespace: patch.resource.namespace.clone(),
                name: patch.resource.binding.clone(),
                before: patch.resource_version.clone(),
                sent: std::time::Instant::now(),
            });
        }
    }

    /// Whether the binding cache still misses a patch this process sent for `run` (within
    /// [`UNSEEN_FOR`]): a pass now would decide on bindings as they were before it.
    pub fn awaits_own_writes(&self, run: &UpgradeRun) -> bool {
        let Ok(mut runs) = self.resources.lock() else {
            return false;
        };
        let Some(ours) = runs.get_mut(&run.uid().unwrap_or_default()) else {
            return false;
        };
        ours.unseen.retain(|w| {
            w.sent.elapsed() < UNSEEN_FOR
                && self.caches.bindings.get(&w.namespace, &w.name).is_some_and(|b| {
                    upgradeplan::api::kratix::BindingFacts::object_version(b.as_ref()) == w.before.as_deref()
                })
        });
        !ours.unseen.is_empty()
    }

    /// This process started `resource`'s upgrade for `run` now (the start of its duration).
    pub fn started(&self, run: &UpgradeRun, resource: &Arc<SnapshotResource>) {
        if let Ok(mut runs) = self.resources.lock() {
            let ours = runs.entry(run.uid().unwrap_or_default()).or_default();
            ours.started.insert(Arc::clone(resource), crate::clock::now());
        }
    }

    /// The run's UpgradeApprovals, as the engine reads them.
    pub fn approvals_of(&self, run: &UpgradeRun) -> Vec<ApprovalFact> {
        self.caches
            .approvals
            .state()
            .iter()
            .filter(|a| a.spec.upgrade_run_ref.name == run.name_any() && a.metadata.deletion_timestamp.is_none())
            .map(|a| ApprovalFact::of(a))
            .collect()
    }
}

impl Ctx {
    /// Whether this controller handles `run`: always without `--selector`; with one, when the
    /// run's plan is in our (selected) cache, or the run was taken on by a controller with our
    /// selector.
    pub fn handles(&self, run: &UpgradeRun) -> bool {
        match &self.selector {
            None => true,
            Some(sel) => {
                self.plan(run.plan_name()).is_some()
                    || run.annotations().get(upgradeplan::api::SELECTOR_ANNOTATION) == Some(sel)
            }
        }
    }
}

/// Writes `status` of a cluster-scoped object with server-side apply under our field manager.
pub async fn apply_status<K>(client: &Client, name: &str, status: impl serde::Serialize) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    apply_status_at::<K>(client, name, status, None).await
}

/// [`apply_status`] on the object as it was at `resource_version` (a precondition: the API
/// server answers 409 Conflict when the object changed since). A pass working from a stale copy
/// then writes nothing, and counts nothing after the write (spec §14.2: counters once).
pub async fn apply_status_at<K>(
    client: &Client,
    name: &str,
    status: impl serde::Serialize,
    resource_version: Option<&str>,
) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let body = status_apply_body(&K::api_version(&()), &K::kind(&()), name, status, resource_version)?;
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await?;
    Ok(())
}

/// The server-side apply body of a status write, with the resourceVersion precondition when given.
fn status_apply_body(
    api_version: &str,
    kind: &str,
    name: &str,
    status: impl serde::Serialize,
    resource_version: Option<&str>,
) -> Result<serde_json::Value> {
    let mut body = json!({"apiVersion": api_version, "kind": kind, "status": status});
    if let Some(rv) = resource_version {
        body["metadata"] = json!({"name": name, "resourceVersion": rv});
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Issue 36 D10: a run's status write names the resourceVersion it was computed from, so a
    /// pass from a stale copy is refused (409) rather than counted twice.
    #[test]
    fn a_status_write_carries_its_precondition() {
        let body = status_apply_body(
            "platform.syntasso.io/v1alpha1",
            "UpgradeRun",
            "r",
            json!({"state": "InProgress"}),
            Some("42"),
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
                   "metadata": {"name": "r", "resourceVersion": "42"}, "status": {"state": "InProgress"}})
        );
        let plain = status_apply_body("v", "K", "r", json!({}), None).unwrap();
        assert!(plain.get("metadata").is_none());
    }

    #[test]
    fn retry_delays_double_up_to_the_cap_and_reset_on_success() {
        let b = RetryBackoff::default();
        let delays: Vec<Duration> = (0..9).map(|_| b.next_delay("run/a")).collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(
            delays,
            [
                ms(500),
                ms(1000),
                ms(2000),
                ms(4000),
                ms(8000),
                ms(16000),
                RETRY_MAX,
                RETRY_MAX,
                RETRY_MAX
            ]
        );
        assert_eq!(b.next_delay("run/b"), RETRY_MIN, "objects back off independently");
        b.forget("run/a");
        assert_eq!(b.next_delay("run/a"), RETRY_MIN);
        for _ in 0..100 {
            b.next_delay("plan/c");
        }
        assert_eq!(b.next_delay("plan/c"), RETRY_MAX, "no overflow after many failures");
        let run = upgradeplan::api::UpgradeRun::new("r1", Default::default());
        let plan = upgradeplan::api::UpgradePlan::new("p1", Default::default());
        assert_eq!(
            (retry_key(&run), retry_key(&plan)),
            ("run/r1".to_string(), "plan/p1".to_string()),
            "the keys the `reconciled key=` log line names"
        );
    }
}
