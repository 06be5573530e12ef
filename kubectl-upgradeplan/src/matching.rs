//! `match`: which resources a run would take now, group by group, and why the others would not.
//! The assignment is the engine's, the same the controller snapshots.

use chrono::{DateTime, Utc};
use serde::Serialize;
use upgradeplan::api::kratix::{BindingFacts, ResourceBinding};
use upgradeplan::api::UpgradePlan;
use upgradeplan::engine::compile::CompiledPlan;
use upgradeplan::engine::freeze::{hold_at, Freeze, Hold};
use upgradeplan::engine::snapshot::{assign, belongs_to, idle_resources, Assignment, SnapshotResource};
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
}

/// What must happen, beyond windows and earlier groups, before group `index` of `plan` starts.
fn waits_for(plan: &CompiledPlan, index: usize) -> Vec<String> {
    let mut out = Vec::new();
    for g in plan.groups.iter().take(index) {
        if let Some(d) = &g.soak {
            out.push(format!("a {} soak after group {}", d.written, g.name));
        }
    }
    for g in plan.groups.iter().take(index + 1) {
        if g.requires_approval {
            out.push(format!(
                "an approval of group {} (kubectl upgradeplan approve RUN {})",
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource: Option<PlacementJson>,
}

fn placement(
    (plan, compiled): (&UpgradePlan, &CompiledPlan),
    a: &Assignment,
    bindings: &[ResourceBinding],
    freezes: &[Freeze],
    (ns, name): (&str, &str),
    now: DateTime<Utc>,
) -> PlacementJson {
    let is = |r: &SnapshotResource| r.namespace == ns && (r.name == name || r.binding == name);
    let mut placements = Vec::new();
    for (gi, g) in a.snapshot.groups.iter().enumerate() {
        if let Some(pos) = g.resources.iter().position(|r| is(r)) {
            let windows = plan
                .spec
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
                waits_for: waits_for(compiled, gi),
                frozen_by: hold.as_ref().map(|h| h.freeze.clone()),
                frozen_until: hold.as_ref().and_then(|h| h.until),
                hold,
            });
        }
    }
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
    }
}

/// Matches `plan` against `bindings` as at `now`; `resource` is an optional `NS/NAME` to place.
pub fn matching(
    plan: &UpgradePlan,
    bindings: &[ResourceBinding],
    freezes: &[Freeze],
    now: DateTime<Utc>,
    resource: Option<&str>,
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
    let placement = match resource {
        Some(r) => {
            let (ns, n) = r
                .split_once('/')
                .ok_or_else(|| anyhow::anyhow!("--resource takes NAMESPACE/NAME, got {r:?}"))?;
            Some(placement((plan, &compiled), &a, bindings, freezes, (ns, n), now))
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
        resource: placement,
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
        if p.placements.is_empty() {
            out.push_str(&format!(
                "{}/{} would not be upgraded: {}\n",
                p.namespace,
                p.name,
                p.reason.clone().unwrap_or_default()
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
