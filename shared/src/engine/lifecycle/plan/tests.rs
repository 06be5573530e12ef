//! Transition table of the plan's lifecycle.

use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::api::kratix::{BindingFacts, HealthRecord, ResourceBinding, RevisionFact};
use crate::api::{
    RunHistoryLimit, RunState, UpgradeExecutionPolicy, UpgradePlanRef, UpgradeRunSpec, UpgradeRunStatus, UpgradeWindow,
};
use crate::engine::snapshot::tests::{binding, match_all, plan as plan_spec};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

/// The step, and the gauges a scrape shows once its status is written.
fn stepped(
    plan: &UpgradePlan,
    runs: &[&UpgradeRun],
    promise_found: bool,
    cluster: &dyn Cluster,
    now: DateTime<Utc>,
) -> (PlanStep, PlanGauges) {
    let s = step(plan, runs, promise_found, cluster, now);
    let mut written = plan.clone();
    written.status = Some(s.status.clone());
    let gauges = gauges_of(&written, runs, promise_found, cluster, now);
    (s, gauges)
}

struct Bindings(Vec<Arc<ResourceBinding>>, Vec<Arc<crate::api::UpgradeFreeze>>);

impl Cluster for Bindings {
    fn binding(&self, _: &str, _: &str) -> Option<Arc<dyn BindingFacts>> {
        None
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        self.0
            .iter()
            .filter(|b| b.promise() == promise)
            .map(|b| Arc::clone(b) as Arc<dyn BindingFacts>)
            .collect()
    }
    /// The versions these tests use, each with its revision.
    fn revisions_of(&self, promise: &str) -> Vec<RevisionFact> {
        ["v1", "v2"]
            .map(|v| RevisionFact {
                version: v.into(),
                name: format!("{promise}-{v}"),
                deleting: false,
            })
            .into()
    }
    fn health_records(&self, _: &str) -> Vec<Arc<HealthRecord>> {
        Vec::new()
    }
    fn freezes(&self) -> Vec<Arc<crate::api::UpgradeFreeze>> {
        self.1.clone()
    }
}

fn four() -> Bindings {
    Bindings(
        (0..4)
            .map(|i| Arc::new(binding("ns", &format!("r{i}"), &[], "v1", "v1")))
            .collect(),
        Vec::new(),
    )
}

const CREATED: &str = "2026-06-01T10:00:00Z";

fn a_plan(policy: Option<UpgradeExecutionPolicy>) -> UpgradePlan {
    let mut spec = plan_spec(&["v1"], "v2", vec![match_all("all")]);
    spec.upgrade_execution_policy = policy;
    let mut p = UpgradePlan::new("p", spec);
    p.metadata.generation = Some(1);
    p.metadata.creation_timestamp = Some(Time(crate::time::to_jiff(utc(CREATED))));
    p
}

fn daily_at(hour_minute: &str) -> Option<UpgradeExecutionPolicy> {
    let (h, m) = hour_minute.split_once(':').unwrap();
    Some(UpgradeExecutionPolicy {
        repeat_schedule: Some(format!("{m} {h} * * *")),
        ..Default::default()
    })
}

fn a_run(name: &str, state: RunState) -> UpgradeRun {
    let mut r = UpgradeRun::new(
        name,
        UpgradeRunSpec {
            upgrade_plan_ref: UpgradePlanRef { name: "p".into() },
            suspend: false,
            cancel: false,
            ..Default::default()
        },
    );
    r.metadata.creation_timestamp = Some(Time(crate::time::to_jiff(utc(CREATED))));
    r.status = Some(UpgradeRunStatus {
        state,
        finished_at: state.is_terminal().then(|| utc("2026-06-01T11:00:00Z")),
        ..Default::default()
    });
    r
}

fn reasons_of(s: &PlanStep) -> Vec<&'static str> {
    s.events.iter().map(|e| e.reason).collect()
}

