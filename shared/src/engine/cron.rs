//! The cron dialect of spec §6: strict 5-field cron, evaluated in an IANA time zone.
//!
//! Parsing and validation are ours (clear messages naming the field). An expression is a set of
//! local wall-clock minutes; [`super::localtime`] turns them into instants with the
//! daylight-saving rules of spec §6 (fixed hours: first instant the clock reads the time; a
//! wildcard hour, `*` or `*/n`: the wall clock).

use std::str::FromStr;

use chrono::{DateTime, Datelike, NaiveDateTime, Timelike, Utc};
use chrono_tz::Tz;

use super::localtime::{self, round_up_to_minute, Dst, LocalPattern};

/// Why a cron expression is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("is empty: expected 5 fields (minute hour day-of-month month day-of-week)")]
    Empty,
    #[error("time zone prefixes (TZ=, CRON_TZ=) are not supported: set the timeZone field instead")]
    TimeZonePrefix,
    #[error("@every is not supported: use a 5-field expression such as \"*/15 * * * *\"")]
    Every,
    #[error("unknown shorthand {0:?}: use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly")]
    UnknownShorthand(String),
    #[error("has {0} fields: expected 5 (minute hour day-of-month month day-of-week); forms with seconds or years are not supported")]
    FieldCount(usize),
    #[error("{field} field {value:?}: {detail}")]
    Field {
        field: &'static str,
        value: String,
        detail: String,
    },
    #[error("never fires: no month in the month field has the days in the day-of-month field")]
    NeverFires,
}

/// The five fields: name, minimum, maximum, and the names allowed in place of numbers.
const FIELDS: [(&str, u32, u32, &[&str]); 5] = [
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day-of-month", 1, 31, &[]),
    (
        "month",
        1,
        12,
        &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    ),
    ("day-of-week", 0, 7, &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]),
];

/// Days in each month at most (February in a leap year).
const MAX_DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// A validated cron expression: the local minutes it names.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    source: String,
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    /// Bit 0 is Sunday (7 is folded into 0).
    days_of_week: u64,
    /// A day field is restricted unless it is exactly `*` (Kubernetes CronJob's rule); when both
    /// are, a day matches if either matches.
    day_of_month_restricted: bool,
    day_of_week_restricted: bool,
    /// The hour field is `*` or `*/n`: the schedule follows the wall clock.
    wildcard_hour: bool,
}

impl PartialEq for CronSchedule {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl FromStr for CronSchedule {
    type Err = CronError;

    fn from_str(expr: &str) -> Result<Self, CronError> {
        let trimmed = expr.trim();
        if trimmed.is_empty() {
            return Err(CronError::Empty);
        }
        let upper = trimmed.to_ascii_uppercase();
        if upper.starts_with("TZ=") || upper.starts_with("CRON_TZ=") {
            return Err(CronError::TimeZonePrefix);
        }
        let expanded = if trimmed.starts_with('@') {
            expand_shorthand(trimmed)?
        } else {
            trimmed
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount(fields.len()));
        }
        let mut sets = [0u64; 5];
        for (i, (field, value)) in fields.iter().enumerate().map(|(i, v)| (FIELDS[i], v)).enumerate() {
            sets[i] = parse_field(field, value)?;
        }
        // Both day fields restricted: either matches (Vixie), so some day always matches. Only
        // day-of-month restricted: some chosen month must have one of the chosen days.
        let dom_star = fields[2] == "*";
        let dow_star = fields[4] == "*";
        if !dom_star && dow_star {
            let fires = (1..=12u32).any(|m| {
                sets[3] & (1 << m) != 0 && (1..=MAX_DAYS_IN_MONTH[m as usize - 1]).any(|d| sets[2] & (1 << d) != 0)
            });
            if !fires {
                return Err(CronError::NeverFires);
            }
        }
        Ok(CronSchedule {
            source: trimmed.to_string(),
            minutes: sets[0],
            hours: sets[1],
            days_of_month: sets[2],
            months: sets[3],
            days_of_week: sets[4] & 0x7f,
            day_of_month_restricted: !dom_star,
            day_of_week_restricted: !dow_star,
            wildcard_hour: fields[1].starts_with('*'),
        })
    }
}

fn expand_shorthand(s: &str) -> Result<&'static str, CronError> {
    let lower = s.to_ascii_lowercase();
    Ok(match lower.as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ if lower.starts_with("@every") => return Err(CronError::Every),
        _ => return Err(CronError::UnknownShorthand(s.to_string())),
    })
}

