//! Freezes (spec §13.5): platform-wide blackout periods that close every group of every matching
//! plan as a deny window would.
//!
//! A freeze's periods become [`DenyPeriod`]s of the group gate (one gate, one sweep: windows and
//! freezes share the local-time resolver and the next-open/next-close search), so the run, the
//! plan's gauges, `explain`, `match` and the forecast all see the same times.

use chrono::{DateTime, Utc};

use super::cron::{parse_zone, resolve_local_time};
use super::selector;
use super::validate::Problem;
use super::window::{DenyPeriod, Gate, Window};
use crate::api::{RolloutSelectors, UpgradeFreezeSpec, UpgradePlan, UpgradeWindow, WindowKind};

/// A freeze whose periods compile.
#[derive(Debug, Clone)]
pub struct Freeze {
    pub name: String,
    pub reason: String,
    pub periods: Vec<DenyPeriod>,
}

/// A freeze at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreezeState {
    pub active: bool,
    /// The next period's start (while active: the one after the current).
    pub next_start: Option<DateTime<Utc>>,
    /// The end of the current period, or of the next one.
    pub next_end: Option<DateTime<Utc>>,
}

/// Every problem of a freeze's spec, with its field path (the schema checks the rest).
pub fn validate_freeze(spec: &UpgradeFreezeSpec) -> Vec<Problem> {
    compile_periods(spec).err().unwrap_or_default()
}

fn compile_periods(spec: &UpgradeFreezeSpec) -> Result<Vec<DenyPeriod>, Vec<Problem>> {
    let mut problems = Vec::new();
    let mut add = |field: String, message: String| problems.push(Problem { field, message });
    if spec.reason.trim().is_empty() {
        add("spec.reason".into(), "must say why upgrades are frozen".into());
    }
    if spec.periods.is_empty() {
        add("spec.periods".into(), "must list at least one period".into());
    }
    let mut periods = Vec::new();
    for (i, p) in spec.periods.iter().enumerate() {
        let at = format!("spec.periods[{i}]");
        let zone = match parse_zone(p.time_zone.as_deref()) {
            Ok(z) => z,
            Err(e) => {
                add(format!("{at}.timeZone"), e.to_string());
                continue;
            }
        };
        match (&p.start, &p.end, &p.schedule, &p.duration) {
            (Some(start), Some(end), None, None) => {
                let start_at = resolve_local_time(start, zone).map_err(|e| add(format!("{at}.start"), e.to_string()));
                let end_at = resolve_local_time(end, zone).map_err(|e| add(format!("{at}.end"), e.to_string()));
                if let (Ok(start), Ok(end)) = (start_at, end_at) {
                    if start < end {
                        periods.push(DenyPeriod::Once { start, end });
                    } else {
                        add(format!("{at}.end"), "must be after start".into());
                    }
                }
            }
            (None, None, Some(schedule), Some(duration)) => {
                let window = UpgradeWindow {
                    kind: WindowKind::Deny,
                    schedule: schedule.clone(),
                    duration: duration.clone(),
                    time_zone: p.time_zone.clone(),
                };
                match Window::compile(&window) {
                    Ok(w) => periods.push(DenyPeriod::Recurring(w)),
                    Err(e) => add(format!("{at}.{}", e.field()), e.detail()),
                }
            }
            _ => add(
                at,
                "a period is either one-off (start and end) or recurring (schedule and duration)".into(),
            ),
        }
    }
    if problems.is_empty() {
        Ok(periods)
    } else {
        Err(problems)
    }
}

impl Freeze {
    /// The freeze named `name`, or every problem that keeps it from being evaluated (it then
    /// blocks nothing: spec §13.5).
    pub fn compile(name: &str, spec: &UpgradeFreezeSpec) -> Result<Freeze, Vec<Problem>> {
        Ok(Freeze {
            name: name.to_string(),
            reason: spec.reason.clone(),
            periods: compile_periods(spec)?,
        })
    }

    /// The freeze alone, as a gate (closed while frozen).
    fn gate(&self) -> Gate {
        Gate::default().with_freezes(self.periods.iter().cloned())
    }

