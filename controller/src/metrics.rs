//! Prometheus metrics (spec §9.1). Names are a contract: the alerts and the dashboard use them.
//!
//! Gauges describe current state: each plan's series are rewritten as a whole and removed when
//! the plan goes away. Counters only grow. No label carries a resource or run name.

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// A gauge vector of either kind, so that emitted series can be removed by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum G {
    PlanInfo,
    PlanPhase,
    PlanSuspended,
    PlanReady,
    PlanNextRun,
    PlanLastSchedule,
    PlanLastRunResult,
    PlanLastRunFinished,
    PlanLastRunInfo,
    PlanActiveRunInfo,
    PlanLastFailure,
    PlanLastRunFailedResources,
    PlanRunCreateFailing,
    GroupFailureBudget,
    GroupMaxConcurrent,
    WindowOpen,
    WindowActive,
    WindowNextOpen,
    WindowNextClose,
    RunResources,
    Blocked,
    GateOpen,
    GateError,
}

/// The label values of each gauge series emitted, per (plan, part).
type Emitted = HashMap<(String, &'static str), Vec<(G, Vec<String>)>>;

pub struct Metrics {
    pub registry: Registry,
    build_info: IntGaugeVec,
    plan_info: IntGaugeVec,
    plan_phase: IntGaugeVec,
    plan_suspended: IntGaugeVec,
    plan_ready: IntGaugeVec,
    plan_next_run: GaugeVec,
    plan_last_schedule: GaugeVec,
    plan_last_run_result: IntGaugeVec,
    plan_last_run_finished: GaugeVec,
    plan_last_run_info: IntGaugeVec,
    plan_active_run_info: IntGaugeVec,
    plan_last_failure: GaugeVec,
    plan_last_run_failed_resources: IntGaugeVec,
    group_failure_budget: IntGaugeVec,
    plan_run_create_failing: IntGaugeVec,
    pub runs_total: IntCounterVec,
    pub runs_superseded_total: IntCounterVec,
    pub run_duration: HistogramVec,
    run_resources: IntGaugeVec,
    pub resource_upgrades_total: IntCounterVec,
    pub resource_upgrade_duration: HistogramVec,
    group_max_concurrent: IntGaugeVec,
    window_open: IntGaugeVec,
    window_active: IntGaugeVec,
    window_next_open: GaugeVec,
    window_next_close: GaugeVec,
    blocked: IntGaugeVec,
    gate_open: IntGaugeVec,
    gate_error: IntGaugeVec,
    gate_evaluations_total: IntCounterVec,
    freeze_active: IntGaugeVec,
    freeze_ready: IntGaugeVec,
    /// Freezes with series, so that a deleted one's are removed.
    freezes: Mutex<std::collections::HashSet<String>>,
    pub reconcile_total: IntCounterVec,
    pub reconcile_errors_total: IntCounterVec,
    pub reconcile_time: HistogramVec,
    pub workqueue_depth: IntGaugeVec,
    pub leader: IntGaugeVec,
    pub rest_requests: IntCounterVec,
    /// Series emitted per (plan, part): part "plan" is written by the plan reconciler, "run" by
    /// the run reconciler; each rewrite removes the previous series of its part.
    emitted: Mutex<Emitted>,
    /// Counter series initialised at 0 per plan (so that `increase()` sees their first
    /// increment), removed with the plan.
    counted: Mutex<HashMap<String, Vec<CountedSeries>>>,
}

/// One counter series initialised for a plan: the counter and its label values.
type CountedSeries = (Counted, Vec<String>);

/// The counters (and histograms) initialised per plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted {
    Runs,
    RunsSuperseded,
    ResourceUpgrades,
    RunDuration,
    ResourceUpgradeDuration,
    GateEvaluations,
}

/// Label values of `upgradeplan_runs_total{trigger}`.
pub const TRIGGERS: [&str; 2] = ["scheduled", "manual"];
/// Label values of `upgradeplan_resource_upgrades_total{result}`.
pub const RESOURCE_RESULTS: [&str; 3] = ["succeeded", "failed", "skipped"];
/// The `controller` label of the reconcile metrics.
pub const CONTROLLERS: [&str; 3] = ["upgradeplan", "upgraderun", "upgradefreeze"];

/// The plan's gauges and each group's, as the engine decides them.
pub use upgradeplan::engine::lifecycle::plan::PlanGauges as PlanSample;

/// What the run reconciler knows of a plan's active run: the engine decides it.
pub use upgradeplan::engine::lifecycle::RunGauges as RunSample;

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let g = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn fgauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    let g = GaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(g.clone())).expect("unique metric");
    g
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    registry.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn histogram(registry: &Registry, name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    let h = HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels).expect("valid metric");
    registry.register(Box::new(h.clone())).expect("unique metric");
    h
}

