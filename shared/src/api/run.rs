use chrono::{DateTime, Utc};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Condition, RunResult};

/// One execution of an UpgradePlan, and the record of what it did.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[kube(
    group = "platform.syntasso.io",
    version = "v1alpha1",
    kind = "UpgradeRun",
    plural = "upgraderuns",
    singular = "upgraderun",
    status = "UpgradeRunStatus",
    doc = "An UpgradeRun is one execution of an UpgradePlan and the record of what it did. Delete an unfinished run to cancel it.",
    category = "kratix",
    printcolumn = r#"{"name":"Plan","type":"string","jsonPath":".spec.upgradePlanRef.name"}"#,
    printcolumn = r#"{"name":"State","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Completed","type":"integer","jsonPath":".status.completedResources"}"#,
    printcolumn = r#"{"name":"Total","type":"integer","jsonPath":".status.totalResources"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Finished","type":"date","jsonPath":".status.finishedAt"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Revert Of","type":"string","priority":1,"jsonPath":".spec.revertOf.name"}"#,
    validation = Rule::new("has(self.spec.revertOf) == has(oldSelf.spec.revertOf) && (!has(self.spec.revertOf) || self.spec.revertOf == oldSelf.spec.revertOf)")
        .message("spec.revertOf is immutable: create a new run instead")
        .reason(Reason::FieldValueInvalid)
        .field_path(".spec.revertOf"),
    validation = Rule::new("(has(self.spec.respectPolicy) && self.spec.respectPolicy) == (has(oldSelf.spec.respectPolicy) && oldSelf.spec.respectPolicy)")
        .message("spec.respectPolicy is immutable: create a new run instead")
        .reason(Reason::FieldValueInvalid)
        .field_path(".spec.respectPolicy")
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRunSpec {
    /// The plan this run executes. Immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("upgradePlanRef is immutable: create a new run instead"))]
    pub upgrade_plan_ref: UpgradePlanRef,
    /// While true no new resource upgrade starts; upgrades in flight finish. A run created with
    /// suspend=true is a preview: it takes its snapshot and patches nothing.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Set to true to cancel the run (`kubectl upgradeplan cancel RUN`): it becomes Cancelled,
    /// nothing more starts (upgrades in flight finish), and it stays as the record of what it
    /// did. Deleting a run cancels it too, but the record goes with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancel: bool,
    /// This run undoes another run of the same plan (spec §13.7): it moves the resources that
    /// run started back to the versions that run's snapshot recorded for them, group by group in
    /// reverse order (`kubectl upgradeplan revert RUN`). Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revert_of: Option<RevertOf>,
    /// Only for a revert: hold it by the plan's windows, freezes, signal gates, soak and
    /// approvals as an upgrade is held. Omitted or false: only limits, failure budgets, deadlines
    /// and health checks apply, so that a revert in an emergency is not held by a freeze.
    /// Immutable.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub respect_policy: bool,
}

/// The run a revert undoes, and which of its resources.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevertOf {
    /// Name of the UpgradeRun to revert (of the same plan).
    #[schemars(length(min = 1))]
    pub name: String,
    /// Which of its resources: `upgraded` (default: those Kratix upgraded or is upgrading),
    /// `failed` (those whose upgrade failed, or that the run counted Failed), or `all` (both).
    #[serde(default)]
    pub resources: RevertResources,
}

/// Which resources of a run a revert moves back.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RevertResources {
    /// Those Kratix upgraded (at the run's target now, and not counted Failed), or is upgrading
    /// (started by the run, no verdict yet).
    #[default]
    Upgraded,
    /// Those whose upgrade failed (Kratix reported it, or the run counted it Failed).
    Failed,
    /// Both.
    All,
}

impl RevertResources {
    pub fn as_str(self) -> &'static str {
        match self {
            RevertResources::Upgraded => "upgraded",
            RevertResources::Failed => "failed",
            RevertResources::All => "all",
        }
    }
}

