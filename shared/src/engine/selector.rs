//! Rollout-group selectors over binding labels.
//!
//! Every term is ANDed. Unlike Kubernetes label selectors, an omitted or empty selector matches
//! nothing. `matchAll` is resolved by group assignment (it depends on earlier groups), see
//! [`crate::engine::snapshot`].

use std::collections::BTreeMap;
use std::fmt;

use crate::api::{RolloutSelectors, SelectorOperator, SelectorRequirement};

/// What a selector asks for, once interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorKind<'a> {
    /// Omitted or empty: selects nothing.
    Nothing,
    /// `matchAll: true`: every eligible binding no earlier group took.
    All,
    /// Label terms, all of which must hold.
    Terms(&'a RolloutSelectors),
}

pub fn kind(selectors: Option<&RolloutSelectors>) -> SelectorKind<'_> {
    match selectors {
        None => SelectorKind::Nothing,
        Some(s) if s.match_all == Some(true) => SelectorKind::All,
        Some(s) => {
            let labels = s.match_labels.as_ref().is_some_and(|m| !m.is_empty());
            let exprs = s.match_expressions.as_ref().is_some_and(|e| !e.is_empty());
            if labels || exprs {
                SelectorKind::Terms(s)
            } else {
                SelectorKind::Nothing
            }
        }
    }
}

/// The first term a binding's labels fail, in the order written (matchLabels, then
/// matchExpressions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermFailure {
    /// The selector is empty and selects nothing.
    EmptySelector,
    /// `matchLabels` `key: want` not satisfied; `actual` is the binding's value, if any.
    Label {
        key: String,
        want: String,
        actual: Option<String>,
    },
    /// `matchExpressions[index]` not satisfied.
    Expression {
        index: usize,
        requirement: String,
        actual: Option<String>,
    },
}

impl fmt::Display for TermFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let actual = |a: &Option<String>| match a {
            Some(v) => format!("is {v:?}"),
            None => "is not set".to_string(),
        };
        match self {
            TermFailure::EmptySelector => write!(f, "the group's selector is empty and selects nothing"),
            TermFailure::Label { key, want, actual: a } => {
                write!(f, "matchLabels {key}={want}: label {key} {}", actual(a))
            }
            TermFailure::Expression {
                index,
                requirement,
                actual: a,
            } => {
                let key = requirement.split_whitespace().next().unwrap_or_default();
                write!(
                    f,
                    "matchExpressions[{index}] ({requirement}): label {key} {}",
                    actual(a)
                )
            }
        }
    }
}

/// Describes a requirement in words: `env In (dev, test)`, `team Exists`.
pub fn describe_requirement(r: &SelectorRequirement) -> String {
    let values = r.values.as_deref().unwrap_or_default().join(", ");
    match r.operator {
        SelectorOperator::In => format!("{} In ({values})", r.key),
        SelectorOperator::NotIn => format!("{} NotIn ({values})", r.key),
        SelectorOperator::Exists => format!("{} Exists", r.key),
        SelectorOperator::DoesNotExist => format!("{} DoesNotExist", r.key),
    }
}

/// Describes a whole selector in words.
pub fn describe(selectors: Option<&RolloutSelectors>) -> String {
    match kind(selectors) {
        SelectorKind::Nothing => "nothing (the selector is empty)".to_string(),
        SelectorKind::All => "every remaining resource (matchAll)".to_string(),
        SelectorKind::Terms(s) => {
            let mut terms: Vec<String> = s
                .match_labels
                .iter()
                .flatten()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            terms.extend(s.match_expressions.iter().flatten().map(describe_requirement));
            terms.join(" AND ")
        }
    }
}

