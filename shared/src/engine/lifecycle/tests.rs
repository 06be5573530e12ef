//! Transition tables of the run's lifecycle (spec §5), each pass applied as the controller would,
//! with replays after partial applies (crash points).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::api::kratix::{BindingFacts, CachedBinding, HealthRecord, Interner, ResourceBinding};

fn cached(b: &ResourceBinding) -> Arc<dyn BindingFacts> {
    Arc::new(CachedBinding::new(b, &mut Interner::default()))
}
use crate::api::{
    LastRun, RunResult, UpgradePlanRef, UpgradePlanSpec, UpgradePlanStatus, UpgradeRunSpec, ADMITTED_AT_ANNOTATION,
    PREVIEW_ANNOTATION, SUPERSEDED_BY_ANNOTATION,
};
use crate::engine::snapshot::tests::{binding, match_all, plan as plan_spec};

fn utc(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const T0: &str = "2026-06-01T10:00:00Z";

fn t(minutes: i64) -> DateTime<Utc> {
    utc(T0) + Duration::minutes(minutes)
}

/// The caches: bindings of Promise `redis` and which revisions exist.
#[derive(Clone)]
struct World {
    bindings: Vec<Arc<ResourceBinding>>,
    revisions: Vec<String>,
    /// Revisions (of `revisions`) being deleted.
    deleting: Vec<String>,
    /// Snapshot ConfigMaps written so far, by run: (name, data).
    written: BTreeMap<String, Vec<SnapshotConfigMap>>,
    frozen_plans: BTreeMap<String, UpgradePlanSpec>,
    health: Vec<Arc<HealthRecord>>,
    gates: Vec<GateReading>,
    approvals: Vec<ApprovalFact>,
    freezes: Vec<Arc<crate::api::UpgradeFreeze>>,
}

impl Cluster for World {
    // As the controller's cache holds them: compacted.
    fn binding(&self, namespace: &str, name: &str) -> Option<Arc<dyn BindingFacts>> {
        self.bindings
            .iter()
            .find(|b| b.metadata.namespace.as_deref() == Some(namespace) && b.metadata.name.as_deref() == Some(name))
            .map(|b| cached(b))
    }
    fn bindings_of(&self, promise: &str) -> Vec<Arc<dyn BindingFacts>> {
        self.bindings
            .iter()
            .filter(|b| b.promise() == promise)
            .map(|b| cached(b))
            .collect()
    }
    fn revisions_of(&self, promise: &str) -> Vec<RevisionFact> {
        let revisions = self.revisions.iter().filter(|_| promise == "redis");
        revisions
            .map(|v| RevisionFact {
                version: v.clone(),
                name: format!("redis-{v}"),
                deleting: self.deleting.contains(v),
            })
            .collect()
    }
    fn health_records(&self, promise: &str) -> Vec<Arc<HealthRecord>> {
        self.health
            .iter()
            .filter(|r| r.data.promise_ref.name == promise)
            .cloned()
            .collect()
    }
    fn freezes(&self) -> Vec<Arc<crate::api::UpgradeFreeze>> {
        self.freezes.clone()
    }
}

impl World {
    fn with(n: usize) -> World {
        World {
            bindings: (0..n)
                .map(|i| Arc::new(binding("ns", &format!("r{i}"), &[], "v1", "v1")))
                .collect(),
            revisions: vec!["v1".into(), "v2".into()],
            deleting: Vec::new(),
            written: BTreeMap::new(),
            frozen_plans: BTreeMap::new(),
            health: Vec::new(),
            gates: Vec::new(),
            approvals: Vec::new(),
            freezes: Vec::new(),
        }
    }

    /// What the controller gathers about `run`'s snapshot.
    fn snapshot_of(&self, run: &UpgradeRun) -> SnapshotFact {
        let name = run.metadata.name.clone().unwrap();
        let recorded = run
            .status
            .as_ref()
            .map(|s| s.resource_list_refs.clone())
            .unwrap_or_default();
        match self.written.get(&name) {
            Some(shards) => {
                let frozen = crate::engine::snapshot::read_frozen(shards.iter().map(|(n, d)| (n.as_str(), d))).unwrap();
                assert_eq!(
                    frozen.plan, self.frozen_plans[&name],
                    "the first shard carries the frozen plan"
                );
                SnapshotFact::Found {
                    frozen: Arc::new(frozen),
                    refs: shards
                        .iter()
                        .map(|(n, d)| ResourceListRef {
                            name: n.clone(),
                            sha256: Some(crate::engine::snapshot::digest(d)),
                        })
                        .collect(),
                }
            }
            None if recorded.is_empty() => SnapshotFact::Absent,
            None => SnapshotFact::Lost {
                config_map: recorded[0].name.clone(),
            },
        }
    }

    /// Kratix fails the upgrade of binding `i` to v2 at `at`.
    fn kratix_fails(&mut self, i: usize, at: DateTime<Utc>) {
        let b = Arc::make_mut(&mut self.bindings[i]);
        let st = b.status.get_or_insert_with(Default::default);
        st.failed_version = Some("v2".into());
        st.conditions = vec![crate::api::kratix::BindingCondition {
            type_: crate::api::kratix::UPGRADE_SUCCEEDED.into(),
            status: "False".into(),
            reason: crate::api::kratix::UPGRADE_FAILED.into(),
            message: "boom".into(),
            last_transition_time: Some(at),
        }];
    }

    /// Kratix applies every binding whose spec moved.
    fn kratix_applies(&mut self) {
        for b in &mut self.bindings {
            let b = Arc::make_mut(b);
            let spec = b.spec.version.clone();
            b.status.get_or_insert_with(Default::default).last_applied_version = spec;
        }
    }
}

fn the_plan(spec: UpgradePlanSpec) -> UpgradePlan {
    let mut p = UpgradePlan::new("p", spec);
    p.metadata.uid = Some("plan-uid".into());
    p
}

fn valid_plan(limit: i32) -> UpgradePlan {
    let mut g = match_all("all");
    g.max_concurrent = Some(IntOrString::Int(limit));
    the_plan(plan_spec(&["v1"], "v2", vec![g]))
}

/// One matchAll group, no concurrency limit, `max_failures` failures allowed.
fn plan_with_failure_budget(max_failures: i32) -> UpgradePlan {
    let mut g = match_all("all");
    g.max_failures = Some(IntOrString::Int(max_failures));
    the_plan(plan_spec(&["v1"], "v2", vec![g]))
}

fn a_run(name: &str, created: DateTime<Utc>, suspend: bool) -> UpgradeRun {
    let mut r = UpgradeRun::new(
        name,
        UpgradeRunSpec {
            upgrade_plan_ref: UpgradePlanRef { name: "p".into() },
            suspend,
            cancel: false,
            ..Default::default()
        },
    );
    r.metadata.uid = Some(format!("{name}-uid"));
    r.metadata.creation_timestamp = Some(Time(crate::time::to_jiff(created)));
    r
}

/// A run admitted as its plan's active run (state `Pending`), created at `created`.
fn a_pending_run(name: &str, created: DateTime<Utc>) -> UpgradeRun {
    let mut run = a_run(name, created, false);
    run.status = Some(UpgradeRunStatus {
        state: RunState::Pending,
        ..Default::default()
    });
    run
}

/// Applies a step as the controller does: metadata, snapshot, binding patches, status.
fn apply(run: &mut UpgradeRun, step: &Step, world: &mut World) {
    assert_eq!(
        Some(&step.own.run),
        run.metadata.name.as_ref(),
        "a run's own patch is of itself"
    );
    step.own.apply(run).expect("the run as the step read it");
    apply_snapshot(run, step, world);
    apply_patches(step, world);
    run.status = Some(step.status.clone());
}

fn apply_snapshot(run: &UpgradeRun, step: &Step, world: &mut World) {
    if !step.write_snapshot.is_empty() {
        let name = run.metadata.name.clone().unwrap();
        world.written.insert(name.clone(), step.write_snapshot.clone());
        world
            .frozen_plans
            .insert(name, step.frozen.as_ref().unwrap().plan.clone());
    }
}

fn apply_patches(step: &Step, world: &mut World) {
    for patch in &step.binding_patches {
        for b in &mut world.bindings {
            if b.metadata.name.as_deref() == Some(&patch.resource.binding) {
                patch.apply(Arc::make_mut(b)).expect("the binding as the step saw it");
            }
        }
    }
}

/// Supersede requests as the controller sends them to the older runs.
fn apply_supersede(step: &Step, runs: &mut [&mut UpgradeRun]) {
    for patch in &step.supersede {
        for run in runs.iter_mut().filter(|r| r.metadata.name.as_ref() == Some(&patch.run)) {
            patch.apply(run).expect("a supersede request has no precondition");
        }
    }
}

fn facts<'a>(
    plan: Option<&'a UpgradePlan>,
    others: &'a [RunFacts],
    world: &'a World,
    run: &UpgradeRun,
    now: DateTime<Utc>,
) -> Facts<'a> {
    Facts {
        missing_kinds: &[],
        selector: None,
        plan,
        others,
        snapshot: world.snapshot_of(run),
        gates: &world.gates,
        approvals: &world.approvals,
        reverted: Default::default(),
        budgets: &[],
        now,
    }
}

fn pass(run: &UpgradeRun, plan: Option<&UpgradePlan>, others: &[RunFacts], world: &World, now: DateTime<Utc>) -> Step {
    step(run, &facts(plan, others, world, run, now), world)
}

fn condition<'s>(step: &'s Step, type_: &str) -> (&'s str, ConditionStatus) {
    let c = find_condition(&step.status.conditions, type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.reason.as_str(), c.status)
}

fn reasons_announced(step: &Step) -> Vec<&'static str> {
    step.announce.iter().map(|a| a.reason).collect()
}

fn started(step: &Step) -> usize {
    step.evaluation.as_ref().map_or(0, |e| e.start.len())
}

#[test]
fn a_run_without_its_plan_waits_unresolved() {
    let world = World::with(1);
    let run = a_run("r", t(0), false);
    let s = pass(&run, None, &[], &world, t(1));
    assert_eq!(s.status.state, RunState::Unresolved);
    assert_eq!(
        condition(&s, reasons::PLAN_RESOLVED),
        (reasons::PLAN_NOT_FOUND, ConditionStatus::False)
    );
    assert!(s.announce.is_empty() && s.write_snapshot.is_empty() && s.own.is_empty() && s.finished.is_none());
}

#[test]
fn a_run_goes_from_admission_through_its_snapshot_to_completion() {
    let mut world = World::with(3);
    let plan = valid_plan(2);
    let mut run = a_run("r", t(0), false);

    // Admission, revision gate open, snapshot, first starts: one pass.
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::InProgress);
    assert_eq!(
        condition(&s, reasons::PLAN_RESOLVED),
        (reasons::PLAN_FOUND, ConditionStatus::True)
    );
    assert_eq!(
        condition(&s, reasons::TARGET_REVISION_READY),
        (reasons::PROMISE_REVISION_READY, ConditionStatus::True)
    );
    assert_eq!(
        condition(&s, reasons::SUSPENDED),
        ("NotSuspended", ConditionStatus::False)
    );
    assert_eq!(s.own.labels.get(PLAN_LABEL).map(String::as_str), Some("p"));
    assert!(s.own.owner_references.is_some());
    assert_eq!(s.write_snapshot.len(), 1);
    assert_eq!(s.write_snapshot[0].0, "r-resource-snapshot");
    assert_eq!(
        s.status.resource_list_refs,
        vec![ResourceListRef {
            name: "r-resource-snapshot".into(),
            sha256: Some(crate::engine::snapshot::digest(&s.write_snapshot[0].1)),
        }],
        "the digest of what is written"
    );
    assert_eq!((s.status.total_resources, s.status.started_at), (3, Some(t(1))));
    assert_eq!(started(&s), 2, "maxConcurrent 2");
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked.is_empty()));
    apply(&mut run, &s, &mut world);

    // In flight at the limit: nothing more starts; the third waits on the limit.
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(started(&s), 0);
    assert!(s.write_snapshot.is_empty(), "a snapshot is taken once");
    assert!(s.own.is_empty(), "metadata already carried");
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked == vec![("all".into(), "ConcurrencyLimit")]));
    assert_eq!(s.status.started_at, Some(t(1)), "startedAt stays");
    apply(&mut run, &s, &mut world);

    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!((started(&s), s.status.completed_resources), (1, 2));
    assert!(reasons_announced(&s).contains(&events::GROUP_IN_PROGRESS));
    apply(&mut run, &s, &mut world);

    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(4));
    assert_eq!(s.status.state, RunState::Completed);
    assert_eq!(s.finished, Some(RunState::Completed));
    assert_eq!(s.status.finished_at, Some(t(4)));
    assert_eq!(
        condition(&s, reasons::RUN_SUCCEEDED),
        (reasons::RUN_COMPLETED, ConditionStatus::True)
    );
    let terminal: Vec<_> = s
        .announce
        .iter()
        .filter(|a| a.reason == "UpgradeRunCompleted")
        .collect();
    assert_eq!(terminal.len(), 1);
    assert_eq!(terminal[0].note, "3/3 resources upgraded to v2");
    assert_eq!(s.gauges, Gauges::Clear);
    apply(&mut run, &s, &mut world);

    // Terminal: never acted on again.
    let s = pass(&run, Some(&plan), &[], &world, t(5));
    assert!(s.announce.is_empty() && s.finished.is_none() && s.evaluation.is_none() && s.release.is_none());
    assert_eq!(Some(&s.status), run.status.as_ref());
}

#[test]
fn the_pending_table() {
    let plan = valid_plan(1);
    let mut invalid = valid_plan(1);
    invalid.spec.upgrade_path.to = "latest".into();
    let mut world_no_revision = World::with(2);
    world_no_revision.revisions = vec!["v1".into()];
    let world = World::with(2);

    // Invalid plan: Pending, PlanInvalid condition and one event; a replay does not repeat it.
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&invalid), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::Pending);
    assert_eq!(
        condition(&s, reasons::PLAN_RESOLVED),
        (reasons::PLAN_INVALID, ConditionStatus::False)
    );
    assert_eq!(reasons_announced(&s), vec![events::PLAN_INVALID]);
    assert!(s.announce[0]
        .note
        .starts_with("UpgradePlan \"p\" is invalid: spec.upgradePath.to"));
    assert!(s.write_snapshot.is_empty() && s.evaluation.is_none());
    run.status = Some(s.status.clone());
    let again = pass(&run, Some(&invalid), &[], &world, t(2));
    assert!(again.announce.is_empty(), "announced once");
    let c = |s: &Step| {
        find_condition(&s.status.conditions, reasons::PLAN_RESOLVED)
            .unwrap()
            .last_transition_time
    };
    assert_eq!(c(&again), t(1), "the transition time holds while nothing changes");
    // A different problem is announced too (issue 36 D13: it never was), keyed by itself.
    let mut other = valid_plan(1);
    other.spec.upgrade_path.from = vec![];
    let s = pass(&run, Some(&other), &[], &world, t(2));
    assert_eq!(reasons_announced(&s), vec![events::PLAN_INVALID]);
    assert_eq!(s.announce[0].key, s.announce[0].note);
    assert!(
        s.announce[0].note.contains("spec.upgradePath.from"),
        "{}",
        s.announce[0].note
    );
    let mut run2 = run.clone();
    run2.status = Some(s.status.clone());
    assert!(pass(&run2, Some(&other), &[], &world, t(3)).announce.is_empty(), "once");
    // Once valid, the same run proceeds.
    let fixed = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!(fixed.status.state, RunState::InProgress);
    assert_eq!(c(&fixed), t(3));

    // Revision gate: waits, not a failure; gauges say why.
    let run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world_no_revision, t(1));
    assert_eq!(s.status.state, RunState::Pending);
    assert_eq!(
        condition(&s, reasons::TARGET_REVISION_READY),
        (reasons::PROMISE_REVISION_NOT_FOUND, ConditionStatus::False)
    );
    match &s.gauges {
        Gauges::Set(g) => {
            assert_eq!(g.blocked, vec![("all".to_string(), "RevisionMissing")]);
            assert!(g.resources.contains(&("all".into(), "pending", 2)));
        }
        other => panic!("gauges {other:?}"),
    }
    assert!(s.write_snapshot.is_empty() && s.finished.is_none());
    // A preview at the gate leaves the plan's gauges to its active run.
    let preview = a_run("preview", t(0), true);
    let s = pass(&preview, Some(&plan), &[], &world_no_revision, t(1));
    assert_eq!(s.gauges, Gauges::Keep);
}

