//! The writes a run's step sends, as typed values: to ResourceBindings (spec §5.5, §14.1) and to
//! UpgradeRuns (its own metadata; an older run asked to stand down, spec §5.2).
//!
//! A start sets `spec.version` to the run's target; a retry adds Kratix's
//! `kratix.io/manual-reconciliation` label (Kratix re-runs the workflow and removes the label).
//! Both name the run as the upgrade's author and when it began, the clock of the group's
//! `progressDeadline`, with the step's `now`. Each carries the binding's resourceVersion as it was
//! evaluated: a binding changed since is not overwritten.
//!
//! One definition serves every reader: the controller sends each patch's `merge_patch`, and the
//! engine's tables, the forecast and the simulation change objects with its `apply`.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::kratix::{ResourceBinding, MANUAL_RECONCILIATION_LABEL};
use kube::{Resource, ResourceExt};

use crate::api::{
    UpgradeApproval, UpgradeRun, RETRY_REQUESTED_BY_ANNOTATION, RUN_FINALIZER, SUPERSEDED_BY_ANNOTATION,
    UPGRADED_BY_ANNOTATION, UPGRADED_TO_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION,
};
use crate::engine::run::{BindingAction, Evaluation};
use crate::engine::snapshot::SnapshotResource;
use crate::engine::stage::ApprovalFact;

/// What a patch asks of Kratix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// `spec.version := to`, from the version the binding had applied.
    Start { from: String, to: String },
    /// Kratix re-runs the failed workflow of the version already requested.
    Retry,
}

/// One merge patch of one ResourceBinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingPatch {
    pub resource: Arc<SnapshotResource>,
    /// The precondition: the binding's resourceVersion when the step evaluated it.
    pub resource_version: Option<String>,
    pub attempt: Attempt,
    /// Labels and annotations merged into the binding's own.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The patch would overwrite a change the step did not see: the object's resourceVersion is
/// no longer the one evaluated (the API server answers 409).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object} changed since it was evaluated (resourceVersion {expected:?}, now {found:?})")]
pub struct Conflict {
    /// `<kind> <name>` or `<kind> <namespace>/<name>`.
    pub object: String,
    pub expected: Option<String>,
    pub found: Option<String>,
}

impl Conflict {
    /// `Err` unless the object is still at the `expected` resourceVersion (none expected: any).
    fn check(
        object: impl FnOnce() -> String,
        expected: Option<&String>,
        found: Option<&String>,
    ) -> Result<(), Conflict> {
        match expected {
            Some(expected) if found != Some(expected) => Err(Conflict {
                object: object(),
                expected: Some(expected.clone()),
                found: found.cloned(),
            }),
            _ => Ok(()),
        }
    }
}

impl BindingPatch {
    /// The patch of `action`'s binding for `attempt`, whose target is `to` (the version the
    /// binding is moved to, or for a retry is at).
    fn new(action: &BindingAction, attempt: Attempt, to: &str, run: &str, now: DateTime<Utc>) -> Self {
        let mut annotations = BTreeMap::from([
            (UPGRADED_BY_ANNOTATION.to_string(), run.to_string()),
            (UPGRADED_TO_ANNOTATION.to_string(), to.to_string()),
            (UPGRADE_STARTED_AT_ANNOTATION.to_string(), crate::time::rfc3339(now)),
        ]);
        let mut labels = BTreeMap::new();
        if attempt == Attempt::Retry {
            // A retry is a new attempt by this run (spec §5.5): it names the run as the upgrade's
            // author, and its progressDeadline counts from now, not from the first start.
            labels.insert(MANUAL_RECONCILIATION_LABEL.to_string(), "true".to_string());
            annotations.insert(RETRY_REQUESTED_BY_ANNOTATION.to_string(), run.to_string());
        }
        BindingPatch {
            resource: Arc::clone(&action.resource),
            resource_version: action.resource_version.clone(),
            attempt,
            labels,
            annotations,
        }
    }

