//! The controller end to end on the real control plane, with kratix-sim playing Kratix.
//! Each test runs its own controller (selecting only its plans) and its own kratix-sim.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::Api;
use kube::ResourceExt;
use serde_json::json;
use upgradeplan::api::kratix::{ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{find_condition, reasons, ConditionStatus, PlanPhase, RunResult, RunState, UpgradeRun};
use upgradeplan_e2e::harness::{
    group_counts, group_row, http_get, observe_bindings, run_ended, run_plugin, run_state, wait_gone, wait_in_flight,
    Built, ControllerProcess, TestEnv, World,
};
use upgradeplan_e2e::proxy::{FaultProxy, Faults};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

fn three_groups() -> serde_json::Value {
    json!({
        "upgradePath": {"from": ["/v1\\..*/"], "to": "v2.0.0"},
        "rolloutGroups": [
            {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 2},
            {"name": "staging", "selectors": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["staging"]}]}, "maxConcurrent": "50%"},
            {"name": "prod", "selectors": {"matchAll": true}, "maxConcurrent": 1}
        ]
    })
}

/// Limits are checked both ways: *never exceeded* over the whole run (the watch samples every
/// change), and *used* — each group fills its slots — while kratix-sim holds the upgrades, so
/// that the machine's speed cannot decide what the test sees. A group is released once it has
/// filled its slots; its remaining upgrades then start and finish as the limit allows.
#[tokio::test]
async fn three_group_plan_completes_in_order_within_limits() {
    let Built { mut env, bindings, .. } = World::new("e2e-three", SIM)
        .per_env(&[("dev", 4), ("staging", 4), ("prod", 3)])
        .sim_args(&["--delay", "100ms"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    env.hold(bindings.keys(), true).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let plan = env.create_plan("plan", three_groups()).await.unwrap();
    env.wait_plan(&plan, WAIT, "Ready", |p| {
        p.status.as_ref().is_some_and(|s| {
            find_condition(&s.conditions, reasons::READY).is_some_and(|c| c.status == ConditionStatus::True)
        })
    })
    .await
    .unwrap();
    let run = env.create_run(&format!("{plan}-manual"), &plan, false).await.unwrap();
    for (group, limit) in [("dev", 2), ("staging", 2), ("prod", 1)] {
        wait_in_flight(&seen, group, limit, WAIT)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
        let members = bindings.iter().filter(|(_, g)| *g == group).map(|(k, _)| k);
        env.hold(members, false).await.unwrap();
    }
    let done = env
        .wait_run(&run, WAIT, "a terminal state", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.clone().unwrap();
    assert_eq!(status.state, RunState::Completed, "{status:#?}");
    assert_eq!((status.completed_resources, status.total_resources), (11, 11));
    assert_eq!(
        group_counts(&status.rollout_groups),
        vec![
            group_row("dev", 4, 4, 0, 0),
            group_row("staging", 4, 4, 0, 0),
            group_row("prod", 3, 3, 0, 0)
        ]
    );
    let succeeded = find_condition(&status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (succeeded.status, succeeded.reason.as_str()),
        (ConditionStatus::True, reasons::RUN_COMPLETED)
    );
    assert!(status.started_at.is_some() && status.finished_at.is_some());
    assert_eq!(
        done.labels().get(upgradeplan::api::PLAN_LABEL),
        Some(&plan),
        "manual runs get the plan label"
    );
    assert!(done
        .owner_references()
        .iter()
        .any(|o| o.name == plan && o.controller == Some(true)));

    // Never exceeded (and, waited for above, reached).
    let o = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(o.max_in_flight.get("dev"), Some(&2), "{o:?}");
    assert_eq!(o.max_in_flight.get("staging"), Some(&2), "50% of 4: {o:?}");
    assert_eq!(o.max_in_flight.get("prod"), Some(&1), "{o:?}");
    // Group order: a group's first start comes after the previous group's last completion.
    let position = |kind: &str, g: &str, last: bool| {
        let mut it = o
            .timeline
            .iter()
            .enumerate()
            .filter(|(_, (k, _, x))| *k == kind && x == g)
            .map(|(i, _)| i);
        if last { it.next_back() } else { it.next() }.unwrap()
    };
    assert!(
        position("finish", "dev", true) < position("start", "staging", false),
        "{:#?}",
        o.timeline
    );
    assert!(
        position("finish", "staging", true) < position("start", "prod", false),
        "{:#?}",
        o.timeline
    );
    assert_eq!(o.timeline.len(), 22, "11 starts and 11 completions: {:#?}", o.timeline);
    assert!(
        o.spec_changes.values().all(|n| *n == 1),
        "each binding patched once: {o:?}"
    );
    let events = env
        .events_when(&run, |(_, r, _)| r == "UpgradeRunCompleted")
        .await
        .unwrap();
    let count = |reason: &str| events.iter().filter(|(_, r, _)| r == reason).count();
    assert_eq!(count("ResourceUpgradeStarted"), 11, "{events:#?}");
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Normal" && r == "UpgradeRunCompleted" && m == "11/11 resources upgraded to v2.0.0"),
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|(_, r, m)| r == "GroupInProgress" && m == "Group \"dev\": 4/4 resources upgraded to v2.0.0"),
        "{events:#?}"
    );
    let dev0 = format!("Resource {}-dev/dev-0 upgrading from v1.0.0 to v2.0.0", env.id);
    assert!(
        events
            .iter()
            .any(|(_, r, m)| r == "ResourceUpgradeStarted" && *m == dev0),
        "{events:#?}"
    );

    let plan_obj = env
        .wait_plan(&plan, WAIT, "lastRun recorded", |p| {
            p.status.as_ref().is_some_and(|s| s.last_run.is_some())
        })
        .await
        .unwrap();
    let ps = plan_obj.status.unwrap();
    let last = ps.last_run.unwrap();
    assert_eq!((last.name.as_str(), last.result), (run.as_str(), RunResult::Completed));
    assert_eq!((ps.phase, ps.active_run_ref.as_str()), (PlanPhase::Available, ""));
    env.teardown().await.unwrap();
}

fn two_groups() -> serde_json::Value {
    json!({
        "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
        "rolloutGroups": [
            {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}},
            {"name": "prod", "selectors": {"matchLabels": {"env": "prod"}}}
        ]
    })
}

/// The run announced its cancel with a Normal UpgradeRunCancelled (spec §4.4).
async fn announces_cancelled(env: &TestEnv, run: &str) {
    let events = env
        .events_when(run, |(_, r, _)| r == "UpgradeRunCancelled")
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|(t, r, _)| t == "Normal" && r == "UpgradeRunCancelled"),
        "Cancelled announces a Normal UpgradeRunCancelled (spec §4.4): {events:#?}"
    );
}

fn condition<'a>(r: &'a UpgradeRun, type_: &str) -> Option<&'a upgradeplan::api::Condition> {
    r.status.as_ref().and_then(|s| find_condition(&s.conditions, type_))
}

async fn spec_versions(env: &TestEnv) -> BTreeMap<String, String> {
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let lp = kube::api::ListParams::default().labels(&format!("{PROMISE_NAME_LABEL}={}", env.promise));
    api.list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|b| (b.name_any(), b.spec.version.clone()))
        .collect()
}

async fn snapshot_config_maps(env: &TestEnv, run: &str) -> Vec<String> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(env.client.clone(), &env.snapshot_namespace());
    let lp = kube::api::ListParams::default()
        .labels(&upgradeplan::engine::naming::selector(upgradeplan::api::RUN_LABEL, run));
    api.list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|c| c.name_any())
        .collect()
}

