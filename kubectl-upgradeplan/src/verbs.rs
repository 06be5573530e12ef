//! The everyday verbs: get, run, status, suspend, resume, cancel, version.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::{anyhow, bail};
use chrono::Utc;
use futures::StreamExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::json;
use upgradeplan::api::{
    find_condition, reasons, GroupPhase, RunState, UpgradeApproval, UpgradeApprovalSpec, UpgradeFreeze, UpgradePlan,
    UpgradeRun, UpgradeRunRef,
};
use upgradeplan::engine::revert::Revisions;

use crate::cli::Global;
use crate::client::{explain_error, get_plan, get_run, list_plans};
use crate::output::{relative, render, table, Style};
use crate::runs;

/// Exit codes (README "Exit codes"): `status -w` ends 0 when the run completed, and these
/// otherwise; any error of any command (API, usage, a missing object) is [`EXIT_ERROR`].
pub const EXIT_FAILED: u8 = 1;
pub const EXIT_CANCELLED: u8 = 2;
pub const EXIT_TIMEOUT: u8 = 3;
pub const EXIT_ERROR: u8 = 4;
pub const EXIT_SUPERSEDED: u8 = 5;

/// READY of `get`: True only when the plan is valid and its Promise exists; otherwise False with
/// the reason of the condition that is not (an invalid plan reads `Available` as its phase).
pub fn plan_readiness(plan: &UpgradePlan) -> String {
    let conditions = plan
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let mut state = "-".to_string();
    for type_ in [reasons::READY, reasons::PROMISE_RESOLVED] {
        match find_condition(conditions, type_) {
            Some(c) if c.status == upgradeplan::api::ConditionStatus::True => state = "True".into(),
            Some(c) => return format!("False ({})", c.reason),
            None => return "-".into(),
        }
    }
    state
}

/// The zone a plan's triggers are written in, when it names one.
fn plan_zone(plan: &UpgradePlan) -> Option<chrono_tz::Tz> {
    plan.spec
        .upgrade_execution_policy
        .as_ref()
        .and_then(|p| p.time_zone.as_deref())
        .and_then(|z| upgradeplan::engine::cron::parse_zone(Some(z)).ok())
}

/// The plans' table; `reverts`: for each revert among their active runs, the run it undoes.
pub fn plans_table(
    plans: &[UpgradePlan],
    reverts: &std::collections::HashMap<String, String>,
    now: chrono::DateTime<Utc>,
    style: &Style,
) -> String {
    let mut plans: Vec<&UpgradePlan> = plans.iter().collect();
    plans.sort_by(|a, b| {
        crate::output::natural_cmp(
            a.metadata.name.as_deref().unwrap_or_default(),
            b.metadata.name.as_deref().unwrap_or_default(),
        )
    });
    let rows: Vec<Vec<String>> = plans
        .iter()
        .map(|p| {
            let s = p.status.clone().unwrap_or_default();
            let phase = format!("{:?}", s.phase);
            let next = s
                .next_run_at
                .map(|t| format!("{}, {}", relative(t, now), style.time(t, plan_zone(p))))
                .unwrap_or_else(|| "-".into());
            let mut row = vec![
                p.metadata.name.clone().unwrap_or_default(),
                plan_readiness(p),
                p.spec.promise_ref.name.clone(),
                p.spec.upgrade_path.to.clone(),
                style.state(&phase),
                if p.spec.suspend { "True" } else { "False" }.to_string(),
                match (s.active_run_ref.as_str(), reverts.get(&s.active_run_ref)) {
                    ("", _) => "-".into(),
                    (active, Some(of)) => format!("{active} (revert of {of})"),
                    (active, None) => active.to_string(),
                },
                s.last_run
                    .as_ref()
                    .map(|l| style.state(l.result.as_str()))
                    .unwrap_or_else(|| "-".into()),
                next,
            ];
            if style.wide {
                row.push(p.spec.upgrade_path.from.join(","));
            }
            row
        })
        .collect();
    let mut headers = vec![
        "NAME",
        "READY",
        "PROMISE",
        "TO",
        "PHASE",
        "SUSPENDED",
        "ACTIVE RUN",
        "LAST RESULT",
        "NEXT RUN",
    ];
    if style.wide {
        headers.push("FROM");
    }
    if rows.is_empty() {
        return "No UpgradePlans found.\n".into();
    }
    table(style, &headers, &rows)
}

pub async fn get(client: &Client, g: &Global, plan: Option<&str>, watch: bool, style: &Style) -> anyhow::Result<()> {
    let show = |plans: Vec<UpgradePlan>, reverts| -> anyhow::Result<String> {
        let objects = crate::output::objects_as_kubectl(&plans, plan.is_some(), g.show_managed_fields)?;
        render(
            &g.output,
            style,
            &objects,
            &plans_table(&plans, &reverts, Utc::now(), style),
        )
    };
    let current = match plan {
        Some(p) => vec![get_plan(client, p).await?],
        None => list_plans(client).await?,
    };
    let mut last = show(current, active_reverts(client).await)?;
    crate::output::out(&last)?;
    if !watch {
        return Ok(());
    }
    // On a terminal the table is redrawn in place, as `status -w` does; piped, appended.
    let redraw = crate::output::redraws_in_place(g);
    let api: Api<UpgradePlan> = Api::all(client.clone());
    let config = match plan {
        Some(p) => watcher::Config::default().fields(&format!("metadata.name={p}")),
        None => watcher::Config::default(),
    };
    let mut stream = watcher(api.clone(), config).default_backoff().applied_objects().boxed();
    while let Some(ev) = stream.next().await {
        ev.map_err(|e| anyhow!("watching upgradeplans: {e}"))?;
        let plans = match plan {
            Some(p) => vec![get_plan(client, p).await?],
            None => list_plans(client).await?,
        };
        let text = show(plans, active_reverts(client).await)?;
        if text != last {
            if redraw {
                crate::output::redraw(&last, &text)?;
            } else {
                crate::output::out(format!("\n{text}"))?;
            }
            last = text;
        }
    }
    Ok(())
}

