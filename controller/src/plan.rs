//! Plan reconciliation: the I/O shell around [`lifecycle::plan::step`] (spec §3, §6). Gathers the
//! plan's runs and Promise from the caches, creates the run a trigger asks for, writes the status,
//! publishes the events, and wakes exactly at the next trigger or window change.

use std::sync::Arc;

use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use upgradeplan::api::{UpgradePlan, UpgradeRun};
use upgradeplan::engine::admission::{new_run, NewRun};
use upgradeplan::engine::lifecycle::{
    self,
    plan::{PlanEvent, ScheduledRun},
};

use crate::context::{apply_status_at, Ctx};
use crate::error::{Error, Result};
use crate::events::EventType;

pub async fn reconcile(plan: Arc<UpgradePlan>, ctx: Arc<Ctx>) -> Result<Action> {
    if !ctx.caches.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if plan.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = plan.name_any();
    let runs = ctx.runs_of(&name);
    let runs: Vec<&UpgradeRun> = runs.iter().map(|r| r.as_ref()).collect();
    let promise_found = ctx
        .caches
        .promises
        .get(&ObjectRef::new(&plan.spec.promise_ref.name))
        .is_some();
    let step = lifecycle::plan::step(&plan, &runs, promise_found, ctx.as_ref(), crate::clock::now());

    if let Some(run) = &step.create_run {
        // Refused, the trigger is retried under backoff: the status written leaves it unserviced
        // and names it as nextRunAt; the gauge and a Warning event say so meanwhile.
        if let Err(e) = create_scheduled_run(&plan, run, &ctx).await {
            ctx.metrics.set_run_create_failing(&name, true);
            publish(&ctx, &plan, PlanEvent::run_create_failed(run, &e.short())).await;
            let refused = step.status_when_refused(plan.status.as_ref());
            if plan.status.as_ref() != Some(&refused) {
                let version = plan.resource_version();
                let written = apply_status_at::<UpgradePlan>(&ctx.client, &name, &refused, version.as_deref()).await;
                if let Err(write) = written {
                    tracing::warn!(plan = %name, error = %write, "status of a refused trigger not written");
                }
            }
            return Err(e);
        }
    }
    ctx.metrics.set_run_create_failing(&name, false);
    // Finished runs beyond runHistoryLimit: each run's own reconcile then releases it and its
    // snapshot (a finished run's finalizer lets go at once).
    let runs_api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    for run in &step.delete_runs {
        match runs_api.delete(run, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(plan = %name, run = %run, "finished run deleted: beyond runHistoryLimit"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(Error::Kube(e)),
        }
    }
    // Written on the plan as read: `deletedRuns` adds to what the status held, so a status
    // computed from a stale copy would drop what a newer write kept (spec §14.2).
    if plan.status.as_ref() != Some(&step.status) {
        let version = plan.resource_version();
        match apply_status_at::<UpgradePlan>(&ctx.client, &name, &step.status, version.as_deref()).await {
            Err(Error::Kube(kube::Error::Api(e))) if e.code == 409 => {
                tracing::debug!(plan = %name, "status computed from a stale copy of the plan; looking again");
                return Ok(Action::requeue(crate::context::CACHE_WAIT));
            }
            other => other?,
        }
    }
    for e in step.events {
        if e.reason == lifecycle::plan::events::TRIGGER_MISSED {
            ctx.metrics.triggers_missed_total.with_label_values(&[&name]).inc();
        }
        publish(&ctx, &plan, e).await;
    }
    Ok(match step.wake_at {
        Some(next) => Action::requeue(crate::clock::until(next)),
        None => Action::await_change(),
    })
}

async fn publish(ctx: &Ctx, plan: &UpgradePlan, e: PlanEvent) {
    ctx.event(plan, EventType::of(e.warning), e.reason, e.note).await;
}

/// Creates the run for trigger `at`; an existing run of that name means it was serviced already.
async fn create_scheduled_run(plan: &UpgradePlan, run: &ScheduledRun, ctx: &Ctx) -> Result<()> {
    let plan_name = plan.name_any();
    let (name, at) = (run.name.clone(), run.at);
    let mut run = new_run(plan, NewRun::Scheduled { name: name.clone(), at });
    // The controller owns what it creates at once (a manual run is owned on its first reconcile).
    run.metadata.owner_references = plan.controller_owner_ref(&()).map(|o| vec![o]);
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    match api
        .create(
            &PostParams {
                field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
                ..Default::default()
            },
            &run,
        )
        .await
    {
        Ok(_) => {
            tracing::info!(plan = %plan_name, run = %name, trigger = %at, "scheduled run created");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(Error::Kube(e)),
    }
}
