//! Eligibility, group assignment and the snapshot a run freezes (spec §5.4).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::compile::{compile, CompiledPlan};
use super::problem::{summarize, Problem};
use super::selector::{self, SelectorKind};
use super::version::VersionMatcher;
use crate::api::kratix::{AsBindingFacts, BindingFacts, NOT_SET_VERSION, RESOURCE_NAME_LABEL};
use crate::api::UpgradePlanSpec;

/// Above this many bytes of resources a snapshot ConfigMap is split (ConfigMaps hold 1 MiB).
pub const SNAPSHOT_SHARD_BYTES: usize = 900 * 1024;
/// ConfigMap key holding the snapshot JSON.
pub const SNAPSHOT_RESOURCES_KEY: &str = "resources";
/// ConfigMap key (first shard) holding the plan spec frozen for the run.
pub const SNAPSHOT_PLAN_KEY: &str = "plan";

/// One resource as frozen in a snapshot. `name`/`namespace` are the Resource Request's.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotResource {
    pub namespace: String,
    pub name: String,
    /// Name of the ResourceBinding (in the binding's namespace, which is `namespace`).
    pub binding: String,
    pub last_applied_version: String,
    pub spec_version: String,
    /// A revert's own target for this resource (spec §13.7): the version the reverted run's
    /// snapshot recorded for it. Absent: the frozen plan's `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

impl SnapshotResource {
    pub fn from_binding(b: &dyn BindingFacts) -> Self {
        let binding = b.binding_name().to_string();
        let name = Some(b.resource_ref_name())
            .filter(|n| !n.is_empty())
            .or_else(|| b.label(RESOURCE_NAME_LABEL))
            .map(str::to_string)
            .unwrap_or_else(|| binding.clone());
        SnapshotResource {
            namespace: b.binding_namespace().to_string(),
            name,
            binding,
            last_applied_version: b.last_applied_version().to_string(),
            spec_version: b.spec_version().to_string(),
            target: None,
        }
    }

    /// The version this resource moves to in a run whose frozen plan targets `to`: its own
    /// target in a revert, else `to`.
    pub fn target<'s>(&'s self, to: &'s str) -> &'s str {
        self.target.as_deref().unwrap_or(to)
    }

    /// `<namespace>/<name>` of the Resource Request, as events print it.
    pub fn display_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A group's frozen membership, in start order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct SnapshotGroup {
    pub name: String,
    /// Shared with the evaluation's actions, which a group of 100% starts for every member.
    pub resources: Vec<Arc<SnapshotResource>>,
}

/// The resources a run works on, per group, in plan order.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct Snapshot {
    pub groups: Vec<SnapshotGroup>,
}

/// A resource of a snapshot that Kratix will not reconcile now, with the first group holding it.
#[derive(Debug, Clone, PartialEq)]
pub struct IdleResource<'s> {
    pub group: &'s str,
    pub resource: &'s SnapshotResource,
    pub why: crate::api::kratix::KratixIdle,
}

/// The resources of `snapshot` whose bindings (`lookup`) say Kratix will not reconcile them now
/// (their Resource Request's labels, spec §2), each once, in snapshot order.
pub fn idle_resources<'s, 'b>(
    snapshot: &'s Snapshot,
    lookup: impl Fn(&str, &str) -> Option<&'b dyn BindingFacts>,
) -> Vec<IdleResource<'s>> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for g in &snapshot.groups {
        for r in &g.resources {
            let Some(why) = lookup(&r.namespace, &r.binding).and_then(|b| b.kratix_idle()) else {
                continue;
            };
            if seen.insert((r.namespace.as_str(), r.binding.as_str())) {
                out.push(IdleResource {
                    group: &g.name,
                    resource: r,
                    why,
                });
            }
        }
    }
    out
}

impl Snapshot {
    /// Per-group counts before anything happened: each group's size, nothing done yet.
    pub fn initial_counts(&self) -> Vec<crate::api::GroupStatus> {
        self.groups
            .iter()
            .map(|g| crate::api::GroupStatus {
                name: g.name.clone(),
                total: g.resources.len() as i64,
                ..Default::default()
            })
            .collect()
    }
}

/// Why a binding of the Promise is not eligible.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ineligibility {
    BeingDeleted,
    Unversioned,
    VersionNotInFrom {
        version: String,
    },
    /// Already at the plan's target (and the target is not in `from`): nothing to do.
    AlreadyAtTarget {
        version: String,
    },
}

impl fmt::Display for Ineligibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ineligibility::BeingDeleted => write!(f, "being deleted"),
            Ineligibility::Unversioned => write!(f, "unversioned (no status.lastAppliedVersion)"),
            Ineligibility::VersionNotInFrom { version } => write!(f, "version {version} is not in upgradePath.from"),
            Ineligibility::AlreadyAtTarget { version } => write!(f, "already at {version}"),
        }
    }
}

