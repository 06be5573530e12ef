//! The forecast against reality (spec §13.6), end to end: a forecast made before a run, by the
//! plugin against the real control plane, predicts when each group of the run finishes; the
//! engine's simulation starts the resources in the order the controller did.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use upgradeplan::api::{RunState, UpgradeRun, UPGRADE_STARTED_AT_ANNOTATION};
use upgradeplan::engine::forecast::{forecast, ForecastInput};
use upgradeplan_e2e::harness::{run_plugin, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(150);
/// Each upgrade's length in kratix-sim.
const DELAY_SECS: i64 = 9;

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// Three groups, one at a time but the last; the last two have a deny window from 10:00:00 to
/// 10:00:30 UTC. The controller's clock starts at 09:59:25, so the run meets the window 35 s in:
/// the middle group's third upgrade (due about 10:00:01) waits for 10:00:30, and prod follows.
#[tokio::test]
async fn a_forecast_made_before_the_run_predicts_when_each_group_finishes() {
    let mut env = TestEnv::new("forecast").await.unwrap();
    let bindings = [
        ("c0", "canary"),
        ("c1", "canary"),
        ("m0", "middle"),
        ("m1", "middle"),
        ("m2", "middle"),
        ("p0", "prod"),
        ("p1", "prod"),
    ];
    let delay = format!("{DELAY_SECS}s");
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", &delay]).await.unwrap();
    let clock_start = utc("2026-06-01T09:59:25Z");
    let spawned = Instant::now();
    let controller = env
        .start_controller(&["--clock-start", &upgradeplan::time::rfc3339(clock_start)])
        .await
        .unwrap();
    let group = |name: &str, limit: i32| json!({"name": name, "selectors": {"matchLabels": {"env": name}}, "maxConcurrent": limit});
    let deny = json!([{"kind": "deny", "schedule": "0 10 * * *", "duration": "30s"}]);
    let (mut middle, mut prod) = (group("middle", 1), group("prod", 2));
    middle["resourceUpgradeWindows"] = deny.clone();
    prod["resourceUpgradeWindows"] = deny;
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("canary", 1), middle, prod]}),
        )
        .await
        .unwrap();
    let plan_obj = env.plans().get(&plan).await.unwrap();

    // The forecast, before the run, from the instant the run will start on the controller's
    // clock (it runs at real speed from its start).
    let run_at = clock_start + chrono::Duration::from_std(spawned.elapsed()).unwrap();
    let out = run_plugin(
        None,
        &[
            "forecast",
            &plan,
            "--start",
            &upgradeplan::time::rfc3339(run_at),
            "--per-resource",
            &delay,
            "-o",
            "json",
        ],
    )
    .await
    .unwrap();
    let predicted: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done: UpgradeRun = env
        .wait_run(&run, WAIT, "completed", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.clone().unwrap();
    assert_eq!(status.state, RunState::Completed);
    let started = status.started_at.unwrap();

    // Each group's finish: predicted against recorded, within 20% of the time since the run's
    // start or 5 s.
    let mut report = Vec::new();
    for (i, g) in status.rollout_groups.iter().enumerate() {
        let actual = g.completed_at.unwrap();
        let forecast_finish = utc(predicted["groups"][i]["finish"].as_str().unwrap());
        let error = (forecast_finish - actual).num_milliseconds().abs() as f64 / 1000.0;
        let elapsed = (actual - started).num_milliseconds() as f64 / 1000.0;
        let tolerance = (elapsed * 0.2).max(5.0);
        report.push(format!(
            "{}: forecast {forecast_finish}, actual {actual}, error {error:.1}s ({:.0}% of {elapsed:.0}s)",
            g.name,
            100.0 * error / elapsed
        ));
        assert!(error <= tolerance, "{}", report.join("\n"));
    }
    assert_eq!(
        predicted["groups"][1]["waits"][0]["reason"], "WindowClosed",
        "the middle group waits for the deny window: {predicted}"
    );
    eprintln!("forecast against reality:\n{}", report.join("\n"));

    // The same start order: the simulation, given the snapshot's bindings as they were, starts
    // the resources in the order the controller did (batches of the same instant as sets).
    let live = env.bindings_api(&ns).list(&Default::default()).await.unwrap().items;
    let mut actual: Vec<(DateTime<Utc>, String)> = live
        .iter()
        .map(|b| {
            let at = b.metadata.annotations.as_ref().unwrap()[UPGRADE_STARTED_AT_ANNOTATION].as_str();
            (utc(at), b.metadata.name.clone().unwrap())
        })
        .collect();
    actual.sort();
    let mut before = live.clone();
    for b in &mut before {
        b.spec.version = "v1.0.0".into();
        b.status.as_mut().unwrap().last_applied_version = "v1.0.0".into();
        // As they were: no run had started them (the run's start annotations, later than the
        // simulation's start, would read as another run's change, spec §5.5).
        if let Some(a) = b.metadata.annotations.as_mut() {
            a.remove(upgradeplan::api::UPGRADED_BY_ANNOTATION);
            a.remove(UPGRADE_STARTED_AT_ANNOTATION);
        }
    }
    let compiled = upgradeplan::engine::compile::compile(&plan_obj.spec).expect("the plan is valid");
    let sim = forecast(&ForecastInput {
        plan: &compiled,
        bindings: &before,
        snapshot: None,
        revisions: None,
        freezes: &[],
        budgets: &[],
        start: started,
        per_resource: chrono::Duration::seconds(DELAY_SECS),
        next_trigger: None,
    });
    let batches = |starts: &[(DateTime<Utc>, String)], same: chrono::Duration| {
        let mut out: Vec<Vec<String>> = Vec::new();
        let mut last: Option<DateTime<Utc>> = None;
        for (at, name) in starts {
            let name = name.rsplit('/').next().unwrap().to_string();
            match (last, out.last_mut()) {
                (Some(l), Some(batch)) if *at - l <= same => batch.push(name),
                _ => out.push(vec![name]),
            }
            last = Some(*at);
        }
        for b in &mut out {
            b.sort();
        }
        out
    };
    assert_eq!(
        batches(&sim.starts, chrono::Duration::zero()),
        batches(&actual, chrono::Duration::seconds(1)),
        "the simulation and the controller start in the same order"
    );

    // Afterwards, without --per-resource, the forecast measures the run it just saw: from each
    // binding's start annotation to Kratix's success. (Here the two clocks differ — the
    // controller's is set back — so the figure is checked against the bindings, not the delay.)
    let expected = upgradeplan::engine::forecast::measured_durations(&live, std::slice::from_ref(&run));
    assert_eq!(expected.len(), 7);
    let median = upgradeplan::engine::forecast::quantile(&expected, 0.5).unwrap();
    let out = run_plugin(None, &["forecast", &plan, "-o", "json"]).await.unwrap();
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["assumptions"]["perResourceSeconds"], median.num_seconds(), "{v}");
    assert!(
        v["assumptions"]["perResource"]
            .as_str()
            .unwrap()
            .starts_with("the median of 7 upgrades measured in the plan's last 1 run(s)"),
        "{v}"
    );
    env.teardown().await.unwrap();
}
