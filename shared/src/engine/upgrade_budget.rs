//! Upgrade budgets (spec §13.8): one cap on the resource upgrades in flight across every plan a
//! budget selects, shared fairly between the runs waiting for it.
//!
//! Nothing is remembered: a budget's in flight is derived, each pass, from the live bindings of
//! the runs of the plans it selects — active, superseded or ended — (verifying and retries
//! included), so the cap holds across restarts and leader changes. A run's share is decided by this one function for the
//! controller, `status`, `explain` and the forecast.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::freeze::selects_plan;
use crate::api::kratix::{BindingFacts, MANUAL_RECONCILIATION_LABEL, UPGRADE_FAILED};
use crate::api::{
    find_condition, reasons, ConditionStatus, UpgradeBudget, UpgradePlan, UpgradeRun, UPGRADED_BY_ANNOTATION,
    UPGRADED_TO_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION,
};

/// How soon a run a budget holds looks again: the unit it waits for is freed by another plan's
/// upgrade, whose binding events wake that plan's run only.
pub const RECHECK: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// The budgets among `budgets` that select a plan of `promise` labelled `labels`, by name.
pub fn selecting<'b>(
    budgets: &'b [Arc<UpgradeBudget>],
    promise: &str,
    labels: &BTreeMap<String, String>,
) -> Vec<&'b UpgradeBudget> {
    let mut selected: Vec<&UpgradeBudget> = budgets
        .iter()
        .map(|b| &**b)
        .filter(|b| selects(b, promise, labels))
        .collect();
    selected.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    selected
}

/// Whether `budget` selects a plan of `promise` labelled `labels`: its `planSelector` (omitted or
/// `{}`: every plan) and its `promises` (omitted: every Promise), as freezes select plans.
pub fn selects(budget: &UpgradeBudget, promise: &str, labels: &BTreeMap<String, String>) -> bool {
    selects_plan(
        budget.spec.plan_selector.as_ref(),
        budget.spec.promises.as_deref(),
        promise,
        labels,
    )
}

/// A budget's `maxInFlight` as a count (the schema keeps it at 1 or more; anything else admits
/// nothing rather than everything).
pub fn max_in_flight(budget: &UpgradeBudget) -> usize {
    usize::try_from(budget.spec.max_in_flight).unwrap_or(0)
}

/// The run Kratix is working on `b` for, as the binding alone tells: the run that started it
/// (`upgraded-by`), while Kratix has not reported the upgrade's end since (success with the
/// version applied, or a failure with no retry asked). The run's own evaluation is exact
/// (deadlines, health checks); this is how the other runs under a budget are counted, erring
/// towards in flight: a resource past its `progressDeadline` stays counted until Kratix ends it.
/// It reads the binding alone, so the controller's binding cache keeps a count per run as
/// bindings change ([`in_flight_by_run`] for a list), and a pass never walks every binding.
pub fn kratix_working_run(b: &dyn BindingFacts) -> Option<&str> {
    let run = b.annotation(UPGRADED_BY_ANNOTATION)?;
    if b.being_deleted() {
        return None;
    }
    // Moved on by someone else since the run's patch: no longer the run's upgrade (a binding
    // pinned to a version Kratix cannot run would otherwise hold a unit for ever). A binding
    // patched before the annotation existed is judged as before.
    if b.annotation(UPGRADED_TO_ANNOTATION)
        .is_some_and(|to| to != b.spec_version())
    {
        return None;
    }
    // Asked to run again (a retry, or a revert to the version it had applied): in flight from the
    // moment the label is added until Kratix takes the request (spec §8).
    if b.label(MANUAL_RECONCILIATION_LABEL).is_some() {
        return Some(run);
    }
    let started = b
        .annotation(UPGRADE_STARTED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp());
    let condition = b.upgrade_condition();
    let since_start =
        |c: &crate::api::kratix::UpgradeCondition<'_>| match (c.last_transition_time.map(|t| t.timestamp()), started) {
            (Some(at), Some(started)) => at >= started,
            _ => false,
        };
    let failed = condition
        .as_ref()
        .is_some_and(|c| c.status == "False" && c.reason == UPGRADE_FAILED && since_start(c))
        && b.failed_version() == Some(b.spec_version());
    if failed {
        return None;
    }
    let running = condition.as_ref().is_some_and(|c| c.status == "Unknown");
    (b.last_applied_version() != b.spec_version() || running).then_some(run)
}

