//! `maxConcurrent`: an integer ≥ 1, or `"1%"`…`"100%"` of the group's size.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// `"N%"` with N a whole number from 0 to 100 (`maxConcurrent` and `maxFailures` share the form).
pub fn percentage(s: &str) -> Option<u32> {
    s.strip_suffix('%')
        .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|digits| digits.parse::<u32>().ok())
        .filter(|p| *p <= 100)
}

/// A parsed `maxConcurrent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Omitted: the whole group may start together.
    Unlimited,
    Count(u32),
    Percent(u32),
}

/// Why a `maxConcurrent` value is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("must be at least 1, got {0}")]
    TooSmall(i32),
    #[error("must be an integer or a percentage from \"1%\" to \"100%\", got {0:?}")]
    Malformed(String),
}

impl Limit {
    pub fn parse(value: Option<&IntOrString>) -> Result<Limit, LimitError> {
        match value {
            None => Ok(Limit::Unlimited),
            Some(IntOrString::Int(n)) if *n >= 1 => Ok(Limit::Count(*n as u32)),
            Some(IntOrString::Int(n)) => Err(LimitError::TooSmall(*n)),
            Some(IntOrString::String(s)) => {
                let percent = percentage(s)
                    .filter(|p| *p >= 1)
                    .ok_or_else(|| LimitError::Malformed(s.clone()))?;
                Ok(Limit::Percent(percent))
            }
        }
    }

    /// The number of resources that may be in flight at once in a group of `group_size`:
    /// percentages round down but never below 1; omitted means the whole group.
    pub fn resolve(self, group_size: usize) -> usize {
        match self {
            Limit::Unlimited => group_size.max(1),
            Limit::Count(n) => n as usize,
            Limit::Percent(p) => (group_size * p as usize / 100).max(1),
        }
    }

    /// The limit as shown everywhere (`explain`, `matching -o json`, the `group_max_concurrent`
    /// gauge): resolved against the group's current size when known; `None` means no limit, or a
    /// percentage of a group whose size is not known. (A gauge cannot be null: it shows a group
    /// without a limit as its size, the number that may be in flight at once.)
    pub fn shown(self, group_size: Option<usize>) -> Option<usize> {
        match (self, group_size) {
            (Limit::Unlimited, _) => None,
            (_, Some(n)) => Some(self.resolve(n)),
            (Limit::Count(c), None) => Some(c as usize),
            (Limit::Percent(_), None) => None,
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
            (Some(s("25%")), 7, 1), // 1.75 rounds down to 1
            (Some(s("25%")), 3, 1), // 0.75 rounds down to 0, raised to 1
            (Some(s("100%")), 5, 5),
            (Some(s("50%")), 5, 2),
            (Some(s("1%")), 250, 2),
            (Some(s("10%")), 0, 1),
            (Some(IntOrString::Int(5)), 3, 5),
            (Some(IntOrString::Int(1)), 100, 1),
            (None, 12, 12),
            (None, 0, 1),
        ];
        for (value, size, want) in cases {
            let limit = Limit::parse(value.as_ref()).unwrap();
            assert_eq!(limit.resolve(*size), *want, "{value:?} of {size}");
        }
        // Shown: no limit is None; without a size only a count is known.
        assert_eq!(Limit::parse(None).unwrap().shown(Some(4)), None);
        assert_eq!(Limit::parse(Some(&s("50%"))).unwrap().shown(Some(4)), Some(2));
        assert_eq!(Limit::parse(Some(&s("50%"))).unwrap().shown(None), None);
        assert_eq!(Limit::parse(Some(&IntOrString::Int(3))).unwrap().shown(None), Some(3));
        assert_eq!(Limit::parse(None).unwrap().shown(None), None);
    }

    #[test]
    fn invalid_values() {
        for bad in ["0%", "101%", "%", "25", "25 %", "-5%", "2.5%", "abc", ""] {
            assert!(
                matches!(Limit::parse(Some(&s(bad))), Err(LimitError::Malformed(_))),
                "{bad:?}"
            );
        }
        assert_eq!(Limit::parse(Some(&IntOrString::Int(0))), Err(LimitError::TooSmall(0)));
        assert_eq!(Limit::parse(Some(&IntOrString::Int(-3))), Err(LimitError::TooSmall(-3)));
    }
}
