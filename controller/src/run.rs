//! Run reconciliation (spec §5): admission and superseding, the revision gate, the snapshot, the
//! rollout (via the engine), terminal states, and cancel-by-delete.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::events::EventType;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Resource, ResourceExt};
use serde_json::json;
use upgradeplan::api::kratix::MANUAL_RECONCILIATION_LABEL;
use upgradeplan::api::UPGRADED_BY_ANNOTATION;
use upgradeplan::api::{
    find_condition, reasons, set_condition, Condition, ConditionStatus, GroupStatus, ResourceListRef, RunState,
    UpgradePlan, UpgradeRun, UpgradeRunStatus, PLAN_LABEL, PREVIEW_ANNOTATION, RETRY_REQUESTED_BY_ANNOTATION,
    RUN_FINALIZER, RUN_LABEL,
};
use upgradeplan::engine::admission::{admit, is_preview, last_run_of, Admission, RunFacts};
use upgradeplan::engine::naming;
use upgradeplan::engine::run::{evaluate, texts, BindingAction, Blocked, Evaluation, Outcome, RunContext, Verdict};
use upgradeplan::engine::snapshot::{
    assign, read_frozen, shard, snapshot_config_map_name, snapshot_shard_index, Snapshot, SNAPSHOT_PLAN_KEY,
    SNAPSHOT_RESOURCES_KEY, SNAPSHOT_SHARD_BYTES,
};
use upgradeplan::engine::validate::{summarize as summarize_problems, validate_plan};
use upgradeplan::engine::version::VersionMatcher;

use crate::context::{apply_status, run_plan, Ctx, Frozen, SELECTOR_ANNOTATION};
use crate::error::{Error, Result};
use crate::plan::refresh_after_run;

/// How many binding patches (and their events) are in flight at once.
const PATCH_CONCURRENCY: usize = 16;
/// How many starts are prepared at a time (bounds memory when a group of thousands starts).
const PATCH_CHUNK: usize = 256;

pub async fn reconcile(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    // Caches must be complete before a decision: a binding missing from a half-filled cache
    // would look deleted.
    if !ctx.synced.all() {
        return Ok(Action::requeue(crate::context::CACHE_WAIT));
    }
    if !ctx.handles(&run) {
        return Ok(Action::await_change()); // another controller's run
    }
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    finalizer(&api, RUN_FINALIZER, run, |event| async {
        match event {
            Finalizer::Apply(run) => apply(run, ctx.clone()).await,
            Finalizer::Cleanup(run) => cleanup(run, ctx.clone()).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)))
}

fn cond(type_: &str, status: ConditionStatus, reason: &str, message: String) -> Condition {
    Condition::new(type_, status, reason, message, crate::clock::now())
}

async fn write(ctx: &Ctx, run: &UpgradeRun, status: &UpgradeRunStatus) -> Result<()> {
    if run.status.as_ref() != Some(status) {
        apply_status::<UpgradeRun>(&ctx.client, &run.name_any(), status).await?;
    }
    Ok(())
}

