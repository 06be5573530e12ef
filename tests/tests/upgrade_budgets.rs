//! Upgrade budgets (spec §13.8), end to end: the real control plane, two Promises each with its
//! own kratix-sim, the controller. A budget is cluster-wide; the one here selects this test's
//! plans only (the test's label).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::{
    find_condition, reasons, RunState, UpgradeBudget, UpgradePlan, UpgradeRun, UPGRADED_BY_ANNOTATION,
};
use upgradeplan_e2e::harness::{run_ended, run_plugin, run_state, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(180);

/// When `run` started the binding `b`, if it did.
fn started_by(b: &ResourceBinding, run: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let a = b.metadata.annotations.as_ref()?;
    (a.get(UPGRADED_BY_ANNOTATION)? == run).then_some(())?;
    let at = a.get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION)?;
    Some(
        chrono::DateTime::parse_from_rfc3339(at)
            .ok()?
            .with_timezone(&chrono::Utc),
    )
}

/// Bindings Kratix is working on now for one of `runs`: started by it, not applied yet, not
/// failed there (unless a retry is asked).
async fn in_flight(env: &TestEnv, namespaces: &[&str], runs: &[String]) -> Vec<String> {
    let mut busy = Vec::new();
    for ns in namespaces {
        let api: Api<ResourceBinding> = Api::namespaced(env.client.clone(), ns);
        for b in api.list(&ListParams::default()).await.unwrap() {
            let by = b
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(UPGRADED_BY_ANNOTATION));
            let status = b.status.clone().unwrap_or_default();
            let failed = status
                .conditions
                .iter()
                .any(|c| c.type_ == "UpgradeSucceeded" && c.status == "False")
                && b.metadata
                    .labels
                    .as_ref()
                    .is_none_or(|l| !l.contains_key(upgradeplan::api::kratix::MANUAL_RECONCILIATION_LABEL));
            if by.is_some_and(|by| runs.contains(by)) && status.last_applied_version != b.spec.version && !failed {
                busy.push(format!("{ns}/{}", b.metadata.name.clone().unwrap_or_default()));
            }
        }
    }
    busy
}

