//! Minimal types for the Kratix objects we read (`platform.kratix.io/v1alpha1`).
//!
//! We own none of these; only the fields the engine needs are modelled, and every other field is
//! ignored on read. Deserialization is lenient (defaults everywhere) so that an object missing a
//! field becomes a clear per-object problem rather than a failed watch.

use std::sync::Arc;

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
/// Label (on a Resource Request, copied to its binding; or on the Promise) with which Kratix
/// pauses the request's reconciliation while it is `"true"`.
pub const PAUSED_LABEL: &str = "kratix.io/paused";
/// Label Kratix sets `"true"` on a Resource Request (copied to its binding) whose workflow it
/// suspended; it reconciles the request again only when asked or the request changes.
pub const WORKFLOW_SUSPENDED_LABEL: &str = "kratix.io/workflow-suspended";
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

/// A Kratix Promise (we read its name, labels, annotations and workflows' reconciliation interval).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Default, JsonSchema)]
#[kube(
    group = "platform.kratix.io",
    version = "v1alpha1",
    kind = "Promise",
    plural = "promises"
)]
pub struct PromiseSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflows: Option<Workflows>,
}

/// A Promise's `spec.workflows`: only its `config`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
pub struct Workflows {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<WorkflowConfig>,
}

/// `spec.workflows.config`: only the interval at which Kratix reconciles the Promise's
/// workflows — and re-runs a failed one by itself (`reconcileAfterFailure`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowConfig {
    /// A Go duration (`metav1.Duration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciliation_interval: Option<String>,
}

/// On a PromiseRevision (mirrored from its Promise for the current version), or a Promise: the
/// interval at which Kratix reconciles its resources, overriding `workflows.config`
/// (`api/v1alpha1/promiserevision_types.go`, `ReconciliationIntervalAnnotation`; at least 1m).
pub const RECONCILIATION_INTERVAL_ANNOTATION: &str = "kratix.io/reconciliation-interval";

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
    /// The Promise's spec at this version: only its workflows' config is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promise_spec: Option<PromiseSpec>,
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
    /// The resource's combined health and the Promise version it describes: not in Kratix yet
    /// (its proposal kratix#945 copies the Resource Request's `status.healthStatus` here). Where
    /// it describes an upgrade's target, it decides that upgrade's health check (spec §2, §13.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_status: Option<BindingHealth>,
}

/// A binding's `status.healthStatus` (kratix#945).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingHealth {
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub promise_version: String,
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
    /// When the health check last ran (Unix seconds). Kratix's records carry no version: this
    /// is how a record is known to be about an upgrade (spec §13.2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<i64>,
    /// The Promise version the check ran against: not in Kratix yet (its proposal kratix#945).
    /// Where a record names one, only the records of an upgrade's target count (spec §2).
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
fn promise_of<'a>(label: Option<&'a str>, spec_ref: &'a str) -> &'a str {
    label.unwrap_or(spec_ref)
}

/// On a PromiseRevision deleted only to replace its object under the same version: Kratix drops
/// its clean-up finalizer without deleting any Resource Request
/// (`api/v1alpha1/promiserevision_types.go`, `SkipResourceRequestCleanupOnDeleteAnnotation`).
pub const SKIP_REQUEST_CLEANUP_ANNOTATION: &str = "kratix.io/skip-resource-request-cleanup-on-delete";

impl PromiseRevision {
    /// The Promise this revision belongs to.
    pub fn promise(&self) -> &str {
        let label = self.metadata.labels.as_ref().and_then(|l| l.get(PROMISE_NAME_LABEL));
        promise_of(label.map(String::as_str), &self.spec.promise_ref.name)
    }

    /// What the engine reads of it.
    pub fn fact(&self) -> RevisionFact {
        let skips_cleanup = self
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SKIP_REQUEST_CLEANUP_ANNOTATION))
            .is_some_and(|v| v == "true");
        RevisionFact {
            version: self.spec.version.clone(),
            name: self.metadata.name.clone().unwrap_or_default(),
            deleting: self.metadata.deletion_timestamp.is_some() && !skips_cleanup,
        }
    }
}

/// A PromiseRevision as the engine reads it (spec §2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionFact {
    /// `spec.version`.
    pub version: String,
    /// `metadata.name`.
    pub name: String,
    /// It has a `deletionTimestamp` and Kratix deletes its resources: its finalizer
    /// `kratix.io/resource-request-cleanup` deletes, on every requeue, each Resource Request whose
    /// binding's `spec.version` names its version (`internal/controller/promiserevision_controller.go`),
    /// so it is never a target (spec §5.7). Not when it is deleted only to be replaced
    /// ([`SKIP_REQUEST_CLEANUP_ANNOTATION`]).
    pub deleting: bool,
}

