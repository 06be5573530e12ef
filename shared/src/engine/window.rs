//! Resource upgrade windows, and whether they let a group start upgrades (spec §7's "gate"; in
//! code "gate" is kept for signal gates, §13.3).
//!
//! A window is active at t when some firing s of its schedule has s ≤ t < s + duration. Durations
//! are elapsed time. The gate: no windows → open; only allow → open while an allow is active; only
//! deny → open unless a deny is active; both → open while an allow is active and no deny is.

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;

use super::cron::{parse_zone, CronError, CronSchedule, TimeError};
use super::localtime;
use crate::api::{UpgradeWindow, WindowKind};

/// How far ahead a group's windows are searched for their next change.
pub const SEARCH_HORIZON_DAYS: i64 = 400;
/// At most this many window boundaries are walked per search (a window that opens every minute
/// still gets several days of look-ahead).
const MAX_BOUNDARY_STEPS: usize = 20_000;

/// Why a window is unusable, with the field it concerns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    #[error("schedule: {0}")]
    Schedule(#[from] CronError),
    #[error("timeZone: {0}")]
    Zone(#[from] TimeError),
    #[error("duration: {0}")]
    Duration(String),
}

impl WindowError {
    /// The field of the window the error concerns.
    pub fn field(&self) -> &'static str {
        match self {
            WindowError::Schedule(_) => "schedule",
            WindowError::Zone(_) => "timeZone",
            WindowError::Duration(_) => "duration",
        }
    }

    /// The message without the field prefix.
    pub fn detail(&self) -> String {
        match self {
            WindowError::Schedule(e) => e.to_string(),
            WindowError::Zone(e) => e.to_string(),
            WindowError::Duration(e) => e.clone(),
        }
    }
}

/// Parses a Go duration (`4h`, `30m`, `1h30m`, `1.5h`, `90s`) with Go's `time.ParseDuration`
/// rules, as the API server's CEL `duration()` does: an optional sign, then numbers (decimal
/// fractions allowed) each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); at most
/// 2562047h47m16.854775807s. The duration must be positive.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = parse_go_nanos(s)
        .map_err(|why| format!("{s:?} is not a duration such as \"4h\", \"30m\" or \"1h30m\": {why}"))?;
    if nanos <= 0 {
        return Err(format!("{s:?} must be greater than zero"));
    }
    Ok(Duration::nanoseconds(nanos))
}

/// A positive Go duration as written (details and events quote the text) and as parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenDuration {
    pub value: Duration,
    pub written: String,
}

impl WrittenDuration {
    pub fn parse(written: &str) -> Result<WrittenDuration, String> {
        Ok(WrittenDuration {
            value: parse_go_duration(written)?,
            written: written.to_string(),
        })
    }
}

/// Go's `time.ParseDuration`, in nanoseconds. Written here rather than borrowed: the parser in
/// kube-core panics on values past the range (found by `make fuzz`).
fn parse_go_nanos(s: &str) -> Result<i64, &'static str> {
    let (negative, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err("empty");
    }
    // Accumulated in u128 and checked against i64's range after every term.
    let limit: u128 = if negative { 1u128 << 63 } else { i64::MAX as u128 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after) = rest.split_at(int_len);
        let (frac_digits, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err("expected a number");
        }
        let unit_len = after.bytes().take_while(|b| !b.is_ascii_digit() && *b != b'.').count();
        let (unit, after) = after.split_at(unit_len);
        let unit_nanos: u128 = match unit {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err("missing unit"),
            _ => return Err("unknown unit (use ns, us, ms, s, m or h)"),
        };
        let mut term: u128 = 0;
        for d in int_digits.bytes() {
            term = term * 10 + u128::from(d - b'0');
            if term > limit {
                return Err("out of range (at most 2562047h)");
            }
        }
        term *= unit_nanos;
        // Fraction digits beyond nanosecond precision cannot change the result.
        let mut scale = unit_nanos;
        for d in frac_digits.bytes().take(30) {
            scale /= 10;
            term += u128::from(d - b'0') * scale;
        }
        total += term;
        if total > limit {
            return Err("out of range (at most 2562047h)");
        }
        rest = after;
    }
    let magnitude = i128::try_from(total).map_err(|_| "out of range (at most 2562047h)")?;
    i64::try_from(if negative { -magnitude } else { magnitude }).map_err(|_| "out of range (at most 2562047h)")
}

