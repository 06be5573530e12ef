//! The plan's lifecycle (spec §3, §6) as one pure transition: from the plan, its runs, whether
//! its Promise exists, its Promise's bindings and `now`, to the plan's next status, the run a
//! trigger asks for, the events to publish, the plan's gauges and when to look again.
//!
//! The plan's status is written by the plan's reconcile only; its run-derived fields (`phase`,
//! `activeRunRef`, `lastRun`) follow from its runs, whose changes wake it.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::Cluster;
use crate::api::kratix::BindingFacts;
use crate::api::{
    find_condition, reasons, set_condition, Condition, ConditionStatus, PlanPhase, RunHistoryLimit, RunResult,
    RunState, UpgradePlan, UpgradePlanStatus, UpgradeRun, WindowKind,
};
use crate::engine::admission::{last_run_of, summarize};
use crate::engine::compile::CompiledPlan;
use crate::engine::concurrency::Limit;
use crate::engine::freeze::{holding, Freeze};
use crate::engine::schedule::{scheduled_run_name, TriggerAction};
use crate::engine::snapshot::group_bindings;
use crate::engine::validate::{check_plan, summarize as summarize_problems};
use crate::engine::window::WindowState;

/// Event reasons of a plan.
pub mod events {
    pub const RUN_CREATED: &str = "RunCreated";
    /// Published by the controller when the API server refuses the run a trigger asks for.
    pub const RUN_CREATE_FAILED: &str = "RunCreateFailed";
    pub const TRIGGER_SKIPPED: &str = "TriggerSkipped";
    /// A trigger found past its plan's `startingDeadline` (spec §6).
    pub const TRIGGER_MISSED: &str = "TriggerMissed";
    pub const EXECUTE_AT_IN_PAST: &str = "ExecuteAtInPast";
    pub const INVALID_SPEC: &str = crate::api::reasons::INVALID_SPEC;
    /// A finished run deleted because it is beyond the plan's `runHistoryLimit`.
    pub const RUN_DELETED: &str = "RunDeleted";
}

/// An event to publish on the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

impl PlanEvent {
    /// The Warning the controller publishes when the API server refuses `run` (`refusal`: the
    /// API server's message); the trigger is retried, so it says so.
    pub fn run_create_failed(run: &ScheduledRun, refusal: &str) -> PlanEvent {
        PlanEvent {
            warning: true,
            reason: events::RUN_CREATE_FAILED,
            note: format!(
                "Cannot create UpgradeRun \"{}\" for trigger {}: {refusal}; retrying",
                run.name,
                crate::time::rfc3339(run.at)
            ),
        }
    }
}

/// A run a trigger asks for: its name and the trigger instant it services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledRun {
    pub name: String,
    pub at: DateTime<Utc>,
}

/// One group's gauges (spec §9.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupGauges {
    pub name: String,
    /// [`Limit::shown`], with no limit shown as the group's size; absent when not known.
    pub max_concurrent: Option<i64>,
    /// Failed resources the group tolerates (`maxFailures` resolved against its current size);
    /// absent when a percentage cannot be resolved (membership unknown).
    pub failure_budget: Option<i64>,
    pub window_open: bool,
    /// (index, kind, active) per window.
    pub windows: Vec<(usize, &'static str, bool)>,
    pub next_open: Option<f64>,
    pub next_close: Option<f64>,
}

