//! `kubectl upgradeplan freezes`: the UpgradeFreezes, evaluated by the engine the controller uses
//! (not read from their status, which a sharded controller leaves alone): whether each holds now,
//! its next stretches of frozen time, which plans it holds, and every problem.

use chrono::{DateTime, Utc};
use serde::Serialize;
use upgradeplan::api::{UpgradeFreeze, UpgradePlan};
use upgradeplan::engine::freeze::{self, Freeze};
use upgradeplan::engine::Problem;

use crate::output::Style;

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct FreezeJson {
    pub name: String,
    pub reason: String,
    /// Whether it can be evaluated; one that cannot holds nothing.
    pub valid: bool,
    pub problems: Vec<Problem>,
    pub active: bool,
    pub next_start: Option<DateTime<Utc>>,
    pub next_end: Option<DateTime<Utc>>,
    /// The zone of its first period.
    pub time_zone: String,
    /// The plans it holds; absent when the plans were not read (-f).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans: Option<Vec<String>>,
    /// Its next stretches of frozen time (the first starts now while it is active).
    pub periods: Vec<PeriodJson>,
}

#[derive(Serialize, Debug)]
pub struct PeriodJson {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// The view of `freezes` at `now`. `plans`: every plan, when read, to say which each holds.
/// `detail`: also list the plans held and the next `periods` stretches of each.
/// `freezes`: each with the unknown fields of its manifest (read from a file), which make it
/// invalid as the API server would refuse it.
pub fn freezes(
    freezes: &[(UpgradeFreeze, Vec<Problem>)],
    plans: Option<&[UpgradePlan]>,
    now: DateTime<Utc>,
    periods: usize,
    detail: bool,
    style: &Style,
) -> (Vec<FreezeJson>, String) {
    let mut sorted: Vec<&(UpgradeFreeze, Vec<Problem>)> = freezes.iter().collect();
    sorted.sort_by_key(|(f, _)| f.metadata.name.clone());
    let json: Vec<FreezeJson> = sorted
        .iter()
        .map(|(f, unknown)| evaluate(f, unknown, plans, now, periods))
        .collect();
    let mut out = String::new();
    if json.is_empty() {
        out.push_str("No UpgradeFreezes: nothing holds the plans beyond their own windows.\n");
        return (json, out);
    }
    let rows: Vec<Vec<String>> = json
        .iter()
        .map(|f| {
            let zone = f.time_zone.parse::<chrono_tz::Tz>().ok();
            let at = |t: Option<DateTime<Utc>>| t.map_or_else(|| "-".to_string(), |t| style.time(t, zone));
            let active = if !f.valid {
                style.state("invalid")
            } else if f.active {
                "yes".to_string()
            } else {
                "no".to_string()
            };
            vec![
                f.name.clone(),
                active,
                at(f.next_start),
                at(f.next_end),
                f.plans
                    .as_ref()
                    .map_or_else(|| "-".to_string(), |p| p.len().to_string()),
                f.reason.clone(),
            ]
        })
        .collect();
    out.push_str(&crate::output::table(
        style,
        &["NAME", "ACTIVE", "NEXT START", "NEXT END", "PLANS", "REASON"],
        &rows,
    ));
    let invalid: Vec<&FreezeJson> = json.iter().filter(|f| !f.valid).collect();
    if !invalid.is_empty() {
        out.push('\n');
        out.push_str(&style.bold("Problems (these freezes hold nothing until fixed):"));
        out.push('\n');
        for f in invalid {
            for p in &f.problems {
                out.push_str(&format!("  {}: {}: {}\n", f.name, p.field, p.message));
            }
        }
    }
    if detail {
        for f in json.iter().filter(|f| f.valid) {
            let zone = f.time_zone.parse::<chrono_tz::Tz>().ok();
            out.push('\n');
            out.push_str(&format!("{} — {}\n", style.bold(&f.name), f.reason));
            if let Some(plans) = &f.plans {
                let held = if plans.is_empty() {
                    "no plan".to_string()
                } else {
                    plans.join(", ")
                };
                out.push_str(&format!("  holds:   {held}\n"));
            }
            if f.periods.is_empty() {
                out.push_str("  periods: none to come\n");
            }
            for (i, p) in f.periods.iter().enumerate() {
                let label = if i == 0 { "periods:" } else { "" };
                let now_mark = if f.active && i == 0 { " (now)" } else { "" };
                out.push_str(&format!(
                    "  {label:<8} {}{now_mark}\n",
                    style.span(p.start, p.end, zone)
                ));
            }
        }
    }
    (json, out)
}

fn evaluate(
    f: &UpgradeFreeze,
    unknown: &[Problem],
    plans: Option<&[UpgradePlan]>,
    now: DateTime<Utc>,
    periods: usize,
) -> FreezeJson {
    let name = f.metadata.name.clone().unwrap_or_default();
    let held = plans.map(|plans| {
        let mut names: Vec<String> = plans
            .iter()
            .filter(|p| freeze::holds_plan(&f.spec, p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        names
    });
    let first_zone = f
        .spec
        .periods
        .first()
        .and_then(|p| p.time_zone.clone())
        .unwrap_or_else(|| "UTC".into());
    let compiled = match Freeze::compile(&name, &f.spec) {
        Ok(c) if unknown.is_empty() => Ok(c),
        Ok(_) => Err(unknown.to_vec()),
        Err(problems) => Err(unknown.iter().cloned().chain(problems).collect()),
    };
    match compiled {
        Ok(compiled) => {
            let state = compiled.state(now);
            FreezeJson {
                name,
                reason: f.spec.reason.clone(),
                valid: true,
                problems: Vec::new(),
                active: state.active,
                next_start: state.next_start,
                next_end: state.next_end,
                time_zone: compiled.zone.name().to_string(),
                plans: held,
                periods: compiled
                    .stretches_from(now, periods)
                    .into_iter()
                    .map(|(start, end)| PeriodJson { start, end })
                    .collect(),
            }
        }
        Err(problems) => FreezeJson {
            name,
            reason: f.spec.reason.clone(),
            valid: false,
            problems,
            active: false,
            next_start: None,
            next_end: None,
            time_zone: first_zone,
            plans: held,
            periods: Vec::new(),
        },
    }
}
