//! Matching a resource's version against `upgradePath.from`.
//!
//! A plain string is an exact match; `/…/` is a regular expression anchored to the whole version.
//! Versions are opaque strings: never parsed as semver.

use regex::{Regex, RegexBuilder};

/// Compiled regexes are capped so that a hostile plan cannot exhaust the controller's memory.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;

/// Why a `from` entry is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VersionPatternError {
    #[error("must not be empty")]
    Empty,
    #[error("invalid regular expression {pattern}: {detail}")]
    InvalidRegex { pattern: String, detail: String },
}

/// One entry of `upgradePath.from`.
#[derive(Debug, Clone)]
pub enum VersionPattern {
    Exact(String),
    Regex { source: String, regex: Regex },
}

/// Whether `s` is written as a `/regex/` (at least two characters, slash at both ends).
pub fn is_regex_pattern(s: &str) -> bool {
    s.len() >= 2 && s.starts_with('/') && s.ends_with('/')
}

impl VersionPattern {
    pub fn parse(entry: &str) -> Result<Self, VersionPatternError> {
        if entry.is_empty() {
            return Err(VersionPatternError::Empty);
        }
        if !is_regex_pattern(entry) {
            return Ok(VersionPattern::Exact(entry.to_string()));
        }
        let inner = &entry[1..entry.len() - 1];
        let regex = RegexBuilder::new(&format!("^(?:{inner})$"))
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
            .map_err(|e| VersionPatternError::InvalidRegex {
                pattern: entry.to_string(),
                detail: match e {
                    regex::Error::CompiledTooBig(limit) => {
                        format!("the compiled expression is larger than the {limit}-byte limit")
                    }
                    other => other.to_string().lines().last().unwrap_or_default().trim().to_string(),
                },
            })?;
        Ok(VersionPattern::Regex {
            source: entry.to_string(),
            regex,
        })
    }

    pub fn matches(&self, version: &str) -> bool {
        match self {
            VersionPattern::Exact(v) => v == version,
            VersionPattern::Regex { regex, .. } => regex.is_match(version),
        }
    }

    /// The entry as the user wrote it.
    pub fn source(&self) -> &str {
        match self {
            VersionPattern::Exact(v) => v,
            VersionPattern::Regex { source, .. } => source,
        }
    }
}

/// All of `upgradePath.from`, compiled.
#[derive(Debug, Clone)]
pub struct VersionMatcher {
    patterns: Vec<VersionPattern>,
}

impl VersionMatcher {
    /// Compiles every entry; on failure returns each bad entry's index and error.
    pub fn compile(from: &[String]) -> Result<Self, Vec<(usize, VersionPatternError)>> {
        let mut patterns = Vec::with_capacity(from.len());
        let mut errors = Vec::new();
        for (i, entry) in from.iter().enumerate() {
            match VersionPattern::parse(entry) {
                Ok(p) => patterns.push(p),
                Err(e) => errors.push((i, e)),
            }
        }
        if errors.is_empty() {
            Ok(VersionMatcher { patterns })
        } else {
            Err(errors)
        }
    }

    pub fn matches(&self, version: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(version))
    }

    pub fn patterns(&self) -> &[VersionPattern] {
        &self.patterns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_table() {
        let cases: &[(&str, &str, bool)] = &[
            ("v1.0.0", "v1.0.0", true),
            ("v1.0.0", "v1.0.00", false),
            ("v1.0.0", "V1.0.0", false),
            (r"/v1\.1\..*/", "v1.1.0", true),
            (r"/v1\.1\..*/", "v1.10.0", false),
            (r"/v1\.1\..*/", "xv1.1.0", false),
            (r"/v1\.1\..*/", "v1.1.0-rc1", true),
            (r"/v1\..*/", "v1.2", true),
            (r"/v1\..*/", "xv1.2", false),
            // Anchoring holds with alternation inside the pattern.
            (r"/v1|v2/", "v2", true),
            (r"/v1|v2/", "v2x", false),
            (r"/v1|v2/", "xv1", false),
            // Unescaped dot matches any character, as the seed warns.
            (r"/v1.0/", "v1x0", true),
            (r"/v0\.1\.0-BETA/", "v0.1.0-BETA", true),
            // A lone slash is an exact version, not a pattern.
            ("/", "/", true),
        ];
        for (pattern, version, want) in cases {
            let p = VersionPattern::parse(pattern).expect(pattern);
            assert_eq!(p.matches(version), *want, "{pattern} against {version}");
        }
    }

    #[test]
    fn invalid_entries_are_reported_with_their_index() {
        let from = vec!["v1".to_string(), "/v1(/".to_string(), String::new()];
        let errors = VersionMatcher::compile(&from).unwrap_err();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].0, 1);
        assert!(matches!(&errors[0].1, VersionPatternError::InvalidRegex { pattern, .. } if pattern == "/v1(/"));
        assert!(errors[0].1.to_string().contains("unclosed group"), "{}", errors[0].1);
        assert_eq!(errors[1], (2, VersionPatternError::Empty));
    }

    #[test]
    fn oversized_regex_is_rejected() {
        let huge = format!("/{}/", "(a|b|c|d){1000}".repeat(20));
        let err = VersionPattern::parse(&huge).unwrap_err();
        assert!(err.to_string().contains("limit"), "{err}");
    }

    #[test]
    fn any_entry_matches() {
        let m = VersionMatcher::compile(&["v1.1.0".into(), "v1.1.2".into()]).unwrap();
        assert!(m.matches("v1.1.0") && m.matches("v1.1.2") && !m.matches("v1.1.1"));
    }
}
