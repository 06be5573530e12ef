//! The shipped alerts and metrics with a real Prometheus (Debian's package) scraping a real
//! controller: UpgradeRunFailed fires for the plan whose run failed, and window_open follows a
//! window that opens during the test.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::{DurationRound, Timelike, Utc};
use serde_json::{json, Value};
use upgradeplan::api::RunState;
use upgradeplan_e2e::harness::{repo_root, Prometheus, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn prometheus_fires_upgrade_run_failed_and_follows_window_open() {
    let mut env = TestEnv::new("prom").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    env.resource(&ns, "bad", &[], "v1.0.0").await.unwrap();
    env.patch_binding(
        &ns,
        &env.binding_name("bad"),
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": "v2.0.0"}}}),
    )
    .await
    .unwrap();
    // The controller serving /metrics as deploy/ does (HTTPS, self-signed, token reviewed).
    let (controller, metrics) = env.start_secure_controller(&[]).await.unwrap();

    // Prometheus scraping the controller every second with a reader's token, with the shipped rules.
    let prom = Prometheus::start(
        &env.id,
        &[&metrics],
        &[],
        &repo_root().join("deploy/monitoring/rules.yaml"),
    )
    .await
    .unwrap();

    // A plan whose window opens at the next minute boundary (no run needed: the gauge is the plan's).
    let opens = (Utc::now() + chrono::Duration::seconds(30))
        .duration_trunc(chrono::Duration::minutes(1))
        .unwrap()
        + chrono::Duration::minutes(1);
    let windowed = env
        .create_plan(
            "windowed",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true},
                "resourceUpgradeWindows": [{"kind": "allow", "schedule": format!("{} {} * * *", opens.format("%M"), opens.format("%H")), "duration": "10m"}]}]}),
        )
        .await
        .unwrap();

    // Prometheus sees the gate closed before it opens (checked now: the window opens 30 s or more
    // from its creation, and what follows can take longer than that).
    let open_value = |v: Vec<Value>| {
        v.first()
            .map(|s| s["value"][1].as_str().unwrap_or_default().to_string())
    };
    let mut before = None;
    for _ in 0..40 {
        before = open_value(
            prom.query(&format!("upgradeplan_window_open{{plan=\"{windowed}\"}}"))
                .await
                .unwrap(),
        );
        if before.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        Utc::now() < opens,
        "the setup outlasted the margin before {opens}; the check below would prove nothing"
    );
    assert_eq!(before.as_deref(), Some("0"), "closed before {opens}");

    // A run that fails.
    let plan = env
        .create_plan("failing", json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}))
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let r = env
        .wait_run(&run, WAIT, "terminal", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(r.status.unwrap().state, RunState::Failed);

    prom.wait_alert("UpgradeRunFailed", &[("plan", &plan)], true, Duration::from_secs(60))
        .await
        .unwrap();
    let other = prom
        .query(&format!("ALERTS{{alertname=\"UpgradeRunFailed\",plan=\"{windowed}\"}}"))
        .await
        .unwrap();
    assert!(
        other.is_empty(),
        "the plan without a failed run must not alert: {other:?}"
    );

    let wait = (opens - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(4);
    tokio::time::sleep(wait).await;
    let after = open_value(
        prom.query(&format!("upgradeplan_window_open{{plan=\"{windowed}\"}}"))
            .await
            .unwrap(),
    );
    assert_eq!(
        after.as_deref(),
        Some("1"),
        "open after {opens}: the controller woke at the boundary"
    );
    let next_close = prom
        .query(&format!(
            "upgradeplan_window_next_close_timestamp_seconds{{plan=\"{windowed}\"}}"
        ))
        .await
        .unwrap();
    assert_eq!(
        next_close.first().map(|s| s["value"][1].as_str().unwrap().to_string()),
        Some((opens + chrono::Duration::minutes(10)).timestamp().to_string())
    );

    // The running controller exports the families the alerts need.
    let text = metrics.scrape().await.unwrap();
    for name in [
        "upgradeplan_build_info",
        "upgradeplan_plan_last_run_result",
        "upgradeplan_plan_ready",
        "upgradeplan_plan_phase",
        "upgradeplan_plan_suspended",
        "upgradeplan_window_open",
        "upgradeplan_runs_total",
        "upgradeplan_resource_upgrades_total",
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds",
        "workqueue_depth",
        "leader_election_master_status",
    ] {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} not exported:\n{text}"
        );
    }
    // Run names appear only in the one-per-plan series that let alerts name a run.
    let with_run: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(&run))
        .collect();
    assert!(
        !with_run.is_empty()
            && with_run.iter().all(|l| {
                l.starts_with("upgradeplan_plan_last_run_info{")
                    || l.starts_with("upgradeplan_plan_last_failure_timestamp_seconds{")
            }),
        "run names in other series: {with_run:?}"
    );
    env.teardown().await.unwrap();
}

