//! Plan validation: every problem the CRD schema cannot catch (or that a pre-CEL API server lets
//! through), each with its field path. One function serves the controller (the `Ready`
//! condition) and the plugin (`explain -f`).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

pub use super::problem::{summarize, Problem};

use super::budget::{parse_progress_deadline, FailureBudget};
use super::concurrency::Limit;
use super::cron::{parse_zone, resolve_local_time, CronSchedule};
use super::health::parse_timeout as parse_health_timeout;
use super::schedule::MAX_SCHEDULED_PLAN_NAME;
use super::version::{is_regex_pattern, VersionMatcher};
use super::window::{parse_go_duration, Gate, SEARCH_HORIZON_DAYS};
use crate::api::kratix::LATEST_VERSION;
use crate::api::{RolloutGroup, SelectorOperator, UpgradeExecutionPolicy, UpgradePath, UpgradePlanSpec};

/// An RFC 1123 subdomain, as Kubernetes requires of most object names.
pub fn is_dns_subdomain(name: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            !bytes.is_empty()
                && alnum(bytes[0])
                && alnum(bytes[bytes.len() - 1])
                && bytes.iter().all(|&b| alnum(b) || b == b'-')
        })
}

/// Every problem of the plan named `name`. `now` is needed to tell a window that can never open
/// within the search horizon.
/// What is allowed but probably not meant (`explain` warns; `--strict` makes them problems): the
/// target listed in `from`, and an `executeAt` that has passed (it fires no more).
pub fn plan_warnings(spec: &UpgradePlanSpec, now: DateTime<Utc>) -> Vec<Problem> {
    let mut warnings = Vec::new();
    let to = spec.upgrade_path.to.as_str();
    if !to.is_empty() && VersionMatcher::compile(&spec.upgrade_path.from).is_ok_and(|m| m.matches(to)) {
        warnings.push(Problem {
            field: "spec.upgradePath.from".into(),
            message: format!(
                "matches the target {to}: resources already at {to} are counted as upgraded; list only the versions to upgrade from"
            ),
        });
    }
    let executed = spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(super::schedule::Triggers::compile)
        .and_then(|t| t.execute_at)
        .filter(|t| *t <= now);
    if let Some(t) = executed {
        warnings.push(Problem {
            field: "spec.upgradeExecutionPolicy.executeAt".into(),
            message: format!("{} has passed: it fires no more", t.to_rfc3339()),
        });
    }
    // A soak holds the group after it (spec §14.2).
    if let Some((i, last)) = spec.rollout_groups.iter().enumerate().next_back() {
        if last.soak_duration.is_some() {
            warnings.push(Problem {
                field: format!("spec.rolloutGroups[{i}].soakDuration"),
                message: format!(
                    "has no effect: {:?} is the last group, and a soak holds the group after it",
                    last.name
                ),
            });
        }
    }
    warnings
}

/// Other plans of the same Promise that would take the same resources (warnings, spec §10): a
/// version one plan lists literally in `from` that the other's `from` matches. Both would select
/// a binding at that version, and whichever runs first upgrades it (the other then skips it as
/// changed by someone else). Two regular expressions are not compared (whether they overlap is
/// not decidable in general); suspended plans are left out.
pub fn overlapping_plans<'p>(
    name: &str,
    spec: &UpgradePlanSpec,
    others: impl IntoIterator<Item = (&'p str, &'p UpgradePlanSpec)>,
) -> Vec<Problem> {
    let Ok(mine) = VersionMatcher::compile(&spec.upgrade_path.from) else {
        return Vec::new();
    };
    fn literals(from: &[String]) -> impl Iterator<Item = &str> {
        from.iter().filter(|v| !is_regex_pattern(v)).map(String::as_str)
    }
    let mut warnings = Vec::new();
    for (other_name, other) in others {
        if other_name == name || other.suspend || other.promise_ref.name != spec.promise_ref.name {
            continue;
        }
        let Ok(theirs) = VersionMatcher::compile(&other.upgrade_path.from) else {
            continue;
        };
        let shared: BTreeSet<&str> = literals(&other.upgrade_path.from)
            .filter(|v| mine.matches(v))
            .chain(literals(&spec.upgrade_path.from).filter(|v| theirs.matches(v)))
            .collect();
        if shared.is_empty() {
            continue;
        }
        let versions: Vec<&str> = shared.into_iter().collect();
        warnings.push(Problem {
            field: "spec.upgradePath.from".into(),
            message: format!(
                "UpgradePlan {other_name:?} of the same Promise also upgrades from {} (to {}): a resource at that version is taken by whichever plan runs first",
                versions.join(", "),
                other.upgrade_path.to
            ),
        });
    }
    warnings
}

