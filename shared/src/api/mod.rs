//! API types: our CRDs (`platform.syntasso.io/v1alpha1`) and the Kratix objects we read.

mod approval;
mod budget;
mod condition;
mod freeze;
pub mod kratix;
mod plan;
mod run;
pub mod strict;

pub use approval::*;
pub use budget::*;
pub use condition::{find_condition, set_condition, Condition, ConditionStatus};
pub use freeze::*;
pub use plan::*;
pub use run::*;

/// Schema transform for status types: `#[serde(default)]` makes schemars emit `default` values,
/// which mean nothing in a status only the controller writes. Removes them recursively.
pub(crate) fn drop_schema_defaults(schema: &mut schemars::Schema) {
    fn strip(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                map.remove("default");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::Value::from(std::mem::take(schema));
    strip(&mut value);
    *schema = schemars::Schema::try_from(value).unwrap_or_default();
}

/// API group of UpgradePlan and UpgradeRun.
pub const GROUP: &str = "platform.syntasso.io";
/// API version of UpgradePlan and UpgradeRun.
pub const VERSION: &str = "v1alpha1";
/// Label on every run (and snapshot ConfigMap) naming its plan, as
/// [`crate::engine::naming::label_value`] writes it; a name too long for a label is also in an
/// annotation of the same key.
pub const PLAN_LABEL: &str = "platform.syntasso.io/upgrade-plan";
/// Label on snapshot ConfigMaps naming their run (written like [`PLAN_LABEL`]).
pub const RUN_LABEL: &str = "platform.syntasso.io/upgrade-run";
/// Annotation on scheduled runs: the RFC 3339 UTC trigger instant they service.
pub const SCHEDULED_AT_ANNOTATION: &str = "platform.syntasso.io/scheduled-at";
/// Finalizer that turns the deletion of an unfinished run into `Cancelled`.
pub const RUN_FINALIZER: &str = "platform.syntasso.io/upgraderun";
/// Annotation the controller leaves on a binding when it asked Kratix to retry for a run,
/// so the retry is requested once per run (Kratix removes the retry label itself).
pub const RETRY_REQUESTED_BY_ANNOTATION: &str = "platform.syntasso.io/retry-requested-by";
/// Annotation the controller sets on a binding in the same patch that moves its `spec.version`:
/// the run that started the upgrade (an audit trail; nothing reads it back).
pub const UPGRADED_BY_ANNOTATION: &str = "platform.syntasso.io/upgraded-by";
/// Annotation the start (and retry) patch writes on a binding with the version it moved the
/// binding to: someone who moves the binding on since (`spec.version` no longer that version)
/// made it theirs, and the run's upgrade of it is over — it holds no budget unit (spec §13.8).
pub const UPGRADED_TO_ANNOTATION: &str = "platform.syntasso.io/upgraded-to";
/// Annotation the start patch writes on a binding with the RFC 3339 instant it started the
/// upgrade: the clock of `progressDeadline` (spec §13.1).
pub const UPGRADE_STARTED_AT_ANNOTATION: &str = "platform.syntasso.io/upgrade-started-at";
/// Annotation set at admission on a run created suspended: a preview, never the active run.
pub const PREVIEW_ANNOTATION: &str = "platform.syntasso.io/preview";
/// Annotation a newer run puts on an older active run it supersedes (with `spec.suspend=true`);
/// the older run's own reconcile records it as `status.supersededBy` (spec §5.2).
pub const SUPERSEDED_BY_ANNOTATION: &str = "platform.syntasso.io/superseded-by";
/// Annotation a run that failed in a group with `onFailure: Revert` records its revert under
/// (spec §13.7), written by its own (conditional) patch in the pass that creates the revert, so
/// that a pass decided from a stale copy of the run creates none.
pub const REVERTED_BY_ANNOTATION: &str = "platform.syntasso.io/reverted-by";
/// Annotation recording when a preview was resumed, i.e. admitted for rolling out (RFC 3339 UTC):
/// admission orders it as if created then (spec §5.2).
pub const ADMITTED_AT_ANNOTATION: &str = "platform.syntasso.io/admitted-at";
/// Annotation naming the `--selector` of the controller that took a run on, so that the run
/// stays recognisably its own after the plan is deleted (to release the finalizer).
pub const SELECTOR_ANNOTATION: &str = "platform.syntasso.io/controller-selector";

/// On the leader-election Lease, written by the controller that holds it: its version, so that
/// `kubectl upgradeplan version` can say which controller is running.
pub const CONTROLLER_VERSION_ANNOTATION: &str = "platform.syntasso.io/controller-version";
/// Default namespace of the snapshot ConfigMaps.
pub const DEFAULT_SNAPSHOT_NAMESPACE: &str = "kratix-platform-system";
/// Field manager for everything the controller writes.
pub const FIELD_MANAGER: &str = "upgradeplan-controller";
