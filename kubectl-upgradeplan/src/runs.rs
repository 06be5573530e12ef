//! Run views: `history` (a plan's runs, or one run's resources) and `status` (a run's progress and
//! what it waits for). Per-resource outcomes come from the engine's own evaluation of the
//! snapshot against live bindings, the same one the controller makes.

use std::collections::HashMap;
use upgradeplan::api::kratix::BindingFacts;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{Api, ListParams};
use kube::Client;
use serde::Serialize;
use upgradeplan::api::kratix::{HealthRecord, Promise, PromiseRevision, ResourceBinding, RevisionFact};
use upgradeplan::api::{find_condition, reasons, GroupStatus, LastRun, RunState, UpgradePlanSpec, UpgradeRun};
use upgradeplan::engine::admission::waits_as_preview;
use upgradeplan::engine::freeze::Freeze;
use upgradeplan::engine::gate::{self, GateCheck};
use upgradeplan::engine::health::HealthRecords;
use upgradeplan::engine::retry::RetryIntervals;
use upgradeplan::engine::revert::Revisions;
use upgradeplan::engine::run::{evaluate, recorded_failure, texts, Blocked, Evaluation, Outcome, RunContext};
use upgradeplan::engine::snapshot::{check_shard, read_frozen, ShardCheck};
use upgradeplan::engine::view::{resource_views, run_view, BudgetUse, GroupView, RunAt};

use crate::output::{duration, relative, table, Style};

pub use upgradeplan::engine::snapshot::Frozen;

/// Reads a run's snapshot ConfigMaps; `None` before the snapshot is taken.
pub async fn load_frozen(client: &Client, namespace: &str, run: &UpgradeRun) -> anyhow::Result<Option<Frozen>> {
    let refs = run
        .status
        .as_ref()
        .map(|s| s.resource_list_refs.clone())
        .unwrap_or_default();
    if refs.is_empty() {
        return Ok(None);
    }
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut shards = Vec::new();
    // Verified as the controller verifies it: a snapshot that is not what was written is not shown.
    let recorded = run
        .status
        .as_ref()
        .and_then(|s| s.started_at)
        .map(upgradeplan::time::rfc3339)
        .unwrap_or_default();
    let tampered = |name: &str| anyhow::anyhow!(texts::snapshot_tampered(name, &recorded));
    for r in refs {
        let cm = match api.get_opt(&r.name).await {
            Ok(cm) => cm,
            Err(e) => {
                return Err(crate::client::explain_error(
                    e,
                    "get",
                    "configmaps",
                    Some(&format!("{namespace}/{}", r.name)),
                )
                .context("reading the run's snapshot (is --snapshot-namespace the controller's?)"))
            }
        };
        // Missing here may be the wrong namespace, not a deletion: only the controller, which
        // knows its namespace, calls a missing shard tampered.
        let Some(data) = cm.map(|c| c.data.unwrap_or_default()) else {
            anyhow::bail!(
                "configmaps \"{namespace}/{}\" not found: the run's snapshot is gone, or --snapshot-namespace is not the controller's",
                r.name
            );
        };
        if check_shard(r.sha256.as_deref(), Some(&data)) == ShardCheck::Tampered {
            return Err(tampered(&r.name));
        }
        shards.push((r.name, data));
    }
    let frozen = read_frozen(shards.iter().map(|(n, d)| (n.as_str(), d)))
        .map_err(|e| anyhow::anyhow!("the run's snapshot: {e}"))?;
    Ok(Some(frozen))
}

/// What the views read live about a run's resources: their bindings and, when a group of the
/// frozen plan verifies health, the Promise's HealthRecords.
#[derive(Debug, Default)]
pub struct Live {
    pub bindings: HashMap<(String, String), ResourceBinding>,
    pub health: HealthRecords,
    /// The UpgradeFreezes holding the run's plan.
    pub freezes: Vec<Freeze>,
    /// When Kratix retries a failure by itself, per version of the Promise.
    pub retries: RetryIntervals,
}

impl Live {
    pub fn of_bindings(bindings: impl IntoIterator<Item = ResourceBinding>) -> Live {
        Live {
            bindings: bindings
                .into_iter()
                .map(|b| {
                    (
                        (
                            b.metadata.namespace.clone().unwrap_or_default(),
                            b.metadata.name.clone().unwrap_or_default(),
                        ),
                        b,
                    )
                })
                .collect(),
            health: HealthRecords::default(),
            freezes: Vec::new(),
            retries: RetryIntervals::default(),
        }
    }

    pub fn binding(&self, namespace: &str, name: &str) -> Option<&ResourceBinding> {
        self.bindings.get(&(namespace.to_string(), name.to_string()))
    }

    /// The bindings as the engine's rules look them up.
    pub fn lookup<'s>(&'s self) -> impl Fn(&str, &str) -> Option<&'s dyn BindingFacts> + 's {
        move |namespace: &str, name: &str| self.binding(namespace, name).map(|b| b as &dyn BindingFacts)
    }
}

/// The live state of the resources of a run of the plan named `plan_name` (`plan`: its frozen
/// spec), and the freezes that hold that plan (selected by the live plan's labels).
pub async fn live_state(client: &Client, plan_name: &str, plan: &UpgradePlanSpec) -> anyhow::Result<Live> {
    let promise = &plan.promise_ref.name;
    let mut live = Live::of_bindings(crate::client::bindings_of(client, promise, None).await?);
    let labels = match crate::client::get_plan(client, plan_name).await {
        Ok(p) => p.metadata.labels.unwrap_or_default(),
        Err(_) => Default::default(),
    };
    let freezes: Vec<std::sync::Arc<_>> = crate::client::list_freezes(client)
        .await?
        .into_iter()
        .map(std::sync::Arc::new)
        .collect();
    live.freezes = upgradeplan::engine::freeze::holding(&freezes, promise, &labels);
    if plan.rollout_groups.iter().any(|g| g.health_check.is_some()) {
        let api: Api<HealthRecord> = Api::all(client.clone());
        let records = api
            .list(&ListParams::default())
            .await
            .map_err(|e| crate::client::explain_error(e, "list", "healthrecords", None))?;
        live.health = HealthRecords::index(promise, records.items.into_iter().map(std::sync::Arc::new));
    }
    live.retries = retry_intervals(client, promise).await?;
    Ok(live)
}