pub fn validate_plan(name: &str, spec: &UpgradePlanSpec, now: DateTime<Utc>) -> Vec<Problem> {
    let mut problems = Vec::new();
    let p = &mut problems;
    check_identity(p, name, spec);
    check_upgrade_path(p, &spec.upgrade_path);
    if let Some(policy) = &spec.upgrade_execution_policy {
        check_execution_policy(p, name, policy);
    }
    if spec.rollout_groups.is_empty() {
        add(
            p,
            "spec.rolloutGroups".into(),
            "must have at least one rollout group".into(),
        );
    }
    let mut seen = BTreeSet::new();
    for (gi, group) in spec.rollout_groups.iter().enumerate() {
        let at = format!("spec.rolloutGroups[{gi}]");
        if group.name.trim().is_empty() {
            add(p, format!("{at}.name"), "must not be empty".into());
        } else if !seen.insert(group.name.as_str()) {
            add(
                p,
                format!("{at}.name"),
                format!("duplicate group name {:?}: group names must be unique", group.name),
            );
        }
        check_group(p, &at, group, now);
    }
    check_signal_gates(p, spec);
    problems
}

fn add(problems: &mut Vec<Problem>, field: String, message: String) {
    problems.push(Problem { field, message });
}

/// The plan's name and Promise.
fn check_identity(p: &mut Vec<Problem>, name: &str, spec: &UpgradePlanSpec) {
    // The API server enforces this; checked here for plans read from files (`explain -f`).
    if !name.is_empty() && !is_dns_subdomain(name) {
        add(
 p,
            "metadata.name".into(),
            format!(
                "{:?} is not a valid object name: use at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                name.chars().take(64).collect::<String>()
            ),
        );
    }
    if spec.promise_ref.name.trim().is_empty() {
        add(p, "spec.promiseRef.name".into(), "must name a Promise".into());
    }
}

/// `spec.upgradePath`: the versions upgraded from, and the one exact version upgraded to.
fn check_upgrade_path(p: &mut Vec<Problem>, path: &UpgradePath) {
    if path.from.is_empty() {
        add(
            p,
            "spec.upgradePath.from".into(),
            "must list at least one version or /regex/".into(),
        );
    }
    if let Err(errors) = VersionMatcher::compile(&path.from) {
        for (i, e) in errors {
            add(p, format!("spec.upgradePath.from[{i}]"), e.to_string());
        }
    }
    if path.to.is_empty() {
        add(p, "spec.upgradePath.to".into(), "must name the target version".into());
    } else if is_regex_pattern(&path.to) {
        add(
            p,
            "spec.upgradePath.to".into(),
            "must be an exact version, not a /regex/ pattern".into(),
        );
    } else if path.to == LATEST_VERSION {
        add(
            p,
            "spec.upgradePath.to".into(),
            "must be an exact version: 'latest' is not a version a resource can be pinned to".into(),
        );
    }
}

