//! Revert (spec §13.7): a run that moves back what another run upgraded, as carefully as that
//! run did it — from its verified snapshot, each resource to the version recorded for it there,
//! its groups in reverse order with their limits, budgets, deadlines and health checks.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use super::problem::{summarize, Problem};
use super::run::{recorded_failure, texts};
use super::snapshot::{Frozen, Snapshot, SnapshotFact, SnapshotGroup, SnapshotResource};
pub use crate::api::kratix::RevisionFact;
use crate::api::kratix::{BindingFacts, UPGRADE_FAILED};
use crate::api::{
    reasons, RevertOf, RevertResources, UpgradePlanSpec, UpgradeRun, UpgradeRunSpec, UpgradeRunStatus,
    UPGRADED_BY_ANNOTATION,
};

/// The frozen plan's `to` of a revert with no resource at all (a plan's `to` must name
/// something; no resource is patched to it).
pub const NO_TARGET: &str = "(none)";

/// The run a revert undoes, as its own records say: its name, its verified snapshot and frozen
/// plan, and its status (for the failures it counted).
#[derive(Debug, Clone, Copy)]
pub struct Reverted<'a> {
    pub name: &'a str,
    pub frozen: &'a Frozen,
    pub status: &'a UpgradeRunStatus,
}

/// What the reverted run did to one of its resources, as far as a revert is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Done {
    /// Kratix applied the run's target.
    Upgraded,
    /// Kratix is applying the run's target (the run started it; no verdict yet). A revert takes
    /// it with the upgraded ones: it will be, and a revert of a run stopped mid-flight (by the
    /// revert superseding it, or by a failure with `onFailure: Revert`) must not leave it behind.
    Upgrading,
    /// Kratix reported the upgrade failed, or the run counted it Failed (a deadline, a health
    /// check).
    Failed,
}

impl Done {
    /// Whether `--resources` (`resources`) takes a resource the run left so.
    pub fn wanted(self, resources: RevertResources) -> bool {
        matches!(
            (self, resources),
            (_, RevertResources::All)
                | (Done::Upgraded | Done::Upgrading, RevertResources::Upgraded)
                | (Done::Failed, RevertResources::Failed)
        )
    }
}

/// What became of one resource of the reverted run, as a revert reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Became {
    /// Its binding is gone or being deleted.
    Gone,
    /// The run did not start it: `upgraded-by` names another run, or none.
    NotStartedByIt,
    /// Someone moved it since: its `spec.version` is no longer the run's target.
    MovedSince,
    /// The run's to undo.
    Done(Done),
}

/// What became of `resource` (its live binding `live`) since `reverted` ran.
pub fn became(resource: &SnapshotResource, live: Option<&dyn BindingFacts>, reverted: &Reverted<'_>) -> Became {
    let Some(b) = live.filter(|b| !b.being_deleted()) else {
        return Became::Gone;
    };
    let to = resource.target(&reverted.frozen.plan.upgrade_path.to);
    if b.annotation(UPGRADED_BY_ANNOTATION) != Some(reverted.name) {
        return Became::NotStartedByIt;
    }
    if b.spec_version() != to {
        return Became::MovedSince;
    }
    let condition = b.upgrade_condition();
    // Kratix working on it says more than a failure the run recorded (a deadline, before Kratix
    // finished): its verdict is still to come.
    let kratix_working = condition.is_some_and(|c| c.status == "Unknown");
    let kratix_failed =
        condition.is_some_and(|c| c.status == "False" && c.reason == UPGRADE_FAILED) && b.failed_version() == Some(to);
    Became::Done(if b.last_applied_version() != to && kratix_working {
        Done::Upgrading
    } else if kratix_failed || recorded_failure(&reverted.status.rollout_groups, resource).is_some() {
        Done::Failed
    } else if b.last_applied_version() == to {
        Done::Upgraded
    } else {
        Done::Upgrading
    })
}

/// What `reverted` did to `resource`, if it is the run's to undo ([`became`]).
pub fn done_to(resource: &SnapshotResource, live: Option<&dyn BindingFacts>, reverted: &Reverted<'_>) -> Option<Done> {
    match became(resource, live, reverted) {
        Became::Done(done) => Some(done),
        _ => None,
    }
}

