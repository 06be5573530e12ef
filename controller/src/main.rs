//! `upgradeplan-controller`: executes UpgradePlans and UpgradeRuns in a cluster.

mod bindings;
mod budget;
mod caches;
mod client_metrics;
mod clock;
mod context;
mod error;
mod events;
mod freeze;
mod gates;
mod http;
mod leader;
mod ledger;
mod metrics;
mod plan;
mod run;
mod secure;
mod snapshots;
mod wakes;
mod watch;
mod writes;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use upgradeplan::api::kratix::{BindingFacts, CachedBinding, HealthRecord, Promise, PromiseRevision};
use upgradeplan::api::{
    UpgradeApproval, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradeRun, DEFAULT_SNAPSHOT_NAMESPACE,
};

use crate::context::Ctx;

/// Executes UpgradePlans and UpgradeRuns (platform.syntasso.io/v1alpha1): creates runs on the
/// plans' schedules and upgrades Kratix ResourceBindings group by group, within windows and
/// concurrency limits.
///
/// Runs in-cluster (service account) or outside with a kubeconfig ($KUBECONFIG, --kubeconfig,
/// --context). With --leader-elect, only the holder of the Lease acts; the others wait.
#[derive(Parser)]
#[command(name = "upgradeplan-controller", version)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, or the in-cluster service account.
    #[arg(long, value_name = "FILE", global = true)]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use. Default: the current context.
    #[arg(long, value_name = "NAME", global = true)]
    context: Option<String>,
    /// Namespace of the runs' snapshot ConfigMaps. It must exist.
    #[arg(long, value_name = "NS", default_value = DEFAULT_SNAPSHOT_NAMESPACE)]
    snapshot_namespace: String,
    /// Only handle UpgradePlans matching this label selector (and their runs), e.g.
    /// `team=payments`: to shard plans across controllers or canary a new version. Every
    /// UpgradeFreeze holds the plans it selects whatever the shard; a sharded controller writes
    /// the status of the freezes matching its selector only. Default: all.
    #[arg(long, value_name = "SELECTOR", value_parser = parse_selector)]
    selector: Option<String>,
    /// Address of /metrics (deploy/ serves it securely on :8443).
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    metrics_addr: SocketAddr,
    /// Serve /metrics over HTTPS, to callers whose bearer token passes a TokenReview and a
    /// SubjectAccessReview for `get` on the non-resource URL /metrics (bind Prometheus's
    /// ServiceAccount to the upgradeplan-metrics-reader ClusterRole), as controller-runtime's
    /// secure serving. Others get 401 or 403. /healthz and /readyz stay plain on --health-addr.
    #[arg(long)]
    metrics_secure: bool,
    /// tls.crt and tls.key for --metrics-secure (e.g. a cert-manager Secret mounted here); read
    /// again when they change. Default: a self-signed certificate generated at start.
    #[arg(long, value_name = "DIR", requires = "metrics_secure")]
    metrics_cert_dir: Option<PathBuf>,
    /// Address of /healthz and /readyz.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Log level or filter (e.g. info, debug, upgradeplan_controller=debug). RUST_LOG wins when set.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    log_level: String,
    /// Elect a leader through a Lease; only the leader acts. Use it whenever more than one replica runs.
    #[arg(long)]
    leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "upgradeplan-controller")]
    leader_election_id: String,
    /// Namespace of the leader-election Lease. Default: the pod's namespace in-cluster, else `default`.
    #[arg(long, value_name = "NS")]
    leader_election_namespace: Option<String>,
    /// How long a Lease stays valid without renewal; a standby takes over after this when the leader dies.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    lease_duration: Duration,
    /// The leader stops acting when it could not renew for this long.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    renew_deadline: Duration,
    /// Interval between leader-election attempts and renewals.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    retry_period: Duration,
    /// Prometheus to evaluate the plans' signal gates (spec.gates) against, e.g.
    /// http://prometheus-operated.monitoring:9090. Without it, every gate is closed (fail safe).
    #[arg(long, value_name = "URL")]
    prometheus_url: Option<String>,
    /// PEM CA certificates to trust for --prometheus-url (default: the system's).
    #[arg(long, value_name = "FILE")]
    prometheus_ca_file: Option<PathBuf>,
    /// File holding a bearer token for --prometheus-url, read on every query (so rotation works).
    #[arg(long, value_name = "FILE")]
    prometheus_bearer_token_file: Option<PathBuf>,
    /// How long a gate's reading is reused before its query runs again; also how often a closed
    /// gate is read again.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    gate_interval: Duration,
    /// Tests only: start the decision clock at this RFC 3339 instant; it then runs at real speed.
    #[arg(long, value_name = "RFC3339", hide = true, value_parser = parse_instant)]
    clock_start: Option<chrono::DateTime<chrono::Utc>>,
    /// Tests only: the decision clock runs this many times as fast as real time (from
    /// --clock-start, or from now), so that schedules and soaks pass in seconds.
    #[arg(long, value_name = "N", hide = true, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=3600))]
    clock_rate: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Print the CustomResourceDefinitions this controller serves (YAML), or write one file per CRD.
    ///
    /// `make crds` runs `upgradeplan-controller crd --output-dir deploy/crds`.
    Crd {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing to stdout.
        #[arg(long, value_name = "DIR")]
        output_dir: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// How long reconciles in flight get to finish after SIGTERM.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<kube::core::Duration>()
        .map(Duration::from)
        .map_err(|e| format!("{s:?} is not a Go duration such as 15s or 1m: {e}"))
}