#[test]
fn a_valid_plan_without_a_policy_runs_only_by_hand() {
    let plan = a_plan(None);
    let (s, gauges) = stepped(&plan, &[], true, &four(), utc("2026-06-01T10:05:00Z"));
    let ready = find_condition(&s.status.conditions, reasons::READY).unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::True, reasons::VALID)
    );
    assert_eq!(ready.observed_generation, Some(1));
    let promise = find_condition(&s.status.conditions, reasons::PROMISE_RESOLVED).unwrap();
    assert_eq!(promise.message, "Promise \"redis\" found");
    assert!(s.create_run.is_none() && s.status.next_run_at.is_none() && s.wake_at.is_none());
    assert_eq!(
        (s.status.phase, s.status.observed_generation),
        (PlanPhase::Available, Some(1))
    );
    assert!(s.events.is_empty());
    // Unlimited is shown as the whole group: one rule for the gauge and the plugin.
    assert_eq!(gauges.groups[0].max_concurrent, Some(4));
    assert!(gauges.groups[0].window_open, "no windows: open");
    let missing = step(&plan, &[], false, &four(), utc("2026-06-01T10:05:00Z"));
    let promise = find_condition(&missing.status.conditions, reasons::PROMISE_RESOLVED).unwrap();
    assert_eq!(
        (promise.status, promise.reason.as_str()),
        (ConditionStatus::False, reasons::PROMISE_NOT_FOUND)
    );
}

#[test]
fn an_invalid_plan_says_so_once_and_never_fires() {
    let mut plan = a_plan(daily_at("10:30"));
    plan.spec.upgrade_path.to = "/v2.*/".into();
    plan.spec.rollout_groups[0].max_concurrent = Some(IntOrString::String("150%".into()));
    let now = utc("2026-06-01T10:45:00Z");
    let (s, gauges) = stepped(&plan, &[], true, &four(), now);
    let ready = find_condition(&s.status.conditions, reasons::READY).unwrap();
    assert_eq!(
        (ready.status, ready.reason.as_str()),
        (ConditionStatus::False, reasons::INVALID_SPEC)
    );
    assert!(ready.message.contains("spec.upgradePath.to"), "{}", ready.message);
    assert_eq!(reasons_of(&s), vec![events::INVALID_SPEC]);
    assert!(s.create_run.is_none() && s.status.next_run_at.is_none());
    assert_eq!(gauges.groups[0].max_concurrent, None, "an invalid limit is not shown");
    assert!(!gauges.ready);
    plan.status = Some(s.status.clone());
    let again = step(&plan, &[], true, &four(), now + Duration::minutes(1));
    assert!(again.events.is_empty(), "announced once");
    assert_eq!(
        find_condition(&again.status.conditions, reasons::READY)
            .unwrap()
            .last_transition_time,
        now
    );
}