/// Spec §5.7: a target PromiseRevision being deleted is no target — a run waits before its
/// snapshot and fails after it, saying why; Kratix deletes every resource at that version.
#[test]
fn a_target_revision_being_deleted_holds_a_new_run_and_fails_one_under_way() {
    let plan = valid_plan(5);
    let mut deleting = World::with(2);
    deleting.deleting = vec!["v2".into()];
    let run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &deleting, t(1));
    assert_eq!(s.status.state, RunState::Pending, "waits: no snapshot is taken");
    assert!(s.write_snapshot.is_empty());
    let c = find_condition(&s.status.conditions, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str()),
        (ConditionStatus::False, reasons::PROMISE_REVISION_NOT_FOUND)
    );
    assert_eq!(
        c.message,
        "PromiseRevision redis-v2 for promise \"redis\" version \"v2\" is being deleted: Kratix deletes every resource at that version"
    );

    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    apply(&mut run, &s, &mut world);
    world.deleting = vec!["v2".into()];
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(s.status.state, RunState::Failed);
    assert!(s.binding_patches.is_empty(), "no start after the deletion is seen");
    let c = find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(c.reason, reasons::PROMISE_REVISION_NOT_FOUND);
    assert!(
        c.message.contains("redis-v2") && c.message.contains("is being deleted"),
        "{}",
        c.message
    );
}

#[test]
fn every_path_into_failed_announces_upgrade_run_failed_once() {
    let plan = valid_plan(5);
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    apply(&mut run, &s, &mut world);
    let in_progress = run.clone();

    // A resource fails.
    let mut failing = world.clone();
    failing.kratix_fails(0, t(2));
    // The revision vanishes.
    let mut no_revision = world.clone();
    no_revision.revisions = vec!["v1".into()];
    // The snapshot ConfigMap is lost.
    let mut lost = world.clone();
    lost.written.clear();

    let cases: Vec<(&str, &World, &str)> = vec![
        ("a resource failed", &failing, reasons::RESOURCE_UPGRADE_FAILED),
        (
            "the revision vanished",
            &no_revision,
            reasons::PROMISE_REVISION_NOT_FOUND,
        ),
        ("the snapshot is lost", &lost, reasons::SNAPSHOT_MISSING),
    ];
    for (name, w, reason) in cases {
        let s = pass(&in_progress, Some(&plan), &[], w, t(3));
        assert_eq!(s.status.state, RunState::Failed, "{name}");
        assert_eq!(
            condition(&s, reasons::RUN_SUCCEEDED),
            (reason, ConditionStatus::False),
            "{name}"
        );
        let failed: Vec<_> = s.announce.iter().filter(|a| a.reason == "UpgradeRunFailed").collect();
        assert_eq!(failed.len(), 1, "{name}");
        assert!(failed[0].warning, "{name}");
        assert_eq!(
            (s.finished, s.gauges.clone()),
            (Some(RunState::Failed), Gauges::Clear),
            "{name}"
        );
        assert_eq!(started(&s), 0, "{name}: a failed run starts nothing");
        // Replayed (the status write was lost): the same decision and the same announcement,
        // which the controller publishes once; after the write, nothing.
        let replay = pass(&in_progress, Some(&plan), &[], w, t(3));
        assert_eq!(replay.status, s.status, "{name}");
        assert_eq!(replay.announce, s.announce, "{name}");
        let mut done = in_progress.clone();
        done.status = Some(s.status.clone());
        let after = pass(&done, Some(&plan), &[], w, t(4));
        assert!(after.announce.is_empty() && after.finished.is_none(), "{name}");
    }
}

#[test]
fn a_crash_between_any_two_effects_of_the_snapshot_pass_changes_nothing() {
    let plan = valid_plan(2);
    let world = World::with(3);
    let run = a_run("r", t(0), false);
    let full = pass(&run, Some(&plan), &[], &world, t(1));

    type Partial = fn(&mut UpgradeRun, &Step, &mut World);
    let prefixes: Vec<(&str, Partial)> = vec![
        ("nothing applied", |_, _, _| {}),
        ("metadata only", |r, s, _| s.own.apply(r).expect("unchanged")),
        ("metadata and snapshot", |r, s, w| {
            s.own.apply(r).expect("unchanged");
            apply_snapshot(r, s, w);
        }),
        ("everything but the status", |r, s, w| {
            s.own.apply(r).expect("unchanged");
            apply_snapshot(r, s, w);
            apply_patches(s, w);
        }),
    ];
    for (name, partial) in prefixes {
        let (mut r, mut w) = (run.clone(), world.clone());
        partial(&mut r, &full, &mut w);
        let replay = pass(&r, Some(&plan), &[], &w, t(1));
        assert_eq!(replay.status, full.status, "{name}: the same status");
        assert!(
            replay.write_snapshot.is_empty() || !w.written.contains_key("r"),
            "{name}: a written snapshot is never written again"
        );
        if w.written.contains_key("r") {
            assert_eq!(
                replay.frozen, full.frozen,
                "{name}: the snapshot found is the one written"
            );
        }
        let in_flight = w.bindings.iter().filter(|b| b.spec.version == "v2").count();
        assert_eq!(started(&replay) + in_flight, 2, "{name}: never more than maxConcurrent");
    }
    // A snapshot written while bindings changed is still the run's: the replay reads it back.
    let (mut r, mut w) = (run.clone(), world.clone());
    apply_snapshot(&r, &full, &mut w);
    w.bindings.push(Arc::new(binding("ns", "late", &[], "v1", "v1")));
    full.own.apply(&mut r).expect("unchanged");
    let replay = pass(&r, Some(&plan), &[], &w, t(1));
    assert_eq!(replay.status.total_resources, 3, "the snapshot is taken once");
}

#[test]
fn the_newest_run_supersedes_and_the_older_records_it_itself() {
    let plan = valid_plan(1);
    let mut world = World::with(2);
    let mut old = a_run("old", t(0), false);
    let s = pass(&old, Some(&plan), &[], &world, t(1));
    apply(&mut old, &s, &mut world);

    let mut new = a_run("new", t(5), false);
    let s = pass(&new, Some(&plan), &[RunFacts::of(&old)], &world, t(6));
    assert_eq!(s.supersede, vec![RunPatch::supersede("old", "new")]);
    assert!(s.status.superseded_by.is_none());
    apply(&mut new, &s, &mut world);
    apply_supersede(&s, &mut [&mut old]);
    assert_eq!(
        old.status.as_ref().unwrap().superseded_by,
        None,
        "nothing but its own step writes its status"
    );

    // The older run's own pass records what was asked; once.
    let s = pass(&old, Some(&plan), &[RunFacts::of(&new)], &world, t(7));
    assert_eq!(s.status.superseded_by.as_deref(), Some("new"));
    assert_eq!(s.status.state, RunState::InProgress, "it keeps its state");
    assert_eq!(
        condition(&s, reasons::SUSPENDED),
        (reasons::SUPERSEDED, ConditionStatus::True)
    );
    assert_eq!(reasons_announced(&s), vec![events::SUPERSEDED]);
    assert!(s.newly_superseded && started(&s) == 0 && s.gauges == Gauges::Keep);
    old.status = Some(s.status.clone());
    let s = pass(&old, Some(&plan), &[RunFacts::of(&new)], &world, t(8));
    assert!(s.announce.is_empty() && !s.newly_superseded);
    // And no longer contends: the newer run supersedes nothing more.
    let s = pass(&new, Some(&plan), &[RunFacts::of(&old)], &world, t(8));
    assert!(s.supersede.is_empty());

    // Two runs admitted at once, neither superseded yet: the older finds the newer and yields.
    let a = a_run("a", t(10), false);
    let b = a_pending_run("b", t(11));
    let s = pass(&a, Some(&plan), &[RunFacts::of(&b)], &world, t(12));
    assert_eq!(s.status.superseded_by.as_deref(), Some("b"));
    assert!(
        s.own.suspend,
        "a superseded run is suspended (spec 5.2), by itself when no one asked"
    );
    assert!(
        !pass(&old, Some(&plan), &[RunFacts::of(&new)], &world, t(9)).own.suspend,
        "already suspended"
    );
}

#[test]
fn a_preview_supersedes_nothing_until_resumed_then_is_admitted_as_new() {
    let plan = valid_plan(1);
    let mut world = World::with(2);
    let mut preview = a_run("preview", t(0), true);
    // An active run created after the preview.
    let mut active = a_run("active", t(2), false);
    let s = pass(&active, Some(&plan), &[], &world, t(3));
    apply(&mut active, &s, &mut world);

    let s = pass(&preview, Some(&plan), &[RunFacts::of(&active)], &world, t(4));
    assert_eq!(
        s.own.annotations.get(PREVIEW_ANNOTATION).map(String::as_str),
        Some("true")
    );
    assert!(s.supersede.is_empty() && s.status.superseded_by.is_none());
    assert_eq!(s.status.state, RunState::InProgress, "a preview takes its snapshot");
    assert_eq!(started(&s), 0, "and patches nothing");
    assert_eq!(s.gauges, Gauges::Keep);
    assert_eq!(condition(&s, reasons::SUSPENDED).0, reasons::SUSPENDED);
    apply(&mut preview, &s, &mut world);
    assert!(!RunFacts::of(&preview).contends(), "never the plan's active run");

    // Resumed: admitted at that moment, so it is the newest and supersedes the active run.
    preview.spec.suspend = false;
    let s = pass(&preview, Some(&plan), &[RunFacts::of(&active)], &world, t(6));
    assert_eq!(
        s.own.annotations.get(ADMITTED_AT_ANNOTATION).map(String::as_str),
        Some("2026-06-01T10:06:00Z")
    );
    assert_eq!(s.supersede, vec![RunPatch::supersede("active", "preview")]);
    assert!(matches!(s.gauges, Gauges::Set(_)), "it owns the plan's gauges now");
    assert_eq!(started(&s), 0, "the active run still holds the only slot");
    apply(&mut preview, &s, &mut world);
    apply_supersede(&s, &mut [&mut active]);
    assert!(RunFacts::of(&preview).contends());
    assert_eq!(RunFacts::of(&preview).created, t(6));
    // The superseded run, re-checked, agrees.
    let s = pass(&active, Some(&plan), &[RunFacts::of(&preview)], &world, t(7));
    assert_eq!(s.status.superseded_by.as_deref(), Some("preview"));

    // Its end clears the gauges and it is the plan's last run.
    world.kratix_applies();
    let s = pass(&preview, Some(&plan), &[], &world, t(8));
    world.kratix_applies();
    apply(&mut preview, &s, &mut world);
    let s = pass(&preview, Some(&plan), &[], &world, t(9));
    world.kratix_applies();
    apply(&mut preview, &s, &mut world);
    let s = pass(&preview, Some(&plan), &[], &world, t(10));
    assert_eq!(s.status.state, RunState::Completed);
    assert_eq!(s.gauges, Gauges::Clear);
    preview.status = Some(s.status.clone());
    assert_eq!(last_run_of(&preview).map(|l| l.result), Some(RunResult::Completed));
}

#[test]
fn deleting_cancels_and_lets_go_once_the_plan_recorded_it() {
    let mut plan = valid_plan(1);
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    apply(&mut run, &s, &mut world);
    run.metadata.deletion_timestamp = Some(Time(crate::time::to_jiff(t(2))));

    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(s.status.state, RunState::Cancelled);
    assert_eq!(
        condition(&s, reasons::RUN_SUCCEEDED),
        (reasons::RUN_CANCELLED, ConditionStatus::False)
    );
    assert_eq!(reasons_announced(&s), vec!["UpgradeRunCancelled"]);
    assert!(s.release.is_none(), "the plan records the result first");
    assert_eq!(started(&s), 0);
    run.status = Some(s.status.clone());

    let s = pass(&run, Some(&plan), &[], &world, t(2) + Duration::seconds(1));
    assert!(s.release.is_none() && s.wake_at.is_some() && s.announce.is_empty());
    plan.status = Some(UpgradePlanStatus {
        last_run: last_run_of(&run),
        ..Default::default()
    });
    let s = pass(&run, Some(&plan), &[], &world, t(2) + Duration::seconds(2));
    assert!(s.release.is_none(), "and keeps its counts first (spec §14.2)");
    plan.status.as_mut().unwrap().deleted_runs = crate::engine::counters::keep_deleted(None, &[&run]);
    assert!(pass(&run, Some(&plan), &[], &world, t(2) + Duration::seconds(2))
        .release
        .is_some());
    // Without a plan, or past the grace period, it lets go anyway.
    plan.status = None;
    assert!(pass(&run, None, &[], &world, t(3)).release.is_some());
    assert!(pass(&run, Some(&plan), &[], &world, t(2) + RECORD_GRACE)
        .release
        .is_some());
    // A newer result on the plan also counts: this one is not the last run any more.
    plan.status = Some(UpgradePlanStatus {
        last_run: Some(LastRun {
            name: "later".into(),
            finished_at: Some(t(30)),
            result: RunResult::Completed,
            reason: String::new(),
            message: String::new(),
        }),
        deleted_runs: crate::engine::counters::keep_deleted(None, &[&run]),
        ..Default::default()
    });
    assert!(pass(&run, Some(&plan), &[], &world, t(2) + Duration::seconds(3))
        .release
        .is_some());
}

/// Issue 36 D9 (spec §5.2): deleting a dormant run — superseded (by status or by the newer
/// run's request), or a preview never resumed — is a quiet clean-up: it lets go at once, with no
/// Cancelled state, event, counter, duration or gauge change.
#[test]
fn deleting_a_dormant_run_is_a_quiet_clean_up() {
    let plan = valid_plan(1);
    let world = World::with(2);
    let gone = |mut run: UpgradeRun| {
        run.metadata.deletion_timestamp = Some(Time(crate::time::to_jiff(t(4))));
        run
    };
    let mut recorded = a_run("old", t(0), true);
    recorded.status = Some(UpgradeRunStatus {
        state: RunState::InProgress,
        superseded_by: Some("r".into()),
        ..Default::default()
    });
    let mut requested = a_run("asked", t(0), false);
    requested.metadata.annotations = Some([(SUPERSEDED_BY_ANNOTATION.to_string(), "r".to_string())].into());
    requested.status = Some(UpgradeRunStatus {
        state: RunState::InProgress,
        ..Default::default()
    });
    let mut preview = a_run("preview", t(0), true);
    let s = pass(&preview, Some(&plan), &[], &world, t(1));
    let mut w = world.clone();
    apply(&mut preview, &s, &mut w);
    assert!(is_preview(&preview), "a preview, snapshotted, not resumed");
    // A superseded run lets go once its plan keeps what it counted (its supersede, its
    // outcomes); a preview, which counted nothing, at once.
    for (what, run, counted) in [
        ("superseded", recorded, true),
        ("asked to stand down", requested, true),
        ("preview", preview, false),
    ] {
        let before = run.status.clone().unwrap_or_default();
        let run = gone(run);
        let s = pass(&run, Some(&plan), &[], &w, t(4));
        assert_eq!(
            s.release.is_none(),
            counted,
            "{what}: waits for its plan to keep its counts"
        );
        let mut keeping = plan.clone();
        keeping.status = Some(UpgradePlanStatus {
            deleted_runs: crate::engine::counters::keep_deleted(None, &[&run]),
            ..Default::default()
        });
        let s = pass(&run, Some(&keeping), &[], &w, t(4));
        assert!(s.release.is_some(), "{what}: lets go once kept");
        assert_eq!(s.status, before, "{what}: its status is left as it was");
        assert!(
            s.announce.is_empty() && s.finished.is_none(),
            "{what}: nothing announced or counted"
        );
        assert_eq!(s.gauges, Gauges::Keep, "{what}: the plan's gauges are the active run's");
    }
}

