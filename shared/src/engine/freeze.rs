//! Freezes (spec §13.5): platform-wide blackout periods that close every group of every matching
//! plan as a deny window would.
//!
//! A freeze's periods become [`DenyPeriod`]s of the group's [`Windows`] (one sweep: windows and
//! freezes share the local-time resolver and the next-open/next-close search), so the run, the
//! plan's gauges, `explain`, `match` and the forecast all see the same times.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::cron::{parse_zone, resolve_local_time};
use super::problem::{summarize, Problem};
use super::selector;
use super::window::{DenyPeriod, Window, WindowState, Windows};
use crate::api::{
    reasons, set_condition, Condition, ConditionStatus, PlanSelector, RolloutSelectors, UpgradeFreeze,
    UpgradeFreezeSpec, UpgradeFreezeStatus, UpgradePlan, UpgradeWindow, WindowKind, MAX_FREEZE_PERIODS,
};

// Defined here, not in `window`, so that windows stay below freezes (no import cycle).
impl WindowState {
    /// A group's compiled windows with the freezes holding its plan, and their state at `t`: the
    /// one rule for how windows and freezes hold a group's starts, for the run, the plan's
    /// gauges, the plugin and the forecast.
    pub fn of_group(windows: &Windows, freezes: &[Freeze], t: DateTime<Utc>) -> (WindowState, Windows) {
        let held = windows
            .clone()
            .with_freezes(freezes.iter().flat_map(|f| f.periods.iter().cloned()));
        (held.state(t), held)
    }
}

/// A freeze whose periods compile.
#[derive(Debug, Clone)]
pub struct Freeze {
    pub name: String,
    pub reason: String,
    pub periods: Vec<DenyPeriod>,
    /// The zone of its first period: how its times are shown beside the viewer's.
    pub zone: chrono_tz::Tz,
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
    } else if spec.periods.len() > MAX_FREEZE_PERIODS {
        add(
            "spec.periods".into(),
            format!(
                "must list at most {MAX_FREEZE_PERIODS} periods, has {}",
                spec.periods.len()
            ),
        );
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
        let periods = compile_periods(spec)?;
        let zone = spec
            .periods
            .first()
            .and_then(|p| parse_zone(p.time_zone.as_deref()).ok())
            .unwrap_or(chrono_tz::UTC);
        Ok(Freeze {
            name: name.to_string(),
            reason: spec.reason.clone(),
            periods,
            zone,
        })
    }

    /// The freeze alone, as windows closed while it is active.
    fn as_windows(&self) -> Windows {
        Windows::default().with_freezes(self.periods.iter().cloned())
    }

    /// Up to `n` stretches of frozen time from `t` on, as (start, end): the first starts at `t`
    /// when the freeze is active then. Overlapping or touching periods are one stretch.
    pub fn stretches_from(&self, t: DateTime<Utc>, n: usize) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
        let mut out = Vec::new();
        let mut at = t;
        while out.len() < n {
            let s = self.state(at);
            let start = if s.active { Some(at) } else { s.next_start };
            let (Some(start), Some(end)) = (start, s.next_end) else {
                break;
            };
            out.push((start, end));
            at = end;
        }
        out
    }

    /// The freeze at `t`: its periods as windows, read the other way round (they close when a
    /// period starts).
    pub fn state(&self, t: DateTime<Utc>) -> FreezeState {
        let state = self.as_windows().state(t);
        FreezeState {
            active: !state.open,
            next_start: state.next_close,
            next_end: state.next_open,
        }
    }
}

/// Whether a freeze with this spec holds a plan of `promise` labelled `labels`: its
/// `planSelector` (omitted or `{}`: every plan) and its `promises` (omitted: every Promise).
pub fn holds(spec: &UpgradeFreezeSpec, promise: &str, labels: &BTreeMap<String, String>) -> bool {
    selects_plan(spec.plan_selector.as_ref(), spec.promises.as_deref(), promise, labels)
}

