//! `kubectl upgradeplan`: views and verbs over UpgradePlans and UpgradeRuns. Every decision shown
//! comes from the `upgradeplan` engine, the one the controller uses.
#![forbid(unsafe_code)]

pub mod budgets;
pub mod cli;
pub mod client;
pub mod complete;
pub mod explain;
pub mod forecast;
pub mod freezes;
pub mod input;
pub mod matching;
pub mod output;
pub mod printers;
pub mod runs;
pub mod verbs;

use std::process::ExitCode;

use chrono::Utc;
use clap::CommandFactory;

use cli::{Cli, Command, PlanSource};
use output::Style;

/// What a view works on: the plan, its unknown fields when read from a file (the API server
/// would reject them), and (when needed) the bindings — from files, or from the cluster.
struct Sources {
    plan: upgradeplan::api::UpgradePlan,
    unknown_fields: Vec<upgradeplan::engine::Problem>,
    bindings: Option<Vec<upgradeplan::api::kratix::ResourceBinding>>,
    /// The UpgradeFreezes that hold the plan and can be evaluated (they close its gates).
    freezes: Vec<upgradeplan::engine::freeze::Freeze>,
    /// Where `freezes` come from, in words (a forecast states it among its assumptions).
    freezes_from: String,
    /// The UpgradeBudgets that cap the plan (from the cluster; none offline).
    budgets: Vec<explain::BudgetCapJson>,
    /// The PromiseRevisions of the plan's Promise (from the cluster; unknown offline, or when they
    /// cannot be listed).
    revisions: Option<Vec<upgradeplan::api::kratix::RevisionFact>>,
    /// When Kratix retries a failure by itself, per version (Kratix's default offline, or when
    /// the Promise cannot be read).
    retries: upgradeplan::engine::retry::RetryIntervals,
    /// The connection the sources were read over; `None` offline.
    client: Option<kube::Client>,
}

async fn sources(g: &cli::Global, source: &PlanSource, need_bindings: bool) -> anyhow::Result<Sources> {
    let from_file = if source.filename.is_empty() {
        None
    } else {
        Some(input::plan(&source.filename)?)
    };
    sources_with(g, source, from_file, need_bindings).await
}

/// [`sources`] for a plan already read from a file (`None`: the plan PLAN names in the cluster).
async fn sources_with(
    g: &cli::Global,
    source: &PlanSource,
    from_file: Option<(upgradeplan::api::UpgradePlan, Vec<upgradeplan::engine::Problem>)>,
    need_bindings: bool,
) -> anyhow::Result<Sources> {
    let offline = from_file.is_some() && (source.bindings.is_some() || !need_bindings);
    let client = if offline { None } else { Some(client::connect(g).await?) };
    let (plan, unknown_fields) = match (from_file, &source.plan, &client) {
        (Some(read), _, _) => read,
        (None, Some(name), Some(c)) => (client::get_plan(c, name).await?, Vec::new()),
        _ => anyhow::bail!("name a plan, or pass -f FILE"),
    };
    let bindings = match (&source.bindings, &client) {
        (Some(f), _) => Some(input::bindings(f)?),
        (None, Some(c)) => {
            let ns = if g.all_namespaces { None } else { g.namespace.as_deref() };
            match client::bindings_of(c, &plan.spec.promise_ref.name, ns).await {
                Ok(b) => Some(b),
                // explain only uses them to resolve percentages: say what is missing and go on.
                Err(e) if !need_bindings => {
                    eprintln!("note: {e:#}; limits given as percentages are not resolved");
                    None
                }
                Err(e) => return Err(e),
            }
        }
        (None, None) => None,
    };
    // `Err(words)`: no freezes could be read, and why.
    let listed = match (&source.freezes, &client) {
        (Some(f), _) => Ok((input::freezes(f)?, "those of the --freezes file")),
        (None, Some(c)) => match client::list_freezes(c).await {
            Ok(listed) => Ok((listed, "the cluster's UpgradeFreezes")),
            Err(e) => {
                eprintln!("note: {e:#}; gate times leave UpgradeFreezes out");
                Err("none: the cluster's UpgradeFreezes could not be listed")
            }
        },
        (None, None) => Err("none: read offline, so only --freezes FILE brings them in"),
    };
    let (freezes, freezes_from) = match listed {
        Ok((all, from)) => {
            let holding = upgradeplan::engine::freeze::holding(
                &all.into_iter().map(std::sync::Arc::new).collect::<Vec<_>>(),
                &plan.spec.promise_ref.name,
                kube::ResourceExt::labels(&plan),
            );
            let words = format!("{from} ({} holding the plan)", holding.len());
            (holding, words)
        }
        Err(why) => (Vec::new(), why.to_string()),
    };
    let budgets = match &client {
        Some(c) => budget_caps_of(c, &plan).await,
        None => Vec::new(),
    };
    let revisions = match &client {
        Some(c) => match runs::revisions_of(c, &plan.spec.promise_ref.name).await {
            Ok(found) => Some(found),
            Err(e) => {
                eprintln!("note: {e:#}; the plan's PromiseRevisions are not checked");
                None
            }
        },
        None => None,
    };
    let retries = match &client {
        Some(c) => runs::retry_intervals(c, &plan.spec.promise_ref.name)
            .await
            .unwrap_or_else(|e| {
                eprintln!("note: {e:#}; Kratix's own retries are taken at its default interval");
                Default::default()
            }),
        None => Default::default(),
    };
    Ok(Sources {
        plan,
        unknown_fields,
        bindings,
        freezes,
        freezes_from,
        budgets,
        revisions,
        retries,
        client,
    })
}

