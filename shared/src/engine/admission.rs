//! Admission and superseding (spec §5.2), and the plan status fields derived from its runs
//! (`phase`, `activeRunRef`, `lastRun`, spec §3.2).
//!
//! One run rolls out per plan at a time and the newest wins. A preview (a run created with
//! `suspend: true`) never supersedes anything and is never the plan's active run.

use chrono::{DateTime, Utc};

use std::collections::BTreeMap;

use crate::api::{
    find_condition, reasons, LastRun, PlanPhase, RevertOf, RunState, UpgradePlan, UpgradePlanRef, UpgradeRun,
    UpgradeRunSpec, ADMITTED_AT_ANNOTATION, PLAN_LABEL, PREVIEW_ANNOTATION, REVERTED_BY_ANNOTATION,
    SCHEDULED_AT_ANNOTATION, SUPERSEDED_BY_ANNOTATION,
};

/// What admission needs to know about a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    pub name: String,
    pub created: DateTime<Utc>,
    pub state: RunState,
    pub preview: bool,
    pub superseded: bool,
    /// The revert this run created as it failed (`onFailure: Revert`, spec §13.7), recorded on it
    /// before its failure is: the two never supersede each other, and the revert waits until this
    /// run has recorded its end.
    pub reverted_by: Option<String>,
}

impl RunFacts {
    pub fn of(run: &UpgradeRun) -> RunFacts {
        let status = run.status.clone().unwrap_or_default();
        RunFacts {
            name: run.metadata.name.clone().unwrap_or_default(),
            created: admitted_at(run),
            state: status.state,
            preview: is_preview(run),
            superseded: superseded_by(run).is_some(),
            reverted_by: annotation(run, REVERTED_BY_ANNOTATION).map(str::to_string),
        }
    }

    /// Pending or InProgress, not superseded, not a preview: a candidate for the plan's active run.
    pub fn contends(&self) -> bool {
        self.state.is_active() && !self.superseded && !self.preview
    }

    fn order_key(&self) -> (DateTime<Utc>, &str) {
        (self.created, &self.name)
    }
}

fn annotation<'r>(run: &'r UpgradeRun, key: &str) -> Option<&'r str> {
    run.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A run is a preview when it was admitted while created suspended (recorded by annotation) and
/// has not been admitted for rolling out since (resuming it records that moment, spec §5.2), or
/// when it is still unadmitted and suspended.
pub fn is_preview(run: &UpgradeRun) -> bool {
    let annotated = annotation(run, PREVIEW_ANNOTATION) == Some("true");
    let resumed = annotation(run, ADMITTED_AT_ANNOTATION).is_some();
    let unadmitted = run.status.as_ref().map(|s| s.state).unwrap_or_default() == RunState::Unresolved;
    (annotated && !resumed) || (unadmitted && created_suspended(run))
}

/// Whether the run was *created* with `suspend: true` (spec §5.10: only that makes a preview):
/// its spec was never changed since (generation 1). A run suspended right after it was created,
/// before the controller first saw it, is a suspended run, not a preview.
pub fn created_suspended(run: &UpgradeRun) -> bool {
    run.spec.suspend && run.metadata.generation.is_none_or(|g| g <= 1)
}

/// The run that superseded `run`: recorded in its status, or requested by the newer run's
/// annotation and not recorded yet (only a run's own reconcile writes its status).
pub fn superseded_by(run: &UpgradeRun) -> Option<&str> {
    run.status
        .as_ref()
        .and_then(|s| s.superseded_by.as_deref())
        .or_else(|| annotation(run, SUPERSEDED_BY_ANNOTATION))
}

/// A superseded run, or a preview not resumed (spec §5.2): it never acts again (a preview until
/// resumed): no evaluation, gate query, event, counter or `lastRun`, and changes of bindings,
/// health records and freezes need not wake it. A preview whose `suspend` was just cleared is
/// being admitted: not dormant.
pub fn is_dormant(run: &UpgradeRun) -> bool {
    superseded_by(run).is_some() || waits_as_preview(run)
}

/// A preview not resumed yet: dormant until its `suspend` is cleared (spec §5.2).
pub fn waits_as_preview(run: &UpgradeRun) -> bool {
    is_preview(run) && run.spec.suspend
}