async fn apply(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    let mut status = run.status.clone().unwrap_or_default();
    if status.state.is_terminal() {
        return Ok(Action::await_change());
    }
    let run_name = run.name_any();
    let plan_name = run.spec.upgrade_plan_ref.name.clone();
    let Some(plan) = ctx.plan(&plan_name) else {
        set_condition(
            &mut status.conditions,
            cond(
                reasons::PLAN_RESOLVED,
                ConditionStatus::False,
                reasons::PLAN_NOT_FOUND,
                texts::plan_not_found(&plan_name),
            ),
        );
        write(&ctx, &run, &status).await?;
        return Ok(Action::await_change());
    };
    ensure_metadata(&ctx, &run, &plan).await?;
    // Before its snapshot a run follows the live plan, which must be valid (spec §4.3); after,
    // its frozen copy. The condition is decided once per pass so that its transition time holds.
    let invalid = if matches!(status.state, RunState::Unresolved | RunState::Pending) {
        let problems = validate_plan(&plan_name, &plan.spec, crate::clock::now());
        (!problems.is_empty()).then(|| texts::plan_invalid(&plan_name, &summarize_problems(&problems)))
    } else {
        None
    };
    let was_invalid =
        find_condition(&status.conditions, reasons::PLAN_RESOLVED).is_some_and(|c| c.reason == reasons::PLAN_INVALID);
    let resolved = match &invalid {
        Some(message) => cond(
            reasons::PLAN_RESOLVED,
            ConditionStatus::False,
            reasons::PLAN_INVALID,
            message.clone(),
        ),
        None => cond(
            reasons::PLAN_RESOLVED,
            ConditionStatus::True,
            reasons::PLAN_FOUND,
            texts::plan_found(&plan_name),
        ),
    };
    set_condition(&mut status.conditions, resolved);

    // Admission, and on every pass the re-check that keeps one active run per plan.
    let mut facts = RunFacts::of(&run);
    if facts.preview && !run.spec.suspend {
        facts.preview = false; // a preview that was resumed rolls out like any run
    }
    if !facts.superseded {
        let others: Vec<RunFacts> = ctx
            .runs_of(&plan_name)
            .iter()
            .filter(|r| r.name_any() != run_name)
            .map(|r| RunFacts::of(r))
            .collect();
        match admit(&facts, &others) {
            Admission::SupersededBy(newer) => {
                supersede(&ctx, &run_name, &newer).await?;
                return Ok(Action::await_change());
            }
            Admission::Proceed { supersede: older } => {
                for old in older {
                    supersede(&ctx, &old, &run_name).await?;
                }
            }
        }
    }
    if status.state == RunState::Unresolved {
        status.state = RunState::Pending;
    }
    set_suspended_condition(&run, &mut status, facts.preview);
    if status.superseded_by.is_some() {
        // A superseded run keeps its state and does nothing more; the newer run carries on.
        write(&ctx, &run, &status).await?;
        return Ok(Action::await_change());
    }

    let promise = plan.spec.promise_ref.name.clone();
    if status.state == RunState::Pending {
        if let Some(message) = invalid {
            write(&ctx, &run, &status).await?;
            if !was_invalid {
                // Once: a pass on a stale cached copy must not repeat it.
                ctx.announce_once(&run, EventType::Warning, reasons::PLAN_INVALID, message)
                    .await;
            }
            return Ok(Action::await_change());
        }
        let to = plan.spec.upgrade_path.to.clone();
        if !ctx.revision_exists(&promise, &to) {
            set_condition(
                &mut status.conditions,
                cond(
                    reasons::TARGET_REVISION_READY,
                    ConditionStatus::False,
                    reasons::PROMISE_REVISION_NOT_FOUND,
                    texts::revision_not_found(&promise, &to),
                ),
            );
            // Gauges first: whoever sees the waiting status can already scrape why it waits.
            if !facts.preview {
                let sample = revision_gate_sample(&plan, &ctx.bindings_of(&promise));
                ctx.metrics.set_run(run_plan(&run), Some(&sample));
            }
            write(&ctx, &run, &status).await?;
            return Ok(Action::await_change());
        }
        set_condition(
            &mut status.conditions,
            cond(
                reasons::TARGET_REVISION_READY,
                ConditionStatus::True,
                reasons::PROMISE_REVISION_READY,
                texts::revision_ready(&promise, &to),
            ),
        );
        let frozen = take_snapshot(&ctx, &run, &plan).await?;
        status.resource_list_refs = frozen.1;
        status.rollout_groups = frozen.0.snapshot.initial_counts();
        status.total_resources = status.rollout_groups.iter().map(|g| g.total).sum();
        status.started_at = Some(crate::clock::now());
        status.state = RunState::InProgress;
        tracing::info!(run = %run_name, plan = %plan_name, resources = status.total_resources, "snapshot taken; run in progress");
    }
    progress(&ctx, &run, status, &promise, &plan.spec.upgrade_path.to).await
}

