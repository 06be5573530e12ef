//! Plan validation: every problem the CRD schema cannot catch (and those its CEL rules catch, for
//! plans read from files and plans stored before a rule existed), each with its field path. One function serves the controller (the `Ready`
//! condition) and the plugin (`explain -f`).

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};

pub use super::problem::{summarize, Problem};

use super::compile::{compile, CompiledPlan};
pub use super::naming::{is_dns_label, is_dns_subdomain};
use super::schedule::MAX_SCHEDULED_PLAN_NAME;
use super::version::is_regex_pattern;
use super::window::SEARCH_HORIZON_DAYS;
use crate::api::UpgradePlanSpec;

/// What the Promise's PromiseRevisions mean for a plan (`explain`, spec §2, §5.7): a target without
/// one waits; a target being deleted is never upgraded to; a `from` version being deleted has its
/// resources deleted by Kratix, and a run skips them.
pub fn revision_warnings(spec: &UpgradePlanSpec, revisions: &[crate::api::kratix::RevisionFact]) -> Vec<Problem> {
    let (promise, to) = (&spec.promise_ref.name, &spec.upgrade_path.to);
    let mut warnings = Vec::new();
    let target = |deleting: bool| revisions.iter().find(|r| &r.version == to && r.deleting == deleting);
    match (target(false), target(true)) {
        (Some(_), _) => {}
        (None, Some(r)) => warnings.push(Problem {
            field: "spec.upgradePath.to".into(),
            message: format!(
                "PromiseRevision {} ({promise} {to}) is being deleted: Kratix deletes every resource at {to}, so no run \
                 moves a resource there — a run waits (TargetRevisionReady=False), and one under way fails \
                 (PromiseRevisionNotFound)",
                r.name
            ),
        }),
        (None, None) => warnings.push(Problem {
            field: "spec.upgradePath.to".into(),
            message: format!(
                "Promise {promise:?} has no PromiseRevision {to:?}: a run waits (TargetRevisionReady=False) until Kratix \
                 has one — apply the Promise at {to} first"
            ),
        }),
    }
    let from = compile(spec).ok().map(|c| c.from);
    for r in revisions.iter().filter(|r| r.deleting && &r.version != to) {
        if from.as_ref().is_some_and(|f| f.matches(&r.version)) {
            warnings.push(Problem {
                field: "spec.upgradePath.from".into(),
                message: format!(
                    "PromiseRevision {} ({promise} {}) is being deleted: Kratix deletes the resources at {}; a run \
                     skips those it has not started (ResourceSkipped: PromiseRevision {} is being deleted)",
                    r.name, r.version, r.version, r.name
                ),
            });
        }
    }
    warnings
}

/// Every problem of the plan named `name`. `now` is needed to tell a window that can never open
/// within the search horizon.
/// What is allowed but probably not meant (`explain` warns; `--strict` makes them problems): the
/// target listed in `from`, and an `executeAt` that has passed (it fires no more).
pub fn plan_warnings(spec: &UpgradePlanSpec, now: DateTime<Utc>) -> Vec<Problem> {
    let mut warnings = Vec::new();
    let to = spec.upgrade_path.to.as_str();
    let compiled = compile(spec).ok();
    if !to.is_empty() && compiled.as_ref().is_some_and(|c| c.from.matches(to)) {
        warnings.push(Problem {
            field: "spec.upgradePath.from".into(),
            message: format!(
                "matches the target {to}: resources already at {to} are counted as upgraded; list only the versions to upgrade from"
            ),
        });
    }
    let executed = compiled
        .and_then(|plan| plan.triggers?.execute_at)
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
    let Some(mine) = super::compile::from(&spec.upgrade_path) else {
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
        let Some(theirs) = super::compile::from(&other.upgrade_path) else {
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

/// Every problem of the plan named `name` at `now` (spec §3): its name, then what [`compile`]
/// finds, then — once it compiles — windows that never open within the search horizon.
pub fn validate_plan(name: &str, spec: &UpgradePlanSpec, now: DateTime<Utc>) -> Vec<Problem> {
    check_plan(name, spec, now).err().unwrap_or_default()
}

/// The plan compiled, when it has no problem ([`validate_plan`]).
pub fn check_plan(name: &str, spec: &UpgradePlanSpec, now: DateTime<Utc>) -> Result<CompiledPlan, Vec<Problem>> {
    let mut problems = name_problems(name, spec);
    match compile(spec) {
        Ok(plan) => {
            problems.extend(closed_for_ever(&plan, now));
            if problems.is_empty() {
                Ok(plan)
            } else {
                Err(problems)
            }
        }
        Err(found) => {
            problems.extend(found);
            Err(problems)
        }
    }
}

/// The plan's name: an object name, short enough for its scheduled runs' names.
fn name_problems(name: &str, spec: &UpgradePlanSpec) -> Vec<Problem> {
    let mut p = Vec::new();
    // The API server enforces this; checked here for plans read from files (`explain -f`).
    if !name.is_empty() && !is_dns_subdomain(name) {
        p.push(Problem {
            field: "metadata.name".into(),
            message: format!(
                "{:?} is not a valid object name: use at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
                name.chars().take(64).collect::<String>()
            ),
        });
    }
    if spec.upgrade_execution_policy.is_some() && name.len() > MAX_SCHEDULED_PLAN_NAME {
        p.push(Problem {
            field: "metadata.name".into(),
            message: format!(
                "is {} characters; a plan with upgradeExecutionPolicy may have at most {MAX_SCHEDULED_PLAN_NAME}, so that its run names (<plan>-YYYYMMDD-HHMM) fit in 253",
                name.len()
            ),
        });
    }
    p
}

/// Groups whose windows never let an upgrade start within the search horizon from `now`.
fn closed_for_ever(plan: &CompiledPlan, now: DateTime<Utc>) -> Vec<Problem> {
    plan.groups
        .iter()
        .enumerate()
        .filter(|(_, g)| !g.windows.windows().is_empty())
        .filter(|(_, g)| {
            let state = g.windows.state(now);
            !state.open && state.next_open.is_none()
        })
        .map(|(i, _)| Problem {
            field: format!("spec.rolloutGroups[{i}].resourceUpgradeWindows"),
            message: format!(
                "the windows never let an upgrade start: the gate stays closed for the next {SEARCH_HORIZON_DAYS} days"
            ),
        })
        .collect()
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
        // The CRD's bound, for plans read from files (`explain -f`): 100 groups, not 101.
        let group = |i: usize| {
            let mut g = parse(SEED).spec.rollout_groups[0].clone();
            g.name = format!("g{i}");
            g
        };
        spec.rollout_groups = (0..crate::api::MAX_ROLLOUT_GROUPS).map(group).collect();
        assert_eq!(fields(&spec, "p"), Vec::<String>::new());
        spec.rollout_groups.push(group(crate::api::MAX_ROLLOUT_GROUPS));
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
