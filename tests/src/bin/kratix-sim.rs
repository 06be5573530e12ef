//! kratix-sim: a stand-in for Kratix's ResourceBinding handling, for tests and demos.

use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use upgradeplan_e2e::sim::{self, SimConfig};

/// Plays Kratix for ResourceBindings (platform.kratix.io/v1alpha1), so that upgradeplan can be
/// tested and demonstrated without Kratix.
///
/// When a binding's spec.version changes (or `latest` resolves to a new latest PromiseRevision),
/// it sets UpgradeSucceeded=Unknown/UpgradeInProgress, waits for the workflow delay, then sets
/// status.lastAppliedVersion and UpgradeSucceeded=True/UpgradeComplete — or, when the binding's
/// annotation `kratix-sim/fail-version` equals the target version, UpgradeSucceeded=False/
/// UpgradeFailed with status.failedVersion and the message "workflow failed: simulated".
///
/// A failed version is retried when the binding is labelled `kratix.io/manual-reconciliation=true`
/// (the label is removed) and, like Kratix with `workflows.reconcileAfterFailure` (on by default),
/// by itself `--retry-after-failure` after the failure. Without the PromiseRevision of the target
/// version, the binding stays in progress until it appears.
///
/// After a successful upgrade of a binding annotated `kratix-sim/health: healthy|ready|unhealthy|
/// degraded|unknown`, it writes a HealthRecord (named after the binding, in its namespace) with
/// that state and the check's `lastRun`, and no version, as Kratix's records have none,
/// `kratix-sim/health-delay` (Go duration, default 0) after the success; `kratix-sim/health-records:
/// N` writes N records (`<binding>`, `<binding>-2`, …), the first with that state, the others
/// healthy; a changed annotation rewrites them.
///
/// Resource Requests, as Kratix handles them: for each Promise whose spec.api holds a CRD, it
/// installs that CRD and makes each request's binding (Kratix's deterministic name, the request's
/// labels, version per --binding-version, or the request's status.resourceBindingVersion); a
/// request's labels are copied onto its binding whenever it changes; deleting a request runs its
/// delete workflows (its `kratix-sim/delay`, else --delay) while the binding stays, then deletes
/// the binding.
///
/// Per-binding knobs (annotations): `kratix-sim/delay: 30s` (Go duration), `kratix-sim/fail-version: v2.0.0`,
/// `kratix-sim/health: healthy`, `kratix-sim/health-delay: 10s`, `kratix-sim/health-records: 2`,
/// `kratix-sim/hold` (while present, an upgrade in progress does not finish: remove it to let the
/// upgrade end).
#[derive(Parser)]
#[command(name = "kratix-sim", version)]
struct Cli {
    /// Workflow duration for bindings without a `kratix-sim/delay` annotation (Go duration: 0s, 500ms, 2s, 1m).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    delay: Duration,
    /// Only handle bindings of this Promise (label kratix.io/promise-name). Default: all.
    #[arg(long, value_name = "NAME")]
    promise: Option<String>,
    /// Kratix's own retry of a failed workflow (`workflows.reconcileAfterFailure`): this long after
    /// the failure (Kratix's reconciliation interval, 10h by default), repeated each time it fails
    /// again, or `off`. Also `--reconcile-after-failure`, after Kratix's setting.
    #[arg(long, value_name = "DURATION", default_value = "10h", value_parser = parse_retry_after, alias = "reconcile-after-failure")]
    retry_after_failure: RetryAfter,
    /// Like Kratix's PromiseRevision controller: give each revision the finalizer
    /// kratix.io/resource-request-cleanup (unless annotated
    /// kratix.io/skip-resource-request-cleanup-on-delete: "true"), and when a revision is deleted,
    /// delete the resources whose binding's spec.version is its version (here their bindings),
    /// then let the revision go. Off by default, so that a test deleting a revision keeps its
    /// bindings.
    #[arg(long)]
    revision_cleanup: bool,
    /// Kratix's resourceBindingVersionStrategy for a new Resource Request's binding: `floating`
    /// (Kratix's default: spec.version `latest`) or `pinned` (the latest PromiseRevision's version
    /// when the request is first reconciled).
    #[arg(long, value_name = "STRATEGY", default_value = "floating", value_parser = ["floating", "pinned"])]
    binding_version: String,
    /// Path to a kubeconfig. Default: $KUBECONFIG, ~/.kube/config, or in-cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<std::path::PathBuf>,
}

/// `--retry-after-failure`: a Go duration, or `off`.
#[derive(Clone, Copy, Debug)]
struct RetryAfter(Option<Duration>);

fn parse_retry_after(s: &str) -> Result<RetryAfter, String> {
    if s == "off" {
        return Ok(RetryAfter(None));
    }
    parse_duration(s).map(|d| RetryAfter(Some(d)))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    s.parse::<kube::core::Duration>()
        .map(Duration::from)
        .map_err(|e| format!("{s:?} is not a Go duration such as 500ms or 2s: {e}"))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        // Colours for a person at a terminal; a log file gets plain text (tests read its lines).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kc =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no kubeconfig: set KUBECONFIG or pass --kubeconfig")?,
    };
    let client = kube::Client::try_from(config)?;
    tracing::info!(delay = ?cli.delay, promise = ?cli.promise, "kratix-sim running");
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term.recv() => {} }
    };
    sim::run(
        client,
        SimConfig {
            delay: cli.delay,
            promise: cli.promise,
            retry_after_failure: cli.retry_after_failure.0,
            revision_cleanup: cli.revision_cleanup,
            pinned: cli.binding_version == "pinned",
        },
        shutdown,
    )
    .await;
    Ok(())
}