/// `start + length`, saturating at the end of representable time rather than panicking.
fn end_of(start: DateTime<Utc>, length: Duration) -> DateTime<Utc> {
    start.checked_add_signed(length).unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// A compiled window.
#[derive(Debug, Clone)]
pub struct Window {
    pub kind: WindowKind,
    pub schedule: CronSchedule,
    pub zone: Tz,
    pub duration: Duration,
}

impl Window {
    pub fn compile(w: &UpgradeWindow) -> Result<Window, WindowError> {
        Ok(Window {
            kind: w.kind,
            schedule: w.schedule.parse()?,
            zone: parse_zone(w.time_zone.as_deref())?,
            duration: parse_go_duration(&w.duration).map_err(WindowError::Duration)?,
        })
    }

    /// The start of the opening that covers `t`, if the window is active at `t`.
    fn covering_start(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        // An opening covers t when it starts in (t - duration, t]; the latest such start is the
        // one whose opening lasts longest.
        let lower = t.checked_sub_signed(self.duration).unwrap_or(DateTime::<Utc>::MIN_UTC);
        self.schedule.latest_between(lower, t, self.zone)
    }

    pub fn is_active(&self, t: DateTime<Utc>) -> bool {
        self.covering_start(t).is_some()
    }

    /// The first instant in `(t, horizon]` at which `is_active` changes, if any within the step
    /// budget.
    fn next_change(&self, t: DateTime<Utc>, horizon: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let starts = |from| localtime::firings(&self.schedule, self.zone, from, Some(horizon));
        let Some(start) = self.covering_start(t) else {
            return starts(t).find(|s| *s > t);
        };
        // Active: the openings that overlap this one extend it; it ends at the first instant
        // no opening covers. One sweep over the starts that follow.
        let mut end = end_of(start, self.duration);
        let mut steps = 0;
        for s in starts(start).filter(|s| *s > start) {
            if s > end {
                return Some(end);
            }
            end = end.max(end_of(s, self.duration));
            steps += 1;
            if steps == MAX_BOUNDARY_STEPS {
                return None; // still active as far as the budget reaches: no change found
            }
        }
        // No start in (start, horizon] beyond those seen: the last opening's end, if in reach.
        (end <= horizon).then_some(end)
    }
}

/// A period during which nothing may start, from outside the group's windows: an UpgradeFreeze's
/// one-off or recurring period (spec §13.5). It gates as a deny window does.
#[derive(Debug, Clone)]
pub enum DenyPeriod {
    /// `[start, end)`.
    Once { start: DateTime<Utc>, end: DateTime<Utc> },
    /// A recurring period: a deny window.
    Recurring(Window),
}

impl DenyPeriod {
    pub fn is_active(&self, t: DateTime<Utc>) -> bool {
        match self {
            DenyPeriod::Once { start, end } => *start <= t && t < *end,
            DenyPeriod::Recurring(w) => w.is_active(t),
        }
    }

    /// The first instant in `(t, horizon]` at which `is_active` changes.
    fn next_change(&self, t: DateTime<Utc>, horizon: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            DenyPeriod::Once { start, end } => [*start, *end].into_iter().find(|x| *x > t && *x <= horizon),
            DenyPeriod::Recurring(w) => w.next_change(t, horizon),
        }
    }
}

/// The windows of one rollout group, and the deny periods of the freezes that hold it: open or
/// closed at each instant by spec §7's rule.
#[derive(Debug, Clone, Default)]
pub struct Windows {
    windows: Vec<Window>,
    freezes: Vec<DenyPeriod>,
}

