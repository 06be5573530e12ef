//! Plan reconciliation (spec §3, §6): validity, Promise presence, triggers, and the status
//! derived from the plan's runs. Wakes exactly at the next trigger.

use std::sync::Arc;

use crate::events::EventType;
use chrono::{DateTime, Utc};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use upgradeplan::api::{
    reasons, set_condition, Condition, ConditionStatus, LastRun, UpgradePlan, UpgradePlanRef, UpgradePlanStatus,
    UpgradeRun, UpgradeRunSpec, PLAN_LABEL, SCHEDULED_AT_ANNOTATION,
};
use upgradeplan::engine::admission::summarize;
use upgradeplan::engine::naming;
use upgradeplan::engine::schedule::{scheduled_run_name, TriggerAction, Triggers};
use upgradeplan::engine::validate::{summarize as summarize_problems, validate_plan};

use crate::context::{apply_status, Ctx};
use crate::error::{Error, Result};

fn created(plan: &UpgradePlan) -> DateTime<Utc> {
    upgradeplan::time::created_at(&plan.metadata)
}

pub async fn reconcile(plan: Arc<UpgradePlan>, ctx: Arc<Ctx>) -> Result<Action> {
    if !ctx.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if plan.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let now = crate::clock::now();
    let name = plan.name_any();
    let generation = plan.meta().generation;
    let previous = plan.status.clone().unwrap_or_default();
    let mut status = previous.clone();
    let spec_changed = previous.observed_generation != generation;

    let problems = validate_plan(&name, &plan.spec, now);
    let ready = if problems.is_empty() {
        Condition::new(
            reasons::READY,
            ConditionStatus::True,
            reasons::VALID,
            "the plan is valid",
            now,
        )
    } else {
        Condition::new(
            reasons::READY,
            ConditionStatus::False,
            reasons::INVALID_SPEC,
            summarize_problems(&problems),
            now,
        )
    };
    let became_invalid = !problems.is_empty()
        && upgradeplan::api::find_condition(&previous.conditions, reasons::READY)
            .is_none_or(|c| c.status != ConditionStatus::False || c.message != ready.message);
    set_condition(
        &mut status.conditions,
        Condition {
            observed_generation: generation,
            ..ready.clone()
        },
    );

    let promise = &plan.spec.promise_ref.name;
    let found = ctx.promises.get(&ObjectRef::new(promise)).is_some();
    let resolved = if found {
        Condition::new(
            reasons::PROMISE_RESOLVED,
            ConditionStatus::True,
            reasons::PROMISE_FOUND,
            format!("Promise \"{promise}\" found"),
            now,
        )
    } else {
        Condition::new(
            reasons::PROMISE_RESOLVED,
            ConditionStatus::False,
            reasons::PROMISE_NOT_FOUND,
            format!("Promise \"{promise}\" not found"),
            now,
        )
    };
    set_condition(
        &mut status.conditions,
        Condition {
            observed_generation: generation,
            ..resolved
        },
    );

    // Triggers: only for a valid plan with a policy.
    let triggers = plan
        .spec
        .upgrade_execution_policy
        .as_ref()
        .filter(|_| problems.is_empty())
        .and_then(Triggers::compile);
    let mut scheduled = None;
    let mut next_trigger = None;
    match &triggers {
        Some(t) => {
            match t.due(now, created(&plan), status.last_scheduled_at, plan.spec.suspend) {
                TriggerAction::CreateRun(at) => {
                    scheduled = Some(create_scheduled_run(&plan, at, &ctx).await?);
                    status.last_scheduled_at = Some(at);
                }
                TriggerAction::Skip(at) => {
                    status.last_scheduled_at = Some(at);
                    let note = format!("Trigger {} skipped: the plan is suspended", at.to_rfc3339());
                    ctx.event(&*plan, EventType::Normal, "TriggerSkipped", note).await;
                }
                TriggerAction::None => {}
            }
            if spec_changed && t.execute_at_before_creation(created(&plan)) {
                let note = "spec.upgradeExecutionPolicy.executeAt is before the plan was created and will never fire"
                    .to_string();
                ctx.event(&*plan, EventType::Warning, "ExecuteAtInPast", note).await;
            }
            status.next_run_at = t.next_run_at(now, created(&plan), plan.spec.suspend);
            next_trigger = t.next_after(now, created(&plan));
        }
        None => status.next_run_at = None,
    }

    let runs = ctx.runs_of(&name);
    let run_refs: Vec<&UpgradeRun> = runs.iter().map(|r| r.as_ref()).collect();
    let summary = summarize(&run_refs, status.last_run.as_ref(), None);
    status.phase = summary.phase;
    status.active_run_ref = summary.active_run_ref;
    status.last_run = summary.last_run;
    status.observed_generation = generation;

    if status != previous {
        apply_status::<UpgradePlan>(&ctx.client, &name, &status).await?;
    }
    let window_change = record_metrics(&ctx, &plan, &status, problems.is_empty(), now);
    if became_invalid {
        ctx.event(&*plan, EventType::Warning, reasons::INVALID_SPEC, ready.message.clone())
            .await;
    }
    if let Some(run) = scheduled {
        ctx.event(
            &*plan,
            EventType::Normal,
            "RunCreated",
            format!(
                "Created UpgradeRun \"{run}\" for trigger {}",
                status.last_scheduled_at.map(|t| t.to_rfc3339()).unwrap_or_default()
            ),
        )
        .await;
    }
    // Wake exactly at the next trigger or window boundary (the window gauges stay true);
    // watches bring everything else.
    // While suspended nextRunAt is absent, but the trigger is still recorded as skipped on time.
    Ok(match next_trigger.into_iter().chain(window_change).min() {
        Some(next) => Action::requeue((next - crate::clock::now()).to_std().unwrap_or_default()),
        None => Action::await_change(),
    })
}

