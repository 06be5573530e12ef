//! Dynamic completion for `kubectl upgradeplan <TAB>` through kubectl's plugin-completion
//! protocol (kubectl ≥ 1.26): kubectl runs `kubectl_complete-upgradeplan ARGS… PARTIAL` and reads
//! one candidate per line, then a `:<directive>` line (cobra's ShellCompDirective).

use std::time::Duration;

use clap::CommandFactory;
use kube::api::{Api, ListParams};
use upgradeplan::api::{UpgradePlan, UpgradeRun};

use crate::cli::{Cli, Global};

/// cobra's ShellCompDirectiveDefault: let the shell complete file names.
pub const DIRECTIVE_FILES: u8 = 0;
/// cobra's ShellCompDirectiveNoFileComp.
pub const DIRECTIVE_NO_FILES: u8 = 4;
/// cobra's ShellCompDirectiveNoSpace: the shell adds no space after the completion.
pub const DIRECTIVE_NO_SPACE: u8 = 2;

/// What a position on the command line takes.
#[derive(Debug, PartialEq, Eq)]
pub enum Want {
    Commands,
    Flags(String),
    Plans,
    Runs,
    Freezes,
    /// Runs not yet Completed, Failed or Cancelled (what `cancel` can act on).
    ActiveRuns,
    /// Plans, and runs not yet ended (what `suspend`/`resume` can act on).
    PlansAndActiveRuns,
    RunsOfPlan(String),
    /// Rollout groups of a run's plan (for `approve`).
    GroupsOfRun(String),
    /// Contexts of the kubeconfig.
    Contexts,
    /// `NS/NAME` of the resources of a plan's Promise (for `--resource`).
    ResourcesOfPlan(String),
    Namespaces,
    Values(Vec<String>),
    Files,
    Nothing,
}

const PLAN_VERBS: [&str; 6] = ["explain", "match", "forecast", "history", "get", "run"];

/// Decides what to complete for `args` (the last one is the word being completed). Pure.
pub fn want(args: &[String]) -> Want {
    let Some((partial, before)) = args.split_last() else {
        return Want::Commands;
    };
    let words: Vec<&String> = before.iter().filter(|w| !w.starts_with('-')).collect();
    if let Some(prev) = before.last() {
        match prev.as_str() {
            "--resource" => {
                return match words.get(1) {
                    Some(plan) => Want::ResourcesOfPlan(plan.to_string()),
                    None => Want::Nothing,
                }
            }
            "-o" | "--output" => return Want::Values(crate::cli::OUTPUT_FORMATS.map(String::from).to_vec()),
            "--resources" => return Want::Values(["upgraded", "failed", "all"].map(String::from).to_vec()),
            "-f" | "--filename" | "--bindings" | "--freezes" | "--kubeconfig" => return Want::Files,
            "--context" => return Want::Contexts,
            "-n" | "--namespace" | "--snapshot-namespace" => return Want::Namespaces,
            "--now" | "--runs" | "--limit" | "--name" | "--timeout" | "--request-timeout" | "--comment"
            | "--periods" | "--start" | "--per-resource" | "--reason" | "--for" | "--from" | "--until"
            | "--time-zone" | "--promise" | "-l" | "--selector" => return Want::Nothing,
            _ => {}
        }
    }
    let Some(command) = words.first() else {
        return if partial.starts_with('-') {
            Want::Flags(String::new())
        } else {
            Want::Commands
        };
    };
    let nested = words
        .get(1)
        .filter(|w| command.as_str() == "freezes" && w.as_str() == "create");
    if partial.starts_with('-') {
        return Want::Flags(match nested {
            Some(sub) => format!("{command} {sub}"),
            None => command.to_string(),
        });
    }
    if nested.is_some() {
        return Want::Nothing; // the new freeze's name
    }
    let position = words.len() - 1; // positional arguments already given after the command
    match (command.as_str(), position) {
        ("history", 1) => Want::RunsOfPlan(words[1].to_string()),
        (c, 0) if PLAN_VERBS.contains(&c) => Want::Plans,
        ("status" | "revert", 0) => Want::Runs,
        ("freezes", 0) => Want::Freezes,
        ("cancel" | "approve", 0) => Want::ActiveRuns,
        ("approve", 1) => Want::GroupsOfRun(words[1].to_string()),
        ("suspend" | "resume", 0) => Want::PlansAndActiveRuns,
        ("completion", 0) => Want::Values(["bash", "zsh", "fish"].map(String::from).to_vec()),
        _ => Want::Nothing,
    }
}