/// What became of the reverted run's resources, each counted once: what `kubectl upgradeplan
/// revert` says when there is nothing to take.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub upgraded: usize,
    pub upgrading: usize,
    pub failed: usize,
    pub not_started_by_it: usize,
    pub moved_since: usize,
    pub gone: usize,
}

impl Tally {
    pub fn of<'b>(reverted: &Reverted<'_>, lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>) -> Tally {
        let mut seen = HashSet::new();
        let mut t = Tally::default();
        for r in reverted.frozen.snapshot.groups.iter().flat_map(|g| &g.resources) {
            if !seen.insert((r.namespace.as_str(), r.binding.as_str())) {
                continue;
            }
            let n = match became(r, lookup(&r.namespace, &r.binding), reverted) {
                Became::Gone => &mut t.gone,
                Became::NotStartedByIt => &mut t.not_started_by_it,
                Became::MovedSince => &mut t.moved_since,
                Became::Done(Done::Upgraded) => &mut t.upgraded,
                Became::Done(Done::Upgrading) => &mut t.upgrading,
                Became::Done(Done::Failed) => &mut t.failed,
            };
            *n += 1;
        }
        t
    }

    /// How many `resources` takes.
    pub fn wanted(&self, resources: RevertResources) -> usize {
        [
            (Done::Upgraded, self.upgraded),
            (Done::Upgrading, self.upgrading),
            (Done::Failed, self.failed),
        ]
        .iter()
        .filter(|(d, _)| d.wanted(resources))
        .map(|(_, n)| n)
        .sum()
    }
}

/// The snapshot of a revert of `reverted` for `resources`: its groups in reverse order, each
/// with the resources it holds in `reverted`'s snapshot that [`done_to`] finds wanted, each
/// once (in the first group that held it, where it was upgraded), each with its own target:
/// the `lastAppliedVersion` that snapshot recorded (pinned, even if it was floating).
pub fn revert_snapshot<'b>(
    reverted: &Reverted<'_>,
    resources: RevertResources,
    lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>,
) -> Snapshot {
    let mut seen = HashSet::new();
    let mut groups: Vec<SnapshotGroup> = Vec::new();
    for group in &reverted.frozen.snapshot.groups {
        let mut taken = Vec::new();
        for r in &group.resources {
            if !seen.insert((r.namespace.as_str(), r.binding.as_str())) {
                continue;
            }
            let live = lookup(&r.namespace, &r.binding);
            if !done_to(r, live, reverted).is_some_and(|d| d.wanted(resources)) {
                continue;
            }
            let Some(b) = live else { continue };
            taken.push(Arc::new(SnapshotResource {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
                binding: r.binding.clone(),
                last_applied_version: b.last_applied_version().to_string(),
                spec_version: b.spec_version().to_string(),
                target: Some(r.last_applied_version.clone()),
            }));
        }
        groups.push(SnapshotGroup {
            name: group.name.clone(),
            resources: taken,
        });
    }
    groups.reverse();
    Snapshot { groups }
}

/// Every target of a revert's snapshot, each once.
pub fn targets(snapshot: &Snapshot) -> BTreeSet<&str> {
    snapshot
        .groups
        .iter()
        .flat_map(|g| &g.resources)
        .filter_map(|r| r.target.as_deref())
        .collect()
}

/// The plan a revert follows, from the reverted run's frozen `original`: the same Promise, from
/// the original's target to the versions of `snapshot` (each resource carries its own), its
/// groups in reverse order with their limits, failure budgets, deadlines and health checks.
/// Windows, signal gates, soak and approvals stay only with `respect_policy` (freezes are not
/// part of a plan: the run holds for them only then, too). Never scheduled, and never reverted
/// again by `onFailure`.
pub fn revert_plan(original: &UpgradePlanSpec, snapshot: &Snapshot, respect_policy: bool) -> UpgradePlanSpec {
    let targets = targets(snapshot);
    let to = if targets.is_empty() {
        NO_TARGET.to_string()
    } else {
        targets.into_iter().collect::<Vec<_>>().join(", ")
    };
    let mut plan = original.clone();
    plan.upgrade_path.from = vec![original.upgrade_path.to.clone()];
    plan.upgrade_path.to = to;
    plan.upgrade_execution_policy = None;
    plan.suspend = false;
    plan.rollout_groups.reverse();
    for g in &mut plan.rollout_groups {
        g.on_failure = None;
        if !respect_policy {
            g.resource_upgrade_windows = None;
            g.soak_duration = None;
            g.require_approval = None;
        }
    }
    if !respect_policy {
        plan.gates = None;
    }
    plan
}

