//! Forecast (spec §13.6): when the plan's next run would start and finish each group, and what it
//! would wait for.
//!
//! A discrete-event simulation that *is* the run transition: at each instant it calls
//! [`run::evaluate`] — the function the controller's run step calls — with simulated bindings,
//! starts what it says to start, completes each upgrade after the modelled duration, and jumps
//! to the next completion or the instant the evaluation asks to be woken (a window, a freeze, a
//! soak). Groups, limits, windows, freezes, soaks and budgets are therefore the controller's own
//! rules; only the world is modelled: every upgrade succeeds after `per_resource`, approvals are
//! granted, signal gates are open, health checks pass at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use super::compile::CompiledPlan;
use super::freeze::Freeze;
use super::gate::{GateReading, Reading};
use super::health::HealthRecords;
use super::revert::Revisions;
use super::run::{evaluate, Blocked, Evaluation, Outcome, RunContext, Verdict};
use super::snapshot::{assign, idle_resources, Snapshot};
use super::stage::ApprovalFact;
use super::upgrade_budget::BudgetFacts;
use super::write::BindingPatch;
use crate::api::kratix::{BindingFacts, ResourceBinding};
use crate::api::{GroupPhase, GroupStatus, UPGRADE_STARTED_AT_ANNOTATION};

/// How long a wait must be before it is reported as one.
const WAIT_NOTICED: Duration = Duration::seconds(1);
/// A freeze holding the run longer than this is a warning (spec §13.6).
const LONG_FREEZE: Duration = Duration::days(1);
/// The simulation gives up after this many steps (a run of 100k resources one at a time is
/// 100k steps; a plan that cannot progress ends much earlier, by having nothing to wait for).
const MAX_STEPS: usize = 1_000_000;

/// What the forecast starts from.
#[derive(Debug, Clone)]
pub struct ForecastInput<'a> {
    pub plan: &'a CompiledPlan,
    /// Every binding of the plan's Promise (the run's snapshot takes the eligible ones).
    pub bindings: &'a [ResourceBinding],
    /// The run's snapshot when it is not taken from `bindings`: a revert's, derived from the run
    /// it reverts (spec §13.7), each resource with its own target.
    pub snapshot: Option<&'a Snapshot>,
    /// The PromiseRevisions of the plan's Promise, when known (`None`: the target's assumed
    /// there): a target being deleted or missing holds the run, and a resource whose version's
    /// revision is being deleted is skipped (spec §5.7).
    pub revisions: Option<&'a [crate::api::kratix::RevisionFact]>,
    /// The freezes holding the plan.
    pub freezes: &'a [Freeze],
    /// The UpgradeBudgets capping the plan, each with no other run: other plans' runs are
    /// assumed absent (spec §13.6, §13.8).
    pub budgets: &'a [BudgetFacts],
    pub start: DateTime<Utc>,
    /// How long each upgrade takes.
    pub per_resource: Duration,
    /// The plan's next trigger after `start`: a run still going then is superseded.
    pub next_trigger: Option<DateTime<Utc>>,
}

/// A stretch of time a group waits, and why (`WindowClosed`, `Frozen`, `Soaking`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wait {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub reason: Blocked,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupForecast {
    pub name: String,
    pub resources: usize,
    /// Its first upgrade's start; `None` when it has no resources to start or never starts.
    pub start: Option<DateTime<Utc>>,
    /// When it completes; `None` when it does not.
    pub finish: Option<DateTime<Utc>>,
    pub waits: Vec<Wait>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Forecast {
    pub start: DateTime<Utc>,
    pub groups: Vec<GroupForecast>,
    /// When the run completes; `None` when it does not within the search horizon.
    pub finish: Option<DateTime<Utc>>,
    pub warnings: Vec<String>,
    /// Every upgrade's start, in order: (instant, `namespace/binding`).
    #[serde(skip)]
    pub starts: Vec<(DateTime<Utc>, String)>,
}

/// The plan as the forecast runs it: health checks assumed to pass at once (stated), the rest
/// as written.
fn simulated_plan(plan: &CompiledPlan) -> CompiledPlan {
    let mut p = plan.clone();
    for g in &mut p.groups {
        g.health_timeout = None;
    }
    p
}