/// A window or a freeze period of a group's [`Windows`], as its sweep sees them.
enum Period<'a> {
    Window(&'a Window),
    Freeze(&'a DenyPeriod),
}

impl Period<'_> {
    fn is_active(&self, t: DateTime<Utc>) -> bool {
        match self {
            Period::Window(w) => w.is_active(t),
            Period::Freeze(f) => f.is_active(t),
        }
    }

    fn next_change(&self, t: DateTime<Utc>, horizon: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Period::Window(w) => w.next_change(t, horizon),
            Period::Freeze(f) => f.next_change(t, horizon),
        }
    }
}

/// A group's [`Windows`] at an instant (open or closed), with their next changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    pub open: bool,
    /// The next instant they open (after the next close, when open now). `None`: no windows,
    /// or it does not open within the search horizon.
    pub next_open: Option<DateTime<Utc>>,
    /// The next instant they close (after the next open, when closed now).
    pub next_close: Option<DateTime<Utc>>,
}

impl WindowState {
    /// The windows of a group that does not compile, as views of an invalid plan show it: closed,
    /// with no known change (the controller runs no such group).
    pub const INVALID: WindowState = WindowState {
        open: false,
        next_open: None,
        next_close: None,
    };
}

impl Windows {
    /// Compiles a group's windows; on failure returns each bad window's index and error.
    pub fn compile(windows: &[UpgradeWindow]) -> Result<Windows, Vec<(usize, WindowError)>> {
        let mut compiled = Vec::new();
        let mut errors = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            match Window::compile(w) {
                Ok(w) => compiled.push(w),
                Err(e) => errors.push((i, e)),
            }
        }
        if errors.is_empty() {
            Ok(Windows::of_windows(compiled))
        } else {
            Err(errors)
        }
    }

    /// Compiled windows, with no freeze yet.
    pub fn of_windows(windows: Vec<Window>) -> Windows {
        Windows {
            windows,
            freezes: Vec::new(),
        }
    }

    pub fn windows(&self) -> &[Window] {
        &self.windows
    }

    /// These windows, also closed while any of `periods` is active.
    pub fn with_freezes(mut self, periods: impl IntoIterator<Item = DenyPeriod>) -> Windows {
        self.freezes.extend(periods);
        self
    }

    pub fn is_open(&self, t: DateTime<Utc>) -> bool {
        let active: Vec<bool> = self.periods().map(|p| p.is_active(t)).collect();
        self.open_with(&active)
    }

    /// Every window, then every freeze period, as things that are active or not.
    fn periods(&self) -> impl Iterator<Item = Period<'_>> {
        self.windows
            .iter()
            .map(Period::Window)
            .chain(self.freezes.iter().map(Period::Freeze))
    }

    /// The first instant after `t` at which `is_open` differs from `is_open(t)`, within
    /// [`SEARCH_HORIZON_DAYS`].
    pub fn next_change(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if self.windows.is_empty() && self.freezes.is_empty() {
            return None;
        }
        let horizon = end_of(t, Duration::days(SEARCH_HORIZON_DAYS));
        // Each period's state and its next change, advanced only when the sweep reaches it.
        let periods: Vec<Period<'_>> = self.periods().collect();
        let mut active: Vec<bool> = periods.iter().map(|p| p.is_active(t)).collect();
        let mut next: Vec<Option<DateTime<Utc>>> = periods.iter().map(|p| p.next_change(t, horizon)).collect();
        let initial = self.open_with(&active);
        for _ in 0..MAX_BOUNDARY_STEPS {
            let at = next.iter().flatten().min().copied()?;
            for (i, p) in periods.iter().enumerate() {
                if next[i] == Some(at) {
                    active[i] = !active[i];
                    next[i] = p.next_change(at, horizon);
                }
            }
            if self.open_with(&active) != initial {
                return Some(at);
            }
        }
        None
    }

    /// The gate rule of spec §7 over each window's state (`active`: windows, then freeze
    /// periods, as [`Windows::periods`] lists them); an active freeze closes it as a deny window.
    /// Whether the windows alone, without the freezes, let starts begin at `t` (a freeze is a
    /// reason of its own, spec §14.1).
    pub fn windows_open(&self, t: DateTime<Utc>) -> bool {
        let active: Vec<bool> = self
            .windows
            .iter()
            .map(|w| w.is_active(t))
            .chain(self.freezes.iter().map(|_| false))
            .collect();
        self.open_with(&active)
    }

    fn open_with(&self, active: &[bool]) -> bool {
        if active[self.windows.len()..].iter().any(|on| *on) {
            return false;
        }
        let mut has_allow = false;
        let mut allowed = false;
        for (w, on) in self.windows.iter().zip(active) {
            match w.kind {
                WindowKind::Allow => {
                    has_allow = true;
                    allowed |= on;
                }
                WindowKind::Deny if *on => return false,
                WindowKind::Deny => {}
            }
        }
        !has_allow || allowed
    }

    /// Open or closed at `t`, and the next open and close instants.
    pub fn state(&self, t: DateTime<Utc>) -> WindowState {
        let open = self.is_open(t);
        let first = self.next_change(t);
        let second = first.and_then(|c| self.next_change(c));
        if open {
            WindowState {
                open,
                next_close: first,
                next_open: second,
            }
        } else {
            WindowState {
                open,
                next_open: first,
                next_close: second,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn w(kind: WindowKind, schedule: &str, duration: &str, tz: Option<&str>) -> UpgradeWindow {
        UpgradeWindow {
            kind,
            schedule: schedule.into(),
            duration: duration.into(),
            time_zone: tz.map(Into::into),
        }
    }

    fn gate(ws: &[UpgradeWindow]) -> Windows {
        Windows::compile(ws).unwrap()
    }

    use WindowKind::{Allow, Deny};

    #[test]
    fn durations() {
        assert_eq!(parse_go_duration("4h"), Ok(Duration::hours(4)));
        assert_eq!(parse_go_duration("1h30m"), Ok(Duration::minutes(90)));
        assert_eq!(parse_go_duration("90s"), Ok(Duration::seconds(90)));
        // Go's time.ParseDuration table (the subset a window can use: positive values).
        let good: &[(&str, i64)] = &[
            ("1.5h", 5_400_000_000_000),
            ("+5s", 5_000_000_000),
            (".5s", 500_000_000),
            ("1.s", 1_000_000_000),
            ("1h1m1s1ms1us1ns", 3_661_001_001_001),
            ("3µs", 3_000),
            ("3μs", 3_000),
            ("1.0000000001s", 1_000_000_000),
            ("2562047h47m16.854775807s", i64::MAX),
            ("9223372036854775807ns", i64::MAX),
        ];
        for (text, nanos) in good {
            assert_eq!(parse_go_duration(text), Ok(Duration::nanoseconds(*nanos)), "{text:?}");
        }
        // Out of range, malformed, not positive. The first was a panic inside kube-core's parser
        // (found by `make fuzz`, kept in fuzz/regressions/duration/).
        for bad in [
            "9223372036854775807h3,m3,m3,m",
            "2562048h",
            "9223372036854775808ns",
            "99999999999999999999999999999h",
            "0s",
            "0",
            "-1h",
            "-0",
            "4 hours",
            "",
            "1d",
            "h",
            ".h",
            "1",
            "1h30",
            "+",
            "-",
        ] {
            assert!(parse_go_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn seed_window_across_london_daylight_saving() {
        // "0 22 * * *" for 4h in Europe/London: 4 elapsed hours even across each change.
        let g = gate(&[w(Allow, "0 22 * * *", "4h", Some("Europe/London"))]);
        let cases: &[(&str, bool)] = &[
            // Night of 28→29 March: opens 22:00 GMT (22:00Z), closes 4h later at 02:00Z = 03:00 BST.
            ("2026-03-28T21:59:59Z", false),
            ("2026-03-28T22:00:00Z", true),
            ("2026-03-29T01:59:59Z", true),
            ("2026-03-29T02:00:00Z", false),
            // Night of 24→25 October: opens 22:00 BST (21:00Z), closes at 01:00Z = 01:00 GMT.
            ("2026-10-24T20:59:59Z", false),
            ("2026-10-24T21:00:00Z", true),
            ("2026-10-25T00:59:59Z", true),
            ("2026-10-25T01:00:00Z", false),
        ];
        for (t, want) in cases {
            assert_eq!(g.is_open(utc(t)), *want, "{t}");
        }
        assert_eq!(
            g.state(utc("2026-03-28T12:00:00Z")),
            WindowState {
                open: false,
                next_open: Some(utc("2026-03-28T22:00:00Z")),
                next_close: Some(utc("2026-03-29T02:00:00Z")),
            }
        );
        assert_eq!(
            g.state(utc("2026-10-24T23:00:00Z")),
            WindowState {
                open: true,
                next_close: Some(utc("2026-10-25T01:00:00Z")),
                next_open: Some(utc("2026-10-25T22:00:00Z")), // 22:00 GMT
            }
        );
    }

    /// Window starts follow the same local-time rules as triggers (issue 15).
    #[test]
    fn window_starts_follow_the_trigger_rules() {
        // Berlin jumps 02:00 -> 03:00 on Sunday 2026-03-29: the 02:00 and 02:43 starts do not
        // exist that day; both open the window at the first instant after the gap (01:00Z).
        let berlin = gate(&[w(Allow, "0,43 2 * * 0,6", "4h", Some("Europe/Berlin"))]);
        assert_eq!(
            berlin.state(utc("2026-03-28T12:00:00Z")),
            WindowState {
                open: false,
                next_open: Some(utc("2026-03-29T01:00:00Z")),
                next_close: Some(utc("2026-03-29T05:00:00Z")),
            }
        );
        // New York goes back 02:00 -> 01:00 on Sunday 2027-11-07: the 01:11 and 01:41 starts
        // happen once (EDT), so the deny reopens at 06:41Z until 02:11 EST (07:11Z).
        let new_york = gate(&[w(Deny, "11,41 1-4 * * 0,6", "1h", Some("America/New_York"))]);
        assert_eq!(
            new_york.state(utc("2027-11-07T04:00:00Z")),
            WindowState {
                open: true,
                next_close: Some(utc("2027-11-07T05:11:00Z")),
                next_open: Some(utc("2027-11-07T06:41:00Z")),
            }
        );
        assert!(new_york.is_open(utc("2027-11-07T06:41:00Z")));
        // README's example: Sundays only, the same answer.
        let sundays = gate(&[w(Deny, "11,41 1-4 * * 0", "1h", Some("America/New_York"))]);
        assert_eq!(
            sundays.state(utc("2027-11-07T04:00:00Z")),
            new_york.state(utc("2027-11-07T04:00:00Z"))
        );
        assert!(!new_york.is_open(utc("2027-11-07T07:11:00Z")));
    }

    #[test]
    fn a_window_active_past_the_step_budget_never_changes() {
        // Openings every minute for an hour: always active. The sweep's budget runs out long
        // before the horizon; that is "no change", never the last opening's end.
        let deny = gate(&[w(Deny, "* * * * *", "1h", None)]);
        let s = deny.state(utc("2026-06-01T12:00:00Z"));
        assert_eq!(
            s,
            WindowState {
                open: false,
                next_open: None,
                next_close: None
            }
        );
        let allow = gate(&[w(Allow, "* * * * *", "1h", None)]);
        assert_eq!(allow.state(utc("2026-06-01T12:00:00Z")).next_close, None);
    }

    #[test]
    fn gate_table() {
        // Allow 09:00–17:00 UTC on weekdays; deny 12:00–13:00 UTC every day.
        let allow = w(Allow, "0 9 * * 1-5", "8h", None);
        let deny = w(Deny, "0 12 * * *", "1h", None);
        // 2026-03-02 is a Monday, 2026-03-07 a Saturday.
        let cases: &[(&str, Vec<UpgradeWindow>, &str, bool)] = &[
            ("no windows: open", vec![], "2026-03-07T03:00:00Z", true),
            ("allow only, inside", vec![allow.clone()], "2026-03-02T10:00:00Z", true),
            (
                "allow only, outside",
                vec![allow.clone()],
                "2026-03-02T18:00:00Z",
                false,
            ),
            (
                "allow only, weekend",
                vec![allow.clone()],
                "2026-03-07T10:00:00Z",
                false,
            ),
            ("deny only, outside", vec![deny.clone()], "2026-03-02T10:00:00Z", true),
            ("deny only, inside", vec![deny.clone()], "2026-03-02T12:30:00Z", false),
            (
                "both, allow without deny",
                vec![allow.clone(), deny.clone()],
                "2026-03-02T10:00:00Z",
                true,
            ),
            (
                "both, deny wins",
                vec![allow.clone(), deny.clone()],
                "2026-03-02T12:30:00Z",
                false,
            ),
            (
                "both, neither active",
                vec![allow.clone(), deny.clone()],
                "2026-03-07T10:00:00Z",
                false,
            ),
            ("start is inclusive", vec![allow.clone()], "2026-03-02T09:00:00Z", true),
            ("end is exclusive", vec![allow.clone()], "2026-03-02T17:00:00Z", false),
        ];
        for (name, ws, t, want) in cases {
            assert_eq!(gate(ws).is_open(utc(t)), *want, "{name}");
        }
    }

    #[test]
    fn next_open_and_close_with_deny_inside_allow() {
        let g = gate(&[w(Allow, "0 9 * * 1-5", "8h", None), w(Deny, "0 12 * * *", "1h", None)]);
        let s = g.state(utc("2026-03-02T10:00:00Z"));
        assert_eq!(
            s,
            WindowState {
                open: true,
                next_close: Some(utc("2026-03-02T12:00:00Z")),
                next_open: Some(utc("2026-03-02T13:00:00Z"))
            }
        );
        // Friday evening: next open is Monday 09:00.
        let s = g.state(utc("2026-03-06T18:00:00Z"));
        assert_eq!(s.next_open, Some(utc("2026-03-09T09:00:00Z")));
        assert_eq!(s.next_close, Some(utc("2026-03-09T12:00:00Z")));
    }

    #[test]
    fn overlapping_openings_chain() {
        // Opens hourly for 90 minutes: always active once it started.
        let g = gate(&[w(Allow, "0 * * * *", "90m", None)]);
        let s = g.state(utc("2026-03-02T10:15:00Z"));
        assert!(s.open);
        assert_eq!(s.next_close, None, "never closes within the search budget");
        // Opens hourly for 30 minutes.
        let g = gate(&[w(Allow, "0 * * * *", "30m", None)]);
        assert_eq!(
            g.state(utc("2026-03-02T10:45:00Z")),
            WindowState {
                open: false,
                next_open: Some(utc("2026-03-02T11:00:00Z")),
                next_close: Some(utc("2026-03-02T11:30:00Z"))
            }
        );
    }

    #[test]
    fn deny_that_covers_everything_never_opens() {
        let g = gate(&[w(Deny, "0 0 * * *", "24h", None)]);
        let s = g.state(utc("2026-03-02T10:15:00Z"));
        assert_eq!(
            s,
            WindowState {
                open: false,
                next_open: None,
                next_close: None
            }
        );
    }

    #[test]
    fn no_windows_never_changes() {
        assert_eq!(
            gate(&[]).state(utc("2026-03-02T10:15:00Z")),
            WindowState {
                open: true,
                next_open: None,
                next_close: None
            }
        );
    }

    #[test]
    fn errors_name_the_field() {
        let errs = Windows::compile(&[
            w(Allow, "0 22 * * *", "4h", None),
            w(Allow, "0 22 * *", "4h", None),
            w(Deny, "0 1 * * *", "0s", Some("Nowhere/Land")),
        ])
        .unwrap_err();
        assert_eq!(errs.len(), 2);
        assert_eq!((errs[0].0, errs[0].1.field()), (1, "schedule"));
        assert_eq!(errs[1].0, 2);
    }
}
