use super::*;
use crate::api::kratix::{ResourceBinding, UPGRADE_IN_PROGRESS};
use crate::api::{GroupStatus, HealthCheck, ResourceFailure, RolloutGroup, UpgradeWindow, WindowKind};
use crate::engine::run::tests::with_condition;
use crate::engine::run::{evaluate_resource, Outcome, SkipReason};
use crate::engine::snapshot::tests::{binding, group, plan};
use chrono::{DateTime, Utc};
use std::collections::HashMap;

const RUN: &str = "redis-v2";
const AT: &str = "2026-06-01T10:00:00Z";

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn by(mut b: ResourceBinding, run: &str) -> ResourceBinding {
    b.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(UPGRADED_BY_ANNOTATION.into(), run.into());
    b
}

fn resource(name: &str, applied: &str, spec: &str) -> Arc<SnapshotResource> {
    Arc::new(SnapshotResource::from_binding(&binding("ns", name, &[], applied, spec)))
}

/// `b` with Kratix's manual-reconciliation label, as a revert's start to the applied version
/// leaves it until Kratix takes the request.
fn asked(mut b: ResourceBinding) -> ResourceBinding {
    b.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(crate::api::kratix::MANUAL_RECONCILIATION_LABEL.into(), "true".into());
    b
}

/// `b` as the revert's start at `at` left it (its `upgraded-by` and `upgrade-started-at`).
fn started_at(b: ResourceBinding, at: &str) -> ResourceBinding {
    let mut b = patched(b);
    b.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::api::UPGRADE_STARTED_AT_ANNOTATION.into(), at.into());
    b
}

/// `b` as patched by the revert `redis-v2-revert` (its start writes `upgraded-by` with the version).
fn patched(mut b: ResourceBinding) -> ResourceBinding {
    b.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::api::UPGRADED_BY_ANNOTATION.into(), "redis-v2-revert".into());
    b
}

fn upgrading(b: ResourceBinding) -> ResourceBinding {
    with_condition(b, "Unknown", UPGRADE_IN_PROGRESS, AT, None)
}

fn windowed(mut g: RolloutGroup) -> RolloutGroup {
    g.resource_upgrade_windows = Some(vec![UpgradeWindow {
        kind: WindowKind::Allow,
        schedule: "0 22 * * 6".into(),
        duration: "4h".into(),
        time_zone: None,
    }]);
    g.soak_duration = Some("1h".into());
    g.require_approval = Some(true);
    g.max_concurrent = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(2));
    g.health_check = Some(HealthCheck { timeout: "10m".into() });
    g.on_failure = Some(crate::api::OnFailure::Revert);
    g
}