/// The reverts among the runs, each with the run it undoes (best effort: without them, `get` shows
/// the active run's name alone).
async fn active_reverts(client: &Client) -> std::collections::HashMap<String, String> {
    let runs = Api::<UpgradeRun>::all(client.clone()).list(&Default::default()).await;
    runs.map(|l| {
        l.items
            .iter()
            .filter_map(|r| Some((r.metadata.name.clone()?, runs::revert_of(r)?.to_string())))
            .collect()
    })
    .unwrap_or_default()
}

/// What a verb that wrote `object` prints: `message` in the text views, else the object in
/// `-o`'s format (spec §10), as `kubectl create|patch -o …` does.
fn wrote<K: serde::Serialize>(g: &Global, object: &K, message: &str) -> anyhow::Result<()> {
    if g.output.is_text() {
        return crate::output::out(message);
    }
    let value = crate::output::objects_as_kubectl(std::slice::from_ref(object), true, g.show_managed_fields)?;
    crate::output::out(render(&g.output, &Style::from(g), &value, message)?)
}

pub async fn run(
    client: &Client,
    g: &Global,
    plan_name: &str,
    preview: bool,
    name: Option<&str>,
) -> anyhow::Result<()> {
    let plan = get_plan(client, plan_name).await?;
    // The run is created either way (spec: it waits for the plan to be fixed), but not silently.
    let invalid = plan
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, reasons::READY))
        .filter(|c| c.status == upgradeplan::api::ConditionStatus::False);
    if let Some(c) = invalid {
        eprintln!(
            "note: upgradeplan/{plan_name} is not ready ({}: {}); the run waits until the plan is fixed (kubectl upgradeplan explain {plan_name})",
            c.reason, c.message
        );
    }
    let run = upgradeplan::engine::admission::new_run(
        &plan,
        upgradeplan::engine::admission::NewRun::Manual {
            name: name.map(str::to_string),
            preview,
        },
    );
    let api = Api::<UpgradeRun>::all(client.clone());
    let created = api
        .create(&PostParams::default(), &run)
        .await
        .map_err(|e| explain_error(e, "create", "upgraderuns", name))?;
    let created_name = created.metadata.name.clone().unwrap_or_default();
    wrote(g, &created, &format!("{created_name}\n"))?;
    // Never silently: a (non-preview) run supersedes the plan's active run (spec §5.2). On
    // stderr, so that `run` still prints only the new run's name for scripts.
    let active = plan
        .status
        .as_ref()
        .map(|s| s.active_run_ref.as_str())
        .unwrap_or_default();
    if !preview && !active.is_empty() && active != created_name {
        if let Ok(Some(older)) = api.get_opt(active).await {
            let s = older.status.unwrap_or_default();
            eprintln!(
                "note: it supersedes upgraderun/{active} ({}, {}/{} upgraded): that run starts nothing more; its upgrades in flight finish",
                s.state.as_str(),
                s.completed_resources,
                s.total_resources
            );
        }
    }
    Ok(())
}

/// How `revert` makes its run.
#[derive(Debug, Clone)]
pub struct RevertHow {
    pub resources: upgradeplan::api::RevertResources,
    pub name: Option<String>,
    pub preview: bool,
    pub respect_policy: bool,
}

/// A revert worked out as the controller will take it (the engine's own function, from the
/// run's verified snapshot and the live bindings), before it is created.
pub struct PreparedRevert {
    /// The run reverted.
    pub run: UpgradeRun,
    pub plan: UpgradePlan,
    pub of: upgradeplan::api::RevertOf,
    /// The revert's snapshot and frozen plan.
    pub derived: upgradeplan::engine::snapshot::Frozen,
    /// What became of the run's resources.
    pub tally: upgradeplan::engine::revert::Tally,
    pub live: runs::Live,
}

/// Works out the revert of `run_name` (a run, or a plan: its active run, else its last), refusing
/// what the controller would fail (the run of another plan, never started, its snapshot lost or
/// changed) and what takes nothing.
pub async fn prepare_revert(
    client: &Client,
    g: &Global,
    run_name: &str,
    resources: upgradeplan::api::RevertResources,
    respect_policy: bool,
) -> anyhow::Result<PreparedRevert> {
    use upgradeplan::engine::revert::{self, Reverted, RevertedFact, Tally};
    use upgradeplan::engine::snapshot::SnapshotFact;
    let run = crate::client::get_run_or_plans(client, run_name).await?;
    let run_name = run.metadata.name.clone().unwrap_or_default();
    let plan = get_plan(client, run.plan_name()).await?;
    let plan_name = run.plan_name().to_string();
    // Read and verified as the controller reads it: lost or changed since written, refused.
    let frozen = runs::load_frozen(client, &g.snapshot_namespace, &run)
        .await
        .map_err(|e| e.context(format!("cannot revert upgraderun/{run_name}")))?;
    let snapshot = match &frozen {
        Some(f) => SnapshotFact::Found {
            frozen: std::sync::Arc::new(f.clone()),
            refs: Vec::new(),
        },
        None => SnapshotFact::Absent,
    };
    let live = runs::live_state(client, &plan_name, frozen.as_ref().map_or(&plan.spec, |f| &f.plan)).await?;
    let of = upgradeplan::api::RevertOf {
        name: run_name.clone(),
        resources,
    };
    let fact = RevertedFact::Found { run: &run, snapshot };
    let derived = revert::derive(&plan_name, &of, respect_policy, &fact, live.lookup())
        .map_err(|refusal| anyhow::anyhow!("{}", refusal.message))?;
    let tally = match &frozen {
        Some(f) => {
            let status = run.status.clone().unwrap_or_default();
            let reverted = Reverted {
                name: &run_name,
                frozen: f,
                status: &status,
            };
            Tally::of(&reverted, live.lookup())
        }
        None => Tally::default(),
    };
    if tally.wanted(resources) == 0 {
        anyhow::bail!("{}", nothing_to_revert(&run_name, resources, &tally));
    }
    Ok(PreparedRevert {
        run,
        plan,
        of,
        derived,
        tally,
        live,
    })
}

