//! What a run is doing, as the views show it (spec §10): one answer, computed by the engine from
//! the run's evaluation while it goes on and from what its status recorded once it ended, so the
//! plugin's `status`, `get` and `history` render it and never re-derive what the controller
//! decided.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::health::HealthRecords;
use super::outcome::SkipReason;
use super::record::{Recorded, Records};
use super::run::{resource_outcome, Blocked, Evaluation, Outcome, Verdict};
use super::snapshot::{Frozen, SnapshotResource};
use crate::api::kratix::BindingFacts;
use crate::api::{GroupPhase, GroupStatus, RunState};

/// What a group of a run is doing, or did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum GroupState {
    /// Not reached yet.
    Waiting,
    /// The group in progress.
    Current,
    /// Completed, holding the next group for its soak.
    Soaking,
    /// Waiting for an UpgradeApproval before it starts.
    AwaitingApproval,
    /// Completed (failures within its budget included).
    Done,
    /// Its failures failed the run.
    Failed,
    /// In progress when the run failed (a gate's `failAfter`, a revision gone).
    Stopped,
    /// Not reached when the run failed.
    NotStarted,
    /// Not complete when the run was cancelled.
    Cancelled,
}

impl GroupState {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupState::Waiting => "waiting",
            GroupState::Current => "current",
            GroupState::Soaking => "soaking",
            GroupState::AwaitingApproval => "awaiting approval",
            GroupState::Done => "done",
            GroupState::Failed => "failed",
            GroupState::Stopped => "stopped",
            GroupState::NotStarted => "not started",
            GroupState::Cancelled => "cancelled",
        }
    }

    /// The state of `groups[index]` of a run in `state` whose current group is `current`: from
    /// the phase the run recorded for it, and for runs recorded before phases existed, from its
    /// counts.
    pub fn of(state: RunState, current: Option<usize>, index: usize, groups: &[GroupStatus]) -> GroupState {
        let Some(g) = groups.get(index) else {
            return GroupState::Waiting;
        };
        if !state.is_terminal() {
            match g.phase {
                Some(GroupPhase::Soaking) => return GroupState::Soaking,
                Some(GroupPhase::AwaitingApproval) => return GroupState::AwaitingApproval,
                _ => {}
            }
        }
        match current {
            Some(c) if c == index => return GroupState::Current,
            Some(c) if index < c => return GroupState::Done,
            _ => {}
        }
        let started = g.succeeded + g.skipped + g.failed > 0;
        match (g.phase, state) {
            (None, _) => Self::of_counts(state, index, groups),
            (Some(GroupPhase::Completed | GroupPhase::Soaking), _) => GroupState::Done,
            (Some(GroupPhase::Failed), _) => GroupState::Failed,
            (_, RunState::Completed) => GroupState::Done,
            (_, RunState::Cancelled) => GroupState::Cancelled,
            (Some(GroupPhase::InProgress), RunState::Failed) if started => GroupState::Stopped,
            (_, RunState::Failed) => GroupState::NotStarted,
            _ => GroupState::Waiting,
        }
    }

    /// A group recorded without a phase (by a controller from before phases): what its counts
    /// and the run's state say.
    fn of_counts(state: RunState, index: usize, groups: &[GroupStatus]) -> GroupState {
        let g = &groups[index];
        let complete = g.failed == 0 && g.succeeded + g.skipped == g.total;
        // The last group with failures failed the run; failures before it were within budget.
        let failing = state == RunState::Failed && groups.iter().rposition(|g| g.failed > 0) == Some(index);
        match state {
            _ if g.failed > 0 && !failing && state != RunState::Cancelled => GroupState::Done,
            _ if g.failed > 0 => GroupState::Failed,
            _ if complete && (g.total > 0 || state == RunState::Completed) => GroupState::Done,
            RunState::Completed => GroupState::Done,
            RunState::Cancelled => GroupState::Cancelled,
            RunState::Failed if g.succeeded + g.skipped == 0 => GroupState::NotStarted,
            RunState::Failed => GroupState::Stopped,
            _ => GroupState::Waiting,
        }
    }
}

/// How much of a group's failure budget (`maxFailures`) its failures use.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct BudgetUse {
    pub group: String,
    pub failed: i64,
    pub allowed: usize,
}

impl BudgetUse {
    /// "2 failed within budget (3 allowed)".
    pub fn words(&self) -> String {
        let verdict = if self.failed as usize > self.allowed {
            "over budget"
        } else {
            "within budget"
        };
        format!("{} failed {verdict} ({} allowed)", self.failed, self.allowed)
    }
}

