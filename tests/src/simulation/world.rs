//! The simulated world: the API server's objects (with resourceVersions and the preconditions
//! the real server checks), the engine's run and plan steps applied write by write, and Kratix as
//! kratix-sim plays it ([`crate::sim::decide`], [`crate::sim::writes`]).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DynamicObject;
use kube::ResourceExt;
use serde_json::{json, Value};
use upgradeplan::api::kratix::{BindingFacts, CachedBinding, HealthRecord, Interner, ResourceBinding};
use upgradeplan::api::{
    Gate, RunState, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradePlanSpec, UpgradeRun, UpgradeRunStatus,
    RUN_FINALIZER,
};
use upgradeplan::engine::admission::{new_run, NewRun, RunFacts};
use upgradeplan::engine::admitted::{Admitted, Ended};
use upgradeplan::engine::gate::{GateReading, Reading};
use upgradeplan::engine::lifecycle::{
    self, Announced, Announcement, Cluster, Counts, Facts, Gauges, KindsNeeded, SnapshotConfigMap, SnapshotFact, Step,
    RECORD_GRACE,
};
use upgradeplan::engine::snapshot::{digest, read_frozen, Frozen, Snapshot, SnapshotResource};
use upgradeplan::engine::stage::ApprovalFact;
use upgradeplan::engine::upgrade_budget::{self, BudgetFacts};
use upgradeplan::engine::write::{ApprovalPatch, Attempt, BindingPatch, Release, RunPatch};
use upgradeplan::send::{Gather, Passed, RunMemory, RunWrite, Sent};
use upgradeplan::time::to_jiff;

use super::history::{Fault, UserAction};
use super::invariants::{Checker, Violation};

pub const PROMISE: &str = "redis";
pub const NAMESPACE: &str = "apps";
pub const PLAN: &str = "p";
pub const GATE: &str = "alerts";

/// One resource of the world — its Resource Request and the binding Kratix made from it — and
/// how Kratix treats it.
#[derive(Clone, Debug)]
pub struct Resource {
    pub binding: ResourceBinding,
    /// The Resource Request (spec §2): Kratix made the binding from it, rewrites the binding's
    /// whole label map from its labels, and deletes the binding once its deletion's workflows are
    /// done (kratix-sim's own rules, [`crate::sim::requests`]).
    pub request: DynamicObject,
    /// How long Kratix's workflows take for it.
    pub workflow: std::time::Duration,
}

/// A Resource Request of the world's Promise as a user creates it: its labels, and Kratix's
/// finalizers (which it adds at its first reconcile).
fn new_request(name: &str, labels: BTreeMap<String, String>, uid: String) -> DynamicObject {
    use crate::sim::requests::{request_kind, BINDING_CLEANUP_FINALIZER, DELETE_WORKFLOWS_FINALIZER};
    let mut rr = DynamicObject::new(name, &request_kind(PROMISE)).within(NAMESPACE);
    rr.metadata.labels = Some(labels);
    rr.metadata.uid = Some(uid);
    rr.metadata.finalizers = Some(vec![
        DELETE_WORKFLOWS_FINALIZER.into(),
        BINDING_CLEANUP_FINALIZER.into(),
    ]);
    rr
}

/// The version a new binding starts at in this world: v1, the latest revision (the plan upgrades
/// to v2 ahead of it), as Kratix's `pinned` strategy does.
const NEW_BINDING_VERSION: &str = "v1";

/// The API server's objects and the simulated clock.
#[derive(Clone, Debug)]
pub struct World {
    pub now: DateTime<Utc>,
    pub plan: UpgradePlan,
    /// The plan was deleted (its runs garbage-collected with it).
    pub plan_deleted: bool,
    /// In creation order; a run whose finalizer is released is gone.
    pub runs: Vec<UpgradeRun>,
    pub resources: Vec<Resource>,
    /// Resource Requests deleted, with their resource's workflow time: someone may create one
    /// again under its name.
    pub deleted_requests: Vec<(DynamicObject, std::time::Duration)>,
    /// The bindings as a lagging cache still holds them: before the last controller step's writes.
    pub lagging: Vec<ResourceBinding>,
    /// The runs as a lagging cache still holds them: before the last controller step.
    lagging_runs: Vec<UpgradeRun>,
    pub revisions: Vec<String>,
    /// Versions (of `revisions`) whose PromiseRevision is being deleted: Kratix's finalizer deletes
    /// the resources at them on each of its passes, and the revision goes once none is left.
    pub terminating: Vec<String>,
    pub freezes: Vec<Arc<UpgradeFreeze>>,
    /// An UpgradeBudget selecting the plan (spec §13.8), if the world has one.
    pub budget: Option<UpgradeBudget>,
    /// Snapshot ConfigMaps by run, with what they read back as (written once, so read once).
    pub snapshots: BTreeMap<String, Vec<SnapshotConfigMap>>,
    read_back: BTreeMap<String, SnapshotFact>,
    /// Kratix's `reconcileAfterFailure` interval; `None`: off.
    pub kratix_retry: Option<std::time::Duration>,
    /// When each run's last step asked to be woken.
    pub wakes: BTreeMap<String, DateTime<Utc>>,
    /// When the plan's last reconcile asked to be woken (its next trigger, a window's edge).
    plan_wake: Option<DateTime<Utc>>,
    /// [`Shape::missed_events`].
    pub missed_events: bool,
    /// Each run's resourceVersion when a reconcile last read it (its own watch event consumed).
    last_read: BTreeMap<String, Option<String>>,
    /// Kratix's HealthRecords (spec §2), as kratix-sim writes them.
    pub health: Vec<Arc<HealthRecord>>,
    /// What the signal gate's query finds (the plan's gate, when it has one).
    pub gate: Reading,
    /// The UpgradeApprovals that exist, by the run they name (`spec.upgradeRunRef`).
    pub approvals: Vec<(String, ApprovalFact)>,
    approvals_made: usize,
    pub tally: Tally,
    /// The two controller processes' memories (leader election: one leads, the other — a
    /// deposed leader not yet stopped — may still act on what its caches say).
    processes: [Process; 2],
    pub leader: usize,
    /// The process taking the current step.
    acting: usize,
    /// Whether the current step reads lagging caches.
    lagging_step: bool,
    /// Whether the current step's copy of its run is older than the API server's.
    stale_copy: bool,
    /// What lands between the current step's binding patches, and after how many.
    interrupt: Option<(usize, crate::simulation::history::Interrupt)>,
    /// The current step's binding patches that took their turn so far.
    sends: usize,
    /// The current step's sender withheld starts whose admission ended (the controller's
    /// `patch_bindings`): its other writes go on, and the run is looked at again at once.
    withheld: bool,
    /// The Events published about each run, in order.
    pub events: Vec<Published>,
    /// Runs (by UID) let go before their plan kept their counts (past `RECORD_GRACE`).
    pub released_unkept: BTreeSet<String>,
    next_version: u64,
    runs_made: usize,
}

/// An Event published about a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    pub run: String,
    pub reason: &'static str,
    /// Which occurrence it announces, where a note may repeat (a gate closing again): the
    /// engine's key; empty, the note says.
    pub key: String,
    pub note: String,
    /// Which controller process slot published it (a restart reuses the slot).
    pub by: usize,
}

/// What the controller process remembers (its `Ctx`'s [`RunMemory`]), lost when it crashes:
/// the next process starts from the API server's objects alone.
type Process = RunMemory;

/// What a history did: evidence that the simulation exercises what it checks.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub starts: u64,
    /// Reverts the controller created (`onFailure: Revert`).
    pub reverts_created: u64,
    /// Reverts people asked for (`kubectl upgradeplan revert`).
    pub reverts_asked: u64,
    /// Revert snapshots derived (each checked against the reverted run's record).
    pub revert_snapshots: u64,
    /// Starts of reverts (binding patches back to a recorded version).
    pub revert_starts: u64,
    pub reverts_completed: u64,
    pub reverts_failed: u64,
    /// Steps of runs under a budget, and those the budget held (`BudgetExhausted`).
    pub budgeted_steps: u64,
    pub budget_holds: u64,
    /// Status writes of progress alone put off (`lifecycle::only_progress`).
    pub progress_deferred: u64,
    pub retries: u64,
    /// Binding patches refused by their precondition (a stale cache's steps).
    pub conflicts: u64,
    pub crashes: u64,
    /// Steps cut short by a failed write (the process lives on).
    pub write_errors: u64,
    /// Steps taken by a deposed leader.
    pub deposed: u64,
    pub leader_changes: u64,
    /// Run writes (its own patch, its status) refused: the run changed since the step read it.
    pub stale_run_writes: u64,
    /// Resources failed on a `progressDeadline`.
    pub deadline_failures: u64,
    /// Runs let go before their plan kept their counts (`RECORD_GRACE` passed).
    pub released_unkept: u64,
    /// Runs deleted whose counts their plan's status keeps (`status.deletedRuns`).
    pub deleted_kept: u64,
    /// Steps whose sending a watch event interrupted, and the starts their sender then withheld.
    pub interrupted_sends: u64,
    pub starts_withheld: u64,
    /// HealthRecords Kratix's checks wrote.
    pub health_reports: u64,
    /// Statuses the plugin's run view was compared with.
    pub plugin_views: u64,
    /// Run steps taken while the plan differed from the run's frozen plan (each compared with
    /// the step from the unedited plan).
    pub edited_plan_steps: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Resource Requests whose deletion began (by a person, or a revision's clean-up), and the
    /// bindings Kratix then deleted.
    pub requests_deleted: u64,
    pub bindings_deleted: u64,
    /// New requests created, requests created again under their name, and of those, while a run
    /// was under way.
    pub requests_created: u64,
    pub requests_recreated: u64,
    pub recreated_mid_run: u64,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.starts += other.starts;
        self.reverts_created += other.reverts_created;
        self.reverts_asked += other.reverts_asked;
        self.revert_snapshots += other.revert_snapshots;
        self.budgeted_steps += other.budgeted_steps;
        self.budget_holds += other.budget_holds;
        self.progress_deferred += other.progress_deferred;
        self.revert_starts += other.revert_starts;
        self.reverts_completed += other.reverts_completed;
        self.reverts_failed += other.reverts_failed;
        self.retries += other.retries;
        self.conflicts += other.conflicts;
        self.crashes += other.crashes;
        self.write_errors += other.write_errors;
        self.deposed += other.deposed;
        self.leader_changes += other.leader_changes;
        self.stale_run_writes += other.stale_run_writes;
        self.deadline_failures += other.deadline_failures;
        self.interrupted_sends += other.interrupted_sends;
        self.starts_withheld += other.starts_withheld;
        self.health_reports += other.health_reports;
        self.plugin_views += other.plugin_views;
        self.edited_plan_steps += other.edited_plan_steps;
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
        self.requests_deleted += other.requests_deleted;
        self.bindings_deleted += other.bindings_deleted;
        self.requests_created += other.requests_created;
        self.requests_recreated += other.requests_recreated;
        self.recreated_mid_run += other.recreated_mid_run;
        self.released_unkept += other.released_unkept;
        self.deleted_kept += other.deleted_kept;
    }
}

