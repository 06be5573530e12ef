//! `kubectl upgradeplan forecast`: the plan's next run simulated by the engine
//! ([`upgradeplan::engine::forecast`], which runs the controller's own run transition), with every
//! assumption stated.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::UpgradePlan;
use upgradeplan::engine::forecast::{forecast, quantile, ForecastInput, GroupForecast, Wait};
use upgradeplan::engine::freeze::Freeze;
use upgradeplan::engine::run::Blocked;

use crate::output::{duration, Style};

/// Without a measurement or `--per-resource`, each upgrade is taken to last this long.
pub const DEFAULT_PER_RESOURCE: Duration = Duration::minutes(1);

/// Where the per-resource duration comes from.
#[derive(Debug, Clone)]
pub enum PerResource {
    Given(Duration),
    /// Durations measured in the plan's recent runs (sorted), and how many runs they came from.
    Measured {
        durations: Vec<Duration>,
        runs: usize,
    },
    Default,
}

impl PerResource {
    /// The duration the forecast uses, and the words that say where it comes from.
    fn chosen(&self) -> (Duration, String) {
        match self {
            PerResource::Given(d) => (*d, "given with --per-resource".to_string()),
            PerResource::Measured { durations, runs } => match (quantile(durations, 0.5), quantile(durations, 0.9)) {
                (Some(median), Some(p90)) => (
                    median,
                    format!(
                        "the median of {} upgrades measured in the plan's last {runs} run(s) (p90 {})",
                        durations.len(),
                        duration(p90)
                    ),
                ),
                _ => PerResource::Default.chosen(),
            },
            PerResource::Default => (
                DEFAULT_PER_RESOURCE,
                "1 minute: nothing measured (no earlier upgrade of this plan) and no --per-resource".to_string(),
            ),
        }
    }
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct AssumptionsJson {
    pub per_resource_seconds: i64,
    /// Where the per-resource duration comes from.
    pub per_resource: String,
    /// Where the start comes from.
    pub start: String,
    /// Which UpgradeFreezes the forecast holds the run by.
    pub freezes: String,
    /// Which UpgradeBudgets pace the run; other plans' runs are assumed absent.
    pub budgets: String,
    pub approvals: &'static str,
    pub gates: &'static str,
    pub health_checks: &'static str,
    pub failures: String,
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct GroupJson {
    pub name: String,
    pub resources: usize,
    /// The limit resolved against the group's size.
    pub max_concurrent: Option<usize>,
    pub start: Option<DateTime<Utc>>,
    pub finish: Option<DateTime<Utc>>,
    pub waits: Vec<Wait>,
}

/// `forecast -o json` (spec §13.6).
#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct ForecastJson {
    pub plan: String,
    /// A revert's forecast: the run it undoes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_of: Option<String>,
    pub start: DateTime<Utc>,
    pub assumptions: AssumptionsJson,
    pub groups: Vec<GroupJson>,
    pub finish: Option<DateTime<Utc>>,
    pub warnings: Vec<String>,
}

/// When the forecast run starts: `--start`, else the plan's next trigger after `now`, else `now`
/// (a manual run); with the words that say which, and the trigger after that start.
pub fn start_of(
    plan: &UpgradePlan,
    start: Option<&crate::cli::StartTime>,
    now: DateTime<Utc>,
) -> anyhow::Result<(DateTime<Utc>, String, Option<DateTime<Utc>>)> {
    use crate::cli::StartTime;
    let zone_name = plan
        .spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(|p| p.time_zone.clone());
    // A local --start reads as the plan's executeAt does: its zone, the same daylight-saving rules.
    let start = match start {
        None => None,
        Some(StartTime::Instant(t)) => Some((*t, "given with --start".to_string())),
        Some(StartTime::Local(local)) => {
            let zone = upgradeplan::engine::cron::parse_zone(zone_name.as_deref())
                .map_err(|e| anyhow::anyhow!("--start {local}: the plan's timeZone: {e}"))?;
            let at = upgradeplan::engine::cron::resolve_local_time(local, zone)
                .map_err(|e| anyhow::anyhow!("--start: {e}"))?;
            Some((at, format!("given with --start, {local} in {zone}")))
        }
    };
    let triggers = plan
        .spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(|p| upgradeplan::engine::compile::triggers(p).ok());
    let created = plan
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| upgradeplan::time::to_chrono(&t.0))
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let next = |after: DateTime<Utc>| triggers.as_ref().and_then(|t| t.next_after(after, created));
    let (at, words) = match (start, next(now)) {
        (Some(given), _) => given,
        (None, Some(t)) if !plan.spec.suspend => (t, "the plan's next trigger".to_string()),
        (None, _) => (now, "now, as a manual run".to_string()),
    };
    Ok((at, words, next(at)))
}

/// A revert to forecast (spec §13.7): the run it undoes and its snapshot, derived as the
/// controller derives it (the plan given to [`render`] is then the revert's frozen plan).
#[derive(Debug, Clone, Copy)]
pub struct RevertOf<'a> {
    pub run: &'a str,
    pub snapshot: &'a upgradeplan::engine::snapshot::Snapshot,
}