/// One group of a run, as shown.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupView {
    /// Its counts (and approval, failure records) as evaluated now or last recorded.
    pub status: GroupStatus,
    pub state: GroupState,
}

/// A run, as shown.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunView {
    pub groups: Vec<GroupView>,
    /// The group in progress (or waiting to enter), while the run goes on.
    pub current: Option<usize>,
    /// The current group's upgrades in flight (verifying and retries included) and its limit.
    pub in_flight: usize,
    pub limit: Option<usize>,
    /// Every reason that holds the current group, in the spec's precedence (spec §14.1).
    pub held_by: Vec<Blocked>,
    /// When the current group's windows open, while they are what holds it.
    pub window_opens: Option<DateTime<Utc>>,
    /// The current group's resources being upgraded (`namespace/name`) and verifying.
    pub in_flight_resources: Vec<String>,
    pub verifying_resources: Vec<String>,
    /// The groups of the frozen plan with a `maxFailures`.
    pub budgets: Vec<BudgetUse>,
}

/// The view of a run in `state` whose status recorded `recorded`, with its frozen plan (when its
/// snapshot is read) and, while it goes on, its evaluation now.
pub fn run_view(
    state: RunState,
    recorded: &[GroupStatus],
    frozen: Option<&Frozen>,
    eval: Option<&Evaluation>,
) -> RunView {
    let current = eval.and_then(|e| match e.verdict {
        Verdict::InProgress { group } => Some(group),
        _ => None,
    });
    let groups: Vec<GroupStatus> = eval.map_or_else(|| recorded.to_vec(), |e| e.groups.clone());
    let resources = |which: fn(&Outcome) -> bool| -> Vec<String> {
        let (Some(e), Some(f), Some(c)) = (eval, frozen, current) else {
            return Vec::new();
        };
        let Some((_, outcomes)) = e.outcomes.iter().find(|(i, _)| *i == c) else {
            return Vec::new();
        };
        f.snapshot.groups[c]
            .resources
            .iter()
            .zip(outcomes)
            .filter(|(_, o)| which(o))
            .map(|(r, _)| r.display_name())
            .collect()
    };
    RunView {
        current,
        in_flight: eval.map_or(0, |e| e.in_flight),
        limit: eval.and_then(|e| e.limit),
        held_by: eval.map(|e| e.held_by.clone()).unwrap_or_default(),
        window_opens: eval
            .filter(|e| e.blocked() == Some(Blocked::WindowClosed))
            .and_then(|e| e.windows)
            .and_then(|g| g.next_open),
        in_flight_resources: resources(|o| matches!(o, Outcome::InFlight)),
        verifying_resources: resources(|o| matches!(o, Outcome::Verifying { .. })),
        budgets: frozen.map(|f| budgets(f, &groups)).unwrap_or_default(),
        groups: (0..groups.len())
            .map(|i| GroupView {
                status: groups[i].clone(),
                state: GroupState::of(state, current, i, &groups),
            })
            .collect(),
    }
}

/// One resource of a run, as `history RUN` and `status` show it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceView<'f> {
    pub group: &'f str,
    pub resource: &'f SnapshotResource,
    /// Its outcome as the run counts it.
    pub outcome: Outcome,
    /// What its binding shows now, when the run counted something else: once counted, an
    /// outcome stands for the run, and what happened after is only worth saying (spec §5.5).
    pub since: Option<Outcome>,
}

/// Who the run is, for the per-resource rules: its name, its admission, and when it ended.
#[derive(Debug, Clone, Copy)]
pub struct RunAt<'r> {
    pub name: &'r str,
    pub state: RunState,
    pub admitted: DateTime<Utc>,
    /// When its snapshot was taken (`status.startedAt`).
    pub snapshot_taken: DateTime<Utc>,
    /// A revert: the run it reverts.
    pub reverting: Option<&'r str>,
    pub finished: Option<DateTime<Utc>>,
}