    /// The freeze at `t`: the gate of its periods, read the other way round (the gate closes
    /// when a period starts).
    pub fn state(&self, t: DateTime<Utc>) -> FreezeState {
        let gate = self.gate().state(t);
        FreezeState {
            active: !gate.open,
            next_start: gate.next_close,
            next_end: gate.next_open,
        }
    }
}

/// Whether a freeze with this spec holds `plan`: its `planSelector` (omitted or `{}`: every plan)
/// and its `promises` (omitted: every Promise).
pub fn holds(spec: &UpgradeFreezeSpec, plan: &UpgradePlan) -> bool {
    let promise_ok = spec
        .promises
        .as_ref()
        .is_none_or(|p| p.contains(&plan.spec.promise_ref.name));
    let selector_ok = spec.plan_selector.as_ref().is_none_or(|s| {
        let terms = RolloutSelectors {
            match_labels: s.match_labels.clone(),
            match_expressions: s.match_expressions.clone(),
            match_all: None,
        };
        match selector::kind(Some(&terms)) {
            // A Kubernetes label selector: empty selects everything.
            selector::SelectorKind::Nothing => true,
            _ => selector::matches(
                Some(&terms),
                plan.metadata.labels.as_ref().unwrap_or(&Default::default()),
            ),
        }
    });
    promise_ok && selector_ok
}

