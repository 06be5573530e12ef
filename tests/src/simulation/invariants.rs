//! The invariants of spec §14.3, checked around every write the simulated controller makes and
//! after every action of a history.

use std::collections::BTreeMap;

use kube::ResourceExt;
use upgradeplan::api::{reasons, ConditionStatus, UpgradeRun, UpgradeRunStatus, SUPERSEDED_BY_ANNOTATION};
use upgradeplan::engine::counters::Counters;
use upgradeplan::engine::freeze::{hold_at, holding};
use upgradeplan::engine::lifecycle::{SnapshotConfigMap, Step};
use upgradeplan::engine::snapshot::Frozen;
use upgradeplan::engine::write::{Attempt, BindingPatch};

use super::world::{Published, World, PROMISE};

/// An invariant that does not hold, and what broke it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: Invariant,
    pub detail: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Invariant {
    /// No start or retry while the run — as the step read it — is suspended (a preview too),
    /// cancelled, deleted, superseded, frozen or without its target revision (spec §14.1).
    NoStartWhileHeld,
    /// In flight never above a group's limit, as the run's frozen plan sets it.
    InFlightWithinLimit,
    /// The upgrades in flight that the plan's runs started — active, superseded or ended — never
    /// above an UpgradeBudget's `maxInFlight` (spec §13.8).
    InFlightWithinBudget,
    /// No binding outside the run's snapshot is ever patched.
    OnlySnapshotPatched,
    /// No resource is moved to a version whose PromiseRevision is being deleted: Kratix would
    /// delete it (spec §2, §5.7).
    NoMoveIntoCleanup,
    /// Each resource started at most once per run.
    StartedOnce,
    /// A group's counts never move back; a terminal run stays as it ended.
    CountsNeverMoveBack,
    /// No outcome a run recorded ever changes, and no resource the run announced skipped is ever
    /// started by it (spec §5.5).
    OutcomesStand,
    /// A run's snapshot (and so its frozen plan) is written once and never changed: a plan edit
    /// mid-run changes nothing of the run.
    SnapshotImmutable,
    /// Once nothing else happens, every run ends or says why it waits.
    EndsOrSaysWhy,
    /// Each Event published once per occurrence, each resource's result and each run's end
    /// counted once — across crashes, stale caches and restarts (spec §14.2).
    EachOnce,
    /// The plan's `phase`, `activeRunRef` and `lastRun` follow from its runs (spec §3.2, §14.2).
    PlanFollowsRuns,
    /// In a group with a health check, a resource counts Succeeded only once its HealthRecords
    /// from after its upgrade, combined by the worst state, said healthy or ready (spec §13.2).
    VerifiedByHealth,
    /// A scheduled run is created only for a trigger of the plan's schedule (a minute its cron
    /// names in its zone, not in the future), never while the plan is suspended, and at most
    /// once per trigger (spec §3).
    SchedulesFireOnce,
    /// A plan edited since a run's snapshot changes nothing of the run: its step from the live
    /// plan is its step from the plan as the snapshot froze it (spec §14.2).
    PlanEditChangesNothing,
    /// A step decided from a stale copy of its run writes nothing of the run: its own patch and
    /// status are refused by their preconditions (spec §14.2).
    StaleCopyWritesNothing,
    /// The plugin's run view (`kubectl upgradeplan status`), read from the world the controller's
    /// step read, shows the counts the step recorded.
    PluginShowsRecorded,
    /// A revert is created by the controller only for a run failing in a group with `onFailure:
    /// Revert`, named `<run>-revert`, for all its resources, at most once per run; and every run
    /// that ends so has one (spec §13.7).
    RevertCreatedOnce,
    /// A revert's snapshot is taken from the reverted run's verified snapshot: exactly the
    /// resources that run started and left as `--resources` says (their binding, as the step saw
    /// it, names that run and is still at its target), each once, back to the version that
    /// snapshot recorded; the reverted run's groups in reverse, their limits, budgets, deadlines
    /// and health checks, and its windows, soak, approvals and gates only when the revert
    /// respects policy; and each start of a revert sets its resource's own target (spec §13.7).
    RevertFromRecord,
    /// A run fails a resource on its `progressDeadline` only when it started it itself (the
    /// binding's `upgraded-by` names the run): never one Kratix retried by itself under an older
    /// run's start, nor one another run started (spec §13.1).
    DeadlineTimesOwnStarts,
    /// A binding patch reaches the API server only while the run is still admitted: not
    /// cancelled, suspended, superseded or deleted, and no freeze holds its plan, as the world
    /// is when the patch lands — not only as the step read it (spec §14.1).
    NoStartAfterAdmissionEnded,
}

impl std::fmt::Display for Invariant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Invariant::NoStartWhileHeld => "no start or retry while the run is held (spec §14.1)",
            Invariant::InFlightWithinLimit => "in flight never above the group's limit",
            Invariant::InFlightWithinBudget => "in flight across the plan's runs never above the budget",
            Invariant::OnlySnapshotPatched => "no binding outside the run's snapshot is patched",
            Invariant::NoMoveIntoCleanup => "no resource is moved to a revision being deleted",
            Invariant::StartedOnce => "each resource is started at most once per run",
            Invariant::CountsNeverMoveBack => "counts never move back; a terminal run stays terminal",
            Invariant::OutcomesStand => "no counted outcome changes; no resource announced skipped is started",
            Invariant::SnapshotImmutable => "a run's snapshot and frozen plan never change",
            Invariant::EndsOrSaysWhy => "every run ends, or carries a condition saying why it waits",
            Invariant::EachOnce => "each event published and each result counted once",
            Invariant::PlanFollowsRuns => "the plan's status follows from its runs",
            Invariant::VerifiedByHealth => "a success in a health-checked group is one its records verified",
            Invariant::SchedulesFireOnce => "a schedule creates one run per trigger, none while the plan is suspended",
            Invariant::PlanEditChangesNothing => "a plan edit mid-run changes nothing of the run",
            Invariant::StaleCopyWritesNothing => "a step from a stale copy of its run writes nothing of it",
            Invariant::PluginShowsRecorded => "the plugin's run view equals what the controller recorded",
            Invariant::RevertCreatedOnce => "a run failing with onFailure: Revert creates its revert, once",
            Invariant::DeadlineTimesOwnStarts => "a progressDeadline fails only the run's own starts",
            Invariant::NoStartAfterAdmissionEnded => "no start is sent after its admission ended",
            Invariant::RevertFromRecord => {
                "a revert moves back what the reverted run's record says, to what it recorded"
            }
        };
        write!(f, "{text}")
    }
}