/// Why an eligible binding is in no group: for each group, the reason it was not selected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unassigned {
    pub resource: SnapshotResource,
    pub why: Vec<(String, String)>,
}

/// Everything a plan makes of the Promise's bindings now.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    pub snapshot: Snapshot,
    /// Eligible bindings no group selects: they would never be upgraded.
    pub unassigned: Vec<Unassigned>,
    /// Bindings in more than one group, with the groups.
    pub in_several_groups: Vec<(SnapshotResource, Vec<String>)>,
    /// Bindings of the Promise that are not eligible, with the reason.
    pub ineligible: Vec<(SnapshotResource, Ineligibility)>,
}

/// Eligibility of one binding: being deleted, unversioned, or version not in `from`.
pub fn eligibility(b: &dyn BindingFacts, matcher: &VersionMatcher, to: &str) -> Result<(), Ineligibility> {
    if b.being_deleted() {
        return Err(Ineligibility::BeingDeleted);
    }
    let version = b.last_applied_version();
    if version.is_empty() || version == NOT_SET_VERSION {
        return Err(Ineligibility::Unversioned);
    }
    if !matcher.matches(version) && version == to {
        return Err(Ineligibility::AlreadyAtTarget {
            version: version.to_string(),
        });
    }
    if !matcher.matches(version) {
        return Err(Ineligibility::VersionNotInFrom {
            version: version.to_string(),
        });
    }
    Ok(())
}

/// Whether `b` belongs to `promise` ([`BindingFacts::promise`]).
pub fn belongs_to(b: &dyn BindingFacts, promise: &str) -> bool {
    b.promise() == promise
}

/// The plan's groups over the Promise's bindings, by reference: what [`assign`] freezes, and all
/// that a group's size needs (the plan's gauges group every binding at each scrape, so this
/// copies nothing per binding).
pub struct Grouping<'b> {
    /// The Promise's eligible bindings, in (namespace, name) order.
    pub eligible: Vec<&'b dyn BindingFacts>,
    /// The Promise's other bindings, with the reason, in the same order.
    pub ineligible: Vec<(&'b dyn BindingFacts, Ineligibility)>,
    /// Per plan group, in plan order, its members as indices into `eligible`, ascending.
    pub groups: Vec<Vec<usize>>,
}

impl Grouping<'_> {
    /// The groups as a run freezes them (`plan` is the plan grouped by).
    pub fn snapshot(&self, plan: &CompiledPlan) -> Snapshot {
        let groups = plan.groups.iter().zip(&self.groups);
        Snapshot {
            groups: groups
                .map(|(group, members)| SnapshotGroup {
                    name: group.name.clone(),
                    resources: members
                        .iter()
                        .map(|&i| Arc::new(SnapshotResource::from_binding(self.eligible[i])))
                        .collect(),
                })
                .collect(),
        }
    }
}

/// Groups the Promise's eligible bindings by the plan's rollout groups. A binding may be in
/// several groups (groups are not de-duplicated); `matchAll` takes only bindings no earlier group
/// took. Order within a group is (namespace, binding name): the order upgrades start in.
pub fn group_bindings<'b, B: AsBindingFacts + ?Sized + 'b>(
    plan: &CompiledPlan,
    bindings: impl IntoIterator<Item = &'b B>,
) -> Grouping<'b> {
    let mut ours: Vec<&dyn BindingFacts> = bindings
        .into_iter()
        .map(AsBindingFacts::facts)
        .filter(|b| belongs_to(*b, &plan.promise))
        .collect();
    ours.sort_by(|a, b| (a.binding_namespace(), a.binding_name()).cmp(&(b.binding_namespace(), b.binding_name())));
    let mut out = Grouping {
        eligible: Vec::new(),
        ineligible: Vec::new(),
        groups: Vec::with_capacity(plan.groups.len()),
    };
    for b in ours {
        match eligibility(b, &plan.from, &plan.to) {
            Ok(()) => out.eligible.push(b),
            Err(why) => out.ineligible.push((b, why)),
        }
    }
    let mut taken = vec![false; out.eligible.len()];
    for group in &plan.groups {
        let sel = group.selectors.as_ref();
        let all = matches!(selector::kind(sel), SelectorKind::All);
        let members: Vec<usize> = (0..out.eligible.len())
            .filter(|&i| !(all && taken[i]) && selector::check(sel, out.eligible[i]).is_ok())
            .collect();
        for &i in &members {
            taken[i] = true;
        }
        out.groups.push(members);
    }
    out
}

