//! The counters of spec §9.1 that count runs and outcomes — `upgradeplan_runs_total`,
//! `upgradeplan_runs_superseded_total`, `upgradeplan_resource_upgrades_total` — read from durable
//! state when Prometheus scrapes (kube-state-metrics' design), so that they count each run and
//! each outcome exactly once across crashes, restarts and failovers (spec §14.2).
//!
//! A process that counts in its own memory after the status that records an outcome is written
//! loses the count when it dies between the two, and nothing it could do in memory closes that
//! gap. Here a plan's counters are what its runs' statuses record (each outcome once it can no
//! longer be taken back), plus what the plan's status keeps of its deleted runs: the plan's
//! reconcile adds a run's counts there ([`keep_deleted`]) before the run lets go of its
//! finalizer ([`kept`]), so a counter never moves back when a run goes. A run whose counts are
//! kept and whose object is still there is counted from the plan's status only.

use std::collections::BTreeMap;

use crate::api::{
    DeletedResourceCount, DeletedRunCount, DeletedRunCounts, GroupPhase, GroupStatus, UpgradePlan, UpgradeRun,
    UpgradeRunStatus,
};
use crate::engine::admission::{superseded_by, TriggerKind};

/// A plan's counters (or one run's share of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// `upgradeplan_runs_total` by (trigger, result).
    pub runs: BTreeMap<(String, String), u64>,
    /// `upgradeplan_runs_superseded_total`.
    pub superseded: u64,
    /// `upgradeplan_resource_upgrades_total` by (group, result).
    pub resources: BTreeMap<(String, String), u64>,
}

impl Counters {
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty() && self.superseded == 0 && self.resources.is_empty()
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Counters) {
        for (k, n) in &other.runs {
            *self.runs.entry(k.clone()).or_default() += n;
        }
        self.superseded += other.superseded;
        for (k, n) in &other.resources {
            *self.resources.entry(k.clone()).or_default() += n;
        }
    }

    /// The first counter that is lower in `now` than here (absent counts 0), named.
    pub fn moved_back_in(&self, now: &Counters) -> Option<String> {
        let runs = self
            .runs
            .iter()
            .find(|(k, n)| now.runs.get(*k).copied().unwrap_or(0) < **n);
        if let Some(((trigger, result), _)) = runs {
            return Some(format!("runs_total{{trigger={trigger},result={result}}}"));
        }
        if now.superseded < self.superseded {
            return Some("runs_superseded_total".to_string());
        }
        let resources = self
            .resources
            .iter()
            .find(|(k, n)| now.resources.get(*k).copied().unwrap_or(0) < **n);
        resources.map(|((group, result), _)| format!("resource_upgrades_total{{group={group},result={result}}}"))
    }

    fn of_deleted(deleted: &DeletedRunCounts) -> Counters {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        Counters {
            runs: deleted
                .runs
                .iter()
                .map(|r| ((r.trigger.clone(), r.result.clone()), count(r.count)))
                .collect(),
            superseded: count(deleted.superseded),
            resources: deleted
                .resources
                .iter()
                .map(|r| ((r.group.clone(), r.result.clone()), count(r.count)))
                .collect(),
        }
    }

    fn into_deleted(self, uids: Vec<String>) -> DeletedRunCounts {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        DeletedRunCounts {
            uids,
            runs: self
                .runs
                .into_iter()
                .map(|((trigger, result), n)| DeletedRunCount {
                    trigger,
                    result,
                    count: count(n),
                })
                .collect(),
            superseded: count(self.superseded),
            resources: self
                .resources
                .into_iter()
                .map(|((group, result), n)| DeletedResourceCount {
                    group,
                    result,
                    count: count(n),
                })
                .collect(),
        }
    }
}

/// Whether a group's verdicts can no longer change: the run ended or was superseded, or the group
/// completed or failed. Until then a health-checked group's success can be taken back and given
/// again (spec §13.2).
pub fn verdicts_final(run: &UpgradeRunStatus, group: &GroupStatus) -> bool {
    run.state.is_terminal()
        || run.superseded_by.is_some()
        || matches!(
            group.phase,
            Some(GroupPhase::Soaking | GroupPhase::Completed | GroupPhase::Failed)
        )
}

