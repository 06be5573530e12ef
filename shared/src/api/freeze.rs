use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{Condition, SelectorRequirement};

/// The most periods a freeze may have: the CRD's `maxItems`, a bound the API server's CEL cost
/// estimate needs.
pub const MAX_FREEZE_PERIODS: usize = 100;

/// A platform-wide blackout (spec §13.5): while any of its periods is active, every group of
/// every matching plan starts no new upgrade, as if a deny window were active.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[kube(
    group = "platform.syntasso.io",
    version = "v1alpha1",
    kind = "UpgradeFreeze",
    plural = "upgradefreezes",
    singular = "upgradefreeze",
    status = "UpgradeFreezeStatus",
    doc = "An UpgradeFreeze is a platform-wide blackout: while one of its periods is active, the matching UpgradePlans start no new resource upgrades (upgrades in flight finish).",
    category = "kratix",
    printcolumn = r#"{"name":"Active","type":"boolean","jsonPath":".status.active"}"#,
    printcolumn = r#"{"name":"Next Start","type":"string","description":"The next frozen stretch's start, RFC 3339 UTC (a date column would print <invalid> for a future time)","jsonPath":".status.nextStart"}"#,
    printcolumn = r#"{"name":"Next End","type":"string","description":"When the current or next frozen stretch ends, RFC 3339 UTC","jsonPath":".status.nextEnd"}"#,
    printcolumn = r#"{"name":"Plans","type":"integer","jsonPath":".status.matchingPlans"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".spec.reason"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeFreezeSpec {
    /// Why upgrades are frozen; shown in the runs it holds ("end-of-year freeze").
    #[schemars(length(min = 1))]
    pub reason: String,
    /// When: one-off periods (start, end) and recurring ones (schedule, duration). At most 100 (a
    /// bound the API server's CEL cost estimate needs).
    #[schemars(length(min = 1, max = MAX_FREEZE_PERIODS))]
    pub periods: Vec<FreezePeriod>,
    /// Which plans it holds (a Kubernetes label selector over UpgradePlans; `{}` selects every
    /// plan). Omitted: every plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_selector: Option<PlanSelector>,
    /// Only plans of these Promises. Omitted: every Promise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promises: Option<Vec<String>>,
}

/// One period of a freeze: either one-off (`start`, `end`) or recurring (`schedule`,
/// `duration`), local to `timeZone` (default UTC).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.start) && has(self.end) && !has(self.schedule) && !has(self.duration)) || (has(self.schedule) && has(self.duration) && !has(self.start) && !has(self.end))")
    .message("a period is either one-off (start and end) or recurring (schedule and duration)"))]
pub struct FreezePeriod {
    /// One-off: the local time it begins, `YYYY-MM-DDTHH:mm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// One-off: the local time it ends (after start), `YYYY-MM-DDTHH:mm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<String>,
    /// Recurring: when each occurrence begins (5-field cron, as windows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// Recurring: how long each occurrence lasts (Go duration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    /// IANA time zone of the local times and the schedule. Default UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// A Kubernetes label selector over UpgradePlans: every term must hold; `{}` selects every plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<SelectorRequirement>>,
}

/// What the controller found about a freeze.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::drop_schema_defaults)]
pub struct UpgradeFreezeStatus {
    /// Whether a period is active now.
    #[serde(default)]
    pub active: bool,
    /// When the next period begins (while active: the one after the current).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_start: Option<DateTime<Utc>>,
    /// When the current or next period ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_end: Option<DateTime<Utc>>,
    /// How many UpgradePlans it holds.
    #[serde(default)]
    pub matching_plans: i64,
    /// `Ready`: whether the freeze can be evaluated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
