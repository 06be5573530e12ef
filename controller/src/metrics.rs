//! Prometheus metrics (spec §9.1). Names are a contract: the alerts and the dashboard use them.
//!
//! Gauges that describe state are computed when Prometheus scrapes, from the controller's caches
//! (kube-state-metrics' design): a plan or freeze that is gone has no series, so none can be stale
//! and nothing has to be removed. What only a reconcile knows — the active run's evaluation, the
//! gates' last readings, a refused run creation — it records per plan, and a scrape shows it only
//! while that plan (and, for a run's, an active run of it) exists. The counters of runs and
//! outcomes (`runs_total`, `runs_superseded_total`, `resource_upgrades_total`) are read at scrape
//! time too, from the plan's runs and what its status keeps of deleted ones
//! ([`upgradeplan::engine::counters`]): the same on every process that leads, whatever crashed
//! before, so each run and outcome is counted exactly once (spec §14.2). The other counters and
//! the durations are counted in memory and are created at 0 for every plan a scrape sees and
//! dropped with it. No label carries a resource or run name.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Label values of `upgradeplan_runs_total{trigger}`.
pub const TRIGGERS: [&str; 3] = ["scheduled", "manual", "revert"];
/// Label values of `upgradeplan_resource_upgrades_total{result}`.
pub const RESOURCE_RESULTS: [&str; 3] = ["succeeded", "failed", "skipped"];
/// The `controller` label of the reconcile metrics.
pub const CONTROLLERS: [&str; 4] = ["upgradeplan", "upgraderun", "upgradefreeze", "upgradebudget"];

pub const RESULTS: [&str; 3] = ["Completed", "Failed", "Cancelled"];

/// The plan's gauges and each group's, as the engine decides them.
pub use upgradeplan::engine::lifecycle::plan::PlanGauges as PlanSample;

/// What the run reconciler knows of a plan's active run: the engine decides it.
pub use upgradeplan::engine::lifecycle::RunGauges as RunSample;

/// What one scrape shows, read from the caches ([`crate::context::Ctx::scrape_state`]).
#[derive(Debug, Default, Clone)]
pub struct State {
    /// Every plan of this controller, with its gauges.
    pub plans: Vec<(String, PlanSample)>,
    /// Plans with an active run: only theirs show run and gate series.
    pub active: HashSet<String>,
    /// Freezes whose status this controller writes: (name, active, ready).
    pub freezes: Vec<(String, bool, bool)>,
    /// Budgets whose status this controller writes: (name, in flight, max in flight).
    pub budgets: Vec<(String, usize, usize)>,
}

/// Reads the [`State`] at scrape time; `None` while the caches are not filled or another replica
/// leads (then only the counters kept in memory and controller health are shown).
pub type StateSource = Box<dyn Fn() -> Option<State> + Send + Sync>;

