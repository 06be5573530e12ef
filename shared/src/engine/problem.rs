//! A problem with an object, located by its field path: what validation, compilation and the
//! lint report. The lowest layer of the engine, so every rule can report one.

use std::fmt;

/// One problem, located by its field path (`spec.rolloutGroups[1].maxConcurrent`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub field: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins problems into one condition message.
pub fn summarize(problems: &[Problem]) -> String {
    problems.iter().map(Problem::to_string).collect::<Vec<_>>().join("; ")
}