fn violation(invariant: Invariant, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

/// Every outcome group `before` recorded is recorded the same in `after` (spec §5.5), and no
/// resource is recorded two ways.
fn outcomes_stand(
    run: &str,
    before: &upgradeplan::api::GroupStatus,
    after: &upgradeplan::api::GroupStatus,
) -> Result<(), Violation> {
    use upgradeplan::engine::record::IndexSet;
    let read = |what: &str, text: &str| {
        IndexSet::parse(text).map_err(|e| Violation {
            invariant: Invariant::OutcomesStand,
            detail: format!("run {run} group {}: {what} unreadable: {e}", after.name),
        })
    };
    let was = [
        ("succeeded", read("succeededIndexes", &before.succeeded_indexes)?),
        ("skipped", read("skippedIndexes", &before.skipped_indexes)?),
    ];
    let is = [
        ("succeeded", read("succeededIndexes", &after.succeeded_indexes)?),
        ("skipped", read("skippedIndexes", &after.skipped_indexes)?),
    ];
    for ((what, was), (_, is)) in was.iter().zip(&is) {
        if let Some(i) = was.iter().find(|&i| !is.contains(i)) {
            return violation(
                Invariant::OutcomesStand,
                format!(
                    "run {run} group {}: resource {i}, recorded {what}, is no more",
                    after.name
                ),
            );
        }
    }
    if let Some(i) = is[0].1.iter().find(|&i| is[1].1.contains(i)) {
        return violation(
            Invariant::OutcomesStand,
            format!(
                "run {run} group {}: resource {i} recorded both succeeded and skipped",
                after.name
            ),
        );
    }
    let failed = |g: &upgradeplan::api::GroupStatus| -> std::collections::BTreeSet<(String, String)> {
        g.failed_resources
            .iter()
            .map(|f| (f.namespace.clone(), f.name.clone()))
            .collect()
    };
    if let Some((ns, name)) = failed(before).difference(&failed(after)).next() {
        return violation(
            Invariant::OutcomesStand,
            format!(
                "run {run} group {}: {ns}/{name}, recorded failed, is no more",
                after.name
            ),
        );
    }
    Ok(())
}

/// Started towards `to` and neither applied nor failed (as the run counts a slot taken).
fn in_flight(b: &upgradeplan::api::kratix::ResourceBinding, to: &str) -> bool {
    use upgradeplan::api::kratix::BindingFacts;
    let failed = b.failed_version() == Some(to) && b.upgrade_condition().is_some_and(|c| c.status == "False");
    b.last_applied_version() != to && !failed
}

/// A revert's resource whose target is the version it had applied (its upgrade had failed):
/// Kratix runs that version again on the revert's request, and it is in flight until Kratix says
/// it succeeded, or failed, there.
fn reverting_in_place(
    r: &upgradeplan::engine::snapshot::SnapshotResource,
    b: &upgradeplan::api::kratix::ResourceBinding,
) -> bool {
    use upgradeplan::api::kratix::BindingFacts;
    let Some(target) = r.target.as_deref() else {
        return false;
    };
    let said = b.upgrade_condition().map(|c| c.status);
    let failed_there = b.failed_version() == Some(target) && said == Some("False");
    target == r.last_applied_version && said != Some("True") && said.is_some() && !failed_there
}

/// The group's `maxConcurrent` as the frozen plan wrote it.
fn written_limit<'f>(
    frozen: &'f Frozen,
    group: &str,
) -> Option<&'f k8s_openapi::apimachinery::pkg::util::intstr::IntOrString> {
    frozen
        .plan
        .rollout_groups
        .iter()
        .find(|g| g.name == group)
        .and_then(|g| g.max_concurrent.as_ref())
}

/// How many may be in flight, read literally from spec §8 (not through the engine, which is what
/// is checked): a count; a percentage of the group rounded down, at least 1; omitted, the group.
fn naive_limit(written: Option<&k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>, size: usize) -> usize {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match written {
        Some(IntOrString::Int(n)) => usize::try_from(*n).unwrap_or(0),
        Some(IntOrString::String(p)) => {
            let percent: usize = p.trim_end_matches('%').parse().unwrap_or(100);
            (size * percent / 100).max(1)
        }
        None => size,
    }
}

/// Whether a condition of this type and status says the run waits (and why): "Suspended=False,
/// Not suspended" does not.
/// Whether binding `b`, started in group `group` of the frozen plan `frozen`, is past that
/// group's `progressDeadline` at `now` (spec §13.1: it then counts as failed, no longer in
/// flight — recorded by the status write that follows, which a crash may cut off). The
/// simulation writes deadlines in whole minutes.
fn past_deadline(
    frozen: &Frozen,
    group: &str,
    b: &upgradeplan::api::kratix::ResourceBinding,
    now: chrono::DateTime<chrono::Utc>,
) -> bool {
    let deadline = frozen
        .plan
        .rollout_groups
        .iter()
        .find(|g| g.name == group)
        .and_then(|g| g.progress_deadline.as_deref())
        .and_then(|d| d.strip_suffix('m')?.parse::<i64>().ok())
        .map(chrono::Duration::minutes);
    let started = b
        .annotations()
        .get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
    matches!((deadline, started), (Some(d), Some(t)) if t.with_timezone(&chrono::Utc) + d <= now)
}

/// How `run` stood down, read from the run itself (spec §14.1): suspended, cancelled, deleted
/// or superseded; `None` while it may start upgrades.
fn stood_down(run: &UpgradeRun) -> Option<&'static str> {
    [
        (run.spec.suspend, "suspended"),
        (run.spec.cancel, "cancelled"),
        (run.metadata.deletion_timestamp.is_some(), "deleted"),
        (run.annotations().contains_key(SUPERSEDED_BY_ANNOTATION), "superseded"),
    ]
    .into_iter()
    .find_map(|(holds, how)| holds.then_some(how))
}

/// The freezes that hold `run`: every run of the plan, a revert only when it respects policy
/// (spec §14.1, §13.7).
fn freezes_holding(world: &World, run: &UpgradeRun) -> Vec<upgradeplan::engine::freeze::Freeze> {
    let policy_holds = run.spec.revert_of.is_none() || run.spec.respect_policy;
    if policy_holds {
        holding(&world.freezes, PROMISE, world.plan.labels())
    } else {
        Vec::new()
    }
}

fn holds(type_: &str, status: ConditionStatus) -> bool {
    let while_true = [
        reasons::SUSPENDED,
        reasons::FROZEN,
        reasons::GATED,
        reasons::AWAITING_APPROVAL,
    ];
    let while_false = [
        reasons::TARGET_REVISION_READY,
        reasons::PLAN_RESOLVED,
        reasons::KINDS_SERVED,
        // A revert preview that cannot be taken says so while it waits (it fails once resumed).
        reasons::RUN_SUCCEEDED,
        // A revert created by onFailure waits for its run to record its failure.
        reasons::REVERT_READY,
    ];
    match status {
        ConditionStatus::True => while_true.contains(&type_),
        _ => while_false.contains(&type_),
    }
}

/// Why a patch of `step` went to a group that §14.1 holds (its gate closed, its approval missing
/// before it started, the group before it soaking), read from the frozen plan and the run's
/// status as the step read it.
fn held_group(world: &World, run: &UpgradeRun, frozen: &Frozen, step: &Step) -> Option<String> {
    let status = run.status.clone().unwrap_or_default();
    let approvals = world.approvals_of(&run.name_any());
    for patch in &step.binding_patches {
        let Some(index) = group_of(frozen, patch) else {
            continue;
        };
        let Some(group) = frozen.plan.rollout_groups.get(index) else {
            continue;
        };
        let what = format!(
            "{} ({:?}) in group {}",
            patch.resource.binding, patch.attempt, group.name
        );
        let recorded = status.rollout_groups.iter().find(|g| g.name == group.name);
        let gates = frozen.plan.gates.iter().flatten();
        let closed = gates
            .filter(|g| g.groups.as_ref().is_none_or(|groups| groups.contains(&group.name)))
            .find(|_| !world.gate.is_open());
        if let Some(gate) = closed {
            return Some(format!("patched {what} while gate {} read {:?}", gate.name, world.gate));
        }
        if let Some(closed) = windows_closed(group, world.now) {
            return Some(format!("patched {what} at {} while {closed}", world.now));
        }
        let started = recorded.is_some_and(|g| g.started_at.is_some() || g.approval.is_some());
        let approved = approvals.iter().any(|a| a.group == group.name);
        if group.require_approval == Some(true) && !started && !approved {
            return Some(format!("patched {what} before any UpgradeApproval for it"));
        }
        let before = index.checked_sub(1).and_then(|i| frozen.plan.rollout_groups.get(i));
        let soak = before.and_then(|b| b.soak_duration.as_deref()).and_then(go_seconds);
        // As recorded, or as this very step records it (a group completing in the pass that
        // would start the next).
        let completed_in = |groups: &[upgradeplan::api::GroupStatus]| {
            before
                .and_then(|b| groups.iter().find(|g| g.name == b.name))
                .and_then(|g| g.completed_at)
        };
        let completed = completed_in(&status.rollout_groups).or_else(|| completed_in(&step.status.rollout_groups));
        if let (Some(soak), Some(done), false) = (soak, completed, started) {
            if world.now < done + chrono::Duration::seconds(soak) {
                return Some(format!(
                    "patched {what} while the group before soaks (until {soak} s after {done})"
                ));
            }
        }
    }
    None
}

