//! Golden output of the views that read the cluster — `status`, `history` and `get` — rendered
//! offline from objects as the API server would return them, at a fixed time and zone.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use upgradeplan::engine::revert::Revisions;

use chrono::{DateTime, Utc};
use kubectl_upgradeplan::output::Style;
use kubectl_upgradeplan::runs;
use serde_json::json;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::{UpgradePlan, UpgradeRun};
use upgradeplan::engine::compile::compile;
use upgradeplan::engine::snapshot::{assign, Frozen};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const NOW: &str = "2026-03-27T21:30:00Z";

fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(expected == actual, "{name} differs (UPDATE_GOLDEN=1 cargo test -p kubectl-upgradeplan to accept):\n--- expected\n{expected}\n--- actual\n{actual}");
}

fn style() -> Style {
    Style {
        zone: chrono_tz::America::New_York,
        ..Style::plain()
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name),
    )
    .unwrap()
}

fn plan() -> UpgradePlan {
    plan_of("three-groups.yaml")
}

/// The plan of fixture `file`, created on 2026-03-01.
fn plan_of(file: &str) -> UpgradePlan {
    let mut p: UpgradePlan = serde_saphyr::from_str(&fixture(file)).unwrap();
    p.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        upgradeplan::time::to_jiff(utc("2026-03-01T00:00:00Z")),
    ));
    p
}

fn bindings() -> Vec<ResourceBinding> {
    let list: serde_json::Value = serde_json::from_str(&fixture("bindings.json")).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| serde_json::from_value(b.clone()).ok())
        .collect()
}

fn frozen(plan: &UpgradePlan, bindings: &[ResourceBinding]) -> Frozen {
    let compiled = compile(&plan.spec).unwrap();
    Frozen::new(assign(&compiled, bindings).snapshot, plan.spec.clone()).unwrap()
}

fn run(name: &str, status: serde_json::Value) -> UpgradeRun {
    serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
        "metadata": {"name": name, "creationTimestamp": "2026-03-27T21:00:00Z",
                     "labels": {"platform.syntasso.io/upgrade-plan": "redis-v1-to-v2"}},
        "spec": {"upgradePlanRef": {"name": "redis-v1-to-v2"}},
        "status": status
    }))
    .unwrap()
}

/// cache-1's binding, the resource most cases change.
fn cache_1(bindings: &mut [ResourceBinding]) -> &mut ResourceBinding {
    bindings
        .iter_mut()
        .find(|b| b.metadata.name.as_deref() == Some("cache-1-redis"))
        .expect("the fixture has cache-1")
}

/// Kratix reports cache-1's upgrade to v2.0.0 failed at `at`.
fn fail_cache_1(bindings: &mut [ResourceBinding], message: &str, at: &str) {
    let b = cache_1(bindings);
    b.spec.version = "v2.0.0".into();
    let s = b.status.get_or_insert_with(Default::default);
    s.failed_version = Some("v2.0.0".into());
    s.conditions = vec![upgradeplan::api::kratix::BindingCondition {
        type_: upgradeplan::api::kratix::UPGRADE_SUCCEEDED.into(),
        status: "False".into(),
        reason: upgradeplan::api::kratix::UPGRADE_FAILED.into(),
        message: message.into(),
        last_transition_time: Some(utc(at)),
    }];
}

fn live(bindings: &[ResourceBinding]) -> runs::Live {
    runs::Live::of_bindings(bindings.iter().cloned())
}

/// The run of `plan` once its dev group is done (every dev resource at the target): the live
/// bindings, the frozen plan and snapshot (taken before), and the run.
fn dev_done(plan: &UpgradePlan) -> (Vec<ResourceBinding>, Frozen, UpgradeRun) {
    let mut bindings = bindings();
    for b in &mut bindings {
        if b.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("env"))
            .map(String::as_str)
            == Some("dev")
        {
            b.spec.version = "v2.0.0".into();
            b.status.get_or_insert_with(Default::default).last_applied_version = "v2.0.0".into();
        }
    }
    let frozen = frozen(plan, &self::bindings());
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 6,
               "completedResources": 3,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 3}, {"name": "eu", "total": 2},
                                 {"name": "rest", "total": 1}]}),
    );
    (bindings, frozen, r)
}