/// `spec.upgradeExecutionPolicy`: when runs are created (spec §6).
fn check_execution_policy(p: &mut Vec<Problem>, name: &str, policy: &UpgradeExecutionPolicy) {
    if name.len() > MAX_SCHEDULED_PLAN_NAME {
        add(
 p,
            "metadata.name".into(),
            format!(
                "is {} characters; a plan with upgradeExecutionPolicy may have at most {MAX_SCHEDULED_PLAN_NAME}, so that its run names (<plan>-YYYYMMDD-HHMM) fit in 253",
                name.len()
            ),
        );
    }
    if policy.repeat_schedule.is_none() && policy.execute_at.is_none() {
        add(
            p,
            "spec.upgradeExecutionPolicy".into(),
            "set repeatSchedule, executeAt, or both (or remove the policy to run only by hand)".into(),
        );
    }
    let zone = match parse_zone(policy.time_zone.as_deref()) {
        Ok(z) => Some(z),
        Err(e) => {
            add(p, "spec.upgradeExecutionPolicy.timeZone".into(), e.to_string());
            None
        }
    };
    if let Some(s) = &policy.repeat_schedule {
        if let Err(e) = s.parse::<CronSchedule>() {
            add(p, "spec.upgradeExecutionPolicy.repeatSchedule".into(), e.to_string());
        }
    }
    if let (Some(v), Some(zone)) = (&policy.execute_at, zone) {
        if let Err(e) = resolve_local_time(v, zone) {
            add(p, "spec.upgradeExecutionPolicy.executeAt".into(), e.to_string());
        }
    }
    match policy.starting_deadline.as_deref().map(parse_go_duration) {
        Some(Err(e)) => add(p, "spec.upgradeExecutionPolicy.startingDeadline".into(), e),
        Some(Ok(d)) if d <= chrono::Duration::zero() => add(
            p,
            "spec.upgradeExecutionPolicy.startingDeadline".into(),
            "must be greater than zero (omit it to run the latest missed trigger however late)".into(),
        ),
        _ => {}
    }
}

/// One rollout group's selectors, limits, durations and windows, `at` its field path.
fn check_group(p: &mut Vec<Problem>, at: &str, group: &RolloutGroup, now: DateTime<Utc>) {
    if let Some(sel) = &group.selectors {
        let others = sel.match_labels.is_some() || sel.match_expressions.is_some();
        if sel.match_all == Some(true) && others {
            add(
                p,
                format!("{at}.selectors.matchAll"),
                "cannot be combined with matchLabels or matchExpressions".into(),
            );
        }
        for (ei, r) in sel.match_expressions.iter().flatten().enumerate() {
            let values = r.values.as_deref().unwrap_or_default();
            let field = format!("{at}.selectors.matchExpressions[{ei}]");
            if r.key.is_empty() {
                add(p, format!("{field}.key"), "must not be empty".into());
            }
            match r.operator {
                SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => add(
                    p,
                    format!("{field}.values"),
                    format!("must not be empty for operator {:?}", r.operator),
                ),
                SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => add(
                    p,
                    format!("{field}.values"),
                    format!("must be omitted for operator {:?}", r.operator),
                ),
                _ => {}
            }
        }
    }
    if let Err(e) = Limit::parse(group.max_concurrent.as_ref()) {
        add(p, format!("{at}.maxConcurrent"), e.to_string());
    }
    if let Err(e) = FailureBudget::parse(group.max_failures.as_ref()) {
        add(p, format!("{at}.maxFailures"), e.to_string());
    }
    if let Err(e) = parse_progress_deadline(group.progress_deadline.as_deref()) {
        add(p, format!("{at}.progressDeadline"), e);
    }
    if let Some(Err(e)) = group.health_check.as_ref().map(|h| parse_health_timeout(&h.timeout)) {
        add(p, format!("{at}.healthCheck.timeout"), e);
    }
    if let Some(Err(e)) = group.soak_duration.as_deref().map(parse_go_duration) {
        add(p, format!("{at}.soakDuration"), e);
    }
    let windows = group.resource_upgrade_windows.as_deref().unwrap_or_default();
    let mut all_windows_ok = true;
    for (wi, w) in windows.iter().enumerate() {
        // Check each field on its own so that every problem of the window is reported.
        let field = format!("{at}.resourceUpgradeWindows[{wi}]");
        if let Err(e) = w.schedule.parse::<CronSchedule>() {
            add(p, format!("{field}.schedule"), e.to_string());
            all_windows_ok = false;
        }
        if let Err(e) = super::window::parse_go_duration(&w.duration) {
            add(p, format!("{field}.duration"), e);
            all_windows_ok = false;
        }
        if let Err(e) = parse_zone(w.time_zone.as_deref()) {
            add(p, format!("{field}.timeZone"), e.to_string());
            all_windows_ok = false;
        }
    }
    if all_windows_ok && !windows.is_empty() {
        if let Ok(gate) = Gate::compile(windows) {
            let state = gate.state(now);
            if !state.open && state.next_open.is_none() {
                add(
 p,
                    format!("{at}.resourceUpgradeWindows"),
                    format!("the windows never let an upgrade start: the gate stays closed for the next {SEARCH_HORIZON_DAYS} days"),
                );
            }
        }
    }
}

