//! The run's lifecycle (spec §5) as one pure transition.
//!
//! [`step`] takes what the run says, the facts the controller gathered from its caches (the live
//! plan, the plan's other runs, the run's snapshot if one exists, live bindings and revisions) and
//! `now`, and returns the run's next status with everything the controller must do to get there:
//! metadata to add, older runs to supersede, snapshot ConfigMaps to write, bindings to patch,
//! events to announce, gauges to set, and when to look again. The controller applies a [`Step`]
//! in the order of its fields and writes the status last; replaying a step after a partial apply
//! (a crash anywhere in between) asks for nothing new.
//!
//! Only the run's own reconcile writes its status: superseding another run is a request on that
//! run (`spec.suspend` and [`SUPERSEDED_BY_ANNOTATION`]) that its own step records, and a run that
//! ends wakes its plan (which watches its runs) instead of writing the plan's status.

pub mod plan;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use kube::{Resource, ResourceExt};

use super::admission::{
    admit, admitted_at, created_suspended, is_dormant, is_preview, last_run_of, new_run, superseded_by, Admission,
    NewRun, RunFacts, TriggerKind,
};
use super::compile::CompiledPlan;
use super::freeze::holding;
use super::gate::{self, GateCheck, GateReading};
use super::health::HealthRecords;
use super::outcome::Finished;
use super::record::Overlaps;
use super::revert::{self, RevertedFact, RevisionFact, Revisions};
use super::run::{evaluate_in_order, texts, Blocked, Evaluation, Outcome, RunContext, Verdict};
pub use super::snapshot::SnapshotFact;
use super::snapshot::{
    config_map_data, digest, group_bindings, shard, snapshot_config_map_name, Frozen, Snapshot, SnapshotResource,
    SNAPSHOT_SHARD_BYTES,
};
use super::stage::{self, ApprovalFact};
use super::upgrade_budget::{self, BudgetFacts};
use super::validate::{check_plan, summarize as summarize_problems};
use super::view::{run_view, RunView};
use super::write::{ApprovalPatch, BindingPatch, Release, RunPatch};
use crate::api::kratix::{BindingFacts, HealthRecord};
use crate::api::{
    find_condition, reasons, set_condition, Condition, ConditionStatus, GateStatus, GroupPhase, GroupStatus, OnFailure,
    ResourceListRef, RevertOf, RevertResources, RunState, UpgradeFreeze, UpgradePlan, UpgradePlanSpec, UpgradeRun,
    UpgradeRunStatus, ADMITTED_AT_ANNOTATION, PLAN_LABEL, PREVIEW_ANNOTATION, REVERTED_BY_ANNOTATION,
    SELECTOR_ANNOTATION, UPGRADED_BY_ANNOTATION,
};

/// How often a run waiting for a kind the cluster does not serve looks again (a CRD installed
/// later is found by the watch, which wakes nothing by itself).
pub const KIND_POLL: chrono::Duration = chrono::Duration::seconds(30);

/// The longest a run still going waits without looking again, whatever it waits for: what a
/// missed watch event can cost (kube-rs's reference controller requeues as often).
pub const RESYNC: Duration = Duration::minutes(5);

/// How long a deleted run waits for its plan to record its result and keep its counts before the
/// finalizer is released anyway (a plan whose reconcile keeps failing must not pin the run for ever).
pub const RECORD_GRACE: Duration = Duration::seconds(60);

/// How soon a deleted run that waits for its plan looks again (the plan's status change also
/// wakes it: runs watch their plan).
pub const RECORD_POLL: Duration = Duration::seconds(2);

/// Read access to the controller's caches of Kratix objects.
pub trait Cluster {
    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<dyn BindingFacts>>;
    /// The live binding of each of `snapshot`'s resources, in its order (groups, then their
    /// resources): a cache may answer the thousands at once faster than one by one.
    fn snapshot_bindings(&self, snapshot: &Snapshot) -> Vec<Option<Arc<dyn BindingFacts>>> {
        snapshot
            .groups
            .iter()
            .flat_map(|g| &g.resources)
            .map(|r| self.binding(&r.namespace, &r.binding))
            .collect()
    }
    /// Every binding of `promise`, all namespaces.
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>>;
    /// Every PromiseRevision of `promise`.
    fn revisions_of(&self, promise: &str) -> Vec<RevisionFact>;
    /// Every HealthRecord of `promise` (asked only for runs with a `healthCheck`).
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>>;
    /// Every UpgradeFreeze (spec §13.5).
    fn freezes(&self) -> Vec<Arc<UpgradeFreeze>>;
    /// Whether the controller was given a Prometheus to read signal gates from
    /// (`--prometheus-url`); without one every gate reads closed (spec §13.3).
    fn prometheus_configured(&self) -> bool {
        true
    }
}

/// Everything [`step`] needs besides the run and the caches.
#[derive(Debug, Clone)]
pub struct Facts<'a> {
    /// The live plan the run names; `None` when it does not exist.
    pub plan: Option<&'a UpgradePlan>,
    /// Admission facts of the plan's other runs.
    pub others: &'a [RunFacts],
    pub snapshot: SnapshotFact,
    /// The latest reading of each signal gate of the run's plan (spec §13.3).
    pub gates: &'a [GateReading],
    /// The run's UpgradeApprovals (spec §13.4).
    pub approvals: &'a [ApprovalFact],
    /// Kinds the run's plan needs that the API server does not serve (spec §14.2).
    pub missing_kinds: &'a [MissingKind],
    /// For a revert before its snapshot, the run it reverts (spec §13.7); otherwise not
    /// gathered.
    pub reverted: RevertedFact<'a>,
    /// The UpgradeBudgets that select the run's plan, each with the other active runs it caps
    /// (spec §13.8): gathered by the caller, as budgets span plans.
    pub budgets: &'a [BudgetFacts],
    /// The controller's `--selector`: a run it works on carries it
    /// ([`crate::api::SELECTOR_ANNOTATION`]), so the run stays recognisably its own once the plan
    /// is gone.
    pub selector: Option<&'a str>,
    pub now: DateTime<Utc>,
}

/// A kind a run's plan needs that the cluster does not serve: the run waits, saying so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingKind {
    /// `<plural>.<group>`, as `kubectl get` names it: `healthrecords.platform.kratix.io`.
    pub resource: &'static str,
    /// The first rollout group that needs it.
    pub group: String,
    /// The field of that group that needs it: `healthCheck`, `requireApproval`.
    pub field: &'static str,
}

impl MissingKind {
    /// The `KindsServed=False/KindNotServed` message and event (spec §14.2).
    pub fn message(&self) -> String {
        format!(
            "the cluster does not serve {}, which group {:?} needs ({}); install its CRD",
            self.resource, self.group, self.field
        )
    }
}

/// Where the controller's cache of a kind the cluster may not serve stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KindCache {
    /// It has its initial list.
    pub listed: bool,
    /// The API server answered its list with 404: the kind is not served.
    pub not_served: bool,
}

/// What a run needs of the kinds apart from the caches every run needs (spec §14.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindsNeeded {
    /// The pass can go on; the kinds the plan needs that are not served are facts for the step.
    Known(Vec<MissingKind>),
    /// The list of `resource`, which the plan needs, is still to come: look again shortly
    /// (without it, resources would look unreported and groups unapproved).
    ListPending { resource: &'static str },
}

/// What run `run`, following `plan` (the frozen plan once the snapshot exists, else the live
/// one), needs of the HealthRecord (`health`) and UpgradeApproval (`approvals`) caches. An ended
/// or deleted run needs neither: its cancel reads neither.
pub fn kinds_needed(
    run: &UpgradeRun,
    plan: Option<&UpgradePlanSpec>,
    health: KindCache,
    approvals: KindCache,
) -> KindsNeeded {
    let ended = run.status.as_ref().is_some_and(|s| s.state.is_terminal());
    if ended || run.metadata.deletion_timestamp.is_some() {
        return KindsNeeded::Known(Vec::new());
    }
    let first_group = |needs: fn(&crate::api::RolloutGroup) -> bool| {
        plan.and_then(|p| p.rollout_groups.iter().find(|g| needs(g)).map(|g| g.name.clone()))
    };
    let mut missing = Vec::new();
    for (group, cache, resource, field) in [
        (
            first_group(|g| g.health_check.is_some()),
            health,
            "healthrecords.platform.kratix.io",
            "healthCheck",
        ),
        (
            first_group(super::compile::requires_approval),
            approvals,
            "upgradeapprovals.platform.syntasso.io",
            "requireApproval",
        ),
    ] {
        let Some(group) = group.filter(|_| !cache.listed) else {
            continue;
        };
        if !cache.not_served {
            return KindsNeeded::ListPending { resource };
        }
        missing.push(MissingKind { resource, group, field });
    }
    KindsNeeded::Known(missing)
}

/// An event to publish on the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Announcement {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
    /// Published once per run across restarts (deduplicated on reason, note and this key).
    pub key: String,
}

impl Announcement {
    fn normal(reason: &'static str, note: String) -> Self {
        Announcement {
            warning: false,
            reason,
            note,
            key: String::new(),
        }
    }

    fn warning(reason: &'static str, note: String) -> Self {
        Announcement {
            warning: true,
            ..Announcement::normal(reason, note)
        }
    }

    fn keyed(self, key: String) -> Self {
        Announcement { key, ..self }
    }
}

pub use super::texts::events;

