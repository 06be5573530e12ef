//! Run reconciliation: the I/O shell around [`lifecycle::step`] (spec §5). A pass gathers facts
//! from the caches (and the run's snapshot, [`crate::snapshots`]), asks the engine for the step,
//! and sends its typed writes in order ([`crate::writes`] sends each): the run's own metadata,
//! approvals adopted, supersede requests, snapshot, binding patches, events, metrics, the run's
//! status last, then the release. No decision is taken here.

use std::sync::Arc;

use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use upgradeplan::api::kratix::{BindingFacts, HealthRecord, RevisionFact};
use upgradeplan::api::{
    Gate, RunState, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradePlanSpec, UpgradeRun, UpgradeRunStatus,
    RUN_FINALIZER,
};
use upgradeplan::engine::admission::RunFacts;
use upgradeplan::engine::admitted::{Admitted, Ended};
use upgradeplan::engine::gate::GateReading;
use upgradeplan::engine::lifecycle::{
    self, Announced, Announcement, Counts, Gauges, KindsNeeded, SnapshotConfigMap, SnapshotFact, Step,
};
use upgradeplan::engine::snapshot::{Frozen, Snapshot, SnapshotResource};
use upgradeplan::engine::stage::ApprovalFact;
use upgradeplan::engine::upgrade_budget::BudgetFacts;
use upgradeplan::engine::write::{ApprovalPatch, BindingPatch, Release, RunPatch};
use upgradeplan::send::{Gather, Passed, RunMemory, RunWrite, Sent, Shell};

use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::events::EventType;
use crate::writes::{adopt_approvals, create_run, patch_binding, patch_run, release_run};

/// How many binding patches (and their events) are in flight at once, across every run.
pub const PATCH_CONCURRENCY: usize = upgradeplan::send::PATCH_CONCURRENCY;

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
    // The cache still holds the copy a write was refused from: its watch is behind (an API server
    // just restarted may hold a watch until its own cache has started). The run is read from the
    // API server so the pass decides from the current copy rather than waiting for the watch.
    let run = match ctx.copy_refused_before(&run) {
        true => Arc::new(api.get(&run.name_any()).await?),
        false => run,
    };
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
    fn snapshot_bindings(
        &self,
        snapshot: &upgradeplan::engine::snapshot::Snapshot,
    ) -> Vec<Option<Arc<dyn BindingFacts>>> {
        let keys = snapshot.groups.iter().flat_map(|g| &g.resources);
        self.caches
            .bindings
            .get_each(keys.map(|r| (r.namespace.as_str(), r.binding.as_str())))
            .into_iter()
            .map(|b| b.map(|b| b as _))
            .collect()
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        Ctx::bindings_of(self, promise).into_iter().map(|b| b as _).collect()
    }
    fn revisions_of(&self, promise: &str) -> Vec<RevisionFact> {
        Ctx::revisions_of(self, promise)
    }
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        self.health_records_of(promise)
    }
    fn freezes(&self) -> Vec<Arc<UpgradeFreeze>> {
        self.caches.freezes.state()
    }
    fn prometheus_configured(&self) -> bool {
        self.gates.configured()
    }
}

/// One pass of the run: the shared pass (`upgradeplan::send::pass`) over this process's caches
/// and the API server.
async fn pass(run: &UpgradeRun, ctx: &Arc<Ctx>) -> Result<Action> {
    let shell = RunPass::new(ctx);
    // The pass's one reading of the decision clock: every timestamp of its step is this instant.
    Ok(match upgradeplan::send::pass(&shell, run, crate::clock::now()).await? {
        Passed::Waits(wait) => {
            tracing::debug!(run = %run.name_any(), ?wait, "waiting before deciding");
            Action::requeue(wait.after())
        }
        Passed::Sent(sent) => action_after(sent),
    })
}

/// A pass of one run in this process: the caches, the API server, and the budget ledger while
/// the pass holds it.
pub struct RunPass {
    ctx: Arc<Ctx>,
    /// Held from the budgets' facts until the step's starts are recorded (`Gather::decided`).
    ledger: std::sync::Mutex<Option<tokio::sync::OwnedMutexGuard<crate::ledger::Ledger>>>,
}

