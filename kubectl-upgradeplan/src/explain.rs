//! `explain`: a plan in plain words. Everything is computed by the engine.

use chrono::{DateTime, Offset, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, UpgradePlan, UpgradePlanSpec, WindowKind};
use upgradeplan::engine::compile;
use upgradeplan::engine::concurrency::Limit;
use upgradeplan::engine::cron::CronSchedule;
use upgradeplan::engine::freeze::{hold_at, Freeze};
use upgradeplan::engine::gate::{self, Reading};
use upgradeplan::engine::selector;
use upgradeplan::engine::snapshot::assign;
use upgradeplan::engine::validate::{validate_plan, Problem};
use upgradeplan::engine::version::is_regex_pattern;
use upgradeplan::engine::window::WindowState;
use upgradeplan::prometheus::PrometheusClient;

use crate::output::Style;

/// The plan compiled, for the views that run it as the controller would (`match`, `forecast`);
/// an invalid plan runs nothing, so they refuse it, naming its problems.
pub fn compiled(plan: &UpgradePlan) -> anyhow::Result<compile::CompiledPlan> {
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    compile::compile(&plan.spec).map_err(|problems| {
        anyhow::anyhow!(
            "UpgradePlan {name:?} is invalid, so no run of it would start: {}; `kubectl upgradeplan explain {name}` says more",
            upgradeplan::engine::validate::summarize(&problems)
        )
    })
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WindowJson {
    pub open: bool,
    pub next_open: Option<DateTime<Utc>>,
    pub next_close: Option<DateTime<Utc>>,
}

#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GroupJson {
    pub name: String,
    pub window: WindowJson,
    pub selector: String,
    /// Resolved against current membership when bindings are known; else the limit as written.
    pub max_concurrent: Option<usize>,
    /// Failed resources the group tolerates (resolved as maxConcurrent is); absent without a budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_deadline: Option<String>,
    /// `healthCheck.timeout`; absent without a health check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_check_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak_duration: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub require_approval: bool,
    /// `onFailure: Revert`: a run failing in the group creates its revert.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub revert_on_failure: bool,
}

/// The `-o json` contract of `explain` (spec §10), with a few additions.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExplainJson {
    pub plan: String,
    pub valid: bool,
    pub problems: Vec<Problem>,
    /// Allowed but probably not meant; problems under `--strict`.
    pub warnings: Vec<Problem>,
    pub next_runs: Vec<DateTime<Utc>>,
    pub groups: Vec<GroupJson>,
    pub promise: String,
    pub from: Vec<String>,
    pub to: String,
    /// The signal gates; absent without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateJson>,
    /// The UpgradeFreezes that hold the plan; absent without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub freezes: Vec<FreezeJson>,
    /// The UpgradeBudgets that cap the plan; absent without any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetCapJson>,
}

/// An UpgradeBudget that caps a plan (spec §13.8), as `explain` and `match` name it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BudgetCapJson {
    pub name: String,
    pub max_in_flight: usize,
}

/// The budgets among `budgets` that select `plan`, by name.
pub fn budget_caps(
    budgets: &[std::sync::Arc<upgradeplan::api::UpgradeBudget>],
    plan: &UpgradePlan,
) -> Vec<BudgetCapJson> {
    let labels = plan.metadata.labels.clone().unwrap_or_default();
    upgradeplan::engine::upgrade_budget::selecting(budgets, &plan.spec.promise_ref.name, &labels)
        .into_iter()
        .map(|b| BudgetCapJson {
            name: b.metadata.name.clone().unwrap_or_default(),
            max_in_flight: upgradeplan::engine::upgrade_budget::max_in_flight(b),
        })
        .collect()
}