/// The forecast of `plan`'s next run over `bindings` and the Promise's `revisions` (when known; or
/// of the revert `revert`), held by
/// `freezes` (and where they come from) and paced by `budgets`.
pub fn render(
    plan: &UpgradePlan,
    (bindings, revisions, retry): (
        &[ResourceBinding],
        Option<&[upgradeplan::api::kratix::RevisionFact]>,
        &upgradeplan::engine::retry::RetryInterval,
    ),
    revert: Option<RevertOf<'_>>,
    (freezes, freezes_from, budgets): (&[Freeze], &str, &[crate::explain::BudgetCapJson]),
    (start, start_words, next_trigger): (DateTime<Utc>, String, Option<DateTime<Utc>>),
    per_resource: &PerResource,
    style: &Style,
) -> anyhow::Result<(ForecastJson, String)> {
    let compiled = crate::explain::compiled(plan)?;
    let (each, each_words) = per_resource.chosen();
    // Alone under its budgets: other plans' runs are assumed absent (stated below).
    let budget_facts: Vec<upgradeplan::engine::upgrade_budget::BudgetFacts> = budgets
        .iter()
        .map(|b| upgradeplan::engine::upgrade_budget::BudgetFacts {
            name: b.name.clone(),
            max: b.max_in_flight,
            others: Vec::new(),
            sent: 0,
        })
        .collect();
    let f = forecast(&ForecastInput {
        plan: &compiled,
        bindings,
        snapshot: revert.map(|r| r.snapshot),
        revisions,
        freezes,
        budgets: &budget_facts,
        start,
        per_resource: each,
        next_trigger,
    });
    let zone = plan
        .spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(|p| upgradeplan::engine::cron::parse_zone(p.time_zone.as_deref()).ok());
    let groups: Vec<GroupJson> = f
        .groups
        .iter()
        .map(|g: &GroupForecast| GroupJson {
            name: g.name.clone(),
            resources: g.resources,
            max_concurrent: compiled.group(&g.name).map(|pg| pg.limit.resolve(g.resources)),
            start: g.start,
            finish: g.finish,
            waits: g.waits.clone(),
        })
        .collect();
    let json = ForecastJson {
        plan: plan.metadata.name.clone().unwrap_or_default(),
        revert_of: revert.map(|r| r.run.to_string()),
        start,
        assumptions: AssumptionsJson {
            per_resource_seconds: each.num_seconds(),
            per_resource: each_words.clone(),
            start: start_words.clone(),
            freezes: freezes_from.to_string(),
            budgets: if budgets.is_empty() {
                "none caps the plan".to_string()
            } else {
                format!(
                    "{}; other plans' runs under them assumed absent",
                    crate::explain::budget_words(budgets)
                )
            },
            approvals: "granted when the group is reached",
            gates: "open",
            health_checks: "pass as soon as the upgrade succeeds",
            failures: format!(
                "none: every upgrade succeeds (a failure would stand; Kratix retries one by itself after {retry}, \
                 which no run waits for)"
            ),
        },
        groups,
        finish: f.finish,
        warnings: f.warnings.clone(),
    };

    let at = |t: Option<DateTime<Utc>>| t.map_or_else(|| "-".to_string(), |t| style.time(t, zone));
    let mut out = String::new();
    let what = match revert {
        Some(r) => format!("the revert of UpgradeRun {} (plan {})", style.bold(r.run), json.plan),
        None => format!("UpgradePlan {} — a run", style.bold(&json.plan)),
    };
    out.push_str(&format!(
        "Forecast of {what} starting {} ({start_words})\n",
        style.time(start, zone)
    ));
    // Said only when a budget caps the plan: the forecasts of uncapped plans read as before.
    let budget_assumption = match budgets.is_empty() {
        true => String::new(),
        false => format!("; budgets: {}", json.assumptions.budgets),
    };
    out.push_str(&format!(
        "Assumes: each upgrade takes {} ({each_words}); freezes: {freezes_from}{budget_assumption}; approvals granted when reached; signal gates open; health checks pass at once; no failures; Kratix retries a failure by itself after {retry}.\n\n",
        duration(each)
    ));
    let rows: Vec<Vec<String>> = json
        .groups
        .iter()
        .map(|g| {
            let waits = if g.waits.is_empty() {
                "-".to_string()
            } else {
                g.waits
                    .iter()
                    .map(|w| format!("{} {}", wait_words(w.reason), style.span(w.from, w.to, zone)))
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            let (start, finish) = match (g.start, g.finish) {
                (Some(s), Some(f)) => style.span_ends(s, f, zone),
                (s, f) => (at(s), at(f)),
            };
            vec![
                g.name.clone(),
                g.resources.to_string(),
                g.max_concurrent.map_or_else(|| "-".to_string(), |n| n.to_string()),
                start,
                finish,
                waits,
            ]
        })
        .collect();
    out.push_str(&crate::output::table(
        style,
        &["GROUP", "RESOURCES", "AT A TIME", "START", "FINISH", "WAITS"],
        &rows,
    ));
    out.push('\n');
    match json.finish {
        Some(end) => out.push_str(&format!(
            "{} {} ({} after the start)\n",
            style.bold("Finish:"),
            style.span_ends(start, end, zone).1,
            duration(end - start)
        )),
        None => out.push_str(&format!("{} not within the search horizon\n", style.bold("Finish:"))),
    }
    if !json.warnings.is_empty() {
        out.push_str(&style.bold(&format!("Warnings ({}):", json.warnings.len())));
        out.push('\n');
        for w in &json.warnings {
            out.push_str(&format!("  {w}\n"));
        }
    }
    Ok((json, out))
}

fn wait_words(reason: Blocked) -> &'static str {
    match reason {
        Blocked::WindowClosed => "window closed",
        Blocked::Frozen => "frozen",
        Blocked::Soaking => "soak",
        _ => "waits",
    }
}