/// The world's PromiseRevisions (of [`PROMISE`]): `revisions`, of which `terminating` are being
/// deleted.
pub fn revision_facts(revisions: &[String], terminating: &[String]) -> Vec<upgradeplan::api::kratix::RevisionFact> {
    revisions
        .iter()
        .map(|v| upgradeplan::api::kratix::RevisionFact {
            version: v.clone(),
            name: format!("{PROMISE}-{v}"),
            deleting: terminating.contains(v),
        })
        .collect()
}

/// The controller's view of the caches for one step.
struct View {
    bindings: Vec<ResourceBinding>,
    revisions: Vec<String>,
    terminating: Vec<String>,
    freezes: Vec<Arc<UpgradeFreeze>>,
    health: Vec<Arc<HealthRecord>>,
}

impl Cluster for View {
    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<dyn BindingFacts>> {
        self.bindings
            .iter()
            .find(|b| b.namespace().as_deref() == Some(namespace) && b.name_any() == name)
            .map(cached)
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        self.bindings
            .iter()
            .filter(|b| b.promise() == promise)
            .map(cached)
            .collect()
    }
    fn revisions_of(&self, promise: &str) -> Vec<upgradeplan::api::kratix::RevisionFact> {
        let facts = revision_facts(&self.revisions, &self.terminating);
        facts.into_iter().filter(|_| promise == PROMISE).collect()
    }
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        let of_promise = self.health.iter().filter(|r| r.data.promise_ref.name == promise);
        of_promise.cloned().collect()
    }
    fn freezes(&self) -> Vec<Arc<UpgradeFreeze>> {
        self.freezes.to_vec()
    }
}

fn cached(b: &ResourceBinding) -> Arc<dyn BindingFacts> {
    Arc::new(CachedBinding::new(b, &mut Interner::default()))
}

/// The knobs a history's world is made with (drawn from its seed).
#[derive(Clone, Debug)]
pub struct Shape {
    /// Bindings per group (`dev`, then `prod`).
    pub sizes: [usize; 2],
    /// Each group's `maxConcurrent`.
    pub limits: [i32; 2],
    /// Each group's `maxFailures`.
    pub max_failures: [i32; 2],
    pub workflows: Vec<u32>,
    pub kratix_retry_minutes: Option<u32>,
    /// A signal gate over every group (spec §13.3).
    pub gate: bool,
    /// `prod` requires an UpgradeApproval (spec §13.4).
    pub approval: bool,
    /// `dev`'s `soakDuration`, in seconds.
    pub soak_seconds: Option<u32>,
    /// A group (0 `dev`, 1 `prod`) whose upgrades are verified by Kratix's HealthRecords, and its
    /// `healthCheck.timeout` in seconds (spec §13.2).
    pub health_check: Option<(usize, u32)>,
    /// What each resource's health checks report after an upgrade (kratix-sim's annotations).
    pub health: Vec<Option<Health>>,
    /// The plan's `repeatSchedule`, every this many minutes (`*/N * * * *`, or `0 * * * *` for
    /// 60), and an index into [`ZONES`] for its `timeZone`.
    pub schedule: Option<(u32, usize)>,
    /// Each group's upgrade window, if it has one (spec §7).
    pub windows: [Option<Window>; 2],
    /// Watch events about other objects than the run itself (bindings, approvals, freezes, its
    /// plan) are missed once the history's actions are over: a run is woken only by its own
    /// changes and its requeues.
    pub missed_events: bool,
    /// Each group's `onFailure: Revert` (spec §13.7).
    pub on_failure_revert: [bool; 2],
    /// An UpgradeBudget's `maxInFlight` over the plan (spec §13.8).
    pub budget: Option<usize>,
    /// Each group's `progressDeadline`, in minutes (spec §13.1).
    pub progress_deadline: [Option<u32>; 2],
}

/// A group's upgrade window: hourly cron openings in a zone, a duration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub allow: bool,
    /// Opens at this minute of every hour (`M * * * *`), or every `every` minutes (`*/N`).
    pub minute: u32,
    pub every: Option<u32>,
    pub minutes: u32,
    /// An index into [`ZONES`].
    pub zone: usize,
}

/// Zones whose offsets are not whole hours, so that a window's zone matters to hourly openings.
pub const ZONES: [&str; 3] = ["UTC", "Asia/Kolkata", "America/St_Johns"];

impl Window {
    /// As the plan writes it (`resourceUpgradeWindows[]`).
    pub fn written(&self) -> Value {
        let minute = match self.every {
            Some(n) => format!("*/{n}"),
            None => self.minute.to_string(),
        };
        json!({"kind": if self.allow { "allow" } else { "deny" }, "schedule": format!("{minute} * * * *"),
               "duration": format!("{}m", self.minutes), "timeZone": ZONES[self.zone % ZONES.len()]})
    }
}

/// What a resource's health checks report after its upgrade succeeds, as kratix-sim's
/// annotations say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Health {
    /// An index into [`crate::sim::HEALTH_STATES`].
    pub state: usize,
    /// How many records (the first says `state`, the others `healthy`).
    pub records: usize,
    /// Seconds between the upgrade's success and the records.
    pub delay: u32,
}

impl Health {
    /// The binding annotations that make kratix-sim report this.
    fn annotate(&self, b: &mut ResourceBinding) {
        let a = b.annotations_mut();
        let state = crate::sim::HEALTH_STATES[self.state % crate::sim::HEALTH_STATES.len()];
        a.insert(crate::sim::HEALTH_ANNOTATION.into(), state.into());
        a.insert(crate::sim::HEALTH_RECORDS_ANNOTATION.into(), self.records.to_string());
        a.insert(crate::sim::HEALTH_DELAY_ANNOTATION.into(), format!("{}s", self.delay));
    }
}

pub fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

