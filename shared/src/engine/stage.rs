//! Between rollout groups (spec §13.4): the soak after a group and the approval before one.
//!
//! Both are measured from the run's own record: a group's `completedAt` and `startedAt` are
//! written by the run's transition and read back, never taken from a condition's transition time
//! (which a rewrite can move) or from a process's memory (which a restart loses).

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// An UpgradeApproval of the run being evaluated, as the controller found it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalFact {
    pub name: String,
    pub group: String,
    pub created: DateTime<Utc>,
    /// Who approved (`spec.approver`), when recorded.
    pub approver: Option<String>,
    /// `spec.comment`.
    pub comment: Option<String>,
    /// Its owners: the run adds itself when it is not among them (garbage-collected with it).
    pub owners: Vec<OwnerReference>,
    /// The precondition of that adoption: an approval changed since is adopted on a later pass.
    pub resource_version: Option<String>,
}

impl ApprovalFact {
    /// An UpgradeApproval as the engine reads it.
    pub fn of(approval: &crate::api::UpgradeApproval) -> ApprovalFact {
        ApprovalFact {
            name: approval.metadata.name.clone().unwrap_or_default(),
            group: approval.spec.group.clone(),
            created: crate::time::created_at(&approval.metadata),
            owners: approval.metadata.owner_references.clone().unwrap_or_default(),
            resource_version: approval.metadata.resource_version.clone(),
            approver: approval.spec.approver.clone(),
            comment: approval.spec.comment.clone(),
        }
    }

    /// The approval a run's status records for `group` (spec §13.4), for views that have only
    /// the run.
    pub fn recorded(group: &crate::api::GroupStatus) -> Option<ApprovalFact> {
        let (name, created) = group.recorded_approval()?;
        Some(ApprovalFact {
            name: name.to_string(),
            group: group.name.clone(),
            created,
            owners: Vec::new(),
            resource_version: None,
            approver: group.approver().map(str::to_string),
            comment: group.comment.clone(),
        })
    }

    /// Records this approval in the status of the group it let start.
    pub fn record_in(&self, group: &mut crate::api::GroupStatus) {
        group.approval = Some(self.name.clone());
        group.approved_by = self.approver.clone();
        group.approved_at = Some(self.created);
        group.comment = self.comment.clone();
    }
}

/// The approval that lets `group` start: the oldest for it (by creation, then name).
pub fn approval_for<'a>(approvals: &'a [ApprovalFact], group: &str) -> Option<&'a ApprovalFact> {
    approvals
        .iter()
        .filter(|a| a.group == group)
        .min_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)))
}

/// Texts of the approval condition and events (spec §13.4).
pub mod texts {
    pub fn awaiting_approval(group: &str) -> String {
        format!("rollout group {group:?} waits for an UpgradeApproval")
    }

    /// The `GroupApproved` event and the `AwaitingApproval` condition once approved: who, which
    /// UpgradeApproval, and its comment.
    pub fn approved(group: &str, approval: &str, approver: Option<&str>, comment: Option<&str>) -> String {
        let by = match approver {
            Some(who) => format!("{who} (UpgradeApproval {approval})"),
            None => format!("UpgradeApproval {approval}"),
        };
        match comment.filter(|c| !c.is_empty()) {
            Some(c) => format!("rollout group {group:?} approved by {by}: {c}"),
            None => format!("rollout group {group:?} approved by {by}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn the_oldest_approval_of_the_group_counts() {
        let a = |name: &str, group: &str, at: &str| ApprovalFact {
            name: name.into(),
            group: group.into(),
            created: utc(at),
            owners: Vec::new(),
            resource_version: None,
            approver: None,
            comment: None,
        };
        let approvals = [
            a("late", "prod", "2026-06-01T10:05:00Z"),
            a("other-group", "dev", "2026-06-01T09:00:00Z"),
            a("b-first", "prod", "2026-06-01T10:00:00Z"),
            a("a-first", "prod", "2026-06-01T10:00:00Z"),
        ];
        assert_eq!(approval_for(&approvals, "prod").unwrap().name, "a-first");
        assert!(approval_for(&approvals, "qa").is_none());
    }
}
