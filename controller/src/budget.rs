//! Upgrade budgets (spec §13.8): the facts a run's pass needs about the budgets selecting its
//! plan, the starts this process sent that the binding cache does not show yet, and the budget's
//! own reconcile, which writes its status.
//!
//! In flight is derived from the cached bindings of the active runs each time, never remembered.
//! Runs of different plans reconcile concurrently, though, and a start another run sent a moment
//! ago is not in the cache yet: [`Ledger`] keeps those few starts (until the cache shows the
//! binding changed) so that two runs deciding at once never hand out the same unit. The ledger
//! is a lock plus a list of in-flight requests; a new process or leader starts from caches that
//! were listed after every earlier write, so nothing in it needs to survive.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::controller::Action;
use kube::ResourceExt;
use upgradeplan::api::kratix::BindingFacts;
use upgradeplan::api::{
    reasons, set_condition, Condition, ConditionStatus, UpgradeBudget, UpgradeBudgetStatus, UpgradePlan, UpgradeRun,
};
use upgradeplan::engine::lifecycle::Step;
use upgradeplan::engine::upgrade_budget::{self, BudgetFacts, BudgetRun};

use crate::context::{apply_status, Ctx};
use crate::error::{Error, Result};

/// How long a start sent is counted without the cache showing it: long past any watch delay;
/// a patch that failed never shows, and must not hold a unit for ever.
const PENDING_FOR: Duration = Duration::from_secs(30);

/// How often a budget's status is brought up to date (its runs change without waking it).
const STATUS_EVERY: Duration = Duration::from_secs(15);

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
    fn prune(&mut self, ctx: &Ctx) {
        self.pending.retain(|p| {
            p.sent.elapsed() < PENDING_FOR
                && ctx
                    .binding(&p.namespace, &p.name)
                    .is_some_and(|b| b.object_version() == p.before.as_deref())
        });
    }

    fn pending_of(&self, run: &str) -> usize {
        self.pending.iter().filter(|p| p.run == run).count()
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
pub fn in_flight(ctx: &Ctx, budget: &UpgradeBudget) -> usize {
    runs_under(ctx, &Ledger::default(), &[budget])
        .iter()
        .filter(|(selected, _)| selected[0])
        .map(|(_, r)| r.in_flight)
        .sum()
}

/// [`upgrade_budget::runs_under`] over the caches, with this process's starts not cached yet.
fn runs_under(ctx: &Ctx, ledger: &Ledger, budgets: &[&UpgradeBudget]) -> Vec<(Vec<bool>, BudgetRun)> {
    let plans = ctx.caches.plans.state();
    let runs = ctx.caches.runs.state();
    let plans: Vec<&UpgradePlan> = plans.iter().map(AsRef::as_ref).collect();
    let runs: Vec<&UpgradeRun> = runs.iter().map(AsRef::as_ref).collect();
    upgrade_budget::runs_under(
        budgets,
        &plans,
        &runs,
        |run| ctx.caches.bindings.in_flight_of(run),
        |run| ledger.pending_of(run),
    )
}

/// The facts of `selecting` (the budgets that select `run`'s plan, by
/// [`upgrade_budget::selecting`]), each with the other active runs it caps. The caller holds the
/// ledger from here until it recorded the step's starts.
pub fn facts_for(ctx: &Ctx, ledger: &mut Ledger, run: &UpgradeRun, selecting: &[&UpgradeBudget]) -> Vec<BudgetFacts> {
    ledger.prune(ctx);
    let name = run.name_any();
    let runs = runs_under(ctx, ledger, selecting);
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

/// Writes the budget's status: in flight, the runs it caps, those it holds, `Ready`.
pub async fn reconcile(budget: Arc<UpgradeBudget>, ctx: Arc<Ctx>) -> Result<Action> {
    if !ctx.caches.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if budget.metadata.deletion_timestamp.is_some() || !ctx.writes_status_of_platform_object(budget.labels()) {
        return Ok(Action::await_change());
    }
    let runs: Vec<BudgetRun> = {
        let mut ledger = ctx.budget_ledger.lock().await;
        ledger.prune(&ctx);
        runs_under(&ctx, &ledger, &[&budget])
            .into_iter()
            .map(|(_, r)| r)
            .collect()
    };
    let name = budget.name_any();
    let state = upgrade_budget::state(&runs, &name);
    let mut status = UpgradeBudgetStatus {
        in_flight: state.in_flight as i64,
        runs: state.runs as i64,
        holding: state.holding,
        observed_generation: budget.metadata.generation,
        conditions: budget.status.as_ref().map(|s| s.conditions.clone()).unwrap_or_default(),
    };
    let now = crate::clock::now();
    let ready = Condition {
        type_: reasons::READY.into(),
        status: ConditionStatus::True,
        reason: "Enforced".into(),
        message: format!("at most {} upgrades in flight", budget.spec.max_in_flight),
        last_transition_time: now,
        observed_generation: budget.metadata.generation,
    };
    set_condition(&mut status.conditions, ready);
    if budget.status.as_ref() != Some(&status) {
        apply_status::<UpgradeBudget>(&ctx.client, &name, &status).await?;
    }
    Ok(Action::requeue(STATUS_EVERY))
}

/// The object's key in [`Ctx::retries`].
pub fn retry_key(budget: &UpgradeBudget) -> String {
    format!("budget/{}", budget.name_any())
}

pub fn error_policy(budget: Arc<UpgradeBudget>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.retries.next_delay(&retry_key(&budget));
    tracing::warn!(budget = %budget.name_any(), error = %err, kind = err.metric_label(), retry_in = ?delay, "budget reconcile failed; retrying");
    Action::requeue(delay)
}