#[test]
fn suspending_a_run_holds_new_starts_and_says_why() {
    let plan = valid_plan(5);
    let mut world = World::with(2);
    let mut run = a_pending_run("r", t(0));
    run.spec.suspend = true; // suspended after admission: not a preview
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::InProgress);
    assert_eq!(started(&s), 0);
    assert_eq!(
        condition(&s, reasons::SUSPENDED),
        (reasons::SUSPENDED, ConditionStatus::True)
    );
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked == vec![("all".into(), "Suspended")]));
    apply(&mut run, &s, &mut world);
    run.spec.suspend = false;
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(started(&s), 2);
    assert!(
        !s.own.annotations.contains_key(ADMITTED_AT_ANNOTATION),
        "only a preview is re-admitted"
    );
}

fn a_freeze(
    name: &str,
    start: &str,
    end: &str,
    selector: Option<(&str, &str)>,
    zone: &str,
) -> Arc<crate::api::UpgradeFreeze> {
    use crate::api::{FreezePeriod, PlanSelector, UpgradeFreeze, UpgradeFreezeSpec};
    Arc::new(UpgradeFreeze::new(
        name,
        UpgradeFreezeSpec {
            reason: "end-of-year freeze".into(),
            periods: vec![FreezePeriod {
                start: Some(start.into()),
                end: Some(end.into()),
                time_zone: Some(zone.into()),
                ..Default::default()
            }],
            plan_selector: selector.map(|(k, v)| PlanSelector {
                match_labels: Some([(k.to_string(), v.to_string())].into()),
                match_expressions: None,
            }),
            promises: None,
        },
    ))
}

#[test]
fn a_freeze_holds_the_run_says_which_until_when_and_lets_go_at_its_end() {
    let mut plan = valid_plan(5);
    plan.metadata.labels = Some([("tier".to_string(), "critical".to_string())].into());
    let mut world = World::with(2);
    world.freezes = vec![
        // Another plan's freeze and one that cannot be evaluated hold nothing.
        a_freeze(
            "dev-only",
            "2026-06-01T00:00",
            "2026-06-02T00:00",
            Some(("tier", "dev")),
            "UTC",
        ),
        a_freeze("broken", "2026-06-01T00:00", "2026-06-02T00:00", None, "Mars/Olympus"),
    ];
    let pending = |name: &str| a_pending_run(name, t(0));
    let s = pass(&pending("free"), Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 2);
    assert!(
        find_condition(&s.status.conditions, reasons::FROZEN).is_none(),
        "never frozen: no condition"
    );

    // 11:02 to 11:05 in London (BST) is 10:02Z to 10:05Z.
    world.freezes.push(a_freeze(
        "eoy",
        "2026-06-01T11:02",
        "2026-06-01T11:05",
        Some(("tier", "critical")),
        "Europe/London",
    ));
    let mut run = pending("r");
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!((s.status.state, started(&s)), (RunState::InProgress, 0));
    let frozen = find_condition(&s.status.conditions, reasons::FROZEN).unwrap();
    assert_eq!(
        (frozen.status, frozen.reason.as_str(), frozen.message.as_str()),
        (
            ConditionStatus::True,
            reasons::FREEZE_ACTIVE,
            "UpgradeFreeze \"eoy\" until 2026-06-01T10:05:00Z: end-of-year freeze"
        )
    );
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked == vec![("all".into(), "Frozen")]));
    assert_eq!(s.wake_at, Some(t(5)), "woken exactly at the freeze's end");
    apply(&mut run, &s, &mut world);

    let s = pass(&run, Some(&plan), &[], &world, t(5));
    assert_eq!(started(&s), 2);
    assert_eq!(
        condition(&s, reasons::FROZEN),
        (reasons::NOT_FROZEN, ConditionStatus::False)
    );
}

#[test]
fn a_run_with_nothing_eligible_completes_at_once_as_a_record() {
    let plan = valid_plan(1);
    let mut world = World::with(2);
    for b in &mut world.bindings {
        Arc::make_mut(b)
            .status
            .get_or_insert_with(Default::default)
            .last_applied_version = "v0".into();
    }
    let run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::Completed);
    assert_eq!((s.status.total_resources, s.status.completed_resources), (0, 0));
    assert_eq!(
        s.write_snapshot.len(),
        1,
        "the (empty) snapshot is still written: the record"
    );
    assert_eq!(s.status.started_at, s.status.finished_at);
    assert_eq!(reasons_announced(&s), vec!["UpgradeRunCompleted"]);
    assert_eq!(s.announce[0].note, "0/0 resources upgraded to v2");
}

#[test]
fn a_run_with_failures_within_its_budget_completes_with_a_warning() {
    let mut world = World::with(3);
    let plan = plan_with_failure_budget(1);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 3);
    apply(&mut run, &s, &mut world);
    // r0 fails, the others succeed.
    world.kratix_fails(0, t(2));
    for b in &mut world.bindings[1..] {
        Arc::make_mut(b)
            .status
            .get_or_insert_with(Default::default)
            .last_applied_version = "v2".into();
    }
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!(s.status.state, RunState::Completed);
    let c = find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            reasons::RUN_COMPLETED_WITH_FAILURES,
            "2/3 resources upgraded to v2; 1 failed within the failure budget"
        )
    );
    let terminal: Vec<_> = s
        .announce
        .iter()
        .filter(|a| a.reason == "UpgradeRunCompleted")
        .collect();
    assert_eq!(terminal.len(), 1);
    assert!(terminal[0].warning, "a Warning: something failed");
    assert_eq!(terminal[0].note, c.message);
    // The plan's lastRun copies it.
    run.status = Some(s.status.clone());
    let last = crate::engine::admission::last_run_of(&run).unwrap();
    assert_eq!(
        (last.reason.as_str(), last.message.as_str()),
        (reasons::RUN_COMPLETED_WITH_FAILURES, c.message.as_str())
    );
}

#[test]
fn a_closed_gate_holds_new_starts_says_why_and_fails_the_run_after_fail_after() {
    use crate::api::{Gate, PrometheusGate};
    use crate::engine::gate::{GateReading, Reading};
    let mut plan = valid_plan(5);
    plan.spec.gates = Some(vec![Gate {
        name: "alerts".into(),
        prometheus: PrometheusGate {
            query: r#"ALERTS{severity="critical"}"#.into(),
        },
        groups: None,
        fail_after: Some("10m".into()),
    }]);
    let reading = |r: Reading, at: DateTime<Utc>| GateReading {
        gate: "alerts".into(),
        reading: r,
        next_check: at + Duration::seconds(30),
    };
    let firing = Reading::Firing {
        series: 2,
        first: r#"ALERTS{alertname="NodeDown"}"#.into(),
    };
    let mut world = World::with(2);
    world.gates = vec![reading(firing.clone(), t(1))];
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::InProgress);
    assert_eq!(started(&s), 0, "the gate holds the first starts");
    assert_eq!(
        condition(&s, reasons::GATED),
        (reasons::GATE_FIRING, ConditionStatus::True)
    );
    let message = r#"gate "alerts": 2 series, first ALERTS{alertname="NodeDown"}"#;
    assert_eq!(
        find_condition(&s.status.conditions, reasons::GATED).unwrap().message,
        message
    );
    let closed: Vec<_> = s.announce.iter().filter(|a| a.reason == "GateClosed").collect();
    assert_eq!(closed.len(), 1);
    assert!(closed[0].warning && closed[0].note == message);
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked == vec![("all".into(), "GateClosed")]));
    assert_eq!(
        s.wake_at,
        Some(t(1) + Duration::seconds(30)),
        "read again after the interval"
    );
    apply(&mut run, &s, &mut world);

    // Still closed: no new event; the deadline of failAfter counts from the first closing.
    world.gates = vec![reading(Reading::Error("connection refused".into()), t(5))];
    let s = pass(&run, Some(&plan), &[], &world, t(5));
    assert_eq!(
        condition(&s, reasons::GATED),
        (reasons::GATE_ERROR, ConditionStatus::True)
    );
    assert!(!reasons_announced(&s).contains(&"GateClosed"));
    assert_eq!(started(&s), 0);
    let held = run.clone();
    let mut later = run.clone();
    apply(&mut later, &s, &mut world);

    // Open again before failAfter: GateOpened, and the upgrades start.
    let mut open_world = world.clone();
    open_world.gates = vec![reading(Reading::Open, t(6))];
    let s = pass(&later, Some(&plan), &[], &open_world, t(6));
    assert_eq!(
        condition(&s, reasons::GATED),
        (reasons::GATES_OPEN, ConditionStatus::False)
    );
    assert!(s.announce.iter().any(|a| a.reason == "GateOpened" && !a.warning));
    assert_eq!(started(&s), 2);

    // Closed for failAfter (since t(1)): the run fails with the gate's message.
    world.gates = vec![reading(firing, t(11))];
    let s = pass(&held, Some(&plan), &[], &world, t(11));
    assert_eq!(s.status.state, RunState::Failed);
    assert_eq!(
        condition(&s, reasons::RUN_SUCCEEDED),
        (reasons::GATE_FAILED, ConditionStatus::False)
    );
    assert_eq!(
        find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED)
            .unwrap()
            .message,
        r#"gate "alerts" closed for 10m"#
    );
    assert_eq!(started(&s), 0);
}

#[test]
fn a_group_that_needs_approval_waits_says_so_once_and_adopts_its_approval() {
    let mut all = match_all("all");
    all.max_concurrent = Some(IntOrString::Int(5));
    all.require_approval = Some(true);
    let empty = crate::api::RolloutGroup {
        name: "canary".into(),
        ..Default::default()
    };
    let plan = the_plan(plan_spec(&["v1"], "v2", vec![empty, all]));
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 0);
    assert_eq!(
        condition(&s, reasons::AWAITING_APPROVAL),
        (reasons::APPROVAL_REQUIRED, ConditionStatus::True)
    );
    assert_eq!(
        find_condition(&s.status.conditions, reasons::AWAITING_APPROVAL)
            .unwrap()
            .message,
        r#"rollout group "all" waits for an UpgradeApproval"#
    );
    let waiting: Vec<_> = s
        .announce
        .iter()
        .filter(|a| a.reason == "GroupAwaitingApproval")
        .collect();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].key, "awaiting:all", "published once per group");
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked == vec![("all".into(), "AwaitingApproval")]));
    let phases: Vec<_> = s.status.rollout_groups.iter().map(|g| g.phase).collect();
    assert_eq!(
        phases,
        [Some(GroupPhase::Completed), Some(GroupPhase::AwaitingApproval)]
    );
    apply(&mut run, &s, &mut world);

    let approver_owner = OwnerReference {
        uid: "alice-uid".into(),
        name: "alice".into(),
        ..Default::default()
    };
    let mut approval = crate::api::UpgradeApproval::new(
        "r-all",
        crate::api::UpgradeApprovalSpec {
            upgrade_run_ref: crate::api::UpgradeRunRef { name: "r".into() },
            group: "all".into(),
            approver: Some("alice@example.com".into()),
            comment: Some("CHG-1234".into()),
        },
    );
    approval.metadata.creation_timestamp = Some(Time(crate::time::to_jiff(t(2))));
    approval.metadata.resource_version = Some("5".into());
    approval.metadata.owner_references = Some(vec![approver_owner.clone()]);
    world.approvals = vec![ApprovalFact::of(&approval)];
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!(started(&s), 2);
    assert_eq!(
        condition(&s, reasons::AWAITING_APPROVAL),
        (reasons::APPROVED, ConditionStatus::False)
    );
    assert!(s.announce.iter().any(|a| a.reason == "GroupApproved"
        && a.note == r#"rollout group "all" approved by alice@example.com (UpgradeApproval r-all): CHG-1234"#));
    let [adopt] = s.adopt_approvals.as_slice() else {
        panic!("one adoption: {:?}", s.adopt_approvals)
    };
    assert_eq!(
        (adopt.approval.as_str(), adopt.resource_version.as_deref()),
        ("r-all", Some("5")),
        "of the approval as read"
    );
    let run_owner = adopt.owner_references.last().unwrap();
    assert_eq!(
        (run_owner.uid.as_str(), run_owner.controller),
        ("r-uid", None),
        "the run is an owner, not the approval's controller"
    );
    assert_eq!(
        adopt.owner_references[0], approver_owner,
        "the approval's other owners stay"
    );
    let all = &s.status.rollout_groups[1];
    assert_eq!(
        (
            all.approval.as_deref(),
            all.approved_by.as_deref(),
            all.comment.as_deref()
        ),
        (Some("r-all"), Some("alice@example.com"), Some("CHG-1234")),
        "the status records which approval, who and why"
    );
    let c = find_condition(&s.status.conditions, reasons::AWAITING_APPROVAL).unwrap();
    assert_eq!(
        c.message,
        r#"rollout group "all" approved by alice@example.com (UpgradeApproval r-all): CHG-1234"#
    );
    apply(&mut run, &s, &mut world);
    s.adopt_approvals[0].apply(&mut approval).expect("the approval as read");
    world.approvals = vec![ApprovalFact::of(&approval)];
    let s = pass(&run, Some(&plan), &[], &world, t(4));
    assert!(s.adopt_approvals.is_empty());
    assert!(!reasons_announced(&s).contains(&"GroupApproved"), "announced once");
}

#[test]
fn a_tampered_shard_fails_the_run_and_nothing_more_starts() {
    let plan = valid_plan(1);
    let mut world = World::with(3);
    let mut run = a_pending_run("r", t(0));
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 1);
    apply(&mut run, &s, &mut world);
    let tampered = SnapshotFact::Tampered {
        config_map: "r-resource-snapshot".into(),
    };
    let s = step(
        &run,
        &Facts {
            missing_kinds: &[],
            selector: None,
            snapshot: tampered,
            ..facts(Some(&plan), &[], &world, &run, t(2))
        },
        &world,
    );
    assert_eq!(s.status.state, RunState::Failed);
    let c = find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        (
            "SnapshotTampered",
            "snapshot ConfigMap r-resource-snapshot does not match the digest recorded at 2026-06-01T10:01:00Z"
        )
    );
    assert!(s.evaluation.is_none(), "nothing is evaluated, so nothing is patched");
    assert_eq!(reasons_announced(&s), vec!["UpgradeRunFailed"]);
}