/// The run's gauges (spec §9.1): resources per group and state, and what the run waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunGauges {
    /// (group, state, count), states pending|in_progress|succeeded|failed|skipped.
    pub resources: Vec<(String, &'static str, i64)>,
    /// (group, reason) for each reason that holds the run's current group (spec §9.1: one
    /// series per reason, several at once), first the one shown first.
    pub blocked: Vec<(String, &'static str)>,
}

/// What to do with the plan's run gauges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gauges {
    /// This run does not own them (a preview, a superseded run): leave them.
    Keep,
    Set(RunGauges),
    /// The active run ended: remove them.
    Clear,
}

/// One resource's result, listed by every pass that moves its group's counts (for its duration;
/// the counters read the run's status, [`super::counters`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceResult {
    /// The group's index in the snapshot.
    pub group: usize,
    /// The resource's snapshot entry (shared, not copied).
    pub resource: Arc<SnapshotResource>,
    pub result: Finished,
}

pub use super::counters::verdicts_final;

/// The output of [`step`], in the order the controller applies it.
#[derive(Debug, Clone)]
pub struct Step {
    /// This run's own patch, sent first: the labels, annotations and plan ownership it lacks, and
    /// `spec.suspend=true` when it found itself superseded (spec §5.2) before the newer run asked
    /// it to stand down (two runs admitted at once).
    pub own: RunPatch,
    /// Older active runs this run supersedes, asked to stand down; their own reconcile records it.
    pub supersede: Vec<RunPatch>,
    /// The snapshot to write, as (ConfigMap name, data) in shard order ([`snapshot_config_maps`]):
    /// the status records each one's digest. Empty when the snapshot exists.
    pub write_snapshot: Vec<SnapshotConfigMap>,
    /// The snapshot (new or found) this step worked from.
    pub frozen: Option<Arc<Frozen>>,
    /// UpgradeApprovals of this run to own (ownerReference to the run: garbage-collected with it).
    pub adopt_approvals: Vec<ApprovalPatch>,
    /// The evaluation of an InProgress run (what it decided; [`Step::binding_patches`] are its
    /// writes).
    pub evaluation: Option<Evaluation>,
    /// The binding patches of the evaluation's starts and retries, in the order they are sent,
    /// stamped with the step's `now`. Empty for a run that ends in this step.
    pub binding_patches: Vec<BindingPatch>,
    /// What admitted `binding_patches`: the sender checks it again before each (spec §14.1).
    pub admitted: Option<crate::engine::admitted::Admitted>,
    /// The target version of the run's upgrades (the frozen plan's `to`), when known.
    pub to: String,
    pub announce: Vec<Announcement>,
    /// The resources that finished, for their durations (a process times only what it started).
    pub results: Vec<ResourceResult>,
    pub gauges: Gauges,
    /// The run was superseded in this step (`upgradeplan_runs_superseded_total`).
    pub newly_superseded: bool,
    /// The run became terminal in this step (`upgradeplan_runs_total`, duration).
    pub finished: Option<RunState>,
    /// How the run came to be (`upgradeplan_runs_total`'s `trigger`).
    pub trigger: TriggerKind,
    /// Deleted and done: delete the snapshot and remove the finalizer.
    pub release: Option<Release>,
    /// The revert this run creates as it fails in a group with `onFailure: Revert` (spec §13.7):
    /// created before the status that ends the run, so that a crash between them creates it again
    /// (its name is fixed: the API server answers AlreadyExists) rather than never.
    pub create_revert: Option<Created>,
    pub status: UpgradeRunStatus,
    pub wake_at: Option<DateTime<Utc>>,
    /// Other runs to look again now: they wait for a unit of a budget this pass left free
    /// (spec §13.8); their own bindings' events would not tell them.
    pub wake_runs: Vec<String>,
}

/// A run a step creates, as sent (compared by what it is made of: its metadata and spec).
#[derive(Debug, Clone)]
pub struct Created(pub UpgradeRun);

impl PartialEq for Created {
    fn eq(&self, other: &Self) -> bool {
        self.0.metadata == other.0.metadata && self.0.spec == other.0.spec
    }
}

/// How often a run's progress alone is written, at most: a status that differs from the recorded
/// one only in [`only_progress`] waits until this long after the run's last status write. A run
/// under a budget gets its units a few at a time, and every completion is a pass; writing each
/// pass made 8,400 status writes where fifty runs without a budget made 269 (docs/performance.md).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// The progress-alone status writes one controller makes per second across all its runs in
/// progress, at most: fifty runs at once each write their progress every ten seconds rather than
/// every second.
pub const PROGRESS_WRITES_PER_SECOND: u32 = 5;

/// How long a run's progress alone waits after its last status write while `runs_in_progress`
/// runs are in progress in the controller: [`PROGRESS_EVERY`], or longer so that together they
/// write at most [`PROGRESS_WRITES_PER_SECOND`].
pub fn progress_every(runs_in_progress: usize) -> std::time::Duration {
    shared_interval(runs_in_progress, PROGRESS_WRITES_PER_SECOND, PROGRESS_EVERY)
}

/// How much longer a run's progress alone must wait, written `since_written` ago (`None`: never
/// by this process) while `runs_in_progress` runs are in progress: `None` when it may go now.
pub fn progress_wait(
    since_written: Option<std::time::Duration>,
    runs_in_progress: usize,
) -> Option<std::time::Duration> {
    let every = progress_every(runs_in_progress);
    since_written.filter(|since| *since < every).map(|since| every - since)
}

/// How long each of `writers` waits between its writes so that together they write at most
/// `per_second` (each at least `floor` apart): a rate shared by however many there are.
pub fn shared_interval(writers: usize, per_second: u32, floor: std::time::Duration) -> std::time::Duration {
    let writers = u64::try_from(writers).unwrap_or(u64::MAX);
    std::time::Duration::from_millis(writers.saturating_mul(1000) / u64::from(per_second.max(1))).max(floor)
}

/// Whether `after` differs from `before` only in what a reader can wait [`progress_every`] for:
/// the resources counted succeeded (`completedResources`, each group's `succeeded`; the success
/// itself is on the binding) and the in-flight count in the `Budgeted` message while the same
/// budget holds the run. Everything else — the state, a phase, a failure or skip recorded, the
/// resources verifying (other runs' budgets count them), a condition turning — is written at
/// once. Skipping such a write is what a crash before it does: the next pass derives it again.
pub fn only_progress(before: &UpgradeRunStatus, after: &UpgradeRunStatus) -> bool {
    let progress_aside = |s: &UpgradeRunStatus, other: &UpgradeRunStatus| {
        let mut s = s.clone();
        s.completed_resources = 0;
        for g in &mut s.rollout_groups {
            g.succeeded = 0;
        }
        let held = |s: &UpgradeRunStatus| {
            find_condition(&s.conditions, reasons::BUDGETED)
                .filter(|c| c.status == ConditionStatus::True)
                .and_then(|c| upgrade_budget::texts::budget_named(&c.message).map(str::to_string))
        };
        if held(&s).is_some() && held(&s) == held(other) {
            for c in s.conditions.iter_mut().filter(|c| c.type_ == reasons::BUDGETED) {
                c.message.clear();
            }
        }
        s
    };
    before != after && progress_aside(before, after) == progress_aside(after, before)
}