impl World {
    pub fn new(shape: &Shape) -> World {
        let now = utc("2026-06-06T10:00:00Z");
        let group = |name: &str, i: usize| {
            let mut g = json!({"name": name, "selectors": {"matchLabels": {"env": name}},
                   "maxConcurrent": shape.limits[i], "maxFailures": shape.max_failures[i]});
            if let (0, Some(soak)) = (i, shape.soak_seconds) {
                g["soakDuration"] = json!(format!("{soak}s"));
            }
            if i == 1 && shape.approval {
                g["requireApproval"] = json!(true);
            }
            if let Some(w) = shape.windows[i] {
                g["resourceUpgradeWindows"] = json!([w.written()]);
            }
            if let Some((_, timeout)) = shape.health_check.filter(|(group, _)| *group == i) {
                g["healthCheck"] = json!({"timeout": format!("{timeout}s")});
            }
            if shape.on_failure_revert[i] {
                g["onFailure"] = json!("Revert");
            }
            if let Some(minutes) = shape.progress_deadline[i] {
                g["progressDeadline"] = json!(format!("{minutes}m"));
            }
            g
        };
        let gates = if shape.gate {
            json!([{"name": GATE, "prometheus": {"query": "ALERTS{severity=\"critical\"}"}}])
        } else {
            json!(null)
        };
        let policy = shape.schedule.map(|(every, zone)| {
            let cron = if every >= 60 {
                "0 * * * *".to_string()
            } else {
                format!("*/{every} * * * *")
            };
            json!({"repeatSchedule": cron, "timeZone": ZONES[zone % ZONES.len()]})
        });
        let mut plan: UpgradePlan = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
            "metadata": {"name": PLAN, "uid": "plan-uid", "generation": 1, "resourceVersion": "1"},
            "spec": {"promiseRef": {"name": PROMISE}, "upgradePath": {"from": ["v1"], "to": "v2"},
                     "rolloutGroups": [group("dev", 0), group("prod", 1)], "gates": gates,
                     "upgradeExecutionPolicy": policy}
        }))
        .unwrap_or_else(|e| panic!("the simulation's plan: {e}"));
        plan.metadata.creation_timestamp = Some(Time(to_jiff(now)));
        let mut resources = Vec::new();
        for (g, env) in ["dev", "prod"].iter().enumerate() {
            for i in 0..shape.sizes[g] {
                let n = resources.len();
                let name = format!("{env}-{i}");
                let request = new_request(
                    &name,
                    [("env".to_string(), env.to_string())].into(),
                    format!("{name}-uid"),
                );
                // Kratix made the binding from the request, and applied v1.
                let mut binding = crate::sim::requests::desired_binding(&request, PROMISE, None, NEW_BINDING_VERSION)
                    .unwrap_or_else(|| panic!("Kratix makes a binding for request {name}"));
                binding.metadata.resource_version = Some("1".into());
                binding.metadata.uid = Some(format!("{}-uid", binding.name_any()));
                binding.status = Some(upgradeplan::api::kratix::ResourceBindingStatus {
                    last_applied_version: "v1".into(),
                    ..Default::default()
                });
                let seconds = shape.workflows.get(n).copied().unwrap_or(0);
                if let Some(Some(health)) = shape.health.get(n) {
                    health.annotate(&mut binding);
                }
                resources.push(Resource {
                    request,
                    binding,
                    workflow: std::time::Duration::from_secs(u64::from(seconds)),
                });
            }
        }
        let lagging = resources.iter().map(|r| r.binding.clone()).collect();
        World {
            now,
            plan,
            plan_deleted: false,
            runs: Vec::new(),
            resources,
            deleted_requests: Vec::new(),
            lagging,
            lagging_runs: Vec::new(),
            sends: 0,
            revisions: vec!["v1".into(), "v2".into()],
            terminating: Vec::new(),
            freezes: Vec::new(),
            budget: shape.budget.map(|max| {
                UpgradeBudget::new(
                    "sim-budget",
                    upgradeplan::api::UpgradeBudgetSpec {
                        max_in_flight: max as i64,
                        ..Default::default()
                    },
                )
            }),
            snapshots: BTreeMap::new(),
            read_back: BTreeMap::new(),
            kratix_retry: shape
                .kratix_retry_minutes
                .map(|m| std::time::Duration::from_secs(u64::from(m) * 60)),
            wakes: BTreeMap::new(),
            plan_wake: None,
            missed_events: shape.missed_events,
            last_read: BTreeMap::new(),
            health: Vec::new(),
            gate: Reading::Open,
            approvals: Vec::new(),
            approvals_made: 0,
            tally: Tally::default(),
            processes: Default::default(),
            leader: 0,
            acting: 0,
            lagging_step: false,
            stale_copy: false,
            interrupt: None,
            withheld: false,
            events: Vec::new(),
            released_unkept: BTreeSet::new(),
            next_version: 2,
            runs_made: 0,
        }
    }

    /// The world's budget as `run`'s step sees it over `bindings` (spec §13.8), as the controller
    /// gathers it (no starts are in flight between two steps here).
    /// The facts of the budgets `selecting` for `run`, from the bindings as they are.
    fn budget_facts(&self, run: &UpgradeRun, selecting: &[&UpgradeBudget]) -> Vec<BudgetFacts> {
        let runs: Vec<&UpgradeRun> = self.runs.iter().collect();
        let name = run.name_any();
        let bindings = self.bindings();
        let working = upgrade_budget::in_flight_by_run(bindings.iter().map(|b| b as &dyn BindingFacts));
        // The plans the caches hold: none once it is deleted.
        let plans: Vec<&UpgradePlan> = (!self.plan_deleted).then_some(&self.plan).into_iter().collect();
        let budget_runs = upgrade_budget::runs_under(
            selecting,
            &plans,
            &runs,
            |run| working.get(run).copied().unwrap_or(0),
            |_| 0,
        );
        selecting
            .iter()
            .enumerate()
            .map(|(i, budget)| {
                let others: Vec<upgrade_budget::BudgetRun> = budget_runs
                    .iter()
                    .filter(|(selected, r)| selected[i] && r.name != name)
                    .map(|(_, r)| r.clone())
                    .collect();
                if trace() {
                    eprintln!("    budget facts for {name}: {others:?}");
                }
                BudgetFacts {
                    name: budget.name_any(),
                    max: upgrade_budget::max_in_flight(budget),
                    others,
                    sent: 0,
                }
            })
            .collect()
    }

    /// Whether run `r` is woken when watch events about other objects are missed: its own object
    /// changed since a reconcile last read it, or its requeue is due.
    pub fn woken(&self, r: &UpgradeRun) -> bool {
        let name = r.name_any();
        let due = self.wakes.get(&name).is_some_and(|t| *t <= self.now);
        due || self.last_read.get(&name) != Some(&r.metadata.resource_version)
    }

    /// How many writes the API server has taken so far (each moves a resourceVersion on).
    pub fn writes(&self) -> u64 {
        self.next_version
    }

    fn version(&mut self) -> Option<String> {
        self.next_version += 1;
        Some(self.next_version.to_string())
    }

    pub fn bindings(&self) -> Vec<ResourceBinding> {
        self.resources.iter().map(|r| r.binding.clone()).collect()
    }

    /// What a controller finds of `run`'s snapshot.
    pub fn snapshot_of(&self, run: &UpgradeRun) -> SnapshotFact {
        let name = run.name_any();
        if let Some(found) = self.read_back.get(&name) {
            return found.clone();
        }
        match run.status.as_ref().and_then(|s| s.resource_list_refs.first()) {
            None => SnapshotFact::Absent,
            Some(recorded) => SnapshotFact::Lost {
                config_map: recorded.name.clone(),
            },
        }
    }

    /// The run named `name` a revert undoes (spec §13.7), with its snapshot read from the
    /// ConfigMaps its status names, as the controller reads them (`None`: no run of that name).
    fn reverted_named(&self, name: &str) -> Option<(Arc<UpgradeRun>, SnapshotFact)> {
        self.runs.iter().find(|r| r.name_any() == name).map(|r| {
            let recorded = r.status.as_ref().is_some_and(|s| !s.resource_list_refs.is_empty());
            let fact = match recorded {
                true => self.snapshot_of(r),
                false => SnapshotFact::Absent,
            };
            (Arc::new(r.clone()), fact)
        })
    }

    /// The snapshot ConfigMaps of `run` as a controller reads them back.
    fn read(shards: &[SnapshotConfigMap]) -> SnapshotFact {
        match read_frozen(shards.iter().map(|(n, d)| (n.as_str(), d))) {
            Ok(frozen) => SnapshotFact::Found {
                frozen: Arc::new(frozen),
                refs: shards
                    .iter()
                    .map(|(n, d)| upgradeplan::api::ResourceListRef {
                        name: n.clone(),
                        sha256: Some(digest(d)),
                    })
                    .collect(),
            },
            Err(_) => SnapshotFact::Lost {
                config_map: shards.first().map(|s| s.0.clone()).unwrap_or_default(),
            },
        }
    }

    pub fn frozen_of(&self, run: &str) -> Option<Arc<Frozen>> {
        match self.read_back.get(run)? {
            SnapshotFact::Found { frozen, .. } => Some(frozen.clone()),
            _ => None,
        }
    }

    /// A person (or a scheduler) creates a run of the plan.
    pub fn create_run(&mut self, preview: bool) {
        self.runs_made += 1;
        let name = format!("{PLAN}-{}", self.runs_made);
        let mut run: UpgradeRun = match serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
            "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1},
            "spec": {"upgradePlanRef": {"name": PLAN}, "suspend": preview}
        })) {
            Ok(run) => run,
            Err(e) => panic!("the simulation's run: {e}"),
        };
        run.metadata.creation_timestamp = Some(Time(to_jiff(self.now)));
        run.metadata.resource_version = self.version();
        self.runs.push(run);
    }

    /// A person reverts run `pick` (`kubectl upgradeplan revert`), as `p-N`.
    fn create_revert(&mut self, pick: usize, resources: usize, respect_policy: bool, preview: bool) {
        use upgradeplan::api::RevertResources;
        let Some(i) = self.run_index(pick) else {
            return;
        };
        let of = self.runs[i].name_any();
        self.runs_made += 1;
        let name = format!("{PLAN}-{}", self.runs_made);
        let which = [RevertResources::Upgraded, RevertResources::Failed, RevertResources::All][resources % 3];
        let mut run = new_run(
            &self.plan,
            NewRun::Revert {
                name: Some(name.clone()),
                of: upgradeplan::api::RevertOf {
                    name: of,
                    resources: which,
                },
                respect_policy,
                preview,
            },
        );
        run.metadata.uid = Some(format!("{name}-uid"));
        run.metadata.generation = Some(1);
        run.metadata.creation_timestamp = Some(Time(to_jiff(self.now)));
        run.metadata.resource_version = self.version();
        self.runs.push(run);
        self.tally.reverts_asked += 1;
    }

    /// The controller's view of the caches, with `bindings` as they show them.
    fn view(&self, bindings: Vec<ResourceBinding>) -> View {
        View {
            bindings,
            revisions: self.revisions.clone(),
            terminating: self.terminating.clone(),
            freezes: self.freezes.clone(),
            health: self.health.clone(),
        }
    }

    fn run_index(&self, pick: usize) -> Option<usize> {
        (!self.runs.is_empty()).then(|| pick % self.runs.len())
    }

    /// A watch event that lands while run `name`'s step is sending its binding patches.
    fn interrupt_sending(&mut self, name: &str, by: crate::simulation::history::Interrupt) {
        use crate::simulation::history::Interrupt;
        let Some(i) = self.runs.iter().position(|r| r.name_any() == name) else {
            return;
        };
        self.tally.interrupted_sends += 1;
        match by {
            Interrupt::Cancel => self.user(&UserAction::Cancel { run: i }),
            Interrupt::Suspend => self.user(&UserAction::Suspend { run: i, suspend: true }),
            Interrupt::Freeze => self.user(&UserAction::Freeze { minutes: 30 }),
            Interrupt::Supersede => {
                // A new run, and what its first pass asks of this one (spec §5.2).
                self.create_run(false);
                let newer = format!("{PLAN}-{}", self.runs_made);
                let version = self.version();
                let r = &mut self.runs[i];
                if upgradeplan::engine::write::RunPatch::supersede(name, &newer)
                    .apply(r)
                    .is_ok()
                {
                    r.metadata.resource_version = version;
                }
            }
        }
    }

    /// A person's or the platform's action.
    pub fn user(&mut self, action: &UserAction) {
        match *action {
            UserAction::CreateRun { preview } => self.create_run(preview),
            UserAction::Revert {
                run,
                resources,
                respect_policy,
                preview,
            } => self.create_revert(run, resources, respect_policy, preview),
            UserAction::Suspend { run, suspend } => self.edit_run(run, |r| r.spec.suspend = suspend),
            UserAction::Cancel { run } => self.edit_run(run, |r| r.spec.cancel = true),
            UserAction::DeleteRun { run } => {
                let (now, version) = (self.now, self.version());
                if let Some(i) = self.run_index(run) {
                    let r = &mut self.runs[i];
                    if r.metadata.deletion_timestamp.is_none() {
                        r.metadata.deletion_timestamp = Some(Time(to_jiff(now)));
                        r.metadata.resource_version = version;
                    }
                }
            }
            UserAction::EditWindow { group, window } => {
                let groups = &mut self.plan.spec.rollout_groups;
                let g = group % groups.len();
                let written = window.map(|w| serde_json::from_value(w.written()));
                groups[g].resource_upgrade_windows = match written {
                    Some(Ok(w)) => Some(vec![w]),
                    _ => None,
                };
                self.plan.metadata.generation = self.plan.metadata.generation.map(|g| g + 1);
            }
            UserAction::EditOnFailure { group } => {
                let groups = &mut self.plan.spec.rollout_groups;
                let g = group % groups.len();
                groups[g].on_failure = match groups[g].on_failure {
                    Some(upgradeplan::api::OnFailure::Revert) => None,
                    _ => Some(upgradeplan::api::OnFailure::Revert),
                };
                self.plan.metadata.generation = self.plan.metadata.generation.map(|g| g + 1);
            }
            UserAction::PinVersion { binding, back: false } => {
                let version = self.version();
                if let Some(r) = self.resource_mut(binding) {
                    r.binding.spec.version = "v3".into();
                    r.binding.metadata.resource_version = version;
                }
            }
            UserAction::PinVersion { binding, back: true } => {
                let pinned: Vec<usize> = (0..self.resources.len())
                    .filter(|&i| self.resources[i].binding.spec.version == "v3")
                    .collect();
                if let Some(&i) = pinned.get(binding % pinned.len().max(1)) {
                    let version = self.version();
                    let b = &mut self.resources[i].binding;
                    b.spec.version = b.last_applied_version().to_string();
                    b.metadata.resource_version = version;
                }
            }
            UserAction::EditLimit { group, limit } => {
                let groups = &mut self.plan.spec.rollout_groups;
                let g = group % groups.len();
                groups[g].max_concurrent = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(limit));
                self.plan.metadata.generation = self.plan.metadata.generation.map(|g| g + 1);
            }
            UserAction::Health { binding, health } => {
                let version = self.version();
                if let Some(r) = self.resource_mut(binding) {
                    let a = r.binding.annotations_mut();
                    for key in [
                        crate::sim::HEALTH_ANNOTATION,
                        crate::sim::HEALTH_RECORDS_ANNOTATION,
                        crate::sim::HEALTH_DELAY_ANNOTATION,
                    ] {
                        a.remove(key);
                    }
                    if let Some(health) = health {
                        health.annotate(&mut r.binding);
                    }
                    r.binding.metadata.resource_version = version;
                }
            }
            UserAction::RequestReconciled { binding, relabel } => {
                let version = self.version();
                if let Some(r) = self.resource_mut(binding) {
                    if relabel {
                        let labels = r.request.labels_mut();
                        let other = if labels.get("env").map(String::as_str) == Some("dev") {
                            "prod"
                        } else {
                            "dev"
                        };
                        labels.insert("env".into(), other.into());
                    }
                    // Kratix rewrites the binding from the request (kratix-sim's rule): the whole
                    // label map, less its one-shot labels; a retry asked on the binding is kept.
                    if r.request.metadata.deletion_timestamp.is_none() {
                        if let Some(b) = crate::sim::requests::desired_binding(
                            &r.request,
                            PROMISE,
                            Some(&r.binding),
                            NEW_BINDING_VERSION,
                        ) {
                            r.binding = b;
                            r.binding.metadata.resource_version = version;
                        }
                    }
                }
            }
            UserAction::DeleteRequest { binding } => {
                let now = Time(to_jiff(self.now));
                if let Some(r) = self.resource_mut(binding) {
                    if r.request.metadata.deletion_timestamp.is_none() {
                        r.request.metadata.deletion_timestamp = Some(now);
                        self.tally.requests_deleted += 1;
                    }
                }
            }
            UserAction::RecreateRequest { request } => self.recreate_request(request),
            UserAction::CreateRequest { env } => {
                let env = ["dev", "prod"][env % 2];
                let name = format!("new-{env}-{}", self.next_version);
                let request = new_request(
                    &name,
                    [("env".to_string(), env.to_string())].into(),
                    format!("{name}-uid"),
                );
                self.tally.requests_created += 1;
                self.create_resource(request, std::time::Duration::from_secs(60));
            }
            UserAction::FailNext { binding } => self.annotate(binding, Some("v2")),
            UserAction::Fix { binding } => self.annotate(binding, None),
            UserAction::RetryLabel { binding } => {
                let version = self.version();
                if let Some(r) = self.resource_mut(binding) {
                    r.binding.labels_mut().insert(
                        upgradeplan::api::kratix::MANUAL_RECONCILIATION_LABEL.into(),
                        "true".into(),
                    );
                    r.binding.metadata.resource_version = version;
                }
            }
            UserAction::Freeze { minutes } => {
                let (start, end) = (self.now, self.now + Duration::minutes(i64::from(minutes)));
                let local = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M").to_string();
                let freeze: Result<UpgradeFreeze, _> = serde_json::from_value(json!({
                    "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeFreeze",
                    "metadata": {"name": format!("freeze-{}", self.freezes.len())},
                    "spec": {"reason": "simulated", "planSelector": {"matchLabels": {}},
                             "periods": [{"start": local(start), "end": local(end), "timeZone": "UTC"}]}
                }));
                if let Ok(f) = freeze {
                    self.freezes.push(Arc::new(f));
                }
            }
            UserAction::EndFreezes => self.freezes.clear(),
            UserAction::EditPlan { edit } => self.edit_plan(edit),
            UserAction::DeletePlan => {
                // The garbage collector deletes what the plan owns (background propagation).
                self.plan_deleted = true;
                self.plan_wake = None;
                let uid = self.plan.metadata.uid.clone();
                let now = Time(to_jiff(self.now));
                for r in &mut self.runs {
                    let owned = r.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref());
                    if owned && r.metadata.deletion_timestamp.is_none() {
                        r.metadata.deletion_timestamp = Some(now.clone());
                        self.next_version += 1;
                        r.metadata.resource_version = Some(self.next_version.to_string());
                    }
                }
            }
            UserAction::SuspendPlan { suspend } => {
                self.plan.spec.suspend = suspend;
                self.plan.metadata.generation = self.plan.metadata.generation.map(|g| g + 1);
            }
            UserAction::LeaderChange => {
                // The new leader starts remembering nothing; the old one lives on, deposed,
                // until it notices (its steps are Fault::Deposed).
                self.leader = 1 - self.leader;
                self.processes[self.leader] = Process::default();
                self.last_read.clear();
                self.tally.leader_changes += 1;
            }
            UserAction::Gate { firing, reachable } => {
                self.gate = match (reachable, firing) {
                    (false, _) => Reading::Error("Prometheus cannot be reached".into()),
                    (true, true) => Reading::Firing {
                        series: 1,
                        first: "ALERTS{severity=\"critical\"}".into(),
                    },
                    (true, false) => Reading::Open,
                }
            }
            UserAction::Approve { run, group } => {
                if let Some(i) = self.run_index(run) {
                    self.approvals_made += 1;
                    let group = ["dev", "prod"][group % 2].to_string();
                    let run = self.runs[i].name_any();
                    let fact = ApprovalFact {
                        name: format!("{run}-{group}-{}", self.approvals_made),
                        group,
                        created: self.now,
                        approver: Some("someone".into()),
                        comment: None,
                        owners: Vec::new(),
                        resource_version: None,
                    };
                    self.approvals.push((run, fact));
                }
            }
            UserAction::Revoke { approval } => {
                if !self.approvals.is_empty() {
                    let i = approval % self.approvals.len();
                    self.approvals.remove(i);
                }
            }
            UserAction::DeleteTargetRevision => self.delete_revision("v2"),
            UserAction::DeleteFromRevision => self.delete_revision("v1"),
        }
    }

    /// Someone edits what a run's snapshot froze (spec §14.2): the Promise, the target, the
    /// groups' order, selectors and number.
    fn edit_plan(&mut self, edit: usize) {
        let spec = &mut self.plan.spec;
        match edit % 5 {
            0 => {
                let other = if spec.promise_ref.name == PROMISE {
                    "postgres"
                } else {
                    PROMISE
                };
                spec.promise_ref.name = other.into();
            }
            1 => spec.upgrade_path.to = if spec.upgrade_path.to == "v2" { "v3" } else { "v2" }.into(),
            2 => spec.rollout_groups.reverse(),
            3 => {
                // The first group now selects the other environment's resources too.
                if let Some(s) = spec.rollout_groups.first_mut().and_then(|g| g.selectors.as_mut()) {
                    s.match_labels = None;
                    s.match_all = Some(true);
                }
            }
            _ => match spec.rollout_groups.len() {
                1 => {}
                _ => {
                    spec.rollout_groups.pop();
                }
            },
        }
        self.plan.metadata.generation = self.plan.metadata.generation.map(|g| g + 1);
    }

    /// The PromiseRevision of `version` is deleted: it stays, terminating, while Kratix deletes
    /// the resources at it ([`World::revision_cleanup`]).
    fn delete_revision(&mut self, version: &str) {
        if self.revisions.iter().any(|v| v == version) && !self.terminating.iter().any(|v| v == version) {
            self.terminating.push(version.to_string());
        }
    }

    /// Kratix's PromiseRevision reconcile of each revision being deleted
    /// ([`crate::sim::decide_revision`], as kratix-sim `--revision-cleanup` does): on every pass it
    /// deletes the resources whose binding asks for its version, and drops its finalizer once none
    /// is left; the revision is gone then.
    pub fn revision_cleanup(&mut self) {
        for version in self.terminating.clone() {
            let deleted: Result<upgradeplan::api::kratix::PromiseRevision, _> = serde_json::from_value(json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
                "metadata": {"name": format!("{PROMISE}-{version}"), "deletionTimestamp": self.now.to_rfc3339(),
                             "finalizers": [crate::sim::RESOURCE_CLEANUP_FINALIZER]},
                "spec": {"promiseRef": {"name": PROMISE}, "version": version, "promiseSpec": {}}
            }));
            let Ok(revision) = deleted else {
                continue;
            };
            let bindings: Vec<Arc<ResourceBinding>> =
                self.resources.iter().map(|r| Arc::new(r.binding.clone())).collect();
            match crate::sim::decide_revision(&revision, &bindings) {
                crate::sim::RevisionStep::DeleteResources(at_version) => {
                    // Kratix deletes their requests; the bindings go once the requests' delete
                    // workflows are done ([`World::kratix`]).
                    let now = Time(to_jiff(self.now));
                    for r in &mut self.resources {
                        let at = |(ns, name, _): &(String, String, String)| {
                            r.binding.namespace().as_deref() == Some(ns.as_str()) && r.binding.name_any() == *name
                        };
                        if at_version.iter().any(at) && r.request.metadata.deletion_timestamp.is_none() {
                            r.request.metadata.deletion_timestamp = Some(now.clone());
                            self.tally.requests_deleted += 1;
                        }
                    }
                }
                crate::sim::RevisionStep::RemoveFinalizer => {
                    self.terminating.retain(|v| *v != version);
                    self.revisions.retain(|v| *v != version);
                    self.version();
                }
                crate::sim::RevisionStep::Idle | crate::sim::RevisionStep::AddFinalizer => {}
            }
        }
    }

    fn edit_run(&mut self, pick: usize, edit: impl FnOnce(&mut UpgradeRun)) {
        let version = self.version();
        if let Some(i) = self.run_index(pick) {
            let r = &mut self.runs[i];
            edit(r);
            r.metadata.generation = r.metadata.generation.map(|g| g + 1);
            r.metadata.resource_version = version;
        }
    }

    fn resource_mut(&mut self, pick: usize) -> Option<&mut Resource> {
        let n = self.resources.len();
        (n > 0).then(move || &mut self.resources[pick % n])
    }

    fn annotate(&mut self, pick: usize, fail: Option<&str>) {
        let version = self.version();
        if let Some(r) = self.resource_mut(pick) {
            let annotations = r.binding.annotations_mut();
            match fail {
                Some(v) => annotations.insert(crate::sim::FAIL_VERSION_ANNOTATION.into(), v.into()),
                None => annotations.remove(crate::sim::FAIL_VERSION_ANNOTATION),
            };
            r.binding.metadata.resource_version = version;
        }
    }

    /// What Kratix does next for resource `r` (kratix-sim's decision).
    fn kratix_step(&self, r: &Resource) -> crate::sim::Step {
        let target = r.binding.spec.version.as_str();
        let exists = self.revisions.iter().any(|v| v == target);
        crate::sim::decide(
            &r.binding,
            Some(target),
            exists,
            (r.workflow, self.kratix_retry),
            self.now,
        )
    }

    /// Kratix reconciles one resource: its request's deletion, while one is under way (the
    /// binding stays, unmarked, and no workflow of it runs), else its binding.
    pub fn kratix(&mut self, pick: usize) {
        let n = self.resources.len();
        if n == 0 {
            return;
        }
        let now = self.now;
        if self.resources[pick % n].request.metadata.deletion_timestamp.is_some() {
            self.request_deletion(pick % n);
            return;
        }
        let step = self.kratix_step(&self.resources[pick % n]);
        let w = crate::sim::writes(&step, now);
        if !w.remove_retry_label && w.status.is_none() {
            self.report_health(pick % n);
            return;
        }
        let version = self.version();
        let b = &mut self.resources[pick % n].binding;
        if w.remove_retry_label {
            b.labels_mut()
                .remove(upgradeplan::api::kratix::MANUAL_RECONCILIATION_LABEL);
        }
        if let Some(status) = w.status {
            let mut current = serde_json::to_value(&b.status).unwrap_or(Value::Null);
            merge(&mut current, &status);
            match serde_json::from_value(current) {
                Ok(status) => b.status = status,
                Err(e) => panic!("Kratix's status patch does not fit a binding: {e}"),
            }
        }
        b.metadata.resource_version = version;
    }

    /// Kratix's reconcile of resource `i`'s request being deleted ([`crate::sim::requests::decide_deletion`]):
    /// its delete workflows run for the resource's workflow time; then the binding is deleted and
    /// the request goes (kept aside: someone may create it again).
    fn request_deletion(&mut self, i: usize) {
        use crate::sim::requests::{decide_deletion, DeletionStep, DELETE_WORKFLOWS_FINALIZER};
        let r = &mut self.resources[i];
        match decide_deletion(&r.request, r.workflow, self.now) {
            DeletionStep::WorkflowsUntil(_) => {}
            DeletionStep::WorkflowsDone => {
                r.request.finalizers_mut().retain(|f| f != DELETE_WORKFLOWS_FINALIZER);
            }
            DeletionStep::DeleteBinding | DeletionStep::Gone => {
                let gone = self.resources.remove(i);
                self.deleted_requests.push((gone.request, gone.workflow));
                self.tally.bindings_deleted += 1;
                self.version();
            }
        }
    }

    /// A request deleted earlier (the `pick`th) is created again under its name: another object,
    /// whose binding Kratix makes under the same name, at the version a new binding starts at,
    /// not yet applied.
    fn recreate_request(&mut self, pick: usize) {
        if self.deleted_requests.is_empty() {
            return;
        }
        let (old, workflow) = self.deleted_requests.remove(pick % self.deleted_requests.len());
        let name = old.name_any();
        let uid = format!("{name}-uid-{}", self.next_version);
        let request = new_request(&name, old.labels().clone(), uid);
        self.tally.requests_recreated += 1;
        let under_way = |r: &UpgradeRun| r.status.as_ref().is_some_and(|s| !s.state.is_terminal());
        if self.runs.iter().any(under_way) {
            self.tally.recreated_mid_run += 1;
        }
        self.create_resource(request, workflow);
    }

    /// Kratix makes the binding of a request just created (kratix-sim's rules): its name, its
    /// labels, at the version a new binding starts at, nothing applied yet; another object than
    /// any binding of that name before it.
    fn create_resource(&mut self, request: DynamicObject, workflow: std::time::Duration) {
        let version = self.version();
        let Some(mut binding) = crate::sim::requests::desired_binding(&request, PROMISE, None, NEW_BINDING_VERSION)
        else {
            return;
        };
        binding.metadata.uid = request.metadata.uid.clone();
        binding.metadata.resource_version = version;
        binding.metadata.creation_timestamp = Some(Time(to_jiff(self.now)));
        self.resources.push(Resource {
            binding,
            request,
            workflow,
        });
    }

    /// Kratix's health checks of resource `i` report, when kratix-sim's [`crate::sim::decide_health`]
    /// says they do now.
    fn report_health(&mut self, i: usize) {
        let b = &self.resources[i].binding;
        let name = b.name_any();
        let first = self
            .health
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(name.as_str()));
        let crate::sim::HealthStep::Write { state, count } =
            crate::sim::decide_health(b, first.map(|r| &**r), self.now)
        else {
            return;
        };
        let resource = b.spec.resource_ref.name.clone();
        for k in 0..count {
            let record_name = crate::sim::health_record_name(&name, k);
            let said = if k == 0 { state.as_str() } else { "healthy" };
            let record: Result<HealthRecord, _> = serde_json::from_value(json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "HealthRecord",
                "metadata": {"name": record_name, "namespace": NAMESPACE},
                "data": {"promiseRef": {"name": PROMISE}, "resourceRef": {"name": resource, "namespace": NAMESPACE},
                         "state": said, "lastRun": self.now.timestamp()}
            }));
            let Ok(record) = record else {
                continue;
            };
            self.health
                .retain(|r| r.metadata.name.as_deref() != Some(record_name.as_str()));
            self.health.push(Arc::new(record));
            self.tally.health_reports += 1;
            self.version();
        }
    }

    /// The next instant something is due: a Kratix completion or retry, a health check's report,
    /// a run's wake-up, a freeze's end.
    pub fn next_due(&self) -> Option<DateTime<Utc>> {
        let kratix = self.resources.iter().filter_map(|r| match self.kratix_step(r) {
            crate::sim::Step::FinishAt { at, .. }
            | crate::sim::Step::RetryAt { at }
            | crate::sim::Step::DeployAt { at } => Some(at),
            _ => None,
        });
        let health = self.resources.iter().filter_map(|r| {
            let name = r.binding.name_any();
            let first = self
                .health
                .iter()
                .find(|h| h.metadata.name.as_deref() == Some(name.as_str()));
            match crate::sim::decide_health(&r.binding, first.map(|h| &**h), self.now) {
                crate::sim::HealthStep::At(at) => Some(at),
                _ => None,
            }
        });
        let deletions = self.resources.iter().filter_map(|r| {
            match crate::sim::requests::decide_deletion(&r.request, r.workflow, self.now) {
                crate::sim::requests::DeletionStep::WorkflowsUntil(at)
                    if r.request.metadata.deletion_timestamp.is_some() =>
                {
                    Some(at)
                }
                _ => None,
            }
        });
        let plans = [Arc::new(self.plan.clone())];
        let freezes = self
            .freezes
            .iter()
            .filter_map(|f| upgradeplan::engine::freeze::step(f, &plans, self.now).wake_at);
        kratix
            .chain(health)
            .chain(deletions)
            .chain(self.wakes.values().copied())
            .chain(self.plan_wake)
            .chain(freezes)
            .filter(|t| *t > self.now)
            .min()
    }

    /// The plan's reconcile: its status, from its runs (runs beyond the history limit deleted).
    pub fn reconcile_plan(&mut self) {
        if self.plan_deleted {
            return;
        }
        let view = self.view(self.lagging.clone());
        let runs: Vec<&UpgradeRun> = self.runs.iter().collect();
        let step = lifecycle::plan::step(&self.plan, &runs, true, &view, self.now);
        let deleted = step.delete_runs.clone();
        self.plan_wake = step.wake_at;
        if let Some(scheduled) = &step.create_run {
            // An existing run of that name: the trigger was serviced already (409).
            if !self.runs.iter().any(|r| r.name_any() == scheduled.name) {
                let mut run = new_run(
                    &self.plan,
                    NewRun::Scheduled {
                        name: scheduled.name.clone(),
                        at: scheduled.at,
                    },
                );
                run.metadata.uid = Some(format!("{}-uid", scheduled.name));
                run.metadata.generation = Some(1);
                run.metadata.creation_timestamp = Some(Time(to_jiff(self.now)));
                run.metadata.owner_references = kube::Resource::controller_owner_ref(&self.plan, &()).map(|o| vec![o]);
                run.metadata.resource_version = self.version();
                self.runs.push(run);
            }
        }
        self.plan.status = Some(step.status);
        let now = Time(to_jiff(self.now));
        for r in self.runs.iter_mut().filter(|r| deleted.contains(&r.name_any())) {
            r.metadata.deletion_timestamp.get_or_insert(now.clone());
        }
    }

    /// One reconcile of run `pick` by the controller, with `fault`, checked by `checker`.
    pub fn reconcile_run(&mut self, pick: usize, fault: Fault, checker: &mut Checker) -> Result<(), Violation> {
        let Some(i) = self.run_index(pick) else {
            return Ok(());
        };
        let name = self.runs[i].name_any();
        self.last_read
            .insert(name.clone(), self.runs[i].metadata.resource_version.clone());
        self.acting = if fault == Fault::Deposed {
            1 - self.leader
        } else {
            self.leader
        };
        self.tally.deposed += u64::from(fault == Fault::Deposed);
        // kube's finalizer helper: a run is first given the finalizer, in a reconcile of its
        // own; one deleted before it had it is simply gone.
        if !self.runs[i].finalizers().iter().any(|f| f == RUN_FINALIZER) {
            if self.runs[i].metadata.deletion_timestamp.is_some() {
                self.runs.remove(i);
            } else {
                let version = self.version();
                let r = &mut self.runs[i];
                r.finalizers_mut().push(RUN_FINALIZER.to_string());
                r.metadata.resource_version = version;
            }
            return Ok(());
        }
        // A lagging cache may hand the step an older copy of the run (its status write, which
        // is conditional on the copy it read, is then refused).
        let lagged = self.lagging_runs.iter().find(|r| r.name_any() == name);
        let lagging = matches!(fault, Fault::StaleCache | Fault::Deposed);
        self.lagging_step = lagging;
        let run = match lagged {
            Some(old) if lagging && old.finalizers().iter().any(|f| f == RUN_FINALIZER) => old.clone(),
            _ => self.runs[i].clone(),
        };
        self.stale_copy = run.resource_version() != self.runs[i].resource_version();
        let runs_before = self.runs.clone();
        let before = self.bindings();
        // Replaced by `before` once the step is done (kept aside only when the view lags).
        let stale = std::mem::take(&mut self.lagging);
        let (seen, before) = match lagging {
            true => (stale, Some(before)),
            false => (before, None),
        };
        let view = self.view(seen);
        // The controller's own pass (`upgradeplan::send::pass`): the facts gathered from this
        // world, the step checked once decided, and its writes sent through the controller's send
        // loop, each request applied to this world as the API server would and each memory the
        // acting process's.
        self.interrupt = match fault {
            Fault::Interrupted { after, by } => Some((after, by)),
            _ => None,
        };
        self.sends = 0;
        let now = self.now;
        let sending = Sending {
            world: RefCell::new(self),
            checker: RefCell::new(checker),
            view,
            decided: RefCell::new(None),
            run: name.clone(),
            fault,
            requests: Cell::new(0),
            crashed: Cell::new(false),
            failed: Cell::new(false),
        };
        let passed = futures::executor::block_on(upgradeplan::send::pass(&sending, &run, now));
        let (crashed, failed) = (sending.crashed.get(), sending.failed.get());
        let before = before.unwrap_or(sending.view.bindings);
        let passed = match passed {
            Err(Stop::Violation(v)) => return Err(v),
            other => other,
        };
        if crashed {
            self.tally.crashes += 1;
            *self.process() = Process::default();
            // The next process lists every object and reconciles each (`reconcile_all_on`).
            self.last_read.clear();
        }
        self.tally.write_errors += u64::from(failed && !crashed);
        // A failed request fails the pass (the error policy requeues it with backoff); a refused
        // one requeues it at once (after 200 ms).
        let next = match passed {
            Ok(Passed::Waits(wait)) => Some(now + Duration::from_std(wait.after()).unwrap_or_default()),
            Ok(Passed::Sent(Sent::Again)) | Err(_) => Some(now + Duration::seconds(1)),
            Ok(Passed::Sent(Sent::Released)) => None,
            Ok(Passed::Sent(Sent::Done {
                wake_at,
                progress_after,
            })) => {
                self.tally.progress_deferred += u64::from(progress_after.is_some());
                let progress = progress_after.map(|after| now + Duration::from_std(after).unwrap_or_default());
                wake_at.into_iter().chain(progress).min()
            }
        };
        match next {
            Some(at) if self.runs.iter().any(|r| r.name_any() == name) => self.wakes.insert(name, at),
            _ => self.wakes.remove(&name),
        };
        self.lagging = before;
        self.lagging_runs = runs_before;
        Ok(())
    }
}