#[test]
fn lost_start_announcements_are_the_started_upgrades_no_event_accounts_for() {
    let mut world = World::with(5);
    let plan = valid_plan(5);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 5);
    apply(&mut run, &s, &mut world);
    // r0..r3 carry this run's upgraded-by annotation (its own patches); r4 was then moved to v2
    // by someone else, whose write replaced the annotation.
    for (i, b) in world.bindings.iter().enumerate() {
        let by = b
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::api::UPGRADED_BY_ANNOTATION));
        assert_eq!(by.map(String::as_str), Some("r"), "r{i} was patched by run r");
    }
    Arc::make_mut(&mut world.bindings[4])
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(crate::api::UPGRADED_BY_ANNOTATION.into(), "someone-else".into());
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    let frozen = s.frozen.as_ref().unwrap();
    let note = |i: usize| texts::resource_started(&format!("ns/r{i}"), "v1", "v2");
    let started_event = |i: usize| (events::RESOURCE_UPGRADE_STARTED.to_string(), note(i), 1);
    let combined = |count: i32| {
        (
            events::RESOURCE_UPGRADE_STARTED.to_string(),
            format!("{}{}", events::COMBINED_PREFIX, note(3)),
            count,
        )
    };
    let other_reason = (
        events::RESOURCE_UPGRADE_FAILED.to_string(),
        format!("{}x", events::COMBINED_PREFIX),
        4,
    );
    for (events, owed) in [
        (vec![], vec![0, 1, 2, 3]),
        (vec![started_event(0), started_event(2)], vec![1, 3]),
        // The combined Event counts two of the rest: which ones it does not say; two are owed less.
        (vec![started_event(0), combined(2)], vec![3]),
        (vec![combined(1), combined(1)], vec![2, 3]),
        (vec![combined(9)], vec![]),
        // Another reason's combined Event counts no starts.
        (vec![started_event(1), other_reason.clone()], vec![0, 2, 3]),
    ] {
        let announced = Announced::from_events(events.clone());
        let missing = lost_start_announcements(&run, &frozen.snapshot, "v2", &announced, &world);
        let expected: Vec<String> = owed.iter().map(|i| note(*i)).collect();
        // By number when the combined Event counts some: the owed ones are any of the uncounted.
        assert_eq!(missing.len(), expected.len(), "{events:?}: {missing:?}");
        if !announced.combined.contains_key(events::RESOURCE_UPGRADE_STARTED) {
            assert_eq!(missing, expected, "{events:?}");
        }
        assert!(!missing.contains(&note(4)), "r4 was not started by this run");
    }
}

#[test]
fn results_and_resource_warnings_are_listed_by_the_passes_that_move_a_groups_counts() {
    let mut world = World::with(3);
    let plan = plan_with_failure_budget(1);
    let mut run = a_run("r", t(0), false);
    let listed = |s: &Step| -> Vec<(String, &'static str)> {
        let mut v: Vec<_> = s
            .results
            .iter()
            .map(|r| (r.resource.binding.clone(), r.result.as_str()))
            .collect();
        v.sort();
        v
    };
    // What the counters read from the status the step writes (`counters::group_outcomes`).
    let counted = |s: &Step| -> Vec<(String, &'static str, u64)> {
        let groups = s.status.rollout_groups.iter();
        groups
            .flat_map(|g| {
                crate::engine::counters::group_outcomes(&s.status, g, false).map(|(r, n)| (g.name.clone(), r, n))
            })
            .filter(|(_, _, n)| *n > 0)
            .collect()
    };
    let failures = |s: &Step| {
        reasons_announced(s)
            .iter()
            .filter(|r| **r == events::RESOURCE_UPGRADE_FAILED)
            .count()
    };

    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!((started(&s), listed(&s).len()), (3, 0), "nothing finished yet");
    apply(&mut run, &s, &mut world);

    world.kratix_fails(0, t(2));
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    let failed_binding = world.bindings[0].metadata.name.clone().unwrap();
    assert_eq!(listed(&s), [(failed_binding.clone(), "failed")]);
    assert_eq!(counted(&s), [("all".to_string(), "failed", 1)]);
    assert_eq!(failures(&s), 1);
    assert!(s.results.iter().all(|r| r.group == 0));
    apply(&mut run, &s, &mut world);

    let s = pass(&run, Some(&plan), &[], &world, t(4));
    assert_eq!(
        (listed(&s).len(), failures(&s)),
        (0, 0),
        "counts unmoved: nothing new to list"
    );

    // r1 succeeds; a pass that is not carried out (a crash before its status) is listed again by
    // the next, with every finished resource of the group (publishing once is the caller's).
    // The counters read the status, not a process's memory: a restarted controller counts the
    // earlier failure once, not again (found by the simulation, seed 14725835423619445087: a
    // crash, then `resource_upgrades_total` counted a group's first success twice).
    Arc::make_mut(&mut world.bindings[1])
        .status
        .get_or_insert_with(Default::default)
        .last_applied_version = "v2".into();
    let succeeded_binding = world.bindings[1].metadata.name.clone().unwrap();
    let both = vec![(failed_binding, "failed"), (succeeded_binding, "succeeded")];
    let lost = pass(&run, Some(&plan), &[], &world, t(5));
    assert_eq!(listed(&lost), both);
    let both_counted = [("all".to_string(), "succeeded", 1), ("all".to_string(), "failed", 1)];
    assert_eq!(counted(&lost), both_counted);
    let s = pass(&run, Some(&plan), &[], &world, t(6));
    assert_eq!(listed(&s), both);
    assert_eq!(counted(&s), both_counted, "the failure once");
    assert_eq!(failures(&s), 1, "announced again; published once by the caller");
    apply(&mut run, &s, &mut world);
    let s = pass(&run, Some(&plan), &[], &world, t(7));
    assert_eq!((listed(&s).len(), counted(&s)), (0, both_counted.to_vec()));
}

/// Found by the simulation (seed 10882467515227819153: a reconcile handed a copy of the run one
/// write behind, by a lagging cache). The step sent its own patch first, and the status after it
/// is conditional on the version that patch returns, so the stale step's status went through:
/// the run's end was written and counted a second time. The own patch carries the copy's version
/// as precondition, so such a step is refused at its first write.
#[test]
fn a_step_from_a_stale_copy_of_the_run_is_refused_at_its_own_patch() {
    let mut world = World::with(1);
    let plan = valid_plan(2);
    let mut stale = a_run("r", t(0), false);
    stale.metadata.resource_version = Some("1".into());
    let s = pass(&stale, Some(&plan), &[], &world, t(1));
    assert_eq!(s.own.resource_version.as_deref(), Some("1"));
    assert_eq!(s.own.merge_patch()["metadata"]["resourceVersion"], "1");
    let mut current = stale.clone();
    apply(&mut current, &s, &mut world);
    current.metadata.resource_version = Some("2".into());

    let again = pass(&stale, Some(&plan), &[], &world, t(2));
    assert!(!again.own.is_empty(), "the stale copy lacks what the first step added");
    assert!(again.own.apply(&mut current).is_err(), "refused: the run moved on");
    let fresh = pass(&current, Some(&plan), &[], &world, t(2));
    assert!(fresh.own.is_empty(), "from the current run, nothing of its own to send");
    assert!(RunPatch::supersede("old", "r").resource_version.is_none());
}

/// Issue 36 D5 (spec §5.2): a preview not resumed is dormant — nothing but its snapshot is
/// computed, so a failure in Kratix meanwhile neither fails it nor is announced — and once
/// resumed, "since the run began" counts from its admission: a failure from before the resume
/// is an old failure (a retry), not the run's.
#[test]
fn a_preview_is_dormant_until_resumed_and_judges_failures_from_its_admission() {
    let plan = valid_plan(2);
    let mut world = World::with(2);
    let mut preview = a_run("preview", t(0), true);
    let s = pass(&preview, Some(&plan), &[], &world, t(1));
    assert_eq!(s.status.state, RunState::InProgress, "its snapshot is taken");
    assert!(s.evaluation.is_none() && s.frozen.is_some());
    apply(&mut preview, &s, &mut world);

    // Someone upgrades r0 by hand and it fails, after the preview's creation.
    Arc::make_mut(&mut world.bindings[0]).spec.version = "v2".into();
    world.kratix_fails(0, t(2));
    let s = pass(&preview, Some(&plan), &[], &world, t(3));
    assert_eq!(s.status.state, RunState::InProgress, "a dormant preview cannot fail");
    assert!(s.evaluation.is_none() && s.announce.is_empty() && s.results.is_empty());
    assert!(s.finished.is_none() && s.gauges == Gauges::Keep && s.wake_at.is_none());

    // Resumed at t(5): the failure at t(2) predates its admission, so r0 is retried in its turn
    // and r1 started; nothing failed.
    preview.spec.suspend = false;
    let s = pass(&preview, Some(&plan), &[], &world, t(5));
    assert_eq!(s.status.state, RunState::InProgress);
    let eval = s.evaluation.as_ref().expect("evaluated once admitted");
    let names = |v: &[crate::engine::run::BindingAction]| v.iter().map(|a| a.resource.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        (names(&eval.retry), names(&eval.start)),
        (vec!["r0".to_string()], vec!["r1".to_string()])
    );
    assert_eq!(s.status.rollout_groups[0].failed, 0);
}

/// Found by the simulation (seed 11044320068972114203): a preview's first pass wrote its
/// preview annotation, then a request failed before its status; resumed before the next pass, it
/// was neither dormant (no longer suspended) nor admitted (no status yet), so that pass recorded
/// it InProgress unevaluated, and `status` showed other counts than the run recorded. It is
/// admitted at once instead, like any resumed preview.
#[test]
fn a_preview_resumed_before_its_status_was_first_written_is_admitted_at_once() {
    let plan = valid_plan(2);
    let world = World::with(2);
    let mut preview = a_run("preview", t(0), true);
    let first = pass(&preview, Some(&plan), &[], &world, t(1));
    // Its own patch lands; the request after it fails: no status.
    first.own.apply(&mut preview).expect("the run as the step read it");
    assert!(preview.status.is_none());
    preview.spec.suspend = false;
    preview.metadata.generation = Some(2);
    let s = pass(&preview, Some(&plan), &[], &world, t(5));
    assert_eq!(
        s.own.annotations.get(crate::api::ADMITTED_AT_ANNOTATION).cloned(),
        Some(crate::time::rfc3339(t(5))),
        "admitted now"
    );
    assert!(s.evaluation.is_some(), "evaluated as an admitted run");
    assert_eq!((s.status.state, started(&s)), (RunState::InProgress, 2));
}

/// Found by the simulation (seed 6, once watch events could be missed): a run whose upgrades
/// were in flight asked to be woken by nothing but their bindings' changes; one missed event and
/// it waited for ever, saying nothing. A run still going looks again within RESYNC; one that
/// ended, or a dormant one, waits for changes alone.
#[test]
fn a_run_still_going_looks_again_within_resync_whatever_it_waits_for() {
    let plan = valid_plan(1);
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 1);
    assert_eq!(
        s.wake_at,
        Some(t(1) + RESYNC),
        "in flight: Kratix's change, or the resync"
    );
    apply(&mut run, &s, &mut world);
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(s.wake_at, Some(t(2) + RESYNC), "still in flight");
    apply(&mut run, &s, &mut world);
    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    apply(&mut run, &s, &mut world);
    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(4));
    assert_eq!(s.status.state, RunState::Completed);
    assert_eq!(s.wake_at, None, "ended: nothing to look at");

    let preview = a_run("preview", t(0), true);
    let s = pass(&preview, Some(&plan), &[], &World::with(2), t(1));
    let mut preview = preview;
    preview.status = Some(s.status.clone());
    preview.metadata.annotations = Some(s.own.annotations.clone());
    let s = pass(&preview, Some(&plan), &[], &World::with(2), t(2));
    assert_eq!(s.wake_at, None, "a dormant preview waits to be resumed");
}

/// Found by the simulation (seed 10153634015363561648): a run's first pass wrote its snapshot
/// and the process died before the status; the plan's Promise or target was then edited, and the
/// next pass gated on the *live* plan's revision (waiting for `postgres`) instead of going on from
/// the snapshot it had. The snapshot's frozen plan decides once it is written.
#[test]
fn a_snapshot_written_before_a_crash_decides_over_a_plan_edited_since() {
    type Edit = fn(&mut UpgradePlan);
    let edits: [(&str, Edit); 2] = [
        ("the Promise", |p| p.spec.promise_ref.name = "postgres".into()),
        ("the target", |p| p.spec.upgrade_path.to = "v3".into()),
    ];
    for (case, edit) in edits {
        let mut plan = valid_plan(2);
        let mut world = World::with(2);
        let mut run = a_run("r", t(0), false);
        let first = pass(&run, Some(&plan), &[], &world, t(1));
        // The snapshot lands; the process dies before the status.
        first.own.apply(&mut run).expect("the run as the step read it");
        apply_snapshot(&run, &first, &mut world);
        edit(&mut plan);
        let s = pass(&run, Some(&plan), &[], &world, t(2));
        assert_eq!(
            s.status.state,
            RunState::InProgress,
            "{case}: {:?}",
            s.status.conditions
        );
        let ready = s
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == reasons::TARGET_REVISION_READY)
            .map(|c| (c.status, c.message.clone()));
        assert_eq!(
            ready,
            Some((ConditionStatus::True, texts::revision_ready("redis", "v2"))),
            "{case}"
        );
        assert_eq!(started(&s), 2, "{case}: from its snapshot");
        assert!(s.write_snapshot.is_empty(), "{case}: never taken again");
    }
}

/// Issue 36 D2 (spec §14.2): after its snapshot a run follows its frozen plan, Promise
/// included. The live plan's promiseRef edited mid-run (to a Promise without the target
/// revision) neither fails the run nor stops it.
#[test]
fn a_promise_ref_edited_mid_run_changes_nothing_of_the_run() {
    let mut plan = valid_plan(1);
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 1);
    apply(&mut run, &s, &mut world);
    world.kratix_applies();

    plan.spec.promise_ref.name = "postgres".into();
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(s.status.state, RunState::InProgress, "{:?}", s.status.conditions);
    assert_eq!((s.status.completed_resources, started(&s)), (1, 1));
    apply(&mut run, &s, &mut world);
    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!((s.status.state, s.status.completed_resources), (RunState::Completed, 2));
}