#[tokio::test]
async fn a_failing_resource_fails_the_run_and_later_groups_never_start() {
    let Built { mut env, .. } = World::new("e2e-fail", SIM)
        .per_env(&[("dev", 2), ("prod", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let dev_ns = format!("{}-dev", env.id);
    let failing = env.binding_name("dev-0");
    env.patch_binding(
        &dev_ns,
        &failing,
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": "v2.0.0"}}}),
    )
    .await
    .unwrap();
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.clone().unwrap();
    assert_eq!(status.state, RunState::Failed);
    let c = condition(&done, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, reasons::RESOURCE_UPGRADE_FAILED)
    );
    assert_eq!(c.message, "1 resource(s) failed to upgrade in rollout group \"dev\"");
    assert_eq!(status.rollout_groups[0].failed, 1);
    assert_eq!(group_counts(&status.rollout_groups)[1], group_row("prod", 2, 0, 0, 0));
    let versions = spec_versions(&env).await;
    assert!(
        versions
            .iter()
            .filter(|(n, _)| n.starts_with("prod-"))
            .all(|(_, v)| v == "v1.0.0"),
        "prod untouched: {versions:?}"
    );
    let events = env
        .events_when(&run, |(_, r, _)| r == "UpgradeRunFailed")
        .await
        .unwrap();
    let detail = format!("Resource {dev_ns}/dev-0 failed to upgrade to v2.0.0: workflow failed: simulated");
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == "ResourceUpgradeFailed" && *m == detail),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "UpgradeRunFailed"
            && m.ends_with("/4 resources upgraded to v2.0.0")),
        "{events:#?}"
    );
    let p = env
        .wait_plan(&plan, WAIT, "lastRun", |p| {
            p.status.as_ref().is_some_and(|s| s.last_run.is_some())
        })
        .await
        .unwrap();
    let last = p.status.unwrap().last_run.unwrap();
    assert_eq!(
        (last.result, last.reason.as_str(), last.message.as_str()),
        (RunResult::Failed, reasons::RESOURCE_UPGRADE_FAILED, c.message.as_str())
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_preview_snapshots_and_patches_nothing_until_resumed() {
    let metrics_addr = format!("127.0.0.1:{}", upgradeplan_e2e::harness::free_port().unwrap());
    let Built { mut env, .. } = World::new("e2e-preview", SIM)
        .per_env(&[("dev", 3)])
        .sim_args(&["--delay", "2s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&["--metrics-addr", &metrics_addr]).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-preview"), &plan, true).await.unwrap();
    let r = env
        .wait_run(&run, WAIT, "snapshot taken", |r| {
            r.status.as_ref().is_some_and(|s| !s.resource_list_refs.is_empty())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&r), RunState::InProgress);
    assert_eq!(r.status.as_ref().unwrap().total_resources, 3);
    assert_eq!(
        snapshot_config_maps(&env, &run).await,
        vec![format!("{run}-resource-snapshot")]
    );
    let s = condition(&r, reasons::SUSPENDED).unwrap();
    assert_eq!(
        (s.status, s.reason.as_str()),
        (ConditionStatus::True, reasons::SUSPENDED)
    );
    // Once the controller has reconciled the preview again, a read of the bindings (the API
    // server's, not a cache's) proves the negative: nothing was patched.
    env.settle_run(&controller, &run).await.unwrap();
    let versions = spec_versions(&env).await;
    assert_eq!(versions.len(), 3, "{versions:?}");
    assert!(
        versions.values().all(|v| v == "v1.0.0"),
        "a preview patches nothing: {versions:?}"
    );
    let p = env.plans().get(&plan).await.unwrap();
    assert_eq!(
        p.status.unwrap().active_run_ref,
        "",
        "a preview is never the active run"
    );

    // A run created after the preview becomes the active run; the preview does not supersede it.
    let active = env.create_run(&format!("{plan}-active"), &plan, false).await.unwrap();
    env.wait_plan(&plan, WAIT, "the newer run is active", |p| {
        p.status.as_ref().is_some_and(|s| s.active_run_ref == active)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));

    // Resumed, the preview is admitted at that moment, as if just created (spec §5.2): it
    // supersedes the active run and is the plan's active run until it ends.
    env.runs()
        .patch(
            &run,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    let old = env
        .wait_run(&active, WAIT, "superseded by the resumed preview", |r| {
            r.status.as_ref().is_some_and(|s| s.superseded_by.is_some())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(old.status.unwrap().superseded_by.as_deref(), Some(run.as_str()));
    assert!(old.spec.suspend);
    env.wait_plan(&plan, WAIT, "the resumed preview is the active run", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.active_run_ref == run && s.phase == upgradeplan::api::PlanPhase::Running)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let done = env
        .wait_run(&run, WAIT, "completion after resume", run_ended)
        .await
        .unwrap();
    assert_eq!(run_state(&done), RunState::Completed);
    assert_eq!(done.status.unwrap().completed_resources, 3);
    let p = env
        .wait_plan(&plan, WAIT, "the preview recorded as the last run", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.last_run.as_ref())
                .is_some_and(|l| l.name == run)
        })
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().active_run_ref, "");
    // Its end cleared the plan's run gauges.
    let (_, text) = http_get(&metrics_addr, "/metrics").await.unwrap();
    let series = format!("upgradeplan_run_resources{{group=\"dev\",plan=\"{plan}\"");
    assert!(!text.contains(&series), "gauges of an ended run remain:\n{text}");
    env.teardown().await.unwrap();
}

/// The next minute boundary at least `margin` away.
fn next_minute(margin: i64) -> chrono::DateTime<chrono::Utc> {
    use chrono::{DurationRound, Utc};
    let t = (Utc::now() + chrono::Duration::seconds(margin))
        .duration_trunc(chrono::Duration::minutes(1))
        .unwrap();
    t + chrono::Duration::minutes(1)
}

#[tokio::test]
async fn scheduled_runs_fire_once_per_trigger_and_not_while_suspended() {
    let Built { mut env, .. } = World::new("e2e-sched", SIM)
        .per_env(&[("dev", 1)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let t = next_minute(15);
    let london = t.with_timezone(&chrono_tz::Europe::London);
    // No eligible resources (from v9): the runs complete at once, as records.
    let base = |policy: serde_json::Value, suspend: bool| {
        json!({"upgradePath": {"from": ["v9"], "to": "v2.0.0"}, "upgradeExecutionPolicy": policy, "suspend": suspend,
               "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]})
    };
    let once = env
        .create_plan(
            "once",
            base(
                json!({"executeAt": london.format("%Y-%m-%dT%H:%M").to_string(), "timeZone": "Europe/London"}),
                false,
            ),
        )
        .await
        .unwrap();
    let every = env
        .create_plan("every", base(json!({"repeatSchedule": "* * * * *"}), false))
        .await
        .unwrap();
    let paused = env
        .create_plan("paused", base(json!({"repeatSchedule": "* * * * *"}), true))
        .await
        .unwrap();
    let p = env
        .wait_plan(&once, WAIT, "nextRunAt", |p| {
            p.status.as_ref().is_some_and(|s| s.next_run_at.is_some())
        })
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().next_run_at, Some(t));

    let expected = format!("{once}-{}", t.format("%Y%m%d-%H%M"));
    let r = env
        .wait_run(&expected, WAIT, "the executeAt run", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(
        run_state(&r),
        RunState::Completed,
        "zero eligible resources complete at once"
    );
    assert_eq!(
        r.annotations()
            .get(upgradeplan::api::SCHEDULED_AT_ANNOTATION)
            .map(String::as_str),
        Some(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true).as_str())
    );
    assert_eq!(r.labels().get(upgradeplan::api::PLAN_LABEL), Some(&once));
    let p = env
        .wait_plan(&once, WAIT, "lastScheduledAt", |p| {
            p.status.as_ref().is_some_and(|s| s.last_scheduled_at == Some(t))
        })
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().next_run_at, None, "executeAt fires once");

    let every_run = format!("{every}-{}", t.format("%Y%m%d-%H%M"));
    env.wait_run(&every_run, WAIT, "the repeatSchedule run", run_ended)
        .await
        .unwrap();
    // On a slow machine another minute may pass before the test suspends the plan: each trigger
    // must give exactly one run, and none may come after the suspension.
    let p = env
        .wait_plan(&every, WAIT, "lastScheduledAt", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.last_scheduled_at)
                .is_some_and(|l| l >= t)
        })
        .await
        .unwrap();
    let s = p.status.unwrap();
    assert_eq!(
        s.next_run_at,
        s.last_scheduled_at.map(|l| l + chrono::Duration::minutes(1))
    );
    env.plans()
        .patch(
            &every,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    let suspended_at = chrono::Utc::now();

    // Each plan reconciled once more (the suspended one after its suspension): whatever runs
    // they would create exist by then.
    for plan in [&once, &paused, &every] {
        env.settle_plan(&controller, plan).await.unwrap();
    }
    let runs = env.runs().list(&Default::default()).await.unwrap().items;
    let of = |plan: &str| {
        runs.iter()
            .filter(|r| r.spec.upgrade_plan_ref.name == plan)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        (of(&once).len(), of(&paused).len()),
        (1, 0),
        "executeAt fires once; a suspended plan never"
    );
    let mut triggers: Vec<String> = of(&every)
        .iter()
        .map(|r| {
            r.annotations()
                .get(upgradeplan::api::SCHEDULED_AT_ANNOTATION)
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    let total = triggers.len();
    triggers.sort();
    triggers.dedup();
    assert_eq!(triggers.len(), total, "one run per trigger: {triggers:?}");
    assert!(total >= 1, "the first trigger fired");
    for trigger in &triggers {
        let at = chrono::DateTime::parse_from_rfc3339(trigger).unwrap();
        assert!(
            at <= suspended_at,
            "a run for trigger {at} after the plan was suspended at {suspended_at}"
        );
    }
    let p = env.plans().get(&paused).await.unwrap().status.unwrap();
    assert!(
        p.last_scheduled_at.is_some_and(|l| l >= t),
        "the suspended plan's triggers were skipped, not queued: {:?}",
        p.last_scheduled_at
    );
    // nextRunAt is absent while a plan is suspended (spec §3.2) and returns on resume.
    assert_eq!(p.next_run_at, None, "a plan created suspended publishes no nextRunAt");
    let has_next = |p: &upgradeplan::api::UpgradePlan| p.status.as_ref().is_some_and(|s| s.next_run_at.is_some());
    env.wait_plan(&every, WAIT, "nextRunAt gone while suspended", |p| !has_next(p))
        .await
        .unwrap();
    env.plans()
        .patch(
            &every,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    env.wait_plan(&every, WAIT, "nextRunAt back on resume", has_next)
        .await
        .unwrap();
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_newer_run_supersedes_the_active_one() {
    let Built { mut env, .. } = World::new("e2e-super", SIM)
        .per_env(&[("dev", 4)])
        .sim_args(&["--delay", "2s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let first = env.create_run(&format!("{plan}-a"), &plan, false).await.unwrap();
    env.wait_run(&first, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    env.wait_plan(&plan, WAIT, "the first run active", |p| {
        p.status.as_ref().is_some_and(|s| s.active_run_ref == first)
    })
    .await
    .unwrap();
    // Started with the plugin: it says what the new run supersedes (issue 40 item 10).
    let second = format!("{plan}-b");
    let started = run_plugin(None, &["run", &plan, "--name", &second]).await.unwrap();
    assert_eq!(
        (started.code, started.stdout.trim()),
        (Some(0), second.as_str()),
        "{}",
        started.stderr
    );
    assert!(
        started
            .stderr
            .contains(&format!("note: it supersedes upgraderun/{first} (InProgress, ")),
        "{}",
        started.stderr
    );
    let old = env
        .wait_run(&first, WAIT, "superseded", |r| {
            r.status.as_ref().is_some_and(|s| s.superseded_by.is_some())
        })
        .await
        .unwrap();
    assert_eq!(
        old.status.as_ref().unwrap().superseded_by.as_deref(),
        Some(second.as_str())
    );
    assert!(old.spec.suspend);
    let s = condition(&old, reasons::SUSPENDED).unwrap();
    assert_eq!(
        (s.status, s.reason.as_str()),
        (ConditionStatus::True, reasons::SUPERSEDED)
    );
    // Dormant for good (spec §5.2): resume refuses it and names the run that carries on.
    let refused = run_plugin(None, &["resume", &first]).await.unwrap();
    assert_eq!(refused.code, Some(4), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!("superseded by upgraderun/{second}")),
        "{}",
        refused.stderr
    );
    let done = env
        .wait_run(&second, WAIT, "the newer run completes", run_ended)
        .await
        .unwrap();
    assert_eq!(run_state(&done), RunState::Completed);
    let old = env.runs().get(&first).await.unwrap();
    assert_eq!(
        run_state(&old),
        RunState::InProgress,
        "a superseded run keeps its state"
    );
    // The plan's own reconcile records it (the run does not write the plan's status).
    env.wait_plan(&plan, WAIT, "the newer run recorded as the last run", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.last_run.as_ref())
            .is_some_and(|l| l.name == second)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    // Deleting the old superseded run is a quiet clean-up (spec §5.2, issue 36 D9): it is not
    // cancelled, announces nothing, and leaves the plan's lastRun alone (spec §3.2).
    env.runs().delete(&first, &Default::default()).await.unwrap();
    wait_gone(env.runs(), &first, WAIT).await.unwrap();
    let p = env.plans().get(&plan).await.unwrap().status.unwrap();
    assert_eq!(
        p.last_run.as_ref().map(|l| (l.name.as_str(), l.result)),
        Some((second.as_str(), RunResult::Completed)),
        "deleting a superseded run rewrote lastRun"
    );
    // Its events are written before its finalizer goes: all there is, once it is gone.
    let events = env.events_of(&first).await.unwrap();
    assert!(
        !events.iter().any(|(_, reason, _)| reason == "UpgradeRunCancelled"),
        "a superseded run was cancelled when deleted: {events:#?}"
    );
    env.teardown().await.unwrap();
}

/// Issue 36 D2 (spec §14.2): after its snapshot a run follows its frozen plan, Promise included.
/// The plan's promiseRef edited mid-run (to a Promise without the target revision) neither
/// fails the run (PromiseRevisionNotFound) nor stops it: its bindings' changes still wake it.
#[tokio::test]
async fn a_promise_ref_edited_mid_run_changes_nothing_of_the_run() {
    let Built { mut env, .. } = World::new("e2e-repromise", SIM)
        .per_env(&[("dev", 3)])
        .sim_args(&["--delay", "1s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let spec = json!({
        "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
        "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1}]
    });
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "one upgraded", |r| {
        r.status.as_ref().is_some_and(|s| s.completed_resources >= 1)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let other = json!({"spec": {"promiseRef": {"name": format!("{}-other", env.promise)}}});
    env.plans()
        .patch(&plan, &Default::default(), &kube::api::Patch::Merge(other))
        .await
        .unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    let status = done.status.as_ref().unwrap();
    assert_eq!(
        (status.state, status.completed_resources),
        (RunState::Completed, 3),
        "{:?}\n{}",
        status.conditions,
        controller.log_text()
    );
    env.teardown().await.unwrap();
}

/// Spec §6: a trigger the controller finds later than the plan's startingDeadline is recorded
/// as missed, not run. The controller's clock starts at HH:30 a couple of hours ahead, so the
/// hourly trigger at HH:00 (after the plan's creation) is found 30 minutes late: past 10m.
#[tokio::test]
async fn a_trigger_found_past_the_starting_deadline_is_missed_not_run() {
    use chrono::Timelike;
    let metrics_addr = format!("127.0.0.1:{}", upgradeplan_e2e::harness::free_port().unwrap());
    let ahead = chrono::Utc::now() + chrono::Duration::hours(2);
    let clock_start = ahead
        .with_minute(30)
        .unwrap()
        .with_second(0)
        .unwrap()
        .with_nanosecond(0)
        .unwrap();
    let trigger = clock_start - chrono::Duration::minutes(30);
    let Built { mut env, .. } = World::new("e2e-deadline", SIM)
        .per_env(&[("dev", 1)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env
        .start_controller(&[
            "--clock-start",
            &upgradeplan::time::rfc3339(clock_start),
            "--metrics-addr",
            &metrics_addr,
        ])
        .await
        .unwrap();
    let mut spec = two_groups();
    spec["upgradeExecutionPolicy"] = json!({"repeatSchedule": "0 * * * *", "startingDeadline": "10m"});
    let plan = env.create_plan("plan", spec).await.unwrap();
    let p = env
        .wait_plan(&plan, WAIT, "the trigger recorded", |p| {
            p.status.as_ref().and_then(|s| s.last_scheduled_at).is_some()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(p.status.as_ref().unwrap().last_scheduled_at, Some(trigger));
    let events = env.events_when(&plan, |(_, r, _)| r == "TriggerMissed").await.unwrap();
    let prefix = format!("trigger {} missed by 30m", upgradeplan::time::rfc3339(trigger));
    assert!(
        events.iter().any(|(t, r, m)| t == "Warning"
            && r == "TriggerMissed"
            && m.starts_with(&prefix)
            && m.ends_with("(startingDeadline 10m)")),
        "{events:?}"
    );
    // Recorded as serviced without a run (the plan's reconcile that recorded it is done).
    env.settle_plan(&controller, &plan).await.unwrap();
    let runs: Vec<String> = env
        .runs()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|r| r.spec.upgrade_plan_ref.name == plan)
        .map(|r| r.name_any())
        .collect();
    assert!(runs.is_empty(), "a missed trigger created {runs:?}");
    let (_, text) = http_get(&metrics_addr, "/metrics").await.unwrap();
    assert!(
        text.contains(&format!("upgradeplan_triggers_missed_total{{plan=\"{plan}\"}} 1")),
        "{text}"
    );
    env.teardown().await.unwrap();
}

/// Spec §5.10 (issue 40 item 4): `kubectl upgradeplan cancel` sets spec.cancel; the run ends
/// Cancelled and stays as the record — its snapshot, its status and `history` — and the plan
/// records it as its last run.
#[tokio::test]
async fn cancel_keeps_the_run_as_the_record_of_what_it_did() {
    let Built { mut env, bindings, .. } = World::new("e2e-keep", SIM)
        .per_env(&[("dev", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    env.hold(bindings.keys(), true).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let cancelled = run_plugin(None, &["cancel", &run, "--yes"]).await.unwrap();
    assert_eq!(cancelled.code, Some(0), "{}", cancelled.stderr);
    assert!(
        cancelled.stdout.contains("it stays as the record"),
        "{}",
        cancelled.stdout
    );
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&done), RunState::Cancelled);
    let c = condition(&done, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        (
            reasons::RUN_CANCELLED,
            "UpgradeRun was cancelled before it finished (spec.cancel)"
        )
    );
    env.wait_plan(&plan, WAIT, "lastRun Cancelled", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.last_run.as_ref())
            .is_some_and(|l| l.name == run && l.result == RunResult::Cancelled)
    })
    .await
    .unwrap();
    announces_cancelled(&env, &run).await;
    // The record stays: the run, its snapshot, its history; status exits 2 (Cancelled).
    env.settle_run(&controller, &run).await.unwrap();
    assert!(env.runs().get_opt(&run).await.unwrap().is_some(), "the run was deleted");
    assert_eq!(
        snapshot_config_maps(&env, &run).await.len(),
        1,
        "the snapshot was deleted"
    );
    let snap = env.snapshot_namespace();
    let history = run_plugin(None, &["history", &plan, &run, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert_eq!(history.code, Some(0), "{}", history.stderr);
    let status = run_plugin(None, &["status", &run, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert_eq!(status.code, Some(2), "{}", status.stdout);
    // A plan's name where a run is expected means its active run, else its last (issue 40
    // item 11); a name that is neither gets a "did you mean".
    let by_plan = run_plugin(None, &["status", &plan, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert_eq!(by_plan.code, Some(2), "{}", by_plan.stderr);
    assert!(
        by_plan
            .stderr
            .contains(&format!("is an UpgradePlan: its last run, upgraderun/{run}")),
        "{}",
        by_plan.stderr
    );
    let typo = run_plugin(None, &["status", &format!("{run}x")]).await.unwrap();
    assert_eq!(typo.code, Some(4), "{}", typo.stderr);
    assert!(
        typo.stderr.contains(&format!("(did you mean {run:?}?)")),
        "{}",
        typo.stderr
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn deleting_a_run_cancels_it_and_deleting_the_plan_removes_its_runs() {
    let Built { mut env, .. } = World::new("e2e-cancel", SIM)
        .per_env(&[("dev", 3)])
        .sim_args(&["--delay", "3s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(snapshot_config_maps(&env, &run).await.len(), 1);
    env.runs().delete(&run, &Default::default()).await.unwrap();
    let p = env
        .wait_plan(&plan, WAIT, "lastRun Cancelled", |p| {
            p.status
                .as_ref()
                .and_then(|s| s.last_run.as_ref())
                .is_some_and(|l| l.result == RunResult::Cancelled)
        })
        .await
        .unwrap();
    let last = p.status.unwrap().last_run.unwrap();
    assert_eq!(
        (last.name.as_str(), last.reason.as_str()),
        (run.as_str(), reasons::RUN_CANCELLED)
    );
    announces_cancelled(&env, &run).await;
    wait_gone(env.runs(), &run, Duration::from_secs(10))
        .await
        .expect("the finalizer was released");
    assert!(
        snapshot_config_maps(&env, &run).await.is_empty(),
        "the snapshot was deleted"
    );

    let second = env.create_run(&format!("{plan}-2"), &plan, true).await.unwrap();
    env.wait_run(&second, WAIT, "owned by the plan", |r| !r.owner_references().is_empty())
        .await
        .unwrap();
    env.plans().delete(&plan, &Default::default()).await.unwrap();
    let mut gone = false;
    for _ in 0..150 {
        if env.runs().get_opt(&second).await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(gone, "deleting the plan deleted its run (garbage collection)");
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn drifted_and_deleted_bindings_are_skipped_and_never_overwritten() {
    let Built { mut env, .. } = World::new("e2e-drift", SIM)
        .per_env(&[("dev", 3)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, true).await.unwrap();
    env.wait_run(&run, WAIT, "snapshot", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let ns = format!("{}-dev", env.id);
    let drifted = env.binding_name("dev-0");
    let deleted = env.binding_name("dev-1");
    env.patch_binding(&ns, &drifted, json!({"spec": {"version": "v1.5.0"}}))
        .await
        .unwrap();
    env.bindings_api(&ns)
        .delete(&deleted, &Default::default())
        .await
        .unwrap();
    env.runs()
        .patch(
            &run,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    let done = env.wait_run(&run, WAIT, "terminal", run_ended).await.unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Completed);
    assert_eq!(group_counts(&status.rollout_groups)[0], group_row("dev", 3, 1, 0, 2));
    assert_eq!(
        spec_versions(&env).await.get(&drifted).map(String::as_str),
        Some("v1.5.0"),
        "never overwritten"
    );
    // The completion event is written after the skip events.
    let events = env
        .events_when(&run, |(_, r, _)| r == "UpgradeRunCompleted")
        .await
        .unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|(t, r, _)| t == "Warning" && r == "ResourceSkipped")
            .count(),
        2,
        "{events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|(_, r, m)| r == "ResourceSkipped" && m.starts_with(&format!("Resource {ns}/dev-1 skipped: "))),
        "{events:#?}"
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_missing_revision_makes_the_run_wait_and_a_deleted_one_fails_it() {
    let mut env = TestEnv::new("e2e-rev").await.unwrap();
    env.promise_with_revisions(&["v1.0.0"], "v1.0.0").await.unwrap();
    let ns = env.namespace("dev").await.unwrap();
    env.start_sim(SIM, &["--delay", "0s"]).unwrap();
    for i in 0..3 {
        env.resource(&ns, &format!("dev-{i}"), &[("env", "dev")], "v1.0.0")
            .await
            .unwrap();
    }
    let metrics_addr = format!("127.0.0.1:{}", upgradeplan_e2e::harness::free_port().unwrap());
    let controller = env.start_controller(&["--metrics-addr", &metrics_addr]).await.unwrap();
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let waiting = env
        .wait_run(&run, WAIT, "waiting for the revision", |r| {
            condition(r, reasons::TARGET_REVISION_READY).is_some_and(|c| c.status == ConditionStatus::False)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&waiting), RunState::Pending);
    let c = condition(&waiting, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(c.reason, reasons::PROMISE_REVISION_NOT_FOUND);
    // A run held at the revision gate exports its gauges and why it waits (spec §9.1).
    let (_, text) = http_get(&metrics_addr, "/metrics").await.unwrap();
    for series in [
        format!("upgradeplan_blocked{{group=\"dev\",plan=\"{plan}\",reason=\"RevisionMissing\"}} 1"),
        format!("upgradeplan_run_resources{{group=\"dev\",plan=\"{plan}\",state=\"pending\"}} 3"),
    ] {
        assert!(text.contains(&series), "{series} not in\n{text}");
    }
    env.create_revision("v2.0.0", true).await.unwrap();
    let done = env.wait_run(&run, WAIT, "terminal", run_ended).await.unwrap();
    assert_eq!(run_state(&done), RunState::Completed);
    let c = condition(&done, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(
        c.message,
        format!(
            "PromiseRevision for promise \"{}\" version \"v2.0.0\" is ready",
            env.promise
        )
    );

    // A run to v3.0.0 whose revision disappears after the snapshot fails.
    env.create_revision("v3.0.0", false).await.unwrap();
    let mut spec = two_groups();
    spec["upgradePath"] = json!({"from": ["v2.0.0"], "to": "v3.0.0"});
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan3 = env.create_plan("plan3", spec).await.unwrap();
    for i in 0..3 {
        env.patch_binding(
            &ns,
            &env.binding_name(&format!("dev-{i}")),
            json!({"metadata": {"annotations": {"kratix-sim/delay": "3s"}}}),
        )
        .await
        .unwrap();
    }
    let run3 = env.create_run(&format!("{plan3}-1"), &plan3, false).await.unwrap();
    env.wait_run(&run3, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap();
    env.delete_revision("v3.0.0").await.unwrap();
    let failed = env.wait_run(&run3, WAIT, "terminal", run_ended).await.unwrap();
    assert_eq!(run_state(&failed), RunState::Failed);
    let c = condition(&failed, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(c.reason, reasons::PROMISE_REVISION_NOT_FOUND);
    // Every path into Failed announces it, once (spec §4.4).
    let events = env
        .events_when(&run3, |(_, r, _)| r == "UpgradeRunFailed")
        .await
        .unwrap();
    let failures: Vec<_> = events
        .iter()
        .filter(|(t, r, _)| t == "Warning" && r == "UpgradeRunFailed")
        .collect();
    assert_eq!(failures.len(), 1, "{events:#?}");
    env.teardown().await.unwrap();
}

/// Kratix deletes the resources of a deleted PromiseRevision (spec §2). Deleting the `from`
/// revision mid-run removes the resources still at it: the run counts them Skipped (their
/// binding is gone), finishes the one it had started, and completes.
#[tokio::test]
async fn resources_kratix_deletes_with_their_revision_are_skipped() {
    let Built { mut env, bindings, .. } = World::new("e2e-revdel", SIM)
        .per_env(&[("dev", 3)])
        .sim_args(&["--revision-cleanup"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    env.hold(bindings.keys(), true).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(1);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    wait_in_flight(&seen, "dev", 1, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    env.wait_revision_finalizer("v1.0.0", WAIT).await.unwrap();
    env.delete_revision("v1.0.0").await.unwrap();
    wait_gone(
        Api::<upgradeplan::api::kratix::PromiseRevision>::all(env.client.clone()),
        &env.revision_name("v1.0.0"),
        WAIT,
    )
    .await
    .unwrap();
    let left = spec_versions(&env).await;
    assert_eq!(
        left.values().collect::<Vec<_>>(),
        ["v2.0.0"],
        "only the binding being upgraded is left: {left:?}"
    );
    let upgrading = bindings
        .keys()
        .filter(|k| left.keys().any(|name| k.ends_with(&format!("/{name}"))));
    env.hold(upgrading, false).await.unwrap();
    let done = env.wait_run(&run, WAIT, "terminal", run_ended).await.unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    assert_eq!(group_counts(&status.rollout_groups)[0], group_row("dev", 3, 1, 0, 2));
    env.teardown().await.unwrap();
}

/// Spec §5.7 (issue 67): deleting the *target* revision mid-run makes Kratix delete every
/// resource at it, again on every requeue. The run must stop at once — fail
/// PromiseRevisionNotFound — so that Kratix deletes at most the resources in flight, never the
/// next ones the freed slots would start (which it did: the run went on to Completed, every
/// resource Skipped and deleted).
#[tokio::test]
async fn deleting_the_target_revision_mid_run_loses_at_most_the_resources_in_flight() {
    let Built { mut env, bindings, .. } = World::new("e2e-revtarget", SIM)
        .per_env(&[("dev", 6)])
        .sim_args(&["--revision-cleanup"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    env.hold(bindings.keys(), true).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(2);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    wait_in_flight(&seen, "dev", 2, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    env.wait_revision_finalizer("v2.0.0", WAIT).await.unwrap();
    env.delete_revision("v2.0.0").await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    wait_gone(
        Api::<upgradeplan::api::kratix::PromiseRevision>::all(env.client.clone()),
        &env.revision_name("v2.0.0"),
        WAIT,
    )
    .await
    .unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Failed, "{}", controller.log_text());
    let c = find_condition(&status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(c.reason, reasons::PROMISE_REVISION_NOT_FOUND, "{}", c.message);
    let left = spec_versions(&env).await;
    assert_eq!(
        left.values().filter(|v| *v == "v1.0.0").count(),
        4,
        "only the two in flight were deleted with the revision: {left:?}"
    );
    let starts = seen
        .lock()
        .unwrap()
        .timeline
        .iter()
        .filter(|(k, _, _)| *k == "start")
        .count();
    assert_eq!(starts, 2, "nothing started after the deletion");
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn windows_gate_the_start_of_upgrades() {
    let Built { mut env, .. } = World::new("e2e-window", SIM)
        .per_env(&[("dev", 2), ("prod", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let t = next_minute(20);
    let cron = format!("{} {} * * *", t.format("%M"), t.format("%H"));
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["resourceUpgradeWindows"] =
        json!([{"kind": "allow", "schedule": cron, "duration": "10m"}]);
    spec["rolloutGroups"][1]["resourceUpgradeWindows"] = json!([{"kind": "deny", "schedule": cron, "duration": "40s"}]);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let done = env
        .wait_run(&run, Duration::from_secs(180), "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    let o = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(o.timeline.iter().filter(|(k, _, _)| *k == "start").count(), 4);
    let finished = done.status.unwrap().finished_at.unwrap();
    assert!(
        finished >= t + chrono::Duration::seconds(40),
        "the deny window held prod until {}, finished {finished}",
        t + chrono::Duration::seconds(40)
    );
    let events = env.events_of(&run).await.unwrap();
    // The first start event must not precede the allow window: events carry second precision.
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(env.client.clone(), "default");
    let lp =
        kube::api::ListParams::default().fields(&format!("involvedObject.name={run},reason=ResourceUpgradeStarted"));
    let starts: Vec<chrono::DateTime<chrono::Utc>> = api
        .list(&lp)
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|e| e.first_timestamp.as_ref().map(|t| upgradeplan::time::to_chrono(&t.0)))
        .collect();
    assert_eq!(starts.len(), 4, "{events:#?}");
    assert!(
        starts.iter().all(|s| *s >= t),
        "a start before the allow window opened at {t}: {starts:?}"
    );
    assert_eq!(
        starts
            .iter()
            .filter(|s| **s >= t + chrono::Duration::seconds(40))
            .count(),
        2,
        "prod waited for the deny window: {starts:?}"
    );
    env.teardown().await.unwrap();
}

/// Issue 15: a window whose start times fall in a spring gap opens at the first instant after
/// the gap. The controller's clock starts 20 s before Europe/Berlin jumps from 02:00 to 03:00
/// on 2026-03-29 (01:00Z) and runs at real speed; the window starts at 02:00 and 02:43 local,
/// which do not exist that day. Before the fix the gate stayed shut until 2026-04-04.
#[tokio::test]
async fn a_window_opens_at_the_end_of_a_daylight_saving_gap() {
    const LEAD: Duration = Duration::from_secs(20);
    let gap = chrono::DateTime::parse_from_rfc3339("2026-03-29T01:00:00Z").unwrap();
    let clock_start = (gap - chrono::Duration::from_std(LEAD).unwrap()).to_rfc3339();
    // Taken before the controller starts: its clock reaches the gap LEAD after this, or later.
    let started = std::time::Instant::now();
    let Built { mut env, .. } = World::new("e2e-dst-gap", SIM)
        .per_env(&[("dev", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&["--clock-start", &clock_start]).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let spec = json!({
        "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
        "rolloutGroups": [{
            "name": "dev",
            "selectors": {"matchLabels": {"env": "dev"}},
            "resourceUpgradeWindows": [
                {"kind": "allow", "schedule": "0,43 2 * * 0,6", "duration": "4h", "timeZone": "Europe/Berlin"}
            ]
        }]
    });
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "in progress", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    // Held while the controller's clock is before the gap (the watch records every start).
    while started.elapsed() < LEAD - Duration::from_secs(3) {
        let starts = seen.lock().unwrap().timeline.len();
        assert_eq!(starts, 0, "an upgrade started before the window opened");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let done = env
        .wait_run(&run, Duration::from_secs(60), "completed", run_ended)
        .await
        .unwrap_or_else(|e| panic!("the window did not open at the gap: {e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    assert!(
        started.elapsed() >= LEAD,
        "completed {:?} after the controller started, before its clock reached the gap",
        started.elapsed()
    );
    env.teardown().await.unwrap();
}

/// Spec §4.2: every name the CRDs accept works end to end. A plan of 229 characters (the
/// longest whose scheduled run names fit) gets its scheduled run; a manual run of 253 characters
/// of a plan of 253 characters completes. Names go into labels shortened (54 + '-' + 8 hex), in
/// full into annotations, and snapshot ConfigMap and event names are shortened before their
/// suffix. Before the fix the first run was refused by the API server (label value too long).
#[tokio::test]
async fn the_longest_names_work_end_to_end() {
    use upgradeplan::api::{PLAN_LABEL, RUN_LABEL};
    use upgradeplan::engine::naming::label_value;
    let Built { mut env, .. } = World::new("e2e-names", SIM)
        .per_env(&[("dev", 2), ("prod", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let named = |len: usize, tag: &str| {
        let stem = format!("{tag}-{}", "x".repeat(300));
        stem[..len - env.id.len() - 1].to_string()
    };
    let t = next_minute(15);
    let mut scheduled_spec = two_groups();
    scheduled_spec["rolloutGroups"] = json!([{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]);
    scheduled_spec["upgradeExecutionPolicy"] = json!({"executeAt": t.format("%Y-%m-%dT%H:%M").to_string()});
    let scheduled_plan = env.create_plan(&named(229, "sched"), scheduled_spec).await.unwrap();
    assert_eq!(scheduled_plan.len(), 229);
    let mut manual_spec = two_groups();
    manual_spec["rolloutGroups"] = json!([{"name": "prod", "selectors": {"matchLabels": {"env": "prod"}}}]);
    let manual_plan = env.create_plan(&named(253, "manual"), manual_spec).await.unwrap();
    assert_eq!(manual_plan.len(), 253);
    let manual_run = format!("{}{}", &manual_plan[..240], "-run-20261130");
    assert_eq!(manual_run.len(), 253);
    env.create_run(&manual_run, &manual_plan, false).await.unwrap();

    let scheduled_run = format!("{scheduled_plan}-{}", t.format("%Y%m%d-%H%M"));
    for (run, plan) in [(&manual_run, &manual_plan), (&scheduled_run, &scheduled_plan)] {
        let done = env
            .wait_run(run, Duration::from_secs(150), "terminal", run_ended)
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
        let status = done.status.clone().unwrap();
        assert_eq!(
            (status.state, status.completed_resources, status.total_resources),
            (RunState::Completed, 2, 2)
        );
        assert_eq!(done.labels().get(PLAN_LABEL), Some(&label_value(plan)));
        assert_eq!(done.annotations().get(PLAN_LABEL), Some(plan));
        let shards = snapshot_config_maps(&env, run).await;
        assert_eq!(shards.len(), 1, "{run}");
        assert!(
            shards[0].len() <= 253 && shards[0].ends_with("-resource-snapshot"),
            "{shards:?}"
        );
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(env.client.clone(), &env.snapshot_namespace());
        let cm = api.get(&shards[0]).await.unwrap();
        assert_eq!(cm.labels().get(RUN_LABEL), Some(&label_value(run)));
        assert_eq!(cm.annotations().get(RUN_LABEL), Some(run));
        let events = env.events_of(run).await.unwrap();
        assert!(
            events.iter().filter(|(_, r, _)| r == "ResourceUpgradeStarted").count() == 2
                && events.iter().any(|(_, r, _)| r == "UpgradeRunCompleted"),
            "{events:#?}"
        );
        let p = env
            .wait_plan(plan, WAIT, "lastRun", |p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.last_run.as_ref())
                    .is_some_and(|l| &l.name == run)
            })
            .await
            .unwrap();
        assert_eq!(p.status.unwrap().last_run.unwrap().result, RunResult::Completed);
    }
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn invalid_plans_are_not_ready_and_create_no_runs() {
    let mut env = TestEnv::new("e2e-invalid").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let cases = [
        (
            "cron",
            json!({"repeatSchedule": "0 0 * * * *"}),
            None,
            "spec.upgradeExecutionPolicy.repeatSchedule",
        ),
        (
            "zone",
            json!({"repeatSchedule": "* * * * *", "timeZone": "Europe/Londres"}),
            None,
            "spec.upgradeExecutionPolicy.timeZone",
        ),
        (
            "regex",
            json!({"repeatSchedule": "* * * * *"}),
            Some("/v1(/"),
            "spec.upgradePath.from[0]",
        ),
        (
            "never",
            json!({"repeatSchedule": "0 0 31 2 *"}),
            None,
            "spec.upgradeExecutionPolicy.repeatSchedule",
        ),
    ];
    let mut plans = vec![];
    for (suffix, policy, from, field) in cases {
        let spec = json!({"upgradePath": {"from": [from.unwrap_or("v1.0.0")], "to": "v2.0.0"}, "upgradeExecutionPolicy": policy,
                          "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]});
        let plan = env.create_plan(suffix, spec).await.unwrap();
        let p = env
            .wait_plan(&plan, WAIT, "Ready=False", |p| {
                p.status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, reasons::READY))
                    .is_some_and(|c| c.status == ConditionStatus::False)
            })
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
        let status = p.status.unwrap();
        let ready = find_condition(&status.conditions, reasons::READY).unwrap();
        assert_eq!(ready.reason, reasons::INVALID_SPEC);
        assert!(
            ready.message.starts_with(&format!("{field}: ")),
            "{suffix}: {}",
            ready.message
        );
        assert_eq!(status.next_run_at, None);
        plans.push(plan);
    }
    // A valid plan created after them must fire at the next minute: a controller that never
    // schedules fails here, and once it has fired, every invalid one would have fired too.
    let valid = env
        .create_plan(
            "valid",
            json!({"upgradePath": {"from": ["v9"], "to": "v2.0.0"}, "upgradeExecutionPolicy": {"repeatSchedule": "* * * * *"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}),
        )
        .await
        .unwrap();
    // A manual run of an invalid plan waits in Pending with PlanResolved=False/PlanInvalid and
    // one Warning event, and is not rewritten over and over (its condition's time holds).
    let stuck = env
        .create_run(&format!("{}-manual", plans[2]), &plans[2], false)
        .await
        .unwrap();
    let waiting = env
        .wait_run(&stuck, WAIT, "PlanInvalid", |r| {
            condition(r, reasons::PLAN_RESOLVED).is_some_and(|c| c.reason == reasons::PLAN_INVALID)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&waiting), RunState::Pending);
    let c = condition(&waiting, reasons::PLAN_RESOLVED).unwrap();
    assert!(
        c.message.starts_with(&format!(
            "UpgradePlan \"{}\" is invalid: spec.upgradePath.from[0]: ",
            plans[2]
        )),
        "{}",
        c.message
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let fired = loop {
        let runs = env.runs().list(&Default::default()).await.unwrap().items;
        if runs.iter().any(|r| r.spec.upgrade_plan_ref.name == valid) {
            break runs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the valid plan never fired\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(
        fired
            .iter()
            .all(|r| !plans.contains(&r.spec.upgrade_plan_ref.name)
                || r.metadata.name.as_deref() == Some(stuck.as_str())),
        "an invalid plan created a run"
    );
    // Settled long ago: over a bounded watch, nothing rewrites it (the old code looped).
    let settled = env.runs().get(&stuck).await.unwrap().metadata.resource_version;
    let rewritten = env
        .wait_run(&stuck, Duration::from_secs(5), "a rewrite", |r| {
            r.metadata.resource_version != settled
        })
        .await;
    assert!(
        rewritten.is_err(),
        "the run of an invalid plan was rewritten while nothing changed"
    );
    let events = env.events_of(&stuck).await.unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|(t, r, _)| t == "Warning" && r == reasons::PLAN_INVALID)
            .count(),
        1,
        "{events:#?}"
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_controller_killed_mid_run_resumes_without_double_patches() {
    let Built { mut env, .. } = World::new("e2e-crash", SIM)
        .per_env(&[("dev", 6)])
        .sim_args(&["--delay", "1500ms"])
        .build()
        .await
        .unwrap();
    let mut controller = env.start_controller(&[]).await.unwrap();
    let seen = observe_bindings(&env, "v2.0.0");
    let mut spec = two_groups();
    spec["rolloutGroups"][0]["maxConcurrent"] = json!(2);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "2 done", |r| {
        r.status.as_ref().is_some_and(|s| s.completed_resources >= 2)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    controller.kill().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let restarted = env.start_controller(&[]).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", restarted.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    assert_eq!(done.status.unwrap().completed_resources, 6);
    let o = std::mem::take(&mut *seen.lock().unwrap());
    // The limit holds across the crash (never exceeded; whether it was reached is timing).
    assert!(o.max_in_flight.get("dev").is_some_and(|n| *n <= 2), "{o:?}");
    assert!(
        o.spec_changes.len() == 6 && o.spec_changes.values().all(|n| *n == 1),
        "each binding patched exactly once: {o:?}"
    );
    env.teardown().await.unwrap();
}

/// The Lease's holder, waiting up to `timeout` for it to be `who` (a controller's pod name).
async fn wait_lease_holder(env: &TestEnv, ns: &str, lease: &str, who: &ControllerProcess, timeout: Duration) -> String {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), ns);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut holder;
    loop {
        holder = leases
            .get_opt(lease)
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default();
        if holder.starts_with(&format!("{}_", who.pod_name)) {
            return holder;
        }
        if tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "the Lease is held by {holder:?}, not {} after {timeout:?}\n{}",
        who.pod_name,
        who.log_text()
    );
}

/// The API writes a controller made, per resource, from its `rest_client_requests_total`.
async fn writes_of(metrics_addr: &str) -> BTreeMap<String, f64> {
    let (_, text) = http_get(metrics_addr, "/metrics").await.unwrap();
    let mut writes = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("rest_client_requests_total{")) {
        let label = |key: &str| {
            line.split(&format!("{key}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let count: f64 = line.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or(0.0);
        if ["POST", "PUT", "PATCH", "DELETE"].contains(&label("method").as_str()) {
            *writes.entry(label("resource")).or_insert(0.0) += count;
        }
    }
    writes
}

/// A controller electing a leader on `lease` (short timings), serving metrics on `metrics`.
async fn start_leader(env: &mut TestEnv, ns: &str, lease: &str, metrics: &str) -> ControllerProcess {
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        ns,
        "--leader-election-id",
        lease,
        "--lease-duration",
        "4s",
        "--renew-deadline",
        "3s",
        "--retry-period",
        "500ms",
        "--metrics-addr",
        metrics,
    ];
    env.start_controller(&args).await.unwrap()
}

#[tokio::test]
async fn with_leader_election_only_the_leader_acts_and_a_standby_takes_over() {
    let mut env = TestEnv::new("e2e-leader").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("dev").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    for i in 0..2 {
        env.resource(&ns, &format!("dev-{i}"), &[("env", "dev")], "v1.0.0")
            .await
            .unwrap();
    }
    let lease = format!("{}-lease", env.id);
    let addr = || format!("127.0.0.1:{}", upgradeplan_e2e::harness::free_port().unwrap());
    let (a_metrics, b_metrics, c_metrics) = (addr(), addr(), addr());
    let mut a = start_leader(&mut env, &ns, &lease, &a_metrics).await;
    let a_holds = wait_lease_holder(&env, &ns, &lease, &a, WAIT).await;
    // `version` names the controller running: the Lease holder's own record.
    let running = |env_ns: String, lease: String| async move {
        let o = upgradeplan_e2e::harness::run_plugin(
            None,
            &[
                "version",
                "--controller-namespace",
                &env_ns,
                "--controller-lease",
                &lease,
                "-o",
                "json",
            ],
        )
        .await
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
        v["controllerVersion"].clone()
    };
    let shown = running(ns.clone(), lease.clone()).await;
    assert_eq!(
        (
            shown["gitVersion"].as_str(),
            shown["leader"].as_str(),
            shown["leading"].as_bool()
        ),
        (
            Some(concat!("v", env!("CARGO_PKG_VERSION"))),
            Some(a_holds.as_str()),
            Some(true)
        ),
        "{shown}"
    );
    let mut b = start_leader(&mut env, &ns, &lease, &b_metrics).await;
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", a.log_text()));
    wait_lease_holder(&env, &ns, &lease, &a, Duration::ZERO).await;
    // The standby wrote nothing but its attempts at the Lease; the leader did the work.
    let standby = writes_of(&b_metrics).await;
    assert!(standby.keys().all(|r| r == "leases"), "the standby wrote {standby:?}");
    let leader = writes_of(&a_metrics).await;
    assert!(
        leader.get("resourcebindings").is_some_and(|n| *n >= 2.0) && leader.contains_key("upgraderuns/status"),
        "the leader's writes: {leader:?}"
    );

    // The leader stops gracefully: it releases the Lease and the standby takes over at once
    // (well within the 4 s lease a crash would leave behind).
    let status = a.terminate().await.unwrap();
    assert!(
        status.success(),
        "graceful shutdown exits 0: {status:?}\n{}",
        a.log_text()
    );
    let b_holds = wait_lease_holder(&env, &ns, &lease, &b, Duration::from_secs(3)).await;
    assert_eq!(
        running(ns.clone(), lease.clone()).await["leader"].as_str(),
        Some(b_holds.as_str()),
        "after the takeover"
    );
    env.resource(&ns, "dev-2", &[("env", "dev")], "v1.0.0").await.unwrap();
    let second = env.create_run(&format!("{plan}-2"), &plan, false).await.unwrap();
    let done = env
        .wait_run(&second, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", b.log_text()));
    assert_eq!(done.status.unwrap().completed_resources, 1);

    // A leader that dies without releasing is replaced once its lease runs out.
    let mut c = start_leader(&mut env, &ns, &lease, &c_metrics).await;
    b.kill().await;
    wait_lease_holder(&env, &ns, &lease, &c, Duration::from_secs(15)).await;
    c.kill().await;
    env.teardown().await.unwrap();
}

#[tokio::test]
/// /healthz and /readyz answer; on SIGTERM readiness goes off while the controllers still work —
/// a reconcile waits in a binding patch the proxy holds — and the process exits 0 once that
/// reconcile ends. Seen through /readyz and the proxy, not the log.
async fn health_endpoints_and_graceful_shutdown() {
    let mut env = TestEnv::new("e2e-health").await.unwrap();
    let ns = env.upgrade_world(&[("h0", "dev")], SIM, &[]).await.unwrap();
    let proxy = FaultProxy::start(env.client.clone()).await.unwrap();
    let kubeconfig = proxy.kubeconfig(&std::env::temp_dir(), &env.id).unwrap();
    let mut controller = env
        .start_controller(&["--log-format", "json", "--kubeconfig", kubeconfig.to_str().unwrap()])
        .await
        .unwrap();
    let mut addr = None;
    for _ in 0..100 {
        addr = controller
            .log_text()
            .lines()
            .find(|l| l.contains("serving /healthz"))
            .and_then(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                v["fields"]["bound"].as_str().map(str::to_string)
            });
        if addr.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let addr = addr.unwrap_or_else(|| panic!("no bound address in the JSON log:\n{}", controller.log_text()));
    assert_eq!(http_get(&addr, "/healthz").await.unwrap(), (200, "ok\n".to_string()));
    assert_eq!(http_get(&addr, "/readyz").await.unwrap(), (200, "ok\n".to_string()));
    assert_eq!(http_get(&addr, "/nope").await.unwrap().0, 404);

    // The binding's patch is held (its path alone: the watches go on), so that a run's reconcile
    // is in flight when the signal comes.
    proxy.set_faults(Faults {
        only_paths: Some(format!("/namespaces/{ns}/resourcebindings/")),
        hold_one_in: 1,
        hold: Duration::from_secs(15),
        ..Faults::default()
    });
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while proxy.holding() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no binding patch reached the proxy:\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    controller.request_stop().unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (code, _) = http_get(&addr, "/readyz")
            .await
            .unwrap_or_else(|e| panic!("/readyz unreachable before readiness went off: {e}"));
        if code == 503 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/readyz still {code} after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        proxy.holding() >= 1 && controller.child.try_wait().unwrap().is_none(),
        "readiness went off while the reconcile was still in flight"
    );
    let status = tokio::time::timeout(WAIT, controller.child.wait())
        .await
        .expect("the controller exits once its reconcile ends")
        .unwrap();
    assert!(status.success(), "SIGTERM exits 0: {status:?}");
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_world_dropped_without_teardown_is_removed() {
    use k8s_openapi::api::core::v1::Namespace;
    use upgradeplan::api::kratix::Promise;
    let mut env = TestEnv::new("e2e-drop").await.unwrap();
    env.promise_with_revisions(&["v1.0.0"], "v1.0.0").await.unwrap();
    let ns = env.namespace("dev").await.unwrap();
    // Cluster-scoped objects of the world go too, a run's finalizer with no controller to
    // release it notwithstanding: left behind, every later controller would list them.
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.runs()
        .patch_metadata(
            &run,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": [upgradeplan::api::RUN_FINALIZER]}})),
        )
        .await
        .unwrap();
    let (client, promise) = (env.client.clone(), env.promise.clone());
    drop(env); // as when a test panics before its teardown
    let namespace = Api::<Namespace>::all(client.clone()).get_opt(&ns).await.unwrap();
    assert!(
        namespace.is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
        "the namespace of a dropped world remains"
    );
    wait_gone(Api::<Promise>::all(client.clone()), &promise, WAIT)
        .await
        .unwrap();
    wait_gone(Api::<UpgradeRun>::all(client.clone()), &run, WAIT)
        .await
        .unwrap();
    wait_gone(Api::<upgradeplan::api::UpgradePlan>::all(client), &plan, WAIT)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lost_snapshot_fails_the_run_once() {
    let Built { mut env, bindings, .. } = World::new("e2e-lost", SIM)
        .per_env(&[("dev", 2)])
        .sim_args(&["--delay", "0s"])
        .build()
        .await
        .unwrap();
    let mut controller = env.start_controller(&[]).await.unwrap();
    let plan = env.create_plan("plan", two_groups()).await.unwrap();
    // Upgrades held in kratix-sim: a run that stays InProgress. (Not a preview: a preview is
    // dormant until resumed and cannot fail, spec §5.2.)
    env.hold(bindings.keys(), true).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "snapshot taken", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    // The controller keeps a snapshot it read in memory; a new one must read the ConfigMap.
    controller.kill().await;
    let config_map = format!("{run}-resource-snapshot");
    Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(env.client.clone(), &env.snapshot_namespace())
        .delete(&config_map, &Default::default())
        .await
        .unwrap();
    let restarted = env.start_controller(&[]).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "failed", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", restarted.log_text()));
    assert_eq!(run_state(&done), RunState::Failed);
    // Its digest was recorded: a shard gone is a snapshot that is not what was written (issue 24).
    let c = condition(&done, reasons::RUN_SUCCEEDED).unwrap();
    let recorded = upgradeplan::time::rfc3339(done.status.as_ref().unwrap().started_at.unwrap());
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.clone()),
        (
            ConditionStatus::False,
            reasons::SNAPSHOT_TAMPERED,
            format!("snapshot ConfigMap {config_map} does not match the digest recorded at {recorded}")
        )
    );
    let events = env
        .events_when(&run, |(_, r, _)| r == "UpgradeRunFailed")
        .await
        .unwrap();
    let failed: Vec<_> = events
        .iter()
        .filter(|(t, r, _)| t == "Warning" && r == "UpgradeRunFailed")
        .collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    env.teardown().await.unwrap();
}

/// The controller, and a run of a plan of one group, `dev`, `limit` at a time, to v2.0.0; with a
/// watch on the bindings from before its start.
async fn one_group_run(
    env: &mut TestEnv,
    limit: u32,
) -> (
    ControllerProcess,
    String,
    std::sync::Arc<std::sync::Mutex<upgradeplan_e2e::harness::Observed>>,
) {
    let controller = env.start_controller(&[]).await.unwrap();
    let mut spec = two_groups();
    spec["rolloutGroups"] =
        json!([{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": limit}]);
    let plan = env.create_plan("plan", spec).await.unwrap();
    let seen = observe_bindings(env, "v2.0.0");
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    (controller, run, seen)
}

/// Spec §5.5 with Kratix's identities (§2): a resource the run counted Succeeded whose Resource
/// Request is deleted and created again gets a binding of the same name, at the version a new
/// binding starts at (here v1.0.0, the latest); the run's outcome stands, and it never upgrades
/// that resource again. Before outcomes were recorded, the run read the new binding as a resource
/// not yet upgraded and started it a second time.
#[tokio::test]
async fn a_request_created_again_under_the_same_binding_name_is_not_upgraded_again() {
    let Built { mut env, ns, .. } = World::new("e2e-recreated", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v1.0.0")
        .sim_args(&["--binding-version", "pinned"])
        .build()
        .await
        .unwrap();
    let mut keys = Vec::new();
    for name in ["a", "b"] {
        let b = env.request(&ns, name, &[("env", "dev")], &[]).await.unwrap();
        env.wait_binding(&ns, &b.name_any(), WAIT, "applied at v1.0.0", |b| {
            upgradeplan::api::kratix::BindingFacts::last_applied_version(b) == "v1.0.0"
        })
        .await
        .unwrap();
        keys.push(format!("{ns}/{}", b.name_any()));
    }
    let (a, b) = (keys[0].clone(), keys[1].clone());
    // b's upgrade starts but does not finish until released: the run is still going when a's
    // request is created again.
    env.hold([&b], true).await.unwrap();
    let (controller, run, seen) = one_group_run(&mut env, 2).await;
    env.wait_run(&run, WAIT, "a counted Succeeded", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.rollout_groups.first().is_some_and(|g| g.succeeded == 1))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));

    let a_name = a.split_once('/').unwrap().1.to_string();
    let requests = env.requests_api(&ns);
    requests.delete("a", &Default::default()).await.unwrap();
    wait_gone(requests.clone(), "a", WAIT).await.unwrap();
    let again = env.request(&ns, "a", &[("env", "dev")], &[]).await.unwrap();
    assert_eq!(again.name_any(), a_name, "the same binding name");
    assert_eq!(again.spec.version, "v1.0.0");
    env.wait_binding(&ns, &a_name, WAIT, "the new a applied at v1.0.0", |b| {
        upgradeplan::api::kratix::BindingFacts::last_applied_version(b) == "v1.0.0"
    })
    .await
    .unwrap();
    // The controller has read the new binding before b completes the run.
    env.settle_run(&controller, &run).await.unwrap();
    env.hold([&b], false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    assert_eq!(group_counts(&status.rollout_groups), [("dev".to_string(), 2, 2, 0, 0)]);
    let now_a = env.bindings_api(&ns).get(&a_name).await.unwrap();
    assert_eq!(
        now_a.spec.version, "v1.0.0",
        "the re-created resource was not upgraded again"
    );
    assert_eq!(
        seen.lock().unwrap().spec_changes.get(&a).copied(),
        Some(1),
        "a started once"
    );
    env.teardown().await.unwrap();
}

/// Spec §5.5: a skip stands. Someone moves `c` on by hand (`spec.version: v3.0.0`) — the run
/// counts it Skipped and says so — then sets it back to v1.0.0 while the run is still going: the
/// run never upgrades it, and its count does not move back. Before outcomes were recorded, the
/// set-back binding read as a resource not yet upgraded, and the run started it.
#[tokio::test]
async fn a_skip_undone_by_hand_stands_and_the_resource_is_not_upgraded() {
    let Built { mut env, ns, bindings } = World::new("e2e-undone", SIM)
        .bindings(&[("a", "dev"), ("c", "dev")])
        .build()
        .await
        .unwrap();
    let (a, c) = (env.binding_name("a"), env.binding_name("c"));
    let a_key = format!("{ns}/{a}");
    let c_key = format!("{ns}/{c}");
    assert!(bindings.contains_key(&a_key) && bindings.contains_key(&c_key));
    // a's upgrade starts but does not finish until released: the run is still going when c is
    // set back.
    env.hold([&a_key], true).await.unwrap();
    let (controller, run, seen) = one_group_run(&mut env, 1).await;
    // a takes the only slot (names in order); c waits for it, and someone moves c on meanwhile.
    wait_in_flight(&seen, "dev", 1, WAIT)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    env.patch_and_settle_binding(&ns, &c, json!({"spec": {"version": "v3.0.0"}}))
        .await
        .unwrap();
    env.wait_run(&run, WAIT, "c counted Skipped", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.rollout_groups.first().is_some_and(|g| g.skipped == 1))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let skipped = env
        .events_when(&run, |(_, r, m)| r == "ResourceSkipped" && m.contains("/c "))
        .await
        .unwrap();
    assert!(!skipped.is_empty(), "the skip was announced");

    // Undone: c asks for the version it has applied again.
    env.patch_and_settle_binding(&ns, &c, json!({"spec": {"version": "v1.0.0"}}))
        .await
        .unwrap();
    env.settle_run(&controller, &run).await.unwrap();
    env.hold([&a_key], false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    assert_eq!(group_counts(&status.rollout_groups), [("dev".to_string(), 2, 1, 0, 1)]);
    let now_c = env.bindings_api(&ns).get(&c).await.unwrap();
    assert_eq!(now_c.spec.version, "v1.0.0", "the skipped resource was never upgraded");
    assert_eq!(
        seen.lock().unwrap().spec_changes.get(&c_key),
        None,
        "c never moved to v2.0.0"
    );
    env.teardown().await.unwrap();
}

/// How many binding patches the controller sends at once (`run::PATCH_CONCURRENCY`).
const CONCURRENT_SENDERS: usize = 16;

/// A run cancelled while its pass is still sending a group's starts (spec §14.1): once the cancel
/// is in the controller's cache, no more of them go out — only the requests already in the air,
/// at most one per concurrent sender. The API server is slowed to the test's pace: the proxy
/// holds every binding patch until the cancel has reached the controller's watch.
#[tokio::test]
async fn a_cancel_stops_the_starts_a_pass_is_still_sending() {
    let mut env = TestEnv::new("cancel-sending").await.unwrap();
    let names: Vec<String> = (0..60).map(|i| format!("r{i}")).collect();
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "all")).collect();
    let ns = env.upgrade_world(&bindings, SIM, &[]).await.unwrap();
    // Kratix takes an hour over each upgrade: nothing ends, only starts are counted.
    for name in &names {
        env.patch_binding(
            &ns,
            &env.binding_name(name),
            json!({"metadata": {"annotations": {"kratix-sim/delay": "1h"}}}),
        )
        .await
        .unwrap();
    }
    let proxy = FaultProxy::start(env.client.clone()).await.unwrap();
    let kubeconfig = proxy.kubeconfig(&std::env::temp_dir(), &env.id).unwrap();
    let controller = env
        .start_controller(&["--kubeconfig", kubeconfig.to_str().unwrap()])
        .await
        .unwrap();
    proxy.set_faults(Faults {
        only_paths: Some("/resourcebindings/".into()),
        hold_writes: true,
        ..Default::default()
    });
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}, "maxConcurrent": "100%"}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    // Every sender waits in a start the API server has not answered.
    let deadline = tokio::time::Instant::now() + WAIT;
    while proxy.holding() < CONCURRENT_SENDERS as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the controller never had {CONCURRENT_SENDERS} starts in the air ({} held)\n{}",
            proxy.holding(),
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The cancel, by the test's own client, marked so that the proxy sees it pass to the
    // controller's watch of runs.
    let mark = format!("{}-cancelled", env.id);
    proxy.look_for(&mark);
    env.runs()
        .patch(
            &run,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"upgradeplan-test/mark": mark}},
                                            "spec": {"cancel": true}})),
        )
        .await
        .unwrap();
    while !proxy.passed(&mark) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cancel never reached the controller's watch\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    proxy.release_writes();
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&done), RunState::Cancelled, "{:?}", done.status);
    let started: Vec<String> = env
        .bindings_api(&ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| b.annotations().get(upgradeplan::api::UPGRADED_BY_ANNOTATION) == Some(&run))
        .map(|b| b.name_any())
        .collect();
    eprintln!("started once cancelled: {} of {}", started.len(), names.len());
    assert!(
        started.len() >= CONCURRENT_SENDERS && started.len() <= 2 * CONCURRENT_SENDERS,
        "{} of {} started: the {CONCURRENT_SENDERS} in the air, at most one more per sender\n{}",
        started.len(),
        names.len(),
        controller.log_text()
    );
    assert!(
        controller
            .log_text()
            .contains("starts withheld: their admission ended while they were being sent"),
        "{}",
        controller.log_text()
    );
    env.teardown().await.unwrap();
}