/// What the dashboard shows, proven on data: a completed run, a failed run, a run held by a closed
/// window, a run held by a closed signal gate, a scheduled plan and a suspended one, scraped by a real Prometheus with the shipped
/// rules; then every query of every panel (and the annotations and the `plan` variable) is run
/// as Grafana would run it and must return values (Grafana itself cannot be installed here).
#[tokio::test]
async fn every_dashboard_query_returns_data() {
    let started = Utc::now() - chrono::Duration::seconds(5);
    let mut env = TestEnv::new("dash").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &["--delay", "1s"]).unwrap();
    for role in ["ok", "bad", "held", "gated"] {
        env.resource(&ns, role, &[("role", role)], "v1.0.0").await.unwrap();
    }
    env.patch_binding(
        &ns,
        &env.binding_name("bad"),
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": "v2.0.0"}}}),
    )
    .await
    .unwrap();
    // The controller evaluates signal gates against the Prometheus that scrapes it.
    let (controller, prom, _) =
        Prometheus::with_controller(&mut env, &repo_root().join("deploy/monitoring/rules.yaml"), &[], "1s")
            .await
            .unwrap();

    let spec = |role: &str| {
        json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
               "rolloutGroups": [{"name": role, "selectors": {"matchLabels": {"role": role}}}]})
    };
    let opens = (Utc::now().hour() + 12) % 24;
    let mut held = spec("held");
    held["rolloutGroups"][0]["resourceUpgradeWindows"] =
        json!([{"kind": "allow", "schedule": format!("0 {opens} * * *"), "duration": "1h"}]);
    let mut scheduled = spec("none");
    scheduled["upgradeExecutionPolicy"] = json!({"repeatSchedule": "0 3 * * *", "timeZone": "Europe/London"});
    let mut suspended = spec("none");
    suspended["suspend"] = json!(true);
    let mut runs = vec![];
    let mut gated = spec("gated");
    gated["gates"] = json!([{"name": "always", "prometheus": {"query": "vector(1)"}}]);
    for (name, s) in [
        ("completed", spec("ok")),
        ("failed", spec("bad")),
        ("held", held),
        ("gated", gated),
    ] {
        let plan = env.create_plan(name, s).await.unwrap();
        // Prometheus sees the plan's counters at 0 before its run ends, as it would in production.
        let seen = format!("upgradeplan_runs_total{{plan=\"{plan}\"}}");
        for _ in 0..40 {
            if !prom.query(&seen).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        runs.push(env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap());
    }
    env.create_plan("scheduled", scheduled).await.unwrap();
    env.create_plan("suspended", suspended).await.unwrap();
    for (run, want) in runs.iter().zip([
        RunState::Completed,
        RunState::Failed,
        RunState::InProgress,
        RunState::InProgress,
    ]) {
        env.wait_run(run, WAIT, "its state", |r| {
            r.status.as_ref().is_some_and(|s| s.state == want)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    }
    prom.wait_alert("UpgradeRunFailed", &[("run", &runs[1])], true, WAIT)
        .await
        .unwrap();
    // A few scrapes more, so that rates over $__rate_interval have two samples after each change.
    tokio::time::sleep(Duration::from_secs(8)).await;

    let dashboard: Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("deploy/monitoring/dashboard.json")).unwrap())
            .unwrap();
    // As Grafana substitutes them: the `plan` variable at "All", $__rate_interval at four scrapes.
    let as_grafana = |e: &str| e.replace("$plan", ".*").replace("$__rate_interval", "4s");
    let mut queries: Vec<(String, String)> = vec![];
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            queries.push((
                format!("panel \"{}\" {}", p["title"].as_str().unwrap(), t["refId"]),
                t["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    for a in dashboard["annotations"]["list"].as_array().unwrap() {
        if let Some(e) = a["expr"].as_str() {
            queries.push((format!("annotation \"{}\"", a["name"]), e.to_string()));
        }
    }
    assert!(queries.len() >= 20, "{} queries", queries.len());
    let mut empty = vec![];
    for (what, expr) in &queries {
        let result = prom.query_range(&as_grafana(expr), started, 2).await.unwrap();
        let has_value = result.iter().any(|series| {
            series["values"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| v[1].as_str().is_some_and(|x| x != "NaN"))
        });
        if !has_value {
            empty.push(format!("{what}: {expr}"));
        }
    }
    assert!(empty.is_empty(), "queries without data:\n{}", empty.join("\n"));
    // The `plan` variable lists the plans.
    for v in dashboard["templating"]["list"].as_array().unwrap() {
        if v["name"] == "plan" {
            let def = v["definition"].as_str().unwrap();
            let metric = def.trim_start_matches("label_values(").split(',').next().unwrap();
            let series = prom.query(metric).await.unwrap();
            assert!(
                series
                    .iter()
                    .any(|s| s["metric"]["plan"].as_str().is_some_and(|p| p.ends_with("-suspended"))),
                "{def}: {series:?}"
            );
        }
    }
    env.teardown().await.unwrap();
}