/// The plan's gauges (spec §9.1).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanGauges {
    pub promise: String,
    pub to: String,
    pub time_zone: String,
    pub running: bool,
    pub suspended: bool,
    pub ready: bool,
    pub next_run: Option<f64>,
    pub last_schedule: Option<f64>,
    pub last_result: Option<&'static str>,
    pub last_finished: Option<f64>,
    /// `upgradeplan_plan_last_run_info`: the last run's name, result and reason, so that an
    /// alert can name the run (one series per plan).
    pub last_run: Option<RunInfo>,
    /// `upgradeplan_plan_active_run_info`: the plan's active run, its state and, while it is
    /// `Pending`, why (`PlanInvalid`, `PromiseNotFound`, `PromiseRevisionNotFound`).
    pub active_run: Option<RunInfo>,
    /// `upgradeplan_plan_last_failure_timestamp_seconds`: the plan's most recent failed run
    /// (from its runs, so a retry that completes right after does not hide it; else `lastRun`)
    /// and when it ended.
    pub last_failure: Option<(RunInfo, f64)>,
    /// `upgradeplan_plan_last_run_failed_resources`: resources that failed in the last run (within
    /// its budget when it completed), while that run still exists.
    pub last_run_failed_resources: Option<i64>,
    pub groups: Vec<GroupGauges>,
    /// `upgradeplan_runs_total`, `upgradeplan_runs_superseded_total` and
    /// `upgradeplan_resource_upgrades_total`, read from the plan's runs and its status
    /// ([`crate::engine::counters`]).
    pub counters: crate::engine::counters::Counters,
}

/// A run named in an info series: its name, a state or result, and the reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunInfo {
    pub run: String,
    pub state: String,
    pub reason: String,
    /// A revert: the run it undoes (spec §13.7); empty otherwise, or when the run is gone.
    pub revert_of: String,
}

/// The output of [`step`]. The controller creates the run (an existing run of that name means the
/// trigger was serviced already), writes the status when it changed, sets the gauges, publishes
/// the events, and looks again at `wake_at`.
#[derive(Debug, Clone)]
pub struct PlanStep {
    pub create_run: Option<ScheduledRun>,
    /// Finished runs beyond `runHistoryLimit`, oldest first: delete them (their snapshots go with
    /// them; `lastRun` is not affected).
    pub delete_runs: Vec<String>,
    pub status: UpgradePlanStatus,
    pub events: Vec<PlanEvent>,
    pub wake_at: Option<DateTime<Utc>>,
}

impl PlanStep {
    /// The status to write when the API server refuses `create_run`: the trigger is not serviced
    /// (`lastScheduledAt` stays) and `nextRunAt` names it until a retry creates its run, so that
    /// a trigger refused from the plan's first one on is still visible and `UpgradeScheduleMissed`
    /// can fire. Without a refused run, the step's status.
    pub fn status_when_refused(&self, previous: Option<&UpgradePlanStatus>) -> UpgradePlanStatus {
        let mut status = self.status.clone();
        if let Some(run) = &self.create_run {
            status.last_scheduled_at = previous.and_then(|p| p.last_scheduled_at);
            status.next_run_at = Some(run.at);
        }
        status
    }
}

fn condition(type_: &str, ok: bool, reasons: (&str, &str), message: String, now: DateTime<Utc>) -> Condition {
    let (status, reason) = if ok {
        (ConditionStatus::True, reasons.0)
    } else {
        (ConditionStatus::False, reasons.1)
    };
    Condition::new(type_, status, reason, message, now)
}

/// The plan's next status and what to do.
pub fn step(
    plan: &UpgradePlan,
    runs: &[&UpgradeRun],
    promise_found: bool,
    cluster: &dyn Cluster,
    now: DateTime<Utc>,
) -> PlanStep {
    let generation = plan.metadata.generation;
    let previous = plan.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    let mut events = Vec::new();
    let compiled = readiness(plan, &previous, &mut status, &mut events, promise_found, now);
    gates_readable(
        plan,
        &previous,
        &mut status,
        &mut events,
        cluster.prometheus_configured(),
        now,
    );
    let (create_run, next_trigger) = triggers(plan, compiled.as_ref(), &previous, &mut status, &mut events, now);

    let summary = summarize(runs, status.last_run.as_ref(), None);
    let delete_runs = beyond_history_limit(runs, plan.spec.run_history_limit.as_ref(), &summary.active_run_ref);
    for name in &delete_runs {
        events.push(PlanEvent {
            warning: false,
            reason: events::RUN_DELETED,
            note: format!("Deleted UpgradeRun \"{name}\": beyond spec.runHistoryLimit"),
        });
    }
    status.phase = summary.phase;
    status.active_run_ref = summary.active_run_ref;
    status.last_run = summary.last_run;
    status.deleted_runs = crate::engine::counters::keep_deleted(previous.deleted_runs.as_ref(), runs);
    status.observed_generation = generation;

    let freezes = holding(
        &cluster.freezes(),
        &plan.spec.promise_ref.name,
        kube::ResourceExt::labels(plan),
    );
    let window_change = compiled.as_ref().and_then(|c| next_gate_change(c, &freezes, now));
    PlanStep {
        create_run,
        delete_runs,
        status,
        events,
        // Exactly at the next trigger or window boundary (the window gauges stay true); watches
        // bring everything else.
        wake_at: next_trigger.into_iter().chain(window_change).min(),
    }
}