impl World {
    /// The runs now in progress, which share the progress writes (the controller counts those
    /// of its cache).
    fn runs_in_progress(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress))
            .count()
    }

    /// The memory of the process taking the current step.
    fn process(&mut self) -> &mut Process {
        &mut self.processes[self.acting]
    }

    /// The latest reading of each of the plan's gates (read at every step: the controller's
    /// cache interval is the engine's concern, not what is checked here).
    pub fn gate_readings(&self) -> Vec<GateReading> {
        let gates = self.plan.spec.gates.iter().flatten();
        gates
            .map(|g| GateReading {
                gate: g.name.clone(),
                reading: self.gate.clone(),
                next_check: self.now + Duration::seconds(30),
            })
            .collect()
    }

    /// The UpgradeApprovals of run `run`.
    pub fn approvals_of(&self, run: &str) -> Vec<ApprovalFact> {
        let of_run = self.approvals.iter().filter(|(r, _)| r == run);
        of_run.map(|(_, a)| a.clone()).collect()
    }

    /// An Event about `run` published.
    fn publish(
        &mut self,
        run: &str,
        reason: &'static str,
        key: &str,
        note: String,
        checker: &mut Checker,
    ) -> Result<(), Violation> {
        let event = Published {
            run: run.to_string(),
            reason,
            key: key.to_string(),
            note,
            by: self.acting,
        };
        if trace() {
            eprintln!(
                "    event {} {} [{}] {}",
                event.run, event.reason, event.key, event.note
            );
        }
        checker.published(self, &event)?;
        self.events.push(event);
        Ok(())
    }
}