/// Simulates the plan's next run.
pub fn forecast(input: &ForecastInput<'_>) -> Forecast {
    let plan = simulated_plan(input.plan);
    let snapshot = match input.snapshot {
        Some(s) => s.clone(),
        None => assign(&plan, input.bindings).snapshot,
    };
    let mut kratix = SimulatedKratix::new(&snapshot, input.bindings, &plan.to, input.per_resource);
    // The forecast assumes every upgrade finishes; for these Kratix says it will not now.
    let idle = kratix.idle(&snapshot);
    let approvals = assumed_approvals(&plan, input.start);
    let gates = open_gates(&plan, input.start + Duration::days(3660));
    let health = HealthRecords::default();

    let mut groups: Vec<GroupForecast> = snapshot
        .groups
        .iter()
        .map(|g| GroupForecast {
            name: g.name.clone(),
            resources: g.resources.len(),
            start: None,
            finish: None,
            waits: Vec::new(),
        })
        .collect();
    let mut recorded: Vec<GroupStatus> = snapshot.initial_counts();
    let overlaps = super::record::Overlaps::of(&snapshot);
    let revisions = input.revisions.map_or_else(Revisions::present, |facts| {
        Revisions::of_target(&plan.to, &snapshot, facts)
    });
    let mut starts = Vec::new();
    let mut warnings = Vec::new();
    let mut finish = None;
    let mut now = input.start;
    for _ in 0..MAX_STEPS {
        // Every upgrade due by now completes first, as Kratix would report it.
        kratix.complete_due(now);
        let eval = evaluate(
            &RunContext {
                run_name: "forecast",
                run_created: input.start,
                snapshot_taken: input.start,
                reverting: None,
                suspended: false,
                plan: &plan,
                snapshot: &snapshot,
                overlaps: &overlaps,
                recorded: &recorded,
                health: &health,
                gates: &gates,
                approvals: &approvals,
                freezes: input.freezes,
                budgets: input.budgets,
                revisions: &revisions,
                now,
            },
            |ns, name| kratix.binding(ns, name),
        );
        // The group whose resources wait or start: the first neither done nor soaking (a soak
        // is a wait before the next group).
        let waiting = eval
            .groups
            .iter()
            .position(|g| !matches!(g.phase, Some(GroupPhase::Completed | GroupPhase::Soaking)));
        if let (Some(i), false) = (waiting, eval.start.is_empty() && eval.retry.is_empty()) {
            if let Some(g) = groups.get_mut(i) {
                g.start.get_or_insert(now);
            }
        }
        kratix.track_in_flight(&eval, &snapshot, now);
        starts.extend(kratix.start(&eval, now));
        for (i, g) in eval.groups.iter().enumerate() {
            if let Some(f) = groups.get_mut(i) {
                f.finish = f.finish.or(g.completed_at);
            }
        }
        recorded = eval.groups.clone();
        let current = match eval.verdict {
            Verdict::InProgress { group } => waiting.unwrap_or(group),
            Verdict::Completed => {
                finish = Some(now);
                break;
            }
            Verdict::Failed { group, failed } => {
                warnings.push(format!(
                    "group {:?} would fail: {failed} resource(s) past its maxFailures",
                    snapshot.groups[group].name
                ));
                break;
            }
            Verdict::RevisionMissing => {
                let deleting = revisions.target_deleting.as_deref();
                warnings.push(format!(
                    "{}: the run would not start (TargetRevisionReady=False)",
                    super::texts::target_revision(input.plan.promise.as_str(), &plan.to, false, deleting)
                ));
                break;
            }
        };
        let next = [kratix.next_completion(), eval.wake_at]
            .into_iter()
            .flatten()
            .filter(|t| *t > now)
            .min();
        let Some(next) = next else {
            warnings.push(format!(
                "group {:?} would wait for ever: nothing it waits for changes within the search horizon",
                snapshot.groups[current].name
            ));
            break;
        };
        if let (Some(reason), Some(g)) = (wait_reason(&eval), groups.get_mut(current)) {
            note_wait(&mut g.waits, now, next, reason);
        }
        now = next;
    }
    for g in &mut groups {
        g.waits.retain(|w| w.to - w.from >= WAIT_NOTICED);
    }
    warnings.extend(warnings_of(&groups, finish, input.next_trigger));
    warnings.extend(idle);
    Forecast {
        start: input.start,
        groups,
        finish,
        warnings,
        starts,
    }
}

