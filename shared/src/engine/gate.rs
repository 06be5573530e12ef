//! Signal gates (spec §13.3): Prometheus instant queries that hold new upgrades while the
//! platform is unwell.
//!
//! The controller queries; everything else is here and pure: what a response means, which gates
//! hold which group, the `Gated` condition, its events and `failAfter`. A gate is **closed** when
//! the query returns any series or a non-zero scalar, and whenever it cannot be evaluated: a
//! rollout must not proceed because the alerting system is down.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::compile::{CompiledPlan, SignalGate};
use crate::api::{find_condition, reasons, Condition, ConditionStatus, Gate, UpgradePlanSpec, UpgradeRunStatus};

/// What one evaluation of a gate said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading {
    Open,
    /// The query returned `series` series (a non-zero scalar counts as one); `first` describes the
    /// first in PromQL notation (`ALERTS{alertname="X", severity="critical"}`).
    Firing {
        series: usize,
        first: String,
    },
    /// It could not be evaluated (unreachable, timeout, bad query, no Prometheus configured).
    Error(String),
}

impl Reading {
    pub fn is_open(&self) -> bool {
        matches!(self, Reading::Open)
    }

    /// The `result` label of `upgradeplan_gate_evaluations_total`.
    pub fn result_label(&self) -> &'static str {
        match self {
            Reading::Open => "open",
            Reading::Firing { .. } => "closed",
            Reading::Error(_) => "error",
        }
    }
}

/// A gate's latest reading, and when it will be read again (readings are cached per plan and gate
/// for the gate interval).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateReading {
    pub gate: String,
    pub reading: Reading,
    pub next_check: DateTime<Utc>,
}

/// Why a gate response is unusable.
fn malformed(why: impl std::fmt::Display) -> Reading {
    Reading::Error(format!("unexpected response from Prometheus: {why}"))
}

/// Reads a Prometheus `/api/v1/query` response body (HTTP status aside: Prometheus answers 400 and
/// 422 with the same JSON envelope, which says what was wrong).
pub fn parse_response(body: &[u8]) -> Reading {
    let v: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return malformed(format!("not JSON ({e})")),
    };
    match v.get("status").and_then(Value::as_str) {
        Some("success") => {}
        Some("error") => {
            let kind = v.get("errorType").and_then(Value::as_str).unwrap_or("error");
            let error = v.get("error").and_then(Value::as_str).unwrap_or("no message");
            return Reading::Error(format!("{kind}: {error}"));
        }
        _ => return malformed("no \"status\""),
    }
    let data = v.get("data").unwrap_or(&Value::Null);
    let result = data.get("result").unwrap_or(&Value::Null);
    match data.get("resultType").and_then(Value::as_str) {
        Some("vector") | Some("matrix") => {
            let Some(series) = result.as_array() else {
                return malformed("\"result\" is not a list");
            };
            match series.first() {
                None => Reading::Open,
                Some(first) => Reading::Firing {
                    series: series.len(),
                    first: describe_series(first.get("metric")),
                },
            }
        }
        Some("scalar") => {
            let Some(value) = result.get(1).and_then(Value::as_str) else {
                return malformed("a scalar without a value");
            };
            match value.parse::<f64>() {
                Ok(0.0) => Reading::Open,
                // NaN and ±Inf are not zero: closed.
                _ => Reading::Firing {
                    series: 1,
                    first: format!("scalar {value}"),
                },
            }
        }
        Some(other) => Reading::Error(format!(
            "the query returns a {other}; a gate needs a vector or a scalar"
        )),
        None => malformed("no \"resultType\""),
    }
}

/// A series' labels as PromQL writes them: `name{a="1", b="2"}`, labels sorted.
fn describe_series(metric: Option<&Value>) -> String {
    let Some(labels) = metric.and_then(Value::as_object) else {
        return "{}".into();
    };
    let name = labels.get("__name__").and_then(Value::as_str).unwrap_or_default();
    let mut pairs: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| format!("{k}={:?}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    format!("{name}{{{}}}", pairs.join(", "))
}

/// The gates of `plan` that hold `group`, in plan order.
pub fn gates_of<'a>(plan: &'a CompiledPlan, group: &'a str) -> impl Iterator<Item = &'a SignalGate> + 'a {
    plan.gates.iter().filter(move |g| g.applies(group))
}

/// What the gates of a group say before its next starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateCheck {
    /// No gate holds the group, or nothing was about to start.
    NotChecked,
    /// Every gate of the group is open.
    Open,
    /// The first closed gate (plan order). A gate without a reading is closed: fail safe.
    Closed { gate: Gate, reading: GateReading },
}

