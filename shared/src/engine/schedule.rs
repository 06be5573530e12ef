//! A plan's triggers (spec §6): the `executeAt` instant and every `repeatSchedule` firing.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use super::cron::CronSchedule;

/// Longest plan name whose scheduled run names (`<plan>-YYYYMMDD-HHMM`) fit in 253 characters.
pub const MAX_SCHEDULED_PLAN_NAME: usize = 229;

/// A plan's compiled execution policy.
#[derive(Debug, Clone)]
pub struct Triggers {
    pub zone: Tz,
    pub execute_at: Option<DateTime<Utc>>,
    pub repeat: Option<CronSchedule>,
    /// `startingDeadline`: a trigger found later than this is missed, not run.
    pub starting_deadline: Option<super::window::WrittenDuration>,
}

/// What the controller should do about triggers now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriggerAction {
    /// Nothing is due.
    None,
    /// Create the run for this trigger instant.
    CreateRun(DateTime<Utc>),
    /// The plan is suspended: record this trigger as serviced without a run (no back-fill later).
    Skip(DateTime<Utc>),
    /// Found `late` after it was due, past `startingDeadline`: record it as serviced without a
    /// run, and say so (spec §6).
    Missed { at: DateTime<Utc>, late: chrono::Duration },
}

impl Triggers {
    /// The earliest trigger strictly after `now` (the plan's `nextRunAt`), ignoring an
    /// `executeAt` that precedes the plan's creation (it never fires).
    pub fn next_after(&self, now: DateTime<Utc>, created: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let once = self.execute_at.filter(|t| *t > now && *t >= created);
        let repeat = self.repeat.as_ref().and_then(|c| c.next_after(now, self.zone));
        once.into_iter().chain(repeat).min()
    }

    /// The plan's published `nextRunAt` (spec §3.2): the next trigger, absent while the plan is
    /// suspended (nothing will run then). The controller still wakes at [`Self::next_after`] to
    /// record skipped triggers.
    pub fn next_run_at(&self, now: DateTime<Utc>, created: DateTime<Utc>, suspended: bool) -> Option<DateTime<Utc>> {
        self.next_after(now, created).filter(|_| !suspended)
    }

    /// The next `n` triggers after `now`, in order.
    pub fn upcoming(&self, now: DateTime<Utc>, created: DateTime<Utc>, n: usize) -> Vec<DateTime<Utc>> {
        let mut out: Vec<DateTime<Utc>> = self
            .repeat
            .as_ref()
            .map(|c| c.upcoming(now, self.zone, n))
            .unwrap_or_default();
        out.extend(self.execute_at.filter(|t| *t > now && *t >= created));
        out.sort();
        out.dedup();
        out.truncate(n);
        out
    }

    /// The most recent trigger at or before `now`.
    pub fn latest_at_or_before(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let once = self.execute_at.filter(|t| *t <= now);
        let repeat = self.repeat.as_ref().and_then(|c| c.latest_at_or_before(now, self.zone));
        once.into_iter().chain(repeat).max()
    }

    /// The most recent due trigger T (T ≤ now, T > lastScheduledAt, T ≥ creation) and what to do
    /// with it. Older missed triggers are never back-filled.
    pub fn due(
        &self,
        now: DateTime<Utc>,
        created: DateTime<Utc>,
        last_scheduled: Option<DateTime<Utc>>,
        suspended: bool,
    ) -> TriggerAction {
        let Some(t) = self.latest_at_or_before(now) else {
            return TriggerAction::None;
        };
        if t < created || last_scheduled.is_some_and(|last| t <= last) {
            return TriggerAction::None;
        }
        if suspended {
            return TriggerAction::Skip(t);
        }
        let late = now - t;
        match &self.starting_deadline {
            Some(deadline) if late > deadline.value => TriggerAction::Missed { at: t, late },
            _ => TriggerAction::CreateRun(t),
        }
    }

