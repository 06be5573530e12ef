//! Evaluating an InProgress run (spec §5.5–5.9): from (frozen plan, snapshot, live bindings, run,
//! now) to per-resource outcomes, group counts, which upgrades to start, and the run's verdict.
//!
//! Nothing is remembered between reconciles except the counts of completed groups: in-flight
//! upgrades are derived from live bindings, so limits hold across restarts and leader changes.

use std::ops::ControlFlow;

use chrono::{DateTime, Utc};

use super::compile::{CompiledGroup, CompiledPlan, WrittenDuration};
use super::freeze::{hold_at, Freeze, Hold};
use super::gate::{self, GateCheck, GateReading};
use super::health::{apply_health_check, HealthRecords};
use super::record::{GroupRecord, Overlaps, Recorded, Records};
use super::revert::Revisions;
use super::snapshot::{Snapshot, SnapshotGroup, SnapshotResource};
use super::stage::{approval_for, ApprovalFact};
use super::starts::{admit_starts, StartFacts};
use super::upgrade_budget::{self, BudgetFacts, Grant};
use super::window::WindowState;
use crate::api::kratix::{BindingFacts, MANUAL_RECONCILIATION_LABEL, UPGRADE_FAILED};
use crate::api::{
    GroupPhase, GroupStatus, ResourceFailure, ResourceName, RETRY_REQUESTED_BY_ANNOTATION, UPGRADED_BY_ANNOTATION,
    UPGRADE_STARTED_AT_ANNOTATION,
};

pub use super::outcome::{Outcome, SkipReason};
pub use super::starts::Blocked;
pub use super::texts;

/// Evaluates one snapshot resource against its live binding (`None`: the binding is gone).
pub fn evaluate_resource(
    resource: &SnapshotResource,
    live: Option<&dyn BindingFacts>,
    to: &str,
    run_name: &str,
    run_created: DateTime<Utc>,
) -> Outcome {
    let Some(b) = live else {
        return Outcome::Skipped(SkipReason::BindingGone);
    };
    if b.being_deleted() {
        return Outcome::Skipped(SkipReason::BeingDeleted);
    }
    let applied = b.last_applied_version();
    if applied == to && reverted(resource, b, to) {
        return Outcome::Succeeded;
    }
    // A revert's resource may still land at the version the revert moves it back from (the
    // reverted run's target, its `spec.version` in the revert's snapshot) when the revert overtook
    // Kratix mid-upgrade: Kratix then runs the revert's target, so that is neither drift nor done.
    let reverting_from = resource.target.as_ref().map(|_| resource.spec_version.as_str());
    let landed_on_reverted = reverting_from == Some(applied);
    // Upgraded by this run and since moved by someone else — applied at another version, or its
    // version set to another (back to the one it had, too): this run's upgrade succeeded (spec
    // §5.5: the binding naming the run is the record), and it is never started again (§14.1).
    // One outcome whatever Kratix has applied of the move yet: a resource counted Succeeded, or
    // Skipped, must stay so as Kratix catches up, and the run cannot tell an upgrade undone after
    // it succeeded from one stopped before it ran.
    let spec_version = b.spec_version();
    let moved = applied != resource.last_applied_version || spec_version != to;
    if b.annotation(UPGRADED_BY_ANNOTATION) == Some(run_name) && moved && !landed_on_reverted {
        return Outcome::Succeeded;
    }
    let spec_drifted = spec_version != resource.spec_version && spec_version != to;
    let applied_drifted = applied != resource.last_applied_version && applied != to && !landed_on_reverted;
    if spec_drifted || applied_drifted {
        return Outcome::Skipped(SkipReason::ChangedByOthers {
            spec_version: spec_version.to_string(),
            last_applied_version: applied.to_string(),
        });
    }
    let failure = b
        .upgrade_condition()
        .filter(|c| c.status == "False" && c.reason == UPGRADE_FAILED && b.failed_version() == Some(to));
    if let Some(c) = failure {
        // A condition without a transition time cannot be placed after the run: treat it as old.
        if c.last_transition_time.is_some_and(|t| t >= run_created) {
            return Outcome::Failed {
                message: c.message.to_string(),
            };
        }
    }
    // An in-place revert's request (spec §13.7) is its own: a binding asking for the target that
    // the snapshot saw elsewhere, and that this run did not start — set so by someone else, or
    // another object under the same name (a Resource Request deleted and created again, deployed
    // afresh) — waits for no re-run on the revert's behalf. Read as in flight, it would hold the
    // revert for ever (seed 5008255974840284232).
    let in_place = resource.target.is_some() && resource.last_applied_version == to;
    if in_place
        && spec_version == to
        && resource.spec_version != to
        && b.annotation(UPGRADED_BY_ANNOTATION) != Some(run_name)
    {
        return Outcome::Skipped(SkipReason::ChangedByOthers {
            spec_version: spec_version.to_string(),
            last_applied_version: applied.to_string(),
        });
    }
    if spec_version == to {
        let already_asked = b.label(MANUAL_RECONCILIATION_LABEL).is_some()
            || b.annotation(RETRY_REQUESTED_BY_ANNOTATION) == Some(run_name);
        return if (failure.is_some() || request_lost(resource, b, to, run_name)) && !already_asked {
            Outcome::NeedsRetry
        } else {
            Outcome::InFlight
        };
    }
    Outcome::NotStarted
}

/// A revert's request to run the applied version again (spec §13.7), gone before Kratix acted
/// on it: this run started the resource in place, its `kratix.io/manual-reconciliation` label is
/// gone (Kratix rewrites a Resource Request's labels whole, dropping one set only on the binding)
/// and Kratix has said nothing since the start. Nothing else would make Kratix run it: the run
/// asks once more, as a retry (seed 13283025931579252237 waited for ever).
fn request_lost(resource: &SnapshotResource, b: &dyn BindingFacts, to: &str, run_name: &str) -> bool {
    let in_place = resource.target.is_some() && resource.last_applied_version == to;
    let started = b
        .annotation(UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp());
    let said_since = b
        .upgrade_condition()
        .and_then(|c| c.last_transition_time)
        .is_some_and(|t| started.is_some_and(|s| t.timestamp() >= s));
    in_place
        && b.annotation(UPGRADED_BY_ANNOTATION) == Some(run_name)
        && b.label(MANUAL_RECONCILIATION_LABEL).is_none()
        && started.is_some()
        && !said_since
}

/// Whether a resource applied at `to` is done for its run. A revert's (spec §13.7) resource is
/// done once its binding asks for its target and Kratix's last word on it is success; one whose
/// target is the version it had applied (its upgrade failed, or had not run) only once Kratix took
/// the revert's request and ran that version again, after the revert started it: before, it
/// looks done and is not.
fn reverted(resource: &SnapshotResource, b: &dyn BindingFacts, to: &str) -> bool {
    if resource.target.is_none() {
        return true;
    }
    let succeeded = b.upgrade_condition().filter(|c| c.status == "True");
    if b.spec_version() != to {
        return false;
    }
    if resource.last_applied_version != to {
        return b.upgrade_condition().is_none_or(|c| c.status == "True");
    }
    // Kratix takes the revert's request (and removes its label) before it runs the version again:
    // a success of the same second as the start, with the request not taken yet, is older.
    let taken = b.label(MANUAL_RECONCILIATION_LABEL).is_none();
    let started = b
        .annotation(UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp());
    let since = succeeded.and_then(|c| c.last_transition_time).map(|t| t.timestamp());
    taken && matches!((since, started), (Some(since), Some(started)) if since >= started)
}

/// When the upgrade of `live` runs out of its group's `progressDeadline` in run `run`: its start
/// (the annotation the start patch wrote) plus the deadline. `None` when the start is not
/// recorded, or is not this run's own (`upgraded-by` names another run, or none): a resource
/// Kratix retried by itself, or another run started, is never timed by this run (spec §13.1).
pub fn deadline_expires(deadline: &WrittenDuration, live: &dyn BindingFacts, run: &str) -> Option<DateTime<Utc>> {
    if live.annotation(UPGRADED_BY_ANNOTATION) != Some(run) {
        return None;
    }
    let started = live.annotation(UPGRADE_STARTED_AT_ANNOTATION)?;
    let started = DateTime::parse_from_rfc3339(started).ok()?.with_timezone(&Utc);
    started.checked_add_signed(deadline.value)
}

/// An in-flight upgrade past its group's deadline counts as Failed (`did not finish within
/// <d>`) and no longer takes a slot (spec §13.1); every other outcome is unchanged, so a late
/// success counts as Succeeded. One about to be retried is a new attempt: its clock restarts with
/// the retry request (which rewrites the start annotation), so it is not failed on the old one.
pub fn apply_deadline(
    outcome: Outcome,
    live: Option<&dyn BindingFacts>,
    deadline: Option<&WrittenDuration>,
    run: &str,
    now: DateTime<Utc>,
) -> Outcome {
    match (&outcome, live, deadline) {
        (Outcome::InFlight, Some(b), Some(d)) if deadline_expires(d, b, run).is_some_and(|at| at <= now) => {
            Outcome::Failed {
                message: texts::deadline_passed(&d.written),
            }
        }
        _ => outcome,
    }
}

/// The rules of a group that turn a resource's state in Kratix ([`evaluate_resource`]) into its
/// outcome in the run: the `progressDeadline`, then the `healthCheck`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupRules {
    /// `progressDeadline`.
    pub deadline: Option<WrittenDuration>,
    /// `healthCheck.timeout`.
    pub health: Option<WrittenDuration>,
}

impl GroupRules {
    pub fn of(group: &CompiledGroup) -> GroupRules {
        GroupRules {
            deadline: group.deadline.clone(),
            health: group.health_timeout.clone(),
        }
    }

    /// The outcome of `resource`, the `at` = (group, index)th of the snapshot, in run (`name`,
    /// created) upgrading to `to`, whose status last recorded `recorded`: an outcome recorded
    /// there stands, whatever the binding does since (spec §5.5).
    #[allow(clippy::too_many_arguments)]
    pub fn outcome(
        &self,
        resource: &SnapshotResource,
        at: (usize, usize),
        live: Option<&dyn BindingFacts>,
        records: &HealthRecords,
        recorded: &Records<'_>,
        run: JudgedFor<'_>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let JudgedFor {
            to,
            name: run_name,
            admitted: run_created,
            ..
        } = run;
        match recorded.of(at, resource) {
            Some(Recorded::Failed(failure)) => {
                return Outcome::Failed {
                    message: failure.detail.clone(),
                }
            }
            Some(Recorded::Succeeded { here: true }) => return Outcome::Succeeded,
            // Counted in another group that holds it too: a health-checked group still verifies
            // it by its own rule (spec §13.2), and never starts it again.
            Some(Recorded::Succeeded { here: false }) => {
                return apply_health_check(
                    Outcome::Succeeded,
                    (resource, resource.target(to)),
                    live,
                    self.health.as_ref(),
                    records,
                    run_created,
                    now,
                )
            }
            Some(Recorded::Skipped) => return Outcome::Skipped(SkipReason::Counted),
            None => {}
        }
        let recorded_success = recorded_reapplied(recorded.statuses(), resource);
        let outcome = if recorded_success {
            Outcome::Succeeded
        } else {
            evaluate_resource(resource, live, resource.target(to), run_name, run_created)
        };
        if let Some(b) = live.filter(|b| !recorded_success && started_by_another(*b, resource, &outcome, &run)) {
            return Outcome::Skipped(SkipReason::ChangedByOthers {
                spec_version: b.spec_version().to_string(),
                last_applied_version: b.last_applied_version().to_string(),
            });
        }
        let outcome = apply_deadline(outcome, live, self.deadline.as_ref(), run_name, now);
        let judged = (resource, resource.target(to));
        apply_health_check(outcome, judged, live, self.health.as_ref(), records, run_created, now)
    }
}

/// The run a resource is judged for.
#[derive(Debug, Clone, Copy)]
pub struct JudgedFor<'a> {
    /// The frozen plan's target (a revert's resources carry their own).
    pub to: &'a str,
    pub name: &'a str,
    /// Its admission: "since the run began" rules count from it (spec §5.2).
    pub admitted: DateTime<Utc>,
    /// When its snapshot was taken (`status.startedAt`).
    pub snapshot_taken: DateTime<Utc>,
    /// A revert: the run it reverts, which started every resource of its snapshot.
    pub reverting: Option<&'a str>,
}

/// Whether another run started `b` since this run's snapshot: someone else changed it (spec
/// §5.5). The annotations stay where Kratix takes it, so the skip stands — also when it lands back
/// at the version the snapshot saw. A revert's resources were all started by the run it reverts,
/// so any other name but the revert's own is another run's, unless the revert already judged the
/// resource done (`judged`): a success stands (spec §5.5). Otherwise, another run whose start
/// (`upgrade-started-at`) is later than both the snapshot and the run's admission — a resumed
/// preview snapshotted before the runs it supersedes stopped — to the second, so a start of that
/// second counts as before it (a superseded run's upgrade the snapshot caught in flight).
fn started_by_another(
    b: &dyn BindingFacts,
    resource: &SnapshotResource,
    judged: &Outcome,
    run: &JudgedFor<'_>,
) -> bool {
    let Some(by) = b.annotation(UPGRADED_BY_ANNOTATION).filter(|by| *by != run.name) else {
        return false;
    };
    if let (Some(reverted), Some(_)) = (run.reverting, &resource.target) {
        return by != reverted && *judged != Outcome::Succeeded;
    }
    let started = b
        .annotation(UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
    started.is_some_and(|t| t.timestamp() > run.admitted.max(run.snapshot_taken).timestamp())
}

/// One resource's outcome as the run decides it, for views that show single resources: the
/// [`GroupRules`] of its group (`group`, the `at` = (group, index)th resource of the snapshot)
/// in the frozen `plan`, after the outcomes the run's status records (`recorded`). A group the
/// plan does not have applies no rules.
#[allow(clippy::too_many_arguments)]
pub fn resource_outcome(
    resource: &SnapshotResource,
    at: (usize, usize),
    live: Option<&dyn BindingFacts>,
    records: &HealthRecords,
    (plan, group): (&CompiledPlan, &str),
    recorded: &Records<'_>,
    run: JudgedFor<'_>,
    now: DateTime<Utc>,
) -> Outcome {
    let rules = plan.group(group).map(GroupRules::of).unwrap_or_default();
    rules.outcome(resource, at, live, records, recorded, run, now)
}

/// The failure a run recorded for `resource` in any of its groups (`recorded`: its status's
/// `rolloutGroups`). Once counted, a failure stands for the run: a Kratix retry of its own, a
/// restart or a later group never turns it into anything else (spec §5.5, §13.1).
pub fn recorded_failure<'r>(recorded: &'r [GroupStatus], resource: &SnapshotResource) -> Option<&'r ResourceFailure> {
    recorded
        .iter()
        .flat_map(|g| &g.failed_resources)
        .find(|f| failure_of(f, resource))
}

/// Whether the run recorded `resource`'s success ([`record_reapplied`]): done, whatever its binding
/// does since.
fn recorded_reapplied(recorded: &[GroupStatus], resource: &SnapshotResource) -> bool {
    recorded
        .iter()
        .flat_map(|g| &g.reapplied_resources)
        .any(|r| r.namespace == resource.namespace && r.name == resource.name)
}