/// Whether a platform object's `planSelector` and `promises` (a freeze's, a budget's) select a
/// plan of `promise` labelled `labels`: the selector omitted or `{}` selects every plan, and
/// `promises` omitted every Promise.
pub fn selects_plan(
    plan_selector: Option<&PlanSelector>,
    promises: Option<&[String]>,
    promise: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    let promise_ok = promises.is_none_or(|p| p.iter().any(|n| n == promise));
    let selector_ok = plan_selector.is_none_or(|s| {
        let terms = RolloutSelectors {
            match_labels: s.match_labels.clone(),
            match_expressions: s.match_expressions.clone(),
            match_all: None,
        };
        match selector::kind(Some(&terms)) {
            // A Kubernetes label selector: empty selects everything.
            selector::SelectorKind::Nothing => true,
            _ => selector::matches(Some(&terms), labels),
        }
    });
    promise_ok && selector_ok
}

/// Whether a freeze with this spec holds `plan`.
pub fn holds_plan(spec: &UpgradeFreezeSpec, plan: &UpgradePlan) -> bool {
    holds(spec, &plan.spec.promise_ref.name, kube::ResourceExt::labels(plan))
}

/// The freezes among `freezes` that hold a plan of `promise` labelled `labels` and can be
/// evaluated, by name. One that cannot is skipped: it blocks nothing (spec §13.5) and says so
/// in its own status.
pub fn holding(freezes: &[Arc<UpgradeFreeze>], promise: &str, labels: &BTreeMap<String, String>) -> Vec<Freeze> {
    let mut held: Vec<Freeze> = freezes
        .iter()
        .filter(|f| holds(&f.spec, promise, labels))
        .filter_map(|f| Freeze::compile(f.metadata.name.as_deref().unwrap_or_default(), &f.spec).ok())
        .collect();
    held.sort_by(|a, b| a.name.cmp(&b.name));
    held
}

/// A freeze holding a group now: which, why, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub freeze: String,
    pub reason: String,
    /// The end of its current stretch of periods (`None`: beyond the search horizon).
    pub until: Option<DateTime<Utc>>,
    /// The freeze's zone, to show `until` in.
    pub zone: chrono_tz::Tz,
}

impl Hold {
    /// The `Frozen` condition's message: `UpgradeFreeze "<name>" until <time>: <reason>`.
    pub fn message(&self) -> String {
        let until = self
            .until
            .map_or_else(|| "further notice".to_string(), crate::time::rfc3339);
        texts::frozen(&self.freeze, &until, &self.reason)
    }
}

/// The freeze that holds at `t`, among those active the one that ends last (so its end is when
/// the freezes let go, unless they chain), ties by name.
pub fn hold_at(freezes: &[Freeze], t: DateTime<Utc>) -> Option<Hold> {
    freezes
        .iter()
        .filter_map(|f| {
            let s = f.state(t);
            s.active.then(|| Hold {
                freeze: f.name.clone(),
                reason: f.reason.clone(),
                until: s.next_end,
                zone: f.zone,
            })
        })
        // None (no end in sight) sorts last of all.
        .max_by(|a, b| {
            (a.until.is_none(), a.until)
                .cmp(&(b.until.is_none(), b.until))
                .then_with(|| b.freeze.cmp(&a.freeze))
        })
}

/// The freeze's next status, its gauges and when to look again: the object's own reconcile
/// writes it (spec §13.5).
#[derive(Debug, Clone, PartialEq)]
pub struct FreezeStep {
    pub status: UpgradeFreezeStatus,
    /// Whether it can be evaluated (`upgradeplan_freeze_ready`).
    pub ready: bool,
    /// `upgradeplan_freeze_active`.
    pub active: bool,
    /// Its next start or end.
    pub wake_at: Option<DateTime<Utc>>,
    /// The note of a Warning `InvalidSpec` event: it became unevaluable, or its problems changed.
    pub invalid_event: Option<String>,
}