fn parse_selector(s: &str) -> Result<String, String> {
    s.parse::<upgradeplan::engine::selector::LabelSelector>()?;
    Ok(s.to_string())
}

fn parse_instant(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{s:?} is not an RFC 3339 instant such as 2026-03-29T00:59:40Z: {e}"))
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.clock_start.is_some() || cli.clock_rate > 1 {
        clock::start_at(cli.clock_start, cli.clock_rate);
    }
    if let Some(Command::Crd { output_dir }) = &cli.command {
        return write_crds(output_dir.as_deref());
    }
    init_logging(&cli);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(cli))
}

fn init_logging(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&cli.log_level));
    // Colour only on a terminal (and never with NO_COLOR): log files and collectors get plain text.
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

fn write_crds(output_dir: Option<&std::path::Path>) -> anyhow::Result<()> {
    let files = upgradeplan::crd::crd_files();
    match output_dir {
        None => files.iter().for_each(|(_, yaml)| print!("{yaml}")),
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            for (name, yaml) in files {
                let path = dir.join(name);
                std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
                eprintln!("wrote {}", path.display());
            }
        }
    }
    Ok(())
}

async fn client(cli: &Cli, metrics: &metrics::Metrics) -> anyhow::Result<Client> {
    let options = kube::config::KubeConfigOptions {
        context: cli.context.clone(),
        ..Default::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &options).await?
        }
        None if cli.context.is_some() => kube::Config::from_kubeconfig(&options).await?,
        None => kube::Config::infer()
            .await
            .context("no cluster configuration: set KUBECONFIG, pass --kubeconfig, or run in a pod")?,
    };
    let layer = client_metrics::CountLayer(metrics.rest_requests.clone());
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()))
        .unwrap_or_else(|_| "upgradeplan-controller".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:x}{:x}", std::process::id(), nanos)
}

/// The names a self-signed /metrics certificate is issued for: loopback, the host (the pod) and
/// the address bound. Scrapers of it skip verification (the ServiceMonitor says so); give a
/// certificate with --metrics-cert-dir to have them verify.
fn certificate_names(cli: &Cli) -> Vec<String> {
    let mut names = vec!["localhost".to_string(), "127.0.0.1".to_string()];
    let host =
        std::env::var("POD_NAME").or_else(|_| std::fs::read_to_string("/etc/hostname").map(|h| h.trim().to_string()));
    names.extend(host.ok().filter(|h| !h.is_empty()));
    let ip = cli.metrics_addr.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        names.push(ip.to_string());
    }
    names.dedup();
    names
}

fn leader_namespace(cli: &Cli) -> String {
    cli.leader_election_namespace.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            .map(|ns| ns.trim().to_string())
            .unwrap_or_else(|_| "default".into())
    })
}