/// A group's success records after this pass (`reappliedResources`): those it had, then, in
/// snapshot order, each resource reverted in place that Kratix confirmed now ([`reverted`]) and
/// this pass counts Succeeded (verified, where the group checks health), and
/// each counted Succeeded (`outcomes`) whose binding names another run's start: only the run's
/// own start stays on the binding as its record.
pub(super) fn record_reapplied(
    had: Option<&GroupStatus>,
    resources: &[std::sync::Arc<SnapshotResource>],
    live: &[Option<&dyn BindingFacts>],
    outcomes: &[Outcome],
    run: &JudgedFor<'_>,
) -> Vec<ResourceName> {
    let mut records = had.map(|g| g.reapplied_resources.clone()).unwrap_or_default();
    for ((resource, b), outcome) in resources.iter().zip(live).zip(outcomes) {
        let Some(b) = b else {
            continue;
        };
        let target = resource.target(run.to);
        let in_place = resource.target.is_some() && resource.last_applied_version == target;
        // Counted Succeeded, not merely confirmed by Kratix: in a group with a health check a
        // resource verifies first, and a record taken before that would stand unverified (the
        // binding may then go with its revision, and nothing could verify it any more).
        let reapplied = in_place
            && *outcome == Outcome::Succeeded
            && b.last_applied_version() == target
            && reverted(resource, *b, target);
        let by_another =
            *outcome == Outcome::Succeeded && b.annotation(UPGRADED_BY_ANNOTATION).is_some_and(|by| by != run.name);
        let known = records
            .iter()
            .any(|r| r.namespace == resource.namespace && r.name == resource.name);
        if !known && (reapplied || by_another) {
            records.push(ResourceName {
                namespace: resource.namespace.clone(),
                name: resource.name.clone(),
            });
        }
    }
    records
}

/// A group's record of successes and skips after this pass (spec §5.5): the one it had (`had`),
/// with each resource this pass counts Succeeded (once the group's verdicts are final) or
/// Skipped. What was recorded stays: a recorded outcome is what the pass counted for it.
fn record_outcomes(had: Option<&GroupRecord>, outcomes: &[Outcome], verdicts_final: bool) -> GroupRecord {
    let mut record = had.cloned().unwrap_or_default();
    for (i, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Outcome::Succeeded if verdicts_final => record.succeeded.insert(i),
            Outcome::Skipped(_) => record.skipped.insert(i),
            _ => {}
        }
    }
    record
}

/// Whether failure record `f` is about `resource` (records name the Resource Request).
fn failure_of(f: &ResourceFailure, resource: &SnapshotResource) -> bool {
    f.namespace == resource.namespace && f.name == resource.name
}

/// A group's failure records after this pass: those it had, then each resource newly counted
/// Failed, in snapshot order, up to one past the budget (the failure that fails the run).
fn record_failures(
    had: Option<&GroupStatus>,
    resources: &[std::sync::Arc<SnapshotResource>],
    outcomes: &[Outcome],
    budget: usize,
    now: DateTime<Utc>,
) -> Vec<ResourceFailure> {
    let mut records = had.map(|g| g.failed_resources.clone()).unwrap_or_default();
    for (resource, outcome) in resources.iter().zip(outcomes) {
        let Outcome::Failed { message } = outcome else {
            continue;
        };
        if records.len() > budget {
            break;
        }
        if !records.iter().any(|f| failure_of(f, resource)) {
            records.push(ResourceFailure {
                namespace: resource.namespace.clone(),
                name: resource.name.clone(),
                at: now,
                detail: message.clone(),
            });
        }
    }
    records
}

/// A binding the controller must patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingAction {
    pub resource: std::sync::Arc<SnapshotResource>,
    /// The binding's resourceVersion when evaluated: the patch's precondition.
    pub resource_version: Option<String>,
    /// The version it upgrades from (its live lastAppliedVersion).
    pub from: String,
}

/// Where the run stands after this evaluation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Still running; the group at this index is current.
    InProgress {
        group: usize,
    },
    Completed,
    /// Resources of this group failed.
    Failed {
        group: usize,
        failed: usize,
    },
    /// The target PromiseRevision disappeared after the snapshot.
    RevisionMissing,
}

/// Everything the controller needs to act on a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    pub verdict: Verdict,
    /// Counts per group, in plan order.
    pub groups: Vec<GroupStatus>,
    /// Outcomes of the groups evaluated live this time (index, outcomes in snapshot order).
    pub outcomes: Vec<(usize, Vec<Outcome>)>,
    /// Upgrades to start now: patch `spec.version := to`.
    pub start: Vec<BindingAction>,
    /// Bindings to label for a Kratix retry.
    pub retry: Vec<BindingAction>,
    /// The current group's resolved limit, in-flight count and windows (with the freezes).
    pub limit: Option<usize>,
    pub in_flight: usize,
    pub windows: Option<WindowState>,
    /// Everything that holds the not-started resources of the current group, in the order of
    /// precedence of spec §14.1 ([`admit_starts`]); empty when nothing does.
    pub held_by: Vec<Blocked>,
    /// The freeze holding the current group's not-started resources, if one does (also while
    /// the run is suspended: the `Frozen` condition says what would hold it).
    pub freeze: Option<Hold>,
    /// What each UpgradeBudget selecting the plan grants the run, when starts were pending
    /// (spec §13.8), from its own in flight as the budgets count it.
    pub grants: Vec<Grant>,
    pub own_in_flight: upgrade_budget::OwnInFlight,
    /// The budget that gave the run fewer starts than it could take otherwise: the run waits for
    /// it (spec §13.8).
    pub rationed_by: Option<Grant>,
    /// What the signal gates of the current group said, when starts were pending.
    pub gate_check: GateCheck,
    /// When to look again without any watch event (the windows' next change, a deadline).
    pub wake_at: Option<DateTime<Utc>>,
}

impl Evaluation {
    /// What holds the current group's starts first, if anything does.
    pub fn blocked(&self) -> Option<Blocked> {
        self.held_by.first().copied()
    }

    pub fn completed_resources(&self) -> i64 {
        self.groups.iter().map(|g| g.succeeded).sum()
    }

    pub fn total_resources(&self) -> i64 {
        self.groups.iter().map(|g| g.total).sum()
    }
}

/// The inputs of [`evaluate`] other than the live bindings.
#[derive(Debug, Clone, Copy)]
pub struct RunContext<'a> {
    pub run_name: &'a str,
    pub run_created: DateTime<Utc>,
    /// When the run's snapshot was taken (`status.startedAt`): another run's start after it is a
    /// change by someone else (spec §5.5).
    pub snapshot_taken: DateTime<Utc>,
    /// A revert: the run it reverts (`spec.revertOf.name`).
    pub reverting: Option<&'a str>,
    /// `spec.suspend` of the run (user suspend, preview or superseded).
    pub suspended: bool,
    /// The plan as frozen in the snapshot, compiled.
    pub plan: &'a CompiledPlan,
    pub snapshot: &'a Snapshot,
    /// Where the snapshot's resources in several groups sit ([`Overlaps::of`] the snapshot).
    pub overlaps: &'a Overlaps,
    /// `status.rolloutGroups` as last written: groups recorded complete stay complete, and every
    /// outcome recorded stands ([`Records`]).
    pub recorded: &'a [GroupStatus],
    /// The HealthRecords of the plan's Promise (empty when no group has a `healthCheck`).
    pub health: &'a HealthRecords,
    /// The latest reading of each signal gate of the plan (a gate without one is closed).
    pub gates: &'a [GateReading],
    /// The run's UpgradeApprovals.
    pub approvals: &'a [ApprovalFact],
    /// The UpgradeFreezes that hold the run's plan (they close every group's gate).
    pub freezes: &'a [Freeze],
    /// The UpgradeBudgets that select the run's plan, with the other runs they cap.
    pub budgets: &'a [BudgetFacts],
    /// The PromiseRevisions the run moves to and from: its target's there (a revert's targets'
    /// gone skip their resources, spec §13.7), and those being deleted (spec §5.7).
    pub revisions: &'a Revisions,
    pub now: DateTime<Utc>,
}

fn counts(name: &str, total: usize, outcomes: &[Outcome]) -> GroupStatus {
    let n = |f: fn(&Outcome) -> bool| outcomes.iter().filter(|o| f(o)).count() as i64;
    GroupStatus {
        name: name.to_string(),
        total: total as i64,
        succeeded: n(|o| matches!(o, Outcome::Succeeded)),
        failed: n(|o| matches!(o, Outcome::Failed { .. })),
        skipped: n(|o| matches!(o, Outcome::Skipped(_))),
        verifying: n(|o| matches!(o, Outcome::Verifying { .. })),
        ..Default::default()
    }
}

/// The recorded counts of a group that completed: every resource succeeded, was skipped, or
/// failed within the budget. It stays complete whatever its bindings do later.
fn recorded_complete(recorded: Option<&GroupStatus>, name: &str, total: usize, budget: usize) -> Option<GroupStatus> {
    recorded
        .filter(|g| {
            g.name == name
                && g.total == total as i64
                && g.failed as usize <= budget
                && g.succeeded + g.skipped + g.failed == g.total
        })
        .cloned()
}

/// What holds a group not entered yet (waiting for a soak or an approval), by [`admit_starts`].
fn entry_holds(ctx: &RunContext<'_>, entry: Blocked) -> Vec<Blocked> {
    admit_starts(&StartFacts {
        suspended: ctx.suspended,
        entry: Some(entry),
        freeze: hold_at(ctx.freezes, ctx.now).is_some(),
        ..StartFacts::default()
    })
    .holds
}

/// Evaluates an InProgress run. `lookup(namespace, binding)` returns the live binding.
pub fn evaluate<'b>(ctx: &RunContext<'_>, lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>) -> Evaluation {
    evaluate_by(ctx, |_, r| lookup(&r.namespace, &r.binding))
}

/// [`evaluate`] with the live bindings given in the snapshot's order (its groups, then their
/// resources; `None`: gone), as [`super::lifecycle::Cluster::snapshot_bindings`] returns them:
/// a pass over thousands of resources looks each up once, not through a map of its own.
pub fn evaluate_in_order(ctx: &RunContext<'_>, live: &[Option<&dyn BindingFacts>]) -> Evaluation {
    evaluate_by(ctx, |i, _| live.get(i).copied().flatten())
}

/// `lookup(i, resource)`: the live binding of the snapshot's `i`th resource (counted across
/// groups in order).
fn evaluate_by<'b>(
    ctx: &RunContext<'_>,
    lookup: impl Fn(usize, &SnapshotResource) -> Option<&'b dyn BindingFacts>,
) -> Evaluation {
    let mut eval = evaluate_groups(ctx, lookup);
    // Groups not reached yet.
    for g in &mut eval.groups {
        g.phase.get_or_insert(GroupPhase::Pending);
    }
    // A freeze holds the whole run while it goes on, whatever else holds it (a soak, an
    // approval, upgrades in flight): `Frozen` says so, never stale (spec §14.2).
    if matches!(eval.verdict, Verdict::InProgress { .. }) && eval.freeze.is_none() {
        eval.freeze = hold_at(ctx.freezes, ctx.now);
    }
    eval
}

fn evaluate_groups<'b>(
    ctx: &RunContext<'_>,
    lookup: impl Fn(usize, &SnapshotResource) -> Option<&'b dyn BindingFacts>,
) -> Evaluation {
    let mut eval = Evaluation {
        verdict: Verdict::Completed,
        groups: ctx.snapshot.initial_counts(),
        outcomes: Vec::new(),
        start: Vec::new(),
        retry: Vec::new(),
        limit: None,
        in_flight: 0,
        windows: None,
        held_by: Vec::new(),
        freeze: None,
        grants: Vec::new(),
        own_in_flight: Default::default(),
        rationed_by: None,
        gate_check: GateCheck::NotChecked,
        wake_at: None,
    };
    if !ctx.revisions.present {
        eval.verdict = Verdict::RevisionMissing;
        for (i, g) in ctx.recorded.iter().enumerate().take(eval.groups.len()) {
            if g.name == eval.groups[i].name {
                eval.groups[i] = g.clone();
            }
        }
        return eval;
    }
    // The snapshot's groups are the frozen plan's, in its order ([`super::snapshot::Frozen::new`]).
    let records = Records::read(ctx.recorded, ctx.snapshot, ctx.overlaps);
    // A resource in several groups that fails in an earlier group in this very pass is failed in
    // the later ones too (failures are kept by name): those are judged by the records as this
    // pass leaves them, as the next pass will read them, so that the status it writes is the one
    // it would write again (the plugin, reading it, shows the same counts).
    let mut left: Option<Vec<GroupStatus>> = None;
    let mut first = 0;
    for (index, (group, rules)) in ctx.snapshot.groups.iter().zip(&ctx.plan.groups).enumerate() {
        let group_lookup = |i: usize, r: &SnapshotResource| lookup(first + i, r);
        let read_again;
        let records = match &left {
            Some(statuses) => {
                read_again = Records::read(statuses, ctx.snapshot, ctx.overlaps);
                &read_again
            }
            None => &records,
        };
        if evaluate_group(ctx, records, &group_lookup, &mut eval, index, (group, rules)).is_break() {
            return eval;
        }
        let had = ctx.recorded.get(index).filter(|g| g.name == group.name);
        let failed_now = eval.groups[index].failed_resources.len() > had.map_or(0, |g| g.failed_resources.len());
        if failed_now && !ctx.overlaps.is_empty() {
            let mut statuses = eval.groups[..=index].to_vec();
            statuses.extend(ctx.recorded.iter().skip(index + 1).cloned());
            left = Some(statuses);
        }
        first += group.resources.len();
    }
    eval
}

/// A group of the snapshot, with its place, its definition in the frozen plan and its counts as
/// the run's status recorded them.
#[derive(Clone, Copy)]
struct GroupAt<'a> {
    index: usize,
    group: &'a SnapshotGroup,
    rules: &'a CompiledGroup,
    recorded: Option<&'a GroupStatus>,
}