/// The resources Kratix works on per run among `bindings` ([`kratix_working_run`]).
pub fn in_flight_by_run<'b>(bindings: impl IntoIterator<Item = &'b dyn BindingFacts>) -> BTreeMap<String, usize> {
    let mut by_run = BTreeMap::new();
    for run in bindings.into_iter().filter_map(kratix_working_run) {
        *by_run.entry(run.to_string()).or_insert(0) += 1;
    }
    by_run
}

/// An active run under the budgets: not ended, not dormant — it may wait for units, and its
/// verifying resources count too. One not shown admitted yet is active: its first starts may be
/// out before its status is seen. (A run that stood down counts only what Kratix still works on
/// for it: [`runs_under`].)
pub fn counts_against_budgets(run: &UpgradeRun) -> bool {
    !run.status.as_ref().is_some_and(|s| s.state.is_terminal()) && !super::admission::is_dormant(run)
}

/// The runs of the plans any of `budgets` selects that count against them, each with which of
/// `budgets` select its plan (by index) and its resources in flight: `working_of` it (its
/// bindings Kratix works on for it, [`kratix_working_run`]), the verifying its status records,
/// and `sent_of` it (starts sent and not yet in the caller's view). Every active run counts; a
/// superseded or ended run counts while Kratix still works on upgrades it started (spec §13.8:
/// a supersede or a cancel never frees units Kratix is still working on), and never waits. One
/// walk over the plans serves every budget: the controller's pass and status, and the plugin's
/// `budgets`.
pub fn runs_under(
    budgets: &[&UpgradeBudget],
    plans: &[&UpgradePlan],
    runs: &[&UpgradeRun],
    working_of: impl Fn(&str) -> usize,
    sent_of: impl Fn(&str) -> usize,
) -> Vec<(Vec<bool>, BudgetRun)> {
    let mut under = Vec::new();
    for plan in plans {
        let promise = &plan.spec.promise_ref.name;
        let labels = plan.metadata.labels.clone().unwrap_or_default();
        let selected: Vec<bool> = budgets.iter().map(|b| selects(b, promise, &labels)).collect();
        if !selected.contains(&true) {
            continue;
        }
        let plan_name = plan.metadata.name.as_deref().unwrap_or_default();
        for run in runs.iter().filter(|r| r.spec.upgrade_plan_ref.name == plan_name) {
            let name = run.metadata.name.as_deref().unwrap_or_default();
            let working = working_of(name) + sent_of(name);
            if counts_against_budgets(run) {
                under.push((selected.clone(), BudgetRun::of(run, working)));
            } else if working > 0 {
                under.push((selected.clone(), BudgetRun::stood_down(run, working)));
            }
        }
    }
    under
}

/// A run's resources in flight as its own evaluation counts them (`total`), and how many of those
/// Kratix works on for another run (`of_others`, by that run's name: the upgrades a superseded
/// run started that this run's snapshot caught in flight). A budget counts those under the run
/// that started them when it counts that run, and under this run otherwise: each once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnInFlight {
    pub total: usize,
    pub of_others: BTreeMap<String, usize>,
}

impl OwnInFlight {
    /// `total` in flight, none of them started by another run.
    pub fn all_own(total: usize) -> OwnInFlight {
        OwnInFlight {
            total,
            of_others: BTreeMap::new(),
        }
    }

    /// Run `run`'s `in_flight` bindings (as the run judges them), by the run Kratix works on each
    /// for ([`kratix_working_run`]).
    pub fn of<'b>(run: &str, in_flight: impl IntoIterator<Item = Option<&'b dyn BindingFacts>>) -> OwnInFlight {
        let mut own = OwnInFlight::default();
        for b in in_flight {
            own.total += 1;
            if let Some(other) = b.and_then(kratix_working_run).filter(|r| *r != run) {
                *own.of_others.entry(other.to_string()).or_insert(0) += 1;
            }
        }
        own
    }

    /// The run's own part under `budget`: those counted under another run of its list left out.
    pub fn under(&self, budget: &BudgetFacts) -> usize {
        let elsewhere: usize = budget.others.iter().filter_map(|o| self.of_others.get(&o.name)).sum();
        self.total.saturating_sub(elsewhere)
    }
}