/// The UpgradeBudgets that cap `plan`, from the cluster; none (said on stderr) when they cannot
/// be listed.
async fn budget_caps_of(c: &kube::Client, plan: &upgradeplan::api::UpgradePlan) -> Vec<explain::BudgetCapJson> {
    match client::list_budgets(c).await {
        Ok(all) => explain::budget_caps(&all.into_iter().map(std::sync::Arc::new).collect::<Vec<_>>(), plan),
        Err(e) => {
            eprintln!("note: {e:#}; UpgradeBudgets are left out");
            Vec::new()
        }
    }
}

/// The plan's run under way, as `match --resource` answers from it; `None` when there is none
/// or it cannot be read (said on stderr: the answer is then a new run's).
async fn active_run(
    client: &kube::Client,
    g: &cli::Global,
    plan: &upgradeplan::api::UpgradePlan,
    now: chrono::DateTime<Utc>,
) -> Option<matching::InRun> {
    let name = plan
        .status
        .as_ref()
        .map(|s| s.active_run_ref.as_str())
        .filter(|n| !n.is_empty())?;
    let read = async {
        let run = client::get_run(client, name).await?;
        let Some(frozen) = runs::load_frozen(client, &g.snapshot_namespace, &run).await? else {
            anyhow::bail!("its snapshot is not there yet");
        };
        let live = runs::live_state(client, run.plan_name(), &frozen.plan).await?;
        let revisions = runs::revisions(client, &frozen).await?;
        Ok(runs::in_run(&run, frozen, &live, &revisions, now))
    };
    match read.await {
        Ok(r) => Some(r),
        Err(e) => {
            eprintln!("note: run {name} is under way but cannot be read ({e:#}); the answer is a new run's");
            None
        }
    }
}

/// Upgrade durations measured in the plan's last 10 runs, when the plan is read from the cluster
/// (its runs and their bindings' annotations are there); else none.
async fn measured(
    g: &cli::Global,
    source: &PlanSource,
    bindings: &[upgradeplan::api::kratix::ResourceBinding],
) -> forecast::PerResource {
    let (Some(name), None) = (&source.plan, &source.bindings) else {
        return forecast::PerResource::Default;
    };
    let Ok(c) = client::connect(g).await else {
        return forecast::PerResource::Default;
    };
    measured_in(&c, name, bindings).await
}