/// The words naming the budgets that cap a plan: `UpgradeBudget "saturday" (at most 200 in flight)`.
pub fn budget_words(budgets: &[BudgetCapJson]) -> String {
    budgets
        .iter()
        .map(|b| format!("UpgradeBudget \"{}\" (at most {} in flight)", b.name, b.max_in_flight))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A freeze holding the plan, as `explain -o json` shows it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FreezeJson {
    pub name: String,
    pub reason: String,
    pub active: bool,
    pub next_start: Option<DateTime<Utc>>,
    pub next_end: Option<DateTime<Utc>>,
}

/// A signal gate as `explain -o json` shows it.
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GateJson {
    pub name: String,
    pub query: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail_after: Option<String>,
    /// Whether it is open now; absent when not evaluated (no --prometheus-url).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open: Option<bool>,
    /// Why it is closed, as the run's Gated condition would say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// Whether the UTC offset of `zone` changes during the local day of `t`.
fn daylight_saving_day(t: DateTime<Utc>, zone: Tz) -> bool {
    let day = t.with_timezone(&zone).date_naive();
    // The offset in force at the first instant of a local day (midnight, or just after a gap).
    let start_offset = |d: chrono::NaiveDate| {
        (0..24 * 60)
            .filter_map(|m| {
                zone.from_local_datetime(&(d.and_hms_opt(0, 0, 0).unwrap_or_default() + chrono::Duration::minutes(m)))
                    .earliest()
            })
            .map(|x| x.offset().fix())
            .next()
    };
    start_offset(day) != day.succ_opt().and_then(start_offset)
}

/// " — on day 13 of the month or on Fridays" when both day fields of a schedule are restricted,
/// so nobody expects Vixie cron's AND.
fn either_day_note(schedule: &str) -> String {
    schedule
        .parse::<CronSchedule>()
        .ok()
        .and_then(|c| c.either_day_words())
        .map(|w| format!(" — {w}"))
        .unwrap_or_default()
}

fn local(t: DateTime<Utc>, zone: Tz) -> String {
    t.with_timezone(&zone).format("%Y-%m-%d %H:%M %Z").to_string()
}

fn gate_words(
    style: &Style,
    s: &WindowState,
    windows: &[upgradeplan::api::UpgradeWindow],
    freezes: &[Freeze],
    now: DateTime<Utc>,
) -> String {
    if windows.is_empty() && freezes.is_empty() {
        return format!("{} (no windows)", style.state("open"));
    }
    let zone = crate::output::windows_zone(windows);
    let at = |t: Option<DateTime<Utc>>| {
        t.map(|t| style.time(t, zone))
            .unwrap_or_else(|| "not within 400 days".to_string())
    };
    if let Some(hold) = hold_at(freezes, now) {
        // Without windows the gate stays open once the freezes let go.
        let then = match (s.next_open, s.next_close) {
            (Some(open), None) if windows.is_empty() => format!("opens {}", at(Some(open))),
            (open, close) => format!("opens {}, closes {}", at(open), at(close)),
        };
        return format!(
            "{} now, {}; {then}",
            style.state("closed"),
            crate::output::frozen_words(style, &hold),
        );
    }
    if s.open {
        format!(
            "{} now; closes {}, opens again {}",
            style.state("open"),
            at(s.next_close),
            at(s.next_open)
        )
    } else {
        format!(
            "{} now; opens {}, closes {}",
            style.state("closed"),
            at(s.next_open),
            at(s.next_close)
        )
    }
}

/// What `explain` knows beyond the plan, each when it could be read.
#[derive(Default)]
pub struct Found<'a> {
    /// The Promise's bindings, to resolve percentages against current membership.
    pub bindings: Option<&'a [ResourceBinding]>,
    /// The signal gates' readings now, when a Prometheus was given (`--prometheus-url`).
    pub gates: Option<&'a [Reading]>,
    /// The UpgradeFreezes holding the plan.
    pub freezes: &'a [Freeze],
    /// The UpgradeBudgets capping the plan.
    pub budgets: &'a [BudgetCapJson],
    /// The other plans it is checked against: the cluster's (live), or the files' (`-f`).
    pub plans: &'a [UpgradePlan],
    /// The Promise's PromiseRevisions, when the cluster could be asked.
    pub revisions: Option<&'a [upgradeplan::api::kratix::RevisionFact]>,
}

/// Explains `plan` as at `now`.
/// `unknown_fields`: fields of a plan file the API server would reject; problems like any other.
/// `(now, runs)`: the instant to explain at, and how many upcoming triggers to list.
pub fn explain(
    plan: &UpgradePlan,
    unknown_fields: &[upgradeplan::engine::Problem],
    found: &Found<'_>,
    (now, runs): (DateTime<Utc>, usize),
    viewer: Tz,
    style: &Style,
) -> (ExplainJson, String) {
    let f = findings(plan, unknown_fields, found, (now, runs));
    let spec = &plan.spec;
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    what_section(&mut line, &f, spec, style);
    when_section(&mut line, &f, spec, viewer, style);
    keeps_section(&mut line, spec, style);
    let groups = groups_section(&mut line, &f, spec, found.freezes, now, style);
    let freezes = freezes_section(&mut line, found.freezes, now, style);
    if !found.budgets.is_empty() {
        line(String::new());
        line(style.bold("Budgets (UpgradeBudgets that cap this plan's upgrades in flight with other plans'):"));
        line(format!("  {}", budget_words(found.budgets)));
    }
    let gates = gates_section(&mut line, spec, found.gates, style);
    problems_section(&mut line, &f, style);
    let json = ExplainJson {
        plan: f.name,
        valid: f.problems.is_empty(),
        problems: f.problems,
        warnings: f.warnings,
        next_runs: f.next_runs,
        groups,
        promise: spec.promise_ref.name.clone(),
        from: spec.upgrade_path.from.clone(),
        to: spec.upgrade_path.to.clone(),
        gates,
        freezes,
        budgets: found.budgets.to_vec(),
    };
    (json, out)
}

/// What `explain` found about a plan before it says anything: its problems and warnings, its
/// next runs, and (with bindings) the resources each group takes.
struct Findings {
    name: String,
    problems: Vec<Problem>,
    warnings: Vec<Problem>,
    triggers: Option<upgradeplan::engine::schedule::Triggers>,
    next_runs: Vec<DateTime<Utc>>,
    membership: Option<upgradeplan::engine::snapshot::Snapshot>,
}

fn findings(
    plan: &UpgradePlan,
    unknown_fields: &[Problem],
    found: &Found<'_>,
    (now, runs): (DateTime<Utc>, usize),
) -> Findings {
    let Found {
        bindings,
        plans,
        revisions,
        ..
    } = *found;
    let name = plan.metadata.name.clone().unwrap_or_default();
    let spec = &plan.spec;
    let mut problems = unknown_fields.to_vec();
    problems.extend(validate_plan(&name, spec, now));
    let mut warnings = upgradeplan::engine::validate::plan_warnings(spec, now);
    // Live: what the controller found about the Promise.
    let promise = plan
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, reasons::PROMISE_RESOLVED))
        .filter(|c| c.status == ConditionStatus::False);
    if let Some(c) = promise {
        warnings.push(Problem {
            field: "spec.promiseRef.name".into(),
            message: c.message.clone(),
        });
    }
    if let Some(revisions) = revisions {
        warnings.extend(upgradeplan::engine::validate::revision_warnings(spec, revisions));
    }
    // Live: the controller cannot read the plan's gates (no Prometheus), so they hold its runs.
    let unreadable = plan
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, reasons::GATES_READABLE))
        .filter(|c| c.status == ConditionStatus::False);
    if let Some(c) = unreadable {
        warnings.push(Problem {
            field: "spec.gates".into(),
            message: c.message.trim_start_matches("spec.gates: ").to_string(),
        });
    }
    warnings.extend(upgradeplan::engine::validate::overlapping_plans(
        &name,
        spec,
        plans
            .iter()
            .map(|p| (p.metadata.name.as_deref().unwrap_or_default(), &p.spec)),
    ));
    let created = upgradeplan::time::created_at(&plan.metadata);
    // Each part as it compiles on its own, so that an invalid plan is still explained.
    let triggers = spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(|p| compile::triggers(p).ok());
    let compiled = compile::compile(spec).ok();
    let next_runs = match &triggers {
        Some(t) if !spec.suspend => t.upcoming(now, created, runs),
        _ => vec![],
    };
    let membership = match (bindings, &compiled) {
        (Some(b), Some(c)) => Some(assign(c, b).snapshot),
        _ => None,
    };
    if let (Some(snapshot), Some(c)) = (&membership, &compiled) {
        warnings.extend(upgradeplan::engine::snapshot::overlap_warnings(c, snapshot));
    }
    Findings {
        name,
        problems,
        warnings,
        triggers,
        next_runs,
        membership,
    }
}

