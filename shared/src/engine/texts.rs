//! The exact texts of conditions and events (spec §4.3–4.4), and the events' reasons: one place,
//! so that the controller, the plugin (which reads some back) and the tests agree.

/// Event reasons of a run (spec §4.4), beside the condition reasons in [`crate::api::reasons`].
pub mod events {
    /// The message prefix of an Event combining similar ones (client-go's aggregation: beyond
    /// [`SIMILAR_EVENTS_BEFORE_COMBINING`] Events of one reason on one object within
    /// [`SIMILAR_EVENTS_WINDOW_SECONDS`], one Event counts the rest).
    pub const COMBINED_PREFIX: &str = "(combined from similar events): ";
    /// client-go's `defaultAggregateMaxEvents`.
    pub const SIMILAR_EVENTS_BEFORE_COMBINING: usize = 10;
    /// client-go's `defaultAggregateIntervalInSeconds`.
    pub const SIMILAR_EVENTS_WINDOW_SECONDS: i64 = 600;

    /// The message of the Event combining similar ones, `latest` the last of them.
    pub fn combined(latest: &str) -> String {
        format!("{COMBINED_PREFIX}{latest}")
    }

    /// Whether an Event's message is that of an Event combining similar ones.
    pub fn is_combined(message: &str) -> bool {
        message.starts_with(COMBINED_PREFIX)
    }
    pub const GROUP_IN_PROGRESS: &str = "GroupInProgress";
    pub const RESOURCE_UPGRADE_STARTED: &str = "ResourceUpgradeStarted";
    pub const RESOURCE_UPGRADE_FAILED: &str = "ResourceUpgradeFailed";
    pub const RESOURCE_SKIPPED: &str = "ResourceSkipped";
    pub const SUPERSEDED: &str = "Superseded";
    pub const PLAN_INVALID: &str = "PlanInvalid";
    /// A kind the plan needs is not served (spec §14.2).
    pub const KIND_NOT_SERVED: &str = "KindNotServed";
    pub const UPGRADE_RUN_COMPLETED: &str = "UpgradeRunCompleted";
    pub const UPGRADE_RUN_FAILED: &str = "UpgradeRunFailed";
    pub const UPGRADE_RUN_CANCELLED: &str = "UpgradeRunCancelled";
    pub const GATE_CLOSED: &str = "GateClosed";
    pub const GATE_OPENED: &str = "GateOpened";
    pub const GROUP_AWAITING_APPROVAL: &str = "GroupAwaitingApproval";
    pub const GROUP_APPROVED: &str = "GroupApproved";
    /// A run failed in a group with `onFailure: Revert` and created its revert (spec §13.7).
    pub const REVERT_CREATED: &str = "RevertCreated";
}

pub fn plan_found(plan: &str) -> String {
    format!("UpgradePlan \"{plan}\" found")
}
pub fn plan_not_found(plan: &str) -> String {
    format!("UpgradePlan \"{plan}\" not found")
}
/// `<problems>`: the validator's summary, `<field>: <problem>; …`.
pub fn plan_invalid(plan: &str, problems: &str) -> String {
    format!("UpgradePlan \"{plan}\" is invalid: {problems}")
}
pub fn revision_ready(promise: &str, to: &str) -> String {
    format!("PromiseRevision for promise \"{promise}\" version \"{to}\" is ready")
}
pub fn revision_not_found(promise: &str, to: &str) -> String {
    format!("PromiseRevision for promise \"{promise}\" version \"{to}\" not found")
}
/// What `TargetRevisionReady` (and a run failing for its revision) says of the target's revision:
/// ready, being deleted (`deleting`: its name), or not found.
pub fn target_revision(promise: &str, to: &str, ready: bool, deleting: Option<&str>) -> String {
    match (ready, deleting) {
        (true, _) => revision_ready(promise, to),
        (false, Some(name)) => revision_deleting(promise, to, name),
        (false, None) => revision_not_found(promise, to),
    }
}
/// The target's revision has a `deletionTimestamp`: Kratix is deleting every resource at its
/// version (spec §5.7).
pub fn revision_deleting(promise: &str, to: &str, revision: &str) -> String {
    format!(
        "PromiseRevision {revision} for promise \"{promise}\" version \"{to}\" is being deleted: Kratix deletes every resource at that version"
    )
}
pub fn group_failed(failed: usize, group: &str) -> String {
    format!("{failed} resource(s) failed to upgrade in rollout group \"{group}\"")
}
pub fn group_in_progress(group: &str, succeeded: i64, total: i64, to: &str) -> String {
    format!("Group \"{group}\": {succeeded}/{total} resources upgraded to {to}")
}
pub fn resource_started(resource: &str, from: &str, to: &str) -> String {
    format!("Resource {resource} upgrading from {from} to {to}")
}
pub fn resource_failed(resource: &str, to: &str, detail: &str) -> String {
    format!("{}{detail}", resource_failed_prefix(resource, to))
}
fn resource_failed_prefix(resource: &str, to: &str) -> String {
    format!("Resource {resource} failed to upgrade to {to}: ")
}
/// The inverse of [`resource_failed`]: the detail, when `message` is about `resource`.
pub fn resource_failed_detail<'m>(message: &'m str, resource: &str, to: &str) -> Option<&'m str> {
    message.strip_prefix(&resource_failed_prefix(resource, to))
}
pub fn resource_skipped(resource: &str, why: &str) -> String {
    format!("Resource {resource} skipped: {why}")
}
/// Message of the UpgradeRunFailed / UpgradeRunCompleted events and of RunCompleted.
pub fn health_reported(state: &str, namespace: &str, record: &str) -> String {
    format!("health check reported {state} (HealthRecord {namespace}/{record})")
}
/// The binding's own health for the version it upgraded to (Kratix's proposal kratix#945).
pub fn health_reported_on_binding(state: &str, namespace: &str, binding: &str, version: &str) -> String {
    format!("health check reported {state} (ResourceBinding {namespace}/{binding}, status.healthStatus for {version})")
}