/// The snapshot and frozen plan of a revert of `reverted` ([`revert_snapshot`], [`revert_plan`]),
/// or why the reverted run's frozen plan no longer compiles.
pub fn revert_frozen<'b>(
    reverted: &Reverted<'_>,
    resources: RevertResources,
    respect_policy: bool,
    lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>,
) -> Result<Frozen, Vec<Problem>> {
    let snapshot = revert_snapshot(reverted, resources, lookup);
    let plan = revert_plan(&reverted.frozen.plan, &snapshot, respect_policy);
    Frozen::new(snapshot, plan)
}

/// The name of the revert `onFailure: Revert` creates for `run`: `<run>-revert`, shortened as
/// derived names are (spec §4.2).
pub fn revert_name(run: &str) -> String {
    super::naming::derived_name(run, "-revert")
}

/// Whether windows, freezes, signal gates, soak and approvals hold a run with this spec (spec
/// §14.1): every run's do, a revert's only when it respects policy — an emergency revert is not
/// held by the freeze that the incident brought on.
pub fn held_by_policy(spec: &UpgradeRunSpec) -> bool {
    spec.revert_of.is_none() || spec.respect_policy
}

/// Of the freezes that hold a run's plan, those that hold a run with this spec: all of them, none
/// for a revert that does not respect policy ([`held_by_policy`]). The one place the controller's
/// step, the plugin's run view and the forecast of a revert take them from.
pub fn freezes_holding<'f, F>(spec: &UpgradeRunSpec, freezes: &'f [F]) -> &'f [F] {
    if held_by_policy(spec) {
        freezes
    } else {
        &[]
    }
}

/// The run a revert undoes, as the controller (or the plugin) found it.
#[derive(Debug, Clone, Default)]
pub enum RevertedFact<'a> {
    /// Not looked up: the run is no revert, or its own snapshot exists (its first pass derived it
    /// and nothing of the reverted run is read again).
    #[default]
    NotGathered,
    /// No UpgradeRun of that name.
    NotFound,
    /// The run, and its snapshot as read back and verified against the digests its status
    /// records (`Absent`: it never took one).
    Found {
        run: &'a UpgradeRun,
        snapshot: SnapshotFact,
    },
}

impl<'a> RevertedFact<'a> {
    /// From a lookup of the reverted run: not made (`None`: the run is no revert, or its own
    /// snapshot exists), no run of that name (`Some(None)`), or the run and its snapshot as read.
    pub fn of(looked_up: Option<Option<(&'a UpgradeRun, &SnapshotFact)>>) -> RevertedFact<'a> {
        match looked_up {
            None => RevertedFact::NotGathered,
            Some(None) => RevertedFact::NotFound,
            Some(Some((run, snapshot))) => RevertedFact::Found {
                run,
                snapshot: snapshot.clone(),
            },
        }
    }
}

/// Why a revert cannot be taken: the `RunSucceeded` reason it fails with, and the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    fn not_possible(message: String) -> Refusal {
        Refusal {
            reason: reasons::REVERT_NOT_POSSIBLE,
            message,
        }
    }
}