/// Issue 36 D4 (spec §13.3): each gate has its own clock. With `calm` (no failAfter) closed
/// first and `alerts` (failAfter 10m) closed later, `alerts` fails the run 10 minutes after *it*
/// closed — not after `calm` did, and not never because `calm` comes first. Each closing and
/// opening is announced per gate, and the run records every gate's state.
#[test]
fn each_gate_has_its_own_clock_and_its_own_announcements() {
    use crate::api::{Gate, PrometheusGate};
    use crate::engine::gate::{GateReading, Reading};
    let gate = |name: &str, fail_after: Option<&str>| Gate {
        name: name.into(),
        prometheus: PrometheusGate { query: "up".into() },
        groups: None,
        fail_after: fail_after.map(Into::into),
    };
    let mut plan = valid_plan(5);
    plan.spec.gates = Some(vec![gate("calm", None), gate("alerts", Some("10m"))]);
    let firing = Reading::Firing {
        series: 1,
        first: "up{}".into(),
    };
    let readings = |calm: &Reading, alerts: &Reading, at: DateTime<Utc>| {
        vec![
            GateReading {
                gate: "calm".into(),
                reading: calm.clone(),
                next_check: at + Duration::seconds(30),
            },
            GateReading {
                gate: "alerts".into(),
                reading: alerts.clone(),
                next_check: at + Duration::seconds(30),
            },
        ]
    };
    let gates_of = |s: &Step| {
        s.status
            .gates
            .iter()
            .map(|g| (g.name.clone(), g.open, g.since))
            .collect::<Vec<_>>()
    };
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    // t1: calm closes.
    world.gates = readings(&firing, &Reading::Open, t(1));
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(
        gates_of(&s),
        vec![("calm".into(), false, t(1)), ("alerts".into(), true, t(1))]
    );
    assert_eq!(reasons_announced(&s), vec!["GateClosed"]);
    apply(&mut run, &s, &mut world);
    // t5: alerts closes too: announced, with its own clock.
    world.gates = readings(&firing, &firing, t(5));
    let s = pass(&run, Some(&plan), &[], &world, t(5));
    assert_eq!(
        gates_of(&s),
        vec![("calm".into(), false, t(1)), ("alerts".into(), false, t(5))]
    );
    let closed: Vec<&str> = s
        .announce
        .iter()
        .filter(|a| a.reason == "GateClosed")
        .map(|a| a.note.as_str())
        .collect();
    assert_eq!(closed, vec![r#"gate "alerts": 1 series, first up{}"#]);
    assert_eq!(s.wake_at.map(|w| w.min(t(15))), Some(t(5) + Duration::seconds(30)));
    // The same closing found again a minute later (the pass above not carried out: a crash, or
    // its status refused as computed from a stale copy) is the same occurrence, keyed alike, so
    // the controller publishes it once (found by the simulation, seed 9650512759359055554: the
    // key was the pass's `now`, and one closing was announced twice).
    let keys = |s: &Step| -> Vec<String> {
        s.announce
            .iter()
            .filter(|a| a.reason == "GateClosed")
            .map(|a| a.key.clone())
            .collect()
    };
    let again = pass(&run, Some(&plan), &[], &world, t(6));
    assert_eq!(keys(&again), keys(&s));
    assert_eq!(keys(&s), vec![format!("alerts/all/{}", crate::time::rfc3339(t(1)))]);
    apply(&mut run, &s, &mut world);
    // t12: alerts closed 7 minutes: not failed (calm's clock would say 11).
    let s = pass(&run, Some(&plan), &[], &world, t(12));
    assert_eq!(s.status.state, RunState::InProgress);
    assert!(s.announce.is_empty(), "nothing changed: {:?}", s.announce);
    apply(&mut run, &s, &mut world);
    // calm opens at t13: announced per gate; the run is still held by alerts.
    world.gates = readings(&Reading::Open, &firing, t(13));
    let s = pass(&run, Some(&plan), &[], &world, t(13));
    assert_eq!(reasons_announced(&s), vec!["GateOpened"]);
    assert_eq!(started(&s), 0);
    apply(&mut run, &s, &mut world);
    // t15: alerts closed for 10 minutes: the run fails, naming it.
    let s = pass(&run, Some(&plan), &[], &world, t(15));
    assert_eq!(s.status.state, RunState::Failed);
    assert_eq!(
        find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED)
            .unwrap()
            .message,
        r#"gate "alerts" closed for 10m"#
    );
}

/// Issue 36 D3 (spec §14.2): a run whose plan needs a kind the cluster does not serve waits
/// with KindsServed=False/KindNotServed and one Warning event, can still be cancelled, and goes
/// on once the kind is served.
#[test]
fn a_run_needing_a_kind_not_served_waits_says_why_and_can_be_cancelled() {
    let plan = valid_plan(1);
    let mut world = World::with(1);
    let mut run = a_run("r", t(0), false);
    let missing = [MissingKind {
        resource: "healthrecords.platform.kratix.io",
        group: "all".into(),
        field: "healthCheck",
    }];
    let waiting = |run: &UpgradeRun, world: &World, now| {
        let mut f = facts(Some(&plan), &[], world, run, now);
        f.missing_kinds = &missing;
        step(run, &f, world)
    };
    let s = waiting(&run, &world, t(1));
    let message = "the cluster does not serve healthrecords.platform.kratix.io, which group \"all\" needs (healthCheck); install its CRD";
    let c = find_condition(&s.status.conditions, reasons::KINDS_SERVED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (ConditionStatus::False, reasons::KIND_NOT_SERVED, message)
    );
    assert_eq!(reasons_announced(&s), vec![events::KIND_NOT_SERVED]);
    assert!(s.write_snapshot.is_empty() && s.evaluation.is_none() && started(&s) == 0);
    assert_eq!(s.wake_at, Some(t(1) + KIND_POLL));
    apply(&mut run, &s, &mut world);

    // Deleting it cancels it: the wait does not hold the finalizer.
    let mut gone = run.clone();
    gone.metadata.deletion_timestamp = Some(Time(crate::time::to_jiff(t(2))));
    assert_eq!(waiting(&gone, &world, t(2)).status.state, RunState::Cancelled);

    // Served: it goes on, and says so.
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert_eq!(s.status.state, RunState::InProgress);
    assert_eq!(
        condition(&s, reasons::KINDS_SERVED),
        (reasons::KINDS_SERVED, ConditionStatus::True)
    );
}

/// Which of the optional kinds a run waits for, is told are missing, or needs not at all
/// (spec §14.2): only the kinds its plan's groups need, never for an ended or deleted run.
#[test]
fn kinds_needed_table() {
    let mut plan = valid_plan(1).spec;
    plan.rollout_groups[0].health_check = Some(Default::default());
    let plain = valid_plan(1).spec;
    let listed = KindCache {
        listed: true,
        not_served: false,
    };
    let pending = KindCache::default();
    let not_served = KindCache {
        listed: false,
        not_served: true,
    };
    let health = "healthrecords.platform.kratix.io";
    let live = a_run("r", t(0), false);
    let mut ended = live.clone();
    ended.status.get_or_insert_with(Default::default).state = RunState::Completed;
    let mut deleted = live.clone();
    deleted.metadata.deletion_timestamp = Some(Time(crate::time::to_jiff(t(1))));
    let missing = vec![MissingKind {
        resource: health,
        group: "all".into(),
        field: "healthCheck",
    }];
    // (case, run, plan, health cache, want); the approvals' cache is pending throughout: no
    // group requires approval.
    let cases = [
        ("listed", &live, Some(&plan), listed, KindsNeeded::Known(vec![])),
        (
            "list to come",
            &live,
            Some(&plan),
            pending,
            KindsNeeded::ListPending { resource: health },
        ),
        (
            "not served",
            &live,
            Some(&plan),
            not_served,
            KindsNeeded::Known(missing),
        ),
        (
            "the plan needs no health",
            &live,
            Some(&plain),
            pending,
            KindsNeeded::Known(vec![]),
        ),
        ("no plan yet", &live, None, pending, KindsNeeded::Known(vec![])),
        ("ended", &ended, Some(&plan), pending, KindsNeeded::Known(vec![])),
        (
            "deleted: its cancel needs neither",
            &deleted,
            Some(&plan),
            not_served,
            KindsNeeded::Known(vec![]),
        ),
    ];
    for (case, run, plan, health, want) in cases {
        assert_eq!(kinds_needed(run, plan, health, pending), want, "{case}");
    }
}

/// Issue 40 item 7 (spec §5.10): a run suspended right after it was created (before the
/// controller first saw it) is a suspended run — admitted, the plan's active run — not a preview.
#[test]
fn a_run_suspended_right_after_creation_is_suspended_not_a_preview() {
    let plan = valid_plan(1);
    let world = World::with(1);
    let mut run = a_run("r", t(0), true);
    run.metadata.generation = Some(2); // created with suspend: false, then suspended
    assert!(!is_preview(&run));
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert!(!s.own.annotations.contains_key(PREVIEW_ANNOTATION));
    assert_eq!(
        condition(&s, reasons::SUSPENDED),
        (reasons::SUSPENDED, ConditionStatus::True)
    );
    assert!(
        matches!(s.gauges, Gauges::Set(_)),
        "the plan's active run owns its gauges"
    );
    assert_eq!(started(&s), 0);
    // Created suspended (generation 1): a preview.
    run.metadata.generation = Some(1);
    assert!(is_preview(&run));
}

/// Spec §5.10 (issue 40 item 4): `spec.cancel` cancels a run and keeps it as the record: state
/// Cancelled, RunCancelled, UpgradeRunCancelled, counted, nothing more starts, its snapshot kept
/// (no release). A dormant run is not cancelled by it.
#[test]
fn spec_cancel_cancels_and_keeps_the_run_as_its_record() {
    let plan = valid_plan(1);
    let mut world = World::with(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    assert_eq!(started(&s), 1);
    apply(&mut run, &s, &mut world);
    run.spec.cancel = true;
    let s = pass(&run, Some(&plan), &[], &world, t(2));
    assert_eq!(s.status.state, RunState::Cancelled);
    assert_eq!(
        find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).map(|c| (c.reason.as_str(), c.message.as_str())),
        Some((
            reasons::RUN_CANCELLED,
            "UpgradeRun was cancelled before it finished (spec.cancel)"
        ))
    );
    assert_eq!(reasons_announced(&s), vec!["UpgradeRunCancelled"]);
    assert_eq!(
        (s.finished, s.release.is_some(), started(&s)),
        (Some(RunState::Cancelled), false, 0)
    );
    assert_eq!(s.status.finished_at, Some(t(2)));
    assert_eq!(s.gauges, Gauges::Clear);
    run.status = Some(s.status.clone());
    assert_eq!(
        last_run_of(&run).map(|l| l.result),
        Some(RunResult::Cancelled),
        "the plan records it"
    );
    // A later pass changes nothing: it is finished, and kept.
    let again = pass(&run, Some(&plan), &[], &world, t(3));
    assert!(again.announce.is_empty() && again.release.is_none() && again.status == s.status);

    // A superseded run is not cancelled by it.
    let mut old = a_run("old", t(0), true);
    old.spec.cancel = true;
    old.status = Some(UpgradeRunStatus {
        state: RunState::InProgress,
        superseded_by: Some("r".into()),
        ..Default::default()
    });
    assert_eq!(
        pass(&old, Some(&plan), &[], &world, t(4)).status.state,
        RunState::InProgress
    );
}

#[test]
fn a_run_is_owned_by_its_plan_keeping_its_other_owners_and_carries_the_controllers_selector() {
    let plan = valid_plan(1);
    let world = World::with(1);
    let mut run = a_run("r", t(0), false);
    let other = OwnerReference {
        uid: "someone-else".into(),
        name: "keeper".into(),
        ..Default::default()
    };
    let stale_controller = OwnerReference {
        uid: "old-controller".into(),
        controller: Some(true),
        ..Default::default()
    };
    run.metadata.owner_references = Some(vec![other.clone(), stale_controller]);
    let selected = |run: &UpgradeRun, selector| {
        let mut f = facts(Some(&plan), &[], &world, run, t(1));
        f.selector = selector;
        step(run, &f, &world)
    };
    let s = selected(&run, Some("team=a"));
    let owners = s.own.owner_references.clone().expect("the plan is not an owner yet");
    assert_eq!(owners.len(), 2, "{owners:?}");
    assert_eq!(owners[0], other, "other owners stay");
    assert_eq!(
        (owners[1].uid.as_str(), owners[1].controller),
        (plan.metadata.uid.as_deref().unwrap(), Some(true)),
        "the plan is the one controller"
    );
    assert_eq!(
        s.own
            .annotations
            .get(crate::api::SELECTOR_ANNOTATION)
            .map(String::as_str),
        Some("team=a")
    );
    s.own.apply(&mut run).expect("unchanged");
    let s = selected(&run, Some("team=a"));
    assert!(s.own.is_empty(), "carried already: {:?}", s.own);
    let s = selected(&run, None);
    assert!(s.own.is_empty(), "a controller without --selector asks for none");
    let s = selected(&run, Some("team=b"));
    assert_eq!(
        s.own
            .annotations
            .get(crate::api::SELECTOR_ANNOTATION)
            .map(String::as_str),
        Some("team=b"),
        "the selector of the controller now working on the run"
    );
}

/// What each write of a step is, by name, in the order [`Step::writes`] gives them.
fn write_names(step: &Step, current: Option<&UpgradeRunStatus>) -> Vec<&'static str> {
    write_names_of(&step.writes(current, false))
}

fn write_names_of(writes: &[Write]) -> Vec<&'static str> {
    writes
        .iter()
        .map(|w| match w {
            Write::Own(_) => "own",
            Write::AdoptApprovals(_) => "approvals",
            Write::Supersede(_) => "supersede",
            Write::Snapshot(..) => "snapshot",
            Write::Bindings(..) => "bindings",
            Write::CreateRevert(_) => "revert",
            Write::FlushCounts => "flush",
            Write::Announce(_) => "event",
            Write::Gauges(_) => "gauges",
            Write::Status(_) => "status",
            Write::Count(_) => "count",
            Write::ProgressLater => "later",
            Write::Release(_) => "release",
        })
        .collect()
}

/// Issue 36 item 3: a step's writes come in the order they must be applied — the run's own
/// patch first, the snapshot before the bindings that follow it, events before the status, the
/// status last of the API writes, counting after it, the release at the very end — and a step
/// that changes nothing writes nothing but its (idempotent) count.
#[test]
fn a_steps_writes_come_in_the_order_they_must_be_applied() {
    let plan = valid_plan(2);
    let mut world = World::with(2);
    let mut old = a_run("old", t(0), false);
    let s = pass(&old, Some(&plan), &[], &world, t(1));
    assert_eq!(
        write_names(&s, old.status.as_ref()),
        ["own", "snapshot", "bindings", "gauges", "status", "count"]
    );
    apply(&mut old, &s, &mut world);
    let s = pass(&old, Some(&plan), &[], &world, t(1));
    assert_eq!(write_names(&s, old.status.as_ref()), ["bindings", "gauges", "count"]);

    let new = a_run("new", t(5), false);
    let s = pass(&new, Some(&plan), &[RunFacts::of(&old)], &world, t(6));
    let names = write_names(&s, new.status.as_ref());
    assert_eq!(&names[..3], ["own", "supersede", "snapshot"], "{names:?}");
    assert_eq!(&names[names.len() - 2..], ["status", "count"]);

    // Deleted: cancelled (its counts flushed and its end announced before the status), then,
    // without a plan to record it, released last.
    old.metadata.deletion_timestamp = Some(Time(crate::time::to_jiff(t(7))));
    let s = pass(&old, None, &[], &world, t(8));
    assert_eq!(
        write_names(&s, old.status.as_ref()),
        ["flush", "event", "gauges", "status", "count"]
    );
    old.status = Some(s.status.clone());
    let s = pass(&old, None, &[], &world, t(9));
    assert_eq!(write_names(&s, old.status.as_ref()), ["count", "release"]);
}