/// Parses one field into a bit set of the values it allows, with messages that name the field.
fn parse_field((field, min, max, names): (&'static str, u32, u32, &[&str]), value: &str) -> Result<u64, CronError> {
    let err = |detail: String| CronError::Field {
        field,
        value: value.to_string(),
        detail,
    };
    if let Some(c) = value.chars().find(|c| matches!(c, 'L' | 'l' | 'W' | 'w' | '#' | '?')) {
        // Names contain some of these letters (WED, JUL, ...); only flag them outside a name.
        let without_names = names
            .iter()
            .fold(value.to_ascii_uppercase(), |acc, n| acc.replace(n, ""));
        if without_names.contains(|x: char| x.eq_ignore_ascii_case(&c)) {
            return Err(err(format!(
                "{c:?} is a Quartz/cronie extension (L, W, #, ?) and is not supported in the standard 5-field dialect"
            )));
        }
    }
    let number = |s: &str| -> Result<u32, CronError> {
        if let Some(pos) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(pos as u32 + if field == "month" { 1 } else { 0 });
        }
        let n: u32 = s
            .parse()
            .map_err(|_| err(format!("{s:?} is not a number{}", name_hint(names))))?;
        if n < min || n > max {
            return Err(err(format!("{n} is out of range {min}-{max}")));
        }
        Ok(n)
    };
    let mut set = 0u64;
    for part in value.split(',') {
        if part.is_empty() {
            return Err(err("empty list item".to_string()));
        }
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => {
                let step: u32 = s.parse().map_err(|_| err(format!("step {s:?} is not a number")))?;
                if step == 0 {
                    return Err(err("step must be at least 1".to_string()));
                }
                (r, step)
            }
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(err(format!("range {a}-{b} is backwards")));
            }
            (a, b)
        } else {
            let n = number(range)?;
            if step != 1 {
                return Err(err(format!("a step needs a range or *: write {n}-{max}/{step}")));
            }
            (n, n)
        };
        for v in (lo..=hi).step_by(step as usize) {
            set |= 1 << v;
        }
    }
    if field == "day-of-week" && set & (1 << 7) != 0 {
        set |= 1; // 7 and 0 are both Sunday
    }
    Ok(set)
}

fn name_hint(names: &[&str]) -> String {
    if names.is_empty() {
        String::new()
    } else {
        format!(" (names allowed: {})", names.join(" "))
    }
}

impl CronSchedule {
    /// The expression as written (trimmed).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Both day fields are restricted, so a day matches when either does (`explain` says so).
    pub fn days_either(&self) -> bool {
        self.day_of_month_restricted && self.day_of_week_restricted
    }

    /// In words, when both day fields are restricted (either may match, spec §6): "on day 13 of
    /// the month or on Fridays". `None` otherwise.
    pub fn either_day_words(&self) -> Option<String> {
        if !self.days_either() {
            return None;
        }
        let days: Vec<u32> = (1..=31).filter(|d| self.days_of_month & (1 << d) != 0).collect();
        let mut runs: Vec<String> = Vec::new();
        let mut i = 0;
        while i < days.len() {
            let mut j = i;
            while j + 1 < days.len() && days[j + 1] == days[j] + 1 {
                j += 1;
            }
            runs.push(match j - i {
                0 => days[i].to_string(),
                1 => format!("{}, {}", days[i], days[j]),
                _ => format!("{}-{}", days[i], days[j]),
            });
            i = j + 1;
        }
        const NAMES: [&str; 7] = [
            "Sundays",
            "Mondays",
            "Tuesdays",
            "Wednesdays",
            "Thursdays",
            "Fridays",
            "Saturdays",
        ];
        let weekdays: Vec<&str> = (0..7)
            .filter(|d| self.days_of_week & (1 << d) != 0)
            .map(|d| NAMES[d as usize])
            .collect();
        let day_word = if days.len() == 1 { "day" } else { "days" };
        Some(format!(
            "on {day_word} {} of the month or on {}",
            runs.join(", "),
            join_or(&weekdays)
        ))
    }

    /// True when the hour field is a wildcard (`*`, `*/n`): the schedule follows the wall clock
    /// across daylight-saving changes rather than firing each fixed local time once.
    pub fn follows_wall_clock(&self) -> bool {
        self.wildcard_hour
    }