/// Where a selector reads labels: an object's label map, or a binding's facts.
pub trait Labels {
    fn label_value(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for dyn crate::api::kratix::BindingFacts + '_ {
    fn label_value(&self, key: &str) -> Option<&str> {
        self.label(key)
    }
}

fn requirement_holds<L: Labels + ?Sized>(r: &SelectorRequirement, labels: &L) -> bool {
    let value = labels.label_value(&r.key);
    let values = r.values.as_deref().unwrap_or_default();
    match r.operator {
        SelectorOperator::In => value.is_some_and(|v| values.iter().any(|x| x == v)),
        // As in Kubernetes: NotIn holds when the label is absent.
        SelectorOperator::NotIn => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        SelectorOperator::Exists => value.is_some(),
        SelectorOperator::DoesNotExist => value.is_none(),
    }
}

/// Checks the label terms of `selectors` against `labels`. `matchAll` selectors are reported as
/// matching here; whether an earlier group took the binding is the caller's question.
pub fn check<L: Labels + ?Sized>(selectors: Option<&RolloutSelectors>, labels: &L) -> Result<(), TermFailure> {
    let s = match kind(selectors) {
        SelectorKind::Nothing => return Err(TermFailure::EmptySelector),
        SelectorKind::All => return Ok(()),
        SelectorKind::Terms(s) => s,
    };
    for (key, want) in s.match_labels.iter().flatten() {
        let actual = labels.label_value(key);
        if actual != Some(want.as_str()) {
            return Err(TermFailure::Label {
                key: key.clone(),
                want: want.clone(),
                actual: actual.map(str::to_string),
            });
        }
    }
    for (index, r) in s.match_expressions.iter().flatten().enumerate() {
        if !requirement_holds(r, labels) {
            return Err(TermFailure::Expression {
                index,
                requirement: describe_requirement(r),
                actual: labels.label_value(&r.key).map(str::to_string),
            });
        }
    }
    Ok(())
}

pub fn matches<L: Labels + ?Sized>(selectors: Option<&RolloutSelectors>, labels: &L) -> bool {
    check(selectors, labels).is_ok()
}

/// A label selector written as `kubectl -l` and the API server take it (`env=prod,tier!=dev,
/// region in (eu,us),canary,!legacy`): every term must hold, and the empty selector matches
/// everything (Kubernetes semantics, unlike rollout-group selectors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelSelector {
    terms: RolloutSelectors,
}

impl std::str::FromStr for LabelSelector {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut labels = BTreeMap::new();
        let mut exprs = Vec::new();
        for term in split_terms(s) {
            let term = term.trim();
            let bad = || format!("{term:?} is not a selector term such as k=v, k!=v, k in (a,b), k notin (a), k or !k");
            let valid_key =
                |k: &str| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
            let set = |rest: &str| -> Option<Vec<String>> {
                let inner = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
                Some(
                    inner
                        .split(',')
                        .map(|v| v.trim().to_string())
                        .filter(|v| !v.is_empty())
                        .collect(),
                )
            };
            let expr = |key: &str, operator, values: Option<Vec<String>>| SelectorRequirement {
                key: key.to_string(),
                operator,
                values,
            };
            if term.is_empty() {
                continue;
            } else if let Some((k, v)) = term.split_once("!=") {
                exprs.push(expr(
                    k.trim(),
                    SelectorOperator::NotIn,
                    Some(vec![v.trim().to_string()]),
                ));
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels.insert(k.trim().to_string(), v.trim().to_string());
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                exprs.push(expr(
                    k.trim(),
                    SelectorOperator::NotIn,
                    Some(set(rest).ok_or_else(bad)?),
                ));
            } else if let Some((k, rest)) = term.split_once(" in ") {
                exprs.push(expr(k.trim(), SelectorOperator::In, Some(set(rest).ok_or_else(bad)?)));
            } else if let Some(k) = term.strip_prefix('!') {
                exprs.push(expr(k.trim(), SelectorOperator::DoesNotExist, None));
            } else {
                exprs.push(expr(term, SelectorOperator::Exists, None));
            }
            let key_ok = labels.keys().all(|k| valid_key(k)) && exprs.iter().all(|e| valid_key(&e.key));
            if !key_ok {
                return Err(bad());
            }
        }
        Ok(LabelSelector {
            terms: RolloutSelectors {
                match_labels: Some(labels),
                match_expressions: Some(exprs),
                match_all: None,
            },
        })
    }
}

impl LabelSelector {
    pub fn matches<L: Labels + ?Sized>(&self, labels: &L) -> bool {
        match kind(Some(&self.terms)) {
            SelectorKind::Nothing => true,
            _ => matches(Some(&self.terms), labels),
        }
    }
}