/// The PromiseRevisions of `promise`; a failed lookup is an error, never taken for "none".
async fn promise_revisions(client: &Client, promise: &str) -> anyhow::Result<Vec<PromiseRevision>> {
    let api: Api<PromiseRevision> = Api::all(client.clone());
    let revs = api
        .list(&ListParams::default())
        .await
        .map_err(|e| crate::client::explain_error(e, "list", "promiserevisions", None))?;
    Ok(revs.items.into_iter().filter(|r| r.promise() == promise).collect())
}

/// The PromiseRevisions of `promise`, as the engine reads them.
pub async fn revisions_of(client: &Client, promise: &str) -> anyhow::Result<Vec<RevisionFact>> {
    Ok(promise_revisions(client, promise)
        .await?
        .iter()
        .map(PromiseRevision::fact)
        .collect())
}

/// When Kratix retries a failure of `promise`'s resources by itself, per version (spec §2): read
/// from its PromiseRevisions and the Promise (a Promise not there leaves Kratix's default).
pub async fn retry_intervals(client: &Client, promise: &str) -> anyhow::Result<RetryIntervals> {
    let api: Api<Promise> = Api::all(client.clone());
    let found = api
        .get_opt(promise)
        .await
        .map_err(|e| crate::client::explain_error(e, "get", "promises", None))?;
    Ok(RetryIntervals::of(
        found.as_ref(),
        &promise_revisions(client, promise).await?,
    ))
}

/// What the run's evaluation knows of its PromiseRevisions (a revert's: each target's), from one
/// list; a failed lookup is an error.
pub async fn revisions(client: &Client, frozen: &Frozen) -> anyhow::Result<Revisions> {
    let facts = revisions_of(client, &frozen.plan.promise_ref.name).await?;
    Ok(Revisions::of(frozen, &facts))
}

/// The run's events: (type, reason, message).
pub async fn events_of(client: &Client, run: &str) -> Vec<(String, String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!("involvedObject.name={run}"));
    api.list(&lp)
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|e| {
                    (
                        e.type_.unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.message.unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn trigger(run: &UpgradeRun) -> &'static str {
    upgradeplan::engine::admission::TriggerKind::of(run).as_str()
}

/// The run a revert undoes (spec §13.7).
pub fn revert_of(run: &UpgradeRun) -> Option<&str> {
    run.spec.revert_of.as_ref().map(|o| o.name.as_str())
}

/// How a run came to be, in words: its trigger, and for a revert the run it undoes.
pub fn trigger_words(run: &UpgradeRun) -> String {
    match revert_of(run) {
        Some(of) => format!("revert of {of}"),
        None => trigger(run).to_string(),
    }
}

/// The newest of `runs` that reverts `run`.
pub fn reverted_by<'r>(run: &str, runs: &'r [UpgradeRun]) -> Option<&'r str> {
    runs.iter()
        .filter(|r| revert_of(r) == Some(run))
        .max_by_key(|r| created(r))
        .and_then(|r| r.metadata.name.as_deref())
}

fn created(run: &UpgradeRun) -> DateTime<Utc> {
    upgradeplan::time::created_at(&run.metadata)
}

/// When the run began for "since the run began" rules: its admission (a resumed preview's is
/// the moment it was resumed), as the controller judges it (spec §5.2).
fn admitted(run: &UpgradeRun) -> DateTime<Utc> {
    upgradeplan::engine::admission::admitted_at(run)
}