/// The freeze's status at `now`, over every plan the controller knows (for `matchingPlans`).
pub fn step(freeze: &UpgradeFreeze, plans: &[Arc<UpgradePlan>], now: DateTime<Utc>) -> FreezeStep {
    let mut status = freeze.status.clone().unwrap_or_default();
    status.matching_plans = plans.iter().filter(|p| holds_plan(&freeze.spec, p)).count() as i64;
    let name = freeze.metadata.name.as_deref().unwrap_or_default();
    let (ready, condition) = match Freeze::compile(name, &freeze.spec) {
        Ok(f) => {
            let s = f.state(now);
            status.active = s.active;
            status.next_start = s.next_start;
            status.next_end = s.next_end;
            let wake_at = [s.next_start, s.next_end].into_iter().flatten().min();
            let condition = Condition::new(
                reasons::READY,
                ConditionStatus::True,
                reasons::VALID,
                texts::ready(),
                now,
            );
            (Some(wake_at), condition)
        }
        Err(problems) => {
            status.active = false;
            status.next_start = None;
            status.next_end = None;
            let condition = Condition::new(
                reasons::READY,
                ConditionStatus::False,
                reasons::INVALID_SPEC,
                texts::invalid(&summarize(&problems)),
                now,
            );
            (None, condition)
        }
    };
    let observed = freeze.metadata.generation;
    let condition = Condition {
        observed_generation: observed,
        ..condition
    };
    let invalid_event = (condition.status == ConditionStatus::False
        && crate::api::find_condition(&status.conditions, reasons::READY)
            .is_none_or(|c| c.status != ConditionStatus::False || c.message != condition.message))
    .then(|| condition.message.clone());
    set_condition(&mut status.conditions, condition);
    FreezeStep {
        active: status.active,
        ready: ready.is_some(),
        wake_at: ready.flatten(),
        invalid_event,
        status,
    }
}

