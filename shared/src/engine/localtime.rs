//! The one place where local wall-clock times become instants (spec §6). Triggers, `executeAt`,
//! window starts and freeze periods all go through [`firings`].
//!
//! Two rules, both defined literally on the zone's wall clock:
//! - **Fixed local times** (the schedule names its hours): a local time `L` fires at the first
//!   instant at which the wall clock reads `L` or later. So a time inside a spring gap fires at
//!   the first instant after the gap, and a time that occurs twice fires once, at its first
//!   occurrence — whatever the size of the change and whenever it happens (30 minutes in
//!   Australia/Lord_Howe, at midnight in America/Santiago, at 02:45 in Pacific/Chatham).
//! - **Wall clock** (a wildcard hour: `*` or `*/n`): every instant whose wall-clock reading
//!   matches fires; skipped readings never fire and repeated readings fire each time.
//!
//! Evaluation sweeps the zone's segments of constant UTC offset. Offsets are read from the zone
//! database by probing; transitions are located to the second by bisection.

use chrono::{DateTime, Duration, NaiveDateTime, Offset, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

/// How local times turn into instants around a change of UTC offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dst {
    /// Fixed local times: each fires once, at the first instant the clock reads it or later.
    FirstInstant,
    /// Every instant whose wall-clock reading matches.
    WallClock,
}

/// A set of local wall-clock minutes (a cron expression, or one `executeAt` time).
pub trait LocalPattern {
    /// The first local minute of the set at or after `from` (rounded up to a whole minute) and
    /// no later than `limit`.
    fn next_local(&self, from: NaiveDateTime, limit: NaiveDateTime) -> Option<NaiveDateTime>;
    fn dst(&self) -> Dst;
}

/// UTC offsets span −12:00 to +14:00, so no change of offset moves the wall clock by more than
/// this: looking back this far finds every wall-clock reading that may already have passed.
const MAX_OFFSET_JUMP: Duration = Duration::hours(26);
/// Offsets are probed this far apart; no zone changes its offset twice within it.
const PROBE_STEP: Duration = Duration::hours(3);

fn offset_at(tz: Tz, t: DateTime<Utc>) -> Duration {
    Duration::seconds(i64::from(
        tz.offset_from_utc_datetime(&t.naive_utc()).fix().local_minus_utc(),
    ))
}

/// The wall-clock reading at `t` under `offset` (saturating at the ends of the calendar).
fn wall(t: DateTime<Utc>, offset: Duration) -> NaiveDateTime {
    let saturated = if offset > Duration::zero() {
        NaiveDateTime::MAX
    } else {
        NaiveDateTime::MIN
    };
    t.naive_utc().checked_add_signed(offset).unwrap_or(saturated)
}

/// The instant at which wall-clock reading `local` is shown under `offset`.
fn instant(local: NaiveDateTime, offset: Duration) -> Option<DateTime<Utc>> {
    local.checked_sub_signed(offset).map(|t| t.and_utc())
}

/// Walks a zone's segments of constant offset forward from an instant.
struct Segments {
    tz: Tz,
    /// Start of the current segment (or the instant the walk began).
    start: DateTime<Utc>,
    offset: Duration,
    /// Known: no transition in (start, clear_until].
    clear_until: DateTime<Utc>,
    /// The end of the current segment, once found.
    end: Option<DateTime<Utc>>,
}

impl Segments {
    fn new(tz: Tz, from: DateTime<Utc>) -> Segments {
        Segments {
            tz,
            start: from,
            offset: offset_at(tz, from),
            // Transitions fall on whole seconds: probing whole seconds finds them exactly.
            clear_until: from.with_nanosecond(0).unwrap_or(from),
            end: None,
        }
    }

    /// The first instant after the current segment's start with another offset, looking no
    /// further than `limit`. `None`: the segment reaches past `limit`.
    fn end_before(&mut self, limit: DateTime<Utc>) -> Option<DateTime<Utc>> {
        if let Some(end) = self.end {
            return (end <= limit).then_some(end);
        }
        while self.clear_until < limit {
            let probe = self
                .clear_until
                .checked_add_signed(PROBE_STEP)
                .unwrap_or(DateTime::<Utc>::MAX_UTC)
                .min(limit);
            if offset_at(self.tz, probe) != self.offset {
                // Bisect (clear_until, probe] to the second.
                let (mut same, mut other) = (self.clear_until, probe);
                while other - same > Duration::seconds(1) {
                    let mid = same + (other - same) / 2;
                    let mid = mid.with_nanosecond(0).unwrap_or(mid);
                    if mid <= same {
                        break;
                    }
                    if offset_at(self.tz, mid) == self.offset {
                        same = mid;
                    } else {
                        other = mid;
                    }
                }
                self.end = Some(other);
                return Some(other);
            }
            self.clear_until = probe;
        }
        None
    }

    /// Moves to the segment that starts at the current one's end.
    fn advance(&mut self, end: DateTime<Utc>) {
        self.start = end;
        self.offset = offset_at(self.tz, end);
        self.clear_until = end;
        self.end = None;
    }
}

