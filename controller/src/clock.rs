//! The controller's clock: every decision reads `now` here.
//!
//! Production reads the system clock. Tests may start the clock at a chosen instant
//! (`--clock-start`, hidden), so that a daylight-saving change of any zone can be lived through
//! on a real control plane, and run it faster than real time (`--clock-rate`, hidden), so that
//! cron minutes pass in seconds. Waits for a decision-clock instant are converted to real time
//! here ([`until`]). Leader election and event timestamps keep the system clock: they are
//! compared with other processes'.

use std::sync::OnceLock;
use std::time::Instant;

use chrono::{DateTime, Utc};

/// Where the decision clock started, when it started and how fast it runs.
struct Shifted {
    at: DateTime<Utc>,
    since: Instant,
    rate: u32,
}

static SHIFT: OnceLock<Shifted> = OnceLock::new();

/// Starts the clock at `at` (the system time when `None`), running `rate` times as fast as real
/// time (once, at start-up).
pub fn start_at(at: Option<DateTime<Utc>>, rate: u32) {
    let _ = SHIFT.set(Shifted {
        at: at.unwrap_or_else(Utc::now),
        since: Instant::now(),
        rate: rate.max(1),
    });
}

pub fn now() -> DateTime<Utc> {
    match SHIFT.get() {
        Some(s) => s.at + chrono::Duration::from_std(s.since.elapsed().saturating_mul(s.rate)).unwrap_or_default(),
        None => Utc::now(),
    }
}

/// The real time until the decision clock shows `at` (zero when it is past).
pub fn until(at: DateTime<Utc>) -> std::time::Duration {
    real_wait(at, now(), SHIFT.get().map_or(1, |s| s.rate))
}

/// How long to wait in real time from decision-clock `now` to `at` on a clock `rate` times as fast.
fn real_wait(at: DateTime<Utc>, now: DateTime<Utc>, rate: u32) -> std::time::Duration {
    (at - now).to_std().unwrap_or_default() / rate.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fast_clock_waits_its_own_time_divided_by_its_rate() {
        let now = DateTime::UNIX_EPOCH;
        let minute = now + chrono::Duration::minutes(1);
        let secs = std::time::Duration::from_secs;
        for (rate, want) in [
            (1, secs(60)),
            (60, secs(1)),
            (120, std::time::Duration::from_millis(500)),
            (0, secs(60)),
        ] {
            assert_eq!(real_wait(minute, now, rate), want, "rate {rate}");
        }
        assert_eq!(real_wait(now, minute, 60), std::time::Duration::ZERO, "a past instant");
    }
}