/// `kubectl upgradeplan revert RUN` (spec §13.7): creates the revert [`prepare_revert`] works
/// out, and says what it takes and what to mind (the plan's schedule).
pub async fn revert(client: &Client, g: &Global, run_name: &str, how: RevertHow, style: &Style) -> anyhow::Result<()> {
    let prepared = prepare_revert(client, g, run_name, how.resources, how.respect_policy).await?;
    let PreparedRevert {
        run,
        plan,
        of,
        derived,
        tally,
        ..
    } = prepared;
    let run_name = run.metadata.name.clone().unwrap_or_default();
    let plan_name = run.plan_name().to_string();
    let new = upgradeplan::engine::admission::new_run(
        &plan,
        upgradeplan::engine::admission::NewRun::Revert {
            name: how.name.clone(),
            of,
            respect_policy: how.respect_policy,
            preview: how.preview,
        },
    );
    let api = Api::<UpgradeRun>::all(client.clone());
    let created = api
        .create(&PostParams::default(), &new)
        .await
        .map_err(|e| explain_error(e, "create", "upgraderuns", how.name.as_deref()))?;
    let created_name = created.metadata.name.clone().unwrap_or_default();
    wrote(g, &created, &format!("{created_name}\n"))?;
    // On stderr, so that `revert` prints only the new run's name for scripts.
    eprintln!("{}", revert_summary(&run_name, &how, &tally, &derived, style));
    let status = plan.status.clone().unwrap_or_default();
    let active = status.active_run_ref.as_str();
    if !how.preview && !active.is_empty() && active != created_name {
        eprintln!(
            "note: it supersedes upgraderun/{active}: that run starts nothing more; its upgrades in flight finish"
        );
    }
    let scheduled = plan.spec.upgrade_execution_policy.is_some() && !plan.spec.suspend;
    if let (true, Some(next)) = (scheduled, status.next_run_at) {
        eprintln!(
            "note: upgradeplan/{plan_name} is not suspended: its next trigger ({}) starts a run that supersedes this revert and upgrades again; to stop that: kubectl upgradeplan suspend {plan_name}",
            upgradeplan::time::rfc3339(next)
        );
    }
    if how.preview {
        eprintln!("note: a preview: it takes its snapshot and moves nothing until kubectl upgradeplan resume run/{created_name}");
    }
    Ok(())
}

/// What `revert` says it takes: how many, in which groups in which order, and what it left out.
pub fn revert_summary(
    run: &str,
    how: &RevertHow,
    tally: &upgradeplan::engine::revert::Tally,
    derived: &upgradeplan::engine::snapshot::Frozen,
    style: &Style,
) -> String {
    let groups: Vec<String> = derived
        .snapshot
        .groups
        .iter()
        .filter(|g| !g.resources.is_empty())
        .map(|g| format!("{} ({})", g.name, g.resources.len()))
        .collect();
    let taken = tally.wanted(how.resources);
    let mut text = format!(
        "{} {taken} resource(s) of upgraderun/{run} (--resources {}), each to the version it had: {}",
        style.bold("Reverting"),
        how.resources.as_str(),
        groups.join(" then ")
    );
    if tally.upgrading > 0 && how.resources != upgradeplan::api::RevertResources::Failed {
        text.push_str(&format!(
            "; {} still upgrading, moved back once Kratix is done with them",
            tally.upgrading
        ));
    }
    let left: Vec<String> = [
        (tally.failed, "failed (--resources failed or all takes them)"),
        (
            tally.upgraded + tally.upgrading,
            "upgraded (--resources upgraded or all takes them)",
        ),
    ]
    .into_iter()
    .zip([
        how.resources == upgradeplan::api::RevertResources::Upgraded,
        how.resources == upgradeplan::api::RevertResources::Failed,
    ])
    .filter(|((n, _), left_out)| *n > 0 && *left_out)
    .map(|((n, what), _)| format!("{n} {what}"))
    .chain(
        [
            (tally.moved_since, "moved on since by someone else"),
            (tally.not_started_by_it, "not started by it"),
            (tally.gone, "gone"),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}")),
    )
    .collect();
    if !left.is_empty() {
        text.push_str(&format!(". Left alone: {}", left.join(", ")));
    }
    text.push('.');
    text
}