#[test]
fn status_of_a_run_waiting_for_its_window() {
    let plan = plan();
    let (bindings, frozen, r) = dev_done(&plan);
    let (_, text) = runs::status(
        &r,
        Some(&frozen),
        &live(&bindings),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    golden("status-waiting-for-a-window.txt", &text);
}

/// A freeze and the group's window hold it at once: the first reason in words, the others by the
/// reasons of the blocked gauge (spec §14.1).
/// A freeze, "launch", holding from the evening before NOW to the evening after.
fn launch_freeze() -> upgradeplan::engine::freeze::Freeze {
    let spec = upgradeplan::api::UpgradeFreezeSpec {
        reason: "payments launch".into(),
        periods: vec![upgradeplan::api::FreezePeriod {
            start: Some("2026-03-27T20:00".into()),
            end: Some("2026-03-28T20:00".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    upgradeplan::engine::freeze::Freeze::compile("launch", &spec).unwrap()
}

#[test]
fn status_names_every_reason_that_holds_the_group() {
    let plan = plan();
    let (bindings, frozen, r) = dev_done(&plan);
    let mut live = live(&bindings);
    live.freezes = vec![launch_freeze()];
    let (_, text) = runs::status(&r, Some(&frozen), &live, &Revisions::present(), utc(NOW), &style());
    let waiting = text.lines().find(|l| l.starts_with("Waiting:")).unwrap_or_default();
    assert!(
        waiting.contains("launch") && waiting.ends_with("; also held by WindowClosed"),
        "{text}"
    );
}

/// Spec §13.7, §14.1: freezes hold a revert only when it respects policy; the view says what
/// the controller does.
#[test]
fn status_of_a_revert_under_a_freeze_says_it_is_frozen_only_when_it_respects_policy() {
    let plan = plan();
    let (bindings, frozen, mut r) = dev_done(&plan);
    let mut live = live(&bindings);
    live.freezes = vec![launch_freeze()];
    r.spec.revert_of = Some(upgradeplan::api::RevertOf {
        name: "earlier".into(),
        resources: upgradeplan::api::RevertResources::Upgraded,
    });
    let waiting = |r: &upgradeplan::api::UpgradeRun| {
        let (_, text) = runs::status(r, Some(&frozen), &live, &Revisions::present(), utc(NOW), &style());
        text.lines()
            .find(|l| l.starts_with("Waiting:"))
            .unwrap_or_default()
            .to_string()
    };
    let emergency = waiting(&r);
    assert!(!emergency.contains("launch"), "not held by the freeze: {emergency}");
    r.spec.respect_policy = true;
    let careful = waiting(&r);
    assert!(careful.contains("launch"), "held by it: {careful}");
}

#[test]
fn status_of_a_failed_run() {
    let plan = plan();
    let bindings = bindings();
    let frozen = frozen(&plan, &bindings);
    let mut failed = bindings.clone();
    fail_cache_1(
        &mut failed,
        "workflow failed: helm upgrade timed out",
        "2026-03-27T21:04:00Z",
    );
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "Failed", "startedAt": "2026-03-27T21:00:05Z", "finishedAt": "2026-03-27T21:04:10Z",
               "totalResources": 6, "completedResources": 1,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 1, "failed": 1}, {"name": "eu", "total": 2},
                                 {"name": "rest", "total": 1}],
               "conditions": [{"type": "RunSucceeded", "status": "False", "reason": "ResourceUpgradeFailed",
                               "message": "1 resource(s) failed to upgrade in rollout group \"dev\"",
                               "lastTransitionTime": "2026-03-27T21:04:10Z"}]}),
    );
    let (_, text) = runs::status(
        &r,
        Some(&frozen),
        &live(&failed),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    golden("status-failed.txt", &text);
}

/// Kratix retried cache-1 by itself after the run failed and it succeeded: the run's record of
/// the failure stands (spec §5.5), and the per-resource view says what happened since.
#[test]
fn a_recorded_failure_stands_after_kratix_retried_the_resource() {
    let plan = plan();
    let bindings = bindings();
    let frozen = frozen(&plan, &bindings);
    let mut retried = bindings.clone();
    let cache = cache_1(&mut retried);
    cache.spec.version = "v2.0.0".into();
    cache.status.get_or_insert_with(Default::default).last_applied_version = "v2.0.0".into();
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "Failed", "startedAt": "2026-03-27T21:00:05Z", "finishedAt": "2026-03-27T21:04:10Z",
               "totalResources": 6, "completedResources": 1,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 1, "failed": 1,
                                  "failedResources": [{"namespace": "team-a", "name": "cache-1",
                                                       "at": "2026-03-27T21:04:05Z",
                                                       "detail": "workflow failed: helm upgrade timed out"}]},
                                 {"name": "eu", "total": 2}, {"name": "rest", "total": 1}],
               "conditions": [{"type": "RunSucceeded", "status": "False", "reason": "ResourceUpgradeFailed",
                               "message": "1 resource(s) failed to upgrade in rollout group \"dev\"",
                               "lastTransitionTime": "2026-03-27T21:04:10Z"}]}),
    );
    let (_, text) = runs::status(
        &r,
        Some(&frozen),
        &live(&retried),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    assert!(
        text.contains("Failed:\n  team-a/cache-1: workflow failed: helm upgrade timed out"),
        "{text}"
    );
    let (rows, _) = runs::run_resources(&r, &frozen, &live(&retried), &[], utc(NOW), &style());
    let cache = rows.iter().find(|row| row.name == "cache-1").unwrap();
    assert_eq!(cache.outcome, "Failed");
    assert_eq!(
        cache.detail,
        "workflow failed: helm upgrade timed out (Kratix has since applied v2.0.0)"
    );
    assert_eq!(cache.now.as_deref(), Some("v2.0.0"));
}

