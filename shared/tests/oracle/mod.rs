//! A deliberately naive reference for spec §6 and §7, written apart from the engine so that the
//! two can be compared (issue 15). It walks every local minute of every day in the zone and
//! applies the rules literally:
//! - a fixed local time (the hour field does not start with `*`) that does not exist (spring
//!   gap) fires at the first instant after the gap; one that occurs twice fires at the first
//!   occurrence only;
//! - a wildcard hour (`*`, `*/n`) follows the wall clock: each occurrence fires, none in a gap;
//! - a day field is restricted unless it is exactly `*`; both restricted: either may match;
//! - a window is active at t when some start s has s <= t < s + duration; the gate is open with
//!   no windows, while an allow is active (if any allow exists), and never while a deny is.
//!
//! Used by `shared/tests/time_oracle.rs` and by the `cron` fuzz target. Nothing here is fast.
#![allow(dead_code)]

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// The zones issue 15 names: negative DST, midnight changes, 30-minute changes, 02:45/03:45
/// changes, a change each side of Ramadan.
pub const ZONES: &[&str] = &[
    "Europe/London",
    "Europe/Dublin",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "America/Havana",
    "Australia/Sydney",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Africa/Casablanca",
    "UTC",
];

/// A cron expression as the sets of values it allows.
#[derive(Debug, Clone)]
pub struct NaiveCron {
    minutes: Vec<bool>,
    hours: Vec<bool>,
    days: Vec<bool>,
    months: Vec<bool>,
    weekdays: Vec<bool>,
    dom_restricted: bool,
    dow_restricted: bool,
    pub wall_clock: bool,
}

fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Option<Vec<bool>> {
    let mut set = vec![false; max as usize + 1];
    let value = |s: &str| -> Option<u32> {
        let upper = s.to_ascii_uppercase();
        if let Some(i) = names.iter().position(|n| *n == upper) {
            return Some(i as u32 + min);
        }
        s.parse().ok().filter(|v| *v >= min && *v <= max)
    };
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (item, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            (v, if step > 1 { max } else { v })
        };
        let mut v = lo;
        while v <= hi {
            set[v as usize] = true;
            v += step;
        }
    }
    Some(set)
}