/// One write of a [`Step`], as [`Step::writes`] orders them.
#[derive(Debug, Clone, PartialEq)]
pub enum Write<'s> {
    /// The run's own labels, annotations, plan ownership or self-suspension: first, so that
    /// everything after it is found by them.
    Own(&'s RunPatch),
    /// The run's UpgradeApprovals adopted (owned by the run).
    AdoptApprovals(&'s [ApprovalPatch]),
    /// An older run asked to stand down.
    Supersede(&'s RunPatch),
    /// The snapshot ConfigMaps, and the snapshot they hold (verified once written).
    Snapshot(&'s [SnapshotConfigMap], &'s Arc<Frozen>),
    /// The start events an earlier pass lost repaired, then the version patches and retry
    /// labels (possibly none).
    Bindings(&'s [BindingPatch], &'s Arc<Frozen>),
    /// The run's revert created (`onFailure: Revert`); AlreadyExists means an earlier pass did.
    CreateRevert(&'s Created),
    /// The run's counters written out before its end is announced: a crash after loses none.
    FlushCounts,
    Announce(&'s Announcement),
    Gauges(&'s Gauges),
    /// The status, last of the writes to the API server: a crash before it leaves the old one,
    /// and the next pass takes the same step again (asking for nothing already done).
    Status(&'s UpgradeRunStatus),
    /// Results, supersession and the run's end counted, once the status that records them is
    /// written (spec §14.2: counters once): resolved, the shell adds each to its counter as it is.
    Count(Counts<'s>),
    /// In place of the status, its count and its progress events: the status differs only in
    /// progress ([`only_progress`]) and this process wrote it less than [`progress_every`] ago.
    /// The run is looked at again once its turn comes.
    ProgressLater,
    /// Deleted and done: the snapshot deleted and the finalizer removed.
    Release(&'s Release),
}

/// What a step counts (spec §14.2), resolved: the shell adds each to its counter as it is.
#[derive(Debug, Clone, PartialEq)]
pub struct Counts<'s> {
    /// The resources that succeeded, with their groups' names: a process observes the durations
    /// of those it started (`upgradeplan_resource_upgrade_duration_seconds`).
    pub succeeded: Vec<(&'s Arc<SnapshotResource>, &'s str)>,
    /// The resources that finished otherwise: their starts are no longer timed.
    pub ended_otherwise: Vec<&'s Arc<SnapshotResource>>,
    /// The run was superseded in this step (`upgradeplan_runs_superseded_total`).
    pub superseded: bool,
    /// The run ended in this step (`upgradeplan_runs_total`, `upgradeplan_run_duration_seconds`).
    pub ended: Option<RunEnd>,
}

/// A run's end as counted: its result, how it came to be, and how long it ran (from its status's
/// `startedAt` to `finishedAt`, when it started).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunEnd {
    pub result: RunState,
    pub trigger: TriggerKind,
    pub seconds: Option<f64>,
}

impl Step {
    /// What the step counts once its status is written ([`Write::Count`]).
    pub fn counts(&self) -> Counts<'_> {
        let seconds = match (self.status.started_at, self.status.finished_at) {
            (Some(start), Some(end)) => Some((end - start).num_milliseconds() as f64 / 1000.0),
            _ => None,
        };
        let group = |i: usize| {
            let groups = self.frozen.as_ref().map(|f| f.snapshot.groups.as_slice());
            groups.and_then(|g| g.get(i)).map_or("", |g| g.name.as_str())
        };
        let (succeeded, ended_otherwise) = self
            .results
            .iter()
            .partition::<Vec<_>, _>(|r| r.result == Finished::Succeeded);
        Counts {
            succeeded: succeeded.into_iter().map(|r| (&r.resource, group(r.group))).collect(),
            ended_otherwise: ended_otherwise.into_iter().map(|r| &r.resource).collect(),
            superseded: self.newly_superseded,
            ended: self.finished.map(|result| RunEnd {
                result,
                trigger: self.trigger,
                seconds,
            }),
        }
    }

    /// Every write of the step, in the order they must be applied; `current` is the run's status
    /// as read (an unchanged status is not written again). `status_written_recently`: this
    /// process wrote the run's status less than [`progress_every`] ago, so progress alone waits
    /// ([`Write::ProgressLater`]), and with it the counts and the `GroupInProgress` events that
    /// say the same (written each pass, they were an Event per completion under a budget).
    pub fn writes(&self, current: Option<&UpgradeRunStatus>, status_written_recently: bool) -> Vec<Write<'_>> {
        let progress_later = status_written_recently && current.is_some_and(|c| only_progress(c, &self.status));
        let mut w = Vec::new();
        if !self.own.is_empty() {
            w.push(Write::Own(&self.own));
        }
        if !self.adopt_approvals.is_empty() {
            w.push(Write::AdoptApprovals(&self.adopt_approvals));
        }
        w.extend(self.supersede.iter().map(Write::Supersede));
        if let (false, Some(frozen)) = (self.write_snapshot.is_empty(), &self.frozen) {
            w.push(Write::Snapshot(&self.write_snapshot, frozen));
        }
        if let (Some(_), Some(frozen)) = (&self.evaluation, &self.frozen) {
            w.push(Write::Bindings(&self.binding_patches, frozen));
        }
        if let Some(revert) = &self.create_revert {
            w.push(Write::CreateRevert(revert));
        }
        if self.finished.is_some() {
            w.push(Write::FlushCounts);
        }
        w.extend(
            self.announce
                .iter()
                .filter(|a| !(progress_later && a.reason == events::GROUP_IN_PROGRESS))
                .map(Write::Announce),
        );
        if self.gauges != Gauges::Keep {
            w.push(Write::Gauges(&self.gauges));
        }
        if progress_later {
            w.push(Write::ProgressLater);
        } else {
            if current != Some(&self.status) {
                w.push(Write::Status(&self.status));
            }
            w.push(Write::Count(self.counts()));
        }
        if let Some(release) = &self.release {
            w.push(Write::Release(release));
        }
        w
    }

    /// A step of `run` that writes `status` and nothing else (its own patch aside).
    pub fn new(run: &UpgradeRun, status: UpgradeRunStatus) -> Self {
        Step {
            own: RunPatch::own(run),
            supersede: Vec::new(),
            write_snapshot: Vec::new(),
            frozen: None,
            adopt_approvals: Vec::new(),
            evaluation: None,
            binding_patches: Vec::new(),
            admitted: None,
            to: String::new(),
            announce: Vec::new(),
            results: Vec::new(),
            gauges: Gauges::Keep,
            newly_superseded: false,
            finished: None,
            trigger: TriggerKind::of(run),
            release: None,
            create_revert: None,
            status,
            wake_at: None,
            wake_runs: Vec::new(),
        }
    }
}

fn cond(
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
    now: DateTime<Utc>,
) -> Condition {
    Condition::new(type_, status, reason, message, now)
}

/// The `Suspended` condition (spec §4.3).
fn suspended_condition(run: &UpgradeRun, status: &UpgradeRunStatus, now: DateTime<Utc>) -> Condition {
    let (s, reason, message) = match (&status.superseded_by, run.spec.suspend) {
        (Some(newer), _) => (ConditionStatus::True, reasons::SUPERSEDED, texts::superseded(newer)),
        (None, true) if is_preview(run) => (
            ConditionStatus::True,
            reasons::SUSPENDED,
            "Preview: the snapshot is taken and nothing is patched; set spec.suspend=false to roll it out".into(),
        ),
        (None, true) => (
            ConditionStatus::True,
            reasons::SUSPENDED,
            "Suspended: no new resource upgrade starts".into(),
        ),
        (None, false) => (ConditionStatus::False, "NotSuspended", "Not suspended".into()),
    };
    cond(reasons::SUSPENDED, s, reason, message, now)
}

/// Labels and annotations the run lacks (spec §4.2), plus the preview mark and, for a resumed
/// preview, the moment of its admission.
fn metadata_patch(run: &UpgradeRun, plan: &UpgradePlan, resumed: bool, now: DateTime<Utc>) -> RunPatch {
    let plan_name = plan.metadata.name.clone().unwrap_or_default();
    let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
    super::naming::put_name(&mut labels, &mut annotations, PLAN_LABEL, &plan_name);
    let unadmitted = run.status.as_ref().map(|s| s.state).unwrap_or_default() == RunState::Unresolved;
    if unadmitted && created_suspended(run) {
        annotations.insert(PREVIEW_ANNOTATION.to_string(), "true".to_string());
    }
    if resumed {
        annotations.insert(ADMITTED_AT_ANNOTATION.to_string(), crate::time::rfc3339(now));
    }
    let have_labels = run.metadata.labels.clone().unwrap_or_default();
    let have_annotations = run.metadata.annotations.clone().unwrap_or_default();
    labels.retain(|k, v| have_labels.get(k) != Some(v));
    annotations.retain(|k, v| have_annotations.get(k) != Some(v));
    let owned = run
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| Some(&o.uid) == plan.metadata.uid.as_ref());
    // The run's other owners stay; a controller reference to anything but the plan does not.
    let owner_references = plan.controller_owner_ref(&()).filter(|_| !owned).map(|owner| {
        let others = run.owner_references().iter().filter(|o| o.controller != Some(true));
        others.cloned().chain([owner]).collect()
    });
    RunPatch {
        labels,
        annotations,
        owner_references,
        ..RunPatch::own(run)
    }
}

/// Whether a deleted run may let go: its plan recorded its result and keeps its counts (or never
/// will: no plan, a plan being deleted, a run that does not write `lastRun` and counted
/// nothing), or the grace period is over.
fn plan_recorded(run: &UpgradeRun, plan: Option<&UpgradePlan>, now: DateTime<Utc>) -> bool {
    let Some(plan) = plan else { return true };
    if plan.metadata.deletion_timestamp.is_some() {
        return true;
    }
    let last_run_recorded = last_run_of(run).is_none_or(|mine| {
        plan.status
            .as_ref()
            .and_then(|s| s.last_run.as_ref())
            .is_some_and(|l| l.name == mine.name || l.finished_at > mine.finished_at)
    });
    let recorded = last_run_recorded && super::counters::kept(run, Some(plan));
    let deleted = run
        .metadata
        .deletion_timestamp
        .as_ref()
        .map(|t| crate::time::to_chrono(&t.0))
        .unwrap_or(now);
    recorded || now - deleted >= RECORD_GRACE
}

/// The run's next status and what to do, from the run, the gathered facts and the caches.
pub fn step(run: &UpgradeRun, facts: &Facts<'_>, cluster: &dyn Cluster) -> Step {
    let mut out = Step::new(run, run.status.clone().unwrap_or_default());
    // Each stage either decides the step (Break) or hands on what it established.
    let _ = decide_stages(&mut out, run, facts, cluster);
    // A missed watch event (a binding that finished, an approval created) must not leave a run
    // waiting for ever: a run still going looks again at least every RESYNC.
    let going = !out.status.state.is_terminal() && !is_dormant(run) && out.release.is_none();
    if going {
        let resync = facts.now + RESYNC;
        out.wake_at = Some(out.wake_at.map_or(resync, |at| at.min(resync)));
    }
    if let Some(selector) = facts.selector {
        if run.annotations().get(SELECTOR_ANNOTATION).map(String::as_str) != Some(selector) {
            out.own.annotations.insert(SELECTOR_ANNOTATION.into(), selector.into());
        }
    }
    if let Some(eval) = &out.evaluation {
        out.binding_patches = BindingPatch::of_evaluation(eval, &out.to, run_name(run), facts.now);
    }
    out.admitted = admitted(run, &out, facts, cluster);
    // The status says which groups are health-checked, so that the counters read from it count
    // their successes only once final (kept as recorded when the snapshot is not at hand).
    let compiled = match (&out.frozen, &facts.snapshot) {
        (Some(frozen), _) | (None, SnapshotFact::Found { frozen, .. }) => Some(&frozen.compiled),
        _ => None,
    };
    if let Some(compiled) = compiled {
        for g in &mut out.status.rollout_groups {
            g.health_checked = compiled.group(&g.name).is_some_and(|c| c.health_timeout.is_some());
        }
    }
    out
}

/// What admitted `step`'s starts, for the sender to check again before each: the run, when the
/// current group's windows (with the freezes known now) close next, and the freezes selecting the
/// plan (spec §14.1). `None` when it starts nothing.
fn admitted(
    run: &UpgradeRun,
    step: &Step,
    facts: &Facts<'_>,
    cluster: &dyn Cluster,
) -> Option<crate::engine::admitted::Admitted> {
    if step.binding_patches.is_empty() {
        return None;
    }
    let frozen = step.frozen.as_ref()?;
    let windows = step.evaluation.as_ref()?.windows.as_ref()?;
    let labels = facts.plan.map(|p| p.labels().clone()).unwrap_or_default();
    Some(crate::engine::admitted::Admitted::new(
        run,
        windows.next_close,
        &cluster.freezes(),
        &frozen.compiled.promise,
        &labels,
    ))
}

/// The stages of a run's pass, in the order the spec settles them: an ended run, a cancelled one,
/// its plan, its admission, the kinds it needs, then the Pending or InProgress run's work.
fn decide_stages(out: &mut Step, run: &UpgradeRun, facts: &Facts<'_>, cluster: &dyn Cluster) -> ControlFlow<()> {
    ended(out, run, facts)?;
    cancelled(out, run, facts)?;
    let plan = resolve_plan(out, run, facts)?;
    let admitted = admit_run(out, run, plan.plan, facts)?;
    kinds_served(out, facts, admitted.dormant_preview)?;
    if out.status.state == RunState::Pending {
        return start_run(out, run, &plan, &admitted, facts, cluster);
    }
    // A preview not resumed is dormant (spec §5.2): nothing but its snapshot is computed, so
    // it cannot fail, start, announce or count anything.
    if admitted.dormant_preview {
        return ControlFlow::Break(());
    }
    continue_run(out, run, plan.plan, &admitted, facts, cluster);
    ControlFlow::Break(())
}

/// A terminal run does nothing more; deleted, it lets go once its plan recorded it.
fn ended(out: &mut Step, run: &UpgradeRun, facts: &Facts<'_>) -> ControlFlow<()> {
    if !out.status.state.is_terminal() {
        return ControlFlow::Continue(());
    }
    if run.metadata.deletion_timestamp.is_some() {
        out.release = plan_recorded(run, facts.plan, facts.now).then(|| Release::of(run));
        if out.release.is_none() {
            out.wake_at = Some(facts.now + RECORD_POLL);
        }
    }
    ControlFlow::Break(())
}

/// Deletion and `spec.cancel` (spec §5.10).
fn cancelled(out: &mut Step, run: &UpgradeRun, facts: &Facts<'_>) -> ControlFlow<()> {
    let now = facts.now;
    // The target of the run's upgrades, for the text of its end.
    let frozen_to = || match &facts.snapshot {
        SnapshotFact::Found { frozen, .. } => frozen.plan.upgrade_path.to.clone(),
        _ => String::new(),
    };
    if run.metadata.deletion_timestamp.is_some() {
        // A dormant run (superseded, or a preview never resumed; spec §5.2) did nothing it could
        // be cancelled from: deleting it is a quiet clean-up — no Cancelled state, event,
        // runs_total or duration sample, and lastRun is untouched. Its snapshot goes once the
        // plan keeps what it counted before (a superseded run's outcomes).
        if superseded_by(run).is_some() || is_preview(run) {
            out.release = plan_recorded(run, facts.plan, now).then(|| Release::of(run));
            if out.release.is_none() {
                out.wake_at = Some(now + RECORD_POLL);
            }
            return ControlFlow::Break(());
        }
        // Cancel = delete. The finalizer goes on a later pass, once the plan recorded it.
        let (reason, message) = (reasons::RUN_CANCELLED, texts::run_cancelled());
        finish(out, true, RunState::Cancelled, reason, message, &frozen_to(), now);
        out.wake_at = Some(now);
        return ControlFlow::Break(());
    }
    // spec.cancel: Cancelled, and the run stays as the record of what it did (its snapshot
    // kept). A dormant run has nothing to cancel: it stays as it is.
    if run.spec.cancel && !is_dormant(run) {
        let (reason, message) = (reasons::RUN_CANCELLED, texts::run_cancelled_on_request());
        finish(out, true, RunState::Cancelled, reason, message, &frozen_to(), now);
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(())
}

/// The run's plan, and whether it is valid (spec §4.3).
struct ResolvedPlan<'a> {
    plan: &'a UpgradePlan,
    /// The live plan compiled, for a run that follows it (before its snapshot): or why it is
    /// invalid.
    live: Option<Result<CompiledPlan, String>>,
    /// The invalidity announced last: a different one is announced again (spec §14.2).
    announced_invalid: Option<String>,
}

/// `PlanResolved`: the plan exists, and before its snapshot the run follows the live plan, which
/// must be valid; after, its frozen copy.
fn resolve_plan<'a>(out: &mut Step, run: &UpgradeRun, facts: &Facts<'a>) -> ControlFlow<(), ResolvedPlan<'a>> {
    let now = facts.now;
    let plan_name = run.plan_name();
    let Some(plan) = facts.plan else {
        let message = texts::plan_not_found(plan_name);
        let c = cond(
            reasons::PLAN_RESOLVED,
            ConditionStatus::False,
            reasons::PLAN_NOT_FOUND,
            message,
            now,
        );
        set_condition(&mut out.status.conditions, c);
        return ControlFlow::Break(());
    };
    // A revert follows the frozen plan of the run it reverts, never the live plan: an emergency
    // revert is not held by a plan someone broke since (spec §13.7).
    let follows_live =
        matches!(out.status.state, RunState::Unresolved | RunState::Pending) && run.spec.revert_of.is_none();
    let live = follows_live.then(|| {
        check_plan(plan_name, &plan.spec, now)
            .map_err(|problems: Vec<_>| texts::plan_invalid(plan_name, &summarize_problems(&problems)))
    });
    let invalid = live.as_ref().and_then(|l| l.as_ref().err());
    let announced_invalid = find_condition(&out.status.conditions, reasons::PLAN_RESOLVED)
        .filter(|c| c.reason == reasons::PLAN_INVALID)
        .map(|c| c.message.clone());
    let (status, reason, message) = match invalid {
        Some(message) => (ConditionStatus::False, reasons::PLAN_INVALID, message.clone()),
        None => (ConditionStatus::True, reasons::PLAN_FOUND, texts::plan_found(plan_name)),
    };
    set_condition(
        &mut out.status.conditions,
        cond(reasons::PLAN_RESOLVED, status, reason, message, now),
    );
    ControlFlow::Continue(ResolvedPlan {
        plan,
        live,
        announced_invalid,
    })
}

/// What admission established about a run that goes on.
struct Admitted {
    /// A preview not resumed (spec §5.2).
    dormant_preview: bool,
    /// The run publishes its plan's gauges (not a dormant preview).
    owns_gauges: bool,
}

/// Admission (spec §5.2), re-checked on every pass so that two runs admitted at once still end
/// with one winner: the newest supersedes the others; a superseded run keeps its state and does
/// nothing more. Also the run's own metadata and `Suspended`.
fn admit_run(out: &mut Step, run: &UpgradeRun, plan: &UpgradePlan, facts: &Facts<'_>) -> ControlFlow<(), Admitted> {
    let now = facts.now;
    let mut me = RunFacts::of(run);
    // A preview is one only while suspended, or once seen as one (annotated): resumed before its
    // status was first written (a failed write after its annotation), it is admitted now too.
    let resumed = me.preview && !run.spec.suspend;
    if resumed {
        me.preview = false;
        me.created = crate::time::whole_seconds(now); // as the annotation will say
    }
    out.own = metadata_patch(run, plan, resumed, now);
    let newer = match superseded_by(run) {
        Some(newer) => Some(newer.to_string()),
        None if me.preview => None,
        None => match admit(&me, facts.others) {
            Admission::SupersededBy(newer) => Some(newer),
            Admission::Proceed { supersede } => {
                out.supersede = supersede
                    .iter()
                    .map(|older| RunPatch::supersede(older, run_name(run)))
                    .collect();
                None
            }
        },
    };
    if out.status.state == RunState::Unresolved {
        out.status.state = RunState::Pending;
    }
    let superseded = newer.is_some();
    if let Some(newer) = newer {
        if out.status.superseded_by.is_none() {
            out.newly_superseded = true;
            out.announce
                .push(Announcement::normal(events::SUPERSEDED, texts::superseded(&newer)));
            out.status.superseded_by = Some(newer);
        }
        out.own.suspend = !run.spec.suspend;
    }
    let c = suspended_condition(run, &out.status, now);
    set_condition(&mut out.status.conditions, c);
    if superseded {
        return ControlFlow::Break(());
    }
    ControlFlow::Continue(Admitted {
        dormant_preview: me.preview,
        owns_gauges: !is_preview(run) || resumed,
    })
}

/// `KindsServed` (spec §14.2): a kind the plan needs is not served, so the run waits, saying so
/// once; deleting it still cancels it. Served again (its CRD installed), the condition says so.
fn kinds_served(out: &mut Step, facts: &Facts<'_>, dormant_preview: bool) -> ControlFlow<()> {
    let now = facts.now;
    if let (Some(missing), false) = (facts.missing_kinds.first(), dormant_preview) {
        let message = missing.message();
        out.announce
            .push(Announcement::warning(events::KIND_NOT_SERVED, message.clone()).keyed(message.clone()));
        let c = cond(
            reasons::KINDS_SERVED,
            ConditionStatus::False,
            reasons::KIND_NOT_SERVED,
            message,
            now,
        );
        set_condition(&mut out.status.conditions, c);
        out.wake_at = Some(now + KIND_POLL);
        return ControlFlow::Break(());
    }
    if find_condition(&out.status.conditions, reasons::KINDS_SERVED).is_some() {
        let message = "every kind the plan needs is served".to_string();
        let c = cond(
            reasons::KINDS_SERVED,
            ConditionStatus::True,
            reasons::KINDS_SERVED,
            message,
            now,
        );
        set_condition(&mut out.status.conditions, c);
    }
    ControlFlow::Continue(())
}

/// A Pending run starts once its plan is valid and the target PromiseRevision exists (spec
/// §5.3): it takes its snapshot (spec §5.4) and, unless a dormant preview, its first evaluation.
/// A revert derives its snapshot from the run it reverts instead ([`start_revert`]).
fn start_run(
    out: &mut Step,
    run: &UpgradeRun,
    resolved: &ResolvedPlan<'_>,
    admitted: &Admitted,
    facts: &Facts<'_>,
    cluster: &dyn Cluster,
) -> ControlFlow<()> {
    if let Some(of) = &run.spec.revert_of {
        return start_revert(out, run, resolved.plan, of, admitted, facts, cluster);
    }
    let (now, plan) = (facts.now, resolved.plan);
    // A snapshot an earlier pass wrote (a crash before the status) is the run's: its frozen plan
    // decides from here, whatever the live plan says since (spec §14.2).
    let found = match &facts.snapshot {
        SnapshotFact::Found { frozen, .. } => Some(frozen),
        _ => None,
    };
    let compiled = match &resolved.live {
        _ if found.is_some() => None,
        Some(Ok(compiled)) => Some(compiled),
        Some(Err(message)) => {
            if resolved.announced_invalid.as_ref() != Some(message) {
                // Keyed by the problem: once per problem, across restarts.
                out.announce
                    .push(Announcement::warning(events::PLAN_INVALID, message.clone()).keyed(message.clone()));
            }
            return ControlFlow::Break(());
        }
        // Only a run before its snapshot starts, and it always has the live plan checked.
        None => return ControlFlow::Break(()),
    };
    let target = found.map_or(&plan.spec, |f| &f.plan);
    let promise = target.promise_ref.name.as_str();
    let to = target.upgrade_path.to.as_str();
    out.to = to.to_string();
    // Revision gate: wait, not a failure. One being deleted is never a target (spec §5.7).
    let revisions = cluster.revisions_of(promise);
    let ready = revisions.iter().any(|r| r.version == to && !r.deleting);
    let deleting = revisions.iter().find(|r| r.version == to && r.deleting);
    let message = texts::target_revision(promise, to, ready, deleting.map(|r| r.name.as_str()));
    set_condition(&mut out.status.conditions, revision_condition(ready, message, now));
    if !ready {
        if let (true, Some(compiled)) = (admitted.owns_gauges, compiled) {
            out.gauges = Gauges::Set(revision_gate_gauges(plan, compiled, cluster));
        }
        return ControlFlow::Break(());
    }
    // Taken once: a snapshot an earlier pass wrote is the run's, not a new one.
    let (frozen, refs) = match (&facts.snapshot, compiled) {
        (SnapshotFact::Found { frozen, refs }, _) => (frozen.clone(), refs.clone()),
        (_, None) => return ControlFlow::Break(()),
        (_, Some(compiled)) => {
            let frozen = Arc::new(take_snapshot(plan, compiled, cluster));
            let refs = write_new_snapshot(out, run, &frozen);
            (frozen, refs)
        }
    };
    begin(out, run, plan, frozen, refs, admitted, facts, cluster);
    ControlFlow::Break(())
}

/// A revert starts from a snapshot derived from the run it reverts (spec §13.7), once: each
/// resource that run started and left upgraded or failed, with its own target. A revert that
/// cannot be taken (that run gone, of another plan, never started, or its snapshot lost or
/// changed) fails at once, saying why. Its revision gate never waits: a resource whose target
/// has no PromiseRevision any more is skipped, the others go back.
fn start_revert(
    out: &mut Step,
    run: &UpgradeRun,
    plan: &UpgradePlan,
    of: &RevertOf,
    admitted: &Admitted,
    facts: &Facts<'_>,
    cluster: &dyn Cluster,
) -> ControlFlow<()> {
    let now = facts.now;
    // Created by the run it reverts as that run failed (onFailure: Revert): it waits until that
    // run has recorded its failure, which a crash between the two writes could otherwise hide.
    let creator = facts
        .others
        .iter()
        .find(|o| o.name == of.name && o.reverted_by.as_deref() == Some(run_name(run)));
    if let (Some(creator), SnapshotFact::Absent) = (creator, &facts.snapshot) {
        if creator.state.is_active() {
            let c = cond(
                reasons::REVERT_READY,
                ConditionStatus::False,
                reasons::REVERTED_RUN_ENDING,
                texts::reverted_run_ending(&of.name),
                now,
            );
            set_condition(&mut out.status.conditions, c);
            out.wake_at = Some(now + RECORD_POLL);
            return ControlFlow::Break(());
        }
    }
    if find_condition(&out.status.conditions, reasons::REVERT_READY).is_some() {
        let c = cond(
            reasons::REVERT_READY,
            ConditionStatus::True,
            reasons::REVERTED_RUN_ENDED,
            texts::reverted_run_ended(&of.name),
            now,
        );
        set_condition(&mut out.status.conditions, c);
    }
    let (frozen, refs) = match &facts.snapshot {
        SnapshotFact::Found { frozen, refs } => (frozen.clone(), refs.clone()),
        // The controller gathers the reverted run for a revert without its snapshot.
        _ if matches!(facts.reverted, RevertedFact::NotGathered) => return ControlFlow::Break(()),
        _ => {
            // One consistent view of the bindings the reverted run's snapshot names.
            let bindings: HashMap<(String, String), Arc<dyn BindingFacts>> = match &facts.reverted {
                RevertedFact::Found {
                    snapshot: SnapshotFact::Found { frozen, .. },
                    ..
                } => frozen
                    .snapshot
                    .groups
                    .iter()
                    .flat_map(|g| &g.resources)
                    .filter_map(|r| {
                        let b = cluster.binding(&r.namespace, &r.binding)?;
                        Some(((r.namespace.clone(), r.binding.clone()), b))
                    })
                    .collect(),
                _ => HashMap::new(),
            };
            let lookup = |ns: &str, name: &str| bindings.get(&(ns.to_string(), name.to_string())).map(|b| b.as_ref());
            match revert::derive(run.plan_name(), of, run.spec.respect_policy, &facts.reverted, lookup) {
                Ok(frozen) => {
                    let frozen = Arc::new(frozen);
                    let refs = write_new_snapshot(out, run, &frozen);
                    (frozen, refs)
                }
                Err(refusal) => {
                    out.to = revert::NO_TARGET.to_string();
                    // A dormant preview cannot fail (spec §5.2): it says why, and fails once resumed.
                    if admitted.dormant_preview {
                        let c = cond(
                            reasons::RUN_SUCCEEDED,
                            ConditionStatus::False,
                            refusal.reason,
                            refusal.message,
                            now,
                        );
                        set_condition(&mut out.status.conditions, c);
                        return ControlFlow::Break(());
                    }
                    let to = out.to.clone();
                    finish(
                        out,
                        admitted.owns_gauges,
                        RunState::Failed,
                        refusal.reason,
                        refusal.message,
                        &to,
                        now,
                    );
                    return ControlFlow::Break(());
                }
            }
        }
    };
    let promise = frozen.compiled.promise.as_str();
    let revisions = Revisions::of(&frozen, &cluster.revisions_of(promise));
    set_condition(
        &mut out.status.conditions,
        revert_revision_condition(promise, &frozen, &revisions, now),
    );
    begin(out, run, plan, frozen, refs, admitted, facts, cluster);
    ControlFlow::Break(())
}

/// `TargetRevisionReady`: True/`PromiseRevisionReady` or False/`PromiseRevisionNotFound`.
fn revision_condition(ready: bool, message: String, now: DateTime<Utc>) -> Condition {
    let (status, reason) = if ready {
        (ConditionStatus::True, reasons::PROMISE_REVISION_READY)
    } else {
        (ConditionStatus::False, reasons::PROMISE_REVISION_NOT_FOUND)
    };
    cond(reasons::TARGET_REVISION_READY, status, reason, message, now)
}

/// A revert's `TargetRevisionReady`: every target's PromiseRevision there, or which are gone (their
/// resources are skipped: a revert never waits for one).
fn revert_revision_condition(promise: &str, frozen: &Frozen, revisions: &Revisions, now: DateTime<Utc>) -> Condition {
    let gone: Vec<&str> = revisions.gone_targets.iter().map(String::as_str).collect();
    let message = if gone.is_empty() {
        texts::revision_ready(promise, &frozen.plan.upgrade_path.to)
    } else {
        texts::revert_revisions_missing(promise, &gone)
    };
    revision_condition(gone.is_empty(), message, now)
}

/// A new snapshot: its ConfigMaps to write, and the references (with digests) the status records.
fn write_new_snapshot(out: &mut Step, run: &UpgradeRun, frozen: &Arc<Frozen>) -> Vec<ResourceListRef> {
    out.write_snapshot = snapshot_config_maps(run_name(run), frozen);
    out.write_snapshot
        .iter()
        .map(|(name, data)| ResourceListRef {
            name: name.clone(),
            sha256: Some(digest(data)),
        })
        .collect()
}

/// The run turns InProgress on its snapshot (spec §5.4) and, unless a dormant preview, takes its
/// first evaluation.
#[allow(clippy::too_many_arguments)]
fn begin(
    out: &mut Step,
    run: &UpgradeRun,
    plan: &UpgradePlan,
    frozen: Arc<Frozen>,
    refs: Vec<ResourceListRef>,
    admitted: &Admitted,
    facts: &Facts<'_>,
    cluster: &dyn Cluster,
) {
    out.to = frozen.plan.upgrade_path.to.clone();
    out.status.resource_list_refs = refs;
    out.status.rollout_groups = frozen.snapshot.initial_counts();
    out.status.total_resources = out.status.rollout_groups.iter().map(|g| g.total).sum();
    out.status.completed_resources = 0;
    out.status.started_at = Some(facts.now);
    out.status.state = RunState::InProgress;
    if admitted.dormant_preview {
        out.frozen = Some(frozen);
    } else {
        progress(run, plan, out, frozen, admitted.owns_gauges, cluster, facts);
    }
}

/// An InProgress run goes on from its snapshot. Without it, or with one that is not what was
/// written, it cannot (spec §4.3 SnapshotMissing, SnapshotTampered): it fails, and nothing more
/// is patched.
fn continue_run(
    out: &mut Step,
    run: &UpgradeRun,
    plan: &UpgradePlan,
    admitted: &Admitted,
    facts: &Facts<'_>,
    cluster: &dyn Cluster,
) {
    let (reason, message) = match facts.snapshot.clone() {
        SnapshotFact::Found { frozen, .. } => {
            return progress(run, plan, out, frozen, admitted.owns_gauges, cluster, facts)
        }
        SnapshotFact::Lost { config_map, .. } => (reasons::SNAPSHOT_MISSING, texts::snapshot_missing(&config_map)),
        SnapshotFact::Absent => (
            reasons::SNAPSHOT_MISSING,
            texts::snapshot_missing(&snapshot_config_map_name(run_name(run), 0)),
        ),
        SnapshotFact::Tampered { config_map } => {
            let recorded = out.status.started_at.map(crate::time::rfc3339).unwrap_or_default();
            (
                reasons::SNAPSHOT_TAMPERED,
                texts::snapshot_tampered(&config_map, &recorded),
            )
        }
    };
    let to = plan.spec.upgrade_path.to.clone();
    out.to = to.clone();
    finish(
        out,
        admitted.owns_gauges,
        RunState::Failed,
        reason,
        message,
        &to,
        facts.now,
    );
}

fn run_name(run: &UpgradeRun) -> &str {
    run.metadata.name.as_deref().unwrap_or_default()
}

/// The run's snapshot of the live plan (`compiled` from it): eligible bindings of its Promise
/// assigned to groups.
fn take_snapshot(plan: &UpgradePlan, compiled: &CompiledPlan, cluster: &dyn Cluster) -> Frozen {
    let bindings = cluster.bindings_of(&compiled.promise);
    let snapshot = group_bindings(compiled, bindings.iter().map(|b| b.as_ref())).snapshot(compiled);
    Frozen {
        overlaps: Overlaps::of(&snapshot),
        snapshot,
        plan: plan.spec.clone(),
        compiled: compiled.clone(),
    }
}

/// A snapshot ConfigMap: its name and data.
pub type SnapshotConfigMap = (String, BTreeMap<String, String>);

/// The ConfigMaps a run's snapshot is written to: (name, data) in shard order, the frozen plan
/// in the first.
pub fn snapshot_config_maps(run: &str, frozen: &Frozen) -> Vec<SnapshotConfigMap> {
    shard(&frozen.snapshot, SNAPSHOT_SHARD_BYTES)
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            // Our own types always serialize; were one not to, the empty data would read back
            // as a missing snapshot (SnapshotMissing), never as a wrong one.
            let data = config_map_data(&part, (i == 0).then_some(&frozen.plan)).unwrap_or_default();
            (snapshot_config_map_name(run, i), data)
        })
        .collect()
}