/// Why `revert` refuses a run that leaves nothing to take.
pub fn nothing_to_revert(
    run: &str,
    resources: upgradeplan::api::RevertResources,
    tally: &upgradeplan::engine::revert::Tally,
) -> String {
    let parts: Vec<String> = [
        (tally.upgraded, "upgraded"),
        (tally.upgrading, "still upgrading"),
        (tally.failed, "failed"),
        (tally.moved_since, "moved on since by someone else"),
        (tally.not_started_by_it, "not started by it"),
        (tally.gone, "gone"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    let of_its = if parts.is_empty() {
        "its snapshot holds no resource".to_string()
    } else {
        format!("of its resources, {}", parts.join(", "))
    };
    let hint = if tally.wanted(upgradeplan::api::RevertResources::All) > 0 {
        " (--resources all takes what it upgraded and what failed)"
    } else {
        ""
    };
    format!(
        "nothing to revert in upgraderun/{run} with --resources {}: {of_its}{hint}",
        resources.as_str()
    )
}

/// `plan/NAME`, `run/NAME`, or a bare name looked up as a plan, then as a run.
enum Target {
    Plan(String),
    Run(String),
}

async fn resolve(client: &Client, target: &str) -> anyhow::Result<Target> {
    if let Some(n) = target
        .strip_prefix("plan/")
        .or_else(|| target.strip_prefix("upgradeplan/"))
    {
        return Ok(Target::Plan(n.into()));
    }
    if let Some(n) = target
        .strip_prefix("run/")
        .or_else(|| target.strip_prefix("upgraderun/"))
    {
        return Ok(Target::Run(n.into()));
    }
    let plan = Api::<UpgradePlan>::all(client.clone())
        .get_opt(target)
        .await
        .map_err(|e| explain_error(e, "get", "upgradeplans", Some(target)))?;
    let run = Api::<UpgradeRun>::all(client.clone())
        .get_opt(target)
        .await
        .map_err(|e| explain_error(e, "get", "upgraderuns", Some(target)))?;
    match (plan, run) {
        (Some(_), Some(_)) => {
            bail!("both an UpgradePlan and an UpgradeRun are named {target:?}: say plan/{target} or run/{target}")
        }
        (Some(_), None) => Ok(Target::Plan(target.into())),
        (None, Some(_)) => Ok(Target::Run(target.into())),
        (None, None) => bail!("no UpgradePlan or UpgradeRun named {target:?} (kubectl upgradeplan get lists plans)"),
    }
}

pub async fn set_suspend(client: &Client, g: &Global, target: &str, suspend: bool) -> anyhow::Result<()> {
    let patch = Patch::Merge(json!({"spec": {"suspend": suspend}}));
    let verb = if suspend { "suspended" } else { "resumed" };
    match resolve(client, target).await? {
        Target::Plan(n) => {
            let patched = Api::<UpgradePlan>::all(client.clone())
                .patch(&n, &PatchParams::default(), &patch)
                .await
                .map_err(|e| explain_error(e, "patch", "upgradeplans", Some(&n)))?;
            wrote(g, &patched, &format!("upgradeplan/{n} {verb}\n"))?;
        }
        Target::Run(n) => {
            let run = get_run(client, &n).await?;
            if run.status.as_ref().is_some_and(|s| s.state.is_terminal()) {
                bail!(
                    "upgraderun/{n} has finished ({}); nothing to {}",
                    run.status.map(|s| s.state.as_str()).unwrap_or_default(),
                    if suspend { "suspend" } else { "resume" }
                );
            }
            // A superseded run is dormant for good (spec §5.2): the newer run carries on.
            if let (false, Some(newer)) = (suspend, upgradeplan::engine::admission::superseded_by(&run)) {
                bail!(
                    "upgraderun/{n} was superseded by upgraderun/{newer} and never runs again: follow that one \
                     (kubectl upgradeplan status {newer}), or start a new run (kubectl upgradeplan run {})",
                    run.plan_name()
                );
            }
            let patched = Api::<UpgradeRun>::all(client.clone())
                .patch(&n, &PatchParams::default(), &patch)
                .await
                .map_err(|e| explain_error(e, "patch", "upgraderuns", Some(&n)))?;
            wrote(g, &patched, &format!("upgraderun/{n} {verb}\n"))?;
        }
    }
    Ok(())
}

pub async fn cancel(client: &Client, g: &Global, name: &str, yes: bool) -> anyhow::Result<()> {
    let run = get_run(client, name).await?;
    let s = run.status.clone().unwrap_or_default();
    if s.state.is_terminal() {
        bail!("upgraderun/{name} has already finished ({})", s.state.as_str());
    }
    if let Some(newer) = upgradeplan::engine::admission::superseded_by(&run) {
        bail!(
            "upgraderun/{name} was superseded by upgraderun/{newer} and starts nothing more: cancel that one \
             (kubectl upgradeplan cancel {newer})"
        );
    }
    if !yes {
        if !std::io::stdin().is_terminal() {
            bail!("refusing to cancel upgraderun/{name} without confirmation: pass --yes");
        }
        let progress = match s.state {
            RunState::InProgress => format!(
                "{}, {}/{} upgraded",
                s.state.as_str(),
                s.completed_resources,
                s.total_resources
            ),
            RunState::Pending => "Pending: nothing started yet".to_string(),
            _ => "not started yet".to_string(),
        };
        eprint!("Cancel upgraderun/{name} ({progress})? Upgrades already started are not rolled back. [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            bail!("not cancelled");
        }
    }
    let api = Api::<UpgradeRun>::all(client.clone());
    // A preview never resumed did nothing: it goes (a quiet clean-up, spec §5.2).
    if upgradeplan::engine::admission::is_dormant(&run) {
        api.delete(name, &DeleteParams::default())
            .await
            .map_err(|e| explain_error(e, "delete", "upgraderuns", Some(name)))?;
        // -o prints the run as it was, as `kubectl delete -o` would name it.
        wrote(
            g,
            &run,
            &format!("upgraderun/{name} cancelled: a preview, it had started nothing and is deleted\n"),
        )?;
        return Ok(());
    }
    // spec.cancel: Cancelled, and the run stays as the record of what it did (spec §5.10).
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"cancel": true}})),
        )
        .await
        .map_err(|e| explain_error(e, "patch", "upgraderuns", Some(name)))?;
    wrote(
        g,
        &patched,
        &format!(
            "upgraderun/{name} cancelled: nothing more starts, upgrades in flight finish; it stays as the record \
             (kubectl upgradeplan history {} {name})\n",
            run.plan_name()
        ),
    )?;
    Ok(())
}

