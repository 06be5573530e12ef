//! Minimal types for the Kratix objects we read (`platform.kratix.io/v1alpha1`).
//!
//! We own none of these; only the fields the engine needs are modelled, and every other field is
//! ignored on read. Deserialization is lenient (defaults everywhere) so that an object missing a
//! field becomes a clear per-object problem rather than a failed watch.

use chrono::{DateTime, Utc};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Label on bindings and revisions naming their Promise.
pub const PROMISE_NAME_LABEL: &str = "kratix.io/promise-name";
/// Label on bindings naming their Resource Request.
pub const RESOURCE_NAME_LABEL: &str = "kratix.io/resource-name";
/// Label on the latest PromiseRevision.
pub const LATEST_REVISION_LABEL: &str = "kratix.io/latest-revision";
/// Label on a Promise carrying its current version.
pub const PROMISE_VERSION_LABEL: &str = "kratix.io/promise-version";
/// Label that asks Kratix to retry a failed upgrade (Kratix removes it).
pub const MANUAL_RECONCILIATION_LABEL: &str = "kratix.io/manual-reconciliation";
/// Condition type Kratix writes on bindings.
pub const UPGRADE_SUCCEEDED: &str = "UpgradeSucceeded";
pub const UPGRADE_IN_PROGRESS: &str = "UpgradeInProgress";
pub const UPGRADE_COMPLETE: &str = "UpgradeComplete";
pub const UPGRADE_FAILED: &str = "UpgradeFailed";
/// `spec.version` of a binding that follows the latest revision.
pub const LATEST_VERSION: &str = "latest";
/// `status.lastAppliedVersion` of an unversioned resource (besides the empty string).
pub const NOT_SET_VERSION: &str = "not-set";

/// A Kratix Promise (we only read its name and labels).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "platform.kratix.io",
    version = "v1alpha1",
    kind = "Promise",
    plural = "promises"
)]
pub struct PromiseSpec {}

/// One version of a Promise.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "platform.kratix.io",
    version = "v1alpha1",
    kind = "PromiseRevision",
    plural = "promiserevisions",
    status = "PromiseRevisionStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct PromiseRevisionSpec {
    #[serde(default)]
    pub promise_ref: NameRef,
    #[serde(default)]
    pub version: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
pub struct PromiseRevisionStatus {
    #[serde(default)]
    pub latest: bool,
}

/// A `{name}` reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct NameRef {
    #[serde(default)]
    pub name: String,
}

/// A `{name, namespace}` reference.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct ObjectRef {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
}

/// Pins one Resource Request to a Promise version.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "platform.kratix.io",
    version = "v1alpha1",
    kind = "ResourceBinding",
    plural = "resourcebindings",
    namespaced,
    status = "ResourceBindingStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceBindingSpec {
    /// Desired version, or `latest`.
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub promise_ref: NameRef,
    #[serde(default)]
    pub resource_ref: ObjectRef,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceBindingStatus {
    #[serde(default)]
    pub last_applied_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<BindingCondition>,
}

/// A condition as Kratix writes it (metav1.Condition, read leniently).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<DateTime<Utc>>,
}

/// Kratix's record of one resource's health (`platform.kratix.io/v1alpha1`, namespaced, in the
/// resource's namespace; spec §13.2). Upstream keeps its fields in `data`, not `spec`, so the
/// type is written out rather than derived.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct HealthRecord {
    #[serde(default)]
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default)]
    pub data: HealthRecordData,
}

/// What a HealthRecord says.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HealthRecordData {
    #[serde(default)]
    pub promise_ref: NameRef,
    #[serde(default)]
    pub resource_ref: ObjectRef,
    /// `unknown`, `ready`, `unhealthy`, `healthy` or `degraded`.
    #[serde(default)]
    pub state: String,
    /// When the health check last ran (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<i64>,
    /// The Promise version the resource ran when it was checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise_version: Option<String>,
}

impl kube::Resource for HealthRecord {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "HealthRecord".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "platform.kratix.io".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1alpha1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "healthrecords".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

/// The Promise an object of Kratix's belongs to: its `kratix.io/promise-name` label (which Kratix
/// always sets), else its `spec.promiseRef.name`. The one rule for bindings and revisions alike.
fn promise_of<'a>(meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, spec_ref: &'a str) -> &'a str {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(PROMISE_NAME_LABEL))
        .map(String::as_str)
        .unwrap_or(spec_ref)
}

impl PromiseRevision {
    /// The Promise this revision belongs to.
    pub fn promise(&self) -> &str {
        promise_of(&self.metadata, &self.spec.promise_ref.name)
    }
}

impl ResourceBinding {
    /// The Promise this binding belongs to.
    pub fn promise(&self) -> &str {
        promise_of(&self.metadata, &self.spec.promise_ref.name)
    }

    /// `status.lastAppliedVersion`, or "" when there is no status.
    pub fn last_applied_version(&self) -> &str {
        self.status
            .as_ref()
            .map(|s| s.last_applied_version.as_str())
            .unwrap_or("")
    }

    /// The `UpgradeSucceeded` condition, if Kratix wrote one.
    pub fn upgrade_condition(&self) -> Option<&BindingCondition> {
        self.status
            .as_ref()?
            .conditions
            .iter()
            .find(|c| c.type_ == UPGRADE_SUCCEEDED)
    }

    /// `status.failedVersion`, if set.
    pub fn failed_version(&self) -> Option<&str> {
        self.status.as_ref()?.failed_version.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_promise_an_object_belongs_to() {
        let mut b = ResourceBinding::new("b", ResourceBindingSpec::default());
        b.spec.promise_ref.name = "from-spec".into();
        assert_eq!(b.promise(), "from-spec", "no label: the promiseRef");
        b.metadata.labels = Some([(PROMISE_NAME_LABEL.to_string(), "from-label".to_string())].into());
        assert_eq!(b.promise(), "from-label", "Kratix's label wins");
        let mut r = PromiseRevision::new("r", PromiseRevisionSpec::default());
        r.spec.promise_ref.name = "redis".into();
        assert_eq!(r.promise(), "redis");
        r.metadata.labels = Some([(PROMISE_NAME_LABEL.to_string(), "redis-label".to_string())].into());
        assert_eq!(r.promise(), "redis-label");
    }
}