fn groups_words(groups: &[GroupStatus]) -> String {
    groups
        .iter()
        .map(|g| {
            let mut s = format!("{} {}/{}", g.name, g.succeeded, g.total);
            if g.failed > 0 {
                s.push_str(&format!(" {} failed", g.failed));
            }
            if g.skipped > 0 {
                s.push_str(&format!(" {} skipped", g.skipped));
            }
            s
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct HistoryRow {
    pub name: String,
    pub trigger: String,
    /// A revert: the run it undoes (spec §13.7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_of: Option<String>,
    /// The newest run that reverts this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reverted_by: Option<String>,
    pub state: String,
    pub superseded_by: Option<String>,
    /// The run object is gone; the row comes from the plan's `lastRun`.
    pub deleted: bool,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_seconds: Option<i64>,
    pub groups: Vec<GroupStatus>,
    pub completed_resources: i64,
    /// Group entries: a resource in two groups counts in each (as SKE specifies).
    pub total_resources: i64,
    /// Distinct resources, when fewer than the group entries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub distinct_resources: Option<usize>,
    pub reason: Option<String>,
    pub message: Option<String>,
}

/// The plan's runs, newest first.
/// When a run stopped: its `finishedAt`, or, for a superseded run, the moment it was superseded
/// (its `Suspended=True/Superseded` transition), so that its duration stops there in every view.
pub fn ended_at(run: &UpgradeRun) -> Option<DateTime<Utc>> {
    let s = run.status.as_ref()?;
    s.finished_at.or_else(|| {
        s.superseded_by.as_ref()?;
        find_condition(&s.conditions, reasons::SUSPENDED)
            .filter(|c| c.reason == reasons::SUPERSEDED)
            .map(|c| c.last_transition_time)
    })
}

/// Orders runs newest first, as `history` lists them.
pub fn newest_first(runs: &mut [UpgradeRun]) {
    runs.sort_by_key(|r| std::cmp::Reverse((created(r), r.metadata.name.clone())));
}

/// How many distinct resources a snapshot holds (a resource in two groups is one).
pub fn distinct_resources(snapshot: &upgradeplan::engine::snapshot::Snapshot) -> usize {
    snapshot
        .groups
        .iter()
        .flat_map(|g| g.resources.iter().map(|r| (&r.namespace, &r.binding)))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// The plan's runs, newest first, and the plan's `lastRun` when its run is gone (a cancelled run
/// is deleted: this is its only record). `distinct`: per run, its distinct resources when its
/// snapshot was read (the counts are group entries: a resource in two groups counts twice).
pub fn history(
    mut runs: Vec<UpgradeRun>,
    last_run: Option<&LastRun>,
    distinct: &HashMap<String, usize>,
    limit: usize,
    now: DateTime<Utc>,
    style: &Style,
) -> (Vec<HistoryRow>, String) {
    newest_first(&mut runs);
    let mut rows: Vec<HistoryRow> = runs
        .iter()
        .map(|r| {
            let s = r.status.clone().unwrap_or_default();
            let cond = find_condition(&s.conditions, reasons::RUN_SUCCEEDED);
            let ended = ended_at(r);
            let name = r.metadata.name.clone().unwrap_or_default();
            HistoryRow {
                reverted_by: reverted_by(&name, &runs).map(str::to_string),
                name,
                trigger: trigger(r).to_string(),
                revert_of: revert_of(r).map(str::to_string),
                state: state_label(s.state).to_string(),
                superseded_by: s.superseded_by.clone(),
                deleted: false,
                started_at: s.started_at,
                finished_at: s.finished_at,
                duration_seconds: s.started_at.map(|b| (ended.unwrap_or(now) - b).num_seconds()),
                groups: s.rollout_groups.clone(),
                completed_resources: s.completed_resources,
                total_resources: s.total_resources,
                distinct_resources: r
                    .metadata
                    .name
                    .as_ref()
                    .and_then(|n| distinct.get(n).copied())
                    .filter(|d| (*d as i64) < s.total_resources),
                reason: cond.map(|c| c.reason.clone()),
                message: cond.map(|c| c.message.clone()),
            }
        })
        .collect();
    if let Some(last) = last_run.filter(|l| !rows.iter().any(|r| r.name == l.name)) {
        let row = HistoryRow {
            name: last.name.clone(),
            trigger: "-".into(),
            revert_of: None,
            reverted_by: None,
            state: last.result.as_str().to_string(),
            superseded_by: None,
            deleted: true,
            started_at: None,
            finished_at: last.finished_at,
            duration_seconds: None,
            groups: Vec::new(),
            completed_resources: 0,
            total_resources: 0,
            distinct_resources: None,
            reason: Some(last.reason.clone()),
            message: Some(last.message.clone()),
        };
        // Before the first run that had started when this one finished (newest first).
        let at = rows
            .iter()
            .position(|r| {
                r.started_at
                    .or(r.finished_at)
                    .is_some_and(|t| Some(t) <= last.finished_at)
            })
            .unwrap_or(rows.len());
        rows.insert(at, row);
    }
    rows.truncate(limit);
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|h| {
            let mut state = match (&h.superseded_by, h.deleted) {
                (Some(by), _) => format!("{} (superseded by {by})", style.state(&h.state)),
                (None, true) => format!("{} (run deleted; from the plan's lastRun)", style.state(&h.state)),
                (None, false) => style.state(&h.state),
            };
            if let Some(by) = &h.reverted_by {
                state.push_str(&format!(" (reverted by {by})"));
            }
            let mut row = vec![
                h.name.clone(),
                match &h.revert_of {
                    Some(of) => format!("revert of {of}"),
                    None => h.trigger.clone(),
                },
                state,
                h.started_at.map(|t| relative(t, now)).unwrap_or_else(|| "-".into()),
                h.finished_at.map(|t| relative(t, now)).unwrap_or_else(|| "-".into()),
                h.duration_seconds
                    .map(|d| duration(chrono::Duration::seconds(d)))
                    .unwrap_or_else(|| "-".into()),
                match (h.deleted, h.distinct_resources) {
                    (true, _) => "-".into(),
                    (false, Some(d)) => format!("{}/{} ({d} distinct)", h.completed_resources, h.total_resources),
                    (false, None) => format!("{}/{}", h.completed_resources, h.total_resources),
                },
                h.reason.clone().unwrap_or_else(|| "-".into()),
            ];
            if style.wide {
                row.push(groups_words(&h.groups));
                row.push(h.message.clone().unwrap_or_default());
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NAME", "TRIGGER", "STATE", "STARTED", "FINISHED", "DURATION", "UPGRADED", "REASON",
    ];
    if style.wide {
        headers.extend(["GROUPS", "MESSAGE"]);
    }
    let text = if rows.is_empty() {
        "No runs.\n".to_string()
    } else {
        table(style, &headers, &table_rows)
    };
    (rows, text)
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRow {
    pub group: String,
    pub namespace: String,
    pub name: String,
    pub binding: String,
    pub from: String,
    pub now: Option<String>,
    /// When this run started the resource's upgrade: the binding's `upgrade-started-at`
    /// annotation, when its `upgraded-by` names this run (the durable record; events expire and
    /// are combined beyond ten).
    pub started_at: Option<DateTime<Utc>>,
    pub outcome: String,
    /// What its binding shows now, when the run counted something else (a Kratix retry, a later
    /// run): the outcome the run counted stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    pub detail: String,
}

/// When `run` started the upgrade of `binding`, by the binding's own annotations.
fn started_by(binding: Option<&ResourceBinding>, run: &str) -> Option<DateTime<Utc>> {
    use upgradeplan::api::{UPGRADED_BY_ANNOTATION, UPGRADE_STARTED_AT_ANNOTATION};
    let annotations = binding?.metadata.annotations.as_ref()?;
    if annotations.get(UPGRADED_BY_ANNOTATION).map(String::as_str) != Some(run) {
        return None;
    }
    DateTime::parse_from_rfc3339(annotations.get(UPGRADE_STARTED_AT_ANNOTATION)?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn outcome_words(o: &Outcome) -> (&'static str, String) {
    match o {
        Outcome::Succeeded => ("Succeeded", String::new()),
        Outcome::Skipped(why) => ("Skipped", why.to_string()),
        Outcome::Failed { message } => ("Failed", message.clone()),
        Outcome::InFlight => ("in flight", String::new()),
        Outcome::NeedsRetry => (
            "needs retry",
            "failed before this run; Kratix is asked to retry when a slot is free".to_string(),
        ),
        Outcome::Verifying { until } => ("verifying", format!("health check times out at {}", until.to_rfc3339())),
        Outcome::NotStarted => ("not started", String::new()),
    }
}

/// Per-resource outcomes of a run: the snapshot, evaluated against live bindings, with the
/// failure details from the run's events.
pub fn run_resources(
    run: &UpgradeRun,
    frozen: &Frozen,
    live: &Live,
    events: &[(String, String, String)],
    now: DateTime<Utc>,
    style: &Style,
) -> (Vec<ResourceRow>, String) {
    let to = &frozen.plan.upgrade_path.to;
    let name = run.metadata.name.clone().unwrap_or_default();
    let recorded = recorded_groups(run);
    let mut rows = Vec::new();
    for view in resource_views(frozen, run_at(run, &name), recorded, live.lookup(), &live.health, now) {
        let r = view.resource;
        let b = live.binding(&r.namespace, &r.binding);
        let (word, mut detail) = outcome_words(&view.outcome);
        let failure = recorded_failure(recorded, r);
        if let Some(since) = &view.since {
            // What the run counted stands; what happened after is worth saying.
            let (shown, _) = outcome_words(since);
            detail = format!("{detail} (since: {shown})").trim_start().to_string();
        } else if failure.is_some() && b.is_some_and(|b| b.last_applied_version() == to.as_str()) {
            detail = format!("{detail} (Kratix has since applied {to})");
        } else if let (Some(f), Some(b)) = (failure, b.filter(|b| b.failed_version() == Some(b.spec_version()))) {
            // A failure still failing: Kratix may run it again with nobody asking.
            let retry = live.retries.at(b.spec_version()).words(f.at, now);
            detail = format!("{detail}; {retry}").trim_start_matches("; ").to_string();
        } else if failure.is_none() && matches!(view.outcome, Outcome::Failed { .. } | Outcome::InFlight) {
            // The event carries the message Kratix gave when the run saw the failure.
            let resource = r.display_name();
            if let Some(d) = events
                .iter()
                .filter(|(_, reason, _)| reason == upgradeplan::engine::lifecycle::events::RESOURCE_UPGRADE_FAILED)
                .find_map(|(_, _, m)| texts::resource_failed_detail(m, &resource, to))
            {
                detail = d.to_string();
            }
        }
        rows.push(ResourceRow {
            group: view.group.to_string(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            binding: r.binding.clone(),
            from: r.last_applied_version.clone(),
            now: b.map(|b| b.last_applied_version().to_string()),
            started_at: started_by(b, &name),
            outcome: word.to_string(),
            since: view.since.as_ref().map(|o| outcome_words(o).0.to_string()),
            detail,
        });
    }
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.group.clone(),
                format!("{}/{}", r.namespace, r.name),
                r.from.clone(),
                r.now.clone().unwrap_or_else(|| "(gone)".into()),
                r.started_at.map_or_else(|| "-".into(), |t| style.time(t, None)),
                style.state(&r.outcome),
                r.detail.clone(),
            ]
        })
        .collect();
    let header = format!("{} {} → {to}\n", style.bold("UpgradeRun"), style.bold(&name));
    let recorded = run
        .status
        .as_ref()
        .map(|s| s.rollout_groups.as_slice())
        .unwrap_or_default();
    let budgets: Vec<String> = run_view(
        run.status.as_ref().map(|s| s.state).unwrap_or_default(),
        recorded,
        Some(frozen),
        None,
    )
    .budgets
    .iter()
    .map(|b| format!("{}: {}", b.group, b.words()))
    .collect();
    let footer = if budgets.is_empty() {
        String::new()
    } else {
        format!("\n{} {}\n", style.bold("Failure budget:"), budgets.join("; "))
    };
    (
        rows,
        header
            + &table(
                style,
                &["GROUP", "RESOURCE", "FROM", "NOW", "STARTED", "OUTCOME", "DETAIL"],
                &table_rows,
            )
            + &footer,
    )
}

#[derive(Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct StatusJson {
    pub name: String,
    pub plan: String,
    /// A revert: the run it undoes (spec §13.7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_of: Option<String>,
    pub state: String,
    pub completed_resources: i64,
    pub total_resources: i64,
    pub groups: Vec<GroupStatus>,
    pub current_group: Option<String>,
    pub in_flight: usize,
    pub limit: Option<usize>,
    pub waiting: Option<String>,
    /// Why the view is the run's recorded status rather than the live one, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Until when it waits, when that is known (a window that opens then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<DateTime<Utc>>,
    /// The resources of the current group being upgraded now (`namespace/name`).
    pub in_flight_resources: Vec<String>,
    /// The resources of the current group upgraded and waiting for their health check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verifying_resources: Vec<String>,
    /// The resources that failed, with Kratix's message.
    pub failed_resources: Vec<ResourceNote>,
    /// Resources of the current group, not upgraded yet, that Kratix will not reconcile now
    /// (their Resource Request is paused, or its workflow suspended).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub kratix_idle: Vec<ResourceNote>,
    /// Groups with a failure budget (`maxFailures`): how many failed of how many allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failure_budgets: Vec<BudgetUse>,
    /// The signal gates of the current group as the controller last read them (`status.gates`),
    /// while the run goes on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<upgradeplan::api::GateStatus>,
}

/// A resource and what is said of it (a failure's message, why Kratix will not reconcile it).
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ResourceNote {
    pub resource: String,
    pub message: String,
}

/// The run evaluated now as the controller evaluates it, with the gate readings and approvals it
/// recorded; `None` for a run the controller no longer evaluates: ended, or dormant (superseded,
/// or a preview not resumed — spec §5.2), whose recorded counts are the run's.
pub fn evaluation_now(
    run: &UpgradeRun,
    frozen: &Frozen,
    live: &Live,
    revisions: &Revisions,
    now: DateTime<Utc>,
) -> Option<Evaluation> {
    let s = run.status.clone().unwrap_or_default();
    if s.state != RunState::InProgress || upgradeplan::engine::admission::is_dormant(run) {
        return None;
    }
    let name = run.metadata.name.clone().unwrap_or_default();
    Some(evaluate(
        &RunContext {
            run_name: &name,
            run_created: admitted(run),
            snapshot_taken: snapshot_taken(run),
            reverting: revert_of(run),
            suspended: run.spec.suspend,
            plan: &frozen.compiled,
            snapshot: &frozen.snapshot,
            overlaps: &frozen.overlaps,
            recorded: &s.rollout_groups,
            health: &live.health,
            gates: &gate::readings_recorded(&frozen.plan, &s, now),
            approvals: &recorded_approvals(&s.rollout_groups),
            freezes: upgradeplan::engine::revert::freezes_holding(&run.spec, &live.freezes),
            budgets: &[],
            revisions,
            now,
        },
        live.lookup(),
    ))
}

/// Where `run` stands now, for `match --resource` to answer from the run under way.
pub fn in_run(
    run: &UpgradeRun,
    frozen: Frozen,
    live: &Live,
    revisions: &Revisions,
    now: DateTime<Utc>,
) -> crate::matching::InRun {
    let name = run.metadata.name.clone().unwrap_or_default();
    let eval = evaluation_now(run, &frozen, live, revisions, now);
    let state = run.status.as_ref().map(|s| s.state).unwrap_or_default();
    let view = run_view(state, recorded_groups(run), Some(&frozen), eval.as_ref());
    let soak_ends = eval
        .as_ref()
        .filter(|e| e.blocked() == Some(Blocked::Soaking))
        .and_then(|e| e.wake_at);
    let index = |group: &str| frozen.snapshot.groups.iter().position(|g| g.name == group);
    let outcomes = resource_views(
        &frozen,
        run_at(run, &name),
        recorded_groups(run),
        live.lookup(),
        &live.health,
        now,
    )
    .iter()
    .filter_map(|v| {
        let (word, _) = outcome_words(&v.outcome);
        Some((
            index(v.group)?,
            v.resource.namespace.clone(),
            v.resource.binding.clone(),
            word,
        ))
    })
    .collect();
    crate::matching::InRun {
        name,
        view,
        soak_ends,
        outcomes,
        frozen,
    }
}

/// A group's progress as a bar: done (succeeded or skipped) of total.
pub fn progress_bar(g: &GroupStatus) -> String {
    const WIDTH: i64 = 10;
    let done = g.succeeded + g.skipped;
    let filled = if g.total > 0 {
        (done * WIDTH / g.total).clamp(0, WIDTH)
    } else {
        WIDTH
    };
    let percent = if g.total > 0 { done * 100 / g.total } else { 100 };
    format!(
        "[{}{}] {percent:>3}%",
        "#".repeat(filled as usize),
        "-".repeat((WIDTH - filled) as usize)
    )
}

/// The approvals a run's status records, as the engine reads approvals.
fn recorded_approvals(groups: &[GroupStatus]) -> Vec<upgradeplan::engine::stage::ApprovalFact> {
    groups
        .iter()
        .filter_map(upgradeplan::engine::stage::ApprovalFact::recorded)
        .collect()
}

/// The name of the group the evaluation is at.
fn current_group_name(run: &UpgradeRun, e: &Evaluation) -> Option<String> {
    let upgradeplan::engine::run::Verdict::InProgress { group } = e.verdict else {
        return None;
    };
    e.groups
        .get(group)
        .map(|g| g.name.clone())
        .or_else(|| run.status.as_ref()?.rollout_groups.get(group).map(|g| g.name.clone()))
}

/// For a preview not resumed, its first group with resources not yet finished, as recorded.
fn first_unfinished(run: &UpgradeRun, groups: &[GroupStatus]) -> Option<usize> {
    let waiting = waits_as_preview(run) && run.status.as_ref().is_some_and(|s| !s.state.is_terminal());
    let unfinished = |g: &GroupStatus| g.succeeded + g.failed + g.skipped < g.total;
    groups.iter().position(unfinished).filter(|_| waiting)
}

const PREVIEW_WAITS: &str = "preview: nothing is patched until resumed (kubectl upgradeplan resume <run>)";

/// What a run waits for, in words, from its conditions and (when in progress) the engine.
fn waiting(run: &UpgradeRun, eval: Option<&Evaluation>, now: DateTime<Utc>, style: &Style) -> Option<String> {
    let s = run.status.as_ref()?;
    if let Some(by) = &s.superseded_by {
        return Some(format!("superseded by {by}: it starts nothing more"));
    }
    for c in [reasons::PLAN_RESOLVED, reasons::TARGET_REVISION_READY] {
        if let Some(c) =
            find_condition(&s.conditions, c).filter(|c| c.status == upgradeplan::api::ConditionStatus::False)
        {
            return Some(c.message.clone());
        }
    }
    // A preview not resumed is not evaluated (dormant): its wait is its own.
    if waits_as_preview(run) {
        return Some(PREVIEW_WAITS.to_string());
    }
    let e = eval?;
    let first = held_words(e.blocked()?, run, e, now, style);
    // Everything else that holds the group (spec §14.1), by the reasons the blocked gauge uses.
    let also: Vec<&str> = e.held_by.iter().skip(1).map(|b| b.as_str()).collect();
    Some(if also.is_empty() {
        first
    } else {
        format!("{first}; also held by {}", also.join(", "))
    })
}

/// What holds a run's current group, in words, for the first reason of its admission.
fn held_words(blocked: Blocked, run: &UpgradeRun, e: &Evaluation, now: DateTime<Utc>, style: &Style) -> String {
    let conditions = run.status.as_ref().map_or(&[][..], |s| s.conditions.as_slice());
    match blocked {
        Blocked::Suspended => "suspended: no new upgrade starts (kubectl upgradeplan resume <run>)".to_string(),
        Blocked::WindowClosed => match e.windows.and_then(|g| g.next_open) {
            Some(t) => format!("window closed until {}", style.time(t, None)),
            None => "window closed, and it does not open within 400 days".to_string(),
        },
        Blocked::ConcurrencyLimit => format!(
            "concurrency limit: {} of {} in flight",
            e.in_flight,
            e.limit.unwrap_or(0)
        ),
        Blocked::Frozen => match &e.freeze {
            Some(hold) => format!(
                "{} (new upgrades are held; in-flight ones continue)",
                crate::output::frozen_words(style, hold)
            ),
            None => "frozen by an UpgradeFreeze".to_string(),
        },
        Blocked::BudgetExhausted => {
            match upgradeplan::api::find_condition(conditions, upgradeplan::api::reasons::BUDGETED) {
                Some(c) => format!("{} (waiting for a unit; in-flight upgrades continue)", c.message),
                None => "held by an UpgradeBudget".to_string(),
            }
        }
        // The TargetRevisionReady condition above explains it in full.
        Blocked::RevisionMissing => "waiting for the target PromiseRevision".to_string(),
        Blocked::Soaking => {
            let group = current_group_name(run, e).unwrap_or_default();
            match e.wake_at {
                Some(t) => format!("soaking after group {group:?}, next group in {}", duration(t - now)),
                None => format!("soaking after group {group:?}"),
            }
        }
        Blocked::AwaitingApproval => {
            let group = current_group_name(run, e).unwrap_or_default();
            let run_name = run.metadata.name.as_deref().unwrap_or_default();
            let since = find_condition(conditions, reasons::AWAITING_APPROVAL)
                .filter(|c| c.status == upgradeplan::api::ConditionStatus::True)
                .map(|c| format!(" since {}", duration(now - c.last_transition_time)))
                .unwrap_or_default();
            format!("waiting for approval of group {group:?}{since} — kubectl upgradeplan approve {run_name} {group}")
        }
        Blocked::GateClosed => match &e.gate_check {
            GateCheck::Closed { reading, .. } => {
                let (_, message) = gate::closed_condition(&reading.gate, &reading.reading);
                format!("{message} (new upgrades are held; in-flight ones continue)")
            }
            _ => "a signal gate is closed".to_string(),
        },
    }
}

/// The progress of a run.
#[allow(clippy::too_many_arguments)]
/// When a resource is in several groups it is counted in each (as SKE specifies): says so, so that
/// the totals never look wrong. `None` when every resource is in one group.
pub fn shared_entries_note(snapshot: &upgradeplan::engine::snapshot::Snapshot) -> Option<String> {
    let mut seen: HashMap<(&str, &str), usize> = HashMap::new();
    let mut entries = 0;
    for r in snapshot.groups.iter().flat_map(|g| &g.resources) {
        entries += 1;
        *seen.entry((r.namespace.as_str(), r.binding.as_str())).or_default() += 1;
    }
    let shared = seen.values().filter(|n| **n > 1).count();
    (shared > 0).then(|| {
        format!(
            "{entries} group entries, {} distinct resources; {shared} in more than one group, upgraded in the first and counted in each",
            seen.len()
        )
    })
}

/// A group's phase in `status`: a run that ended says how each unfinished group ended, never
/// `waiting`.
/// `groups` are the run's counts, so that a failed run's failing group (its last group with
/// failures) is told from earlier groups whose failures their budget tolerated.
pub fn status(
    run: &UpgradeRun,
    frozen: Option<&Frozen>,
    live: &Live,
    revisions: &Revisions,
    now: DateTime<Utc>,
    style: &Style,
) -> (StatusJson, String) {
    let s = run.status.clone().unwrap_or_default();
    let name = run.metadata.name.clone().unwrap_or_default();
    let eval = frozen.and_then(|f| evaluation_now(run, f, live, revisions, now));
    let view = run_view(s.state, &s.rollout_groups, frozen, eval.as_ref());
    let groups: Vec<GroupStatus> = view.groups.iter().map(|g| g.status.clone()).collect();
    let json = StatusJson {
        name: name.clone(),
        plan: run.plan_name().to_string(),
        revert_of: revert_of(run).map(str::to_string),
        state: state_label(s.state).into(),
        completed_resources: groups.iter().map(|g| g.succeeded).sum(),
        total_resources: s.total_resources,
        current_group: view.current.and_then(|i| groups.get(i)).map(|g| g.name.clone()),
        in_flight: view.in_flight,
        limit: view.limit,
        waiting: if s.state.is_terminal() {
            None
        } else {
            waiting(run, eval.as_ref(), now, style)
        },
        groups: groups.clone(),
        note: None,
        waiting_until: view.window_opens,
        in_flight_resources: view.in_flight_resources.clone(),
        verifying_resources: view.verifying_resources.clone(),
        // Failures that failed the run, or that a budget tolerated (in any state).
        failed_resources: match frozen {
            Some(f) if s.state == RunState::Failed || groups.iter().any(|g| g.failed > 0) => {
                failed_resources(run, f, live)
            }
            _ => Vec::new(),
        },
        failure_budgets: view.budgets.clone(),
        // A preview not resumed has no current group (it is not evaluated): the group it would
        // begin with, its first unfinished one as recorded, is what resuming it would act on.
        kratix_idle: match (frozen, view.current.or_else(|| first_unfinished(run, &groups))) {
            (Some(f), Some(c)) if c < f.snapshot.groups.len() => {
                kratix_idle(&f.snapshot.groups[c], &f.plan.upgrade_path.to, live)
            }
            _ => Vec::new(),
        },
        gates: if s.state.is_terminal() {
            Vec::new()
        } else {
            s.gates.clone()
        },
    };
    let revert = json
        .revert_of
        .as_ref()
        .map(|of| format!(", revert of {of}"))
        .unwrap_or_default();
    let mut out = format!(
        "{} {} (plan {}{revert}) — {}\n",
        style.bold("UpgradeRun"),
        style.bold(&name),
        json.plan,
        style.state(&json.state)
    );
    if let Some(t) = s.started_at {
        let end = match (s.finished_at, ended_at(run)) {
            (Some(f), _) => format!(", finished {} after {}", relative(f, now), duration(f - t)),
            (None, Some(e)) => format!(", superseded {} after {}", relative(e, now), duration(e - t)),
            (None, None) => String::new(),
        };
        out.push_str(&format!(
            "  started {}{end}; {}/{} resources upgraded\n",
            relative(t, now),
            json.completed_resources,
            json.total_resources
        ));
        if let Some(note) = frozen.and_then(|f| shared_entries_note(&f.snapshot)) {
            out.push_str(&format!("  ({note})\n"));
        }
    }
    if let Some(c) = find_condition(&s.conditions, reasons::RUN_SUCCEEDED) {
        out.push_str(&format!("  {}: {}\n", c.reason, c.message));
    }
    if !groups.is_empty() {
        let rows: Vec<Vec<String>> = view
            .groups
            .iter()
            .enumerate()
            .map(|(i, GroupView { status: g, state })| {
                let phase = state.as_str();
                let in_flight = if Some(i) == view.current {
                    json.in_flight.to_string()
                } else {
                    "-".into()
                };
                vec![
                    g.name.clone(),
                    progress_bar(g),
                    g.total.to_string(),
                    g.succeeded.to_string(),
                    g.failed.to_string(),
                    g.skipped.to_string(),
                    in_flight,
                    phase.to_string(),
                ]
            })
            .collect();
        out.push('\n');
        out.push_str(&table(
            style,
            &[
                "GROUP",
                "PROGRESS",
                "TOTAL",
                "SUCCEEDED",
                "FAILED",
                "SKIPPED",
                "IN FLIGHT",
                "PHASE",
            ],
            &rows,
        ));
    }
    if !json.failure_budgets.is_empty() {
        let words: Vec<String> = json
            .failure_budgets
            .iter()
            .map(|b| format!("{}: {}", b.group, b.words()))
            .collect();
        out.push_str(&format!("\n{} {}\n", style.bold("Failure budget:"), words.join("; ")));
    }
    if !json.gates.is_empty() {
        let words: Vec<String> = json
            .gates
            .iter()
            .map(|g| {
                let state = if g.open { "open" } else { "closed" };
                let what = g
                    .message
                    .strip_prefix(&format!("gate {:?}: ", g.name))
                    .unwrap_or(&g.message);
                let said = if g.open { String::new() } else { format!(": {what}") };
                format!("{} {state} for {}{said}", g.name, duration(now - g.since))
            })
            .collect();
        out.push_str(&format!("\n{} {}\n", style.bold("Gates:"), words.join("; ")));
    }
    let approved: Vec<String> = json
        .groups
        .iter()
        .filter_map(|g| {
            let (approval, at) = g.recorded_approval()?;
            let who = g.approver().unwrap_or("someone (no spec.approver)");
            let comment = g.comment.as_ref().map(|c| format!(": {c}")).unwrap_or_default();
            Some(format!(
                "{} by {who} (upgradeapproval/{approval}, {}){comment}",
                g.name,
                relative(at, now)
            ))
        })
        .collect();
    if !approved.is_empty() {
        out.push_str(&format!("\n{} {}\n", style.bold("Approved:"), approved.join("; ")));
    }
    if !json.in_flight_resources.is_empty() {
        out.push_str(&format!(
            "\n{} {}\n",
            style.bold("Upgrading:"),
            first_few(&json.in_flight_resources, 5)
        ));
    }
    if !json.verifying_resources.is_empty() {
        // One block with the Upgrading line when there is one.
        let gap = if json.in_flight_resources.is_empty() { "\n" } else { "" };
        out.push_str(&format!(
            "{gap}{} {} (upgraded; waiting for a HealthRecord that says healthy)\n",
            style.bold("Verifying:"),
            first_few(&json.verifying_resources, 5)
        ));
    }
    for idle in &json.kratix_idle {
        out.push_str(&format!(
            "\n{} {} is {}\n",
            style.bold("Kratix will not reconcile:"),
            idle.resource,
            idle.message
        ));
    }
    if let Some(w) = &json.waiting {
        // The countdown is in the text only: it ticks, the run does not change.
        let countdown = json
            .waiting_until
            .map(|t| format!(" ({})", relative(t, now)))
            .unwrap_or_default();
        out.push_str(&format!("\n{} {w}{countdown}\n", style.bold("Waiting:")));
    }
    if !json.failed_resources.is_empty() {
        out.push_str(&format!("\n{}\n", style.bold("Failed:")));
        for f in json.failed_resources.iter().take(5) {
            out.push_str(&format!("  {}: {}\n", f.resource, f.message));
        }
        if json.failed_resources.len() > 5 {
            out.push_str(&format!("  … and {} more\n", json.failed_resources.len() - 5));
        }
        out.push_str(&format!(
            "Every resource's outcome: kubectl upgradeplan history {} {name}\n",
            json.plan
        ));
    }
    (json, out)
}

/// `a, b, c (+2 more)`.
fn first_few(names: &[String], n: usize) -> String {
    let shown = names.iter().take(n).cloned().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(n) {
        0 => shown,
        more => format!("{shown} (+{more} more)"),
    }
}

/// The resources of a failed run that failed, with the message of their binding's condition.
fn failed_resources(run: &UpgradeRun, f: &Frozen, live: &Live) -> Vec<ResourceNote> {
    let name = run.metadata.name.clone().unwrap_or_default();
    resource_views(
        f,
        run_at(run, &name),
        recorded_groups(run),
        live.lookup(),
        &live.health,
        chrono::Utc::now(),
    )
    .into_iter()
    .filter_map(|v| match v.outcome {
        Outcome::Failed { message } => Some(ResourceNote {
            resource: v.resource.display_name(),
            message,
        }),
        _ => None,
    })
    .collect()
}

/// When the run's snapshot was taken (`status.startedAt`; before it has one, its admission).
fn snapshot_taken(run: &UpgradeRun) -> DateTime<Utc> {
    run.status
        .as_ref()
        .and_then(|s| s.started_at)
        .unwrap_or_else(|| admitted(run))
}

/// The run as the per-resource rules need it.
fn run_at<'r>(run: &'r UpgradeRun, name: &'r str) -> RunAt<'r> {
    RunAt {
        name,
        state: run.status.as_ref().map(|s| s.state).unwrap_or_default(),
        admitted: admitted(run),
        snapshot_taken: snapshot_taken(run),
        reverting: revert_of(run),
        finished: ended_at(run),
    }
}

/// The resources of `group` not at `to` yet whose bindings say Kratix will not reconcile them now.
fn kratix_idle(group: &upgradeplan::engine::snapshot::SnapshotGroup, to: &str, live: &Live) -> Vec<ResourceNote> {
    group
        .resources
        .iter()
        .filter_map(|r| {
            let b = live.binding(&r.namespace, &r.binding)?;
            let why = b.kratix_idle().filter(|_| b.last_applied_version() != to)?;
            Some(ResourceNote {
                resource: r.display_name(),
                message: why.words(),
            })
        })
        .collect()
}

/// The run's `status.rolloutGroups` as last written (their failure records stand, spec §5.5).
fn recorded_groups(run: &UpgradeRun) -> &[GroupStatus] {
    run.status.as_ref().map_or(&[], |s| s.rollout_groups.as_slice())
}

/// A run's state as the views name it: a run the controller has not seen yet (state "") is New.
pub fn state_label(state: RunState) -> &'static str {
    match state {
        RunState::Unresolved => "New",
        other => other.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use upgradeplan::api::{Condition, ConditionStatus, RunResult, UpgradePlanRef, UpgradeRunSpec, UpgradeRunStatus};

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn group(total: i64, succeeded: i64, failed: i64, skipped: i64) -> GroupStatus {
        GroupStatus {
            name: "g".into(),
            total,
            succeeded,
            failed,
            skipped,
            ..Default::default()
        }
    }

    #[test]
    fn progress_bars_and_short_lists() {
        assert_eq!(progress_bar(&group(10, 3, 1, 1)), "[####------]  40%");
        assert_eq!(progress_bar(&group(3, 3, 0, 0)), "[##########] 100%");
        assert_eq!(
            progress_bar(&group(0, 0, 0, 0)),
            "[##########] 100%",
            "an empty group is done"
        );
        let names: Vec<String> = (0..7).map(|i| format!("ns/r{i}")).collect();
        assert_eq!(first_few(&names[..2], 5), "ns/r0, ns/r1");
        assert_eq!(first_few(&names, 5), "ns/r0, ns/r1, ns/r2, ns/r3, ns/r4 (+2 more)");
    }

    #[test]
    fn resources_in_two_groups_are_said_to_be() {
        use upgradeplan::engine::snapshot::{Snapshot, SnapshotGroup, SnapshotResource};
        let r = |name: &str| SnapshotResource {
            namespace: "ns".into(),
            name: name.into(),
            binding: format!("{name}-b"),
            last_applied_version: "v1".into(),
            spec_version: "v1".into(),
            target: None,
        };
        let group = |name: &str, resources: Vec<SnapshotResource>| SnapshotGroup {
            name: name.into(),
            resources: resources.into_iter().map(Into::into).collect(),
        };
        let shared = Snapshot {
            groups: vec![group("a", vec![r("x"), r("y")]), group("b", vec![r("x"), r("z")])],
        };
        assert_eq!(
            shared_entries_note(&shared).as_deref(),
            Some("4 group entries, 3 distinct resources; 1 in more than one group, upgraded in the first and counted in each")
        );
        let apart = Snapshot {
            groups: vec![group("a", vec![r("x")]), group("b", vec![r("y")])],
        };
        assert_eq!(shared_entries_note(&apart), None);
    }

    fn run(name: &str, created: &str, status: UpgradeRunStatus) -> UpgradeRun {
        let mut r = UpgradeRun::new(
            name,
            UpgradeRunSpec {
                upgrade_plan_ref: UpgradePlanRef { name: "p".into() },
                suspend: false,
                cancel: false,
                ..Default::default()
            },
        );
        r.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            upgradeplan::time::to_jiff(utc(created)),
        ));
        r.status = Some(status);
        r
    }

    #[test]
    fn history_keeps_the_cancelled_run_and_stops_a_superseded_runs_clock() {
        let superseded = run(
            "old",
            "2026-06-01T10:00:00Z",
            UpgradeRunStatus {
                state: RunState::InProgress,
                started_at: Some(utc("2026-06-01T10:00:00Z")),
                superseded_by: Some("new".into()),
                conditions: vec![Condition::new(
                    reasons::SUSPENDED,
                    ConditionStatus::True,
                    reasons::SUPERSEDED,
                    "Superseded by UpgradeRun \"new\"",
                    utc("2026-06-01T10:05:00Z"),
                )],
                ..Default::default()
            },
        );
        assert_eq!(ended_at(&superseded), Some(utc("2026-06-01T10:05:00Z")));
        let cancelled = LastRun {
            name: "cancelled".into(),
            finished_at: Some(utc("2026-06-01T11:00:00Z")),
            result: RunResult::Cancelled,
            reason: reasons::RUN_CANCELLED.into(),
            message: "UpgradeRun was deleted before it finished".into(),
        };
        let now = utc("2026-06-02T00:00:00Z");
        let (rows, text) = history(
            vec![superseded],
            Some(&cancelled),
            &HashMap::new(),
            10,
            now,
            &Style::plain(),
        );
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].name.as_str(), rows[0].deleted), ("cancelled", true));
        assert_eq!(rows[0].state, "Cancelled");
        assert_eq!(rows[1].duration_seconds, Some(300), "stops when superseded, not at now");
        assert!(
            text.contains("Cancelled (run deleted; from the plan's lastRun)"),
            "{text}"
        );
        assert!(text.contains("InProgress (superseded by new)"), "{text}");
        // The plan's lastRun of a run still listed is not repeated.
        let (rows, _) = history(vec![], None, &HashMap::new(), 10, now, &Style::plain());
        assert!(rows.is_empty());
    }
}
