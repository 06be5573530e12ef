//! The controller's clock: every decision reads `now` here.
//!
//! Production reads the system clock. Tests may start the clock at a chosen instant
//! (`--clock-start`, hidden) from which it runs at real speed, so that a daylight-saving change of
//! any zone can be lived through in real time on a real control plane. Leader election and event
//! timestamps keep the system clock: they are compared with other processes'.

use std::sync::OnceLock;
use std::time::Instant;

use chrono::{DateTime, Utc};

static SHIFT: OnceLock<(DateTime<Utc>, Instant)> = OnceLock::new();

/// Starts the clock at `at` (once, at start-up).
pub fn start_at(at: DateTime<Utc>) {
    let _ = SHIFT.set((at, Instant::now()));
}

pub fn now() -> DateTime<Utc> {
    match SHIFT.get() {
        Some((at, since)) => *at + chrono::Duration::from_std(since.elapsed()).unwrap_or_default(),
        None => Utc::now(),
    }
}
