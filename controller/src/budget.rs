//! Upgrade budgets (spec §13.8): the budget's own reconcile, which writes its status from the
//! caches ([`crate::ledger`] derives what is in flight under it).

use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::ResourceExt;
use upgradeplan::api::{reasons, set_condition, Condition, ConditionStatus, UpgradeBudget, UpgradeBudgetStatus};
use upgradeplan::engine::upgrade_budget::{self, BudgetRun};

use crate::context::{apply_status, Ctx};
use crate::error::Result;
use crate::ledger::runs_under;

/// How often a budget's status is brought up to date (its runs change without waking it).
const STATUS_EVERY: Duration = Duration::from_secs(15);

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
        ledger.prune(&ctx.caches);
        runs_under(&ctx.caches, &ledger, &[&budget])
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
