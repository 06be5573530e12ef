//! Freezes (spec §13.5), end to end: the real control plane, kratix-sim, the controller and the
//! plugin. Freezes are cluster-wide, and the tests of this suite share one control plane: every
//! freeze here selects its own test's plans only (the test's label, or its Promise).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, RunState, UpgradeFreeze, UpgradeRun};
use upgradeplan_e2e::harness::{free_port, http_get, run_ended, run_plugin, run_state, started_at, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(120);

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn frozen(r: &UpgradeRun) -> Option<(ConditionStatus, String, String)> {
    let c = find_condition(&r.status.as_ref()?.conditions, reasons::FROZEN)?;
    Some((c.status, c.reason.clone(), c.message.clone()))
}

fn succeeded(r: &UpgradeRun) -> i64 {
    r.status
        .as_ref()
        .map_or(0, |s| s.rollout_groups.iter().map(|g| g.succeeded).sum())
}

/// Creates the freeze `<id>-<suffix>`, labelled for this test's controller (which writes the
/// status of the freezes matching its --selector), holding the plans `plan_selector` selects.
async fn create_freeze(
    env: &TestEnv,
    suffix: &str,
    reason: &str,
    periods: serde_json::Value,
    plan_selector: serde_json::Value,
) -> String {
    let name = format!("{}-{suffix}", env.id);
    let (k, v) = env.selector();
    let freeze: UpgradeFreeze = serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeFreeze",
        "metadata": {"name": name, "labels": {k: v}},
        "spec": {"reason": reason, "periods": periods, "planSelector": plan_selector}
    }))
    .unwrap();
    freezes(env).create(&PostParams::default(), &freeze).await.unwrap();
    name
}

fn freezes(env: &TestEnv) -> Api<UpgradeFreeze> {
    Api::all(env.client.clone())
}

/// The controller-clock instants at which each binding's upgrade started (`upgrade-started-at`).
async fn starts(env: &TestEnv, ns: &str, names: &[&str]) -> Vec<(String, DateTime<Utc>)> {
    let mut out = Vec::new();
    for n in names {
        let b = env.live_binding(ns, n).await.unwrap();
        out.push((n.to_string(), started_at(&b)));
    }
    out
}

fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

