//! `kubectl upgradeplan freezes`: the UpgradeFreezes, evaluated by the engine the controller uses
//! (not read from their status, which a sharded controller leaves alone): whether each holds now,
//! its next stretches of frozen time, which plans it holds, and every problem.

use chrono::{DateTime, Timelike, Utc};
use serde::Serialize;
use upgradeplan::api::{FreezePeriod, PlanSelector, UpgradeFreeze, UpgradeFreezeSpec, UpgradePlan};
use upgradeplan::engine::cron::{parse_zone, resolve_local_time};
use upgradeplan::engine::freeze::{self, Freeze};
use upgradeplan::engine::Problem;

use crate::cli::StartTime;

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

/// A stretch of time: (start, end).
pub type Span = (DateTime<Utc>, DateTime<Utc>);

/// What `freezes create` was asked for (see [`crate::cli::FreezeCreate`]).
#[derive(Debug, Default)]
pub struct Incident<'a> {
    pub reason: &'a str,
    pub from: Option<&'a StartTime>,
    pub until: Option<&'a StartTime>,
    pub for_: Option<std::time::Duration>,
    pub time_zone: Option<&'a str>,
    pub promises: &'a [String],
    pub selector: Option<&'a str>,
}

/// The spec of an incident freeze, as at `now`: one one-off period, written in the zone asked for
/// (UTC by default) to the minute — an instant's start rounded down and its end up, so the freeze
/// holds at least what was asked; a local time is written as given. Errors name the flag.
pub fn incident_spec(i: &Incident<'_>, now: DateTime<Utc>) -> Result<(UpgradeFreezeSpec, Span), String> {
    if i.reason.trim().is_empty() {
        return Err("--reason must say why upgrades are frozen (an incident or change number helps)".into());
    }
    let zone = parse_zone(i.time_zone).map_err(|e| format!("--time-zone: {e}"))?;
    let minute = |t: DateTime<Utc>| t.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap_or(t);
    // An edge as (the local time written, the instant it means).
    let edge = |flag: &str, t: &StartTime, round_up: bool| -> Result<(String, DateTime<Utc>), String> {
        match t {
            StartTime::Local(local) => resolve_local_time(local, zone)
                .map(|at| (local.clone(), at))
                .map_err(|e| format!("{flag} {local}: {e} in {zone}")),
            StartTime::Instant(at) => written(flag, *at, zone, round_up, minute),
        }
    };
    let (start_local, start) = match i.from {
        Some(t) => edge("--from", t, false)?,
        None => written("--from", now, zone, false, minute)?,
    };
    // `--for` counts from the instant asked for, not from the start rounded down.
    let asked_start = match i.from {
        Some(StartTime::Instant(at)) => *at,
        Some(StartTime::Local(_)) => start,
        None => now,
    };
    let (end_local, end) = match (i.until, i.for_) {
        (Some(t), None) => edge("--until", t, true)?,
        (None, Some(d)) => {
            let d = chrono::Duration::from_std(d).map_err(|e| format!("--for: {e}"))?;
            if d <= chrono::Duration::zero() {
                return Err("--for must be longer than zero: 30m, 2h".into());
            }
            written("--for", asked_start + d, zone, true, minute)?
        }
        _ => return Err("say how long: --for DURATION, or --until TIME".into()),
    };
    if end <= start {
        return Err(format!(
            "--until {end_local} must be after --from {start_local} ({zone})"
        ));
    }
    if end <= now {
        return Err(format!(
            "the freeze would have ended already ({end_local} {zone}): nothing to hold"
        ));
    }
    let plan_selector = match i.selector {
        None => None,
        Some(s) => Some(PlanSelector {
            match_labels: Some(label_equalities(s)?),
            match_expressions: None,
        }),
    };
    let spec = UpgradeFreezeSpec {
        reason: i.reason.to_string(),
        periods: vec![FreezePeriod {
            start: Some(start_local),
            end: Some(end_local),
            time_zone: Some(zone.name().to_string()),
            ..Default::default()
        }],
        plan_selector,
        promises: (!i.promises.is_empty()).then(|| i.promises.to_vec()),
    };
    // The controller's own evaluation: what it cannot evaluate is refused here.
    if let Some(p) = freeze::validate_freeze(&spec).first() {
        return Err(format!("{}: {}", p.field, p.message));
    }
    Ok((spec, (start, end)))
}