/// `Ready` (the plan is valid, announced once per distinct invalidity) and `PromiseResolved`.
/// Returns the plan compiled when it is valid.
fn readiness(
    plan: &UpgradePlan,
    previous: &UpgradePlanStatus,
    status: &mut UpgradePlanStatus,
    events: &mut Vec<PlanEvent>,
    promise_found: bool,
    now: DateTime<Utc>,
) -> Option<CompiledPlan> {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let generation = plan.metadata.generation;
    let checked = check_plan(&name, &plan.spec, now);
    let valid = checked.is_ok();
    let ready = Condition {
        observed_generation: generation,
        ..condition(
            reasons::READY,
            valid,
            (reasons::VALID, reasons::INVALID_SPEC),
            match &checked {
                Ok(_) => "the plan is valid".to_string(),
                Err(problems) => summarize_problems(problems),
            },
            now,
        )
    };
    let became_invalid = !valid
        && find_condition(&previous.conditions, reasons::READY)
            .is_none_or(|c| c.status != ConditionStatus::False || c.message != ready.message);
    if became_invalid {
        events.push(PlanEvent {
            warning: true,
            reason: events::INVALID_SPEC,
            note: ready.message.clone(),
        });
    }
    set_condition(&mut status.conditions, ready);
    let promise = &plan.spec.promise_ref.name;
    let found = if promise_found { "found" } else { "not found" };
    set_condition(
        &mut status.conditions,
        Condition {
            observed_generation: generation,
            ..condition(
                reasons::PROMISE_RESOLVED,
                promise_found,
                (reasons::PROMISE_FOUND, reasons::PROMISE_NOT_FOUND),
                format!("Promise \"{promise}\" {found}"),
                now,
            )
        },
    );
    checked.ok()
}

/// `GatesReadable`, on a plan with signal gates only: False/`NoPrometheus` while the controller has
/// no Prometheus, when every gate reads closed and the plan's runs would wait in their gated
/// groups while the plan reads Ready — announced once as it turns False.
fn gates_readable(
    plan: &UpgradePlan,
    previous: &UpgradePlanStatus,
    status: &mut UpgradePlanStatus,
    events: &mut Vec<PlanEvent>,
    prometheus_configured: bool,
    now: DateTime<Utc>,
) {
    let gates = plan.spec.gates.as_deref().unwrap_or_default();
    if gates.is_empty() {
        status.conditions.retain(|c| c.type_ != reasons::GATES_READABLE);
        return;
    }
    let message = if prometheus_configured {
        format!("{} signal gate(s) read from the controller's Prometheus", gates.len())
    } else {
        format!("{NO_PROMETHEUS_MESSAGE} ({} gate(s))", gates.len())
    };
    let readable = Condition {
        observed_generation: plan.metadata.generation,
        ..condition(
            reasons::GATES_READABLE,
            prometheus_configured,
            (reasons::PROMETHEUS_CONFIGURED, reasons::NO_PROMETHEUS),
            message,
            now,
        )
    };
    let turned_unreadable = !prometheus_configured
        && find_condition(&previous.conditions, reasons::GATES_READABLE)
            .is_none_or(|c| c.status != ConditionStatus::False);
    if turned_unreadable {
        events.push(PlanEvent {
            warning: true,
            reason: reasons::NO_PROMETHEUS,
            note: readable.message.clone(),
        });
    }
    set_condition(&mut status.conditions, readable);
}