/// Why `group`'s windows hold starts at `now`, read literally from spec §7: a window is active
/// at t when some opening s (a minute its cron names, in its zone) has s ≤ t < s + duration; no
/// windows: open; allow windows: open while one is active; deny windows: closed while one is.
/// Only the crons the simulation writes (`M * * * *`, `*/N * * * *`) are read.
fn windows_closed(group: &upgradeplan::api::RolloutGroup, now: chrono::DateTime<chrono::Utc>) -> Option<String> {
    use chrono::{DurationRound, Timelike};
    let windows = group.resource_upgrade_windows.as_deref().unwrap_or_default();
    let active = |w: &upgradeplan::api::UpgradeWindow| {
        let zone: chrono_tz::Tz = w
            .time_zone
            .as_deref()
            .unwrap_or("UTC")
            .parse()
            .unwrap_or(chrono_tz::UTC);
        let minutes: i64 = w.duration.trim_end_matches('m').parse().unwrap_or(0);
        let field = w.schedule.split_whitespace().next().unwrap_or_default();
        let opens = |minute: u32| match field.strip_prefix("*/") {
            Some(n) => n.parse::<u32>().is_ok_and(|n| n > 0 && minute.is_multiple_of(n)),
            None => field.parse::<u32>() == Ok(minute),
        };
        let Ok(this_minute) = now.duration_trunc(chrono::Duration::minutes(1)) else {
            return false;
        };
        (0..=minutes)
            .map(|i| this_minute - chrono::Duration::minutes(i))
            .filter(|s| *s <= now && now < *s + chrono::Duration::minutes(minutes))
            .any(|s| opens(s.with_timezone(&zone).minute()))
    };
    let allows: Vec<_> = windows
        .iter()
        .filter(|w| w.kind == upgradeplan::api::WindowKind::Allow)
        .collect();
    let denies: Vec<_> = windows
        .iter()
        .filter(|w| w.kind == upgradeplan::api::WindowKind::Deny)
        .collect();
    if let Some(w) = denies.iter().find(|w| active(w)) {
        return Some(format!(
            "deny window {} ({}) is active",
            w.schedule,
            w.time_zone.as_deref().unwrap_or("UTC")
        ));
    }
    (!allows.is_empty() && !allows.iter().any(|w| active(w))).then(|| "no allow window is active".to_string())
}

/// The snapshot group `patch`'s binding is in.
fn group_of(frozen: &Frozen, patch: &BindingPatch) -> Option<usize> {
    frozen.snapshot.groups.iter().position(|g| {
        g.resources
            .iter()
            .any(|r| r.binding == patch.resource.binding && r.namespace == patch.resource.namespace)
    })
}

/// The snapshot entry of `patch`'s binding.
fn entry_of<'f>(
    frozen: &'f Frozen,
    patch: &BindingPatch,
) -> Option<&'f upgradeplan::engine::snapshot::SnapshotResource> {
    frozen
        .snapshot
        .groups
        .iter()
        .flat_map(|g| &g.resources)
        .find(|r| r.binding == patch.resource.binding && r.namespace == patch.resource.namespace)
        .map(|r| &**r)
}

/// A Go duration of whole seconds, as the simulation writes them (`90s`).
fn go_seconds(d: &str) -> Option<i64> {
    d.strip_suffix('s')?.parse().ok()
}

/// Whether run `run`, whose status is `status`, fails in a group with `onFailure: Revert`, read
/// from its frozen plan: the group it fails in is its first not completed.
fn fails_reverting(world: &World, run: &str, status: &UpgradeRunStatus) -> bool {
    let Some(frozen) = world.frozen_of(run) else {
        return false;
    };
    let failing = status
        .rollout_groups
        .iter()
        .find(|g| g.phase != Some(upgradeplan::api::GroupPhase::Completed));
    failing.is_some_and(|g| {
        frozen
            .plan
            .rollout_groups
            .iter()
            .any(|p| p.name == g.name && p.on_failure == Some(upgradeplan::api::OnFailure::Revert))
    })
}

/// What the checker remembers across a history (the simulated API server's own memory would do).
#[derive(Default, Debug)]
pub struct Checker {
    /// Version starts by (run, binding).
    starts: BTreeMap<(String, String), usize>,
    /// The scheduled runs seen so far, by name, with their trigger and creation.
    scheduled: BTreeMap<String, (String, String)>,
    /// Resources (namespace, name, version) whose records, at some moment, verified their
    /// upgrade to that version.
    verified: std::collections::BTreeSet<(String, String, String)>,
    /// The runs whose revert the controller created.
    reverted: std::collections::BTreeSet<String>,
    /// (run, `<namespace>/<binding>`) of each resource a run announced skipped.
    announced_skipped: std::collections::BTreeSet<(String, String)>,
    /// Upgrades seen failed in Kratix, by (run, `<namespace>/<binding>`, start): a retry someone
    /// asks of Kratix later puts the binding back in flight, but not as that start (its Failed
    /// outcome stands, spec §13.1), and it took no unit from any budget.
    failed_upgrades: std::collections::BTreeSet<(String, String, String)>,
    /// What each run of the plan counted as last seen, by UID (kept after the run is gone).
    run_counts: BTreeMap<String, Counters>,
}

/// What `run` counts, read literally from spec §9.1 and §13.2 rather than through the engine's
/// `counters::of_run`: its end by trigger and result, whether it was superseded, and each group's
/// failures and skips, and its successes unless its frozen plan health-checks the group and the
/// group's verdicts are not final yet (the group completed, soaks or failed, or the run ended or
/// was superseded).
fn recorded_counts(world: &World, run: &UpgradeRun) -> Counters {
    use upgradeplan::api::GroupPhase::{Completed, Failed, Soaking};
    let status = run.status.clone().unwrap_or_default();
    let superseded = status.superseded_by.is_some() || run.annotations().contains_key(SUPERSEDED_BY_ANNOTATION);
    let mut counts = Counters {
        superseded: u64::from(superseded),
        ..Counters::default()
    };
    let name = run.name_any();
    if status.state.is_terminal() {
        let trigger = upgradeplan::engine::admission::TriggerKind::of(run).metric_label();
        counts
            .runs
            .insert((trigger.to_string(), status.state.as_str().to_string()), 1);
    }
    let health_checked: Vec<String> = world.frozen_of(&name).map_or_else(Vec::new, |f| {
        let checked = f.plan.rollout_groups.iter().filter(|g| g.health_check.is_some());
        checked.map(|g| g.name.clone()).collect()
    });
    // Final once the run ended or was superseded (by the newer run's annotation: from then on the
    // run's own reconcile evaluates nothing, it only records the supersede).
    let run_final = status.state.is_terminal() || superseded;
    for g in &status.rollout_groups {
        let group_final = run_final || matches!(g.phase, Some(Soaking | Completed | Failed));
        let succeeded = if health_checked.contains(&g.name) && !group_final {
            0
        } else {
            g.succeeded
        };
        for (result, n) in [("succeeded", succeeded), ("failed", g.failed), ("skipped", g.skipped)] {
            if n > 0 {
                let n = u64::try_from(n).unwrap_or(0);
                counts.resources.insert((g.name.clone(), result.to_string()), n);
            }
        }
    }
    counts
}