#[test]
fn the_trigger_table() {
    // Daily at 10:30 UTC, plan created 10:00.
    let plan = a_plan(daily_at("10:30"));
    let at = utc("2026-06-01T10:30:00Z");
    type Case<'a> = (&'a str, &'a str, bool, Option<&'a str>, Option<&'a str>, Vec<&'a str>);
    let cases: Vec<Case> = vec![
        // (case, now, suspended, lastScheduledAt, run created, events)
        ("before the trigger", "2026-06-01T10:29:59Z", false, None, None, vec![]),
        (
            "at the trigger",
            "2026-06-01T10:30:00Z",
            false,
            None,
            Some("p-20260601-1030"),
            vec![events::RUN_CREATED],
        ),
        (
            "late, not yet serviced",
            "2026-06-01T12:00:00Z",
            false,
            None,
            Some("p-20260601-1030"),
            vec![events::RUN_CREATED],
        ),
        (
            "serviced already",
            "2026-06-01T12:00:00Z",
            false,
            Some("2026-06-01T10:30:00Z"),
            None,
            vec![],
        ),
        (
            "suspended: skipped on time",
            "2026-06-01T10:30:00Z",
            true,
            None,
            None,
            vec![events::TRIGGER_SKIPPED],
        ),
    ];
    for (case, now, suspended, last, run, want_events) in cases {
        let mut p = plan.clone();
        p.spec.suspend = suspended;
        p.status = Some(UpgradePlanStatus {
            last_scheduled_at: last.map(utc),
            observed_generation: Some(1),
            ..Default::default()
        });
        let s = step(&p, &[], true, &four(), utc(now));
        assert_eq!(s.create_run.as_ref().map(|r| r.name.as_str()), run, "{case}");
        assert_eq!(reasons_of(&s), want_events, "{case}");
        if run.is_some() || suspended && utc(now) >= at {
            assert_eq!(s.status.last_scheduled_at, Some(at), "{case}");
        }
        let next = utc("2026-06-02T10:30:00Z").min(if utc(now) < at { at } else { utc("2026-06-02T10:30:00Z") });
        assert_eq!(
            s.wake_at,
            Some(next),
            "{case}: wakes at the next trigger, suspended or not"
        );
        assert_eq!(
            s.status.next_run_at,
            (!suspended).then_some(next),
            "{case}: nextRunAt is absent while suspended"
        );
        // Replayed after the status is written: nothing again.
        let mut applied = p.clone();
        applied.status = Some(s.status.clone());
        let replay = step(&applied, &[], true, &four(), utc(now));
        assert!(
            replay.create_run.is_none() && replay.events.is_empty(),
            "{case}: replay"
        );
    }
    // A trigger before the plan existed never fires, and the one-off in the past is reported.
    let mut p = a_plan(Some(UpgradeExecutionPolicy {
        execute_at: Some("2026-06-01T09:00".into()),
        ..Default::default()
    }));
    let s = step(&p, &[], true, &four(), utc("2026-06-01T10:01:00Z"));
    assert!(s.create_run.is_none());
    assert_eq!(reasons_of(&s), vec![events::EXECUTE_AT_IN_PAST]);
    p.status = Some(s.status);
    assert!(step(&p, &[], true, &four(), utc("2026-06-01T10:02:00Z"))
        .events
        .is_empty());
}

#[test]
fn phase_active_run_and_last_run_follow_the_runs() {
    let plan = a_plan(None);
    let now = utc("2026-06-01T12:00:00Z");
    let active = a_run("active", RunState::InProgress);
    let done = a_run("done", RunState::Failed);
    let (s, gauges) = stepped(&plan, &[&active, &done], true, &four(), now);
    assert_eq!(
        (s.status.phase, s.status.active_run_ref.as_str()),
        (PlanPhase::Running, "active")
    );
    assert_eq!(s.status.last_run.as_ref().map(|l| l.name.as_str()), Some("done"));
    assert!(gauges.running);
    assert_eq!(gauges.last_result, Some("Failed"));
    // With the runs gone, lastRun stays.
    let mut p = plan.clone();
    p.status = Some(s.status);
    let s = step(&p, &[], true, &four(), now);
    assert_eq!(
        (s.status.phase, s.status.active_run_ref.as_str()),
        (PlanPhase::Available, "")
    );
    assert_eq!(s.status.last_run.map(|l| l.name), Some("done".into()));
}

