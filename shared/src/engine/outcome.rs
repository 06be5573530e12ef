//! A resource's outcome in a run (spec §5.5): the vocabulary the rollout rules (health checks,
//! deadlines, admission) and the run's evaluation share.

use chrono::{DateTime, Utc};

/// Why a resource is skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    BindingGone,
    BeingDeleted,
    /// Someone else changed the binding after the snapshot; it is never overwritten.
    ChangedByOthers {
        spec_version: String,
        last_applied_version: String,
    },
    /// The run counted it skipped in a group it recorded complete; its binding has moved since.
    Counted,
    /// A revert's target for it has no PromiseRevision any more (spec §13.7).
    RevisionGone {
        version: String,
    },
    /// Its binding asks for a version whose PromiseRevision is being deleted: Kratix deletes it
    /// (spec §5.7).
    RevisionDeleting {
        revision: String,
    },
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::BindingGone => write!(f, "its ResourceBinding no longer exists"),
            SkipReason::BeingDeleted => write!(f, "its ResourceBinding is being deleted"),
            SkipReason::ChangedByOthers { spec_version, last_applied_version } => write!(
                f,
                "its ResourceBinding was changed by someone else (spec.version {spec_version:?}, lastAppliedVersion {last_applied_version:?})"
            ),
            SkipReason::Counted => write!(f, "counted skipped earlier in this run"),
            SkipReason::RevisionGone { version } => write!(f, "revision {version} no longer exists"),
            SkipReason::RevisionDeleting { revision } => write!(f, "PromiseRevision {revision} is being deleted"),
        }
    }
}

/// The state of one resource of the current group, in the precedence order of spec §5.5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Skipped(SkipReason),
    Succeeded,
    Failed {
        message: String,
    },
    /// Upgrading: Kratix works on it (`spec.version == to`), also after a retry was asked.
    InFlight,
    /// `spec.version == to`, but its only failure predates this run: Kratix must be asked to try
    /// again (the retry label). Asking is a start like any other (spec §5.5, §14.1): it waits for
    /// a slot and an open gate, and takes no slot until asked.
    NeedsRetry,
    /// Upgraded; its health check has not concluded and times out at `until` (spec §13.2). It
    /// counts as in flight.
    Verifying {
        until: DateTime<Utc>,
    },
    NotStarted,
}

/// How a resource finished in a run: the `result` label of `upgradeplan_resource_upgrades_total`
/// (spec §9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Finished {
    Succeeded,
    Failed,
    Skipped,
}

impl Finished {
    pub fn as_str(self) -> &'static str {
        match self {
            Finished::Succeeded => "succeeded",
            Finished::Failed => "failed",
            Finished::Skipped => "skipped",
        }
    }
}

impl Outcome {
    /// How it finished, once nothing more will happen to it in this run.
    pub fn finished(&self) -> Option<Finished> {
        match self {
            Outcome::Succeeded => Some(Finished::Succeeded),
            Outcome::Failed { .. } => Some(Finished::Failed),
            Outcome::Skipped(_) => Some(Finished::Skipped),
            _ => None,
        }
    }

    pub fn is_done(&self) -> bool {
        matches!(self, Outcome::Succeeded | Outcome::Skipped(_))
    }

    /// Nothing more will happen to it in this run: done, or failed.
    pub fn is_finished(&self) -> bool {
        self.is_done() || matches!(self, Outcome::Failed { .. })
    }

    /// Takes a slot of the group's `maxConcurrent`: upgrading or verifying.
    pub fn is_in_flight(&self) -> bool {
        matches!(self, Outcome::InFlight | Outcome::Verifying { .. })
    }
}
