//! Engine benchmarks (`make bench`): criterion measurements, then a summary that compares each
//! figure with its reference measured in the same run:
//! - grouping 100k bindings (regex `from`, mixed selectors, 5 groups) against merely
//!   deserializing the same bindings from JSON (target: ≤ 2×);
//! - evaluating a run over 1k and 10k resources (target: linear);
//! - the window gate with its next open/close, and the next triggers;
//! - a forecast of 10k bindings in 5 groups through nightly windows over a month (target < 1 s).

use std::collections::HashMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use criterion::{criterion_group, Criterion};
use serde_json::json;
use upgradeplan::api::kratix::{BindingFacts, ResourceBinding};
use upgradeplan::api::{UpgradeExecutionPolicy, UpgradePlan, UpgradeWindow, WindowKind};
use upgradeplan::engine::compile::compile;
use upgradeplan::engine::run::{evaluate, RunContext};
use upgradeplan::engine::schedule::Triggers;
use upgradeplan::engine::snapshot::assign;
use upgradeplan::engine::window::Windows;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-06-01T10:00:00Z")
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_default()
}

/// `n` bindings as `kubectl get resourcebindings -A -o json` would print them.
fn bindings_json(n: usize) -> String {
    let envs = ["dev", "staging", "prod", "qa"];
    let regions = ["eu", "us", "ap"];
    let versions = ["v1.0.0", "v1.1.3", "v1.2.0", "v0.9.0", "v1.10.1"];
    let items: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            let ns = format!("team-{:04}", i % 1000);
            let name = format!("res-{i:06}");
            json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
                "metadata": {"name": format!("{name}-redis"), "namespace": ns, "resourceVersion": "12345",
                    "labels": {"kratix.io/promise-name": "redis", "kratix.io/resource-name": name,
                               "env": envs[i % 4], "region": regions[i % 3], "tier": if i % 7 == 0 { "gold" } else { "std" }}},
                "spec": {"version": versions[i % 5], "promiseRef": {"name": "redis"}, "resourceRef": {"name": name, "namespace": ns}},
                "status": {"lastAppliedVersion": versions[i % 5],
                    "conditions": [{"type": "UpgradeSucceeded", "status": "True", "reason": "UpgradeComplete", "message": "ok", "lastTransitionTime": "2026-05-01T00:00:00Z"}]}
            })
        })
        .collect();
    serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items})).unwrap_or_default()
}

fn parse(text: &str) -> Vec<ResourceBinding> {
    #[derive(serde::Deserialize)]
    struct List {
        items: Vec<ResourceBinding>,
    }
    serde_json::from_str::<List>(text).map(|l| l.items).unwrap_or_default()
}

fn plan() -> UpgradePlan {
    serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan", "metadata": {"name": "bench"},
        "spec": {"promiseRef": {"name": "redis"}, "upgradePath": {"from": ["/v1\\.[0-2]\\..*/", "/v1\\.1[0-9]\\..*/"], "to": "v2.0.0"},
        "rolloutGroups": [
            {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}},
            {"name": "staging-eu", "selectors": {"matchLabels": {"env": "staging"}, "matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}]}},
            {"name": "gold", "selectors": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}, {"key": "env", "operator": "NotIn", "values": ["dev"]}]}},
            {"name": "qa", "selectors": {"matchExpressions": [{"key": "env", "operator": "In", "values": ["qa"]}, {"key": "canary", "operator": "DoesNotExist"}]}},
            {"name": "rest", "selectors": {"matchAll": true}}
        ]}
    }))
    .expect("the benchmark plan is valid")
}

fn group(bindings: &[ResourceBinding], plan: &UpgradePlan) -> usize {
    let compiled = compile(&plan.spec).unwrap_or_else(|_| panic!("a valid plan"));
    assign(&compiled, bindings)
        .snapshot
        .groups
        .iter()
        .map(|g| g.resources.len())
        .sum()
}