/// Why the simulated process stopped sending a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stop {
    /// An invariant failed (the history's finding).
    Violation(Violation),
    /// The process died ([`Fault::CrashAfter`]): nothing more of it reaches the API server.
    Crashed,
    /// A request failed ([`Fault::WriteFails`]): the pass ends, the process lives on.
    Failed,
}

impl From<Violation> for Stop {
    fn from(v: Violation) -> Self {
        Stop::Violation(v)
    }
}

/// The simulation's shell for one step: the controller's send loop runs over it, each request
/// applied to the world as the API server would (its preconditions, 404s and AlreadyExists),
/// each memory the acting process's, and the invariants checked as each write lands.
struct Sending<'w> {
    world: RefCell<&'w mut World>,
    checker: RefCell<&'w mut Checker>,
    /// The caches as the pass sees them (lagging, on a stale-cache fault).
    view: View,
    /// What the step decided that the world's answers are judged by: its snapshot and status.
    decided: RefCell<Option<(Option<Arc<Frozen>>, UpgradeRunStatus)>>,
    /// The run whose step it is.
    run: String,
    fault: Fault,
    /// Requests made so far: a fault strikes at the one its count names.
    requests: Cell<usize>,
    /// The process died: every request after fails, and none lands.
    crashed: Cell<bool>,
    /// A request failed: the pass ends there.
    failed: Cell<bool>,
}