/// Whether `run` asks Prometheus for its plan's signal gates (spec §13.3): the plan's active run
/// — also while something else holds it (suspended, frozen), so that its gates' recorded state
/// and failAfter clocks stay current — never one that ended or is dormant. Their gauges go with
/// the active run.
pub fn reads_gates(run: &UpgradeRun) -> bool {
    let ended = run.status.as_ref().is_some_and(|s| s.state.is_terminal());
    !ended && !is_dormant(run)
}

/// The instant a run was admitted for rolling out, which orders runs in admission (the newest
/// wins): for a resumed preview the moment it was resumed (recorded by annotation), otherwise
/// its creation.
pub fn admitted_at(run: &UpgradeRun) -> DateTime<Utc> {
    annotation(run, ADMITTED_AT_ANNOTATION)
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| crate::time::created_at(&run.metadata))
}

/// How a run came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerKind {
    /// Created by the controller for a trigger (it carries the scheduled-at annotation).
    Scheduled,
    /// Created by hand with `suspend: true`.
    Preview,
    Manual,
    /// A revert of another run (`spec.revertOf`, spec §13.7), by hand or by `onFailure: Revert`.
    Revert,
}

impl TriggerKind {
    pub fn of(run: &UpgradeRun) -> TriggerKind {
        let scheduled = run
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(SCHEDULED_AT_ANNOTATION));
        if run.spec.revert_of.is_some() {
            TriggerKind::Revert
        } else if scheduled {
            TriggerKind::Scheduled
        } else if is_preview(run) {
            TriggerKind::Preview
        } else {
            TriggerKind::Manual
        }
    }

    /// As the plugin shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            TriggerKind::Scheduled => "scheduled",
            TriggerKind::Preview => "preview",
            TriggerKind::Manual => "manual",
            TriggerKind::Revert => "revert",
        }
    }

    /// The `trigger` label of `upgradeplan_runs_total` (spec §9.1, §13.7): a preview is a manual
    /// run; a revert, resumed from a preview or not, is a revert.
    pub fn metric_label(self) -> &'static str {
        match self {
            TriggerKind::Scheduled => "scheduled",
            TriggerKind::Preview | TriggerKind::Manual => "manual",
            TriggerKind::Revert => "revert",
        }
    }
}

/// Why a new run is made, and what it is called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewRun {
    /// For the plan's trigger `at`, named by [`super::schedule`] from it.
    Scheduled { name: String, at: DateTime<Utc> },
    /// By hand (`kubectl upgradeplan run`): named `name`, or `<plan>-<random>` by the API server;
    /// a preview is created suspended.
    Manual { name: Option<String>, preview: bool },
    /// A revert of another run of the plan (spec §13.7): by hand (`kubectl upgradeplan revert`,
    /// named `name` or `<plan>-<random>`), or by the controller for `onFailure: Revert`.
    Revert {
        name: Option<String>,
        of: RevertOf,
        respect_policy: bool,
        preview: bool,
    },
}

/// The one constructor of a run object (spec §4.2), for scheduled and manual runs alike: the
/// plan's own labels (so a controller sharded with `--selector` sees its runs) and the plan label
/// (shortened as names are, with its annotation), plus, for a scheduled run, the trigger's
/// `scheduled-at` annotation. The ownerReference to the plan is the controller's to add (its
/// metadata step does, for runs made any way at all).
pub fn new_run(plan: &UpgradePlan, how: NewRun) -> UpgradeRun {
    let plan_name = plan.metadata.name.clone().unwrap_or_default();
    let (name, suspend) = match &how {
        NewRun::Scheduled { name, .. } => (name.clone(), false),
        NewRun::Manual { name, preview } | NewRun::Revert { name, preview, .. } => {
            (name.clone().unwrap_or_default(), *preview)
        }
    };
    let (revert_of, respect_policy) = match &how {
        NewRun::Revert { of, respect_policy, .. } => (Some(of.clone()), *respect_policy),
        _ => (None, false),
    };
    let mut run = UpgradeRun::new(
        &name,
        UpgradeRunSpec {
            upgrade_plan_ref: UpgradePlanRef {
                name: plan_name.clone(),
            },
            suspend,
            cancel: false,
            revert_of,
            respect_policy,
        },
    );
    if name.is_empty() {
        run.metadata.name = None;
        run.metadata.generate_name = Some(format!("{plan_name}-"));
    }
    let mut labels = plan.metadata.labels.clone().unwrap_or_default();
    let mut annotations = BTreeMap::new();
    super::naming::put_name(&mut labels, &mut annotations, PLAN_LABEL, &plan_name);
    if let NewRun::Scheduled { at, .. } = how {
        annotations.insert(SCHEDULED_AT_ANNOTATION.to_string(), crate::time::rfc3339(at));
    }
    run.metadata.labels = Some(labels);
    run.metadata.annotations = Some(annotations).filter(|a| !a.is_empty());
    run
}