/// Whether `b`'s upgrade to `to` is verified by `records`, read literally from spec §13.2: its
/// records whose check ran no earlier than the upgrade completed (the `UpgradeSucceeded=True`
/// transition, to the second; without it the start annotation), the worst state of them
/// healthy or ready.
fn verified_now(
    b: &upgradeplan::api::kratix::ResourceBinding,
    to: &str,
    records: &[std::sync::Arc<upgradeplan::api::kratix::HealthRecord>],
) -> bool {
    use upgradeplan::api::kratix::BindingFacts;
    if b.last_applied_version() != to {
        return false;
    }
    let started = b
        .annotations()
        .get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp());
    let success = b.upgrade_condition().filter(|c| c.status == "True");
    let Some(completed) = success
        .and_then(|c| c.last_transition_time)
        .map(|t| t.timestamp())
        .or(started)
    else {
        return false;
    };
    let rank = |state: &str| {
        ["unhealthy", "degraded", "unknown", "healthy", "ready"]
            .iter()
            .position(|s| *s == state)
    };
    let worst = records
        .iter()
        .filter(|r| r.data.resource_ref.name == b.spec.resource_ref.name)
        .filter(|r| r.data.last_run.is_some_and(|t| t >= completed))
        .map(|r| rank(&r.data.state).unwrap_or(2))
        .min();
    worst.is_some_and(|w| w >= 3)
}

impl Checker {
    /// Before a step's writes: whether it may start anything at all.
    pub fn before_writes(&mut self, world: &World, run: &UpgradeRun, step: &Step) -> Result<(), Violation> {
        if step.binding_patches.is_empty() {
            return Ok(());
        }
        let frozen = freezes_holding(world, run);
        // Each start's own target (a revert's resources each have theirs) needs its revision.
        let revision_gone = step
            .binding_patches
            .iter()
            .map(|p| p.resource.target(&step.to))
            .find(|v| !world.revisions.iter().any(|r| r == v));
        let stood_down = stood_down(run);
        let held = [
            // A preview waits suspended; resumed, it starts like any run.
            (stood_down.is_some(), stood_down.unwrap_or_default().to_string()),
            (
                revision_gone.is_some(),
                format!("without the PromiseRevision of {}", revision_gone.unwrap_or_default()),
            ),
            (
                hold_at(&frozen, world.now).is_some(),
                format!("frozen at {}", world.now),
            ),
        ];
        if let Some(why) = step.frozen.as_ref().and_then(|f| held_group(world, run, f, step)) {
            return violation(Invariant::NoStartWhileHeld, format!("run {}: {why}", run.name_any()));
        }
        if let Some((_, why)) = held.iter().find(|(holds, _)| *holds) {
            let what: Vec<String> = step
                .binding_patches
                .iter()
                .map(|p| format!("{} ({:?})", p.resource.binding, p.attempt))
                .collect();
            return violation(
                Invariant::NoStartWhileHeld,
                format!("run {} is {why} and patched {}", run.name_any(), what.join(", ")),
            );
        }
        Ok(())
    }

    /// A binding patch of run `name` the API server just accepted: the run, as the world has it
    /// now, still admitted — and no freeze holds its plan now.
    pub fn sent_while_admitted(&self, world: &World, name: &str, patch: &BindingPatch) -> Result<(), Violation> {
        let ended = |why: String| {
            violation(
                Invariant::NoStartAfterAdmissionEnded,
                format!(
                    "run {name} patched {} ({:?}) when {why}",
                    patch.resource.binding, patch.attempt
                ),
            )
        };
        let Some(run) = world.runs.iter().find(|r| r.name_any() == name) else {
            return ended("the run was gone".into());
        };
        if let Some(how) = stood_down(run) {
            return ended(format!("it was {how}"));
        }
        if hold_at(&freezes_holding(world, run), world.now).is_some() {
            return ended(format!("a freeze held it at {}", world.now));
        }
        Ok(())
    }

    /// The controller created `revert` from run `run`'s step, which writes `status`.
    pub fn revert_created(
        &mut self,
        world: &World,
        run: &str,
        status: &UpgradeRunStatus,
        revert: &UpgradeRun,
    ) -> Result<(), Violation> {
        let wrong = |why: String| {
            violation(
                Invariant::RevertCreatedOnce,
                format!("run {run} created {}: {why}", revert.name_any()),
            )
        };
        let of = revert.spec.revert_of.as_ref();
        if of.map(|o| (o.name.as_str(), o.resources)) != Some((run, upgradeplan::api::RevertResources::All)) {
            return wrong(format!("its revertOf is {of:?}"));
        }
        if revert.name_any() != format!("{run}-revert") {
            return wrong("not named <run>-revert".into());
        }
        if status.state != upgradeplan::api::RunState::Failed {
            return wrong(format!("the run's step ends it {:?}, not Failed", status.state));
        }
        if !fails_reverting(world, run, status) {
            return wrong("the group it fails in has no onFailure: Revert".into());
        }
        if !self.reverted.insert(run.to_string()) {
            return wrong("a second time".into());
        }
        Ok(())
    }