/// One group, in order: `Continue` when it is complete (the next group is looked at), `Break`
/// when it holds the run — waiting to enter, failed, or the group in progress.
fn evaluate_group<'b>(
    ctx: &RunContext<'_>,
    records: &Records<'_>,
    lookup: &impl Fn(usize, &SnapshotResource) -> Option<&'b dyn BindingFacts>,
    eval: &mut Evaluation,
    index: usize,
    (group, compiled): (&SnapshotGroup, &CompiledGroup),
) -> ControlFlow<()> {
    let budget = compiled.budget.resolve(group.resources.len());
    let rules = GroupRules::of(compiled);
    let recorded = ctx.recorded.get(index).filter(|g| g.name == group.name);
    let started_at = recorded.and_then(|g| g.started_at);
    let at = GroupAt {
        index,
        group,
        rules: compiled,
        recorded,
    };
    let approved = group_entry(ctx, eval, &at)?;
    if let Some(mut done) = recorded_complete(ctx.recorded.get(index), &group.name, group.resources.len(), budget) {
        // A group completing in this pass (one with nothing to upgrade, or recorded by a controller
        // from before phases) records how it began, as any group does: its start, and the
        // approval it passed — what the views and a restarted controller judge it by.
        if done.phase != Some(GroupPhase::Completed) {
            done.started_at.get_or_insert(ctx.now);
            if let (Some(a), None) = (&approved, &done.approval) {
                a.record_in(&mut done);
            }
        }
        // Completed now, as far as the soak goes.
        done.completed_at.get_or_insert(ctx.now);
        done.phase = Some(GroupPhase::Completed);
        // Its counts stand (spec §5.5): nothing a completed group's bindings do later moves them.
        eval.groups[index] = done;
        return ControlFlow::Continue(());
    }
    let live: Vec<Option<&dyn BindingFacts>> = group.resources.iter().enumerate().map(|(i, r)| lookup(i, r)).collect();
    let run = JudgedFor {
        to: &ctx.plan.to,
        name: ctx.run_name,
        admitted: ctx.run_created,
        snapshot_taken: ctx.snapshot_taken,
        reverting: ctx.reverting,
    };
    let outcomes: Vec<Outcome> = group
        .resources
        .iter()
        .zip(&live)
        .enumerate()
        .map(|(i, (r, b))| {
            let outcome = rules.outcome(r, (index, i), *b, ctx.health, records, run, ctx.now);
            revision_rules(r, *b, outcome, ctx)
        })
        .collect();
    let counted = &mut eval.groups[index];
    *counted = counts(&group.name, group.resources.len(), &outcomes);
    counted.failed_resources = record_failures(recorded, &group.resources, &outcomes, budget, ctx.now);
    counted.reapplied_resources = record_reapplied(recorded, &group.resources, &live, &outcomes, &run);
    counted.started_at = Some(started_at.unwrap_or(ctx.now));
    if let Some(a) = &approved {
        a.record_in(counted);
    }
    let failed = counted.failed as usize;
    // A health-checked group's successes are final once it completes or fails (spec §13.2):
    // until then a later HealthRecord may still take one back.
    let verdicts_final =
        compiled.health_timeout.is_none() || failed > budget || outcomes.iter().all(Outcome::is_finished);
    record_outcomes(records.group(index), &outcomes, verdicts_final).write(counted);
    if failed > budget {
        counted.phase = Some(GroupPhase::Failed);
        eval.outcomes.push((index, outcomes));
        eval.verdict = Verdict::Failed { group: index, failed };
        return ControlFlow::Break(());
    }
    if outcomes.iter().all(Outcome::is_finished) {
        counted.phase = Some(GroupPhase::Completed);
        counted.completed_at = Some(recorded.and_then(|g| g.completed_at).unwrap_or(ctx.now));
        eval.outcomes.push((index, outcomes));
        return ControlFlow::Continue(());
    }
    counted.phase = Some(GroupPhase::InProgress);
    current_group(ctx, eval, &at, &rules, &live, outcomes);
    ControlFlow::Break(())
}

/// The rules of the PromiseRevisions a resource moves between (spec §5.7, §13.7). A revert's
/// resource whose target has no PromiseRevision any more (or one being deleted) is skipped: not
/// started, or started and not finished — Kratix cannot run a version without its revision, so
/// waiting for it would be for ever. A resource not started whose binding asks for a version whose
/// revision is being deleted is skipped too: Kratix is deleting it, and starting it would only
/// feed it to that clean-up or take it from under it.
fn revision_rules(
    resource: &SnapshotResource,
    live: Option<&dyn BindingFacts>,
    outcome: Outcome,
    ctx: &RunContext<'_>,
) -> Outcome {
    match (&resource.target, &outcome) {
        (Some(version), Outcome::NotStarted | Outcome::NeedsRetry | Outcome::InFlight)
            if ctx.revisions.gone_targets.contains(version) =>
        {
            return Outcome::Skipped(SkipReason::RevisionGone {
                version: version.clone(),
            })
        }
        _ => {}
    }
    let asks = live.map_or(resource.spec_version.as_str(), |b| b.spec_version());
    match ctx.revisions.deleting(asks) {
        Some(name) if outcome == Outcome::NotStarted => Outcome::Skipped(SkipReason::RevisionDeleting {
            revision: name.to_string(),
        }),
        _ => outcome,
    }
}

/// Into a group (spec §13.4): the soak of the group before, then the approval; `Break` while
/// either holds it. Once the group has started the soak holds it no more, and the approval
/// recorded then stands; before, the oldest approval for it counts. Returns the approval that
/// let it start.
fn group_entry(ctx: &RunContext<'_>, eval: &mut Evaluation, at: &GroupAt<'_>) -> ControlFlow<(), Option<ApprovalFact>> {
    let GroupAt {
        index,
        group,
        rules,
        recorded,
    } = *at;
    let started = recorded.is_some_and(|g| g.started_at.is_some());
    if index > 0 && !started {
        if let Some(soak) = ctx.plan.groups[index - 1].soak.as_ref().map(|s| s.value) {
            let completed = eval.groups[index - 1].completed_at.unwrap_or(ctx.now);
            let until = completed.checked_add_signed(soak).unwrap_or(DateTime::<Utc>::MAX_UTC);
            if ctx.now < until {
                eval.groups[index - 1].phase = Some(GroupPhase::Soaking);
                eval.held_by = entry_holds(ctx, Blocked::Soaking);
                eval.wake_at = Some(until);
                eval.verdict = Verdict::InProgress { group: index - 1 };
                return ControlFlow::Break(());
            }
        }
    }
    let recorded_approval = recorded.filter(|_| started).and_then(ApprovalFact::recorded);
    if recorded_approval.is_some() || !rules.requires_approval {
        return ControlFlow::Continue(recorded_approval);
    }
    match approval_for(ctx.approvals, &group.name) {
        Some(a) => ControlFlow::Continue(Some(a.clone())),
        None => {
            eval.groups[index].phase = Some(GroupPhase::AwaitingApproval);
            eval.held_by = entry_holds(ctx, Blocked::AwaitingApproval);
            eval.verdict = Verdict::InProgress { group: index };
            ControlFlow::Break(())
        }
    }
}

/// The group in progress: its retries and starts, as many as the one admission allows now
/// (spec §14.1), what holds the rest, and when to look again.
fn current_group(
    ctx: &RunContext<'_>,
    eval: &mut Evaluation,
    at: &GroupAt<'_>,
    rules: &GroupRules,
    live: &[Option<&dyn BindingFacts>],
    outcomes: Vec<Outcome>,
) {
    let GroupAt {
        index,
        group,
        rules: compiled,
        ..
    } = *at;
    let limit = compiled.limit.resolve(group.resources.len());
    // The group's windows, with the freezes.
    let (windows_now, windows) = WindowState::of_group(&compiled.windows, ctx.freezes, ctx.now);
    let action = |i: usize| BindingAction {
        resource: group.resources[i].clone(),
        resource_version: live[i].and_then(|b| b.object_version().map(str::to_string)),
        from: live[i]
            .map(|b| b.last_applied_version().to_string())
            .unwrap_or_default(),
    };
    // Starts in snapshot order: the version patch of a resource not started, the retry label
    // of one whose failure predates the run. Both pass the one admission below.
    let in_flight_bindings = outcomes.iter().zip(live).filter(|(o, _)| o.is_in_flight());
    eval.own_in_flight = upgrade_budget::OwnInFlight::of(ctx.run_name, in_flight_bindings.map(|(_, b)| *b));
    let in_flight = eval.own_in_flight.total;
    let not_started: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, Outcome::NotStarted | Outcome::NeedsRetry))
        .map(|(i, _)| i)
        .collect();
    // Gates are read while the group has starts left, whatever else holds it (spec §13.3):
    // each gate's recorded state stays current, and its failAfter clock is its own.
    let mut gate_recheck = None;
    if !not_started.is_empty() {
        eval.gate_check = gate::check(ctx.plan, &group.name, ctx.gates, ctx.now);
        if let GateCheck::Closed { reading, .. } = &eval.gate_check {
            gate_recheck = Some(reading.next_check.max(ctx.now));
        }
        eval.freeze = hold_at(ctx.freezes, ctx.now);
        eval.grants = upgrade_budget::grants(ctx.budgets, ctx.run_name, ctx.run_created, &eval.own_in_flight);
        let admission = admit_starts(&StartFacts {
            suspended: ctx.suspended,
            entry: None,
            freeze: eval.freeze.is_some(),
            windows_open: windows.windows_open(ctx.now),
            gate_closed: matches!(eval.gate_check, GateCheck::Closed { .. }),
            limit,
            in_flight,
            budget_units: upgrade_budget::units(&eval.grants),
        });
        for &i in not_started.iter().take(admission.starts) {
            match outcomes[i] {
                Outcome::NeedsRetry => eval.retry.push(action(i)),
                _ => eval.start.push(action(i)),
            }
        }
        // Rationed: only the budgets keep starts back that nothing else holds.
        let wanted = limit.saturating_sub(in_flight).min(not_started.len());
        if admission.holds.iter().all(|h| *h == Blocked::BudgetExhausted) {
            eval.rationed_by = upgrade_budget::rationing(&eval.grants, wanted).cloned();
        }
        eval.held_by = admission.holds;
        eval.wake_at = if windows_now.open {
            windows_now.next_close
        } else {
            windows_now.next_open
        };
    }
    // ... and when an upgrade or health check runs out of time, and a closed gate is read again.
    let expiry = first_expiry(rules, &outcomes, live, ctx.run_name);
    // Only units other runs hold need a recheck: this run's own upgrades wake it as they end.
    let budget_recheck = eval
        .rationed_by
        .as_ref()
        .filter(|g| g.in_flight > in_flight)
        .map(|_| ctx.now + upgrade_budget::RECHECK);
    eval.wake_at = eval
        .wake_at
        .into_iter()
        .chain(expiry)
        .chain(gate_recheck)
        .chain(budget_recheck)
        .min();
    eval.limit = Some(limit);
    eval.in_flight = in_flight;
    eval.windows = Some(windows_now);
    eval.outcomes.push((index, outcomes));
    eval.verdict = Verdict::InProgress { group: index };
}