/// Another run under a budget, as a run's step sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRun {
    pub name: String,
    /// Not ended, not superseded (spec §13.8's active runs): it may wait for units. A run that
    /// stood down counts only its upgrades Kratix still works on.
    pub active: bool,
    /// Its admission: the oldest admitted is served first (spec §13.8).
    pub admitted: DateTime<Utc>,
    /// Its resources in flight.
    pub in_flight: usize,
    /// The budget it waits for a unit of, as its `Budgeted` condition names it ([`held_by`]).
    pub held_by: Option<String>,
}

impl BudgetRun {
    /// `run`, with `in_flight` of its resources in flight by its bindings ([`kratix_working_run`])
    /// and those its last status says are being verified.
    pub fn of(run: &UpgradeRun, working: usize) -> BudgetRun {
        let status = run.status.as_ref();
        let verifying = status
            .map(|s| {
                s.rollout_groups
                    .iter()
                    .map(|g| g.verifying.max(0) as usize)
                    .sum::<usize>()
            })
            .unwrap_or(0);
        BudgetRun {
            name: run.metadata.name.clone().unwrap_or_default(),
            active: true,
            admitted: super::admission::admitted_at(run),
            in_flight: working + verifying,
            held_by: held_by(run).map(str::to_string),
        }
    }

    /// `run`, superseded or ended, with `working` of its upgrades still in Kratix's hands: they
    /// hold units; it waits for none (whatever its last status said).
    pub fn stood_down(run: &UpgradeRun, working: usize) -> BudgetRun {
        BudgetRun {
            name: run.metadata.name.clone().unwrap_or_default(),
            active: false,
            admitted: super::admission::admitted_at(run),
            in_flight: working,
            held_by: None,
        }
    }

    /// It waits for a unit of some budget: it counts among the waiting of every budget it is
    /// under, which keeps shares fair when two budgets overlap.
    pub fn waiting(&self) -> bool {
        self.held_by.is_some()
    }
}

/// The budget a run waits for: the one its `Budgeted=True` condition names (the message
/// [`texts::budgeted`] writes).
pub fn held_by(run: &UpgradeRun) -> Option<&str> {
    let c = find_condition(&run.status.as_ref()?.conditions, reasons::BUDGETED)?;
    (c.status == ConditionStatus::True)
        .then(|| texts::budget_named(&c.message))
        .flatten()
}

/// One budget that selects a run's plan, with the other runs it caps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetFacts {
    pub name: String,
    pub max: usize,
    /// The runs of the plans it selects that count against it ([`runs_under`]), other than the
    /// run deciding.
    pub others: Vec<BudgetRun>,
    /// The deciding run's own starts sent and not yet in the caller's view of the bindings: in
    /// flight, though the run's evaluation cannot see them yet.
    pub sent: usize,
}

/// What a budget grants a run now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub budget: String,
    /// Resources in flight under the budget, the run's own included.
    pub in_flight: usize,
    pub max: usize,
    /// Units the run may take now.
    pub units: usize,
}

impl Grant {
    /// The `Budgeted` condition's message: `UpgradeBudget "<name>": <n>/<max> in flight`.
    pub fn message(&self) -> String {
        texts::budgeted(&self.budget, self.in_flight, self.max)
    }
}

/// The units `budget` grants run `run` (admitted at `admitted`, `own_in_flight` of its resources
/// in flight) when it wants to start: the free units (`max` − in flight) shared between the
/// waiting runs and this one, each at most its share (free ÷ waiting, rounded up), the oldest
/// admitted first (spec §13.8).
pub fn grant(budget: &BudgetFacts, run: &str, admitted: DateTime<Utc>, own_in_flight: usize) -> Grant {
    let others = budget.others.iter().filter(|o| o.name != run);
    let in_flight = own_in_flight + budget.sent + others.clone().map(|o| o.in_flight).sum::<usize>();
    let free = budget.max.saturating_sub(in_flight);
    let waiting = others
        .filter(|o| o.waiting())
        .map(|o| (o.admitted, o.name.as_str()))
        .chain([(admitted, run)]);
    let units = shares(free, waiting)
        .into_iter()
        .find(|(name, _)| *name == run)
        .map_or(0, |(_, units)| units);
    Grant {
        budget: budget.name.clone(),
        in_flight,
        max: budget.max,
        units,
    }
}