/// Progress alone written recently waits, and takes with it what says the same: the count and
/// the `GroupInProgress` event (each pass announced one under a budget). The run's other events
/// and every status that is more than progress go out at once; a status never written recently
/// goes out at once too.
#[test]
fn progress_written_recently_waits_with_its_count_and_group_event() {
    let mut world = World::with(3);
    let plan = valid_plan(2);
    let mut run = a_run("r", t(0), false);
    let s = pass(&run, Some(&plan), &[], &world, t(1));
    apply(&mut run, &s, &mut world);
    world.kratix_applies();
    let s = pass(&run, Some(&plan), &[], &world, t(3));
    assert!(reasons_announced(&s).contains(&events::GROUP_IN_PROGRESS));
    let group_events = |w: &[Write]| {
        w.iter()
            .filter(|w| matches!(w, Write::Announce(a) if a.reason == events::GROUP_IN_PROGRESS))
            .count()
    };
    // The status as last written, differing from the step's only in progress.
    let mut progress_behind = s.status.clone();
    progress_behind.completed_resources = 0;
    progress_behind.rollout_groups[0].succeeded = 0;
    assert!(only_progress(&progress_behind, &s.status));
    let mut phase_behind = progress_behind.clone();
    phase_behind.rollout_groups[0].phase = None;
    let cases: [(&str, &UpgradeRunStatus, bool, bool); 4] = [
        ("progress alone, written recently: later", &progress_behind, true, true),
        (
            "progress alone, not written recently: now",
            &progress_behind,
            false,
            false,
        ),
        ("more than progress, written recently: now", &phase_behind, true, false),
        (
            "more than progress, not written recently: now",
            &phase_behind,
            false,
            false,
        ),
    ];
    for (case, current, recent, later) in cases {
        let writes = s.writes(Some(current), recent);
        let names = write_names_of(&writes);
        assert_eq!(names.contains(&"later"), later, "{case}: {names:?}");
        assert_eq!(names.contains(&"status"), !later, "{case}: {names:?}");
        assert_eq!(names.contains(&"count"), !later, "{case}: {names:?}");
        assert_eq!(group_events(&writes), usize::from(!later), "{case}: {names:?}");
    }
}

#[test]
fn progress_waits_a_second_or_longer_so_that_all_runs_write_five_a_second() {
    use std::time::Duration;
    let cases = [
        (0, Duration::from_secs(1)),
        (1, Duration::from_secs(1)),
        (5, Duration::from_secs(1)),
        (6, Duration::from_millis(1200)),
        (50, Duration::from_secs(10)),
        (
            usize::MAX,
            Duration::from_millis(u64::MAX / u64::from(PROGRESS_WRITES_PER_SECOND)),
        ),
    ];
    for (runs, want) in cases {
        assert_eq!(progress_every(runs), want, "{runs} runs in progress");
    }
    let waits = [
        (None, 1, None, "never written by this process: now"),
        (
            Some(Duration::from_millis(400)),
            1,
            Some(Duration::from_millis(600)),
            "written 0.4 s ago",
        ),
        (Some(Duration::from_secs(1)), 1, None, "its turn exactly: now"),
        (
            Some(Duration::from_secs(3)),
            50,
            Some(Duration::from_secs(7)),
            "fifty runs share the rate",
        ),
        (Some(Duration::from_secs(12)), 50, None, "past its turn"),
    ];
    for (since, runs, want, case) in waits {
        assert_eq!(progress_wait(since, runs), want, "{case}");
    }
}

#[test]
fn group_progress_is_said_when_the_group_starts_and_at_each_tenth() {
    let group = |total: i64, succeeded: i64| GroupStatus {
        name: "all".into(),
        total,
        succeeded,
        ..Default::default()
    };
    let cases: Vec<(&str, Option<GroupStatus>, GroupStatus, bool)> = vec![
        ("starting", None, group(2000, 0), true),
        ("starting, total just known", Some(group(0, 0)), group(2000, 0), true),
        ("within the first tenth", Some(group(2000, 0)), group(2000, 199), false),
        ("into the second tenth", Some(group(2000, 150)), group(2000, 200), true),
        (
            "several tenths at once",
            Some(group(2000, 150)),
            group(2000, 1200),
            true,
        ),
        ("within a tenth", Some(group(2000, 1200)), group(2000, 1399), false),
        ("the last resource", Some(group(2000, 1999)), group(2000, 2000), true),
        (
            "nothing moved at the end",
            Some(group(2000, 2000)),
            group(2000, 2000),
            false,
        ),
        ("a small group: every count", Some(group(4, 1)), group(4, 2), true),
        ("a group of fifteen, 14 to 15", Some(group(15, 14)), group(15, 15), true),
        (
            "a group of fifteen, 12 to 13",
            Some(group(15, 12)),
            group(15, 13),
            false,
        ),
    ];
    for (case, before, now, want) in cases {
        assert_eq!(group_progress_said(before.as_ref(), &now), want, "{case}");
    }
}

// Revert (spec §13.7).

/// Groups dev (r0, r1) then prod (r2, r3), v1 → v2; `on_failure` on dev.
fn two_group_plan(on_failure: Option<crate::api::OnFailure>) -> UpgradePlan {
    use crate::engine::snapshot::tests::group;
    let mut dev = group("dev", &[("env", "dev")]);
    dev.on_failure = on_failure;
    let prod = group("prod", &[("env", "prod")]);
    the_plan(plan_spec(&["v1"], "v2", vec![dev, prod]))
}

fn two_group_world() -> World {
    let mut world = World::with(0);
    world.bindings = (0..4)
        .map(|i| {
            let env = if i < 2 { "dev" } else { "prod" };
            Arc::new(binding("ns", &format!("r{i}"), &[("env", env)], "v1", "v1"))
        })
        .collect();
    world
}

/// Kratix applies binding `i` at its `spec.version` and says so (`UpgradeSucceeded=True`).
fn kratix_succeeds(world: &mut World, i: usize, at: DateTime<Utc>) {
    let b = Arc::make_mut(&mut world.bindings[i]);
    let version = b.spec.version.clone();
    let st = b.status.get_or_insert_with(Default::default);
    st.last_applied_version = version;
    st.failed_version = None;
    st.conditions = vec![crate::api::kratix::BindingCondition {
        type_: crate::api::kratix::UPGRADE_SUCCEEDED.into(),
        status: "True".into(),
        reason: crate::api::kratix::UPGRADE_COMPLETE.into(),
        message: "done".into(),
        last_transition_time: Some(at),
    }];
    b.metadata
        .labels
        .get_or_insert_with(Default::default)
        .remove(crate::api::kratix::MANUAL_RECONCILIATION_LABEL);
}

fn a_revert(
    name: &str,
    of: &str,
    resources: RevertResources,
    respect_policy: bool,
    created: DateTime<Utc>,
) -> UpgradeRun {
    let mut r = a_run(name, created, false);
    r.spec.revert_of = Some(RevertOf {
        name: of.into(),
        resources,
    });
    r.spec.respect_policy = respect_policy;
    r
}

/// A pass of `run`, a revert before its snapshot, that finds `reverted` (and its snapshot as the
/// world holds it).
fn revert_pass(
    run: &UpgradeRun,
    reverted: Option<&UpgradeRun>,
    plan: &UpgradePlan,
    others: &[RunFacts],
    world: &World,
    now: DateTime<Utc>,
) -> Step {
    let mut f = facts(Some(plan), others, world, run, now);
    if matches!(f.snapshot, SnapshotFact::Absent) {
        f.reverted = match reverted {
            None => RevertedFact::NotFound,
            Some(r) => RevertedFact::Found {
                run: r,
                snapshot: world.snapshot_of(r),
            },
        };
    }
    step(run, &f, world)
}

/// Runs `run` under `plan` to its end, Kratix applying each start; returns its last step.
fn run_to_end(run: &mut UpgradeRun, plan: &UpgradePlan, world: &mut World, from: i64) -> Step {
    for minute in from..from + 20 {
        let s = pass(run, Some(plan), &[], world, t(minute));
        apply(run, &s, world);
        if s.status.state.is_terminal() {
            return s;
        }
        for i in 0..world.bindings.len() {
            // `latest` resolves to the latest revision, v1 here: applied already.
            let spec = &world.bindings[i].spec.version;
            if spec != "latest" && *spec != world.bindings[i].last_applied_version() {
                kratix_succeeds(world, i, t(minute));
            }
        }
    }
    panic!("run did not end");
}

/// What a step observes leaves it resolved (`Write::Count`): each success with its group's name
/// (for its duration), the run's end with its trigger and duration; a step that moved nothing
/// observes nothing.
#[test]
fn a_step_counts_its_results_and_its_end_as_data() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    let end = run_to_end(&mut up, &plan, &mut world, 1);
    let counted = |s: &Step| {
        s.writes(None, false).into_iter().find_map(|w| match w {
            Write::Count(c) => Some((
                c.succeeded
                    .iter()
                    .map(|(r, g)| (r.name.clone(), g.to_string()))
                    .collect::<Vec<_>>(),
                c.ended,
            )),
            _ => None,
        })
    };
    let (succeeded, ended) = counted(&end).expect("the last step counts");
    assert_eq!(
        succeeded,
        [
            ("r2".to_string(), "prod".to_string()),
            ("r3".to_string(), "prod".to_string())
        ]
    );
    let started = end.status.started_at.expect("started");
    let finished = end.status.finished_at.expect("finished");
    assert_eq!(
        ended,
        Some(RunEnd {
            result: RunState::Completed,
            trigger: crate::engine::admission::TriggerKind::Manual,
            seconds: Some((finished - started).num_seconds() as f64),
        })
    );
    // The run as that step left it: nothing moves, nothing counts.
    let again = pass(&up, Some(&plan), &[], &world, t(40));
    let (succeeded, ended) = counted(&again).unwrap_or_default();
    assert!(succeeded.is_empty() && ended.is_none(), "{succeeded:?} {ended:?}");
}

fn patched(step: &Step) -> Vec<(String, String, bool)> {
    step.binding_patches
        .iter()
        .map(|p| {
            (
                p.resource.name.clone(),
                p.version().unwrap_or("(retry)").to_string(),
                p.labels.contains_key(crate::api::kratix::MANUAL_RECONCILIATION_LABEL),
            )
        })
        .collect()
}

#[test]
fn a_completed_run_is_reverted_group_by_group_in_reverse_order_each_to_the_version_it_had() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    // r3 was floating: pinned back to what it had applied.
    Arc::make_mut(&mut world.bindings[3]).spec.version = "latest".into();
    let mut up = a_run("up", t(0), false);
    let end = run_to_end(&mut up, &plan, &mut world, 1);
    assert_eq!(end.status.state, RunState::Completed);

    let mut revert = a_revert("up-back", "up", RevertResources::Upgraded, false, t(30));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(31));
    let frozen = s.frozen.as_ref().expect("its snapshot");
    let groups: Vec<(&str, usize)> = frozen
        .snapshot
        .groups
        .iter()
        .map(|g| (g.name.as_str(), g.resources.len()))
        .collect();
    assert_eq!(
        groups,
        [("prod", 2), ("dev", 2)],
        "the reverted run's groups, last first"
    );
    assert_eq!(frozen.plan.upgrade_path.to, "v1");
    assert_eq!(
        condition(&s, reasons::TARGET_REVISION_READY),
        (reasons::PROMISE_REVISION_READY, ConditionStatus::True)
    );
    assert_eq!(
        patched(&s),
        [("r2".into(), "v1".into(), false), ("r3".into(), "v1".into(), false)],
        "prod first, each to the version it had applied (the floating one pinned)"
    );
    assert_eq!(s.status.total_resources, 4);
    assert_eq!(
        crate::engine::admission::TriggerKind::of(&revert).metric_label(),
        "revert"
    );
    apply(&mut revert, &s, &mut world);

    // Kratix moves prod back; then dev goes.
    kratix_succeeds(&mut world, 2, t(32));
    kratix_succeeds(&mut world, 3, t(32));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(33));
    assert_eq!(
        patched(&s),
        [("r0".into(), "v1".into(), false), ("r1".into(), "v1".into(), false)]
    );
    apply(&mut revert, &s, &mut world);
    kratix_succeeds(&mut world, 0, t(34));
    kratix_succeeds(&mut world, 1, t(34));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(35));
    assert_eq!(s.status.state, RunState::Completed);
    let done = find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(done.message, "4/4 resources upgraded to v1");
    assert!(world.bindings.iter().all(|b| b.last_applied_version() == "v1"));
    assert!(
        world
            .bindings
            .iter()
            .all(|b| b.annotation(UPGRADED_BY_ANNOTATION) == Some("up-back")),
        "the durable record names the revert"
    );
}

#[test]
fn a_revert_of_a_failed_upgrade_asks_kratix_to_run_the_old_version_again() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    let s = pass(&up, Some(&plan), &[], &world, t(1));
    apply(&mut up, &s, &mut world);
    world.kratix_fails(0, t(2));
    kratix_succeeds(&mut world, 1, t(2));
    let s = pass(&up, Some(&plan), &[], &world, t(3));
    apply(&mut up, &s, &mut world);
    assert_eq!(s.status.state, RunState::Failed);

    let mut revert = a_revert("up-back", "up", RevertResources::Failed, false, t(10));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(11));
    assert_eq!(
        patched(&s),
        [("r0".into(), "v1".into(), true)],
        "only the failed one, back to v1, with Kratix's manual-reconciliation label"
    );
    let mut reverted_world = world.clone();
    apply(&mut revert, &s, &mut reverted_world);
    // At v1 already, but not done until Kratix ran v1 again for the revert.
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &reverted_world, t(12));
    assert_eq!(
        s.status.rollout_groups[1].succeeded, 0,
        "in flight: {:?}",
        s.status.rollout_groups[1]
    );
    apply(&mut revert, &s, &mut reverted_world);
    kratix_succeeds(&mut reverted_world, 0, t(13));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &reverted_world, t(14));
    assert_eq!(s.status.state, RunState::Completed);
    let dev = &s.status.rollout_groups[1];
    assert_eq!(
        (dev.succeeded, dev.reapplied_resources.len()),
        (1, 1),
        "recorded as Kratix confirmed it"
    );
    apply(&mut revert, &s, &mut reverted_world);
    // Someone has Kratix run it again: the revert's success stands.
    let b = Arc::make_mut(&mut reverted_world.bindings[0]);
    b.status.as_mut().unwrap().conditions[0].status = "Unknown".into();
    b.status.as_mut().unwrap().conditions[0].last_transition_time = Some(t(15));
    let recorded = revert.status.clone().unwrap();
    let frozen = s.frozen.as_ref().unwrap();
    let view = crate::engine::run::resource_outcome(
        &frozen.snapshot.groups[1].resources[0],
        (1, 0),
        reverted_world.binding("ns", "r0-binding").as_deref(),
        &Default::default(),
        (&frozen.compiled, "dev"),
        &crate::engine::record::Records::read(&recorded.rollout_groups, &frozen.snapshot, &frozen.overlaps),
        crate::engine::run::JudgedFor {
            to: "v1",
            name: "up-back",
            admitted: t(10),
            snapshot_taken: t(11),
            reverting: Some("up"),
        },
        t(16),
    );
    assert_eq!(view, Outcome::Succeeded, "an outcome stands for the run (spec §5.5)");
    let all = a_revert("up-all", "up", RevertResources::All, false, t(10));
    let s = revert_pass(&all, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(11));
    assert_eq!(
        patched(&s),
        [("r0".into(), "v1".into(), true), ("r1".into(), "v1".into(), false)]
    );
}