/// Writes the plan's gauges; returns the next instant a group's gate changes.
fn record_metrics(
    ctx: &Ctx,
    plan: &UpgradePlan,
    status: &UpgradePlanStatus,
    valid: bool,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    use upgradeplan::engine::concurrency::Limit;
    use upgradeplan::engine::window::Gate;
    let spec = &plan.spec;
    // Percentages resolve against the group's current membership.
    let membership = upgradeplan::engine::version::VersionMatcher::compile(&spec.upgrade_path.from)
        .ok()
        .filter(|_| valid)
        .map(|m| {
            upgradeplan::engine::snapshot::assign(
                spec,
                &m,
                ctx.bindings_of(&spec.promise_ref.name).iter().map(|b| b.as_ref()),
            )
            .snapshot
        });
    let mut next_change: Option<DateTime<Utc>> = None;
    let groups = spec
        .rollout_groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let gate = Gate::compile(g.resource_upgrade_windows.as_deref().unwrap_or_default()).ok();
            let state = gate.as_ref().map(|g| g.state(now));
            if let Some(t) = gate.as_ref().and_then(|g| g.next_change(now)) {
                next_change = Some(next_change.map_or(t, |n| n.min(t)));
            }
            let size = membership
                .as_ref()
                .and_then(|m| m.groups.get(i))
                .map(|g| g.resources.len());
            crate::metrics::GroupSample {
                name: g.name.clone(),
                max_concurrent: match (Limit::parse(g.max_concurrent.as_ref()), size) {
                    (Ok(l), Some(n)) => Some(l.resolve(n) as i64),
                    (Ok(Limit::Count(c)), None) => Some(i64::from(c)),
                    _ => None,
                },
                window_open: state.is_some_and(|s| s.open),
                windows: gate
                    .iter()
                    .flat_map(|g| g.windows().iter().enumerate())
                    .map(|(wi, w)| {
                        (
                            wi,
                            if w.kind == upgradeplan::api::WindowKind::Allow {
                                "allow"
                            } else {
                                "deny"
                            },
                            w.is_active(now),
                        )
                    })
                    .collect(),
                next_open: state.and_then(|s| s.next_open).map(|t| t.timestamp() as f64),
                next_close: state.and_then(|s| s.next_close).map(|t| t.timestamp() as f64),
            }
        })
        .collect();
    ctx.metrics.set_plan(
        &plan.name_any(),
        &crate::metrics::PlanSample {
            promise: spec.promise_ref.name.clone(),
            to: spec.upgrade_path.to.clone(),
            time_zone: spec
                .upgrade_execution_policy
                .as_ref()
                .and_then(|p| p.time_zone.clone())
                .unwrap_or_else(|| "UTC".into()),
            running: status.phase == upgradeplan::api::PlanPhase::Running,
            suspended: spec.suspend,
            ready: valid,
            next_run: status.next_run_at.map(|t| t.timestamp() as f64),
            last_schedule: status.last_scheduled_at.map(|t| t.timestamp() as f64),
            last_result: status.last_run.as_ref().map(|l| l.result.as_str()),
            last_finished: status
                .last_run
                .as_ref()
                .and_then(|l| l.finished_at)
                .map(|t| t.timestamp() as f64),
            groups,
        },
    );
    next_change
}