/// Assigns the Promise's eligible bindings to the plan's groups ([`group_bindings`]), as the snapshot a run
/// freezes, with the bindings no group or several groups select and those not eligible.
pub fn assign<'b, B: AsBindingFacts + ?Sized + 'b>(
    plan: &CompiledPlan,
    bindings: impl IntoIterator<Item = &'b B>,
) -> Assignment {
    let grouping = group_bindings(plan, bindings);
    let mut memberships = vec![0usize; grouping.eligible.len()];
    for members in &grouping.groups {
        for &i in members {
            memberships[i] += 1;
        }
    }
    let groups_of = |i: usize| -> Vec<String> {
        plan.groups
            .iter()
            .zip(&grouping.groups)
            .filter(|(_, members)| members.binary_search(&i).is_ok())
            .map(|(g, _)| g.name.clone())
            .collect()
    };
    let mut out = Assignment {
        snapshot: grouping.snapshot(plan),
        ineligible: grouping
            .ineligible
            .iter()
            .map(|(b, why)| (SnapshotResource::from_binding(*b), why.clone()))
            .collect(),
        ..Default::default()
    };
    for (i, b) in grouping.eligible.iter().enumerate() {
        match memberships[i] {
            1 => {}
            // In no group: why each group passed it over (no group took it, so `matchAll` would
            // have: only selectors explain it).
            0 => out.unassigned.push(Unassigned {
                resource: SnapshotResource::from_binding(*b),
                why: plan
                    .groups
                    .iter()
                    .filter_map(|g| {
                        let why = selector::check(g.selectors.as_ref(), *b).err()?;
                        Some((g.name.clone(), why.to_string()))
                    })
                    .collect(),
            }),
            _ => out
                .in_several_groups
                .push((SnapshotResource::from_binding(*b), groups_of(i))),
        }
    }
    out
}

/// The suffix of the `index`-th (0-based) snapshot ConfigMap.
fn snapshot_suffix(index: usize) -> String {
    if index == 0 {
        "-resource-snapshot".to_string()
    } else {
        format!("-resource-snapshot-{}", index + 1)
    }
}

/// Name of the `index`-th (0-based) snapshot ConfigMap of `run` (spec §4.2: a run name too long
/// for the suffix is shortened first).
pub fn snapshot_config_map_name(run: &str, index: usize) -> String {
    super::naming::derived_name(run, &snapshot_suffix(index))
}

/// The inverse of [`snapshot_config_map_name`]: the 0-based shard index of ConfigMap `name` of
/// `run`, or `None` when it is not one of the run's.
pub fn snapshot_shard_index(run: &str, name: &str) -> Option<usize> {
    let first = snapshot_config_map_name(run, 0);
    if name == first {
        return Some(0);
    }
    let n: usize = name.strip_prefix(&format!("{first}-"))?.parse().ok()?;
    (n >= 2 && snapshot_config_map_name(run, n - 1) == name).then(|| n - 1)
}

/// Splits a snapshot into shards whose resources serialize to at most `max_bytes` each. Every
/// group appears in the first shard (so group order survives even for empty groups); a group's
/// resources continue in later shards in order. [`merge_shards`] undoes it.
pub fn shard(snapshot: &Snapshot, max_bytes: usize) -> Vec<Snapshot> {
    let mut shards = vec![Snapshot::default()];
    let mut size = 0usize;
    for group in &snapshot.groups {
        let mut current = SnapshotGroup {
            name: group.name.clone(),
            resources: Vec::new(),
        };
        for r in &group.resources {
            let len = serde_json::to_string(r).map(|s| s.len() + 1).unwrap_or(0);
            if size + len > max_bytes && size > 0 {
                if let Some(s) = shards.last_mut() {
                    s.groups.push(std::mem::take(&mut current));
                }
                current.name = group.name.clone();
                shards.push(Snapshot::default());
                size = 0;
            }
            size += len;
            current.resources.push(r.clone());
        }
        if let Some(s) = shards.last_mut() {
            s.groups.push(current);
        }
    }
    shards
}

/// A run's snapshot and the plan spec frozen with it, compiled: everything the run does after
/// its snapshot follows this plan (spec §14.2).
#[derive(Debug, Clone)]
pub struct Frozen {
    pub snapshot: Snapshot,
    pub plan: UpgradePlanSpec,
    pub compiled: CompiledPlan,
    /// Where the snapshot's resources in several groups sit (follows from `snapshot`).
    pub overlaps: super::record::Overlaps,
}