impl Sending<'_> {
    /// One request of the step: the fault, if it strikes here. `fallible`: its error fails the
    /// pass (events and counters are best effort and local).
    fn request(&self, fallible: bool) -> Result<(), Stop> {
        if self.crashed.get() {
            return Err(Stop::Crashed);
        }
        let k = self.requests.get();
        self.requests.set(k + 1);
        match self.fault {
            Fault::CrashAfter(at) if at == k => {
                self.crashed.set(true);
                Err(Stop::Crashed)
            }
            Fault::WriteFails(at) if at == k && fallible => {
                self.failed.set(true);
                Err(Stop::Failed)
            }
            _ => Ok(()),
        }
    }

    fn publish(&self, run: &str, reason: &'static str, key: &str, note: String) -> Result<(), Stop> {
        let mut checker = self.checker.borrow_mut();
        Ok(self.world.borrow_mut().publish(run, reason, key, note, &mut checker)?)
    }
}

/// The controller's gathering, from this world: its caches complete and caught up (a lagging
/// cache is a fault of its own, in the pass's `view`).
impl Gather for Sending<'_> {
    fn cluster(&self) -> &dyn Cluster {
        &self.view
    }

    fn awaits_own_writes(&self, _run: &UpgradeRun) -> bool {
        false
    }

    fn plan(&self, name: &str) -> Option<Arc<UpgradePlan>> {
        let world = self.world.borrow();
        (!world.plan_deleted && world.plan.name_any() == name).then(|| Arc::new(world.plan.clone()))
    }

    fn others(&self, run: &UpgradeRun) -> Vec<RunFacts> {
        let world = self.world.borrow();
        let others = world.runs.iter().filter(|r| r.name_any() != run.name_any());
        others.map(RunFacts::of).collect()
    }

    async fn snapshot(&self, run: &UpgradeRun) -> Result<SnapshotFact, Stop> {
        Ok(self.world.borrow().snapshot_of(run))
    }

    fn kinds_needed(&self, _run: &UpgradeRun, _plan: Option<&UpgradePlanSpec>) -> KindsNeeded {
        KindsNeeded::Known(Vec::new())
    }

    fn freezes_known(&self) -> bool {
        true
    }

    fn budgets_known(&self) -> bool {
        true
    }

    async fn gates(&self, _run: &UpgradeRun, _gates: &[Gate], _now: DateTime<Utc>) -> Vec<GateReading> {
        self.world.borrow().gate_readings()
    }

    fn approvals(&self, run: &UpgradeRun) -> Vec<ApprovalFact> {
        self.world.borrow().approvals_of(&run.name_any())
    }

    async fn reverted(&self, name: &str) -> Result<Option<(Arc<UpgradeRun>, SnapshotFact)>, Stop> {
        Ok(self.world.borrow().reverted_named(name))
    }

    fn budgets(&self) -> Vec<Arc<UpgradeBudget>> {
        self.world.borrow().budget.iter().cloned().map(Arc::new).collect()
    }

    async fn budget_facts(&self, run: &UpgradeRun, selecting: &[&UpgradeBudget]) -> Vec<BudgetFacts> {
        // As the controller's ledger has them: the caches and the starts this process sent that
        // they do not show yet (here: caught up).
        self.world.borrow().budget_facts(run, selecting)
    }

    fn selector(&self) -> Option<&str> {
        None
    }

    fn decided(&self, run: &UpgradeRun, facts: &Facts<'_>, step: &Step) -> Result<(), Stop> {
        *self.decided.borrow_mut() = Some((step.frozen.clone(), step.status.clone()));
        let name = self.run.as_str();
        let mut world = self.world.borrow_mut();
        let mut checker = self.checker.borrow_mut();
        // A plan edited since the run's snapshot: the same step from the plan as it was must be
        // this step (spec §14.2: a plan edit mid-run changes nothing of the run), decided from the
        // same facts.
        if let (Some(live), SnapshotFact::Found { frozen, .. }) = (facts.plan, &facts.snapshot) {
            if frozen.plan != live.spec {
                let unedited = UpgradePlan {
                    spec: frozen.plan.clone(),
                    ..live.clone()
                };
                let facts = Facts {
                    plan: Some(&unedited),
                    snapshot: facts.snapshot.clone(),
                    ..facts.clone()
                };
                world.tally.edited_plan_steps += 1;
                checker.edit_changed_nothing(name, step, &lifecycle::step(run, &facts, &self.view))?;
            }
        }
        checker.revert_derived(&world, run, step, &self.view.bindings, &facts.reverted)?;
        world.tally.deadline_failures +=
            checker.deadline_failures(name, run.status.as_ref(), &step.status, &self.view.bindings)?;
        let derived = run.spec.revert_of.is_some() && !step.write_snapshot.is_empty();
        world.tally.revert_snapshots += u64::from(derived);
        world.tally.budgeted_steps += u64::from(!facts.budgets.is_empty());
        let held = step
            .evaluation
            .as_ref()
            .is_some_and(|e| e.held_by.contains(&upgradeplan::engine::run::Blocked::BudgetExhausted));
        world.tally.budget_holds += u64::from(held);
        checker.before_writes(&world, run, step)?;
        Ok(())
    }

    fn wake(&self, runs: &[String]) {
        // The runs waiting for a budget unit this pass left free look at once (the controller
        // sends them after its writes; a crashed process sends nothing).
        if self.crashed.get() {
            return;
        }
        let mut world = self.world.borrow_mut();
        let now = world.now;
        for other in runs {
            world.wakes.insert(other.clone(), now);
        }
    }
}