/// The firings of `pattern` in `tz` at or after `from`, in order, up to `until` (`None`: as
/// far as the pattern's own search goes).
pub fn firings<P: LocalPattern>(
    pattern: &P,
    tz: Tz,
    from: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> Firings<'_, P> {
    let until = until.unwrap_or(DateTime::<Utc>::MAX_UTC);
    // A reading shown at or before `until` is at most this far past it, whatever the offset.
    let local_limit = wall(until, MAX_OFFSET_JUMP);
    let segments = Segments::new(tz, from);
    let cursor = match pattern.dst() {
        // Readings at or after the highest one shown before `from` have not fired yet.
        Dst::FirstInstant => {
            let lookback = from.checked_sub_signed(MAX_OFFSET_JUMP).unwrap_or(from);
            let mut past = Segments::new(tz, lookback);
            let mut highest = wall(lookback, past.offset);
            loop {
                match past.end_before(from) {
                    Some(end) => {
                        highest = highest.max(wall(end, past.offset));
                        if end >= from {
                            break;
                        }
                        past.advance(end);
                    }
                    None => {
                        highest = highest.max(wall(from, past.offset));
                        break;
                    }
                }
            }
            pattern.next_local(highest, local_limit)
        }
        Dst::WallClock => pattern.next_local(wall(from, segments.offset), local_limit),
    };
    Firings {
        pattern,
        segments,
        cursor,
        until,
        local_limit,
        last: None,
    }
}

/// Iterator of [`firings`].
pub struct Firings<'p, P> {
    pattern: &'p P,
    segments: Segments,
    /// The next local reading to place.
    cursor: Option<NaiveDateTime>,
    until: DateTime<Utc>,
    local_limit: NaiveDateTime,
    last: Option<DateTime<Utc>>,
}

impl<P: LocalPattern> Iterator for Firings<'_, P> {
    type Item = DateTime<Utc>;

    fn next(&mut self) -> Option<DateTime<Utc>> {
        loop {
            let local = self.cursor?;
            let seg = &mut self.segments;
            let shown_from = wall(seg.start, seg.offset);
            let at = if local < shown_from {
                // Skipped by a forward change the sweep just crossed (only fixed times get here:
                // the wall-clock rule re-starts the cursor at each segment).
                Some(seg.start)
            } else {
                // Past the end of representable time: nothing more fires.
                let candidate = instant(local, seg.offset)?;
                match seg.end_before(candidate) {
                    Some(end) => {
                        seg.advance(end);
                        if self.pattern.dst() == Dst::WallClock {
                            self.cursor = self.pattern.next_local(wall(end, seg.offset), self.local_limit);
                        }
                        None
                    }
                    None => Some(candidate),
                }
            };
            let Some(at) = at else { continue };
            if at > self.until {
                self.cursor = None;
                return None;
            }
            self.cursor = local
                .checked_add_signed(Duration::minutes(1))
                .and_then(|n| self.pattern.next_local(n, self.local_limit));
            if self.last == Some(at) {
                continue; // several skipped readings fire once, at the same instant
            }
            self.last = Some(at);
            return Some(at);
        }
    }
}

/// The first firing strictly after `t`.
pub fn next_after<P: LocalPattern>(pattern: &P, tz: Tz, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    firings(pattern, tz, t, None).find(|f| *f > t)
}

/// The last firing in `(lower, t]`, or at or before `t` when `lower` is `None` (searched back
/// as far as [`SEARCH_BACK_DAYS`]).
pub fn latest_at_or_before<P: LocalPattern>(
    pattern: &P,
    tz: Tz,
    t: DateTime<Utc>,
    lower: Option<DateTime<Utc>>,
) -> Option<DateTime<Utc>> {
    let floor = lower.unwrap_or_else(|| t.checked_sub_signed(Duration::days(SEARCH_BACK_DAYS)).unwrap_or(t));
    // Widening spans: dense schedules are answered from the last hour, sparse ones from years.
    for span in [
        Duration::hours(1),
        Duration::days(1),
        Duration::days(16),
        Duration::days(400),
        Duration::days(SEARCH_BACK_DAYS),
    ] {
        let from = t.checked_sub_signed(span).unwrap_or(floor).max(floor);
        let found = firings(pattern, tz, from, Some(t))
            .filter(|f| lower.is_none_or(|l| *f > l))
            .last();
        if found.is_some() || from <= floor {
            return found;
        }
    }
    None
}

/// How far back [`latest_at_or_before`] looks without a lower bound (past the eight years
/// between two 29ths of February around a non-leap century year).
pub const SEARCH_BACK_DAYS: i64 = 12 * 366;

/// One local time (an `executeAt`), as a pattern.
pub struct OneLocalTime(pub NaiveDateTime);

impl LocalPattern for OneLocalTime {
    fn next_local(&self, from: NaiveDateTime, limit: NaiveDateTime) -> Option<NaiveDateTime> {
        (round_up_to_minute(from) <= self.0 && self.0 <= limit).then_some(self.0)
    }
    fn dst(&self) -> Dst {
        Dst::FirstInstant
    }
}

/// The instant a fixed local time fires at: the first instant the clock reads it or later.
pub fn resolve(local: NaiveDateTime, tz: Tz) -> Option<DateTime<Utc>> {
    let from = local.and_utc().checked_sub_signed(MAX_OFFSET_JUMP)?;
    firings(&OneLocalTime(local), tz, from, None).next()
}

/// `t` rounded up to a whole minute.
pub fn round_up_to_minute(t: NaiveDateTime) -> NaiveDateTime {
    let floor = t.with_second(0).and_then(|x| x.with_nanosecond(0)).unwrap_or(t);
    if floor == t {
        t
    } else {
        floor.checked_add_signed(Duration::minutes(1)).unwrap_or(floor)
    }
}