    /// A step of `run` that derives a revert's snapshot, from the bindings it saw (`seen`): read
    /// literally from spec §13.7, against the reverted run's snapshot as written and verified.
    pub fn revert_derived(
        &self,
        world: &World,
        run: &UpgradeRun,
        step: &Step,
        seen: &[upgradeplan::api::kratix::ResourceBinding],
        gathered: &upgradeplan::engine::revert::RevertedFact<'_>,
    ) -> Result<(), Violation> {
        use upgradeplan::api::kratix::BindingFacts;
        use upgradeplan::api::RevertResources;
        let Some(of) = &run.spec.revert_of else {
            return Ok(());
        };
        let wrong = |why: String| {
            violation(
                Invariant::RevertFromRecord,
                format!("revert {} of {}: {why}", run.name_any(), of.name),
            )
        };
        let reverted = world.runs.iter().find(|r| r.name_any() == of.name);
        let status = reverted.and_then(|r| r.status.clone()).unwrap_or_default();
        let record = world
            .frozen_of(&of.name)
            .filter(|_| !status.resource_list_refs.is_empty());
        // Refused before its snapshot (it fails, or as a preview says why), by a step that was given
        // the run it reverts: only when that run is gone, of another plan, or had no readable
        // recorded snapshot.
        let refusal = upgradeplan::api::find_condition(&step.status.conditions, reasons::RUN_SUCCEEDED).filter(|c| {
            c.status == ConditionStatus::False
                && [
                    reasons::REVERT_NOT_POSSIBLE,
                    reasons::SNAPSHOT_MISSING,
                    reasons::SNAPSHOT_TAMPERED,
                ]
                .contains(&c.reason.as_str())
        });
        // Judged in the step that records it: one that stops earlier (superseded, its plan gone)
        // carries an older refusal forward.
        let recorded = run
            .status
            .as_ref()
            .and_then(|s| upgradeplan::api::find_condition(&s.conditions, reasons::RUN_SUCCEEDED));
        let decided_now = |c: &upgradeplan::api::Condition| {
            recorded.is_none_or(|r| (r.status, &r.reason, &r.message) != (c.status, &c.reason, &c.message))
        };
        if let (Some(c), None, upgradeplan::engine::revert::RevertedFact::Found { run: given, snapshot }) =
            (refusal, &step.frozen, gathered)
        {
            let readable = matches!(snapshot, upgradeplan::engine::snapshot::SnapshotFact::Found { .. });
            if given.plan_name() == run.plan_name() && readable && decided_now(c) {
                return wrong(format!(
                    "refused ({}: {}), though it was given that run's record",
                    c.reason, c.message
                ));
            }
        }
        let (Some(derived), false) = (&step.frozen, step.write_snapshot.is_empty()) else {
            return Ok(());
        };
        let Some(record) = record else {
            return wrong("a snapshot derived without the reverted run's recorded snapshot".into());
        };
        // Groups: the reverted run's, last first; what holds a group only when policy is respected.
        let respect = run.spec.respect_policy;
        let mut want: Vec<&str> = record.plan.rollout_groups.iter().map(|g| g.name.as_str()).collect();
        want.reverse();
        let got: Vec<&str> = derived.plan.rollout_groups.iter().map(|g| g.name.as_str()).collect();
        let in_snapshot: Vec<&str> = derived.snapshot.groups.iter().map(|g| g.name.as_str()).collect();
        if got != want || in_snapshot != want {
            return wrong(format!(
                "groups {got:?} (snapshot {in_snapshot:?}), the reverted run's reversed are {want:?}"
            ));
        }
        for g in &derived.plan.rollout_groups {
            let Some(o) = record.plan.rollout_groups.iter().find(|o| o.name == g.name) else {
                continue;
            };
            let kept = (
                &g.max_concurrent,
                &g.max_failures,
                &g.progress_deadline,
                &g.health_check,
            ) == (
                &o.max_concurrent,
                &o.max_failures,
                &o.progress_deadline,
                &o.health_check,
            );
            let policy = (&g.resource_upgrade_windows, &g.soak_duration, g.require_approval);
            let policy_ok = if respect {
                policy == (&o.resource_upgrade_windows, &o.soak_duration, o.require_approval)
            } else {
                policy == (&None, &None, None)
            };
            if !kept || !policy_ok || g.on_failure.is_some() {
                return wrong(format!("group {} is {g:?}, the reverted run's {o:?}", g.name));
            }
        }
        let gates_ok = if respect {
            derived.plan.gates == record.plan.gates
        } else {
            derived.plan.gates.is_none()
        };
        if !gates_ok {
            return wrong(format!("gates {:?} (respectPolicy {respect})", derived.plan.gates));
        }
        // Resources: each of the reverted snapshot once, in the first group that held it, if the
        // reverted run started it and left it as `resources` says; back to what it recorded.
        let recorded_failed = |ns: &str, name: &str| {
            status
                .rollout_groups
                .iter()
                .flat_map(|g| &g.failed_resources)
                .any(|f| f.namespace == ns && f.name == name)
        };
        let mut taken = std::collections::BTreeSet::new();
        let mut expected: Vec<(String, String, String, String)> = Vec::new();
        for group in &record.snapshot.groups {
            for r in &group.resources {
                if !taken.insert((r.namespace.clone(), r.binding.clone())) {
                    continue;
                }
                let to = r.target(&record.plan.upgrade_path.to);
                let Some(b) = seen
                    .iter()
                    .find(|b| b.name_any() == r.binding && b.namespace().as_deref() == Some(r.namespace.as_str()))
                else {
                    continue;
                };
                let started = b.annotations().get(upgradeplan::api::UPGRADED_BY_ANNOTATION) == Some(&of.name);
                if b.metadata.deletion_timestamp.is_some() || !started || b.spec.version != to {
                    continue;
                }
                let said = b.upgrade_condition().map(|c| (c.status, c.reason));
                let applied = b.last_applied_version() == to;
                let kratix_failed =
                    said == Some(("False", upgradeplan::api::kratix::UPGRADE_FAILED)) && b.failed_version() == Some(to);
                // Failed, unless Kratix is at it again (working, not applied): its verdict is to come.
                let working = !applied && said.is_some_and(|(s, _)| s == "Unknown");
                let failed = !working && (kratix_failed || recorded_failed(&r.namespace, &r.name));
                let wanted = match of.resources {
                    RevertResources::All => true,
                    RevertResources::Failed => failed,
                    RevertResources::Upgraded => !failed,
                };
                if wanted {
                    expected.push((
                        group.name.clone(),
                        r.namespace.clone(),
                        r.binding.clone(),
                        r.last_applied_version.clone(),
                    ));
                }
            }
        }
        expected.sort();
        let mut actual: Vec<(String, String, String, String)> = derived
            .snapshot
            .groups
            .iter()
            .flat_map(|g| {
                g.resources.iter().map(move |r| {
                    let target = r.target.clone().unwrap_or_else(|| "(none)".into());
                    (g.name.clone(), r.namespace.clone(), r.binding.clone(), target)
                })
            })
            .collect();
        actual.sort();
        if actual != expected {
            return wrong(format!("took {actual:?}, the record and the bindings say {expected:?}"));
        }
        Ok(())
    }

    /// A binding patch of `run` the API server accepted.
    pub fn patched(&mut self, run: &str, frozen: &Frozen, patch: &BindingPatch) -> Result<(), Violation> {
        if group_of(frozen, patch).is_none() {
            return violation(
                Invariant::OnlySnapshotPatched,
                format!("run {run} patched {} outside its snapshot", patch.resource.binding),
            );
        }
        if let (Attempt::Start { to, .. }, Some(entry)) = (&patch.attempt, entry_of(frozen, patch)) {
            let target = entry.target(&frozen.plan.upgrade_path.to);
            if to != target {
                return violation(
                    Invariant::RevertFromRecord,
                    format!(
                        "run {run} set {} to {to}, its snapshot says {target}",
                        patch.resource.binding
                    ),
                );
            }
        }
        let key = format!("{}/{}", patch.resource.namespace, patch.resource.binding);
        if self.announced_skipped.contains(&(run.to_string(), key)) {
            return violation(
                Invariant::OutcomesStand,
                format!(
                    "run {run} started {}, which it announced skipped",
                    patch.resource.binding
                ),
            );
        }
        if let Attempt::Start { .. } = patch.attempt {
            let n = self
                .starts
                .entry((run.to_string(), patch.resource.binding.clone()))
                .or_default();
            *n += 1;
            if *n > 1 {
                return violation(
                    Invariant::StartedOnce,
                    format!("run {run} started {} {n} times", patch.resource.binding),
                );
            }
        }
        Ok(())
    }

    /// A patch of run `run` the API server accepted, while the revisions of `terminating` are
    /// being deleted (the step read them so: revisions are never read from a lagging cache).
    pub fn not_into_cleanup(&self, run: &str, patch: &BindingPatch, terminating: &[String]) -> Result<(), Violation> {
        match &patch.attempt {
            Attempt::Start { to, .. } if terminating.contains(to) => violation(
                Invariant::NoMoveIntoCleanup,
                format!(
                    "run {run} moved {} to {to}, whose PromiseRevision is being deleted",
                    patch.resource.binding
                ),
            ),
            _ => Ok(()),
        }
    }

    /// A write to run `name` (`what`) the API server accepted, from a step whose copy of the run
    /// was `stale`.
    pub fn run_written(&self, name: &str, stale: bool, what: &str) -> Result<(), Violation> {
        if stale {
            return violation(
                Invariant::StaleCopyWritesNothing,
                format!("run {name}: {what} written from a stale copy of the run"),
            );
        }
        Ok(())
    }

    /// A run's status the API server accepted, over the one it had. In a group with a health
    /// check (`health_checked`) a success may still be taken back until the group completes:
    /// spec §13.2 makes a group's verdicts final only then (a later record may say unhealthy).
    pub fn status_written(
        &mut self,
        run: &str,
        before: Option<&UpgradeRunStatus>,
        after: &UpgradeRunStatus,
        health_checked: &[&str],
    ) -> Result<(), Violation> {
        let Some(before) = before else {
            return Ok(());
        };
        if before.state.is_terminal() && after.state != before.state {
            return violation(
                Invariant::CountsNeverMoveBack,
                format!("run {run} went from {:?} to {:?}", before.state, after.state),
            );
        }
        for b in &before.rollout_groups {
            let Some(a) = after.rollout_groups.iter().find(|a| a.name == b.name) else {
                continue;
            };
            let verdicts_open =
                health_checked.contains(&b.name.as_str()) && b.phase != Some(upgradeplan::api::GroupPhase::Completed);
            let moved_back = [
                ("succeeded", if verdicts_open { 0 } else { b.succeeded }, a.succeeded),
                ("failed", b.failed, a.failed),
                ("skipped", b.skipped, a.skipped),
            ]
            .into_iter()
            .find(|(_, was, is)| is < was);
            if let Some((count, was, is)) = moved_back {
                return violation(
                    Invariant::CountsNeverMoveBack,
                    format!("run {run} group {}: {count} went from {was} to {is}", b.name),
                );
            }
            outcomes_stand(run, b, a)?;
        }
        Ok(())
    }