#[test]
fn gauges_show_the_gate_and_an_invalid_window_keeps_it_closed() {
    let mut plan = a_plan(None);
    plan.spec.rollout_groups[0].max_concurrent = Some(IntOrString::String("50%".into()));
    plan.spec.rollout_groups[0].resource_upgrade_windows = Some(vec![UpgradeWindow {
        kind: WindowKind::Allow,
        schedule: "0 22 * * *".into(),
        duration: "2h".into(),
        time_zone: None,
    }]);
    let (s, gauges) = stepped(&plan, &[], true, &four(), utc("2026-06-01T21:00:00Z"));
    let g = &gauges.groups[0];
    assert_eq!(g.max_concurrent, Some(2), "50% of 4");
    assert!(!g.window_open);
    assert_eq!(g.windows, vec![(0, "allow", false)]);
    assert_eq!(g.next_open, Some(utc("2026-06-01T22:00:00Z").timestamp() as f64));
    assert_eq!(
        s.wake_at,
        Some(utc("2026-06-01T22:00:00Z")),
        "wakes when the gate changes"
    );

    plan.spec.rollout_groups[0].resource_upgrade_windows.as_mut().unwrap()[0].schedule = "not cron".into();
    let (_, gauges) = stepped(&plan, &[], true, &four(), utc("2026-06-01T22:30:00Z"));
    let g = &gauges.groups[0];
    assert!(!g.window_open && g.windows.is_empty() && g.next_open.is_none(), "{g:?}");
    assert!(!gauges.ready);
}

#[test]
fn a_freeze_holding_the_plan_closes_its_gates_and_wakes_it_at_the_boundaries() {
    use crate::api::{FreezePeriod, PlanSelector, UpgradeFreeze, UpgradeFreezeSpec};
    let freeze = |name: &str, tier: &str| {
        Arc::new(UpgradeFreeze::new(
            name,
            UpgradeFreezeSpec {
                reason: "release".into(),
                periods: vec![FreezePeriod {
                    start: Some("2026-06-01T22:30".into()),
                    end: Some("2026-06-01T23:00".into()),
                    ..Default::default()
                }],
                plan_selector: Some(PlanSelector {
                    match_labels: Some([("tier".to_string(), tier.to_string())].into()),
                    match_expressions: None,
                }),
                promises: None,
            },
        ))
    };
    let mut plan = a_plan(None);
    plan.metadata.labels = Some([("tier".to_string(), "critical".to_string())].into());
    plan.spec.rollout_groups[0].resource_upgrade_windows = Some(vec![UpgradeWindow {
        kind: WindowKind::Allow,
        schedule: "0 22 * * *".into(),
        duration: "2h".into(),
        time_zone: None,
    }]);
    let ts = |s: &str| Some(utc(s).timestamp() as f64);
    let mut cluster = four();
    cluster.1 = vec![freeze("other-tier", "dev")];
    let (_, gauges) = stepped(&plan, &[], true, &cluster, utc("2026-06-01T22:10:00Z"));
    let g = &gauges.groups[0];
    assert_eq!(
        (g.window_open, g.next_close),
        (true, ts("2026-06-02T00:00:00Z")),
        "not ours"
    );

    cluster.1.push(freeze("release", "critical"));
    let cases = [
        // (now, open, next open, next close, wake at)
        (
            "2026-06-01T22:10:00Z",
            true,
            "2026-06-01T23:00:00Z",
            "2026-06-01T22:30:00Z",
            "2026-06-01T22:30:00Z",
        ),
        (
            "2026-06-01T22:40:00Z",
            false,
            "2026-06-01T23:00:00Z",
            "2026-06-02T00:00:00Z",
            "2026-06-01T23:00:00Z",
        ),
        (
            "2026-06-01T23:00:00Z",
            true,
            "2026-06-02T22:00:00Z",
            "2026-06-02T00:00:00Z",
            "2026-06-02T00:00:00Z",
        ),
    ];
    for (now, open, next_open, next_close, wake) in cases {
        let (s, gauges) = stepped(&plan, &[], true, &cluster, utc(now));
        let g = &gauges.groups[0];
        assert_eq!(
            (g.window_open, g.next_open, g.next_close, s.wake_at),
            (open, ts(next_open), ts(next_close), Some(utc(wake))),
            "{now}"
        );
        assert_eq!(
            g.windows,
            vec![(0, "allow", true)],
            "window_active stays the windows' own"
        );
    }
}

