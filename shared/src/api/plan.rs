use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Condition;

/// The most rollout groups a plan may have: the CRD's `maxItems`, a bound the API server's CEL
/// cost estimate needs (it refuses the CRD without one).
pub const MAX_ROLLOUT_GROUPS: usize = 100;
/// The longest `maxConcurrent` or `maxFailures` written as a string (the CRD's `maxLength`, for
/// the same reason).
pub const MAX_COUNT_OR_PERCENT_LEN: usize = 16;

/// An UpgradePlan moves the resources of one Promise from some versions to one target version:
/// which resources (rollout groups chosen by labels, in order), how many at a time, and when.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "platform.syntasso.io",
    version = "v1alpha1",
    kind = "UpgradePlan",
    plural = "upgradeplans",
    singular = "upgradeplan",
    status = "UpgradePlanStatus",
    doc = "An UpgradePlan upgrades the resources of one Promise from some versions to another on a plan: which resources (rollout groups, in order), how many at a time, and when.",
    category = "kratix",
    printcolumn = r#"{"name":"Promise","type":"string","jsonPath":".spec.promiseRef.name"}"#,
    printcolumn = r#"{"name":"From","type":"string","jsonPath":".spec.upgradePath.from","priority":1}"#,
    printcolumn = r#"{"name":"To","type":"string","jsonPath":".spec.upgradePath.to"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Active Run","type":"string","jsonPath":".status.activeRunRef"}"#,
    printcolumn = r#"{"name":"Last Result","type":"string","jsonPath":".status.lastRun.result"}"#,
    printcolumn = r#"{"name":"Next Run","type":"string","description":"The earliest future trigger, RFC 3339 UTC (a date column would print <invalid> for a future time)","jsonPath":".status.nextRunAt"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    validation = Rule::new("!has(self.spec.upgradeExecutionPolicy) || size(self.metadata.name) <= 229")
        .message("metadata.name: a plan with spec.upgradeExecutionPolicy must have a name of at most 229 characters, so that its run names (<plan>-YYYYMMDD-HHMM) fit in 253")
        .reason(Reason::FieldValueInvalid)
        .field_path(".spec.upgradeExecutionPolicy")
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePlanSpec {
    /// The Promise whose resources this plan upgrades. The Promise need not exist yet: the plan
    /// reports PromiseResolved=False until it does.
    pub promise_ref: PromiseRef,
    /// Which versions are upgraded, and to which version.
    pub upgrade_path: UpgradePath,
    /// When runs are created automatically. Omitted: the controller never creates runs for this
    /// plan; create an UpgradeRun by hand (or `kubectl upgradeplan run`) to execute it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_execution_policy: Option<UpgradeExecutionPolicy>,
    /// Ordered groups of resources. A group starts only when the previous one completed. Group names
    /// are unique. At most 100 (a bound the API server's CEL cost estimate needs).
    #[schemars(length(min = 1, max = MAX_ROLLOUT_GROUPS))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub rollout_groups: Vec<RolloutGroup>,
    /// Stop creating scheduled runs while true. Triggers that pass while suspended are skipped, not
    /// back-filled. Runs already running are not touched (suspend the run for that).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// How many finished runs of this plan to keep; the controller deletes the oldest beyond each
    /// limit (with their snapshots). Omitted: every run is kept, as in SKE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_history_limit: Option<RunHistoryLimit>,
    /// Signals that hold new upgrades while the platform is unwell: before starting upgrades in a
    /// group, each gate that applies to it is evaluated (a Prometheus instant query), and a closed
    /// gate holds new starts (upgrades in flight continue). Omitted: no gates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub gates: Option<Vec<Gate>>,
}

/// A signal gate (spec §13.3).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Gate {
    /// Name of the gate, unique within the plan (a DNS label).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// The signal.
    pub prometheus: PrometheusGate,
    /// The rollout groups the gate holds. Omitted: every group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    /// Fail the run when the gate has been closed this long, as a Go duration (`2h`). Omitted:
    /// wait for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub fail_after: Option<String>,
}