    /// A run's snapshot written (again).
    /// Run `run`'s snapshot about to be written as `shards` (`existing`: what an earlier pass
    /// wrote), for the snapshot its step took (`taken`): read back, every resource of every group
    /// is there, in order — nothing lost to the sharding — and an earlier write is never changed.
    pub fn snapshot_written(
        &mut self,
        run: &str,
        existing: Option<&Vec<SnapshotConfigMap>>,
        shards: &[SnapshotConfigMap],
        taken: &Frozen,
    ) -> Result<(), Violation> {
        let read = upgradeplan::engine::snapshot::read_frozen(shards.iter().map(|(n, d)| (n.as_str(), d)));
        let keys = |s: &upgradeplan::engine::snapshot::Snapshot| -> Vec<(String, Vec<String>)> {
            s.groups
                .iter()
                .map(|g| {
                    let resources = g.resources.iter().map(|r| format!("{}/{}", r.namespace, r.binding));
                    (g.name.clone(), resources.collect())
                })
                .collect()
        };
        match read {
            Ok(written) if keys(&written.snapshot) != keys(&taken.snapshot) => {
                return violation(
                    Invariant::SnapshotImmutable,
                    format!(
                        "run {run}'s snapshot is written as {:?}, taken as {:?}",
                        keys(&written.snapshot),
                        keys(&taken.snapshot)
                    ),
                )
            }
            Err(e) => {
                return violation(
                    Invariant::SnapshotImmutable,
                    format!("run {run}'s snapshot as written does not read back: {e}"),
                )
            }
            Ok(_) => {}
        }
        match existing {
            Some(existing) if existing.as_slice() != shards => violation(
                Invariant::SnapshotImmutable,
                format!("run {run}'s snapshot was rewritten with other content"),
            ),
            _ => Ok(()),
        }
    }

    /// An Event about to be published: none for the same occurrence with the same text before
    /// by this process or one it restarted (the controller recognises an earlier process's
    /// Events by their text: an occurrence whose text changed meanwhile, a gate closed for
    /// another reason, is announced with its new text). Spec §14.2 promises events once across
    /// restarts; two processes acting at once around a leader change may both announce.
    pub fn published(&mut self, world: &World, event: &Published) -> Result<(), Violation> {
        if event.reason == upgradeplan::engine::lifecycle::events::RESOURCE_SKIPPED {
            self.announced_skipped.insert((event.run.clone(), event.key.clone()));
        }
        if world.events.contains(event) {
            return violation(
                Invariant::EachOnce,
                format!(
                    "run {}: event {} \"{}\" published again",
                    event.run, event.reason, event.note
                ),
            );
        }
        Ok(())
    }

    /// After a step's counting, and after every action: what a scrape reads
    /// ([`upgradeplan::engine::counters::of_plan`]) is every outcome and end the plan's runs ever
    /// recorded ([`recorded_counts`]), each once — a run gone counts what it last recorded — and no run's counts moved
    /// back, so no counter did (spec §14.2: counters once across crashes and failovers). Runs let
    /// go before their plan kept their counts (past `RECORD_GRACE`) leave the sum.
    pub fn counters_exact(&mut self, world: &World) -> Result<(), Violation> {
        use upgradeplan::engine::counters::{of_plan, run_key};
        if world.plan_deleted {
            return Ok(());
        }
        for run in &world.runs {
            let now = recorded_counts(world, run);
            if let Some(back) = self
                .run_counts
                .get(&run_key(run))
                .and_then(|was| was.moved_back_in(&now))
            {
                return violation(
                    Invariant::EachOnce,
                    format!("run {}: what it counts moved back ({back})", run.name_any()),
                );
            }
            self.run_counts.insert(run_key(run), now);
        }
        let mut expected = Counters::default();
        for (key, counts) in &self.run_counts {
            if !world.released_unkept.contains(key) {
                expected.add(counts);
            }
        }
        let runs: Vec<&UpgradeRun> = world.runs.iter().collect();
        let scraped = of_plan(&world.plan, &runs);
        if scraped != expected {
            return violation(
                Invariant::EachOnce,
                format!("a scrape reads {scraped:?}, the plan's runs recorded {expected:?}"),
            );
        }
        Ok(())
    }

    /// After the plan's reconcile: its status says what its runs say, read literally from spec
    /// §3.2 — the active run is the one Pending or InProgress, not superseded and not a preview
    /// its own reconcile has not yet recorded as resumed (`admitted-at`); `lastRun` names a run that ended (or is gone), as it ended.
    pub fn plan_reconciled(&mut self, world: &World) -> Result<(), Violation> {
        self.schedule_fired(world)?;
        use upgradeplan::api::{PlanPhase, RunState, ADMITTED_AT_ANNOTATION, PREVIEW_ANNOTATION};
        let status = world.plan.status.clone().unwrap_or_default();
        let active: Vec<String> = world
            .runs
            .iter()
            .filter(|r| {
                let s = r.status.clone().unwrap_or_default();
                let dormant = s.superseded_by.is_some()
                    || r.annotations().contains_key(SUPERSEDED_BY_ANNOTATION)
                    || (r.annotations().contains_key(PREVIEW_ANNOTATION)
                        && !r.annotations().contains_key(ADMITTED_AT_ANNOTATION));
                matches!(s.state, RunState::Pending | RunState::InProgress) && !dormant
            })
            .map(|r| r.name_any())
            .collect();
        let wrong = match (active.as_slice(), status.active_run_ref.as_str()) {
            ([], "") => None,
            ([], named) => Some(format!("activeRunRef {named}, but no run is active")),
            (runs, "") => Some(format!("no activeRunRef, but {runs:?} active")),
            (runs, named) if !runs.iter().any(|r| r == named) => {
                Some(format!("activeRunRef {named}, but {runs:?} active"))
            }
            _ => None,
        };
        let running = status.phase == PlanPhase::Running;
        let wrong = wrong.or_else(|| {
            (running == status.active_run_ref.is_empty()).then(|| {
                format!(
                    "phase {:?} with activeRunRef \"{}\"",
                    status.phase, status.active_run_ref
                )
            })
        });
        let wrong = wrong.or_else(|| {
            let last = status.last_run.as_ref()?;
            let run = world.runs.iter().find(|r| r.name_any() == last.name)?;
            let state = run.status.clone().unwrap_or_default().state;
            (state.as_str() != last.result.as_str())
                .then(|| format!("lastRun {} says {:?}, the run is {state:?}", last.name, last.result))
        });
        match wrong {
            Some(detail) => violation(
                Invariant::PlanFollowsRuns,
                format!("plan {}: {detail}", world.plan.name_any()),
            ),
            None => Ok(()),
        }
    }

    /// The runs a plan reconcile created for its schedule, read literally: the trigger is a
    /// whole minute the cron names (`*/N` or `0` in the minute field, as the simulation writes
    /// it) in the plan's zone, not after now; the plan is not suspended; no other run has it.
    fn schedule_fired(&mut self, world: &World) -> Result<(), Violation> {
        use chrono::Timelike;
        let policy = world.plan.spec.upgrade_execution_policy.as_ref();
        for run in &world.runs {
            let Some(at) = run.annotations().get(upgradeplan::api::SCHEDULED_AT_ANNOTATION) else {
                continue;
            };
            let name = run.name_any();
            let created = run.creation_timestamp().map(|t| t.0.to_string()).unwrap_or_default();
            let seen = (at.clone(), created);
            match self.scheduled.get(&name) {
                Some(before) if *before == seen => continue,
                Some(_) => {
                    return violation(
                        Invariant::SchedulesFireOnce,
                        format!("run {name} for trigger {at} created again"),
                    )
                }
                None => {}
            }
            let wrong = if let Some(other) = self.scheduled.iter().find(|(_, (t, _))| t == at).map(|(n, _)| n) {
                Some(format!("run {name} for trigger {at}, which run {other} serviced"))
            } else if world.plan.spec.suspend {
                Some(format!("run {name} created for {at} while the plan is suspended"))
            } else {
                let zone: chrono_tz::Tz = policy
                    .and_then(|p| p.time_zone.as_deref())
                    .unwrap_or("UTC")
                    .parse()
                    .unwrap_or(chrono_tz::UTC);
                let field = policy
                    .and_then(|p| p.repeat_schedule.as_deref())
                    .and_then(|c| c.split_whitespace().next())
                    .unwrap_or_default()
                    .to_string();
                let trigger = chrono::DateTime::parse_from_rfc3339(at).map(|t| t.with_timezone(&chrono::Utc));
                match trigger {
                    Err(_) => Some(format!("run {name}: trigger {at} is not a time")),
                    Ok(t) => {
                        let local = t.with_timezone(&zone);
                        let named = match field.strip_prefix("*/") {
                            Some(n) => n
                                .parse::<u32>()
                                .is_ok_and(|n| n > 0 && local.minute().is_multiple_of(n)),
                            None => field.parse::<u32>() == Ok(local.minute()),
                        };
                        if !named || t.second() != 0 {
                            Some(format!("run {name}: {at} is not a trigger of {field:?} in {zone}"))
                        } else if t > world.now {
                            Some(format!("run {name}: trigger {at} is still to come at {}", world.now))
                        } else {
                            None
                        }
                    }
                }
            };
            if let Some(detail) = wrong {
                return violation(Invariant::SchedulesFireOnce, detail);
            }
            self.scheduled.insert(name, seen);
        }
        Ok(())
    }

