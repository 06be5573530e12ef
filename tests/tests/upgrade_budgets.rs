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

/// Bindings Kratix is working on now for one of `runs`: started by it, not applied yet.
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
            let applied = b.status.as_ref().map(|s| s.last_applied_version.as_str());
            if by.is_some_and(|by| runs.contains(by)) && applied != Some(b.spec.version.as_str()) {
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
