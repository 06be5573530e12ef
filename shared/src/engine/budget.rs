//! A group's failure budget (`maxFailures`) and progress deadline (`progressDeadline`), spec §13.1.
//!
//! SKE fails a run at the first failed resource; a budget lets a group tolerate some failures and
//! still complete, so that one broken tenant does not block the fleet. Omitted, both keep SKE's
//! behaviour exactly.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::concurrency::percentage;

/// A parsed `maxFailures`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureBudget {
    /// A number of failed resources the group tolerates; 0 (and omitted) is SKE's behaviour.
    Count(u32),
    /// A percentage of the group's snapshot size, rounded up.
    Percent(u32),
}

/// Why a `maxFailures` value is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("must be 0 or more, got {0}")]
    Negative(i32),
    #[error("must be an integer of 0 or more or a percentage from \"0%\" to \"100%\", got {0:?}")]
    Malformed(String),
}

impl FailureBudget {
    /// SKE's behaviour: the first failure fails the run.
    pub const NONE: FailureBudget = FailureBudget::Count(0);

    pub fn parse(value: Option<&IntOrString>) -> Result<FailureBudget, BudgetError> {
        match value {
            None => Ok(FailureBudget::NONE),
            Some(IntOrString::Int(n)) if *n >= 0 => Ok(FailureBudget::Count(*n as u32)),
            Some(IntOrString::Int(n)) => Err(BudgetError::Negative(*n)),
            Some(IntOrString::String(s)) => {
                let percent = percentage(s).ok_or_else(|| BudgetError::Malformed(s.clone()))?;
                Ok(FailureBudget::Percent(percent))
            }
        }
    }

    /// How many failed resources a group of `group_size` tolerates: percentages round up
    /// (`"10%"` of 8 tolerates 1), so a non-zero percentage always tolerates at least one failure
    /// of a non-empty group.
    pub fn resolve(self, group_size: usize) -> usize {
        match self {
            FailureBudget::Count(n) => n as usize,
            FailureBudget::Percent(p) => (group_size * p as usize).div_ceil(100),
        }
    }

    /// The budget as shown everywhere (`explain -o json`, the `group_failure_budget` gauge):
    /// resolved against the group's current size when known; `None` for a percentage of a group
    /// whose size is not known.
    pub fn shown(self, group_size: Option<usize>) -> Option<usize> {
        match (self, group_size) {
            (_, Some(n)) => Some(self.resolve(n)),
            (FailureBudget::Count(c), None) => Some(c as usize),
            (FailureBudget::Percent(_), None) => None,
        }
    }

    /// The budget in words, for `explain` and `status`: "tolerates 1 failure: 10% of 8, rounded
    /// up"; "the first failure fails the run".
    pub fn describe(self, group_size: Option<usize>) -> String {
        let plural = |n: usize| if n == 1 { "failure" } else { "failures" };
        match (self, group_size) {
            (FailureBudget::Count(0), _) | (FailureBudget::Percent(0), _) => {
                "none: the first failure fails the run".into()
            }
            (FailureBudget::Count(n), _) => format!("tolerates {n} {}", plural(n as usize)),
            (FailureBudget::Percent(p), Some(size)) => {
                let n = self.resolve(size);
                format!("tolerates {n} {}: {p}% of {size}, rounded up", plural(n))
            }
            (FailureBudget::Percent(p), None) => format!("tolerates {p}% of the group's resources, rounded up"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.into())
    }

    #[test]
    fn resolution_table() {
        let cases: &[(Option<IntOrString>, usize, usize)] = &[
            (None, 10, 0), // SKE: none
            (Some(IntOrString::Int(0)), 10, 0),
            (Some(IntOrString::Int(3)), 10, 3),
            (Some(IntOrString::Int(3)), 2, 3), // larger than the group: every resource may fail
            (Some(s("0%")), 10, 0),
            (Some(s("10%")), 8, 1), // 0.8 rounds up
            (Some(s("10%")), 10, 1),
            (Some(s("10%")), 11, 2), // 1.1 rounds up
            (Some(s("100%")), 7, 7),
            (Some(s("50%")), 1, 1),
            (Some(s("50%")), 2, 1),
            (Some(s("50%")), 3, 2),
            (Some(s("1%")), 1, 1),
            (Some(s("1%")), 2, 1),
            (Some(s("1%")), 3, 1),
            (Some(s("34%")), 3, 2), // 1.02 rounds up
            (Some(s("33%")), 3, 1), // 0.99 rounds up
            (Some(s("10%")), 0, 0), // an empty group tolerates nothing, needs nothing
        ];
        for (value, size, want) in cases {
            let budget = FailureBudget::parse(value.as_ref()).unwrap();
            assert_eq!(budget.resolve(*size), *want, "{value:?} of {size}");
        }
    }

    #[test]
    fn percentages_round_up_like_the_literal_definition() {
        // The naive definition: the smallest whole number of failures n with n >= size * p / 100.
        for p in 0..=100u32 {
            for size in 0..=300usize {
                let naive = (0..=size)
                    .find(|n| (*n * 100) as f64 >= (size as f64) * f64::from(p))
                    .unwrap();
                assert_eq!(FailureBudget::Percent(p).resolve(size), naive, "{p}% of {size}");
            }
        }
    }

    #[test]
    fn malformed_values_say_what_is_allowed() {
        for (value, want) in [
            (IntOrString::Int(-1), "must be 0 or more, got -1"),
            (s("101%"), "percentage from \"0%\" to \"100%\", got \"101%\""),
            (s("10"), "got \"10\""),
            (s("%"), "got \"%\""),
            (s("-5%"), "got \"-5%\""),
            (s("1.5%"), "got \"1.5%\""),
        ] {
            let e = FailureBudget::parse(Some(&value)).unwrap_err().to_string();
            assert!(e.contains(want), "{value:?}: {e}");
        }
    }

    #[test]
    fn described_in_words() {
        assert_eq!(
            FailureBudget::Percent(10).describe(Some(8)),
            "tolerates 1 failure: 10% of 8, rounded up"
        );
        assert_eq!(FailureBudget::Count(2).describe(Some(8)), "tolerates 2 failures");
        assert_eq!(
            FailureBudget::NONE.describe(None),
            "none: the first failure fails the run"
        );
        assert_eq!(
            FailureBudget::Percent(25).describe(None),
            "tolerates 25% of the group's resources, rounded up"
        );
    }
}
