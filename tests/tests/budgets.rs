//! Failure budgets, progress deadlines and run history limits (spec §13.1) end to end: the real
//! control plane, kratix-sim failing and delaying chosen resources, the controller.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use serde_json::{json, Value};
use upgradeplan::api::{
    find_condition, reasons, ConditionStatus, RunState, UPGRADED_BY_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION,
};
use upgradeplan_e2e::harness::{run_plugin, started_at, Built, TestEnv, World};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

async fn binding(env: &TestEnv, ns: &str, name: &str, set: &str, group: &str, annotations: Value) {
    env.resource(ns, name, &[("set", set), ("env", group)], "v1.0.0")
        .await
        .unwrap();
    env.patch_binding(
        ns,
        &env.binding_name(name),
        json!({"metadata": {"annotations": annotations}}),
    )
    .await
    .unwrap();
}

fn two_groups(set: &str, first: Value) -> Value {
    let mut dev = json!({"name": "dev", "selectors": {"matchLabels": {"set": set, "env": "dev"}}});
    for (k, v) in first.as_object().unwrap() {
        dev[k] = v.clone();
    }
    json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
           "rolloutGroups": [dev, {"name": "prod", "selectors": {"matchLabels": {"set": set, "env": "prod"}}}]})
}

/// The names of `plan`'s runs that exist and are not being deleted, sorted.
async fn live_runs(env: &TestEnv, plan: &str) -> Vec<String> {
    let mut names: Vec<String> = env
        .runs()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|r| r.plan_name() == plan && r.metadata.deletion_timestamp.is_none())
        .map(|r| r.metadata.name.unwrap())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_failure_within_budget_completes_the_run_and_one_more_fails_it() {
    let Built { mut env, ns, .. } = World::new("budget", SIM).build().await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let fail = json!({"kratix-sim/fail-version": "v2.0.0"});
    // Set a: one of two dev resources fails; the budget is 1.
    binding(&env, &ns, "a-d0", "a", "dev", fail.clone()).await;
    binding(&env, &ns, "a-d1", "a", "dev", json!({})).await;
    binding(&env, &ns, "a-p0", "a", "prod", json!({})).await;
    // Set b: both dev resources fail; the budget is 1.
    binding(&env, &ns, "b-d0", "b", "dev", fail.clone()).await;
    binding(&env, &ns, "b-d1", "b", "dev", fail).await;
    binding(&env, &ns, "b-p0", "b", "prod", json!({})).await;
    let within = env
        .create_plan("within", two_groups("a", json!({"maxFailures": 1})))
        .await
        .unwrap();
    let over = env
        .create_plan("over", two_groups("b", json!({"maxFailures": "50%"})))
        .await
        .unwrap();
    let run_a = env.create_run(&format!("{within}-1"), &within, false).await.unwrap();
    let run_b = env.create_run(&format!("{over}-1"), &over, false).await.unwrap();

    let a = env.wait_ended(&run_a).await.unwrap();
    let status = a.status.clone().unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    let c = find_condition(&status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            "RunCompletedWithFailures",
            "2/3 resources upgraded to v2.0.0; 1 failed within the failure budget"
        )
    );
    assert_eq!(
        (status.rollout_groups[0].failed, status.rollout_groups[1].succeeded),
        (1, 1),
        "the second group ran"
    );
    assert_eq!(
        env.live_binding(&ns, "a-p0").await.unwrap().last_applied_version(),
        "v2.0.0"
    );
    let events = env
        .events_when(&run_a, |(t, r, _)| t == "Warning" && r == "UpgradeRunCompleted")
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == "UpgradeRunCompleted" && m == &c.message),
        "{events:?}"
    );
    let plan = env
        .wait_plan(&within, WAIT, "lastRun", |p| {
            p.status.as_ref().and_then(|s| s.last_run.as_ref()).is_some()
        })
        .await
        .unwrap();
    let last = plan.status.unwrap().last_run.unwrap();
    assert_eq!(
        (last.reason.as_str(), last.message.as_str()),
        ("RunCompletedWithFailures", c.message.as_str())
    );

    // The plugin: the budget's use, the failed resource with Kratix's message, and exit codes
    // that treat a tolerated failure as a completion unless asked otherwise.
    let snap = env.snapshot_namespace();
    let status = run_plugin(None, &["status", &run_a, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert!(
        status
            .stdout
            .contains("Failure budget: dev: 1 failed within budget (1 allowed)")
            && status
                .stdout
                .contains(&format!("Failed:\n  {ns}/a-d0: workflow failed: simulated")),
        "{}",
        status.stdout
    );
    let watched = run_plugin(None, &["status", &run_a, "-w", "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert_eq!(watched.code, Some(0), "{}", watched.stderr);
    let strict = run_plugin(
        None,
        &[
            "status",
            &run_a,
            "-w",
            "--fail-on-tolerated",
            "--snapshot-namespace",
            &snap,
        ],
    )
    .await
    .unwrap();
    assert_eq!(strict.code, Some(1), "{}", strict.stderr);
    let history = run_plugin(None, &["history", &within, &run_a, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert!(
        history
            .stdout
            .contains("Failure budget: dev: 1 failed within budget (1 allowed)"),
        "{}",
        history.stdout
    );

    // 50% of 2 tolerates 1: two failures fail the run in its first group; prod never starts.
    let b = env.wait_ended(&run_b).await.unwrap().status.unwrap();
    assert_eq!(b.state, RunState::Failed);
    let c = find_condition(&b.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        (
            "ResourceUpgradeFailed",
            "2 resource(s) failed to upgrade in rollout group \"dev\""
        )
    );
    assert_eq!(
        env.live_binding(&ns, "b-p0").await.unwrap().spec.version,
        "v1.0.0",
        "prod never started"
    );
    env.teardown().await.unwrap();
}

/// Kratix re-runs a failed workflow by itself (`reconcileAfterFailure`, spec §2): here 2 s after
/// the failure, and the second attempt succeeds. The run counted the failure and it stands
/// (spec §5.5): the run completes with one failure within its budget, not as a clean success.
#[tokio::test]
async fn a_failure_stands_when_kratix_retries_the_resource_by_itself() {
    let Built { mut env, ns, .. } = World::new("stands", SIM)
        .sim_args(&["--retry-after-failure", "2s"])
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    binding(&env, &ns, "x", "s", "dev", json!({"kratix-sim/fail-version": "v2.0.0"})).await;
    // y keeps the dev group open until the retry of x has succeeded.
    binding(&env, &ns, "y", "s", "dev", json!({"kratix-sim/hold": "true"})).await;
    binding(&env, &ns, "p0", "s", "prod", json!({})).await;
    let plan = env
        .create_plan("stands", two_groups("s", json!({"maxFailures": 1, "maxConcurrent": 2})))
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "x recorded failed", |r| {
        r.status
            .as_ref()
            .and_then(|s| s.rollout_groups.first())
            .is_some_and(|g| g.failed_resources.iter().any(|f| f.name == "x"))
    })
    .await
    .unwrap();
    // Fix x: Kratix's next attempt (at most 2 s after its last failure) succeeds.
    let x = env.binding_name("x");
    env.patch_binding(
        &ns,
        &x,
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": null}}}),
    )
    .await
    .unwrap();
    env.wait_binding(&ns, &x, WAIT, "x upgraded by Kratix's own retry", |b| {
        b.last_applied_version() == "v2.0.0"
    })
    .await
    .unwrap();
    env.hold([&format!("{ns}/{}", env.binding_name("y"))], false)
        .await
        .unwrap();

    let r = env.wait_ended(&run).await.unwrap().status.unwrap();
    assert_eq!(r.state, RunState::Completed, "{}", controller.log_text());
    let c = find_condition(&r.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        (
            "RunCompletedWithFailures",
            "2/3 resources upgraded to v2.0.0; 1 failed within the failure budget"
        )
    );
    let dev = &r.rollout_groups[0];
    assert_eq!((dev.succeeded, dev.failed), (1, 1), "x still counts failed");
    assert_eq!(dev.failed_resources.len(), 1);
    assert_eq!(
        (
            dev.failed_resources[0].namespace.as_str(),
            dev.failed_resources[0].name.as_str()
        ),
        (ns.as_str(), "x")
    );
    assert_eq!(dev.failed_resources[0].detail, "workflow failed: simulated");

    // history says what happened after.
    let snap = env.snapshot_namespace();
    let history = run_plugin(None, &["history", &plan, &run, "--snapshot-namespace", &snap])
        .await
        .unwrap();
    assert!(
        history
            .stdout
            .contains("workflow failed: simulated (Kratix has since applied v2.0.0)"),
        "{}",
        history.stdout
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_resource_past_its_deadline_counts_as_failed_and_frees_its_slot() {
    let Built { mut env, ns, .. } = World::new("deadline", SIM).build().await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    // One at a time: a-slow never finishes (kratix-sim waits an hour); after 3 s it counts as
    // failed and b-next takes its slot.
    binding(&env, &ns, "a-slow", "c", "dev", json!({"kratix-sim/delay": "1h"})).await;
    binding(&env, &ns, "b-next", "c", "dev", json!({})).await;
    binding(&env, &ns, "c-p0", "c", "prod", json!({})).await;
    let plan = env
        .create_plan(
            "deadline",
            two_groups(
                "c",
                json!({"maxConcurrent": 1, "maxFailures": 1, "progressDeadline": "3s"}),
            ),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let r = env.wait_ended(&run).await.unwrap().status.unwrap();
    assert_eq!(r.state, RunState::Completed, "{}", controller.log_text());
    assert_eq!((r.rollout_groups[0].failed, r.rollout_groups[0].succeeded), (1, 1));
    let (slow, next) = (
        env.live_binding(&ns, "a-slow").await.unwrap(),
        env.live_binding(&ns, "b-next").await.unwrap(),
    );
    assert_eq!(slow.last_applied_version(), "v1.0.0", "still running in Kratix");
    let waited = started_at(&next) - started_at(&slow);
    assert!(
        waited >= chrono::Duration::seconds(3),
        "b-next started {waited} after a-slow: the slot was held until the deadline"
    );
    let events = env
        .events_when(&run, |(_, r, m)| {
            r == "ResourceUpgradeFailed" && m.contains("did not finish within 3s")
        })
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|(_, _, m)| m.ends_with("failed to upgrade to v2.0.0: did not finish within 3s")),
        "{events:?}"
    );
    env.teardown().await.unwrap();
}

/// A resource Kratix retries by itself (its spec still at the target since last week's run, the
/// stamp that run wrote) is in flight for the next run, but not its start: the next run's
/// `progressDeadline` never fails it (spec §13.1), and the run completes once Kratix is done.
#[tokio::test]
async fn a_resource_kratix_retries_by_itself_is_not_failed_by_the_next_runs_deadline() {
    let Built { mut env, ns, .. } = World::new("own-deadline", SIM).build().await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    binding(&env, &ns, "k-retried", "k", "dev", json!({"kratix-sim/delay": "8s"})).await;
    // Last week's run moved it to v2.0.0; Kratix works on it again now.
    env.patch_binding(
        &ns,
        &env.binding_name("k-retried"),
        json!({"metadata": {"annotations": {
                   UPGRADED_BY_ANNOTATION: "weekly-41",
                   UPGRADE_STARTED_AT_ANNOTATION: "2026-11-30T23:00:00Z"}},
               "spec": {"version": "v2.0.0"}}),
    )
    .await
    .unwrap();
    let plan = env
        .create_plan(
            "own-deadline",
            two_groups("k", json!({"maxFailures": 0, "progressDeadline": "2s"})),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let r = env.wait_ended(&run).await.unwrap().status.unwrap();
    assert_eq!(
        r.state,
        RunState::Completed,
        "{:?}\n{}",
        r.conditions,
        controller.log_text()
    );
    assert_eq!(r.rollout_groups[0].failed, 0, "{:?}", r.rollout_groups[0]);
    assert_eq!(r.total_resources, 1, "the retried resource was in the run's snapshot");
    let retried = env.live_binding(&ns, "k-retried").await.unwrap();
    assert_eq!(retried.last_applied_version(), "v2.0.0", "Kratix finished it");
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn run_history_limit_keeps_the_newest_runs_of_each_kind() {
    let Built { mut env, ns, .. } = World::new("history", SIM).build().await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    binding(&env, &ns, "d0", "d", "dev", json!({})).await;
    binding(
        &env,
        &ns,
        "f0",
        "f",
        "dev",
        json!({"kratix-sim/fail-version": "v2.0.0"}),
    )
    .await;
    let limited = |set: &str| {
        let mut spec = two_groups(set, json!({}));
        spec["runHistoryLimit"] = json!({"succeeded": 2, "failed": 1});
        spec
    };
    let ok_plan = env.create_plan("ok", limited("d")).await.unwrap();
    let failing_plan = env.create_plan("failing", limited("f")).await.unwrap();
    // Runs one after the other: four that complete (the first upgrades d0, the rest find it at
    // the target), two that fail.
    let sequence = async |plan: &str, prefix: &str, n: usize, want: RunState| {
        let mut runs = vec![];
        for i in 0..n {
            let run = env
                .create_run(&format!("{plan}-{prefix}{i}"), plan, false)
                .await
                .unwrap();
            assert_eq!(env.wait_ended(&run).await.unwrap().status.unwrap().state, want, "{run}");
            runs.push(run);
        }
        runs
    };
    let (completed, failed) = tokio::join!(
        sequence(&ok_plan, "c", 4, RunState::Completed),
        sequence(&failing_plan, "f", 2, RunState::Failed)
    );
    let mut kept = (vec![], vec![]);
    for _ in 0..120 {
        kept = (live_runs(&env, &ok_plan).await, live_runs(&env, &failing_plan).await);
        if kept.0 == completed[2..] && kept.1 == failed[1..] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        kept.0,
        completed[2..].to_vec(),
        "the newest two Completed runs stay\n{}",
        controller.log_text()
    );
    assert_eq!(kept.1, failed[1..].to_vec(), "the newest Failed run stays");
    for (plan, last) in [(&ok_plan, &completed[3]), (&failing_plan, &failed[1])] {
        let status = env.plans().get(plan).await.unwrap().status.unwrap();
        assert_eq!(
            &status.last_run.unwrap().name,
            last,
            "lastRun is not changed by pruning"
        );
    }
    // Each pruned run is announced (a plan reconcile racing the cache may repeat one: the
    // event's count grows, no new run is named).
    let events = env
        .events_when(&ok_plan, |(_, r, m)| r == "RunDeleted" && m.contains(&completed[1]))
        .await
        .unwrap();
    let named: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|(_, r, _)| r == "RunDeleted")
        .map(|(_, _, m)| m.as_str())
        .collect();
    let expected: Vec<String> = completed[..2]
        .iter()
        .map(|r| format!("Deleted UpgradeRun \"{r}\": beyond spec.runHistoryLimit"))
        .collect();
    let expected: std::collections::BTreeSet<&str> = expected.iter().map(String::as_str).collect();
    assert_eq!(named, expected, "{events:?}");
    env.teardown().await.unwrap();
}

/// The same limit across scheduled runs: a plan that fires every minute keeps only its newest
/// Completed run, and each pruned run's snapshot goes with it. The controller's decision clock
/// runs 20 times as fast (hidden `--clock-rate`): a cron minute passes in three seconds.
#[tokio::test]
async fn run_history_limit_applies_to_scheduled_runs_and_takes_their_snapshots() {
    let Built { mut env, ns: _ns, .. } = World::new("sched-history", SIM).build().await.unwrap();
    let controller = env.start_controller(&["--clock-rate", "20"]).await.unwrap();
    let mut spec = two_groups("nothing", json!({}));
    spec["upgradeExecutionPolicy"] = json!({"repeatSchedule": "* * * * *"});
    spec["runHistoryLimit"] = json!({"succeeded": 1});
    let plan = env.create_plan("every-minute", spec).await.unwrap();
    // Three triggers: up to three decision-clock minutes, nine seconds.
    let deadline = std::time::Instant::now() + WAIT;
    let mut seen = std::collections::BTreeSet::new();
    loop {
        for r in env.runs().list(&Default::default()).await.unwrap().items {
            if r.plan_name() == plan {
                seen.insert(r.metadata.name.clone().unwrap());
            }
        }
        if seen.len() >= 3 || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert!(
        seen.len() >= 3,
        "three scheduled runs: {seen:?}\n{}",
        controller.log_text()
    );
    // No more triggers from here: on a busy machine the 20× clock would otherwise go on making
    // runs, and which one is newest (and kept) would be the machine's speed's to decide.
    let patched = env
        .plans()
        .patch(
            &plan,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    let generation = patched.metadata.generation;
    env.wait_plan(&plan, WAIT, "the suspension observed", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) >= generation
    })
    .await
    .unwrap();
    // <plan>-YYYYMMDD-HHMM sorts by time.
    let newest = live_runs(&env, &plan).await.into_iter().max().unwrap();
    env.wait_run(&newest, WAIT, "completed", |r| {
        r.status.as_ref().is_some_and(|s| s.state == RunState::Completed)
    })
    .await
    .unwrap();
    let snap = env.snapshot_namespace();
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.client.clone(), &snap);
    let mut left = (vec![], vec![]);
    for _ in 0..120 {
        let runs = live_runs(&env, &plan).await;
        let mut snapshots: Vec<String> = config_maps
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|n| n.starts_with(&plan))
            .collect();
        snapshots.sort();
        left = (runs, snapshots);
        if left.0 == [newest.clone()] && left.1 == [format!("{newest}-resource-snapshot")] {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(left.0, vec![newest.clone()], "only the newest Completed run stays");
    assert_eq!(
        left.1,
        vec![format!("{newest}-resource-snapshot")],
        "the pruned runs' snapshots went with them (every run has one)"
    );
    env.teardown().await.unwrap();
}