/// What the engine reads of a ResourceBinding. The plugin reads whole objects from the API
/// server, the controller caches [`CachedBinding`]s holding only these facts; the engine decides
/// on either through this one view.
pub trait BindingFacts: Send + Sync + std::fmt::Debug {
    /// `metadata.namespace` ("" when unset).
    fn binding_namespace(&self) -> &str;
    /// `metadata.name` ("" when unset).
    fn binding_name(&self) -> &str;
    fn label(&self, key: &str) -> Option<&str>;
    fn annotation(&self, key: &str) -> Option<&str>;
    /// Whether `metadata.deletionTimestamp` is set.
    fn being_deleted(&self) -> bool;
    /// `metadata.resourceVersion`: the precondition of a patch.
    fn object_version(&self) -> Option<&str>;
    /// `spec.version`.
    fn spec_version(&self) -> &str;
    /// `spec.promiseRef.name`.
    fn promise_ref_name(&self) -> &str;
    /// `spec.resourceRef.name`.
    fn resource_ref_name(&self) -> &str;
    /// `status.lastAppliedVersion`, or "" when there is no status.
    fn last_applied_version(&self) -> &str;
    /// `status.failedVersion`, if set.
    fn failed_version(&self) -> Option<&str>;
    /// The `UpgradeSucceeded` condition, if Kratix wrote one.
    fn upgrade_condition(&self) -> Option<UpgradeCondition<'_>>;
    /// `status.healthStatus.state` where it describes `version` (kratix#945: not in Kratix yet).
    fn health_state_for(&self, version: &str) -> Option<&str>;

    /// The Promise this binding belongs to.
    fn promise(&self) -> &str {
        promise_of(self.label(PROMISE_NAME_LABEL), self.promise_ref_name())
    }

    /// Why Kratix will not work on this resource now, by the labels it copies from the
    /// Resource Request onto the binding; `None` when nothing says so.
    fn kratix_idle(&self) -> Option<KratixIdle> {
        let set = |key| self.label(key) == Some("true");
        if set(PAUSED_LABEL) {
            Some(KratixIdle::Paused)
        } else if set(WORKFLOW_SUSPENDED_LABEL) {
            Some(KratixIdle::WorkflowSuspended)
        } else {
            None
        }
    }
}

/// Why Kratix will not reconcile a resource now (its Resource Request's labels, which Kratix
/// copies to the binding): an upgrade started on it does not finish until that changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum KratixIdle {
    /// `kratix.io/paused: "true"`: its reconciliation is paused.
    Paused,
    /// `kratix.io/workflow-suspended: "true"`: Kratix suspended its workflow.
    WorkflowSuspended,
}

impl KratixIdle {
    /// The label that says so.
    pub fn label(self) -> &'static str {
        match self {
            KratixIdle::Paused => PAUSED_LABEL,
            KratixIdle::WorkflowSuspended => WORKFLOW_SUSPENDED_LABEL,
        }
    }

    /// "labelled kratix.io/paused: Kratix does not reconcile it (an upgrade would not finish)".
    pub fn words(self) -> String {
        let what = match self {
            KratixIdle::Paused => "Kratix's reconciliation of it is paused",
            KratixIdle::WorkflowSuspended => "Kratix suspended its workflow",
        };
        format!(
            "labelled {}=true: {what}; an upgrade would not finish until the label goes",
            self.label()
        )
    }
}

/// A binding's `UpgradeSucceeded` condition: the fields the engine reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpgradeCondition<'a> {
    pub status: &'a str,
    pub reason: &'a str,
    pub message: &'a str,
    pub last_transition_time: Option<DateTime<Utc>>,
}

impl<'a> From<&'a BindingCondition> for UpgradeCondition<'a> {
    fn from(c: &'a BindingCondition) -> Self {
        UpgradeCondition {
            status: &c.status,
            reason: &c.reason,
            message: &c.message,
            last_transition_time: c.last_transition_time,
        }
    }
}

/// Anything that is, or holds, a binding's facts: lets the engine take lists of whole objects
/// (the plugin), of cached ones, or of trait objects (the controller's caches) alike.
pub trait AsBindingFacts {
    fn facts(&self) -> &dyn BindingFacts;
}