    /// Upgrades `action`'s binding to `to` (a revert: to the resource's own target), started by
    /// `run` at `now`. A revert whose target is the version Kratix applied (the upgrade failed, or
    /// had not run yet) also asks Kratix to reconcile: Kratix compares the desired version with
    /// the Resource Request's, which still says that version, so the version alone would leave
    /// the failed attempt where it is instead of running the old version's workflows again.
    pub fn start(action: &BindingAction, to: &str, run: &str, now: DateTime<Utc>) -> Self {
        let to = action.resource.target(to);
        let attempt = Attempt::Start {
            from: action.from.clone(),
            to: to.to_string(),
        };
        let mut patch = Self::new(action, attempt, to, run, now);
        if action.resource.target.is_some() && action.from == to {
            patch
                .labels
                .insert(MANUAL_RECONCILIATION_LABEL.to_string(), "true".to_string());
        }
        patch
    }

    /// Asks Kratix to retry `action`'s binding (at the run's target `to`, or the resource's
    /// own in a revert), for `run` at `now`.
    pub fn retry(action: &BindingAction, to: &str, run: &str, now: DateTime<Utc>) -> Self {
        Self::new(action, Attempt::Retry, action.resource.target(to), run, now)
    }

    /// An evaluation's writes in the order they are sent: retries, then starts (both admitted by
    /// the same admission; spec §14.1).
    pub fn of_evaluation(eval: &Evaluation, to: &str, run: &str, now: DateTime<Utc>) -> Vec<Self> {
        Self::of_actions(&eval.retry, &eval.start, to, run, now)
    }

    fn of_actions(
        retry: &[BindingAction],
        start: &[BindingAction],
        to: &str,
        run: &str,
        now: DateTime<Utc>,
    ) -> Vec<Self> {
        let retries = retry.iter().map(|a| Self::retry(a, to, run, now));
        let starts = start.iter().map(|a| Self::start(a, to, run, now));
        retries.chain(starts).collect()
    }

    /// The version this patch sets, for a start.
    pub fn version(&self) -> Option<&str> {
        match &self.attempt {
            Attempt::Start { to, .. } => Some(to),
            Attempt::Retry => None,
        }
    }

    /// The JSON merge patch (RFC 7386) the API server receives; the resourceVersion in it makes
    /// the server refuse the patch (409) if the binding changed since.
    pub fn merge_patch(&self) -> Value {
        let mut metadata = added_metadata(&self.labels, &self.annotations);
        if let Some(rv) = &self.resource_version {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
        let mut body = json!({ "metadata": metadata });
        if let Some(version) = self.version() {
            body["spec"] = json!({ "version": version });
        }
        body
    }

    /// Applies the patch to `binding` as the API server would (the resourceVersion, which the
    /// server moves on, is left to the caller).
    pub fn apply(&self, binding: &mut ResourceBinding) -> Result<(), Conflict> {
        Conflict::check(
            || format!("ResourceBinding {}/{}", self.resource.namespace, self.resource.binding),
            self.resource_version.as_ref(),
            binding.metadata.resource_version.as_ref(),
        )?;
        add_metadata(&mut binding.metadata, &self.labels, &self.annotations);
        if let Some(version) = self.version() {
            binding.spec.version = version.to_string();
        }
        Ok(())
    }
}

/// Labels and annotations a patch adds, as merge-patch members (an empty map is left out: a merge
/// patch merges maps key by key, so it would change nothing).
fn added_metadata(
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> serde_json::Map<String, Value> {
    let mut metadata = serde_json::Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), json!(labels));
    }
    if !annotations.is_empty() {
        metadata.insert("annotations".into(), json!(annotations));
    }
    metadata
}

/// The same labels and annotations merged into an object's own, as the API server merges them.
fn add_metadata(meta: &mut ObjectMeta, labels: &BTreeMap<String, String>, annotations: &BTreeMap<String, String>) {
    if !labels.is_empty() {
        meta.labels.get_or_insert_with(Default::default).extend(labels.clone());
    }
    if !annotations.is_empty() {
        meta.annotations
            .get_or_insert_with(Default::default)
            .extend(annotations.clone());
    }
}

/// One merge patch of one UpgradeRun: labels and annotations it lacks, its owner references, and
/// `spec.suspend=true`. A run's own ([`crate::engine::lifecycle::Step::own`]) carries what spec
/// §4.2 says a run is labelled with, with the run's resourceVersion as read as precondition: it
/// was decided from that copy, and the status written after it is conditional on the version the
/// patch returns, so a step computed from a stale copy must be refused here (409) rather than let
/// through. [`RunPatch::supersede`] asks an older run to stand down, unconditionally: it only adds
/// what the newer run decided the older must carry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunPatch {
    /// The UpgradeRun patched.
    pub run: String,
    /// The precondition: the run's resourceVersion as the step read it.
    pub resource_version: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The run's whole list (a merge patch replaces a list): its other owners, then its plan as
    /// controller. `None` leaves the list alone.
    pub owner_references: Option<Vec<OwnerReference>>,
    pub suspend: bool,
}