/// A one-group world of `n` resources, half of them already upgraded, for run evaluation.
fn run_world(
    n: usize,
) -> (
    UpgradePlan,
    upgradeplan::engine::snapshot::Snapshot,
    HashMap<(String, String), ResourceBinding>,
) {
    let mut p = plan();
    p.spec.rollout_groups =
        vec![
            serde_json::from_value(json!({"name": "all", "selectors": {"matchAll": true}, "maxConcurrent": "10%"}))
                .expect("a valid group"),
        ];
    p.spec.upgrade_path.from = vec!["v1.0.0".into()];
    let mut bindings = parse(&bindings_json(n));
    for b in &mut bindings {
        b.spec.version = "v1.0.0".into();
        if let Some(s) = b.status.as_mut() {
            s.last_applied_version = "v1.0.0".into();
        }
    }
    let compiled = compile(&p.spec).unwrap_or_else(|_| panic!("a valid plan"));
    let snapshot = assign(&compiled, &bindings).snapshot;
    let live = bindings
        .into_iter()
        .enumerate()
        .map(|(i, mut b)| {
            if i % 2 == 0 {
                b.spec.version = "v2.0.0".into();
                if let Some(s) = b.status.as_mut() {
                    s.last_applied_version = "v2.0.0".into();
                }
            }
            (
                (
                    b.metadata.namespace.clone().unwrap_or_default(),
                    b.metadata.name.clone().unwrap_or_default(),
                ),
                b,
            )
        })
        .collect();
    (p, snapshot, live)
}

/// One pass over a run. The snapshot's overlaps are computed once per snapshot, as the controller
/// keeps them with the frozen plan it caches.
fn eval_run(
    p: &UpgradePlan,
    (snapshot, overlaps): (
        &upgradeplan::engine::snapshot::Snapshot,
        &upgradeplan::engine::record::Overlaps,
    ),
    live: &HashMap<(String, String), ResourceBinding>,
) -> usize {
    let plan = compile(&p.spec).unwrap_or_else(|_| panic!("a valid plan"));
    let ctx = RunContext {
        run_name: "bench",
        run_created: now(),
        snapshot_taken: now(),
        reverting: None,
        suspended: false,
        plan: &plan,
        snapshot,
        overlaps,
        recorded: &[],
        health: &upgradeplan::engine::health::HealthRecords::default(),
        gates: &[],
        approvals: &[],
        freezes: &[],
        budgets: &[],
        revisions: &upgradeplan::engine::revert::Revisions::present(),
        now: now(),
    };
    evaluate(&ctx, |ns, name| {
        live.get(&(ns.to_string(), name.to_string())).map(|b| b as _)
    })
    .start
    .len()
}

/// A gate of windows `(kind, schedule, duration)` in one zone.
fn gate_in(zone: &str, windows: &[(WindowKind, &str, &str)]) -> Windows {
    let windows: Vec<UpgradeWindow> = windows
        .iter()
        .map(|(kind, schedule, duration)| UpgradeWindow {
            kind: *kind,
            schedule: schedule.to_string(),
            duration: duration.to_string(),
            time_zone: Some(zone.into()),
        })
        .collect();
    Windows::compile(&windows).unwrap_or_else(|_| panic!("valid windows"))
}

fn gate() -> Windows {
    gate_in(
        "Europe/London",
        &[
            (WindowKind::Allow, "0 22 * * 1-5", "4h"),
            (WindowKind::Allow, "0 10 * * 6,0", "2h"),
            (WindowKind::Deny, "0 23 * * 5", "1h"),
        ],
    )
}

/// The costly shape: openings every 5 minutes that overlap (always active), with a deny.
fn dense_gate() -> Windows {
    gate_in(
        "Australia/Lord_Howe",
        &[
            (WindowKind::Allow, "*/5 * * * *", "1h"),
            (WindowKind::Deny, "30 2 * * 1-5", "8h"),
        ],
    )
}

/// The forecast's world: `plan()`'s 5 groups, each 5% at a time in a 2-hour nightly window
/// (London), over 10k bindings of which the `from` patterns take most; 30 minutes per upgrade:
/// about a month of nights.
fn forecast_world() -> (UpgradePlan, Vec<ResourceBinding>) {
    let mut p = plan();
    for g in &mut p.spec.rollout_groups {
        g.max_concurrent = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
            "5%".into(),
        ));
        g.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 22 * * *".into(),
            duration: "2h".into(),
            time_zone: Some("Europe/London".into()),
        }]);
    }
    (p, parse(&bindings_json(10_000)))
}