/// Each gate of `plan` that holds `group`, in plan order, with its reading in `readings`; a gate
/// without one is closed (fail safe: not evaluated yet).
pub fn readings_of<'a>(
    plan: &'a CompiledPlan,
    group: &'a str,
    readings: &[GateReading],
    now: DateTime<Utc>,
) -> Vec<(&'a SignalGate, GateReading)> {
    gates_of(plan, group)
        .map(|gate| {
            let reading = readings
                .iter()
                .find(|r| r.gate == gate.name())
                .cloned()
                .unwrap_or(GateReading {
                    gate: gate.name().to_string(),
                    reading: Reading::Error("not evaluated yet".into()),
                    next_check: now,
                });
            (gate, reading)
        })
        .collect()
}

/// Checks the gates of `group` against `readings`, now.
pub fn check(plan: &CompiledPlan, group: &str, readings: &[GateReading], now: DateTime<Utc>) -> GateCheck {
    let gates = readings_of(plan, group, readings, now);
    if gates.is_empty() {
        return GateCheck::NotChecked;
    }
    match gates.into_iter().find(|(_, r)| !r.reading.is_open()) {
        Some((gate, reading)) => GateCheck::Closed {
            gate: gate.spec.clone(),
            reading,
        },
        None => GateCheck::Open,
    }
}

/// What one gate says, as a run records it (`status.gates[].message`).
pub fn message(gate: &str, reading: &Reading) -> String {
    match reading {
        Reading::Open => texts::gate_open(gate),
        closed => closed_condition(gate, closed).1,
    }
}

/// The `Gated` condition's (reason, message) for a closed gate.
pub fn closed_condition(gate: &str, reading: &Reading) -> (&'static str, String) {
    match reading {
        Reading::Open => (reasons::GATES_OPEN, texts::gates_open()),
        Reading::Firing { series, first } => (reasons::GATE_FIRING, texts::gate_firing(gate, *series, first)),
        Reading::Error(e) => (reasons::GATE_ERROR, texts::gate_error(gate, e)),
    }
}

/// When a gate closed since `closed_since` fails the run under its `failAfter` (`None`: never).
pub fn fails_at(gate: &SignalGate, closed_since: DateTime<Utc>) -> Option<DateTime<Utc>> {
    closed_since.checked_add_signed(gate.fail_after.as_ref()?.value)
}

/// The gates' readings as the run recorded them (`status.gates[]`), for views that do not query
/// Prometheus themselves: a closed gate reads as what it said (its recorded message), an open one
/// as open. Runs recorded before `status.gates` existed: [`readings_from_condition`].
pub fn readings_recorded(plan: &UpgradePlanSpec, status: &UpgradeRunStatus, now: DateTime<Utc>) -> Vec<GateReading> {
    if status.gates.is_empty() {
        return readings_from_condition(plan, &status.conditions, now);
    }
    every_gate(plan, now, |g| match status.gates.iter().find(|r| r.name == g.name) {
        Some(r) if r.open => Reading::Open,
        // The message is `gate "<name>": <what it said>`; an Error of what it said renders as
        // the same message (closed_condition).
        Some(r) => Reading::Error(
            r.message
                .strip_prefix(&format!("gate {:?}: ", g.name))
                .unwrap_or(&r.message)
                .to_string(),
        ),
        // Not recorded: it does not hold the current group.
        None => Reading::Open,
    })
}

/// A reading of every gate of `plan`, in plan order, as `reading` gives it.
fn every_gate(plan: &UpgradePlanSpec, now: DateTime<Utc>, reading: impl Fn(&Gate) -> Reading) -> Vec<GateReading> {
    plan.gates
        .iter()
        .flatten()
        .map(|g| GateReading {
            gate: g.name.clone(),
            reading: reading(g),
            next_check: now,
        })
        .collect()
}