/// Resolves on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let prometheus = cli
        .prometheus_url
        .as_deref()
        .map(|url| {
            upgradeplan::prometheus::PrometheusClient::new(
                url,
                cli.prometheus_ca_file.as_deref(),
                cli.prometheus_bearer_token_file.as_deref(),
            )
        })
        .transpose()?;
    let gates = Arc::new(gates::GateReader::new(prometheus, cli.gate_interval));
    let client = client(&cli, &metrics).await?;
    let version = client.apiserver_version().await.context("reaching the API server")?;
    tracing::info!(server = %version.git_version, version = env!("CARGO_PKG_VERSION"), "upgradeplan-controller starting");

    let health = Arc::new(http::Health::default());
    let bound = http::serve(cli.health_addr, health.clone(), None)
        .await
        .with_context(|| format!("binding --health-addr {}", cli.health_addr))?;
    tracing::info!(%bound, "serving /healthz and /readyz");
    let tls = cli
        .metrics_secure
        .then(|| secure::server_config(cli.metrics_cert_dir.as_deref(), &certificate_names(&cli)))
        .transpose()?;
    let exposition = Arc::new(http::Health {
        ready: Default::default(),
        metrics: Some(metrics.clone()),
        authorizer: cli.metrics_secure.then(|| secure::Authorizer::new(client.clone())),
    });
    let bound = http::serve(cli.metrics_addr, exposition, tls)
        .await
        .with_context(|| format!("binding --metrics-addr {}", cli.metrics_addr))?;
    if cli.metrics_secure {
        tracing::info!(%bound, certificate = %cli.metrics_cert_dir.as_deref().map_or("self-signed".into(), |d| d.display().to_string()), "serving /metrics over HTTPS to authorized callers");
    } else {
        tracing::info!(%bound, "serving /metrics");
    }
    let lease_name = if cli.leader_elect {
        cli.leader_election_id.clone()
    } else {
        "none".to_string()
    };
    metrics
        .leader
        .with_label_values(&[&lease_name])
        .set(i64::from(!cli.leader_elect));

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    {
        let health = health.clone();
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("shutdown requested: readiness off, stopping controllers");
            health.ready.store(false, Ordering::SeqCst);
            let _ = stop_tx.send(true);
        });
    }
    let stopped = move || {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    };

    // A standby is healthy and ready: it is waiting, as it should.
    health.ready.store(true, Ordering::SeqCst);
    let elector = cli.leader_elect.then(|| {
        leader::Elector::new(
            client.clone(),
            leader::ElectorConfig {
                namespace: leader_namespace(&cli),
                name: cli.leader_election_id.clone(),
                identity: identity(),
                lease_duration: cli.lease_duration,
                renew_deadline: cli.renew_deadline,
                retry_period: cli.retry_period,
            },
        )
    });
    // A standby keeps its caches warm (the watches run from the start; only the controllers wait
    // for the Lease), so a takeover acts at once instead of listing everything first.
    let (led_tx, led_rx) = tokio::sync::watch::channel(false);
    let leading = {
        let (elector, metrics, lease_name, stopped) = (&elector, &metrics, &lease_name, stopped.clone());
        async move {
            if let Some(elector) = elector {
                tracing::info!(lease = %lease_name, "waiting for leadership (caches kept warm)");
                tokio::select! {
                    _ = elector.acquire() => tracing::info!("leading"),
                    _ = stopped() => return false,
                }
                metrics.leader.with_label_values(&[lease_name]).set(1);
            }
            let _ = led_tx.send(true);
            true
        }
    };
    let lost = async {
        match &elector {
            Some(e) => {
                let mut led = led_rx.clone();
                if led.wait_for(|l| *l).await.is_err() {
                    return std::future::pending().await;
                }
                e.hold().await
            }
            None => std::future::pending().await,
        }
    };
    let controllers = run_controllers(client.clone(), &cli, metrics.clone(), gates, stopped.clone(), leading);
    // Reconciles in flight finish; but a controller still waiting for its first cache sync
    // does not observe shutdown, so the process leaves after a grace period regardless.
    let grace = async {
        stopped().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "controllers did not stop in time; exiting anyway");
    };
    let lost_leadership = tokio::select! {
        _ = controllers => false,
        _ = grace => false,
        _ = lost => true,
    };
    health.ready.store(false, Ordering::SeqCst);
    metrics.leader.with_label_values(&[&lease_name]).set(0);
    if let Some(elector) = &elector {
        if !lost_leadership {
            elector.release().await;
        }
    }
    if lost_leadership {
        anyhow::bail!("lost leadership: exiting so that a restart re-enters the election");
    }
    tracing::info!("stopped");
    Ok(())
}

/// `controller` run to its end with `reconcile`, every reconcile [`timed`] as `name`; errors
/// retried as every reconciler's are ([`context::error_policy`]).
fn running<K, Fut>(
    controller: Controller<K>,
    name: &'static str,
    reconcile: fn(Arc<K>, Arc<Ctx>) -> Fut,
    ctx: Arc<Ctx>,
) -> impl std::future::Future<Output = ()>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, error::Error>> + Send + 'static,
{
    controller
        .run(
            move |object, ctx: Arc<Ctx>| {
                let (key, version) = (context::retry_key(&*object), object.resource_version());
                timed(name, ctx.clone(), key, version, reconcile(object, ctx))
            },
            context::error_policy,
            ctx,
        )
        .for_each(|_| futures::future::ready(()))
}

