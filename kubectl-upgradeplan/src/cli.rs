//! The command line, in kubectl's conventions.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};

/// Understand and operate UpgradePlans (platform.syntasso.io/v1alpha1): explain a plan, see which
/// resources it would upgrade and when, follow runs, and start, suspend, resume, cancel or revert
/// them.
#[derive(Parser, Debug)]
#[command(
    name = "kubectl upgradeplan",
    bin_name = "kubectl upgradeplan",
    version,
    propagate_version = true
)]
#[command(
    after_help = "Examples:\n  kubectl upgradeplan explain -f plan.yaml            # lint a plan before applying it (exit 1 when invalid)\n  kubectl upgradeplan match redis-v1-to-v2 --resource team-a/cache-3\n  kubectl upgradeplan run redis-v1-to-v2 && kubectl upgradeplan status <run> -w\n  kubectl upgradeplan history redis-v1-to-v2"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes, as kubectl has them.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Global flags")]
pub struct Global {
    /// Path to the kubeconfig file to use.
    #[arg(long, global = true, value_name = "FILE", env = "KUBECONFIG", hide_env = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use (instead of the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use (instead of the context's).
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The address of the Kubernetes API server.
    #[arg(short = 's', long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// Bearer token for authentication to the API server.
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Path to a CA certificate file (PEM) to verify the API server's certificate with.
    #[arg(long, global = true, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Path to a client certificate file (PEM) for TLS.
    #[arg(long, global = true, value_name = "FILE")]
    pub client_certificate: Option<PathBuf>,
    /// Path to a client key file (PEM) for TLS.
    #[arg(long, global = true, value_name = "FILE")]
    pub client_key: Option<PathBuf>,
    /// Don't verify the API server's certificate (insecure: anyone on the path can read and
    /// change what you send).
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,
    /// User to impersonate for the operation (needs the impersonate right).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Group to impersonate (repeat for several).
    #[arg(long = "as-group", global = true, value_name = "GROUP", action = clap::ArgAction::Append)]
    pub as_group: Vec<String>,
    /// UID to impersonate.
    #[arg(long = "as-uid", global = true, value_name = "UID")]
    pub as_uid: Option<String>,
    /// Only consider resources (ResourceBindings) in this namespace. Plans and runs are cluster-scoped.
    #[arg(short = 'n', long, global = true, value_name = "NS")]
    pub namespace: Option<String>,
    /// Consider resources in all namespaces (the default for plans, which span namespaces).
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// How long to wait for a single server request, e.g. 10s, 1m (0: no limit). Watches (-w)
    /// wait for changes as long as it takes; only connecting is bounded for them.
    #[arg(long, global = true, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub request_timeout: std::time::Duration,
    /// Set for commands that watch (`get -w`, `status -w`).
    #[arg(skip)]
    pub watching: bool,
    /// Output format: table, wide, json, yaml, name (kind.group/name of the objects read or
    /// written), jsonpath=TEMPLATE (`{.items[*].metadata.name}`, `{range …}…{end}`) or
    /// custom-columns=HEADER:PATH,… (`NAME:.metadata.name,PHASE:.status.phase`), as kubectl's.
    /// Verbs that write (run, revert, approve, suspend, resume, cancel, freezes create) print what
    /// they wrote in it.
    #[arg(short = 'o', long, global = true, value_name = "FORMAT", default_value = "table", value_parser = parse_output)]
    pub output: Output,
    /// Don't print headers in tables.
    #[arg(long, global = true)]
    pub no_headers: bool,
    /// No colour (also when NO_COLOR is set or the output is not a terminal).
    #[arg(long, global = true)]
    pub no_color: bool,
    /// Write times in UTC (default: your zone from TZ, with the plan's zone beside).
    #[arg(long, global = true)]
    pub utc: bool,
    /// Keep metadata.managedFields in -o json|yaml (left out by default, as kubectl does).
    #[arg(long, global = true)]
    pub show_managed_fields: bool,
    /// Namespace of the runs' snapshot ConfigMaps (the controller's --snapshot-namespace).
    #[arg(long, global = true, value_name = "NS", default_value = upgradeplan::api::DEFAULT_SNAPSHOT_NAMESPACE)]
    pub snapshot_namespace: String,
}

/// `-o`: a text view, or one of kubectl's printers over the command's JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Table,
    Wide,
    Json,
    Yaml,
    Name,
    JsonPath(crate::printers::Template),
    CustomColumns(Vec<crate::printers::Column>),
}