/// Kratix as the forecast models it: the snapshot's bindings, each upgrade it works on applied
/// `per_resource` after it began, every one succeeding.
struct SimulatedKratix<'s> {
    /// The snapshot's bindings, indexed by (namespace, binding) borrowed from the snapshot:
    /// looked up for every resource at every step, so without allocating.
    live: Vec<ResourceBinding>,
    index: HashMap<(&'s str, &'s str), usize>,
    /// (when, index into `live`) of each upgrade in flight.
    completions: BinaryHeap<Reverse<(DateTime<Utc>, usize)>>,
    /// Whether a completion is already due for `live[i]`.
    completing: Vec<bool>,
    /// The version `live[i]` is applied at once done: the run's target, a revert's own per
    /// resource.
    targets: Vec<String>,
    to: String,
    per_resource: Duration,
}

impl<'s> SimulatedKratix<'s> {
    fn new(snapshot: &'s Snapshot, bindings: &[ResourceBinding], to: &str, per_resource: Duration) -> Self {
        let by_key: HashMap<(&str, &str), &ResourceBinding> = bindings
            .iter()
            .map(|b| {
                let key = (
                    b.metadata.namespace.as_deref().unwrap_or_default(),
                    b.metadata.name.as_deref().unwrap_or_default(),
                );
                (key, b)
            })
            .collect();
        let mut live: Vec<ResourceBinding> = Vec::new();
        let mut targets = Vec::new();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        for r in snapshot.groups.iter().flat_map(|g| &g.resources) {
            let key = (r.namespace.as_str(), r.binding.as_str());
            if let (None, Some(b)) = (index.get(&key), by_key.get(&key)) {
                index.insert(key, live.len());
                live.push((*b).clone());
                targets.push(r.target(to).to_string());
            }
        }
        SimulatedKratix {
            completing: vec![false; live.len()],
            targets,
            live,
            index,
            completions: BinaryHeap::new(),
            to: to.to_string(),
            per_resource,
        }
    }

    fn binding(&self, namespace: &str, name: &str) -> Option<&dyn BindingFacts> {
        self.index
            .get(&(namespace, name))
            .map(|&i| &self.live[i] as &dyn BindingFacts)
    }

    /// Applies every upgrade due by `now`.
    fn complete_due(&mut self, now: DateTime<Utc>) {
        while let Some(&Reverse((at, i))) = self.completions.peek() {
            if at > now {
                break;
            }
            self.completions.pop();
            // Succeeded, as Kratix says it: the request taken (its label removed), applied,
            // `UpgradeSucceeded=True` then, no failure left.
            if let Some(labels) = self.live[i].metadata.labels.as_mut() {
                labels.remove(crate::api::kratix::MANUAL_RECONCILIATION_LABEL);
            }
            let status = self.live[i].status.get_or_insert_with(Default::default);
            status.last_applied_version = self.targets[i].clone();
            status.failed_version = None;
            status.conditions = vec![crate::api::kratix::BindingCondition {
                type_: crate::api::kratix::UPGRADE_SUCCEEDED.into(),
                status: "True".into(),
                reason: crate::api::kratix::UPGRADE_COMPLETE.into(),
                message: String::new(),
                last_transition_time: Some(at),
            }];
        }
    }

    /// Upgrades already under way when the forecast begins (a resource whose `spec.version` is
    /// `to` already) complete like the ones it starts.
    fn track_in_flight(&mut self, eval: &Evaluation, snapshot: &Snapshot, now: DateTime<Utc>) {
        for (g, outcomes) in &eval.outcomes {
            for (r, o) in snapshot.groups[*g].resources.iter().zip(outcomes) {
                let key = (r.namespace.as_str(), r.binding.as_str());
                if let (Outcome::InFlight, Some(&i)) = (o, self.index.get(&key)) {
                    if !self.completing[i] {
                        self.work_on(i, now);
                    }
                }
            }
        }
    }

    /// Applies the evaluation's starts and retries to the bindings; each one started, with when.
    fn start(&mut self, eval: &Evaluation, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, String)> {
        let mut started = Vec::new();
        for patch in BindingPatch::of_evaluation(eval, &self.to, "forecast", now) {
            let r = &patch.resource;
            let Some(&i) = self.index.get(&(r.namespace.as_str(), r.binding.as_str())) else {
                continue;
            };
            // The forecast's bindings are the ones evaluated: the precondition holds.
            if patch.apply(&mut self.live[i]).is_err() {
                continue;
            }
            started.push((now, format!("{}/{}", r.namespace, r.binding)));
            self.work_on(i, now);
        }
        started
    }