/// Evaluates an InProgress run and carries out the decision. `plan_to` is the live plan's
/// target, for the announcement when the snapshot (and with it the frozen plan) is lost.
async fn progress(
    ctx: &Ctx,
    run: &UpgradeRun,
    mut status: UpgradeRunStatus,
    promise: &str,
    plan_to: &str,
) -> Result<Action> {
    let run_name = run.name_any();
    let frozen = match load_snapshot(ctx, run, &status).await {
        Ok(f) => f,
        Err(e @ Error::Snapshot { .. }) => {
            let message = e.to_string();
            finish(
                ctx,
                run,
                status,
                RunState::Failed,
                reasons::SNAPSHOT_MISSING,
                message,
                plan_to,
            )
            .await?;
            return Ok(Action::await_change());
        }
        Err(e) => return Err(e),
    };
    let to = frozen.plan.upgrade_path.to.clone();
    let previous_groups = status.rollout_groups.clone();
    // Live bindings of the snapshot, from the cache (no API list per reconcile).
    let live: std::collections::HashMap<(String, String), Arc<upgradeplan::api::kratix::ResourceBinding>> = frozen
        .snapshot
        .groups
        .iter()
        .flat_map(|g| &g.resources)
        .filter_map(|r| {
            ctx.binding(&r.namespace, &r.binding)
                .map(|b| ((r.namespace.clone(), r.binding.clone()), b))
        })
        .collect();
    let eval = evaluate(
        &RunContext {
            run_name: &run_name,
            run_created: upgradeplan::time::created_at(run.meta()),
            suspended: run.spec.suspend || status.superseded_by.is_some(),
            plan: &frozen.plan,
            snapshot: &frozen.snapshot,
            recorded: &previous_groups,
            revision_present: ctx.revision_exists(promise, &to),
            now: crate::clock::now(),
        },
        |ns, name| live.get(&(ns.to_string(), name.to_string())).map(|b| b.as_ref()),
    );
    repair_announcements(ctx, run, &eval, &frozen.snapshot, &to).await;
    status.rollout_groups = eval.groups.clone();
    status.completed_resources = eval.completed_resources();
    status.total_resources = eval.total_resources();

    // Patches go out concurrently (bounded): a group of thousands starts at the API server's
    // pace, not one round trip at a time. Each carries its own precondition.
    let retry_meta = json!({"labels": {MANUAL_RECONCILIATION_LABEL: "true"}, "annotations": {RETRY_REQUESTED_BY_ANNOTATION: run_name}});
    // Futures are built per chunk (a stream mapping borrowed items through a closure is not
    // provably Send across the await), so that thousands of starts never sit in memory at once.
    let mut conflict = false;
    for chunk in eval.retry.chunks(PATCH_CHUNK) {
        let retries: Vec<_> = chunk
            .iter()
            .map(|a| patch_binding(ctx, a, retry_meta.clone(), None))
            .collect();
        for r in futures::stream::iter(retries)
            .buffer_unordered(PATCH_CONCURRENCY)
            .collect::<Vec<_>>()
            .await
        {
            conflict |= r?;
        }
    }
    let to_str = to.as_str();
    let audit = json!({"annotations": {UPGRADED_BY_ANNOTATION: run_name}});
    let audit = &audit;
    for chunk in eval.start.chunks(PATCH_CHUNK) {
        let starts: Vec<_> = chunk
            .iter()
            .map(|a| async move { (a, patch_binding(ctx, a, audit.clone(), Some(to_str)).await) })
            .collect();
        let started: Vec<(&BindingAction, Result<bool>)> = futures::stream::iter(starts)
            .buffer_unordered(PATCH_CONCURRENCY)
            .collect()
            .await;
        let mut announcements = Vec::new();
        for (action, result) in started {
            if result? {
                conflict = true;
                continue;
            }
            if let Ok(mut s) = ctx.started.lock() {
                s.insert(
                    (
                        run.uid().unwrap_or_default(),
                        format!("{}/{}", action.resource.namespace, action.resource.binding),
                    ),
                    crate::clock::now(),
                );
            }
            announcements.push(texts::resource_started(
                &action.resource.display_name(),
                &action.from,
                &to,
            ));
        }
        announce_starts(ctx, run, announcements).await;
    }
    report_outcomes(ctx, run, &eval, &previous_groups, &frozen.snapshot, &to).await;
    if !is_preview(run) || !run.spec.suspend {
        ctx.metrics
            .set_run(run_plan(run), Some(&run_sample(&eval, &frozen.snapshot)));
    }

    match eval.verdict {
        Verdict::InProgress { .. } => {
            write(ctx, run, &status).await?;
            Ok(match (conflict, eval.wake_at) {
                (true, _) => Action::requeue(std::time::Duration::from_millis(200)),
                (false, Some(at)) => Action::requeue((at - crate::clock::now()).to_std().unwrap_or_default()),
                (false, None) => Action::await_change(),
            })
        }
        Verdict::Completed => {
            let message = texts::run_summary(status.completed_resources, status.total_resources, &to);
            finish(
                ctx,
                run,
                status,
                RunState::Completed,
                reasons::RUN_COMPLETED,
                message,
                &to,
            )
            .await?;
            Ok(Action::await_change())
        }
        Verdict::Failed { group, failed } => {
            let message = texts::group_failed(failed, &frozen.snapshot.groups[group].name);
            finish(
                ctx,
                run,
                status,
                RunState::Failed,
                reasons::RESOURCE_UPGRADE_FAILED,
                message,
                &to,
            )
            .await?;
            Ok(Action::await_change())
        }
        Verdict::RevisionMissing => {
            finish(
                ctx,
                run,
                status,
                RunState::Failed,
                reasons::PROMISE_REVISION_NOT_FOUND,
                texts::revision_not_found(promise, &to),
                &to,
            )
            .await?;
            Ok(Action::await_change())
        }
    }
}