#[test]
fn the_info_series_name_the_last_run_and_why_the_active_run_waits() {
    let plan = a_plan(None);
    let now = utc("2026-06-01T12:00:00Z");
    let unmet = |type_: &str, reason: &str| Condition::new(type_, ConditionStatus::False, reason, "", now);
    let pending_with = |conditions: Vec<Condition>| {
        let mut r = a_run("waiting", RunState::Pending);
        r.status.as_mut().unwrap().conditions = conditions;
        r
    };
    let cases: Vec<(&str, UpgradeRun, bool, (&str, &str))> = vec![
        (
            "invalid plan",
            pending_with(vec![unmet(reasons::PLAN_RESOLVED, reasons::PLAN_INVALID)]),
            true,
            ("Pending", "PlanInvalid"),
        ),
        (
            "no Promise (its revision can never appear)",
            pending_with(vec![unmet(
                reasons::TARGET_REVISION_READY,
                reasons::PROMISE_REVISION_NOT_FOUND,
            )]),
            false,
            ("Pending", "PromiseNotFound"),
        ),
        (
            "no revision",
            pending_with(vec![unmet(
                reasons::TARGET_REVISION_READY,
                reasons::PROMISE_REVISION_NOT_FOUND,
            )]),
            true,
            ("Pending", "PromiseRevisionNotFound"),
        ),
        ("just admitted", pending_with(vec![]), true, ("Pending", "")),
        (
            "rolling out",
            a_run("waiting", RunState::InProgress),
            true,
            ("InProgress", ""),
        ),
    ];
    let mut last = a_run("done", RunState::Failed);
    last.status.as_mut().unwrap().conditions = vec![unmet(reasons::RUN_SUCCEEDED, reasons::RESOURCE_UPGRADE_FAILED)];
    for (case, run, promise_found, (state, reason)) in cases {
        let (_, gauges) = stepped(&plan, &[&run, &last], promise_found, &four(), now);
        let active = gauges.active_run.unwrap_or_else(|| panic!("{case}: no active run"));
        assert_eq!(
            (active.run.as_str(), active.state.as_str(), active.reason.as_str()),
            ("waiting", state, reason),
            "{case}"
        );
        let l = gauges.last_run.unwrap();
        assert_eq!(
            (l.run.as_str(), l.state.as_str(), l.reason.as_str()),
            ("done", "Failed", "ResourceUpgradeFailed"),
            "{case}"
        );
    }
    // No active run, no series.
    assert_eq!(stepped(&plan, &[&last], true, &four(), now).1.active_run, None);
    // The last failure is the newest failed run, even when a retry completed after it (and so is
    // the plan's lastRun).
    let mut retry = a_run("retry", RunState::Completed);
    retry.status.as_mut().unwrap().finished_at = Some(utc("2026-06-01T11:05:00Z"));
    let mut older = a_run("older", RunState::Failed);
    older.status.as_mut().unwrap().finished_at = Some(utc("2026-06-01T09:00:00Z"));
    let (s, gauges) = stepped(&plan, &[&older, &retry, &last], true, &four(), now);
    assert_eq!(s.status.last_run.as_ref().map(|l| l.name.as_str()), Some("retry"));
    let (failed, at) = gauges.last_failure.unwrap();
    assert_eq!(
        (failed.run.as_str(), failed.reason.as_str(), at),
        (
            "done",
            "ResourceUpgradeFailed",
            utc("2026-06-01T11:00:00Z").timestamp() as f64
        )
    );
    // Its run deleted, the plan's lastRun still names it; with no failure at all, no series.
    let mut p = plan.clone();
    p.status = Some(step(&plan, &[&last], true, &four(), now).status);
    assert_eq!(
        stepped(&p, &[], true, &four(), now).1.last_failure.map(|(r, _)| r.run),
        Some("done".into())
    );
    assert_eq!(stepped(&plan, &[&retry], true, &four(), now).1.last_failure, None);
    // A failed revert names the run it reverted (the alert says a revert failed).
    assert_eq!(failed.revert_of, "", "no revert");
    let mut revert = last.clone();
    revert.spec.revert_of = Some(crate::api::RevertOf {
        name: "older".into(),
        resources: crate::api::RevertResources::Upgraded,
    });
    let (_, gauges) = stepped(&plan, &[&older, &retry, &revert], true, &four(), now);
    let (failed, _) = gauges.last_failure.unwrap();
    assert_eq!((failed.run.as_str(), failed.revert_of.as_str()), ("done", "older"));
}