/// `t` written as a local time of `zone` to the minute (rounded up with `round_up`), with the
/// instant it reads back as; refused when the local time reads back as another instant (the
/// repeated hour when clocks go back).
fn written(
    flag: &str,
    t: DateTime<Utc>,
    zone: chrono_tz::Tz,
    round_up: bool,
    minute: impl Fn(DateTime<Utc>) -> DateTime<Utc>,
) -> Result<(String, DateTime<Utc>), String> {
    let at = match minute(t) {
        down if round_up && down < t => down + chrono::Duration::minutes(1),
        down => down,
    };
    let local = at.with_timezone(&zone).format("%Y-%m-%dT%H:%M").to_string();
    match resolve_local_time(&local, zone) {
        Ok(back) if back == at => Ok((local, at)),
        _ => Err(format!(
            "{flag}: {local} happens twice in {zone} (clocks go back then), so it cannot be written there; \
             use --time-zone UTC or a local time"
        )),
    }
}

/// `key=value[,key=value…]` as labels; anything else is refused, naming the flag.
fn label_equalities(s: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    s.split(',')
        .map(|term| match term.trim().split_once('=') {
            Some((k, v)) if !k.is_empty() && !k.ends_with('!') && !v.contains('=') => {
                Ok((k.trim().to_string(), v.trim().to_string()))
            }
            _ => Err(format!(
                "-l {s:?}: takes key=value[,key=value…]; for matchExpressions, write the UpgradeFreeze and kubectl apply it"
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn hours(h: u64) -> Option<std::time::Duration> {
        Some(std::time::Duration::from_secs(h * 3600))
    }

    /// What `freezes create` writes, or the error it gives (the start of it).
    #[test]
    fn incident_freezes_are_written_to_the_minute_holding_at_least_what_was_asked() {
        let local = |s: &str| StartTime::Local(s.into());
        let instant = |s: &str| StartTime::Instant(utc(s));
        let (from_london, until_london) = (local("2026-12-05T22:00"), local("2026-12-06T02:00"));
        let (early, late) = (instant("2026-12-04T23:00:00Z"), instant("2026-12-04T22:00:00Z"));
        let fold = instant("2026-10-25T01:30:00Z");
        let (past_from, past_until) = (local("2026-12-01T10:00"), local("2026-12-01T12:00"));
        let no_month = local("2026-13-01T10:00");
        let labels = ["postgres".to_string()];
        let now = utc("2026-12-04T20:57:31Z");
        type Want<'w> = Result<(&'w str, &'w str, &'w str), &'w str>;
        let cases: Vec<(&str, Incident<'_>, Want<'_>)> = vec![
            (
                "--for 2h from now: start rounded down, end up",
                Incident {
                    for_: hours(2),
                    ..Default::default()
                },
                Ok(("2026-12-04T20:57", "2026-12-04T22:58", "UTC")),
            ),
            (
                "local times of --time-zone, as written",
                Incident {
                    from: Some(&from_london),
                    until: Some(&until_london),
                    time_zone: Some("Europe/London"),
                    ..Default::default()
                },
                Ok(("2026-12-05T22:00", "2026-12-06T02:00", "Europe/London")),
            ),
            (
                "an instant written in the zone",
                Incident {
                    until: Some(&early),
                    time_zone: Some("America/New_York"),
                    ..Default::default()
                },
                Ok(("2026-12-04T15:57", "2026-12-04T18:00", "America/New_York")),
            ),
            (
                "the repeated hour cannot be written",
                Incident {
                    from: Some(&fold),
                    for_: hours(1),
                    time_zone: Some("Europe/London"),
                    ..Default::default()
                },
                Err("--from: 2026-10-25T01:30 happens twice in Europe/London"),
            ),
            (
                "until before from",
                Incident {
                    from: Some(&early),
                    until: Some(&late),
                    ..Default::default()
                },
                Err("--until 2026-12-04T22:00 must be after --from 2026-12-04T23:00"),
            ),
            (
                "over already",
                Incident {
                    from: Some(&past_from),
                    until: Some(&past_until),
                    ..Default::default()
                },
                Err("the freeze would have ended already"),
            ),
            ("no length", Incident { ..Default::default() }, Err("say how long")),
            (
                "zero length",
                Incident {
                    for_: Some(std::time::Duration::ZERO),
                    ..Default::default()
                },
                Err("--for must be longer than zero"),
            ),
            (
                "a zone that does not exist",
                Incident {
                    for_: hours(1),
                    time_zone: Some("Europe/Lundon"),
                    ..Default::default()
                },
                Err("--time-zone: "),
            ),
            (
                "a selector that is not equalities",
                Incident {
                    for_: hours(1),
                    selector: Some("team!=payments"),
                    ..Default::default()
                },
                Err("-l \"team!=payments\": takes key=value"),
            ),
            (
                "a local time that is not one",
                Incident {
                    from: Some(&no_month),
                    for_: hours(1),
                    ..Default::default()
                },
                Err("--from 2026-13-01T10:00: "),
            ),
        ];
        for (case, mut incident, want) in cases {
            if incident.reason.is_empty() {
                incident.reason = "INC-4711";
            }
            let got = incident_spec(&incident, now);
            match (want, got) {
                (Ok((start, end, zone)), Ok((spec, _))) => {
                    let p = &spec.periods[0];
                    assert_eq!(
                        (p.start.as_deref(), p.end.as_deref(), p.time_zone.as_deref()),
                        (Some(start), Some(end), Some(zone)),
                        "{case}"
                    );
                }
                (Err(prefix), Err(e)) => assert!(e.starts_with(prefix), "{case}: {e}"),
                (want, got) => panic!("{case}: wanted {want:?}, got {got:?}"),
            }
        }
        // What it holds besides the time.
        let (spec, _) = incident_spec(
            &Incident {
                reason: "month-end close",
                for_: hours(1),
                promises: &labels,
                selector: Some("team=payments, env=prod"),
                ..Default::default()
            },
            now,
        )
        .unwrap();
        assert_eq!(spec.promises.as_deref(), Some(&labels[..]));
        let selector = spec.plan_selector.unwrap().match_labels.unwrap();
        assert_eq!(
            selector.into_iter().collect::<Vec<_>>(),
            [
                ("env".to_string(), "prod".to_string()),
                ("team".to_string(), "payments".to_string())
            ]
        );
        assert!(incident_spec(
            &Incident {
                reason: " ",
                for_: hours(1),
                ..Default::default()
            },
            now
        )
        .unwrap_err()
        .starts_with("--reason"));
    }

    /// Against the literal definition, over generated cases in zones with unusual changes: a
    /// freeze made `--for D` from now, as the controller reads it back, holds all of [now, now+D]
    /// and at most two minutes more — or is refused only because an edge falls in a repeated hour.
    #[test]
    fn incident_freezes_hold_what_was_asked_by_the_controllers_reading() {
        let seed: u64 = std::env::var("FREEZE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x5eed_f4ee);
        println!("seed {seed} (FREEZE_SEED replays it)");
        let mut x = seed;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let zones = [
            "UTC",
            "Europe/London",
            "Australia/Lord_Howe",
            "America/Santiago",
            "Pacific/Chatham",
            "Europe/Dublin",
        ];
        let base = utc("2026-01-01T00:00:00Z");
        let (mut held, mut refused) = (0, 0);
        for _ in 0..4000 {
            let now = base + chrono::Duration::seconds((next() % (366 * 86_400)) as i64);
            let d = std::time::Duration::from_secs(60 + next() % (3 * 86_400));
            let zone = zones[(next() % zones.len() as u64) as usize];
            let incident = Incident {
                reason: "r",
                for_: Some(d),
                time_zone: Some(zone),
                ..Default::default()
            };
            match incident_spec(&incident, now) {
                Ok((spec, _)) => {
                    let f = Freeze::compile("f", &spec).unwrap();
                    let asked_end = now + chrono::Duration::from_std(d).unwrap();
                    let stretch = f.stretches_from(now, 1);
                    let (start, end) = stretch[0];
                    assert!(
                        f.state(now).active,
                        "seed {seed}: not active at {now} in {zone}: {spec:?}"
                    );
                    assert_eq!(start, now, "seed {seed}");
                    assert!(
                        end >= asked_end && end <= asked_end + chrono::Duration::minutes(2),
                        "seed {seed}: {now} + {d:?} in {zone} ends {end}: {spec:?}"
                    );
                    held += 1;
                }
                Err(e) => {
                    assert!(e.contains("happens twice"), "seed {seed}: {now} + {d:?} in {zone}: {e}");
                    refused += 1;
                }
            }
        }
        println!("{held} held, {refused} refused (an edge in a repeated hour)");
        assert!(held > 3900, "seed {seed}: {held} held, {refused} refused");
    }
}