impl RunPatch {
    /// An empty patch of `run`.
    pub fn of(run: &str) -> Self {
        RunPatch {
            run: run.to_string(),
            ..Default::default()
        }
    }

    /// An empty patch of `run` by its own step, conditional on the run as read.
    pub fn own(run: &UpgradeRun) -> Self {
        RunPatch {
            resource_version: run.metadata.resource_version.clone(),
            ..Self::of(&run.metadata.name.clone().unwrap_or_default())
        }
    }

    /// Asks the older run to stand down (`spec.suspend=true`) naming the newer run; the older
    /// run's own reconcile records `supersededBy` (spec §5.2).
    pub fn supersede(older: &str, newer: &str) -> Self {
        RunPatch {
            annotations: BTreeMap::from([(SUPERSEDED_BY_ANNOTATION.to_string(), newer.to_string())]),
            suspend: true,
            ..Self::of(older)
        }
    }

    /// Nothing to send.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty() && self.owner_references.is_none() && !self.suspend
    }

    /// The JSON merge patch (RFC 7386) the API server receives.
    pub fn merge_patch(&self) -> Value {
        let mut metadata = added_metadata(&self.labels, &self.annotations);
        if let Some(owners) = &self.owner_references {
            metadata.insert("ownerReferences".into(), json!(owners));
        }
        if let Some(rv) = &self.resource_version {
            metadata.insert("resourceVersion".into(), json!(rv));
        }
        let mut body = serde_json::Map::new();
        if !metadata.is_empty() {
            body.insert("metadata".into(), Value::Object(metadata));
        }
        if self.suspend {
            body.insert("spec".into(), json!({"suspend": true}));
        }
        Value::Object(body)
    }

    /// Applies the patch to `run` as the API server would (the resourceVersion, which the
    /// server moves on, is left to the caller).
    pub fn apply(&self, run: &mut UpgradeRun) -> Result<(), Conflict> {
        Conflict::check(
            || format!("UpgradeRun {}", self.run),
            self.resource_version.as_ref(),
            run.metadata.resource_version.as_ref(),
        )?;
        add_metadata(&mut run.metadata, &self.labels, &self.annotations);
        if let Some(owners) = &self.owner_references {
            run.metadata.owner_references = Some(owners.clone());
        }
        if self.suspend {
            run.spec.suspend = true;
        }
        Ok(())
    }
}

/// Makes a run an owner of one of its UpgradeApprovals (spec §13.4), so that the approval is
/// garbage-collected with it: the approval's owners as read plus the run's, with the read
/// resourceVersion as precondition, so that it never re-creates an approval deleted meanwhile
/// (404) nor drops an owner someone added since (409); either way a later pass adopts it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalPatch {
    pub approval: String,
    pub resource_version: Option<String>,
    pub owner_references: Vec<OwnerReference>,
}

impl ApprovalPatch {
    /// The adoptions `run` owes: of its approvals that it does not own yet. None for a run
    /// without a UID (not created yet: nothing can refer to it).
    pub fn adoptions(run: &UpgradeRun, approvals: &[ApprovalFact]) -> Vec<Self> {
        let Some(mut owner) = run.controller_owner_ref(&()) else {
            return Vec::new();
        };
        // An owner, not the controller: the approval stays the approver's object.
        owner.controller = None;
        approvals
            .iter()
            .filter(|a| !a.owners.iter().any(|o| o.uid == owner.uid))
            .map(|a| ApprovalPatch {
                approval: a.name.clone(),
                resource_version: a.resource_version.clone(),
                owner_references: a.owners.iter().cloned().chain([owner.clone()]).collect(),
            })
            .collect()
    }

    /// The JSON merge patch (RFC 7386) the API server receives.
    pub fn merge_patch(&self) -> Value {
        let mut metadata = json!({ "ownerReferences": self.owner_references });
        if let Some(rv) = &self.resource_version {
            metadata["resourceVersion"] = json!(rv);
        }
        json!({ "metadata": metadata })
    }