/// Every resource of a run's snapshot with the outcome the run counts for it: the outcomes its
/// status records (spec §5.5), beside what the binding shows since where that differs; then each
/// resource judged against its live binding by the frozen plan's rules — as of the run's end once
/// it ended — except in a group the run recorded complete (recorded before outcomes were), whose
/// resources stay done whatever their bindings do later.
pub fn resource_views<'f, 'b>(
    frozen: &'f Frozen,
    run: RunAt<'_>,
    recorded: &[GroupStatus],
    lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>,
    health: &HealthRecords,
    now: DateTime<Utc>,
) -> Vec<ResourceView<'f>> {
    let judged_at = match run.finished {
        Some(at) if run.state.is_terminal() => at.min(now),
        _ => now,
    };
    let records = Records::read(recorded, &frozen.snapshot, &frozen.overlaps);
    let by_bindings = Records::failures(recorded);
    let mut views = Vec::new();
    for (index, group) in frozen.snapshot.groups.iter().enumerate() {
        let complete = recorded
            .get(index)
            .filter(|g| g.name == group.name && g.total == group.resources.len() as i64)
            .filter(|g| g.succeeded + g.skipped + g.failed == g.total);
        for (i, r) in group.resources.iter().enumerate() {
            let judge = |records: &Records<'_>| {
                resource_outcome(
                    r,
                    (index, i),
                    lookup(&r.namespace, &r.binding),
                    health,
                    (&frozen.compiled, &group.name),
                    records,
                    super::run::JudgedFor {
                        to: &frozen.compiled.to,
                        name: run.name,
                        admitted: run.admitted,
                        snapshot_taken: run.snapshot_taken,
                        reverting: run.reverting,
                    },
                    judged_at,
                )
            };
            let (outcome, since) = match records.of((index, i), r) {
                Some(Recorded::Failed(_)) => (judge(&records), None),
                // Recorded: it stands; its binding may say why (a skip's reason), or what
                // happened since.
                Some(_) => {
                    let counted = judge(&records);
                    match judge(&by_bindings) {
                        now if now.finished() == counted.finished() => (now, None),
                        now => (counted, Some(now)),
                    }
                }
                None => match (complete, judge(&records)) {
                    (None, Outcome::NeedsRetry) if run.state.is_terminal() => (Outcome::NotStarted, None),
                    (None, live) => (live, None),
                    (Some(g), live) => counted_done(g, live),
                },
            };
            views.push(ResourceView {
                group: &group.name,
                resource: r,
                outcome,
                since,
            });
        }
    }
    views
}

/// A resource not recorded failed in group `g`, which the run recorded complete: it counted
/// Succeeded or Skipped — which, the group's counts say when they can (Succeeded otherwise) —
/// beside what its binding `live` shows now when that differs.
fn counted_done(g: &GroupStatus, live: Outcome) -> (Outcome, Option<Outcome>) {
    match live {
        Outcome::Succeeded if g.succeeded > 0 => (live, None),
        Outcome::Skipped(_) if g.skipped > 0 => (live, None),
        live if g.succeeded == 0 && g.skipped > 0 => (Outcome::Skipped(SkipReason::Counted), Some(live)),
        live => (Outcome::Succeeded, Some(live)),
    }
}