impl Output {
    /// The human views (table, wide); every other format prints the command's objects or JSON.
    pub fn is_text(&self) -> bool {
        matches!(self, Output::Table | Output::Wide)
    }
}

/// The formats `-o` takes, for help and completion.
pub const OUTPUT_FORMATS: [&str; 7] = ["table", "wide", "json", "yaml", "name", "jsonpath=", "custom-columns="];

pub fn parse_output(s: &str) -> Result<Output, String> {
    if let Some(template) = s.strip_prefix("jsonpath=") {
        return crate::printers::Template::parse(template).map(Output::JsonPath);
    }
    if let Some(columns) = s.strip_prefix("custom-columns=") {
        return crate::printers::parse_columns(columns).map(Output::CustomColumns);
    }
    Ok(match s {
        "table" | "" => Output::Table,
        "wide" => Output::Wide,
        "json" => Output::Json,
        "yaml" => Output::Yaml,
        "name" => Output::Name,
        "jsonpath" | "custom-columns" => return Err(format!("-o {s} needs its argument: -o {s}=…")),
        other => {
            return Err(format!(
                "unknown output format {other:?}: one of table, wide, json, yaml, name, jsonpath=TEMPLATE, \
                 custom-columns=HEADER:PATH,…"
            ))
        }
    })
}

/// A plan named in the cluster, or read from a file.
#[derive(Args, Debug, Clone)]
pub struct PlanSource {
    /// The UpgradePlan's name in the cluster.
    #[arg(value_name = "PLAN", required_unless_present = "filename")]
    pub plan: Option<String>,
    /// Read the plan from files instead ("-" for stdin; works without a cluster): YAML with one or
    /// more documents, JSON, a List (`kubectl get -o yaml`), or a directory of them; other kinds
    /// are skipped. Repeatable. explain takes every plan found; the other views take one.
    #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with = "plan", action = clap::ArgAction::Append)]
    pub filename: Vec<PathBuf>,
    /// Evaluate as at this instant (RFC 3339, e.g. 2026-05-02T21:00:00Z) instead of now.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub now: Option<DateTime<Utc>>,
    /// Read ResourceBindings from a file (the output of `kubectl get resourcebindings -A -o yaml`
    /// or -o json) instead of the cluster.
    #[arg(long, value_name = "FILE")]
    pub bindings: Option<PathBuf>,
    /// Read UpgradeFreezes from a file (`kubectl get upgradefreezes -o yaml`) instead of the
    /// cluster. Without a cluster (explain -f; match -f with --bindings) freezes come only from
    /// this file.
    #[arg(long, value_name = "FILE")]
    pub freezes: Option<PathBuf>,
}

