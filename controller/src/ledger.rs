//! Upgrade budgets (spec §13.8) as the caches show them: the facts a run's pass needs about the
//! budgets selecting its plan, and the starts this process sent that the binding cache does not
//! show yet.
//!
//! In flight is derived from the cached bindings each time, never remembered. Runs of different
//! plans reconcile concurrently, though, and a start another run sent a moment ago is not in the
//! cache yet: [`Ledger`] keeps those few starts (until the cache shows the binding changed) so
//! that two runs deciding at once never hand out the same unit. The ledger is a lock plus a list
//! of in-flight requests; a new process or leader starts from caches that were listed after every
//! earlier write, so nothing in it needs to survive.

use std::time::{Duration, Instant};

use kube::ResourceExt;
use upgradeplan::api::kratix::BindingFacts;
use upgradeplan::api::{UpgradeBudget, UpgradePlan, UpgradeRun};
use upgradeplan::engine::lifecycle::Step;
use upgradeplan::engine::upgrade_budget::{self, BudgetFacts, BudgetRun};

use crate::caches::Stores;

/// How long a start sent is counted without the cache showing it: long past any watch delay;
/// a patch that failed never shows, and must not hold a unit for ever.
const PENDING_FOR: Duration = Duration::from_secs(30);

/// A start sent by this process and not yet seen in the binding cache.
struct Pending {
    run: String,
    namespace: String,
    name: String,
    /// The binding's resourceVersion before the start: any other version means the cache shows
    /// the change (the start, or something that overtook it).
    before: Option<String>,
    sent: Instant,
}

/// Starts sent under a budget and not yet in the cache; see the module's comment.
#[derive(Default)]
pub struct Ledger {
    pending: Vec<Pending>,
}

impl Ledger {
    /// Drops what the cache shows now, or is too old to matter.
    pub fn prune(&mut self, caches: &Stores) {
        self.pending.retain(|p| {
            p.sent.elapsed() < PENDING_FOR
                && caches
                    .bindings
                    .get(&p.namespace, &p.name)
                    .is_some_and(|b| b.object_version() == p.before.as_deref())
        });
    }

    fn pending_of(&self, run: &str) -> usize {
        self.pending.iter().filter(|p| p.run == run).count()
    }

    /// Forgets `run`'s starts that were decided but never sent (`withheld`).
    pub fn forget(&mut self, run: &str, withheld: &[&upgradeplan::engine::write::BindingPatch]) {
        self.pending.retain(|p| {
            p.run != run
                || !withheld
                    .iter()
                    .any(|w| w.resource.namespace == p.namespace && w.resource.binding == p.name)
        });
    }

    /// Records the starts `step` is about to send for `run`.
    pub fn record(&mut self, run: &str, step: &Step) {
        let now = Instant::now();
        self.pending.extend(step.binding_patches.iter().map(|p| Pending {
            run: run.to_string(),
            namespace: p.resource.namespace.clone(),
            name: p.resource.binding.clone(),
            before: p.resource_version.clone(),
            sent: now,
        }));
    }
}

/// The resources in flight under `budget`, as a scrape shows it (starts not yet cached aside).
pub fn in_flight(caches: &Stores, budget: &UpgradeBudget) -> usize {
    runs_under(caches, &Ledger::default(), &[budget])
        .iter()
        .filter(|(selected, _)| selected[0])
        .map(|(_, r)| r.in_flight)
        .sum()
}

/// [`upgrade_budget::runs_under`] over the caches, with this process's starts not cached yet.
pub fn runs_under(caches: &Stores, ledger: &Ledger, budgets: &[&UpgradeBudget]) -> Vec<(Vec<bool>, BudgetRun)> {
    let plans = caches.plans.state();
    let runs = caches.runs.state();
    let plans: Vec<&UpgradePlan> = plans.iter().map(AsRef::as_ref).collect();
    let runs: Vec<&UpgradeRun> = runs.iter().map(AsRef::as_ref).collect();
    upgrade_budget::runs_under(
        budgets,
        &plans,
        &runs,
        |run| caches.bindings.in_flight_of(run),
        |run| ledger.pending_of(run),
    )
}

/// The facts of `selecting` (the budgets that select `run`'s plan, by
/// [`upgrade_budget::selecting`]), each with the other active runs it caps. The caller holds the
/// ledger from here until it recorded the step's starts.
pub fn facts_for(
    caches: &Stores,
    ledger: &mut Ledger,
    run: &UpgradeRun,
    selecting: &[&UpgradeBudget],
) -> Vec<BudgetFacts> {
    ledger.prune(caches);
    let name = run.name_any();
    let runs = runs_under(caches, ledger, selecting);
    selecting
        .iter()
        .enumerate()
        .map(|(i, b)| BudgetFacts {
            name: b.name_any(),
            max: upgrade_budget::max_in_flight(b),
            others: runs
                .iter()
                .filter(|(selected, r)| selected[i] && r.name != name)
                .map(|(_, r)| r.clone())
                .collect(),
            sent: ledger.pending_of(&name),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::Ledger;
    use upgradeplan::engine::write::BindingPatch;

    /// `start()`'s patch of the binding `name` in namespace `team-a`.
    fn start_of(name: &str) -> BindingPatch {
        let mut patch = crate::writes::tests::start();
        let mut resource = (*patch.resource).clone();
        resource.binding = name.into();
        patch.resource = std::sync::Arc::new(resource);
        patch
    }

    /// Starts a pass decided but withheld (their admission ended while being sent) leave the
    /// ledger at once: they would otherwise hold units for `PENDING_FOR`.
    #[test]
    fn withheld_starts_leave_the_ledger() {
        let mut ledger = Ledger::default();
        let (a, b, c) = (start_of("a"), start_of("b"), start_of("c"));
        let run = upgradeplan::api::UpgradeRun::new("run-1", Default::default());
        let mut step = upgradeplan::engine::lifecycle::Step::new(&run, Default::default());
        step.binding_patches = vec![a.clone(), b.clone(), c.clone()];
        ledger.record("run-1", &step);
        ledger.record("run-2", &step);
        ledger.forget("run-1", &[&b, &c]);
        assert_eq!(ledger.pending_of("run-1"), 1, "a was sent");
        assert_eq!(ledger.pending_of("run-2"), 3, "another run's starts stay");
    }
}
