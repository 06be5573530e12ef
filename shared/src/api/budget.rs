use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{Condition, PlanSelector};

/// A platform-wide cap on upgrades in flight (spec §13.8): the resources in flight in the active
/// runs of every plan it selects never exceed `maxInFlight`, whatever each plan's own
/// `maxConcurrent` allows. Contended units go to the waiting runs in fair shares.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[kube(
    group = "platform.syntasso.io",
    version = "v1alpha1",
    kind = "UpgradeBudget",
    plural = "upgradebudgets",
    singular = "upgradebudget",
    status = "UpgradeBudgetStatus",
    doc = "An UpgradeBudget caps the resource upgrades in flight across every UpgradePlan it selects: a start needs a free unit in every budget that selects its plan, and waiting runs share the free units fairly.",
    category = "kratix",
    printcolumn = r#"{"name":"In Flight","type":"integer","jsonPath":".status.inFlight"}"#,
    printcolumn = r#"{"name":"Max","type":"integer","jsonPath":".spec.maxInFlight"}"#,
    printcolumn = r#"{"name":"Runs","type":"integer","description":"Active runs of the plans it selects","jsonPath":".status.runs"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeBudgetSpec {
    /// How many resource upgrades may be in flight at once across the selected plans' active
    /// runs (verifying and retries included).
    #[schemars(range(min = 1))]
    pub max_in_flight: i64,
    /// Which plans it caps (a Kubernetes label selector over UpgradePlans; `{}` selects every
    /// plan). Omitted: every plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_selector: Option<PlanSelector>,
    /// Only plans of these Promises. Omitted: every Promise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promises: Option<Vec<String>>,
}

/// What the controller found about a budget.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::drop_schema_defaults)]
pub struct UpgradeBudgetStatus {
    /// Resource upgrades in flight now in the active runs of the plans it selects.
    #[serde(default)]
    pub in_flight: i64,
    /// How many active runs it caps now.
    #[serde(default)]
    pub runs: i64,
    /// The runs it holds now (their `Budgeted` condition is True), oldest admitted first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holding: Vec<String>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: whether the budget is valid and enforced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