/// Where every "since the run began" rule of an InProgress run counts from: its admission (spec
/// §5.2). A dormant preview never gets that far, so a preview evaluated is being resumed in this
/// very pass, at `now`.
fn counted_from(run: &UpgradeRun, now: DateTime<Utc>) -> DateTime<Utc> {
    if is_preview(run) {
        crate::time::whole_seconds(now)
    } else {
        admitted_at(run)
    }
}

/// Evaluates an InProgress run against live bindings and decides what follows.
fn progress(
    run: &UpgradeRun,
    plan: &UpgradePlan,
    out: &mut Step,
    frozen: Arc<Frozen>,
    owns_gauges: bool,
    cluster: &dyn Cluster,
    facts: &Facts,
) {
    let now = facts.now;
    let admitted = counted_from(run, now);
    // The frozen plan's Promise, not the live plan's: a promiseRef edited mid-run changes nothing
    // of this run (spec §14.2) — its revisions, health records and freezes stay those it began with.
    let promise = frozen.compiled.promise.as_str();
    let to = frozen.compiled.to.clone();
    out.to = to.clone();
    let previous = out.status.rollout_groups.clone();
    // One consistent view of the live bindings for the whole evaluation, in the snapshot's order
    // (at 100k resources, copied keys were 15 MiB on every pass; a map of its own per pass was a
    // sixth of a budgeted pass's CPU).
    let live = cluster.snapshot_bindings(&frozen.snapshot);
    let live: Vec<Option<&dyn BindingFacts>> = live.iter().map(Option::as_deref).collect();
    let health = if frozen.compiled.checks_health() {
        HealthRecords::index(promise, cluster.health_records(promise))
    } else {
        HealthRecords::default()
    };
    // Freezes select by the live plan's labels (they are not part of the frozen spec); a revert
    // that does not respect policy is not held by them (spec §13.7).
    let freezes = holding(
        revert::freezes_holding(&run.spec, &cluster.freezes()),
        promise,
        kube::ResourceExt::labels(plan),
    );
    let revisions = Revisions::of(&frozen, &cluster.revisions_of(promise));
    // A revert's targets may lose their revisions mid-run: the condition says so as it happens.
    if run.spec.revert_of.is_some() {
        let c = revert_revision_condition(promise, &frozen, &revisions, now);
        set_condition(&mut out.status.conditions, c);
    }
    let eval = evaluate_in_order(
        &RunContext {
            run_name: run_name(run),
            run_created: admitted,
            snapshot_taken: out.status.started_at.unwrap_or(now),
            reverting: run.spec.revert_of.as_ref().map(|o| o.name.as_str()),
            suspended: run.spec.suspend,
            plan: &frozen.compiled,
            snapshot: &frozen.snapshot,
            overlaps: &frozen.overlaps,
            recorded: &previous,
            health: &health,
            gates: facts.gates,
            approvals: facts.approvals,
            freezes: &freezes,
            budgets: facts.budgets,
            revisions: &revisions,
            now,
        },
        &live,
    );
    // The status and the gauges say what the views show: one run view (spec §10).
    let view = run_view(out.status.state, &previous, Some(&frozen), Some(&eval));
    out.status.rollout_groups = view.groups.iter().map(|g| g.status.clone()).collect();
    out.status.completed_resources = eval.completed_resources();
    out.status.total_resources = eval.total_resources();
    let (announce, results) = resource_reports(&eval, &previous, &frozen.snapshot, &to);
    out.announce.extend(announce);
    out.results = results;
    if owns_gauges {
        out.gauges = Gauges::Set(run_gauges(&view, &frozen.snapshot));
    }
    out.wake_at = eval.wake_at;
    let gate_failure = gate_transition(out, &eval, &frozen, facts.gates, now);
    approval_transition(out, &eval, &previous, now);
    freeze_transition(out, &eval, now);
    budget_transition(out, &eval, facts.budgets, now);
    out.wake_runs = upgrade_budget::to_wake(facts.budgets, &eval.own_in_flight, eval.start.len() + eval.retry.len());
    out.adopt_approvals = ApprovalPatch::adoptions(run, facts.approvals);
    let verdict = eval.verdict.clone();
    out.evaluation = Some(eval);
    out.frozen = Some(frozen.clone());
    if let Some((state, reason, message)) =
        ending(&verdict, gate_failure, &out.status, &frozen, (promise, &to), &revisions)
    {
        if state == RunState::Failed {
            revert_on_failure(out, run, plan, &frozen, &verdict);
        }
        finish(out, owns_gauges, state, reason, message, &to, now);
    }
}

