//! Soak time and approvals between rollout groups (spec §13.4), end to end: the real control
//! plane, kratix-sim, the controller and the plugin's `approve`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, GroupPhase, RunState, UpgradeApproval, UpgradeRun};
use upgradeplan_e2e::harness::{run_plugin, started_at, Built, TestEnv, World, ADMIN_USER};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

fn phase(r: &UpgradeRun, group: usize) -> Option<GroupPhase> {
    r.status.as_ref()?.rollout_groups.get(group)?.phase
}

/// Waits until the run's first group soaks; when it completed, as the run records it.
async fn soaking_since(env: &TestEnv, run: &str) -> DateTime<Utc> {
    let soaking = env
        .wait_run(run, WAIT, "first group soaking", |r| {
            phase(r, 0) == Some(GroupPhase::Soaking)
        })
        .await
        .unwrap();
    soaking.status.as_ref().unwrap().rollout_groups[0].completed_at.unwrap()
}

fn group(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut g = json!({"name": name, "selectors": {"matchLabels": {"env": name}}});
    for (k, v) in extra.as_object().unwrap() {
        g[k] = v.clone();
    }
    g
}

#[tokio::test]
async fn a_canary_soaks_then_production_waits_for_approval() {
    let bindings = [("c0", "canary"), ("m0", "middle"), ("p0", "prod"), ("p1", "prod")];
    let Built { mut env, ns, .. } = World::new("approve", SIM).bindings(&bindings).build().await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "staged",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("canary", json!({"soakDuration": "6s"})), group("middle", json!({})),
                                     group("prod", json!({"requireApproval": true}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();

    // The canary completes; the next group waits for the soak, measured from the recorded time.
    let canary_done = soaking_since(&env, &run).await;
    let middle = env
        .wait_run(&run, WAIT, "middle started", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.rollout_groups[1].started_at.is_some())
        })
        .await
        .unwrap();
    let middle_started = middle.status.as_ref().unwrap().rollout_groups[1].started_at.unwrap();
    assert!(
        middle_started >= canary_done + chrono::Duration::seconds(6),
        "middle started {middle_started}, the canary completed {canary_done}: no 6 s soak"
    );
    // The start annotation is to the second.
    assert!(
        started_at(&env.live_binding(&ns, "m0").await.unwrap()).timestamp()
            >= (canary_done + chrono::Duration::seconds(6)).timestamp()
    );

    // Production waits for its approval, says so once, and starts nothing.
    let waiting = env
        .wait_run(&run, WAIT, "prod awaiting approval", |r| {
            phase(r, 2) == Some(GroupPhase::AwaitingApproval)
        })
        .await
        .unwrap();
    let c = find_condition(&waiting.status.as_ref().unwrap().conditions, reasons::AWAITING_APPROVAL).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            "ApprovalRequired",
            "rollout group \"prod\" waits for an UpgradeApproval"
        )
    );
    // Reconciled once more while it waits: still announced once.
    env.settle_run(&controller, &run).await.unwrap();
    let events = env
        .events_when(&run, |(_, r, _)| r == "GroupAwaitingApproval")
        .await
        .unwrap();
    assert_eq!(
        events.iter().filter(|(_, r, _)| r == "GroupAwaitingApproval").count(),
        1,
        "{events:?}"
    );
    let b = env.bindings_api(&ns).get(&env.binding_name("p0")).await.unwrap();
    assert_eq!(b.spec.version, "v1.0.0", "nothing in prod started before the approval");
    let status = run_plugin(
        None,
        &["status", &run, "--snapshot-namespace", &env.snapshot_namespace()],
    )
    .await
    .unwrap();
    assert!(
        status.stdout.contains("waiting for approval of group \"prod\" since")
            && status
                .stdout
                .contains(&format!("kubectl upgradeplan approve {run} prod")),
        "{}",
        status.stdout
    );
    assert!(status.stdout.contains("awaiting approval"), "{}", status.stdout);
    // "When will mine be upgraded?" answers from the run under way: the canary's soak is behind
    // it, the approval ahead.
    let resource = format!("{ns}/p0");
    let placed = run_plugin(
        None,
        &[
            "match",
            &plan,
            "--resource",
            &resource,
            "--snapshot-namespace",
            &env.snapshot_namespace(),
        ],
    )
    .await
    .unwrap();
    assert_eq!(placed.code, Some(0), "{}{}", placed.stdout, placed.stderr);
    assert!(
        placed.stdout.contains(&format!(
            "In run {run}, under way (its snapshot): the group is awaiting approval, the resource not started."
        )) && placed.stdout.contains(&format!(
            "an approval of group prod (kubectl upgradeplan approve {run} prod)"
        )) && !placed.stdout.contains("soak"),
        "{}",
        placed.stdout
    );
    let placed = run_plugin(
        None,
        &[
            "match",
            &plan,
            "--resource",
            &resource,
            "--snapshot-namespace",
            &env.snapshot_namespace(),
            "-o",
            "json",
        ],
    )
    .await
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&placed.stdout).unwrap();
    let place = &v["resource"]["placements"][0];
    assert_eq!(
        (
            place["run"].as_str(),
            place["groupState"].as_str(),
            place["outcome"].as_str()
        ),
        (Some(run.as_str()), Some("awaiting approval"), Some("not started")),
        "{v}"
    );

    // `approve` with no group approves the one waiting, and says who approved: the user the API
    // server authenticated (a SelfSubjectReview), here the admin client certificate's CN.
    let out = run_plugin(
        None,
        &[
            "approve",
            &run,
            "--comment",
            "CHG-1234, canary looks fine",
            "--snapshot-namespace",
            &env.snapshot_namespace(),
        ],
    )
    .await
    .unwrap();
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .starts_with(&format!("upgradeapproval/{run}-prod created by {ADMIN_USER}")),
        "{}",
        out.stdout
    );
    let done = env.wait_ended(&run).await.unwrap();
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    let prod = &status.rollout_groups[2];
    assert_eq!(
        (
            prod.approval.as_deref(),
            prod.approved_by.as_deref(),
            prod.comment.as_deref()
        ),
        (
            Some(format!("{run}-prod").as_str()),
            Some(ADMIN_USER),
            Some("CHG-1234, canary looks fine")
        ),
        "which approval, who, and why"
    );
    assert!(status
        .rollout_groups
        .iter()
        .all(|g| g.phase == Some(GroupPhase::Completed)));
    let c = find_condition(&status.conditions, reasons::AWAITING_APPROVAL).unwrap();
    assert_eq!((c.status, c.reason.as_str()), (ConditionStatus::False, "Approved"));
    // The approval is the run's: garbage-collected with it.
    let approval: UpgradeApproval = kube::Api::all(env.client.clone())
        .get(&format!("{run}-prod"))
        .await
        .unwrap();
    assert!(
        approval
            .metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .any(|o| Some(&o.uid) == done.metadata.uid.as_ref() && o.kind == "UpgradeRun"),
        "no owner reference to the run"
    );
    let events = env.events_when(&run, |(_, r, _)| r == "GroupApproved").await.unwrap();
    assert!(
        events.iter().any(|(t, r, m)| t == "Normal"
            && r == "GroupApproved"
            && m == &format!(
                "rollout group \"prod\" approved by {ADMIN_USER} (UpgradeApproval {run}-prod): CHG-1234, canary looks fine"
            )),
        "{events:?}"
    );
    let shown = run_plugin(
        None,
        &["status", &run, "--snapshot-namespace", &env.snapshot_namespace()],
    )
    .await
    .unwrap();
    assert!(
        shown
            .stdout
            .contains(&format!("Approved: prod by {ADMIN_USER} (upgradeapproval/{run}-prod, "))
            && shown.stdout.contains("): CHG-1234, canary looks fine"),
        "{}",
        shown.stdout
    );
    // Nothing to approve any more.
    let out = run_plugin(None, &["approve", &run]).await.unwrap();
    assert_eq!(out.code, Some(4), "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains("has already finished (Completed)"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn a_pre_approved_group_never_waits_and_a_restart_keeps_the_soak_clock() {
    let Built { mut env, ns, .. } = World::new("preapproved", SIM)
        .bindings(&[("c0", "canary"), ("p0", "prod")])
        .build()
        .await
        .unwrap();
    let mut controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "staged",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("canary", json!({"soakDuration": "12s"})),
                                     group("prod", json!({"requireApproval": true}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let out = run_plugin(
        None,
        &["approve", &run, "prod", "--comment", "pre-approved", "-o", "name"],
    )
    .await
    .unwrap();
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    // -o name: the approval it created, as `kubectl create -o name` prints it.
    assert_eq!(out.stdout, format!("upgradeapproval.platform.syntasso.io/{run}-prod\n"));

    let canary_done = soaking_since(&env, &run).await;
    // The controller dies during the soak and comes back: the soak still ends 12 s after the
    // canary completed, not 12 s after the restart.
    tokio::time::sleep(Duration::from_secs(2)).await;
    controller.kill().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let _controller = env.start_controller(&[]).await.unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.state, RunState::Completed);
    let prod_started = started_at(&env.live_binding(&ns, "p0").await.unwrap());
    let soak_end = canary_done + chrono::Duration::seconds(12);
    assert!(
        // The start annotation is to the second.
        prod_started.timestamp() >= soak_end.timestamp() && prod_started < soak_end + chrono::Duration::seconds(4),
        "prod started {prod_started}; the soak ended {soak_end} (a restarted clock would be 5 s later)"
    );
    assert_eq!(
        status.rollout_groups[1].approval.as_deref(),
        Some(format!("{run}-prod").as_str())
    );
    let events = env.events_of(&run).await.unwrap();
    assert!(
        events.iter().all(|(_, r, _)| r != "GroupAwaitingApproval"),
        "a pre-approved group never waits: {events:?}"
    );
}

/// A controller upgraded before its CRDs (no UpgradeApproval kind in the cluster) still runs the
/// plans that need no approval: the approvals cache is not among those every run waits for.
#[tokio::test]
async fn without_the_approval_crd_plans_that_need_no_approval_still_run() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let plane = upgradeplan_e2e::harness::OwnControlPlane::start("no-approval-crd")
        .await
        .unwrap();
    let mut env = TestEnv::on("no-approval-crd", &plane).await.unwrap();
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(env.client.clone());
    crds.delete("upgradeapprovals.platform.syntasso.io", &Default::default())
        .await
        .unwrap();
    upgradeplan_e2e::harness::wait_gone(crds, "upgradeapprovals.platform.syntasso.io", WAIT)
        .await
        .unwrap();
    env.upgrade_world(&[("r0", "dev")], SIM, &[]).await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "plain",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [group("dev", json!({}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(
        done.status.unwrap().state,
        RunState::Completed,
        "{}",
        controller.log_text()
    );
}