/// The plan's verdict, Promise and versions.
fn what_section(line: &mut impl FnMut(String), f: &Findings, spec: &UpgradePlanSpec, style: &Style) {
    let Findings { name, problems, .. } = f;
    let verdict = if problems.is_empty() {
        style.state("valid")
    } else {
        style.state("invalid")
    };
    line(format!(
        "{} {} — Promise {} — {verdict}",
        style.bold("UpgradePlan"),
        style.bold(name),
        spec.promise_ref.name
    ));
    line(String::new());
    let froms: Vec<String> = spec
        .upgrade_path
        .from
        .iter()
        .map(|f| {
            if is_regex_pattern(f) {
                format!("any version matching {f} (whole version)")
            } else {
                f.clone()
            }
        })
        .collect();
    line(format!(
        "{} resources whose applied version is {}",
        style.bold("What:"),
        froms.join(", or ")
    ));
    line(format!("      move to {}", spec.upgrade_path.to));
    line(String::new());
}

/// When its runs are created, with the next triggers in the plan's zone and the viewer's.
fn when_section(line: &mut impl FnMut(String), f: &Findings, spec: &UpgradePlanSpec, viewer: Tz, style: &Style) {
    let Findings {
        triggers, next_runs, ..
    } = f;
    match (&spec.upgrade_execution_policy, &triggers) {
        (None, _) => line(format!(
            "{} only when an UpgradeRun is created (no upgradeExecutionPolicy)",
            style.bold("When:")
        )),
        (Some(p), _) => {
            let zone_name = p.time_zone.clone().unwrap_or_else(|| "UTC".into());
            let mut parts = vec![];
            if let Some(s) = &p.repeat_schedule {
                parts.push(format!("on the schedule \"{s}\"{}", either_day_note(s)));
            }
            if let Some(a) = &p.execute_at {
                parts.push(format!("once at {a}"));
            }
            line(format!("{} {} ({zone_name})", style.bold("When:"), parts.join(" and ")));
            if let Some(d) = &p.starting_deadline {
                line(format!(
                    "      a trigger found more than {d} late (an outage, a plan fixed later) is missed, not run"
                ));
            }
            if spec.suspend {
                line("      suspended: triggers are skipped until the plan is resumed".to_string());
            }
            if let (Some(t), false) = (&triggers, next_runs.is_empty()) {
                let zone = t.zone;
                let rows: Vec<Vec<String>> = next_runs
                    .iter()
                    .map(|r| {
                        let note = if daylight_saving_day(*r, zone) {
                            "daylight-saving change that day".to_string()
                        } else {
                            String::new()
                        };
                        vec![local(*r, zone), local(*r, viewer), note]
                    })
                    .collect();
                let header_plan = format!("NEXT ({zone_name})");
                let header_viewer = format!("YOUR ZONE ({viewer})");
                for l in crate::output::table(style, &[&header_plan, &header_viewer, "NOTE"], &rows).lines() {
                    line(format!("      {l}"));
                }
            } else if !spec.suspend && triggers.is_some() {
                line("      no future trigger".to_string());
            }
        }
    }
}