/// The terms of a selector string: split at commas outside parentheses.
fn split_terms(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn req(key: &str, op: SelectorOperator, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            operator: op,
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|v| v.to_string()).collect())
            },
        }
    }

    fn sel(ml: &[(&str, &str)], me: Vec<SelectorRequirement>) -> RolloutSelectors {
        RolloutSelectors {
            match_labels: if ml.is_empty() { None } else { Some(labels(ml)) },
            match_expressions: if me.is_empty() { None } else { Some(me) },
            match_all: None,
        }
    }

    #[test]
    fn selector_table() {
        use SelectorOperator::*;
        // The seed's dev group: env=dev AND prod NotIn (true).
        let seed_dev = sel(&[("env", "dev")], vec![req("prod", NotIn, &["true"])]);
        // The seed's AND example: env=prod AND tier NotIn (experimental).
        let prod_not_experimental = sel(&[("env", "prod")], vec![req("tier", NotIn, &["experimental"])]);
        // The seed's list example: env In (staging, prod) AND team Exists.
        let staging_or_prod_with_team = sel(
            &[],
            vec![req("env", In, &["staging", "prod"]), req("team", Exists, &[])],
        );
        let no_canary = sel(&[], vec![req("canary", DoesNotExist, &[])]);
        type Case<'a> = (&'a str, Option<&'a RolloutSelectors>, Vec<(&'a str, &'a str)>, bool);
        let cases: Vec<Case> = vec![
            ("seed dev matches dev", Some(&seed_dev), vec![("env", "dev")], true),
            (
                "seed dev: NotIn holds when label absent",
                Some(&seed_dev),
                vec![("env", "dev"), ("prod", "false")],
                true,
            ),
            (
                "seed dev rejects prod=true",
                Some(&seed_dev),
                vec![("env", "dev"), ("prod", "true")],
                false,
            ),
            (
                "seed dev rejects env=test",
                Some(&seed_dev),
                vec![("env", "test")],
                false,
            ),
            (
                "AND: both hold",
                Some(&prod_not_experimental),
                vec![("env", "prod"), ("tier", "gold")],
                true,
            ),
            (
                "AND: expression fails",
                Some(&prod_not_experimental),
                vec![("env", "prod"), ("tier", "experimental")],
                false,
            ),
            (
                "In is OR within a term",
                Some(&staging_or_prod_with_team),
                vec![("env", "staging"), ("team", "a")],
                true,
            ),
            (
                "list is AND across terms",
                Some(&staging_or_prod_with_team),
                vec![("env", "prod")],
                false,
            ),
            (
                "In fails when label absent",
                Some(&staging_or_prod_with_team),
                vec![("team", "a")],
                false,
            ),
            ("DoesNotExist", Some(&no_canary), vec![("env", "prod")], true),
            ("DoesNotExist fails", Some(&no_canary), vec![("canary", "")], false),
            ("omitted selector matches nothing", None, vec![("env", "dev")], false),
        ];
        for (name, s, l, want) in cases {
            assert_eq!(matches(s, &labels(&l)), want, "{name}");
        }
    }

    #[test]
    fn empty_selectors_match_nothing() {
        let empty = RolloutSelectors::default();
        let empty_lists = RolloutSelectors {
            match_labels: Some(BTreeMap::new()),
            match_expressions: Some(vec![]),
            match_all: Some(false),
        };
        for s in [&empty, &empty_lists] {
            assert_eq!(check(Some(s), &labels(&[("a", "b")])), Err(TermFailure::EmptySelector));
            assert_eq!(check(Some(s), &BTreeMap::new()), Err(TermFailure::EmptySelector));
        }
    }

    #[test]
    fn failure_names_the_first_failing_term() {
        let s = sel(
            &[("env", "prod")],
            vec![req("tier", SelectorOperator::NotIn, &["experimental"])],
        );
        let err = check(Some(&s), &labels(&[("env", "dev")])).unwrap_err();
        assert_eq!(err.to_string(), "matchLabels env=prod: label env is \"dev\"");
        let err = check(Some(&s), &labels(&[("env", "prod"), ("tier", "experimental")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "matchExpressions[0] (tier NotIn (experimental)): label tier is \"experimental\""
        );
        let err = check(Some(&s), &labels(&[])).unwrap_err();
        assert_eq!(err.to_string(), "matchLabels env=prod: label env is not set");
    }

    #[test]
    fn descriptions() {
        let s = sel(&[("env", "dev")], vec![req("prod", SelectorOperator::NotIn, &["true"])]);
        assert_eq!(describe(Some(&s)), "env=dev AND prod NotIn (true)");
        assert_eq!(describe(None), "nothing (the selector is empty)");
        let all = RolloutSelectors {
            match_all: Some(true),
            ..Default::default()
        };
        assert_eq!(describe(Some(&all)), "every remaining resource (matchAll)");
    }

    #[test]
    fn label_selector_strings_match_as_the_api_server_does() {
        let l = labels(&[("env", "prod"), ("region", "eu"), ("canary", "")]);
        let cases = [
            ("", true),
            ("env=prod", true),
            ("env==prod", true),
            ("env=dev", false),
            ("env!=dev", true),
            ("missing!=x", true),
            ("env=prod,region in (eu, us)", true),
            ("region notin (eu)", false),
            ("canary", true),
            ("!canary", false),
            ("!legacy,env=prod", true),
            ("upgradeplan-test=abc-123", false),
        ];
        for (sel, want) in cases {
            let parsed: LabelSelector = sel.parse().unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(parsed.matches(&l), want, "{sel}");
        }
        for bad in ["env in eu", "a b", "k in (x"] {
            assert!(bad.parse::<LabelSelector>().is_err(), "{bad}");
        }
    }
}