/// The outcome of admitting (or re-checking) `run` against its plan's other runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// `run` may roll out; these older active runs must be superseded by it.
    Proceed { supersede: Vec<String> },
    /// A newer active run exists: `run` is superseded by it.
    SupersededBy(String),
}

/// Decides admission of `run` among `others` (the plan's other runs; `run` itself is ignored if
/// present). Called at admission and on every reconcile of an active run, so that two runs
/// admitted at the same moment still end with one winner.
pub fn admit(run: &RunFacts, others: &[RunFacts]) -> Admission {
    if run.preview {
        return Admission::Proceed { supersede: vec![] };
    }
    // A run failing with `onFailure: Revert` and the revert it created do not contend: the run
    // records its failure, and the revert waits for that (see `revert::waits_for`).
    let pair =
        |o: &RunFacts| o.reverted_by.as_deref() == Some(&run.name) || run.reverted_by.as_deref() == Some(&o.name);
    let contenders: Vec<&RunFacts> = others
        .iter()
        .filter(|o| o.name != run.name && o.contends() && !pair(o))
        .collect();
    if let Some(newest) = contenders
        .iter()
        .filter(|o| o.order_key() > run.order_key())
        .max_by(|a, b| a.order_key().cmp(&b.order_key()))
    {
        return Admission::SupersededBy(newest.name.clone());
    }
    let mut supersede: Vec<String> = contenders.iter().map(|o| o.name.clone()).collect();
    supersede.sort();
    Admission::Proceed { supersede }
}

/// The run-derived part of a plan's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunsSummary {
    pub phase: PlanPhase,
    pub active_run_ref: String,
    pub last_run: Option<LastRun>,
}

/// The `lastRun` a terminal run stands for (spec §3.2): only a run that was the plan's active
/// run writes it, so a superseded run and a preview never resumed do not (deleting an old
/// superseded run must not hide the real last result, nor clear the failed-run alert).
pub fn last_run_of(run: &UpgradeRun) -> Option<LastRun> {
    let status = run.status.as_ref()?;
    let result = status.state.result()?;
    if is_dormant(run) {
        return None;
    }
    let cond = find_condition(&status.conditions, reasons::RUN_SUCCEEDED);
    Some(LastRun {
        name: run.metadata.name.clone().unwrap_or_default(),
        finished_at: status.finished_at,
        result,
        reason: cond.map(|c| c.reason.clone()).unwrap_or_default(),
        message: cond.map(|c| c.message.clone()).unwrap_or_default(),
    })
}