impl RunPass {
    pub fn new(ctx: &Arc<Ctx>) -> Self {
        RunPass {
            ctx: ctx.clone(),
            ledger: std::sync::Mutex::new(None),
        }
    }
}

impl std::ops::Deref for RunPass {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.ctx
    }
}

impl Gather for RunPass {
    fn cluster(&self) -> &dyn lifecycle::Cluster {
        &*self.ctx
    }

    fn awaits_own_writes(&self, run: &UpgradeRun) -> bool {
        self.ctx.awaits_own_writes(run)
    }

    fn plan(&self, name: &str) -> Option<Arc<UpgradePlan>> {
        self.ctx.plan(name)
    }

    fn others(&self, run: &UpgradeRun) -> Vec<RunFacts> {
        let runs = self.ctx.runs_of(run.plan_name());
        let others = runs.iter().filter(|r| r.name_any() != run.name_any());
        others.map(|r| RunFacts::of(r)).collect()
    }

    async fn snapshot(&self, run: &UpgradeRun) -> Result<SnapshotFact> {
        let status = run.status.clone().unwrap_or_default();
        crate::snapshots::gather_snapshot(&self.ctx, run, &status).await
    }

    fn kinds_needed(&self, run: &UpgradeRun, plan: Option<&UpgradePlanSpec>) -> KindsNeeded {
        let caches = &self.ctx.caches;
        lifecycle::kinds_needed(run, plan, caches.health_kind.cache(), caches.approvals_kind.cache())
    }

    fn freezes_known(&self) -> bool {
        self.ctx.freezes_known()
    }

    fn budgets_known(&self) -> bool {
        self.ctx.budgets_known()
    }

    async fn gates(&self, run: &UpgradeRun, gates: &[Gate], now: chrono::DateTime<chrono::Utc>) -> Vec<GateReading> {
        self.ctx
            .gates
            .read(run.plan_name(), gates, now, &self.ctx.metrics)
            .await
    }

    fn approvals(&self, run: &UpgradeRun) -> Vec<ApprovalFact> {
        self.ctx.approvals_of(run)
    }

    async fn reverted(&self, name: &str) -> Result<Option<(Arc<UpgradeRun>, SnapshotFact)>> {
        crate::snapshots::gather_reverted(&self.ctx, name).await
    }

    fn budgets(&self) -> Vec<Arc<UpgradeBudget>> {
        self.ctx.caches.budgets.state()
    }

    async fn budget_facts(&self, run: &UpgradeRun, selecting: &[&UpgradeBudget]) -> Vec<BudgetFacts> {
        let mut ledger = self.ctx.budget_ledger.clone().lock_owned().await;
        let facts = crate::ledger::facts_for(&self.ctx.caches, &mut ledger, run, selecting);
        if let Ok(mut held) = self.ledger.lock() {
            *held = Some(ledger);
        }
        facts
    }

    fn selector(&self) -> Option<&str> {
        self.ctx.selector.as_deref()
    }

    fn decided(&self, run: &UpgradeRun, _facts: &lifecycle::Facts<'_>, step: &Step) -> Result<()> {
        // Recorded, the ledger lets go: the next budgeted run decides with these starts counted.
        if let Some(mut ledger) = self.ledger.lock().ok().and_then(|mut held| held.take()) {
            ledger.record(&run.name_any(), step);
        }
        Ok(())
    }

    fn wake(&self, runs: &[String]) {
        for name in runs {
            // Closed only as the process stops.
            let _ = self.ctx.budget_wakes.unbounded_send(ObjectRef::new(name));
        }
    }
}

/// A deleted run: cancelled by its own step, then, once its plan recorded it, its snapshot goes
/// and the finalizer is released.
async fn deleted(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    if !run.finalizers().iter().any(|f| f == RUN_FINALIZER) {
        return Ok(Action::await_change());
    }
    pass(&run, &ctx).await
}