impl Frozen {
    /// The frozen plan `plan` with `snapshot`, or the plan's problems when it does not compile
    /// (a snapshot written by a controller whose rules were laxer than this one's).
    pub fn new(snapshot: Snapshot, plan: UpgradePlanSpec) -> Result<Frozen, Vec<Problem>> {
        let compiled = compile(&plan)?;
        let names = |g: &[SnapshotGroup]| g.iter().map(|g| g.name.clone()).collect::<Vec<_>>();
        let planned: Vec<String> = compiled.groups.iter().map(|g| g.name.clone()).collect();
        if names(&snapshot.groups) != planned {
            return Err(vec![Problem {
                field: "spec.rolloutGroups".into(),
                message: format!(
                    "the snapshot's groups {:?} are not the frozen plan's {planned:?}",
                    names(&snapshot.groups)
                ),
            }]);
        }
        Ok(Frozen {
            compiled,
            overlaps: super::record::Overlaps::of(&snapshot),
            snapshot,
            plan,
        })
    }
}

/// `compiled` follows from `plan`, `overlaps` from `snapshot`.
impl PartialEq for Frozen {
    fn eq(&self, other: &Frozen) -> bool {
        self.snapshot == other.snapshot && self.plan == other.plan
    }
}

/// Why snapshot ConfigMaps cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrozenError {
    #[error("ConfigMap {0} has no key {SNAPSHOT_RESOURCES_KEY:?}")]
    MissingResources(String),
    #[error("ConfigMap {config_map} key {key}: {detail}")]
    Invalid {
        config_map: String,
        key: &'static str,
        detail: String,
    },
    #[error("no snapshot ConfigMap carries the frozen plan")]
    NoPlan,
    #[error("the frozen plan does not compile: {0}")]
    PlanInvalid(String),
}

/// Reads a run's snapshot back from its ConfigMaps' data, given in shard order as
/// (ConfigMap name, data): the inverse of [`shard`] plus the frozen plan of the first shard.
pub fn read_frozen<'a>(
    shards: impl IntoIterator<Item = (&'a str, &'a std::collections::BTreeMap<String, String>)>,
) -> Result<Frozen, FrozenError> {
    let mut plan = None;
    let mut parts = Vec::new();
    for (name, data) in shards {
        let invalid = |key, e: serde_json::Error| FrozenError::Invalid {
            config_map: name.to_string(),
            key,
            detail: e.to_string(),
        };
        let resources = data
            .get(SNAPSHOT_RESOURCES_KEY)
            .ok_or_else(|| FrozenError::MissingResources(name.to_string()))?;
        parts.push(serde_json::from_str::<Snapshot>(resources).map_err(|e| invalid(SNAPSHOT_RESOURCES_KEY, e))?);
        if let Some(p) = data.get(SNAPSHOT_PLAN_KEY) {
            plan = Some(serde_json::from_str(p).map_err(|e| invalid(SNAPSHOT_PLAN_KEY, e))?);
        }
    }
    Frozen::new(merge_shards(parts), plan.ok_or(FrozenError::NoPlan)?)
        .map_err(|problems| FrozenError::PlanInvalid(summarize(&problems)))
}

/// The data of a snapshot ConfigMap: a shard's resources and, in the first shard, the frozen
/// plan. What the controller writes is exactly this, and its [`digest`] is recorded.
pub fn config_map_data(
    shard: &Snapshot,
    plan: Option<&UpgradePlanSpec>,
) -> Result<std::collections::BTreeMap<String, String>, serde_json::Error> {
    let mut data =
        std::collections::BTreeMap::from([(SNAPSHOT_RESOURCES_KEY.to_string(), serde_json::to_string(shard)?)]);
    if let Some(plan) = plan {
        data.insert(SNAPSHOT_PLAN_KEY.to_string(), serde_json::to_string(plan)?);
    }
    Ok(data)
}

/// The SHA-256 of a ConfigMap's data, hex: over each key and value in key order, each preceded
/// by its length, so no two different maps hash alike by moving bytes between entries.
pub fn digest(data: &std::collections::BTreeMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for (k, v) in data {
        for part in [k, v] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
    }
    super::naming::hex(&h.finalize())
}

/// How one snapshot ConfigMap compares with the digest recorded for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardCheck {
    /// It matches (or no digest was recorded: a run written before digests existed).
    Intact,
    /// It differs from what was written, or it is gone.
    Tampered,
}

/// Checks a ConfigMap's data (`None`: the ConfigMap is missing) against its recorded digest.
pub fn check_shard(recorded: Option<&str>, data: Option<&std::collections::BTreeMap<String, String>>) -> ShardCheck {
    match (recorded, data) {
        (None, _) => ShardCheck::Intact,
        (Some(want), Some(d)) if digest(d) == want => ShardCheck::Intact,
        (Some(_), _) => ShardCheck::Tampered,
    }
}

