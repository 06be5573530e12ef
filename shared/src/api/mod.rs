//! API types: our CRDs (`platform.syntasso.io/v1alpha1`) and the Kratix objects we read.

mod condition;
pub mod kratix;
mod plan;
mod run;

pub use condition::{find_condition, set_condition, Condition, ConditionStatus};
pub use plan::*;
pub use run::*;

/// API group of UpgradePlan and UpgradeRun.
pub const GROUP: &str = "platform.syntasso.io";
/// API version of UpgradePlan and UpgradeRun.
pub const VERSION: &str = "v1alpha1";
/// Label on every run naming its plan.
pub const PLAN_LABEL: &str = "platform.syntasso.io/upgrade-plan";
/// Annotation on scheduled runs: the RFC 3339 UTC trigger instant they service.
pub const SCHEDULED_AT_ANNOTATION: &str = "platform.syntasso.io/scheduled-at";
/// Finalizer that turns the deletion of an unfinished run into `Cancelled`.
pub const RUN_FINALIZER: &str = "platform.syntasso.io/upgraderun";
/// Annotation the controller leaves on a binding when it asked Kratix to retry for a run,
/// so the retry is requested once per run (Kratix removes the retry label itself).
pub const RETRY_REQUESTED_BY_ANNOTATION: &str = "platform.syntasso.io/retry-requested-by";
/// Default namespace of the snapshot ConfigMaps.
pub const DEFAULT_SNAPSHOT_NAMESPACE: &str = "kratix-platform-system";
/// Field manager for everything the controller writes.
pub const FIELD_MANAGER: &str = "upgradeplan-controller";