/// A reference to an UpgradePlan by name.
impl UpgradeRun {
    /// The plan this run belongs to: its immutable `spec.upgradePlanRef.name` (the plan label may
    /// hold a shortened form, spec §4.2).
    pub fn plan_name(&self) -> &str {
        self.spec.upgrade_plan_ref.name.as_str()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct UpgradePlanRef {
    /// Name of the UpgradePlan (cluster-scoped).
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Observed state of an UpgradeRun.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = super::drop_schema_defaults)]
pub struct UpgradeRunStatus {
    /// "" (plan not resolved yet), Pending, InProgress, Completed, Failed or Cancelled.
    #[serde(default, skip_serializing_if = "RunState::is_unresolved")]
    pub state: RunState,
    /// Resources in the snapshot, summed over groups (a resource in two groups counts twice).
    #[serde(default)]
    pub total_resources: i64,
    /// Resources upgraded, summed over groups.
    #[serde(default)]
    pub completed_resources: i64,
    /// The snapshot ConfigMaps (in the controller's snapshot namespace), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_list_refs: Vec<ResourceListRef>,
    /// Progress of each rollout group, in plan order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollout_groups: Vec<GroupStatus>,
    /// When the snapshot was taken and the run went InProgress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When the run reached Completed, Failed or Cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The newer run of the same plan that superseded this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_by: Option<String>,
    /// Each signal gate of the plan that holds the current group, as last evaluated (spec §13.3):
    /// its own clock for `failAfter`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub gates: Vec<GateStatus>,
    /// PlanResolved, TargetRevisionReady, RunSucceeded, Suspended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// A signal gate as the run last evaluated it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GateStatus {
    /// The gate's name, as in the plan.
    pub name: String,
    /// Whether the gate was open (its query returned nothing).
    pub open: bool,
    /// When the gate last changed between open and closed: a closed gate's `failAfter` counts
    /// from it.
    pub since: DateTime<Utc>,
    /// What the gate said: `gate "<name>": open`, the series that close it, or the error.
    pub message: String,
}

/// A snapshot ConfigMap.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ResourceListRef {
    /// ConfigMap name.
    pub name: String,
    /// SHA-256 of the ConfigMap's data as the controller wrote it; every later read verifies it
    /// (spec §13.7). Absent on runs written before digests were recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Counts of one rollout group.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupStatus {
    /// Group name, as in the plan.
    pub name: String,
    /// Resources in the group's snapshot.
    #[serde(default)]
    pub total: i64,
    /// Resources at the target version.
    #[serde(default)]
    pub succeeded: i64,
    /// Resources whose upgrade failed.
    #[serde(default)]
    pub failed: i64,
    /// Resources skipped (deleted, or changed by someone else).
    #[serde(default)]
    pub skipped: i64,
    /// Resources upgraded and waiting for their health check (counted in flight).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub verifying: i64,
    /// The group has a health check (spec §13.2): until its verdicts are final a success can be
    /// taken back, so `upgradeplan_resource_upgrades_total` counts its successes only then.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub health_checked: bool,
    /// Where the group stands (spec §13.4); absent in runs recorded before phases existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<GroupPhase>,
    /// When the group passed its soak and approval gates and began.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// When every resource of the group had finished (the soak is measured from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// The UpgradeApproval that let the group start (requireApproval): the object's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<String>,
    /// Who approved it (its `spec.approver`). Runs recorded before `approval` existed hold the
    /// object's name here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_by: Option<String>,
    /// When that approval was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_at: Option<DateTime<Utc>>,
    /// The approval's comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// The resources this run counted Failed, in the order it saw them (at most the group's
    /// `maxFailures` + 1): a failure stands for the run even when Kratix later retries the
    /// resource by itself or the controller restarts (spec §5.5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_resources: Vec<ResourceFailure>,
    /// Successes the binding may stop showing, recorded as the run counts them, because an
    /// outcome stands for the run (spec §5.5): a revert's resources moved back in place (their
    /// target is the version they had applied, so they are done once Kratix ran it again after the
    /// revert started them, spec §13.7; a later re-run would make them look unfinished), and
    /// resources another run's upgrade brought to this run's target (that run, or someone, may
    /// move them on; only this run's own starts stay on the binding as its record).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reapplied_resources: Vec<ResourceName>,
    /// The resources this run counted Succeeded, as indexes into the group's snapshot order in
    /// Kubernetes' interval format (`0-479,482`, as a Job's `completedIndexes`), written with the
    /// status that counts them: a success stands for the run, whatever its binding does since
    /// (spec §5.5). In a group with a `healthCheck`, written once its verdicts are final (the
    /// group completed, spec §13.2).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub succeeded_indexes: String,
    /// The resources this run counted Skipped, in the same form: a skip stands for the run, and
    /// the run never starts a skipped resource, even when its binding is set back or created
    /// again.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub skipped_indexes: String,
}