/// A run failing in a group with `onFailure: Revert` creates its revert, once (spec §13.7): named
/// `<run>-revert`, for every resource it upgraded or failed (the groups after the failing one
/// never started). Its own patch records the revert, so that a pass decided from a stale copy
/// of the run is refused before it creates anything.
fn revert_on_failure(out: &mut Step, run: &UpgradeRun, plan: &UpgradePlan, frozen: &Frozen, verdict: &Verdict) {
    let group = match *verdict {
        Verdict::Failed { group, .. } | Verdict::InProgress { group } => frozen.snapshot.groups.get(group),
        // The revision gone fails the run in the group it was in: the first not completed.
        Verdict::RevisionMissing | Verdict::Completed => out
            .status
            .rollout_groups
            .iter()
            .position(|g| g.phase != Some(GroupPhase::Completed))
            .and_then(|i| frozen.snapshot.groups.get(i)),
    };
    let Some(group) = group else { return };
    let reverts = frozen
        .plan
        .rollout_groups
        .iter()
        .any(|g| g.name == group.name && g.on_failure == Some(OnFailure::Revert));
    if !reverts || run.spec.revert_of.is_some() {
        return;
    }
    let name = revert::revert_name(run_name(run));
    let how = NewRun::Revert {
        name: Some(name.clone()),
        of: RevertOf {
            name: run_name(run).to_string(),
            resources: RevertResources::All,
        },
        respect_policy: false,
        preview: false,
    };
    out.create_revert = Some(Created(new_run(plan, how)));
    if run.annotations().get(REVERTED_BY_ANNOTATION) != Some(&name) {
        out.own.annotations.insert(REVERTED_BY_ANNOTATION.into(), name.clone());
    }
    out.announce
        .push(Announcement::normal(events::REVERT_CREATED, texts::revert_created(&name, &group.name)).keyed(name));
}