/// Signal gates (spec §13.3).
fn check_signal_gates(p: &mut Vec<Problem>, spec: &UpgradePlanSpec) {
    let mut gate_names = std::collections::HashSet::new();
    for (i, g) in spec.gates.iter().flatten().enumerate() {
        let at = format!("spec.gates[{i}]");
        if !is_dns_label(&g.name) {
            add(
 p,
                format!("{at}.name"),
                format!("{:?} must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", g.name),
            );
        } else if !gate_names.insert(g.name.as_str()) {
            add(
                p,
                format!("{at}.name"),
                format!("{:?} names an earlier gate too; names must be unique", g.name),
            );
        }
        if g.prometheus.query.trim().is_empty() {
            add(p, format!("{at}.prometheus.query"), "must be a PromQL query".into());
        }
        for (j, group) in g.groups.iter().flatten().enumerate() {
            if !spec.rollout_groups.iter().any(|rg| &rg.name == group) {
                add(
                    p,
                    format!("{at}.groups[{j}]"),
                    format!("{group:?} is not a rollout group of this plan"),
                );
            }
        }
        if let Some(Err(e)) = g.fail_after.as_deref().map(parse_go_duration) {
            add(p, format!("{at}.failAfter"), e);
        }
    }
}

/// An RFC 1123 label (at most 63 characters), as gate names are.
pub fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && !name.contains('.') && is_dns_subdomain(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{UpgradePlan, UpgradePlanSpec};

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-06-01T00:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn parse(yaml: &str) -> UpgradePlan {
        serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

    const SEED: &str = r#"
apiVersion: platform.syntasso.io/v1alpha1
kind: UpgradePlan
metadata:
  name: redis-v1-to-v2
spec:
  promiseRef:
    name: redis
  upgradePath:
    from:
      - "v1.0.0"
    to: "v2.0.0"
  upgradeExecutionPolicy:
    repeatSchedule: "0 23 * * 6"
    executeAt: "2026-05-01T23:00"
    timeZone: "Europe/London"
  rolloutGroups:
    - name: dev
      selectors:
        matchExpressions:
        - key: prod
          operator: NotIn
          values: ["true"]
        matchLabels:
          env: dev
      maxConcurrent: 5
      resourceUpgradeWindows:
        - kind: allow
          schedule: "0 22 * * *"
          duration: "4h"
          timeZone: "Europe/London"
"#;

    #[test]
    fn plans_of_one_promise_that_would_take_the_same_resources_are_named() {
        let plan = |promise: &str, from: &[&str], to: &str| {
            let mut spec: UpgradePlanSpec = serde_json::from_value(serde_json::json!({
                "promiseRef": {"name": promise},
                "upgradePath": {"from": from, "to": to},
                "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]
            }))
            .unwrap();
            spec.suspend = false;
            spec
        };
        let me = plan("redis", &["v1.0.0", "/v1\\.1\\..*/"], "v2.0.0");
        let same_literal = plan("redis", &["v1.0.0"], "v3.0.0");
        let caught_by_my_pattern = plan("redis", &["v1.1.4"], "v2.1.0");
        let disjoint = plan("redis", &["v0.9.0"], "v1.0.0");
        let other_promise = plan("postgres", &["v1.0.0"], "v2.0.0");
        let patterns_only = plan("redis", &["/v1\\..*/"], "v4.0.0");
        let mut paused = plan("redis", &["v1.0.0"], "v5.0.0");
        paused.suspend = true;
        let others = [
            ("me", &me),
            ("same", &same_literal),
            ("pattern", &caught_by_my_pattern),
            ("disjoint", &disjoint),
            ("pg", &other_promise),
            ("regex", &patterns_only),
            ("paused", &paused),
        ];
        let messages: Vec<String> = overlapping_plans("me", &me, others)
            .into_iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect();
        assert_eq!(
            messages,
            [
                "spec.upgradePath.from: UpgradePlan \"same\" of the same Promise also upgrades from v1.0.0 (to v3.0.0): a resource at that version is taken by whichever plan runs first",
                "spec.upgradePath.from: UpgradePlan \"pattern\" of the same Promise also upgrades from v1.1.4 (to v2.1.0): a resource at that version is taken by whichever plan runs first",
                "spec.upgradePath.from: UpgradePlan \"regex\" of the same Promise also upgrades from v1.0.0 (to v4.0.0): a resource at that version is taken by whichever plan runs first",
            ]
        );
    }

    #[test]
    fn the_seed_plan_is_valid() {
        let plan = parse(SEED);
        assert_eq!(validate_plan("redis-v1-to-v2", &plan.spec, now()), vec![]);
        let regex = parse(&SEED.replace("\"v1.0.0\"", "\"/v1\\\\.1\\\\..*/\""));
        assert_eq!(regex.spec.upgrade_path.from, vec![r"/v1\.1\..*/".to_string()]);
        assert_eq!(validate_plan("p", &regex.spec, now()), vec![]);
    }

    #[test]
    fn object_names() {
        let long = "a".repeat(253);
        let too_long = "a".repeat(254);
        for (name, valid) in [
            ("redis-v1-to-v2", true),
            ("a.b-c.d", true),
            ("0", true),
            (long.as_str(), true),
            (too_long.as_str(), false),
            ("Bad_Name", false),
            ("-leading", false),
            ("trailing-", false),
            ("a..b", false),
            ("é", false),
        ] {
            assert_eq!(is_dns_subdomain(name), valid, "{name:?}");
        }
        let plan = parse(SEED);
        assert_eq!(fields(&plan.spec, "Bad_Name"), vec!["metadata.name"]);
    }

    fn fields(spec: &UpgradePlanSpec, name: &str) -> Vec<String> {
        validate_plan(name, spec, now()).into_iter().map(|p| p.field).collect()
    }

    #[test]
    fn every_problem_with_its_field() {
        let table: Vec<(&str, String, Vec<&str>)> = vec![
            (
                "invalid regex",
                SEED.replace("- \"v1.0.0\"", "- \"v1.0.0\"\n      - \"/v1(/\""),
                vec!["spec.upgradePath.from[1]"],
            ),
            (
                "to is a pattern",
                SEED.replace("to: \"v2.0.0\"", "to: \"/v2.*/\""),
                vec!["spec.upgradePath.to"],
            ),
            (
                "to is latest",
                SEED.replace("to: \"v2.0.0\"", "to: latest"),
                vec!["spec.upgradePath.to"],
            ),
            (
                "six-field cron",
                SEED.replace("0 23 * * 6", "0 0 23 * * 6"),
                vec!["spec.upgradeExecutionPolicy.repeatSchedule"],
            ),
            (
                "bad executeAt",
                SEED.replace("2026-05-01T23:00", "2026-05-01 23:00"),
                vec!["spec.upgradeExecutionPolicy.executeAt"],
            ),
            (
                "bad startingDeadline",
                SEED.replace(
                    "executeAt: \"2026-05-01T23:00\"",
                    "executeAt: \"2026-05-01T23:00\"\n    startingDeadline: 2 hours",
                ),
                vec!["spec.upgradeExecutionPolicy.startingDeadline"],
            ),
            (
                "zero startingDeadline",
                SEED.replace(
                    "executeAt: \"2026-05-01T23:00\"",
                    "executeAt: \"2026-05-01T23:00\"\n    startingDeadline: 0s",
                ),
                vec!["spec.upgradeExecutionPolicy.startingDeadline"],
            ),
            (
                "bad zone",
                SEED.replace(
                    "timeZone: \"Europe/London\"\n  rolloutGroups",
                    "timeZone: \"Europe/Londres\"\n  rolloutGroups",
                ),
                vec!["spec.upgradeExecutionPolicy.timeZone"],
            ),
            (
                "percentage",
                SEED.replace("maxConcurrent: 5", "maxConcurrent: \"150%\""),
                vec!["spec.rolloutGroups[0].maxConcurrent"],
            ),
            (
                "zero",
                SEED.replace("maxConcurrent: 5", "maxConcurrent: 0"),
                vec!["spec.rolloutGroups[0].maxConcurrent"],
            ),
            (
                "failure budget above 100%",
                SEED.replace("maxConcurrent: 5", "maxConcurrent: 5\n      maxFailures: \"110%\""),
                vec!["spec.rolloutGroups[0].maxFailures"],
            ),
            (
                "negative failure budget",
                SEED.replace("maxConcurrent: 5", "maxConcurrent: 5\n      maxFailures: -2"),
                vec!["spec.rolloutGroups[0].maxFailures"],
            ),
            (
                "progress deadline that is no duration",
                SEED.replace(
                    "maxConcurrent: 5",
                    "maxConcurrent: 5\n      progressDeadline: \"half an hour\"",
                ),
                vec!["spec.rolloutGroups[0].progressDeadline"],
            ),
            (
                "gates: a bad name, a repeated name, an empty query, an unknown group, a bad failAfter",
                format!(
                    "{SEED}  gates:\n    - {{name: Alerts, prometheus: {{query: up}}}}\n    - {{name: slo, prometheus: {{query: up}}}}\n    - {{name: slo, prometheus: {{query: \" \"}}, groups: [dev, qa], failAfter: soon}}\n"
                ),
                vec![
                    "spec.gates[0].name",
                    "spec.gates[2].name",
                    "spec.gates[2].prometheus.query",
                    "spec.gates[2].groups[1]",
                    "spec.gates[2].failAfter",
                ],
            ),
            (
                "soak that is no duration",
                SEED.replace("maxConcurrent: 5", "maxConcurrent: 5\n      soakDuration: a day\n      requireApproval: true"),
                vec!["spec.rolloutGroups[0].soakDuration"],
            ),
            (
                "health check timeout of zero",
                SEED.replace(
                    "maxConcurrent: 5",
                    "maxConcurrent: 5\n      healthCheck: {timeout: \"0s\"}",
                ),
                vec!["spec.rolloutGroups[0].healthCheck.timeout"],
            ),
            (
                "window schedule and duration both wrong",
                SEED.replace("schedule: \"0 22 * * *\"", "schedule: \"@every 1h\"")
                    .replace("duration: \"4h\"", "duration: \"0s\""),
                vec![
                    "spec.rolloutGroups[0].resourceUpgradeWindows[0].schedule",
                    "spec.rolloutGroups[0].resourceUpgradeWindows[0].duration",
                ],
            ),
            (
                "In without values",
                SEED.replace("values: [\"true\"]", "values: []"),
                vec!["spec.rolloutGroups[0].selectors.matchExpressions[0].values"],
            ),
            (
                "Exists with values",
                SEED.replace("operator: NotIn", "operator: Exists"),
                vec!["spec.rolloutGroups[0].selectors.matchExpressions[0].values"],
            ),
            (
                "matchAll with labels",
                SEED.replace("        matchLabels:", "        matchAll: true\n        matchLabels:"),
                vec!["spec.rolloutGroups[0].selectors.matchAll"],
            ),
            (
                "policy without triggers",
                SEED.replace(
                    "    repeatSchedule: \"0 23 * * 6\"\n    executeAt: \"2026-05-01T23:00\"\n",
                    "",
                ),
                vec!["spec.upgradeExecutionPolicy"],
            ),
        ];
        for (name, yaml, want) in table {
            let plan = parse(&yaml);
            assert_eq!(fields(&plan.spec, "redis-v1-to-v2"), want, "{name}");
        }
    }

    #[test]
    fn structural_problems() {
        let mut spec = parse(SEED).spec;
        spec.rollout_groups.push(spec.rollout_groups[0].clone());
        assert_eq!(fields(&spec, "p"), vec!["spec.rolloutGroups[1].name"]);
        let long = "p".repeat(230);
        assert_eq!(
            fields(&spec, &long),
            vec!["metadata.name", "spec.rolloutGroups[1].name"]
        );
        spec.upgrade_execution_policy = None;
        assert_eq!(
            fields(&spec, &long),
            vec!["spec.rolloutGroups[1].name"],
            "no policy, no name limit"
        );
        spec.rollout_groups.clear();
        assert_eq!(fields(&spec, "p"), vec!["spec.rolloutGroups"]);
    }

    #[test]
    fn a_gate_that_never_opens_is_invalid() {
        let deny_all_day = |zone: &str| {
            SEED.replace(
                "        - kind: allow\n          schedule: \"0 22 * * *\"\n          duration: \"4h\"\n          timeZone: \"Europe/London\"",
                &format!("        - kind: deny\n          schedule: \"0 0 * * *\"\n          duration: \"24h\"\n          timeZone: \"{zone}\""),
            )
        };
        let problems = validate_plan("p", &parse(&deny_all_day("UTC")).spec, now());
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].field, "spec.rolloutGroups[0].resourceUpgradeWindows");
        assert!(problems[0].to_string().contains("never let an upgrade start"));
        // In Europe/London, 25 October 2026 lasts 25 hours: a 24h window (elapsed time) leaves the
        // last hour open, so the plan is valid.
        assert_eq!(
            validate_plan("p", &parse(&deny_all_day("Europe/London")).spec, now()),
            vec![]
        );
    }
}

#[cfg(test)]
mod soak_warning_tests {
    use super::*;
    use crate::engine::snapshot::tests::{match_all, plan};

    /// Spec §14.2: a soak after the last group has no effect; explain warns.
    #[test]
    fn a_soak_on_the_last_group_is_warned_about() {
        let now = chrono::Utc::now();
        let mut first = match_all("dev");
        first.soak_duration = Some("1h".into());
        let mut last = match_all("prod");
        assert!(plan_warnings(&plan(&["v1"], "v2", vec![first.clone(), last.clone()]), now).is_empty());
        last.soak_duration = Some("30m".into());
        let w = plan_warnings(&plan(&["v1"], "v2", vec![first, last]), now);
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].field.as_str(), w[0].message.as_str()),
            (
                "spec.rolloutGroups[1].soakDuration",
                "has no effect: \"prod\" is the last group, and a soak holds the group after it"
            )
        );
    }
}