    /// Applies the patch to `approval` as the API server would.
    pub fn apply(&self, approval: &mut UpgradeApproval) -> Result<(), Conflict> {
        Conflict::check(
            || format!("UpgradeApproval {}", self.approval),
            self.resource_version.as_ref(),
            approval.metadata.resource_version.as_ref(),
        )?;
        approval.metadata.owner_references = Some(self.owner_references.clone());
        Ok(())
    }
}

/// A deleted run lets go: this controller's finalizer removed (after its snapshot is deleted),
/// the others kept, with the run's resourceVersion as precondition so that a finalizer someone
/// added meanwhile is not dropped (409: a later pass looks again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    pub run: String,
    pub finalizers: Vec<String>,
    pub resource_version: Option<String>,
}

impl Release {
    pub fn of(run: &UpgradeRun) -> Self {
        Release {
            run: run.metadata.name.clone().unwrap_or_default(),
            finalizers: run
                .finalizers()
                .iter()
                .filter(|f| *f != RUN_FINALIZER)
                .cloned()
                .collect(),
            resource_version: run.metadata.resource_version.clone(),
        }
    }

    /// The JSON merge patch (RFC 7386) the API server receives.
    pub fn merge_patch(&self) -> Value {
        json!({"metadata": {"finalizers": self.finalizers, "resourceVersion": self.resource_version}})
    }