pub fn no_health_report(timeout: &str) -> String {
    format!("no health report within {timeout}")
}

pub fn deadline_passed(deadline: &str) -> String {
    format!("did not finish within {deadline}")
}
/// Message of RunCompletedWithFailures and its Warning UpgradeRunCompleted (spec §13.1).
pub fn run_completed_with_failures(completed: i64, total: i64, to: &str, failed: i64) -> String {
    format!(
        "{}; {failed} failed within the failure budget",
        run_summary(completed, total, to)
    )
}
pub fn run_summary(completed: i64, total: i64, to: &str) -> String {
    format!("{completed}/{total} resources upgraded to {to}")
}
pub fn snapshot_missing(config_map: &str) -> String {
    format!("snapshot ConfigMap {config_map} is missing or unreadable")
}
/// `recorded`: when the digest was recorded (the run's `startedAt`).
pub fn snapshot_tampered(config_map: &str, recorded: &str) -> String {
    format!("snapshot ConfigMap {config_map} does not match the digest recorded at {recorded}")
}
pub fn run_cancelled() -> String {
    "UpgradeRun was deleted before it finished".to_string()
}
/// Message of RunCancelled for a run cancelled by `spec.cancel` (it stays as the record).
pub fn run_cancelled_on_request() -> String {
    "UpgradeRun was cancelled before it finished (spec.cancel)".to_string()
}

/// The event a run announces as it ends (spec §4.4): `(warning, reason, note)`. Every path
/// into Failed — a resource, a lost revision, a lost snapshot — announces UpgradeRunFailed.
/// A run that completes with failures within its budget announces a Warning (spec §13.1).
pub fn terminal_event(
    state: crate::api::RunState,
    completed: i64,
    total: i64,
    failed: i64,
    to: &str,
) -> Option<(bool, &'static str, String)> {
    use crate::api::RunState;
    match state {
        RunState::Completed if failed > 0 => Some((
            true,
            events::UPGRADE_RUN_COMPLETED,
            run_completed_with_failures(completed, total, to, failed),
        )),
        RunState::Completed => Some((false, events::UPGRADE_RUN_COMPLETED, run_summary(completed, total, to))),
        RunState::Failed => Some((true, events::UPGRADE_RUN_FAILED, run_summary(completed, total, to))),
        RunState::Cancelled => Some((
            false,
            events::UPGRADE_RUN_CANCELLED,
            format!("{} ({completed}/{total} resources upgraded)", run_cancelled()),
        )),
        _ => None,
    }
}
/// A revert whose run does not exist.
pub fn reverted_run_not_found(run: &str) -> String {
    format!("UpgradeRun \"{run}\" to revert does not exist")
}
/// A revert whose run belongs to another plan than the revert's own.
pub fn reverted_run_of_other_plan(run: &str, its_plan: &str, plan: &str) -> String {
    format!("UpgradeRun \"{run}\" to revert is a run of UpgradePlan \"{its_plan}\", not of \"{plan}\"")
}
/// A revert of a run that never took a snapshot (it changed nothing).
pub fn reverted_run_never_started(run: &str) -> String {
    format!("UpgradeRun \"{run}\" to revert never took a snapshot: it upgraded nothing")
}
/// A revert whose run's frozen plan no longer compiles (a snapshot written by an older version).
pub fn reverted_plan_invalid(run: &str, problems: &str) -> String {
    format!("cannot revert UpgradeRun \"{run}\": the plan its snapshot froze is invalid: {problems}")
}
/// `RevertReady=False` of a revert created by `onFailure: Revert` before its run recorded its end.
pub fn reverted_run_ending(run: &str) -> String {
    format!("waits for UpgradeRun \"{run}\", which created this revert as it failed (onFailure: Revert), to record its failure")
}
/// `RevertReady=True` once it has.
pub fn reverted_run_ended(run: &str) -> String {
    format!("UpgradeRun \"{run}\" recorded its end")
}
/// The Normal event of a run that failed in a group with `onFailure: Revert`.
pub fn revert_created(revert: &str, group: &str) -> String {
    format!(
        "rollout group \"{group}\" failed with onFailure: Revert: created UpgradeRun \"{revert}\" to move back the resources this run upgraded or failed in it and the groups before it"
    )
}
/// The reverted run's snapshot, lost or changed: `why` is [`snapshot_missing`] or
/// [`snapshot_tampered`] of its ConfigMap.
pub fn reverted_snapshot(run: &str, why: &str) -> String {
    format!("cannot revert UpgradeRun \"{run}\": {why}")
}
/// TargetRevisionReady of a revert whose targets' PromiseRevisions are not all there: it does
/// not wait, their resources are skipped (spec §13.7).
pub fn revert_revisions_missing(promise: &str, versions: &[&str]) -> String {
    format!(
        "PromiseRevision for promise \"{promise}\" version(s) {} not found: their resources are skipped",
        versions.join(", ")
    )
}
pub fn superseded(newer: &str) -> String {
    format!("Superseded by UpgradeRun \"{newer}\"")
}