    /// True when `executeAt` is set but precedes the plan's creation, so it never fires.
    pub fn execute_at_before_creation(&self, created: DateTime<Utc>) -> bool {
        self.execute_at.is_some_and(|t| t < created)
    }
}

/// A duration as Go writes one, to the second: `2h13m5s`, `45s`, `0s`.
pub fn go_duration(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    let (h, m, sec) = (s / 3600, (s % 3600) / 60, s % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if sec > 0 || out.is_empty() {
        out.push_str(&format!("{sec}s"));
    }
    out
}

/// Name of the scheduled run for trigger `t`: `<plan>-YYYYMMDD-HHMM` in UTC.
pub fn scheduled_run_name(plan: &str, t: DateTime<Utc>) -> String {
    format!("{plan}-{}", t.format("%Y%m%d-%H%M"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::UpgradeExecutionPolicy;

    fn triggers(policy: &UpgradeExecutionPolicy) -> Result<Triggers, Vec<crate::engine::Problem>> {
        crate::engine::compile::triggers(policy)
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn seed_policy() -> UpgradeExecutionPolicy {
        UpgradeExecutionPolicy {
            repeat_schedule: Some("0 23 * * 6".into()),
            execute_at: Some("2026-05-01T23:00".into()),
            time_zone: Some("Europe/London".into()),
            starting_deadline: None,
        }
    }

    #[test]
    fn seed_policy_next_runs() {
        let t = triggers(&seed_policy()).unwrap();
        let created = utc("2026-04-01T00:00:00Z");
        // executeAt 2026-05-01 23:00 BST is Friday 22:00Z; then Saturdays 23:00 BST.
        assert_eq!(
            t.upcoming(utc("2026-04-30T00:00:00Z"), created, 3),
            vec![
                utc("2026-05-01T22:00:00Z"),
                utc("2026-05-02T22:00:00Z"),
                utc("2026-05-09T22:00:00Z")
            ]
        );
        assert_eq!(
            t.next_after(utc("2026-05-01T22:00:00Z"), created),
            Some(utc("2026-05-02T22:00:00Z"))
        );
    }

    #[test]
    fn due_trigger_table() {
        let t = triggers(&seed_policy()).unwrap();
        let created = utc("2026-04-01T00:00:00Z");
        let cases: &[(&str, &str, Option<&str>, bool, TriggerAction)] = &[
            (
                "nothing fired yet",
                "2026-04-02T00:00:00Z",
                None,
                false,
                TriggerAction::None,
            ),
            (
                "first Saturday fires",
                "2026-04-04T22:00:30Z",
                None,
                false,
                TriggerAction::CreateRun(utc("2026-04-04T22:00:00Z")),
            ),
            (
                "already serviced",
                "2026-04-04T22:05:00Z",
                Some("2026-04-04T22:00:00Z"),
                false,
                TriggerAction::None,
            ),
            // Down for three weeks: only the most recent trigger fires, no back-fill.
            (
                "missed triggers not back-filled",
                "2026-04-26T10:00:00Z",
                Some("2026-04-04T22:00:00Z"),
                false,
                TriggerAction::CreateRun(utc("2026-04-25T22:00:00Z")),
            ),
            (
                "executeAt fires",
                "2026-05-01T22:01:00Z",
                Some("2026-04-25T22:00:00Z"),
                false,
                TriggerAction::CreateRun(utc("2026-05-01T22:00:00Z")),
            ),
            (
                "suspended: skipped",
                "2026-05-02T22:00:00Z",
                Some("2026-05-01T22:00:00Z"),
                true,
                TriggerAction::Skip(utc("2026-05-02T22:00:00Z")),
            ),
        ];
        for (name, now, last, suspended, want) in cases {
            assert_eq!(t.due(utc(now), created, last.map(utc), *suspended), *want, "{name}");
        }
    }

    #[test]
    fn triggers_before_creation_never_fire() {
        let t = triggers(&UpgradeExecutionPolicy {
            repeat_schedule: None,
            execute_at: Some("2026-01-01T00:00".into()),
            time_zone: None,
            starting_deadline: None,
        })
        .unwrap();
        let created = utc("2026-02-01T00:00:00Z");
        assert!(t.execute_at_before_creation(created));
        assert_eq!(
            t.due(utc("2026-02-02T00:00:00Z"), created, None, false),
            TriggerAction::None
        );
        assert_eq!(t.next_after(utc("2025-12-01T00:00:00Z"), created), None);
        // A schedule firing before creation is ignored too.
        let t = triggers(&UpgradeExecutionPolicy {
            repeat_schedule: Some("0 * * * *".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            t.due(utc("2026-02-01T00:30:00Z"), utc("2026-02-01T00:10:00Z"), None, false),
            TriggerAction::None
        );
    }

    #[test]
    fn next_run_at_is_absent_while_suspended() {
        let t = triggers(&seed_policy()).unwrap();
        let (now, created) = (utc("2026-04-30T00:00:00Z"), utc("2026-04-01T00:00:00Z"));
        assert_eq!(t.next_run_at(now, created, false), Some(utc("2026-05-01T22:00:00Z")));
        assert_eq!(t.next_run_at(now, created, true), None);
        // The wake-up for recording skipped triggers is still there.
        assert_eq!(t.next_after(now, created), Some(utc("2026-05-01T22:00:00Z")));
    }

    #[test]
    fn run_names() {
        assert_eq!(
            scheduled_run_name("redis-v1-to-v2", utc("2026-05-02T22:00:00Z")),
            "redis-v1-to-v2-20260502-2200"
        );
        let longest = "p".repeat(MAX_SCHEDULED_PLAN_NAME);
        assert!(scheduled_run_name(&longest, utc("2026-05-02T22:00:00Z")).len() <= 253);
    }

    /// Spec §6 (issue 36): with `startingDeadline`, a trigger found later than it is missed —
    /// recorded, not run; within it, or without one (SKE), the latest due trigger runs.
    #[test]
    fn a_trigger_found_past_the_starting_deadline_is_missed() {
        let policy = |deadline: Option<&str>| UpgradeExecutionPolicy {
            repeat_schedule: Some("0 22 * * *".into()),
            starting_deadline: deadline.map(Into::into),
            ..Default::default()
        };
        let created = utc("2026-06-01T00:00:00Z");
        let at = utc("2026-06-01T22:00:00Z");
        // (what, deadline, now, suspended, action)
        let table = [
            (
                "on time",
                Some("1h"),
                "2026-06-01T22:00:05Z",
                false,
                TriggerAction::CreateRun(at),
            ),
            (
                "late, within",
                Some("1h"),
                "2026-06-01T23:00:00Z",
                false,
                TriggerAction::CreateRun(at),
            ),
            (
                "past it",
                Some("1h"),
                "2026-06-01T23:00:01Z",
                false,
                TriggerAction::Missed {
                    at,
                    late: chrono::Duration::seconds(3601),
                },
            ),
            (
                "no deadline: SKE",
                None,
                "2026-06-01T23:59:00Z",
                false,
                TriggerAction::CreateRun(at),
            ),
            (
                "suspended: skipped",
                Some("1h"),
                "2026-06-01T23:30:00Z",
                true,
                TriggerAction::Skip(at),
            ),
        ];
        for (what, deadline, now, suspended, want) in table {
            let t = triggers(&policy(deadline)).unwrap();
            assert_eq!(t.due(utc(now), created, None, suspended), want, "{what}");
        }
        assert_eq!(go_duration(chrono::Duration::seconds(3601)), "1h1s");
        assert_eq!(go_duration(chrono::Duration::seconds(7980)), "2h13m");
        assert_eq!(go_duration(chrono::Duration::zero()), "0s");
    }
}
