//! Signal gates end to end (spec §13.3): the real control plane, kratix-sim, the controller, and a
//! real Prometheus scraping an endpoint the test flips.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use chrono::{DateTime, Utc};
use serde_json::json;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, RunState, UpgradeRun};
use upgradeplan_e2e::harness::{run_plugin, started_at, Prometheus, Signal, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);
const TO: &str = "v2.0.0";

fn gated(r: &UpgradeRun) -> Option<(ConditionStatus, String, String)> {
    let c = find_condition(&r.status.as_ref()?.conditions, reasons::GATED)?;
    Some((c.status, c.reason.clone(), c.message.clone()))
}

/// An empty rules file.
fn no_rules(env: &TestEnv) -> std::path::PathBuf {
    let rules = std::env::temp_dir().join(format!("{}-no-rules.yaml", env.id));
    std::fs::write(&rules, "groups: []\n").unwrap();
    rules
}

/// When each binding of the namespace started upgrading (its start annotation), and whether it
/// is done.
async fn starts(env: &TestEnv, ns: &str) -> Vec<(DateTime<Utc>, bool)> {
    env.bindings_api(ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|b| b.spec.version == TO)
        .map(|b| (started_at(b), b.last_applied_version() == TO))
        .collect()
}

#[tokio::test]
async fn a_firing_gate_holds_new_starts_and_an_unreachable_prometheus_closes_it() {
    let mut env = TestEnv::new("gates").await.unwrap();
    let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "dev")).collect();
    // Each upgrade takes 3 s: long enough to be in flight when the gate closes.
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", "3s"]).await.unwrap();
    let signal = Signal::start(0).await.unwrap();
    let rules = no_rules(&env);
    let (controller, mut prom, metrics) = Prometheus::with_controller(&mut env, &rules, &[&signal.addr], "2s")
        .await
        .unwrap();
    let prometheus_url = format!("http://{}", prom.addr);
    for _ in 0..50 {
        if !prom.query("test_gate_signal").await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let plan = env
        .create_plan(
            "gated",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": TO},
                   "gates": [{"name": "signal", "prometheus": {"query": "test_gate_signal > 0"}}],
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 2}]}),
        )
        .await
        .unwrap();

    // Upgrades in flight, sampled all along: never more than maxConcurrent.
    let max_in_flight = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (api, max) = (env.bindings_api(&ns), max_in_flight.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(list) = api.list(&Default::default()).await {
                    let n = list
                        .items
                        .iter()
                        .filter(|b| b.spec.version == TO && b.last_applied_version() != TO)
                        .count();
                    max.fetch_max(n, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_run(&run, WAIT, "two upgraded", |r| {
        r.status.as_ref().is_some_and(|s| s.completed_resources >= 2)
    })
    .await
    .unwrap();
    let open = env
        .wait_run(&run, WAIT, "Gated=False", |r| {
            gated(r).is_some_and(|(s, _, _)| s == ConditionStatus::False)
        })
        .await
        .unwrap();
    assert_eq!(
        gated(&open).unwrap(),
        (ConditionStatus::False, "GatesOpen".into(), "every gate is open".into())
    );

    // The signal fires: new starts stop within one interval (2 s) plus a scrape (1 s).
    signal.set(1);
    let flipped = Utc::now();
    let closed = env
        .wait_run(&run, WAIT, "Gated=True/GateFiring", |r| {
            gated(r).is_some_and(|(s, reason, _)| s == ConditionStatus::True && reason == "GateFiring")
        })
        .await
        .unwrap();
    let (_, _, message) = gated(&closed).unwrap();
    assert!(
        message.starts_with("gate \"signal\": 1 series, first test_gate_signal{") && message.contains("source=\"e2e\""),
        "{message}"
    );
    // The upgrades in flight at the closing finish (waited for), and once the controller has
    // reconciled the run after that, nothing has started since the pass that found the gate
    // closed (both times are the controller's; start annotations are to the second).
    let closed_at = find_condition(&closed.status.as_ref().unwrap().conditions, reasons::GATED)
        .unwrap()
        .last_transition_time;
    assert!(
        closed_at >= flipped - chrono::Duration::seconds(1),
        "closed {closed_at}, flipped {flipped}"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while !starts(&env, &ns).await.iter().all(|(_, done)| *done) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the upgrades in flight never finished"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    env.settle_run(&controller, &run).await.unwrap();
    let held = starts(&env, &ns).await;
    let last_start = held.iter().map(|(at, _)| *at).max().unwrap();
    assert!(
        last_start <= closed_at,
        "an upgrade started {last_start}, after the gate was found closed at {closed_at}"
    );
    assert!(
        held.iter().all(|(_, done)| *done),
        "upgrades in flight finish: {held:?}"
    );
    assert!(held.len() < 8, "the gate held the rest: {held:?}");
    let run_now = env.runs().get(&run).await.unwrap();
    assert_eq!(run_now.status.as_ref().unwrap().state, RunState::InProgress);
    let page = metrics.scrape().await.unwrap();
    assert!(
        page.contains(&format!("upgradeplan_gate_open{{gate=\"signal\",plan=\"{plan}\"}} 0")),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "upgradeplan_blocked{{group=\"dev\",plan=\"{plan}\",reason=\"GateClosed\"}} 1"
        )),
        "{page}"
    );
    assert!(page.contains(&format!(
        "upgradeplan_gate_evaluations_total{{gate=\"signal\",plan=\"{plan}\",result=\"closed\"}}"
    )));
    // Each gate's state is recorded, with its own clock (spec §13.3), and `status` shows it.
    let recorded = &run_now.status.as_ref().unwrap().gates;
    assert_eq!(
        recorded.iter().map(|g| (g.name.as_str(), g.open)).collect::<Vec<_>>(),
        vec![("signal", false)],
        "{recorded:?}"
    );
    assert_eq!(recorded[0].since, closed_at, "the gate's clock starts when it closed");
    let shown = run_plugin(
        None,
        &["status", &run, "--snapshot-namespace", &env.snapshot_namespace()],
    )
    .await
    .unwrap();
    assert!(
        shown.stdout.contains("Gates: signal closed for ")
            && shown.stdout.contains(": 1 series, first test_gate_signal{"),
        "{}",
        shown.stdout
    );

    // Cleared: starts resume.
    signal.set(0);
    let reopened = Utc::now();
    env.wait_run(&run, WAIT, "Gated=False again", |r| {
        gated(r).is_some_and(|(s, _, _)| s == ConditionStatus::False)
    })
    .await
    .unwrap();
    let resumed = starts(&env, &ns).await;
    assert!(
        resumed
            .iter()
            .any(|(at, _)| *at >= reopened - chrono::Duration::seconds(1)),
        "starts resume: {resumed:?}"
    );

    // Prometheus down mid-run: fail safe, the gate is closed with the error; back, it opens.
    prom.stop().await.unwrap();
    let erred = env
        .wait_run(&run, WAIT, "Gated=True/GateError", |r| {
            gated(r).is_some_and(|(s, reason, _)| s == ConditionStatus::True && reason == "GateError")
                || r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap();
    let (_, reason, message) = gated(&erred).unwrap();
    assert_eq!(
        reason, "GateError",
        "the run ended before Prometheus went away: {erred:?}"
    );
    assert!(
        message.starts_with(&format!("gate \"signal\": querying Prometheus at {prometheus_url}: ")),
        "{message}"
    );
    prom.resume().await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "Completed", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap();
    assert_eq!(
        done.status.as_ref().unwrap().state,
        RunState::Completed,
        "{}",
        controller.log_text()
    );
    sampler.abort();
    assert!(
        max_in_flight.load(Ordering::SeqCst) <= 2,
        "in flight exceeded maxConcurrent"
    );

    let events = env
        .events_when(&run, |(_, r, m)| r == "GateOpened" && m.contains("dev"))
        .await
        .unwrap();
    let count = |reason: &str| events.iter().filter(|(_, r, _)| r == reason).count();
    assert!(count("GateClosed") >= 2 && count("GateOpened") >= 2, "{events:?}");
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == "GateClosed" && m.starts_with("gate \"signal\": 1 series")),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_gate_closed_for_fail_after_fails_the_run_and_explain_evaluates_gates_now() {
    let mut env = TestEnv::new("gatefail").await.unwrap();
    let ns = env.upgrade_world(&[("r0", "dev")], SIM, &[]).await.unwrap();
    let rules = no_rules(&env);
    let (controller, prom, _) = Prometheus::with_controller(&mut env, &rules, &[], "1s").await.unwrap();
    let prometheus_url = format!("http://{}", prom.addr);
    let plan = env
        .create_plan(
            "failafter",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": TO},
                   "gates": [{"name": "quiet", "prometheus": {"query": "vector(0) > 1"}},
                             {"name": "always", "prometheus": {"query": "vector(1)"}, "failAfter": "3s"}],
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]}),
        )
        .await
        .unwrap();

    let o = run_plugin(None, &["explain", &plan, "--prometheus-url", &prometheus_url])
        .await
        .unwrap();
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(
        o.stdout.contains("quiet: holds every group while vector(0) > 1"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("now:         open (the query returns nothing)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("now:         closed — gate \"always\": 1 series, first {}"),
        "{}",
        o.stdout
    );

    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "Failed", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap();
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Failed, "{}", controller.log_text());
    let c = find_condition(&status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (ConditionStatus::False, "GateFailed", "gate \"always\" closed for 3s")
    );
    let b = env.bindings_api(&ns).get(&env.binding_name("r0")).await.unwrap();
    assert_eq!(b.spec.version, "v1.0.0", "nothing started while the gate was closed");
}

