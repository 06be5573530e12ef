//! The engine's local times against the naive oracle of `oracle/mod.rs` (issue 15): triggers,
//! `executeAt` and window gates, over generated expressions and `now`s clustered around every
//! daylight-saving change of 2025–2030 in the zones the issue names.
//!
//! The seed is fixed so that `make test` is repeatable; `TIME_ORACLE_SEED=<n>` explores others
//! and `TIME_ORACLE_CASES=<n>` runs more. A failure prints the seed and the case.
#![allow(clippy::unwrap_used)]

mod oracle;

use chrono::{DateTime, Duration, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use oracle::{gate_changes, gen_cron, local_day, local_time_fires, transitions, NaiveCron, NaiveWindow, Rng, ZONES};
use upgradeplan::api::{FreezePeriod, UpgradeFreezeSpec, UpgradeWindow, WindowKind};
use upgradeplan::engine::cron::{resolve_local_time, CronSchedule};
use upgradeplan::engine::freeze::Freeze;
use upgradeplan::engine::window::Windows;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Every transition of 2025–2030 in every zone of the oracle.
fn all_transitions() -> Vec<(Tz, Vec<DateTime<Utc>>)> {
    let from = Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap();
    let to = Utc.with_ymd_and_hms(2031, 1, 1, 0, 0, 0).unwrap();
    ZONES
        .iter()
        .map(|z| {
            let tz: Tz = z.parse().unwrap();
            (tz, transitions(tz, from, to))
        })
        .collect()
}

/// A `now` within 36 hours of a transition of `tz` (any instant of 2025–2030 for UTC).
fn gen_now(rng: &mut Rng, changes: &[DateTime<Utc>]) -> DateTime<Utc> {
    let base = if changes.is_empty() {
        Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).unwrap() + Duration::hours(i64::from(rng.range(0, 6 * 8760)))
    } else {
        *rng.pick(changes)
    };
    // Whole minutes most of the time (boundaries are whole minutes), odd seconds otherwise.
    let seconds = if rng.chance(70) { 0 } else { i64::from(rng.range(1, 59)) };
    base + Duration::minutes(i64::from(rng.range(0, 72 * 60)) - 36 * 60) + Duration::seconds(seconds)
}

struct Failure(String);

fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure(what()))
    }
}

/// How far ahead the oracle walks for triggers.
const TRIGGER_HORIZON_DAYS: i64 = 9;

fn trigger_case(rng: &mut Rng, tz: Tz, changes: &[DateTime<Utc>]) -> Result<usize, Failure> {
    let expr = gen_cron(rng);
    let Ok(engine) = expr.parse::<CronSchedule>() else {
        return Ok(0); // generated fields may be backwards or never fire: the parser's tables cover those
    };
    let naive = NaiveCron::parse(&expr)
        .ok_or_else(|| Failure(format!("the oracle cannot read {expr:?}, which the engine accepted")))?;
    check(naive.wall_clock == engine.follows_wall_clock(), || {
        format!("{expr:?}: wildcard hour disagrees")
    })?;
    let now = gen_now(rng, changes);
    let horizon = now + Duration::days(TRIGGER_HORIZON_DAYS);
    let fires = naive.firings(
        tz,
        local_day(now, tz) - Duration::days(2),
        local_day(horizon, tz) + Duration::days(1),
    );
    let (got, want) = oracle::upcoming_side_by_side(&fires, now, horizon, 40, |n| engine.upcoming(now, tz, n));
    check(got == want, || {
        format!("{expr:?} in {tz}, now {now}: upcoming\n  engine {got:?}\n  oracle {want:?}")
    })?;
    let next = engine.next_after(now, tz);
    check(want.first().is_none_or(|w| next == Some(*w)), || {
        format!(
            "{expr:?} in {tz}, now {now}: next_after {next:?}, oracle {:?}",
            want.first()
        )
    })?;
    // The latest firing at or before now, when the oracle's days reach it.
    let past: Vec<_> = fires.iter().copied().filter(|f| *f <= now).collect();
    if let Some(last) = past.last() {
        if *last > now - Duration::days(1) {
            let got = engine.latest_at_or_before(now, tz);
            check(got == Some(*last), || {
                format!("{expr:?} in {tz}, now {now}: latest_at_or_before {got:?}, oracle {last}")
            })?;
        }
    }
    Ok(1)
}