/// What a plan with gates says while the controller has no Prometheus.
pub const NO_PROMETHEUS_MESSAGE: &str = "spec.gates: the controller has no Prometheus to ask (--prometheus-url), \
     so every gate reads closed and runs wait in their gated groups";

/// The plan's triggers (spec §6), only for a valid plan with a policy: the run a trigger due now
/// asks for, what a skipped or missed one announces, `nextRunAt`, and when the next one is due.
fn triggers(
    plan: &UpgradePlan,
    compiled: Option<&CompiledPlan>,
    previous: &UpgradePlanStatus,
    status: &mut UpgradePlanStatus,
    events: &mut Vec<PlanEvent>,
    now: DateTime<Utc>,
) -> (Option<ScheduledRun>, Option<DateTime<Utc>>) {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let created = crate::time::created_at(&plan.metadata);
    let spec_changed = previous.observed_generation != plan.metadata.generation;
    status.next_run_at = None;
    let Some(t) = compiled.and_then(|c| c.triggers.as_ref()) else {
        return (None, None);
    };
    let mut create_run = None;
    match t.due(now, created, status.last_scheduled_at, plan.spec.suspend) {
        TriggerAction::CreateRun(at) => {
            let run = ScheduledRun {
                name: scheduled_run_name(&name, at),
                at,
            };
            create_run = Some(run);
            status.last_scheduled_at = Some(at);
        }
        TriggerAction::Skip(at) => {
            status.last_scheduled_at = Some(at);
            events.push(PlanEvent {
                warning: false,
                reason: events::TRIGGER_SKIPPED,
                note: format!("Trigger {} skipped: the plan is suspended", at.to_rfc3339()),
            });
        }
        TriggerAction::Missed { at, late } => {
            status.last_scheduled_at = Some(at);
            let deadline = t
                .starting_deadline
                .as_ref()
                .map(|d| d.written.as_str())
                .unwrap_or_default();
            events.push(PlanEvent {
                warning: true,
                reason: events::TRIGGER_MISSED,
                note: format!(
                    "trigger {} missed by {} (startingDeadline {deadline})",
                    crate::time::rfc3339(at),
                    crate::engine::schedule::go_duration(late)
                ),
            });
        }
        TriggerAction::None => {}
    }
    if spec_changed && t.execute_at_before_creation(created) {
        events.push(PlanEvent {
            warning: true,
            reason: events::EXECUTE_AT_IN_PAST,
            note: "spec.upgradeExecutionPolicy.executeAt is before the plan was created and will never fire"
                .to_string(),
        });
    }
    if let Some(run) = &create_run {
        events.push(PlanEvent {
            warning: false,
            reason: events::RUN_CREATED,
            note: format!(
                "Created UpgradeRun \"{}\" for trigger {}",
                run.name,
                run.at.to_rfc3339()
            ),
        });
    }
    // While suspended nextRunAt is absent, but triggers are still recorded as skipped on time.
    status.next_run_at = t.next_run_at(now, created, plan.spec.suspend);
    (create_run, t.next_after(now, created))
}

/// The next instant a group's gate (windows and freezes) opens or closes: the plan looks again
/// then, so that its window gauges stay true.
fn next_gate_change(plan: &CompiledPlan, freezes: &[Freeze], now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    plan.groups
        .iter()
        .filter_map(|g| WindowState::of_group(&g.windows, freezes, now).1.next_change(now))
        .min()
}