/// A Prometheus signal.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
pub struct PrometheusGate {
    /// A PromQL instant query. The gate is closed while it returns any series (or a non-zero
    /// scalar), and whenever it cannot be evaluated. Typical:
    /// `ALERTS{alertstate="firing",severity="critical",alertname!~"Upgrade.+"}` (without this
    /// product's own alerts, which a failed run of any plan keeps firing for an hour).
    #[schemars(length(min = 1))]
    pub query: String,
}

/// How many finished runs of a plan to keep, by outcome. Each omitted limit keeps every run of
/// that kind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
pub struct RunHistoryLimit {
    /// Completed runs to keep (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub succeeded: Option<i32>,
    /// Failed and Cancelled runs to keep, and superseded runs once the run that superseded them
    /// has finished (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failed: Option<i32>,
}

/// A reference to a Promise by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
pub struct PromiseRef {
    /// Name of the Promise (cluster-scoped).
    #[schemars(length(min = 1))]
    pub name: String,
}

/// The versions a plan moves from, and the version it moves to.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
pub struct UpgradePath {
    /// Versions eligible for the upgrade, compared with each resource binding's
    /// status.lastAppliedVersion. A plain string is an exact match; a string wrapped in slashes is
    /// a regular expression anchored to the whole version (`/v1\..*/` matches `v1.2` but not
    /// `xv1.2`).
    #[schemars(length(min = 1), inner(length(min = 1)))]
    pub from: Vec<String>,
    /// The target version. An exact version: not a /regex/ and not `latest`.
    #[schemars(length(min = 1))]
    #[x_kube(
        validation = Rule::new("!(size(self) >= 2 && self.startsWith('/') && self.endsWith('/'))")
            .message("must be an exact version, not a /regex/ pattern"),
        validation = Rule::new("self != 'latest'")
            .message("must be an exact version: 'latest' is not a version a resource can be pinned to")
    )]
    pub to: String,
}

/// When the controller creates runs of this plan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.repeatSchedule) || has(self.executeAt)")
    .message("set repeatSchedule, executeAt, or both"))]
pub struct UpgradeExecutionPolicy {
    /// Recurring trigger: a standard 5-field cron expression (minute hour day-of-month month
    /// day-of-week), e.g. `0 23 * * 6` for every Saturday at 23:00 in timeZone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat_schedule: Option<String>,
    /// One-off trigger: a local time in timeZone, exactly `YYYY-MM-DDTHH:mm` (no seconds, no zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}$"))]
    pub execute_at: Option<String>,
    /// IANA time zone (e.g. `Europe/London`) for both repeatSchedule and executeAt. Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// A trigger found more than this late (after a controller outage, or a plan fixed days
    /// later) is not run: it is recorded as missed (Warning event TriggerMissed), as CronJob's
    /// startingDeadlineSeconds. A Go duration (`2h`). Omitted: the latest missed trigger runs
    /// however late (SKE's behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub starting_deadline: Option<String>,
}