/// Creates the UpgradeApproval that lets `group` of `run` start (default: the group waiting).
/// The plan's groups are looked up (the run's snapshot, else the live plan) to refuse a group that
/// does not exist or needs no approval; an approver who may read neither still approves.
pub async fn approve(
    client: &Client,
    g: &Global,
    run_name: &str,
    group: Option<&str>,
    comment: Option<&str>,
) -> anyhow::Result<()> {
    // A plan's name means its active run (spec §10).
    let run = crate::client::get_run_or_plans(client, run_name).await?;
    let resolved = run.metadata.name.clone().unwrap_or_default();
    let run_name = resolved.as_str();
    let status = run.status.clone().unwrap_or_default();
    if status.state.is_terminal() {
        bail!(
            "upgraderun/{run_name} has already finished ({}): nothing to approve",
            status.state.as_str()
        );
    }
    let plan = match runs::load_frozen(client, &g.snapshot_namespace, &run).await {
        Ok(Some(f)) => Some(f.plan),
        _ => get_plan(client, run.plan_name()).await.ok().map(|p| p.spec),
    };
    let needing: Vec<String> = plan
        .iter()
        .flat_map(|p| &p.rollout_groups)
        .filter(|rg| upgradeplan::engine::compile::requires_approval(rg))
        .map(|rg| rg.name.clone())
        .collect();
    let waiting = status
        .rollout_groups
        .iter()
        .find(|rg| rg.phase == Some(GroupPhase::AwaitingApproval))
        .map(|rg| rg.name.clone());
    let group = match (group, waiting) {
        (Some(named), _) => {
            if let Some(p) = &plan {
                if !p.rollout_groups.iter().any(|rg| rg.name == named) {
                    let all: Vec<&str> = p.rollout_groups.iter().map(|rg| rg.name.as_str()).collect();
                    bail!("plan {} has no rollout group {named:?} (its groups: {})", run.plan_name(), all.join(", "));
                }
                if !needing.iter().any(|n| n == named) {
                    bail!(
                        "rollout group {named:?} does not require approval (no requireApproval: true){}",
                        if needing.is_empty() { String::new() } else { format!("; groups that do: {}", needing.join(", ")) }
                    );
                }
            }
            named.to_string()
        }
        (None, Some(w)) => w,
        (None, None) if needing.is_empty() && plan.is_some() => {
            bail!("no rollout group of plan {} requires approval: nothing to approve", run.plan_name())
        }
        (None, None) => bail!(
            "no rollout group of upgraderun/{run_name} waits for approval now; name the one to approve: kubectl upgradeplan approve {run_name} GROUP{}",
            if needing.is_empty() { String::new() } else { format!(" (groups that require approval: {})", needing.join(", ")) }
        ),
    };
    let approvals = Api::<UpgradeApproval>::all(client.clone());
    // Already approved: -o prints the approval that did it, when it is still there.
    let existing = |name: String, message: String| async move {
        match approvals.get_opt(&name).await {
            Ok(Some(a)) => wrote(g, &a, &message),
            _ if g.output.is_text() => crate::output::out(message),
            _ => {
                eprint!("{message}");
                Ok(())
            }
        }
    };
    if let Some((approval, _)) = status
        .rollout_groups
        .iter()
        .find(|rg| rg.name == group)
        .and_then(|rg| rg.recorded_approval())
    {
        let message = format!(
            "rollout group {group:?} of upgraderun/{run_name} is already approved (upgradeapproval/{approval})\n"
        );
        return existing(approval.to_string(), message).await;
    }
    let approver = crate::client::whoami(client, g).await;
    let name = upgradeplan::engine::naming::approval_name(run_name, &group);
    let approval = UpgradeApproval::new(
        &name,
        UpgradeApprovalSpec {
            upgrade_run_ref: UpgradeRunRef {
                name: run_name.to_string(),
            },
            group: group.clone(),
            comment: comment.map(str::to_string),
            approver: Some(approver.clone()),
        },
    );
    match Api::<UpgradeApproval>::all(client.clone())
        .create(&PostParams::default(), &approval)
        .await
    {
        Ok(created) => wrote(
            g,
            &created,
            &format!(
                "upgradeapproval/{name} created by {approver}: rollout group {group:?} of upgraderun/{run_name} may start\n"
            ),
        )?,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let message = format!(
                "upgradeapproval/{name} already exists: rollout group {group:?} of upgraderun/{run_name} is approved\n"
            );
            existing(name.clone(), message).await?
        }
        Err(e) => return Err(explain_error(e, "create", "upgradeapprovals", Some(&name))),
    }
    Ok(())
}

/// Renders a run's status now: (what it says, as JSON, to tell a change from a tick; the text).
/// Without its snapshot (deleted, or not readable with the user's
/// rights) or the live bindings, it shows what the run's own status records, and says so.
async fn render_status(
    client: &Client,
    g: &Global,
    run: &UpgradeRun,
    style: &Style,
) -> anyhow::Result<(serde_json::Value, String)> {
    let live_view = async {
        let Some(f) = runs::load_frozen(client, &g.snapshot_namespace, run).await? else {
            return anyhow::Ok(None);
        };
        let live = runs::live_state(client, run.plan_name(), &f.plan).await?;
        let revisions = runs::revisions(client, &f).await?;
        Ok(Some((f, live, revisions)))
    };
    let (frozen, live, revision, note) = match live_view.await {
        Ok(Some((f, live, revisions))) => (Some(f), live, revisions, None),
        Ok(None) => (None, Default::default(), Revisions::present(), None),
        Err(e) if run.status.as_ref().is_some_and(|s| !s.state.is_terminal()) => (
            None,
            Default::default(),
            Revisions::present(),
            Some(format!("showing the run's recorded status: {e:#}")),
        ),
        // An ended run's recorded status is complete: nothing to say.
        Err(_) => (None, Default::default(), Revisions::present(), None),
    };
    let (mut json, mut text) = runs::status(run, frozen.as_ref(), &live, &revision, Utc::now(), style);
    if let Some(note) = note {
        text.push_str(&format!("\n{} {note}\n", style.bold("Note:")));
        json.note = Some(note);
    }
    let value = serde_json::to_value(&json)?;
    let shown = render(&g.output, style, &value, &text)?;
    Ok((value, shown))
}