impl upgradeplan::send::Shell for Sending<'_> {
    type Error = Stop;
    type Slot<'a>
        = ()
    where
        Self: 'a;

    async fn patch_own(&self, patch: &RunPatch) -> Result<RunWrite, Stop> {
        self.request(true)?;
        let mut world = self.world.borrow_mut();
        let Some(i) = world.runs.iter().position(|r| r.name_any() == patch.run) else {
            return Ok(RunWrite::Taken(None)); // gone: 404, and nothing owed to it
        };
        if patch.apply(&mut world.runs[i]).is_err() {
            world.tally.stale_run_writes += 1;
            return Ok(RunWrite::Refused);
        }
        let stale = world.stale_copy;
        self.checker
            .borrow_mut()
            .run_written(&patch.run, stale, "its own patch")?;
        let version = world.version();
        world.runs[i].metadata.resource_version = version.clone();
        Ok(RunWrite::Taken(version))
    }

    async fn adopt_approvals(&self, patches: &[ApprovalPatch]) -> Result<(), Stop> {
        self.request(true)?;
        let mut world = self.world.borrow_mut();
        for patch in patches {
            if let Some((_, a)) = world.approvals.iter_mut().find(|(_, a)| a.name == patch.approval) {
                a.owners = patch.owner_references.clone();
            }
        }
        Ok(())
    }

    async fn supersede(&self, patch: &RunPatch) -> Result<bool, Stop> {
        self.request(true)?;
        let mut world = self.world.borrow_mut();
        let version = world.version();
        let Some(r) = world.runs.iter_mut().find(|r| r.name_any() == patch.run) else {
            return Ok(false);
        };
        let patched = patch.apply(r).is_ok();
        if patched {
            r.metadata.resource_version = version;
        }
        Ok(patched)
    }

    async fn run_is_at(&self, name: &str, version: Option<&str>) -> Result<bool, Stop> {
        self.request(true)?;
        let mut world = self.world.borrow_mut();
        let current = world.runs.iter().find(|r| r.name_any() == name);
        let at = version.is_some() && current.and_then(|r| r.metadata.resource_version.as_deref()) == version;
        world.tally.stale_run_writes += u64::from(!at);
        Ok(at)
    }

    async fn write_snapshot(
        &self,
        run: &UpgradeRun,
        shards: &[SnapshotConfigMap],
        taken: &Arc<Frozen>,
    ) -> Result<(), Stop> {
        self.request(true)?;
        let name = run.name_any();
        let mut world = self.world.borrow_mut();
        let mut checker = self.checker.borrow_mut();
        checker.run_written(&name, world.stale_copy, "its snapshot")?;
        checker.snapshot_written(&name, world.snapshots.get(&name), shards, taken)?;
        world.snapshots.insert(name.clone(), shards.to_vec());
        world.read_back.insert(name, World::read(shards));
        Ok(())
    }

    fn memory<R>(&self, f: impl FnOnce(&mut RunMemory) -> R) -> R {
        f(self.world.borrow_mut().process())
    }

    fn now(&self) -> DateTime<Utc> {
        self.world.borrow().now
    }

    fn runs_in_progress(&self) -> usize {
        self.world.borrow().runs_in_progress()
    }

    async fn list_announced(&self, run: &UpgradeRun) -> Result<Option<Announced>, Stop> {
        self.request(false)?;
        let name = run.name_any();
        let world = self.world.borrow();
        let found = world
            .events
            .iter()
            .filter(|e| e.run == name)
            .map(|e| (e.reason.to_string(), e.note.clone(), 1));
        Ok(Some(Announced::from_events(found)))
    }

    fn lost_starts(&self, run: &UpgradeRun, snapshot: &Snapshot, to: &str, announced: &Announced) -> Vec<String> {
        let world = self.world.borrow();
        let view = world.view(world.bindings());
        lifecycle::lost_start_announcements(run, snapshot, to, announced, &view)
    }

    async fn slot(&self) -> Self::Slot<'_> {
        // A watch event lands between two sends: after this many patches.
        let mut world = self.world.borrow_mut();
        let sent = world.sends;
        world.sends += 1;
        if let Some((_, by)) = world.interrupt.filter(|(after, _)| *after == sent) {
            world.interrupt = None;
            world.interrupt_sending(&self.run, by);
        }
    }

    fn still_admitted(&self, admitted: &Admitted) -> Result<(), Ended> {
        let world = self.world.borrow();
        let current = world.runs.iter().find(|r| r.name_any() == admitted.run);
        admitted.check(current, &world.freezes, world.now)
    }

    async fn patch_binding(&self, patch: &BindingPatch) -> Result<bool, Stop> {
        self.request(true)?;
        let name = self.run.as_str();
        let mut world = self.world.borrow_mut();
        let world = &mut **world;
        let Some(i) = world.resources.iter().position(|r| {
            r.binding.name_any() == patch.resource.binding
                && r.binding.namespace().as_deref() == Some(patch.resource.namespace.as_str())
        }) else {
            return Ok(true); // deleted since: the API server answers 404, the next pass decides again
        };
        if patch.apply(&mut world.resources[i].binding).is_err() {
            world.tally.conflicts += 1;
            return Ok(true);
        }
        world.resources[i].binding.metadata.resource_version = world.version();
        let mut checker = self.checker.borrow_mut();
        // Judged by the snapshot as written (read back), not the step's own copy.
        let decided = self.decided.borrow();
        let Some(frozen) = world
            .frozen_of(name)
            .or_else(|| decided.as_ref().and_then(|(f, _)| f.clone()))
        else {
            return Ok(false); // a step patches bindings only from its snapshot
        };
        checker.patched(name, &frozen, patch)?;
        checker.sent_while_admitted(world, name, patch)?;
        checker.not_into_cleanup(name, patch, &world.terminating)?;
        match &patch.attempt {
            Attempt::Start { .. } => {
                world.tally.starts += 1;
                world.tally.revert_starts += u64::from(patch.resource.target.is_some());
            }
            Attempt::Retry => world.tally.retries += 1,
        }
        Ok(false)
    }

    fn wrote_binding(&self, _run: &UpgradeRun, _patch: &BindingPatch) {
        // The world's caches catch up at once (a lagging cache is a fault of its own).
    }

    fn started(&self, _run: &UpgradeRun, _resource: &Arc<SnapshotResource>) {
        // Durations are not simulated.
    }

    async fn withheld(&self, _run: &UpgradeRun, patches: &[&BindingPatch], _why: &Ended) {
        if self.crashed.get() {
            return;
        }
        let mut world = self.world.borrow_mut();
        world.tally.starts_withheld += patches.len() as u64;
        world.withheld = true;
    }

    async fn event(&self, run: &UpgradeRun, a: &Announcement) -> Result<(), Stop> {
        self.request(false)?;
        self.publish(&run.name_any(), a.reason, &a.key, a.note.clone())
    }

    async fn create_run(&self, revert: &UpgradeRun) -> Result<(), Stop> {
        self.request(true)?;
        let mut world = self.world.borrow_mut();
        let revert_name = revert.name_any();
        // The name is fixed: an existing run of that name answers AlreadyExists (409).
        if world.runs.iter().any(|r| r.name_any() == revert_name) {
            return Ok(());
        }
        let name = self.run.as_str();
        let decided = self.decided.borrow();
        let status = decided.as_ref().map(|(_, status)| status.clone()).unwrap_or_default();
        self.checker
            .borrow_mut()
            .revert_created(&world, name, &status, revert)?;
        world.tally.reverts_created += 1;
        let mut created = revert.clone();
        created.metadata.uid = Some(format!("{revert_name}-uid"));
        created.metadata.generation = Some(1);
        created.metadata.creation_timestamp = Some(Time(to_jiff(world.now)));
        created.metadata.resource_version = world.version();
        world.runs.push(created);
        Ok(())
    }

    async fn flush_counts(&self, _run: &UpgradeRun) {}

    fn gauges(&self, _run: &UpgradeRun, _gauges: &Gauges) {}

    async fn write_status(
        &self,
        run: &UpgradeRun,
        status: &UpgradeRunStatus,
        read: Option<&str>,
    ) -> Result<RunWrite, Stop> {
        self.request(true)?;
        let name = run.name_any();
        let mut world = self.world.borrow_mut();
        let world = &mut **world;
        let Some(i) = world.runs.iter().position(|r| r.name_any() == name) else {
            return Ok(RunWrite::Refused);
        };
        let mut checker = self.checker.borrow_mut();
        checker.health_counted(world, &name, status)?;
        // Conditional on the run as the step read it (the controller's apply_status_at).
        if world.runs[i].metadata.resource_version.as_deref() != read {
            world.tally.stale_run_writes += 1;
            return Ok(RunWrite::Refused);
        }
        let version = world.version();
        if trace() {
            let groups: Vec<_> = status
                .rollout_groups
                .iter()
                .map(|g| (&g.name, g.succeeded, g.failed, g.skipped))
                .collect();
            eprintln!("    status {name} {:?} {groups:?}", status.state);
        }
        checker.run_written(&name, world.stale_copy, "its status")?;
        let frozen = world.read_back.get(&name).and_then(|f| match f {
            SnapshotFact::Found { frozen, .. } => Some(frozen.clone()),
            _ => None,
        });
        let checked: Vec<&str> = frozen
            .iter()
            .flat_map(|f| f.plan.rollout_groups.iter())
            .filter(|g| g.health_check.is_some())
            .map(|g| g.name.as_str())
            .collect();
        let r = &mut world.runs[i];
        checker.status_written(&name, r.status.as_ref(), status, &checked)?;
        let was_terminal = r.status.as_ref().is_some_and(|s| s.state.is_terminal());
        r.status = Some(status.clone());
        r.metadata.resource_version = version.clone();
        if status.state.is_terminal() && !was_terminal {
            match status.state {
                RunState::Completed => world.tally.completed += 1,
                RunState::Failed => world.tally.failed += 1,
                _ => world.tally.cancelled += 1,
            }
            if run.spec.revert_of.is_some() {
                match status.state {
                    RunState::Completed => world.tally.reverts_completed += 1,
                    RunState::Failed => world.tally.reverts_failed += 1,
                    _ => {}
                }
            }
        }
        if !world.lagging_step {
            world.tally.plugin_views += 1;
            checker.viewed(world, &name)?;
        }
        Ok(RunWrite::Taken(version))
    }

    /// `Ctx::count` observes durations, which the simulation does not model; the counters are
    /// read from the runs, checked after every write of a run and every action.
    fn count(&self, _run: &UpgradeRun, _counts: &Counts<'_>) -> Result<(), Stop> {
        self.request(false)?;
        let world = self.world.borrow();
        Ok(self.checker.borrow_mut().counters_exact(&world)?)
    }

    async fn release(&self, run: &UpgradeRun, release: &Release) -> Result<bool, Stop> {
        self.request(true)?;
        let name = run.name_any();
        let mut world = self.world.borrow_mut();
        let Some(i) = world.runs.iter().position(|r| r.name_any() == name) else {
            return Ok(false);
        };
        if release.apply(&mut world.runs[i]).is_err() {
            return Ok(false);
        }
        world.runs[i].metadata.resource_version = world.version();
        if world.runs[i].finalizers().is_empty() && world.runs[i].metadata.deletion_timestamp.is_some() {
            let plan = (!world.plan_deleted).then_some(&world.plan);
            // Read from the plan, not from `counters::kept`: the check is the spec's, not the
            // code's under test. A run let go without its plan keeping its counts is excused
            // only past the grace period.
            let key = upgradeplan::engine::counters::run_key(&world.runs[i]);
            let deleted = plan
                .and_then(|p| p.status.as_ref())
                .and_then(|s| s.deleted_runs.as_ref());
            let deleted_at = world.runs[i].metadata.deletion_timestamp.as_ref();
            let graced = deleted_at.is_some_and(|t| world.now - upgradeplan::time::to_chrono(&t.0) >= RECORD_GRACE);
            if deleted.is_some_and(|d| d.uids.contains(&key)) {
                world.tally.deleted_kept += 1;
            } else if graced {
                world.released_unkept.insert(key);
                world.tally.released_unkept += 1;
            }
            world.runs.remove(i);
            world.snapshots.remove(&name);
            world.read_back.remove(&name);
        }
        Ok(true)
    }

    fn refused(&self, _run: &UpgradeRun) {
        // The world's caches hold the current run at the next pass (a lagging one is a fault).
    }
}

/// `SIM_TRACE=1`: print each action and each Event as a replay goes (to read a violation's
/// history).
pub fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("SIM_TRACE").is_some())
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(members) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            if let Value::Object(t) = target {
                for (k, v) in members {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
        }
        other => *target = other.clone(),
    }
}