/// `runHistoryLimit`.
fn keeps_section(line: &mut impl FnMut(String), spec: &UpgradePlanSpec, style: &Style) {
    if let Some(limit) = &spec.run_history_limit {
        let keep = |n: Option<i32>, kind: &str| match n {
            Some(n) => format!("the newest {n} {kind} runs"),
            None => format!("every {kind} run"),
        };
        line(format!(
            "{} {} and {} (Failed, Cancelled, superseded); older ones are deleted with their snapshots",
            style.bold("Keeps:"),
            keep(limit.succeeded, "Completed"),
            keep(limit.failed, "failed")
        ));
    }
    line(String::new());
}

/// Each group: what it selects, its limits, rules and windows, and whether they are open now.
fn groups_section(
    line: &mut impl FnMut(String),
    f: &Findings,
    spec: &UpgradePlanSpec,
    freezes: &[Freeze],
    now: DateTime<Utc>,
    style: &Style,
) -> Vec<GroupJson> {
    line(style.bold("Groups, in order:"));
    // Kratix rewrites a binding's labels from its Resource Request whenever it reconciles it.
    line("  (selectors match a binding's labels, which Kratix copies from its Resource Request: label the".into());
    line("  request; a label set only on the ResourceBinding goes when Kratix next reconciles the request)".into());
    let size = |i: usize| {
        f.membership
            .as_ref()
            .and_then(|m| m.groups.get(i))
            .map(|g| g.resources.len())
    };
    (spec.rollout_groups.iter().enumerate())
        .map(|(i, g)| group_section(line, (i, g), size(i), freezes, now, style))
        .collect()
}