/// Runs one reconcile, records controller-runtime's metrics for it, and forgets the object's
/// earlier failures when it succeeds (see [`context::RetryBackoff`]).
async fn timed(
    controller: &'static str,
    ctx: Arc<Ctx>,
    key: String,
    resource_version: Option<String>,
    reconcile: impl std::future::Future<Output = Result<kube::runtime::controller::Action, error::Error>>,
) -> Result<kube::runtime::controller::Action, error::Error> {
    let metrics = &ctx.metrics;
    let depth = metrics.workqueue_depth.with_label_values(&[controller]);
    depth.inc();
    let started = std::time::Instant::now();
    let result = reconcile.await;
    depth.dec();
    metrics
        .reconcile_time
        .with_label_values(&[controller])
        .observe(started.elapsed().as_secs_f64());
    let label = if result.is_ok() { "success" } else { "error" };
    metrics.reconcile_total.with_label_values(&[controller, label]).inc();
    // Everything this reconcile wrote is written: tests wait for this line (with the version
    // they changed the object to) before they check that nothing else happened.
    tracing::debug!(%key, resource_version = %resource_version.as_deref().unwrap_or_default(), result = %label, "reconciled");
    if result.is_err() {
        metrics.reconcile_errors_total.with_label_values(&[controller]).inc();
    } else {
        ctx.retries.forget(&key);
    }
    result
}