/// A recorded failure Kratix still shows failed: `history RUN` says when Kratix retries it by
/// itself, by the interval of the revision its binding asks for (spec §2), not a global 10h.
#[test]
fn a_failure_still_failing_says_when_kratix_retries_it_by_its_revisions_interval() {
    let plan = plan();
    let bindings = bindings();
    let frozen = frozen(&plan, &bindings);
    let mut failing = bindings.clone();
    let cache = cache_1(&mut failing);
    cache.spec.version = "v2.0.0".into();
    cache.status.get_or_insert_with(Default::default).failed_version = Some("v2.0.0".into());
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "Failed", "startedAt": "2026-03-27T21:00:05Z", "finishedAt": "2026-03-27T21:04:10Z",
               "totalResources": 6, "completedResources": 1,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 1, "failed": 1,
                                  "failedResources": [{"namespace": "team-a", "name": "cache-1",
                                                       "at": "2026-03-27T21:04:05Z",
                                                       "detail": "workflow failed: helm upgrade timed out"}]},
                                 {"name": "eu", "total": 2}, {"name": "rest", "total": 1}]}),
    );
    let revision: upgradeplan::api::kratix::PromiseRevision = serde_json::from_value(json!({
        "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
        "metadata": {"name": "redis-v2-0-0", "annotations": {"kratix.io/reconciliation-interval": "30m"}},
        "spec": {"promiseRef": {"name": "redis"}, "version": "v2.0.0", "promiseSpec": {}}
    }))
    .unwrap();
    let mut live = live(&failing);
    live.retries = upgradeplan::engine::retry::RetryIntervals::of(None, &[revision]);
    let detail = |now: &str| {
        let (rows, _) = runs::run_resources(&r, &frozen, &live, &[], utc(now), &style());
        rows.into_iter().find(|row| row.name == "cache-1").unwrap().detail
    };
    assert_eq!(
        detail("2026-03-27T21:10:00Z"),
        "workflow failed: helm upgrade timed out; Kratix retries it by itself around 2026-03-27T21:34:05Z \
         (reconciliation interval 30m (kratix.io/reconciliation-interval on PromiseRevision redis-v2-0-0)), \
         unless its reconcileAfterFailure is off"
    );
    assert!(
        detail("2026-03-28T09:00:00Z").ends_with(
            "; Kratix retries it by itself every 30m (kratix.io/reconciliation-interval on PromiseRevision \
             redis-v2-0-0) while it fails, unless its reconcileAfterFailure is off"
        ),
        "past the interval, it says how often"
    );
    let (rows, _) = runs::run_resources(&r, &frozen, &self::live(&failing), &[], utc(NOW), &style());
    let cache = rows.into_iter().find(|row| row.name == "cache-1").unwrap();
    assert!(
        cache
            .detail
            .contains("around 2026-03-28T07:04:05Z (reconciliation interval 10h (Kratix's default))"),
        "{}",
        cache.detail
    );
}