/// A Resource Request, by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ResourceName {
    /// The Resource Request's namespace.
    pub namespace: String,
    /// The Resource Request's name.
    pub name: String,
}

/// A resource a run counted Failed (spec §5.5).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ResourceFailure {
    /// The Resource Request's namespace.
    pub namespace: String,
    /// The Resource Request's name.
    pub name: String,
    /// When the run first saw the failure.
    pub at: DateTime<Utc>,
    /// Why: Kratix's message, the health check's verdict, or the missed progressDeadline.
    pub detail: String,
}

impl GroupStatus {
    /// The UpgradeApproval recorded as letting the group start, if one is: its name (`approval`,
    /// or `approvedBy` in runs recorded before `approval` existed) and when it was created.
    pub fn recorded_approval(&self) -> Option<(&str, DateTime<Utc>)> {
        let name = self.approval.as_deref().or(self.approved_by.as_deref())?;
        Some((name, self.approved_at?))
    }

    /// Who approved the group, when recorded: `approvedBy`, but only beside `approval` (before
    /// `approval` existed, `approvedBy` held the object's name, not who).
    pub fn approver(&self) -> Option<&str> {
        self.approval.as_ref().and(self.approved_by.as_deref())
    }
}

/// Where a rollout group stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum GroupPhase {
    /// Not reached yet.
    Pending,
    /// Reached; waits for an UpgradeApproval.
    AwaitingApproval,
    InProgress,
    /// Completed; the next group waits for its soakDuration.
    Soaking,
    Completed,
    Failed,
}

impl GroupPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupPhase::Pending => "Pending",
            GroupPhase::AwaitingApproval => "AwaitingApproval",
            GroupPhase::InProgress => "InProgress",
            GroupPhase::Soaking => "Soaking",
            GroupPhase::Completed => "Completed",
            GroupPhase::Failed => "Failed",
        }
    }
}

pub(super) fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// Run states.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, Default, JsonSchema)]
pub enum RunState {
    #[default]
    #[serde(rename = "")]
    Unresolved,
    Pending,
    InProgress,
    Completed,
    Failed,
    Cancelled,
}

impl RunState {
    /// "": the run's plan was not found yet (never written: absent means the same).
    pub fn is_unresolved(&self) -> bool {
        *self == RunState::Unresolved
    }

    /// Completed, Failed and Cancelled are final.
    pub fn is_terminal(self) -> bool {
        self.result().is_some()
    }

    /// Pending and InProgress runs are active.
    pub fn is_active(self) -> bool {
        matches!(self, RunState::Pending | RunState::InProgress)
    }

    /// The terminal result this state stands for.
    pub fn result(self) -> Option<RunResult> {
        match self {
            RunState::Completed => Some(RunResult::Completed),
            RunState::Failed => Some(RunResult::Failed),
            RunState::Cancelled => Some(RunResult::Cancelled),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Unresolved => "",
            RunState::Pending => "Pending",
            RunState::InProgress => "InProgress",
            RunState::Completed => "Completed",
            RunState::Failed => "Failed",
            RunState::Cancelled => "Cancelled",
        }
    }
}