/// How an evaluated run ends now, if it does: completed (with failures within the budgets, or
/// none), failed by a group past its budget, a gate closed for its `failAfter` or the target
/// revision gone; `None` while it goes on.
fn ending(
    verdict: &Verdict,
    gate_failure: Option<String>,
    status: &UpgradeRunStatus,
    frozen: &Frozen,
    (promise, to): (&str, &str),
    revisions: &Revisions,
) -> Option<(RunState, &'static str, String)> {
    match *verdict {
        Verdict::InProgress { .. } => gate_failure.map(|message| (RunState::Failed, reasons::GATE_FAILED, message)),
        Verdict::Completed => {
            let failed: i64 = status.rollout_groups.iter().map(|g| g.failed).sum();
            let (completed, total) = (status.completed_resources, status.total_resources);
            Some(if failed > 0 {
                let message = texts::run_completed_with_failures(completed, total, to, failed);
                (RunState::Completed, reasons::RUN_COMPLETED_WITH_FAILURES, message)
            } else {
                let message = texts::run_summary(completed, total, to);
                (RunState::Completed, reasons::RUN_COMPLETED, message)
            })
        }
        Verdict::Failed { group, failed } => {
            let message = texts::group_failed(failed, &frozen.snapshot.groups[group].name);
            Some((RunState::Failed, reasons::RESOURCE_UPGRADE_FAILED, message))
        }
        Verdict::RevisionMissing => {
            let message = texts::target_revision(promise, to, false, revisions.target_deleting.as_deref());
            Some((RunState::Failed, reasons::PROMISE_REVISION_NOT_FOUND, message))
        }
    }
}