/// The snapshot and frozen plan of a revert of `of.name` in plan `plan` ([`revert_frozen`]), from
/// what was found of that run: or why it cannot be reverted — gone, of another plan, never
/// started (no snapshot), or its snapshot lost or changed since it was written (spec §4.3: the
/// record a revert is taken from must be the one the run wrote).
pub fn derive<'b>(
    plan: &str,
    of: &RevertOf,
    respect_policy: bool,
    reverted: &RevertedFact<'_>,
    lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>,
) -> Result<Frozen, Refusal> {
    let name = of.name.as_str();
    let (run, snapshot) = match reverted {
        RevertedFact::NotGathered | RevertedFact::NotFound => {
            return Err(Refusal::not_possible(texts::reverted_run_not_found(name)))
        }
        RevertedFact::Found { run, snapshot } => (run, snapshot),
    };
    if run.plan_name() != plan {
        return Err(Refusal::not_possible(texts::reverted_run_of_other_plan(
            name,
            run.plan_name(),
            plan,
        )));
    }
    let status = run.status.clone().unwrap_or_default();
    let frozen = match snapshot {
        SnapshotFact::Found { frozen, .. } => frozen,
        SnapshotFact::Absent => return Err(Refusal::not_possible(texts::reverted_run_never_started(name))),
        SnapshotFact::Lost { config_map } => {
            return Err(Refusal {
                reason: reasons::SNAPSHOT_MISSING,
                message: texts::reverted_snapshot(name, &texts::snapshot_missing(config_map)),
            })
        }
        SnapshotFact::Tampered { config_map } => {
            let recorded = status.started_at.map(crate::time::rfc3339).unwrap_or_default();
            return Err(Refusal {
                reason: reasons::SNAPSHOT_TAMPERED,
                message: texts::reverted_snapshot(name, &texts::snapshot_tampered(config_map, &recorded)),
            });
        }
    };
    let reverted = Reverted {
        name,
        frozen,
        status: &status,
    };
    revert_frozen(&reverted, of.resources, respect_policy, lookup)
        .map_err(|problems| Refusal::not_possible(texts::reverted_plan_invalid(name, &summarize(&problems))))
}

/// What an evaluation knows of the PromiseRevisions a run moves to and from: whether the frozen
/// plan's target has one (not being deleted), the versions whose revision is being deleted, and,
/// for a revert (whose resources each carry a target), the targets that have none. A revert never
/// waits or fails for a revision: those resources are skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revisions {
    pub present: bool,
    /// The target's revision is being deleted: its name (spec §5.7).
    pub target_deleting: Option<String>,
    /// A revert's targets whose revision is gone or being deleted.
    pub gone_targets: Vec<String>,
    /// (version, revision name) of each revision of the Promise being deleted: a resource whose
    /// binding asks for that version is Kratix's to delete, and is skipped, never started (§5.7).
    pub deleting: Vec<(String, String)>,
}

impl Revisions {
    /// The target's revision there, as assumed when nothing better is known.
    pub fn present() -> Revisions {
        Revisions {
            present: true,
            ..Revisions::default()
        }
    }

    /// From the Promise's revisions, asked of the frozen plan's target, or of each of a revert's
    /// targets.
    pub fn of(frozen: &Frozen, revisions: &[RevisionFact]) -> Revisions {
        Revisions::of_target(&frozen.plan.upgrade_path.to, &frozen.snapshot, revisions)
    }

    /// [`Revisions::of`] a run to `to` over `snapshot` (a forecast's, before any run froze it).
    pub fn of_target(to: &str, snapshot: &Snapshot, revisions: &[RevisionFact]) -> Revisions {
        let usable = |v: &str| revisions.iter().any(|r| r.version == v && !r.deleting);
        let deleting: Vec<(String, String)> = revisions
            .iter()
            .filter(|r| r.deleting)
            .map(|r| (r.version.clone(), r.name.clone()))
            .collect();
        if !is_revert(to, snapshot) {
            return Revisions {
                present: usable(to),
                target_deleting: deleting.iter().find(|(v, _)| v == to).map(|(_, name)| name.clone()),
                gone_targets: Vec::new(),
                deleting,
            };
        }
        let gone_targets = targets(snapshot)
            .into_iter()
            .filter(|v| !usable(v))
            .map(str::to_string)
            .collect();
        Revisions {
            present: true,
            target_deleting: None,
            gone_targets,
            deleting,
        }
    }

    /// The revision being deleted that `version` names, if one is.
    pub fn deleting(&self, version: &str) -> Option<&str> {
        self.deleting
            .iter()
            .find(|(v, _)| v == version)
            .map(|(_, name)| name.as_str())
    }
}

/// Whether a snapshot is a revert's: its resources carry their own targets (a revert with none
/// at all has nothing to move either way).
fn is_revert(to: &str, snapshot: &Snapshot) -> bool {
    to == NO_TARGET || !targets(snapshot).is_empty()
}

#[cfg(test)]
mod tests;
