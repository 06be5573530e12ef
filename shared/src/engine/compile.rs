//! A plan compiled once (spec §3, §14.2): every field the engine acts on, parsed into its type,
//! or every problem that stops it, each with its field path. Nothing else in the engine parses a
//! plan's fields, so there is no per-caller fallback for a value that does not parse: a plan
//! either compiles (and a run follows exactly what it compiled to) or it does not (and its
//! problems are the validation `Ready=False` and `explain -f` report).
//!
//! What needs more than the spec — the plan's name (object-name rules) and `now` (a window that
//! never opens within the search horizon) — is checked by [`super::validate::check_plan`] around
//! this.

use std::collections::BTreeSet;

use super::budget::FailureBudget;
use super::concurrency::Limit;
use super::cron::{parse_zone, resolve_local_time, CronSchedule};
use super::problem::Problem;
use super::schedule::Triggers;
use super::version::{is_regex_pattern, VersionMatcher};
pub use super::window::WrittenDuration;
use super::window::{parse_go_duration, Window, Windows};
use crate::api::kratix::LATEST_VERSION;
use crate::api::{
    Gate as GateSpec, RolloutGroup, RolloutSelectors, SelectorOperator, UpgradeExecutionPolicy, UpgradePath,
    UpgradePlanSpec, UpgradeWindow, MAX_ROLLOUT_GROUPS,
};

/// A plan whose every field parsed.
#[derive(Debug, Clone)]
pub struct CompiledPlan {
    pub promise: String,
    pub from: VersionMatcher,
    pub to: String,
    /// `upgradeExecutionPolicy`; `None` without one (runs only by hand).
    pub triggers: Option<Triggers>,
    pub groups: Vec<CompiledGroup>,
    /// `spec.gates`, in plan order.
    pub gates: Vec<SignalGate>,
}

impl CompiledPlan {
    /// The group named `name`.
    pub fn group(&self, name: &str) -> Option<&CompiledGroup> {
        self.groups.iter().find(|g| g.name == name)
    }

    /// Whether any group has a `healthCheck` (the run then reads HealthRecords).
    pub fn checks_health(&self) -> bool {
        self.groups.iter().any(|g| g.health_timeout.is_some())
    }
}

/// One rollout group, compiled.
#[derive(Debug, Clone)]
pub struct CompiledGroup {
    pub name: String,
    /// As written: the selector rules are checked here, applied by [`super::snapshot`].
    pub selectors: Option<RolloutSelectors>,
    pub limit: Limit,
    pub budget: FailureBudget,
    /// `progressDeadline`.
    pub deadline: Option<WrittenDuration>,
    /// `healthCheck.timeout`: present exactly when the group has a health check.
    pub health_timeout: Option<WrittenDuration>,
    /// `soakDuration`: how long the group holds the next one after it completes.
    pub soak: Option<WrittenDuration>,
    pub requires_approval: bool,
    /// `resourceUpgradeWindows` (no freezes: those are added per pass).
    pub windows: Windows,
}

/// A signal gate (spec §13.3), compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct SignalGate {
    pub spec: GateSpec,
    /// `failAfter`: a gate closed this long fails the run; `None`: it only holds.
    pub fail_after: Option<WrittenDuration>,
}

impl SignalGate {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// Whether the gate holds rollout group `group` (every group without `groups`).
    pub fn applies(&self, group: &str) -> bool {
        self.spec.groups.as_ref().is_none_or(|g| g.iter().any(|n| n == group))
    }
}