    fn day_matches(&self, day: chrono::NaiveDate) -> bool {
        if self.months & (1 << day.month()) == 0 {
            return false;
        }
        let dom = self.days_of_month & (1 << day.day()) != 0;
        let dow = self.days_of_week & (1 << day.weekday().num_days_from_sunday()) != 0;
        match (self.day_of_month_restricted, self.day_of_week_restricted) {
            (true, true) => dom || dow,
            (true, false) => dom,
            (false, true) => dow,
            (false, false) => true,
        }
    }

    /// The first firing strictly after `t`, evaluated in `tz`.
    pub fn next_after(&self, t: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        localtime::next_after(self, tz, t)
    }

    /// The last firing at or before `t`, evaluated in `tz`.
    pub fn latest_at_or_before(&self, t: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        localtime::latest_at_or_before(self, tz, t, None)
    }

    /// The last firing in `(lower, t]`.
    pub fn latest_between(&self, lower: DateTime<Utc>, t: DateTime<Utc>, tz: Tz) -> Option<DateTime<Utc>> {
        localtime::latest_at_or_before(self, tz, t, Some(lower))
    }

    /// Up to `n` firings strictly after `t`.
    pub fn upcoming(&self, t: DateTime<Utc>, tz: Tz, n: usize) -> Vec<DateTime<Utc>> {
        localtime::firings(self, tz, t, None)
            .filter(|f| *f > t)
            .take(n)
            .collect()
    }
}

fn join_or(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => one.to_string(),
        [init @ .., last] => format!("{} or {last}", init.join(", ")),
    }
}

/// How many days ahead a schedule's next local minute is searched: past the eight years between
/// two 29ths of February around a non-leap century year.
const SEARCH_DAYS: u32 = 12 * 366;

impl LocalPattern for CronSchedule {
    fn next_local(&self, from: NaiveDateTime, limit: NaiveDateTime) -> Option<NaiveDateTime> {
        let from = round_up_to_minute(from);
        let mut day = from.date();
        let (mut first_hour, mut first_minute) = (from.hour(), from.minute());
        for _ in 0..SEARCH_DAYS {
            if day > limit.date() {
                return None;
            }
            if self.day_matches(day) {
                for h in first_hour..24 {
                    if self.hours & (1 << h) == 0 {
                        continue;
                    }
                    let m0 = if h == first_hour { first_minute } else { 0 };
                    if let Some(m) = (m0..60).find(|m| self.minutes & (1 << m) != 0) {
                        return day.and_hms_opt(h, m, 0).filter(|t| *t <= limit);
                    }
                }
            }
            day = day.succ_opt()?;
            (first_hour, first_minute) = (0, 0);
        }
        None
    }

    fn dst(&self) -> Dst {
        if self.wildcard_hour {
            Dst::WallClock
        } else {
            Dst::FirstInstant
        }
    }
}

/// Why a time zone or local time is rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("unknown time zone {0:?}: use an IANA name such as \"Europe/London\" or \"UTC\"")]
    UnknownZone(String),
    #[error("{0:?} is not a local time of the form YYYY-MM-DDTHH:mm (no seconds, no zone)")]
    BadLocalTime(String),
}

/// Parses an IANA zone; omitted or empty means UTC.
pub fn parse_zone(name: Option<&str>) -> Result<Tz, TimeError> {
    match name.map(str::trim) {
        None | Some("") => Ok(Tz::UTC),
        Some(n) => n.parse::<Tz>().map_err(|_| TimeError::UnknownZone(n.to_string())),
    }
}