/// The exit code of `status` for the run as it is (spec §10), with or without `-w`: `Some` once
/// it has ended (`--fail-on-tolerated` also fails a run that completed with tolerated failures),
/// [`EXIT_SUPERSEDED`] for a run a newer one superseded (its name returned too), `None` while it
/// goes on.
pub fn status_exit_code(run: &UpgradeRun, fail_on_tolerated: bool) -> Option<(u8, Option<&str>)> {
    let status = run.status.as_ref()?;
    let tolerated = find_condition(&status.conditions, reasons::RUN_SUCCEEDED)
        .is_some_and(|c| c.reason == reasons::RUN_COMPLETED_WITH_FAILURES);
    match (status.state, status.superseded_by.as_deref()) {
        (RunState::Completed, _) if fail_on_tolerated && tolerated => Some((EXIT_FAILED, None)),
        (RunState::Completed, _) => Some((0, None)),
        (RunState::Failed, _) => Some((EXIT_FAILED, None)),
        (RunState::Cancelled, _) => Some((EXIT_CANCELLED, None)),
        (_, Some(newer)) => Some((EXIT_SUPERSEDED, Some(newer))),
        _ => None,
    }
}

/// `status`: returns the exit code.
pub async fn status(
    client: &Client,
    g: &Global,
    name: &str,
    watch: bool,
    timeout: Option<Duration>,
    fail_on_tolerated: bool,
    style: &Style,
) -> anyhow::Result<u8> {
    // A plan's name means its active run, else its last one (spec §10).
    let run = crate::client::get_run_or_plans(client, name).await?;
    let resolved = run.metadata.name.clone().unwrap_or_default();
    let name = resolved.as_str();
    let (mut last_seen, mut last) = render_status(client, g, &run, style).await?;
    crate::output::out(&last)?;
    // On a terminal the view is redrawn in place (its clocks tick); elsewhere a new block is
    // appended only when something changed, never the same block again and again.
    let redraw = crate::output::redraws_in_place(g);
    // The watch ends with the run, or when a newer run supersedes it (which it names).
    let exit_code = |r: &UpgradeRun| {
        let (code, newer) = status_exit_code(r, fail_on_tolerated)?;
        if let Some(newer) = newer {
            eprintln!("upgraderun/{name} was superseded by upgraderun/{newer}: follow that one");
        }
        Some(code)
    };
    if let Some(code) = exit_code(&run) {
        return Ok(code);
    }
    if !watch {
        return Ok(0);
    }
    let follow = async {
        let api: Api<UpgradeRun> = Api::all(client.clone());
        let mut stream = watcher(api, watcher::Config::default().fields(&format!("metadata.name={name}")))
            .default_backoff()
            .boxed();
        // Bindings move between run status writes: redraw on a tick as well.
        let mut tick = tokio::time::interval(Duration::from_secs(2));
        loop {
            let current = tokio::select! {
                ev = stream.next() => match ev {
                    Some(Ok(watcher::Event::Delete(_))) => return Ok(EXIT_CANCELLED),
                    Some(Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r))) => r,
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => return Err(anyhow!("watching upgraderun/{name}: {e}")),
                    None => return Err(anyhow!("the watch of upgraderun/{name} ended")),
                },
                _ = tick.tick() => match Api::<UpgradeRun>::all(client.clone()).get_opt(name).await? {
                    Some(r) => r,
                    None => return Ok(EXIT_CANCELLED),
                },
            };
            let (seen, text) = render_status(client, g, &current, style).await?;
            if redraw && text != last {
                crate::output::redraw(&last, &text)?;
                last = text;
            } else if !redraw && seen != last_seen {
                // A change the view does not show (a field of the JSON view alone) would append
                // the same block again: it is taken in silently.
                if text != last {
                    crate::output::out(format!("\n{text}"))?;
                    last = text;
                }
                last_seen = seen;
            }
            if let Some(code) = exit_code(&current) {
                return Ok(code);
            }
        }
    };
    match timeout {
        Some(t) => match tokio::time::timeout(t, follow).await {
            Ok(r) => r,
            Err(_) => {
                eprintln!("timed out after {t:?} waiting for upgraderun/{name} to finish");
                Ok(EXIT_TIMEOUT)
            }
        },
        None => follow.await,
    }
}