/// How `free` units go to the `waiting` runs (each with its admission): at most a share each
/// (free ÷ waiting, rounded up), the oldest admitted first; in that order.
fn shares<'a>(free: usize, waiting: impl Iterator<Item = (DateTime<Utc>, &'a str)>) -> Vec<(&'a str, usize)> {
    let mut waiting: Vec<(DateTime<Utc>, &str)> = waiting.collect();
    waiting.sort();
    let share = free.div_ceil(waiting.len().max(1));
    let mut left = free;
    waiting
        .into_iter()
        .map(|(_, name)| {
            let given = share.min(left);
            left -= given;
            (name, given)
        })
        .collect()
}

/// Every budget's grant, by budget name; the run may start at most the least of their units.
pub fn grants(budgets: &[BudgetFacts], run: &str, admitted: DateTime<Utc>, own: &OwnInFlight) -> Vec<Grant> {
    budgets.iter().map(|b| grant(b, run, admitted, own.under(b))).collect()
}

/// The units a run may take from all its budgets (`None`: no budget selects its plan).
pub fn units(grants: &[Grant]) -> Option<usize> {
    grants.iter().map(|g| g.units).min()
}

/// The budget that rations the run: the one granting the fewest units (the first by name of
/// those), when that is fewer than the `wanted` starts nothing else holds. The run then waits for
/// it (`Budgeted=True/BudgetExhausted`), and the other runs count it among the waiting.
pub fn rationing(grants: &[Grant], wanted: usize) -> Option<&Grant> {
    grants.iter().min_by_key(|g| g.units).filter(|g| g.units < wanted)
}

/// The runs to look again after a run's pass (`own_in_flight` of its resources in flight,
/// `starts` going out now): in every budget that still has free units then, the waiting runs
/// those units would go to ([`shares`]), and no others — fifty runs waiting for one freed unit
/// are one pass, not fifty. A waiting run takes what is free when it looks, so the wakes end
/// once nothing is free or nobody waits.
pub fn to_wake(budgets: &[BudgetFacts], own: &OwnInFlight, starts: usize) -> Vec<String> {
    let mut wake: Vec<String> = budgets
        .iter()
        .flat_map(|b| {
            let in_flight = own.under(b) + starts + b.sent + b.others.iter().map(|o| o.in_flight).sum::<usize>();
            let waiting = b
                .others
                .iter()
                .filter(|o| o.waiting())
                .map(|o| (o.admitted, o.name.as_str()));
            shares(b.max.saturating_sub(in_flight), waiting)
                .into_iter()
                .filter(|(_, units)| *units > 0)
                .map(|(name, _)| name.to_string())
        })
        .collect();
    wake.sort();
    wake.dedup();
    wake
}

/// A budget's status fields from the runs of the plans it selects that count against it (the
/// budget's own reconcile writes them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BudgetState {
    pub in_flight: usize,
    pub runs: usize,
    /// The runs it holds, oldest admitted first.
    pub holding: Vec<String>,
}

/// `runs`: the runs of the plans budget `budget` selects that count against it ([`runs_under`]);
/// `runs` counts the active ones, and it holds those that wait for it.
pub fn state(runs: &[BudgetRun], budget: &str) -> BudgetState {
    let mut holding: Vec<&BudgetRun> = runs.iter().filter(|r| r.held_by.as_deref() == Some(budget)).collect();
    holding.sort_by(|a, b| (a.admitted, &a.name).cmp(&(b.admitted, &b.name)));
    BudgetState {
        in_flight: runs.iter().map(|r| r.in_flight).sum(),
        runs: runs.iter().filter(|r| r.active).count(),
        holding: holding.into_iter().map(|r| r.name.clone()).collect(),
    }
}

pub mod texts {
    /// `UpgradeBudget "<name>": <n>/<max> in flight` (spec §13.8).
    pub fn budgeted(budget: &str, in_flight: usize, max: usize) -> String {
        format!("UpgradeBudget \"{budget}\": {in_flight}/{max} in flight")
    }

    /// The budget a [`budgeted`] message names (a Kubernetes name has no quote in it).
    pub fn budget_named(message: &str) -> Option<&str> {
        let rest = message.strip_prefix("UpgradeBudget \"")?;
        rest.split_once("\":").map(|(name, _)| name)
    }