/// A named set of resources, chosen by labels, upgraded together.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutGroup {
    /// Name of the group, unique within the plan.
    #[schemars(length(min = 1))]
    pub name: String,
    /// Which resource bindings belong to the group. Omitted or empty selects nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selectors: Option<RolloutSelectors>,
    /// At most this many of the group's resources upgrade at the same time: an integer ≥ 1, or a
    /// percentage "1%"–"100%" of the group's size (rounded down, at least 1). Omitted: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = MAX_COUNT_OR_PERCENT_LEN))]
    #[x_kube(validation = Rule::new("string(self).matches('^([1-9][0-9]*|([1-9][0-9]?|100)%)$')")
        .message("must be an integer of at least 1 or a percentage from \"1%\" to \"100%\""))]
    pub max_concurrent: Option<IntOrString>,
    /// When new upgrades in this group may start. No windows: any time. Only allow windows: while
    /// one is active. Only deny windows: unless one is active. Both: while an allow is active and
    /// no deny is. Upgrades already started are never interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_upgrade_windows: Option<Vec<UpgradeWindow>>,
    /// How many of the group's resources may fail while the group still completes and the next
    /// one starts: an integer ≥ 0, or a percentage "0%"–"100%" of the group's size, rounded up
    /// ("10%" of 8 tolerates 1). Omitted or 0: the first failure fails the run (SKE's behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = MAX_COUNT_OR_PERCENT_LEN))]
    #[x_kube(validation = Rule::new("string(self).matches('^([0-9]+|([0-9]|[1-9][0-9]|100)%)$')")
        .message("must be an integer of 0 or more or a percentage from \"0%\" to \"100%\""))]
    pub max_failures: Option<IntOrString>,
    /// A started resource that has neither succeeded nor failed this long after its start counts
    /// as failed (against maxFailures) and frees its slot, as a Go duration (`30m`, `2h`). If it
    /// succeeds later, it counts as succeeded then. Omitted: no deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub progress_deadline: Option<String>,
    /// Verify each upgraded resource through Kratix's HealthRecords: after its upgrade succeeds it
    /// is Verifying (and still takes a slot) until its HealthRecords, combined as Kratix combines
    /// them (the worst state wins), say healthy or ready, and it fails when they say unhealthy or
    /// degraded or none arrives within `timeout`.
    /// Omitted: a successful upgrade is a success (SKE's behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,
    /// Wait this long after this group completes before the next group starts, as a Go duration
    /// (`2h`): time to look at the canary. Omitted: the next group starts at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub soak_duration: Option<String>,
    /// The group starts only once an UpgradeApproval exists for it and the run
    /// (`kubectl upgradeplan approve RUN GROUP`). Omitted or false: no approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_approval: Option<bool>,
    /// What happens when the run fails in this group: `Stop` (default, SKE's behaviour: the run
    /// ends Failed) or `Revert`: the controller also creates `<run>-revert`, which moves back the
    /// resources the run upgraded or failed in this group and the groups before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_failure: Option<OnFailure>,
}

/// What a run does when it fails in this group: `Stop` (the default, SKE's behaviour: the run
/// ends Failed and nothing is undone) or `Revert`: the controller also creates the run's revert,
/// `<run>-revert`, once, for the resources the run upgraded or failed in this group and the groups
/// before it (`kubectl upgradeplan revert RUN --resources all`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum OnFailure {
    /// The run ends Failed; nothing is undone.
    #[default]
    Stop,
    /// The run ends Failed and its revert is created once.
    Revert,
}

/// How an upgraded resource's health is verified (spec §13.2).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// How long after its upgrade succeeded a resource may wait for a conclusive HealthRecord
    /// (healthy, ready, unhealthy or degraded) before it counts as failed, as a Go duration
    /// (`10m`, `1h`).
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub timeout: String,
}

/// Label selectors over resource bindings. Every term is ANDed. Unlike Kubernetes label
/// selectors, an empty selector matches nothing.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.matchAll) || !self.matchAll || (!has(self.matchLabels) && !has(self.matchExpressions))")
    .message("matchAll selects every remaining resource and cannot be combined with matchLabels or matchExpressions"))]
pub struct RolloutSelectors {
    /// Labels the binding must carry with exactly these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Requirements the binding's labels must all satisfy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<SelectorRequirement>>,
    /// Select every eligible binding that no earlier group selected. Must be used alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_all: Option<bool>,
}

/// One label requirement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(validation = Rule::new("self.operator in ['In', 'NotIn'] ? (has(self.values) && size(self.values) > 0) : (!has(self.values) || size(self.values) == 0)")
    .message("values must be non-empty for In and NotIn, and must be omitted for Exists and DoesNotExist")
    .field_path(".values"))]
pub struct SelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1))]
    pub key: String,
    /// How the key's value is compared: In, NotIn, Exists or DoesNotExist.
    pub operator: SelectorOperator,
    /// Values for In and NotIn (non-empty); omitted for Exists and DoesNotExist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// Selector operators.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