#[test]
fn run_history_limits_delete_the_oldest_finished_runs_of_each_kind() {
    let now = utc("2026-06-01T12:00:00Z");
    let ended = |name: &str, state: RunState, minute: u32| {
        let mut r = a_run(name, state);
        r.status.as_mut().unwrap().finished_at = Some(utc(&format!("2026-06-01T11:{minute:02}:00Z")));
        r
    };
    let mut superseded_done = a_run("sup-done", RunState::InProgress);
    superseded_done.status.as_mut().unwrap().superseded_by = Some("f3".into());
    let mut superseded_live = a_run("sup-live", RunState::InProgress);
    superseded_live.status.as_mut().unwrap().superseded_by = Some("active".into());
    let runs = [
        ended("c1", RunState::Completed, 1),
        ended("c2", RunState::Completed, 2),
        ended("c3", RunState::Completed, 3),
        ended("f1", RunState::Failed, 4),
        ended("x1", RunState::Cancelled, 5),
        ended("f3", RunState::Failed, 6),
        superseded_done,
        superseded_live,
        a_run("active", RunState::InProgress),
    ];
    let refs: Vec<&UpgradeRun> = runs.iter().collect();
    let limited = |succeeded: Option<i32>, failed: Option<i32>| {
        let mut p = a_plan(None);
        p.spec.run_history_limit = Some(RunHistoryLimit { succeeded, failed });
        step(&p, &refs, true, &four(), now)
    };
    // No limit: every run stays (SKE).
    assert!(step(&a_plan(None), &refs, true, &four(), now).delete_runs.is_empty());
    // Keep 1 succeeded: the two oldest Completed go, oldest first.
    assert_eq!(limited(Some(1), None).delete_runs, vec!["c1", "c2"]);
    // Keep 2 failed: of f1, x1, f3 and the superseded run whose superseder ended (by creation,
    // 10:00, the oldest), the newest two (f3, x1) stay. The run superseded by the active run
    // and the active run itself are never counted.
    let s = limited(None, Some(2));
    assert_eq!(s.delete_runs, vec!["sup-done", "f1"]);
    assert_eq!(s.events.iter().filter(|e| e.reason == events::RUN_DELETED).count(), 2);
    // Exactly at the limit: nothing goes.
    assert!(limited(Some(3), Some(4)).delete_runs.is_empty());
    // lastRun is not changed by deleting runs.
    let mut p = a_plan(None);
    p.spec.run_history_limit = Some(RunHistoryLimit {
        succeeded: Some(1),
        failed: Some(1),
    });
    let s = step(&p, &refs, true, &four(), now);
    assert_eq!(s.status.last_run.as_ref().map(|l| l.name.as_str()), Some("f3"));
    p.status = Some(s.status);
    let kept: Vec<&UpgradeRun> = refs
        .iter()
        .copied()
        .filter(|r| !s.delete_runs.contains(r.metadata.name.as_ref().unwrap()))
        .collect();
    assert_eq!(
        step(&p, &kept, true, &four(), now).status.last_run.map(|l| l.name),
        Some("f3".into())
    );
}