    /// The step of run `name` from the edited plan (`step`) and from the plan as its snapshot
    /// froze it (`unedited`): the same patches, status and end.
    pub fn edit_changed_nothing(&self, name: &str, step: &Step, unedited: &Step) -> Result<(), Violation> {
        let same = (&step.binding_patches, &step.status, step.finished)
            == (&unedited.binding_patches, &unedited.status, unedited.finished);
        if !same {
            let what = |s: &Step| format!("{:?}\n{:?}\n{:?}", s.binding_patches, s.status, s.finished);
            let (edited, frozen) = (what(step), what(unedited));
            let first = edited.lines().zip(frozen.lines()).find(|(a, b)| a != b);
            return violation(
                Invariant::PlanEditChangesNothing,
                format!("run {name}: from the edited plan {first:?} (edited, unedited)"),
            );
        }
        Ok(())
    }

    /// Every upgrade Kratix reports failed now, by the run that started it and its start.
    fn learn_failures(&mut self, world: &World) {
        use upgradeplan::api::kratix::BindingFacts;
        for b in world.resources.iter().map(|r| &r.binding) {
            let a = b.annotations();
            let (Some(run), Some(started)) = (
                a.get(upgradeplan::api::UPGRADED_BY_ANNOTATION),
                a.get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION),
            ) else {
                continue;
            };
            if b.last_applied_version() != b.spec.version && !in_flight(b, &b.spec.version) {
                let key = format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any());
                self.failed_upgrades.insert((run.clone(), key, started.clone()));
            }
        }
    }

    /// Whether `b`'s current upgrade, started by `run`, was seen failed (see `failed_upgrades`).
    fn seen_failed(&self, run: &str, b: &upgradeplan::api::kratix::ResourceBinding) -> bool {
        let started = b.annotations().get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION);
        let key = format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any());
        started.is_some_and(|t| self.failed_upgrades.contains(&(run.to_string(), key, t.clone())))
    }

    /// Every resource whose records verify its upgrade now (once verified, it may be counted).
    fn learn_verifications(&mut self, world: &World) {
        use upgradeplan::api::kratix::BindingFacts;
        for r in &world.resources {
            let b = &r.binding;
            let version = b.last_applied_version().to_string();
            if verified_now(b, &version, &world.health) {
                self.verified
                    .insert((b.namespace().unwrap_or_default(), b.name_any(), version));
            }
        }
    }

    /// Before run `name`'s `status` is written: no group with a health check counts more
    /// successes than it has resources whose records verified them.
    pub fn health_counted(&mut self, world: &World, name: &str, status: &UpgradeRunStatus) -> Result<(), Violation> {
        self.learn_verifications(world);
        let Some(frozen) = world.frozen_of(name) else {
            return Ok(());
        };
        for (group, written) in frozen.snapshot.groups.iter().zip(&frozen.plan.rollout_groups) {
            if written.health_check.is_none() {
                continue;
            }
            let Some(counted) = status.rollout_groups.iter().find(|g| g.name == group.name) else {
                continue;
            };
            let verified = group
                .resources
                .iter()
                .filter(|r| {
                    let key = (
                        r.namespace.clone(),
                        r.binding.clone(),
                        r.target(&frozen.plan.upgrade_path.to).to_string(),
                    );
                    self.verified.contains(&key)
                })
                .count();
            if usize::try_from(counted.succeeded).unwrap_or(0) > verified {
                return violation(
                    Invariant::VerifiedByHealth,
                    format!(
                        "run {name} group {}: {} succeeded, {verified} ever verified by their records",
                        group.name, counted.succeeded
                    ),
                );
            }
        }
        Ok(())
    }

    /// A step of run `name` (read with status `before`) that decides `status`, from the bindings
    /// it saw (`seen`): each failure it adds on a `progressDeadline` is of a resource whose
    /// binding named the run in `upgraded-by`. Returns how many it adds.
    pub fn deadline_failures(
        &self,
        name: &str,
        before: Option<&UpgradeRunStatus>,
        status: &UpgradeRunStatus,
        seen: &[upgradeplan::api::kratix::ResourceBinding],
    ) -> Result<u64, Violation> {
        let deadline_prefix = upgradeplan::engine::texts::deadline_passed("");
        let mut added = 0;
        for group in &status.rollout_groups {
            let recorded = before.and_then(|b| b.rollout_groups.iter().find(|g| g.name == group.name));
            for failure in &group.failed_resources {
                let known = recorded.is_some_and(|g| {
                    g.failed_resources
                        .iter()
                        .any(|f| (&f.namespace, &f.name) == (&failure.namespace, &failure.name))
                });
                if known || !failure.detail.starts_with(&deadline_prefix) {
                    continue;
                }
                let own = seen.iter().any(|b| {
                    b.namespace().as_deref() == Some(failure.namespace.as_str())
                        && b.spec.resource_ref.name == failure.name
                        && b.annotations()
                            .get(upgradeplan::api::UPGRADED_BY_ANNOTATION)
                            .map(String::as_str)
                            == Some(name)
                });
                if !own {
                    return Err(Violation {
                        invariant: Invariant::DeadlineTimesOwnStarts,
                        detail: format!(
                            "run {name} group {}: {}/{} failed on its deadline ({}), started by another run",
                            group.name, failure.namespace, failure.name, failure.detail
                        ),
                    });
                }
                added += 1;
            }
        }
        Ok(added)
    }

    /// Right after run `name`'s status was written from live facts: `kubectl upgradeplan status`
    /// shows each group's counts as recorded.
    pub fn viewed(&self, world: &World, name: &str) -> Result<(), Violation> {
        let Some(run) = world.runs.iter().find(|r| r.name_any() == name) else {
            return Ok(());
        };
        let recorded = run.status.clone().unwrap_or_default();
        let frozen = world.frozen_of(name);
        let mut live = kubectl_upgradeplan::runs::Live::of_bindings(world.bindings());
        live.freezes = holding(&world.freezes, PROMISE, world.plan.labels());
        live.health = upgradeplan::engine::health::HealthRecords::index(PROMISE, world.health.iter().cloned());
        let revisions = frozen
            .as_deref()
            .map_or_else(upgradeplan::engine::revert::Revisions::present, |f| {
                let facts = super::world::revision_facts(&world.revisions, &world.terminating);
                upgradeplan::engine::revert::Revisions::of(f, &facts)
            });
        let (shown, _) = kubectl_upgradeplan::runs::status(
            run,
            frozen.as_deref(),
            &live,
            &revisions,
            world.now,
            &kubectl_upgradeplan::output::Style::plain(),
        );
        let counts = |g: &upgradeplan::api::GroupStatus| (g.name.clone(), g.succeeded, g.failed, g.skipped);
        let want: Vec<_> = recorded.rollout_groups.iter().map(counts).collect();
        let got: Vec<_> = shown.groups.iter().map(counts).collect();
        if want != got {
            return violation(
                Invariant::PluginShowsRecorded,
                format!(
                    "run {name} ({:?}): recorded {want:?}, the plugin shows {got:?}",
                    recorded.state
                ),
            );
        }
        Ok(())
    }

    /// After every action: each active run's groups within their limits, and every run's
    /// upgrades Kratix works on within the budget.
    pub fn after_action(&mut self, world: &World) -> Result<(), Violation> {
        self.counters_exact(world)?;
        self.learn_verifications(world);
        self.learn_failures(world);
        let (mut under_budget, mut budget_in_flight) = (Vec::new(), 0);
        for run in &world.runs {
            let status = run.status.clone().unwrap_or_default();
            let name = run.name_any();
            if status.state.is_terminal() || upgradeplan::engine::admission::is_dormant(run) {
                // Spec §13.8: a run that ended or was superseded holds units for the upgrades
                // it started that Kratix still works on (those it counted failed aside).
                let failed: Vec<(&str, &str)> = status
                    .rollout_groups
                    .iter()
                    .flat_map(|g| {
                        g.failed_resources
                            .iter()
                            .map(|f| (f.namespace.as_str(), f.name.as_str()))
                    })
                    .collect();
                let frozen = world.frozen_of(&name);
                // The group of the run's snapshot that holds `b` first.
                let group_of = |b: &upgradeplan::api::kratix::ResourceBinding| {
                    frozen.as_deref().and_then(|f| {
                        f.snapshot
                            .groups
                            .iter()
                            .find(|g| {
                                g.resources.iter().any(|r| {
                                    Some(r.namespace.as_str()) == b.namespace().as_deref() && r.binding == b.name_any()
                                })
                            })
                            .map(|g| (f, g.name.as_str()))
                    })
                };
                let working = world
                    .resources
                    .iter()
                    .map(|r| &r.binding)
                    .filter(|b| {
                        // The version the run moved it to, not moved on since by someone else.
                        let moved_to = b.annotations().get(upgradeplan::api::UPGRADED_TO_ANNOTATION);
                        b.annotations().get(upgradeplan::api::UPGRADED_BY_ANNOTATION) == Some(&name)
                            && moved_to == Some(&b.spec.version)
                            && b.metadata.deletion_timestamp.is_none()
                            && in_flight(b, &b.spec.version)
                            && !failed.contains(&(
                                b.namespace().as_deref().unwrap_or_default(),
                                b.spec.resource_ref.name.as_str(),
                            ))
                            && !group_of(b).is_some_and(|(f, g)| past_deadline(f, g, b, world.now))
                            && !self.seen_failed(&name, b)
                    })
                    .map(|b| b.name_any())
                    .collect::<Vec<_>>();
                if !working.is_empty() {
                    under_budget.push(format!("{name} (stood down): {} {working:?}", working.len()));
                    budget_in_flight += working.len();
                }
                if status.state.is_terminal() {
                    continue;
                }
            }
            let Some(frozen) = world.frozen_of(&name) else {
                continue;
            };
            let to = frozen.plan.upgrade_path.to.clone();
            for group in &frozen.snapshot.groups {
                // A group that has not begun starts nothing: a resource it shares with the group
                // before is that group's to count.
                let begun = status
                    .rollout_groups
                    .iter()
                    .any(|g| g.name == group.name && g.started_at.is_some());
                if !begun {
                    continue;
                }
                let failed: Vec<&str> = status
                    .rollout_groups
                    .iter()
                    .filter(|g| g.name == group.name)
                    .flat_map(|g| g.failed_resources.iter().map(|f| f.name.as_str()))
                    .collect();
                let in_flight = group
                    .resources
                    .iter()
                    .filter(|r| !failed.contains(&r.name.as_str()))
                    .filter(|r| {
                        let target = r.target(&to);
                        world.resources.iter().any(|live| {
                            let b = &live.binding;
                            b.name_any() == r.binding
                                && b.annotations().get(upgradeplan::api::UPGRADED_BY_ANNOTATION) == Some(&name)
                                && b.spec.version == target
                                && (in_flight(b, target) || reverting_in_place(r, b))
                                && !past_deadline(&frozen, &group.name, b, world.now)
                        })
                    })
                    .count();
                let limit = naive_limit(written_limit(&frozen, &group.name), group.resources.len());
                if in_flight > limit {
                    return violation(
                        Invariant::InFlightWithinLimit,
                        format!("run {name} group {}: {in_flight} in flight, limit {limit}", group.name),
                    );
                }
                // An active run's own starts (a dormant one's were counted above).
                if in_flight > 0 && !upgradeplan::engine::admission::is_dormant(run) {
                    under_budget.push(format!("{name}/{}: {in_flight}", group.name));
                    budget_in_flight += in_flight;
                }
            }
        }
        if let Some(max) = world
            .budget
            .as_ref()
            .map(upgradeplan::engine::upgrade_budget::max_in_flight)
        {
            if budget_in_flight > max {
                return violation(
                    Invariant::InFlightWithinBudget,
                    format!("{budget_in_flight} in flight across the plan's runs, budget {max}: {under_budget:?}"),
                );
            }
        }
        Ok(())
    }

    /// Once the world has settled: every run ended, or says why it waits; its counters say what
    /// its status records.
    pub fn settled(&mut self, world: &World) -> Result<(), Violation> {
        self.counters_exact(world)?;
        for run in &world.runs {
            let status = run.status.clone().unwrap_or_default();
            let name = run.name_any();
            if status.state == upgradeplan::api::RunState::Failed
                && fails_reverting(world, &name, &status)
                && run.spec.revert_of.is_none()
                && !self.reverted.contains(&name)
            {
                return violation(
                    Invariant::RevertCreatedOnce,
                    format!("run {name} failed in a group with onFailure: Revert and no revert was created"),
                );
            }
            let says_why = status
                .conditions
                .iter()
                .any(|c| !c.message.is_empty() && holds(&c.type_, c.status));
            if !status.state.is_terminal() && !says_why {
                return violation(
                    Invariant::EndsOrSaysWhy,
                    format!(
                        "run {} is {:?} and no condition says why: {:?}",
                        run.name_any(),
                        status.state,
                        status.conditions
                    ),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod window_tests {
    use super::*;

    fn group(window: serde_json::Value) -> upgradeplan::api::RolloutGroup {
        serde_json::from_value(serde_json::json!({"name": "g", "resourceUpgradeWindows": [window]})).unwrap()
    }

    /// The oracle itself, at the edges: an hourly allow window at :10 for 20 minutes, in a zone
    /// half an hour off UTC.
    #[test]
    fn windows_closed_reads_spec_7_literally() {
        let utc = |s: &str| super::super::world::utc(s);
        let kolkata = group(
            serde_json::json!({"kind": "allow", "schedule": "10 * * * *", "duration": "20m", "timeZone": "Asia/Kolkata"}),
        );
        // 10:10 in Kolkata is 04:40 UTC.
        for (t, open) in [
            ("2026-06-06T04:39:59Z", false),
            ("2026-06-06T04:40:00Z", true),
            ("2026-06-06T04:59:59Z", true),
            ("2026-06-06T05:00:00Z", false),
            ("2026-06-06T05:10:00Z", false),
        ] {
            assert_eq!(windows_closed(&kolkata, utc(t)).is_none(), open, "{t}");
        }
        let deny = group(serde_json::json!({"kind": "deny", "schedule": "*/15 * * * *", "duration": "5m"}));
        assert!(windows_closed(&deny, utc("2026-06-06T04:31:00Z")).is_some());
        assert!(windows_closed(&deny, utc("2026-06-06T04:35:00Z")).is_none());
    }
}