/// When the first in-flight upgrade (its `progressDeadline`) or health check runs out of time.
fn first_expiry(
    rules: &GroupRules,
    outcomes: &[Outcome],
    live: &[Option<&dyn BindingFacts>],
    run: &str,
) -> Option<DateTime<Utc>> {
    let upgrade_expiry = rules.deadline.as_ref().and_then(|d| {
        outcomes
            .iter()
            .zip(live)
            .filter(|(o, _)| matches!(o, Outcome::InFlight))
            .filter_map(|(_, b)| deadline_expires(d, (*b)?, run))
            .min()
    });
    let health_expiry = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Verifying { until } => Some(*until),
            _ => None,
        })
        .min();
    upgrade_expiry.into_iter().chain(health_expiry).min()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::kratix::{BindingCondition, HealthRecord, ResourceBinding, UPGRADE_IN_PROGRESS, UPGRADE_SUCCEEDED};
    use crate::api::UpgradePlanSpec;
    use crate::api::{UpgradeWindow, WindowKind};
    use crate::engine::compile::compile;
    use crate::engine::gate::Reading;
    use crate::engine::snapshot::assign;
    use crate::engine::snapshot::tests::{binding, group, match_all, plan};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::sync::Arc;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const CREATED: &str = "2026-06-01T10:00:00Z";

    pub(crate) fn with_condition(
        mut b: ResourceBinding,
        status: &str,
        reason: &str,
        at: &str,
        failed: Option<&str>,
    ) -> ResourceBinding {
        let s = b.status.get_or_insert_with(Default::default);
        s.failed_version = failed.map(Into::into);
        s.conditions = vec![BindingCondition {
            type_: UPGRADE_SUCCEEDED.into(),
            status: status.into(),
            reason: reason.into(),
            message: "workflow failed: simulated".into(),
            last_transition_time: Some(utc(at)),
        }];
        b
    }

    fn snap_res(b: &ResourceBinding) -> SnapshotResource {
        SnapshotResource::from_binding(b)
    }

    #[test]
    fn resource_outcome_table() {
        let created = utc(CREATED);
        let upgraded_by = |mut b: ResourceBinding, run: &str| {
            b.metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(UPGRADED_BY_ANNOTATION.into(), run.into());
            b
        };
        // Snapshot taken when the binding was at v1 (spec v1).
        let at_v1 = binding("ns", "r", &[], "v1", "v1");
        let snap = snap_res(&at_v1);
        let floating = binding("ns", "r", &[], "v1", "latest");
        let snap_floating = snap_res(&floating);
        let mut deleting = binding("ns", "r", &[], "v1", "v2");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let mut relabelled = binding("ns", "r", &[], "v1", "v2");
        relabelled
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(MANUAL_RECONCILIATION_LABEL.into(), "true".into());
        let relabelled = with_condition(relabelled, "False", UPGRADE_FAILED, "2026-05-01T00:00:00Z", Some("v2"));
        let cases: Vec<(&str, &SnapshotResource, Option<ResourceBinding>, Outcome)> = vec![
            ("binding gone", &snap, None, Outcome::Skipped(SkipReason::BindingGone)),
            (
                "being deleted",
                &snap,
                Some(deleting),
                Outcome::Skipped(SkipReason::BeingDeleted),
            ),
            (
                "already at target: succeeded, never patched",
                &snap,
                Some(binding("ns", "r", &[], "v2", "v2")),
                Outcome::Succeeded,
            ),
            (
                "succeeded even if spec moved on",
                &snap,
                Some(binding("ns", "r", &[], "v2", "v3")),
                Outcome::Succeeded,
            ),
            ("not started", &snap, Some(at_v1.clone()), Outcome::NotStarted),
            (
                "in flight",
                &snap,
                Some(binding("ns", "r", &[], "v1", "v2")),
                Outcome::InFlight,
            ),
            (
                "drift: spec changed by someone",
                &snap,
                Some(binding("ns", "r", &[], "v1", "v1.5")),
                Outcome::Skipped(SkipReason::ChangedByOthers {
                    spec_version: "v1.5".into(),
                    last_applied_version: "v1".into(),
                }),
            ),
            (
                "drift: applied changed by someone",
                &snap,
                Some(binding("ns", "r", &[], "v1.5", "v1.5")),
                Outcome::Skipped(SkipReason::ChangedByOthers {
                    spec_version: "v1.5".into(),
                    last_applied_version: "v1.5".into(),
                }),
            ),
            (
                "drift: applied changed, spec ours",
                &snap,
                Some(binding("ns", "r", &[], "v0", "v2")),
                Outcome::Skipped(SkipReason::ChangedByOthers {
                    spec_version: "v2".into(),
                    last_applied_version: "v0".into(),
                }),
            ),
            (
                "drift beats failure",
                &snap,
                Some(with_condition(
                    binding("ns", "r", &[], "v1", "v1.5"),
                    "False",
                    UPGRADE_FAILED,
                    "2026-06-01T11:00:00Z",
                    Some("v2"),
                )),
                Outcome::Skipped(SkipReason::ChangedByOthers {
                    spec_version: "v1.5".into(),
                    last_applied_version: "v1".into(),
                }),
            ),
            (
                "failed during this run",
                &snap,
                Some(with_condition(
                    binding("ns", "r", &[], "v1", "v2"),
                    "False",
                    UPGRADE_FAILED,
                    "2026-06-01T10:00:00Z",
                    Some("v2"),
                )),
                Outcome::Failed {
                    message: "workflow failed: simulated".into(),
                },
            ),
            (
                "failure of another version is not ours",
                &snap,
                Some(with_condition(
                    binding("ns", "r", &[], "v1", "v2"),
                    "False",
                    UPGRADE_FAILED,
                    "2026-06-01T11:00:00Z",
                    Some("v1.9"),
                )),
                Outcome::InFlight,
            ),
            (
                "failure before the run: in flight, ask for a retry",
                &snap,
                Some(with_condition(
                    binding("ns", "r", &[], "v1", "v2"),
                    "False",
                    UPGRADE_FAILED,
                    "2026-05-01T00:00:00Z",
                    Some("v2"),
                )),
                Outcome::NeedsRetry,
            ),
            (
                "retry already asked (label present)",
                &snap,
                Some(relabelled),
                Outcome::InFlight,
            ),
            (
                "old failure, not yet re-pinned: not started",
                &snap,
                Some(with_condition(
                    at_v1.clone(),
                    "False",
                    UPGRADE_FAILED,
                    "2026-05-01T00:00:00Z",
                    Some("v2"),
                )),
                Outcome::NotStarted,
            ),
            (
                "in progress after retry",
                &snap,
                Some(with_condition(
                    binding("ns", "r", &[], "v1", "v2"),
                    "Unknown",
                    UPGRADE_IN_PROGRESS,
                    "2026-06-01T10:05:00Z",
                    Some("v2"),
                )),
                Outcome::InFlight,
            ),
            (
                "started by this run, then set back by hand to the version it had: this run's upgrade, never started again",
                &snap,
                Some(upgraded_by(at_v1.clone(), "run-1")),
                Outcome::Succeeded,
            ),
            (
                "started by this run, then pinned by hand to another version, not applied yet: this run's upgrade (it will be once Kratix applies it)",
                &snap,
                Some(upgraded_by(binding("ns", "r", &[], "v1", "v3"), "run-1")),
                Outcome::Succeeded,
            ),
            (
                "started by an earlier run, set back by hand before this run's snapshot: this run's to start",
                &snap,
                Some(upgraded_by(at_v1.clone(), "run-0")),
                Outcome::NotStarted,
            ),
            (
                "floating binding not started",
                &snap_floating,
                Some(floating.clone()),
                Outcome::NotStarted,
            ),
            (
                "floating binding pinned: in flight",
                &snap_floating,
                Some(binding("ns", "r", &[], "v1", "v2")),
                Outcome::InFlight,
            ),
        ];
        for (name, snapshot, live, want) in cases {
            assert_eq!(
                evaluate_resource(snapshot, live.as_ref().map(|b| b as _), "v2", "run-1", created),
                want,
                "{name}"
            );
        }
        // The retry is asked once per run: the annotation naming this run suppresses it.
        let mut asked = with_condition(
            binding("ns", "r", &[], "v1", "v2"),
            "False",
            UPGRADE_FAILED,
            "2026-05-01T00:00:00Z",
            Some("v2"),
        );
        asked.metadata.annotations = Some([(RETRY_REQUESTED_BY_ANNOTATION.to_string(), "run-1".to_string())].into());
        assert_eq!(
            evaluate_resource(&snap, Some(&asked), "v2", "run-1", created),
            Outcome::InFlight
        );
        assert_eq!(
            evaluate_resource(&snap, Some(&asked), "v2", "run-2", created),
            Outcome::NeedsRetry
        );
    }

    struct World {
        spec: UpgradePlanSpec,
        snapshot: Snapshot,
        live: Vec<ResourceBinding>,
        health: Vec<Arc<HealthRecord>>,
        gates: Vec<GateReading>,
        approvals: Vec<ApprovalFact>,
        freezes: Vec<Freeze>,
    }

    impl World {
        fn new(spec: UpgradePlanSpec, bindings: Vec<ResourceBinding>) -> World {
            let snapshot = assign(&compile(&spec).unwrap(), &bindings).snapshot;
            World {
                spec,
                snapshot,
                live: bindings,
                health: Vec::new(),
                gates: Vec::new(),
                approvals: Vec::new(),
                freezes: Vec::new(),
            }
        }

        fn set(&mut self, name: &str, applied: &str, spec_version: &str) {
            let b = self.live.iter_mut().find(|b| b.spec.resource_ref.name == name).unwrap();
            b.spec.version = spec_version.into();
            b.status.get_or_insert_with(Default::default).last_applied_version = applied.into();
        }

        fn fail(&mut self, name: &str, at: &str) {
            let i = self.live.iter().position(|b| b.spec.resource_ref.name == name).unwrap();
            let to = self.spec.upgrade_path.to.clone();
            let b = self.live[i].clone();
            self.live[i] = with_condition(b, "False", UPGRADE_FAILED, at, Some(&to));
        }

        fn eval(&self, recorded: &[GroupStatus], suspended: bool, now: &str) -> Evaluation {
            self.eval_with(recorded, suspended, &Revisions::present(), now)
        }

        fn eval_with(&self, recorded: &[GroupStatus], suspended: bool, revisions: &Revisions, now: &str) -> Evaluation {
            let health = HealthRecords::index(&self.spec.promise_ref.name, self.health.iter().cloned());
            let plan = compile(&self.spec).unwrap();
            let overlaps = Overlaps::of(&self.snapshot);
            let ctx = RunContext {
                run_name: "run-1",
                run_created: utc(CREATED),
                snapshot_taken: utc(CREATED),
                reverting: None,
                suspended,
                plan: &plan,
                snapshot: &self.snapshot,
                overlaps: &overlaps,
                recorded,
                health: &health,
                gates: &self.gates,
                approvals: &self.approvals,
                freezes: &self.freezes,
                budgets: &[],
                revisions,
                now: utc(now),
            };
            let by_name = evaluate(&ctx, |ns, name| {
                self.live
                    .iter()
                    .find(|b| b.metadata.namespace.as_deref() == Some(ns) && b.metadata.name.as_deref() == Some(name))
                    .map(|b| b as _)
            });
            // The controller's form, the live bindings in the snapshot's order: every case of
            // this module checks the two agree, across groups.
            let in_order: Vec<Option<&dyn BindingFacts>> = self
                .snapshot
                .groups
                .iter()
                .flat_map(|g| &g.resources)
                .map(|r| {
                    self.live
                        .iter()
                        .find(|b| {
                            b.metadata.namespace.as_deref() == Some(&*r.namespace)
                                && b.metadata.name.as_deref() == Some(&*r.binding)
                        })
                        .map(|b| b as _)
                })
                .collect();
            assert_eq!(
                evaluate_in_order(&ctx, &in_order),
                by_name,
                "the live bindings by name and in order"
            );
            by_name
        }
    }

    /// A group's (name, total, succeeded, failed, skipped).
    fn counts_of(g: &GroupStatus) -> (&str, i64, i64, i64, i64) {
        (g.name.as_str(), g.total, g.succeeded, g.failed, g.skipped)
    }

    fn started(e: &Evaluation) -> Vec<&str> {
        e.start.iter().map(|a| a.resource.name.as_str()).collect()
    }

    #[test]
    fn groups_run_in_order_within_the_limit() {
        let mut dev = group("dev", &[("env", "dev")]);
        dev.max_concurrent = Some(IntOrString::String("50%".into()));
        let prod = group("prod", &[("env", "prod")]);
        let bindings = vec![
            binding("a", "d1", &[("env", "dev")], "v1", "v1"),
            binding("a", "d2", &[("env", "dev")], "v1", "v1"),
            binding("a", "d3", &[("env", "dev")], "v1", "v1"),
            binding("a", "d4", &[("env", "dev")], "v1", "v1"),
            binding("b", "p1", &[("env", "prod")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![dev, prod]), bindings);
        let now = "2026-06-01T10:01:00Z";

        let e = w.eval(&[], false, now);
        assert_eq!(e.verdict, Verdict::InProgress { group: 0 });
        assert_eq!(started(&e), vec!["d1", "d2"]); // 50% of 4
        assert_eq!(e.limit, Some(2));
        assert_eq!(e.start[0].from, "v1");

        w.set("d1", "v1", "v2");
        w.set("d2", "v1", "v2");
        let e = w.eval(&[], false, now);
        assert!(e.start.is_empty());
        assert_eq!((e.in_flight, e.blocked()), (2, Some(Blocked::ConcurrencyLimit)));

        w.set("d1", "v2", "v2");
        let e = w.eval(&[], false, now);
        assert_eq!(started(&e), vec!["d3"]);
        assert_eq!(counts_of(&e.groups[0]), ("dev", 4, 1, 0, 0));

        for n in ["d2", "d3", "d4"] {
            w.set(n, "v2", "v2");
        }
        // The dev group completes and prod starts in the same evaluation.
        let e = w.eval(&[], false, now);
        assert_eq!(e.verdict, Verdict::InProgress { group: 1 });
        assert_eq!(started(&e), vec!["p1"]);
        let recorded = e.groups.clone();

        // Someone rolls d1 back after dev completed: the recorded group stays complete.
        w.set("d1", "v1", "v1");
        w.set("p1", "v2", "v2");
        let e = w.eval(&recorded, false, now);
        assert_eq!(e.verdict, Verdict::Completed);
        assert_eq!((e.completed_resources(), e.total_resources()), (5, 5));
    }

    #[test]
    fn suspended_runs_start_nothing_but_in_flight_continue() {
        let mut w = World::new(
            plan(&["v1"], "v2", vec![match_all("all")]),
            vec![binding("a", "x", &[], "v1", "v1"), binding("a", "y", &[], "v1", "v1")],
        );
        w.set("x", "v1", "v2");
        let e = w.eval(&[], true, "2026-06-01T10:01:00Z");
        assert!(e.start.is_empty());
        assert_eq!(e.blocked(), Some(Blocked::Suspended));
        w.set("x", "v2", "v2");
        assert_eq!(w.eval(&[], true, "2026-06-01T10:01:00Z").groups[0].succeeded, 1);
    }

    #[test]
    fn window_gate_blocks_and_wakes() {
        let mut g = match_all("all");
        g.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 22 * * *".into(),
            duration: "4h".into(),
            time_zone: Some("Europe/London".into()),
        }]);
        let w = World::new(plan(&["v1"], "v2", vec![g]), vec![binding("a", "x", &[], "v1", "v1")]);
        let e = w.eval(&[], false, "2026-06-01T12:00:00Z");
        assert_eq!(e.blocked(), Some(Blocked::WindowClosed));
        assert_eq!(e.wake_at, Some(utc("2026-06-01T21:00:00Z"))); // 22:00 BST
        let e = w.eval(&[], false, "2026-06-01T21:00:00Z");
        assert_eq!(started(&e), vec!["x"]);
        assert_eq!(e.wake_at, Some(utc("2026-06-02T01:00:00Z")));
    }

    fn freeze(name: &str, periods: &[(&str, &str)]) -> Freeze {
        let spec = crate::api::UpgradeFreezeSpec {
            reason: format!("{name} freeze"),
            periods: periods
                .iter()
                .map(|(start, end)| crate::api::FreezePeriod {
                    start: Some(start.to_string()),
                    end: Some(end.to_string()),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        Freeze::compile(name, &spec).unwrap()
    }

    #[test]
    fn a_freeze_holds_new_starts_while_in_flight_upgrades_finish() {
        let mut g = match_all("all");
        g.max_concurrent = Some(IntOrString::Int(1));
        let mut w = World::new(
            plan(&["v1"], "v2", vec![g]),
            vec![binding("a", "x", &[], "v1", "v1"), binding("a", "y", &[], "v1", "v1")],
        );
        w.freezes = vec![
            freeze("eoy", &[("2026-06-01T10:00", "2026-06-01T11:00")]),
            // Overlaps and ends later: it is the one named, and its end is when starts resume.
            freeze("release", &[("2026-06-01T10:30", "2026-06-01T11:30")]),
        ];
        // (what, now, blocked, freeze named, started, wake at)
        type Row<'a> = (
            &'a str,
            &'a str,
            Option<Blocked>,
            Option<&'a str>,
            Vec<&'a str>,
            Option<&'a str>,
        );
        let table: Vec<Row> = vec![
            (
                "before",
                "2026-06-01T09:59:00Z",
                None,
                None,
                vec!["x"],
                Some("2026-06-01T10:00:00Z"),
            ),
            (
                "first freeze",
                "2026-06-01T10:00:00Z",
                Some(Blocked::Frozen),
                Some("eoy"),
                vec![],
                Some("2026-06-01T11:30:00Z"),
            ),
            (
                "both",
                "2026-06-01T10:45:00Z",
                Some(Blocked::Frozen),
                Some("release"),
                vec![],
                Some("2026-06-01T11:30:00Z"),
            ),
            (
                "the later one",
                "2026-06-01T11:00:00Z",
                Some(Blocked::Frozen),
                Some("release"),
                vec![],
                Some("2026-06-01T11:30:00Z"),
            ),
            ("after", "2026-06-01T11:30:00Z", None, None, vec!["x"], None),
        ];
        for (what, now, blocked, named, start, wake) in table {
            let e = w.eval(&[], false, now);
            assert_eq!(e.blocked(), blocked, "{what}");
            assert_eq!(e.freeze.as_ref().map(|h| h.freeze.as_str()), named, "{what}");
            assert_eq!(started(&e), start, "{what}");
            assert_eq!(e.wake_at, wake.map(utc), "{what}");
        }
        let held = w.eval(&[], false, "2026-06-01T10:45:00Z").freeze.unwrap();
        assert_eq!(
            held.message(),
            "UpgradeFreeze \"release\" until 2026-06-01T11:30:00Z: release freeze"
        );

        // Started before the freeze, x finishes during it; y waits for the end.
        w.set("x", "v1", "v2");
        let e = w.eval(&[], false, "2026-06-01T10:10:00Z");
        assert_eq!((e.in_flight, e.blocked()), (1, Some(Blocked::Frozen)));
        w.set("x", "v2", "v2");
        let e = w.eval(&[], false, "2026-06-01T10:20:00Z");
        assert_eq!((e.groups[0].succeeded, e.start.len()), (1, 0));
        assert_eq!(started(&w.eval(&[], false, "2026-06-01T11:30:00Z")), vec!["y"]);

        // Suspended outranks the freeze, which is still reported; a finished group is not held.
        let e = w.eval(&[], true, "2026-06-01T10:45:00Z");
        assert_eq!((e.blocked(), e.freeze.is_some()), (Some(Blocked::Suspended), true));
        w.set("y", "v2", "v2");
        let e = w.eval(&[], false, "2026-06-01T10:45:00Z");
        assert_eq!((e.blocked(), e.verdict, e.freeze), (None, Verdict::Completed, None));
    }

    /// One admission for every start (spec §14.1): everything that holds the group is reported,
    /// in precedence order, and nothing starts until none does.
    #[test]
    fn every_reason_that_holds_the_group_is_reported_in_precedence_order() {
        use Blocked::*;
        let mut a = group("a", &[("g", "a")]);
        a.max_concurrent = Some(IntOrString::Int(1));
        a.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 12 * * *".into(),
            duration: "1h".into(),
            time_zone: None,
        }]);
        let bindings = vec![
            binding("ns", "x", &[("g", "a")], "v1", "v1"),
            binding("ns", "y", &[("g", "a")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![a]), bindings);
        w.freezes = vec![freeze("release", &[("2026-06-01T10:00", "2026-06-01T12:30")])];
        w.set("x", "v1", "v2");
        // (case, suspended, now, x done, every hold, started)
        type Case = (&'static str, bool, &'static str, bool, Vec<Blocked>, Vec<&'static str>);
        let cases: [Case; 5] = [
            (
                "suspended, frozen, window closed, at the limit",
                true,
                "2026-06-01T11:00:00Z",
                false,
                vec![Suspended, Frozen, WindowClosed, ConcurrencyLimit],
                vec![],
            ),
            (
                "resumed",
                false,
                "2026-06-01T11:00:00Z",
                false,
                vec![Frozen, WindowClosed, ConcurrencyLimit],
                vec![],
            ),
            (
                "the window opened; the freeze goes on",
                false,
                "2026-06-01T12:10:00Z",
                false,
                vec![Frozen, ConcurrencyLimit],
                vec![],
            ),
            (
                "the freeze ended",
                false,
                "2026-06-01T12:40:00Z",
                false,
                vec![ConcurrencyLimit],
                vec![],
            ),
            (
                "x finished: a slot",
                false,
                "2026-06-01T12:40:00Z",
                true,
                vec![],
                vec!["y"],
            ),
        ];
        for (case, suspended, now, x_done, holds, start) in cases {
            if x_done {
                w.set("x", "v2", "v2");
            }
            let e = w.eval(&[], suspended, now);
            assert_eq!(e.held_by, holds, "{case}");
            assert_eq!(started(&e), start, "{case}");
        }
    }

    #[test]
    fn failure_racing_success_fails_the_run_and_stops_later_groups() {
        let bindings = vec![
            binding("a", "x", &[("env", "dev")], "v1", "v2"),
            binding("a", "y", &[("env", "dev")], "v1", "v2"),
            binding("a", "z", &[("env", "prod")], "v1", "v1"),
        ];
        let mut w = World::new(
            plan(
                &["v1"],
                "v2",
                vec![group("dev", &[("env", "dev")]), group("prod", &[("env", "prod")])],
            ),
            bindings,
        );
        // In the same reconcile x succeeded and y failed.
        w.set("x", "v2", "v2");
        w.fail("y", "2026-06-01T10:02:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(e.verdict, Verdict::Failed { group: 0, failed: 1 });
        assert!(e.start.is_empty());
        assert_eq!(counts_of(&e.groups[0]), ("dev", 2, 1, 1, 0));
        assert_eq!(counts_of(&e.groups[1]), ("prod", 1, 0, 0, 0));
        // A failure wins even while other resources are still in flight.
        let mut w2 = World::new(w.spec.clone(), w.live.clone());
        w2.set("x", "v1", "v2");
        assert!(matches!(
            w2.eval(&[], false, "2026-06-01T10:03:00Z").verdict,
            Verdict::Failed { .. }
        ));
    }

    #[test]
    fn verifying_resources_hold_their_slot_until_their_health_is_known() {
        let mut g = match_all("all");
        g.max_concurrent = Some(IntOrString::Int(1));
        g.max_failures = Some(IntOrString::Int(1));
        g.health_check = Some(crate::api::HealthCheck { timeout: "10m".into() });
        let mut w = World::new(
            plan(&["v1"], "v2", vec![g]),
            ["a", "b", "c"].map(|n| binding("ns", n, &[], "v1", "v1")).to_vec(),
        );
        // Kratix's health check runs at `at`, after the upgrade completed.
        let report = |w: &mut World, name: &str, state: &str, at: &str| {
            w.health
                .push(crate::engine::health::tests::record_of(name, name, state, Some(at)))
        };
        let succeed = |w: &mut World, name: &str, at: &str| {
            let i = w.live.iter().position(|b| b.spec.resource_ref.name == name).unwrap();
            w.live[i] = with_condition(
                binding("ns", name, &[], "v2", "v2"),
                "True",
                "UpgradeComplete",
                at,
                None,
            );
        };
        w.set("a", "v1", "v2");
        succeed(&mut w, "a", "2026-06-01T10:00:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:05:00Z");
        assert_eq!((e.groups[0].succeeded, e.groups[0].verifying), (0, 1));
        assert_eq!(
            (e.in_flight, e.blocked()),
            (1, Some(Blocked::ConcurrencyLimit)),
            "verifying takes the slot"
        );
        assert_eq!(
            e.wake_at,
            Some(utc("2026-06-01T10:10:00Z")),
            "wakes when the check times out"
        );

        report(&mut w, "a", "healthy", "2026-06-01T10:04:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:05:00Z");
        assert_eq!((e.groups[0].succeeded, e.groups[0].verifying), (1, 0));
        assert_eq!(started(&e), vec!["b"]);

        succeed(&mut w, "b", "2026-06-01T10:06:00Z");
        report(&mut w, "b", "unhealthy", "2026-06-01T10:06:30Z");
        let e = w.eval(&[], false, "2026-06-01T10:07:00Z");
        assert_eq!(e.groups[0].failed, 1, "within the budget of 1");
        assert_eq!(started(&e), vec!["c"]);
        assert!(
            matches!(&e.outcomes[0].1[1], Outcome::Failed { message } if message == "health check reported unhealthy (HealthRecord ns/b)")
        );

        succeed(&mut w, "c", "2026-06-01T10:08:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:09:00Z");
        assert_eq!(e.verdict, Verdict::InProgress { group: 0 }, "c is still verifying");
        let e = w.eval(&[], false, "2026-06-01T10:18:00Z");
        assert_eq!(
            e.verdict,
            Verdict::Failed { group: 0, failed: 2 },
            "c never reported: over the budget"
        );
        assert!(matches!(&e.outcomes[0].1[2], Outcome::Failed { message } if message == "no health report within 10m"));
    }

    #[test]
    fn a_group_with_nothing_to_upgrade_records_the_approval_it_passed() {
        // `prod` selects nothing now, and requires approval: approved, it completes at once, and
        // records how it began — a view judging by the record must not see it waiting for ever.
        let dev = group("dev", &[("env", "dev")]);
        let mut prod = group("prod", &[("env", "prod")]);
        prod.require_approval = Some(true);
        let bindings = vec![binding("a", "d1", &[("env", "dev")], "v1", "v1")];
        let mut w = World::new(plan(&["v1"], "v2", vec![dev, prod]), bindings);
        w.set("d1", "v2", "v2");
        let e = w.eval(&[], false, "2026-06-01T10:00:00Z");
        assert_eq!(e.groups[1].phase, Some(GroupPhase::AwaitingApproval));
        let recorded = e.groups.clone();
        w.approvals = vec![ApprovalFact {
            name: "r-prod".into(),
            group: "prod".into(),
            created: utc("2026-06-01T10:01:00Z"),
            owners: Vec::new(),
            resource_version: None,
            approver: Some("bob".into()),
            comment: Some("CHG-1".into()),
        }];
        let e = w.eval(&recorded, false, "2026-06-01T10:02:00Z");
        assert_eq!(e.verdict, Verdict::Completed);
        let prod = &e.groups[1];
        assert_eq!(
            (
                prod.phase,
                prod.started_at,
                prod.approval.as_deref(),
                prod.approved_by.as_deref()
            ),
            (
                Some(GroupPhase::Completed),
                Some(utc("2026-06-01T10:02:00Z")),
                Some("r-prod"),
                Some("bob")
            )
        );
        // Judged from the record alone (the approval object gone, as a view without it sees it).
        let recorded = e.groups.clone();
        w.approvals.clear();
        let e = w.eval(&recorded, false, "2026-06-01T10:03:00Z");
        assert_eq!(e.verdict, Verdict::Completed);
    }

    #[test]
    fn a_soak_holds_the_next_group_and_an_approval_lets_one_start() {
        let mut canary = group("canary", &[("env", "canary")]);
        canary.soak_duration = Some("1h".into());
        let middle = group("middle", &[("env", "middle")]);
        let mut prod = group("prod", &[("env", "prod")]);
        prod.require_approval = Some(true);
        let bindings = vec![
            binding("a", "c1", &[("env", "canary")], "v1", "v1"),
            binding("a", "m1", &[("env", "middle")], "v1", "v1"),
            binding("b", "p1", &[("env", "prod")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![canary, middle, prod]), bindings);
        let approval = |name: &str, group: &str| ApprovalFact {
            name: name.into(),
            group: group.into(),
            created: utc("2026-06-01T09:30:00Z"),
            owners: Vec::new(),
            resource_version: None,
            approver: Some("bob".into()),
            comment: None,
        };
        let phases = |e: &Evaluation| e.groups.iter().map(|g| g.phase.unwrap().as_str()).collect::<Vec<_>>();

        let e = w.eval(&[], false, "2026-06-01T10:00:00Z");
        assert_eq!(started(&e), vec!["c1"]);
        assert_eq!(phases(&e), ["InProgress", "Pending", "Pending"]);
        assert_eq!(e.groups[0].started_at, Some(utc("2026-06-01T10:00:00Z")));
        let mut recorded = e.groups.clone();

        // The canary completes at 10:05: the middle group waits an hour from that record.
        w.set("c1", "v2", "v2");
        let e = w.eval(&recorded, false, "2026-06-01T10:05:00Z");
        assert_eq!(phases(&e), ["Soaking", "Pending", "Pending"]);
        assert_eq!(e.groups[0].completed_at, Some(utc("2026-06-01T10:05:00Z")));
        assert_eq!(
            (e.blocked(), e.verdict.clone()),
            (Some(Blocked::Soaking), Verdict::InProgress { group: 0 })
        );
        assert_eq!(e.wake_at, Some(utc("2026-06-01T11:05:00Z")));
        assert!(e.start.is_empty());
        recorded = e.groups.clone();
        // Re-evaluated later (a restart, any event): the clock is the record's, not restarted.
        let e = w.eval(&recorded, false, "2026-06-01T11:04:59Z");
        assert_eq!(
            (e.blocked(), e.wake_at),
            (Some(Blocked::Soaking), Some(utc("2026-06-01T11:05:00Z")))
        );
        // A freeze during the soak: the soak is what blocks first, and the run says it is
        // frozen too (issue 36 D13: Frozen read False under an active freeze while soaking).
        w.freezes = vec![freeze("eoy", &[("2026-06-01T10:30", "2026-06-01T12:00")])];
        let e = w.eval(&recorded, false, "2026-06-01T10:45:00Z");
        assert_eq!(e.blocked(), Some(Blocked::Soaking));
        assert_eq!(e.freeze.map(|h| h.freeze), Some("eoy".to_string()));
        w.freezes.clear();
        // A pre-approval of prod, deleted before prod is reached, is revoked.
        w.approvals = vec![approval("early", "prod")];
        let e = w.eval(&recorded, false, "2026-06-01T11:05:00Z");
        assert_eq!(started(&e), vec!["m1"]);
        assert_eq!(phases(&e), ["Completed", "InProgress", "Pending"]);
        recorded = e.groups.clone();
        w.approvals.clear();

        // The middle group completes: prod waits for its approval (no soak after middle).
        w.set("m1", "v2", "v2");
        let e = w.eval(&recorded, false, "2026-06-01T11:10:00Z");
        assert_eq!(phases(&e), ["Completed", "Completed", "AwaitingApproval"]);
        assert_eq!(
            (e.blocked(), e.verdict.clone()),
            (Some(Blocked::AwaitingApproval), Verdict::InProgress { group: 2 })
        );
        assert!(e.start.is_empty());
        recorded = e.groups.clone();

        // Approved: prod starts and records who approved it, when.
        w.approvals = vec![approval("run-1-prod", "prod")];
        let e = w.eval(&recorded, false, "2026-06-01T11:20:00Z");
        assert_eq!(started(&e), vec!["p1"]);
        assert_eq!(e.groups[2].approval.as_deref(), Some("run-1-prod"));
        assert_eq!(e.groups[2].approved_by.as_deref(), Some("bob"));
        assert_eq!(e.groups[2].approved_at, Some(utc("2026-06-01T09:30:00Z")));
        assert_eq!(e.groups[2].started_at, Some(utc("2026-06-01T11:20:00Z")));
        recorded = e.groups.clone();
        // Deleting the approval once the group started changes nothing.
        w.approvals.clear();
        w.set("p1", "v1", "v2");
        let e = w.eval(&recorded, false, "2026-06-01T11:21:00Z");
        assert_eq!((e.verdict.clone(), e.in_flight), (Verdict::InProgress { group: 2 }, 1));
        assert_eq!(
            (e.groups[2].approval.as_deref(), e.groups[2].approved_by.as_deref()),
            (Some("run-1-prod"), Some("bob"))
        );
        // A run recorded before `approval` existed (approvedBy held the object's name) stays
        // approved, and its record moves to `approval`.
        let mut legacy = recorded.clone();
        legacy[2].approval = None;
        legacy[2].approved_by = Some("run-1-prod".into());
        let e2 = w.eval(&legacy, false, "2026-06-01T11:21:00Z");
        assert_eq!(e2.verdict, Verdict::InProgress { group: 2 });
        assert_eq!(
            (e2.groups[2].approval.as_deref(), e2.groups[2].approved_by.as_deref()),
            (Some("run-1-prod"), None)
        );
        w.set("p1", "v2", "v2");
        let e = w.eval(&e.groups, false, "2026-06-01T11:22:00Z");
        assert_eq!(e.verdict, Verdict::Completed);
        assert_eq!(phases(&e), ["Completed", "Completed", "Completed"]);
    }

    #[test]
    fn skipped_resources_complete_a_group_and_empty_runs_complete_at_once() {
        let mut w = World::new(
            plan(&["v1"], "v2", vec![match_all("all")]),
            vec![binding("a", "x", &[], "v1", "v1"), binding("a", "y", &[], "v1", "v1")],
        );
        w.live.retain(|b| b.spec.resource_ref.name != "x"); // gone
        w.set("y", "v1.5", "v1.5"); // changed by someone else
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(e.verdict, Verdict::Completed);
        assert_eq!(e.groups[0].skipped, 2);

        let empty = World::new(
            plan(&["v9"], "v10", vec![match_all("all")]),
            vec![binding("a", "x", &[], "v1", "v1")],
        );
        let e = empty.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(e.verdict, Verdict::Completed);
        assert_eq!(e.total_resources(), 0);
    }

    /// Spec §5.5: every outcome a run counted stands, whatever the binding does since — an undone
    /// skip, a request deleted and created again under the same binding name, a success set back
    /// by hand — and the run never starts such a resource again. Also across groups that hold the
    /// same resource.
    #[test]
    fn recorded_outcomes_stand_whatever_the_binding_does_since() {
        type Change = fn(&mut World);
        type Counted = fn(&Outcome) -> bool;
        let undo_skip: Change = |w| w.set("x", "v1", "v1");
        let recreate: Change = |w| {
            w.live.retain(|b| b.spec.resource_ref.name != "x");
            w.live.push(binding("a", "x", &[("tier", "a")], "v1", "v1"));
        };
        let set_back: Change = |w| w.set("x", "v1", "v1");
        // (case, how x was counted, the change since, x's outcome now)
        let cases: [(&str, Change, Change, Counted); 3] = [
            (
                "an undone skip",
                |w| w.set("x", "v3", "v3"),
                undo_skip,
                |o| matches!(o, Outcome::Skipped(_)),
            ),
            (
                "a request created again",
                |w| w.set("x", "v2", "v2"),
                recreate,
                |o| *o == Outcome::Succeeded,
            ),
            (
                "a success set back by hand",
                |w| w.set("x", "v2", "v2"),
                set_back,
                |o| *o == Outcome::Succeeded,
            ),
        ];
        for (case, counted, since, want) in cases {
            let mut w = World::new(
                plan(
                    &["v1"],
                    "v2",
                    vec![group("first", &[("tier", "a")]), group("second", &[("tier", "a")])],
                ),
                vec![
                    binding("a", "x", &[("tier", "a")], "v1", "v1"),
                    binding("a", "y", &[("tier", "a")], "v1", "v1"),
                ],
            );
            w.set("y", "v1", "v2"); // in flight: the group stays open
            counted(&mut w);
            let first = w.eval(&[], false, "2026-06-01T10:03:00Z");
            let x_first = &first.outcomes[0].1[0];
            assert!(want(x_first), "{case}: counted {x_first:?}");
            let g = &first.groups[0];
            assert_eq!(
                (g.succeeded_indexes.as_str(), g.skipped_indexes.as_str()),
                if g.succeeded == 1 { ("0", "") } else { ("", "0") },
                "{case}: recorded"
            );
            since(&mut w);
            let later = w.eval(&first.groups, false, "2026-06-01T10:04:00Z");
            assert_eq!(
                later.outcomes[0].1[0].finished(),
                x_first.finished(),
                "{case}: the outcome stands"
            );
            assert_eq!(
                later.groups[0],
                {
                    let mut g = first.groups[0].clone();
                    g.started_at = later.groups[0].started_at;
                    g
                },
                "{case}: counts and records stand"
            );
            assert!(
                later.start.iter().all(|a| a.resource.name != "x"),
                "{case}: never started again"
            );
            // The second group holds x too: once the first completes, x's record stands there.
            w.set("y", "v2", "v2");
            let done = w.eval(&later.groups, false, "2026-06-01T10:05:00Z");
            assert_eq!(done.groups[0].phase, Some(GroupPhase::Completed), "{case}");
            let x_second = done.outcomes.iter().find(|(g, _)| *g == 1).map(|(_, o)| o[0].clone());
            assert_eq!(
                x_second.as_ref().and_then(Outcome::finished),
                x_first.finished(),
                "{case}: in the second group too"
            );
            assert!(
                done.start.iter().all(|a| a.resource.name != "x"),
                "{case}: not started by the second group"
            );
        }
    }

    /// Spec §5.7: a PromiseRevision being deleted. The target's: the run fails at once, nothing more
    /// starts. A version a resource's binding asks for: Kratix deletes that resource, so one not
    /// started is skipped and never started; one in flight goes on (it asks for the target).
    #[test]
    fn a_revision_being_deleted_is_never_a_target_and_its_resources_are_skipped() {
        let mut w = World::new(
            plan(&["v1", "v1.5"], "v2", vec![match_all("all")]),
            vec![
                binding("a", "x", &[], "v1", "v1"),
                binding("a", "y", &[], "v1.5", "v1.5"),
                binding("a", "z", &[], "v1", "v1"),
            ],
        );
        w.set("z", "v1", "v2"); // in flight
        let revision = |version: &str, deleting: bool| crate::api::kratix::RevisionFact {
            version: version.into(),
            name: format!("redis-{version}"),
            deleting,
        };
        let frozen = crate::engine::snapshot::Frozen::new(w.snapshot.clone(), w.spec.clone()).unwrap();
        let revisions = |facts: &[crate::api::kratix::RevisionFact]| Revisions::of(&frozen, facts);
        let now = "2026-06-01T10:03:00Z";

        let target_deleting = revisions(&[revision("v1", false), revision("v2", true)]);
        assert!(!target_deleting.present);
        assert_eq!(target_deleting.target_deleting.as_deref(), Some("redis-v2"));
        let e = w.eval_with(&[], false, &target_deleting, now);
        assert_eq!(e.verdict, Verdict::RevisionMissing, "the run fails");
        assert!(e.start.is_empty() && e.retry.is_empty(), "nothing starts");

        let from_deleting = revisions(&[revision("v1", true), revision("v1.5", false), revision("v2", false)]);
        assert!(from_deleting.present);
        let e = w.eval_with(&[], false, &from_deleting, now);
        let outcomes = &e.outcomes[0].1;
        assert_eq!(
            outcomes[0],
            Outcome::Skipped(SkipReason::RevisionDeleting {
                revision: "redis-v1".into()
            }),
            "x asks for v1: Kratix deletes it"
        );
        let Outcome::Skipped(why) = &outcomes[0] else {
            unreachable!()
        };
        assert_eq!(
            why.to_string(),
            "PromiseRevision redis-v1 is being deleted",
            "the event's detail (spec §5.7)"
        );
        assert_eq!(outcomes[1], Outcome::NotStarted, "y asks for v1.5");
        assert_eq!(outcomes[2], Outcome::InFlight, "z asks for v2 now");
        let started: Vec<&str> = e.start.iter().map(|a| a.resource.name.as_str()).collect();
        assert_eq!(started, ["y"], "only y starts");

        // Deleted only to be replaced under the same version: nothing of it is deleted.
        let replaced = revisions(&[revision("v2", false), revision("v2", true), revision("v1", false)]);
        assert!(replaced.present, "another revision of v2 is there");
    }

    #[test]
    fn missing_revision_after_snapshot_fails() {
        let w = World::new(
            plan(&["v1"], "v2", vec![match_all("all")]),
            vec![binding("a", "x", &[], "v1", "v1")],
        );
        let plan = compile(&w.spec).unwrap();
        let overlaps = Overlaps::of(&w.snapshot);
        let ctx = RunContext {
            run_name: "run-1",
            run_created: utc(CREATED),
            snapshot_taken: utc(CREATED),
            reverting: None,
            suspended: false,
            plan: &plan,
            snapshot: &w.snapshot,
            overlaps: &overlaps,
            recorded: &[],
            health: &HealthRecords::default(),
            gates: &[],
            approvals: &[],
            freezes: &[],
            budgets: &[],
            revisions: &Revisions::default(),
            now: utc(CREATED),
        };
        let e = evaluate(&ctx, |_, _| None);
        assert_eq!(e.verdict, Verdict::RevisionMissing);
        assert!(e.start.is_empty());
    }

    #[test]
    fn retry_requested_for_old_failures() {
        let mut w = World::new(
            plan(&["v1"], "v2", vec![match_all("all")]),
            vec![binding("a", "x", &[], "v1", "v1")],
        );
        w.set("x", "v1", "v2");
        w.fail("x", "2026-05-01T00:00:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(e.retry.len(), 1);
        assert_eq!(e.in_flight, 0, "a retry not yet asked takes no slot");
        assert!(
            w.eval(&[], true, "2026-06-01T10:03:00Z").retry.is_empty(),
            "suspended runs do not retry"
        );
    }

    /// D1 (spec §5.5, §14.1): asking Kratix for a retry is a start. Three resources whose failures
    /// predate the run, in a group of limit 1 with a window, a freeze and a signal gate: a retry
    /// goes out only when nothing holds the group, one slot at a time, in snapshot order, and
    /// a retry asked (label present) takes its slot.
    #[test]
    fn retries_pass_the_same_admission_as_starts() {
        let mut g = match_all("all");
        g.max_concurrent = Some(IntOrString::Int(1));
        g.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 12 * * *".into(),
            duration: "6h".into(),
            time_zone: None,
        }]);
        let mut spec = plan(&["v1"], "v2", vec![g]);
        spec.gates = Some(vec![crate::api::Gate {
            name: "alerts".into(),
            prometheus: crate::api::PrometheusGate { query: "ALERTS".into() },
            ..Default::default()
        }]);
        let names = ["x", "y", "z"];
        let mut w = World::new(spec, names.iter().map(|n| binding("a", n, &[], "v1", "v1")).collect());
        for n in names {
            w.set(n, "v1", "v2");
            w.fail(n, "2026-05-01T00:00:00Z");
        }
        w.freezes = vec![freeze("eoy", &[("2026-06-01T13:00", "2026-06-01T14:00")])];
        let reading = |open: bool| GateReading {
            gate: "alerts".into(),
            reading: if open {
                Reading::Open
            } else {
                Reading::Firing {
                    series: 1,
                    first: "ALERTS{severity=\"critical\"}".into(),
                }
            },
            next_check: utc("2026-06-02T00:00:00Z"),
        };
        let retried = |e: &Evaluation| e.retry.iter().map(|a| a.resource.name.clone()).collect::<Vec<_>>();
        // (what, now, gate open, suspended, blocked, retries asked)
        type Row<'a> = (&'a str, &'a str, bool, bool, Option<Blocked>, Vec<&'a str>);
        let table: Vec<Row> = vec![
            (
                "window closed",
                "2026-06-01T11:00:00Z",
                true,
                false,
                Some(Blocked::WindowClosed),
                vec![],
            ),
            (
                "frozen",
                "2026-06-01T13:30:00Z",
                true,
                false,
                Some(Blocked::Frozen),
                vec![],
            ),
            (
                "gate closed",
                "2026-06-01T12:30:00Z",
                false,
                false,
                Some(Blocked::GateClosed),
                vec![],
            ),
            (
                "suspended",
                "2026-06-01T12:30:00Z",
                true,
                true,
                Some(Blocked::Suspended),
                vec![],
            ),
            ("open: one slot", "2026-06-01T12:30:00Z", true, false, None, vec!["x"]),
        ];
        for (what, now, open, suspended, blocked, want) in table {
            w.gates = vec![reading(open)];
            let e = w.eval(&[], suspended, now);
            assert_eq!(e.blocked(), blocked, "{what}");
            assert_eq!(retried(&e), want, "{what}");
            assert!(e.start.is_empty(), "{what}: nothing is patched to a version");
        }
        // Asked: x takes the slot until it ends, then y is asked.
        w.gates = vec![reading(true)];
        let ask = |w: &mut World, n: &str| {
            let b = w.live.iter_mut().find(|b| b.spec.resource_ref.name == n).unwrap();
            b.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(MANUAL_RECONCILIATION_LABEL.into(), "true".into());
        };
        ask(&mut w, "x");
        let e = w.eval(&[], false, "2026-06-01T12:31:00Z");
        assert_eq!((e.in_flight, e.blocked()), (1, Some(Blocked::ConcurrencyLimit)));
        assert!(retried(&e).is_empty());
        w.set("x", "v2", "v2");
        let e = w.eval(&[], false, "2026-06-01T12:32:00Z");
        assert_eq!(retried(&e), vec!["y"]);
        assert_eq!(e.groups[0].succeeded, 1);
    }

    /// Spec §13.1 (issue 36 D6): a resource in two groups is upgraded once, in the first; its
    /// failure, tolerated by `dev`'s budget, counts against `prod` (budget 0) when `prod` becomes
    /// current, and fails the run naming `prod`.
    #[test]
    fn a_failure_tolerated_by_an_earlier_group_fails_a_later_group_without_budget() {
        let mut dev = group("dev", &[("env", "dev")]);
        dev.max_failures = Some(IntOrString::Int(1));
        let prod = group("prod", &[("tier", "prod")]);
        let mut w = World::new(
            plan(&["v1"], "v2", vec![dev, prod]),
            vec![
                binding("a", "shared", &[("env", "dev"), ("tier", "prod")], "v1", "v1"),
                binding("a", "d1", &[("env", "dev")], "v1", "v1"),
                binding("a", "p1", &[("tier", "prod")], "v1", "v1"),
            ],
        );
        let e = w.eval(&[], false, "2026-06-01T10:01:00Z");
        assert_eq!(started(&e), vec!["d1", "shared"]);
        w.set("shared", "v1", "v2");
        w.fail("shared", "2026-06-01T10:02:00Z");
        w.set("d1", "v2", "v2");
        let e = w.eval(&e.groups, false, "2026-06-01T10:03:00Z");
        assert_eq!(e.groups[0].phase, Some(GroupPhase::Completed), "dev tolerates it");
        assert_eq!(e.verdict, Verdict::Failed { group: 1, failed: 1 });
        assert!(e.start.is_empty(), "p1 never starts");
        assert_eq!(
            texts::group_failed(1, "prod"),
            "1 resource(s) failed to upgrade in rollout group \"prod\""
        );
    }

    #[test]
    fn event_texts() {
        assert_eq!(
            texts::group_in_progress("dev", 3, 5, "v2.0.0"),
            "Group \"dev\": 3/5 resources upgraded to v2.0.0"
        );
        assert_eq!(
            texts::resource_started("ns/r", "v1.0.0", "v2.0.0"),
            "Resource ns/r upgrading from v1.0.0 to v2.0.0"
        );
        assert_eq!(
            texts::resource_failed("ns/r", "v2.0.0", "workflow failed: simulated"),
            "Resource ns/r failed to upgrade to v2.0.0: workflow failed: simulated"
        );
        let failed = texts::resource_failed("ns/r", "v2.0.0", "workflow failed: simulated");
        assert_eq!(
            texts::resource_failed_detail(&failed, "ns/r", "v2.0.0"),
            Some("workflow failed: simulated")
        );
        assert_eq!(texts::resource_failed_detail(&failed, "ns/other", "v2.0.0"), None);
        assert_eq!(
            texts::group_failed(1, "dev"),
            "1 resource(s) failed to upgrade in rollout group \"dev\""
        );
        assert_eq!(texts::run_summary(4, 5, "v2.0.0"), "4/5 resources upgraded to v2.0.0");
        assert_eq!(
            texts::revision_ready("redis", "v2.0.0"),
            "PromiseRevision for promise \"redis\" version \"v2.0.0\" is ready"
        );
        assert_eq!(texts::plan_found("p"), "UpgradePlan \"p\" found");
        use crate::api::RunState;
        let cases = [
            (
                RunState::Completed,
                Some((false, "UpgradeRunCompleted", "4/5 resources upgraded to v2")),
            ),
            (
                RunState::Failed,
                Some((true, "UpgradeRunFailed", "4/5 resources upgraded to v2")),
            ),
            (
                RunState::Cancelled,
                Some((
                    false,
                    "UpgradeRunCancelled",
                    "UpgradeRun was deleted before it finished (4/5 resources upgraded)",
                )),
            ),
            (RunState::InProgress, None),
            (RunState::Pending, None),
        ];
        assert_eq!(
            texts::terminal_event(RunState::Completed, 4, 5, 1, "v2"),
            Some((
                true,
                "UpgradeRunCompleted",
                "4/5 resources upgraded to v2; 1 failed within the failure budget".to_string()
            ))
        );
        for (state, want) in cases {
            assert_eq!(
                texts::terminal_event(state, 4, 5, 0, "v2"),
                want.map(|(w, r, n)| (w, r, n.to_string())),
                "{state:?}"
            );
        }
    }

    /// A two-group world (`a` with `n` resources and the given budget, then `b` with one), where
    /// the resources of `a` named in `failing` fail and the others succeed.
    fn budget_world(n: usize, budget: Option<IntOrString>, failing: &[usize]) -> World {
        let mut a = group("a", &[("g", "a")]);
        a.max_failures = budget;
        let b = group("b", &[("g", "b")]);
        let mut bindings: Vec<ResourceBinding> = (0..n)
            .map(|i| binding("ns", &format!("a{i}"), &[("g", "a")], "v1", "v1"))
            .collect();
        bindings.push(binding("ns", "b0", &[("g", "b")], "v1", "v1"));
        let mut w = World::new(plan(&["v1"], "v2", vec![a, b]), bindings);
        for i in 0..n {
            let name = format!("a{i}");
            w.set(&name, "v1", "v2");
            if failing.contains(&i) {
                w.fail(&name, "2026-06-01T10:02:00Z");
            } else {
                w.set(&name, "v2", "v2");
            }
        }
        w
    }

    #[test]
    fn failure_budget_boundaries() {
        let pct = |p: &str| Some(IntOrString::String(p.into()));
        let int = |n: i32| Some(IntOrString::Int(n));
        // (case, group size, maxFailures, failing resources, the run goes on to group b)
        type Case = (&'static str, usize, Option<IntOrString>, Vec<usize>, bool);
        let cases: Vec<Case> = vec![
            ("no budget (SKE): one failure fails", 4, None, vec![0], false),
            ("budget 0: one failure fails", 4, int(0), vec![0], false),
            ("no failures, no budget", 4, None, vec![], true),
            ("exact budget", 4, int(2), vec![0, 3], true),
            ("budget + 1", 4, int(2), vec![0, 1, 3], false),
            ("0% tolerates nothing", 4, pct("0%"), vec![2], false),
            ("100%: every resource may fail", 4, pct("100%"), vec![0, 1, 2, 3], true),
            ("10% of 8 is 1 (rounded up)", 8, pct("10%"), vec![5], true),
            ("10% of 8 is 1, not 2", 8, pct("10%"), vec![5, 6], false),
            ("1% of 1 is 1", 1, pct("1%"), vec![0], true),
            ("50% of 2 is 1", 2, pct("50%"), vec![1], true),
            ("50% of 2 is 1, not 2", 2, pct("50%"), vec![0, 1], false),
            ("50% of 3 is 2", 3, pct("50%"), vec![0, 2], true),
            ("34% of 3 is 2", 3, pct("34%"), vec![0, 1], true),
            ("33% of 3 is 1", 3, pct("33%"), vec![0, 1], false),
        ];
        let now = "2026-06-01T10:03:00Z";
        for (case, n, budget, failing, goes_on) in cases {
            let w = budget_world(n, budget, &failing);
            let e = w.eval(&[], false, now);
            assert_eq!(e.groups[0].failed as usize, failing.len(), "{case}");
            if goes_on {
                assert_eq!(e.verdict, Verdict::InProgress { group: 1 }, "{case}");
                assert_eq!(started(&e), vec!["b0"], "{case}: the next group starts");
                // The completed group stays complete, with its failures, once recorded.
                let e2 = w.eval(&e.groups, false, now);
                assert_eq!(e2.groups[0], e.groups[0], "{case}");
                assert_eq!(e2.verdict, Verdict::InProgress { group: 1 }, "{case}");
            } else {
                assert_eq!(
                    e.verdict,
                    Verdict::Failed {
                        group: 0,
                        failed: failing.len()
                    },
                    "{case}"
                );
                assert!(e.start.is_empty(), "{case}: nothing more starts");
            }
        }
    }

    #[test]
    fn a_failure_within_budget_waits_for_the_rest_of_the_group() {
        let mut w = budget_world(3, Some(IntOrString::Int(1)), &[0]);
        w.set("a2", "v1", "v2"); // still upgrading
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(e.verdict, Verdict::InProgress { group: 0 });
        assert_eq!((e.groups[0].failed, e.in_flight), (1, 1));
        assert!(e.start.is_empty(), "group b waits for a2");
    }

    /// `name` started by the world's run (`run-1`) at `at`, as its start patch writes it.
    fn started_at(w: &mut World, name: &str, at: &str) {
        let b = w.live.iter_mut().find(|b| b.spec.resource_ref.name == name).unwrap();
        let annotations = b.metadata.annotations.get_or_insert_with(Default::default);
        annotations.insert(UPGRADE_STARTED_AT_ANNOTATION.into(), at.into());
        annotations.insert(UPGRADED_BY_ANNOTATION.into(), "run-1".into());
    }

    #[test]
    fn progress_deadline_fails_a_slow_upgrade_and_frees_its_slot() {
        let mut a = group("a", &[("g", "a")]);
        a.max_concurrent = Some(IntOrString::Int(1));
        a.max_failures = Some(IntOrString::Int(1));
        a.progress_deadline = Some("30m".into());
        let bindings = vec![
            binding("ns", "slow", &[("g", "a")], "v1", "v1"),
            binding("ns", "next", &[("g", "a")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![a]), bindings);
        w.set("slow", "v1", "v2");
        started_at(&mut w, "slow", "2026-06-01T10:00:00Z");

        // Before the deadline: in flight, holding the only slot, and a wake-up at its expiry.
        let e = w.eval(&[], false, "2026-06-01T10:29:59Z");
        assert_eq!((e.in_flight, e.blocked()), (1, Some(Blocked::ConcurrencyLimit)));
        assert_eq!(e.wake_at, Some(utc("2026-06-01T10:30:00Z")));

        // At the deadline: failed (within the budget), its slot taken by the next resource.
        let e = w.eval(&[], false, "2026-06-01T10:30:00Z");
        assert_eq!((e.groups[0].failed, e.in_flight), (1, 0));
        assert_eq!(started(&e), vec!["next"]);
        let (_, outcomes) = &e.outcomes[0];
        let slow = w.snapshot.groups[0]
            .resources
            .iter()
            .position(|r| r.name == "slow")
            .unwrap();
        assert_eq!(
            outcomes[slow],
            Outcome::Failed {
                message: "did not finish within 30m".into()
            }
        );

        assert_eq!(e.groups[0].failed_resources.len(), 1, "the failure is recorded");
        assert_eq!(e.groups[0].failed_resources[0].detail, "did not finish within 30m");

        // A late success does not move it back: the failure stands for the run (spec §13.1).
        let recorded = e.groups.clone();
        w.set("next", "v1", "v2");
        started_at(&mut w, "next", "2026-06-01T10:30:00Z");
        w.set("slow", "v2", "v2");
        let e = w.eval(&recorded, false, "2026-06-01T10:31:00Z");
        assert_eq!((e.groups[0].succeeded, e.groups[0].failed, e.in_flight), (0, 1, 1));
    }

    /// A resource in two groups that fails in the first on its deadline, in this very pass, is
    /// failed in the later group in the same pass (failures are kept by name): the status the pass
    /// writes is the one the next pass — and the plugin, reading it — computes again. Found by the
    /// simulation (seed 5002654182747461712): the later group counted it only a pass later.
    #[test]
    fn a_failure_found_in_an_earlier_group_counts_in_a_later_group_in_the_same_pass() {
        let mut dev = group("dev", &[("env", "dev")]);
        dev.max_failures = Some(IntOrString::Int(1));
        dev.progress_deadline = Some("2m".into());
        let mut prod = group("prod", &[("tier", "prod")]);
        prod.max_failures = Some(IntOrString::Int(1));
        let mut w = World::new(
            plan(&["v1"], "v2", vec![dev, prod]),
            vec![
                binding("a", "shared", &[("env", "dev"), ("tier", "prod")], "v1", "v1"),
                binding("a", "p1", &[("tier", "prod")], "v1", "v1"),
            ],
        );
        let e = w.eval(&[], false, "2026-06-01T10:01:00Z");
        assert_eq!(started(&e), vec!["shared"]);
        w.set("shared", "v1", "v2");
        started_at(&mut w, "shared", "2026-06-01T10:01:00Z");
        // Still in flight for Kratix; past dev's deadline.
        let found = w.eval(&e.groups, false, "2026-06-01T10:03:00Z");
        assert_eq!(found.groups[0].phase, Some(GroupPhase::Completed), "dev tolerates it");
        assert_eq!(
            (found.groups[1].failed, found.groups[1].failed_resources.len()),
            (1, 1),
            "shared counts failed in prod in the pass that found it"
        );
        let again = w.eval(&found.groups, false, "2026-06-01T10:03:00Z");
        assert_eq!(again.groups, found.groups, "the next pass computes the same status");
    }

    #[test]
    fn a_deadline_expiring_while_the_window_is_closed_still_counts() {
        // The window is closed (an allow window at 02:00 only), but an upgrade started before it
        // closed runs out of time all the same; over the budget it fails the run.
        let mut a = group("a", &[("g", "a")]);
        a.progress_deadline = Some("1h".into());
        a.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 2 * * *".into(),
            duration: "1h".into(),
            time_zone: None,
        }]);
        let bindings = vec![
            binding("ns", "x", &[("g", "a")], "v1", "v1"),
            binding("ns", "y", &[("g", "a")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![a]), bindings);
        w.set("x", "v1", "v2");
        started_at(&mut w, "x", "2026-06-01T02:50:00Z");
        let e = w.eval(&[], false, "2026-06-01T03:30:00Z");
        assert_eq!(e.blocked(), Some(Blocked::WindowClosed));
        assert_eq!(
            e.wake_at,
            Some(utc("2026-06-01T03:50:00Z")),
            "the expiry comes before the next opening"
        );
        let e = w.eval(&[], false, "2026-06-01T03:50:00Z");
        assert_eq!(e.verdict, Verdict::Failed { group: 0, failed: 1 });
    }

    #[test]
    fn a_late_success_after_the_group_completed_leaves_its_counts() {
        let mut w = budget_world(2, Some(IntOrString::Int(1)), &[1]);
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        let recorded = e.groups.clone();
        assert_eq!((recorded[0].succeeded, recorded[0].failed), (1, 1));
        w.set("a1", "v2", "v2"); // Kratix retried it by itself and it worked
        let e = w.eval(&recorded, false, "2026-06-01T10:04:00Z");
        assert_eq!(e.groups[0], recorded[0], "counts never move back (spec §5.5)");
        assert_eq!(
            e.verdict,
            Verdict::InProgress { group: 1 },
            "the completed group stays complete"
        );
    }

    /// Kratix clears a failure by itself (`reconcileAfterFailure`, spec §2): the binding reads in
    /// flight (the failure condition gone), then upgraded. The run's count of it never moves:
    /// no slot taken, no success counted, the same counts after a restart.
    #[test]
    fn a_failure_stands_through_kratix_retrying_it_by_itself() {
        // (case, what Kratix did after the failure: (lastAppliedVersion, spec.version, condition cleared))
        let cases = [
            ("retrying: in flight again", ("v1", "v2")),
            ("retried and succeeded", ("v2", "v2")),
            ("someone moved it on", ("v3", "v3")),
        ];
        for (case, (applied, spec_version)) in cases {
            let mut a = group("a", &[("g", "a")]);
            a.max_failures = Some(IntOrString::Int(1));
            a.max_concurrent = Some(IntOrString::Int(1));
            let bindings = vec![
                binding("ns", "x", &[("g", "a")], "v1", "v1"),
                binding("ns", "y", &[("g", "a")], "v1", "v1"),
            ];
            let mut w = World::new(plan(&["v1"], "v2", vec![a]), bindings);
            w.set("x", "v1", "v2");
            w.fail("x", "2026-06-01T10:02:00Z");
            let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
            assert_eq!((e.groups[0].failed, e.in_flight), (1, 0), "{case}");
            assert_eq!(started(&e), vec!["y"], "{case}: the free slot goes to y");
            let failures = &e.groups[0].failed_resources;
            assert_eq!(failures.len(), 1, "{case}");
            assert_eq!((failures[0].namespace.as_str(), failures[0].name.as_str()), ("ns", "x"));
            assert_eq!(failures[0].at, utc("2026-06-01T10:03:00Z"), "{case}");
            assert_eq!(failures[0].detail, "workflow failed: simulated", "{case}");
            let recorded = e.groups.clone();

            let i = w.live.iter().position(|b| b.spec.resource_ref.name == "x").unwrap();
            w.live[i].status.as_mut().unwrap().conditions.clear();
            w.live[i].status.as_mut().unwrap().failed_version = None;
            w.set("x", applied, spec_version);
            w.set("y", "v1", "v2");
            // The next pass, and a restarted controller reading the same status: the same answer.
            let e = w.eval(&recorded, false, "2026-06-01T10:04:00Z");
            assert_eq!(
                (
                    e.groups[0].succeeded,
                    e.groups[0].failed,
                    e.groups[0].skipped,
                    e.in_flight
                ),
                (0, 1, 0, 1),
                "{case}: x still counts Failed; only y is in flight"
            );
            assert_eq!(e.groups[0].failed_resources, recorded[0].failed_resources, "{case}");
            // Without the record (a status written before failedResources), live state decides.
            let e = w.eval(&[], false, "2026-06-01T10:04:00Z");
            assert_eq!(e.groups[0].failed, 0, "{case}");
        }
    }

    #[test]
    fn failure_records_hold_at_most_one_past_the_budget() {
        // (case, group size, maxFailures, failing, records kept)
        let cases: [(&str, usize, i32, &[usize], usize); 4] = [
            ("within budget: every failure", 4, 2, &[0, 3], 2),
            ("one past: every failure", 4, 1, &[0, 3], 2),
            ("far past, in one pass: budget + 1", 5, 0, &[0, 1, 2, 4], 1),
            ("far past with a budget: budget + 1", 6, 2, &[0, 1, 2, 3, 4, 5], 3),
        ];
        for (case, n, budget, failing, kept) in cases {
            let w = budget_world(n, Some(IntOrString::Int(budget)), failing);
            let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
            let names: Vec<&str> = e.groups[0].failed_resources.iter().map(|f| f.name.as_str()).collect();
            let expected: Vec<String> = failing.iter().take(kept).map(|i| format!("a{i}")).collect();
            assert_eq!(names, expected, "{case}: in snapshot order");
            assert_eq!(
                e.groups[0].failed as usize,
                failing.len(),
                "{case}: the count is every failure"
            );
        }
    }

    #[test]
    fn a_failure_recorded_in_an_earlier_group_counts_in_a_later_one() {
        // x is in both groups; dev tolerates its failure, prod (budget 0) does not, even though
        // Kratix retried x by itself and it succeeded before prod started (spec §13.1).
        let mut dev = group("dev", &[("env", "dev")]);
        dev.max_failures = Some(IntOrString::Int(1));
        let prod = group("prod", &[("tier", "gold")]);
        let bindings = vec![
            binding("ns", "x", &[("env", "dev"), ("tier", "gold")], "v1", "v1"),
            binding("ns", "d", &[("env", "dev")], "v1", "v1"),
        ];
        let mut w = World::new(plan(&["v1"], "v2", vec![dev, prod]), bindings);
        w.set("d", "v1", "v2");
        w.set("x", "v1", "v2");
        w.fail("x", "2026-06-01T10:02:00Z");
        let e = w.eval(&[], false, "2026-06-01T10:03:00Z");
        assert_eq!(
            e.verdict,
            Verdict::InProgress { group: 0 },
            "dev waits for d, within its budget"
        );
        let recorded = e.groups.clone();
        let i = w.live.iter().position(|b| b.spec.resource_ref.name == "x").unwrap();
        w.live[i].status.as_mut().unwrap().conditions.clear();
        w.set("x", "v2", "v2");
        w.set("d", "v2", "v2");
        let e = w.eval(&recorded, false, "2026-06-01T10:04:00Z");
        assert_eq!(e.verdict, Verdict::Failed { group: 1, failed: 1 });
        assert_eq!(e.groups[1].failed_resources[0].name, "x");
    }

    /// Spec §5.5: another run's start after this run's snapshot is a change by someone else, and
    /// the skip stands as the annotations do — also once the binding is back where the snapshot
    /// saw it (a revert of another run, done while a preview waited).
    #[test]
    fn a_start_by_another_run_after_the_snapshot_is_a_change_by_someone_else_table() {
        let snapshot_taken = utc("2026-06-01T10:00:00Z");
        let at_v1 = binding("ns", "r", &[], "v1", "v1");
        let snap = snap_res(&at_v1);
        let started = |mut b: ResourceBinding, by: &str, at: &str| {
            let a = b.metadata.annotations.get_or_insert_with(Default::default);
            a.insert(UPGRADED_BY_ANNOTATION.into(), by.into());
            a.insert(UPGRADE_STARTED_AT_ANNOTATION.into(), at.into());
            b
        };
        let skipped = |spec: &str, applied: &str| {
            Outcome::Skipped(SkipReason::ChangedByOthers {
                spec_version: spec.into(),
                last_applied_version: applied.into(),
            })
        };
        let cases = [
            (
                "a revert moving it back, not landed: not this run's success",
                started(
                    binding("ns", "r", &[], "v2", "v1"),
                    "other-revert",
                    "2026-06-01T10:00:16Z",
                ),
                skipped("v1", "v2"),
            ),
            (
                "landed back where the snapshot saw it: still skipped",
                started(at_v1.clone(), "other-revert", "2026-06-01T10:00:16Z"),
                skipped("v1", "v1"),
            ),
            (
                "another run's start before the snapshot (in flight when it was taken): as before",
                started(binding("ns", "r", &[], "v1", "v2"), "older", "2026-06-01T09:59:00Z"),
                Outcome::InFlight,
            ),
            (
                "a start of the snapshot's own second counts as before it",
                started(binding("ns", "r", &[], "v2", "v2"), "older", "2026-06-01T10:00:00Z"),
                Outcome::Succeeded,
            ),
            (
                "this run's own start never is",
                started(binding("ns", "r", &[], "v1", "v2"), "run-1", "2026-06-01T10:00:30Z"),
                Outcome::InFlight,
            ),
        ];
        for (name, b, want) in cases {
            let got = GroupRules::default().outcome(
                &snap,
                (0, 0),
                Some(&b),
                &HealthRecords::default(),
                &Records::none(),
                JudgedFor {
                    to: "v2",
                    name: "run-1",
                    admitted: snapshot_taken,
                    snapshot_taken,
                    reverting: None,
                },
                utc("2026-06-01T10:01:00Z"),
            );
            assert_eq!(got, want, "{name}");
        }
        // A revert's resources were all started by the run it reverts: any other run's start is
        // a change, whenever it was (a run invisible to admission after a crash, in the same
        // second as the revert's snapshot).
        let reverted_in_flight = SnapshotResource {
            target: Some("v1".into()),
            ..snap_res(&binding("ns", "r", &[], "v1", "v2"))
        };
        let revert_of = |resource: &SnapshotResource, b: &ResourceBinding| {
            GroupRules::default().outcome(
                resource,
                (0, 0),
                Some(b),
                &HealthRecords::default(),
                &Records::none(),
                JudgedFor {
                    to: "v1",
                    name: "up-back",
                    admitted: snapshot_taken,
                    snapshot_taken,
                    reverting: Some("up"),
                },
                utc("2026-06-01T10:01:00Z"),
            )
        };
        let revert = |b: &ResourceBinding| revert_of(&reverted_in_flight, b);
        let by_another = started(binding("ns", "r", &[], "v1", "v2"), "manual", "2026-06-01T10:00:00Z");
        assert_eq!(
            revert(&by_another),
            skipped("v2", "v1"),
            "another run's, of the snapshot's second"
        );
        let by_reverted = started(binding("ns", "r", &[], "v1", "v2"), "up", "2026-06-01T09:59:00Z");
        assert_eq!(
            revert(&by_reverted),
            Outcome::NotStarted,
            "the reverted run's: the revert's to move back"
        );
        // A success stands (spec §5.5; seed 16098619612792421396 reached a count moving back):
        // a revert's resource back at its target counts done, whoever's start is on it.
        let moved_back_from_v2 = SnapshotResource {
            target: Some("v1".into()),
            ..snap_res(&binding("ns", "r", &[], "v2", "v2"))
        };
        let back_by_another = started(at_v1.clone(), "scheduled", "2026-06-01T10:00:30Z");
        assert_eq!(
            revert_of(&moved_back_from_v2, &back_by_another),
            Outcome::Succeeded,
            "a revert's success stands"
        );
        // A preview snapshots when created and is admitted when resumed: the runs it then
        // supersedes worked until that moment, and their starts are not someone else's changes
        // (the a_preview_snapshots_and_patches_nothing_until_resumed e2e).
        let resumed_preview = JudgedFor {
            to: "v2",
            name: "preview",
            admitted: utc("2026-06-01T10:00:40Z"),
            snapshot_taken,
            reverting: None,
        };
        let judge = |b: &ResourceBinding| {
            GroupRules::default().outcome(
                &snap,
                (0, 0),
                Some(b),
                &HealthRecords::default(),
                &Records::none(),
                resumed_preview,
                utc("2026-06-01T10:01:00Z"),
            )
        };
        let by_superseded = started(binding("ns", "r", &[], "v2", "v2"), "older", "2026-06-01T10:00:20Z");
        assert_eq!(judge(&by_superseded), Outcome::Succeeded, "a start before the resume");
        let after_resume = started(binding("ns", "r", &[], "v1", "v3"), "other", "2026-06-01T10:00:50Z");
        assert_eq!(judge(&after_resume), skipped("v3", "v1"), "a start after the resume");
    }

    /// Seed 13283025931579252237: a revert's in-place request (the label) dropped by a Resource
    /// Request rewrite before Kratix acted is asked once more; one Kratix took is not.
    #[test]
    fn an_in_place_revert_request_lost_before_kratix_acted_is_asked_again_once() {
        let snap = SnapshotResource {
            target: Some("v1".into()),
            ..snap_res(&binding("ns", "r", &[], "v1", "v2"))
        };
        let started = |mut b: ResourceBinding, extra: &[(&str, &str)]| {
            let a = b.metadata.annotations.get_or_insert_with(Default::default);
            a.insert(UPGRADED_BY_ANNOTATION.into(), "up-back".into());
            a.insert(UPGRADE_STARTED_AT_ANNOTATION.into(), "2026-06-01T10:00:00Z".into());
            for (k, v) in extra {
                a.insert(k.to_string(), v.to_string());
            }
            b
        };
        let judge = |b: &ResourceBinding| evaluate_resource(&snap, Some(b), "v1", "up-back", utc(CREATED));
        let lost = started(binding("ns", "r", &[], "v1", "v1"), &[]);
        assert_eq!(
            judge(&lost),
            Outcome::NeedsRetry,
            "label gone, Kratix silent since the start"
        );
        let asked_again = started(
            binding("ns", "r", &[], "v1", "v1"),
            &[(RETRY_REQUESTED_BY_ANNOTATION, "up-back")],
        );
        assert_eq!(judge(&asked_again), Outcome::InFlight, "asked once more already");
        let taken = with_condition(
            started(binding("ns", "r", &[], "v1", "v1"), &[]),
            "Unknown",
            "UpgradeInProgress",
            "2026-06-01T10:00:05Z",
            None,
        );
        assert_eq!(judge(&taken), Outcome::InFlight, "Kratix took it: it is running");
        // Its Resource Request deleted and created again: a binding of the same name, deployed at
        // v1 afresh, that this run never started — not waiting for the revert's re-run.
        let created_again = binding("ns", "r", &[], "v1", "v1");
        assert_eq!(
            judge(&created_again),
            Outcome::Skipped(SkipReason::ChangedByOthers {
                spec_version: "v1".into(),
                last_applied_version: "v1".into()
            })
        );
    }

    /// A success the binding may stop showing is recorded as it is counted, and stands (spec
    /// §5.5; seed 4647237390313743256): a resource another run's upgrade brought to this run's
    /// target, which that run's revert then moves back.
    #[test]
    fn a_success_by_another_runs_upgrade_is_recorded_and_stands() {
        let snapshot_taken = utc("2026-06-01T10:00:00Z");
        let snap = Arc::new(snap_res(&binding("ns", "r", &[], "v1", "v2")));
        let run = JudgedFor {
            to: "v2",
            name: "preview",
            admitted: utc("2026-06-01T10:00:16Z"),
            snapshot_taken,
            reverting: None,
        };
        let by = |spec: &str, applied: &str, who: &str| {
            let mut b = binding("ns", "r", &[], applied, spec);
            let a = b.metadata.annotations.get_or_insert_with(Default::default);
            a.insert(UPGRADED_BY_ANNOTATION.into(), who.into());
            a.insert(UPGRADE_STARTED_AT_ANNOTATION.into(), "2026-06-01T10:00:16Z".into());
            b
        };
        // Kratix applied the other run's v2; that run's revert already asks for v1.
        let landed = by("v1", "v2", "scheduled-revert");
        let judge = |b: &ResourceBinding, recorded: &[GroupStatus]| {
            GroupRules::default().outcome(
                &snap,
                (0, 0),
                Some(b),
                &HealthRecords::default(),
                &Records::failures(recorded),
                run,
                utc("2026-06-01T10:01:00Z"),
            )
        };
        assert_eq!(judge(&landed, &[]), Outcome::Succeeded);
        let live: [Option<&dyn BindingFacts>; 1] = [Some(&landed)];
        let records = record_reapplied(None, std::slice::from_ref(&snap), &live, &[Outcome::Succeeded], &run);
        assert_eq!(records.len(), 1, "recorded: the binding names another run");
        let recorded = [GroupStatus {
            reapplied_resources: records,
            ..Default::default()
        }];
        let moved_back = by("v1", "v1", "scheduled-revert");
        assert_ne!(
            judge(&moved_back, &[]),
            Outcome::Succeeded,
            "the binding alone no longer says it"
        );
        assert_eq!(judge(&moved_back, &recorded), Outcome::Succeeded, "the record does");
        // This run's own start stays on the binding: nothing to record.
        let own = by("v2", "v2", "preview");
        let live: [Option<&dyn BindingFacts>; 1] = [Some(&own)];
        assert!(record_reapplied(None, std::slice::from_ref(&snap), &live, &[Outcome::Succeeded], &run).is_empty());
    }

    #[test]
    fn a_resource_this_run_upgraded_and_someone_moved_on_counts_succeeded() {
        let mut b = binding("ns", "r", &[], "v1", "v1");
        let snap = snap_res(&b);
        let created = utc(CREATED);
        b.spec.version = "v3".into();
        b.status.get_or_insert_with(Default::default).last_applied_version = "v3".into();
        assert!(matches!(
            evaluate_resource(&snap, Some(&b), "v2", "run-1", created),
            Outcome::Skipped(SkipReason::ChangedByOthers { .. })
        ));
        b.metadata.annotations = Some([(UPGRADED_BY_ANNOTATION.to_string(), "run-1".to_string())].into());
        assert_eq!(
            evaluate_resource(&snap, Some(&b), "v2", "run-1", created),
            Outcome::Succeeded
        );
        assert!(
            matches!(
                evaluate_resource(&snap, Some(&b), "v2", "run-2", created),
                Outcome::Skipped(_)
            ),
            "another run's upgrade is not this run's success"
        );
        // Started by this run, moved on in spec only (not applied yet): the same outcome as once
        // Kratix applies it, so that neither count moves back as it does.
        b.status.as_mut().unwrap().last_applied_version = "v1".into();
        assert_eq!(
            evaluate_resource(&snap, Some(&b), "v2", "run-1", created),
            Outcome::Succeeded
        );
    }

    #[test]
    fn a_retry_restarts_the_deadline_clock() {
        let deadline = WrittenDuration::parse("30m").unwrap();
        let mut b = binding("ns", "r", &[], "v1", "v2");
        b.metadata.annotations = Some(
            [
                (
                    UPGRADE_STARTED_AT_ANNOTATION.to_string(),
                    "2026-06-01T09:00:00Z".to_string(),
                ),
                (UPGRADED_BY_ANNOTATION.to_string(), "run-1".to_string()),
            ]
            .into(),
        );
        let now = utc("2026-06-01T10:00:00Z");
        // The first attempt is an hour old: about to be retried, it is not failed on that clock.
        assert_eq!(
            apply_deadline(Outcome::NeedsRetry, Some(&b), Some(&deadline), "run-1", now),
            Outcome::NeedsRetry
        );
        assert_eq!(
            apply_deadline(Outcome::InFlight, Some(&b), Some(&deadline), "run-1", now),
            Outcome::Failed {
                message: "did not finish within 30m".into()
            }
        );
        // No start recorded (started before this controller wrote the annotation): no deadline.
        b.metadata.annotations = None;
        assert_eq!(
            apply_deadline(Outcome::InFlight, Some(&b), Some(&deadline), "run-1", now),
            Outcome::InFlight
        );
    }

    /// `progressDeadline` times only this run's own starts (spec §13.1): an in-flight resource
    /// another run started, or one Kratix retried by itself under an old start, is never failed
    /// by this run's deadline, and does not wake it.
    #[test]
    fn the_deadline_times_only_this_runs_own_starts() {
        let deadline = WrittenDuration::parse("30m").unwrap();
        let now = utc("2026-06-01T10:00:00Z");
        let failed = Outcome::Failed {
            message: "did not finish within 30m".into(),
        };
        // (case, upgraded-by, upgrade-started-at, outcome, expires at)
        type Case<'a> = (&'a str, Option<&'a str>, &'a str, Outcome, Option<&'a str>);
        let cases: &[Case] = &[
            (
                "this run's start, past",
                Some("run-1"),
                "2026-06-01T09:00:00Z",
                failed.clone(),
                Some("2026-06-01T09:30:00Z"),
            ),
            (
                "this run's start, within",
                Some("run-1"),
                "2026-06-01T09:45:00Z",
                Outcome::InFlight,
                Some("2026-06-01T10:15:00Z"),
            ),
            (
                "another run's start (a superseded run)",
                Some("run-0"),
                "2026-06-01T09:00:00Z",
                Outcome::InFlight,
                None,
            ),
            (
                "last week's run, retried by Kratix itself",
                Some("weekly-41"),
                "2026-05-25T23:00:00Z",
                Outcome::InFlight,
                None,
            ),
            ("no upgraded-by", None, "2026-06-01T09:00:00Z", Outcome::InFlight, None),
        ];
        for (case, by, started, want, expires) in cases {
            let mut b = binding("ns", "r", &[], "v1", "v2");
            let mut annotations: std::collections::BTreeMap<String, String> =
                [(UPGRADE_STARTED_AT_ANNOTATION.to_string(), started.to_string())].into();
            if let Some(by) = by {
                annotations.insert(UPGRADED_BY_ANNOTATION.to_string(), by.to_string());
            }
            b.metadata.annotations = Some(annotations);
            assert_eq!(
                &apply_deadline(Outcome::InFlight, Some(&b), Some(&deadline), "run-1", now),
                want,
                "{case}"
            );
            let live: Vec<Option<&dyn BindingFacts>> = vec![Some(&b)];
            let rules = GroupRules {
                deadline: Some(deadline.clone()),
                health: None,
            };
            assert_eq!(
                first_expiry(&rules, &[Outcome::InFlight], &live, "run-1"),
                expires.map(utc),
                "{case}: when the run looks again"
            );
        }
    }
}