fn execute_at_case(rng: &mut Rng, tz: Tz, changes: &[DateTime<Utc>]) -> Result<usize, Failure> {
    let local = gen_now(rng, changes).with_timezone(&tz).naive_local();
    let local = local - Duration::seconds(i64::from(chrono::Timelike::second(&local)));
    // Around a change the local clock both skips and repeats: try each nearby minute.
    let local: NaiveDateTime = local + Duration::minutes(i64::from(rng.range(0, 120)) - 60);
    let text = local.format("%Y-%m-%dT%H:%M").to_string();
    let want = local_time_fires(local, tz, false);
    let got = resolve_local_time(&text, tz).ok();
    check(got == want.first().copied(), || {
        format!("executeAt {text} in {tz}: engine {got:?}, oracle {want:?}")
    })?;
    Ok(1)
}

const GATE_HORIZON_DAYS: i64 = 4;
static ENGINE_GATE_NANOS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn gate_case(rng: &mut Rng, transitions: &[(Tz, Vec<DateTime<Utc>>)]) -> Result<usize, Failure> {
    let (tz0, changes) = rng.pick(transitions);
    let now = gen_now(rng, changes);
    let horizon = now + Duration::days(GATE_HORIZON_DAYS);
    let mut specs = Vec::new();
    let mut naive = Vec::new();
    for i in 0..rng.range(1, 3) {
        // Mostly the zone of the transition, sometimes another.
        let tz = if i == 0 || rng.chance(60) {
            *tz0
        } else {
            rng.pick(transitions).0
        };
        let expr = gen_cron(rng);
        let Ok(_) = expr.parse::<CronSchedule>() else {
            return Ok(0);
        };
        let minutes = match rng.range(0, 3) {
            0 => rng.range(1, 59),
            1 => rng.range(60, 6 * 60),
            2 => rng.range(6 * 60, 30 * 60),
            _ => 60 * rng.range(1, 4),
        };
        let duration = Duration::minutes(i64::from(minutes));
        let allow = rng.chance(50);
        let cron = NaiveCron::parse(&expr).ok_or_else(|| Failure(format!("oracle cannot read {expr:?}")))?;
        let first = local_day(now - duration, tz) - Duration::days(2);
        let last = local_day(horizon, tz) + Duration::days(1);
        naive.push(NaiveWindow {
            allow,
            starts: cron.firings(tz, first, last),
            duration,
        });
        specs.push(UpgradeWindow {
            kind: if allow { WindowKind::Allow } else { WindowKind::Deny },
            schedule: expr,
            duration: format!("{minutes}m"),
            time_zone: Some(tz.name().to_string()),
        });
    }
    // Freezes (spec §13.5) join the gate as deny periods: one-off local periods around now, or
    // recurring ones; the oracle reads them as deny windows.
    let mut periods = Vec::new();
    for _ in 0..rng.range(0, 2) {
        let tz = if rng.chance(70) { *tz0 } else { rng.pick(transitions).0 };
        if rng.chance(50) {
            let around = now.with_timezone(&tz).naive_local();
            let around = around.with_second(0).and_then(|t| t.with_nanosecond(0)).unwrap();
            let start = around + Duration::minutes(i64::from(rng.range(0, 1200)) - 600);
            let end = start + Duration::minutes(i64::from(rng.range(1, 24 * 60)));
            let (s_at, e_at) = (
                local_time_fires(start, tz, false)[0],
                local_time_fires(end, tz, false)[0],
            );
            if s_at >= e_at {
                return Ok(0); // the freeze is invalid (its end resolves before its start): validator's case
            }
            naive.push(NaiveWindow {
                allow: false,
                starts: vec![s_at],
                duration: e_at - s_at,
            });
            periods.push(FreezePeriod {
                start: Some(start.format("%Y-%m-%dT%H:%M").to_string()),
                end: Some(end.format("%Y-%m-%dT%H:%M").to_string()),
                time_zone: Some(tz.name().to_string()),
                ..Default::default()
            });
        } else {
            let expr = gen_cron(rng);
            let Ok(_) = expr.parse::<CronSchedule>() else {
                return Ok(0);
            };
            let minutes = rng.range(1, 30 * 60);
            let duration = Duration::minutes(i64::from(minutes));
            let cron = NaiveCron::parse(&expr).ok_or_else(|| Failure(format!("oracle cannot read {expr:?}")))?;
            naive.push(NaiveWindow {
                allow: false,
                starts: cron.firings(
                    tz,
                    local_day(now - duration, tz) - Duration::days(2),
                    local_day(horizon, tz) + Duration::days(1),
                ),
                duration,
            });
            periods.push(FreezePeriod {
                schedule: Some(expr),
                duration: Some(format!("{minutes}m")),
                time_zone: Some(tz.name().to_string()),
                ..Default::default()
            });
        }
    }
    let freeze = UpgradeFreezeSpec {
        reason: "oracle".into(),
        periods: periods.clone(),
        ..Default::default()
    };
    let frozen = if periods.is_empty() {
        Vec::new()
    } else {
        Freeze::compile("oracle", &freeze)
            .map_err(|e| Failure(format!("{periods:?}: {e:?}")))?
            .periods
    };
    let gate = Windows::compile(&specs)
        .map_err(|e| Failure(format!("{specs:?}: {e:?}")))?
        .with_freezes(frozen);
    let specs = (specs, periods);
    let clock = std::time::Instant::now();
    let state = gate.state(now);
    ENGINE_GATE_NANOS.fetch_add(clock.elapsed().as_nanos() as u64, std::sync::atomic::Ordering::Relaxed);
    let describe = || format!("windows and freeze periods {specs:?}, now {now}: engine {state:?}");
    let open = oracle::gate_open(&naive, now);
    check(state.open == open, || format!("{}: oracle open={open}", describe()))?;
    let changes = gate_changes(&naive, now, horizon);
    let (first, second) = if open {
        (state.next_close, state.next_open)
    } else {
        (state.next_open, state.next_close)
    };
    for (got, want) in [(first, changes.first()), (second, changes.get(1))] {
        let agrees = match want {
            Some(w) => got == Some(*w),
            // The oracle saw no change within its horizon: the engine's, if any, is beyond it.
            None => got.is_none_or(|g| g > horizon),
        };
        check(agrees, || format!("{}: oracle changes {changes:?}", describe()))?;
    }
    Ok(1)
}