/// Compiles `spec`: the plan, or every problem found (all of them, not the first).
pub fn compile(spec: &UpgradePlanSpec) -> Result<CompiledPlan, Vec<Problem>> {
    let mut p = Problems::default();
    if spec.promise_ref.name.trim().is_empty() {
        p.add("spec.promiseRef.name", "must name a Promise".into());
    }
    let from = upgrade_path(&mut p, &spec.upgrade_path);
    let triggers = spec
        .upgrade_execution_policy
        .as_ref()
        .map(|policy| execution_policy(&mut p, policy));
    if spec.rollout_groups.is_empty() {
        p.add("spec.rolloutGroups", "must have at least one rollout group".into());
    } else if spec.rollout_groups.len() > MAX_ROLLOUT_GROUPS {
        p.add(
            "spec.rolloutGroups",
            format!(
                "must have at most {MAX_ROLLOUT_GROUPS} rollout groups, has {}",
                spec.rollout_groups.len()
            ),
        );
    }
    let mut seen = BTreeSet::new();
    let mut groups = Vec::new();
    for (gi, group) in spec.rollout_groups.iter().enumerate() {
        let at = format!("spec.rolloutGroups[{gi}]");
        if group.name.trim().is_empty() {
            p.add(format!("{at}.name"), "must not be empty".into());
        } else if !seen.insert(group.name.as_str()) {
            p.add(
                format!("{at}.name"),
                format!("duplicate group name {:?}: group names must be unique", group.name),
            );
        }
        groups.push(rollout_group(&mut p, &at, group));
    }
    let gates = signal_gates(&mut p, spec);
    if !p.0.is_empty() {
        return Err(p.0);
    }
    // Each part reports a problem whenever it does not compile, so with none reported every
    // part is here; the problem below is only a guard against a part that forgot to.
    let compiled = (|| {
        Some(CompiledPlan {
            promise: spec.promise_ref.name.clone(),
            from: from?,
            to: spec.upgrade_path.to.clone(),
            // Absent: runs only by hand.
            triggers: match triggers {
                None => None,
                Some(t) => Some(t?),
            },
            groups: groups.into_iter().collect::<Option<_>>()?,
            gates: gates.into_iter().collect::<Option<_>>()?,
        })
    })();
    compiled.ok_or_else(|| {
        vec![Problem {
            field: "spec".into(),
            message: "does not compile (a field failed without naming itself: please report this)".into(),
        }]
    })
}

/// The problems found so far.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, field: impl Into<String>, message: String) {
        self.0.push(Problem {
            field: field.into(),
            message,
        });
    }

    /// `result`'s value, or `None` with its error reported at `field`.
    fn take<T, E: ToString>(&mut self, field: impl Into<String>, result: Result<T, E>) -> Option<T> {
        result.map_err(|e| self.add(field, e.to_string())).ok()
    }

    /// An optional field: `Some(None)` when absent, `None` (reported) when it does not parse.
    fn optional<T, E: ToString>(
        &mut self,
        field: impl Into<String>,
        parsed: Option<Result<T, E>>,
    ) -> Option<Option<T>> {
        match parsed {
            None => Some(None),
            Some(result) => self.take(field, result).map(Some),
        }
    }

    /// An optional duration field, as [`Problems::optional`].
    fn duration(&mut self, field: impl Into<String>, written: Option<&str>) -> Option<Option<WrittenDuration>> {
        self.optional(field, written.map(WrittenDuration::parse))
    }
}

/// `spec.upgradePath.from` on its own: lints compare it across plans, valid or not.
pub fn from(path: &UpgradePath) -> Option<VersionMatcher> {
    VersionMatcher::compile(&path.from).ok()
}

/// `spec.upgradePath`: the versions upgraded from, and the one exact version upgraded to.
fn upgrade_path(p: &mut Problems, path: &UpgradePath) -> Option<VersionMatcher> {
    if path.from.is_empty() {
        p.add(
            "spec.upgradePath.from",
            "must list at least one version or /regex/".into(),
        );
    }
    let from = match VersionMatcher::compile(&path.from) {
        Ok(m) => Some(m),
        Err(errors) => {
            for (i, e) in errors {
                p.add(format!("spec.upgradePath.from[{i}]"), e.to_string());
            }
            None
        }
    };
    if path.to.is_empty() {
        p.add("spec.upgradePath.to", "must name the target version".into());
    } else if is_regex_pattern(&path.to) {
        p.add(
            "spec.upgradePath.to",
            "must be an exact version, not a /regex/ pattern".into(),
        );
    } else if path.to == LATEST_VERSION {
        p.add(
            "spec.upgradePath.to",
            "must be an exact version: 'latest' is not a version a resource can be pinned to".into(),
        );
    }
    from
}

/// `spec.upgradeExecutionPolicy` on its own: when runs are created (spec §6).
pub fn triggers(policy: &UpgradeExecutionPolicy) -> Result<Triggers, Vec<Problem>> {
    let mut p = Problems::default();
    match execution_policy(&mut p, policy) {
        Some(t) if p.0.is_empty() => Ok(t),
        _ => Err(p.0),
    }
}