pub const RESULTS: [&str; 3] = ["Completed", "Failed", "Cancelled"];

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let p = "upgradeplan_";
        let n = |s: &str| format!("{p}{s}");
        let long_buckets = vec![
            1.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
        ];
        let m = Metrics {
            build_info: gauge(&r, &n("build_info"), "Always 1; the controller's version.", &["version"]),
            plan_info: gauge(&r, &n("plan_info"), "Always 1 per plan; its Promise, target version and time zone.", &["plan", "promise", "to_version", "time_zone"]),
            plan_phase: gauge(&r, &n("plan_phase"), "1 for the plan's current phase (Available or Running), 0 for the other.", &["plan", "phase"]),
            plan_suspended: gauge(&r, &n("plan_suspended"), "1 when the plan is suspended (no scheduled runs).", &["plan"]),
            plan_ready: gauge(&r, &n("plan_ready"), "1 when the plan is valid (Ready=True).", &["plan"]),
            plan_next_run: fgauge(&r, &n("plan_next_run_timestamp_seconds"), "Unix time of the plan's next trigger (nextRunAt).", &["plan"]),
            plan_last_schedule: fgauge(&r, &n("plan_last_schedule_timestamp_seconds"), "Unix time of the trigger last serviced (lastScheduledAt).", &["plan"]),
            plan_last_run_result: gauge(&r, &n("plan_last_run_result"), "1 for the result of the plan's last finished run, 0 for the others.", &["plan", "result"]),
            plan_last_run_finished: fgauge(&r, &n("plan_last_run_finished_timestamp_seconds"), "Unix time the plan's last run finished.", &["plan"]),
            plan_last_run_info: gauge(&r, &n("plan_last_run_info"), "Always 1, one series per plan: its last finished run (status.lastRun), so that alerts can name it.", &["plan", "run", "result", "reason"]),
            plan_active_run_info: gauge(&r, &n("plan_active_run_info"), "Always 1, one series per plan with an active run: its name, state and, while Pending, why (PlanInvalid, PromiseNotFound, PromiseRevisionNotFound).", &["plan", "run", "state", "reason"]),
            plan_last_failure: fgauge(&r, &n("plan_last_failure_timestamp_seconds"), "Unix time the plan's most recent failed run ended, one series per plan; run and reason name it.", &["plan", "run", "reason"]),
            plan_last_run_failed_resources: gauge(&r, &n("plan_last_run_failed_resources"), "Resources that failed in the plan's last run (within its failure budget when it completed).", &["plan"]),
            group_failure_budget: gauge(&r, &n("group_failure_budget"), "Failed resources the group tolerates (maxFailures resolved against its current size; 0: the first failure fails the run).", &["plan", "group"]),
            plan_run_create_failing: gauge(&r, &n("plan_run_create_failing"), "1 while the API server refuses the run a due trigger asks for (the trigger is retried).", &["plan"]),
            runs_total: counter(&r, &n("runs_total"), "Runs that finished, by trigger and result.", &["plan", "trigger", "result"]),
            runs_superseded_total: counter(&r, &n("runs_superseded_total"), "Runs superseded by a newer run of the same plan.", &["plan"]),
            run_duration: histogram(&r, &n("run_duration_seconds"), "Duration of finished runs, from snapshot to end.", &["plan", "result"], long_buckets.clone()),
            run_resources: gauge(&r, &n("run_resources"), "Resources of the plan's active run by group and state.", &["plan", "group", "state"]),
            resource_upgrades_total: counter(&r, &n("resource_upgrades_total"), "Resource upgrades that ended, by result (succeeded, failed, skipped).", &["plan", "group", "result"]),
            resource_upgrade_duration: histogram(&r, &n("resource_upgrade_duration_seconds"), "Time from starting a resource's upgrade to its success.", &["plan", "group"], long_buckets),
            group_max_concurrent: gauge(&r, &n("group_max_concurrent"), "The group's resolved maxConcurrent (its size when unlimited).", &["plan", "group"]),
            window_open: gauge(&r, &n("window_open"), "1 while the group's window gate lets upgrades start.", &["plan", "group"]),
            window_active: gauge(&r, &n("window_active"), "1 while the group's window (by index) is active.", &["plan", "group", "index", "kind"]),
            window_next_open: fgauge(&r, &n("window_next_open_timestamp_seconds"), "Unix time the group's gate next opens.", &["plan", "group"]),
            window_next_close: fgauge(&r, &n("window_next_close_timestamp_seconds"), "Unix time the group's gate next closes.", &["plan", "group"]),
            blocked: gauge(&r, &n("blocked"), "1 while the plan's active run waits, by group and reason (WindowClosed, ConcurrencyLimit, Suspended, RevisionMissing, Frozen, GateClosed, Soaking, AwaitingApproval).", &["plan", "group", "reason"]),
            gate_open: gauge(&r, &n("gate_open"), "1 while the plan's signal gate is open, 0 while closed (firing or not evaluable), as last evaluated.", &["plan", "gate"]),
            gate_error: gauge(&r, &n("gate_error"), "1 while the plan's signal gate cannot be evaluated (Prometheus unreachable, timeout, bad query): it is closed by fail-safe, not by its signal.", &["plan", "gate"]),
            gate_evaluations_total: counter(&r, &n("gate_evaluations_total"), "Evaluations of the plan's signal gate (Prometheus queries), by result (open, closed, error).", &["plan", "gate", "result"]),
            freeze_active: gauge(&r, &n("freeze_active"), "1 while one of the UpgradeFreeze's periods is active (it holds the plans it selects).", &["freeze"]),
            freeze_ready: gauge(&r, &n("freeze_ready"), "1 when the UpgradeFreeze can be evaluated (Ready=True); 0: it holds nothing.", &["freeze"]),
            reconcile_total: counter(&r, "controller_runtime_reconcile_total", "Reconciles per controller and result.", &["controller", "result"]),
            reconcile_errors_total: counter(&r, "controller_runtime_reconcile_errors_total", "Reconciles that returned an error.", &["controller"]),
            reconcile_time: histogram(&r, "controller_runtime_reconcile_time_seconds", "Time per reconcile.", &["controller"], prometheus::DEFAULT_BUCKETS.to_vec()),
            workqueue_depth: gauge(&r, "workqueue_depth", "Reconciles of this controller in progress (kube-rs has no exposed queue; this is its closest measure).", &["name"]),
            leader: gauge(&r, "leader_election_master_status", "1 while this replica leads (always 1 without leader election).", &["name"]),
            rest_requests: counter(&r, "rest_client_requests_total", "API requests this controller made, by method and resource.", &["method", "resource"]),
            registry: r,
            emitted: Mutex::default(),
            counted: Mutex::default(),
            freezes: Mutex::default(),
        };
        m.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        // The error ratio of the reconcile alert needs both series from the start.
        for c in CONTROLLERS {
            m.reconcile_errors_total.with_label_values(&[c]).inc_by(0);
            for result in ["success", "error"] {
                m.reconcile_total.with_label_values(&[c, result]).inc_by(0);
            }
        }
        m
    }

    fn ivec(&self, g: G) -> Option<&IntGaugeVec> {
        Some(match g {
            G::PlanInfo => &self.plan_info,
            G::PlanPhase => &self.plan_phase,
            G::PlanSuspended => &self.plan_suspended,
            G::PlanReady => &self.plan_ready,
            G::PlanLastRunResult => &self.plan_last_run_result,
            G::PlanLastRunInfo => &self.plan_last_run_info,
            G::PlanActiveRunInfo => &self.plan_active_run_info,
            G::PlanRunCreateFailing => &self.plan_run_create_failing,
            G::PlanLastRunFailedResources => &self.plan_last_run_failed_resources,
            G::GroupFailureBudget => &self.group_failure_budget,
            G::GroupMaxConcurrent => &self.group_max_concurrent,
            G::WindowOpen => &self.window_open,
            G::WindowActive => &self.window_active,
            G::RunResources => &self.run_resources,
            G::Blocked => &self.blocked,
            G::GateOpen => &self.gate_open,
            G::GateError => &self.gate_error,
            _ => return None,
        })
    }

    fn fvec(&self, g: G) -> Option<&GaugeVec> {
        Some(match g {
            G::PlanNextRun => &self.plan_next_run,
            G::PlanLastSchedule => &self.plan_last_schedule,
            G::PlanLastRunFinished => &self.plan_last_run_finished,
            G::PlanLastFailure => &self.plan_last_failure,
            G::WindowNextOpen => &self.window_next_open,
            G::WindowNextClose => &self.window_next_close,
            _ => return None,
        })
    }

    /// Replaces the series of one part of a plan with `series`.
    fn replace(&self, plan: &str, part: &'static str, series: Vec<(G, Vec<String>, f64)>) {
        let Ok(mut emitted) = self.emitted.lock() else { return };
        let key = (plan.to_string(), part);
        for (g, labels) in emitted.remove(&key).unwrap_or_default() {
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            if let Some(v) = self.ivec(g) {
                let _ = v.remove_label_values(&values);
            } else if let Some(v) = self.fvec(g) {
                let _ = v.remove_label_values(&values);
            }
        }
        let mut now = Vec::with_capacity(series.len());
        for (g, labels, value) in series {
            let values: Vec<&str> = labels.iter().map(String::as_str).collect();
            if let Some(v) = self.ivec(g) {
                v.with_label_values(&values).set(value as i64);
            } else if let Some(v) = self.fvec(g) {
                v.with_label_values(&values).set(value);
            }
            now.push((g, labels));
        }
        if !now.is_empty() {
            emitted.insert(key, now);
        }
    }

    /// Writes everything the plan reconciler knows of `plan`.
    pub fn set_plan(&self, plan: &str, s: &PlanSample) {
        let p = || plan.to_string();
        let mut series = vec![
            (
                G::PlanInfo,
                vec![p(), s.promise.clone(), s.to.clone(), s.time_zone.clone()],
                1.0,
            ),
            (G::PlanPhase, vec![p(), "Available".into()], f64::from(!s.running)),
            (G::PlanPhase, vec![p(), "Running".into()], f64::from(s.running)),
            (G::PlanSuspended, vec![p()], f64::from(s.suspended)),
            (G::PlanReady, vec![p()], f64::from(s.ready)),
        ];
        if let Some(t) = s.next_run {
            series.push((G::PlanNextRun, vec![p()], t));
        }
        if let Some(t) = s.last_schedule {
            series.push((G::PlanLastSchedule, vec![p()], t));
        }
        if let Some(result) = s.last_result {
            for r in RESULTS {
                series.push((G::PlanLastRunResult, vec![p(), r.into()], f64::from(r == result)));
            }
        }
        if let Some(t) = s.last_finished {
            series.push((G::PlanLastRunFinished, vec![p()], t));
        }
        if let Some(r) = &s.last_run {
            series.push((
                G::PlanLastRunInfo,
                vec![p(), r.run.clone(), r.state.clone(), r.reason.clone()],
                1.0,
            ));
        }
        if let Some(n) = s.last_run_failed_resources {
            series.push((G::PlanLastRunFailedResources, vec![p()], n as f64));
        }
        if let Some((r, at)) = &s.last_failure {
            series.push((G::PlanLastFailure, vec![p(), r.run.clone(), r.reason.clone()], *at));
        }
        if let Some(r) = &s.active_run {
            series.push((
                G::PlanActiveRunInfo,
                vec![p(), r.run.clone(), r.state.clone(), r.reason.clone()],
                1.0,
            ));
        }
        for g in &s.groups {
            let pg = || vec![p(), g.name.clone()];
            series.push((G::WindowOpen, pg(), f64::from(g.window_open)));
            if let Some(c) = g.max_concurrent {
                series.push((G::GroupMaxConcurrent, pg(), c as f64));
            }
            if let Some(b) = g.failure_budget {
                series.push((G::GroupFailureBudget, pg(), b as f64));
            }
            for (i, kind, active) in &g.windows {
                series.push((
                    G::WindowActive,
                    vec![p(), g.name.clone(), i.to_string(), kind.to_string()],
                    f64::from(*active),
                ));
            }
            if let Some(t) = g.next_open {
                series.push((G::WindowNextOpen, pg(), t));
            }
            if let Some(t) = g.next_close {
                series.push((G::WindowNextClose, pg(), t));
            }
        }
        self.replace(plan, "plan", series);
        self.init_counters(plan, s.groups.iter().map(|g| g.name.as_str()));
    }

    /// Whether the API server refused the run the plan's due trigger asks for.
    pub fn set_run_create_failing(&self, plan: &str, failing: bool) {
        self.replace(
            plan,
            "create",
            vec![(G::PlanRunCreateFailing, vec![plan.to_string()], f64::from(failing))],
        );
    }

    /// Creates the plan's counter and histogram series at 0, once per plan and group, so that
    /// the first failure or duration is an increase (a series born at 1 is invisible to
    /// `increase()` and `rate()`).
    fn init_counters<'a>(&self, plan: &str, groups: impl Iterator<Item = &'a str>) {
        let Ok(mut counted) = self.counted.lock() else { return };
        let known = counted.entry(plan.to_string()).or_default();
        let mut wanted: Vec<CountedSeries> = vec![(Counted::RunsSuperseded, vec![plan.to_string()])];
        for trigger in TRIGGERS {
            for result in RESULTS {
                wanted.push((Counted::Runs, vec![plan.into(), trigger.into(), result.into()]));
            }
        }
        for result in RESULTS {
            wanted.push((Counted::RunDuration, vec![plan.into(), result.into()]));
        }
        for group in groups {
            for result in RESOURCE_RESULTS {
                wanted.push((
                    Counted::ResourceUpgrades,
                    vec![plan.into(), group.into(), result.into()],
                ));
            }
            wanted.push((Counted::ResourceUpgradeDuration, vec![plan.into(), group.into()]));
        }
        for (c, labels) in wanted {
            self.init_series(known, c, labels);
        }
    }

    /// Creates one counter or histogram series at 0 unless `known` (the plan's) has it.
    fn init_series(&self, known: &mut Vec<CountedSeries>, c: Counted, labels: Vec<String>) {
        if known.iter().any(|(k, l)| *k == c && *l == labels) {
            return;
        }
        let values: Vec<&str> = labels.iter().map(String::as_str).collect();
        match self.counter(c) {
            Ok(counter) => counter.with_label_values(&values).inc_by(0),
            // A histogram's series exist, all buckets at 0, once its labels are used.
            Err(histogram) => drop(histogram.with_label_values(&values)),
        }
        known.push((c, labels));
    }

    /// The counter, or the histogram, of `c`.
    fn counter(&self, c: Counted) -> Result<&IntCounterVec, &HistogramVec> {
        match c {
            Counted::Runs => Ok(&self.runs_total),
            Counted::RunsSuperseded => Ok(&self.runs_superseded_total),
            Counted::ResourceUpgrades => Ok(&self.resource_upgrades_total),
            Counted::RunDuration => Err(&self.run_duration),
            Counted::ResourceUpgradeDuration => Err(&self.resource_upgrade_duration),
            Counted::GateEvaluations => Ok(&self.gate_evaluations_total),
        }
    }

    /// Writes the active run's series of `plan`; `None` when the plan has no active run.
    pub fn set_run(&self, plan: &str, s: Option<&RunSample>) {
        let Some(s) = s else {
            self.replace(plan, "run", vec![]);
            return;
        };
        let mut series: Vec<(G, Vec<String>, f64)> = s
            .resources
            .iter()
            .map(|(g, state, n)| {
                (
                    G::RunResources,
                    vec![plan.to_string(), g.clone(), state.to_string()],
                    *n as f64,
                )
            })
            .collect();
        if let Some((group, reason)) = &s.blocked {
            series.push((
                G::Blocked,
                vec![plan.to_string(), group.clone(), reason.to_string()],
                1.0,
            ));
        }
        self.replace(plan, "run", series);
    }

    /// Records one evaluation of `plan`'s gate `gate`.
    pub fn record_gate_evaluation(&self, plan: &str, gate: &str, result: &'static str) {
        if let Ok(mut counted) = self.counted.lock() {
            let known = counted.entry(plan.to_string()).or_default();
            // Every result's series from the first evaluation, so the first error is an increase.
            for r in ["open", "closed", "error"] {
                self.init_series(
                    known,
                    Counted::GateEvaluations,
                    vec![plan.into(), gate.into(), r.into()],
                );
            }
        }
        self.gate_evaluations_total
            .with_label_values(&[plan, gate, result])
            .inc();
    }

    /// The plan's gates as last read, (gate, reading); empty when no active run reads them (the
    /// series go: a gate nothing waits on alerts nobody).
    pub fn set_gates(&self, plan: &str, gates: &[(String, &upgradeplan::engine::gate::Reading)]) {
        let mut series = Vec::new();
        for (gate, reading) in gates {
            let labels = vec![plan.to_string(), gate.clone()];
            series.push((G::GateOpen, labels.clone(), f64::from(reading.is_open())));
            let error = matches!(reading, upgradeplan::engine::gate::Reading::Error(_));
            series.push((G::GateError, labels, f64::from(error)));
        }
        self.replace(plan, "gates", series);
    }

    /// The freeze's gauges.
    pub fn set_freeze(&self, freeze: &str, active: bool, ready: bool) {
        self.freeze_active.with_label_values(&[freeze]).set(i64::from(active));
        self.freeze_ready.with_label_values(&[freeze]).set(i64::from(ready));
        if let Ok(mut f) = self.freezes.lock() {
            f.insert(freeze.to_string());
        }
    }

    /// Removes the gauges of freezes not in `live`.
    pub fn retain_freezes(&self, live: &std::collections::HashSet<String>) {
        let Ok(mut freezes) = self.freezes.lock() else { return };
        freezes.retain(|f| {
            if live.contains(f) {
                return true;
            }
            let _ = self.freeze_active.remove_label_values(&[f]);
            let _ = self.freeze_ready.remove_label_values(&[f]);
            false
        });
    }

    /// Removes every gauge of plans not in `live`.
    pub fn retain_plans(&self, live: &std::collections::HashSet<String>) {
        let stale: Vec<(String, &'static str)> = match self.emitted.lock() {
            Ok(e) => e.keys().filter(|(p, _)| !live.contains(p)).cloned().collect(),
            Err(_) => return,
        };
        for (plan, part) in stale {
            self.replace(&plan, part, vec![]);
        }
        let Ok(mut counted) = self.counted.lock() else { return };
        counted.retain(|plan, series| {
            if live.contains(plan) {
                return true;
            }
            for (c, labels) in series.iter() {
                let values: Vec<&str> = labels.iter().map(String::as_str).collect();
                let _ = match self.counter(*c) {
                    Ok(counter) => counter.remove_label_values(&values),
                    Err(histogram) => histogram.remove_label_values(&values),
                };
            }
            false
        });
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// Every metric name this controller can export (whether or not it has samples yet).
    #[cfg(test)]
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for c in [
            &self.build_info as &dyn prometheus::core::Collector,
            &self.plan_info,
            &self.plan_phase,
            &self.plan_suspended,
            &self.plan_ready,
            &self.plan_next_run,
            &self.plan_last_schedule,
            &self.plan_last_run_result,
            &self.plan_last_run_finished,
            &self.plan_last_run_info,
            &self.plan_active_run_info,
            &self.plan_last_failure,
            &self.plan_last_run_failed_resources,
            &self.group_failure_budget,
            &self.plan_run_create_failing,
            &self.runs_total,
            &self.runs_superseded_total,
            &self.run_duration,
            &self.run_resources,
            &self.resource_upgrades_total,
            &self.resource_upgrade_duration,
            &self.group_max_concurrent,
            &self.window_open,
            &self.window_active,
            &self.window_next_open,
            &self.window_next_close,
            &self.blocked,
            &self.gate_open,
            &self.gate_error,
            &self.gate_evaluations_total,
            &self.freeze_active,
            &self.freeze_ready,
            &self.reconcile_total,
            &self.reconcile_errors_total,
            &self.reconcile_time,
            &self.workqueue_depth,
            &self.leader,
        ] {
            for d in c.desc() {
                names.push(d.fq_name.clone());
            }
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use upgradeplan::engine::lifecycle::plan::{GroupGauges as GroupSample, RunInfo};

    fn monitoring(file: &str) -> String {
        std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../deploy/monitoring")
                .join(file),
        )
        .unwrap()
    }

    /// Metric names an expression uses (histogram series map to their histogram).
    fn names_in(text: &str) -> BTreeSet<String> {
        let re = regex::Regex::new(
            r"\b(upgradeplan_[a-z_]+|controller_runtime_[a-z_]+|workqueue_[a-z_]+|leader_election_[a-z_]+)\b",
        )
        .unwrap();
        re.find_iter(text)
            .map(|m| {
                m.as_str()
                    .trim_end_matches("_bucket")
                    .trim_end_matches("_count")
                    .trim_end_matches("_sum")
                    .to_string()
            })
            .collect()
    }

    /// Every PromQL expression of the dashboard: panel targets and annotations.
    fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
        let targets = dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|p| p["targets"].as_array().into_iter().flatten());
        let annotations = dashboard["annotations"]["list"].as_array().into_iter().flatten();
        targets
            .chain(annotations)
            .filter_map(|t| t["expr"].as_str().map(String::from))
            .collect()
    }

    #[test]
    fn rules_and_dashboard_use_only_exported_metrics() {
        let exported: BTreeSet<String> = Metrics::new().names().into_iter().collect();
        let rules: serde_json::Value = serde_saphyr::from_str(&monitoring("rules.yaml")).unwrap();
        let exprs: Vec<String> = rules["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["expr"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(exprs.len(), 13);
        let dashboard: serde_json::Value = serde_json::from_str(&monitoring("dashboard.json")).unwrap();
        let panel_exprs = dashboard_queries(&dashboard);
        let used: BTreeSet<String> = exprs.iter().chain(&panel_exprs).flat_map(|e| names_in(e)).collect();
        let missing: Vec<&String> = used.difference(&exported).collect();
        assert!(missing.is_empty(), "used but not exported: {missing:?}");
        // Grafana conventions: every plan-scoped query follows the `plan` variable, every rate
        // uses $__rate_interval, the alert list and the failed-run annotations are there.
        for e in &panel_exprs {
            if e.contains("upgradeplan_") && !e.contains("upgradeplan_build_info") {
                assert!(e.contains(r#"plan=~"$plan"#), "not filtered by $plan: {e}");
            }
            if e.contains("rate(") || e.contains("increase(") {
                assert!(
                    e.matches("[$__rate_interval]").count() == e.matches('[').count(),
                    "a range other than $__rate_interval: {e}"
                );
            }
        }
        let variables = dashboard["templating"]["list"].as_array().unwrap();
        assert!(variables
            .iter()
            .any(|v| v["name"] == "plan" && v["definition"] == "label_values(upgradeplan_plan_info, plan)"));
        assert!(dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["type"] == "alertlist"));
        assert!(dashboard["annotations"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "Failed runs" && a["useValueForTime"] == true));
        // The dashboard has the panels the spec asks for.
        let titles: Vec<&str> = dashboard["panels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["title"].as_str().unwrap())
            .collect();
        for t in [
            "Plans by phase",
            "Next runs",
            "Window timeline (gate open)",
            "Active run progress by group",
            "Run outcomes",
            "Upgrade duration (p50, p90)",
            "Reconciles",
        ] {
            assert!(titles.contains(&t), "dashboard lacks {t}");
        }
        // Every alert has severity, summary, description and an absolute runbook_url whose
        // anchor is a section of docs/runbooks.md.
        let runbooks =
            std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/runbooks.md"))
                .unwrap();
        for r in rules["groups"][0]["rules"].as_array().unwrap() {
            let alert = r["alert"].as_str().unwrap();
            assert!(r["labels"]["severity"].is_string(), "{r}");
            for a in ["summary", "description", "runbook_url"] {
                assert!(
                    r["annotations"][a].as_str().is_some_and(|s| !s.is_empty()),
                    "{alert} lacks {a}"
                );
            }
            let url = r["annotations"]["runbook_url"].as_str().unwrap();
            assert_eq!(
                url,
                format!(
                    "https://github.com/upgradeplan/upgradeplan/blob/main/docs/runbooks.md#{}",
                    alert.to_lowercase()
                ),
                "{alert}"
            );
            assert!(
                runbooks.contains(&format!("\n## {alert}\n")),
                "docs/runbooks.md has no section for {alert}"
            );
        }
    }

    #[test]
    fn every_spec_metric_is_exported() {
        let exported: BTreeSet<String> = Metrics::new().names().into_iter().collect();
        for name in [
            "build_info",
            "plan_info",
            "plan_phase",
            "plan_suspended",
            "plan_ready",
            "plan_next_run_timestamp_seconds",
            "plan_last_schedule_timestamp_seconds",
            "plan_last_run_result",
            "plan_last_run_finished_timestamp_seconds",
            "runs_total",
            "runs_superseded_total",
            "run_duration_seconds",
            "run_resources",
            "resource_upgrades_total",
            "resource_upgrade_duration_seconds",
            "group_max_concurrent",
            "window_open",
            "window_active",
            "window_next_open_timestamp_seconds",
            "window_next_close_timestamp_seconds",
            "blocked",
            "plan_last_run_failed_resources",
            "group_failure_budget",
            "freeze_active",
        ] {
            assert!(exported.contains(&format!("upgradeplan_{name}")), "{name}");
        }
        for name in [
            "controller_runtime_reconcile_total",
            "controller_runtime_reconcile_errors_total",
            "controller_runtime_reconcile_time_seconds",
            "workqueue_depth",
            "leader_election_master_status",
        ] {
            assert!(exported.contains(name), "{name}");
        }
    }

    #[test]
    fn operator_and_plain_copies_agree() {
        let plain: serde_json::Value = serde_saphyr::from_str(&monitoring("rules.yaml")).unwrap();
        let operator: serde_json::Value = serde_saphyr::from_str(&monitoring("prometheusrule.yaml")).unwrap();
        assert_eq!(operator["kind"], "PrometheusRule");
        assert_eq!(
            operator["spec"]["groups"], plain["groups"],
            "prometheusrule.yaml must carry rules.yaml's groups"
        );
        let cm: serde_json::Value = serde_saphyr::from_str(&monitoring("dashboard-configmap.yaml")).unwrap();
        let embedded: serde_json::Value =
            serde_json::from_str(cm["data"]["upgradeplan.json"].as_str().unwrap()).unwrap();
        let dashboard: serde_json::Value = serde_json::from_str(&monitoring("dashboard.json")).unwrap();
        assert_eq!(embedded, dashboard, "the ConfigMap must embed dashboard.json");
        assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    }

    #[test]
    fn freeze_gauges_follow_the_freeze_and_go_with_it() {
        let m = Metrics::new();
        m.set_freeze("eoy", true, true);
        m.set_freeze("typo", false, false);
        let text = m.render();
        for line in [
            "upgradeplan_freeze_active{freeze=\"eoy\"} 1",
            "upgradeplan_freeze_ready{freeze=\"eoy\"} 1",
            "upgradeplan_freeze_active{freeze=\"typo\"} 0",
            "upgradeplan_freeze_ready{freeze=\"typo\"} 0",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        m.retain_freezes(&["eoy".to_string()].into());
        let text = m.render();
        assert!(text.contains("upgradeplan_freeze_active{freeze=\"eoy\"} 1"));
        assert!(!text.contains("typo"), "a deleted freeze leaves no series:\n{text}");
    }

    #[test]
    fn plan_gauges_are_replaced_and_removed_with_the_plan() {
        let m = Metrics::new();
        let sample = PlanSample {
            promise: "redis".into(),
            to: "v2".into(),
            time_zone: "UTC".into(),
            running: true,
            ready: true,
            last_result: Some("Failed"),
            groups: vec![GroupSample {
                name: "dev".into(),
                window_open: true,
                windows: vec![(0, "allow", true)],
                ..Default::default()
            }],
            ..Default::default()
        };
        m.set_plan(
            "p",
            &PlanSample {
                last_run: Some(RunInfo {
                    run: "p-1".into(),
                    state: "Failed".into(),
                    reason: "ResourceUpgradeFailed".into(),
                }),
                active_run: Some(RunInfo {
                    run: "p-2".into(),
                    state: "Pending".into(),
                    reason: "PromiseNotFound".into(),
                }),
                last_failure: Some((
                    RunInfo {
                        run: "p-1".into(),
                        state: "Failed".into(),
                        reason: "ResourceUpgradeFailed".into(),
                    },
                    1.8e9,
                )),
                ..sample.clone()
            },
        );
        m.set_run_create_failing("p", true);
        let text = m.render();
        for series in [
            r#"upgradeplan_plan_last_run_info{plan="p",reason="ResourceUpgradeFailed",result="Failed",run="p-1"} 1"#,
            r#"upgradeplan_plan_active_run_info{plan="p",reason="PromiseNotFound",run="p-2",state="Pending"} 1"#,
            r#"upgradeplan_plan_run_create_failing{plan="p"} 1"#,
            r#"upgradeplan_plan_last_failure_timestamp_seconds{plan="p",reason="ResourceUpgradeFailed",run="p-1"} 1800000000"#,
            // Counters exist at 0 from the moment the plan is seen: increase() sees the first failure.
            r#"upgradeplan_runs_total{plan="p",result="Failed",trigger="scheduled"} 0"#,
            r#"upgradeplan_runs_total{plan="p",result="Cancelled",trigger="manual"} 0"#,
            r#"upgradeplan_runs_superseded_total{plan="p"} 0"#,
            r#"upgradeplan_resource_upgrades_total{group="dev",plan="p",result="failed"} 0"#,
            r#"upgradeplan_resource_upgrade_duration_seconds_count{group="dev",plan="p"} 0"#,
            r#"upgradeplan_run_duration_seconds_count{plan="p",result="Failed"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="upgraderun"} 0"#,
            r#"controller_runtime_reconcile_total{controller="upgradeplan",result="error"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // Seen again, a counter keeps its count.
        m.runs_total.with_label_values(&["p", "scheduled", "Failed"]).inc();
        m.set_plan("p", &sample);
        assert!(m
            .render()
            .contains(r#"upgradeplan_runs_total{plan="p",result="Failed",trigger="scheduled"} 1"#));
        assert!(
            !m.render().contains("upgradeplan_plan_last_run_info{"),
            "no lastRun, no info"
        );
        m.set_run(
            "p",
            Some(&RunSample {
                resources: vec![("dev".into(), "pending", 3)],
                blocked: Some(("dev".into(), "WindowClosed")),
            }),
        );
        let text = m.render();
        assert!(
            text.contains(r#"upgradeplan_plan_phase{phase="Running",plan="p"} 1"#),
            "{text}"
        );
        assert!(text.contains(r#"upgradeplan_plan_last_run_result{plan="p",result="Failed"} 1"#));
        assert!(text.contains(r#"upgradeplan_plan_last_run_result{plan="p",result="Completed"} 0"#));
        assert!(text.contains(r#"upgradeplan_window_active{group="dev",index="0",kind="allow",plan="p"} 1"#));
        assert!(text.contains(r#"upgradeplan_blocked{group="dev",plan="p",reason="WindowClosed"} 1"#));
        // A group renamed: its old series go.
        m.set_plan(
            "p",
            &PlanSample {
                groups: vec![GroupSample {
                    name: "prod".into(),
                    ..Default::default()
                }],
                ..sample.clone()
            },
        );
        let text = m.render();
        assert!(!text.contains(r#"upgradeplan_window_open{group="dev""#), "{text}");
        assert!(!text.contains(r#"upgradeplan_window_active{group="dev""#), "{text}");
        assert!(
            text.contains(r#"upgradeplan_window_open{group="prod",plan="p"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"upgradeplan_blocked{group="dev",plan="p",reason="WindowClosed"} 1"#),
            "the run part is separate: {text}"
        );
        m.set_run("p", None);
        assert!(
            !m.render().contains("upgradeplan_blocked{"),
            "the run's series go when it ends"
        );
        m.retain_plans(&Default::default());
        let text = m.render();
        assert!(
            !text.contains(r#"plan="p""#),
            "every series of a deleted plan goes: {text}"
        );
        assert!(text.contains("upgradeplan_build_info"));
    }
}