impl<T: BindingFacts> AsBindingFacts for T {
    fn facts(&self) -> &dyn BindingFacts {
        self
    }
}

impl AsBindingFacts for dyn BindingFacts {
    fn facts(&self) -> &dyn BindingFacts {
        self
    }
}

impl BindingFacts for ResourceBinding {
    fn binding_namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }
    fn binding_name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key).map(String::as_str)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata.annotations.as_ref()?.get(key).map(String::as_str)
    }
    fn being_deleted(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
    fn object_version(&self) -> Option<&str> {
        self.metadata.resource_version.as_deref()
    }
    fn spec_version(&self) -> &str {
        &self.spec.version
    }
    fn promise_ref_name(&self) -> &str {
        &self.spec.promise_ref.name
    }
    fn resource_ref_name(&self) -> &str {
        &self.spec.resource_ref.name
    }
    fn last_applied_version(&self) -> &str {
        self.status
            .as_ref()
            .map(|s| s.last_applied_version.as_str())
            .unwrap_or("")
    }
    fn failed_version(&self) -> Option<&str> {
        self.status.as_ref()?.failed_version.as_deref()
    }
    fn health_state_for(&self, version: &str) -> Option<&str> {
        let h = self.status.as_ref()?.health_status.as_ref()?;
        (h.promise_version == version).then_some(h.state.as_str())
    }
    fn upgrade_condition(&self) -> Option<UpgradeCondition<'_>> {
        let conditions = &self.status.as_ref()?.conditions;
        conditions.iter().find(|c| c.type_ == UPGRADE_SUCCEEDED).map(Into::into)
    }
}

/// Annotations the engine reads; a cached binding keeps only these.
pub const READ_ANNOTATIONS: [&str; 3] = [
    crate::api::UPGRADED_BY_ANNOTATION,
    crate::api::UPGRADE_STARTED_AT_ANNOTATION,
    crate::api::RETRY_REQUESTED_BY_ANNOTATION,
];

/// One copy of each string the cached bindings hold. Most of a binding's strings are shared by
/// thousands: label keys, promise and group values, versions, condition reasons and messages, the
/// run that upgraded it, even a start time to the second (docs/performance.md has the figures).
/// Strings no binding holds any more are swept once the table has doubled since the last sweep,
/// so unique values (resource names) cost amortised constant time and never accumulate.
#[derive(Debug, Default)]
pub struct Interner {
    strings: std::collections::HashSet<Arc<str>>,
    swept_at: usize,
}

impl Interner {
    /// The shared copy of `s`.
    pub fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(shared) = self.strings.get(s) {
            return Arc::clone(shared);
        }
        if self.strings.len() >= 2 * self.swept_at.max(512) {
            self.strings.retain(|s| Arc::strong_count(s) > 1);
            self.swept_at = self.strings.len();
        }
        let shared: Arc<str> = s.into();
        self.strings.insert(Arc::clone(&shared));
        shared
    }

    /// How many strings the table holds (some may be unused until the next sweep).
    pub fn len(&self) -> usize {
        self.strings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.strings.is_empty()
    }
}

/// A few string pairs sorted by key: a binding's labels in the controller's cache. A `BTreeMap`
/// allocates a node of eleven entries even for one label (about 550 bytes); at tens of thousands
/// of bindings the labels and annotations were most of the cache.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Pairs(Box<[(Arc<str>, Arc<str>)]>);

impl Pairs {
    /// Interned pairs, sorted and unique by key (the first of equal keys is kept).
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>, strings: &mut Interner) -> Self {
        let mut v: Vec<(Arc<str>, Arc<str>)> = pairs
            .into_iter()
            .map(|(k, v)| (strings.intern(k), strings.intern(v)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|a, b| a.0 == b.0);
        Pairs(v.into_boxed_slice())
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_ref().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_ref())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A ResourceBinding as the controller caches it: only its [`BindingFacts`] (no managedFields,
/// owner references, finalizers, other conditions or annotations the engine does not read), its
/// strings interned.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedBinding {
    pub namespace: Arc<str>,
    /// Not interned (unique); the cache's key shares it.
    pub name: Arc<str>,
    pub labels: Pairs,
    /// Only the [`READ_ANNOTATIONS`].
    pub annotations: Pairs,
    pub being_deleted: bool,
    pub resource_version: Option<Box<str>>,
    pub spec_version: Arc<str>,
    pub promise_ref_name: Arc<str>,
    pub resource_ref_name: Arc<str>,
    pub last_applied_version: Arc<str>,
    pub failed_version: Option<Arc<str>>,
    pub upgrade_condition: Option<CachedCondition>,
    /// `status.healthStatus` (state, promiseVersion), where Kratix writes it (kratix#945); boxed,
    /// so that the bindings without it (all today) pay one pointer.
    pub health: Option<Box<(Arc<str>, Arc<str>)>>,
}

/// The `UpgradeSucceeded` condition of a [`CachedBinding`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedCondition {
    pub status: Arc<str>,
    pub reason: Arc<str>,
    pub message: Arc<str>,
    pub last_transition_time: Option<DateTime<Utc>>,
}