/// Resolves an `executeAt` value (`YYYY-MM-DDTHH:mm`, local to `tz`) to an instant with the same
/// daylight-saving rules as fixed-time cron: a time in a spring gap fires at the first instant
/// after the gap; a time that occurs twice fires at its first occurrence.
pub fn resolve_local_time(value: &str, tz: Tz) -> Result<DateTime<Utc>, TimeError> {
    let bad = || TimeError::BadLocalTime(value.to_string());
    if value.len() != 16 {
        return Err(bad());
    }
    let naive = NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M").map_err(|_| bad())?;
    localtime::resolve(naive, tz).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono_tz::Europe::London;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn cron(s: &str) -> CronSchedule {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn rejected_expressions() {
        let cases: &[(&str, &str)] = &[
            ("", "is empty"),
            ("0 0 * * * *", "has 6 fields"),
            ("0 0 0 * * * 2026", "has 7 fields"),
            ("0 0 * *", "has 4 fields"),
            ("@every 5m", "@every is not supported"),
            ("@reboot", "unknown shorthand"),
            ("TZ=Europe/London 0 1 * * *", "TZ=, CRON_TZ="),
            ("CRON_TZ=UTC 0 1 * * *", "TZ=, CRON_TZ="),
            ("0 0 L * *", "extension"),
            ("0 0 15W * *", "extension"),
            ("0 0 * * 5#2", "extension"),
            ("0 0 ? * MON", "extension"),
            ("0 0 * * 5L", "extension"),
            ("60 * * * *", "minute field \"60\": 60 is out of range 0-59"),
            ("0 24 * * *", "hour field \"24\": 24 is out of range 0-23"),
            ("0 0 0 * *", "day-of-month field \"0\": 0 is out of range 1-31"),
            ("0 0 * 13 *", "month field"),
            ("0 0 * * 8", "day-of-week field \"8\": 8 is out of range 0-7"),
            ("0 0 * * FOO", "not a number (names allowed"),
            ("5/10 * * * *", "a step needs a range or *"),
            ("*/0 * * * *", "step must be at least 1"),
            ("30-10 * * * *", "backwards"),
            ("0 0 31 2 *", "never fires"),
            ("0 0 30,31 2 *", "never fires"),
            ("0 0 31 4,6,9,11 *", "never fires"),
            ("1,,2 * * * *", "empty list item"),
        ];
        for (expr, want) in cases {
            let err = expr.parse::<CronSchedule>().expect_err(expr).to_string();
            assert!(err.contains(want), "{expr:?}: {err:?} should contain {want:?}");
        }
    }

    #[test]
    fn accepted_expressions() {
        for expr in [
            "0 23 * * 6",
            "*/15 * * * *",
            "0 9-17 * * MON-FRI",
            "0 0 1 jan,jul *",
            "0 0 29 2 *",
            "0 0 31 * *",
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
            "0 0 * * 7",
            "0 0 31 2 1",
            " 0 22 * * * ",
        ] {
            cron(expr);
        }
    }

    #[test]
    fn firing_table() {
        // (expression, zone, after, expected next firing)
        let cases: &[(&str, Tz, &str, &str)] = &[
            // The seed's schedule: every Saturday 23:00 London (BST in May).
            ("0 23 * * 6", London, "2026-05-01T00:00:00Z", "2026-05-02T22:00:00Z"),
            // Weekday 0 and 7 are both Sunday: 2026-03-01 is a Sunday.
            ("0 12 * * 0", Tz::UTC, "2026-02-28T13:00:00Z", "2026-03-01T12:00:00Z"),
            ("0 12 * * 7", Tz::UTC, "2026-02-28T13:00:00Z", "2026-03-01T12:00:00Z"),
            ("0 12 * * SUN", Tz::UTC, "2026-02-28T13:00:00Z", "2026-03-01T12:00:00Z"),
            // Day-of-month OR day-of-week when both are restricted: the 15th (a Sunday in March
            // 2026) or any Friday, whichever comes first.
            ("0 0 15 * 5", Tz::UTC, "2026-03-07T00:00:00Z", "2026-03-13T00:00:00Z"),
            ("0 0 15 * 5", Tz::UTC, "2026-03-13T00:00:00Z", "2026-03-15T00:00:00Z"),
            // Only day-of-month restricted: weekday is ignored.
            ("0 0 15 * *", Tz::UTC, "2026-03-07T00:00:00Z", "2026-03-15T00:00:00Z"),
            // 29 February: next leap year.
            ("0 0 29 2 *", Tz::UTC, "2026-01-01T00:00:00Z", "2028-02-29T00:00:00Z"),
            ("@hourly", Tz::UTC, "2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"),
            ("@weekly", Tz::UTC, "2026-03-02T00:00:00Z", "2026-03-08T00:00:00Z"),
        ];
        for (expr, tz, after, want) in cases {
            assert_eq!(
                cron(expr).next_after(utc(after), *tz),
                Some(utc(want)),
                "{expr} after {after}"
            );
        }
    }

    #[test]
    fn europe_london_daylight_saving_2026() {
        // 29 March 2026: 01:00 GMT jumps to 02:00 BST; 01:30 does not exist that day.
        let daily_0130 = cron("30 1 * * *");
        let fires = daily_0130.upcoming(utc("2026-03-27T12:00:00Z"), London, 4);
        assert_eq!(
            fires,
            vec![
                utc("2026-03-28T01:30:00Z"), // GMT
                utc("2026-03-29T01:00:00Z"), // gap: first instant after it, 02:00 BST
                utc("2026-03-30T00:30:00Z"), // 01:30 BST
                utc("2026-03-31T00:30:00Z"),
            ]
        );
        // 25 October 2026: 02:00 BST falls back to 01:00 GMT; 01:30 happens twice, fires once.
        let fires = daily_0130.upcoming(utc("2026-10-24T12:00:00Z"), London, 3);
        assert_eq!(
            fires,
            vec![
                utc("2026-10-25T00:30:00Z"),
                utc("2026-10-26T01:30:00Z"),
                utc("2026-10-27T01:30:00Z")
            ]
        );
        // A wildcard hour follows the wall clock: no 01:xx on 29 March, both 01:30s on 25 October.
        let half_past = cron("30 * * * *");
        assert_eq!(
            half_past.upcoming(utc("2026-03-29T00:00:00Z"), London, 2),
            vec![utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z")] // 00:30 GMT, then 02:30 BST
        );
        assert_eq!(
            half_past.upcoming(utc("2026-10-25T00:00:00Z"), London, 3),
            vec![
                utc("2026-10-25T00:30:00Z"),
                utc("2026-10-25T01:30:00Z"),
                utc("2026-10-25T02:30:00Z")
            ]
        );
    }

    /// Issue 15's counterexamples: changes that are not one hour at 01:00-03:00.
    #[test]
    fn daylight_saving_in_every_kind_of_zone() {
        use chrono_tz::{America, Australia, Europe, Pacific};
        // (expression, zone, after, the next firings)
        let cases: &[(&str, Tz, &str, &[&str])] = &[
            // Lord Howe goes back 30 minutes at 02:00 on 2027-04-04: 01:30 happens twice, fires once.
            (
                "30 1-2 3-15/1 * *",
                Australia::Lord_Howe,
                "2027-04-03T12:00:00Z",
                &["2027-04-03T14:30:00Z", "2027-04-03T16:00:00Z", "2027-04-04T15:00:00Z"],
            ),
            // Santiago goes back at midnight: 23:00-24:00 of 2026-04-04 happens twice.
            (
                "51 6,23 29-30 4 0,3,6",
                America::Santiago,
                "2026-04-04T12:00:00Z",
                &["2026-04-05T02:51:00Z", "2026-04-05T10:51:00Z", "2026-04-06T03:51:00Z"],
            ),
            // Chatham goes back at 03:45 on 2027-04-04: 03:22 happens twice, fires once.
            (
                "22 3,4,8 * 1,4,6,7 0,4,6",
                Pacific::Chatham,
                "2027-04-03T12:00:00Z",
                &["2027-04-03T13:37:00Z", "2027-04-03T15:37:00Z", "2027-04-03T19:37:00Z"],
            ),
            // Chatham jumps from 02:45 to 03:45 on 2027-09-26: 02:46 fires at the first instant
            // after the gap (03:45, 14:00Z), not an hour later.
            (
                "46 0-5 17,23,28,30 * 4,7",
                Pacific::Chatham,
                "2027-09-25T12:30:00Z",
                &[
                    "2027-09-25T13:01:00Z",
                    "2027-09-25T14:00:00Z",
                    "2027-09-25T14:01:00Z",
                    "2027-09-25T15:01:00Z",
                ],
            ),
            // Dublin (negative DST in the zone database) goes back at 02:00 on 2026-10-25.
            (
                "30 1 * * *",
                Europe::Dublin,
                "2026-10-24T12:00:00Z",
                &["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
            ),
            // Several times in one gap fire once, at the gap's end.
            (
                "0,20,40 1 29 3 *",
                London,
                "2026-03-28T12:00:00Z",
                &["2026-03-29T01:00:00Z", "2027-03-29T00:00:00Z"],
            ),
            // A wildcard hour follows the wall clock in Lord Howe: 01:45 twice, 02:15 once.
            (
                "15,45 */1 4 4 *",
                Australia::Lord_Howe,
                "2027-04-03T14:00:00Z",
                &[
                    "2027-04-03T14:15:00Z",
                    "2027-04-03T14:45:00Z",
                    "2027-04-03T15:15:00Z",
                    "2027-04-03T15:45:00Z",
                ],
            ),
        ];
        for (expr, tz, after, want) in cases {
            let want: Vec<_> = want.iter().map(|w| utc(w)).collect();
            assert_eq!(
                cron(expr).upcoming(utc(after), *tz, want.len()),
                want,
                "{expr} in {tz} after {after}"
            );
        }
    }

    /// The examples of README's "Time zones and daylight saving" table.
    #[test]
    fn readme_time_zone_examples() {
        use chrono_tz::{America, Australia, Europe, Pacific};
        let cases: &[(&str, Tz, &str, &[&str])] = &[
            (
                "46 2 * * *",
                Pacific::Chatham,
                "2027-09-25T12:00:00Z",
                &["2027-09-25T14:00:00Z"],
            ),
            (
                "30 1 * * *",
                Australia::Lord_Howe,
                "2027-04-03T12:00:00Z",
                &["2027-04-03T14:30:00Z", "2027-04-04T15:00:00Z"],
            ),
            (
                "51 23 * * *",
                America::Santiago,
                "2026-04-04T12:00:00Z",
                &["2026-04-05T02:51:00Z", "2026-04-06T03:51:00Z"],
            ),
            (
                "0,43 2 * * *",
                Europe::Berlin,
                "2026-03-28T12:00:00Z",
                &["2026-03-29T01:00:00Z", "2026-03-30T00:00:00Z"],
            ),
        ];
        for (expr, tz, after, want) in cases {
            let want: Vec<_> = want.iter().map(|w| utc(w)).collect();
            assert_eq!(cron(expr).upcoming(utc(after), *tz, want.len()), want, "{expr} in {tz}");
        }
    }

    #[test]
    fn restricted_day_fields() {
        // A day field is restricted unless it is exactly `*`: `*/2` restricts, so odd days OR Mondays.
        let c = cron("0 0 */2 * 1");
        assert!(c.days_either());
        assert_eq!(
            c.upcoming(utc("2026-06-01T00:00:00Z"), Tz::UTC, 4), // Monday 1 June
            vec![
                utc("2026-06-03T00:00:00Z"),
                utc("2026-06-05T00:00:00Z"),
                utc("2026-06-07T00:00:00Z"),
                utc("2026-06-08T00:00:00Z"), // a Monday
            ]
        );
        assert_eq!(
            cron("0 0 13 * 5").either_day_words().as_deref(),
            Some("on day 13 of the month or on Fridays")
        );
        assert_eq!(
            c.either_day_words().as_deref(),
            Some("on days 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31 of the month or on Mondays")
        );
        assert_eq!(
            cron("0 0 1-7,15 * SAT,SUN").either_day_words().as_deref(),
            Some("on days 1-7, 15 of the month or on Sundays or Saturdays")
        );
        assert!(!cron("0 0 * * 1").days_either());
        assert!(!cron("0 0 13 * *").days_either());
    }

    #[test]
    fn latest_at_or_before() {
        let c = cron("0 23 * * 6");
        assert_eq!(
            c.latest_at_or_before(utc("2026-05-02T22:00:00Z"), London),
            Some(utc("2026-05-02T22:00:00Z"))
        );
        assert_eq!(
            c.latest_at_or_before(utc("2026-05-02T21:59:59Z"), London),
            Some(utc("2026-04-25T22:00:00Z"))
        );
    }

    #[test]
    fn execute_at_table() {
        let cases: &[(&str, Tz, &str)] = &[
            ("2026-05-01T23:00", London, "2026-05-01T22:00:00Z"),
            ("2026-01-10T09:15", Tz::UTC, "2026-01-10T09:15:00Z"),
            ("2026-03-29T01:30", London, "2026-03-29T01:00:00Z"), // gap: 02:00 BST
            ("2026-10-25T01:30", London, "2026-10-25T00:30:00Z"), // repeated: first (BST)
        ];
        for (value, tz, want) in cases {
            assert_eq!(resolve_local_time(value, *tz), Ok(utc(want)), "{value}");
        }
        for bad in [
            "2026-05-01 23:00",
            "2026-05-01T23:00:00",
            "2026-02-30T10:00",
            "2026-05-01T23:00Z",
            "tomorrow",
        ] {
            assert!(resolve_local_time(bad, Tz::UTC).is_err(), "{bad}");
        }
    }

    #[test]
    fn zones() {
        assert_eq!(parse_zone(None), Ok(Tz::UTC));
        assert_eq!(parse_zone(Some("Europe/London")), Ok(London));
        assert!(parse_zone(Some("Mars/Olympus"))
            .unwrap_err()
            .to_string()
            .contains("IANA"));
    }
}
