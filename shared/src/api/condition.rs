use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of a condition, as in metav1.Condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

/// A condition with the exact shape of metav1.Condition.
///
/// Our own type (rather than k8s-openapi's) so that times are `chrono` like the rest of the engine.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition, in CamelCase (`Ready`, `RunSucceeded`, ...).
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// Machine-readable CamelCase reason for the last transition.
    pub reason: String,
    /// Human-readable detail.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the status last changed.
    pub last_transition_time: DateTime<Utc>,
    /// The `metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
        now: DateTime<Utc>,
    ) -> Self {
        Condition {
            type_: type_.to_string(),
            status,
            reason: reason.to_string(),
            message: message.into(),
            last_transition_time: now,
            observed_generation: None,
        }
    }
}

/// Insert or replace `new` in `conditions`, keeping `lastTransitionTime` when the status did not
/// change (Kubernetes API conventions: the time marks a transition, not a write).
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time;
            }
            *existing = new;
        }
        None => conditions.push(new),
    }
}

/// The condition of `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn transition_time_kept_when_status_unchanged() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let mut conds = vec![];
        set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::True, "Valid", "", t0),
        );
        set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::True, "Valid", "again", t1),
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].last_transition_time, t0);
        assert_eq!(conds[0].message, "again");
        set_condition(
            &mut conds,
            Condition::new("Ready", ConditionStatus::False, "InvalidSpec", "x", t1),
        );
        assert_eq!(conds[0].last_transition_time, t1);
    }
}