impl CachedBinding {
    /// The facts of `b`, its strings shared through `strings`.
    pub fn new(b: &ResourceBinding, strings: &mut Interner) -> Self {
        let annotations = b.metadata.annotations.iter().flatten();
        let read = annotations.filter(|(k, _)| READ_ANNOTATIONS.contains(&k.as_str()));
        let labels = b.metadata.labels.iter().flatten();
        CachedBinding {
            namespace: strings.intern(b.binding_namespace()),
            name: b.binding_name().into(),
            labels: Pairs::new(labels.map(|(k, v)| (k.as_str(), v.as_str())), strings),
            annotations: Pairs::new(read.map(|(k, v)| (k.as_str(), v.as_str())), strings),
            being_deleted: b.being_deleted(),
            resource_version: b.object_version().map(Into::into),
            spec_version: strings.intern(b.spec_version()),
            promise_ref_name: strings.intern(b.promise_ref_name()),
            resource_ref_name: strings.intern(b.resource_ref_name()),
            last_applied_version: strings.intern(b.last_applied_version()),
            failed_version: b.failed_version().map(|v| strings.intern(v)),
            upgrade_condition: b.upgrade_condition().map(|c| CachedCondition {
                status: strings.intern(c.status),
                reason: strings.intern(c.reason),
                message: strings.intern(c.message),
                last_transition_time: c.last_transition_time,
            }),
            health: b
                .status
                .as_ref()
                .and_then(|s| s.health_status.as_ref())
                .map(|h| Box::new((strings.intern(&h.state), strings.intern(&h.promise_version)))),
        }
    }
}