/// Texts of the `Frozen` condition (spec §13.5).
pub mod texts {
    pub fn frozen(freeze: &str, until: &str, reason: &str) -> String {
        format!("UpgradeFreeze {freeze:?} until {until}: {reason}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{FreezePeriod, PlanSelector, SelectorOperator, SelectorRequirement};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn once(start: &str, end: &str, zone: Option<&str>) -> FreezePeriod {
        FreezePeriod {
            start: Some(start.into()),
            end: Some(end.into()),
            time_zone: zone.map(Into::into),
            ..Default::default()
        }
    }

    fn recurring(schedule: &str, duration: &str, zone: Option<&str>) -> FreezePeriod {
        FreezePeriod {
            schedule: Some(schedule.into()),
            duration: Some(duration.into()),
            time_zone: zone.map(Into::into),
            ..Default::default()
        }
    }

    fn spec(periods: Vec<FreezePeriod>) -> UpgradeFreezeSpec {
        UpgradeFreezeSpec {
            reason: "end-of-year freeze".into(),
            periods,
            ..Default::default()
        }
    }

    #[test]
    fn every_problem_is_named_with_its_field() {
        let cases: Vec<(&str, UpgradeFreezeSpec, Vec<&str>)> = vec![
            (
                "valid",
                spec(vec![once(
                    "2026-12-20T18:00",
                    "2027-01-04T09:00",
                    Some("Europe/London"),
                )]),
                vec![],
            ),
            ("no periods", spec(vec![]), vec!["spec.periods"]),
            (
                "no reason",
                UpgradeFreezeSpec {
                    reason: " ".into(),
                    ..spec(vec![recurring("0 0 * * 5", "24h", None)])
                },
                vec!["spec.reason"],
            ),
            (
                "unknown zone",
                spec(vec![once("2026-12-20T18:00", "2027-01-04T09:00", Some("Mars/Olympus"))]),
                vec!["spec.periods[0].timeZone"],
            ),
            (
                "bad start and end",
                spec(vec![once("2026-12-20 18:00", "soon", None)]),
                vec!["spec.periods[0].start", "spec.periods[0].end"],
            ),
            (
                "end before start",
                spec(vec![once("2027-01-04T09:00", "2026-12-20T18:00", None)]),
                vec!["spec.periods[0].end"],
            ),
            (
                "end equal to start",
                spec(vec![once("2027-01-04T09:00", "2027-01-04T09:00", None)]),
                vec!["spec.periods[0].end"],
            ),
            (
                "bad cron",
                spec(vec![recurring("0 0 * *", "24h", None)]),
                vec!["spec.periods[0].schedule"],
            ),
            (
                "bad duration",
                spec(vec![recurring("0 0 * * 5", "a day", None)]),
                vec!["spec.periods[0].duration"],
            ),
            (
                "both kinds at once",
                spec(vec![FreezePeriod {
                    schedule: Some("0 0 * * 5".into()),
                    ..once("2026-12-20T18:00", "2027-01-04T09:00", None)
                }]),
                vec!["spec.periods[0]"],
            ),
            (
                "the second period",
                spec(vec![recurring("0 0 * * 5", "24h", None), once("x", "y", None)]),
                vec!["spec.periods[1].start", "spec.periods[1].end"],
            ),
        ];
        for (what, s, want) in cases {
            let got: Vec<String> = validate_freeze(&s).into_iter().map(|p| p.field).collect();
            assert_eq!(got, want, "{what}");
            assert_eq!(Freeze::compile("f", &s).is_ok(), want.is_empty(), "{what}");
        }
    }

    #[test]
    fn state_of_one_off_and_recurring_periods() {
        // 18:00 London on 20 December is 18:00Z (winter time); 09:00 on 4 January is 09:00Z.
        let f = Freeze::compile(
            "eoy",
            &spec(vec![once(
                "2026-12-20T18:00",
                "2027-01-04T09:00",
                Some("Europe/London"),
            )]),
        )
        .unwrap();
        let before = f.state(utc("2026-12-01T00:00:00Z"));
        assert_eq!(
            before,
            FreezeState {
                active: false,
                next_start: Some(utc("2026-12-20T18:00:00Z")),
                next_end: Some(utc("2027-01-04T09:00:00Z")),
            }
        );
        let during = f.state(utc("2026-12-25T12:00:00Z"));
        assert_eq!(
            (during.active, during.next_end, during.next_start),
            (true, Some(utc("2027-01-04T09:00:00Z")), None)
        );
        assert!(!f.state(utc("2027-01-04T09:00:00Z")).active, "the end is exclusive");

        // Every Friday 16:00 New York for 64 hours (to Monday 08:00); overlapping one-offs merge.
        let f = Freeze::compile(
            "weekends",
            &spec(vec![
                recurring("0 16 * * 5", "64h", Some("America/New_York")),
                once("2026-11-30T08:00", "2026-11-30T12:00", Some("America/New_York")),
            ]),
        )
        .unwrap();
        // Friday 4 December 2026, 21:00Z = 16:00 EST.
        let s = f.state(utc("2026-12-02T00:00:00Z"));
        assert_eq!(
            (s.active, s.next_start, s.next_end),
            (
                false,
                Some(utc("2026-12-04T21:00:00Z")),
                Some(utc("2026-12-07T13:00:00Z"))
            )
        );
        // Monday 30 November 08:00 EST: the weekend and the one-off meet; one stretch to 12:00.
        let s = f.state(utc("2026-11-30T12:30:00Z"));
        assert_eq!((s.active, s.next_end), (true, Some(utc("2026-11-30T17:00:00Z"))));
    }

    #[test]
    fn which_plans_a_freeze_holds() {
        let mut plan = UpgradePlan::new("p", Default::default());
        plan.spec.promise_ref.name = "redis".into();
        plan.metadata.labels = Some([("tier".to_string(), "critical".to_string())].into());
        let mut s = spec(vec![recurring("0 0 * * 5", "24h", None)]);
        assert!(holds(&s, &plan), "no selector, no promises: every plan");
        s.plan_selector = Some(PlanSelector::default());
        assert!(holds(&s, &plan), "{{}} selects every plan, as in Kubernetes");
        s.plan_selector = Some(PlanSelector {
            match_labels: Some([("tier".to_string(), "critical".to_string())].into()),
            match_expressions: None,
        });
        assert!(holds(&s, &plan));
        s.plan_selector = Some(PlanSelector {
            match_labels: None,
            match_expressions: Some(vec![SelectorRequirement {
                key: "tier".into(),
                operator: SelectorOperator::NotIn,
                values: Some(vec!["critical".into()]),
            }]),
        });
        assert!(!holds(&s, &plan));
        s.plan_selector = None;
        s.promises = Some(vec!["postgres".into()]);
        assert!(!holds(&s, &plan));
        s.promises = Some(vec!["postgres".into(), "redis".into()]);
        assert!(holds(&s, &plan));
    }
}