impl Global {
    /// These flags for a command that watches when `watch` (see [`Global::watching`]).
    pub fn watching_if(&self, watch: bool) -> Global {
        Global {
            watching: watch,
            ..self.clone()
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Explain a plan in plain words: what it upgrades, when, each group, its windows, and every
    /// problem with its field path. Exits 1 when the plan is invalid (a CI lint with -f).
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan explain redis-v1-to-v2\n  kubectl upgradeplan explain -f plan.yaml --strict      # CI: fail on problems and warnings\n  kubectl upgradeplan explain -f plan.yaml --now 2026-12-24T22:00:00Z --runs 10\n  kubectl upgradeplan explain redis-v1-to-v2 -o json\n  kubectl upgradeplan explain redis-v1-to-v2 --prometheus-url http://localhost:9090   # are its gates open now?"
    )]
    Explain {
        #[command(flatten)]
        source: PlanSource,
        /// How many upcoming triggers to show.
        #[arg(long, value_name = "N", default_value_t = 5)]
        runs: usize,
        /// Exit 1 on warnings too (the target listed in from, an executeAt that has passed, a
        /// Promise that does not exist), not only on problems.
        #[arg(long)]
        strict: bool,
        /// Evaluate the plan's signal gates (spec.gates) now against this Prometheus, e.g.
        /// http://localhost:9090 after `kubectl port-forward`. Without it, gates are described only.
        #[arg(long, value_name = "URL")]
        prometheus_url: Option<String>,
        /// PEM CA certificates to trust for --prometheus-url (default: the system's).
        #[arg(long, value_name = "FILE", requires = "prometheus_url")]
        prometheus_ca_file: Option<PathBuf>,
        /// File holding a bearer token for --prometheus-url.
        #[arg(long, value_name = "FILE", requires = "prometheus_url")]
        prometheus_bearer_token_file: Option<PathBuf>,
    },
    /// Show which resources a run would upgrade now, group by group, and why the others would not.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan match redis-v1-to-v2\n  kubectl upgradeplan match redis-v1-to-v2 --resource team-a/cache-3   # when will mine be upgraded?\n  kubectl get resourcebindings -A -o yaml > b.yaml && kubectl upgradeplan match -f plan.yaml --bindings b.yaml"
    )]
    Match {
        #[command(flatten)]
        source: PlanSource,
        /// Answer "when will mine be upgraded?" for one Resource Request: its groups, position
        /// and window.
        #[arg(long, value_name = "NS/NAME")]
        resource: Option<String>,
        /// With --resource, list the whole plan as well.
        #[arg(long, requires = "resource")]
        all: bool,
    },
    /// Forecast the plan's next run before it starts: per group, when it would start and finish
    /// and what it would wait for (windows, freezes, soaks), and whether it fits. Simulated with
    /// the controller's own rules; every assumption is stated.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan forecast redis-v1-to-v2                        # its next trigger, durations measured in its recent runs\n  kubectl upgradeplan forecast redis-v1-to-v2 --start 2026-12-01T22:00:00Z --per-resource 3m\n  kubectl upgradeplan forecast -f plan.yaml --bindings b.yaml --freezes f.yaml --now 2026-12-01T12:00:00Z -o json\n  kubectl upgradeplan forecast --revert redis-v1-to-v2-20261205-2300 --resources all   # how long undoing it takes\n\nThe run starts at --start, else the plan's next trigger, else now (a manual run). Each upgrade takes\n--per-resource, else the median measured in the plan's last 10 runs, else 1 minute. Approvals are\nassumed granted, signal gates open, health checks passing and upgrades succeeding."
    )]
    Forecast {
        #[command(flatten)]
        source: PlanSource,
        /// When the run starts: RFC 3339 (2026-12-05T09:00:00Z), or YYYY-MM-DDTHH:mm as the plan's
        /// executeAt is written, local to the plan's timeZone. Default: the plan's next trigger;
        /// without one, now.
        #[arg(long, value_name = "TIME", value_parser = parse_start)]
        start: Option<StartTime>,
        /// How long each upgrade takes (e.g. 90s, 5m). Default: measured in the plan's recent runs.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        per_resource: Option<std::time::Duration>,
        /// Forecast the revert `kubectl upgradeplan revert` would create instead: PLAN names the
        /// run to undo (or a plan: its active run, else its last). It starts at --start, else now.
        #[arg(long, conflicts_with = "filename")]
        revert: bool,
        /// With --revert: which of the run's resources (upgraded, failed or all), as revert takes.
        #[arg(long, value_name = "WHICH", default_value = "upgraded", value_parser = parse_revert_resources)]
        resources: upgradeplan::api::RevertResources,
        /// With --revert: held by the plan's windows and freezes, as `revert --respect-policy`.
        #[arg(long, requires = "revert")]
        respect_policy: bool,
    },
    /// The plan's runs, newest first; with RUN, the outcome of each resource of that run.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan history redis-v1-to-v2\n  kubectl upgradeplan history redis-v1-to-v2 redis-v1-to-v2-20261130-0130   # each resource's outcome\n  kubectl upgradeplan history redis-v1-to-v2 --limit 5 -o wide"
    )]
    History {
        /// The UpgradePlan.
        plan: String,
        /// One of its runs.
        run: Option<String>,
        /// Show at most this many runs.
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
    },
    /// List plans (or one) with their phase, active run, last result and next run.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan get\n  kubectl upgradeplan get redis-v1-to-v2 -w\n  kubectl upgradeplan get redis-v1-to-v2 -o yaml"
    )]
    Get {
        /// One plan; all when omitted.
        plan: Option<String>,
        /// Watch: redraw on every change.
        #[arg(short = 'w', long)]
        watch: bool,
    },
    /// Start a run of a plan now (a manual trigger) and print its name.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan run redis-v1-to-v2\n  kubectl upgradeplan run redis-v1-to-v2 --preview      # snapshot only; resume to roll out\n  run=$(kubectl upgradeplan run redis-v1-to-v2) && kubectl upgradeplan status \"$run\" -w"
    )]
    Run {
        /// The UpgradePlan.
        plan: String,
        /// Create a preview: the run takes its snapshot and patches nothing until resumed.
        #[arg(long)]
        preview: bool,
        /// Name of the run (default: generated from the plan's name).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Undo a run: create a run that moves the resources it upgraded back to the version each
    /// had before (its snapshot's record, pinned even where the binding floated on `latest`),
    /// group by group in reverse order, with the groups' limits, failure budgets, deadlines and
    /// health checks. It supersedes the plan's active run (so a run still going stops starting
    /// upgrades) and, unless --respect-policy, is not held by windows, freezes, signal gates,
    /// soak or approvals. Kratix runs the old version's workflows again: they must still work.
    #[command(after_help = "Examples:
  kubectl upgradeplan revert redis-v1-to-v2-20261205-2300                  # what it upgraded (or is upgrading)
  kubectl upgradeplan revert redis-v1-to-v2-20261205-2300 --resources all  # and what failed
  kubectl upgradeplan revert redis-v1-to-v2-20261205-2300 --preview        # see what it takes, then resume it
  kubectl upgradeplan revert redis-v1-to-v2 --respect-policy                # the plan's latest run, in its windows
  kubectl upgradeplan suspend redis-v1-to-v2                                # so that its schedule does not upgrade again

A resource is taken when the run started it (its binding's platform.syntasso.io/upgraded-by names the
run) and its spec.version is still the run's target; one someone moved since is left alone. Refused
when the run's snapshot is gone or changed since it was written, or when it leaves nothing to revert.
Follow it with kubectl upgradeplan status NAME -w.")]
    Revert {
        /// The UpgradeRun to undo (or a plan: its active run, else its last).
        run: String,
        /// Which of its resources: upgraded (upgraded by Kratix, or being upgraded), failed (its
        /// upgrade failed, or the run counted it failed: a deadline, a health check), or all.
        #[arg(long, value_name = "WHICH", default_value = "upgraded", value_parser = parse_revert_resources)]
        resources: upgradeplan::api::RevertResources,
        /// Name of the revert (default: generated from the plan's name).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// Create it as a preview: it takes its snapshot and moves nothing until resumed
        /// (kubectl upgradeplan resume run/NAME).
        #[arg(long)]
        preview: bool,
        /// Hold it by the plan's windows, freezes, signal gates, soak and approvals, as an
        /// upgrade is held (default: only by limits, failure budgets, deadlines and health checks).
        #[arg(long)]
        respect_policy: bool,
    },
    /// Progress of a run by group, and what it waits for; with -w, follow it until it ends. Exit
    /// 0 when it completed (or, without -w, still goes on), 1 when it failed, 2 when it was
    /// cancelled, 3 on --timeout, 5 when it was superseded (4: any error).
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan status redis-v1-to-v2-demo\n  kubectl upgradeplan status redis-v1-to-v2-demo -w --timeout 2h   # in a pipeline\n  kubectl upgradeplan status redis-v1-to-v2-demo -w --fail-on-tolerated   # also fail on failures within maxFailures"
    )]
    Status {
        /// The UpgradeRun.
        run: String,
        /// Follow the run until it finishes.
        #[arg(short = 'w', long)]
        watch: bool,
        /// With -w, give up after this long (e.g. 30m).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Exit 1 also when the run completed with failures its groups' maxFailures tolerated
        /// (RunCompletedWithFailures; by default that is a completion, exit 0).
        #[arg(long)]
        fail_on_tolerated: bool,
    },
    /// Suspend a plan (no scheduled runs) or a run (no new upgrades start). TARGET is a name, or
    /// plan/NAME or run/NAME when both exist.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan suspend redis-v1-to-v2          # the plan: its triggers are skipped\n  kubectl upgradeplan suspend run/redis-v1-to-v2-demo  # a run: no new upgrade starts"
    )]
    Suspend {
        /// A plan or a run: NAME, plan/NAME or run/NAME.
        target: String,
    },
    /// Resume a suspended plan or run (a preview run starts rolling out).
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan resume redis-v1-to-v2\n  kubectl upgradeplan resume run/redis-v1-to-v2-preview   # roll the preview out"
    )]
    Resume {
        /// A plan or a run: NAME, plan/NAME or run/NAME.
        target: String,
    },
    /// Cancel a run: it ends Cancelled and stays as the record of what it did (spec.cancel); nothing
    /// more starts, upgrades already started finish and are not rolled back. A preview never
    /// resumed is deleted instead (it started nothing).
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan cancel redis-v1-to-v2-demo\n  kubectl upgradeplan cancel redis-v1-to-v2-demo --yes   # without asking"
    )]
    Cancel {
        /// The UpgradeRun.
        run: String,
        /// Don't ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
    },
    /// Approve a rollout group of a run (requireApproval): creates the UpgradeApproval
    /// <run>-<group> that lets the group start. Approving before the group is reached works too.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan approve redis-v1-to-v2-20260601-2300              # the group waiting now\n  kubectl upgradeplan approve redis-v1-to-v2-20260601-2300 prod --comment \"CHG-1234, canary looks fine\"\n\nNeeds create on upgradeapprovals: the upgradeplan-approver ClusterRole grants it (deploy/core/user-roles.yaml)."
    )]
    Approve {
        /// The UpgradeRun.
        run: String,
        /// The rollout group to approve. Default: the group waiting for approval now.
        group: Option<String>,
        /// Why, or the change ticket; recorded in the approval.
        #[arg(long, value_name = "TEXT")]
        comment: Option<String>,
    },
    /// List UpgradeFreezes: whether each holds now, its next stretches of frozen time (in your
    /// zone and the freeze's), how many plans it holds and why. With NAME, also the plans it
    /// holds and its next periods. `freezes create` declares an incident freeze.
    #[command(
        args_conflicts_with_subcommands = true,
        after_help = "Examples:\n  kubectl upgradeplan freezes\n  kubectl upgradeplan freezes end-of-year --periods 10\n  kubectl upgradeplan freezes -f freeze.yaml --now 2026-12-24T12:00:00Z   # lint a freeze before applying it\n  kubectl upgradeplan freezes -o json\n  kubectl upgradeplan freezes create incident-4711 --for 2h --reason \"INC-4711: storage degraded\"\n\nDeclaring a freeze needs the upgradeplan-freeze-manager ClusterRole (deploy/core/user-roles.yaml)."
    )]
    Freezes {
        #[command(subcommand)]
        action: Option<FreezeAction>,
        /// One UpgradeFreeze; all when omitted.
        freeze: Option<String>,
        /// Read freezes from a YAML or JSON file (one, or a List) instead of the cluster; exits 1
        /// when one cannot be evaluated (a CI lint).
        #[arg(short = 'f', long = "filename", value_name = "FILE", conflicts_with = "freeze")]
        filename: Option<PathBuf>,
        /// Evaluate as at this instant (RFC 3339) instead of now.
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        now: Option<DateTime<Utc>>,
        /// How many next stretches of frozen time to list per freeze (with NAME or -f).
        #[arg(long, value_name = "N", default_value_t = 5)]
        periods: usize,
    },
    /// List UpgradeBudgets: the upgrades in flight under each now (derived from the bindings, as
    /// the controller derives them), its maxInFlight, the active runs it caps and those it holds.
    /// With NAME: also its plans and each run's upgrades in flight.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan budgets\n  kubectl upgradeplan budgets saturday-night\n  kubectl upgradeplan budgets -o json\n\nA budget caps the upgrades in flight across every plan it selects; a run it holds says so in its\nBudgeted condition (kubectl upgradeplan status RUN)."
    )]
    Budgets {
        /// One UpgradeBudget; all when omitted.
        budget: Option<String>,
    },
    /// Print a shell completion script (bash, zsh or fish) for kubectl-upgradeplan.
    #[command(
        after_help = "Examples:\n  source <(kubectl upgradeplan completion bash)\n  kubectl upgradeplan completion fish > ~/.config/fish/completions/kubectl-upgradeplan.fish"
    )]
    Completion {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the plugin's version, the running controller's (from the leader-election Lease the
    /// leader holds: who leads and since when) and the API server's.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan version\n  kubectl upgradeplan version --controller-namespace platform-system -o json\n\nA controller run without --leader-elect holds no Lease and so does not say its version."
    )]
    Version {
        /// Namespace of the controller's leader-election Lease (its --leader-election-namespace).
        #[arg(long, value_name = "NS", default_value = "upgradeplan-system")]
        controller_namespace: String,
        /// Name of that Lease (the controller's --leader-election-id).
        #[arg(long, value_name = "NAME", default_value = "upgradeplan-controller")]
        controller_lease: String,
    },
}