/// `spec.upgradeExecutionPolicy`: when runs are created (spec §6).
fn execution_policy(p: &mut Problems, policy: &UpgradeExecutionPolicy) -> Option<Triggers> {
    const AT: &str = "spec.upgradeExecutionPolicy";
    if policy.repeat_schedule.is_none() && policy.execute_at.is_none() {
        p.add(
            AT,
            "set repeatSchedule, executeAt, or both (or remove the policy to run only by hand)".into(),
        );
    }
    let zone = p.take(format!("{AT}.timeZone"), parse_zone(policy.time_zone.as_deref()));
    let repeat = p.optional(
        format!("{AT}.repeatSchedule"),
        policy.repeat_schedule.as_ref().map(|s| s.parse::<CronSchedule>()),
    );
    let execute_at = match (&policy.execute_at, zone) {
        (Some(v), Some(zone)) => p.optional(format!("{AT}.executeAt"), Some(resolve_local_time(v, zone))),
        // The zone's problem is reported; the time cannot be read without it.
        (Some(_), None) => None,
        (None, _) => Some(None),
    };
    let starting_deadline = p.duration(format!("{AT}.startingDeadline"), policy.starting_deadline.as_deref())?;
    Some(Triggers {
        zone: zone?,
        execute_at: execute_at?,
        repeat: repeat?,
        starting_deadline,
    })
}

/// Rollout group `index` of a plan on its own (views of an invalid plan show each group that
/// compiles).
pub fn group(index: usize, group: &RolloutGroup) -> Result<CompiledGroup, Vec<Problem>> {
    let mut p = Problems::default();
    match rollout_group(&mut p, &format!("spec.rolloutGroups[{index}]"), group) {
        Some(g) if p.0.is_empty() => Ok(g),
        _ => Err(p.0),
    }
}

/// Whether the group waits for an UpgradeApproval before it starts (spec §13.4).
pub fn requires_approval(group: &RolloutGroup) -> bool {
    group.require_approval == Some(true)
}

/// One rollout group's selectors, limits, durations and windows, `at` its field path.
fn rollout_group(p: &mut Problems, at: &str, group: &RolloutGroup) -> Option<CompiledGroup> {
    if let Some(sel) = &group.selectors {
        selectors(p, at, sel);
    }
    let limit = p.take(
        format!("{at}.maxConcurrent"),
        Limit::parse(group.max_concurrent.as_ref()),
    );
    let budget = p.take(
        format!("{at}.maxFailures"),
        FailureBudget::parse(group.max_failures.as_ref()),
    );
    let deadline = p.duration(format!("{at}.progressDeadline"), group.progress_deadline.as_deref());
    let health_timeout = p.duration(
        format!("{at}.healthCheck.timeout"),
        group.health_check.as_ref().map(|h| h.timeout.as_str()),
    );
    let soak = p.duration(format!("{at}.soakDuration"), group.soak_duration.as_deref());
    let windows = windows(p, at, group.resource_upgrade_windows.as_deref().unwrap_or_default());
    Some(CompiledGroup {
        name: group.name.clone(),
        selectors: group.selectors.clone(),
        limit: limit?,
        budget: budget?,
        deadline: deadline?,
        health_timeout: health_timeout?,
        soak: soak?,
        requires_approval: requires_approval(group),
        windows: windows?,
    })
}

fn selectors(p: &mut Problems, at: &str, sel: &RolloutSelectors) {
    let others = sel.match_labels.is_some() || sel.match_expressions.is_some();
    if sel.match_all == Some(true) && others {
        p.add(
            format!("{at}.selectors.matchAll"),
            "cannot be combined with matchLabels or matchExpressions".into(),
        );
    }
    for (ei, r) in sel.match_expressions.iter().flatten().enumerate() {
        let values = r.values.as_deref().unwrap_or_default();
        let field = format!("{at}.selectors.matchExpressions[{ei}]");
        if r.key.is_empty() {
            p.add(format!("{field}.key"), "must not be empty".into());
        }
        match r.operator {
            SelectorOperator::In | SelectorOperator::NotIn if values.is_empty() => p.add(
                format!("{field}.values"),
                format!("must not be empty for operator {:?}", r.operator),
            ),
            SelectorOperator::Exists | SelectorOperator::DoesNotExist if !values.is_empty() => p.add(
                format!("{field}.values"),
                format!("must be omitted for operator {:?}", r.operator),
            ),
            _ => {}
        }
    }
}

