//! The controller end to end on the real control plane, with kratix-sim playing Kratix.
//! Each test runs its own controller (selecting only its plans) and its own kratix-sim.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;
use upgradeplan::api::kratix::{ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{
    find_condition, reasons, ConditionStatus, GroupStatus, PlanPhase, RunResult, RunState, UpgradeRun,
};
use upgradeplan_e2e::harness::{ControllerProcess, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

fn state(r: &UpgradeRun) -> RunState {
    r.status.as_ref().map(|s| s.state).unwrap_or_default()
}

fn terminal(r: &UpgradeRun) -> bool {
    state(r).is_terminal()
}

/// What a watch in the test saw of the Promise's bindings while the run went on.
#[derive(Default, Debug)]
struct Observed {
    /// Highest number of bindings in flight (spec at target, not yet applied) per `env` label.
    max_in_flight: HashMap<String, usize>,
    /// In the order seen: ("start" | "finish", binding, env).
    timeline: Vec<(&'static str, String, String)>,
    /// How many times each binding's spec.version was set to the target (patches).
    spec_changes: HashMap<String, usize>,
}

fn observe(env: &TestEnv, to: &'static str) -> Arc<Mutex<Observed>> {
    let seen = Arc::new(Mutex::new(Observed::default()));
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let config = watcher::Config::default().labels(&format!("{PROMISE_NAME_LABEL}={}", env.promise));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut last: HashMap<String, (String, String, String)> = HashMap::new();
        let mut stream = watcher(api, config).default_backoff().applied_objects().boxed();
        while let Some(Ok(b)) = stream.next().await {
            let key = format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any());
            let group = b.labels().get("env").cloned().unwrap_or_default();
            let now = (
                b.spec.version.clone(),
                b.last_applied_version().to_string(),
                group.clone(),
            );
            let before = last.insert(key.clone(), now.clone());
            let mut o = out.lock().unwrap();
            if now.0 == to && before.as_ref().is_none_or(|p| p.0 != to) {
                *o.spec_changes.entry(key.clone()).or_default() += 1;
                if now.1 != to {
                    o.timeline.push(("start", key.clone(), group.clone()));
                }
            }
            if now.1 == to && before.as_ref().is_none_or(|p| p.1 != to) {
                o.timeline.push(("finish", key.clone(), group.clone()));
            }
            let in_flight = last
                .values()
                .filter(|(spec, applied, g)| *g == group && spec == to && applied != to)
                .count();
            let max = o.max_in_flight.entry(group).or_default();
            *max = (*max).max(in_flight);
        }
    });
    seen
}

/// A Promise with v1.0.0 and v2.0.0, bindings at v1.0.0 labelled `env` in three namespaces,
/// kratix-sim with a per-upgrade delay, and a controller.
async fn world(
    prefix: &str,
    per_env: &[(&str, usize)],
    sim_delay: &str,
) -> (TestEnv, ControllerProcess, BTreeMap<String, String>) {
    let mut env = TestEnv::new(prefix).await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let mut bindings = BTreeMap::new();
    for (group, n) in per_env {
        let ns = env.namespace(group).await.unwrap();
        for i in 0..*n {
            let b = env
                .binding(
                    &ns,
                    &format!("{group}-{i}"),
                    &[("env", group)],
                    "v1.0.0",
                    Some("v1.0.0"),
                )
                .await
                .unwrap();
            bindings.insert(format!("{ns}/{}", b.name_any()), group.to_string());
        }
    }
    env.start_sim(SIM, &["--delay", sim_delay]).unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    (env, controller, bindings)
}

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

fn group(name: &str, total: i64, succeeded: i64, failed: i64, skipped: i64) -> GroupStatus {
    GroupStatus {
        name: name.into(),
        total,
        succeeded,
        failed,
        skipped,
    }
}

#[tokio::test]
async fn three_group_plan_completes_in_order_within_limits() {
    let (env, controller, _) = world("e2e-three", &[("dev", 4), ("staging", 4), ("prod", 3)], "700ms").await;
    let seen = observe(&env, "v2.0.0");
    let plan = env.create_plan("plan", three_groups()).await.unwrap();
    env.wait_plan(&plan, WAIT, "Ready", |p| {
        p.status.as_ref().is_some_and(|s| {
            find_condition(&s.conditions, reasons::READY).is_some_and(|c| c.status == ConditionStatus::True)
        })
    })
    .await
    .unwrap();
    let run = env.create_run(&format!("{plan}-manual"), &plan, false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "a terminal state", terminal)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.clone().unwrap();
    assert_eq!(status.state, RunState::Completed, "{status:#?}");
    assert_eq!((status.completed_resources, status.total_resources), (11, 11));
    assert_eq!(
        status.rollout_groups,
        vec![
            group("dev", 4, 4, 0, 0),
            group("staging", 4, 4, 0, 0),
            group("prod", 3, 3, 0, 0)
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
    let events = env.events_of(&run).await.unwrap();
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