    /// Applies the release to `run` as the API server would.
    pub fn apply(&self, run: &mut UpgradeRun) -> Result<(), Conflict> {
        Conflict::check(
            || format!("UpgradeRun {}", self.run),
            self.resource_version.as_ref(),
            run.metadata.resource_version.as_ref(),
        )?;
        run.metadata.finalizers = Some(self.finalizers.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::kratix::ResourceBindingSpec;

    fn action(rv: Option<&str>) -> BindingAction {
        BindingAction {
            resource: Arc::new(SnapshotResource {
                namespace: "team-a".into(),
                name: "db".into(),
                binding: "db-binding".into(),
                last_applied_version: "v1".into(),
                spec_version: "v1".into(),
                target: None,
            }),
            resource_version: rv.map(str::to_string),
            from: "v1".into(),
        }
    }

    fn now() -> DateTime<Utc> {
        "2026-06-01T10:00:00Z".parse().unwrap()
    }

    /// `action` upgrading from the applied version `applied`.
    fn from(applied: &str, mut action: BindingAction) -> BindingAction {
        action.from = applied.into();
        action
    }

    /// `action` as a revert's, to `target`.
    fn reverting(mut action: BindingAction, target: &str) -> BindingAction {
        let mut resource = (*action.resource).clone();
        resource.target = Some(target.into());
        action.resource = Arc::new(resource);
        action
    }

    fn binding(rv: &str) -> ResourceBinding {
        let mut b = ResourceBinding::new(
            "db-binding",
            ResourceBindingSpec {
                version: "v1".into(),
                ..Default::default()
            },
        );
        b.metadata.namespace = Some("team-a".into());
        b.metadata.resource_version = Some(rv.into());
        b.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        b
    }

    #[test]
    fn the_merge_patch_of_each_attempt_is_what_the_api_server_receives() {
        let audit = |to: &str| {
            json!({
                UPGRADED_BY_ANNOTATION: "run-1",
                UPGRADED_TO_ANNOTATION: to,
                UPGRADE_STARTED_AT_ANNOTATION: "2026-06-01T10:00:00Z",
            })
        };
        let mut retry_annotations = audit("v2");
        retry_annotations[RETRY_REQUESTED_BY_ANNOTATION] = json!("run-1");
        for (what, patch, want) in [
            (
                "a start sets the version, with its author, the version it moved to and its start time",
                BindingPatch::start(&action(Some("7")), "v2", "run-1", now()),
                json!({"metadata": {"annotations": audit("v2"), "resourceVersion": "7"}, "spec": {"version": "v2"}}),
            ),
            (
                "a retry labels the binding for Kratix and leaves its version",
                BindingPatch::retry(&action(Some("7")), "v2", "run-1", now()),
                json!({"metadata": {
                    "labels": {MANUAL_RECONCILIATION_LABEL: "true"},
                    "annotations": retry_annotations,
                    "resourceVersion": "7",
                }}),
            ),
            (
                "a binding read without a resourceVersion is patched without a precondition",
                BindingPatch::start(&action(None), "v2", "run-1", now()),
                json!({"metadata": {"annotations": audit("v2")}, "spec": {"version": "v2"}}),
            ),
            (
                "a revert sets each resource's own target, not the plan's",
                BindingPatch::start(
                    &reverting(from("v2", action(Some("7"))), "v1"),
                    "v0, v1",
                    "run-1",
                    now(),
                ),
                json!({"metadata": {"annotations": audit("v1"), "resourceVersion": "7"}, "spec": {"version": "v1"}}),
            ),
            (
                "a revert to the version Kratix applied (its upgrade failed) also asks Kratix to reconcile",
                BindingPatch::start(&reverting(action(Some("7")), "v1"), "v1", "run-1", now()),
                json!({"metadata": {
                    "labels": {MANUAL_RECONCILIATION_LABEL: "true"},
                    "annotations": audit("v1"),
                    "resourceVersion": "7",
                }, "spec": {"version": "v1"}}),
            ),
        ] {
            assert_eq!(patch.merge_patch(), want, "{what}");
        }
    }

    #[test]
    fn apply_changes_the_binding_as_the_merge_patch_says() {
        for patch in [
            BindingPatch::start(&action(Some("7")), "v2", "run-1", now()),
            BindingPatch::retry(&action(Some("7")), "v2", "run-1", now()),
        ] {
            let mut applied = binding("7");
            patch.apply(&mut applied).unwrap();
            // The same patch merged into the binding's JSON (RFC 7386), as the API server does.
            let mut merged = serde_json::to_value(binding("7")).unwrap();
            json_patch_merge(&mut merged, &patch.merge_patch());
            // resourceVersion is the server's to move on; the patch's precondition matched it.
            assert_eq!(serde_json::to_value(&applied).unwrap(), merged, "{:?}", patch.attempt);
            assert_eq!(
                applied.labels().get("team").map(String::as_str),
                Some("a"),
                "the binding's own labels stay"
            );
        }
    }

    #[test]
    fn a_binding_changed_since_it_was_evaluated_is_not_overwritten() {
        let patch = BindingPatch::start(&action(Some("7")), "v2", "run-1", now());
        let mut b = binding("8");
        let before = serde_json::to_value(&b).unwrap();
        let err = patch.apply(&mut b).unwrap_err();
        assert_eq!((err.expected.as_deref(), err.found.as_deref()), (Some("7"), Some("8")));
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            before,
            "nothing of the patch is applied"
        );
    }

    #[test]
    fn an_evaluation_sends_its_retries_before_its_starts() {
        let patches = BindingPatch::of_actions(&[action(Some("2"))], &[action(Some("1"))], "v2", "run-1", now());
        let attempts: Vec<_> = patches.iter().map(|p| p.version()).collect();
        assert_eq!(attempts, [None, Some("v2")]);
    }

    #[test]
    fn a_release_removes_this_controllers_finalizer_only_and_never_one_added_since() {
        let mut run = UpgradeRun::new("r", Default::default());
        run.metadata.finalizers = Some(vec!["backup.example.com/keep".into(), RUN_FINALIZER.into()]);
        run.metadata.resource_version = Some("9".into());
        let release = Release::of(&run);
        assert_eq!(
            release.merge_patch(),
            json!({"metadata": {"finalizers": ["backup.example.com/keep"], "resourceVersion": "9"}})
        );
        let mut merged = serde_json::to_value(&run).unwrap();
        json_patch_merge(&mut merged, &release.merge_patch());
        let mut applied = run.clone();
        release.apply(&mut applied).unwrap();
        assert_eq!(serde_json::to_value(&applied).unwrap(), merged);
        run.metadata.resource_version = Some("10".into());
        assert!(
            release.apply(&mut run).is_err(),
            "a finalizer added since is not dropped"
        );
    }

    #[test]
    fn an_adoption_adds_the_run_as_an_owner_of_the_approvals_it_does_not_own_yet() {
        let mut run = UpgradeRun::new("r", Default::default());
        let fact = |name: &str, owners: Vec<OwnerReference>| ApprovalFact {
            name: name.into(),
            group: "prod".into(),
            created: now(),
            approver: None,
            comment: None,
            owners,
            resource_version: Some("3".into()),
        };
        let keeper = OwnerReference {
            uid: "keeper-uid".into(),
            ..Default::default()
        };
        let approvals = [fact("new", vec![keeper.clone()]), fact("adopted", vec![])];
        assert!(
            ApprovalPatch::adoptions(&run, &approvals).is_empty(),
            "a run without a UID cannot own"
        );
        run.metadata.uid = Some("r-uid".into());
        let mut approvals = approvals;
        approvals[1].owners = vec![run.controller_owner_ref(&()).unwrap()];
        let patches = ApprovalPatch::adoptions(&run, &approvals);
        let [patch] = patches.as_slice() else {
            panic!("{patches:?}")
        };
        assert_eq!(patch.approval, "new");
        let body = patch.merge_patch();
        assert_eq!(body["metadata"]["resourceVersion"], "3", "the precondition");
        assert_eq!(
            body["metadata"]["ownerReferences"][0]["uid"], "keeper-uid",
            "other owners stay"
        );
        assert_eq!(body["metadata"]["ownerReferences"][1]["uid"], "r-uid");
        assert_eq!(
            body["metadata"]["ownerReferences"][1].get("controller"),
            None,
            "an owner, not the controller"
        );

        let read = |rv: &str| {
            let mut a = UpgradeApproval::new("new", Default::default());
            a.metadata.resource_version = Some(rv.into());
            a.metadata.owner_references = Some(vec![keeper.clone()]);
            a
        };
        let mut applied = read("3");
        patch.apply(&mut applied).unwrap();
        let mut merged = serde_json::to_value(read("3")).unwrap();
        json_patch_merge(&mut merged, &body);
        assert_eq!(serde_json::to_value(&applied).unwrap(), merged);
        let mut changed = read("4");
        let err = patch.apply(&mut changed).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"UpgradeApproval new changed since it was evaluated (resourceVersion Some("3"), now Some("4"))"#
        );
        assert_eq!(changed.owner_references().len(), 1, "nothing of it applied");
    }