/// What a group's recorded approval says: who, which UpgradeApproval, and the comment.
fn approved_text(g: &GroupStatus) -> String {
    let approval = g.recorded_approval().map_or("", |(name, _)| name);
    stage::texts::approved(&g.name, approval, g.approver(), g.comment.as_deref())
}

/// The approvals' part of a step (spec §13.4): the `AwaitingApproval` condition while a group
/// waits, a Normal `GroupAwaitingApproval` event once per group, and `GroupApproved` when a
/// group's approval is first recorded.
fn approval_transition(out: &mut Step, eval: &Evaluation, previous: &[GroupStatus], now: DateTime<Utc>) {
    let waiting = eval
        .groups
        .iter()
        .find(|g| g.phase == Some(GroupPhase::AwaitingApproval));
    for (i, g) in eval.groups.iter().enumerate() {
        let (Some(_), None) = (
            g.recorded_approval(),
            previous.get(i).and_then(GroupStatus::recorded_approval),
        ) else {
            continue;
        };
        out.announce
            .push(Announcement::normal(events::GROUP_APPROVED, approved_text(g)).keyed(format!("approved:{}", g.name)));
    }
    match waiting {
        Some(g) => {
            let message = stage::texts::awaiting_approval(&g.name);
            out.announce.push(
                Announcement::normal(events::GROUP_AWAITING_APPROVAL, message.clone())
                    .keyed(format!("awaiting:{}", g.name)),
            );
            set_condition(
                &mut out.status.conditions,
                cond(
                    reasons::AWAITING_APPROVAL,
                    ConditionStatus::True,
                    reasons::APPROVAL_REQUIRED,
                    message,
                    now,
                ),
            );
        }
        None => {
            let was_waiting = find_condition(&out.status.conditions, reasons::AWAITING_APPROVAL)
                .is_some_and(|c| c.status == ConditionStatus::True);
            if was_waiting {
                let message = eval
                    .groups
                    .iter()
                    .rev()
                    .find(|g| g.recorded_approval().is_some())
                    .map(approved_text)
                    .unwrap_or_else(|| "no rollout group waits for an UpgradeApproval".into());
                set_condition(
                    &mut out.status.conditions,
                    cond(
                        reasons::AWAITING_APPROVAL,
                        ConditionStatus::False,
                        reasons::APPROVED,
                        message,
                        now,
                    ),
                );
            }
        }
    }
}

/// The freezes' part of a step (spec §13.5): the `Frozen` condition, True while a freeze holds
/// the current group's next starts (naming it, its end and its reason), False once none does
/// (only after it was True: a run never frozen does not carry the condition).
fn freeze_transition(out: &mut Step, eval: &Evaluation, now: DateTime<Utc>) {
    let condition = match &eval.freeze {
        Some(hold) => cond(
            reasons::FROZEN,
            ConditionStatus::True,
            reasons::FREEZE_ACTIVE,
            hold.message(),
            now,
        ),
        None if find_condition(&out.status.conditions, reasons::FROZEN).is_some() => cond(
            reasons::FROZEN,
            ConditionStatus::False,
            reasons::NOT_FROZEN,
            super::freeze::texts::not_frozen(),
            now,
        ),
        None => return,
    };
    set_condition(&mut out.status.conditions, condition);
}

/// The budgets' part of a step (spec §13.8): while UpgradeBudgets select the run's plan, the
/// `Budgeted` condition is present once the run is in progress — True/`BudgetExhausted` naming the
/// budget that keeps back starts nothing else holds (`UpgradeBudget "<name>": <n>/<max> in
/// flight`), False/`WithinBudget` otherwise. Other runs count a run it holds among the waiting
/// when they share the budget's free units.
fn budget_transition(out: &mut Step, eval: &Evaluation, budgets: &[BudgetFacts], now: DateTime<Utc>) {
    if budgets.is_empty() {
        if find_condition(&out.status.conditions, reasons::BUDGETED).is_some() {
            // No budget selects the plan any more: nothing holds the run.
            let c = cond(
                reasons::BUDGETED,
                ConditionStatus::False,
                reasons::WITHIN_BUDGET,
                "no UpgradeBudget selects the plan",
                now,
            );
            set_condition(&mut out.status.conditions, c);
        }
        return;
    }
    let condition = match &eval.rationed_by {
        Some(grant) => cond(
            reasons::BUDGETED,
            ConditionStatus::True,
            reasons::BUDGET_EXHAUSTED,
            grant.message(),
            now,
        ),
        _ => {
            let names: Vec<String> = budgets.iter().map(|b| b.name.clone()).collect();
            cond(
                reasons::BUDGETED,
                ConditionStatus::False,
                reasons::WITHIN_BUDGET,
                upgrade_budget::texts::within_budget(&names),
                now,
            )
        }
    };
    set_condition(&mut out.status.conditions, condition);
}

/// The signal gates of the current group (spec §13.3), each on its own: its state recorded in
/// `status.gates[]` with `since` its own last change, a `GateClosed` (Warning) or `GateOpened`
/// event whenever it turns, and its `failAfter` measured from its own `since`. The `Gated`
/// condition names the first closed gate in plan order. Returns the failure message when a gate
/// has been closed for its `failAfter`. Untouched when the gates were not read (nothing to start).
fn gate_transition(
    out: &mut Step,
    eval: &Evaluation,
    frozen: &Frozen,
    readings: &[GateReading],
    now: DateTime<Utc>,
) -> Option<String> {
    let group = match eval.verdict {
        Verdict::InProgress { group } => frozen.snapshot.groups.get(group).map(|g| g.name.as_str()),
        _ => None,
    }?;
    match &eval.gate_check {
        GateCheck::NotChecked => return None,
        GateCheck::Open => set_condition(
            &mut out.status.conditions,
            cond(
                reasons::GATED,
                ConditionStatus::False,
                reasons::GATES_OPEN,
                gate::texts::gates_open(),
                now,
            ),
        ),
        GateCheck::Closed { gate: g, reading } => {
            let (reason, message) = gate::closed_condition(&g.name, &reading.reading);
            set_condition(
                &mut out.status.conditions,
                cond(reasons::GATED, ConditionStatus::True, reason, message, now),
            );
        }
    }
    let previous = std::mem::take(&mut out.status.gates);
    let mut failure = None;
    for (g, reading) in gate::readings_of(&frozen.compiled, group, readings, now) {
        let open = reading.reading.is_open();
        let message = gate::message(g.name(), &reading.reading);
        let before = previous.iter().find(|p| p.name == g.name());
        let since = match before {
            Some(b) if b.open == open => b.since,
            _ => now,
        };
        // Each change is its own event, also when it says what an earlier one said; a change is
        // named by the gate, the group it holds and the state it leaves (as recorded), so every
        // pass that finds the same change — again after a refused status write, or from a stale
        // copy — names it alike (found by the simulation, seed 9650512759359055554: keyed by
        // `now`, one closing was announced twice).
        let left = before.map_or_else(|| "unread".to_string(), |b| crate::time::rfc3339(b.since));
        let key = format!("{}/{}/{left}", g.name(), group);
        match (before.map(|b| b.open), open) {
            (None | Some(true), false) => out
                .announce
                .push(Announcement::warning(events::GATE_CLOSED, message.clone()).keyed(key)),
            (Some(false), true) => out
                .announce
                .push(Announcement::normal(events::GATE_OPENED, gate::texts::gate_opened(g.name(), group)).keyed(key)),
            _ => {}
        }
        if !open {
            match (gate::fails_at(g, since), &g.fail_after) {
                (Some(at), Some(after)) if at <= now => {
                    failure.get_or_insert_with(|| gate::texts::gate_failed(g.name(), &after.written));
                }
                (Some(at), _) => out.wake_at = out.wake_at.into_iter().chain([at]).min(),
                _ => {}
            }
        }
        out.status.gates.push(GateStatus {
            name: g.name().to_string(),
            open,
            since,
            message,
        });
    }
    failure
}

