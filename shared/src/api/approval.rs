use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A person's (or a bot's) "go" for one rollout group of one UpgradeRun (spec §13.4): a group
/// with `requireApproval: true` starts only once an UpgradeApproval for it exists.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[kube(
    group = "platform.syntasso.io",
    version = "v1alpha1",
    kind = "UpgradeApproval",
    plural = "upgradeapprovals",
    singular = "upgradeapproval",
    doc = "An UpgradeApproval lets one rollout group of one UpgradeRun start (rolloutGroups[].requireApproval). It may be created before the group is reached; deleting it before the group starts revokes it.",
    category = "kratix",
    printcolumn = r#"{"name":"Run","type":"string","jsonPath":".spec.upgradeRunRef.name"}"#,
    printcolumn = r#"{"name":"Group","type":"string","jsonPath":".spec.group"}"#,
    printcolumn = r#"{"name":"Approver","type":"string","jsonPath":".spec.approver"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeApprovalSpec {
    /// The run whose group is approved.
    pub upgrade_run_ref: UpgradeRunRef,
    /// The rollout group approved, as named in the plan.
    #[schemars(length(min = 1))]
    pub group: String,
    /// Why, or the change ticket: for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// Who approved. `kubectl upgradeplan approve` fills it from a SelfSubjectReview where the API
    /// server has one (1.28+), else from the kubeconfig's user followed by ` (unverified)`; the API
    /// server's audit log stays the authoritative record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approver: Option<String>,
}

/// A reference to an UpgradeRun by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
pub struct UpgradeRunRef {
    #[schemars(length(min = 1))]
    pub name: String,
}