impl BindingFacts for CachedBinding {
    fn binding_namespace(&self) -> &str {
        &self.namespace
    }
    fn binding_name(&self) -> &str {
        &self.name
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key)
    }
    fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key)
    }
    fn being_deleted(&self) -> bool {
        self.being_deleted
    }
    fn object_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }
    fn spec_version(&self) -> &str {
        &self.spec_version
    }
    fn promise_ref_name(&self) -> &str {
        &self.promise_ref_name
    }
    fn resource_ref_name(&self) -> &str {
        &self.resource_ref_name
    }
    fn last_applied_version(&self) -> &str {
        &self.last_applied_version
    }
    fn failed_version(&self) -> Option<&str> {
        self.failed_version.as_deref()
    }
    fn health_state_for(&self, version: &str) -> Option<&str> {
        let (state, of) = self.health.as_deref()?;
        (&**of == version).then_some(&**state)
    }
    fn upgrade_condition(&self) -> Option<UpgradeCondition<'_>> {
        self.upgrade_condition.as_ref().map(|c| UpgradeCondition {
            status: &c.status,
            reason: &c.reason,
            message: &c.message,
            last_transition_time: c.last_transition_time,
        })
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

    #[test]
    fn a_cached_binding_keeps_every_fact_the_engine_reads_and_nothing_else() {
        use crate::api::{RETRY_REQUESTED_BY_ANNOTATION, UPGRADED_BY_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION};
        let b: ResourceBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {
                "name": "r1-redis", "namespace": "team-a", "resourceVersion": "42", "uid": "u",
                "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["x"],
                "labels": {"env": "prod", PROMISE_NAME_LABEL: "redis", "a": "1"},
                "annotations": {
                    UPGRADED_BY_ANNOTATION: "run-1", UPGRADE_STARTED_AT_ANNOTATION: "2026-01-01T00:00:00Z",
                    RETRY_REQUESTED_BY_ANNOTATION: "run-1",
                    "kubectl.kubernetes.io/last-applied-configuration": "{...a whole object...}"
                }
            },
            "spec": {"version": "v2", "promiseRef": {"name": "spec-promise"}, "resourceRef": {"name": "r1", "namespace": "team-a"}},
            "status": {"lastAppliedVersion": "v1", "failedVersion": "v2",
                "healthStatus": {"state": "degraded", "promiseVersion": "v2"}, "conditions": [
                {"type": "Reconciled", "status": "True", "reason": "Done", "message": "not read"},
                {"type": UPGRADE_SUCCEEDED, "status": "False", "reason": UPGRADE_FAILED, "message": "boom",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ]}
        }))
        .unwrap();
        let mut strings = Interner::default();
        let c = CachedBinding::new(&b, &mut strings);
        let bare = ResourceBinding::new("bare", ResourceBindingSpec::default());
        let facts = |f: &dyn BindingFacts| {
            let keys = ["env", PROMISE_NAME_LABEL, "a", "missing"];
            (
                (
                    f.binding_namespace().to_string(),
                    f.binding_name().to_string(),
                    f.promise().to_string(),
                ),
                keys.map(|k| f.label(k).map(str::to_string)),
                READ_ANNOTATIONS.map(|k| f.annotation(k).map(str::to_string)),
                (f.being_deleted(), f.object_version().map(str::to_string)),
                (
                    f.spec_version().to_string(),
                    f.promise_ref_name().to_string(),
                    f.resource_ref_name().to_string(),
                ),
                (
                    f.last_applied_version().to_string(),
                    f.failed_version().map(str::to_string),
                ),
                ["v1", "v2"].map(|v| f.health_state_for(v).map(str::to_string)),
                f.upgrade_condition().map(|c| {
                    let UpgradeCondition {
                        status,
                        reason,
                        message,
                        last_transition_time,
                    } = c;
                    (
                        status.to_string(),
                        reason.to_string(),
                        message.to_string(),
                        last_transition_time,
                    )
                }),
            )
        };
        assert_eq!(facts(&c), facts(&b), "the same facts from the cache as from the object");
        assert_eq!(
            c.upgrade_condition().map(|c| c.message),
            Some("boom"),
            "the UpgradeSucceeded condition, not the first"
        );
        let cached_bare = CachedBinding::new(&bare, &mut strings);
        assert_eq!(facts(&cached_bare), facts(&bare), "no labels, annotations or status");
        assert_eq!(cached_bare.upgrade_condition(), None);
        assert_eq!(c.promise(), "redis");
        assert_eq!(c.annotations.len(), 3, "only the annotations the engine reads are kept");
        assert!(c
            .annotation("kubectl.kubernetes.io/last-applied-configuration")
            .is_none());
        assert_eq!(c.labels.len(), 3);
    }

    #[test]
    fn bindings_share_their_common_strings_and_unused_ones_are_swept() {
        let mut strings = Interner::default();
        let binding = |name: &str| -> ResourceBinding {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "team-a",
                             "labels": {PROMISE_NAME_LABEL: "redis", RESOURCE_NAME_LABEL: name}},
                "spec": {"version": "v1", "resourceRef": {"name": name}}
            }))
            .unwrap()
        };
        let a = CachedBinding::new(&binding("a"), &mut strings);
        let b = CachedBinding::new(&binding("b"), &mut strings);
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(&a.spec_version, &b.spec_version));
        assert!(Arc::ptr_eq(&a.labels.0[0].1, &b.labels.0[0].1), "{:?}", a.labels);
        assert!(
            Arc::ptr_eq(&a.labels.0[1].1, &a.resource_ref_name),
            "equal strings of one binding are shared too"
        );
        drop(b);
        // Thousands of unique names come and go; the table keeps only what is still held.
        for i in 0..10_000 {
            CachedBinding::new(&binding(&format!("gone-{i}")), &mut strings);
        }
        assert!(strings.len() < 2_100, "{} strings kept", strings.len());
        let again = CachedBinding::new(&binding("a"), &mut strings);
        assert!(
            Arc::ptr_eq(&again.resource_ref_name, &a.resource_ref_name),
            "a held string survives sweeps"
        );
    }

    #[test]
    fn pairs_are_sorted_unique_and_found_by_key() {
        let p = Pairs::new(
            [("b", "2"), ("a", "1"), ("c", "3"), ("a", "again")],
            &mut Interner::default(),
        );
        assert_eq!(p.len(), 3, "keys are unique (as in a map)");
        assert_eq!(
            (p.get("a"), p.get("b"), p.get("c"), p.get("d")),
            (Some("1"), Some("2"), Some("3"), None)
        );
        assert!(Pairs::default().is_empty());
        assert_eq!(Pairs::default().get("a"), None);
    }
}