/// Moves the run to a terminal state (spec §5.9): `RunSucceeded`, `finishedAt`, the terminal
/// event ([`texts::terminal_event`]: every path into Failed announces UpgradeRunFailed), and the
/// gauges cleared when the run owned them (it was the plan's active run). Nothing more starts.
fn finish(
    out: &mut Step,
    owns_gauges: bool,
    state: RunState,
    reason: &str,
    message: String,
    to: &str,
    now: DateTime<Utc>,
) {
    let status = &mut out.status;
    if let Some((warning, event_reason, note)) = texts::terminal_event(
        state,
        status.completed_resources,
        status.total_resources,
        status.rollout_groups.iter().map(|g| g.failed).sum(),
        to,
    ) {
        out.announce.push(if warning {
            Announcement::warning(event_reason, note)
        } else {
            Announcement::normal(event_reason, note)
        });
    }
    let succeeded = if state == RunState::Completed {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    set_condition(
        &mut status.conditions,
        cond(reasons::RUN_SUCCEEDED, succeeded, reason, message, now),
    );
    status.state = state;
    status.finished_at = Some(now);
    if let Some(e) = out.evaluation.as_mut() {
        // A terminal run starts nothing, whatever the last evaluation would have started.
        e.start.clear();
        e.retry.clear();
    }
    out.wake_at = None;
    out.gauges = if owns_gauges { Gauges::Clear } else { Gauges::Keep };
    out.finished = Some(state);
}

/// The gauges of a run held at the revision gate: the groups its snapshot would have, every
/// resource pending, blocked on `RevisionMissing` in the first group (spec §9.1).
fn revision_gate_gauges(plan: &UpgradePlan, compiled: &CompiledPlan, cluster: &dyn Cluster) -> RunGauges {
    let groups = take_snapshot(plan, compiled, cluster).snapshot.initial_counts();
    let mut resources = Vec::new();
    for g in &groups {
        push_group_series(&mut resources, g, 0);
    }
    let blocked = plan
        .spec
        .rollout_groups
        .first()
        .map(|g| (g.name.clone(), Blocked::RevisionMissing.as_str()))
        .into_iter()
        .collect();
    RunGauges { resources, blocked }
}

/// One group's `run_resources` series: every state, pending being what is neither done nor in
/// flight, and in flight split into upgrading (`in_progress`) and `verifying`.
fn push_group_series(resources: &mut Vec<(String, &'static str, i64)>, g: &GroupStatus, in_flight: i64) {
    let pending = (g.total - g.succeeded - g.failed - g.skipped - in_flight).max(0);
    for (state, n) in [
        ("pending", pending),
        ("in_progress", (in_flight - g.verifying).max(0)),
        ("verifying", g.verifying),
        ("succeeded", g.succeeded),
        ("failed", g.failed),
        ("skipped", g.skipped),
    ] {
        resources.push((g.name.clone(), state, n));
    }
}

/// The active run's gauges from its view.
pub fn run_gauges(view: &RunView, snapshot: &Snapshot) -> RunGauges {
    let mut resources = Vec::new();
    for (i, g) in view.groups.iter().enumerate() {
        let in_flight = if Some(i) == view.current {
            view.in_flight as i64
        } else {
            0
        };
        push_group_series(&mut resources, &g.status, in_flight);
    }
    let blocked = view
        .current
        .and_then(|i| snapshot.groups.get(i))
        .map(|g| view.held_by.iter().map(|b| (g.name.clone(), b.as_str())).collect())
        .unwrap_or_default();
    RunGauges { resources, blocked }
}

/// Per-resource and per-group events and results for an evaluation: every outcome of the groups
/// evaluated live (the controller publishes each key once per run), and `GroupInProgress` when a
/// group's count moved into another tenth of the group since `previous` (or it just started).
fn resource_reports(
    eval: &Evaluation,
    previous: &[GroupStatus],
    snapshot: &Snapshot,
    to: &str,
) -> (Vec<Announcement>, Vec<ResourceResult>) {
    let (mut announce, mut results) = (Vec::new(), Vec::new());
    let finished = |g: &GroupStatus| (g.succeeded, g.failed, g.skipped);
    for (index, outcomes) in &eval.outcomes {
        let Some(group) = snapshot.groups.get(*index) else {
            continue;
        };
        let now = &eval.groups[*index];
        let before = previous.get(*index);
        // Results and warnings are listed when the group's finished counts moved since the status
        // last written (which a step writes after everything else, so a pass that moved them and
        // did not finish leaves them unwritten): otherwise the pass that moved them listed every
        // one. A pass in which none of the group's resources finished lists nothing.
        let unmoved = before.is_some_and(|b| b.name == now.name && finished(b) == finished(now));
        for (resource, outcome) in group.resources.iter().zip(outcomes).filter(|_| !unmoved) {
            let Some(result) = outcome.finished() else {
                continue;
            };
            results.push(ResourceResult {
                group: *index,
                resource: Arc::clone(resource),
                result,
            });
            let key = || format!("{}/{}", resource.namespace, resource.binding);
            match outcome {
                Outcome::Skipped(why) => announce.push(
                    Announcement::warning(
                        events::RESOURCE_SKIPPED,
                        texts::resource_skipped(&resource.display_name(), &why.to_string()),
                    )
                    .keyed(key()),
                ),
                Outcome::Failed { message } => announce.push(
                    Announcement::warning(
                        events::RESOURCE_UPGRADE_FAILED,
                        texts::resource_failed(&resource.display_name(), resource.target(to), message),
                    )
                    .keyed(key()),
                ),
                _ => {}
            }
        }
        if group_progress_said(before, now) {
            announce.push(
                Announcement::normal(
                    events::GROUP_IN_PROGRESS,
                    texts::group_in_progress(&now.name, now.succeeded, now.total, to),
                )
                .keyed(format!("{}:{}", now.name, now.succeeded)),
            );
        }
    }
    (announce, results)
}

/// Whether a group's `GroupInProgress` is announced: when it starts, and when its succeeded count
/// moves into another tenth of the group since `before` (every count in a group of ten or fewer),
/// so a group of 2,000 says so eleven times rather than once per pass that moved it. All of the
/// group is a tenth of its own: the last count is always said.
fn group_progress_said(before: Option<&GroupStatus>, now: &GroupStatus) -> bool {
    let tenth = |succeeded: i64| succeeded * 10 / now.total.max(1);
    let moved = tenth(now.succeeded) != tenth(before.map(|g| g.succeeded).unwrap_or(0));
    let starting = before.is_none_or(|g| g.total == 0) && now.total > 0 && now.succeeded == 0;
    moved || starting
}

/// What a run's Events say was announced: each (reason, message) published as an Event of its
/// own, and per reason the count of the Event combining similar ones ([`events::COMBINED_PREFIX`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    pub notes: HashSet<(String, String)>,
    pub combined: HashMap<String, i32>,
}

impl Announced {
    /// From the run's Events: (reason, message, count).
    pub fn from_events(events: impl IntoIterator<Item = (String, String, i32)>) -> Self {
        let mut announced = Announced::default();
        for (reason, message, count) in events {
            if events::is_combined(&message) {
                *announced.combined.entry(reason).or_default() += count.max(1);
            } else {
                announced.notes.insert((reason, message));
            }
        }
        announced
    }

    /// Whether (reason, note) was published as an Event of its own.
    pub fn contains(&self, reason: &str, note: &str) -> bool {
        self.notes.contains(&(reason.to_string(), note.to_string()))
    }
}

/// The `ResourceUpgradeStarted` events an earlier process owed: upgrades this run started (the
/// binding's [`UPGRADED_BY_ANNOTATION`] names it, in any group of the snapshot) that are neither
/// announced by an Event of their own nor counted by the combined one (a crash between the patch
/// and its event, or before the combined Event's count was written). The combined Event does not
/// say which resources it counts, so the owed ones are repaired by number: as many as it falls
/// short. Checked once per run per process, before anything new starts.
pub fn lost_start_announcements(
    run: &UpgradeRun,
    snapshot: &Snapshot,
    to: &str,
    announced: &Announced,
    cluster: &dyn Cluster,
) -> Vec<String> {
    let mut missing = Vec::new();
    for resource in snapshot.groups.iter().flat_map(|g| &g.resources) {
        let started = cluster
            .binding(&resource.namespace, &resource.binding)
            .is_some_and(|b| b.annotation(UPGRADED_BY_ANNOTATION) == Some(run_name(run)));
        let to = resource.target(to);
        let note = texts::resource_started(&resource.display_name(), &resource.last_applied_version, to);
        if started && !announced.contains(events::RESOURCE_UPGRADE_STARTED, &note) {
            missing.push(note);
        }
    }
    let counted = announced
        .combined
        .get(events::RESOURCE_UPGRADE_STARTED)
        .map_or(0, |c| usize::try_from(*c).unwrap_or(0));
    missing.split_off(counted.min(missing.len()))
}

#[cfg(test)]
mod tests;