/// The upgrade durations measured in plan `name`'s last 10 runs ([`measured`]).
async fn measured_in(
    c: &kube::Client,
    name: &str,
    bindings: &[upgradeplan::api::kratix::ResourceBinding],
) -> forecast::PerResource {
    let Ok(mut runs) = client::runs_of(c, name).await else {
        return forecast::PerResource::Default;
    };
    runs::newest_first(&mut runs);
    let names: Vec<String> = runs.iter().take(10).filter_map(|r| r.metadata.name.clone()).collect();
    let durations = upgradeplan::engine::forecast::measured_durations(bindings, &names);
    if durations.is_empty() {
        forecast::PerResource::Default
    } else {
        forecast::PerResource::Measured {
            durations,
            runs: names.len(),
        }
    }
}

/// `forecast --revert RUN`: the revert `kubectl upgradeplan revert` would create, worked out as
/// it does ([`verbs::prepare_revert`]), forecast from its derived snapshot. It starts at `--start`,
/// else now; windows and freezes hold it only when it respects policy (spec §13.7).
async fn forecast_revert(
    c: &kube::Client,
    g: &cli::Global,
    source: &PlanSource,
    start: Option<&cli::StartTime>,
    per_resource: Option<std::time::Duration>,
    (resources, respect_policy): (upgradeplan::api::RevertResources, bool),
    style: &output::Style,
) -> anyhow::Result<(forecast::ForecastJson, String)> {
    let name = source.plan.as_deref().unwrap_or_default();
    let prepared = verbs::prepare_revert(c, g, name, resources, respect_policy).await?;
    let now = source.now.unwrap_or_else(Utc::now);
    let plan_name = prepared.run.plan_name().to_string();
    let bindings: Vec<_> = prepared.live.bindings.values().cloned().collect();
    let per_resource = match per_resource {
        Some(d) => forecast::PerResource::Given(chrono::Duration::from_std(d)?),
        None => measured_in(c, &plan_name, &bindings).await,
    };
    // The spec the revert would have decides which freezes hold it, as the controller's step does.
    let spec = upgradeplan::api::UpgradeRunSpec {
        revert_of: Some(prepared.of.clone()),
        respect_policy,
        ..Default::default()
    };
    let freezes = upgradeplan::engine::revert::freezes_holding(&spec, &prepared.live.freezes);
    let freezes_from = if upgradeplan::engine::revert::held_by_policy(&spec) {
        "the cluster's UpgradeFreezes"
    } else {
        "none: a revert that does not respect policy is not held by them"
    };
    let (start, start_words) = match start {
        None => (now, "now: a revert starts when it is created".to_string()),
        Some(_) => {
            let (at, words, _) = forecast::start_of(&prepared.plan, start, now)?;
            (at, words)
        }
    };
    // The plan's schedule supersedes a revert still going at its next trigger.
    let at = cli::StartTime::Instant(start);
    let (_, _, next_trigger) = forecast::start_of(&prepared.plan, Some(&at), start)?;
    let revert_plan = upgradeplan::api::UpgradePlan {
        metadata: prepared.plan.metadata.clone(),
        spec: prepared.derived.plan.clone(),
        status: None,
    };
    let run = prepared.run.metadata.name.clone().unwrap_or_default();
    // Budgets cap a revert as any run (spec §13.7).
    let budgets = budget_caps_of(c, &prepared.plan).await;
    let revisions = runs::revisions_of(c, &prepared.plan.spec.promise_ref.name).await.ok();
    let retries = runs::retry_intervals(c, &prepared.plan.spec.promise_ref.name)
        .await
        .unwrap_or_default();
    forecast::render(
        &revert_plan,
        (
            &bindings,
            revisions.as_deref(),
            retries.at(&revert_plan.spec.upgrade_path.to),
        ),
        Some(forecast::RevertOf {
            run: &run,
            snapshot: &prepared.derived.snapshot,
        }),
        (freezes, freezes_from, &budgets),
        (start, start_words, next_trigger.filter(|_| !prepared.plan.spec.suspend)),
        &per_resource,
        style,
    )
}