fn flags_of(command: &str) -> Vec<String> {
    let cli = Cli::command();
    // `freezes create`: a command's own subcommand, by its path.
    let cmd = command
        .split_whitespace()
        .try_fold(&cli, |c, name| c.find_subcommand(name));
    let mut out: Vec<String> = cmd
        .into_iter()
        .flat_map(|c| c.get_arguments())
        .chain(cli.get_arguments())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The candidates and directive for `args`; cluster lookups use `global` and give up quietly.
pub async fn complete(args: &[String], global: &Global) -> (Vec<String>, u8) {
    let partial = args.last().cloned().unwrap_or_default();
    let (candidates, directive) = match want(args) {
        Want::Commands => (
            Cli::command()
                .get_subcommands()
                .map(|c| c.get_name().to_string())
                .collect(),
            DIRECTIVE_NO_FILES,
        ),
        Want::Flags(cmd) => (flags_of(&cmd), DIRECTIVE_NO_FILES),
        Want::Values(v) => (v, DIRECTIVE_NO_FILES),
        Want::Files => (vec![], DIRECTIVE_FILES),
        Want::Nothing => (vec![], DIRECTIVE_NO_FILES),
        Want::Plans => (names(global, Kind::Plans).await, DIRECTIVE_NO_FILES),
        Want::Runs => (names(global, Kind::runs(None, false)).await, DIRECTIVE_NO_FILES),
        Want::Freezes => {
            let mut all = vec!["create".to_string()];
            all.extend(names(global, Kind::Freezes).await);
            (all, DIRECTIVE_NO_FILES)
        }
        Want::ActiveRuns => (names(global, Kind::runs(None, true)).await, DIRECTIVE_NO_FILES),
        Want::RunsOfPlan(p) => (names(global, Kind::runs(Some(&p), false)).await, DIRECTIVE_NO_FILES),
        Want::GroupsOfRun(r) => (names(global, Kind::GroupsOfRun(&r)).await, DIRECTIVE_NO_FILES),
        Want::PlansAndActiveRuns => {
            let mut all = names(global, Kind::Plans).await;
            all.extend(names(global, Kind::runs(None, true)).await);
            (all, DIRECTIVE_NO_FILES)
        }
        Want::Contexts => (contexts(global), DIRECTIVE_NO_FILES),
        Want::Namespaces => (names(global, Kind::Namespaces).await, DIRECTIVE_NO_FILES),
        Want::ResourcesOfPlan(p) => (names(global, Kind::Resources { plan: &p }).await, DIRECTIVE_NO_FILES),
    };
    let candidates: Vec<String> = candidates.into_iter().filter(|c| c.starts_with(&partial)).collect();
    // `-o jsonpath=` takes its template right after the `=`: no space after it.
    let directive = if !candidates.is_empty() && candidates.iter().all(|c| c.ends_with('=')) {
        directive | DIRECTIVE_NO_SPACE
    } else {
        directive
    };
    (candidates, directive)
}

/// What to list from the cluster.
enum Kind<'p> {
    Plans,
    Freezes,
    Runs {
        plan: Option<&'p str>,
        active_only: bool,
    },
    Namespaces,
    /// The resources of a plan's Promise, as `NS/NAME`.
    Resources {
        plan: &'p str,
    },
    /// The groups of a run that require approval and have none yet (all its groups when the
    /// plan cannot be read).
    GroupsOfRun(&'p str),
}

impl<'p> Kind<'p> {
    fn runs(plan: Option<&'p str>, active_only: bool) -> Kind<'p> {
        Kind::Runs { plan, active_only }
    }
}

/// The kubeconfig's contexts (from --kubeconfig, or KUBECONFIG / ~/.kube/config).
fn contexts(global: &Global) -> Vec<String> {
    let kubeconfig = match &global.kubeconfig {
        Some(path) => kube::config::Kubeconfig::read_from(path),
        None => kube::config::Kubeconfig::read(),
    };
    kubeconfig
        .map(|kc| kc.contexts.into_iter().map(|c| c.name).collect())
        .unwrap_or_default()
}

async fn names(global: &Global, kind: Kind<'_>) -> Vec<String> {
    let lookup = async {
        let client = crate::client::connect(global).await.ok()?;
        let names: Vec<String> = match kind {
            Kind::Runs { plan, active_only } => {
                let lp = match plan {
                    Some(p) => ListParams::default()
                        .labels(&upgradeplan::engine::naming::selector(upgradeplan::api::PLAN_LABEL, p)),
                    None => ListParams::default(),
                };
                Api::<UpgradeRun>::all(client)
                    .list(&lp)
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter(|r| !active_only || !r.status.as_ref().is_some_and(|s| s.state.is_terminal()))
                    .filter_map(|r| r.metadata.name)
                    .collect()
            }
            Kind::Plans => Api::<UpgradePlan>::all(client)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name)
                .collect(),
            Kind::Freezes => crate::client::list_freezes(&client)
                .await
                .ok()?
                .into_iter()
                .filter_map(|f| f.metadata.name)
                .collect(),
            Kind::GroupsOfRun(run) => {
                let run = Api::<UpgradeRun>::all(client.clone()).get(run).await.ok()?;
                let recorded = run.status.map(|s| s.rollout_groups).unwrap_or_default();
                let approved = |g: &str| recorded.iter().any(|r| r.name == g && r.approved_by.is_some());
                match Api::<UpgradePlan>::all(client)
                    .get(run.spec.upgrade_plan_ref.name.as_str())
                    .await
                {
                    Ok(plan) => plan
                        .spec
                        .rollout_groups
                        .iter()
                        .filter(|g| upgradeplan::engine::compile::requires_approval(g) && !approved(&g.name))
                        .map(|g| g.name.clone())
                        .collect(),
                    Err(_) => recorded.into_iter().map(|g| g.name).collect(),
                }
            }
            Kind::Resources { plan } => {
                let plan = Api::<UpgradePlan>::all(client.clone()).get(plan).await.ok()?;
                crate::client::bindings_of(&client, &plan.spec.promise_ref.name, None)
                    .await
                    .ok()?
                    .iter()
                    .map(|b| upgradeplan::engine::snapshot::SnapshotResource::from_binding(b).display_name())
                    .collect()
            }
            Kind::Namespaces => Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect(),
        };
        Some(names)
    };
    tokio::time::timeout(Duration::from_secs(3), lookup)
        .await
        .ok()
        .flatten()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(args: &[&str]) -> Want {
        want(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn positions() {
        assert_eq!(w(&[""]), Want::Commands);
        assert_eq!(w(&["ex"]), Want::Commands);
        assert_eq!(w(&["explain", ""]), Want::Plans);
        assert_eq!(w(&["status", "r"]), Want::Runs);
        assert_eq!(w(&["history", "plan", ""]), Want::RunsOfPlan("plan".into()));
        assert_eq!(w(&["suspend", ""]), Want::PlansAndActiveRuns);
        assert_eq!(w(&["cancel", ""]), Want::ActiveRuns);
        assert_eq!(w(&["revert", ""]), Want::Runs);
        assert_eq!(w(&["revert", "r1", ""]), Want::Nothing);
        assert_eq!(
            w(&["revert", "r1", "--resources", ""]),
            Want::Values(vec!["upgraded".into(), "failed".into(), "all".into()])
        );
        assert_eq!(w(&["revert", "r1", "--name", ""]), Want::Nothing);
        assert!(flags_of("revert").contains(&"--respect-policy".to_string()));
        assert!(flags_of("revert").contains(&"--preview".to_string()));
        assert_eq!(w(&["approve", ""]), Want::ActiveRuns);
        assert_eq!(w(&["approve", "r1", ""]), Want::GroupsOfRun("r1".into()));
        assert_eq!(w(&["freezes", ""]), Want::Freezes);
        assert_eq!(w(&["freezes", "create", ""]), Want::Nothing, "a new name");
        assert_eq!(
            w(&["freezes", "create", "x", "--ti"]),
            Want::Flags("freezes create".into())
        );
        assert!(flags_of("freezes create").contains(&"--time-zone".to_string()));
        assert!(flags_of("freezes create").contains(&"--for".to_string()));
        assert_eq!(w(&["freezes", "create", "x", "--for", ""]), Want::Nothing);
        assert_eq!(w(&["forecast", ""]), Want::Plans);
        assert_eq!(w(&["forecast", "p", "--per-resource", ""]), Want::Nothing);
        assert_eq!(w(&["freezes", "--periods", ""]), Want::Nothing);
        assert_eq!(w(&["explain", "p", "--freezes", ""]), Want::Files);
        assert_eq!(w(&["approve", "r1", "prod", "--comment", ""]), Want::Nothing);
        assert_eq!(w(&["get", "--context", ""]), Want::Contexts);
        assert_eq!(w(&["match", "p", "-n", ""]), Want::Namespaces);
        assert_eq!(
            w(&["match", "plan", "--resource", "te"]),
            Want::ResourcesOfPlan("plan".into())
        );
        assert_eq!(w(&["match", "--resource", ""]), Want::Nothing, "no plan named yet");
        assert_eq!(
            w(&["explain", "-o", ""]),
            Want::Values(crate::cli::OUTPUT_FORMATS.map(String::from).to_vec())
        );
        assert_eq!(w(&["explain", "-f", ""]), Want::Files);
        assert_eq!(w(&["match", "--n"]), Want::Flags("match".into()));
        assert_eq!(w(&["explain", "p", ""]), Want::Nothing);
        assert!(flags_of("match").contains(&"--resource".to_string()));
        assert!(flags_of("match").contains(&"--kubeconfig".to_string()));
    }
}