/// Two plans of two Promises (four bindings each, `maxConcurrent: 4`) under one budget of 2:
/// sampled throughout, never more than 2 upgrades are in flight across both, the cap holds across
/// a controller SIGKILL, both runs progress together (each started an upgrade before either
/// ended: the run that waits is woken as units free, and takes its share), and the run the budget
/// holds says so.
#[tokio::test]
async fn two_plans_under_a_budget_of_two_never_exceed_two_in_flight_and_progress_together() {
    let mut a = TestEnv::new("budget-a").await.unwrap();
    let mut b = TestEnv::new("budget-b").await.unwrap();
    let names = ["r0", "r1", "r2", "r3"];
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (*n, "all")).collect();
    let ns_a = a.upgrade_world(&bindings, SIM, &["--delay", "2s"]).await.unwrap();
    let ns_b = b.upgrade_world(&bindings, SIM, &["--delay", "2s"]).await.unwrap();
    let (k, v) = a.selector();
    let spec = |promise: &str| {
        json!({"promiseRef": {"name": promise}, "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
               "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}, "maxConcurrent": 4}]})
    };
    // Both plans carry this test's label, so that its controller serves both Promises' plans.
    let plans: Api<UpgradePlan> = Api::all(a.client.clone());
    let mut plan_names = Vec::new();
    for (suffix, promise) in [("plan-a", &a.promise), ("plan-b", &b.promise)] {
        let name = format!("{}-{suffix}", a.id);
        let plan: UpgradePlan = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
            "metadata": {"name": name, "labels": {k.clone(): v.clone()}}, "spec": spec(promise)
        }))
        .unwrap();
        plans.create(&PostParams::default(), &plan).await.unwrap();
        plan_names.push(name);
    }
    let budget_name = format!("{}-saturday", a.id);
    let budget: UpgradeBudget = serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeBudget",
        "metadata": {"name": budget_name, "labels": {k.clone(): v.clone()}},
        "spec": {"maxInFlight": 2, "planSelector": {"matchLabels": {k.clone(): v.clone()}}}
    }))
    .unwrap();
    let budgets: Api<UpgradeBudget> = Api::all(a.client.clone());
    budgets.create(&PostParams::default(), &budget).await.unwrap();
    // explain and match --resource name the budget that applies, with its max.
    let words = format!("UpgradeBudget \"{budget_name}\" (at most 2 in flight)");
    let explained = run_plugin(None, &["explain", &plan_names[0]]).await.unwrap();
    assert!(explained.stdout.contains(&words), "{explained:?}");
    let resource = format!("{ns_a}/r0");
    let matched = run_plugin(None, &["match", &plan_names[0], "--resource", &resource])
        .await
        .unwrap();
    assert!(
        matched
            .stdout
            .contains(&format!("Its upgrade also waits for a free unit of {words}")),
        "{matched:?}"
    );
    // forecast is paced by it, alone: other plans' runs assumed absent, and said so.
    let forecast = run_plugin(
        None,
        &["forecast", &plan_names[0], "--per-resource", "1m", "-o", "json"],
    )
    .await
    .unwrap();
    let forecast: serde_json::Value =
        serde_json::from_str(&forecast.stdout).unwrap_or_else(|e| panic!("{e}: {forecast:?}"));
    assert_eq!(
        forecast["assumptions"]["budgets"],
        format!("{words}; other plans' runs under them assumed absent"),
        "{forecast}"
    );
    let (start, finish) = (&forecast["groups"][0]["start"], &forecast["groups"][0]["finish"]);
    let minutes = (chrono::DateTime::parse_from_rfc3339(finish.as_str().unwrap()).unwrap()
        - chrono::DateTime::parse_from_rfc3339(start.as_str().unwrap()).unwrap())
    .num_minutes();
    assert_eq!(minutes, 2, "four upgrades of a minute, two at a time: {forecast}");
    let mut controller = a.start_controller(&[]).await.unwrap();
    let mut runs = Vec::new();
    for plan in &plan_names {
        runs.push(a.create_run(&format!("{plan}-1"), plan, false).await.unwrap());
    }

    let namespaces = [ns_a.as_str(), ns_b.as_str()];
    let run_api: Api<UpgradeRun> = Api::all(a.client.clone());
    let (mut peak, mut samples, mut killed, mut held_seen) = (0, 0, false, false);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let busy = in_flight(&a, &namespaces, &runs).await;
        assert!(
            busy.len() <= 2,
            "more than the budget in flight: {busy:?}\n{}",
            controller.log_text()
        );
        peak = peak.max(busy.len());
        samples += 1;
        let mut ended = 0;
        for run in &runs {
            let r = run_api.get(run).await.unwrap();
            let s = r.status.clone().unwrap_or_default();
            held_seen |= find_condition(&s.conditions, reasons::BUDGETED)
                .is_some_and(|c| c.reason == reasons::BUDGET_EXHAUSTED && c.message.contains(&budget_name));
            if run_ended(&r) {
                assert_eq!(run_state(&r), RunState::Completed, "{run}: {s:?}");
                ended += 1;
            }
        }
        // Halfway, the controller is killed and started again: the cap is derived, not remembered.
        if !killed && peak == 2 && samples > 5 {
            controller.kill().await;
            controller = a.start_controller(&[]).await.unwrap();
            killed = true;
        }
        if ended == runs.len() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs not ended; in flight {busy:?}\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(peak, 2, "the budget's units were used");
    assert!(killed, "the controller was killed mid-way");
    assert!(held_seen, "a run said the budget held it");
    // Both progressed together: each run's first start precedes the first end of either.
    let mut first_starts = Vec::new();
    let mut ends = Vec::new();
    for (ns, run) in namespaces.iter().zip(&runs) {
        let api: Api<ResourceBinding> = Api::namespaced(a.client.clone(), ns);
        let first = api
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter_map(|b| started_by(b, run))
            .min()
            .unwrap();
        first_starts.push(first);
        ends.push(run_api.get(run).await.unwrap().status.unwrap().finished_at.unwrap());
    }
    let first_end = ends.iter().min().unwrap();
    assert!(
        first_starts.iter().all(|s| s < first_end),
        "one run waited for the other to end: first starts {first_starts:?}, ends {ends:?}\n{}",
        controller.log_text()
    );
    let status = a
        .wait_budget(&budget_name, WAIT, "no upgrade in flight", |b| {
            b.status.as_ref().is_some_and(|s| s.in_flight == 0 && s.runs == 0)
        })
        .await
        .unwrap();
    assert!(status
        .status
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == reasons::READY)));
    // The plugin lists it, derived as the controller derives it.
    let listed = run_plugin(None, &["budgets", &budget_name]).await.unwrap();
    assert!(
        listed.stdout.contains(&format!("{budget_name} — 0 of 2 in flight"))
            && plan_names.iter().all(|p| listed.stdout.contains(p.as_str())),
        "{listed:?}"
    );
    b.teardown().await.unwrap();
    a.teardown().await.unwrap();
}