/// `version`: the plugin's and the server's; `-o json|yaml` in kubectl's shape
/// (`clientVersion`, `serverVersion`), the server's left out when it cannot be reached.
pub async fn version(g: &Global, (namespace, lease): (&str, &str)) -> anyhow::Result<()> {
    let client_version = format!("v{}", env!("CARGO_PKG_VERSION"));
    let (server, controller) = match crate::client::connect(g).await {
        Ok(c) => (
            c.apiserver_version()
                .await
                .map_err(|e| format!("server unreachable: {e}")),
            controller_version(&c, namespace, lease).await,
        ),
        Err(e) => (
            Err(format!("server unknown: {e}")),
            Err("controller unknown".to_string()),
        ),
    };
    if let Ok(running) = &controller {
        if running.git_version != client_version {
            eprintln!(
                "note: the plugin ({client_version}) and the controller ({}) differ: views read what that controller writes",
                running.git_version
            );
        }
    }
    if !g.output.is_text() {
        let mut v = serde_json::json!({"clientVersion": {"gitVersion": client_version}});
        match &controller {
            Ok(running) => v["controllerVersion"] = serde_json::to_value(running)?,
            Err(why) => eprintln!("{why}"),
        }
        match &server {
            Ok(info) => v["serverVersion"] = serde_json::to_value(info)?,
            Err(why) => eprintln!("{why}"),
        }
        return crate::output::out(render(&g.output, &Style::from(g), &v, "")?);
    }
    let controller = match &controller {
        Ok(running) => {
            let since = |t: Option<chrono::DateTime<Utc>>| t.map(|t| relative(t, Utc::now())).unwrap_or_default();
            let leading = if running.leading {
                format!("leader {}, renewed {}", running.leader, since(running.renew_time))
            } else {
                format!(
                    "last led by {}, whose Lease expired {}: no controller is leading",
                    running.leader,
                    since(running.renew_time)
                )
            };
            format!(
                "controller {} ({leading}; Lease {})",
                running.git_version, running.lease
            )
        }
        Err(why) => why.clone(),
    };
    crate::output::out(format!(
        "kubectl-upgradeplan {}\n{controller}\n{}\n",
        env!("CARGO_PKG_VERSION"),
        match &server {
            Ok(info) => format!("server {}", info.git_version),
            Err(why) => why.clone(),
        }
    ))
}

/// The running controller, as the holder of its leader-election Lease records itself.
#[derive(serde::Serialize, Debug)]
#[serde(rename_all = "camelCase")]
pub struct ControllerVersion {
    pub git_version: String,
    /// The Lease's holder: the leading replica (its pod name in a cluster).
    pub leader: String,
    /// `namespace/name` of the Lease.
    pub lease: String,
    pub renew_time: Option<chrono::DateTime<Utc>>,
    /// Whether the holder renewed within its lease duration (by this machine's clock).
    pub leading: bool,
}

/// The controller's version from its Lease; why not, in words, when it cannot be read.
async fn controller_version(client: &Client, namespace: &str, name: &str) -> Result<ControllerVersion, String> {
    use k8s_openapi::api::coordination::v1::Lease;
    let lease = format!("{namespace}/{name}");
    let found = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|e| {
            format!(
                "controller unknown: {:#}",
                explain_error(e, "get", "leases", Some(name))
            )
        })?;
    let Some(l) = found else {
        return Err(format!(
            "controller unknown: no Lease {lease} (a controller without --leader-elect holds none; \
             --controller-namespace names its --leader-election-namespace)"
        ));
    };
    let annotations = l.metadata.annotations.unwrap_or_default();
    let Some(version) = annotations.get(upgradeplan::api::CONTROLLER_VERSION_ANNOTATION) else {
        return Err(format!(
            "controller unknown: Lease {lease} does not say its holder's version (a controller from before it was recorded, or not upgradeplan's)"
        ));
    };
    let spec = l.spec.unwrap_or_default();
    let renew_time = spec.renew_time.map(|t| upgradeplan::time::to_chrono(&t.0));
    let duration = chrono::Duration::seconds(i64::from(spec.lease_duration_seconds.unwrap_or(15)));
    Ok(ControllerVersion {
        git_version: format!("v{version}"),
        leader: spec.holder_identity.unwrap_or_default(),
        lease,
        leading: renew_time.is_some_and(|t| Utc::now() <= t + duration),
        renew_time,
    })
}