#[test]
fn history_of_a_plan() {
    let done = run(
        "redis-v1-to-v2-20260326-2100",
        json!({"state": "Completed", "startedAt": "2026-03-26T21:00:05Z", "finishedAt": "2026-03-26T21:40:00Z",
               "totalResources": 6, "completedResources": 6,
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 3}, {"name": "eu", "total": 2, "succeeded": 2},
                                 {"name": "rest", "total": 1, "succeeded": 1}],
               "conditions": [{"type": "RunSucceeded", "status": "True", "reason": "RunCompleted",
                               "message": "6/6 resources upgraded to v2.0.0", "lastTransitionTime": "2026-03-26T21:40:00Z"}]}),
    );
    let mut done = done;
    done.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        upgradeplan::time::to_jiff(utc("2026-03-26T21:00:00Z")),
    ));
    let active = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 6, "completedResources": 3,
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 3}, {"name": "eu", "total": 2},
                                 {"name": "rest", "total": 1}]}),
    );
    let cancelled = upgradeplan::api::LastRun {
        name: "redis-v1-to-v2-manual".into(),
        finished_at: Some(utc("2026-03-27T09:00:00Z")),
        result: upgradeplan::api::RunResult::Cancelled,
        reason: "RunCancelled".into(),
        message: "UpgradeRun was deleted before it finished".into(),
    };
    // The newest run's snapshot holds 5 distinct resources in 6 group entries.
    let distinct = HashMap::from([("redis-v1-to-v2-20260327-2100".to_string(), 5)]);
    let (_, text) = runs::history(
        vec![done.clone(), active.clone()],
        Some(&cancelled),
        &distinct,
        20,
        utc(NOW),
        &style(),
    );
    golden("history.txt", &text);
    let wide = Style { wide: true, ..style() };
    let (_, text) = runs::history(vec![done, active], Some(&cancelled), &distinct, 20, utc(NOW), &wide);
    golden("history-wide.txt", &text);
}

#[test]
fn get_plans() {
    let mut a = plan();
    a.status = Some(
        serde_json::from_value(json!({"phase": "Running", "activeRunRef": "redis-v1-to-v2-20260327-2100",
            "nextRunAt": "2026-03-28T01:30:00Z",
            "lastRun": {"name": "redis-v1-to-v2-20260326-2100", "finishedAt": "2026-03-26T21:40:00Z",
                        "result": "Completed", "reason": "RunCompleted", "message": ""},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "lastTransitionTime": "2026-03-01T00:00:00Z"},
                           {"type": "PromiseResolved", "status": "True", "reason": "PromiseFound", "lastTransitionTime": "2026-03-01T00:00:00Z"}]}))
        .unwrap(),
    );
    let mut b = plan();
    b.metadata.name = Some("redis-v1-to-v2-10".into());
    b.spec.suspend = true;
    b.status = Some(
        serde_json::from_value(json!({"phase": "Available",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "lastTransitionTime": "2026-03-01T00:00:00Z"},
                           {"type": "PromiseResolved", "status": "False", "reason": "PromiseNotFound", "lastTransitionTime": "2026-03-01T00:00:00Z"}]}))
        .unwrap(),
    );
    let mut c = b.clone();
    c.metadata.name = Some("redis-v1-to-v2-4".into());
    let plans = vec![b, a, c];
    golden(
        "get.txt",
        &kubectl_upgradeplan::verbs::plans_table(&plans, &Default::default(), utc(NOW), &style()),
    );
    let wide = Style { wide: true, ..style() };
    golden(
        "get-wide.txt",
        &kubectl_upgradeplan::verbs::plans_table(&plans, &Default::default(), utc(NOW), &wide),
    );
}

#[test]
fn status_of_a_run_upgrading_now() {
    let plan = plan();
    let bindings = bindings();
    let frozen = frozen(&plan, &bindings);
    // dev (50%: one at a time of 3): cache-0 is upgraded, cache-1 is upgrading.
    let mut live_now = bindings.clone();
    for b in &mut live_now {
        match b.metadata.name.as_deref() {
            Some("cache-0-redis") => {
                b.spec.version = "v2.0.0".into();
                b.status.get_or_insert_with(Default::default).last_applied_version = "v2.0.0".into();
            }
            Some("cache-1-redis") => b.spec.version = "v2.0.0".into(),
            _ => {}
        }
    }
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 6,
               "completedResources": 1,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 1}, {"name": "eu", "total": 2},
                                 {"name": "rest", "total": 1}]}),
    );
    let (json, text) = runs::status(
        &r,
        Some(&frozen),
        &live(&live_now),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    assert_eq!(json.in_flight_resources, vec!["team-a/cache-1".to_string()]);
    golden("status-upgrading.txt", &text);
}