    /// The `Budgeted` condition once no budget holds the run.
    pub fn within_budget(budgets: &[String]) -> String {
        format!("within UpgradeBudget {}", budgets.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kratix::ResourceBinding;
    use crate::engine::snapshot::tests::binding;

    fn at(minute: u32) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(&format!("2026-06-01T10:{minute:02}:00Z"))
            .unwrap()
            .with_timezone(&Utc)
    }

    fn other(name: &str, minute: u32, in_flight: usize, waiting: bool) -> BudgetRun {
        BudgetRun {
            active: true,
            name: name.into(),
            admitted: at(minute),
            in_flight,
            held_by: waiting.then(|| "saturday".into()),
        }
    }

    fn budget(max: usize, others: Vec<BudgetRun>) -> BudgetFacts {
        BudgetFacts {
            name: "saturday".into(),
            max,
            others,
            sent: 0,
        }
    }

    #[test]
    fn shares_table() {
        // (case, budget, the run's admission minute, its own in flight, units, in flight)
        let cases: Vec<(&str, BudgetFacts, u32, usize, usize, usize)> = vec![
            ("alone: every free unit", budget(5, vec![]), 10, 1, 4, 1),
            ("alone and full", budget(2, vec![]), 10, 2, 0, 2),
            (
                "another run's in flight counts, waiting or not",
                budget(5, vec![other("b", 5, 3, false)]),
                10,
                1,
                1,
                4,
            ),
            (
                "two waiting, even split",
                budget(4, vec![other("b", 5, 0, true)]),
                10,
                0,
                2,
                0,
            ),
            (
                "odd units: the older takes the rounded-up share, the newer the rest",
                budget(3, vec![other("b", 5, 0, true)]),
                10,
                0,
                1,
                0,
            ),
            (
                "odd units, this run older",
                budget(3, vec![other("b", 15, 0, true)]),
                10,
                0,
                2,
                0,
            ),
            (
                "one unit, three waiting: the oldest only",
                budget(1, vec![other("b", 5, 0, true), other("c", 6, 0, true)]),
                10,
                0,
                0,
                0,
            ),
            (
                "one unit, three waiting, this run the oldest",
                budget(1, vec![other("b", 15, 0, true), other("c", 16, 0, true)]),
                10,
                0,
                1,
                0,
            ),
            (
                "a run not waiting takes no share",
                budget(4, vec![other("b", 5, 1, false)]),
                10,
                0,
                3,
                1,
            ),
            (
                "over the cap (a lowered max): nothing",
                budget(2, vec![other("b", 5, 3, true)]),
                10,
                0,
                0,
                3,
            ),
            (
                "the run itself among the others is not counted twice",
                budget(4, vec![other("a", 10, 9, true)]),
                10,
                1,
                3,
                1,
            ),
            (
                "the run's own starts not yet seen are in flight, not a share",
                BudgetFacts {
                    sent: 2,
                    ..budget(4, vec![other("b", 5, 0, true)])
                },
                10,
                0,
                1,
                2,
            ),
            (
                "same admission: by name",
                budget(1, vec![other("b", 10, 0, true)]),
                10,
                0,
                1,
                0,
            ),
        ];
        for (case, b, minute, own, units, in_flight) in cases {
            let g = grant(&b, "a", at(minute), own);
            assert_eq!((g.units, g.in_flight), (units, in_flight), "{case}");
        }
    }

    /// The literal rule against every small case: the units granted to the waiting runs, each
    /// asking alone over the same facts, never exceed the free units, none exceeds its share,
    /// and an older run never gets less than a newer one.
    #[test]
    fn shares_never_exceed_the_free_units_and_favour_the_oldest() {
        let mut checked = 0;
        for max in 1..7usize {
            for waiting in 1..5usize {
                for busy in 0..8usize {
                    let runs: Vec<BudgetRun> = (0..waiting)
                        .map(|i| other(&format!("r{i}"), i as u32, usize::from(i == 0) * busy, true))
                        .collect();
                    let facts = budget(max, runs.clone());
                    let given: Vec<usize> = runs
                        .iter()
                        .map(|r| grant(&facts, &r.name, r.admitted, r.in_flight).units)
                        .collect();
                    let free = max.saturating_sub(busy);
                    let share = free.div_ceil(waiting);
                    assert!(
                        given.iter().sum::<usize>() <= free,
                        "max {max} waiting {waiting} busy {busy}: {given:?}"
                    );
                    assert!(given.iter().all(|g| *g <= share), "share {share}: {given:?}");
                    assert!(given.windows(2).all(|w| w[0] >= w[1]), "oldest first: {given:?}");
                    assert_eq!(
                        given.iter().sum::<usize>(),
                        free.min(share * waiting),
                        "every free unit given"
                    );
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 6 * 4 * 8);
    }

    #[test]
    fn the_least_grant_holds_and_names_its_budget() {
        let a = grant(&budget(4, vec![]), "r", at(0), 1);
        let b = grant(
            &BudgetFacts {
                name: "kratix".into(),
                max: 1,
                others: vec![other("x", 1, 1, false)],
                sent: 0,
            },
            "r",
            at(0),
            0,
        );
        let grants = vec![a, b];
        assert_eq!(units(&grants), Some(0));
        assert_eq!(
            rationing(&grants, 1).map(Grant::message).as_deref(),
            Some("UpgradeBudget \"kratix\": 1/1 in flight")
        );
        assert_eq!(rationing(&grants, 0), None, "nothing wanted: nothing rationed");
        let one_each = vec![grant(&budget(2, vec![]), "r", at(0), 1)];
        assert_eq!(rationing(&one_each, 1), None, "granted what it wants");
        assert_eq!(
            rationing(&one_each, 3).map(|g| g.units),
            Some(1),
            "fewer than it wants: it waits for the rest"
        );
        assert_eq!(units(&[]), None, "no budget: no cap");
    }

    #[test]
    fn the_waiting_runs_the_free_units_go_to_are_woken() {
        let others = vec![other("b", 5, 1, true), other("c", 6, 0, false), other("d", 7, 0, true)];
        // (case, max, own in flight, starts, woken)
        let cases: Vec<(&str, usize, usize, usize, Vec<&str>)> = vec![
            ("two units left: one each", 5, 1, 1, vec!["b", "d"]),
            (
                "one unit left: the oldest admitted waiting run only",
                4,
                1,
                1,
                vec!["b"],
            ),
            ("this pass took the last unit", 4, 1, 2, vec![]),
            ("full before the pass", 2, 1, 0, vec![]),
            (
                "this run ended (nothing in flight), units free",
                3,
                0,
                0,
                vec!["b", "d"],
            ),
        ];
        for (case, max, own, starts, woken) in cases {
            assert_eq!(
                to_wake(&[budget(max, others.clone())], &OwnInFlight::all_own(own), starts),
                woken,
                "{case}"
            );
        }
        let overlapping = vec![budget(9, others.clone()), budget(9, vec![other("b", 5, 0, true)])];
        assert_eq!(
            to_wake(&overlapping, &OwnInFlight::default(), 0),
            vec!["b", "d"],
            "each run once"
        );
        assert!(to_wake(&[], &OwnInFlight::default(), 0).is_empty(), "no budget: nobody");
    }

    #[test]
    fn a_budget_holds_the_runs_that_wait_for_it_and_no_other() {
        let runs = vec![
            other("b", 5, 1, true),
            other("a", 3, 2, true),
            BudgetRun {
                held_by: Some("kratix".into()),
                ..other("c", 1, 0, true)
            },
            other("d", 0, 1, false),
        ];
        assert_eq!(
            state(&runs, "saturday"),
            BudgetState {
                in_flight: 4,
                runs: 4,
                holding: vec!["a".into(), "b".into()],
            }
        );
        let message = texts::budgeted("saturday-night", 200, 200);
        assert_eq!(texts::budget_named(&message), Some("saturday-night"));
        assert_eq!(texts::budget_named("within UpgradeBudget x"), None);
    }

    #[test]
    fn the_runs_under_budgets_and_their_upgrades_in_flight() {
        use crate::api::{RunState, UpgradeBudgetSpec, UpgradePlanSpec, UpgradeRunStatus};
        let plan = |name: &str, promise: &str, tier: &str| {
            let mut p = UpgradePlan::new(name, UpgradePlanSpec::default());
            p.spec.promise_ref.name = promise.into();
            p.metadata.labels = Some([("tier".to_string(), tier.to_string())].into());
            p
        };
        let run = |name: &str, plan: &str, state: Option<RunState>| {
            let mut r: UpgradeRun = serde_json::from_value(serde_json::json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
                "metadata": {"name": name, "creationTimestamp": "2026-06-01T10:00:00Z"},
                "spec": {"upgradePlanRef": {"name": plan}}
            }))
            .unwrap();
            r.status = state.map(|state| UpgradeRunStatus {
                state,
                ..Default::default()
            });
            r
        };
        let every = UpgradeBudget::new(
            "every",
            UpgradeBudgetSpec {
                max_in_flight: 10,
                ..Default::default()
            },
        );
        let redis_only = UpgradeBudget::new(
            "redis",
            UpgradeBudgetSpec {
                max_in_flight: 2,
                promises: Some(vec!["redis".into()]),
                ..Default::default()
            },
        );
        let plans = [plan("pg", "postgres", "db"), plan("rd", "redis", "cache")];
        let mut superseded = run("rd-old", "rd", Some(RunState::InProgress));
        superseded.status.as_mut().unwrap().superseded_by = Some("rd-1".into());
        // Its last status said a budget held it: a run that stood down waits for nothing.
        superseded
            .status
            .as_mut()
            .unwrap()
            .conditions
            .push(crate::api::Condition {
                type_: reasons::BUDGETED.into(),
                status: ConditionStatus::True,
                reason: "BudgetExhausted".into(),
                message: texts::budgeted("redis", 2, 2),
                last_transition_time: at(0),
                observed_generation: None,
            });
        let runs = [
            run("pg-1", "pg", Some(RunState::InProgress)),
            run("pg-0", "pg", Some(RunState::Completed)),
            run("pg-cancelled", "pg", Some(RunState::Cancelled)),
            run("rd-1", "rd", None),
            superseded,
        ];
        let bindings = [
            started(binding("ns", "a", &[], "v1", "v2"), "pg-1", "2026-06-01T10:00:00Z"),
            started(binding("ns", "b", &[], "v2", "v2"), "pg-1", "2026-06-01T10:00:00Z"),
            started(
                binding("ns", "c", &[], "v1", "v2"),
                "pg-cancelled",
                "2026-06-01T09:00:00Z",
            ),
            started(binding("ns", "d", &[], "v1", "v2"), "rd-old", "2026-06-01T09:00:00Z"),
            started(binding("ns", "e", &[], "v1", "v2"), "rd-old", "2026-06-01T09:00:00Z"),
        ];
        let working = in_flight_by_run(bindings.iter().map(|b| b as &dyn BindingFacts));
        assert_eq!(
            working,
            BTreeMap::from([
                ("pg-1".to_string(), 1),
                ("pg-cancelled".to_string(), 1),
                ("rd-old".to_string(), 2)
            ])
        );
        let under = runs_under(
            &[&every, &redis_only],
            &plans.iter().collect::<Vec<_>>(),
            &runs.iter().collect::<Vec<_>>(),
            |run| working.get(run).copied().unwrap_or(0),
            |run| usize::from(run == "rd-1") * 2,
        );
        let seen: Vec<(Vec<bool>, &str, bool, usize, bool)> = under
            .iter()
            .map(|(selected, r)| (selected.clone(), r.name.as_str(), r.active, r.in_flight, r.waiting()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (vec![true, false], "pg-1", true, 1, false),
                // A cancel never frees the units Kratix still works on; an ended run with none
                // in flight is not listed.
                (vec![true, false], "pg-cancelled", false, 1, false),
                // Not shown admitted yet: its starts just sent count.
                (vec![true, true], "rd-1", true, 2, false),
                // A supersede neither.
                (vec![true, true], "rd-old", false, 2, false),
            ],
            "every run whose upgrades Kratix works on counts; only the active ones may wait"
        );
        let redis: Vec<BudgetRun> = under
            .iter()
            .filter(|(selected, _)| selected[1])
            .map(|(_, r)| r.clone())
            .collect();
        assert_eq!(
            state(&redis, "redis"),
            BudgetState {
                in_flight: 4,
                runs: 1,
                holding: vec![]
            },
            "the budget's status: all in flight, its active runs"
        );
    }

    /// A run superseded with 10 upgrades in flight under a budget of 10: the new run's snapshot
    /// caught them in flight and counts them as its own, and the budget counts them under the
    /// superseded run (their `upgraded-by`): once, so the new run starts nothing until they end
    /// (a budget of 10 once ended with 20 in flight).
    #[test]
    fn upgrades_of_a_superseded_run_hold_units_once() {
        let bindings: Vec<ResourceBinding> = (0..10)
            .map(|i| {
                started(
                    binding("ns", &format!("r{i}"), &[], "v1", "v2"),
                    "old",
                    "2026-06-01T10:00:00Z",
                )
            })
            .collect();
        let own = OwnInFlight::of("new", bindings.iter().map(|b| Some(b as &dyn BindingFacts)));
        assert_eq!(
            own,
            OwnInFlight {
                total: 10,
                of_others: BTreeMap::from([("old".to_string(), 10)])
            }
        );
        let mut stood_down = other("old", 0, 10, false);
        stood_down.active = false;
        let with_old = budget(10, vec![stood_down]);
        assert_eq!(own.under(&with_old), 0, "counted under the run that started them");
        assert_eq!(grant(&with_old, "new", at(5), own.under(&with_old)).in_flight, 10);
        assert_eq!(
            units(&grants(std::slice::from_ref(&with_old), "new", at(5), &own)),
            Some(0)
        );
        // The run that started them is gone (deleted by its history limit): counted here.
        let without = budget(10, vec![]);
        assert_eq!(
            units(&grants(std::slice::from_ref(&without), "new", at(5), &own)),
            Some(0)
        );
    }

    fn upgraded_to(mut b: ResourceBinding, to: &str) -> ResourceBinding {
        let a = b.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(UPGRADED_TO_ANNOTATION.into(), to.into());
        b
    }

    fn started(mut b: ResourceBinding, run: &str, at: &str) -> ResourceBinding {
        let a = b.metadata.annotations.get_or_insert_with(Default::default);
        a.insert(UPGRADED_BY_ANNOTATION.into(), run.into());
        a.insert(UPGRADE_STARTED_AT_ANNOTATION.into(), at.into());
        b
    }

    #[test]
    fn kratix_working_table() {
        use crate::engine::run::tests::with_condition;
        let start = "2026-06-01T10:00:00Z";
        let mut retry = with_condition(
            started(binding("ns", "r", &[], "v1", "v2"), "up", start),
            "False",
            UPGRADE_FAILED,
            "2026-06-01T10:05:00Z",
            Some("v2"),
        );
        retry
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(MANUAL_RECONCILIATION_LABEL.into(), "true".into());
        let cases: Vec<(&str, ResourceBinding, bool)> = vec![
            (
                "asked, not applied",
                started(binding("ns", "r", &[], "v1", "v2"), "up", start),
                true,
            ),
            (
                "applied",
                started(binding("ns", "r", &[], "v2", "v2"), "up", start),
                false,
            ),
            (
                "another run's",
                started(binding("ns", "r", &[], "v1", "v2"), "other", start),
                false,
            ),
            ("never started", binding("ns", "r", &[], "v1", "v2"), false),
            (
                "moved to v2 by the run, at v2",
                upgraded_to(started(binding("ns", "r", &[], "v1", "v2"), "up", start), "v2"),
                true,
            ),
            (
                "moved to v2 by the run, pinned to v3 by someone since: theirs",
                upgraded_to(started(binding("ns", "r", &[], "v1", "v3"), "up", start), "v2"),
                false,
            ),
            (
                "failed since the start",
                with_condition(
                    started(binding("ns", "r", &[], "v1", "v2"), "up", start),
                    "False",
                    UPGRADE_FAILED,
                    "2026-06-01T10:05:00Z",
                    Some("v2"),
                ),
                false,
            ),
            (
                "a failure older than the start: Kratix works on the new request",
                with_condition(
                    started(binding("ns", "r", &[], "v1", "v2"), "up", start),
                    "False",
                    UPGRADE_FAILED,
                    "2026-06-01T09:05:00Z",
                    Some("v2"),
                ),
                true,
            ),
            ("a retry asked", retry, true),
            (
                "re-running the applied version",
                with_condition(
                    started(binding("ns", "r", &[], "v1", "v1"), "up", start),
                    "Unknown",
                    "UpgradeInProgress",
                    "2026-06-01T10:01:00Z",
                    None,
                ),
                true,
            ),
        ];
        for (case, b, want) in cases {
            assert_eq!(kratix_working_run(&b) == Some("up"), want, "{case}");
        }
    }
}