#[test]
fn a_revert_is_held_by_windows_and_freezes_only_when_it_respects_policy() {
    use crate::api::{UpgradeWindow, WindowKind};
    let mut plan = two_group_plan(None);
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    run_to_end(&mut up, &plan, &mut world, 1);
    // Since: prod may only start on Saturday nights, and a freeze holds every plan now.
    let saturday = UpgradeWindow {
        kind: WindowKind::Allow,
        schedule: "0 22 * * 6".into(),
        duration: "2h".into(),
        time_zone: None,
    };
    let frozen_now = a_freeze("incident", "2026-06-01T00:00", "2026-06-02T00:00", None, "UTC");
    world.freezes = vec![frozen_now];
    // The window is in the reverted run's frozen plan only if it was when that run began: edit
    // the snapshot's plan as the run would have frozen it.
    plan.spec.rollout_groups[1].resource_upgrade_windows = Some(vec![saturday]);
    let mut windowed_up = a_run("up2", t(40), false);
    let mut world2 = two_group_world();
    run_to_end(&mut windowed_up, &two_group_plan(None), &mut world2, 41);
    world2.frozen_plans.insert("up2".into(), plan.spec.clone());
    let shards = world2.written["up2"].clone();
    let frozen = crate::engine::snapshot::read_frozen(shards.iter().map(|(n, d)| (n.as_str(), d))).unwrap();
    let rewritten = Frozen::new(frozen.snapshot, plan.spec.clone()).unwrap();
    world2
        .written
        .insert("up2".into(), snapshot_config_maps("up2", &rewritten));
    world2.freezes = world.freezes.clone();

    let emergency = a_revert("up2-back", "up2", RevertResources::Upgraded, false, t(60));
    let s = revert_pass(&emergency, Some(&windowed_up), &plan, &[], &world2, t(61));
    assert_eq!(
        patched(&s).len(),
        2,
        "neither the freeze nor the window holds an emergency revert"
    );
    assert!(find_condition(&s.status.conditions, reasons::FROZEN).is_none());
    assert!(s.frozen.as_ref().unwrap().plan.rollout_groups[0]
        .resource_upgrade_windows
        .is_none());

    let careful = a_revert("up2-careful", "up2", RevertResources::Upgraded, true, t(60));
    let s = revert_pass(&careful, Some(&windowed_up), &plan, &[], &world2, t(61));
    assert!(patched(&s).is_empty(), "held: {:?}", patched(&s));
    assert_eq!(
        condition(&s, reasons::FROZEN),
        (reasons::FREEZE_ACTIVE, ConditionStatus::True)
    );
    let blocked = &s.evaluation.as_ref().unwrap().held_by;
    assert!(
        blocked.contains(&Blocked::Frozen) && blocked.contains(&Blocked::WindowClosed),
        "{blocked:?}"
    );
}

#[test]
fn a_revert_that_cannot_be_taken_fails_at_once_saying_why_table() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    run_to_end(&mut up, &plan, &mut world, 1);
    let mut other_plans = up.clone();
    other_plans.spec.upgrade_plan_ref.name = "q".into();
    let never_started = a_run("idle", t(0), false);
    let mut lost = world.clone();
    lost.written.remove("up");
    let mut tampered = world.clone();
    let mut shards = tampered.written["up"].clone();
    shards[0].1.insert("resources".into(), r#"{"groups":[]}"#.into());
    tampered.written.insert("up".into(), shards);
    let tampered_fact = |run: &UpgradeRun| {
        let refs = run.status.as_ref().unwrap().resource_list_refs.clone();
        SnapshotFact::Tampered {
            config_map: refs[0].name.clone(),
        }
    };
    let cases: Vec<(&str, RevertedFact<'_>, &str, &str)> = vec![
        (
            "gone",
            RevertedFact::NotFound,
            reasons::REVERT_NOT_POSSIBLE,
            "UpgradeRun \"up\" to revert does not exist",
        ),
        (
            "of another plan",
            RevertedFact::Found {
                run: &other_plans,
                snapshot: world.snapshot_of(&up),
            },
            reasons::REVERT_NOT_POSSIBLE,
            "UpgradeRun \"up\" to revert is a run of UpgradePlan \"q\", not of \"p\"",
        ),
        (
            "never started",
            RevertedFact::Found {
                run: &never_started,
                snapshot: SnapshotFact::Absent,
            },
            reasons::REVERT_NOT_POSSIBLE,
            "UpgradeRun \"up\" to revert never took a snapshot: it upgraded nothing",
        ),
        (
            "its snapshot lost",
            RevertedFact::Found {
                run: &up,
                snapshot: lost.snapshot_of(&up),
            },
            reasons::SNAPSHOT_MISSING,
            "cannot revert UpgradeRun \"up\": snapshot ConfigMap up-resource-snapshot is missing or unreadable",
        ),
        (
            "its snapshot changed",
            RevertedFact::Found {
                run: &up,
                snapshot: tampered_fact(&up),
            },
            reasons::SNAPSHOT_TAMPERED,
            "cannot revert UpgradeRun \"up\": snapshot ConfigMap up-resource-snapshot does not match the digest recorded at 2026-06-01T10:01:00Z",
        ),
    ];
    for (name, reverted, reason, message) in cases {
        let revert = a_revert("up-back", "up", RevertResources::All, false, t(30));
        let mut f = facts(Some(&plan), &[], &world, &revert, t(31));
        f.reverted = reverted.clone();
        let s = step(&revert, &f, &world);
        assert_eq!(s.status.state, RunState::Failed, "{name}");
        let c = find_condition(&s.status.conditions, reasons::RUN_SUCCEEDED).unwrap();
        assert_eq!((c.reason.as_str(), c.message.as_str()), (reason, message), "{name}");
        assert!(s.binding_patches.is_empty() && s.write_snapshot.is_empty(), "{name}");
        assert!(reasons_announced(&s).contains(&events::UPGRADE_RUN_FAILED), "{name}");
        // A preview that cannot be taken says why and waits: a dormant run cannot fail.
        let mut preview = a_revert("up-preview", "up", RevertResources::All, false, t(30));
        preview.spec.suspend = true;
        let mut f = facts(Some(&plan), &[], &world, &preview, t(31));
        f.reverted = reverted;
        let s = step(&preview, &f, &world);
        assert_eq!(s.status.state, RunState::Pending, "{name}: a preview");
        assert_eq!(
            condition(&s, reasons::RUN_SUCCEEDED),
            (reason, ConditionStatus::False),
            "{name}"
        );
        assert!(s.finished.is_none(), "{name}: a preview counts nothing");
    }
}

#[test]
fn a_revert_skips_the_resources_whose_target_revision_is_gone_and_moves_the_rest() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    // r0 came from v0.9: its revision is gone since.
    Arc::make_mut(&mut world.bindings[0])
        .status
        .get_or_insert_with(Default::default)
        .last_applied_version = "v0.9".into();
    let mut spec = plan.spec.clone();
    spec.upgrade_path.from = vec!["v1".into(), "v0.9".into()];
    let plan = UpgradePlan { spec, ..plan };
    let mut up = a_run("up", t(0), false);
    run_to_end(&mut up, &plan, &mut world, 1);
    world.revisions.retain(|v| v != "v0.9");

    let mut revert = a_revert("up-back", "up", RevertResources::All, false, t(30));
    let s = revert_pass(&revert, Some(&up), &plan, &[], &world, t(31));
    let c = find_condition(&s.status.conditions, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(
        (c.status, c.message.as_str()),
        (
            ConditionStatus::False,
            "PromiseRevision for promise \"redis\" version(s) v0.9 not found: their resources are skipped"
        ),
        "a revert never waits for a revision"
    );
    apply(&mut revert, &s, &mut world);
    for i in 2..4 {
        kratix_succeeds(&mut world, i, t(32));
    }
    let s = revert_pass(&revert, Some(&up), &plan, &[], &world, t(33));
    assert_eq!(
        patched(&s),
        [("r1".into(), "v1".into(), false)],
        "r0 skipped, r1 goes back"
    );
    let skipped: Vec<_> = s
        .announce
        .iter()
        .filter(|a| a.reason == events::RESOURCE_SKIPPED)
        .map(|a| a.note.as_str())
        .collect();
    assert_eq!(skipped, ["Resource ns/r0 skipped: revision v0.9 no longer exists"]);
}

#[test]
fn a_run_failing_in_a_group_with_on_failure_revert_creates_its_revert_once() {
    let plan = two_group_plan(Some(crate::api::OnFailure::Revert));
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    let s = pass(&up, Some(&plan), &[], &world, t(1));
    assert!(s.create_revert.is_none());
    apply(&mut up, &s, &mut world);
    world.kratix_fails(0, t(2));
    let failing = pass(&up, Some(&plan), &[], &world, t(3));
    assert_eq!(failing.status.state, RunState::Failed);
    let created = &failing.create_revert.as_ref().expect("its revert").0;
    assert_eq!(created.metadata.name.as_deref(), Some("up-revert"));
    assert_eq!(
        created.spec.revert_of,
        Some(RevertOf {
            name: "up".into(),
            resources: RevertResources::All
        })
    );
    assert!(!created.spec.suspend && !created.spec.respect_policy);
    assert_eq!(created.plan_name(), "p");
    assert_eq!(
        failing.own.annotations.get(REVERTED_BY_ANNOTATION).map(String::as_str),
        Some("up-revert"),
        "recorded by the run's own conditional patch"
    );
    let names = write_names(&failing, up.status.as_ref());
    let (revert_at, status_at) = (
        names.iter().position(|w| *w == "revert").unwrap(),
        names.iter().position(|w| *w == "status").unwrap(),
    );
    assert!(
        revert_at < status_at,
        "created before the status that ends the run: {names:?}"
    );
    let announced: Vec<_> = failing
        .announce
        .iter()
        .filter(|a| a.reason == events::REVERT_CREATED)
        .collect();
    assert_eq!(announced.len(), 1);
    assert!(announced[0]
        .note
        .contains("rollout group \"dev\" failed with onFailure: Revert"));

    // A crash after its own patch and the create, before the status. The revert, reconciled
    // first, neither supersedes the run nor starts: it waits for the run to record its failure.
    failing.own.apply(&mut up).unwrap();
    let mut revert = created.clone();
    revert.metadata.uid = Some("up-revert-uid".into());
    revert.metadata.creation_timestamp = Some(Time(crate::time::to_jiff(t(3))));
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(4));
    assert!(s.supersede.is_empty(), "{:?}", s.supersede);
    assert_eq!(
        condition(&s, reasons::REVERT_READY),
        (reasons::REVERTED_RUN_ENDING, ConditionStatus::False)
    );
    assert!(s.write_snapshot.is_empty() && s.binding_patches.is_empty());
    apply(&mut revert, &s, &mut world);
    // The run, not superseded by its revert, asks again (AlreadyExists) and records its failure.
    let replay = pass(&up, Some(&plan), &[RunFacts::of(&revert)], &world, t(4));
    assert_eq!(
        replay.status.state,
        RunState::Failed,
        "its failure is recorded, not hidden"
    );
    assert!(replay.supersede.is_empty() && replay.status.superseded_by.is_none());
    assert_eq!(
        replay.create_revert.as_ref().map(|c| c.0.metadata.name.clone()),
        Some(Some("up-revert".into()))
    );
    assert!(replay.own.annotations.is_empty());
    // Ended, it never does anything again; and its revert goes.
    apply(&mut up, &replay, &mut world);
    assert!(pass(&up, Some(&plan), &[], &world, t(5)).create_revert.is_none());
    let s = revert_pass(&revert, Some(&up), &plan, &[RunFacts::of(&up)], &world, t(5));
    assert_eq!(
        condition(&s, reasons::REVERT_READY),
        (reasons::REVERTED_RUN_ENDED, ConditionStatus::True)
    );
    assert_eq!(
        patched(&s),
        [("r0".into(), "v1".into(), true), ("r1".into(), "v1".into(), true)],
        "r0 failed and r1 still in flight when the run failed: both back to v1, Kratix asked to run it again"
    );

    // Without onFailure, or failing in a group without it, or as a revert itself: none.
    for (what, plan, run) in [
        ("onFailure omitted", two_group_plan(None), a_run("up", t(0), false)),
        (
            "a revert never reverts itself",
            two_group_plan(Some(crate::api::OnFailure::Revert)),
            a_revert("x-back", "x", RevertResources::All, false, t(0)),
        ),
    ] {
        let mut world = two_group_world();
        let mut run = run;
        if run.spec.revert_of.is_some() {
            // x upgraded dev, then the revert starts moving it back and Kratix fails it.
            let mut x = a_run("x", t(0), false);
            let s = pass(&x, Some(&plan), &[], &world, t(1));
            apply(&mut x, &s, &mut world);
            kratix_succeeds(&mut world, 0, t(1));
            kratix_succeeds(&mut world, 1, t(1));
            let s = pass(&x, Some(&plan), &[], &world, t(2));
            apply(&mut x, &s, &mut world);
            // The revert begins with prod, which x had started: Kratix runs v1 there again.
            let s = revert_pass(&run, Some(&x), &plan, &[], &world, t(3));
            apply(&mut run, &s, &mut world);
            kratix_succeeds(&mut world, 2, t(3));
            kratix_succeeds(&mut world, 3, t(3));
            let s = revert_pass(&run, Some(&x), &plan, &[], &world, t(4));
            apply(&mut run, &s, &mut world);
            let b = Arc::make_mut(&mut world.bindings[0]);
            let st = b.status.get_or_insert_with(Default::default);
            st.failed_version = Some("v1".into());
            st.conditions = vec![crate::api::kratix::BindingCondition {
                type_: crate::api::kratix::UPGRADE_SUCCEEDED.into(),
                status: "False".into(),
                reason: crate::api::kratix::UPGRADE_FAILED.into(),
                message: "boom".into(),
                last_transition_time: Some(t(5)),
            }];
            let s = revert_pass(&run, Some(&x), &plan, &[], &world, t(6));
            assert_eq!(s.status.state, RunState::Failed, "{what}");
            assert!(s.create_revert.is_none(), "{what}");
            continue;
        }
        let s = pass(&run, Some(&plan), &[], &world, t(1));
        apply(&mut run, &s, &mut world);
        world.kratix_fails(0, t(2));
        let s = pass(&run, Some(&plan), &[], &world, t(3));
        assert_eq!(s.status.state, RunState::Failed, "{what}");
        assert!(s.create_revert.is_none() && s.own.annotations.is_empty(), "{what}");
    }
}