    /// Kratix begins `live[i]`'s upgrade at `now`: it is applied `per_resource` later.
    fn work_on(&mut self, i: usize, now: DateTime<Utc>) {
        self.completing[i] = true;
        self.completions.push(Reverse((now + self.per_resource, i)));
    }

    /// The snapshot's resources Kratix will not reconcile now, said as warnings.
    fn idle(&self, snapshot: &Snapshot) -> Vec<String> {
        idle_resources(snapshot, |ns, name| self.binding(ns, name))
            .into_iter()
            .map(|i| {
                format!(
                    "{} in group {:?} is {}; the forecast assumes it finishes",
                    i.resource.display_name(),
                    i.group,
                    i.why.words()
                )
            })
            .collect()
    }

    fn next_completion(&self) -> Option<DateTime<Utc>> {
        self.completions.peek().map(|Reverse((at, _))| *at)
    }
}

/// The forecast assumes every group that requires approval is approved when the run starts.
fn assumed_approvals(plan: &CompiledPlan, start: DateTime<Utc>) -> Vec<ApprovalFact> {
    plan.groups
        .iter()
        .filter(|g| g.requires_approval)
        .map(|g| ApprovalFact {
            name: format!("forecast-{}", g.name),
            group: g.name.clone(),
            created: start,
            owners: Vec::new(),
            resource_version: None,
            approver: None,
            comment: None,
        })
        .collect()
}

/// ... and every signal gate open, not read again before `far`.
fn open_gates(plan: &CompiledPlan, far: DateTime<Utc>) -> Vec<GateReading> {
    plan.gates
        .iter()
        .map(|g| GateReading {
            gate: g.name().to_string(),
            reading: Reading::Open,
            next_check: far,
        })
        .collect()
}

/// What the forecast shows a group waiting for: time-bound holds only (the others it assumes
/// away or lets pass).
fn wait_reason(eval: &Evaluation) -> Option<Blocked> {
    eval.blocked()
        .filter(|b| matches!(b, Blocked::WindowClosed | Blocked::Frozen | Blocked::Soaking))
}

/// Extends the last wait when it continues it (same reason, no gap); else records a new one.
fn note_wait(waits: &mut Vec<Wait>, from: DateTime<Utc>, to: DateTime<Utc>, reason: Blocked) {
    match waits.last_mut() {
        Some(last) if last.reason == reason && last.to == from => last.to = to,
        _ => waits.push(Wait { from, to, reason }),
    }
}

/// Spec §13.6: a group that cannot finish inside one window, a run still going at the next
/// trigger (it would be superseded), a freeze that holds it longer than a day.
fn warnings_of(
    groups: &[GroupForecast],
    finish: Option<DateTime<Utc>>,
    next_trigger: Option<DateTime<Utc>>,
) -> Vec<String> {
    let mut out = Vec::new();
    for g in groups {
        let started = g.start;
        let spills = g
            .waits
            .iter()
            .any(|w| w.reason == Blocked::WindowClosed && started.is_some_and(|s| w.from >= s));
        if spills {
            out.push(format!(
                "group {:?} cannot finish inside one window: it waits for the next one after it started",
                g.name
            ));
        }
        if let Some(w) = g
            .waits
            .iter()
            .find(|w| w.reason == Blocked::Frozen && w.to - w.from > LONG_FREEZE)
        {
            out.push(format!(
                "a freeze holds group {:?} for longer than a day ({} to {})",
                g.name,
                crate::time::rfc3339(w.from),
                crate::time::rfc3339(w.to)
            ));
        }
    }
    if let Some(t) = next_trigger {
        if finish.is_none_or(|f| f > t) {
            out.push(format!(
                "the run would still be going at the plan's next trigger ({}): the newer run supersedes it",
                crate::time::rfc3339(t)
            ));
        }
    }
    out
}

/// How long upgrades took in earlier runs: for each binding a run among `runs` upgraded (its
/// `upgraded-by`), from its `upgrade-started-at` to the `UpgradeSucceeded=True` transition, when
/// that came after the start. Sorted, shortest first.
pub fn measured_durations(bindings: &[ResourceBinding], runs: &[String]) -> Vec<Duration> {
    let mut out: Vec<Duration> = bindings
        .iter()
        .filter_map(|b| {
            let annotations = b.metadata.annotations.as_ref()?;
            let by = annotations.get(crate::api::UPGRADED_BY_ANNOTATION)?;
            if !runs.iter().any(|r| r == by) {
                return None;
            }
            let started = DateTime::parse_from_rfc3339(annotations.get(UPGRADE_STARTED_AT_ANNOTATION)?).ok()?;
            let done = b
                .upgrade_condition()
                .filter(|c| c.status == "True")?
                .last_transition_time?;
            let took = done - started.with_timezone(&Utc);
            (took >= Duration::zero()).then_some(took)
        })
        .collect();
    out.sort();
    out
}