/// The controller's next look after a pass's sending ended.
fn action_after(sent: Sent) -> Action {
    match sent {
        Sent::Again => Action::requeue(std::time::Duration::from_millis(200)),
        Sent::Released => Action::await_change(),
        Sent::Done {
            wake_at,
            progress_after,
        } => match wake_at.map(crate::clock::until).into_iter().chain(progress_after).min() {
            Some(after) => Action::requeue(after),
            None => Action::await_change(),
        },
    }
}

/// The controller's shell: each write a request to the API server, each memory this process's.
impl Shell for RunPass {
    type Error = Error;
    type Slot<'a>
        = Option<tokio::sync::SemaphorePermit<'a>>
    where
        Self: 'a;

    async fn patch_own(&self, patch: &RunPatch) -> Result<RunWrite> {
        match patch_run(&self.client, patch).await {
            Ok(patched) => Ok(RunWrite::Taken(patched.and_then(|p| p.resource_version()))),
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                tracing::debug!(run = %patch.run, "step decided from a stale copy of the run; looking again");
                Ok(RunWrite::Refused)
            }
            Err(e) => Err(e),
        }
    }

    async fn adopt_approvals(&self, patches: &[ApprovalPatch]) -> Result<()> {
        adopt_approvals(&self.client, patches).await
    }

    async fn supersede(&self, patch: &RunPatch) -> Result<bool> {
        let patched = patch_run(&self.client, patch).await?.is_some();
        if patched {
            tracing::info!(run = %patch.run, "asked the older run to stand down");
        }
        Ok(patched)
    }

    async fn run_is_at(&self, name: &str, version: Option<&str>) -> Result<bool> {
        let at = crate::writes::run_is_at(&self.client, name, version).await?;
        if !at {
            tracing::debug!(run = %name, "snapshot decided from a stale copy of the run; looking again");
        }
        Ok(at)
    }

    async fn write_snapshot(&self, run: &UpgradeRun, shards: &[SnapshotConfigMap], frozen: &Arc<Frozen>) -> Result<()> {
        let versions = crate::snapshots::write_snapshot(self, run, shards).await?;
        if let (Some(uid), Ok(mut cache)) = (run.uid(), self.frozen.lock()) {
            let verified = crate::context::Verified {
                frozen: frozen.clone(),
                versions,
            };
            cache.insert(uid, Arc::new(verified));
        }
        Ok(())
    }

    fn memory<R>(&self, f: impl FnOnce(&mut RunMemory) -> R) -> R {
        // A poisoned lock only means a panic elsewhere mid-update; the memory is still usable.
        f(&mut self.memory.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        crate::clock::now()
    }

    fn runs_in_progress(&self) -> usize {
        Ctx::runs_in_progress(self)
    }

    async fn list_announced(&self, run: &UpgradeRun) -> Result<Option<Announced>> {
        match Ctx::list_announced(self, run).await {
            Ok(announced) => Ok(Some(announced)),
            Err(e) => {
                // Announcements are best effort; the run must not wait on them. Retried next reconcile.
                tracing::warn!(run = %run.name_any(), error = %e, "listing the run's events failed; announcements may repeat and lost ones are not repaired yet");
                Ok(None)
            }
        }
    }

    fn lost_starts(&self, run: &UpgradeRun, snapshot: &Snapshot, to: &str, announced: &Announced) -> Vec<String> {
        let missing = lifecycle::lost_start_announcements(run, snapshot, to, announced, &*self.ctx);
        if !missing.is_empty() {
            tracing::info!(run = %run.name_any(), count = missing.len(), "announcing upgrades whose events a restart lost");
        }
        missing
    }

    async fn slot(&self) -> Self::Slot<'_> {
        // Never closed; a closed semaphore would only lift the bound.
        self.binding_writes.acquire().await.ok()
    }

    fn still_admitted(&self, admitted: &Admitted) -> std::result::Result<(), Ended> {
        Ctx::still_admitted(self, admitted)
    }

    async fn patch_binding(&self, patch: &BindingPatch) -> Result<bool> {
        patch_binding(&self.client, patch).await
    }

    fn wrote_binding(&self, run: &UpgradeRun, patch: &BindingPatch) {
        Ctx::wrote_binding(self, run, patch)
    }

    fn started(&self, run: &UpgradeRun, resource: &Arc<SnapshotResource>) {
        Ctx::started(self, run, resource)
    }

    async fn withheld(&self, run: &UpgradeRun, patches: &[&BindingPatch], why: &Ended) {
        tracing::info!(run = %run.name_any(), withheld = patches.len(), reason = %why, "starts withheld: their admission ended while they were being sent");
        self.budget_ledger.lock().await.forget(&run.name_any(), patches);
    }

    async fn event(&self, run: &UpgradeRun, a: &Announcement) -> Result<()> {
        Ctx::event(self, run, EventType::of(a.warning), a.reason, a.note.clone()).await;
        Ok(())
    }

    async fn create_run(&self, run: &UpgradeRun) -> Result<()> {
        create_run(&self.client, run).await
    }

    async fn flush_counts(&self, run: &UpgradeRun) {
        self.recorder.flush_counts(&run.uid().unwrap_or_default()).await
    }

    fn gauges(&self, run: &UpgradeRun, gauges: &Gauges) {
        self.metrics.set_run_gauges(run.plan_name(), gauges)
    }

    async fn write_status(
        &self,
        run: &UpgradeRun,
        status: &UpgradeRunStatus,
        version: Option<&str>,
    ) -> Result<RunWrite> {
        let name = run.name_any();
        match crate::context::apply_status_at::<UpgradeRun>(&self.client, &name, status, version).await {
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                tracing::debug!(run = %name, "status computed from a stale copy of the run; looking again");
                return Ok(RunWrite::Refused);
            }
            other => other?,
        }
        if status.state == RunState::InProgress && run.status.as_ref().map(|s| s.state) != Some(RunState::InProgress) {
            tracing::info!(run = %name, plan = %run.plan_name(), resources = status.total_resources, "snapshot taken; run in progress");
        }
        Ok(RunWrite::Taken(None))
    }

    fn count(&self, run: &UpgradeRun, counts: &Counts<'_>) -> Result<()> {
        Ctx::count(self, run, counts);
        Ok(())
    }

    async fn release(&self, run: &UpgradeRun, release: &Release) -> Result<bool> {
        release_run(self, run, release).await?;
        Ok(true)
    }

    fn refused(&self, run: &UpgradeRun) {
        self.refused_copy(run)
    }
}