/// Joins shards back into one snapshot, concatenating each group's resources in shard order.
pub fn merge_shards(shards: impl IntoIterator<Item = Snapshot>) -> Snapshot {
    let mut merged = Snapshot::default();
    for shard in shards {
        for group in shard.groups {
            match merged.groups.iter_mut().find(|g| g.name == group.name) {
                Some(existing) => existing.resources.extend(group.resources),
                None => merged.groups.push(group),
            }
        }
    }
    merged
}

/// Warnings for groups that share resources but not a budget (spec §13.1): a resource in several
/// groups is upgraded once, in the first group that reaches it, and its failure counts against
/// each group's budget as that group becomes current — so a failure `dev` tolerates fails a
/// later `prod` whose budget is smaller. One warning per such pair, on the later group.
pub fn overlap_warnings(plan: &CompiledPlan, snapshot: &Snapshot) -> Vec<Problem> {
    use std::collections::HashSet;
    let budget = |name: &str, size: usize| plan.group(name).map_or(0, |g| g.budget.resolve(size));
    let members: Vec<HashSet<(&str, &str)>> = snapshot
        .groups
        .iter()
        .map(|g| {
            g.resources
                .iter()
                .map(|r| (r.namespace.as_str(), r.binding.as_str()))
                .collect()
        })
        .collect();
    let mut warnings = Vec::new();
    for (j, later) in snapshot.groups.iter().enumerate() {
        for (i, earlier) in snapshot.groups.iter().enumerate().take(j) {
            let shared = members[i].intersection(&members[j]).count();
            let (tolerated, allowed) = (
                budget(&earlier.name, earlier.resources.len()),
                budget(&later.name, later.resources.len()),
            );
            if shared > 0 && tolerated > allowed {
                let index = plan.groups.iter().position(|g| g.name == later.name).unwrap_or(j);
                warnings.push(Problem {
                    field: format!("spec.rolloutGroups[{index}].maxFailures"),
                    message: format!(
                        "group {:?} shares {shared} resource(s) with the earlier group {:?}, which tolerates {tolerated} \
                         failure(s) where {:?} tolerates {allowed}: a failure {:?} tolerates fails the run when {:?} starts",
                        later.name, earlier.name, later.name, earlier.name, later.name
                    ),
                });
            }
        }
    }
    warnings
}

/// The run's snapshot as the controller found it.
#[derive(Debug, Clone)]
pub enum SnapshotFact {
    /// No snapshot of this run exists (or what exists is not a complete one: it is written again).
    /// Before the status says InProgress the controller must still look: the status it sees may be
    /// older than the snapshot an earlier pass wrote.
    Absent,
    /// Read back from the run's ConfigMaps, with their names in shard order.
    Found {
        frozen: Arc<Frozen>,
        refs: Vec<crate::api::ResourceListRef>,
    },
    /// The status names a ConfigMap that is missing or unreadable (the controller logs how).
    Lost { config_map: String },
    /// A ConfigMap differs from the digest the status recorded for it, or is gone (spec §4.3):
    /// someone changed what steers the run.
    Tampered { config_map: String },
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::kratix::{ResourceBinding, ResourceBindingSpec, ResourceBindingStatus, PROMISE_NAME_LABEL};
    use crate::api::{PromiseRef, RolloutGroup, RolloutSelectors, UpgradePath};
    use std::collections::BTreeMap;

