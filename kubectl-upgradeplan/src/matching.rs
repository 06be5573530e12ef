//! `match`: which resources a run would take now, group by group, and why the others would not.
//! The assignment is the engine's, the same the controller snapshots.

use chrono::{DateTime, Utc};
use serde::Serialize;
use upgradeplan::api::kratix::{BindingFacts, ResourceBinding, RevisionFact};
use upgradeplan::api::{UpgradePlan, UpgradePlanSpec};
use upgradeplan::engine::compile::CompiledPlan;
use upgradeplan::engine::freeze::{hold_at, Freeze, Hold};
use upgradeplan::engine::revert::Revisions;
use upgradeplan::engine::snapshot::{
    assign, belongs_to, idle_resources, Assignment, Frozen, Snapshot, SnapshotResource,
};
use upgradeplan::engine::view::{GroupState, RunView};
use upgradeplan::engine::window::WindowState;

use crate::output::{table, Style};

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct ResourceJson {
    pub namespace: String,
    pub name: String,
    pub binding: String,
    pub version: String,
}

impl From<&SnapshotResource> for ResourceJson {
    fn from(r: &SnapshotResource) -> Self {
        ResourceJson {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            binding: r.binding.clone(),
            version: r.last_applied_version.clone(),
        }
    }
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupJson {
    pub name: String,
    pub max_concurrent: Option<usize>,
    pub resources: Vec<ResourceJson>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct WhyJson {
    pub group: String,
    pub reason: String,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct UnassignedJson {
    #[serde(flatten)]
    pub resource: ResourceJson,
    /// For each group, why it does not select the resource.
    pub why: Vec<WhyJson>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct IneligibleJson {
    #[serde(flatten)]
    pub resource: ResourceJson,
    pub reason: String,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct MultiJson {
    #[serde(flatten)]
    pub resource: ResourceJson,
    pub groups: Vec<String>,
}

/// A selected resource Kratix will not reconcile now (its Resource Request's labels).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct IdleJson {
    #[serde(flatten)]
    pub resource: ResourceJson,
    pub group: String,
    /// The label that says so: `kratix.io/paused` or `kratix.io/workflow-suspended`.
    pub label: String,
    pub reason: String,
}

/// A selected resource whose binding asks for a version whose PromiseRevision is being deleted:
/// Kratix deletes it, and a run skips it (spec §5.7).
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DeletingJson {
    #[serde(flatten)]
    pub resource: ResourceJson,
    pub group: String,
    /// The PromiseRevision being deleted.
    pub revision: String,
}

/// The answer to `--resource NS/NAME`.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlacementJson {
    pub namespace: String,
    pub name: String,
    /// Groups holding it, each with its 1-based position, the group's size, and the window.
    pub placements: Vec<PlaceJson>,
    /// Why it is in no group, when it is not.
    pub reason: Option<String>,
    /// The plan's run under way, when its snapshot does not hold the resource: the answer is then
    /// a new run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_in_run: Option<String>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PlaceJson {
    pub group: String,
    pub group_index: usize,
    pub position: usize,
    pub group_size: usize,
    pub window_open: bool,
    pub next_open: Option<DateTime<Utc>>,
    /// The zone the group's windows are written in, shown beside the viewer's.
    #[serde(skip)]
    pub zone: Option<chrono_tz::Tz>,
    /// What else must happen before the group starts (spec §13.3–13.4): soaks of earlier groups,
    /// approvals, signal gates.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits_for: Vec<String>,
    /// The UpgradeFreeze holding the group now (spec §13.5), and until when.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frozen_until: Option<DateTime<Utc>>,
    #[serde(skip)]
    pub hold: Option<Hold>,
    /// The plan's run under way that holds the resource: the answer is that run's, from the
    /// snapshot it took, not a new run's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
    /// In that run: the group's state (`waiting`, `current`, `soaking`, `done`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_state: Option<String>,
    /// In that run: the resource's outcome (`not started`, `in flight`, `Succeeded`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

/// The plan's run under way, for `--resource`: its frozen plan and snapshot, what it is doing,
/// and each resource's outcome in it.
pub struct InRun {
    pub name: String,
    pub frozen: Frozen,
    pub view: RunView,
    /// When the soak holding the run ends, while one does.
    pub soak_ends: Option<DateTime<Utc>>,
    /// Each snapshot entry's outcome: (group index, namespace, binding, outcome).
    pub outcomes: Vec<(usize, String, String, &'static str)>,
}

impl InRun {
    /// Whether group `index` has begun in this run (its soak and approval gates are behind it).
    fn began(&self, index: usize) -> bool {
        self.view.groups.get(index).is_some_and(|g| {
            g.status.started_at.is_some()
                || g.status.succeeded + g.status.failed + g.status.skipped + g.status.verifying > 0
                || matches!(
                    g.state,
                    GroupState::Done | GroupState::Soaking | GroupState::Failed | GroupState::Stopped
                )
        })
    }
}

/// What must happen, beyond windows and earlier groups, before group `index` of `plan` starts;
/// in a run under way, only what is still to come (soaks and approvals behind it are left out).
fn waits_for(plan: &CompiledPlan, index: usize, run: Option<&InRun>, style: &Style) -> Vec<String> {
    let began = |i: usize| run.is_some_and(|r| r.began(i));
    if began(index) {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, g) in plan.groups.iter().enumerate().take(index) {
        let Some(d) = &g.soak else { continue };
        if began(i + 1) {
            continue;
        }
        let soaking = run.and_then(|r| r.view.groups.get(i)).map(|g| g.state) == Some(GroupState::Soaking);
        match run.and_then(|r| r.soak_ends).filter(|_| soaking) {
            Some(end) => out.push(format!(
                "the {} soak after group {} (until {})",
                d.written,
                g.name,
                style.time(end, None)
            )),
            None => out.push(format!("a {} soak after group {}", d.written, g.name)),
        }
    }
    let run_name = run.map_or("RUN", |r| r.name.as_str());
    for (i, g) in plan.groups.iter().enumerate().take(index + 1) {
        let approved = run
            .and_then(|r| r.view.groups.get(i))
            .is_some_and(|g| g.status.approval.is_some() || g.status.approved_by.is_some());
        if g.requires_approval && !approved && !began(i) {
            out.push(format!(
                "an approval of group {} (kubectl upgradeplan approve {run_name} {})",
                g.name, g.name
            ));
        }
    }
    if let Some(g) = plan.groups.get(index) {
        for gate in upgradeplan::engine::gate::gates_of(plan, &g.name) {
            out.push(format!("signal gate {} open", gate.name()));
        }
    }
    out
}

/// The `-o json` contract of `match` (spec §10), with `multipleGroups` and `resource` added.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MatchJson {
    pub plan: String,
    pub promise: String,
    pub to: String,
    pub groups: Vec<GroupJson>,
    pub unassigned: Vec<UnassignedJson>,
    pub ineligible: Vec<IneligibleJson>,
    pub multiple_groups: Vec<MultiJson>,
    /// Selected resources Kratix will not reconcile now: their upgrades would not finish.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kratix_idle: Vec<IdleJson>,
    /// Selected resources Kratix is deleting with a PromiseRevision being deleted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub revision_deleting: Vec<DeletingJson>,
    /// The target's PromiseRevision is being deleted: its name (no run upgrades to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_deleting: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<PlacementJson>,
    /// The UpgradeBudgets that cap the plan's upgrades in flight with other plans'.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<crate::explain::BudgetCapJson>,
}

/// Where `ns/name` stands in the run under way: `None` when the run's snapshot does not hold it.
fn placement_in_run(
    run: &InRun,
    freezes: &[Freeze],
    resource: (&str, &str),
    now: DateTime<Utc>,
    style: &Style,
) -> Option<PlacementJson> {
    let f = &run.frozen;
    let placements = places(
        (&f.plan, &f.compiled, &f.snapshot),
        Some(run),
        freezes,
        resource,
        now,
        style,
    );
    (!placements.is_empty()).then(|| PlacementJson {
        namespace: resource.0.to_string(),
        name: resource.1.to_string(),
        placements,
        reason: None,
        not_in_run: None,
    })
}

/// The groups of `snapshot` that hold `ns/name`, with its position in each, its window and what
/// else it waits for; in the run under way `run`, the group's state and its outcome too.
fn places(
    (spec, compiled, snapshot): (&UpgradePlanSpec, &CompiledPlan, &Snapshot),
    run: Option<&InRun>,
    freezes: &[Freeze],
    (ns, name): (&str, &str),
    now: DateTime<Utc>,
    style: &Style,
) -> Vec<PlaceJson> {
    let is = |r: &SnapshotResource| r.namespace == ns && (r.name == name || r.binding == name);
    let mut placements = Vec::new();
    for (gi, g) in snapshot.groups.iter().enumerate() {
        let Some(pos) = g.resources.iter().position(|r| is(r)) else {
            continue;
        };
        let entry = &g.resources[pos];
        let windows = spec
            .rollout_groups
            .get(gi)
            .and_then(|g| g.resource_upgrade_windows.clone())
            .unwrap_or_default();
        let (state, _) = WindowState::of_group(&compiled.groups[gi].windows, freezes, now);
        let hold = hold_at(freezes, now);
        placements.push(PlaceJson {
            group: g.name.clone(),
            group_index: gi + 1,
            position: pos + 1,
            group_size: g.resources.len(),
            window_open: state.open,
            next_open: if state.open { None } else { state.next_open },
            zone: crate::output::windows_zone(&windows),
            waits_for: waits_for(compiled, gi, run, style),
            frozen_by: hold.as_ref().map(|h| h.freeze.clone()),
            frozen_until: hold.as_ref().and_then(|h| h.until),
            hold,
            run: run.map(|r| r.name.clone()),
            group_state: run
                .and_then(|r| r.view.groups.get(gi))
                .map(|g| g.state.as_str().to_string()),
            outcome: run.and_then(|run| {
                run.outcomes
                    .iter()
                    .find(|(i, n, b, _)| *i == gi && *n == entry.namespace && *b == entry.binding)
                    .map(|(.., word)| word.to_string())
            }),
        });
    }
    placements
}

fn placement(
    (plan, compiled): (&UpgradePlan, &CompiledPlan),
    a: &Assignment,
    bindings: &[ResourceBinding],
    freezes: &[Freeze],
    (ns, name): (&str, &str),
    now: DateTime<Utc>,
    style: &Style,
) -> PlacementJson {
    let is = |r: &SnapshotResource| r.namespace == ns && (r.name == name || r.binding == name);
    let placements = places(
        (&plan.spec, compiled, &a.snapshot),
        None,
        freezes,
        (ns, name),
        now,
        style,
    );
    let reason = if !placements.is_empty() {
        None
    } else if let Some((_, why)) = a.ineligible.iter().find(|(r, _)| is(r)) {
        Some(format!("not eligible: {why}"))
    } else if let Some(u) = a.unassigned.iter().find(|u| is(&u.resource)) {
        Some(format!(
            "eligible, but no group selects it: {}",
            u.why
                .iter()
                .map(|(g, w)| format!("{g}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        ))
    } else {
        let of_promise = bindings
            .iter()
            .filter(|b| belongs_to(*b, &plan.spec.promise_ref.name))
            .count();
        Some(format!(
            "no ResourceBinding of Promise {} for {ns}/{name} (among {of_promise})",
            plan.spec.promise_ref.name
        ))
    };
    PlacementJson {
        namespace: ns.to_string(),
        name: name.to_string(),
        placements,
        reason,
        not_in_run: None,
    }
}

/// Matches `plan` against `bindings` as at `now`; `resource` is an optional `NS/NAME` to place,
/// in the plan's run under way when there is one and it holds the resource.
#[allow(clippy::too_many_arguments)]
pub fn matching(
    plan: &UpgradePlan,
    bindings: &[ResourceBinding],
    (freezes, budgets, revisions): (&[Freeze], &[crate::explain::BudgetCapJson], Option<&[RevisionFact]>),
    now: DateTime<Utc>,
    resource: Option<&str>,
    in_run: Option<&InRun>,
    all: bool,
    style: &Style,
) -> anyhow::Result<(MatchJson, String)> {
    let spec = &plan.spec;
    let name = plan.metadata.name.clone().unwrap_or_default();
    let compiled = crate::explain::compiled(plan)?;
    let a = assign(&compiled, bindings);
    let groups: Vec<GroupJson> = a
        .snapshot
        .groups
        .iter()
        .zip(&compiled.groups)
        .map(|(g, pg)| GroupJson {
            name: g.name.clone(),
            max_concurrent: pg.limit.shown(Some(g.resources.len())),
            resources: g.resources.iter().map(|r| ResourceJson::from(&**r)).collect(),
        })
        .collect();
    let by_key: std::collections::HashMap<(&str, &str), &ResourceBinding> = bindings
        .iter()
        .map(|b| (b.binding_namespace(), b.binding_name()))
        .zip(bindings)
        .collect();
    let kratix_idle = idle_resources(&a.snapshot, |ns, name| {
        by_key.get(&(ns, name)).map(|b| *b as &dyn BindingFacts)
    })
    .into_iter()
    .map(|i| IdleJson {
        resource: i.resource.into(),
        group: i.group.to_string(),
        label: i.why.label().to_string(),
        reason: i.why.words(),
    })
    .collect();
    let revisions = Revisions::of_target(&compiled.to, &a.snapshot, revisions.unwrap_or_default());
    // Each once, with the first group holding it.
    let mut seen = std::collections::HashSet::new();
    let revision_deleting = a
        .snapshot
        .groups
        .iter()
        .flat_map(|g| g.resources.iter().map(move |r| (g, r)))
        .filter(|(_, r)| seen.insert((r.namespace.as_str(), r.binding.as_str())))
        .filter_map(|(g, r)| {
            let asks = by_key.get(&(r.namespace.as_str(), r.binding.as_str()))?.spec_version();
            Some(DeletingJson {
                resource: (&**r).into(),
                group: g.name.clone(),
                revision: revisions.deleting(asks)?.to_string(),
            })
        })
        .collect();
    let placement = match resource {
        Some(r) => {
            let (ns, n) = r
                .split_once('/')
                .ok_or_else(|| anyhow::anyhow!("--resource takes NAMESPACE/NAME, got {r:?}"))?;
            match in_run.map(|r| (r, placement_in_run(r, freezes, (ns, n), now, style))) {
                Some((_, Some(p))) => Some(p),
                outside => Some(PlacementJson {
                    not_in_run: outside.map(|(r, _)| r.name.clone()),
                    ..placement((plan, &compiled), &a, bindings, freezes, (ns, n), now, style)
                }),
            }
        }
        None => None,
    };
    let json = MatchJson {
        plan: name.clone(),
        promise: spec.promise_ref.name.clone(),
        to: spec.upgrade_path.to.clone(),
        groups,
        unassigned: a
            .unassigned
            .iter()
            .map(|u| UnassignedJson {
                resource: (&u.resource).into(),
                why: u
                    .why
                    .iter()
                    .map(|(g, r)| WhyJson {
                        group: g.clone(),
                        reason: r.clone(),
                    })
                    .collect(),
            })
            .collect(),
        ineligible: a
            .ineligible
            .iter()
            .map(|(r, why)| IneligibleJson {
                resource: r.into(),
                reason: why.to_string(),
            })
            .collect(),
        multiple_groups: a
            .in_several_groups
            .iter()
            .map(|(r, g)| MultiJson {
                resource: r.into(),
                groups: g.clone(),
            })
            .collect(),
        kratix_idle,
        revision_deleting,
        target_deleting: revisions.target_deleting.clone(),
        resource: placement,
        budgets: budgets.to_vec(),
    };
    Ok((json.clone(), render(&json, all, style)))
}

/// The text view: the whole plan; with a resource, that resource only unless `all`.
fn render(m: &MatchJson, all: bool, style: &Style) -> String {
    let mut out = String::new();
    let total: usize = m.groups.iter().map(|g| g.resources.len()).sum();
    let distinct = m
        .groups
        .iter()
        .flat_map(|g| g.resources.iter().map(|r| (&r.namespace, &r.binding)))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    // A resource in several groups is counted in each (as SKE specifies): say so.
    let counted = if distinct < total {
        format!("{total} group entries ({distinct} distinct resources)")
    } else {
        format!("{total} resource(s)")
    };
    out.push_str(&format!(
        "{} {} — Promise {} → {} — {counted} in {} group(s)\n",
        style.bold("UpgradePlan"),
        style.bold(&m.plan),
        m.promise,
        m.to,
        m.groups.len()
    ));
    if let Some(p) = &m.resource {
        out.push('\n');
        if let Some(run) = &p.not_in_run {
            out.push_str(&format!(
                "Run {run} is under way without {}/{} (its snapshot was taken when it started); a new run:\n",
                p.namespace, p.name
            ));
        }
        if p.placements.is_empty() {
            out.push_str(&format!(
                "{}/{} would not be upgraded: {}\n",
                p.namespace,
                p.name,
                p.reason.clone().unwrap_or_default()
            ));
        }
        if !m.budgets.is_empty() && !p.placements.is_empty() {
            out.push_str(&format!(
                "Its upgrade also waits for a free unit of {}.\n",
                crate::explain::budget_words(&m.budgets)
            ));
        }
        for pl in &p.placements {
            let window = if let Some(hold) = &pl.hold {
                let opens = pl
                    .next_open
                    .map(|t| format!("; its window opens {}", style.time(t, pl.zone)))
                    .unwrap_or_default();
                format!("{}{opens}", crate::output::frozen_words(style, hold))
            } else if pl.window_open {
                "its window is open now".to_string()
            } else {
                match pl.next_open {
                    Some(t) => format!("its window opens {}", style.time(t, pl.zone)),
                    None => "its window does not open within 400 days".to_string(),
                }
            };
            out.push_str(&format!(
                "{}/{} is in group {} ({} of {}), position {} of {}; {window}.\n",
                p.namespace,
                p.name,
                style.bold(&pl.group),
                pl.group_index,
                m.groups.len(),
                pl.position,
                pl.group_size
            ));
            if let (Some(run), Some(state)) = (&pl.run, &pl.group_state) {
                out.push_str(&format!(
                    "In run {run}, under way (its snapshot): the group is {state}, the resource {}.\n",
                    pl.outcome.as_deref().unwrap_or("not started")
                ));
            }
            if !pl.waits_for.is_empty() {
                out.push_str(&format!("Before the group starts: {}.\n", pl.waits_for.join("; ")));
            }
        }
        if let [first, _, ..] = p.placements.as_slice() {
            out.push_str(&format!(
                "It is in {} groups: upgraded with {}; the later groups find it already upgraded.\n",
                p.placements.len(),
                first.group
            ));
        }
        if !all {
            out.push_str("\n(--all lists the whole plan)\n");
            return out;
        }
    }
    for (i, g) in m.groups.iter().enumerate() {
        let limit = g
            .max_concurrent
            .map(|c| format!("{c} at a time"))
            .unwrap_or_else(|| "no limit".into());
        out.push_str(&format!(
            "\n{}. {} — {} resource(s), {limit}\n",
            i + 1,
            style.bold(&g.name),
            g.resources.len()
        ));
        if !g.resources.is_empty() {
            let rows: Vec<Vec<String>> = g
                .resources
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    vec![
                        format!("{}", j + 1),
                        r.namespace.clone(),
                        r.name.clone(),
                        r.binding.clone(),
                        r.version.clone(),
                    ]
                })
                .collect();
            for l in table(style, &["#", "NAMESPACE", "NAME", "BINDING", "VERSION"], &rows).lines() {
                out.push_str(&format!("   {l}\n"));
            }
        }
    }
    if !m.kratix_idle.is_empty() {
        out.push_str(&format!(
            "\n{} (their upgrades would start but not finish)\n",
            style.bold("Kratix will not reconcile now")
        ));
        for r in &m.kratix_idle {
            out.push_str(&format!(
                "   {}/{} (group {}): {}\n",
                r.resource.namespace, r.resource.name, r.group, r.reason
            ));
        }
    }
    if let Some(revision) = &m.target_deleting {
        out.push_str(&format!(
            "\n{} PromiseRevision {revision} ({} {}) is being deleted: Kratix deletes every resource at {}, so no run upgrades to it\n",
            style.bold("Target being deleted:"),
            m.promise,
            m.to,
            m.to
        ));
    }
    if !m.revision_deleting.is_empty() {
        out.push_str(&format!(
            "\n{} (a run skips them: ResourceSkipped)\n",
            style.bold("Kratix is deleting these with their PromiseRevision")
        ));
        for r in &m.revision_deleting {
            out.push_str(&format!(
                "   {}/{} (group {}): PromiseRevision {} is being deleted\n",
                r.resource.namespace, r.resource.name, r.group, r.revision
            ));
        }
    }
    if !m.multiple_groups.is_empty() {
        out.push_str(&format!(
            "\n{} (upgraded in the first; counted in each)\n",
            style.bold("In more than one group")
        ));
        for r in &m.multiple_groups {
            out.push_str(&format!(
                "   {}/{}: {}\n",
                r.resource.namespace,
                r.resource.name,
                r.groups.join(", ")
            ));
        }
    }
    if !m.unassigned.is_empty() {
        out.push_str(&format!(
            "\n{} (eligible, but no group selects them: they would never be upgraded)\n",
            style.bold("Unassigned")
        ));
        out.push_str(
            "   Selectors match a binding's labels, which Kratix copies from its Resource Request: label the\n   request; a label set only on the ResourceBinding goes when Kratix next reconciles the request.\n",
        );
        for u in &m.unassigned {
            out.push_str(&format!(
                "   {}/{} ({})\n",
                u.resource.namespace, u.resource.name, u.resource.version
            ));
            for w in &u.why {
                out.push_str(&format!("      {}: {}\n", w.group, w.reason));
            }
        }
    }
    if !m.ineligible.is_empty() {
        out.push_str(&format!("\n{}\n", style.bold("Not eligible")));
        let rows: Vec<Vec<String>> = m
            .ineligible
            .iter()
            .map(|r| {
                vec![
                    r.resource.namespace.clone(),
                    r.resource.name.clone(),
                    r.resource.version.clone(),
                    r.reason.clone(),
                ]
            })
            .collect();
        for l in table(style, &["NAMESPACE", "NAME", "VERSION", "REASON"], &rows).lines() {
            out.push_str(&format!("   {l}\n"));
        }
    }
    out
}