/// Creates the run for trigger `at`; an existing run of that name means it was serviced already.
async fn create_scheduled_run(plan: &UpgradePlan, at: DateTime<Utc>, ctx: &Ctx) -> Result<String> {
    let plan_name = plan.name_any();
    let name = scheduled_run_name(&plan_name, at);
    let mut run = UpgradeRun::new(
        &name,
        UpgradeRunSpec {
            upgrade_plan_ref: UpgradePlanRef {
                name: plan_name.clone(),
            },
            suspend: false,
        },
    );
    let mut labels = std::collections::BTreeMap::new();
    let mut annotations = std::collections::BTreeMap::from([(
        SCHEDULED_AT_ANNOTATION.to_string(),
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    )]);
    naming::put_name(&mut labels, &mut annotations, PLAN_LABEL, &plan_name);
    run.metadata.labels = Some(labels);
    run.metadata.annotations = Some(annotations);
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
            Ok(name)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(name),
        Err(e) => Err(Error::Kube(e)),
    }
}

/// Rewrites the run-derived part of a plan's status now, including `finished` (a run that just
/// ended and may disappear before the plan reconciles). Everything else is kept as it is.
pub async fn refresh_after_run(ctx: &Ctx, plan_name: &str, finished: Option<LastRun>) -> Result<()> {
    let api: Api<UpgradePlan> = Api::all(ctx.client.clone());
    let Some(plan) = api.get_opt(plan_name).await? else {
        return Ok(());
    };
    if plan.meta().deletion_timestamp.is_some() {
        return Ok(());
    }
    let mut status: UpgradePlanStatus = plan.status.clone().unwrap_or_default();
    let runs = ctx.runs_of(plan_name);
    let finished_name = finished.as_ref().map(|f| f.name.clone());
    // The cache may still show the finished run as active.
    let run_refs: Vec<&UpgradeRun> = runs
        .iter()
        .map(|r| r.as_ref())
        .filter(|r| Some(r.name_any()) != finished_name)
        .collect();
    let summary = summarize(&run_refs, status.last_run.as_ref(), finished);
    status.phase = summary.phase;
    status.active_run_ref = summary.active_run_ref;
    status.last_run = summary.last_run;
    apply_status::<UpgradePlan>(&ctx.client, plan_name, &status).await
}

/// The object's key in [`Ctx::retries`].
pub fn retry_key(plan: &UpgradePlan) -> String {
    format!("plan/{}", plan.name_any())
}

pub fn error_policy(plan: Arc<UpgradePlan>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.retries.next_delay(&retry_key(&plan));
    tracing::warn!(plan = %plan.name_any(), error = %err, kind = err.metric_label(), retry_in = ?delay, "plan reconcile failed; retrying");
    Action::requeue(delay)
}