#[test]
fn a_refused_scheduled_run_is_a_warning_that_says_it_is_retried() {
    let run = ScheduledRun {
        name: "p-20260601-1000".into(),
        at: utc("2026-06-01T10:00:00Z"),
    };
    let e = PlanEvent::run_create_failed(&run, "admission webhook \"x\" denied the request (HTTP 403, Forbidden)");
    assert_eq!(
        (e.warning, e.reason, e.note.as_str()),
        (
            true,
            "RunCreateFailed",
            "Cannot create UpgradeRun \"p-20260601-1000\" for trigger 2026-06-01T10:00:00Z: admission webhook \"x\" denied the request (HTTP 403, Forbidden); retrying"
        )
    );
}

#[test]
fn a_refused_trigger_stays_unserviced_and_named_as_next_run() {
    // Refused from the plan's very first trigger (no status written yet), and refused again later.
    let plan = a_plan(daily_at("10:30"));
    let now = utc("2026-06-01T10:30:02Z");
    let s = step(&plan, &[], true, &four(), now);
    let trigger = utc("2026-06-01T10:30:00Z");
    assert_eq!(s.create_run.as_ref().map(|r| r.at), Some(trigger));
    assert_eq!(s.status.last_scheduled_at, Some(trigger), "serviced once created");
    let refused = s.status_when_refused(plan.status.as_ref());
    assert_eq!((refused.last_scheduled_at, refused.next_run_at), (None, Some(trigger)));
    // Written, the retry still asks for the same run, and the conditions are there meanwhile.
    let mut written = plan.clone();
    written.status = Some(refused.clone());
    assert!(find_condition(&refused.conditions, reasons::READY).is_some());
    let retry = step(&written, &[], true, &four(), now + Duration::seconds(30));
    assert_eq!(retry.create_run.as_ref().map(|r| r.at), Some(trigger));
    assert_eq!(retry.status_when_refused(written.status.as_ref()), refused);
    // The next day's trigger refused: yesterday's stays lastScheduledAt.
    let mut served = plan.clone();
    served.status = Some(s.status.clone());
    let next_day = utc("2026-06-02T10:30:00Z");
    let s = step(&served, &[], true, &four(), next_day + Duration::seconds(1));
    let refused = s.status_when_refused(served.status.as_ref());
    assert_eq!(
        (refused.last_scheduled_at, refused.next_run_at),
        (Some(trigger), Some(next_day))
    );
    // Nothing to create: the step's status as it is.
    let idle = step(&served, &[], true, &four(), utc("2026-06-01T12:00:00Z"));
    assert!(idle.create_run.is_none());
    assert_eq!(idle.status_when_refused(served.status.as_ref()), idle.status);
}

/// Spec §6: a trigger found past `startingDeadline` (a controller outage, say) is recorded and
/// announced as missed, and no run is created; the next trigger runs as usual.
#[test]
fn a_trigger_found_past_its_starting_deadline_is_missed_and_said_so() {
    let mut policy = daily_at("10:30").unwrap();
    policy.starting_deadline = Some("15m".into());
    let plan = a_plan(Some(policy));
    let s = step(&plan, &[], true, &four(), utc("2026-06-01T12:43:07Z"));
    assert!(s.create_run.is_none());
    assert_eq!(s.status.last_scheduled_at, Some(utc("2026-06-01T10:30:00Z")));
    assert_eq!(s.status.next_run_at, Some(utc("2026-06-02T10:30:00Z")));
    assert_eq!(
        s.events
            .iter()
            .map(|e| (e.warning, e.reason, e.note.as_str()))
            .collect::<Vec<_>>(),
        vec![(
            true,
            "TriggerMissed",
            "trigger 2026-06-01T10:30:00Z missed by 2h13m7s (startingDeadline 15m)"
        )]
    );
    // Recorded: not missed again.
    let mut p = plan.clone();
    p.status = Some(s.status);
    let again = step(&p, &[], true, &four(), utc("2026-06-01T12:44:00Z"));
    assert!(again.events.is_empty() && again.create_run.is_none());
    // Within the deadline, the run is created.
    let on_time = step(&p, &[], true, &four(), utc("2026-06-02T10:40:00Z"));
    assert_eq!(on_time.create_run.map(|r| r.at), Some(utc("2026-06-02T10:30:00Z")));
}