/// The `q`-quantile (0 to 1) of sorted durations, nearest rank.
pub fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{RolloutGroup, RolloutSelectors, UpgradeWindow, WindowKind};
    use crate::engine::compile::compile;
    use crate::engine::snapshot::tests::{binding, plan};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn group(name: &str, limit: i32) -> RolloutGroup {
        RolloutGroup {
            name: name.into(),
            selectors: Some(RolloutSelectors {
                match_labels: Some([("env".to_string(), name.to_string())].into()),
                ..Default::default()
            }),
            max_concurrent: Some(IntOrString::Int(limit)),
            ..Default::default()
        }
    }

    fn allow(schedule: &str, duration: &str) -> Option<Vec<UpgradeWindow>> {
        Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: None,
        }])
    }

    fn bindings(per_group: &[(&str, usize)]) -> Vec<ResourceBinding> {
        per_group
            .iter()
            .flat_map(|(env, n)| (0..*n).map(move |i| binding("ns", &format!("{env}{i}"), &[("env", env)], "v1", "v1")))
            .collect()
    }

    fn input<'a>(p: &'a CompiledPlan, b: &'a [ResourceBinding], start: &str, minutes: i64) -> ForecastInput<'a> {
        ForecastInput {
            plan: p,
            bindings: b,
            snapshot: None,
            revisions: None,
            freezes: &[],
            budgets: &[],
            start: utc(start),
            per_resource: Duration::minutes(minutes),
            next_trigger: None,
        }
    }

    /// Spec §13.6: a budget below the group's limit paces the forecast run as it paces the
    /// controller's (other plans' runs assumed absent).
    #[test]
    fn a_budget_below_the_limit_paces_the_forecast() {
        let p = plan(&["v1"], "v2", vec![group("dev", 4)]);
        let b = bindings(&[("dev", 4)]);
        let compiled = compile(&p).unwrap();
        let free = forecast(&input(&compiled, &b, "2026-06-01T20:00:00Z", 10));
        assert_eq!(free.finish, Some(utc("2026-06-01T20:10:00Z")), "four at once");
        let budget = [BudgetFacts {
            name: "saturday".into(),
            max: 2,
            others: Vec::new(),
            sent: 0,
        }];
        let capped = forecast(&ForecastInput {
            budgets: &budget,
            ..input(&compiled, &b, "2026-06-01T20:00:00Z", 10)
        });
        assert_eq!(capped.finish, Some(utc("2026-06-01T20:20:00Z")), "two at a time");
    }

    /// Spec §5.7: the forecast knows the Promise's revisions — a target being deleted starts
    /// nothing (and says why), and resources at a version being deleted are Kratix's to delete:
    /// never started.
    #[test]
    fn a_revision_being_deleted_holds_the_forecast_or_skips_its_resources() {
        let p = plan(&["v1", "v1.5"], "v2", vec![group("dev", 4)]);
        let mut b = bindings(&[("dev", 3)]);
        b.push(binding("ns", "dev9", &[("env", "dev")], "v1.5", "v1.5"));
        let compiled = compile(&p).unwrap();
        let revision = |version: &str, deleting: bool| crate::api::kratix::RevisionFact {
            version: version.into(),
            name: format!("redis-{version}"),
            deleting,
        };
        let target = [revision("v1", false), revision("v2", true)];
        let f = forecast(&ForecastInput {
            revisions: Some(&target),
            ..input(&compiled, &b, "2026-06-01T20:00:00Z", 10)
        });
        assert!(f.starts.is_empty() && f.finish.is_none());
        assert!(
            f.warnings
                .iter()
                .any(|w| w.contains("redis-v2") && w.contains("is being deleted")),
            "{:?}",
            f.warnings
        );
        let from = [revision("v1", true), revision("v1.5", false), revision("v2", false)];
        let f = forecast(&ForecastInput {
            revisions: Some(&from),
            ..input(&compiled, &b, "2026-06-01T20:00:00Z", 10)
        });
        assert_eq!(f.starts.len(), 1, "only the resource at v1.5 starts: {:?}", f.starts);
        assert_eq!(f.finish, Some(utc("2026-06-01T20:10:00Z")));
    }

    fn times(g: &GroupForecast) -> (usize, Option<DateTime<Utc>>, Option<DateTime<Utc>>) {
        (g.resources, g.start, g.finish)
    }

    fn wait(from: &str, to: &str, reason: Blocked) -> Wait {
        Wait {
            from: utc(from),
            to: utc(to),
            reason,
        }
    }

    #[test]
    fn groups_limits_soaks_and_windows_as_the_run_applies_them() {
        let mut dev = group("dev", 2);
        dev.soak_duration = Some("30m".into());
        let mut prod = group("prod", 1);
        prod.resource_upgrade_windows = allow("0 22 * * *", "4h");
        prod.require_approval = Some(true);
        let p = plan(&["v1"], "v2", vec![dev, prod]);
        let b = bindings(&[("dev", 3), ("prod", 2)]);
        let f = forecast(&input(&compile(&p).unwrap(), &b, "2026-06-01T20:00:00Z", 10));
        assert_eq!(
            times(&f.groups[0]),
            (3, Some(utc("2026-06-01T20:00:00Z")), Some(utc("2026-06-01T20:20:00Z"))),
            "two at a time, then the third"
        );
        assert_eq!(f.groups[0].waits, vec![]);
        assert_eq!(
            times(&f.groups[1]),
            (2, Some(utc("2026-06-01T22:00:00Z")), Some(utc("2026-06-01T22:20:00Z")))
        );
        assert_eq!(
            f.groups[1].waits,
            vec![
                wait("2026-06-01T20:20:00Z", "2026-06-01T20:50:00Z", Blocked::Soaking),
                wait("2026-06-01T20:50:00Z", "2026-06-01T22:00:00Z", Blocked::WindowClosed),
            ],
            "the approval is assumed granted"
        );
        assert_eq!(f.finish, Some(utc("2026-06-01T22:20:00Z")));
        assert_eq!(f.warnings, Vec::<String>::new());
        let order: Vec<&str> = f.starts.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(
            order,
            [
                "ns/dev0-binding",
                "ns/dev1-binding",
                "ns/dev2-binding",
                "ns/prod0-binding",
                "ns/prod1-binding"
            ]
        );
    }

    /// A revert (spec §13.7) is forecast from its own snapshot: the reverted run's groups in
    /// reverse, each resource back to its own target — one whose upgrade failed (applied still
    /// at its target) done once Kratix ran its version again.
    #[test]
    fn a_revert_is_forecast_from_its_snapshot_each_resource_to_its_own_target() {
        use crate::engine::run::tests::with_condition;
        use crate::engine::snapshot::{SnapshotGroup, SnapshotResource};
        use std::sync::Arc;
        let live = vec![
            binding("ns", "dev0", &[("env", "dev")], "v2", "v2"),
            binding("ns", "dev1", &[("env", "dev")], "v1.1", "v2"),
            with_condition(
                binding("ns", "prod0", &[("env", "prod")], "v1", "v2"),
                "False",
                crate::api::kratix::UPGRADE_FAILED,
                "2026-06-01T19:00:00Z",
                Some("v2"),
            ),
        ];
        let entry = |b: &ResourceBinding, target: &str| {
            Arc::new(SnapshotResource {
                target: Some(target.into()),
                ..SnapshotResource::from_binding(b)
            })
        };
        let snapshot = Snapshot {
            groups: vec![
                SnapshotGroup {
                    name: "prod".into(),
                    resources: vec![entry(&live[2], "v1")],
                },
                SnapshotGroup {
                    name: "dev".into(),
                    resources: vec![entry(&live[0], "v1"), entry(&live[1], "v1.1")],
                },
            ],
        };
        let p = plan(&["v2"], "v1, v1.1", vec![group("prod", 1), group("dev", 1)]);
        let compiled = compile(&p).unwrap();
        let f = forecast(&ForecastInput {
            snapshot: Some(&snapshot),
            revisions: None,
            ..input(&compiled, &live, "2026-06-01T20:00:00Z", 10)
        });
        assert_eq!(
            times(&f.groups[0]),
            (1, Some(utc("2026-06-01T20:00:00Z")), Some(utc("2026-06-01T20:10:00Z"))),
            "prod first: its failed upgrade moved back"
        );
        assert_eq!(
            times(&f.groups[1]),
            (2, Some(utc("2026-06-01T20:10:00Z")), Some(utc("2026-06-01T20:30:00Z")))
        );
        assert_eq!(f.finish, Some(utc("2026-06-01T20:30:00Z")));
        let order: Vec<&str> = f.starts.iter().map(|(_, r)| r.as_str()).collect();
        assert_eq!(order, ["ns/prod0-binding", "ns/dev0-binding", "ns/dev1-binding"]);
    }

    /// Issue 40 item 1 and D1: a resource already at `spec.version == to` completes like the
    /// ones the forecast starts, and one whose failure predates the run is retried in its turn.
    #[test]
    fn upgrades_under_way_complete_and_old_failures_are_retried_in_turn() {
        use crate::api::kratix::UPGRADE_FAILED;
        use crate::engine::run::tests::with_condition;
        let p = plan(&["v1"], "v2", vec![group("dev", 1)]);
        let mut b = bindings(&[("dev", 3)]);
        b[0].spec.version = "v2".into();
        b[1].spec.version = "v2".into();
        b[1] = with_condition(
            b[1].clone(),
            "False",
            UPGRADE_FAILED,
            "2026-05-01T00:00:00Z",
            Some("v2"),
        );
        let f = forecast(&input(&compile(&p).unwrap(), &b, "2026-06-01T20:00:00Z", 10));
        let order: Vec<(DateTime<Utc>, &str)> = f.starts.iter().map(|(t, r)| (*t, r.as_str())).collect();
        assert_eq!(
            order,
            [
                (utc("2026-06-01T20:10:00Z"), "ns/dev1-binding"),
                (utc("2026-06-01T20:20:00Z"), "ns/dev2-binding")
            ],
            "dev0 holds the only slot until it completes; then the retry; then the start"
        );
        assert_eq!(f.finish, Some(utc("2026-06-01T20:30:00Z")));
        assert_eq!(f.warnings, Vec::<String>::new());
    }

    /// Issue 37 item 5: a resource whose Resource Request is paused, or whose workflow Kratix
    /// suspended, is named — once, with its first group — since the forecast assumes it finishes.
    #[test]
    fn resources_kratix_will_not_reconcile_are_named() {
        use crate::api::kratix::{PAUSED_LABEL, WORKFLOW_SUSPENDED_LABEL};
        let p = plan(&["v1"], "v2", vec![group("dev", 1)]);
        let mut b = bindings(&[("dev", 4)]);
        let label = |b: &mut ResourceBinding, key: &str, value: &str| {
            b.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert(key.into(), value.into());
        };
        label(&mut b[1], PAUSED_LABEL, "true");
        label(&mut b[2], WORKFLOW_SUSPENDED_LABEL, "true");
        label(&mut b[3], PAUSED_LABEL, "false");
        let f = forecast(&input(&compile(&p).unwrap(), &b, "2026-06-01T20:00:00Z", 10));
        assert_eq!(
            f.warnings,
            [
                "ns/dev1 in group \"dev\" is labelled kratix.io/paused=true: Kratix's reconciliation of it is paused; an upgrade would not finish until the label goes; the forecast assumes it finishes",
                "ns/dev2 in group \"dev\" is labelled kratix.io/workflow-suspended=true: Kratix suspended its workflow; an upgrade would not finish until the label goes; the forecast assumes it finishes",
            ]
        );
    }

    #[test]
    fn warnings_say_what_spills_over_collides_or_is_frozen_for_long() {
        let mut prod = group("prod", 1);
        prod.resource_upgrade_windows = allow("0 22 * * *", "1h");
        let p = plan(&["v1"], "v2", vec![prod]);
        let b = bindings(&[("prod", 3)]);
        let c = compile(&p).unwrap();
        let mut i = input(&c, &b, "2026-06-01T21:00:00Z", 40);
        i.next_trigger = Some(utc("2026-06-02T01:30:00Z"));
        let f = forecast(&i);
        // 22:00 and 22:40 start inside the window; the third waits for the next evening.
        assert_eq!(
            times(&f.groups[0]),
            (3, Some(utc("2026-06-01T22:00:00Z")), Some(utc("2026-06-02T22:40:00Z")))
        );
        assert_eq!(
            f.groups[0].waits,
            vec![
                wait("2026-06-01T21:00:00Z", "2026-06-01T22:00:00Z", Blocked::WindowClosed),
                wait("2026-06-01T23:00:00Z", "2026-06-02T22:00:00Z", Blocked::WindowClosed),
            ]
        );
        assert_eq!(
            f.warnings,
            [
                "group \"prod\" cannot finish inside one window: it waits for the next one after it started",
                "the run would still be going at the plan's next trigger (2026-06-02T01:30:00Z): the newer run supersedes it",
            ]
        );

        let spec = crate::api::UpgradeFreezeSpec {
            reason: "holidays".into(),
            periods: vec![crate::api::FreezePeriod {
                start: Some("2026-06-01T00:00".into()),
                end: Some("2026-06-03T00:00".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let freezes = [Freeze::compile("holidays", &spec).unwrap()];
        let p = plan(&["v1"], "v2", vec![group("prod", 3)]);
        let c = compile(&p).unwrap();
        let mut i = input(&c, &b, "2026-06-01T12:00:00Z", 5);
        i.freezes = &freezes;
        let f = forecast(&i);
        assert_eq!(
            f.groups[0].waits,
            vec![wait("2026-06-01T12:00:00Z", "2026-06-03T00:00:00Z", Blocked::Frozen)]
        );
        assert_eq!(f.finish, Some(utc("2026-06-03T00:05:00Z")));
        assert_eq!(
            f.warnings,
            ["a freeze holds group \"prod\" for longer than a day (2026-06-01T12:00:00Z to 2026-06-03T00:00:00Z)"]
        );
    }

    #[test]
    fn a_run_that_cannot_progress_says_so_and_an_empty_plan_finishes_at_once() {
        let mut prod = group("prod", 1);
        // Compiles, but a deny window that never ends closes the group for good.
        prod.resource_upgrade_windows = allow("0 22 * * *", "1h").map(|mut w| {
            w.push(UpgradeWindow {
                kind: WindowKind::Deny,
                schedule: "* * * * *".into(),
                duration: "1h".into(),
                time_zone: None,
            });
            w
        });
        let p = plan(&["v1"], "v2", vec![prod]);
        let b = bindings(&[("prod", 1)]);
        let f = forecast(&input(&compile(&p).unwrap(), &b, "2026-06-01T12:00:00Z", 5));
        assert_eq!(f.finish, None);
        assert_eq!(
            f.warnings,
            ["group \"prod\" would wait for ever: nothing it waits for changes within the search horizon"]
        );
        let f = forecast(&input(&compile(&p).unwrap(), &[], "2026-06-01T12:00:00Z", 5));
        assert_eq!(
            (f.finish, f.groups[0].resources),
            (Some(utc("2026-06-01T12:00:00Z")), 0)
        );
    }

    #[test]
    fn durations_are_measured_from_the_start_annotation_to_the_success_of_the_plans_runs() {
        let done = |name: &str, by: &str, started: &str, succeeded: &str| {
            let mut b = binding("ns", name, &[], "v2", "v2");
            b.metadata.annotations = Some(
                [
                    (crate::api::UPGRADED_BY_ANNOTATION.to_string(), by.to_string()),
                    (UPGRADE_STARTED_AT_ANNOTATION.to_string(), started.to_string()),
                ]
                .into(),
            );
            let status = b.status.get_or_insert_with(Default::default);
            status.conditions = vec![crate::api::kratix::BindingCondition {
                type_: "UpgradeSucceeded".into(),
                status: "True".into(),
                last_transition_time: Some(utc(succeeded)),
                ..Default::default()
            }];
            b
        };
        let b = vec![
            done("a", "plan-1", "2026-06-01T10:00:00Z", "2026-06-01T10:02:00Z"),
            done("b", "plan-1", "2026-06-01T10:00:00Z", "2026-06-01T10:01:00Z"),
            done("c", "plan-2", "2026-06-01T11:00:00Z", "2026-06-01T11:10:00Z"),
            done(
                "other",
                "another-plan-1",
                "2026-06-01T10:00:00Z",
                "2026-06-01T10:30:00Z",
            ),
            // Succeeded before this start: an older upgrade's condition, not this one's.
            done("stale", "plan-1", "2026-06-01T10:00:00Z", "2026-05-01T10:00:00Z"),
            binding("ns", "never", &[], "v1", "v1"),
        ];
        let d = measured_durations(&b, &["plan-1".into(), "plan-2".into()]);
        assert_eq!(d, [Duration::minutes(1), Duration::minutes(2), Duration::minutes(10)]);
        assert_eq!(quantile(&d, 0.5), Some(Duration::minutes(2)));
        assert_eq!(quantile(&d, 0.9), Some(Duration::minutes(10)));
        assert_eq!(quantile(&[], 0.5), None);
    }
}