/// Phase, active run and last run of a plan from its runs. `previous` is the plan's current
/// `lastRun` (never cleared: a newer finished run replaces it); `finished` is a run that just
/// ended and may be about to disappear (a cancelled run whose finalizer is being released).
pub fn summarize(runs: &[&UpgradeRun], previous: Option<&LastRun>, finished: Option<LastRun>) -> RunsSummary {
    let active = runs
        .iter()
        .map(|r| RunFacts::of(r))
        .filter(RunFacts::contends)
        .max_by(|a, b| a.order_key().cmp(&b.order_key()))
        .map(|f| f.name)
        .unwrap_or_default();
    let last_run = runs
        .iter()
        .filter_map(|r| last_run_of(r))
        .chain(previous.cloned())
        .chain(finished)
        .max_by(|a, b| (a.finished_at, &a.name).cmp(&(b.finished_at, &b.name)));
    RunsSummary {
        phase: if active.is_empty() {
            PlanPhase::Available
        } else {
            PlanPhase::Running
        },
        active_run_ref: active,
        last_run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Condition, ConditionStatus, RunResult, UpgradeRunStatus};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Scheduled and manual runs are made by one constructor: the same labels, and only what
    /// tells them apart differs (spec §4.2).
    #[test]
    fn scheduled_and_manual_runs_carry_the_same_labels() {
        let long = "p".repeat(100);
        for plan_name in ["redis-v1-to-v2", long.as_str()] {
            let mut plan = UpgradePlan::new(plan_name, Default::default());
            plan.metadata.labels = Some([("team".to_string(), "payments".to_string())].into());
            let at = utc("2026-06-01T02:00:00Z");
            let scheduled = new_run(
                &plan,
                NewRun::Scheduled {
                    name: format!("{plan_name}-20260601-0200"),
                    at,
                },
            );
            let manual = new_run(
                &plan,
                NewRun::Manual {
                    name: None,
                    preview: false,
                },
            );
            let preview = new_run(
                &plan,
                NewRun::Manual {
                    name: Some("try".into()),
                    preview: true,
                },
            );
            for run in [&scheduled, &manual, &preview] {
                assert_eq!(run.metadata.labels, scheduled.metadata.labels, "{plan_name}");
                assert_eq!(run.plan_name(), plan_name);
                let labels = run.metadata.labels.as_ref().unwrap();
                assert_eq!(labels["team"], "payments", "the plan's own labels travel");
                assert_eq!(
                    labels[PLAN_LABEL],
                    crate::engine::naming::label_value(plan_name),
                    "the plan label, shortened as names are"
                );
            }
            assert_eq!(TriggerKind::of(&scheduled), TriggerKind::Scheduled);
            assert_eq!(
                scheduled.metadata.annotations.as_ref().unwrap()[SCHEDULED_AT_ANNOTATION],
                "2026-06-01T02:00:00Z"
            );
            assert_eq!(TriggerKind::of(&manual), TriggerKind::Manual);
            assert_eq!(
                (manual.metadata.name.as_deref(), manual.metadata.generate_name.clone()),
                (None, Some(format!("{plan_name}-")))
            );
            assert!(preview.spec.suspend && !scheduled.spec.suspend && !manual.spec.suspend);
            assert_eq!(preview.metadata.name.as_deref(), Some("try"));
        }
    }

    fn facts(name: &str, created: &str, state: RunState, preview: bool, superseded: bool) -> RunFacts {
        RunFacts {
            name: name.into(),
            created: utc(created),
            state,
            preview,
            superseded,
            reverted_by: None,
        }
    }

    #[test]
    fn admission_table() {
        use RunState::*;
        let old = facts("old", "2026-01-01T00:00:00Z", InProgress, false, false);
        let older = facts("older", "2025-12-01T00:00:00Z", Pending, false, false);
        let newer = facts("newer", "2026-02-01T00:00:00Z", Pending, false, false);
        let me = facts("me", "2026-01-15T00:00:00Z", Unresolved, false, false);
        let preview = facts("preview", "2026-01-20T00:00:00Z", Unresolved, true, false);
        let done = facts("done", "2026-01-10T00:00:00Z", Completed, false, false);
        let superseded = facts("sup", "2026-01-11T00:00:00Z", InProgress, false, true);
        let failing = RunFacts {
            reverted_by: Some("old-revert".into()),
            ..old.clone()
        };
        let revert = facts("old-revert", "2026-01-12T00:00:00Z", Pending, false, false);
        let cases: Vec<(&str, &RunFacts, Vec<RunFacts>, Admission)> = vec![
            ("alone", &me, vec![], Admission::Proceed { supersede: vec![] }),
            (
                "supersedes every older active run",
                &me,
                vec![old.clone(), older.clone(), done.clone(), superseded.clone()],
                Admission::Proceed {
                    supersede: vec!["old".into(), "older".into()],
                },
            ),
            (
                "a newer active run wins",
                &me,
                vec![old.clone(), newer.clone()],
                Admission::SupersededBy("newer".into()),
            ),
            (
                "previews never supersede",
                &preview,
                vec![old.clone()],
                Admission::Proceed { supersede: vec![] },
            ),
            (
                "previews are not contenders",
                &me,
                vec![facts("p2", "2026-03-01T00:00:00Z", Pending, true, false)],
                Admission::Proceed { supersede: vec![] },
            ),
            (
                "re-check of an active run with a newer one",
                &old,
                vec![me.clone(), facts("me", "2026-01-15T00:00:00Z", Pending, false, false)],
                Admission::SupersededBy("me".into()),
            ),
            (
                "a run failing with onFailure: Revert is not superseded by its revert",
                &failing,
                vec![revert.clone()],
                Admission::Proceed { supersede: vec![] },
            ),
            (
                "nor does its revert supersede it (it waits for the run to record its end)",
                &revert,
                vec![failing.clone()],
                Admission::Proceed { supersede: vec![] },
            ),
            (
                "another newer run still supersedes both",
                &failing,
                vec![revert.clone(), newer.clone()],
                Admission::SupersededBy("newer".into()),
            ),
        ];
        for (name, run, others, want) in cases {
            assert_eq!(admit(run, &others), want, "{name}");
        }
        // Same creation second: the name breaks the tie, so both sides agree on one winner.
        let a = facts("a", "2026-01-01T00:00:00Z", Pending, false, false);
        let b = facts("b", "2026-01-01T00:00:00Z", Pending, false, false);
        assert_eq!(admit(&a, std::slice::from_ref(&b)), Admission::SupersededBy("b".into()));
        assert_eq!(
            admit(&b, &[a]),
            Admission::Proceed {
                supersede: vec!["a".into()]
            }
        );
    }

    fn run(name: &str, created: &str, state: RunState, finished: Option<&str>, suspend: bool) -> UpgradeRun {
        let mut r = UpgradeRun::new(
            name,
            UpgradeRunSpec {
                upgrade_plan_ref: UpgradePlanRef { name: "p".into() },
                suspend,
                cancel: false,
                ..Default::default()
            },
        );
        r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            crate::time::to_jiff(utc(created)),
        ));
        let mut status = UpgradeRunStatus {
            state,
            finished_at: finished.map(utc),
            ..Default::default()
        };
        if let Some(result) = state.result() {
            let (s, reason) = match result {
                RunResult::Completed => (ConditionStatus::True, reasons::RUN_COMPLETED),
                RunResult::Failed => (ConditionStatus::False, reasons::RESOURCE_UPGRADE_FAILED),
                RunResult::Cancelled => (ConditionStatus::False, reasons::RUN_CANCELLED),
            };
            status.conditions.push(Condition::new(
                reasons::RUN_SUCCEEDED,
                s,
                reason,
                format!("{name} ended"),
                utc(created),
            ));
        }
        r.status = Some(status);
        r
    }

    #[test]
    fn plan_summary() {
        let done = run(
            "done",
            "2026-01-01T00:00:00Z",
            RunState::Failed,
            Some("2026-01-01T01:00:00Z"),
            false,
        );
        let active = run("active", "2026-01-02T00:00:00Z", RunState::InProgress, None, false);
        let mut preview = run("preview", "2026-01-03T00:00:00Z", RunState::Pending, None, true);
        preview.metadata.annotations = Some([(PREVIEW_ANNOTATION.to_string(), "true".to_string())].into());
        let s = summarize(&[&done, &active, &preview], None, None);
        assert_eq!(s.phase, PlanPhase::Running);
        assert_eq!(s.active_run_ref, "active");
        let last = s.last_run.unwrap();
        assert_eq!(
            (last.name.as_str(), last.result, last.reason.as_str()),
            ("done", RunResult::Failed, reasons::RESOURCE_UPGRADE_FAILED)
        );

        // lastRun is never cleared: with the run gone, the previous value stays.
        let s = summarize(&[], Some(&last), None);
        assert_eq!(
            (s.phase, s.active_run_ref.as_str(), s.last_run.as_ref()),
            (PlanPhase::Available, "", Some(&last))
        );
        // A run that just finished (and is about to vanish) replaces an older lastRun.
        let cancelled = last_run_of(&run(
            "gone",
            "2026-01-05T00:00:00Z",
            RunState::Cancelled,
            Some("2026-01-05T01:00:00Z"),
            false,
        ))
        .unwrap();
        assert_eq!(
            summarize(&[], Some(&last), Some(cancelled.clone())).last_run,
            Some(cancelled)
        );
        // Superseded runs and previews never resumed never write lastRun, even when cancelled.
        let mut superseded = run(
            "superseded",
            "2026-01-06T00:00:00Z",
            RunState::Cancelled,
            Some("2026-01-06T01:00:00Z"),
            true,
        );
        superseded.status.as_mut().unwrap().superseded_by = Some("newer".into());
        assert_eq!(last_run_of(&superseded), None);
        let mut unresumed = run(
            "preview",
            "2026-01-06T00:00:00Z",
            RunState::Cancelled,
            Some("2026-01-06T01:00:00Z"),
            true,
        );
        unresumed.metadata.annotations = Some([(PREVIEW_ANNOTATION.to_string(), "true".to_string())].into());
        assert_eq!(last_run_of(&unresumed), None);
        unresumed.spec.suspend = false; // resumed: it rolled out as the active run
        assert!(last_run_of(&unresumed).is_some());
        assert_eq!(
            summarize(&[&superseded], Some(&last), None).last_run,
            Some(last.clone()),
            "a superseded run leaves lastRun alone"
        );
        // Trigger kinds, and the metric's two values.
        let mut scheduled = run("s", "2026-01-05T00:00:00Z", RunState::Pending, None, false);
        scheduled.metadata.annotations = Some(
            [(
                crate::api::SCHEDULED_AT_ANNOTATION.to_string(),
                "2026-01-05T00:00:00Z".to_string(),
            )]
            .into(),
        );
        let manual = run("m", "2026-01-05T00:00:00Z", RunState::Pending, None, false);
        let preview_run = run("p", "2026-01-05T00:00:00Z", RunState::Unresolved, None, true);
        for (r, kind, label) in [
            (&scheduled, TriggerKind::Scheduled, "scheduled"),
            (&manual, TriggerKind::Manual, "manual"),
            (&preview_run, TriggerKind::Preview, "manual"),
        ] {
            assert_eq!(TriggerKind::of(r), kind);
            assert_eq!(kind.metric_label(), label);
        }
        // An unadmitted suspended run counts as a preview.
        assert!(is_preview(&run(
            "x",
            "2026-01-05T00:00:00Z",
            RunState::Unresolved,
            None,
            true
        )));
        assert!(
            !is_preview(&run("y", "2026-01-05T00:00:00Z", RunState::InProgress, None, true)),
            "suspended after admission"
        );
    }
}