/// `freezes create`: an incident freeze, declared now (see [`crate::freezes::incident_spec`]).
pub async fn create_freeze(client: &Client, g: &Global, c: &crate::cli::FreezeCreate) -> anyhow::Result<()> {
    let now = Utc::now();
    let incident = crate::freezes::Incident {
        reason: &c.reason,
        from: c.from.as_ref(),
        until: c.until.as_ref(),
        for_: c.for_,
        time_zone: c.time_zone.as_deref(),
        promises: &c.promises,
        selector: c.selector.as_deref(),
    };
    let (spec, (start, end)) = crate::freezes::incident_spec(&incident, now).map_err(|e| anyhow!(e))?;
    let freeze = UpgradeFreeze::new(&c.name, spec);
    let params = PostParams {
        dry_run: c.dry_run,
        ..PostParams::default()
    };
    let created = match Api::<UpgradeFreeze>::all(client.clone()).create(&params, &freeze).await {
        Ok(created) => created,
        Err(kube::Error::Api(e)) if e.code == 409 => anyhow::bail!(
            "upgradefreeze/{} already exists: choose another name, or change it with kubectl edit upgradefreeze {}",
            c.name,
            c.name
        ),
        Err(e) => return Err(explain_error(e, "create", "upgradefreezes", Some(&c.name))),
    };
    // Best effort: which plans it holds (the freeze-manager role may not read plans).
    let held = match crate::client::list_plans(client).await {
        Ok(plans) => {
            let n = plans
                .iter()
                .filter(|p| upgradeplan::engine::freeze::holds_plan(&freeze.spec, p))
                .count();
            format!("; it holds {n} plan(s) now")
        }
        Err(_) => String::new(),
    };
    let style = Style::from(g);
    let zone = upgradeplan::engine::cron::parse_zone(c.time_zone.as_deref()).ok();
    let (verb, name) = if c.dry_run {
        ("would be created (server dry run)", c.name.as_str())
    } else {
        ("created", c.name.as_str())
    };
    wrote(
        g,
        &created,
        &format!(
            "upgradefreeze/{name} {verb}: no new upgrade starts {} ({}){held}; in-flight ones finish. \
             End it early with kubectl delete upgradefreeze {name}\n",
            style.span(start, end, zone),
            crate::output::duration(end - start)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use upgradeplan::api::{Condition, ConditionStatus, UpgradePlanRef, UpgradeRunSpec, UpgradeRunStatus};

    fn run(state: RunState, reason: Option<&str>, superseded_by: Option<&str>) -> UpgradeRun {
        let mut r = UpgradeRun::new(
            "r",
            UpgradeRunSpec {
                upgrade_plan_ref: UpgradePlanRef { name: "p".into() },
                suspend: false,
                cancel: false,
                ..Default::default()
            },
        );
        r.status = Some(UpgradeRunStatus {
            state,
            superseded_by: superseded_by.map(Into::into),
            conditions: reason
                .map(|reason| {
                    vec![Condition::new(
                        reasons::RUN_SUCCEEDED,
                        ConditionStatus::True,
                        reason,
                        String::new(),
                        Utc::now(),
                    )]
                })
                .unwrap_or_default(),
            ..Default::default()
        });
        r
    }

    /// Issue 36 D12 (spec §10): the same codes with or without `-w`.
    #[test]
    fn status_exit_codes_follow_the_run() {
        let tolerated = Some(reasons::RUN_COMPLETED_WITH_FAILURES);
        // (what, run, --fail-on-tolerated, code)
        type Row<'a> = (&'a str, UpgradeRun, bool, Option<(u8, Option<&'a str>)>);
        let table: Vec<Row> = vec![
            (
                "completed",
                run(RunState::Completed, Some(reasons::RUN_COMPLETED), None),
                true,
                Some((0, None)),
            ),
            (
                "tolerated failures",
                run(RunState::Completed, tolerated, None),
                false,
                Some((0, None)),
            ),
            (
                "tolerated, failing on them",
                run(RunState::Completed, tolerated, None),
                true,
                Some((EXIT_FAILED, None)),
            ),
            (
                "failed",
                run(RunState::Failed, None, None),
                false,
                Some((EXIT_FAILED, None)),
            ),
            (
                "cancelled",
                run(RunState::Cancelled, None, None),
                false,
                Some((EXIT_CANCELLED, None)),
            ),
            (
                "superseded",
                run(RunState::InProgress, None, Some("r2")),
                false,
                Some((EXIT_SUPERSEDED, Some("r2"))),
            ),
            (
                "superseded, then failed",
                run(RunState::Failed, None, Some("r2")),
                false,
                Some((EXIT_FAILED, None)),
            ),
            ("in progress", run(RunState::InProgress, None, None), false, None),
            ("pending", run(RunState::Pending, None, None), true, None),
        ];
        for (what, r, fail_on_tolerated, want) in &table {
            assert_eq!(status_exit_code(r, *fail_on_tolerated), *want, "{what}");
        }
        let mut fresh = run(RunState::Pending, None, None);
        fresh.status = None;
        assert_eq!(status_exit_code(&fresh, false), None, "no status yet");
    }

    #[test]
    fn revert_says_what_it_takes_and_what_it_leaves_table() {
        use upgradeplan::api::RevertResources;
        use upgradeplan::engine::revert::Tally;
        use upgradeplan::engine::snapshot::{Frozen, Snapshot, SnapshotGroup, SnapshotResource};
        let resource = |name: &str| {
            std::sync::Arc::new(SnapshotResource {
                namespace: "ns".into(),
                name: name.into(),
                binding: format!("{name}-b"),
                last_applied_version: "v2".into(),
                spec_version: "v2".into(),
                target: Some("v1".into()),
            })
        };
        let snapshot = Snapshot {
            groups: vec![
                SnapshotGroup {
                    name: "prod".into(),
                    resources: vec![resource("c")],
                },
                SnapshotGroup {
                    name: "dev".into(),
                    resources: vec![resource("a"), resource("b")],
                },
            ],
        };
        let spec: upgradeplan::api::UpgradePlanSpec = serde_json::from_value(serde_json::json!({
            "promiseRef": {"name": "redis"}, "upgradePath": {"from": ["v2"], "to": "v1"},
            "rolloutGroups": [{"name": "prod", "selectors": {"matchAll": true}}, {"name": "dev", "selectors": {"matchAll": true}}]
        }))
        .unwrap();
        let derived = Frozen::new(snapshot, spec).unwrap();
        let tally = Tally {
            upgraded: 2,
            upgrading: 1,
            failed: 1,
            not_started_by_it: 4,
            moved_since: 1,
            gone: 0,
        };
        let how = |resources| RevertHow {
            resources,
            name: None,
            preview: false,
            respect_policy: false,
        };
        let style = Style::plain();
        assert_eq!(
            revert_summary("r", &how(RevertResources::Upgraded), &tally, &derived, &style),
            "Reverting 3 resource(s) of upgraderun/r (--resources upgraded), each to the version it had: prod (1) then dev (2); 1 still upgrading, moved back once Kratix is done with them. Left alone: 1 failed (--resources failed or all takes them), 1 moved on since by someone else, 4 not started by it."
        );
        assert!(
            revert_summary("r", &how(RevertResources::Failed), &tally, &derived, &style)
                .contains("Left alone: 3 upgraded (--resources upgraded or all takes them), 1 moved on since")
        );
        assert!(!revert_summary("r", &how(RevertResources::All), &tally, &derived, &style).contains("takes them"));

        let only_failed = Tally {
            failed: 2,
            not_started_by_it: 1,
            ..Tally::default()
        };
        assert_eq!(
            nothing_to_revert("r", RevertResources::Upgraded, &only_failed),
            "nothing to revert in upgraderun/r with --resources upgraded: of its resources, 2 failed, 1 not started by it (--resources all takes what it upgraded and what failed)"
        );
        assert_eq!(
            nothing_to_revert("r", RevertResources::All, &Tally { moved_since: 3, ..Tally::default() }),
            "nothing to revert in upgraderun/r with --resources all: of its resources, 3 moved on since by someone else"
        );
        assert_eq!(
            nothing_to_revert("r", RevertResources::All, &Tally::default()),
            "nothing to revert in upgraderun/r with --resources all: its snapshot holds no resource"
        );
    }
}
