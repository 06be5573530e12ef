//! Reading signal gates (spec §13.3): each gate's Prometheus query, at most once per gate
//! interval per plan and gate, whatever the number of runs and reconciles asking.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use upgradeplan::api::Gate;
use upgradeplan::engine::gate::{GateReading, Reading};
use upgradeplan::prometheus::PrometheusClient;

use crate::metrics::Metrics;

/// A cached reading: the query it answered, what it said, when it was taken.
type Cached = (String, Reading, DateTime<Utc>);

pub struct GateReader {
    /// `None` without `--prometheus-url`: every gate reads as an error, so it stays closed.
    client: Option<PrometheusClient>,
    interval: Duration,
    cache: Mutex<HashMap<(String, String), Cached>>,
}

impl GateReader {
    /// Whether there is a Prometheus to ask (`--prometheus-url`).
    pub fn configured(&self) -> bool {
        self.client.is_some()
    }

    pub fn new(client: Option<PrometheusClient>, interval: Duration) -> Self {
        GateReader {
            client,
            interval,
            cache: Mutex::default(),
        }
    }

    /// The readings of `gates` (of plan `plan`) now: cached ones younger than the interval,
    /// the others queried (one after another: a plan has few gates, and each query is bounded).
    pub async fn read(&self, plan: &str, gates: &[Gate], now: DateTime<Utc>, metrics: &Metrics) -> Vec<GateReading> {
        let interval = chrono::Duration::from_std(self.interval).unwrap_or(chrono::Duration::seconds(30));
        let mut readings = Vec::with_capacity(gates.len());
        for gate in gates {
            let key = (plan.to_string(), gate.name.clone());
            let cached = self.cache.lock().ok().and_then(|c| c.get(&key).cloned());
            let (reading, taken) = match cached {
                Some((query, reading, taken))
                    if query == gate.prometheus.query && now < taken + interval && now >= taken =>
                {
                    (reading, taken)
                }
                _ => {
                    let reading = match &self.client {
                        Some(c) => c.query(&gate.prometheus.query).await,
                        None => {
                            Reading::Error("no Prometheus to ask: start the controller with --prometheus-url".into())
                        }
                    };
                    metrics.record_gate_evaluation(plan, &gate.name, reading.result_label());
                    if !reading.is_open() {
                        tracing::info!(plan, gate = %gate.name, ?reading, "gate closed");
                    }
                    if let Ok(mut c) = self.cache.lock() {
                        c.insert(key, (gate.prometheus.query.clone(), reading.clone(), now));
                    }
                    (reading, now)
                }
            };
            readings.push(GateReading {
                gate: gate.name.clone(),
                reading,
                next_check: taken + interval,
            });
        }
        let shown: Vec<(String, &Reading)> = readings.iter().map(|r| (r.gate.clone(), &r.reading)).collect();
        metrics.set_gates(plan, &shown);
        // Gates removed from the plan are forgotten.
        if let Ok(mut c) = self.cache.lock() {
            c.retain(|(p, g), _| p != plan || gates.iter().any(|x| &x.name == g));
        }
        readings
    }
}