/// Spec §13.2–13.3: a resource upgraded and waiting for its HealthRecord is Verifying (in flight),
/// and the next start is held by a closed signal gate, as the run's Gated condition records it.
#[test]
fn status_of_a_run_held_by_a_gate_while_a_resource_verifies() {
    let plan = plan_of("verified-plan.yaml");
    let frozen = frozen(&plan, &bindings());
    let mut live_now = bindings();
    for b in &mut live_now {
        if b.metadata.name.as_deref() == Some("cache-0-redis") {
            b.spec.version = "v2.0.0".into();
            let s = b.status.get_or_insert_with(Default::default);
            s.last_applied_version = "v2.0.0".into();
            s.conditions = vec![upgradeplan::api::kratix::BindingCondition {
                type_: upgradeplan::api::kratix::UPGRADE_SUCCEEDED.into(),
                status: "True".into(),
                reason: "UpgradeComplete".into(),
                message: String::new(),
                last_transition_time: Some(utc("2026-03-27T21:25:00Z")),
            }];
        }
    }
    let r = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 3,
               "completedResources": 0,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "dev", "total": 2, "verifying": 1}, {"name": "prod", "total": 1}],
               "conditions": [{"type": "Gated", "status": "True", "reason": "GateFiring",
                               "message": "gate \"no-critical-alerts\": 2 series, first ALERTS{alertname=\"KubeNodeNotReady\", alertstate=\"firing\", severity=\"critical\"}",
                               "lastTransitionTime": "2026-03-27T21:26:00Z"}]}),
    );
    let (json, text) = runs::status(
        &r,
        Some(&frozen),
        &live(&live_now),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    assert_eq!(json.verifying_resources, vec!["team-a/cache-0"]);
    assert_eq!(json.in_flight, 1);
    golden("status-held-by-a-gate.txt", &text);
}

/// Spec §13.4: a run whose canary soaks says when the next group starts; one whose group waits for
/// approval says since when and the command that approves it.
#[test]
fn status_of_runs_soaking_and_awaiting_approval() {
    let plan = plan_of("staged-plan.yaml");
    let frozen = frozen(&plan, &bindings());
    let mut live_now = bindings();
    for b in &mut live_now {
        if b.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("env"))
            .map(String::as_str)
            == Some("dev")
            && b.status.as_ref().is_some_and(|s| s.last_applied_version == "v1.0.0")
        {
            b.spec.version = "v2.0.0".into();
            b.status.get_or_insert_with(Default::default).last_applied_version = "v2.0.0".into();
        }
    }
    let soaking = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 4,
               "completedResources": 2,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "canary", "total": 2, "succeeded": 2, "phase": "Soaking",
                                  "startedAt": "2026-03-27T21:00:05Z", "completedAt": "2026-03-27T21:17:00Z"},
                                 {"name": "prod", "total": 2, "phase": "Pending"}]}),
    );
    let (_, text) = runs::status(
        &soaking,
        Some(&frozen),
        &live(&live_now),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    assert!(
        text.contains("Waiting: soaking after group \"canary\", next group in 1h47m"),
        "{text}"
    );
    assert!(text.contains("soaking"), "{text}");
    let awaiting = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 4,
               "completedResources": 2,
               "resourceListRefs": [{"name": "redis-v1-to-v2-20260327-2100-resource-snapshot"}],
               "rolloutGroups": [{"name": "canary", "total": 2, "succeeded": 2, "phase": "Completed",
                                  "startedAt": "2026-03-27T19:00:05Z", "completedAt": "2026-03-27T19:10:00Z"},
                                 {"name": "prod", "total": 2, "phase": "AwaitingApproval"}],
               "conditions": [{"type": "AwaitingApproval", "status": "True", "reason": "ApprovalRequired",
                               "message": "rollout group \"prod\" waits for an UpgradeApproval",
                               "lastTransitionTime": "2026-03-27T21:18:00Z"}]}),
    );
    let (_, text) = runs::status(
        &awaiting,
        Some(&frozen),
        &live(&live_now),
        &Revisions::present(),
        utc(NOW),
        &style(),
    );
    golden("status-awaiting-approval.txt", &text);
}