/// The plan's gauges (spec §9.1) as a scrape shows them: from the plan as cached (its status as
/// last written), its runs, the Promise's bindings and the freezes. Computed when Prometheus asks,
/// not on every reconcile: grouping every binding is the costliest part.
pub fn gauges_of(
    plan: &UpgradePlan,
    runs: &[&UpgradeRun],
    promise_found: bool,
    cluster: &dyn Cluster,
    now: DateTime<Utc>,
) -> PlanGauges {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let compiled = check_plan(&name, &plan.spec, now).ok();
    let valid = compiled.is_some();
    let unset = UpgradePlanStatus::default();
    let status = plan.status.as_ref().unwrap_or(&unset);
    let promise = &plan.spec.promise_ref.name;
    let bindings = if valid {
        cluster.bindings_of(promise)
    } else {
        Vec::new()
    };
    let freezes = holding(&cluster.freezes(), promise, kube::ResourceExt::labels(plan));
    let mut gauges = gauges(plan, status, compiled.as_ref(), &bindings, &freezes, now);
    gauges.active_run = runs
        .iter()
        .find(|r| {
            r.metadata.name.as_deref() == Some(status.active_run_ref.as_str()) && !status.active_run_ref.is_empty()
        })
        .map(|r| active_run_info(r, promise_found));
    gauges.last_run_failed_resources = status.last_run.as_ref().and_then(|l| {
        runs.iter()
            .find(|r| r.metadata.name.as_deref() == Some(l.name.as_str()))
            .and_then(|r| r.status.as_ref())
            .map(|s| s.rollout_groups.iter().map(|g| g.failed).sum())
    });
    gauges.counters = crate::engine::counters::of_plan(plan, runs);
    gauges.last_failure = runs
        .iter()
        .filter_map(|r| last_run_of(r))
        .chain(status.last_run.clone())
        .filter(|l| l.result == RunResult::Failed)
        .filter_map(|l| Some((l.finished_at?, l)))
        .max_by_key(|(at, _)| *at)
        .map(|(at, l)| {
            let revert_of = runs
                .iter()
                .find(|r| r.metadata.name.as_deref() == Some(l.name.as_str()))
                .and_then(|r| r.spec.revert_of.as_ref())
                .map(|o| o.name.clone())
                .unwrap_or_default();
            (
                RunInfo {
                    run: l.name,
                    state: l.result.as_str().to_string(),
                    reason: l.reason,
                    revert_of,
                },
                at.timestamp() as f64,
            )
        });
    gauges
}

fn gauges(
    plan: &UpgradePlan,
    status: &UpgradePlanStatus,
    compiled: Option<&CompiledPlan>,
    bindings: &[Arc<dyn BindingFacts>],
    freezes: &[Freeze],
    now: DateTime<Utc>,
) -> PlanGauges {
    let spec = &plan.spec;
    // Percentages resolve against the group's current membership.
    let sizes: Option<Vec<usize>> = compiled.map(|c| {
        let grouping = group_bindings(c, bindings.iter().map(|b| b.as_ref()));
        grouping.groups.iter().map(Vec::len).collect()
    });
    // An invalid plan's groups are named, with nothing else known of them.
    let groups = spec
        .rollout_groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let Some(group) = compiled.map(|c| &c.groups[i]) else {
                return GroupGauges {
                    name: g.name.clone(),
                    max_concurrent: None,
                    failure_budget: None,
                    window_open: false,
                    windows: Vec::new(),
                    next_open: None,
                    next_close: None,
                };
            };
            let (state, gate) = WindowState::of_group(&group.windows, freezes, now);
            let size = sizes.as_ref().and_then(|s| s.get(i).copied());
            GroupGauges {
                name: g.name.clone(),
                max_concurrent: match group.limit {
                    Limit::Unlimited => size.map(|n| n as i64),
                    l => l.shown(size).map(|n| n as i64),
                },
                failure_budget: group.budget.shown(size).map(|n| n as i64),
                window_open: state.open,
                windows: gate
                    .windows()
                    .iter()
                    .enumerate()
                    .map(|(wi, w)| {
                        let kind = if w.kind == WindowKind::Allow { "allow" } else { "deny" };
                        (wi, kind, w.is_active(now))
                    })
                    .collect(),
                next_open: state.next_open.map(|t| t.timestamp() as f64),
                next_close: state.next_close.map(|t| t.timestamp() as f64),
            }
        })
        .collect();
    PlanGauges {
        promise: spec.promise_ref.name.clone(),
        to: spec.upgrade_path.to.clone(),
        time_zone: spec
            .upgrade_execution_policy
            .as_ref()
            .and_then(|p| p.time_zone.clone())
            .unwrap_or_else(|| "UTC".into()),
        running: status.phase == PlanPhase::Running,
        suspended: spec.suspend,
        ready: compiled.is_some(),
        next_run: status.next_run_at.map(|t| t.timestamp() as f64),
        last_schedule: status.last_scheduled_at.map(|t| t.timestamp() as f64),
        last_result: status.last_run.as_ref().map(|l| l.result.as_str()),
        last_run: status.last_run.as_ref().map(|l| RunInfo {
            run: l.name.clone(),
            state: l.result.as_str().to_string(),
            reason: l.reason.clone(),
            revert_of: String::new(),
        }),
        active_run: None,
        last_failure: None,
        last_run_failed_resources: None,
        counters: Default::default(),
        last_finished: status
            .last_run
            .as_ref()
            .and_then(|l| l.finished_at)
            .map(|t| t.timestamp() as f64),
        groups,
    }
}