/// Runs the caches at once and the controllers once `leading` says so (false: stopped first).
async fn run_controllers<F, Fut>(
    client: Client,
    cli: &Cli,
    metrics: Arc<metrics::Metrics>,
    gates: Arc<gates::GateReader>,
    stopped: F,
    leading: impl std::future::Future<Output = bool>,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + Sync + 'static,
{
    // Triggers flow once the controllers run; until then the caches fill and follow changes.
    let forwarding = Arc::new(AtomicBool::new(false));
    let caches::Caches {
        stores,
        drive: caches,
        triggers: mut t,
    } = caches::start(&client, cli.selector.as_deref(), &cli.snapshot_namespace, &forwarding);
    let (budget_wakes, budget_woken) = futures::channel::mpsc::unbounded();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: events::Publisher::new(client.clone(), "upgradeplan-controller", identity()),
        snapshot_namespace: cli.snapshot_namespace.clone(),
        selector: cli.selector.clone(),
        label_selector: cli.selector.as_deref().and_then(|s| s.parse().ok()),
        caches: stores,
        metrics: metrics.clone(),
        resources: Default::default(),
        frozen: Default::default(),
        memory: Default::default(),
        retries: Default::default(),
        budget_ledger: Default::default(),
        refused_copies: Default::default(),
        binding_writes: tokio::sync::Semaphore::new(run::PATCH_CONCURRENCY),
        budget_wakes,
        gates,
    });
    // Scrapes read the plans' and freezes' state from the caches, while this replica leads (a
    // standby's caches are warm too, but its gauges would duplicate the leader's).
    metrics.observe({
        let (ctx, leading) = (Arc::downgrade(&ctx), forwarding.clone());
        Box::new(move || {
            let ctx = ctx.upgrade()?;
            if !leading.load(Ordering::SeqCst) {
                return None;
            }
            ctx.scrape_state(crate::clock::now())
        })
    });
    // Reconciles of one object never overlap; a little debounce merges bursts of binding events.
    let config = ControllerConfig::default().debounce(Duration::from_millis(50));

    let wakes = wakes::Wakes {
        runs: ctx.caches.runs.clone(),
        plans: ctx.caches.plans.clone(),
        freezes: ctx.caches.freezes.clone(),
        ctx: Arc::downgrade(&ctx),
    };
    // Started after the caches may have been filled while a standby (their triggers dropped):
    // each controller first looks at every object its cache holds.
    let at_start = || futures::stream::once(futures::future::ready(()));
    // A run another controller handles (sharded by --selector) wakes nothing here: its writes
    // would otherwise be reconciles of ours, and dilute the error ratio operators alert on.
    let own_runs = t.runs.remove(0).filter({
        let ctx = Arc::downgrade(&ctx);
        move |run| {
            let ours = match (run, ctx.upgrade()) {
                (Ok(run), Some(ctx)) => ctx.handles(run),
                _ => true,
            };
            futures::future::ready(ours)
        }
    });
    let run_controller = Controller::for_stream(own_runs, ctx.caches.runs.clone())
        .with_config(config.clone())
        .reconcile_all_on(futures::stream::select(at_start(), t.kinds_served))
        .reconcile_on(t.bindings.remove(0).flat_map({
            let w = wakes.clone();
            // A watch error wakes nothing (the watcher retries it).
            move |b: Result<Arc<CachedBinding>, _>| {
                let runs = b.map(|b| w.runs_of_promise(b.promise(), false));
                futures::stream::iter(runs.into_iter().flatten())
            }
        }))
        .watches_stream(
            t.revisions.remove(0),
            wakes.by(|w, r: PromiseRevision| w.runs_of_promise(r.promise(), true)),
        )
        .watches_stream(
            t.health.remove(0),
            wakes.by(|w, h: HealthRecord| w.runs_of_promise(&h.data.promise_ref.name, false)),
        )
        .watches_stream(t.approvals.remove(0), |a: UpgradeApproval| {
            Some(ObjectRef::<UpgradeRun>::new(&a.spec.upgrade_run_ref.name))
        })
        .watches_stream(
            t.plans.remove(0),
            wakes.by(|w, p: UpgradePlan| w.runs_of_plan(&p.name_any())),
        )
        .watches_stream(
            t.freezes.remove(0),
            wakes.by(|w, _: UpgradeFreeze| w.runs_a_freeze_may_hold()),
        )
        .watches_stream(
            t.budgets
                .remove(0)
                .filter(wakes::spec_changes(ctx.caches.budgets.clone())),
            wakes.by(|w, _: UpgradeBudget| w.runs_a_freeze_may_hold()),
        )
        .reconcile_on(budget_woken)
        .watches_stream(t.snapshots.remove(0), |cm: PartialObjectMeta<ConfigMap>| {
            cm.metadata
                .owner_references
                .unwrap_or_default()
                .into_iter()
                .find(|o| o.kind == "UpgradeRun")
                .map(|o| ObjectRef::<UpgradeRun>::new(&o.name))
        })
        .graceful_shutdown_on(stopped());
    let run_controller = running(run_controller, "upgraderun", run::reconcile, ctx.clone());

    let plan_controller = Controller::for_stream(t.plans.remove(0), ctx.caches.plans.clone())
        .with_config(config.clone())
        .reconcile_all_on(at_start())
        .watches_stream(t.runs.remove(0), wakes.by(|w, r: UpgradeRun| w.plan_of_run(&r)))
        .watches_stream(
            t.promises.remove(0),
            wakes.by(|w, p: Promise| w.plans_of_promise(&p.name_any())),
        )
        .watches_stream(t.freezes.remove(0), wakes.by(|w, _: UpgradeFreeze| w.every_plan()))
        .graceful_shutdown_on(stopped());
    let plan_controller = running(plan_controller, "upgradeplan", plan::reconcile, ctx.clone());

    let freeze_controller = Controller::for_stream(t.freezes.remove(0), ctx.caches.freezes.clone())
        .with_config(config.clone())
        .reconcile_all_on(at_start())
        .watches_stream(t.plans.remove(0), wakes.by(|w, _: UpgradePlan| w.every_freeze()))
        .graceful_shutdown_on(stopped());
    let freeze_controller = running(freeze_controller, "upgradefreeze", freeze::reconcile, ctx.clone());

    // A budget's status follows its runs on a timer (see `budget::reconcile`).
    // Its own status writes are no reason to look again: it does every STATUS_EVERY.
    let own_budgets = t
        .budgets
        .remove(0)
        .filter(wakes::spec_changes(ctx.caches.budgets.clone()));
    let budget_controller = Controller::for_stream(own_budgets, ctx.caches.budgets.clone())
        .with_config(config)
        .reconcile_all_on(at_start())
        .graceful_shutdown_on(stopped());
    let budget_controller = running(budget_controller, "upgradebudget", budget::reconcile, ctx.clone());

    let controllers = async {
        if !leading.await {
            return;
        }
        // As controller-runtime's WaitForCacheSync: a controller started on half-filled caches
        // would only requeue every object until they fill, each pass counted as a reconcile.
        let listing = std::time::Instant::now();
        let mut warned = Duration::ZERO;
        while !ctx.caches.synced.all() {
            tokio::time::sleep(context::CACHE_WAIT).await;
            // A watch that cannot list logs why (RBAC, a kind not served); say what waits on it.
            if listing.elapsed() >= warned + Duration::from_secs(30) {
                warned = listing.elapsed();
                tracing::warn!(waited = ?warned, "controllers not started: a cache has not listed yet");
            }
        }
        tracing::info!(waited = ?listing.elapsed(), "caches listed");
        forwarding.store(true, Ordering::SeqCst);
        tracing::info!(snapshot_namespace = %cli.snapshot_namespace, "controllers running");
        tokio::join!(run_controller, plan_controller, freeze_controller, budget_controller);
    };
    tokio::select! {
        _ = controllers => {}
        _ = caches => {}
    }
}
