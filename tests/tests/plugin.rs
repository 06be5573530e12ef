//! kubectl-upgradeplan against the real control plane, with the controller and kratix-sim.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{json, Value};
use upgradeplan::api::RunState;
use upgradeplan_e2e::harness::{
    impersonating_kubeconfig, run_plugin, run_plugin_on_terminal, workspace_bin, PluginOutput as Out, TestEnv,
};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

async fn plugin_with(env_kubeconfig: Option<&str>, args: &[&str]) -> Out {
    run_plugin(env_kubeconfig, args).await.unwrap()
}

async fn plugin(args: &[&str]) -> Out {
    plugin_with(None, args).await
}

fn plan_spec(to: &str) -> Value {
    json!({
        "upgradePath": {"from": ["/v[0-9]\\.0\\.0/"], "to": to},
        "rolloutGroups": [
            {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1},
            {"name": "prod", "selectors": {"matchAll": true}}
        ]
    })
}

#[tokio::test]
async fn every_verb_against_a_live_cluster() {
    let mut env = TestEnv::new("plugin").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0", "v3.0.0", "v4.0.0"], "v4.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &["--delay", "300ms"]).unwrap();
    for (name, group) in [("d0", "dev"), ("d1", "dev"), ("p0", "prod"), ("p1", "prod")] {
        env.resource(&ns, name, &[("env", group)], "v1.0.0").await.unwrap();
    }
    let controller = env.start_controller(&[]).await.unwrap();
    let snap = env.snapshot_namespace();
    let plan = env.create_plan("to-v2", plan_spec("v2.0.0")).await.unwrap();
    env.wait_plan(&plan, WAIT, "status", |p| p.status.is_some())
        .await
        .unwrap();

    // get, explain and match, live.
    let get = plugin(&["get", &plan]).await;
    assert_eq!(get.code, Some(0), "{}", get.stderr);
    assert!(
        get.stdout.starts_with("NAME") && get.stdout.contains(&plan) && get.stdout.contains("Available"),
        "{}",
        get.stdout
    );
    let header: Vec<&str> = get.stdout.lines().next().unwrap().split_whitespace().collect();
    assert!(header.contains(&"SUSPENDED"), "{}", get.stdout);
    // -o json like kubectl: one name → the object, none → a List; managedFields only on request.
    let one: Value = serde_json::from_str(&plugin(&["get", &plan, "-o", "json"]).await.stdout).unwrap();
    assert_eq!(
        (one["kind"].as_str(), one["metadata"]["name"].as_str()),
        (Some("UpgradePlan"), Some(plan.as_str()))
    );
    assert!(one["metadata"].get("managedFields").is_none(), "{one:#}");
    let all: Value = serde_json::from_str(&plugin(&["get", "-o", "json"]).await.stdout).unwrap();
    assert_eq!(all["kind"], "List");
    assert!(all["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metadata"]["name"] == plan.as_str()));
    let managed: Value = serde_json::from_str(
        &plugin(&["get", &plan, "-o", "json", "--show-managed-fields"])
            .await
            .stdout,
    )
    .unwrap();
    assert!(managed["metadata"]["managedFields"].is_array(), "{managed:#}");
    let yaml = plugin(&["get", &plan, "-o", "yaml"]).await;
    assert!(
        yaml.stdout.contains("kind: UpgradePlan") && !yaml.stdout.contains("managedFields"),
        "{}",
        yaml.stdout
    );
    let version: Value = serde_json::from_str(&plugin(&["version", "-o", "json"]).await.stdout).unwrap();
    assert!(version["clientVersion"]["gitVersion"]
        .as_str()
        .unwrap()
        .starts_with('v'));
    assert!(
        version["serverVersion"]["gitVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("v1.")),
        "{version:#}"
    );

    // A plan whose Promise does not exist: not READY in `get -o wide`, a warning in `explain`.
    let orphan = env.create_plan("orphan", plan_spec("v2.0.0")).await.unwrap();
    env.plans()
        .patch(
            &orphan,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"spec": {"promiseRef": {"name": "no-such-promise"}}})),
        )
        .await
        .unwrap();
    env.wait_plan(&orphan, WAIT, "PromiseResolved=False", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "PromiseResolved" && c.status == upgradeplan::api::ConditionStatus::False)
        })
    })
    .await
    .unwrap();
    let wide = plugin(&["get", &orphan, "-o", "wide"]).await;
    assert!(wide.stdout.contains("False (PromiseNotFound)"), "{}", wide.stdout);
    let warned = plugin(&["explain", &orphan]).await;
    assert_eq!(warned.code, Some(0), "{}", warned.stderr);
    assert!(
        warned
            .stdout
            .contains("spec.promiseRef.name: Promise \"no-such-promise\" not found"),
        "{}",
        warned.stdout
    );
    assert_eq!(plugin(&["explain", &orphan, "--strict"]).await.code, Some(1));
    env.plans().delete(&orphan, &Default::default()).await.unwrap();

    let explain = plugin(&["explain", &plan]).await;
    assert_eq!(explain.code, Some(0), "{}", explain.stderr);
    assert!(explain.stdout.contains("1 (of 2 resources now)"), "{}", explain.stdout);
    let m: Value = serde_json::from_str(&plugin(&["match", &plan, "-o", "json"]).await.stdout).unwrap();
    assert_eq!(m["groups"][0]["resources"].as_array().unwrap().len(), 2);
    assert_eq!(m["groups"][1]["resources"].as_array().unwrap().len(), 2);
    let mine = plugin(&["match", &plan, "--resource", &format!("{ns}/p1")]).await;
    assert!(
        mine.stdout.contains(&format!(
            "{ns}/p1 is in group prod (2 of 2), position 2 of 2; its window is open now."
        )),
        "{}",
        mine.stdout
    );

    // run + status -w: completed → exit 0.
    let run = plugin(&["run", &plan]).await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let run_name = run.stdout.trim().to_string();
    assert!(run_name.starts_with(&format!("{plan}-")), "{run_name}");
    let status = plugin(&[
        "status",
        &run_name,
        "-w",
        "--timeout",
        "90s",
        "--snapshot-namespace",
        &snap,
    ])
    .await;
    assert_eq!(
        status.code,
        Some(0),
        "completed run: {}\n{}\n{}",
        status.stdout,
        status.stderr,
        controller.log_text()
    );
    assert!(status.stdout.contains("Completed"), "{}", status.stdout);

    // history: the plan's runs, and one run's resources.
    let h = plugin(&["history", &plan]).await;
    assert!(
        h.stdout.contains(&run_name)
            && h.stdout.contains("manual")
            && h.stdout.contains("Completed")
            && h.stdout.contains("4/4"),
        "{}",
        h.stdout
    );
    let detail: Value = serde_json::from_str(
        &plugin(&["history", &plan, &run_name, "-o", "json", "--snapshot-namespace", &snap])
            .await
            .stdout,
    )
    .unwrap();
    let outcomes: Vec<&str> = detail
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, vec!["Succeeded"; 4]);
    // When each started, from the binding's own annotations (events expire and are combined).
    assert!(
        detail.as_array().unwrap().iter().all(|r| r["startedAt"].is_string()),
        "{detail:#}"
    );

    // A failing resource: status -w exits 1; history shows which resource failed and why.
    env.patch_binding(
        &ns,
        &env.binding_name("d0"),
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": "v3.0.0"}}}),
    )
    .await
    .unwrap();
    let plan3 = env.create_plan("to-v3", plan_spec("v3.0.0")).await.unwrap();
    env.wait_plan(&plan3, WAIT, "status", |p| p.status.is_some())
        .await
        .unwrap();
    let run3 = plugin(&["run", &plan3, "--name", &format!("{plan3}-one")])
        .await
        .stdout
        .trim()
        .to_string();
    // What the API server refuses comes back as one readable line, never a Debug dump.
    let taken = plugin(&["run", &plan3, "--name", &run3]).await;
    assert_eq!(taken.code, Some(4), "{taken:?}");
    let line = taken.stderr.trim();
    assert!(
        !line.contains('\n')
            && line.contains(&format!("cannot create upgraderuns \"{run3}\""))
            && line.contains("(HTTP 409, AlreadyExists); choose another name")
            && !line.contains("Status {"),
        "{line}"
    );
    let status = plugin(&["status", &run3, "-w", "--timeout", "90s", "--snapshot-namespace", &snap]).await;
    assert_eq!(status.code, Some(1), "failed run: {}\n{}", status.stdout, status.stderr);
    // It names the failed resource, Kratix's message, and where to see the rest.
    assert!(
        status.stdout.contains(&format!("\nFailed:\n  {ns}/d0: "))
            && status
                .stdout
                .contains(&format!("kubectl upgradeplan history {plan3} {run3}")),
        "{}",
        status.stdout
    );
    let detail = plugin(&["history", &plan3, &run3, "--snapshot-namespace", &snap]).await;
    assert!(
        detail.stdout.lines().any(|l| l.contains(&format!("{ns}/d0"))
            && l.contains("Failed")
            && l.contains("workflow failed: simulated")),
        "{}",
        detail.stdout
    );
    let h = plugin(&["history", &plan3, "-o", "wide"]).await;
    assert!(
        h.stdout.contains("ResourceUpgradeFailed")
            && h.stdout.contains("1 resource(s) failed to upgrade in rollout group"),
        "{}",
        h.stdout
    );

    // suspend / resume a plan, while `get -w` on a terminal redraws its table in place.
    let watching = tokio::spawn({
        let plan = plan.clone();
        async move {
            run_plugin_on_terminal(&["get", &plan, "-w"], Some(Duration::from_secs(6)))
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    // The verbs that write print what they wrote in -o's format, as kubectl's do.
    let suspended: Value =
        serde_json::from_str(&plugin(&["suspend", &format!("plan/{plan}"), "-o", "json"]).await.stdout).unwrap();
    assert_eq!(
        (suspended["kind"].as_str(), suspended["spec"]["suspend"].as_bool()),
        (Some("UpgradePlan"), Some(true)),
        "{suspended:#}"
    );
    assert!(env.plans().get(&plan).await.unwrap().spec.suspend);
    let table = watching.await.unwrap().stdout;
    assert!(
        table.contains("A\x1b[J") && table.matches("SUSPENDED").count() >= 2,
        "get -w on a terminal: {table:?}"
    );
    assert!(plugin(&["resume", &plan]).await.stdout.contains("resumed"));
    let suspended = plugin(&["suspend", &plan, "-o", "jsonpath={.metadata.name} {.spec.suspend}"]).await;
    assert_eq!(suspended.stdout, format!("{plan} true"), "{}", suspended.stderr);
    let resumed = plugin(&[
        "resume",
        &plan,
        "-o",
        "custom-columns=NAME:.metadata.name,GENERATION:.metadata.generation",
    ])
    .await;
    // The object the patch returned: its generation (spec writes only, never the controller's
    // status writes) is the plan's now.
    let written = env.plans().get(&plan).await.unwrap();
    assert!(!written.spec.suspend);
    assert_eq!(
        resumed
            .stdout
            .lines()
            .nth(1)
            .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>()),
        Some(vec![plan.clone(), written.metadata.generation.unwrap().to_string()]),
        "{}",
        resumed.stdout
    );
    assert!(!env.plans().get(&plan).await.unwrap().spec.suspend);

    // A preview: status explains it; cancel needs --yes off a terminal; status -w exits 2.
    let plan4 = env.create_plan("to-v4", plan_spec("v4.0.0")).await.unwrap();
    env.wait_plan(&plan4, WAIT, "status", |p| p.status.is_some())
        .await
        .unwrap();
    let created = plugin(&["run", &plan4, "--preview", "-o", "name"]).await.stdout;
    let preview = created
        .trim()
        .strip_prefix("upgraderun.platform.syntasso.io/")
        .unwrap_or_else(|| panic!("run -o name: {created:?}"))
        .to_string();
    env.wait_run(&preview, WAIT, "snapshot", |r| {
        r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
    })
    .await
    .unwrap();
    let s = plugin(&["status", &preview, "--snapshot-namespace", &snap]).await;
    assert!(
        s.stdout.contains("Waiting: preview: nothing is patched until resumed"),
        "{}",
        s.stdout
    );
    let watcher = tokio::spawn({
        let (preview, snap) = (preview.clone(), snap.clone());
        async move {
            plugin(&[
                "status",
                &preview,
                "-w",
                "--timeout",
                "60s",
                "--snapshot-namespace",
                &snap,
            ])
            .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let refused = plugin(&["cancel", &preview]).await;
    assert_eq!(refused.code, Some(4));
    assert!(refused.stderr.contains("pass --yes"), "{}", refused.stderr);
    assert_eq!(
        plugin(&["cancel", &preview, "--yes", "-o", "name"]).await.stdout,
        format!("upgraderun.platform.syntasso.io/{preview}\n")
    );
    let watched = watcher.await.unwrap();
    assert_eq!(
        watched.code,
        Some(2),
        "cancelled run: {}\n{}",
        watched.stdout,
        watched.stderr
    );

    // A timeout: status -w on a suspended preview gives up with 3.
    let stuck = plugin(&["run", &plan4, "--preview"]).await.stdout.trim().to_string();
    let t = plugin(&["status", &stuck, "-w", "--timeout", "2s", "--snapshot-namespace", &snap]).await;
    assert_eq!(t.code, Some(3), "{}", t.stderr);
    // Resuming the preview rolls it out, watched at once on a terminal and through a pipe.
    let watch_args = [
        "status",
        stuck.as_str(),
        "-w",
        "--timeout",
        "90s",
        "--snapshot-namespace",
        snap.as_str(),
    ];
    let on_terminal = tokio::spawn({
        let args: Vec<String> = watch_args.iter().map(|a| a.to_string()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_plugin_on_terminal(&args, None).await.unwrap()
        }
    });
    let piped = tokio::spawn({
        let args: Vec<String> = watch_args.iter().map(|a| a.to_string()).collect();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            plugin(&args).await
        }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(plugin(&["resume", &format!("run/{stuck}")])
        .await
        .stdout
        .contains("resumed"));
    let (tty, done) = (on_terminal.await.unwrap(), piped.await.unwrap());
    assert_eq!(
        done.code,
        Some(0),
        "the resumed preview completes (d0 fails only v3): {}\n{}",
        done.stdout,
        done.stderr
    );
    assert_eq!(tty.code, Some(0), "on a terminal: {}", tty.stdout);
    // On a terminal every new view replaces the last one: cursor up over its lines, clear below.
    let redraws = tty.stdout.matches("\x1b[J").count();
    assert!(
        redraws >= 1 && tty.stdout.contains("A\x1b[J") && tty.stdout.contains("Completed"),
        "no in-place redraw on a terminal: {:?}",
        tty.stdout
    );
    // Piped, blocks are appended, only when something changed, and nothing moves the cursor.
    let blocks: Vec<&str> = done.stdout.split("UpgradeRun ").map(str::trim).collect();
    assert!(
        !done.stdout.contains('\x1b') && blocks.windows(2).all(|w| w[0] != w[1]),
        "piped: {:?}",
        done.stdout
    );

    // A run held by a window that opens in twelve hours: status without its snapshot, and superseded.
    use chrono::Timelike;
    let opens = (chrono::Utc::now().hour() + 12) % 24;
    let mut held_spec = plan_spec("v2.0.0");
    for g in held_spec["rolloutGroups"].as_array_mut().unwrap() {
        g["resourceUpgradeWindows"] =
            json!([{"kind": "allow", "schedule": format!("0 {opens} * * *"), "duration": "1h"}]);
    }
    let plan5 = env.create_plan("held", held_spec).await.unwrap();
    let held = plugin(&["run", &plan5]).await.stdout.trim().to_string();
    env.wait_run(&held, WAIT, "in progress", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.state == upgradeplan::api::RunState::InProgress)
    })
    .await
    .unwrap();
    // Its snapshot unreadable to the plugin (another namespace: deleting it would fail the run,
    // as a tampered snapshot).
    let fallback = plugin(&["status", &held, "--snapshot-namespace", "default"]).await;
    assert_eq!(fallback.code, Some(0), "{}", fallback.stderr);
    assert!(
        fallback.stdout.contains("InProgress") && fallback.stdout.contains("Note: showing the run's recorded status"),
        "{}",
        fallback.stdout
    );
    let follow = tokio::spawn({
        let held = held.clone();
        // Still from its recorded status (the snapshot unreadable from `default`).
        async move {
            plugin(&[
                "status",
                &held,
                "-w",
                "--timeout",
                "60s",
                "--snapshot-namespace",
                "default",
            ])
            .await
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let newer = plugin(&["run", &plan5]).await.stdout.trim().to_string();
    let superseded = follow.await.unwrap();
    assert_eq!(superseded.code, Some(5), "{}\n{}", superseded.stdout, superseded.stderr);
    // Not a terminal: a block is appended when the run changes, not on every tick.
    let blocks = superseded.stdout.matches(&format!("UpgradeRun {held} ")).count();
    assert!(
        blocks <= 2,
        "{blocks} blocks while nothing changed:\n{}",
        superseded.stdout
    );
    assert!(
        superseded.stdout.contains("PROGRESS") && superseded.stdout.contains("[----------]   0%"),
        "{}",
        superseded.stdout
    );
    assert!(
        superseded.stderr.contains(&format!("superseded by upgraderun/{newer}")),
        "{}",
        superseded.stderr
    );
    env.plans().delete(&plan5, &Default::default()).await.unwrap();

    // Completion through the kubectl protocol, with live names.
    let complete = tokio::process::Command::new(workspace_bin("kubectl_complete-upgradeplan").unwrap())
        .args(["status", &format!("{}-to-v3", env.id)])
        .output()
        .await
        .unwrap();
    let lines: Vec<String> = String::from_utf8_lossy(&complete.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines, vec![run3.clone(), ":4".to_string()]);
    let plans = tokio::process::Command::new(workspace_bin("kubectl_complete-upgradeplan").unwrap())
        .args(["explain", &env.id])
        .output()
        .await
        .unwrap();
    let plans = String::from_utf8_lossy(&plans.stdout).to_string();
    assert!(
        plans.contains(&plan) && plans.contains(&plan3) && plans.contains(&plan4),
        "{plans}"
    );
    let resources = tokio::process::Command::new(workspace_bin("kubectl_complete-upgradeplan").unwrap())
        .args(["match", &plan, "--resource", &format!("{ns}/p")])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&resources.stdout),
        format!("{ns}/p0\n{ns}/p1\n:4\n"),
        "--resource completes the plan's resources"
    );

    // Errors that say what to do.
    let missing = plugin(&["get", "no-such-plan"]).await;
    assert_eq!(missing.code, Some(4));
    assert!(
        missing.stderr.contains("upgradeplans \"no-such-plan\" not found"),
        "{}",
        missing.stderr
    );
    let no_rights = std::env::var("TESTENV_NO_RIGHTS_KUBECONFIG").unwrap();
    let denied = plugin_with(Some(&no_rights), &["get"]).await;
    assert_eq!(denied.code, Some(4));
    assert!(
        denied.stderr.contains("forbidden: you may not list upgradeplans")
            && denied
                .stderr
                .contains("Ask for a ClusterRole (bound with a ClusterRoleBinding) granting `list` on upgradeplans"),
        "{}",
        denied.stderr
    );
    // A user who may only read plans and runs: explain and status work, saying what is missing.
    let reader = format!("{}-reader", env.id);
    let rbac: Vec<serde_json::Value> = vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": reader},
               "rules": [{"apiGroups": ["platform.syntasso.io"], "resources": ["upgradeplans", "upgraderuns"],
                          "verbs": ["get", "list", "watch"]}]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": reader},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": reader}]}),
    ];
    let roles: kube::Api<k8s_openapi::api::rbac::v1::ClusterRole> = kube::Api::all(env.client.clone());
    let bindings: kube::Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = kube::Api::all(env.client.clone());
    roles
        .create(&Default::default(), &serde_json::from_value(rbac[0].clone()).unwrap())
        .await
        .unwrap();
    bindings
        .create(&Default::default(), &serde_json::from_value(rbac[1].clone()).unwrap())
        .await
        .unwrap();
    let reader_kubeconfig = impersonating_kubeconfig(&reader).unwrap();
    let preview2 = plugin(&["run", &plan, "--preview"]).await.stdout.trim().to_string();
    env.wait_run(&preview2, WAIT, "in progress", |r| {
        r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
    })
    .await
    .unwrap();
    let explained = plugin_with(Some(&reader_kubeconfig), &["explain", &plan]).await;
    assert_eq!(explained.code, Some(0), "{}", explained.stderr);
    assert!(
        explained.stderr.contains("note: ") && explained.stderr.contains("resourcebindings"),
        "{}",
        explained.stderr
    );
    let watched = plugin_with(
        Some(&reader_kubeconfig),
        &["status", &preview2, "--snapshot-namespace", &snap],
    )
    .await;
    assert_eq!(watched.code, Some(0), "{}", watched.stderr);
    assert!(
        watched.stdout.contains("Note: showing the run's recorded status"),
        "{}",
        watched.stdout
    );
    assert!(plugin(&["cancel", &preview2, "--yes"])
        .await
        .stdout
        .contains("cancelled"));
    roles.delete(&reader, &Default::default()).await.unwrap();
    bindings.delete(&reader, &Default::default()).await.unwrap();

    let version = plugin(&["version"]).await;
    let server = env.client.apiserver_version().await.unwrap().git_version;
    assert!(
        version.stdout.contains("kubectl-upgradeplan 0.1.0") && version.stdout.contains(&format!("server {server}")),
        "{}",
        version.stdout
    );
    env.teardown().await.unwrap();
}

