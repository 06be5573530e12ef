//! `kubectl upgradeplan budgets`: the UpgradeBudgets, evaluated by the engine the controller uses
//! (not read from their status, which a sharded controller leaves alone): how many upgrades are
//! in flight under each now, the runs it caps and those it holds, and the plans it selects.

use std::collections::BTreeMap;

use serde::Serialize;
use upgradeplan::api::kratix::{BindingFacts, ResourceBinding};
use upgradeplan::api::{UpgradeBudget, UpgradePlan, UpgradeRun};
use upgradeplan::engine::upgrade_budget::{self, BudgetRun};

use crate::output::Style;

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct BudgetJson {
    pub name: String,
    pub max_in_flight: usize,
    pub in_flight: usize,
    /// The plans it selects.
    pub plans: Vec<String>,
    /// The runs of those plans that count against it, with their upgrades in flight: every
    /// active run, and a superseded or ended run while Kratix still works on its upgrades.
    pub runs: Vec<BudgetRunJson>,
    /// The runs it holds now (waiting for a unit), oldest admitted first.
    pub holding: Vec<String>,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRunJson {
    pub name: String,
    pub in_flight: usize,
    pub held: bool,
    /// Not ended, not superseded: one that stood down only holds units until Kratix is done.
    pub active: bool,
}

/// The view of `budgets` over `plans`, `runs` and the bindings of each plan's Promise
/// (`bindings`, by Promise). `detail`: also each budget's plans and runs.
pub fn budgets(
    budgets: &[UpgradeBudget],
    plans: &[UpgradePlan],
    runs: &[UpgradeRun],
    bindings: &BTreeMap<String, Vec<ResourceBinding>>,
    detail: bool,
    style: &Style,
) -> (Vec<BudgetJson>, String) {
    let mut sorted: Vec<&UpgradeBudget> = budgets.iter().collect();
    sorted.sort_by_key(|b| b.metadata.name.clone());
    let plan_refs: Vec<&UpgradePlan> = plans.iter().collect();
    let run_refs: Vec<&UpgradeRun> = runs.iter().collect();
    let working = upgrade_budget::in_flight_by_run(bindings.values().flatten().map(|b| b as &dyn BindingFacts));
    let under = upgrade_budget::runs_under(
        &sorted,
        &plan_refs,
        &run_refs,
        |run| working.get(run).copied().unwrap_or(0),
        |_| 0,
    );
    let json: Vec<BudgetJson> = sorted
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let name = b.metadata.name.clone().unwrap_or_default();
            let mine: Vec<BudgetRun> = under
                .iter()
                .filter(|(selected, _)| selected[i])
                .map(|(_, r)| r.clone())
                .collect();
            let state = upgrade_budget::state(&mine, &name);
            let selected_plans = plans
                .iter()
                .filter(|p| {
                    let labels = p.metadata.labels.clone().unwrap_or_default();
                    upgrade_budget::selects(b, &p.spec.promise_ref.name, &labels)
                })
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            BudgetJson {
                max_in_flight: upgrade_budget::max_in_flight(b),
                in_flight: state.in_flight,
                plans: selected_plans,
                runs: mine
                    .iter()
                    .map(|r| BudgetRunJson {
                        name: r.name.clone(),
                        in_flight: r.in_flight,
                        held: r.held_by.as_deref() == Some(name.as_str()),
                        active: r.active,
                    })
                    .collect(),
                holding: state.holding,
                name,
            }
        })
        .collect();
    let mut out = String::new();
    if json.is_empty() {
        out.push_str("No UpgradeBudgets: each plan is capped by its groups' maxConcurrent only.\n");
        return (json, out);
    }
    let rows: Vec<Vec<String>> = json
        .iter()
        .map(|b| {
            vec![
                b.name.clone(),
                b.in_flight.to_string(),
                b.max_in_flight.to_string(),
                b.runs.iter().filter(|r| r.active).count().to_string(),
                b.holding.len().to_string(),
                b.plans.len().to_string(),
            ]
        })
        .collect();
    out.push_str(&crate::output::table(
        style,
        &["NAME", "IN FLIGHT", "MAX", "RUNS", "HOLDING", "PLANS"],
        &rows,
    ));
    if detail {
        for b in &json {
            out.push('\n');
            out.push_str(&format!(
                "{} — {} of {} in flight\n",
                style.bold(&b.name),
                b.in_flight,
                b.max_in_flight
            ));
            let plans = if b.plans.is_empty() {
                "no plan".to_string()
            } else {
                b.plans.join(", ")
            };
            out.push_str(&format!("  caps:    {plans}\n"));
            if b.runs.is_empty() {
                out.push_str("  runs:    none active\n");
            }
            for r in &b.runs {
                let held = if r.held { ", waiting for a unit" } else { "" };
                let stood_down = if r.active {
                    ""
                } else {
                    ", ended or superseded: until Kratix is done"
                };
                out.push_str(&format!(
                    "  run:     {} ({} in flight{held}{stood_down})\n",
                    r.name, r.in_flight
                ));
            }
        }
    }
    (json, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use upgradeplan::api::{
        reasons, Condition, ConditionStatus, RunState, UpgradeBudgetSpec, UpgradePlanSpec, UpgradeRunStatus,
        UPGRADED_BY_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION,
    };

    fn binding(name: &str, applied: &str, spec: &str, run: &str) -> ResourceBinding {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": name, "namespace": "apps", "annotations": {
                UPGRADED_BY_ANNOTATION: run, UPGRADE_STARTED_AT_ANNOTATION: "2026-06-01T10:00:00Z"}},
            "spec": {"version": spec, "promiseRef": {"name": "redis"}, "resourceRef": {"name": name, "namespace": "apps"}},
            "status": {"lastAppliedVersion": applied}
        }))
        .unwrap()
    }

    #[test]
    fn budgets_show_their_upgrades_in_flight_the_runs_they_cap_and_hold() {
        let budget = UpgradeBudget::new(
            "saturday",
            UpgradeBudgetSpec {
                max_in_flight: 2,
                ..Default::default()
            },
        );
        let mut plan = UpgradePlan::new("redis-plan", UpgradePlanSpec::default());
        plan.spec.promise_ref.name = "redis".into();
        let mut runs: Vec<UpgradeRun> = Vec::new();
        for (name, held) in [("redis-plan-1", false), ("redis-plan-2", true)] {
            let mut run: UpgradeRun = serde_json::from_value(serde_json::json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
                "metadata": {"name": name, "creationTimestamp": "2026-06-01T10:00:00Z"},
                "spec": {"upgradePlanRef": {"name": "redis-plan"}}
            }))
            .unwrap();
            let mut status = UpgradeRunStatus {
                state: RunState::InProgress,
                ..Default::default()
            };
            if held {
                status.conditions.push(Condition {
                    type_: reasons::BUDGETED.into(),
                    status: ConditionStatus::True,
                    reason: reasons::BUDGET_EXHAUSTED.into(),
                    message: upgrade_budget::texts::budgeted("saturday", 2, 2),
                    last_transition_time: Default::default(),
                    observed_generation: None,
                });
            }
            run.status = Some(status);
            runs.push(run);
        }
        let bindings = BTreeMap::from([(
            "redis".to_string(),
            vec![
                binding("a", "v1", "v2", "redis-plan-1"),
                binding("b", "v1", "v2", "redis-plan-1"),
                binding("c", "v2", "v2", "redis-plan-1"),
            ],
        )]);
        let (json, text) = budgets(&[budget], &[plan], &runs, &bindings, true, &Style::plain());
        assert_eq!((json[0].in_flight, json[0].max_in_flight), (2, 2));
        assert_eq!(json[0].holding, vec!["redis-plan-2"]);
        assert!(text.contains("saturday — 2 of 2 in flight"), "{text}");
        assert!(
            text.contains("run:     redis-plan-2 (0 in flight, waiting for a unit)"),
            "{text}"
        );
        // A cancelled run whose upgrade Kratix still works on holds its unit; it is no active run.
        let mut cancelled = runs[0].clone();
        cancelled.metadata.name = Some("redis-plan-0".into());
        cancelled.status.as_mut().unwrap().state = RunState::Cancelled;
        runs.push(cancelled);
        let mut bindings = bindings;
        bindings
            .get_mut("redis")
            .unwrap()
            .push(binding("d", "v1", "v2", "redis-plan-0"));
        let budget = UpgradeBudget::new(
            "saturday",
            UpgradeBudgetSpec {
                max_in_flight: 3,
                ..Default::default()
            },
        );
        let mut plan = UpgradePlan::new("redis-plan", UpgradePlanSpec::default());
        plan.spec.promise_ref.name = "redis".into();
        let (json, text) = budgets(&[budget], &[plan], &runs, &bindings, true, &Style::plain());
        assert_eq!(json[0].in_flight, 3, "{text}");
        let cancelled = json[0].runs.iter().find(|r| r.name == "redis-plan-0").unwrap();
        assert_eq!((cancelled.in_flight, cancelled.active), (1, false));
        assert!(
            text.contains("run:     redis-plan-0 (1 in flight, ended or superseded: until Kratix is done)"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("saturday") && l.split_whitespace().nth(3) == Some("2")),
            "RUNS counts the active runs: {text}"
        );
        let (_, none) = budgets(&[], &[], &[], &BTreeMap::new(), false, &Style::plain());
        assert!(none.starts_with("No UpgradeBudgets"), "{none}");
    }
}