/// A run superseded while Kratix works on its upgrades keeps their units (spec §13.8): under a
/// budget of 2, run 1 has its two slow `prod` upgrades in flight (its `dev` done); a resource
/// joins `dev` since, and run 2 supersedes run 1 — its `dev` start of the newcomer waits until
/// run 1's upgrades end: sampled throughout, never 3 in flight. Before, the superseded run
/// dropped out of the count and run 2 started at once.
#[tokio::test]
async fn a_superseded_runs_upgrades_hold_their_budget_units_until_kratix_is_done() {
    let mut env = TestEnv::new("budget-supersede").await.unwrap();
    let bindings = [("d0", "dev"), ("p0", "prod"), ("p1", "prod")];
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", "1s"]).await.unwrap();
    for name in ["p0", "p1"] {
        env.patch_binding(
            &ns,
            &env.binding_name(name),
            json!({"metadata": {"annotations": {"kratix-sim/delay": "12s"}}}),
        )
        .await
        .unwrap();
    }
    let group = |name: &str| json!({"name": name, "selectors": {"matchLabels": {"env": name}}, "maxConcurrent": 2});
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [group("dev"), group("prod")]}),
        )
        .await
        .unwrap();
    let (k, v) = env.selector();
    let budget_name = format!("{}-two", env.id);
    let budget: UpgradeBudget = serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeBudget",
        "metadata": {"name": budget_name, "labels": {k.clone(): v.clone()}},
        "spec": {"maxInFlight": 2, "planSelector": {"matchLabels": {k: v}}}
    }))
    .unwrap();
    Api::<UpgradeBudget>::all(env.client.clone())
        .create(&PostParams::default(), &budget)
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let first = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let runs = vec![first.clone(), format!("{plan}-2")];
    let namespaces = [ns.as_str()];
    let mut prod = vec![
        format!("{ns}/{}", env.binding_name("p0")),
        format!("{ns}/{}", env.binding_name("p1")),
    ];
    prod.sort();
    // Run 1's prod upgrades both in flight.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut busy = in_flight(&env, &namespaces, &runs).await;
        busy.sort();
        if busy == prod {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run 1 never had prod in flight: {busy:?}\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A resource joins dev; run 2 (its snapshot holds it, and run 1's prod upgrades in flight).
    env.resource(&ns, "d-late", &[("env", "dev")], "v1.0.0").await.unwrap();
    let second = env.create_run(&runs[1], &plan, false).await.unwrap();
    let (mut samples, mut peak) = (0, 0);
    loop {
        let busy = in_flight(&env, &namespaces, &runs).await;
        assert!(
            busy.len() <= 2,
            "more than the budget in flight after the supersede: {busy:?}\n{}",
            controller.log_text()
        );
        peak = peak.max(busy.len());
        samples += 1;
        let r = env.runs().get(&second).await.unwrap();
        if run_ended(&r) {
            assert_eq!(run_state(&r), RunState::Completed, "{:?}", r.status);
            assert_eq!(r.status.as_ref().unwrap().total_resources, 3, "{:?}", r.status);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run 2 did not end; in flight {busy:?}\n{}",
            controller.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(samples > 20, "sampled throughout ({samples} samples)");
    assert_eq!(peak, 2, "run 1's upgrades held the units");
    // Run 2 started the newcomer only once run 1's upgrades had ended.
    let api: Api<ResourceBinding> = Api::namespaced(env.client.clone(), &ns);
    let late = api.get(&env.binding_name("d-late")).await.unwrap();
    let started = started_by(&late, &second)
        .unwrap_or_else(|| panic!("run 2 did not start d-late: {:?}", late.metadata.annotations));
    for p in ["p0", "p1"] {
        let b = api.get(&env.binding_name(p)).await.unwrap();
        let done = b
            .status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "UpgradeSucceeded"))
            .and_then(|c| c.last_transition_time)
            .expect("Kratix reported the upgrade's end");
        // To the second: the annotation and the condition both are.
        assert!(
            started.timestamp() >= done.timestamp(),
            "run 2 started d-late at {started} while {p} (run 1's) was in flight until {done}"
        );
    }
    env.teardown().await.unwrap();
}