/// The whole of a step's writes, in order, against a mocked API server (each write's own
/// request is tested in [`crate::writes`]).
#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http::{Request, Response};
    use http_body_util::BodyExt;
    use kube::client::Body;
    use kube::runtime::controller::Action;
    use serde_json::{json, Value};
    use upgradeplan::api::UpgradeRun;
    use upgradeplan::engine::lifecycle::Step;
    use upgradeplan::engine::write::{ApprovalPatch, RunPatch};

    use crate::writes::tests::ok;

    /// A step sent as a pass of the controller sends it, and the controller's next look.
    async fn carry_out(ctx: &Arc<super::Ctx>, run: &UpgradeRun, step: Step) -> crate::error::Result<Action> {
        let shell = super::RunPass::new(ctx);
        Ok(super::action_after(
            upgradeplan::send::carry_out(&shell, run, &step).await?,
        ))
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
            memory: Default::default(),
            retries: Default::default(),
            budget_ledger: Default::default(),
            refused_copies: Default::default(),
            binding_writes: tokio::sync::Semaphore::new(super::PATCH_CONCURRENCY),
            budget_wakes: futures::channel::mpsc::unbounded().0,
            gates: Arc::new(crate::gates::GateReader::new(None, std::time::Duration::from_secs(30))),
        }
    }

    /// A pass waits while the binding cache does not show a patch this process sent for its
    /// run, and goes on once the cache shows the binding changed or gone.
    #[tokio::test]
    async fn a_pass_waits_for_the_cache_to_show_its_own_binding_patches() {
        use kube::runtime::watcher::Event;
        use upgradeplan::api::kratix::{CachedBinding, Interner, ResourceBinding};
        use upgradeplan::engine::write::BindingPatch;
        let (client, _server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let ctx = context(kube::Client::new(client, "default"));
        // The binding of `crate::writes::tests::start()`'s resource, at `version`.
        let binding = |version: &str| {
            let b: ResourceBinding = serde_json::from_value(json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
                "metadata": {"name": "db-binding", "namespace": "team-a", "resourceVersion": version},
                "spec": {"version": "v1"}
            }))
            .unwrap();
            Arc::new(CachedBinding::new(&b, &mut Interner::default()))
        };
        ctx.caches.bindings.apply(&Event::Apply(binding("41")));
        let run: UpgradeRun = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
            "metadata": {"name": "r", "uid": "u1"}, "spec": {"upgradePlanRef": {"name": "p"}}
        }))
        .unwrap();
        assert!(!ctx.awaits_own_writes(&run), "nothing sent");
        let patch = crate::writes::tests::start();
        ctx.wrote_binding(&run, &patch);
        assert!(ctx.awaits_own_writes(&run), "the cache still has version 41");
        ctx.caches.bindings.apply(&Event::Apply(binding("42")));
        assert!(!ctx.awaits_own_writes(&run), "the cache caught up");
        ctx.wrote_binding(
            &run,
            &BindingPatch {
                resource_version: Some("42".into()),
                ..patch
            },
        );
        ctx.caches.bindings.apply(&Event::Delete(binding("42")));
        assert!(!ctx.awaits_own_writes(&run), "the binding is gone: nothing to wait for");
    }

    /// A cached copy the API server refused a write from is not decided from again: the next
    /// pass over that same copy reads the run from the API server, once; a newer copy in the
    /// cache is used as it is.
    #[tokio::test]
    async fn a_copy_refused_once_is_read_again_from_the_api_server() {
        let (client, _server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let ctx = context(kube::Client::new(client, "default"));
        let at = |version: &str| -> UpgradeRun {
            serde_json::from_value(json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
                "metadata": {"name": "r", "uid": "u1", "resourceVersion": version},
                "spec": {"upgradePlanRef": {"name": "p"}}
            }))
            .unwrap()
        };
        assert!(!ctx.copy_refused_before(&at("7")), "nothing refused yet");
        ctx.refused_copy(&at("7"));
        assert!(
            !ctx.copy_refused_before(&at("9")),
            "the cache moved on: its copy is used"
        );
        ctx.refused_copy(&at("7"));
        assert!(
            ctx.copy_refused_before(&at("7")),
            "the same copy: read from the API server"
        );
        assert!(
            !ctx.copy_refused_before(&at("7")),
            "read once per refusal, not on every pass"
        );
        ctx.refused_copy(&at("7"));
        ctx.forget_run("u1");
        assert!(
            !ctx.copy_refused_before(&at("7")),
            "a deleted run's refusal is forgotten"
        );
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
        use upgradeplan::engine::lifecycle::{Announcement, Step};

        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let log = Arc::new(std::sync::Mutex::new(Vec::new()));
        let server = tokio::spawn(serve_all(handle, log.clone()));

        let mut run = UpgradeRun::new("r", Default::default());
        run.metadata.uid = Some("r-uid".into());
        run.metadata.resource_version = Some("5".into());
        let mut own = RunPatch::of("r");
        own.labels.insert("platform.syntasso.io/plan".into(), "p".into());
        let pending = UpgradeRunStatus {
            state: RunState::Pending,
            ..Default::default()
        };
        let step = Step {
            own,
            supersede: vec![RunPatch::supersede("old", "r")],
            adopt_approvals: vec![ApprovalPatch {
                approval: "r-prod".into(),
                resource_version: Some("3".into()),
                owner_references: Vec::new(),
            }],
            to: "v2".into(),
            announce: vec![Announcement {
                warning: false,
                reason: "UpgradeRunPending",
                note: "waiting".into(),
                key: String::new(),
            }],
            ..Step::new(&run, pending)
        };
        let ctx = Arc::new(context(client));
        carry_out(&ctx, &run, step).await.expect("the step is sent");
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

    /// The snapshot is written only from the run as it is on the API server: a pass deciding from
    /// a cached copy the status has moved past (a snapshot someone deleted since would be written
    /// again, matching its digest, and the deletion go unseen) sends nothing and looks again.
    #[tokio::test]
    async fn a_snapshot_is_written_only_from_the_run_as_it_is() {
        use upgradeplan::api::{RunState, UpgradeRunStatus};
        use upgradeplan::engine::lifecycle::Step;
        use upgradeplan::engine::snapshot::{snapshot_config_map_name, Frozen, Snapshot, SnapshotGroup};

        for (live, sent) in [("6", false), ("5", true)] {
            let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
            let client = kube::Client::new(service, "default");
            let log = Arc::new(std::sync::Mutex::new(Vec::new()));
            let server = tokio::spawn({
                let log = log.clone();
                async move {
                    while let Some((request, respond)) = handle.next_request().await {
                        let (parts, _) = request.into_parts();
                        let path = parts.uri.path().to_string();
                        let reply = match path.contains("/configmaps/") {
                            true => json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                                           "metadata": {"resourceVersion": "9"}}),
                            false => json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
                                            "metadata": {"name": "r", "resourceVersion": live},
                                            "spec": {"upgradePlanRef": {"name": "p"}}}),
                        };
                        log.lock().expect("the log").push(format!("{} {path}", parts.method));
                        respond.send_response(ok(reply));
                    }
                }
            });
            let mut run = UpgradeRun::new("r", Default::default());
            run.metadata.uid = Some("r-uid".into());
            run.metadata.resource_version = Some("5".into());
            let plan = serde_json::from_value(json!({
                "promiseRef": {"name": "redis"}, "upgradePath": {"from": ["v1"], "to": "v2"},
                "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]
            }))
            .expect("a plan");
            let snapshot = Snapshot {
                groups: vec![SnapshotGroup {
                    name: "dev".into(),
                    ..Default::default()
                }],
            };
            let frozen = Arc::new(Frozen::new(snapshot, plan).expect("the frozen plan"));
            let in_progress = UpgradeRunStatus {
                state: RunState::InProgress,
                ..Default::default()
            };
            let step = Step {
                own: RunPatch::of("r"),
                write_snapshot: upgradeplan::engine::lifecycle::snapshot_config_maps("r", &frozen),
                frozen: Some(frozen),
                to: "v2".into(),
                ..Step::new(&run, in_progress)
            };
            let ctx = Arc::new(context(client));
            let action = carry_out(&ctx, &run, step).await.expect("the step is sent");
            let refused = ctx.copy_refused_before(&run);
            drop(ctx);
            server.await.expect("the server");
            let log = log.lock().expect("the log").clone();
            let runs = "/apis/platform.syntasso.io/v1alpha1/upgraderuns";
            let snapshot_ns = "/api/v1/namespaces/kratix-platform-system/configmaps";
            match sent {
                false => {
                    assert_eq!(log, [format!("GET {runs}/r")], "nothing written from a stale copy");
                    assert_eq!(
                        action,
                        kube::runtime::controller::Action::requeue(std::time::Duration::from_millis(200))
                    );
                    assert!(refused, "the next pass reads the run from the API server");
                }
                true => {
                    assert_eq!(
                        log,
                        [
                            format!("GET {runs}/r"),
                            format!("PATCH {snapshot_ns}/{}", snapshot_config_map_name("r", 0)),
                            format!("PATCH {runs}/r/status"),
                        ],
                        "the snapshot, then the status"
                    );
                    assert!(!refused);
                }
            }
        }
    }
}