impl NaiveCron {
    /// Parses the dialect's 5 fields and shorthands; `None` for anything else.
    pub fn parse(text: &str) -> Option<NaiveCron> {
        let text = match text.trim().to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *".to_string(),
            "@monthly" => "0 0 1 * *".to_string(),
            "@weekly" => "0 0 * * 0".to_string(),
            "@daily" | "@midnight" => "0 0 * * *".to_string(),
            "@hourly" => "0 * * * *".to_string(),
            _ => text.trim().to_string(),
        };
        let f: Vec<&str> = text.split_whitespace().collect();
        if f.len() != 5 {
            return None;
        }
        const MONTHS: &[&str] = &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ];
        const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
        let mut weekdays = field(f[4], 0, 7, DAYS)?;
        if weekdays[7] {
            weekdays[0] = true;
        }
        Some(NaiveCron {
            minutes: field(f[0], 0, 59, &[])?,
            hours: field(f[1], 0, 23, &[])?,
            days: field(f[2], 1, 31, &[])?,
            months: field(f[3], 1, 12, MONTHS)?,
            weekdays,
            dom_restricted: f[2] != "*",
            dow_restricted: f[4] != "*",
            wall_clock: f[1].starts_with('*'),
        })
    }

    fn day_matches(&self, d: NaiveDate) -> bool {
        let dom = self.days[d.day() as usize];
        let dow = self.weekdays[d.weekday().num_days_from_sunday() as usize];
        self.months[d.month() as usize]
            && match (self.dom_restricted, self.dow_restricted) {
                (true, true) => dom || dow,
                (true, false) => dom,
                (false, true) => dow,
                (false, false) => true,
            }
    }

    /// Every firing whose local day is in `[first, last]`, sorted, each once.
    pub fn firings(&self, tz: Tz, first: NaiveDate, last: NaiveDate) -> Vec<DateTime<Utc>> {
        let mut out = Vec::new();
        let mut day = first;
        while day <= last {
            if self.day_matches(day) {
                for h in 0..24 {
                    for m in 0..60 {
                        if self.hours[h as usize] && self.minutes[m as usize] {
                            out.extend(local_time_fires(
                                day.and_hms_opt(h, m, 0).expect("valid"),
                                tz,
                                self.wall_clock,
                            ));
                        }
                    }
                }
            }
            day = day.succ_opt().expect("in range");
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The oracle's firings in `(now, horizon]` (at most `cap`) beside the engine's: `upcoming(n)`
/// is asked for one more than the oracle found, so an extra engine firing inside the horizon
/// shows. Returns (engine, oracle), equal when they agree.
pub fn upcoming_side_by_side(
    fires: &[DateTime<Utc>],
    now: DateTime<Utc>,
    horizon: DateTime<Utc>,
    cap: usize,
    upcoming: impl FnOnce(usize) -> Vec<DateTime<Utc>>,
) -> (Vec<DateTime<Utc>>, Vec<DateTime<Utc>>) {
    let want: Vec<_> = fires
        .iter()
        .copied()
        .filter(|f| *f > now && *f <= horizon)
        .take(cap)
        .collect();
    let mut got: Vec<_> = upcoming(want.len() + 1).into_iter().filter(|f| *f <= horizon).collect();
    got.truncate(cap);
    (got, want)
}

/// The instants at which local time `l` fires in `tz`.
pub fn local_time_fires(l: NaiveDateTime, tz: Tz, wall_clock: bool) -> Vec<DateTime<Utc>> {
    match tz.from_local_datetime(&l) {
        LocalResult::Single(t) => vec![t.with_timezone(&Utc)],
        LocalResult::Ambiguous(a, b) if wall_clock => vec![a.with_timezone(&Utc), b.with_timezone(&Utc)],
        LocalResult::Ambiguous(a, _) => vec![a.with_timezone(&Utc)],
        LocalResult::None if wall_clock => vec![],
        LocalResult::None => {
            // The first local minute after the gap that exists, at its first instant.
            let mut probe = l;
            loop {
                probe += Duration::minutes(1);
                if let Some(t) = tz.from_local_datetime(&probe).earliest() {
                    return vec![t.with_timezone(&Utc)];
                }
            }
        }
    }
}

/// The local day of `t` in `tz`.
pub fn local_day(t: DateTime<Utc>, tz: Tz) -> NaiveDate {
    t.with_timezone(&tz).date_naive()
}

/// The instants in `[from, to)` at which `tz` changes its UTC offset, to the minute.
pub fn transitions(tz: Tz, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let offset = |t: DateTime<Utc>| t.with_timezone(&tz).offset().fix().local_minus_utc();
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let next = t + Duration::hours(1);
        if offset(t) != offset(next) {
            let mut m = t;
            while offset(m) == offset(t) {
                m += Duration::minutes(1);
            }
            out.push(m);
        }
        t = next;
    }
    out
}

use chrono::Offset;

/// A window for the gate oracle.
#[derive(Debug, Clone)]
pub struct NaiveWindow {
    pub allow: bool,
    pub starts: Vec<DateTime<Utc>>,
    pub duration: Duration,
}

impl NaiveWindow {
    /// Some start s with s <= t < s + duration (`starts` is sorted: look only at (t - duration, t]).
    pub fn active(&self, t: DateTime<Utc>) -> bool {
        let from = self.starts.partition_point(|s| *s <= t - self.duration);
        self.starts[from..]
            .iter()
            .take_while(|s| **s <= t)
            .any(|s| t < *s + self.duration)
    }
}

/// The gate of spec §7 at `t`.
pub fn gate_open(windows: &[NaiveWindow], t: DateTime<Utc>) -> bool {
    let any_allow = windows.iter().any(|w| w.allow);
    let allowed = windows.iter().any(|w| w.allow && w.active(t));
    let denied = windows.iter().any(|w| !w.allow && w.active(t));
    (!any_allow || allowed) && !denied
}

/// The first two instants in `(now, until]` at which the gate changes, walking whole minutes
/// (every start is a whole local minute and every duration whole minutes).
pub fn gate_changes(windows: &[NaiveWindow], now: DateTime<Utc>, until: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let mut state = gate_open(windows, now);
    let mut t = now.with_second(0).and_then(|t| t.with_nanosecond(0)).expect("valid");
    let mut out = Vec::new();
    while out.len() < 2 {
        t += Duration::minutes(1);
        if t > until {
            break;
        }
        let open = gate_open(windows, t);
        if open != state {
            out.push(t);
            state = open;
        }
    }
    out
}

/// The property tests' seedable generator (one for the project: the simulation's too).
pub use upgradeplan::rng::SplitMix64 as Rng;

/// One generated field: `*`, a value, a name, a range, a stepped range or `*`, or a list.
fn gen_field(rng: &mut Rng, min: u32, max: u32, names: &[&str], favour: &[u32]) -> String {
    let value = |rng: &mut Rng| -> u32 {
        if !favour.is_empty() && rng.chance(60) {
            *rng.pick(favour)
        } else {
            rng.range(min, max)
        }
    };
    let item = |rng: &mut Rng| -> String {
        match rng.range(0, 5) {
            0 if !names.is_empty() => {
                let v = value(rng);
                names
                    .get((v - min) as usize)
                    .map(|n| n.to_string())
                    .unwrap_or(v.to_string())
            }
            1 => {
                let (a, b) = (value(rng), value(rng));
                format!("{}-{}", a.min(b), a.max(b))
            }
            2 => {
                let (a, b) = (value(rng), value(rng));
                format!("{}-{}/{}", a.min(b), a.max(b), rng.range(1, 4))
            }
            _ => value(rng).to_string(),
        }
    };
    match rng.range(0, 9) {
        0 | 1 => "*".to_string(),
        2 => format!("*/{}", rng.range(1, (max - min).clamp(1, 12))),
        3 | 4 => (0..rng.range(2, 4)).map(|_| item(rng)).collect::<Vec<_>>().join(","),
        _ => item(rng),
    }
}

/// A cron expression that tends to fire near daylight-saving changes: hours around midnight
/// and the small hours, months of changes, every day field form.
pub fn gen_cron(rng: &mut Rng) -> String {
    const MONTHS: &[&str] = &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ];
    const DAYS: &[&str] = &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
    let minute = gen_field(rng, 0, 59, &[], &[0, 15, 30, 44, 45, 46, 59]);
    let hour = gen_field(rng, 0, 23, &[], &[0, 1, 2, 3, 4, 22, 23]);
    let dom = if rng.chance(50) {
        "*".to_string()
    } else {
        gen_field(rng, 1, 31, &[], &[])
    };
    let month = if rng.chance(50) {
        "*".to_string()
    } else {
        gen_field(rng, 1, 12, MONTHS, &[2, 3, 4, 9, 10, 11])
    };
    let dow = if rng.chance(50) {
        "*".to_string()
    } else {
        gen_field(rng, 0, 7, DAYS, &[0, 6])
    };
    format!("{minute} {hour} {dom} {month} {dow}")
}