/// The gates' readings as a run's recorded `Gated` condition tells them, for views that do not
/// query Prometheus themselves: the gate it names is closed for the reason it gives; every other
/// gate is open.
pub fn readings_from_condition(
    plan: &UpgradePlanSpec,
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> Vec<GateReading> {
    let closed = find_condition(conditions, reasons::GATED).filter(|c| c.status == ConditionStatus::True);
    every_gate(plan, now, |g| {
        let prefix = format!("gate {:?}: ", g.name);
        match closed.filter(|c| c.message.starts_with(&prefix)) {
            Some(c) if c.reason == reasons::GATE_ERROR => Reading::Error(c.message[prefix.len()..].to_string()),
            Some(c) => {
                let said = &c.message[prefix.len()..];
                let (series, first) = said
                    .split_once(" series, first ")
                    .and_then(|(n, first)| Some((n.parse().ok()?, first.to_string())))
                    .unwrap_or((1, said.to_string()));
                Reading::Firing { series, first }
            }
            None => Reading::Open,
        }
    })
}

/// Exact texts of the gate conditions and events (spec §13.3).
pub mod texts {
    pub fn gate_firing(gate: &str, series: usize, first: &str) -> String {
        format!("gate {gate:?}: {series} series, first {first}")
    }

    pub fn gate_error(gate: &str, error: &str) -> String {
        format!("gate {gate:?}: {error}")
    }

    pub fn gate_failed(gate: &str, after: &str) -> String {
        format!("gate {gate:?} closed for {after}")
    }

    pub fn gates_open() -> String {
        "every gate is open".into()
    }

    pub fn gates_opened(group: &str) -> String {
        format!("every gate of rollout group {group:?} is open: upgrades resume")
    }

    pub fn gate_open(gate: &str) -> String {
        format!("gate {gate:?}: open")
    }

    /// The Normal `GateOpened` event of one gate (spec §13.3: per gate).
    pub fn gate_opened(gate: &str, group: &str) -> String {
        format!("gate {gate:?} of rollout group {group:?} is open")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::compile::compile;

    #[test]
    fn responses_and_what_they_mean() {
        let firing = |n: usize, first: &str| Reading::Firing {
            series: n,
            first: first.into(),
        };
        let cases: Vec<(&str, &str, Reading)> = vec![
            (
                "empty vector",
                r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#,
                Reading::Open,
            ),
            (
                "one alert",
                r#"{"status":"success","data":{"resultType":"vector","result":[
                    {"metric":{"__name__":"ALERTS","severity":"critical","alertname":"NodeDown","alertstate":"firing"},"value":[1,"1"]}]}}"#,
                firing(
                    1,
                    r#"ALERTS{alertname="NodeDown", alertstate="firing", severity="critical"}"#,
                ),
            ),
            (
                "two series without a name",
                r#"{"status":"success","data":{"resultType":"vector","result":[
                    {"metric":{"job":"a"},"value":[1,"3"]},{"metric":{"job":"b"},"value":[1,"0"]}]}}"#,
                firing(2, r#"{job="a"}"#),
            ),
            (
                "series with no labels",
                r#"{"status":"success","data":{"resultType":"vector","result":[{"value":[1,"1"]}]}}"#,
                firing(1, "{}"),
            ),
            (
                "scalar zero",
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"0"]}}"#,
                Reading::Open,
            ),
            (
                "scalar one",
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#,
                firing(1, "scalar 1"),
            ),
            (
                "scalar NaN",
                r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#,
                firing(1, "scalar NaN"),
            ),
            (
                "empty matrix",
                r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#,
                Reading::Open,
            ),
            (
                "bad query",
                r#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#,
                Reading::Error("bad_data: parse error at char 5".into()),
            ),
            (
                "a string",
                r#"{"status":"success","data":{"resultType":"string","result":[1,"x"]}}"#,
                Reading::Error("the query returns a string; a gate needs a vector or a scalar".into()),
            ),
            (
                "not JSON",
                "<html>502 Bad Gateway</html>",
                Reading::Error(String::new()),
            ),
            (
                "no status",
                r#"{"data":{}}"#,
                Reading::Error("unexpected response from Prometheus: no \"status\"".into()),
            ),
            (
                "vector not a list",
                r#"{"status":"success","data":{"resultType":"vector","result":{}}}"#,
                Reading::Error("unexpected response from Prometheus: \"result\" is not a list".into()),
            ),
            (
                "scalar without value",
                r#"{"status":"success","data":{"resultType":"scalar","result":[1]}}"#,
                Reading::Error("unexpected response from Prometheus: a scalar without a value".into()),
            ),
        ];
        for (what, body, want) in cases {
            let got = parse_response(body.as_bytes());
            match (&want, &got) {
                (Reading::Error(w), Reading::Error(g)) if w.is_empty() => {
                    assert!(
                        g.starts_with("unexpected response from Prometheus: not JSON"),
                        "{what}: {g}"
                    )
                }
                _ => assert_eq!(got, want, "{what}"),
            }
        }
    }

    fn gate(name: &str, groups: Option<&[&str]>, fail_after: Option<&str>) -> Gate {
        Gate {
            name: name.into(),
            prometheus: crate::api::PrometheusGate {
                query: "up == 0".into(),
            },
            groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
            fail_after: fail_after.map(Into::into),
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn reading(gate: &str, r: Reading) -> GateReading {
        GateReading {
            gate: gate.into(),
            reading: r,
            next_check: utc("2026-06-01T10:00:30Z"),
        }
    }

    #[test]
    fn which_gates_hold_a_group_and_fail_safe() {
        let now = utc("2026-06-01T10:00:00Z");
        use crate::engine::snapshot::tests::{match_all, plan as spec_of};
        let mut spec = spec_of(&["v1"], "v2", vec![match_all("dev"), match_all("prod")]);
        let plan = compile(&spec).unwrap();
        assert_eq!(check(&plan, "dev", &[], now), GateCheck::NotChecked, "no gates");
        spec.gates = Some(vec![
            gate("alerts", None, None),
            gate("prod-slo", Some(&["prod"]), Some("2h")),
        ]);
        let plan = compile(&spec).unwrap();
        let open = [reading("alerts", Reading::Open), reading("prod-slo", Reading::Open)];
        assert_eq!(check(&plan, "dev", &open, now), GateCheck::Open);
        let slo_firing = [
            reading("alerts", Reading::Open),
            reading(
                "prod-slo",
                Reading::Firing {
                    series: 2,
                    first: "{a=\"b\"}".into(),
                },
            ),
        ];
        assert_eq!(
            check(&plan, "dev", &slo_firing, now),
            GateCheck::Open,
            "prod-slo does not hold dev"
        );
        assert!(
            matches!(check(&plan, "prod", &slo_firing, now), GateCheck::Closed { gate, .. } if gate.name == "prod-slo")
        );
        // A gate nobody read is closed.
        match check(&plan, "prod", &open[..1], now) {
            GateCheck::Closed { gate, reading } => {
                assert_eq!(gate.name, "prod-slo");
                assert_eq!(reading.reading, Reading::Error("not evaluated yet".into()));
            }
            other => panic!("{other:?}"),
        }
        // The first closed gate in plan order is the one named.
        let both = [
            reading("alerts", Reading::Error("timeout".into())),
            slo_firing[1].clone(),
        ];
        assert!(matches!(check(&plan, "prod", &both, now), GateCheck::Closed { gate, .. } if gate.name == "alerts"));
        assert_eq!(fails_at(&plan.gates[1], now), Some(utc("2026-06-01T12:00:00Z")));
        assert_eq!(fails_at(&plan.gates[0], now), None);
    }

    #[test]
    fn condition_texts_and_views_read_them_back() {
        let firing = Reading::Firing {
            series: 2,
            first: r#"ALERTS{alertname="NodeDown"}"#.into(),
        };
        assert_eq!(
            closed_condition("alerts", &firing),
            (
                reasons::GATE_FIRING,
                r#"gate "alerts": 2 series, first ALERTS{alertname="NodeDown"}"#.to_string()
            )
        );
        let error = Reading::Error("Get \"http://prom:9090\": connection refused".into());
        let (reason, message) = closed_condition("alerts", &error);
        assert_eq!(
            (reason, message.as_str()),
            (
                reasons::GATE_ERROR,
                r#"gate "alerts": Get "http://prom:9090": connection refused"#
            )
        );
        assert_eq!(texts::gate_failed("alerts", "2h"), r#"gate "alerts" closed for 2h"#);

        let now = utc("2026-06-01T10:00:00Z");
        let plan = UpgradePlanSpec {
            gates: Some(vec![gate("alerts", None, None), gate("slo", None, None)]),
            ..Default::default()
        };
        let recorded = vec![Condition::new(
            reasons::GATED,
            ConditionStatus::True,
            reason,
            message,
            now,
        )];
        let views = readings_from_condition(&plan, &recorded, now);
        assert_eq!(views[0].reading, error);
        assert_eq!(views[1].reading, Reading::Open);
        assert!(readings_from_condition(&plan, &[], now)
            .iter()
            .all(|r| r.reading.is_open()));
        let (reason, message) = closed_condition("slo", &firing);
        let recorded = vec![Condition::new(
            reasons::GATED,
            ConditionStatus::True,
            reason,
            message.clone(),
            now,
        )];
        let views = readings_from_condition(&plan, &recorded, now);
        assert_eq!((&views[0].reading, &views[1].reading), (&Reading::Open, &firing));
        assert_eq!(
            closed_condition("slo", &views[1].reading).1,
            message,
            "read back, it says the same"
        );

        // Recorded per gate (status.gates): each gate as it was, without parsing a condition.
        let status = crate::api::UpgradeRunStatus {
            gates: vec![
                crate::api::GateStatus {
                    name: "alerts".into(),
                    open: true,
                    since: now,
                    message: texts::gate_open("alerts"),
                },
                crate::api::GateStatus {
                    name: "slo".into(),
                    open: false,
                    since: now,
                    message: message.clone(),
                },
            ],
            ..Default::default()
        };
        let views = readings_recorded(&plan, &status, now);
        assert!(views[0].reading.is_open() && !views[1].reading.is_open());
        assert_eq!(
            closed_condition("slo", &views[1].reading).1,
            message,
            "it says the same"
        );
        assert_eq!(message_of(&views[1]), message);
    }

    fn message_of(r: &GateReading) -> String {
        super::message(&r.gate, &r.reading)
    }
}