/// A one-off freeze a minute long (12:00 to 12:01 on the controller's clock, which starts at
/// 11:59:50): the two upgrades in flight when it begins finish during it, nothing new starts
/// while it lasts (the run says which freeze holds it, why and until when; blocked{reason=
/// "Frozen"} and freeze_active say so too), and the run resumes at its end — at the boundary,
/// not at some later poll.
#[tokio::test]
async fn a_freeze_holds_new_starts_while_in_flight_upgrades_finish_and_the_run_resumes_at_its_end() {
    let mut env = TestEnv::new("freeze-once").await.unwrap();
    let names = ["a0", "a1", "a2", "a3"];
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (*n, "all")).collect();
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", "15s"]).await.unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let controller = env
        .start_controller(&["--clock-start", "2026-12-24T11:59:50Z", "--metrics-addr", &metrics_addr])
        .await
        .unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}, "maxConcurrent": 2}]}),
        )
        .await
        .unwrap();
    let (k, v) = env.selector();
    let freeze = create_freeze(
        &env,
        "release",
        "release freeze",
        json!([{"start": "2026-12-24T13:00", "end": "2026-12-24T13:01", "timeZone": "Europe/Paris"}]),
        json!({"matchLabels": {k.clone(): v.clone()}}),
    )
    .await;
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();

    let held = env
        .wait_run(&run, WAIT, "held by the freeze", |r| {
            frozen(r).is_some_and(|(s, _, _)| s == ConditionStatus::True)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(
        frozen(&held).unwrap(),
        (
            ConditionStatus::True,
            "FreezeActive".to_string(),
            format!("UpgradeFreeze \"{freeze}\" until 2026-12-24T12:01:00Z: release freeze")
        )
    );
    let (_, text) = http_get(&metrics_addr, "/metrics").await.unwrap();
    assert_eq!(
        metric(
            &text,
            &format!("upgradeplan_blocked{{group=\"all\",plan=\"{plan}\",reason=\"Frozen\"}}")
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, &format!("upgradeplan_freeze_active{{freeze=\"{freeze}\"}}")),
        Some(1.0)
    );
    let status = env
        .wait_freeze(&freeze, WAIT, "active", |f| f.status.as_ref().is_some_and(|s| s.active))
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert_eq!(
        (status.next_end, status.matching_plans),
        (Some(utc("2026-12-24T12:01:00Z")), 1),
        "{status:?}"
    );

    // The two in flight when it began finish while it holds; the others wait.
    let during = env
        .wait_run(&run, WAIT, "in-flight upgrades finished", |r| succeeded(r) == 2)
        .await
        .unwrap();
    assert_eq!(
        frozen(&during).unwrap().0,
        ConditionStatus::True,
        "finished during the freeze"
    );
    for n in ["a2", "a3"] {
        let b = env.live_binding(&ns, n).await.unwrap();
        assert_eq!(b.spec.version, "v1.0.0", "{n} started during the freeze");
    }

    let done = env
        .wait_run(&run, WAIT, "completed", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    assert_eq!(frozen(&done).unwrap().0, ConditionStatus::False);
    let (begin, end) = (utc("2026-12-24T12:00:00Z"), utc("2026-12-24T12:01:00Z"));
    let starts = starts(&env, &ns, &names).await;
    for (n, at) in &starts {
        assert!(
            *at < begin || *at >= end,
            "{n} started at {at}, during the freeze: {starts:?}"
        );
    }
    let resumed: Vec<&DateTime<Utc>> = starts.iter().map(|(_, at)| at).filter(|at| **at >= end).collect();
    assert_eq!(resumed.len(), 2, "{starts:?}");
    assert!(
        resumed.iter().all(|at| **at < end + chrono::Duration::seconds(3)),
        "not resumed at the freeze's end: {starts:?}"
    );
    let status = env
        .wait_freeze(&freeze, WAIT, "inactive", |f| {
            f.status.as_ref().is_some_and(|s| !s.active)
        })
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert_eq!((status.next_start, status.next_end), (None, None), "{status:?}");

    // The plugin lists it, with the plan it holds.
    let listed = run_plugin(None, &["freezes", &freeze]).await.unwrap();
    assert!(
        listed.stdout.contains("release freeze") && listed.stdout.contains(&format!("holds:   {plan}")),
        "{listed:?}"
    );
    env.teardown().await.unwrap();
}

/// A freeze selecting by plan label holds the plan it selects, not another plan of the same
/// Promise; deleting it lets the held run go at once.
#[tokio::test]
async fn a_freeze_holds_the_plans_it_selects_and_no_other() {
    let mut env = TestEnv::new("freeze-select").await.unwrap();
    let ns = env
        .upgrade_world(&[("c0", "critical"), ("o0", "other")], SIM, &[])
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let spec = |env_label: &str| {
        json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
               "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": env_label}}}]})
    };
    let critical = env.create_plan("critical", spec("critical")).await.unwrap();
    let other = env.create_plan("other", spec("other")).await.unwrap();
    let mut labelled = env.plans().get(&critical).await.unwrap();
    labelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("tier".into(), "critical".into());
    labelled.metadata.managed_fields = None;
    env.plans()
        .replace(&critical, &PostParams::default(), &labelled)
        .await
        .unwrap();
    let (k, v) = env.selector();
    // A day-long freeze around the real now.
    let now = Utc::now();
    let period = json!([{
        "start": (now - chrono::Duration::hours(1)).format("%Y-%m-%dT%H:%M").to_string(),
        "end": (now + chrono::Duration::hours(23)).format("%Y-%m-%dT%H:%M").to_string()
    }]);
    let freeze = create_freeze(
        &env,
        "critical",
        "critical systems frozen",
        period,
        json!({"matchLabels": {k: v, "tier": "critical"}}),
    )
    .await;
    let status = env
        .wait_freeze(&freeze, WAIT, "active", |f| f.status.as_ref().is_some_and(|s| s.active))
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    assert_eq!(status.matching_plans, 1);

    let held = env
        .create_run(&format!("{critical}-1"), &critical, false)
        .await
        .unwrap();
    let free = env.create_run(&format!("{other}-1"), &other, false).await.unwrap();
    let done = env
        .wait_run(&free, WAIT, "completed", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    assert!(frozen(&done).is_none(), "never held: {:?}", done.status);
    let waiting = env
        .wait_run(&held, WAIT, "frozen", |r| {
            frozen(r).is_some_and(|(s, _, _)| s == ConditionStatus::True)
        })
        .await
        .unwrap();
    assert_eq!(run_state(&waiting), RunState::InProgress);
    let b = env.bindings_api(&ns).get(&env.binding_name("c0")).await.unwrap();
    assert_eq!(b.spec.version, "v1.0.0");
    let status = run_plugin(
        None,
        &["status", &held, "--snapshot-namespace", &env.snapshot_namespace()],
    )
    .await
    .unwrap();
    assert!(
        status.stdout.contains("frozen until ")
            && status.stdout.contains(&format!(
                "critical systems frozen (UpgradeFreeze \"{freeze}\") (new upgrades are held; in-flight ones continue)"
            )),
        "{status:?}"
    );

    freezes(&env).delete(&freeze, &DeleteParams::default()).await.unwrap();
    let done = env
        .wait_run(&held, Duration::from_secs(30), "released", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    assert_eq!(frozen(&done).unwrap().1, "NotFrozen");
    env.teardown().await.unwrap();
}

/// A recurring freeze in a zone that changes to summer time: "30 1 * * *" in Europe/London on
/// 29 March 2026 names 01:30, which does not exist (01:00 GMT jumps to 02:00 BST); the local-time
/// resolver moves it to the end of the gap, 02:00 BST (01:00Z), and it lasts one real minute.
/// The controller's clock starts at 00:59:45Z: nothing starts from 01:00:00Z to 01:01:00Z, and
/// starts resume at 01:01:00Z.
#[tokio::test]
async fn a_recurring_freeze_in_a_daylight_saving_zone_holds_where_the_resolver_says() {
    let mut env = TestEnv::new("freeze-dst").await.unwrap();
    let names = ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"];
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (*n, "all")).collect();
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", "4s"]).await.unwrap();
    let controller = env
        .start_controller(&["--clock-start", "2026-03-29T00:59:45Z"])
        .await
        .unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}, "maxConcurrent": 1}]}),
        )
        .await
        .unwrap();
    let (k, v) = env.selector();
    let freeze = create_freeze(
        &env,
        "nightly",
        "nightly backups",
        json!([{"schedule": "30 1 * * *", "duration": "1m", "timeZone": "Europe/London"}]),
        json!({"matchLabels": {k: v}}),
    )
    .await;
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let held = env
        .wait_run(&run, WAIT, "held by the freeze", |r| {
            frozen(r).is_some_and(|(s, _, _)| s == ConditionStatus::True)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(
        frozen(&held).unwrap().2,
        format!("UpgradeFreeze \"{freeze}\" until 2026-03-29T01:01:00Z: nightly backups")
    );
    let done = env
        .wait_run(&run, WAIT, "completed", run_ended)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert_eq!(run_state(&done), RunState::Completed);
    let (begin, end) = (utc("2026-03-29T01:00:00Z"), utc("2026-03-29T01:01:00Z"));
    let starts = starts(&env, &ns, &names).await;
    assert!(starts.iter().any(|(_, at)| *at < begin), "{starts:?}");
    for (n, at) in &starts {
        assert!(
            *at < begin || *at >= end,
            "{n} started at {at}, during the freeze: {starts:?}"
        );
    }
    let first_after = starts.iter().map(|(_, at)| *at).filter(|at| *at >= end).min().unwrap();
    assert!(
        first_after < end + chrono::Duration::seconds(3),
        "resumed at {first_after}, not at the freeze's end: {starts:?}"
    );
    let status = env
        .wait_freeze(&freeze, WAIT, "a status", |f| f.status.is_some())
        .await
        .unwrap()
        .status
        .unwrap_or_default();
    // The next occurrence: 01:30 BST on 30 March is 00:30Z.
    assert_eq!(status.next_start, Some(utc("2026-03-30T00:30:00Z")), "{status:?}");
    env.teardown().await.unwrap();
}

/// Issue 36 D1 and D11 (spec §5.5, §13.1, §14.1): asking Kratix to retry a failure from before the run is a
/// start. Three resources whose upgrades to v2.0.0 failed before the run, a group of limit 1,
/// a freeze holding the plan: while the freeze holds, nothing is asked; when it ends, one retry
/// is asked, and the next only once it has finished.
#[tokio::test]
async fn retries_of_earlier_failures_wait_for_the_freeze_and_a_slot_like_any_start() {
    use upgradeplan::api::kratix::{BindingFacts, MANUAL_RECONCILIATION_LABEL};
    use upgradeplan::api::{RETRY_REQUESTED_BY_ANNOTATION, UPGRADED_BY_ANNOTATION};
    use upgradeplan_e2e::sim::{FAIL_VERSION_ANNOTATION, HOLD_ANNOTATION};
    let mut env = TestEnv::new("freeze-retry").await.unwrap();
    let names = ["r0", "r1", "r2"];
    let bindings: Vec<(&str, &str)> = names.iter().map(|n| (*n, "all")).collect();
    let ns = env.upgrade_world(&bindings, SIM, &[]).await.unwrap();
    let promise = env.promise.clone();
    let binding = |n: &str| upgradeplan_e2e::sim::requests::binding_name(n, &promise);
    // The earlier failures: each upgrade to v2.0.0 fails in Kratix, before the run exists.
    for n in names {
        env.patch_binding(
            &ns,
            &binding(n),
            json!({"metadata": {"annotations": {FAIL_VERSION_ANNOTATION: "v2.0.0"}}, "spec": {"version": "v2.0.0"}}),
        )
        .await
        .unwrap();
    }
    let mut failed_at = Vec::new();
    for n in names {
        let failed = env
            .wait_binding(&ns, &binding(n), WAIT, "its upgrade to fail", |b| {
                b.failed_version() == Some("v2.0.0")
            })
            .await
            .unwrap();
        failed_at.extend(failed.upgrade_condition().and_then(|c| c.last_transition_time));
        // Retried, it would now succeed, but only when released.
        env.patch_binding(
            &ns,
            &binding(n),
            json!({"metadata": {"annotations": {FAIL_VERSION_ANNOTATION: null, HOLD_ANNOTATION: "true"}}}),
        )
        .await
        .unwrap();
    }
    // Condition times have whole seconds: a failure in the run's own second would count as the
    // run's. The run is created in a later second than every failure.
    let last_failure = failed_at.into_iter().max().expect("failure times");
    let wait = (last_failure + chrono::Duration::seconds(1) - Utc::now())
        .to_std()
        .unwrap_or_default();
    tokio::time::sleep(wait).await;
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}, "maxConcurrent": 1}]}),
        )
        .await
        .unwrap();
    let (k, v) = env.selector();
    let freeze = create_freeze(
        &env,
        "hold",
        "change freeze",
        json!([{"start": "2020-01-01T00:00", "end": "2099-01-01T00:00"}]),
        json!({"matchLabels": {k: v}}),
    )
    .await;
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let asked = || async {
        let mut out = Vec::new();
        for n in names {
            let b = env.bindings_api(&ns).get(&binding(n)).await.unwrap();
            let labelled = b
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(MANUAL_RECONCILIATION_LABEL));
            let annotated = b
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RETRY_REQUESTED_BY_ANNOTATION))
                .is_some_and(|by| *by == run);
            if labelled || annotated {
                out.push(n);
            }
        }
        out
    };

    env.wait_run(&run, WAIT, "its snapshot", |r| run_state(r) == RunState::InProgress)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    env.settle_run(&controller, &run).await.unwrap();
    assert_eq!(asked().await, Vec::<&str>::new(), "a retry was asked during the freeze");
    let held = env.runs().get(&run).await.unwrap();
    assert_eq!(
        frozen(&held).map(|(s, reason, _)| (s, reason)),
        Some((ConditionStatus::True, "FreezeActive".to_string())),
        "the retries wait for the freeze, and the run says so"
    );

    // The freeze ends: one retry, in snapshot order, and it takes the only slot while it lasts.
    let ended = json!([{"op": "replace", "path": "/spec/periods/0/end", "value": "2020-01-02T00:00"}]);
    freezes(&env)
        .patch(
            &freeze,
            &Default::default(),
            &kube::api::Patch::<()>::Json(serde_json::from_value(ended).unwrap()),
        )
        .await
        .unwrap();
    env.wait_binding(&ns, &binding("r0"), WAIT, "its retry to be asked", |b| {
        b.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RETRY_REQUESTED_BY_ANNOTATION))
            .is_some_and(|by| *by == run)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    env.settle_run(&controller, &run).await.unwrap();
    assert_eq!(asked().await, vec!["r0"], "more retries than the group's limit");

    // Released one by one, each retry succeeds and the next is asked.
    for n in names {
        env.wait_binding(&ns, &binding(n), WAIT, "its retry to be asked", |b| {
            b.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(RETRY_REQUESTED_BY_ANNOTATION))
                .is_some_and(|by| *by == run)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
        env.patch_binding(
            &ns,
            &binding(n),
            json!({"metadata": {"annotations": {HOLD_ANNOTATION: null}}}),
        )
        .await
        .unwrap();
    }
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!((run_state(&done), succeeded(&done)), (RunState::Completed, 3));
    // D11: a retry is this run's attempt: `upgraded-by` names it, as `history RUN` reads it.
    for n in names {
        let b = env.bindings_api(&ns).get(&binding(n)).await.unwrap();
        let by = b
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(UPGRADED_BY_ANNOTATION));
        assert_eq!(by, Some(&run), "{n}: upgraded-by");
    }
    freezes(&env).delete(&freeze, &DeleteParams::default()).await.unwrap();
    env.teardown().await.unwrap();
}