fn gauge(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn fgauge(name: &str, help: &str, labels: &[&str]) -> GaugeVec {
    GaugeVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn counter(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric")
}

fn histogram(name: &str, help: &str, labels: &[&str], buckets: Vec<f64>) -> HistogramVec {
    HistogramVec::new(HistogramOpts::new(name, help).buckets(buckets), labels).expect("valid metric")
}

fn register<C: Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry.register(Box::new(c.clone())).expect("unique metric");
    c
}

fn n(s: &str) -> String {
    format!("upgradeplan_{s}")
}

/// The state gauges of one scrape, filled from a [`State`] and collected once.
struct StateGauges {
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
    plan_run_create_failing: IntGaugeVec,
    group_failure_budget: IntGaugeVec,
    group_max_concurrent: IntGaugeVec,
    window_open: IntGaugeVec,
    window_active: IntGaugeVec,
    window_next_open: GaugeVec,
    window_next_close: GaugeVec,
    run_resources: IntGaugeVec,
    blocked: IntGaugeVec,
    gate_open: IntGaugeVec,
    gate_error: IntGaugeVec,
    freeze_active: IntGaugeVec,
    freeze_ready: IntGaugeVec,
    budget_in_flight: IntGaugeVec,
    budget_max_in_flight: IntGaugeVec,
    runs_total: IntCounterVec,
    runs_superseded_total: IntCounterVec,
    resource_upgrades_total: IntCounterVec,
}

impl StateGauges {
    fn new() -> StateGauges {
        StateGauges {
            plan_info: gauge(&n("plan_info"), "Always 1 per plan; its Promise, target version and time zone.", &["plan", "promise", "to_version", "time_zone"]),
            plan_phase: gauge(&n("plan_phase"), "1 for the plan's current phase (Available or Running), 0 for the other.", &["plan", "phase"]),
            plan_suspended: gauge(&n("plan_suspended"), "1 when the plan is suspended (no scheduled runs).", &["plan"]),
            plan_ready: gauge(&n("plan_ready"), "1 when the plan is valid (Ready=True).", &["plan"]),
            plan_next_run: fgauge(&n("plan_next_run_timestamp_seconds"), "Unix time of the plan's next trigger (nextRunAt).", &["plan"]),
            plan_last_schedule: fgauge(&n("plan_last_schedule_timestamp_seconds"), "Unix time of the trigger last serviced (lastScheduledAt).", &["plan"]),
            plan_last_run_result: gauge(&n("plan_last_run_result"), "1 for the result of the plan's last finished run, 0 for the others.", &["plan", "result"]),
            plan_last_run_finished: fgauge(&n("plan_last_run_finished_timestamp_seconds"), "Unix time the plan's last run finished.", &["plan"]),
            plan_last_run_info: gauge(&n("plan_last_run_info"), "Always 1, one series per plan: its last finished run (status.lastRun), so that alerts can name it.", &["plan", "run", "result", "reason"]),
            plan_active_run_info: gauge(&n("plan_active_run_info"), "Always 1, one series per plan with an active run: its name, state and, while Pending, why (PlanInvalid, PromiseNotFound, PromiseRevisionNotFound).", &["plan", "run", "state", "reason"]),
            plan_last_failure: fgauge(&n("plan_last_failure_timestamp_seconds"), "Unix time the plan's most recent failed run ended, one series per plan; run and reason name it, revert_of the run it reverted when it was a revert.", &["plan", "run", "reason", "revert_of"]),
            plan_last_run_failed_resources: gauge(&n("plan_last_run_failed_resources"), "Resources that failed in the plan's last run (within its failure budget when it completed).", &["plan"]),
            plan_run_create_failing: gauge(&n("plan_run_create_failing"), "1 while the API server refuses the run a due trigger asks for (the trigger is retried).", &["plan"]),
            group_failure_budget: gauge(&n("group_failure_budget"), "Failed resources the group tolerates (maxFailures resolved against its current size; 0: the first failure fails the run).", &["plan", "group"]),
            group_max_concurrent: gauge(&n("group_max_concurrent"), "The group's resolved maxConcurrent (its size when unlimited).", &["plan", "group"]),
            window_open: gauge(&n("window_open"), "1 while the group's window gate lets upgrades start.", &["plan", "group"]),
            window_active: gauge(&n("window_active"), "1 while the group's window (by index) is active.", &["plan", "group", "index", "kind"]),
            window_next_open: fgauge(&n("window_next_open_timestamp_seconds"), "Unix time the group's gate next opens.", &["plan", "group"]),
            window_next_close: fgauge(&n("window_next_close_timestamp_seconds"), "Unix time the group's gate next closes.", &["plan", "group"]),
            run_resources: gauge(&n("run_resources"), "Resources of the plan's active run by group and state.", &["plan", "group", "state"]),
            blocked: gauge(&n("blocked"), "1 while the plan's active run waits, by group and reason (WindowClosed, ConcurrencyLimit, BudgetExhausted, Suspended, RevisionMissing, Frozen, GateClosed, Soaking, AwaitingApproval).", &["plan", "group", "reason"]),
            gate_open: gauge(&n("gate_open"), "1 while the plan's signal gate is open, 0 while closed (firing or not evaluable), as last evaluated.", &["plan", "gate"]),
            gate_error: gauge(&n("gate_error"), "1 while the plan's signal gate cannot be evaluated (Prometheus unreachable, timeout, bad query): it is closed by fail-safe, not by its signal.", &["plan", "gate"]),
            freeze_active: gauge(&n("freeze_active"), "1 while one of the UpgradeFreeze's periods is active (it holds the plans it selects).", &["freeze"]),
            freeze_ready: gauge(&n("freeze_ready"), "1 when the UpgradeFreeze can be evaluated (Ready=True); 0: it holds nothing.", &["freeze"]),
            budget_in_flight: gauge(&n("budget_in_flight"), "Resource upgrades in flight in the active runs of the plans the UpgradeBudget selects (verifying and retries included).", &["budget"]),
            budget_max_in_flight: gauge(&n("budget_max_in_flight"), "The UpgradeBudget's maxInFlight.", &["budget"]),
            runs_total: counter(&n("runs_total"), "Runs that finished, by trigger and result (read from the plan's runs and what its status keeps of deleted ones).", &["plan", "trigger", "result"]),
            runs_superseded_total: counter(&n("runs_superseded_total"), "Runs superseded by a newer run of the same plan.", &["plan"]),
            resource_upgrades_total: counter(&n("resource_upgrades_total"), "Resource upgrades that ended, by result (succeeded, failed, skipped); a health-checked group's successes once its verdicts are final.", &["plan", "group", "result"]),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 30] {
        [
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
            &self.plan_run_create_failing,
            &self.group_failure_budget,
            &self.group_max_concurrent,
            &self.window_open,
            &self.window_active,
            &self.window_next_open,
            &self.window_next_close,
            &self.run_resources,
            &self.blocked,
            &self.gate_open,
            &self.gate_error,
            &self.freeze_active,
            &self.freeze_ready,
            &self.budget_in_flight,
            &self.budget_max_in_flight,
            &self.runs_total,
            &self.runs_superseded_total,
            &self.resource_upgrades_total,
        ]
    }

    /// Everything the caches say of `plan`.
    fn plan(&self, plan: &str, s: &PlanSample, create_failing: bool) {
        self.plan_info
            .with_label_values(&[plan, &s.promise, &s.to, &s.time_zone])
            .set(1);
        self.plan_phase
            .with_label_values(&[plan, "Available"])
            .set(i64::from(!s.running));
        self.plan_phase
            .with_label_values(&[plan, "Running"])
            .set(i64::from(s.running));
        self.plan_suspended
            .with_label_values(&[plan])
            .set(i64::from(s.suspended));
        self.plan_ready.with_label_values(&[plan]).set(i64::from(s.ready));
        self.plan_run_create_failing
            .with_label_values(&[plan])
            .set(i64::from(create_failing));
        if let Some(t) = s.next_run {
            self.plan_next_run.with_label_values(&[plan]).set(t);
        }
        if let Some(t) = s.last_schedule {
            self.plan_last_schedule.with_label_values(&[plan]).set(t);
        }
        if let Some(result) = s.last_result {
            for r in RESULTS {
                self.plan_last_run_result
                    .with_label_values(&[plan, r])
                    .set(i64::from(r == result));
            }
        }
        if let Some(t) = s.last_finished {
            self.plan_last_run_finished.with_label_values(&[plan]).set(t);
        }
        if let Some(r) = &s.last_run {
            self.plan_last_run_info
                .with_label_values(&[plan, &r.run, &r.state, &r.reason])
                .set(1);
        }
        if let Some(failed) = s.last_run_failed_resources {
            self.plan_last_run_failed_resources
                .with_label_values(&[plan])
                .set(failed);
        }
        if let Some((r, at)) = &s.last_failure {
            self.plan_last_failure
                .with_label_values(&[plan, &r.run, &r.reason, &r.revert_of])
                .set(*at);
        }
        if let Some(r) = &s.active_run {
            self.plan_active_run_info
                .with_label_values(&[plan, &r.run, &r.state, &r.reason])
                .set(1);
        }
        self.counters(plan, s);
        for g in &s.groups {
            let group = g.name.as_str();
            self.window_open
                .with_label_values(&[plan, group])
                .set(i64::from(g.window_open));
            if let Some(c) = g.max_concurrent {
                self.group_max_concurrent.with_label_values(&[plan, group]).set(c);
            }
            if let Some(b) = g.failure_budget {
                self.group_failure_budget.with_label_values(&[plan, group]).set(b);
            }
            for (i, kind, active) in &g.windows {
                self.window_active
                    .with_label_values(&[plan, group, &i.to_string(), kind])
                    .set(i64::from(*active));
            }
            if let Some(t) = g.next_open {
                self.window_next_open.with_label_values(&[plan, group]).set(t);
            }
            if let Some(t) = g.next_close {
                self.window_next_close.with_label_values(&[plan, group]).set(t);
            }
        }
    }

    /// The plan's counters as its runs and status record them (spec §14.2): every series from the
    /// moment the plan is seen, at 0 until something counts, so that `increase()` sees the first
    /// failure; a group's series stay while a run of the plan, or its status, counts them.
    fn counters(&self, plan: &str, s: &PlanSample) {
        let c = &s.counters;
        for trigger in TRIGGERS {
            for result in RESULTS {
                let n = c.runs.get(&(trigger.to_string(), result.to_string()));
                self.runs_total
                    .with_label_values(&[plan, trigger, result])
                    .inc_by(n.copied().unwrap_or(0));
            }
        }
        self.runs_superseded_total
            .with_label_values(&[plan])
            .inc_by(c.superseded);
        let counted = c.resources.keys().map(|(g, _)| g.as_str());
        let groups: std::collections::BTreeSet<&str> =
            s.groups.iter().map(|g| g.name.as_str()).chain(counted).collect();
        for group in groups {
            for result in RESOURCE_RESULTS {
                let n = c.resources.get(&(group.to_string(), result.to_string()));
                self.resource_upgrades_total
                    .with_label_values(&[plan, group, result])
                    .inc_by(n.copied().unwrap_or(0));
            }
        }
    }

    /// The active run's series of `plan`.
    fn run(&self, plan: &str, s: &RunSample) {
        for (group, state, count) in &s.resources {
            self.run_resources.with_label_values(&[plan, group, state]).set(*count);
        }
        for (group, reason) in &s.blocked {
            self.blocked.with_label_values(&[plan, group, reason]).set(1);
        }
    }

    /// A gate's last reading: (gate, open, error).
    fn gate(&self, plan: &str, (gate, open, error): &GateShown) {
        self.gate_open.with_label_values(&[plan, gate]).set(i64::from(*open));
        self.gate_error.with_label_values(&[plan, gate]).set(i64::from(*error));
    }

    fn budget(&self, (name, in_flight, max): &(String, usize, usize)) {
        let count = |n: &usize| i64::try_from(*n).unwrap_or(i64::MAX);
        self.budget_in_flight.with_label_values(&[name]).set(count(in_flight));
        self.budget_max_in_flight.with_label_values(&[name]).set(count(max));
    }

    fn freeze(&self, (name, active, ready): &(String, bool, bool)) {
        self.freeze_active.with_label_values(&[name]).set(i64::from(*active));
        self.freeze_ready.with_label_values(&[name]).set(i64::from(*ready));
    }
}

/// A gate's last reading as shown: (gate, open, error).
type GateShown = (String, bool, bool);

/// One counter series initialised for a plan: the counter and its label values.
type CountedSeries = (Counted, Vec<String>);

/// The counters (and histograms) labelled by plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Counted {
    TriggersMissed,
    RunDuration,
    ResourceUpgradeDuration,
    GateEvaluations,
}

/// The counters and histograms labelled by plan (clones share their values with [`Metrics`]'s).
#[derive(Clone)]
struct PlanCounters {
    run_duration: HistogramVec,
    resource_upgrade_duration: HistogramVec,
    gate_evaluations_total: IntCounterVec,
    triggers_missed_total: IntCounterVec,
}

impl PlanCounters {
    fn new() -> PlanCounters {
        let long_buckets = vec![
            1.0, 10.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
        ];
        PlanCounters {
            triggers_missed_total: counter(
                &n("triggers_missed_total"),
                "Triggers found past the plan's startingDeadline: recorded, not run.",
                &["plan"],
            ),
            run_duration: histogram(
                &n("run_duration_seconds"),
                "Duration of finished runs, from snapshot to end.",
                &["plan", "result"],
                long_buckets.clone(),
            ),
            resource_upgrade_duration: histogram(
                &n("resource_upgrade_duration_seconds"),
                "Time from starting a resource's upgrade to its success.",
                &["plan", "group"],
                long_buckets,
            ),
            gate_evaluations_total: counter(
                &n("gate_evaluations_total"),
                "Evaluations of the plan's signal gate (Prometheus queries), by result (open, closed, error).",
                &["plan", "gate", "result"],
            ),
        }
    }

    fn collectors(&self) -> [&dyn Collector; 4] {
        [
            &self.triggers_missed_total,
            &self.run_duration,
            &self.resource_upgrade_duration,
            &self.gate_evaluations_total,
        ]
    }

    /// The counter, or the histogram, of `c`.
    fn of(&self, c: Counted) -> Result<&IntCounterVec, &HistogramVec> {
        match c {
            Counted::TriggersMissed => Ok(&self.triggers_missed_total),
            Counted::RunDuration => Err(&self.run_duration),
            Counted::ResourceUpgradeDuration => Err(&self.resource_upgrade_duration),
            Counted::GateEvaluations => Ok(&self.gate_evaluations_total),
        }
    }
}

/// Every series labelled by plan or freeze, as one collector: what the reconciles recorded, the
/// state read at scrape time, and the plans' counters.
struct PlanSeries {
    source: OnceLock<StateSource>,
    /// The active run's gauges, by plan (written by the run reconcile).
    runs: Mutex<HashMap<String, RunSample>>,
    /// The gates' last readings, by plan.
    gates: Mutex<HashMap<String, Vec<GateShown>>>,
    /// Plans whose due run the API server refused last time.
    create_failing: Mutex<HashSet<String>>,
    counters: PlanCounters,
    /// Counter series initialised at 0 per plan (so that `increase()` sees their first
    /// increment), dropped with the plan.
    counted: Mutex<HashMap<String, Vec<CountedSeries>>>,
    descs: Vec<Desc>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Each write under these locks is a single insert or removal: a panic elsewhere leaves them whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl PlanSeries {
    fn new(counters: PlanCounters) -> PlanSeries {
        let descs = StateGauges::new()
            .collectors()
            .iter()
            .chain(counters.collectors().iter())
            .flat_map(|c| c.desc().into_iter().cloned())
            .collect();
        PlanSeries {
            source: OnceLock::new(),
            runs: Mutex::default(),
            gates: Mutex::default(),
            create_failing: Mutex::default(),
            counters,
            counted: Mutex::default(),
            descs,
        }
    }

    fn gather(&self) -> Vec<MetricFamily> {
        let mut families = Vec::new();
        if let Some(state) = self.source.get().and_then(|read| read()) {
            let gauges = StateGauges::new();
            let live: HashSet<&str> = state.plans.iter().map(|(p, _)| p.as_str()).collect();
            {
                let mut failing = lock(&self.create_failing);
                failing.retain(|p| live.contains(p.as_str()));
                for (plan, s) in &state.plans {
                    gauges.plan(plan, s, failing.contains(plan));
                    self.init_counters(plan, s.groups.iter().map(|g| g.name.as_str()));
                }
            }
            // Only an active run's: a run that ended, or whose plan is gone, shows nothing.
            let shown = |p: &String| live.contains(p.as_str()) && state.active.contains(p);
            let mut runs = lock(&self.runs);
            runs.retain(|p, _| shown(p));
            for (plan, s) in runs.iter() {
                gauges.run(plan, s);
            }
            drop(runs);
            let mut gates = lock(&self.gates);
            gates.retain(|p, _| shown(p));
            for (plan, readings) in gates.iter() {
                for r in readings {
                    gauges.gate(plan, r);
                }
            }
            drop(gates);
            for f in &state.freezes {
                gauges.freeze(f);
            }
            for b in &state.budgets {
                gauges.budget(b);
            }
            self.drop_counters_except(&live);
            families.extend(gauges.collectors().iter().flat_map(|c| c.collect()));
        }
        families.extend(self.counters.collectors().iter().flat_map(|c| c.collect()));
        families
    }

    /// Creates the plan's counter and histogram series at 0, once per plan and group, so that
    /// the first failure or duration is an increase (a series born at 1 is invisible to
    /// `increase()` and `rate()`).
    fn init_counters<'a>(&self, plan: &str, groups: impl Iterator<Item = &'a str>) {
        let mut counted = lock(&self.counted);
        let known = counted.entry(plan.to_string()).or_default();
        let mut wanted: Vec<CountedSeries> = vec![(Counted::TriggersMissed, vec![plan.to_string()])];
        for result in RESULTS {
            wanted.push((Counted::RunDuration, vec![plan.into(), result.into()]));
        }
        for group in groups {
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
        match self.counters.of(c) {
            Ok(counter) => counter.with_label_values(&values).inc_by(0),
            // A histogram's series exist, all buckets at 0, once its labels are used.
            Err(histogram) => drop(histogram.with_label_values(&values)),
        }
        known.push((c, labels));
    }

    /// Drops the counter series of plans not in `live`.
    fn drop_counters_except(&self, live: &HashSet<&str>) {
        lock(&self.counted).retain(|plan, series| {
            if live.contains(plan.as_str()) {
                return true;
            }
            for (c, labels) in series.iter() {
                let values: Vec<&str> = labels.iter().map(String::as_str).collect();
                let _ = match self.counters.of(*c) {
                    Ok(counter) => counter.remove_label_values(&values),
                    Err(histogram) => histogram.remove_label_values(&values),
                };
            }
            false
        });
    }
}

/// [`PlanSeries`] as registered (the registry owns its collectors; [`Metrics`] shares this one).
struct Shared(Arc<PlanSeries>);

impl Collector for Shared {
    fn desc(&self) -> Vec<&Desc> {
        self.0.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.0.gather()
    }
}

pub struct Metrics {
    pub registry: Registry,
    build_info: IntGaugeVec,
    pub triggers_missed_total: IntCounterVec,
    pub run_duration: HistogramVec,
    pub resource_upgrade_duration: HistogramVec,
    gate_evaluations_total: IntCounterVec,
    pub reconcile_total: IntCounterVec,
    pub reconcile_errors_total: IntCounterVec,
    pub reconcile_time: HistogramVec,
    pub workqueue_depth: IntGaugeVec,
    pub leader: IntGaugeVec,
    pub rest_requests: IntCounterVec,
    plans: Arc<PlanSeries>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let r = Registry::new();
        let counters = PlanCounters::new();
        let plans = Arc::new(PlanSeries::new(counters.clone()));
        r.register(Box::new(Shared(plans.clone()))).expect("unique metrics");
        let m = Metrics {
            build_info: register(&r, gauge(&n("build_info"), "Always 1; the controller's version.", &["version"])),
            triggers_missed_total: counters.triggers_missed_total,
            run_duration: counters.run_duration,
            resource_upgrade_duration: counters.resource_upgrade_duration,
            gate_evaluations_total: counters.gate_evaluations_total,
            reconcile_total: register(&r, counter("controller_runtime_reconcile_total", "Reconciles per controller and result.", &["controller", "result"])),
            reconcile_errors_total: register(&r, counter("controller_runtime_reconcile_errors_total", "Reconciles that returned an error.", &["controller"])),
            reconcile_time: register(&r, histogram("controller_runtime_reconcile_time_seconds", "Time per reconcile.", &["controller"], prometheus::DEFAULT_BUCKETS.to_vec())),
            workqueue_depth: register(&r, gauge("workqueue_depth", "Reconciles of this controller in progress (kube-rs has no exposed queue; this is its closest measure).", &["name"])),
            leader: register(&r, gauge("leader_election_master_status", "1 while this replica leads (always 1 without leader election).", &["name"])),
            rest_requests: register(&r, counter("rest_client_requests_total", "API requests this controller made, by method and resource.", &["method", "resource"])),
            registry: r,
            plans,
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

    /// Where scrapes read the state from (set once, when the caches exist).
    pub fn observe(&self, source: StateSource) {
        let _ = self.plans.source.set(source);
    }

    /// Whether the API server refused the run the plan's due trigger asks for.
    pub fn set_run_create_failing(&self, plan: &str, failing: bool) {
        let mut set = lock(&self.plans.create_failing);
        if failing {
            set.insert(plan.to_string());
        } else {
            set.remove(plan);
        }
    }

    /// Records the active run's gauges of `plan`; `None` when the plan has no active run.
    pub fn set_run(&self, plan: &str, s: Option<&RunSample>) {
        let mut runs = lock(&self.plans.runs);
        match s {
            Some(s) => runs.insert(plan.to_string(), s.clone()),
            None => runs.remove(plan),
        };
    }

    /// Applies a run step's gauges of `plan`: kept, set, or cleared with the gates' (the plan
    /// has no active run any more).
    pub fn set_run_gauges(&self, plan: &str, gauges: &upgradeplan::engine::lifecycle::Gauges) {
        use upgradeplan::engine::lifecycle::Gauges;
        match gauges {
            Gauges::Keep => {}
            Gauges::Set(g) => self.set_run(plan, Some(g)),
            Gauges::Clear => {
                self.set_run(plan, None);
                self.set_gates(plan, &[]);
            }
        }
    }

    /// Records one evaluation of `plan`'s gate `gate`.
    pub fn record_gate_evaluation(&self, plan: &str, gate: &str, result: &'static str) {
        {
            let mut counted = lock(&self.plans.counted);
            let known = counted.entry(plan.to_string()).or_default();
            // Every result's series from the first evaluation, so the first error is an increase.
            for r in ["open", "closed", "error"] {
                self.plans.init_series(
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
        let readings: Vec<GateShown> = gates
            .iter()
            .map(|(gate, reading)| {
                let error = matches!(reading, upgradeplan::engine::gate::Reading::Error(_));
                (gate.clone(), reading.is_open(), error)
            })
            .collect();
        let mut all = lock(&self.plans.gates);
        if readings.is_empty() {
            all.remove(plan);
        } else {
            all.insert(plan.to_string(), readings);
        }
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
        let others: [&dyn Collector; 7] = [
            &self.build_info,
            &self.reconcile_total,
            &self.reconcile_errors_total,
            &self.reconcile_time,
            &self.workqueue_depth,
            &self.leader,
            &self.rest_requests,
        ];
        others
            .iter()
            .flat_map(|c| c.desc().into_iter().map(|d| d.fq_name.clone()).collect::<Vec<_>>())
            .chain(self.plans.descs.iter().map(|d| d.fq_name.clone()))
            .collect()
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
        assert_eq!(exprs.len(), 15);
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
            "triggers_missed_total",
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
            "budget_in_flight",
            "budget_max_in_flight",
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

    /// Metrics whose scrapes read `state` (`None`: not leading, or the caches are not filled).
    fn observing(state: &Arc<Mutex<Option<State>>>) -> Metrics {
        let m = Metrics::new();
        let state = state.clone();
        m.observe(Box::new(move || lock(&state).clone()));
        m
    }

    #[test]
    fn budget_gauges_follow_the_budget_and_go_with_it() {
        let state = Arc::new(Mutex::new(Some(State {
            budgets: vec![("saturday".into(), 3, 200), ("kratix".into(), 0, 5)],
            ..Default::default()
        })));
        let m = observing(&state);
        let text = m.render();
        for series in [
            "upgradeplan_budget_in_flight{budget=\"saturday\"} 3",
            "upgradeplan_budget_max_in_flight{budget=\"saturday\"} 200",
            "upgradeplan_budget_in_flight{budget=\"kratix\"} 0",
        ] {
            assert!(text.contains(series), "{series}:\n{text}");
        }
        lock(&state).as_mut().unwrap().budgets.retain(|b| b.0 == "saturday");
        let text = m.render();
        assert!(!text.contains("kratix"), "a deleted budget leaves no series:\n{text}");
    }

    #[test]
    fn freeze_gauges_follow_the_freeze_and_go_with_it() {
        let state = Arc::new(Mutex::new(Some(State {
            freezes: vec![("eoy".into(), true, true), ("typo".into(), false, false)],
            ..Default::default()
        })));
        let m = observing(&state);
        let text = m.render();
        for line in [
            "upgradeplan_freeze_active{freeze=\"eoy\"} 1",
            "upgradeplan_freeze_ready{freeze=\"eoy\"} 1",
            "upgradeplan_freeze_active{freeze=\"typo\"} 0",
            "upgradeplan_freeze_ready{freeze=\"typo\"} 0",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        lock(&state).as_mut().unwrap().freezes.retain(|f| f.0 == "eoy");
        let text = m.render();
        assert!(text.contains("upgradeplan_freeze_active{freeze=\"eoy\"} 1"));
        assert!(!text.contains("typo"), "a deleted freeze leaves no series:\n{text}");
    }

    #[test]
    fn plan_gauges_are_read_at_scrape_time_and_go_with_the_plan() {
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
        let with_runs = PlanSample {
            last_run: Some(RunInfo {
                run: "p-1".into(),
                state: "Failed".into(),
                reason: "ResourceUpgradeFailed".into(),
                revert_of: String::new(),
            }),
            active_run: Some(RunInfo {
                run: "p-2".into(),
                state: "Pending".into(),
                reason: "PromiseNotFound".into(),
                revert_of: String::new(),
            }),
            last_failure: Some((
                RunInfo {
                    run: "p-1".into(),
                    state: "Failed".into(),
                    reason: "ResourceUpgradeFailed".into(),
                    revert_of: "p-0".into(),
                },
                1.8e9,
            )),
            ..sample.clone()
        };
        let state = Arc::new(Mutex::new(None));
        let m = observing(&state);
        m.set_run_create_failing("p", true);
        assert!(
            !m.render().contains(r#"plan="p""#),
            "nothing of plans while the caches are not filled or another replica leads"
        );
        *lock(&state) = Some(State {
            plans: vec![("p".into(), with_runs)],
            active: ["p".to_string()].into(),
            ..Default::default()
        });
        let text = m.render();
        for series in [
            r#"upgradeplan_plan_last_run_info{plan="p",reason="ResourceUpgradeFailed",result="Failed",run="p-1"} 1"#,
            r#"upgradeplan_plan_active_run_info{plan="p",reason="PromiseNotFound",run="p-2",state="Pending"} 1"#,
            r#"upgradeplan_plan_run_create_failing{plan="p"} 1"#,
            r#"upgradeplan_plan_last_failure_timestamp_seconds{plan="p",reason="ResourceUpgradeFailed",revert_of="p-0",run="p-1"} 1800000000"#,
            // Counters exist at 0 from the moment the plan is seen: increase() sees the first failure.
            r#"upgradeplan_runs_total{plan="p",result="Failed",trigger="scheduled"} 0"#,
            r#"upgradeplan_runs_total{plan="p",result="Cancelled",trigger="manual"} 0"#,
            r#"upgradeplan_runs_total{plan="p",result="Failed",trigger="revert"} 0"#,
            r#"upgradeplan_runs_superseded_total{plan="p"} 0"#,
            r#"upgradeplan_triggers_missed_total{plan="p"} 0"#,
            r#"upgradeplan_resource_upgrades_total{group="dev",plan="p",result="failed"} 0"#,
            r#"upgradeplan_resource_upgrade_duration_seconds_count{group="dev",plan="p"} 0"#,
            r#"upgradeplan_run_duration_seconds_count{plan="p",result="Failed"} 0"#,
            r#"controller_runtime_reconcile_errors_total{controller="upgraderun"} 0"#,
            r#"controller_runtime_reconcile_total{controller="upgradeplan",result="error"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // The counters are what the plan's runs and status record, at every scrape.
        let mut counted = upgradeplan::engine::counters::Counters::default();
        counted.runs.insert(("scheduled".into(), "Failed".into()), 1);
        counted.resources.insert(("renamed".into(), "failed".into()), 2);
        let sample = PlanSample {
            counters: counted,
            ..sample
        };
        m.set_run_create_failing("p", false);
        lock(&state).as_mut().unwrap().plans = vec![("p".into(), sample.clone())];
        let text = m.render();
        assert!(text.contains(r#"upgradeplan_runs_total{plan="p",result="Failed",trigger="scheduled"} 1"#));
        // A group no longer in the plan keeps its series while something counts it.
        assert!(text.contains(r#"upgradeplan_resource_upgrades_total{group="renamed",plan="p",result="failed"} 2"#));
        assert!(text.contains(r#"upgradeplan_resource_upgrades_total{group="renamed",plan="p",result="skipped"} 0"#));
        assert!(text.contains(r#"upgradeplan_plan_run_create_failing{plan="p"} 0"#));
        assert!(!text.contains("upgradeplan_plan_last_run_info{"), "no lastRun, no info");
        m.set_run(
            "p",
            Some(&RunSample {
                resources: vec![("dev".into(), "pending", 3)],
                blocked: vec![("dev".into(), "WindowClosed"), ("dev".into(), "GateClosed")],
            }),
        );
        let open = upgradeplan::engine::gate::Reading::Open;
        m.set_gates("p", &[("alerts".to_string(), &open)]);
        let text = m.render();
        for series in [
            r#"upgradeplan_plan_phase{phase="Running",plan="p"} 1"#,
            r#"upgradeplan_plan_last_run_result{plan="p",result="Failed"} 1"#,
            r#"upgradeplan_plan_last_run_result{plan="p",result="Completed"} 0"#,
            r#"upgradeplan_window_active{group="dev",index="0",kind="allow",plan="p"} 1"#,
            r#"upgradeplan_blocked{group="dev",plan="p",reason="WindowClosed"} 1"#,
            r#"upgradeplan_run_resources{group="dev",plan="p",state="pending"} 3"#,
            r#"upgradeplan_gate_open{gate="alerts",plan="p"} 1"#,
            r#"upgradeplan_gate_error{gate="alerts",plan="p"} 0"#,
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
        // A group renamed: its old series are not shown.
        lock(&state).as_mut().unwrap().plans = vec![(
            "p".into(),
            PlanSample {
                groups: vec![GroupSample {
                    name: "prod".into(),
                    ..Default::default()
                }],
                ..sample.clone()
            },
        )];
        let text = m.render();
        assert!(!text.contains(r#"upgradeplan_window_open{group="dev""#), "{text}");
        assert!(!text.contains(r#"upgradeplan_window_active{group="dev""#), "{text}");
        assert!(
            text.contains(r#"upgradeplan_window_open{group="prod",plan="p"} 0"#),
            "{text}"
        );
        assert!(
            text.contains(r#"upgradeplan_blocked{group="dev",plan="p",reason="WindowClosed"} 1"#)
                && text.contains(r#"upgradeplan_blocked{group="dev",plan="p",reason="GateClosed"} 1"#),
            "the run's series are its own, one per reason that holds the group: {text}"
        );
        // The run ended (nothing told the metrics): its series and its gates' go.
        lock(&state).as_mut().unwrap().active.clear();
        let text = m.render();
        assert!(!text.contains("upgradeplan_blocked{"), "{text}");
        assert!(!text.contains("upgradeplan_run_resources{"), "{text}");
        assert!(!text.contains("upgradeplan_gate_open{"), "{text}");
        // The plan deleted: every series of it goes, counters too.
        *lock(&state) = Some(State::default());
        let text = m.render();
        assert!(
            !text.contains(r#"plan="p""#),
            "every series of a deleted plan goes: {text}"
        );
        assert!(text.contains("upgradeplan_build_info"));
    }
}