/// The gauges of a run held at the revision gate: the groups its snapshot would have, every
/// resource pending, blocked on `RevisionMissing` in the first group (spec §9.1).
fn revision_gate_sample(
    plan: &UpgradePlan,
    bindings: &[Arc<upgradeplan::api::kratix::ResourceBinding>],
) -> crate::metrics::RunSample {
    let groups = VersionMatcher::compile(&plan.spec.upgrade_path.from)
        .map(|m| {
            assign(&plan.spec, &m, bindings.iter().map(|b| b.as_ref()))
                .snapshot
                .initial_counts()
        })
        .unwrap_or_default();
    let mut resources = Vec::new();
    for g in &groups {
        push_group_series(&mut resources, g, 0);
    }
    let blocked = plan
        .spec
        .rollout_groups
        .first()
        .map(|g| (g.name.clone(), Blocked::RevisionMissing.as_str()));
    crate::metrics::RunSample { resources, blocked }
}

/// One group's `run_resources` series: every state, pending being what is neither done nor in flight.
fn push_group_series(resources: &mut Vec<(String, &'static str, i64)>, g: &GroupStatus, in_flight: i64) {
    let pending = (g.total - g.succeeded - g.failed - g.skipped - in_flight).max(0);
    for (state, n) in [
        ("pending", pending),
        ("in_progress", in_flight),
        ("succeeded", g.succeeded),
        ("failed", g.failed),
        ("skipped", g.skipped),
    ] {
        resources.push((g.name.clone(), state, n));
    }
}

/// The active run's gauges: resources per group and state, and what it waits for.
fn run_sample(eval: &Evaluation, snapshot: &Snapshot) -> crate::metrics::RunSample {
    let current = match eval.verdict {
        Verdict::InProgress { group } => Some(group),
        _ => None,
    };
    let mut resources = Vec::new();
    for (i, g) in eval.groups.iter().enumerate() {
        let in_flight = if Some(i) == current { eval.in_flight as i64 } else { 0 };
        push_group_series(&mut resources, g, in_flight);
    }
    let blocked = current
        .zip(eval.blocked)
        .map(|(i, b)| (snapshot.groups[i].name.clone(), b.as_str()));
    crate::metrics::RunSample { resources, blocked }
}

/// Per-resource and per-group events for what changed since the last write.
async fn report_outcomes(
    ctx: &Ctx,
    run: &UpgradeRun,
    eval: &Evaluation,
    previous: &[GroupStatus],
    snapshot: &Snapshot,
    to: &str,
) {
    for (index, outcomes) in &eval.outcomes {
        let group = &snapshot.groups[*index];
        for (resource, outcome) in group.resources.iter().zip(outcomes) {
            let key = format!("{}/{}", resource.namespace, resource.binding);
            let result = match outcome {
                Outcome::Succeeded => Some("succeeded"),
                Outcome::Failed { .. } => Some("failed"),
                Outcome::Skipped(_) => Some("skipped"),
                _ => None,
            };
            if let Some(result) = result {
                if ctx.first_time(run, "resource-result", key.clone()) {
                    let plan = run_plan(run);
                    ctx.metrics
                        .resource_upgrades_total
                        .with_label_values(&[plan, &group.name, result])
                        .inc();
                    let began = ctx
                        .started
                        .lock()
                        .ok()
                        .and_then(|s| s.get(&(run.uid().unwrap_or_default(), key.clone())).copied());
                    if let (Some(began), "succeeded") = (began, result) {
                        let secs = (crate::clock::now() - began).num_milliseconds() as f64 / 1000.0;
                        ctx.metrics
                            .resource_upgrade_duration
                            .with_label_values(&[plan, &group.name])
                            .observe(secs);
                    }
                }
            }
            match outcome {
                Outcome::Skipped(why) => {
                    let note = texts::resource_skipped(&resource.display_name(), &why.to_string());
                    ctx.event_once(run, EventType::Warning, "ResourceSkipped", key, note)
                        .await;
                }
                Outcome::Failed { message } => {
                    let note = texts::resource_failed(&resource.display_name(), to, message);
                    ctx.event_once(run, EventType::Warning, "ResourceUpgradeFailed", key, note)
                        .await;
                }
                _ => {}
            }
        }
        let now = &eval.groups[*index];
        let before = previous.get(*index).map(|g| g.succeeded).unwrap_or(0);
        if now.succeeded != before
            || (previous.get(*index).is_none_or(|g| g.total == 0) && now.total > 0 && before == 0 && now.succeeded == 0)
        {
            let note = texts::group_in_progress(&now.name, now.succeeded, now.total, to);
            ctx.event_once(
                run,
                EventType::Normal,
                "GroupInProgress",
                format!("{}:{}", now.name, now.succeeded),
                note,
            )
            .await;
        }
    }
}

/// After a restart, announces the upgrades an earlier process started but whose
/// `ResourceUpgradeStarted` event a crash cut off (it came between the patch and the event).
/// Runs once per run per process, before this process starts anything for the run.
async fn repair_announcements(ctx: &Ctx, run: &UpgradeRun, eval: &Evaluation, snapshot: &Snapshot, to: &str) {
    let recalled = match ctx.recall_announcements(run).await {
        Ok(r) => r,
        Err(e) => {
            // Announcements are best effort; the run must not wait on them. Retried next reconcile.
            tracing::warn!(run = %run.name_any(), error = %e, "listing the run's events failed; lost announcements are not repaired yet");
            return;
        }
    };
    if !recalled.first {
        return;
    }
    let mut missing = Vec::new();
    for (index, outcomes) in &eval.outcomes {
        let Some(group) = snapshot.groups.get(*index) else {
            continue;
        };
        for (resource, outcome) in group.resources.iter().zip(outcomes) {
            // Started by this run: the binding names it in the annotation set with the upgrade.
            let started = matches!(
                outcome,
                Outcome::InFlight { .. } | Outcome::Failed { .. } | Outcome::Succeeded
            ) && ctx
                .binding(&resource.namespace, &resource.binding)
                .is_some_and(|b| b.annotations().get(UPGRADED_BY_ANNOTATION) == Some(&run.name_any()));
            let note = texts::resource_started(&resource.display_name(), &resource.last_applied_version, to);
            if started
                && !recalled
                    .announced
                    .contains(&("ResourceUpgradeStarted".to_string(), note.clone()))
            {
                missing.push(note);
            }
        }
    }
    if !missing.is_empty() {
        tracing::info!(run = %run.name_any(), count = missing.len(), "announcing upgrades whose events a restart lost");
    }
    announce_starts(ctx, run, missing).await;
}

/// Publishes `ResourceUpgradeStarted` events, as many at once as patches go out.
async fn announce_starts(ctx: &Ctx, run: &UpgradeRun, notes: Vec<String>) {
    let events: Vec<_> = notes
        .into_iter()
        .map(|note| ctx.event(run, EventType::Normal, "ResourceUpgradeStarted", note))
        .collect();
    futures::stream::iter(events)
        .buffer_unordered(PATCH_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
}

/// Patches a binding with its resourceVersion as precondition: `metadata` merged, and
/// `spec.version := to` when given. Returns true on a conflict (someone changed it first: the
/// next reconcile re-evaluates; nothing is overwritten).
async fn patch_binding(
    ctx: &Ctx,
    action: &BindingAction,
    mut metadata: serde_json::Value,
    to: Option<&str>,
) -> Result<bool> {
    let api: Api<upgradeplan::api::kratix::ResourceBinding> =
        Api::namespaced(ctx.client.clone(), &action.resource.namespace);
    if let Some(rv) = &action.resource_version {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({"metadata": metadata});
    if let Some(to) = to {
        body["spec"] = json!({"version": to});
    }
    let pp = PatchParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.patch(&action.resource.binding, &pp, &Patch::Merge(body)).await {
        Ok(_) => Ok(false),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Moves a run to a terminal state, records it on the plan, and announces it (the event follows
/// from the state: [`texts::terminal_event`]). The announcement goes out before the terminal
/// status is written, once across restarts: a crash between the two finishes the run again on
/// restart, which finds the event and does not repeat it.
async fn finish(
    ctx: &Ctx,
    run: &UpgradeRun,
    mut status: UpgradeRunStatus,
    state: RunState,
    reason: &str,
    message: String,
    to: &str,
) -> Result<()> {
    if let Some((warning, event_reason, note)) =
        texts::terminal_event(state, status.completed_resources, status.total_resources, to)
    {
        let type_ = if warning { EventType::Warning } else { EventType::Normal };
        ctx.announce_once(run, type_, event_reason, note).await;
    }
    let succeeded = if state == RunState::Completed {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    set_condition(
        &mut status.conditions,
        cond(reasons::RUN_SUCCEEDED, succeeded, reason, message.clone()),
    );
    status.state = state;
    status.finished_at = Some(crate::clock::now());
    apply_status::<UpgradeRun>(&ctx.client, &run.name_any(), &status).await?;
    let plan = run_plan(run).to_string();
    let trigger = upgradeplan::engine::admission::TriggerKind::of(run).metric_label();
    let result = state.as_str();
    ctx.metrics
        .runs_total
        .with_label_values(&[&plan, trigger, result])
        .inc();
    if let (Some(start), Some(end)) = (status.started_at, status.finished_at) {
        ctx.metrics
            .run_duration
            .with_label_values(&[&plan, result])
            .observe((end - start).num_milliseconds() as f64 / 1000.0);
    }
    if status.superseded_by.is_none() && !is_preview(run) {
        ctx.metrics.set_run(&plan, None);
    }
    let mut finished = run.clone();
    finished.status = Some(status.clone());
    refresh_after_run(ctx, run_plan(run), last_run_of(&finished)).await?;
    tracing::info!(run = %run.name_any(), state = state.as_str(), reason, "run finished");
    ctx.forget_run(&run.uid().unwrap_or_default());
    Ok(())
}

fn set_suspended_condition(run: &UpgradeRun, status: &mut UpgradeRunStatus, preview: bool) {
    let c = match (&status.superseded_by, run.spec.suspend) {
        (Some(newer), _) => cond(
            reasons::SUSPENDED,
            ConditionStatus::True,
            reasons::SUPERSEDED,
            texts::superseded(newer),
        ),
        (None, true) if preview => cond(
            reasons::SUSPENDED,
            ConditionStatus::True,
            reasons::SUSPENDED,
            "Preview: the snapshot is taken and nothing is patched; set spec.suspend=false to roll it out".into(),
        ),
        (None, true) => cond(
            reasons::SUSPENDED,
            ConditionStatus::True,
            reasons::SUSPENDED,
            "Suspended: no new resource upgrade starts".into(),
        ),
        (None, false) => cond(
            reasons::SUSPENDED,
            ConditionStatus::False,
            "NotSuspended",
            "Not suspended".into(),
        ),
    };
    set_condition(&mut status.conditions, c);
}

/// Marks `name` superseded by `newer`: suspended, recorded, no longer the active run.
async fn supersede(ctx: &Ctx, name: &str, newer: &str) -> Result<()> {
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    let Some(old) = api.get_opt(name).await? else {
        return Ok(());
    };
    let mut status = old.status.clone().unwrap_or_default();
    if status.superseded_by.is_some() || status.state.is_terminal() {
        return Ok(());
    }
    let pp = PatchParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(name, &pp, &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await?;
    status.superseded_by = Some(newer.to_string());
    if status.state == RunState::Unresolved {
        status.state = RunState::Pending;
    }
    set_condition(
        &mut status.conditions,
        cond(
            reasons::SUSPENDED,
            ConditionStatus::True,
            reasons::SUPERSEDED,
            texts::superseded(newer),
        ),
    );
    apply_status::<UpgradeRun>(&ctx.client, name, &status).await?;
    ctx.metrics
        .runs_superseded_total
        .with_label_values(&[run_plan(&old)])
        .inc();
    ctx.event(&old, EventType::Normal, reasons::SUPERSEDED, texts::superseded(newer))
        .await;
    tracing::info!(run = %name, by = %newer, "run superseded");
    Ok(())
}

/// Adds what a run must carry: the plan label, the ownerReference to the plan (so deleting the
/// plan deletes its runs), and the preview mark for a run admitted while suspended.
async fn ensure_metadata(ctx: &Ctx, run: &UpgradeRun, plan: &UpgradePlan) -> Result<()> {
    let mut patch = serde_json::Map::new();
    let mut annotations = serde_json::Map::new();
    let plan_name = plan.name_any();
    let (mut want_labels, mut want_annotations) = (BTreeMap::new(), BTreeMap::new());
    naming::put_name(&mut want_labels, &mut want_annotations, PLAN_LABEL, &plan_name);
    if want_labels.iter().any(|(k, v)| run.labels().get(k) != Some(v)) {
        patch.insert("labels".into(), json!(want_labels));
    }
    for (k, v) in want_annotations {
        if run.annotations().get(&k) != Some(&v) {
            annotations.insert(k, json!(v));
        }
    }
    let owned = run
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == plan.uid().as_ref());
    if !owned {
        if let Some(owner) = plan.controller_owner_ref(&()) {
            let mut owners: Vec<_> = run
                .owner_references()
                .iter()
                .filter(|o| o.controller != Some(true))
                .cloned()
                .collect();
            owners.push(owner);
            patch.insert("ownerReferences".into(), serde_json::to_value(owners)?);
        }
    }
    let unadmitted = run.status.as_ref().map(|s| s.state).unwrap_or_default() == RunState::Unresolved;
    if unadmitted && run.spec.suspend && is_preview(run) && !run.annotations().contains_key(PREVIEW_ANNOTATION) {
        annotations.insert(PREVIEW_ANNOTATION.into(), json!("true"));
    }
    if let Some(selector) = &ctx.selector {
        if run.annotations().get(SELECTOR_ANNOTATION) != Some(selector) {
            annotations.insert(SELECTOR_ANNOTATION.into(), json!(selector));
        }
    }
    if !annotations.is_empty() {
        patch.insert("annotations".into(), annotations.into());
    }
    if patch.is_empty() {
        return Ok(());
    }
    let api: Api<UpgradeRun> = Api::all(ctx.client.clone());
    let pp = PatchParams {
        field_manager: Some(upgradeplan::api::FIELD_MANAGER.into()),
        ..Default::default()
    };
    api.patch(&run.name_any(), &pp, &Patch::Merge(json!({"metadata": patch})))
        .await?;
    Ok(())
}

fn snapshot_error(run: &UpgradeRun, detail: impl Into<String>) -> Error {
    Error::Snapshot {
        run: run.name_any(),
        detail: detail.into(),
    }
}

/// Takes the run's snapshot and writes its ConfigMaps, or, when a previous attempt already
/// wrote them (crash between write and status), reuses those: a snapshot is taken once.
async fn take_snapshot(ctx: &Ctx, run: &UpgradeRun, plan: &UpgradePlan) -> Result<(Arc<Frozen>, Vec<ResourceListRef>)> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    let run_name = run.name_any();
    let existing = cms
        .list(&ListParams::default().labels(&naming::selector(RUN_LABEL, &run_name)))
        .await?;
    let ours: Vec<ConfigMap> = existing
        .items
        .into_iter()
        .filter(|cm| cm.owner_references().iter().any(|o| Some(&o.uid) == run.uid().as_ref()))
        .collect();
    if !ours.is_empty() {
        let mut refs: Vec<ResourceListRef> = ours.iter().map(|cm| ResourceListRef { name: cm.name_any() }).collect();
        refs.sort_by_key(|r| shard_index(&run_name, &r.name));
        refs.retain(|r| snapshot_shard_index(&run_name, &r.name).is_some());
        let frozen = read_shards(run, ours)?;
        return Ok((frozen, refs));
    }
    let matcher = VersionMatcher::compile(&plan.spec.upgrade_path.from)
        .map_err(|_| snapshot_error(run, "upgradePath.from does not compile"))?;
    let bindings = ctx.bindings_of(&plan.spec.promise_ref.name);
    let snapshot = assign(&plan.spec, &matcher, bindings.iter().map(|b| b.as_ref())).snapshot;
    let frozen_plan = serde_json::to_string(&plan.spec)?;
    let mut refs = Vec::new();
    for (i, part) in shard(&snapshot, SNAPSHOT_SHARD_BYTES).into_iter().enumerate() {
        let name = snapshot_config_map_name(&run_name, i);
        let mut data = BTreeMap::from([(SNAPSHOT_RESOURCES_KEY.to_string(), serde_json::to_string(&part)?)]);
        if i == 0 {
            data.insert(SNAPSHOT_PLAN_KEY.to_string(), frozen_plan.clone());
        }
        let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
        naming::put_name(&mut labels, &mut annotations, PLAN_LABEL, &plan.name_any());
        naming::put_name(&mut labels, &mut annotations, RUN_LABEL, &run_name);
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ctx.snapshot_namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations).filter(|a| !a.is_empty()),
                // A namespaced object may be owned by a cluster-scoped one: deleting the run
                // garbage-collects its snapshot even when the finalizer never ran.
                owner_references: run.controller_owner_ref(&()).map(|o| vec![o]),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        };
        match cms.create(&PostParams::default(), &cm).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(snapshot_error(
                    run,
                    format!(
                        "namespace {:?} does not exist: create it or start the controller with --snapshot-namespace",
                        ctx.snapshot_namespace
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        }
        refs.push(ResourceListRef { name });
    }
    let frozen = Arc::new(Frozen {
        snapshot,
        plan: plan.spec.clone(),
    });
    if let (Some(uid), Ok(mut cache)) = (run.uid(), ctx.frozen.lock()) {
        cache.insert(uid, frozen.clone());
    }
    Ok((frozen, refs))
}

/// Sort key of a snapshot ConfigMap: its shard index (names of no shard last).
fn shard_index(run: &str, name: &str) -> usize {
    snapshot_shard_index(run, name).unwrap_or(usize::MAX)
}

fn read_shards(run: &UpgradeRun, mut cms: Vec<ConfigMap>) -> Result<Arc<Frozen>> {
    let run_name = run.name_any();
    cms.sort_by_key(|cm| shard_index(&run_name, &cm.name_any()));
    let empty = BTreeMap::new();
    let frozen = read_frozen(cms.iter().map(|cm| {
        (
            cm.metadata.name.as_deref().unwrap_or_default(),
            cm.data.as_ref().unwrap_or(&empty),
        )
    }))
    .map_err(|e| snapshot_error(run, e.to_string()))?;
    Ok(Arc::new(frozen))
}

/// The run's snapshot, from memory or from its ConfigMaps.
async fn load_snapshot(ctx: &Ctx, run: &UpgradeRun, status: &UpgradeRunStatus) -> Result<Arc<Frozen>> {
    let uid = run.uid().unwrap_or_default();
    if let Some(f) = ctx.frozen.lock().ok().and_then(|c| c.get(&uid).cloned()) {
        return Ok(f);
    }
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    let mut found = Vec::new();
    for r in &status.resource_list_refs {
        match cms.get_opt(&r.name).await? {
            Some(cm) => found.push(cm),
            None => {
                return Err(snapshot_error(
                    run,
                    format!("ConfigMap {}/{} is missing", ctx.snapshot_namespace, r.name),
                ))
            }
        }
    }
    if found.is_empty() {
        return Err(snapshot_error(run, "status.resourceListRefs is empty"));
    }
    let frozen = read_shards(run, found)?;
    if let Ok(mut cache) = ctx.frozen.lock() {
        cache.insert(uid, frozen.clone());
    }
    Ok(frozen)
}

/// Deleting a run: an unfinished run becomes Cancelled (recorded on the plan); the snapshot goes.
async fn cleanup(run: Arc<UpgradeRun>, ctx: Arc<Ctx>) -> Result<Action> {
    let status = run.status.clone().unwrap_or_default();
    if !status.state.is_terminal() {
        finish(
            &ctx,
            &run,
            status.clone(),
            RunState::Cancelled,
            reasons::RUN_CANCELLED,
            texts::run_cancelled(),
            "",
        )
        .await?;
    }
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    let lp = ListParams::default().labels(&naming::selector(RUN_LABEL, &run.name_any()));
    for cm in cms.list(&lp).await?.items {
        if cm.owner_references().iter().any(|o| Some(&o.uid) == run.uid().as_ref()) {
            match cms.delete(&cm.name_any(), &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    ctx.forget_run(&run.uid().unwrap_or_default());
    Ok(Action::await_change())
}

/// The object's key in [`Ctx::retries`].
pub fn retry_key(run: &UpgradeRun) -> String {
    format!("run/{}", run.name_any())
}

pub fn error_policy(run: Arc<UpgradeRun>, err: &Error, ctx: Arc<Ctx>) -> Action {
    let delay = ctx.retries.next_delay(&retry_key(&run));
    tracing::warn!(run = %run.name_any(), error = %err, kind = err.metric_label(), retry_in = ?delay, "run reconcile failed; retrying");
    Action::requeue(delay)
}