/// An incident freeze declared with one command (`freezes create --for`): written as the
/// controller reads it, it holds the Promise's runs at once with its reason, refuses a second of
/// that name, a dry run creates nothing, and deleting it ends it.
#[tokio::test]
async fn freezes_create_declares_an_incident_freeze_that_holds_at_once() {
    let mut env = TestEnv::new("freeze-now").await.unwrap();
    let ns = env.upgrade_world(&[("r0", "all")], SIM, &[]).await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let name = format!("{}-incident", env.id);
    let promise = env.promise.clone();

    // `freezes create NAME --for 1h --reason … --promise P`, and `extra`.
    let create = |extra: &'static [&'static str]| {
        let (name, promise) = (name.clone(), promise.clone());
        async move {
            let mut args = vec![
                "freezes",
                "create",
                &name,
                "--for",
                "1h",
                "--reason",
                "INC-4711: storage degraded",
                "--promise",
                &promise,
            ];
            args.extend(extra);
            run_plugin(None, &args).await.unwrap()
        }
    };
    let dry = create(&["--dry-run"]).await;
    assert_eq!(dry.code, Some(0), "{dry:?}");
    assert!(
        dry.stdout.contains("would be created (server dry run)"),
        "{}",
        dry.stdout
    );
    assert!(
        freezes(&env).get_opt(&name).await.unwrap().is_none(),
        "a dry run creates nothing"
    );

    let before = Utc::now();
    let made = create(&["-o", "name"]).await;
    assert_eq!(made.code, Some(0), "{made:?}");
    assert_eq!(made.stdout, format!("upgradefreeze.platform.syntasso.io/{name}\n"));
    let f = freezes(&env).get(&name).await.unwrap();
    let p = &f.spec.periods[0];
    assert_eq!(
        (f.spec.reason.as_str(), f.spec.promises.clone(), p.time_zone.as_deref()),
        ("INC-4711: storage degraded", Some(vec![promise.clone()]), Some("UTC"))
    );
    let start = upgradeplan::engine::cron::resolve_local_time(p.start.as_deref().unwrap(), chrono_tz::UTC).unwrap();
    let end = upgradeplan::engine::cron::resolve_local_time(p.end.as_deref().unwrap(), chrono_tz::UTC).unwrap();
    assert!(
        start <= before && end >= before + chrono::Duration::hours(1),
        "{p:?} from {before}"
    );

    let again = run_plugin(None, &["freezes", "create", &name, "--for", "1h", "--reason", "again"])
        .await
        .unwrap();
    assert_eq!(again.code, Some(4), "{again:?}");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);

    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchLabels": {"env": "all"}}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let held = env
        .wait_run(&run, WAIT, "held by the incident freeze", |r| {
            frozen(r).is_some_and(|(s, _, _)| s == ConditionStatus::True)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let (_, reason, message) = frozen(&held).unwrap();
    assert_eq!(reason, "FreezeActive");
    assert!(
        message.starts_with(&format!("UpgradeFreeze \"{name}\" until "))
            && message.ends_with(": INC-4711: storage degraded"),
        "{message}"
    );
    let b = env.bindings_api(&ns).get(&env.binding_name("r0")).await.unwrap();
    assert_eq!(b.spec.version, "v1.0.0", "nothing starts while it holds");

    freezes(&env).delete(&name, &DeleteParams::default()).await.unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&done), RunState::Completed, "{}", controller.log_text());
}