/// What `freezes` can do besides listing.
#[derive(Subcommand, Debug)]
pub enum FreezeAction {
    /// Declare an incident freeze now: one UpgradeFreeze with one one-off period, from now (or
    /// --from) for --for, or until --until, written to the minute (its start rounded down and its
    /// end up, so it holds at least what you asked). Every matching plan's runs start no new
    /// upgrades while it holds; those in flight finish. End it early with
    /// `kubectl delete upgradefreeze NAME`.
    #[command(
        after_help = "Examples:\n  kubectl upgradeplan freezes create incident-4711 --for 2h --reason \"INC-4711: storage degraded\"\n  kubectl upgradeplan freezes create db-migration --from 2026-12-05T22:00 --until 2026-12-06T02:00 \\\n      --time-zone Europe/London --promise postgres --reason \"CHG-88: database migration\"\n  kubectl upgradeplan freezes create payments-quiet --for 30m -l team=payments --reason \"month-end close\" --dry-run\n\nTimes are RFC 3339 instants (2026-12-05T22:00:00Z) or local times (2026-12-05T22:00) of --time-zone.\nNeeds the upgradeplan-freeze-manager ClusterRole (deploy/core/user-roles.yaml)."
    )]
    Create(FreezeCreate),
}

/// `freezes create`.
#[derive(Args, Debug)]
pub struct FreezeCreate {
    /// The UpgradeFreeze's name (a DNS subdomain: incident-4711).
    pub name: String,
    /// Why upgrades are frozen: shown on every run it holds (an incident or change number helps).
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// How long it holds, from --from or now: 30m, 2h, 1h30m.
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration, conflicts_with = "until", required_unless_present = "until")]
    pub for_: Option<std::time::Duration>,
    /// When it begins (default: now).
    #[arg(long, value_name = "TIME", value_parser = parse_freeze_time)]
    pub from: Option<StartTime>,
    /// When it ends.
    #[arg(long, value_name = "TIME", value_parser = parse_freeze_time)]
    pub until: Option<StartTime>,
    /// The IANA zone the period is written in and local --from/--until are read in (default UTC).
    #[arg(long = "time-zone", value_name = "ZONE")]
    pub time_zone: Option<String>,
    /// Hold only plans of this Promise (repeatable; default: every Promise).
    #[arg(long = "promise", value_name = "NAME")]
    pub promises: Vec<String>,
    /// Hold only plans with these labels: key=value[,key=value…] (default: every plan).
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    pub selector: Option<String>,
    /// Have the API server check the freeze without creating it (a server-side dry run).
    #[arg(long)]
    pub dry_run: bool,
}

pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if s == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    s.parse::<kube::core::Duration>()
        .map(Into::into)
        .map_err(|e| format!("{s:?} is not a duration such as 30s, 5m or 1h: {e}"))
}

/// `revert --resources`: upgraded, failed or all.
pub fn parse_revert_resources(s: &str) -> Result<upgradeplan::api::RevertResources, String> {
    use upgradeplan::api::RevertResources;
    [RevertResources::Upgraded, RevertResources::Failed, RevertResources::All]
        .into_iter()
        .find(|r| r.as_str() == s)
        .ok_or_else(|| format!("{s:?} is not one of upgraded, failed, all"))
}

/// `forecast --start`: an instant, or a local time to read in the plan's zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartTime {
    Instant(DateTime<Utc>),
    /// `YYYY-MM-DDTHH:mm`, as `executeAt` is written.
    Local(String),
}

pub fn parse_start(s: &str) -> Result<StartTime, String> {
    instant_or_local(s, "the plan's zone")
}

/// `freezes create --from/--until`: an instant, or a local time of `--time-zone`.
pub fn parse_freeze_time(s: &str) -> Result<StartTime, String> {
    instant_or_local(s, "--time-zone")
}

fn instant_or_local(s: &str, zone: &str) -> Result<StartTime, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Ok(StartTime::Instant(t.with_timezone(&Utc)));
    }
    match chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M") {
        Ok(_) if s.len() == 16 => Ok(StartTime::Local(s.to_string())),
        _ => Err(format!(
            "{s:?} is neither an RFC 3339 time (2026-12-05T09:00:00Z) nor a local time of {zone} (2026-12-05T09:00)"
        )),
    }
}

pub fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("{s:?} is not an RFC 3339 time such as 2026-05-02T21:00:00Z: {e}"))
}
