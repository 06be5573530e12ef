//! Freeze reconciliation: the I/O shell around [`freeze::step`] (spec §13.5). Writes the
//! freeze's status (active now, its next start and end, how many plans it holds, `Ready`) and
//! wakes exactly at its next start or end. The runs and plans it holds read it
//! from the cache; this reconcile only reports on it.

use std::sync::Arc;

use kube::runtime::controller::Action;
use kube::ResourceExt;
use upgradeplan::api::{reasons, UpgradeFreeze};
use upgradeplan::engine::freeze;

use crate::context::{apply_status, Ctx};
use crate::error::Result;
use crate::events::EventType;

pub async fn reconcile(freeze: Arc<UpgradeFreeze>, ctx: Arc<Ctx>) -> Result<Action> {
    // `matchingPlans` counts from the plan cache.
    if !ctx.caches.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if !ctx.writes_status_of(&freeze) {
        return Ok(Action::await_change());
    }
    let name = freeze.name_any();
    let step = freeze::step(&freeze, &ctx.caches.plans.state(), crate::clock::now());
    if freeze.status.as_ref() != Some(&step.status) {
        apply_status::<UpgradeFreeze>(&ctx.client, &name, &step.status).await?;
    }
    if let Some(note) = step.invalid_event {
        ctx.event(freeze.as_ref(), EventType::Warning, reasons::INVALID_SPEC, note)
            .await;
    }
    Ok(match step.wake_at {
        Some(next) => Action::requeue(crate::clock::until(next)),
        None => Action::await_change(),
    })
}