/// The finished runs beyond each limit of `runHistoryLimit` (spec §13.1), oldest first:
/// `Completed` runs count as succeeded; `Failed` and `Cancelled` ones, and superseded runs once
/// the run that superseded them has finished (or is gone), as failed. Newest are kept, by the
/// time they ended (superseded runs: by creation).
fn beyond_history_limit(runs: &[&UpgradeRun], limit: Option<&RunHistoryLimit>, active: &str) -> Vec<String> {
    let Some(limit) = limit else { return Vec::new() };
    let state_of = |name: &str| {
        runs.iter()
            .find(|r| r.metadata.name.as_deref() == Some(name))
            .and_then(|r| r.status.as_ref())
            .map(|s| s.state)
    };
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    for r in runs {
        let name = r.metadata.name.clone().unwrap_or_default();
        if name == active || r.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = r.status.clone().unwrap_or_default();
        let ended = status
            .finished_at
            .unwrap_or_else(|| crate::time::created_at(&r.metadata));
        match (status.state, status.superseded_by.as_deref()) {
            (RunState::Completed, _) => succeeded.push((ended, name)),
            (RunState::Failed | RunState::Cancelled, _) => failed.push((ended, name)),
            (_, Some(newer)) if state_of(newer).is_none_or(RunState::is_terminal) => failed.push((ended, name)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (mut kind, keep) in [(succeeded, limit.succeeded), (failed, limit.failed)] {
        let Some(keep) = keep.and_then(|k| usize::try_from(k).ok()).filter(|k| *k >= 1) else {
            continue;
        };
        kind.sort_by(|a, b| b.cmp(a)); // newest first
        out.extend(kind.into_iter().skip(keep).rev().map(|(_, name)| name));
    }
    out
}

/// The active run's info series: while `Pending`, the reason it waits (the first unmet condition
/// of spec §4.3; a missing Promise named as such, since its revision can never appear).
fn active_run_info(run: &UpgradeRun, promise_found: bool) -> RunInfo {
    let state = run.status.as_ref().map(|s| s.state).unwrap_or_default();
    let conditions = run.status.as_ref().map(|s| s.conditions.as_slice()).unwrap_or_default();
    let unmet = |type_: &str| {
        find_condition(conditions, type_)
            .filter(|c| c.status == ConditionStatus::False)
            .map(|c| c.reason.clone())
    };
    let reason = match state {
        RunState::Pending => unmet(reasons::PLAN_RESOLVED)
            .or_else(|| (!promise_found).then(|| reasons::PROMISE_NOT_FOUND.to_string()))
            .or_else(|| unmet(reasons::TARGET_REVISION_READY))
            .unwrap_or_default(),
        _ => String::new(),
    };
    RunInfo {
        run: run.metadata.name.clone().unwrap_or_default(),
        state: state.as_str().to_string(),
        reason,
        revert_of: String::new(),
    }
}

#[cfg(test)]
mod tests;