/// The group's outcomes as counted: failures and skips as recorded, successes too unless the
/// group is health-checked and its verdicts are not final yet. `superseded`: a newer run asked the
/// run to stand down (its annotation, before its own status records it): from then on its own
/// reconcile evaluates nothing, so its verdicts are final.
pub fn group_outcomes(run: &UpgradeRunStatus, group: &GroupStatus, superseded: bool) -> [(&'static str, u64); 3] {
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let succeeded = if !group.health_checked || superseded || verdicts_final(run, group) {
        count(group.succeeded)
    } else {
        0
    };
    [
        ("succeeded", succeeded),
        ("failed", count(group.failed)),
        ("skipped", count(group.skipped)),
    ]
}

/// What one run counts, from its status: its end (by trigger and result), whether it was
/// superseded, and its groups' outcomes.
pub fn of_run(run: &UpgradeRun) -> Counters {
    // Superseded by the newer run's annotation, whether or not its own status says so yet: the
    // count must not wait for a write a deleted run may never make.
    let superseded = superseded_by(run).is_some();
    let mut counters = Counters {
        superseded: u64::from(superseded),
        ..Counters::default()
    };
    let Some(status) = &run.status else {
        return counters;
    };
    if status.state.is_terminal() {
        let key = (
            TriggerKind::of(run).metric_label().to_string(),
            status.state.as_str().to_string(),
        );
        counters.runs.insert(key, 1);
    }
    for g in &status.rollout_groups {
        for (result, n) in group_outcomes(status, g, superseded) {
            if n > 0 {
                *counters
                    .resources
                    .entry((g.name.clone(), result.to_string()))
                    .or_default() += n;
            }
        }
    }
    counters
}

/// The key a run's counts are kept under: its UID (a run deleted and created again by the same
/// name is another run), its name when it has none.
pub fn run_key(run: &UpgradeRun) -> String {
    run.metadata
        .uid
        .clone()
        .or_else(|| run.metadata.name.clone())
        .unwrap_or_default()
}

/// The plan's counters: what its deleted runs counted, and what each of its runs counts that the
/// plan's status does not keep already.
pub fn of_plan(plan: &UpgradePlan, runs: &[&UpgradeRun]) -> Counters {
    let deleted = plan.status.as_ref().and_then(|s| s.deleted_runs.as_ref());
    let mut counters = deleted.map(Counters::of_deleted).unwrap_or_default();
    for run in runs {
        if !deleted.is_some_and(|d| d.uids.contains(&run_key(run))) {
            counters.add(&of_run(run));
        }
    }
    counters
}

/// Whether a run being deleted has counted all it will: it ended, or it is dormant and so counts
/// nothing more. One still going is first finished as Cancelled by its own reconcile.
fn counting_settled(run: &UpgradeRun) -> bool {
    let state = run.status.as_ref().map(|s| s.state).unwrap_or_default();
    state.is_terminal() || crate::engine::admission::is_dormant(run)
}

/// The plan's `status.deletedRuns` after this reconcile: the counts of each run being deleted
/// whose counting is settled added once (its UID recorded with them), and the UIDs of runs gone
/// since dropped (their counts stay). `None` while nothing was ever deleted.
pub fn keep_deleted(previous: Option<&DeletedRunCounts>, runs: &[&UpgradeRun]) -> Option<DeletedRunCounts> {
    let leaving: Vec<&UpgradeRun> = runs
        .iter()
        .copied()
        .filter(|r| r.metadata.deletion_timestamp.is_some() && counting_settled(r))
        .collect();
    if previous.is_none() && leaving.is_empty() {
        return None;
    }
    let previous = previous.cloned().unwrap_or_default();
    let present: Vec<String> = runs.iter().map(|r| run_key(r)).collect();
    let mut uids: Vec<String> = previous.uids.iter().filter(|u| present.contains(u)).cloned().collect();
    let mut counters = Counters::of_deleted(&previous);
    for run in leaving {
        let key = run_key(run);
        if !uids.contains(&key) {
            counters.add(&of_run(run));
            uids.push(key);
        }
    }
    Some(counters.into_deleted(uids))
}

/// Whether `plan`'s status keeps the counts of `run` (being deleted), so that it may let go: it
/// does, or the run counted nothing, or there is no plan to keep them (gone or being deleted: its
/// series go with it).
pub fn kept(run: &UpgradeRun, plan: Option<&UpgradePlan>) -> bool {
    let Some(plan) = plan else { return true };
    if plan.metadata.deletion_timestamp.is_some() || of_run(run).is_empty() {
        return true;
    }
    let deleted = plan.status.as_ref().and_then(|s| s.deleted_runs.as_ref());
    deleted.is_some_and(|d| d.uids.contains(&run_key(run)))
}

#[cfg(test)]
mod tests;