/// A group's windows; each field is checked on its own so that every problem of a window is
/// reported.
fn windows(p: &mut Problems, at: &str, windows: &[UpgradeWindow]) -> Option<Windows> {
    let mut compiled = Some(Vec::new());
    for (wi, w) in windows.iter().enumerate() {
        let field = format!("{at}.resourceUpgradeWindows[{wi}]");
        let schedule = p.take(format!("{field}.schedule"), w.schedule.parse::<CronSchedule>());
        let duration = p.take(format!("{field}.duration"), parse_go_duration(&w.duration));
        let zone = p.take(format!("{field}.timeZone"), parse_zone(w.time_zone.as_deref()));
        compiled = match (compiled, schedule, duration, zone) {
            (Some(mut all), Some(schedule), Some(duration), Some(zone)) => {
                all.push(Window {
                    kind: w.kind,
                    schedule,
                    zone,
                    duration,
                });
                Some(all)
            }
            _ => None,
        };
    }
    compiled.map(Windows::of_windows)
}

/// `spec.gates` (spec §13.3).
fn signal_gates(p: &mut Problems, spec: &UpgradePlanSpec) -> Vec<Option<SignalGate>> {
    let mut names = BTreeSet::new();
    let mut gates = Vec::new();
    for (i, g) in spec.gates.iter().flatten().enumerate() {
        let at = format!("spec.gates[{i}]");
        if !super::naming::is_dns_label(&g.name) {
            p.add(
                format!("{at}.name"),
                format!("{:?} must be a DNS label: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", g.name),
            );
        } else if !names.insert(g.name.as_str()) {
            p.add(
                format!("{at}.name"),
                format!("{:?} names an earlier gate too; names must be unique", g.name),
            );
        }
        if g.prometheus.query.trim().is_empty() {
            p.add(format!("{at}.prometheus.query"), "must be a PromQL query".into());
        }
        for (j, group) in g.groups.iter().flatten().enumerate() {
            if !spec.rollout_groups.iter().any(|rg| &rg.name == group) {
                p.add(
                    format!("{at}.groups[{j}]"),
                    format!("{group:?} is not a rollout group of this plan"),
                );
            }
        }
        let fail_after = p.duration(format!("{at}.failAfter"), g.fail_after.as_deref());
        gates.push(fail_after.map(|fail_after| SignalGate {
            spec: g.clone(),
            fail_after,
        }));
    }
    gates
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{HealthCheck, PromiseRef, WindowKind};
    use chrono::Duration;
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn plan() -> UpgradePlanSpec {
        UpgradePlanSpec {
            promise_ref: PromiseRef { name: "redis".into() },
            upgrade_path: UpgradePath {
                from: vec!["v1".into()],
                to: "v2".into(),
            },
            rollout_groups: vec![RolloutGroup {
                name: "dev".into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    fn fields(spec: &UpgradePlanSpec) -> Vec<String> {
        compile(spec)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.field)
            .collect()
    }

    #[test]
    fn a_group_compiles_to_typed_values_with_the_defaults_of_omitted_fields() {
        let c = compile(&plan()).unwrap();
        let g = &c.groups[0];
        assert_eq!((g.limit, g.budget), (Limit::Unlimited, FailureBudget::NONE));
        assert_eq!((&g.deadline, &g.health_timeout, &g.soak), (&None, &None, &None));
        assert!(!g.requires_approval && g.windows.windows().is_empty());
        assert!(c.triggers.is_none() && c.gates.is_empty() && !c.checks_health());

        let mut spec = plan();
        let g = &mut spec.rollout_groups[0];
        g.max_concurrent = Some(IntOrString::String("50%".into()));
        g.max_failures = Some(IntOrString::Int(2));
        g.progress_deadline = Some("30m".into());
        g.health_check = Some(HealthCheck { timeout: "5m".into() });
        g.soak_duration = Some("1h".into());
        g.require_approval = Some(true);
        g.resource_upgrade_windows = Some(vec![UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 22 * * 6".into(),
            duration: "4h".into(),
            time_zone: Some("Europe/London".into()),
        }]);
        let c = compile(&spec).unwrap();
        let g = c.group("dev").unwrap();
        assert_eq!((g.limit, g.budget), (Limit::Percent(50), FailureBudget::Count(2)));
        let written = |d: &Option<WrittenDuration>| d.as_ref().map(|d| (d.value, d.written.clone()));
        assert_eq!(written(&g.deadline), Some((Duration::minutes(30), "30m".into())));
        assert_eq!(written(&g.health_timeout), Some((Duration::minutes(5), "5m".into())));
        assert_eq!(written(&g.soak), Some((Duration::hours(1), "1h".into())));
        assert!(g.requires_approval && c.checks_health());
        assert_eq!(g.windows.windows().len(), 1);
    }

    #[test]
    fn every_field_that_does_not_parse_is_reported_and_nothing_compiles() {
        type Break = fn(&mut UpgradePlanSpec);
        let table: &[(&str, Break)] = &[
            ("spec.promiseRef.name", |s| s.promise_ref.name = " ".into()),
            ("spec.upgradePath.from[0]", |s| s.upgrade_path.from = vec!["/(/".into()]),
            ("spec.upgradePath.to", |s| s.upgrade_path.to = "latest".into()),
            ("spec.rolloutGroups", |s| s.rollout_groups.clear()),
            ("spec.rolloutGroups[0].maxConcurrent", |s| {
                s.rollout_groups[0].max_concurrent = Some(IntOrString::String("lots".into()))
            }),
            ("spec.rolloutGroups[0].maxFailures", |s| {
                s.rollout_groups[0].max_failures = Some(IntOrString::Int(-1))
            }),
            ("spec.rolloutGroups[0].progressDeadline", |s| {
                s.rollout_groups[0].progress_deadline = Some("0s".into())
            }),
            ("spec.rolloutGroups[0].healthCheck.timeout", |s| {
                s.rollout_groups[0].health_check = Some(HealthCheck { timeout: "soon".into() })
            }),
            ("spec.rolloutGroups[0].soakDuration", |s| {
                s.rollout_groups[0].soak_duration = Some("1d".into())
            }),
            ("spec.rolloutGroups[0].resourceUpgradeWindows[0].timeZone", |s| {
                s.rollout_groups[0].resource_upgrade_windows = Some(vec![UpgradeWindow {
                    kind: WindowKind::Allow,
                    schedule: "0 22 * * 6".into(),
                    duration: "4h".into(),
                    time_zone: Some("Mars/Olympus".into()),
                }])
            }),
            ("spec.upgradeExecutionPolicy.startingDeadline", |s| {
                s.upgrade_execution_policy = Some(UpgradeExecutionPolicy {
                    repeat_schedule: Some("0 1 * * *".into()),
                    starting_deadline: Some("never".into()),
                    ..Default::default()
                })
            }),
            ("spec.gates[0].failAfter", |s| {
                s.gates = Some(vec![GateSpec {
                    name: "alerts".into(),
                    prometheus: crate::api::PrometheusGate { query: "up".into() },
                    groups: None,
                    fail_after: Some("1 hour".into()),
                }])
            }),
        ];
        for (field, break_it) in table {
            let mut spec = plan();
            break_it(&mut spec);
            assert_eq!(fields(&spec), vec![field.to_string()], "{field}");
        }
    }

    #[test]
    fn problems_in_several_fields_are_all_reported() {
        let mut spec = plan();
        spec.rollout_groups[0].max_concurrent = Some(IntOrString::Int(0));
        spec.rollout_groups[0].soak_duration = Some("x".into());
        spec.upgrade_path.to = "/v2/".into();
        assert_eq!(
            fields(&spec),
            [
                "spec.upgradePath.to",
                "spec.rolloutGroups[0].maxConcurrent",
                "spec.rolloutGroups[0].soakDuration"
            ]
        );
    }

    #[test]
    fn signal_gates_keep_their_fail_after() {
        let mut spec = plan();
        spec.gates = Some(vec![GateSpec {
            name: "alerts".into(),
            prometheus: crate::api::PrometheusGate { query: "up".into() },
            groups: Some(vec!["dev".into()]),
            fail_after: Some("10m".into()),
        }]);
        let c = compile(&spec).unwrap();
        assert_eq!(
            c.gates[0].fail_after.as_ref().map(|d| d.value),
            Some(Duration::minutes(10))
        );
        assert!(c.gates[0].applies("dev") && !c.gates[0].applies("prod"));
    }
}