/// A recurring time window that allows or denies the start of upgrades.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeWindow {
    /// `allow`: upgrades may start while the window is active. `deny`: they may not.
    pub kind: WindowKind,
    /// When the window opens: a standard 5-field cron expression in timeZone.
    #[schemars(length(min = 1))]
    pub schedule: String,
    /// How long the window stays active after each opening, as a Go duration (`4h`, `30m`,
    /// `1h30m`); elapsed time, so a 4h window lasts 4 real hours across a daylight-saving change.
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    #[x_kube(validation = Rule::new("duration(self) > duration('0s')").message("must be greater than zero"))]
    pub duration: String,
    /// IANA time zone of schedule (e.g. `Europe/London`). Default `UTC`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
}

/// Kind of an upgrade window.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WindowKind {
    Allow,
    Deny,
}

/// Observed state of an UpgradePlan.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::drop_schema_defaults)]
pub struct UpgradePlanStatus {
    /// The metadata.generation the controller last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Running` while a run of this plan is Pending or InProgress, otherwise `Available`. Success
    /// or failure is not a phase: see lastRun.
    #[serde(default)]
    pub phase: PlanPhase,
    /// Name of the plan's active (Pending or InProgress, not superseded) run; empty when none.
    // Omitted when empty: no active run is an absent field, as in every other optional status field.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub active_run_ref: String,
    /// The earliest future trigger (RFC 3339, UTC). Absent without an execution policy or when
    /// nothing will fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<DateTime<Utc>>,
    /// The trigger time most recently serviced (a run created, or skipped while suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scheduled_at: Option<DateTime<Utc>>,
    /// Summary of the most recent run that finished. Never cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<LastRun>,
    /// `Ready` (is the spec valid?) and `PromiseResolved` (does the Promise exist?).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
    /// What the plan's deleted runs counted: the counters (`upgradeplan_runs_total`,
    /// `upgradeplan_runs_superseded_total`, `upgradeplan_resource_upgrades_total`) are read from
    /// the plan's runs at scrape time, and a run lets go of its finalizer only once its counts
    /// are kept here, so that they never move back (spec §14.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_runs: Option<DeletedRunCounts>,
}

/// The counts of a plan's deleted runs, summed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeletedRunCounts {
    /// UIDs of runs counted here that are still being deleted (not counted from the run too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub uids: Vec<String>,
    /// Runs that ended, by trigger (`scheduled`, `manual`, `revert`) and result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<DeletedRunCount>,
    /// Runs superseded.
    #[serde(default, skip_serializing_if = "super::run::is_zero")]
    pub superseded: i64,
    /// Resource outcomes, by group and result (`succeeded`, `failed`, `skipped`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<DeletedResourceCount>,
}

/// Runs of one trigger and result.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct DeletedRunCount {
    /// How the runs came to be: `scheduled`, `manual` or `revert`.
    pub trigger: String,
    /// How they ended: `Completed`, `Failed` or `Cancelled`.
    pub result: String,
    /// How many.
    pub count: i64,
}

/// Resource outcomes of one group and result.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct DeletedResourceCount {
    /// The rollout group's name.
    pub group: String,
    /// `succeeded`, `failed` or `skipped`.
    pub result: String,
    /// How many.
    pub count: i64,
}

/// Plan phases.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
pub enum PlanPhase {
    #[default]
    Available,
    Running,
}

/// The outcome of the most recent finished run.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastRun {
    /// Name of the UpgradeRun.
    pub name: String,
    /// When it reached its terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Completed, Failed or Cancelled.
    pub result: RunResult,
    /// Reason of the run's RunSucceeded condition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Message of the run's RunSucceeded condition.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// Terminal outcome of a run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RunResult {
    Completed,
    Failed,
    Cancelled,
}

impl RunResult {
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Completed => "Completed",
            RunResult::Failed => "Failed",
            RunResult::Cancelled => "Cancelled",
        }
    }
}