fn run_forecast(p: &UpgradePlan, bindings: &[ResourceBinding]) -> upgradeplan::engine::forecast::Forecast {
    let plan = compile(&p.spec).unwrap_or_else(|_| panic!("a valid plan"));
    upgradeplan::engine::forecast::forecast(&upgradeplan::engine::forecast::ForecastInput {
        plan: &plan,
        bindings,
        snapshot: None,
        revisions: None,
        freezes: &[],
        budgets: &[],
        start: now(),
        per_resource: chrono::Duration::minutes(30),
        next_trigger: None,
    })
}

fn triggers() -> Triggers {
    upgradeplan::engine::compile::triggers(&UpgradeExecutionPolicy {
        repeat_schedule: Some("30 1 * * 1-5".into()),
        execute_at: Some("2026-10-25T01:30".into()),
        time_zone: Some("Europe/London".into()),
        starting_deadline: None,
    })
    .unwrap_or_else(|_| panic!("valid policy"))
}

fn benches(c: &mut Criterion) {
    let text = bindings_json(100_000);
    let bindings = parse(&text);
    let p = plan();
    let mut g = c.benchmark_group("grouping 100k bindings");
    g.sample_size(10);
    g.bench_function("deserialize from JSON (reference)", |b| {
        b.iter(|| parse(black_box(&text)).len())
    });
    g.bench_function("assign to 5 groups", |b| b.iter(|| group(black_box(&bindings), &p)));
    g.finish();

    let mut g = c.benchmark_group("run evaluation");
    g.sample_size(20);
    for n in [1_000, 10_000] {
        let (p, snapshot, live) = run_world(n);
        let overlaps = upgradeplan::engine::record::Overlaps::of(&snapshot);
        g.bench_function(format!("{n} resources"), |b| {
            b.iter(|| eval_run(&p, (&snapshot, &overlaps), &live))
        });
    }
    g.finish();

    let gate = gate();
    c.bench_function("window gate state + next open/close", |b| {
        b.iter(|| gate.state(black_box(now())))
    });
    let dense = dense_gate();
    c.bench_function("dense window gate state + next open/close", |b| {
        b.iter(|| dense.state(black_box(now())))
    });
    let (fp, fb) = forecast_world();
    let mut g = c.benchmark_group("forecast");
    g.sample_size(10);
    g.bench_function("10k bindings, 5 groups, nightly windows over a month", |b| {
        b.iter(|| run_forecast(black_box(&fp), &fb).finish)
    });
    g.finish();
    let t = triggers();
    c.bench_function("next trigger", |b| b.iter(|| t.next_after(black_box(now()), now())));
    c.bench_function("next 10 triggers", |b| {
        b.iter(|| t.upcoming(black_box(now()), now(), 10))
    });
}

criterion_group!(engine, benches);

/// Median wall time of `f` over `runs` runs.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