/// Group `i` of the plan, `size` its resources now (with bindings).
fn group_section(
    line: &mut impl FnMut(String),
    (i, g): (usize, &upgradeplan::api::RolloutGroup),
    size: Option<usize>,
    freezes: &[Freeze],
    now: DateTime<Utc>,
    style: &Style,
) -> GroupJson {
    let windows = g.resource_upgrade_windows.as_deref().unwrap_or_default();
    let group = compile::group(i, g);
    // What a field that does not compile says (the same text as under Problems).
    let invalid = |field: &str| {
        let at = format!("spec.rolloutGroups[{i}].{field}");
        let problems = group.as_ref().err().into_iter().flatten();
        let found = problems.filter(|p| p.field == at || p.field.starts_with(&format!("{at}[")));
        let messages: Vec<&str> = found.map(|p| p.message.as_str()).collect();
        (!messages.is_empty()).then(|| format!("invalid ({})", messages.join("; ")))
    };
    let group = group.as_ref().ok();
    let gated = group.map(|c| WindowState::of_group(&c.windows, freezes, now));
    let resolved = group.and_then(|c| c.limit.shown(size));
    let limit_words = match (group.map(|c| c.limit), size) {
        (None, _) => invalid("maxConcurrent").unwrap_or_else(|| "unknown: the group is invalid".into()),
        (Some(Limit::Unlimited), Some(n)) => format!("no limit (all {n} resources now)"),
        (Some(Limit::Unlimited), None) => "no limit".to_string(),
        (Some(Limit::Count(c)), Some(n)) => format!("{c} (of {n} resources now)"),
        (Some(Limit::Count(c)), None) => c.to_string(),
        (Some(l @ Limit::Percent(p)), Some(n)) => {
            format!("{p}% of the group: {} of {n} resources now", l.resolve(n))
        }
        (Some(Limit::Percent(p)), None) => format!("{p}% of the group (rounded down, at least 1)"),
    };
    line(format!("  {}. {}", i + 1, style.bold(&g.name)));
    line(format!(
        "     selects:     {}",
        selector::describe(g.selectors.as_ref())
    ));
    line(format!("     at a time:   {limit_words}"));
    // Failure budget and deadline (spec §13.1): shown only when set, so SKE plans read as before.
    if g.max_failures.is_some() {
        let words = match group {
            Some(c) => c.budget.describe(size),
            None => invalid("maxFailures").unwrap_or_else(|| "unknown: the group is invalid".into()),
        };
        line(format!("     failures:    {words}"));
    }
    if let Some(d) = &g.progress_deadline {
        line(format!(
            "     deadline:    a resource that takes longer than {d} counts as failed"
        ));
    }
    if let Some(h) = &g.health_check {
        line("     health:      an upgraded resource is verifying, and keeps its slot, until its Kratix".into());
        line(
            "                  HealthRecords say healthy or ready (the worst of them wins, as Kratix combines them);"
                .into(),
        );
        line(format!(
            "                  unhealthy, degraded or no report within {} fails it. Kratix's health checks run on",
            h.timeout
        ));
        line("                  their own schedule: the timeout must be longer than their period".into());
    }
    if compile::requires_approval(g) {
        line(format!(
            "     approval:    starts only when approved: kubectl upgradeplan approve RUN {}",
            g.name
        ));
    }
    if let Some(d) = &g.soak_duration {
        line(format!(
            "     after:       wait {d} before the next group starts (soak)"
        ));
    }
    let reverts = g.on_failure == Some(upgradeplan::api::OnFailure::Revert);
    if reverts {
        line("     on failure:  the run is reverted: <run>-revert moves what it upgraded or failed in this".into());
        line("                  group and the groups before it back to the versions they had, in reverse order".into());
    }
    for w in windows {
        let kind = match w.kind {
            WindowKind::Allow => "allow",
            WindowKind::Deny => "deny",
        };
        let zone = w.time_zone.clone().unwrap_or_else(|| "UTC".into());
        line(format!(
            "     window:      {kind} starts on \"{}\"{} for {} ({zone})",
            w.schedule,
            either_day_note(&w.schedule),
            w.duration
        ));
    }
    let gate_line = match &gated {
        Some((state, _)) => gate_words(style, state, windows, freezes, now),
        None if invalid("resourceUpgradeWindows").is_some() => {
            "cannot be evaluated: the windows are invalid (see Problems)".to_string()
        }
        None => "cannot be evaluated: the group is invalid (see Problems)".to_string(),
    };
    let state = gated.map_or(WindowState::INVALID, |(s, _)| s);
    line(format!("     gate:        {gate_line}"));
    GroupJson {
        name: g.name.clone(),
        window: WindowJson {
            open: state.open,
            next_open: state.next_open,
            next_close: state.next_close,
        },
        selector: selector::describe(g.selectors.as_ref()),
        max_concurrent: resolved,
        max_failures: group
            .filter(|_| g.max_failures.is_some())
            .and_then(|c| c.budget.shown(size)),
        progress_deadline: g.progress_deadline.clone(),
        health_check_timeout: g.health_check.as_ref().map(|h| h.timeout.clone()),
        soak_duration: g.soak_duration.clone(),
        require_approval: compile::requires_approval(g),
        revert_on_failure: reverts,
    }
}