    /// A binding of promise `redis` in `ns`, with labels and versions.
    pub fn binding(ns: &str, name: &str, labels: &[(&str, &str)], applied: &str, spec: &str) -> ResourceBinding {
        let mut l: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert(PROMISE_NAME_LABEL.into(), "redis".into());
        l.insert(RESOURCE_NAME_LABEL.into(), name.into());
        let mut b = ResourceBinding::new(
            &format!("{name}-binding"),
            ResourceBindingSpec {
                version: spec.into(),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some(ns.into());
        b.metadata.labels = Some(l);
        b.spec.resource_ref.name = name.into();
        b.spec.resource_ref.namespace = ns.into();
        b.spec.promise_ref.name = "redis".into();
        b.status = Some(ResourceBindingStatus {
            last_applied_version: applied.into(),
            ..Default::default()
        });
        b
    }

    pub fn group(name: &str, labels: &[(&str, &str)]) -> RolloutGroup {
        RolloutGroup {
            name: name.into(),
            selectors: Some(RolloutSelectors {
                match_labels: Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn match_all(name: &str) -> RolloutGroup {
        RolloutGroup {
            name: name.into(),
            selectors: Some(RolloutSelectors {
                match_all: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    pub fn plan(from: &[&str], to: &str, groups: Vec<RolloutGroup>) -> UpgradePlanSpec {
        UpgradePlanSpec {
            promise_ref: PromiseRef { name: "redis".into() },
            upgrade_path: UpgradePath {
                from: from.iter().map(|s| s.to_string()).collect(),
                to: to.into(),
            },
            rollout_groups: groups,
            ..Default::default()
        }
    }

    fn names(g: &SnapshotGroup) -> Vec<&str> {
        g.resources.iter().map(|r| r.name.as_str()).collect()
    }

    #[test]
    fn eligibility_table() {
        let m = VersionMatcher::compile(&[r"/v1\.1\..*/".to_string()]).unwrap();
        let mut deleting = binding("a", "d", &[], "v1.1.0", "v1.1.0");
        deleting.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let cases: Vec<(ResourceBinding, Result<(), Ineligibility>)> = vec![
            (binding("a", "ok", &[], "v1.1.0", "v1.1.0"), Ok(())),
            (binding("a", "floating", &[], "v1.1.3", "latest"), Ok(())),
            (
                binding("a", "ten", &[], "v1.10.0", "v1.10.0"),
                Err(Ineligibility::VersionNotInFrom {
                    version: "v1.10.0".into(),
                }),
            ),
            (
                binding("a", "empty", &[], "", "v1.1.0"),
                Err(Ineligibility::Unversioned),
            ),
            (
                binding("a", "notset", &[], "not-set", "v1.1.0"),
                Err(Ineligibility::Unversioned),
            ),
            (deleting, Err(Ineligibility::BeingDeleted)),
        ];
        for (b, want) in cases {
            assert_eq!(eligibility(&b, &m, "v2.0.0"), want, "{:?}", b.metadata.name);
        }
        let mut no_status = binding("a", "nostatus", &[], "", "v1");
        no_status.status = None;
        assert_eq!(eligibility(&no_status, &m, "v2.0.0"), Err(Ineligibility::Unversioned));
        // At the target already: said so, not "not in from"; a target listed in from stays eligible.
        let done = binding("a", "done", &[], "v2.0.0", "v2.0.0");
        assert_eq!(
            eligibility(&done, &m, "v2.0.0"),
            Err(Ineligibility::AlreadyAtTarget {
                version: "v2.0.0".into()
            })
        );
        assert_eq!(
            eligibility(&done, &m, "v2.0.0").unwrap_err().to_string(),
            "already at v2.0.0"
        );
        assert_eq!(
            eligibility(&binding("a", "t", &[], "v1.1.9", "v1.1.9"), &m, "v1.1.9"),
            Ok(())
        );
    }

    #[test]
    fn assignment_with_overlap_match_all_and_leftovers() {
        let spec = plan(
            &["v1.0.0"],
            "v2.0.0",
            vec![
                group("dev", &[("env", "dev")]),
                group("eu", &[("region", "eu")]),
                match_all("rest"),
            ],
        );
        let bindings = vec![
            binding(
                "ns1",
                "a-dev-eu",
                &[("env", "dev"), ("region", "eu")],
                "v1.0.0",
                "v1.0.0",
            ),
            binding(
                "ns1",
                "b-prod-eu",
                &[("env", "prod"), ("region", "eu")],
                "v1.0.0",
                "v1.0.0",
            ),
            binding(
                "ns2",
                "c-prod-us",
                &[("env", "prod"), ("region", "us")],
                "v1.0.0",
                "v1.0.0",
            ),
            binding("ns2", "d-old", &[("env", "dev")], "v0.9.0", "v0.9.0"),
            binding("ns0", "e-dev", &[("env", "dev")], "v1.0.0", "v1.0.0"),
        ];
        let a = assign(&compile(&spec).unwrap(), &bindings);
        let groups: Vec<Vec<&str>> = a.snapshot.groups.iter().map(names).collect();
        assert_eq!(
            groups,
            vec![
                vec!["e-dev", "a-dev-eu"],
                vec!["a-dev-eu", "b-prod-eu"],
                vec!["c-prod-us"]
            ]
        );
        assert_eq!(a.in_several_groups.len(), 1);
        assert_eq!(a.in_several_groups[0].1, vec!["dev".to_string(), "eu".to_string()]);
        assert_eq!(a.ineligible.len(), 1);
        assert!(a.unassigned.is_empty());

        // Without matchAll, c-prod-us is eligible but unassigned, and we say why for each group.
        let spec = plan(
            &["v1.0.0"],
            "v2.0.0",
            vec![group("dev", &[("env", "dev")]), group("eu", &[("region", "eu")])],
        );
        let a = assign(&compile(&spec).unwrap(), &bindings);
        assert_eq!(a.unassigned.len(), 1);
        assert_eq!(a.unassigned[0].resource.name, "c-prod-us");
        assert_eq!(
            a.unassigned[0].why,
            vec![
                (
                    "dev".to_string(),
                    "matchLabels env=dev: label env is \"prod\"".to_string()
                ),
                (
                    "eu".to_string(),
                    "matchLabels region=eu: label region is \"us\"".to_string()
                ),
            ]
        );
    }

    #[test]
    fn match_all_first_takes_everything_and_empty_selector_nothing() {
        let empty = RolloutGroup {
            name: "none".into(),
            ..Default::default()
        };
        let spec = plan(&["v1"], "v2", vec![empty, match_all("all"), match_all("again")]);
        let bindings = vec![binding("a", "x", &[], "v1", "v1"), binding("a", "y", &[], "v1", "v1")];
        let a = assign(&compile(&spec).unwrap(), &bindings);
        let groups: Vec<Vec<&str>> = a.snapshot.groups.iter().map(names).collect();
        assert_eq!(groups, vec![vec![], vec!["x", "y"], vec![]]);
    }

    #[test]
    fn other_promises_are_ignored() {
        let spec = plan(&["v1"], "v2", vec![match_all("all")]);
        let mut other = binding("a", "pg", &[], "v1", "v1");
        other
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(PROMISE_NAME_LABEL.into(), "postgres".into());
        other.spec.promise_ref.name = "postgres".into();
        let a = assign(&compile(&spec).unwrap(), &[other]);
        assert!(a.snapshot.groups[0].resources.is_empty() && a.ineligible.is_empty());
    }

    #[test]
    fn sharding_round_trips_and_respects_the_limit() {
        let spec = plan(
            &["v1"],
            "v2",
            vec![
                group("a", &[("g", "a")]),
                group("empty", &[("g", "none")]),
                group("b", &[("g", "b")]),
            ],
        );
        let bindings: Vec<ResourceBinding> = (0..300)
            .map(|i| {
                binding(
                    &format!("ns-{i:03}"),
                    &format!("res-{i:03}"),
                    &[("g", if i % 3 == 0 { "a" } else { "b" })],
                    "v1",
                    "v1",
                )
            })
            .collect();
        let snapshot = assign(&compile(&spec).unwrap(), &bindings).snapshot;
        let limit = 4096;
        let shards = shard(&snapshot, limit);
        assert!(shards.len() > 5, "{} shards", shards.len());
        for s in &shards {
            let bytes: usize = s
                .groups
                .iter()
                .flat_map(|g| &g.resources)
                .map(|r| serde_json::to_string(r).unwrap().len() + 1)
                .sum();
            assert!(bytes <= limit, "{bytes}");
        }
        assert_eq!(shards[0].groups[0].name, "a");
        assert_eq!(merge_shards(shards), snapshot);
        assert_eq!(shard(&snapshot, SNAPSHOT_SHARD_BYTES).len(), 1);
        assert_eq!(snapshot_config_map_name("r", 0), "r-resource-snapshot");
        assert_eq!(snapshot_config_map_name("r", 1), "r-resource-snapshot-2");
        for run in ["r".to_string(), "r".repeat(229), "r".repeat(253)] {
            for i in [0, 1, 9, 10] {
                let name = snapshot_config_map_name(&run, i);
                assert!(name.len() <= 253, "{name}");
                assert_eq!(snapshot_shard_index(&run, &name), Some(i), "{name}");
            }
            assert_eq!(snapshot_shard_index(&run, &format!("{run}-other")), None);
            assert_eq!(
                snapshot_shard_index(&run, &format!("{}-1", snapshot_config_map_name(&run, 0))),
                None
            );
        }
    }

    #[test]
    fn frozen_round_trip_and_errors() {
        let spec = plan(&["v1"], "v2", vec![match_all("all")]);
        let bindings: Vec<ResourceBinding> = (0..50)
            .map(|i| binding("ns", &format!("r{i:02}"), &[], "v1", "v1"))
            .collect();
        let snapshot = assign(&compile(&spec).unwrap(), &bindings).snapshot;
        let maps: Vec<(String, std::collections::BTreeMap<String, String>)> = shard(&snapshot, 1024)
            .into_iter()
            .enumerate()
            .map(|(i, part)| {
                let mut data = std::collections::BTreeMap::from([(
                    SNAPSHOT_RESOURCES_KEY.to_string(),
                    serde_json::to_string(&part).unwrap(),
                )]);
                if i == 0 {
                    data.insert(SNAPSHOT_PLAN_KEY.to_string(), serde_json::to_string(&spec).unwrap());
                }
                (snapshot_config_map_name("run", i), data)
            })
            .collect();
        assert!(maps.len() > 1);
        let frozen = read_frozen(maps.iter().map(|(n, d)| (n.as_str(), d))).unwrap();
        assert_eq!((frozen.snapshot, frozen.plan), (snapshot, spec));
        assert_eq!(
            read_frozen(maps.iter().skip(1).map(|(n, d)| (n.as_str(), d))),
            Err(FrozenError::NoPlan)
        );
        let empty = std::collections::BTreeMap::new();
        assert_eq!(
            read_frozen([("cm", &empty)]),
            Err(FrozenError::MissingResources("cm".into()))
        );
    }

    #[test]
    fn snapshot_json_shape() {
        let spec = plan(&["v1"], "v2", vec![match_all("all")]);
        let a = assign(&compile(&spec).unwrap(), &[binding("ns", "x", &[], "v1", "latest")]);
        assert_eq!(
            serde_json::to_value(&a.snapshot).unwrap(),
            serde_json::json!({"groups":[{"name":"all","resources":[
                {"namespace":"ns","name":"x","binding":"x-binding","lastAppliedVersion":"v1","specVersion":"latest"}]}]})
        );
    }

    #[test]
    fn a_digest_changes_with_any_byte_and_tells_a_missing_shard() {
        let p = plan(&["v1"], "v2", vec![match_all("all")]);
        let snapshot = assign(&compile(&p).unwrap(), &[binding("a", "x", &[], "v1", "v1")]).snapshot;
        let data = config_map_data(&snapshot, Some(&p)).unwrap();
        let d = digest(&data);
        assert_eq!(d.len(), 64);
        assert_eq!(check_shard(Some(&d), Some(&data)), ShardCheck::Intact);
        let mut edited = data.clone();
        edited.get_mut(SNAPSHOT_RESOURCES_KEY).unwrap().push(' ');
        assert_eq!(
            check_shard(Some(&d), Some(&edited)),
            ShardCheck::Tampered,
            "one more space"
        );
        let mut added = data.clone();
        added.insert("extra".into(), String::new());
        assert_eq!(check_shard(Some(&d), Some(&added)), ShardCheck::Tampered, "a key added");
        assert_eq!(check_shard(Some(&d), None), ShardCheck::Tampered, "deleted");
        assert_eq!(
            check_shard(None, Some(&edited)),
            ShardCheck::Intact,
            "no digest recorded (an older run)"
        );
        // Bytes moved between key and value change it too.
        let a = std::collections::BTreeMap::from([("ab".to_string(), "c".to_string())]);
        let b = std::collections::BTreeMap::from([("a".to_string(), "bc".to_string())]);
        assert_ne!(digest(&a), digest(&b));
        assert_eq!(
            read_frozen([("cm", &data)]).unwrap().snapshot,
            snapshot,
            "what is written reads back"
        );
    }
}

#[cfg(test)]
mod overlap_tests {
    use super::tests::{binding, group, plan};
    use super::*;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    /// Spec §13.1 (issue 36 D6): overlapping groups whose budgets differ the harmful way are
    /// named, on the later group's field.
    #[test]
    fn overlapping_groups_with_a_smaller_later_budget_are_warned_about() {
        let bindings = vec![
            binding("a", "shared", &[("env", "dev"), ("tier", "prod")], "v1", "v1"),
            binding("a", "dev-only", &[("env", "dev")], "v1", "v1"),
            binding("a", "prod-only", &[("tier", "prod")], "v1", "v1"),
        ];
        let warnings = |dev: Option<i32>, prod: Option<i32>, prod_labels: &[(&str, &str)]| {
            let mut d = group("dev", &[("env", "dev")]);
            d.max_failures = dev.map(IntOrString::Int);
            let mut p = group("prod", prod_labels);
            p.max_failures = prod.map(IntOrString::Int);
            let spec = plan(&["v1"], "v2", vec![d, p]);
            let compiled = compile(&spec).unwrap();
            let snapshot = assign(&compiled, &bindings).snapshot;
            overlap_warnings(&compiled, &snapshot)
        };
        let found = warnings(Some(1), None, &[("tier", "prod")]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].field, "spec.rolloutGroups[1].maxFailures");
        assert_eq!(
            found[0].message,
            "group \"prod\" shares 1 resource(s) with the earlier group \"dev\", which tolerates 1 failure(s) \
             where \"prod\" tolerates 0: a failure \"dev\" tolerates fails the run when \"prod\" starts"
        );
        assert!(
            warnings(None, Some(1), &[("tier", "prod")]).is_empty(),
            "a larger later budget"
        );
        assert!(
            warnings(Some(1), Some(1), &[("tier", "prod")]).is_empty(),
            "the same budget"
        );
        assert!(warnings(Some(1), None, &[("tier", "none")]).is_empty(), "no overlap");
    }
}