/// A plan with gates on a controller with no `--prometheus-url`: the plan says so
/// (`GatesReadable=False/NoPrometheus`, announced once) while it stays Ready, and `explain`
/// warns about it; `explain` also warns when the target PromiseRevision does not exist.
#[tokio::test]
async fn a_controller_without_prometheus_says_so_on_a_gated_plan_and_explain_warns() {
    let mut env = TestEnv::new("noprom").await.unwrap();
    env.upgrade_world(&[("r0", "dev")], SIM, &[]).await.unwrap();
    let _controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "gated",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": TO},
                   "gates": [{"name": "calm", "prometheus": {"query": "vector(0) > 1"}}],
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]}),
        )
        .await
        .unwrap();
    let said = env
        .wait_plan(&plan, WAIT, "GatesReadable False", |p| {
            p.status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, reasons::GATES_READABLE))
                .is_some_and(|c| c.status == ConditionStatus::False)
        })
        .await
        .unwrap();
    let status = said.status.unwrap();
    let c = find_condition(&status.conditions, reasons::GATES_READABLE).unwrap();
    assert_eq!(c.reason, reasons::NO_PROMETHEUS);
    assert!(c.message.contains("--prometheus-url"), "{}", c.message);
    let ready = find_condition(&status.conditions, reasons::READY).unwrap();
    assert_eq!(ready.status, ConditionStatus::True, "the plan itself is valid");
    let events = env
        .events_when(&plan, |(_, r, _)| r == reasons::NO_PROMETHEUS)
        .await
        .unwrap();
    assert!(
        events
            .iter()
            .any(|(t, r, m)| t == "Warning" && r == reasons::NO_PROMETHEUS && m == &c.message),
        "{events:?}"
    );

    let o = run_plugin(None, &["explain", &plan, "-o", "json"]).await.unwrap();
    let v: serde_json::Value = serde_json::from_str(&o.stdout).unwrap_or_else(|e| panic!("{e}: {o:?}"));
    let warned = |field: &str| {
        v["warnings"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|w| w["field"] == field)
            .map(|w| w["message"].as_str().unwrap_or_default().to_string())
    };
    let gates = warned("spec.gates").unwrap_or_else(|| panic!("no warning about the gates: {v}"));
    assert!(gates.contains("no Prometheus to ask"), "{gates}");
    assert_eq!(warned("spec.upgradePath.to"), None, "{TO} exists: {v}");

    // A target Kratix has no revision of: explain says so before anyone runs it.
    let missing = env
        .create_plan(
            "ahead",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v9.0.0"},
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]}),
        )
        .await
        .unwrap();
    let o = run_plugin(None, &["explain", &missing]).await.unwrap();
    assert_eq!(o.code, Some(0), "a warning, not a problem: {o:?}");
    assert!(
        o.stdout.contains("spec.upgradePath.to") && o.stdout.contains("has no PromiseRevision \"v9.0.0\""),
        "{}",
        o.stdout
    );
}