/// The reverted run: groups dev (a, b, c, f, h) then prod (d, e, a again: overlapping), v1 →
/// v2 (f was floating), and what became of each binding.
fn fixture() -> (Frozen, UpgradeRunStatus, HashMap<String, ResourceBinding>) {
    let snapshot = Snapshot {
        groups: vec![
            SnapshotGroup {
                name: "dev".into(),
                resources: vec![
                    resource("a", "v1", "v1"),
                    resource("b", "v1", "v1"),
                    resource("c", "v1", "v1"),
                    resource("f", "v1.1", "latest"),
                    resource("h", "v1", "v1"),
                    resource("g", "v1", "v1"),
                ],
            },
            SnapshotGroup {
                name: "prod".into(),
                resources: vec![
                    resource("d", "v1", "v1"),
                    resource("e", "v1", "v1"),
                    resource("a", "v1", "v1"),
                ],
            },
        ],
    };
    let mut spec = plan(
        &["v1", "/v1\\..*/"],
        "v2",
        vec![windowed(group("dev", &[])), group("prod", &[])],
    );
    spec.upgrade_execution_policy = Some(crate::api::UpgradeExecutionPolicy {
        repeat_schedule: Some("0 22 * * 6".into()),
        ..Default::default()
    });
    let frozen = Frozen::new(snapshot, spec).unwrap();
    let status = UpgradeRunStatus {
        rollout_groups: vec![GroupStatus {
            name: "dev".into(),
            failed_resources: vec![ResourceFailure {
                namespace: "ns".into(),
                name: "h".into(),
                at: utc(AT),
                detail: "health check reported degraded".into(),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    let failed = with_condition(
        binding("ns", "b", &[], "v1", "v2"),
        "False",
        UPGRADE_FAILED,
        AT,
        Some("v2"),
    );
    let live = [
        ("a", by(binding("ns", "a", &[], "v2", "v2"), RUN)), // upgraded
        ("b", by(failed, RUN)),                              // Kratix failed it
        ("c", by(binding("ns", "c", &[], "v2", "v3"), RUN)), // moved on by someone since
        ("d", by(binding("ns", "d", &[], "v2", "v2"), "redis-v2-again")), // another run's
        ("e", binding("ns", "e", &[], "v1", "v1")),          // never started
        ("f", by(binding("ns", "f", &[], "v2", "v2"), RUN)), // was floating
        ("h", by(binding("ns", "h", &[], "v2", "v2"), RUN)), // counted Failed by its health check
        ("g", by(upgrading(binding("ns", "g", &[], "v1", "v2")), RUN)), // Kratix still upgrading it
    ];
    let live = live.into_iter().map(|(n, b)| (format!("{n}-binding"), b)).collect();
    (frozen, status, live)
}

fn names(s: &Snapshot) -> Vec<(String, Vec<String>)> {
    s.groups
        .iter()
        .map(|g| {
            let rs = g
                .resources
                .iter()
                .map(|r| format!("{}→{}", r.name, r.target.as_deref().unwrap_or("?")))
                .collect();
            (g.name.clone(), rs)
        })
        .collect()
}

#[test]
fn which_resources_a_revert_takes_table() {
    let (frozen, status, live) = fixture();
    let reverted = Reverted {
        name: RUN,
        frozen: &frozen,
        status: &status,
    };
    let lookup = |_: &str, b: &str| live.get(b).map(|b| b as &dyn BindingFacts);
    let g = |name: &str, rs: &[&str]| (name.to_string(), rs.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    let cases = [
        (
            RevertResources::Upgraded,
            vec![g("prod", &[]), g("dev", &["a→v1", "f→v1.1", "g→v1"])],
        ),
        (
            RevertResources::Failed,
            vec![g("prod", &[]), g("dev", &["b→v1", "h→v1"])],
        ),
        (
            RevertResources::All,
            vec![g("prod", &[]), g("dev", &["a→v1", "b→v1", "f→v1.1", "h→v1", "g→v1"])],
        ),
    ];
    for (resources, want) in cases {
        let s = revert_snapshot(&reverted, resources, lookup);
        assert_eq!(names(&s), want, "{resources:?}");
    }
    // What it records of each: its live versions, so that drift is judged from them.
    let s = revert_snapshot(&reverted, RevertResources::All, lookup);
    let b = &s.groups[1].resources[1];
    assert_eq!((b.last_applied_version.as_str(), b.spec_version.as_str()), ("v1", "v2"));
    let f = &s.groups[1].resources[2];
    assert_eq!((f.last_applied_version.as_str(), f.spec_version.as_str()), ("v2", "v2"));
}

#[test]
fn what_the_reverted_run_did_to_a_resource_table() {
    let (frozen, mut status, _) = fixture();
    // A deadline the run counted while Kratix still worked on it.
    status.rollout_groups[0].failed_resources.push(ResourceFailure {
        namespace: "ns".into(),
        name: "a".into(),
        at: utc(AT),
        detail: "did not finish within 10m".into(),
    });
    let reverted = Reverted {
        name: RUN,
        frozen: &frozen,
        status: &status,
    };
    let fresh = resource("e", "v1", "v1");
    let counted = resource("a", "v1", "v1");
    let kratix_failed = with_condition(
        binding("ns", "e", &[], "v1", "v2"),
        "False",
        UPGRADE_FAILED,
        AT,
        Some("v2"),
    );
    let failed_elsewhere = with_condition(
        binding("ns", "e", &[], "v1", "v2"),
        "False",
        UPGRADE_FAILED,
        AT,
        Some("v3"),
    );
    let mut deleting = by(binding("ns", "e", &[], "v2", "v2"), RUN);
    deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        crate::time::to_jiff(utc(AT)),
    ));
    type Case<'c> = (
        &'c str,
        &'c Arc<SnapshotResource>,
        Option<ResourceBinding>,
        Option<Done>,
    );
    let cases: Vec<Case<'_>> = vec![
        ("gone", &fresh, None, None),
        ("being deleted", &fresh, Some(deleting), None),
        (
            "upgraded",
            &fresh,
            Some(by(binding("ns", "e", &[], "v2", "v2"), RUN)),
            Some(Done::Upgraded),
        ),
        (
            "upgraded by no run",
            &fresh,
            Some(binding("ns", "e", &[], "v2", "v2")),
            None,
        ),
        (
            "upgraded by another run",
            &fresh,
            Some(by(binding("ns", "e", &[], "v2", "v2"), "other")),
            None,
        ),
        (
            "moved on since",
            &fresh,
            Some(by(binding("ns", "e", &[], "v2", "v3"), RUN)),
            None,
        ),
        (
            "Kratix upgrading it",
            &fresh,
            Some(by(upgrading(binding("ns", "e", &[], "v1", "v2")), RUN)),
            Some(Done::Upgrading),
        ),
        (
            "started, Kratix not there yet",
            &fresh,
            Some(by(binding("ns", "e", &[], "v1", "v2"), RUN)),
            Some(Done::Upgrading),
        ),
        (
            "Kratix failed it",
            &fresh,
            Some(by(kratix_failed, RUN)),
            Some(Done::Failed),
        ),
        (
            "an older failure of another version",
            &fresh,
            Some(by(failed_elsewhere, RUN)),
            Some(Done::Upgrading),
        ),
        (
            "counted Failed, upgraded since",
            &counted,
            Some(by(binding("ns", "a", &[], "v2", "v2"), RUN)),
            Some(Done::Failed),
        ),
        (
            "counted Failed by a deadline, Kratix still at it: its verdict is to come",
            &counted,
            Some(by(upgrading(binding("ns", "a", &[], "v1", "v2")), RUN)),
            Some(Done::Upgrading),
        ),
    ];
    for (name, r, live, want) in cases {
        assert_eq!(done_to(r, live.as_ref().map(|b| b as _), &reverted), want, "{name}");
    }
    let wanted =
        |d: Done| [RevertResources::Upgraded, RevertResources::Failed, RevertResources::All].map(|r| d.wanted(r));
    assert_eq!(wanted(Done::Upgraded), [true, false, true]);
    assert_eq!(wanted(Done::Upgrading), [true, false, true]);
    assert_eq!(wanted(Done::Failed), [false, true, true]);
}

#[test]
fn the_revert_plan_reverses_groups_and_keeps_policy_only_when_asked() {
    let (frozen, status, live) = fixture();
    let reverted = Reverted {
        name: RUN,
        frozen: &frozen,
        status: &status,
    };
    let lookup = |_: &str, b: &str| live.get(b).map(|b| b as &dyn BindingFacts);
    let f = revert_frozen(&reverted, RevertResources::All, false, lookup).unwrap();
    let groups: Vec<&str> = f.plan.rollout_groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(groups, ["prod", "dev"]);
    assert_eq!(f.plan.upgrade_path.from, ["v2"]);
    assert_eq!(f.plan.upgrade_path.to, "v1, v1.1", "every target, each once");
    assert!(f.plan.upgrade_execution_policy.is_none(), "a revert is never scheduled");
    let dev = &f.plan.rollout_groups[1];
    // Kept: limits, budgets, deadlines, health checks. Dropped: windows, soak, approval, and
    // onFailure (a revert is never reverted by itself).
    assert!(dev.max_concurrent.is_some() && dev.health_check.is_some());
    assert!(dev.resource_upgrade_windows.is_none() && dev.soak_duration.is_none() && dev.require_approval.is_none());
    assert!(dev.on_failure.is_none());
    assert!(!f.compiled.groups[1].requires_approval && f.compiled.groups[1].soak.is_none());

    let kept = revert_frozen(&reverted, RevertResources::All, true, lookup).unwrap();
    let dev = &kept.plan.rollout_groups[1];
    assert!(
        dev.resource_upgrade_windows.is_some() && dev.soak_duration.is_some() && dev.require_approval == Some(true)
    );
    assert!(dev.on_failure.is_none());

    // Nothing to revert: still a plan that compiles, naming no version.
    let none = revert_frozen(&reverted, RevertResources::Failed, false, |_: &str, _: &str| None).unwrap();
    assert_eq!(none.plan.upgrade_path.to, NO_TARGET);
    assert_eq!(none.snapshot.groups.iter().map(|g| g.resources.len()).sum::<usize>(), 0);
}

#[test]
fn a_reverted_resource_is_judged_against_its_own_target_table() {
    // The revert's snapshot entries: an upgraded one (at v2, back to v1) and a failed one
    // (applied v1 still, spec at the failed v2).
    let upgraded = SnapshotResource {
        target: Some("v1".into()),
        ..SnapshotResource::from_binding(&binding("ns", "a", &[], "v2", "v2"))
    };
    let failed = SnapshotResource {
        target: Some("v1".into()),
        ..SnapshotResource::from_binding(&binding("ns", "b", &[], "v1", "v2"))
    };
    // One Kratix was still upgrading when the revert took its snapshot: applied v1, spec v2.
    let upgrading_one = SnapshotResource {
        target: Some("v1".into()),
        ..SnapshotResource::from_binding(&binding("ns", "g", &[], "v1", "v2"))
    };
    let created = utc(AT);
    let later = "2026-06-01T11:00:00Z";
    let old_failure = |b| with_condition(b, "False", UPGRADE_FAILED, "2026-06-01T09:00:00Z", Some("v2"));
    let cases: Vec<(&str, &SnapshotResource, ResourceBinding, Outcome)> = vec![
        (
            "upgraded, not patched yet",
            &upgraded,
            binding("ns", "a", &[], "v2", "v2"),
            Outcome::NotStarted,
        ),
        (
            "upgraded, patched",
            &upgraded,
            binding("ns", "a", &[], "v2", "v1"),
            Outcome::InFlight,
        ),
        (
            "upgraded, reverted",
            &upgraded,
            with_condition(
                binding("ns", "a", &[], "v1", "v1"),
                "True",
                "UpgradeComplete",
                later,
                None,
            ),
            Outcome::Succeeded,
        ),
        (
            "failed, not patched yet: applied at its target is not enough",
            &failed,
            old_failure(binding("ns", "b", &[], "v1", "v2")),
            Outcome::NotStarted,
        ),
        (
            "failed, patched, Kratix not there yet",
            &failed,
            patched(old_failure(binding("ns", "b", &[], "v1", "v1"))),
            Outcome::InFlight,
        ),
        (
            "failed, Kratix running the old version again",
            &failed,
            patched(with_condition(
                binding("ns", "b", &[], "v1", "v1"),
                "Unknown",
                UPGRADE_IN_PROGRESS,
                later,
                None,
            )),
            Outcome::InFlight,
        ),
        (
            "failed, set to v1 by someone else (or its request made again): no re-run is the revert's",
            &failed,
            binding("ns", "b", &[], "v1", "v1"),
            Outcome::Skipped(SkipReason::ChangedByOthers {
                spec_version: "v1".into(),
                last_applied_version: "v1".into(),
            }),
        ),
        (
            "failed, reverted: Kratix ran v1 again after the revert started it",
            &failed,
            started_at(
                with_condition(
                    binding("ns", "b", &[], "v1", "v1"),
                    "True",
                    "UpgradeComplete",
                    later,
                    None,
                ),
                "2026-06-01T10:30:00Z",
            ),
            Outcome::Succeeded,
        ),
        (
            "failed, patched: an older success of v1 is not this revert's",
            &failed,
            asked(started_at(
                with_condition(
                    binding("ns", "b", &[], "v1", "v1"),
                    "True",
                    "UpgradeComplete",
                    "2026-06-01T08:00:00Z",
                    None,
                ),
                "2026-06-01T10:30:00Z",
            )),
            Outcome::InFlight,
        ),
        (
            "failed, patched, no condition yet: Kratix has not run it again",
            &failed,
            asked(started_at(binding("ns", "b", &[], "v1", "v1"), "2026-06-01T10:30:00Z")),
            Outcome::InFlight,
        ),
        (
            "a success of the start's own second, the revert's request not taken yet: older than it",
            &failed,
            asked(started_at(
                with_condition(
                    binding("ns", "b", &[], "v1", "v1"),
                    "True",
                    "UpgradeComplete",
                    "2026-06-01T10:30:00Z",
                    None,
                ),
                "2026-06-01T10:30:00Z",
            )),
            Outcome::InFlight,
        ),
        (
            "the revert itself failed",
            &upgraded,
            with_condition(
                binding("ns", "a", &[], "v2", "v1"),
                "False",
                UPGRADE_FAILED,
                later,
                Some("v1"),
            ),
            Outcome::Failed {
                message: "workflow failed: simulated".into(),
            },
        ),
        (
            "overtaken mid-upgrade: Kratix lands at the version reverted from first",
            &upgrading_one,
            patched(with_condition(
                binding("ns", "g", &[], "v2", "v1"),
                "True",
                "UpgradeComplete",
                later,
                None,
            )),
            Outcome::InFlight,
        ),
        (
            "overtaken mid-upgrade, then reverted",
            &upgrading_one,
            started_at(
                with_condition(
                    binding("ns", "g", &[], "v1", "v1"),
                    "True",
                    "UpgradeComplete",
                    later,
                    None,
                ),
                "2026-06-01T10:30:00Z",
            ),
            Outcome::Succeeded,
        ),
        (
            "moved on by someone since the revert's snapshot",
            &upgraded,
            binding("ns", "a", &[], "v2", "v3"),
            Outcome::Skipped(SkipReason::ChangedByOthers {
                spec_version: "v3".into(),
                last_applied_version: "v2".into(),
            }),
        ),
    ];
    for (name, r, b, want) in cases {
        let got = evaluate_resource(r, Some(&b), r.target("v1, v1.1"), "redis-v2-revert", created);
        assert_eq!(got, want, "{name}");
    }
}

/// A resource moved back in place is recorded a success (it stands whatever the binding does
/// later) only once the pass counts it Succeeded: in a group with a health check, not while it
/// waits for its records (seed 9130712339385055734: the record stood unverified after the
/// binding went with its revision).
#[test]
fn a_resource_reverted_in_place_is_recorded_only_once_counted_succeeded() {
    let failed = Arc::new(SnapshotResource {
        target: Some("v1".into()),
        ..SnapshotResource::from_binding(&binding("ns", "b", &[], "v1", "v2"))
    });
    let reverted = started_at(
        with_condition(
            binding("ns", "b", &[], "v1", "v1"),
            "True",
            "UpgradeComplete",
            "2026-06-01T11:00:00Z",
            None,
        ),
        "2026-06-01T10:30:00Z",
    );
    let run = crate::engine::run::JudgedFor {
        to: "v1",
        name: "redis-v2-revert",
        admitted: utc(AT),
        snapshot_taken: utc(AT),
        reverting: Some(RUN),
    };
    let live: [Option<&dyn crate::api::kratix::BindingFacts>; 1] = [Some(&reverted)];
    let record = |outcome: Outcome| {
        crate::engine::run::record_reapplied(None, std::slice::from_ref(&failed), &live, &[outcome], &run).len()
    };
    assert_eq!(record(Outcome::Succeeded), 1, "counted Succeeded: recorded");
    assert_eq!(
        record(Outcome::Verifying {
            until: utc("2026-06-01T11:10:00Z")
        }),
        0,
        "waiting for its health records: not yet"
    );
}

#[test]
fn what_became_of_the_reverted_runs_resources_is_tallied_once_each() {
    let (frozen, status, live) = fixture();
    let reverted = Reverted {
        name: RUN,
        frozen: &frozen,
        status: &status,
    };
    let lookup = |_: &str, b: &str| live.get(b).map(|b| b as &dyn BindingFacts);
    let t = Tally::of(&reverted, lookup);
    assert_eq!(
        t,
        Tally {
            upgraded: 2,          // a (in both groups: once), f
            upgrading: 1,         // g
            failed: 2,            // b by Kratix, h by its health check
            not_started_by_it: 2, // d another run's, e never started
            moved_since: 1,       // c
            gone: 0,
        }
    );
    assert_eq!(
        [RevertResources::Upgraded, RevertResources::Failed, RevertResources::All].map(|r| t.wanted(r)),
        [3, 2, 5]
    );
    // Agrees with the snapshot a revert takes.
    for r in [RevertResources::Upgraded, RevertResources::Failed, RevertResources::All] {
        let taken: usize = revert_snapshot(&reverted, r, lookup)
            .groups
            .iter()
            .map(|g| g.resources.len())
            .sum();
        assert_eq!(taken, t.wanted(r), "{r:?}");
    }
    let gone = Tally::of(&reverted, |_: &str, _: &str| None);
    assert_eq!(gone.gone, 8);
}

#[test]
fn freezes_hold_a_revert_only_when_it_respects_policy_table() {
    let of = Some(RevertOf {
        name: "r".into(),
        resources: RevertResources::Upgraded,
    });
    let freezes = ["eoy", "launch"];
    let spec = |revert_of: Option<RevertOf>, respect_policy| UpgradeRunSpec {
        revert_of,
        respect_policy,
        ..Default::default()
    };
    let cases = [
        ("a run", spec(None, false), &freezes[..]),
        ("a revert", spec(of.clone(), false), &[][..]),
        ("a revert that respects policy", spec(of, true), &freezes[..]),
    ];
    for (name, s, want) in cases {
        assert_eq!(freezes_holding(&s, &freezes), want, "{name}");
    }
}