/// A dormant run — superseded, or a preview not resumed — is never evaluated by the controller
/// (spec §5.2), so its view shows the counts it recorded, not what its bindings show now: found
/// by the simulation, a superseded run (seed 13865975483465176421) and a preview (seed
/// 16445935778384770790) shown with a failure that the newer run, or Kratix after the preview
/// was made, produced.
#[test]
fn a_dormant_runs_view_shows_what_it_recorded() {
    let plan = plan();
    let (mut bindings, frozen, _) = dev_done(&plan);
    // A dev resource fails after the dormant run stopped acting.
    cache_1(&mut bindings)
        .status
        .get_or_insert_with(Default::default)
        .last_applied_version = "v1.0.0".into();
    fail_cache_1(&mut bindings, "workflow failed", "2026-03-27T21:20:00Z");
    let recorded = json!([{"name": "dev", "total": 3}, {"name": "eu", "total": 2}, {"name": "rest", "total": 1}]);
    let superseded = {
        let mut r = run(
            "superseded",
            json!({"state": "InProgress", "startedAt": "2026-03-27T21:00:05Z", "totalResources": 6,
                   "supersededBy": "newer", "rolloutGroups": recorded}),
        );
        r.spec.suspend = true;
        r
    };
    let preview = {
        let mut r = run(
            "preview",
            json!({"state": "InProgress", "totalResources": 6, "rolloutGroups": recorded}),
        );
        r.spec.suspend = true;
        r.metadata.generation = Some(1);
        r.metadata.annotations = Some([(upgradeplan::api::PREVIEW_ANNOTATION.to_string(), "true".to_string())].into());
        r
    };
    let cases = [
        (superseded, "superseded by newer: it starts nothing more"),
        (
            preview,
            "preview: nothing is patched until resumed (kubectl upgradeplan resume <run>)",
        ),
    ];
    for (r, waits) in cases {
        let name = r.metadata.name.clone().unwrap_or_default();
        let (json, _) = runs::status(
            &r,
            Some(&frozen),
            &live(&bindings),
            &Revisions::present(),
            utc(NOW),
            &style(),
        );
        let counts: Vec<(i64, i64, i64)> = json.groups.iter().map(|g| (g.succeeded, g.failed, g.skipped)).collect();
        assert_eq!(counts, vec![(0, 0, 0); 3], "{name}: the recorded counts");
        assert_eq!(json.waiting.as_deref(), Some(waits), "{name}");
        assert!(json.in_flight_resources.is_empty(), "{name}");
    }
}