    fn run_with_owner() -> UpgradeRun {
        let mut run = UpgradeRun::new("old", Default::default());
        run.metadata.labels = Some(BTreeMap::from([("team".into(), "a".into())]));
        run.metadata.owner_references = Some(vec![OwnerReference {
            uid: "u-1".into(),
            ..Default::default()
        }]);
        run
    }

    #[test]
    fn a_run_patch_changes_the_run_as_its_merge_patch_says() {
        let owned = RunPatch {
            labels: BTreeMap::from([("platform.syntasso.io/plan".into(), "p".into())]),
            annotations: BTreeMap::from([("platform.syntasso.io/preview".into(), "true".into())]),
            owner_references: Some(vec![OwnerReference {
                uid: "plan-uid".into(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..RunPatch::of("old")
        };
        for (what, patch, want) in [
            (
                "a supersede request suspends the older run and names the newer",
                RunPatch::supersede("old", "new"),
                json!({"metadata": {"annotations": {SUPERSEDED_BY_ANNOTATION: "new"}}, "spec": {"suspend": true}}),
            ),
            (
                "a run's own patch adds labels and annotations and replaces its owner list",
                owned.clone(),
                json!({"metadata": {
                    "labels": {"platform.syntasso.io/plan": "p"},
                    "annotations": {"platform.syntasso.io/preview": "true"},
                    "ownerReferences": [{"apiVersion": "", "kind": "", "name": "", "uid": "plan-uid", "controller": true}],
                }}),
            ),
            ("nothing to say is an empty patch", RunPatch::of("old"), json!({})),
        ] {
            assert_eq!(patch.merge_patch(), want, "{what}");
            assert_eq!(patch.is_empty(), want == json!({}), "{what}");
            let mut applied = run_with_owner();
            patch.apply(&mut applied).expect("no precondition");
            let mut merged = serde_json::to_value(run_with_owner()).unwrap();
            json_patch_merge(&mut merged, &want);
            assert_eq!(serde_json::to_value(&applied).unwrap(), merged, "{what}");
            assert_eq!(
                applied.labels().get("team").map(String::as_str),
                Some("a"),
                "{what}: its own labels stay"
            );
        }
    }

    /// RFC 7386 merge, the oracle for `apply`.
    fn json_patch_merge(target: &mut Value, patch: &Value) {
        match (target.as_object_mut(), patch.as_object()) {
            (Some(t), Some(p)) => {
                for (k, v) in p {
                    if v.is_null() {
                        t.remove(k);
                    } else {
                        json_patch_merge(t.entry(k.clone()).or_insert(Value::Null), v);
                    }
                }
            }
            _ => *target = patch.clone(),
        }
    }
}