/// A controller without Prometheus, as the plan's step sees it.
struct NoPrometheus(Bindings);

impl Cluster for NoPrometheus {
    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<dyn BindingFacts>> {
        self.0.binding(namespace, name)
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        self.0.bindings_of(promise)
    }
    fn revisions_of(&self, promise: &str) -> Vec<RevisionFact> {
        self.0.revisions_of(promise)
    }
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        self.0.health_records(promise)
    }
    fn freezes(&self) -> Vec<Arc<crate::api::UpgradeFreeze>> {
        self.0.freezes()
    }
    fn prometheus_configured(&self) -> bool {
        false
    }
}

/// A plan with gates on a controller with no Prometheus: every gate reads closed, so its runs
/// would wait while the plan reads Ready — `GatesReadable` says so, announced once; with a
/// Prometheus it reads True, and a plan without gates carries no such condition.
#[test]
fn gates_readable_says_when_the_controller_has_no_prometheus() {
    let gated = |gates: usize| {
        let mut p = a_plan(None);
        p.spec.gates = Some(
            (0..gates)
                .map(|i| crate::api::Gate {
                    name: format!("g{i}"),
                    prometheus: crate::api::PrometheusGate { query: "ALERTS".into() },
                    groups: None,
                    fail_after: None,
                })
                .collect(),
        );
        p
    };
    let now = utc("2026-06-01T10:05:00Z");
    type Want = Option<(ConditionStatus, &'static str)>;
    let cases: [(&str, usize, bool, Want, usize); 4] = [
        ("no gates, no Prometheus", 0, false, None, 0),
        ("no gates, Prometheus", 0, true, None, 0),
        (
            "gates, Prometheus",
            2,
            true,
            Some((ConditionStatus::True, reasons::PROMETHEUS_CONFIGURED)),
            0,
        ),
        (
            "gates, no Prometheus",
            2,
            false,
            Some((ConditionStatus::False, reasons::NO_PROMETHEUS)),
            1,
        ),
    ];
    for (case, gates, prometheus, want, announced) in cases {
        let plan = gated(gates);
        let s = if prometheus {
            step(&plan, &[], true, &four(), now)
        } else {
            step(&plan, &[], true, &NoPrometheus(four()), now)
        };
        let got = find_condition(&s.status.conditions, reasons::GATES_READABLE).map(|c| (c.status, c.reason.as_str()));
        assert_eq!(got, want, "{case}");
        let events = s.events.iter().filter(|e| e.reason == reasons::NO_PROMETHEUS).count();
        assert_eq!(events, announced, "{case}: announced as it turns False");
        let ready = find_condition(&s.status.conditions, reasons::READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::True, "{case}: the plan itself is valid");
        // The next pass, with that status written: nothing announced again.
        let mut again = plan.clone();
        again.status = Some(s.status.clone());
        let s = if prometheus {
            step(&again, &[], true, &four(), now)
        } else {
            step(&again, &[], true, &NoPrometheus(four()), now)
        };
        assert!(
            s.events.iter().all(|e| e.reason != reasons::NO_PROMETHEUS),
            "{case}: once"
        );
        if gates == 0 {
            continue;
        }
        // The gates removed: the condition goes with them.
        let mut ungated = again.clone();
        ungated.spec.gates = None;
        ungated.status = Some(s.status.clone());
        let s = step(&ungated, &[], true, &NoPrometheus(four()), now);
        assert!(
            find_condition(&s.status.conditions, reasons::GATES_READABLE).is_none(),
            "{case}: no gates, no condition"
        );
    }
}