#[test]
fn a_revert_is_shown_as_the_revert_of_its_run_everywhere() {
    let failed = run(
        "redis-v1-to-v2-20260327-2100",
        json!({"state": "Failed", "startedAt": "2026-03-27T21:00:05Z", "finishedAt": "2026-03-27T21:10:00Z",
               "totalResources": 6, "completedResources": 2,
               "rolloutGroups": [{"name": "dev", "total": 3, "succeeded": 2, "failed": 1}, {"name": "eu", "total": 2},
                                 {"name": "rest", "total": 1}],
               "conditions": [{"type": "RunSucceeded", "status": "False", "reason": "ResourceUpgradeFailed",
                               "message": "1 resource(s) failed to upgrade in rollout group \"dev\"",
                               "lastTransitionTime": "2026-03-27T21:10:00Z"}]}),
    );
    let mut revert = run(
        "redis-v1-to-v2-20260327-2100-revert",
        json!({"state": "InProgress", "startedAt": "2026-03-27T21:10:02Z", "totalResources": 3, "completedResources": 1,
               "rolloutGroups": [{"name": "rest", "total": 0}, {"name": "eu", "total": 0},
                                 {"name": "dev", "total": 3, "succeeded": 1}]}),
    );
    revert.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        upgradeplan::time::to_jiff(utc("2026-03-27T21:10:01Z")),
    ));
    revert.spec.revert_of = Some(upgradeplan::api::RevertOf {
        name: "redis-v1-to-v2-20260327-2100".into(),
        resources: upgradeplan::api::RevertResources::All,
    });

    let (json, text) = runs::history(
        vec![failed, revert.clone()],
        None,
        &HashMap::new(),
        20,
        utc(NOW),
        &style(),
    );
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line("redis-v1-to-v2-20260327-2100-revert").contains("revert of redis-v1-to-v2-20260327-2100"),
        "{text}"
    );
    assert!(
        line("redis-v1-to-v2-20260327-2100").contains("(reverted by redis-v1-to-v2-20260327-2100-revert)"),
        "{text}"
    );
    assert_eq!(json[0].trigger, "revert");
    assert_eq!(json[0].revert_of.as_deref(), Some("redis-v1-to-v2-20260327-2100"));
    assert_eq!(
        json[1].reverted_by.as_deref(),
        Some("redis-v1-to-v2-20260327-2100-revert")
    );

    let (json, text) = runs::status(&revert, None, &live(&[]), &Revisions::present(), utc(NOW), &style());
    assert!(
        text.starts_with(
            "UpgradeRun redis-v1-to-v2-20260327-2100-revert (plan redis-v1-to-v2, revert of redis-v1-to-v2-20260327-2100)"
        ),
        "{text}"
    );
    assert_eq!(json.revert_of.as_deref(), Some("redis-v1-to-v2-20260327-2100"));

    let mut p = plan();
    p.status = Some(
        serde_json::from_value(json!({"phase": "Running", "activeRunRef": "redis-v1-to-v2-20260327-2100-revert"}))
            .unwrap(),
    );
    let reverts = HashMap::from([(
        "redis-v1-to-v2-20260327-2100-revert".to_string(),
        "redis-v1-to-v2-20260327-2100".to_string(),
    )]);
    let table = kubectl_upgradeplan::verbs::plans_table(&[p], &reverts, utc(NOW), &style());
    assert!(
        table.contains("redis-v1-to-v2-20260327-2100-revert (revert of redis-v1-to-v2-20260327-2100)"),
        "{table}"
    );
}

/// Spec §5.7: `match` and `explain` say which PromiseRevision is being deleted — the target (no
/// run upgrades to it), or a version resources ask for (Kratix deletes them; a run skips them).
#[test]
fn match_and_explain_name_a_revision_being_deleted() {
    let plan = plan();
    let bindings = bindings();
    let revision = |version: &str, deleting: bool| upgradeplan::api::kratix::RevisionFact {
        version: version.into(),
        name: format!("redis-{}", version.replace('.', "-")),
        deleting,
    };
    let matched = |revisions: &[upgradeplan::api::kratix::RevisionFact]| {
        let (freezes, budgets) = (&[], &[]);
        let sources = (&freezes[..], &budgets[..], Some(revisions));
        kubectl_upgradeplan::matching::matching(&plan, &bindings, sources, utc(NOW), None, None, false, &style())
            .unwrap()
    };
    let revisions = [revision("v1.0.0", true), revision("v2.0.0", false)];
    let (json, text) = matched(&revisions);
    let deleting: Vec<&str> = json
        .revision_deleting
        .iter()
        .map(|d| d.resource.name.as_str())
        .collect();
    assert_eq!(deleting, ["cache-0", "cache-2", "db"], "{text}");
    assert!(json.revision_deleting.iter().all(|d| d.revision == "redis-v1-0-0"));
    assert!(
        text.contains("team-a/cache-0 (group dev): PromiseRevision redis-v1-0-0 is being deleted"),
        "{text}"
    );
    assert_eq!(json.target_deleting, None);
    let warnings = upgradeplan::engine::validate::revision_warnings(&plan.spec, &revisions);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].field, "spec.upgradePath.from");
    assert!(warnings[0]
        .message
        .starts_with("PromiseRevision redis-v1-0-0 (redis v1.0.0) is being deleted"));

    let target = [revision("v1.0.0", false), revision("v2.0.0", true)];
    let (json, text) = matched(&target);
    assert_eq!(json.target_deleting.as_deref(), Some("redis-v2-0-0"));
    assert!(
        text.contains("Target being deleted: PromiseRevision redis-v2-0-0 (redis v2.0.0) is being deleted"),
        "{text}"
    );
    let warnings = upgradeplan::engine::validate::revision_warnings(&plan.spec, &target);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].field, "spec.upgradePath.to");
    let none = upgradeplan::engine::validate::revision_warnings(&plan.spec, &target[..1]);
    assert!(
        none[0].message.contains("has no PromiseRevision \"v2.0.0\""),
        "{none:?}"
    );
}