/// The UpgradeFreezes that hold the plan, and when.
fn freezes_section(
    line: &mut impl FnMut(String),
    freezes: &[Freeze],
    now: DateTime<Utc>,
    style: &Style,
) -> Vec<FreezeJson> {
    let mut freeze_json = Vec::new();
    if !freezes.is_empty() {
        line(String::new());
        line(style.bold("Freezes (UpgradeFreezes that hold every group of this plan):"));
        for f in freezes {
            let state = f.state(now);
            let at = |t: DateTime<Utc>| style.time(t, Some(f.zone));
            let words = match (state.active, state.next_start, state.next_end) {
                (true, _, Some(end)) => format!("{} now, until {}", style.state("frozen"), at(end)),
                (true, _, None) => format!("{} now", style.state("frozen")),
                (false, Some(start), Some(end)) => format!("next from {} to {}", at(start), at(end)),
                _ => "no period to come".to_string(),
            };
            line(format!("  {}: {} — {words}", style.bold(&f.name), f.reason));
            freeze_json.push(FreezeJson {
                name: f.name.clone(),
                reason: f.reason.clone(),
                active: state.active,
                next_start: state.next_start,
                next_end: state.next_end,
            });
        }
    }
    freeze_json
}

/// The signal gates, with what each said when read (`--prometheus-url`).
fn gates_section(
    line: &mut impl FnMut(String),
    spec: &UpgradePlanSpec,
    gates: Option<&[Reading]>,
    style: &Style,
) -> Vec<GateJson> {
    let mut gate_json = Vec::new();
    if let Some(plan_gates) = spec.gates.as_deref().filter(|g| !g.is_empty()) {
        line(String::new());
        line(style.bold("Gates:").to_string());
        for (i, gate) in plan_gates.iter().enumerate() {
            let holds = match &gate.groups {
                None => "every group".to_string(),
                Some(g) => format!("group{} {}", if g.len() == 1 { "" } else { "s" }, g.join(", ")),
            };
            let fails = gate
                .fail_after
                .as_deref()
                .map(|d| format!("; fails the run after {d} closed"))
                .unwrap_or_default();
            line(format!(
                "  {}: holds {holds} while {}{fails}",
                style.bold(&gate.name),
                gate.prometheus.query
            ));
            let reading = gates.and_then(|r| r.get(i));
            let now_words = match reading {
                None => "not evaluated (pass --prometheus-url to evaluate it now)".to_string(),
                Some(Reading::Open) => format!("{} (the query returns nothing)", style.state("open")),
                Some(r) => format!(
                    "{} — {}",
                    style.state("closed"),
                    gate::closed_condition(&gate.name, r).1
                ),
            };
            line(format!("     now:         {now_words}"));
            gate_json.push(GateJson {
                name: gate.name.clone(),
                query: gate.prometheus.query.clone(),
                groups: gate.groups.clone(),
                fail_after: gate.fail_after.clone(),
                open: reading.map(Reading::is_open),
                detail: reading
                    .filter(|r| !r.is_open())
                    .map(|r| gate::closed_condition(&gate.name, r).1),
            });
        }
    }
    gate_json
}