#[test]
fn a_revert_whose_target_revision_goes_mid_run_skips_what_it_started_and_says_so() {
    let plan = two_group_plan(None);
    let mut world = two_group_world();
    let mut up = a_run("up", t(0), false);
    run_to_end(&mut up, &plan, &mut world, 1);
    let mut revert = a_revert("up-back", "up", RevertResources::Upgraded, false, t(30));
    let s = revert_pass(&revert, Some(&up), &plan, &[], &world, t(31));
    assert_eq!(patched(&s).len(), 2, "prod started back to v1");
    apply(&mut revert, &s, &mut world);
    // v1's PromiseRevision is deleted while prod's two are in flight: Kratix cannot run them.
    world.revisions.retain(|v| v != "v1");
    let s = revert_pass(&revert, Some(&up), &plan, &[], &world, t(32));
    let c = find_condition(&s.status.conditions, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(
        (c.status, c.message.as_str()),
        (
            ConditionStatus::False,
            "PromiseRevision for promise \"redis\" version(s) v1 not found: their resources are skipped"
        )
    );
    assert_eq!(s.status.state, RunState::Completed, "it ends: nothing waits for ever");
    let skipped: Vec<(i64, i64)> = s
        .status
        .rollout_groups
        .iter()
        .map(|g| (g.succeeded, g.skipped))
        .collect();
    assert_eq!(skipped, [(0, 2), (0, 2)]);
}

/// One budget's facts: `name`, at most `max` in flight, `others` the other runs under it.
fn one_budget(name: &str, max: usize, others: Vec<crate::engine::upgrade_budget::BudgetRun>) -> Vec<BudgetFacts> {
    vec![BudgetFacts {
        name: name.into(),
        max,
        others,
        sent: 0,
    }]
}

/// `run`'s step at `now` under `budgets`.
fn step_under(
    plan: &UpgradePlan,
    run: &UpgradeRun,
    world: &World,
    budgets: &[BudgetFacts],
    now: DateTime<Utc>,
) -> Step {
    step(
        run,
        &Facts {
            budgets,
            ..facts(Some(plan), &[], world, run, now)
        },
        world,
    )
}

#[test]
fn a_budget_shares_its_free_units_holds_the_rest_and_says_which() {
    use crate::engine::upgrade_budget::BudgetRun;
    let plan = valid_plan(5);
    let mut world = World::with(4);
    let mut run = a_pending_run("r", t(0));
    // Another plan's run, admitted earlier, has one upgrade in flight and waits for more.
    let other = |in_flight: usize, waiting: bool| BudgetRun {
        active: true,
        name: "other-plan-run".into(),
        admitted: t(-10),
        in_flight,
        held_by: waiting.then(|| "saturday".into()),
    };
    let saturday = |others: Vec<BudgetRun>| one_budget("saturday", 3, others);
    let under =
        |run: &UpgradeRun, world: &World, budgets: &[BudgetFacts], now| step_under(&plan, run, world, budgets, now);
    // Two free units, two waiting runs: one each.
    let s = under(&run, &world, &saturday(vec![other(1, true)]), t(1));
    assert_eq!(started(&s), 1);
    let c = find_condition(&s.status.conditions, reasons::BUDGETED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            reasons::BUDGET_EXHAUSTED,
            "UpgradeBudget \"saturday\": 1/3 in flight"
        )
    );
    apply(&mut run, &s, &mut world);
    // One free unit: the older run's. This run starts nothing and says the budget holds it.
    let s = under(&run, &world, &saturday(vec![other(1, true)]), t(2));
    assert_eq!(started(&s), 0);
    assert_eq!(
        find_condition(&s.status.conditions, reasons::BUDGETED).map(|c| c.message.as_str()),
        Some("UpgradeBudget \"saturday\": 2/3 in flight")
    );
    assert!(matches!(&s.gauges, Gauges::Set(g) if g.blocked.iter().any(|(_, r)| *r == "BudgetExhausted")));
    apply(&mut run, &s, &mut world);
    // The other run finished: every free unit is this run's, and it still wants more.
    let s = under(&run, &world, &saturday(vec![]), t(3));
    assert_eq!(started(&s), 2);
    assert_eq!(
        condition(&s, reasons::BUDGETED),
        (reasons::BUDGET_EXHAUSTED, ConditionStatus::True)
    );
    apply(&mut run, &s, &mut world);
    // The budget is deleted: nothing holds the run, and the condition says so.
    world.kratix_applies();
    let s = under(&run, &world, &[], t(4));
    assert_eq!(started(&s), 1);
    assert_eq!(
        condition(&s, reasons::BUDGETED),
        (reasons::WITHIN_BUDGET, ConditionStatus::False)
    );
}

#[test]
fn a_run_within_its_budget_says_so() {
    let plan = valid_plan(2);
    let world = World::with(2);
    let run = a_pending_run("r", t(0));
    let s = step_under(&plan, &run, &world, &one_budget("kratix", 10, vec![]), t(1));
    assert_eq!(started(&s), 2);
    let c = find_condition(&s.status.conditions, reasons::BUDGETED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::False,
            reasons::WITHIN_BUDGET,
            "within UpgradeBudget kratix"
        )
    );
}

#[test]
fn a_run_held_by_other_runs_units_looks_again_and_by_its_own_does_not() {
    use crate::engine::upgrade_budget::{BudgetRun, RECHECK};
    let plan = valid_plan(5);
    let mut world = World::with(2);
    let mut run = a_pending_run("r", t(0));
    let budget = |others: Vec<BudgetRun>| one_budget("one", 1, others);
    let under =
        |run: &UpgradeRun, world: &World, budgets: &[BudgetFacts], now| step_under(&plan, run, world, budgets, now);
    let s = under(&run, &world, &budget(vec![]), t(1));
    assert_eq!(started(&s), 1);
    apply(&mut run, &s, &mut world);
    // Its own upgrade holds the only unit: that upgrade's end wakes it.
    let s = under(&run, &world, &budget(vec![]), t(2));
    assert_eq!(
        condition(&s, reasons::BUDGETED),
        (reasons::BUDGET_EXHAUSTED, ConditionStatus::True)
    );
    assert!(
        s.wake_at.is_none_or(|at| at > t(2) + RECHECK),
        "no budget recheck: {:?}",
        s.wake_at
    );
    // Another plan's run holds it: looked at again, as that run's upgrade does not wake this one.
    world.kratix_applies();
    let other = BudgetRun {
        active: true,
        name: "elsewhere".into(),
        admitted: t(-5),
        in_flight: 1,
        held_by: None,
    };
    let s = under(&run, &world, &budget(vec![other]), t(3));
    assert_eq!(started(&s), 0);
    assert_eq!(s.wake_at, Some(t(3) + RECHECK));
}

#[test]
fn only_progress_is_the_succeeded_counts_and_a_held_runs_budget_count() {
    use crate::engine::upgrade_budget::texts::budgeted;
    let held = |message: String| Condition {
        type_: reasons::BUDGETED.into(),
        status: ConditionStatus::True,
        reason: reasons::BUDGET_EXHAUSTED.into(),
        message,
        last_transition_time: t(0),
        observed_generation: None,
    };
    let base = UpgradeRunStatus {
        state: RunState::InProgress,
        total_resources: 10,
        completed_resources: 3,
        rollout_groups: vec![GroupStatus {
            name: "all".into(),
            total: 10,
            succeeded: 3,
            ..Default::default()
        }],
        conditions: vec![held(budgeted("saturday", 4, 5))],
        ..Default::default()
    };
    let changed = |f: &dyn Fn(&mut UpgradeRunStatus)| {
        let mut s = base.clone();
        f(&mut s);
        s
    };
    let cases: Vec<(&str, UpgradeRunStatus, bool)> = vec![
        ("nothing changed: nothing to write", base.clone(), false),
        (
            "more succeeded",
            changed(&|s| {
                s.completed_resources = 4;
                s.rollout_groups[0].succeeded = 4;
            }),
            true,
        ),
        (
            "the same budget holds it at another count",
            changed(&|s| s.conditions = vec![held(budgeted("saturday", 5, 5))]),
            true,
        ),
        (
            "another budget holds it",
            changed(&|s| s.conditions = vec![held(budgeted("kratix", 5, 5))]),
            false,
        ),
        (
            "no longer held",
            changed(&|s| {
                s.conditions[0].status = ConditionStatus::False;
                s.conditions[0].reason = reasons::WITHIN_BUDGET.into();
                s.conditions[0].message = "within UpgradeBudget saturday".into();
            }),
            false,
        ),
        (
            "a failure recorded",
            changed(&|s| s.rollout_groups[0].failed = 1),
            false,
        ),
        (
            "one more verifying",
            changed(&|s| s.rollout_groups[0].verifying = 1),
            false,
        ),
        (
            "the group completed",
            changed(&|s| s.rollout_groups[0].phase = Some(GroupPhase::Completed)),
            false,
        ),
        ("the run ended", changed(&|s| s.state = RunState::Completed), false),
    ];
    for (case, after, want) in cases {
        assert_eq!(only_progress(&base, &after), want, "{case}");
    }
}

/// A shell for the send loop ([`crate::send`]) that records each request and answers as told:
/// the loop's order, its stops and its withholding, without an API server.
#[derive(Default)]
struct Recording {
    log: std::cell::RefCell<Vec<String>>,
    /// The run's own patch (or its status) refused as decided from a stale copy.
    refuse_own: bool,
    refuse_status: bool,
    /// The admission of the pass's starts ends once this many were sent.
    admission_ends_after: Option<usize>,
    sent: std::cell::Cell<usize>,
    memory: std::cell::RefCell<crate::send::RunMemory>,
}

impl Recording {
    fn note(&self, what: impl Into<String>) {
        self.log.borrow_mut().push(what.into());
    }
    fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

impl crate::send::Shell for Recording {
    type Error = std::convert::Infallible;
    type Slot<'a> = ();
    async fn patch_own(&self, _: &RunPatch) -> Result<crate::send::RunWrite, Self::Error> {
        self.note("own");
        Ok(match self.refuse_own {
            true => crate::send::RunWrite::Refused,
            false => crate::send::RunWrite::Taken(Some("2".into())),
        })
    }
    async fn adopt_approvals(&self, _: &[crate::engine::write::ApprovalPatch]) -> Result<(), Self::Error> {
        self.note("approvals");
        Ok(())
    }
    async fn supersede(&self, p: &RunPatch) -> Result<bool, Self::Error> {
        self.note(format!("supersede {}", p.run));
        Ok(true)
    }
    async fn run_is_at(&self, _: &str, version: Option<&str>) -> Result<bool, Self::Error> {
        self.note(format!("read run at {version:?}"));
        Ok(true)
    }
    async fn write_snapshot(
        &self,
        _: &UpgradeRun,
        _: &[SnapshotConfigMap],
        _: &Arc<Frozen>,
    ) -> Result<(), Self::Error> {
        self.note("snapshot");
        Ok(())
    }
    fn memory<R>(&self, f: impl FnOnce(&mut crate::send::RunMemory) -> R) -> R {
        f(&mut self.memory.borrow_mut())
    }
    fn now(&self) -> DateTime<Utc> {
        t(1)
    }
    fn runs_in_progress(&self) -> usize {
        1
    }
    async fn list_announced(&self, _: &UpgradeRun) -> Result<Option<Announced>, Self::Error> {
        self.note("list events");
        Ok(Some(Announced::default()))
    }
    fn lost_starts(
        &self,
        _: &UpgradeRun,
        _: &crate::engine::snapshot::Snapshot,
        _: &str,
        _: &Announced,
    ) -> Vec<String> {
        Vec::new()
    }
    async fn slot(&self) -> Self::Slot<'_> {}
    fn still_admitted(&self, _: &crate::engine::admitted::Admitted) -> Result<(), crate::engine::admitted::Ended> {
        match self.admission_ends_after {
            Some(n) if self.sent.get() >= n => Err(crate::engine::admitted::Ended::RunStoodDown("cancelled")),
            _ => Ok(()),
        }
    }
    async fn patch_binding(&self, p: &BindingPatch) -> Result<bool, Self::Error> {
        self.sent.set(self.sent.get() + 1);
        self.note(format!("patch {}", p.resource.binding));
        Ok(false)
    }
    fn wrote_binding(&self, _: &UpgradeRun, _: &BindingPatch) {}
    fn started(&self, _: &UpgradeRun, _: &Arc<crate::engine::snapshot::SnapshotResource>) {}
    async fn withheld(&self, _: &UpgradeRun, patches: &[&BindingPatch], why: &crate::engine::admitted::Ended) {
        self.note(format!("withheld {} ({why})", patches.len()));
    }
    async fn event(&self, _: &UpgradeRun, a: &Announcement) -> Result<(), Self::Error> {
        self.note(format!("event {}", a.reason));
        Ok(())
    }
    async fn create_run(&self, r: &UpgradeRun) -> Result<(), Self::Error> {
        self.note(format!("create {}", r.metadata.name.clone().unwrap_or_default()));
        Ok(())
    }
    async fn flush_counts(&self, _: &UpgradeRun) {}
    fn gauges(&self, _: &UpgradeRun, _: &Gauges) {}
    async fn write_status(
        &self,
        _: &UpgradeRun,
        s: &UpgradeRunStatus,
        version: Option<&str>,
    ) -> Result<crate::send::RunWrite, Self::Error> {
        self.note(format!("status {:?} at {version:?}", s.state));
        Ok(match self.refuse_status {
            true => crate::send::RunWrite::Refused,
            false => crate::send::RunWrite::Taken(None),
        })
    }
    fn count(&self, _: &UpgradeRun, _: &Counts<'_>) -> Result<(), Self::Error> {
        self.note("count");
        Ok(())
    }
    async fn release(&self, _: &UpgradeRun, _: &crate::engine::write::Release) -> Result<bool, Self::Error> {
        self.note("release");
        Ok(true)
    }
    fn refused(&self, _: &UpgradeRun) {
        self.note("refused");
    }
}

/// The first pass of a run of three resources at `maxConcurrent: 3`: its metadata, snapshot,
/// three starts and status (the run at resourceVersion 1).
fn first_pass() -> (UpgradeRun, Step) {
    let world = World::with(3);
    let mut run = a_run("r", t(0), false);
    run.metadata.resource_version = Some("1".into());
    let step = pass(&run, Some(&valid_plan(3)), &[], &world, t(1));
    assert_eq!(started(&step), 3);
    (run, step)
}

fn send(shell: &Recording, run: &UpgradeRun, step: &Step) -> crate::send::Sent {
    futures::executor::block_on(crate::send::carry_out(shell, run, step)).expect("infallible")
}

#[test]
fn the_send_loop_sends_a_step_in_order_the_status_last_conditional_on_the_run_as_its_own_patch_left_it() {
    let (run, step) = first_pass();
    let shell = Recording::default();
    let sent = send(&shell, &run, &step);
    assert!(matches!(sent, crate::send::Sent::Done { .. }), "{sent:?}");
    let log = shell.log();
    let starts = "event ResourceUpgradeStarted";
    assert_eq!(
        log.iter()
            .filter(|l| l.as_str() != starts && !l.starts_with("event"))
            .collect::<Vec<_>>(),
        [
            "own",
            "read run at Some(\"2\")",
            "snapshot",
            "list events",
            "patch r0-binding",
            "patch r1-binding",
            "patch r2-binding",
            "status InProgress at Some(\"2\")",
            "count"
        ],
        "{log:#?}"
    );
    assert_eq!(
        log.iter().filter(|l| l.as_str() == starts).count(),
        3,
        "one start event per patch taken"
    );
}

#[test]
fn the_send_loop_withholds_the_starts_left_once_their_admission_ends_and_writes_the_rest() {
    let (run, step) = first_pass();
    let shell = Recording {
        admission_ends_after: Some(1),
        ..Default::default()
    };
    let sent = send(&shell, &run, &step);
    assert_eq!(sent, crate::send::Sent::Again, "the next pass decides again, at once");
    let log = shell.log();
    let patches: Vec<_> = log.iter().filter(|l| l.starts_with("patch")).collect();
    assert_eq!(
        patches,
        ["patch r0-binding"],
        "nothing leaves after the cancel: {log:#?}"
    );
    assert!(
        log.contains(&"withheld 2 (the run was cancelled)".to_string()),
        "{log:#?}"
    );
    assert_eq!(
        log.iter()
            .filter(|l| l.as_str() == "event ResourceUpgradeStarted")
            .count(),
        1,
        "only the sent start is announced"
    );
    assert!(
        log.iter().any(|l| l.starts_with("status")),
        "the status still records what was sent"
    );
}

#[test]
fn the_send_loop_sends_nothing_after_a_refused_own_patch_and_counts_nothing_after_a_refused_status() {
    let (run, step) = first_pass();
    let shell = Recording {
        refuse_own: true,
        ..Default::default()
    };
    assert_eq!(send(&shell, &run, &step), crate::send::Sent::Again);
    assert_eq!(
        shell.log(),
        ["own", "refused"],
        "decided from a stale copy: nothing more goes out"
    );

    let shell = Recording {
        refuse_status: true,
        ..Default::default()
    };
    assert_eq!(send(&shell, &run, &step), crate::send::Sent::Again);
    let log = shell.log();
    assert_eq!(log.last().map(String::as_str), Some("refused"), "{log:#?}");
    assert!(
        !log.iter().any(|l| l == "count"),
        "a status refused is not counted: {log:#?}"
    );
}