/// Issue 37 item 5: `status` names a resource of the current group, not upgraded yet, whose
/// binding says Kratix will not reconcile it (`kratix.io/paused`, copied from its Resource
/// Request), in text and JSON; its neighbour without the label is not named.
#[tokio::test]
async fn status_names_resources_kratix_will_not_reconcile() {
    let mut env = TestEnv::new("plugin-idle").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    env.resource(&ns, "d0", &[("env", "dev")], "v1.0.0").await.unwrap();
    env.resource(&ns, "d1", &[("env", "dev")], "v1.0.0").await.unwrap();
    // d1's user pauses it; Kratix copies the request's label onto the binding.
    env.requests_api(&ns)
        .patch(
            "d1",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {upgradeplan::api::kratix::PAUSED_LABEL: "true"}}})),
        )
        .await
        .unwrap();
    env.wait_binding(&ns, &env.binding_name("d1"), WAIT, "paused, as its request", |b| {
        kube::ResourceExt::labels(b)
            .get(upgradeplan::api::kratix::PAUSED_LABEL)
            .is_some_and(|v| v == "true")
    })
    .await
    .unwrap();
    let _controller = env.start_controller(&[]).await.unwrap();
    let snap = env.snapshot_namespace();
    let plan = env.create_plan("idle", plan_spec("v2.0.0")).await.unwrap();
    // A preview: its snapshot is taken and nothing starts, so neither resource is upgraded.
    let run = env.create_run(&format!("{plan}-1"), &plan, true).await.unwrap();
    env.wait_run(&run, WAIT, "snapshot taken", |r| {
        r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
    })
    .await
    .unwrap();
    let text = plugin(&["status", &run, "--snapshot-namespace", &snap]).await;
    assert!(
        text.stdout.contains(&format!("Kratix will not reconcile: {ns}/d1 is ")),
        "{}\n{}",
        text.stdout,
        text.stderr
    );
    assert!(!text.stdout.contains(&format!("{ns}/d0 is ")), "{}", text.stdout);
    let json = plugin(&["status", &run, "--snapshot-namespace", &snap, "-o", "json"]).await;
    let v: Value = serde_json::from_str(&json.stdout).unwrap_or_else(|e| panic!("{e}: {}", json.stdout));
    let named: Vec<&str> = v["kratixIdle"]
        .as_array()
        .unwrap_or_else(|| panic!("no kratixIdle in {v}"))
        .iter()
        .filter_map(|n| n["resource"].as_str())
        .collect();
    assert_eq!(named, [format!("{ns}/d1")]);
    env.teardown().await.unwrap();
}