/// Problems and warnings, each with its field.
fn problems_section(line: &mut impl FnMut(String), f: &Findings, style: &Style) {
    let Findings { problems, warnings, .. } = f;
    line(String::new());
    if problems.is_empty() {
        line(format!("{} none", style.bold("Problems:")));
    } else {
        line(style.bold(&format!("Problems ({}):", problems.len())));
        for p in problems {
            line(format!("  {}: {}", p.field, p.message));
        }
    }
    if !warnings.is_empty() {
        line(style.bold(&format!("Warnings ({}):", warnings.len())));
        for w in warnings {
            line(format!("  {}: {}", w.field, w.message));
        }
    }
}

/// Evaluates each gate of `plan` now against the Prometheus at `url` (plan order).
pub async fn read_gates(
    plan: &UpgradePlanSpec,
    url: &str,
    ca_file: Option<&std::path::Path>,
    token_file: Option<&std::path::Path>,
) -> anyhow::Result<Vec<Reading>> {
    let client = PrometheusClient::new(url, ca_file, token_file)?;
    let mut readings = Vec::new();
    for gate in plan.gates.iter().flatten() {
        readings.push(client.query(&gate.prometheus.query).await);
    }
    Ok(readings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn daylight_saving_days() {
        let utc = |s: &str| DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc);
        let london: Tz = "Europe/London".parse().unwrap();
        assert!(daylight_saving_day(utc("2026-03-29T01:00:00Z"), london));
        assert!(daylight_saving_day(utc("2026-10-25T00:30:00Z"), london));
        assert!(!daylight_saving_day(utc("2026-03-28T01:30:00Z"), london));
        assert!(!daylight_saving_day(utc("2026-03-29T01:00:00Z"), Tz::UTC));
    }

    #[test]
    fn the_budgets_that_cap_a_plan_are_named_with_their_max() {
        use upgradeplan::api::{PlanSelector, UpgradeBudget, UpgradeBudgetSpec, UpgradePlanSpec};
        let budget = |name: &str, max: i64, tier: Option<&str>, promises: Option<Vec<String>>| {
            std::sync::Arc::new(UpgradeBudget::new(
                name,
                UpgradeBudgetSpec {
                    max_in_flight: max,
                    plan_selector: tier.map(|t| PlanSelector {
                        match_labels: Some([("tier".to_string(), t.to_string())].into()),
                        match_expressions: None,
                    }),
                    promises,
                },
            ))
        };
        let mut plan = UpgradePlan::new("redis", UpgradePlanSpec::default());
        plan.spec.promise_ref.name = "redis".into();
        plan.metadata.labels = Some([("tier".to_string(), "cache".to_string())].into());
        let budgets = [
            budget("saturday", 200, None, None),
            budget("caches", 5, Some("cache"), None),
            budget("databases", 3, Some("db"), None),
            budget("postgres-only", 2, None, Some(vec!["postgres".into()])),
        ];
        let caps = budget_caps(&budgets, &plan);
        assert_eq!(
            budget_words(&caps),
            "UpgradeBudget \"caches\" (at most 5 in flight), UpgradeBudget \"saturday\" (at most 200 in flight)"
        );
    }
}