/// Texts of the `Frozen` condition (spec §13.5).
pub mod texts {
    pub fn frozen(freeze: &str, until: &str, reason: &str) -> String {
        format!("UpgradeFreeze {freeze:?} until {until}: {reason}")
    }
    /// The `Frozen` condition once no freeze holds the run.
    pub fn not_frozen() -> String {
        "No UpgradeFreeze holds the current rollout group".into()
    }
    pub fn ready() -> String {
        "Every period evaluates".into()
    }
    /// An unevaluable freeze blocks nothing; it says so, with its problems.
    pub fn invalid(problems: &str) -> String {
        format!("Cannot be evaluated, so it holds no plan: {problems}")
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
                "as many periods as the CRD allows",
                spec(vec![recurring("0 0 * * 5", "24h", None); MAX_FREEZE_PERIODS]),
                vec![],
            ),
            (
                "one more than the CRD allows",
                spec(vec![recurring("0 0 * * 5", "24h", None); MAX_FREEZE_PERIODS + 1]),
                vec!["spec.periods"],
            ),
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
        assert_eq!(
            f.stretches_from(utc("2026-11-30T12:30:00Z"), 3),
            vec![
                (utc("2026-11-30T12:30:00Z"), utc("2026-11-30T17:00:00Z")),
                (utc("2026-12-04T21:00:00Z"), utc("2026-12-07T13:00:00Z")),
                (utc("2026-12-11T21:00:00Z"), utc("2026-12-14T13:00:00Z")),
            ]
        );
        assert_eq!(f.zone, chrono_tz::America::New_York);
    }

    #[test]
    fn the_status_says_when_it_holds_how_many_plans_and_whether_it_can_be_evaluated() {
        let plan = |name: &str, promise: &str| {
            let mut p = UpgradePlan::new(name, Default::default());
            p.spec.promise_ref.name = promise.into();
            Arc::new(p)
        };
        let plans = vec![plan("a", "redis"), plan("b", "redis"), plan("c", "postgres")];
        let mut f = UpgradeFreeze::new(
            "eoy",
            UpgradeFreezeSpec {
                promises: Some(vec!["redis".into()]),
                ..spec(vec![once("2026-12-20T18:00", "2027-01-04T09:00", None)])
            },
        );
        f.metadata.generation = Some(3);
        let cases = [
            // (now, active, next start, next end, wake at)
            (
                "2026-12-01T00:00:00Z",
                false,
                Some("2026-12-20T18:00:00Z"),
                Some("2027-01-04T09:00:00Z"),
                Some("2026-12-20T18:00:00Z"),
            ),
            (
                "2026-12-20T18:00:00Z",
                true,
                None,
                Some("2027-01-04T09:00:00Z"),
                Some("2027-01-04T09:00:00Z"),
            ),
            ("2027-01-04T09:00:00Z", false, None, None, None),
        ];
        for (now, active, next_start, next_end, wake) in cases {
            let s = step(&f, &plans, utc(now));
            assert_eq!(
                (s.status.active, s.status.next_start, s.status.next_end, s.wake_at),
                (active, next_start.map(utc), next_end.map(utc), wake.map(utc)),
                "{now}"
            );
            assert_eq!((s.active, s.ready, s.status.matching_plans), (active, true, 2), "{now}");
            let ready = &s.status.conditions[0];
            assert_eq!(
                (ready.type_.as_str(), ready.status, ready.observed_generation),
                ("Ready", ConditionStatus::True, Some(3))
            );
        }

        // Unevaluable: not ready, not active, nothing to wake for; it still counts its plans.
        f.status = Some(step(&f, &plans, utc("2026-12-21T00:00:00Z")).status);
        f.spec.periods[0].time_zone = Some("Mars/Olympus".into());
        let s = step(&f, &plans, utc("2026-12-21T00:00:00Z"));
        assert_eq!(
            (s.ready, s.active, s.wake_at, s.status.next_end),
            (false, false, None, None)
        );
        assert_eq!(s.invalid_event.as_ref(), Some(&s.status.conditions[0].message));
        f.status = Some(s.status.clone());
        assert_eq!(
            step(&f, &plans, utc("2026-12-21T00:01:00Z")).invalid_event,
            None,
            "said once"
        );
        assert_eq!(s.status.matching_plans, 2);
        let ready = &s.status.conditions[0];
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, "InvalidSpec")
        );
        assert!(
            ready
                .message
                .starts_with("Cannot be evaluated, so it holds no plan: spec.periods[0].timeZone: "),
            "{}",
            ready.message
        );
        assert_eq!(s.status.conditions.len(), 1);
    }

    #[test]
    fn the_hold_names_the_active_freeze_that_ends_last() {
        let f =
            |name: &str, start: &str, end: &str| Freeze::compile(name, &spec(vec![once(start, end, None)])).unwrap();
        let freezes = vec![
            f("b", "2026-06-01T10:00", "2026-06-01T12:00"),
            f("a", "2026-06-01T10:00", "2026-06-01T12:00"),
            f("c", "2026-06-01T09:00", "2026-06-01T11:00"),
            f("later", "2026-06-01T13:00", "2026-06-01T14:00"),
        ];
        let named = |t: &str| hold_at(&freezes, utc(t)).map(|h| (h.freeze, h.until));
        assert_eq!(named("2026-06-01T08:00:00Z"), None);
        assert_eq!(
            named("2026-06-01T09:30:00Z"),
            Some(("c".into(), Some(utc("2026-06-01T11:00:00Z"))))
        );
        assert_eq!(
            named("2026-06-01T10:30:00Z"),
            Some(("a".into(), Some(utc("2026-06-01T12:00:00Z")))),
            "ties by name"
        );
        assert_eq!(named("2026-06-01T12:30:00Z"), None);
    }

    #[test]
    fn which_plans_a_freeze_holds() {
        let mut plan = UpgradePlan::new("p", Default::default());
        plan.spec.promise_ref.name = "redis".into();
        plan.metadata.labels = Some([("tier".to_string(), "critical".to_string())].into());
        let mut s = spec(vec![recurring("0 0 * * 5", "24h", None)]);
        assert!(holds_plan(&s, &plan), "no selector, no promises: every plan");
        s.plan_selector = Some(PlanSelector::default());
        assert!(holds_plan(&s, &plan), "{{}} selects every plan, as in Kubernetes");
        s.plan_selector = Some(PlanSelector {
            match_labels: Some([("tier".to_string(), "critical".to_string())].into()),
            match_expressions: None,
        });
        assert!(holds_plan(&s, &plan));
        s.plan_selector = Some(PlanSelector {
            match_labels: None,
            match_expressions: Some(vec![SelectorRequirement {
                key: "tier".into(),
                operator: SelectorOperator::NotIn,
                values: Some(vec!["critical".into()]),
            }]),
        });
        assert!(!holds_plan(&s, &plan));
        s.plan_selector = None;
        s.promises = Some(vec!["postgres".into()]);
        assert!(!holds_plan(&s, &plan));
        s.promises = Some(vec!["postgres".into(), "redis".into()]);
        assert!(holds_plan(&s, &plan));
    }
}