#[test]
fn engine_agrees_with_the_oracle() {
    let seed = env_number("TIME_ORACLE_SEED", 0x15_2026_1130);
    let cases = env_number("TIME_ORACLE_CASES", 2000);
    let transitions = all_transitions();
    let mut rng = Rng(seed);
    let (mut triggers, mut execute_at, mut gates) = (0, 0, 0);
    let mut case = 0;
    let mut attempts = 0;
    let mut spent = [std::time::Duration::ZERO; 4];
    while case < cases && attempts < cases * 4 {
        attempts += 1;
        let (tz, changes) = rng.pick(&transitions).clone();
        let started = std::time::Instant::now();
        let kind = attempts % 4;
        let result = match kind {
            0 | 1 => trigger_case(&mut rng, tz, &changes).inspect(|n| triggers += n),
            2 => execute_at_case(&mut rng, tz, &changes).inspect(|n| execute_at += n),
            _ => gate_case(&mut rng, &transitions).inspect(|n| gates += n),
        };
        spent[kind as usize] += started.elapsed();
        match result {
            Ok(n) => case += n as u64,
            Err(Failure(what)) => {
                panic!("the engine disagrees with the oracle (TIME_ORACLE_SEED={seed}, attempt {attempts}):\n{what}")
            }
        }
    }
    println!(
        "oracle: seed {seed}: {triggers} trigger, {execute_at} executeAt and {gates} gate cases agree ({} zones, {} transitions)",
        transitions.len(),
        transitions.iter().map(|(_, c)| c.len()).sum::<usize>()
    );
    println!(
        "time spent per kind (trigger, trigger, executeAt, gate): {spent:?}; engine's gates {} ms",
        ENGINE_GATE_NANOS.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000
    );
    assert!(
        case >= cases,
        "only {case} of {cases} cases were generated in {attempts} attempts"
    );
}