/// The sources of a view that needs bindings (`match`, `forecast`); a plan file's unknown fields
/// are warned about, not fatal (`explain -f` is the lint).
async fn view_sources(g: &cli::Global, source: &PlanSource) -> anyhow::Result<Sources> {
    let s = sources(g, source, true).await?;
    for p in &s.unknown_fields {
        eprintln!("warning: {p} (explain -f lists every problem)");
    }
    Ok(s)
}

fn emit<T: serde::Serialize>(g: &cli::Global, json: &T, text: &str) -> anyhow::Result<()> {
    output::out(output::render(&g.output, &Style::from(g), json, text)?)
}

/// Runs the command line; the exit code follows kubectl's habits (1 on error) plus the
/// documented codes of `explain` (1: invalid plan) and `status -w`.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let g = &cli.global;
    let style = Style::from(g);
    match &cli.command {
        Command::Explain {
            source,
            runs,
            strict,
            prometheus_url,
            prometheus_ca_file,
            prometheus_bearer_token_file,
        } => {
            // Every plan the files hold (a GitOps repository, `kubectl get -o yaml`), or the one
            // PLAN names in the cluster.
            let read: Vec<Option<input::PlanFile>> = if source.filename.is_empty() {
                vec![None]
            } else {
                input::plans(&source.filename)?.into_iter().map(Some).collect()
            };
            let several = read.len() > 1;
            // The files' plans are checked against each other; a live plan against the cluster's.
            let file_plans: Vec<upgradeplan::api::UpgradePlan> =
                read.iter().flatten().map(|f| f.plan.clone()).collect();
            let (mut jsons, mut texts, mut passed) = (Vec::new(), Vec::new(), true);
            for file in read {
                let origin = file.as_ref().map(|f| f.source.clone());
                let live = file.is_none();
                let Sources {
                    plan,
                    unknown_fields,
                    bindings,
                    freezes,
                    budgets,
                    revisions,
                    client,
                    ..
                } = sources_with(g, source, file.map(|f| (f.plan, f.unknown)), false).await?;
                let cluster_plans = match client.as_ref().filter(|_| live) {
                    Some(c) => client::list_plans(c).await.unwrap_or_else(|e| {
                        eprintln!("note: {e:#}; other plans of the Promise are not compared");
                        Vec::new()
                    }),
                    None => Vec::new(),
                };
                let now = source.now.unwrap_or_else(Utc::now);
                let gates = match prometheus_url {
                    Some(url) => Some(
                        explain::read_gates(
                            &plan.spec,
                            url,
                            prometheus_ca_file.as_deref(),
                            prometheus_bearer_token_file.as_deref(),
                        )
                        .await?,
                    ),
                    None => None,
                };
                let (json, text) = explain::explain(
                    &plan,
                    &unknown_fields,
                    &explain::Found {
                        bindings: bindings.as_deref(),
                        gates: gates.as_deref(),
                        freezes: &freezes,
                        budgets: &budgets,
                        plans: if live { &cluster_plans } else { &file_plans },
                        revisions: revisions.as_deref(),
                    },
                    (now, *runs),
                    output::viewer_zone(),
                    &style,
                );
                let warned = *strict && !json.warnings.is_empty();
                passed &= json.valid && !warned;
                texts.push(match origin.filter(|_| several) {
                    Some(origin) => format!("{}\n{text}", style.bold(&format!("# {origin}"))),
                    None => text,
                });
                jsons.push(json);
            }
            // One plan: its object, as always; several: a list of them.
            match jsons.as_slice() {
                [one] => emit(g, one, &texts.join("\n"))?,
                many => emit(g, &many, &texts.join("\n"))?,
            }
            return Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(1) });
        }
        Command::Match { source, resource, all } => {
            let Sources {
                plan,
                bindings,
                freezes,
                budgets,
                revisions,
                client,
                ..
            } = view_sources(g, source).await?;
            let now = source.now.unwrap_or_else(Utc::now);
            // "When will mine be upgraded?" while a run goes on: that run's answer.
            let in_run = match (&client, resource) {
                (Some(c), Some(_)) if source.filename.is_empty() => active_run(c, g, &plan, now).await,
                _ => None,
            };
            let (json, text) = matching::matching(
                &plan,
                bindings.as_deref().unwrap_or_default(),
                (&freezes, &budgets, revisions.as_deref()),
                now,
                resource.as_deref(),
                in_run.as_ref(),
                *all,
                &style,
            )?;
            emit(g, &json, &text)?;
        }
        Command::Forecast {
            source,
            start,
            per_resource,
            revert: true,
            resources,
            respect_policy,
        } => {
            let c = client::connect(g).await?;
            let how = (*resources, *respect_policy);
            let (json, text) = forecast_revert(&c, g, source, start.as_ref(), *per_resource, how, &style).await?;
            emit(g, &json, &text)?;
        }
        Command::Forecast {
            source,
            start,
            per_resource,
            ..
        } => {
            let Sources {
                plan,
                bindings,
                freezes,
                freezes_from,
                budgets,
                revisions,
                retries,
                ..
            } = view_sources(g, source).await?;
            let now = source.now.unwrap_or_else(Utc::now);
            let per_resource = match per_resource {
                Some(d) => forecast::PerResource::Given(chrono::Duration::from_std(*d)?),
                None => measured(g, source, bindings.as_deref().unwrap_or_default()).await,
            };
            let (json, text) = forecast::render(
                &plan,
                (
                    bindings.as_deref().unwrap_or_default(),
                    revisions.as_deref(),
                    retries.at(&plan.spec.upgrade_path.to),
                ),
                None,
                (&freezes, &freezes_from, &budgets),
                forecast::start_of(&plan, start.as_ref(), now)?,
                &per_resource,
                &style,
            )?;
            emit(g, &json, &text)?;
        }
        Command::History { plan, run, limit } => {
            let c = client::connect(g).await?;
            match run {
                None => {
                    let p = client::get_plan(&c, plan).await?;
                    let last_run = p.status.as_ref().and_then(|s| s.last_run.as_ref());
                    let mut listed = client::runs_of(&c, plan).await?;
                    runs::newest_first(&mut listed);
                    // Best effort: a snapshot that cannot be read only leaves the count as it is.
                    let mut distinct = std::collections::HashMap::new();
                    for r in listed.iter().take(*limit) {
                        if let Ok(Some(f)) = runs::load_frozen(&c, &g.snapshot_namespace, r).await {
                            distinct.insert(
                                r.metadata.name.clone().unwrap_or_default(),
                                runs::distinct_resources(&f.snapshot),
                            );
                        }
                    }
                    let (json, text) = runs::history(listed, last_run, &distinct, *limit, Utc::now(), &style);
                    emit(g, &json, &text)?;
                }
                Some(r) => {
                    let run = client::get_run(&c, r).await?;
                    if run.plan_name() != plan.as_str() {
                        anyhow::bail!("upgraderun/{r} belongs to plan {:?}, not {plan:?}", run.plan_name());
                    }
                    let Some(frozen) = runs::load_frozen(&c, &g.snapshot_namespace, &run).await? else {
                        anyhow::bail!(
                            "upgraderun/{r} has no snapshot yet (state {:?})",
                            run.status.map(|s| s.state.as_str()).unwrap_or_default()
                        );
                    };
                    let live = runs::live_state(&c, plan, &frozen.plan).await?;
                    let events = runs::events_of(&c, r).await;
                    let (json, text) = runs::run_resources(&run, &frozen, &live, &events, Utc::now(), &style);
                    emit(g, &json, &text)?;
                }
            }
        }
        Command::Get { plan, watch } => {
            let c = client::connect(&g.watching_if(*watch)).await?;
            verbs::get(&c, g, plan.as_deref(), *watch, &style).await?
        }
        Command::Run { plan, preview, name } => {
            verbs::run(&client::connect(g).await?, g, plan, *preview, name.as_deref()).await?
        }
        Command::Revert {
            run,
            resources,
            name,
            preview,
            respect_policy,
        } => {
            let how = verbs::RevertHow {
                resources: *resources,
                name: name.clone(),
                preview: *preview,
                respect_policy: *respect_policy,
            };
            verbs::revert(&client::connect(g).await?, g, run, how, &style).await?
        }
        Command::Status {
            run,
            watch,
            timeout,
            fail_on_tolerated,
        } => {
            let c = client::connect(&g.watching_if(*watch)).await?;
            let code = verbs::status(&c, g, run, *watch, *timeout, *fail_on_tolerated, &style).await?;
            return Ok(ExitCode::from(code));
        }
        Command::Suspend { target } => verbs::set_suspend(&client::connect(g).await?, g, target, true).await?,
        Command::Resume { target } => verbs::set_suspend(&client::connect(g).await?, g, target, false).await?,
        Command::Cancel { run, yes } => verbs::cancel(&client::connect(g).await?, g, run, *yes).await?,
        Command::Approve { run, group, comment } => {
            verbs::approve(&client::connect(g).await?, g, run, group.as_deref(), comment.as_deref()).await?
        }
        Command::Freezes {
            action: Some(cli::FreezeAction::Create(create)),
            ..
        } => {
            let c = client::connect(g).await?;
            verbs::create_freeze(&c, g, create).await?;
        }
        Command::Freezes {
            action: None,
            freeze,
            filename,
            now,
            periods,
        } => {
            let now = now.unwrap_or_else(Utc::now);
            let (listed, plans) = match filename {
                Some(f) => (input::freezes_linted(f)?, None),
                None => {
                    let c = client::connect(g).await?;
                    let listed = match freeze {
                        Some(name) => vec![client::get_freeze(&c, name).await?],
                        None => client::list_freezes(&c).await?,
                    };
                    let listed = listed.into_iter().map(|f| (f, Vec::new())).collect();
                    (listed, Some(client::list_plans(&c).await?))
                }
            };
            let detail = freeze.is_some() || filename.is_some();
            let (json, text) = freezes::freezes(&listed, plans.as_deref(), now, *periods, detail, &style);
            emit(g, &json, &text)?;
            if filename.is_some() && json.iter().any(|f| !f.valid) {
                return Ok(ExitCode::from(1));
            }
        }
        Command::Budgets { budget } => {
            let c = client::connect(g).await?;
            let listed = match budget {
                Some(name) => vec![client::get_budget(&c, name).await?],
                None => client::list_budgets(&c).await?,
            };
            let plans = client::list_plans(&c).await?;
            let runs = client::list_runs(&c).await?;
            // The bindings of the Promises of the plans some budget selects.
            let mut bindings = std::collections::BTreeMap::new();
            for plan in &plans {
                let promise = &plan.spec.promise_ref.name;
                let labels = plan.metadata.labels.clone().unwrap_or_default();
                let capped = listed
                    .iter()
                    .any(|b| upgradeplan::engine::upgrade_budget::selects(b, promise, &labels));
                if capped && !bindings.contains_key(promise) {
                    bindings.insert(promise.clone(), client::bindings_of(&c, promise, None).await?);
                }
            }
            let (json, text) = budgets::budgets(&listed, &plans, &runs, &bindings, budget.is_some(), &style);
            emit(g, &json, &text)?;
        }
        Command::Completion { shell } => {
            // Generated into memory first: clap_complete panics when its writer fails.
            let mut script = Vec::new();
            clap_complete::generate(*shell, &mut Cli::command(), "kubectl-upgradeplan", &mut script);
            output::out(String::from_utf8_lossy(&script))?;
        }
        Command::Version {
            controller_namespace,
            controller_lease,
        } => verbs::version(g, (controller_namespace, controller_lease)).await?,
    }
    Ok(ExitCode::SUCCESS)
}