/// Condition types and reasons of runs and plans (spec §3.2, §4.3).
pub mod reasons {
    pub const READY: &str = "Ready";
    pub const VALID: &str = "Valid";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const PROMISE_RESOLVED: &str = "PromiseResolved";
    pub const PROMISE_FOUND: &str = "PromiseFound";
    pub const PROMISE_NOT_FOUND: &str = "PromiseNotFound";

    pub const PLAN_RESOLVED: &str = "PlanResolved";
    pub const PLAN_FOUND: &str = "PlanFound";
    pub const PLAN_NOT_FOUND: &str = "PlanNotFound";
    pub const PLAN_INVALID: &str = "PlanInvalid";
    pub const SNAPSHOT_MISSING: &str = "SnapshotMissing";
    /// A snapshot ConfigMap no longer matches the digest recorded when it was written.
    pub const SNAPSHOT_TAMPERED: &str = "SnapshotTampered";
    pub const TARGET_REVISION_READY: &str = "TargetRevisionReady";
    pub const PROMISE_REVISION_READY: &str = "PromiseRevisionReady";
    pub const PROMISE_REVISION_NOT_FOUND: &str = "PromiseRevisionNotFound";
    pub const RUN_SUCCEEDED: &str = "RunSucceeded";
    pub const RUN_COMPLETED: &str = "RunCompleted";
    /// Completed with failed resources, each group within its failure budget (spec §13.1).
    pub const RUN_COMPLETED_WITH_FAILURES: &str = "RunCompletedWithFailures";
    pub const RESOURCE_UPGRADE_FAILED: &str = "ResourceUpgradeFailed";
    pub const RUN_CANCELLED: &str = "RunCancelled";
    pub const SUSPENDED: &str = "Suspended";
    pub const SUPERSEDED: &str = "Superseded";
    /// Signal gates (spec §13.3).
    pub const GATED: &str = "Gated";
    pub const GATE_FIRING: &str = "GateFiring";
    pub const GATE_ERROR: &str = "GateError";
    pub const GATES_OPEN: &str = "GatesOpen";
    pub const GATE_FAILED: &str = "GateFailed";
    /// A plan with signal gates: whether the controller has a Prometheus to read them from.
    pub const GATES_READABLE: &str = "GatesReadable";
    pub const PROMETHEUS_CONFIGURED: &str = "PrometheusConfigured";
    pub const NO_PROMETHEUS: &str = "NoPrometheus";
    /// Approvals (spec §13.4).
    pub const AWAITING_APPROVAL: &str = "AwaitingApproval";
    pub const APPROVAL_REQUIRED: &str = "ApprovalRequired";
    pub const APPROVED: &str = "Approved";
    /// Freezes (spec §13.5).
    pub const FROZEN: &str = "Frozen";
    pub const FREEZE_ACTIVE: &str = "FreezeActive";
    pub const NOT_FROZEN: &str = "NotFrozen";
    /// Upgrade budgets (spec §13.8): True while a budget that selects the plan has no free unit
    /// for the run.
    pub const BUDGETED: &str = "Budgeted";
    pub const BUDGET_EXHAUSTED: &str = "BudgetExhausted";
    pub const WITHIN_BUDGET: &str = "WithinBudget";
    /// A kind the run's plan needs is served by the API server (spec §14.2).
    pub const KINDS_SERVED: &str = "KindsServed";
    pub const KIND_NOT_SERVED: &str = "KindNotServed";
    /// A revert whose run cannot be reverted: gone, of another plan (spec §13.7). Its snapshot
    /// lost or changed reads SnapshotMissing or SnapshotTampered, naming that run's ConfigMap.
    pub const REVERT_NOT_POSSIBLE: &str = "RevertNotPossible";
    /// A revert created by `onFailure: Revert` waits until the run it reverts has recorded its
    /// failure (a crash between creating it and that record must not hide the failure).
    pub const REVERT_READY: &str = "RevertReady";
    pub const REVERTED_RUN_ENDING: &str = "RevertedRunEnding";
    pub const REVERTED_RUN_ENDED: &str = "RevertedRunEnded";
}