/// The targets, each against its reference measured now.
fn summary() {
    let text = bindings_json(100_000);
    let bindings = parse(&text);
    let p = plan();
    let deser = median(7, || {
        black_box(parse(&text));
    });
    let grouping = median(7, || {
        black_box(group(&bindings, &p));
    });
    let ratio = grouping.as_secs_f64() / deser.as_secs_f64();
    println!("\n== summary ==");
    println!(
        "grouping 100k bindings: {grouping:?}; deserializing them: {deser:?}; ratio {ratio:.2} (target <= 2.0: {})",
        if ratio <= 2.0 { "met" } else { "MISSED" }
    );
    // Per-resource cost at three sizes, next to the reference: merely looking up and touching each
    // live binding through the same map (what any evaluation must do at least). Linear means the
    // ratio to that reference stays flat as the fleet grows.
    let mut ratios = vec![];
    for n in [1_000, 10_000, 50_000] {
        let w = run_world(n);
        let overlaps = upgradeplan::engine::record::Overlaps::of(&w.1);
        let t = median(11, || {
            black_box(eval_run(&w.0, (&w.1, &overlaps), &w.2));
        });
        let touch = median(11, || {
            let mut sum = 0usize;
            for r in w.1.groups.iter().flat_map(|g| &g.resources) {
                if let Some(b) = w.2.get(&(r.namespace.to_string(), r.binding.to_string())) {
                    sum += b.last_applied_version().len() + b.spec.version.len();
                }
            }
            black_box(sum);
        });
        let ratio = t.as_secs_f64() / touch.as_secs_f64();
        println!("run evaluation: {n} resources in {t:?} ({:.0} ns each); touching each binding: {touch:?} ({:.0} ns each); ratio {ratio:.2}",
            t.as_nanos() as f64 / n as f64, touch.as_nanos() as f64 / n as f64);
        ratios.push(ratio);
    }
    let spread = ratios.iter().cloned().fold(f64::MIN, f64::max) / ratios.iter().cloned().fold(f64::MAX, f64::min);
    println!("run evaluation is linear: its cost relative to touching each binding varies {spread:.2}x from 1k to 50k (target <= 1.5: {})", if spread <= 1.5 { "met" } else { "MISSED" });
    let g = gate();
    println!(
        "window gate with next open/close: {:?}",
        median(101, || {
            black_box(g.state(now()));
        })
    );
    let g = dense_gate();
    println!(
        "dense window gate (every 5 minutes for 1h, with a deny) with next open/close: {:?}",
        median(101, || {
            black_box(g.state(now()));
        })
    );
    let (fp, fb) = forecast_world();
    let f = run_forecast(&fp, &fb);
    let took = median(5, || {
        black_box(run_forecast(&fp, &fb));
    });
    let resources: usize = f.groups.iter().map(|g| g.resources).sum();
    let days = f
        .finish
        .map(|end| (end - f.start).num_hours() as f64 / 24.0)
        .unwrap_or(f64::NAN);
    println!(
        "forecast: {resources} resources in 5 groups, 5% at a time in nightly 2h windows, 30m each: a run of {days:.1} days, {} starts, forecast in {took:?} (target < 1s: {})",
        f.starts.len(),
        if took < Duration::from_secs(1) { "met" } else { "MISSED" }
    );
    record_sizes();
    let t = triggers();
    println!(
        "next 10 triggers: {:?}",
        median(101, || {
            black_box(t.upcoming(now(), now(), 10));
        })
    );
    println!(
        "next trigger: {:?}",
        median(101, || {
            black_box(t.next_after(now(), now()));
        })
    );
}

/// The size of a run's status at 100k resources in 5 groups, with every outcome recorded (spec
/// §5.5): as planned (every resource succeeded), and at the worst (every other one skipped).
fn record_sizes() {
    use upgradeplan::api::{GroupStatus, UpgradeRunStatus};
    use upgradeplan::engine::record::{GroupRecord, IndexSet};
    let status = |skip_every_other: bool| {
        let groups = (0..5)
            .map(|g| {
                let mut record = GroupRecord::default();
                for i in 0..20_000 {
                    let set: &mut IndexSet = if skip_every_other && i % 2 == 1 {
                        &mut record.skipped
                    } else {
                        &mut record.succeeded
                    };
                    set.insert(i);
                }
                let mut status = GroupStatus {
                    name: format!("group-{g}"),
                    total: 20_000,
                    succeeded: record.succeeded.len() as i64,
                    skipped: record.skipped.len() as i64,
                    ..Default::default()
                };
                record.write(&mut status);
                status
            })
            .collect();
        let status = UpgradeRunStatus {
            rollout_groups: groups,
            ..Default::default()
        };
        serde_json::to_vec(&status).map_or(0, |v| v.len())
    };
    println!(
        "run status at 100k resources in 5 groups, every outcome recorded: {} bytes as planned, {} bytes with every other resource skipped",
        status(false),
        status(true)
    );
}

fn main() {
    engine();
    Criterion::default().configure_from_args().final_summary();
    summary();
}