/// Budget use of each group of the frozen plan that has a `maxFailures`.
fn budgets(frozen: &Frozen, groups: &[GroupStatus]) -> Vec<BudgetUse> {
    frozen
        .plan
        .rollout_groups
        .iter()
        .zip(&frozen.compiled.groups)
        .filter(|(written, _)| written.max_failures.is_some())
        .filter_map(|(_, g)| {
            let counts = groups.iter().find(|c| c.name == g.name)?;
            Some(BudgetUse {
                group: g.name.clone(),
                failed: counts.failed,
                allowed: g.budget.resolve(counts.total as usize),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(total: i64, succeeded: i64, failed: i64, skipped: i64, phase: Option<GroupPhase>) -> GroupStatus {
        GroupStatus {
            name: "g".into(),
            total,
            succeeded,
            failed,
            skipped,
            phase,
            ..Default::default()
        }
    }

    /// A group's state is what the run recorded for it; an ended run never shows one waiting.
    #[test]
    fn group_states_follow_the_recorded_phase() {
        use GroupPhase as P;
        use RunState::*;
        // (run state, current group, index, the group, want); the groups before `index`
        // completed cleanly.
        let cases = [
            (
                InProgress,
                Some(1),
                0,
                group(2, 2, 0, 0, Some(P::Completed)),
                GroupState::Done,
            ),
            (
                InProgress,
                Some(1),
                1,
                group(2, 0, 0, 0, Some(P::InProgress)),
                GroupState::Current,
            ),
            (
                InProgress,
                Some(1),
                2,
                group(2, 0, 0, 0, Some(P::Pending)),
                GroupState::Waiting,
            ),
            (
                InProgress,
                Some(0),
                0,
                group(2, 2, 0, 0, Some(P::Soaking)),
                GroupState::Soaking,
            ),
            (
                InProgress,
                Some(1),
                1,
                group(2, 0, 0, 0, Some(P::AwaitingApproval)),
                GroupState::AwaitingApproval,
            ),
            // Failures within the budget: the group completed.
            (Failed, None, 0, group(3, 2, 1, 0, Some(P::Completed)), GroupState::Done),
            (Failed, None, 1, group(2, 0, 2, 0, Some(P::Failed)), GroupState::Failed),
            (
                Failed,
                None,
                1,
                group(3, 1, 0, 0, Some(P::InProgress)),
                GroupState::Stopped,
            ),
            (
                Failed,
                None,
                1,
                group(3, 0, 0, 0, Some(P::InProgress)),
                GroupState::NotStarted,
            ),
            (
                Failed,
                None,
                2,
                group(2, 0, 0, 0, Some(P::Pending)),
                GroupState::NotStarted,
            ),
            (
                Cancelled,
                None,
                1,
                group(2, 1, 0, 0, Some(P::InProgress)),
                GroupState::Cancelled,
            ),
            (
                Cancelled,
                None,
                0,
                group(2, 2, 0, 0, Some(P::Completed)),
                GroupState::Done,
            ),
            (
                Completed,
                None,
                0,
                group(0, 0, 0, 0, Some(P::Completed)),
                GroupState::Done,
            ),
            (
                Completed,
                None,
                1,
                group(2, 2, 0, 0, Some(P::Soaking)),
                GroupState::Done,
            ),
            // Recorded before phases: the counts say.
            (InProgress, Some(1), 0, group(2, 2, 0, 0, None), GroupState::Done),
            (InProgress, Some(1), 2, group(2, 0, 0, 0, None), GroupState::Waiting),
            (Failed, None, 0, group(2, 1, 1, 0, None), GroupState::Failed),
            (Failed, None, 1, group(2, 0, 0, 0, None), GroupState::NotStarted),
            (Failed, None, 1, group(3, 1, 0, 0, None), GroupState::Stopped),
            (Cancelled, None, 1, group(2, 1, 0, 0, None), GroupState::Cancelled),
            (Completed, None, 0, group(3, 2, 1, 0, None), GroupState::Done),
        ];
        for (state, current, index, g, want) in cases {
            let mut groups = vec![group(1, 1, 0, 0, Some(GroupPhase::Completed)); index];
            groups.push(g.clone());
            assert_eq!(
                GroupState::of(state, current, index, &groups),
                want,
                "{state:?} {current:?} {index} {g:?}"
            );
        }
        // Recorded before phases, a failed run: a tolerated failure in dev, then prod over its
        // budget.
        let groups = vec![
            group(3, 2, 1, 0, None),
            group(2, 0, 2, 0, None),
            group(2, 0, 0, 0, None),
        ];
        let states: Vec<GroupState> = (0..3)
            .map(|i| GroupState::of(RunState::Failed, None, i, &groups))
            .collect();
        assert_eq!(states, [GroupState::Done, GroupState::Failed, GroupState::NotStarted]);
    }

    /// Per-resource outcomes as the views show them: what the run counted stands; a terminal run is
    /// judged as of its end; what happened after is said beside it.
    #[test]
    fn resource_views_keep_what_the_run_counted() {
        use crate::api::kratix::ResourceBinding;
        use crate::api::ResourceFailure;
        use crate::engine::run::tests::with_condition;
        use crate::engine::snapshot::tests::{binding, match_all, plan};
        use crate::engine::snapshot::{Snapshot, SnapshotGroup};
        use std::sync::Arc;

        let at = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let admitted = at("2026-06-01T10:00:00Z");
        let now = at("2026-06-01T12:00:00Z");
        let at_v1 = binding("ns", "r", &[], "v1", "v1");
        let in_flight = binding("ns", "r", &[], "v1", "v2");
        let upgraded = with_condition(
            binding("ns", "r", &[], "v2", "v2"),
            "True",
            "UpgradeSucceeded",
            "2026-06-01T10:05:00Z",
            None,
        );
        let failed_now = with_condition(
            in_flight.clone(),
            "False",
            "UpgradeFailed",
            "2026-06-01T11:00:00Z",
            Some("v2"),
        );
        let failed_before = with_condition(
            in_flight.clone(),
            "False",
            "UpgradeFailed",
            "2026-06-01T09:00:00Z",
            Some("v2"),
        );
        let frozen = Frozen::new(
            Snapshot {
                groups: vec![SnapshotGroup {
                    name: "all".into(),
                    resources: vec![Arc::new(SnapshotResource::from_binding(&at_v1))],
                }],
            },
            plan(&["v1"], "v2", vec![match_all("all")]),
        )
        .unwrap();
        let counts = |succeeded, failed, skipped, phase| GroupStatus {
            name: "all".into(),
            total: 1,
            succeeded,
            failed,
            skipped,
            phase: Some(phase),
            ..Default::default()
        };
        let mut failure = counts(0, 1, 0, GroupPhase::Failed);
        failure.failed_resources = vec![ResourceFailure {
            namespace: "ns".into(),
            name: "r".into(),
            at: at("2026-06-01T10:10:00Z"),
            detail: "it broke".into(),
        }];
        let failed = |m: &str| Outcome::Failed { message: m.into() };
        let counted_skip = Outcome::Skipped(SkipReason::Counted);
        // (case, run state, recorded group, live binding, want: (outcome, since))
        type Case<'a> = (
            &'a str,
            RunState,
            GroupStatus,
            Option<&'a ResourceBinding>,
            (Outcome, Option<Outcome>),
        );
        let cases: Vec<Case> = vec![
            (
                "going on, in flight",
                RunState::InProgress,
                counts(0, 0, 0, GroupPhase::InProgress),
                Some(&in_flight),
                (Outcome::InFlight, None),
            ),
            (
                "going on, upgraded",
                RunState::InProgress,
                counts(0, 0, 0, GroupPhase::InProgress),
                Some(&upgraded),
                (Outcome::Succeeded, None),
            ),
            (
                "ended: a retry it never asked for is not started",
                RunState::Cancelled,
                counts(0, 0, 0, GroupPhase::InProgress),
                Some(&failed_before),
                (Outcome::NotStarted, None),
            ),
            (
                "going on: an old failure needs a retry",
                RunState::InProgress,
                counts(0, 0, 0, GroupPhase::InProgress),
                Some(&failed_before),
                (Outcome::NeedsRetry, None),
            ),
            (
                "recorded failure stands after Kratix's own retry",
                RunState::Failed,
                failure.clone(),
                Some(&upgraded),
                (failed("it broke"), None),
            ),
            (
                "counted succeeded, Kratix works on it again",
                RunState::Completed,
                counts(1, 0, 0, GroupPhase::Completed),
                Some(&in_flight),
                (Outcome::Succeeded, Some(Outcome::InFlight)),
            ),
            (
                "counted succeeded, failed later",
                RunState::Completed,
                counts(1, 0, 0, GroupPhase::Completed),
                Some(&failed_now),
                (Outcome::Succeeded, Some(failed("workflow failed: simulated"))),
            ),
            (
                "counted skipped, the binding moved since",
                RunState::Completed,
                counts(0, 0, 1, GroupPhase::Completed),
                Some(&in_flight),
                (counted_skip, Some(Outcome::InFlight)),
            ),
            (
                "counted succeeded, the binding gone since",
                RunState::Completed,
                counts(1, 0, 0, GroupPhase::Completed),
                None,
                (Outcome::Succeeded, Some(Outcome::Skipped(SkipReason::BindingGone))),
            ),
            (
                "counted skipped, still gone",
                RunState::Completed,
                counts(0, 0, 1, GroupPhase::Completed),
                None,
                (Outcome::Skipped(SkipReason::BindingGone), None),
            ),
            (
                "counted succeeded, still succeeded",
                RunState::Completed,
                counts(1, 0, 0, GroupPhase::Completed),
                Some(&upgraded),
                (Outcome::Succeeded, None),
            ),
        ];
        for (case, state, recorded, live, (outcome, since)) in cases {
            let run = RunAt {
                name: "run",
                state,
                admitted,
                snapshot_taken: admitted,
                reverting: None,
                finished: state.is_terminal().then_some(at("2026-06-01T11:30:00Z")),
            };
            let views = resource_views(
                &frozen,
                run,
                std::slice::from_ref(&recorded),
                |_, _| live.map(|b| b as &dyn BindingFacts),
                &HealthRecords::default(),
                now,
            );
            assert_eq!(views.len(), 1, "{case}");
            assert_eq!(
                (views[0].group, views[0].resource.name.as_str()),
                ("all", "r"),
                "{case}"
            );
            assert_eq!((&views[0].outcome, &views[0].since), (&outcome, &since), "{case}");
        }
    }

    #[test]
    fn budget_words() {
        let b = |failed, allowed| BudgetUse {
            group: "dev".into(),
            failed,
            allowed,
        };
        assert_eq!(b(2, 3).words(), "2 failed within budget (3 allowed)");
        assert_eq!(b(4, 3).words(), "4 failed over budget (3 allowed)");
    }
}