#[cfg(test)]
mod dormancy_tests {
    use super::*;

    fn a_run(suspend: bool, state: RunState, annotations: &[(&str, &str)], superseded_by: Option<&str>) -> UpgradeRun {
        let mut r = UpgradeRun::new(
            "r",
            crate::api::UpgradeRunSpec {
                upgrade_plan_ref: crate::api::UpgradePlanRef { name: "p".into() },
                suspend,
                cancel: false,
                ..Default::default()
            },
        );
        r.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        r.status = Some(crate::api::UpgradeRunStatus {
            state,
            superseded_by: superseded_by.map(Into::into),
            ..Default::default()
        });
        r
    }

    /// Issue 36 D8 (spec §5.2, §13.3): dormant runs are not woken by the Promise's changes and
    /// never query Prometheus; the active run reads its gates, also while suspended.
    #[test]
    fn only_the_active_run_reads_gates_and_dormant_ones_sleep() {
        let preview = [(crate::api::PREVIEW_ANNOTATION, "true")];
        let resumed = [
            (crate::api::PREVIEW_ANNOTATION, "true"),
            (crate::api::ADMITTED_AT_ANNOTATION, "2026-06-01T10:00:00Z"),
        ];
        let asked = [(crate::api::SUPERSEDED_BY_ANNOTATION, "newer")];
        // (what, run, dormant, reads gates)
        let table = [
            ("active", a_run(false, RunState::InProgress, &[], None), false, true),
            ("pending", a_run(false, RunState::Pending, &[], None), false, true),
            (
                "suspended by its user",
                a_run(true, RunState::InProgress, &[], None),
                false,
                true,
            ),
            ("ended", a_run(false, RunState::Completed, &[], None), false, false),
            (
                "superseded",
                a_run(true, RunState::InProgress, &[], Some("newer")),
                true,
                false,
            ),
            (
                "asked to stand down",
                a_run(false, RunState::InProgress, &asked, None),
                true,
                false,
            ),
            (
                "preview",
                a_run(true, RunState::InProgress, &preview, None),
                true,
                false,
            ),
            (
                "preview, resumed",
                a_run(false, RunState::InProgress, &resumed, None),
                false,
                true,
            ),
            (
                "preview, being resumed",
                a_run(false, RunState::InProgress, &preview, None),
                false,
                true,
            ),
        ];
        for (what, r, dormant, reads) in &table {
            assert_eq!((is_dormant(r), reads_gates(r)), (*dormant, *reads), "{what}");
        }
    }
}
