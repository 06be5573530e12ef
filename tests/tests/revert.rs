//! Revert (spec §13.7), end to end: the real control plane, kratix-sim, the controller and the
//! plugin's `revert`.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use kube::api::ListParams;
use kube::ResourceExt;
use serde_json::json;
use upgradeplan::api::kratix::BindingFacts;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, RunState, UpgradeRun, UPGRADED_BY_ANNOTATION};
use upgradeplan_e2e::harness::{run_plugin, run_state, Built, TestEnv, World};
use upgradeplan_e2e::sim::{FAIL_VERSION_ANNOTATION, HOLD_ANNOTATION};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

fn group(name: &str, extra: serde_json::Value) -> serde_json::Value {
    let mut g = json!({"name": name, "selectors": {"matchLabels": {"env": name}}});
    for (k, v) in extra.as_object().unwrap() {
        g[k] = v.clone();
    }
    g
}

fn group_times(
    r: &UpgradeRun,
    name: &str,
) -> (
    Option<chrono::DateTime<chrono::Utc>>,
    Option<chrono::DateTime<chrono::Utc>>,
) {
    let g = r
        .status
        .as_ref()
        .unwrap()
        .rollout_groups
        .iter()
        .find(|g| g.name == name)
        .unwrap();
    (g.started_at, g.completed_at)
}

/// Every run of `plan` that reverts `run`.
async fn reverts_of(env: &TestEnv, run: &str) -> Vec<UpgradeRun> {
    let all = env.runs().list(&ListParams::default()).await.unwrap();
    all.items
        .into_iter()
        .filter(|r| r.spec.revert_of.as_ref().is_some_and(|o| o.name == run))
        .collect()
}

async fn applied(env: &TestEnv, ns: &str, name: &str) -> (String, String) {
    let b = env.live_binding(ns, name).await.unwrap();
    (b.spec_version().to_string(), b.last_applied_version().to_string())
}

#[tokio::test]
async fn a_completed_two_group_run_is_reverted_prod_first_by_the_plugin() {
    let bindings = [("d0", "dev"), ("d1", "dev"), ("p0", "prod"), ("p1", "prod")];
    let Built { mut env, ns, .. } = World::new("revert-done", SIM)
        .bindings(&bindings)
        .build()
        .await
        .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "two",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("dev", json!({})), group("prod", json!({}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&done), RunState::Completed);

    // Production's upgrades back are held in Kratix, so that what dev does meanwhile is seen.
    let prod: Vec<String> = ["p0", "p1"]
        .iter()
        .map(|p| format!("{ns}/{}", env.binding_name(p)))
        .collect();
    env.hold(&prod, true).await.unwrap();
    let snapshot_ns = env.snapshot_namespace();
    // What undoing it would take, before it is undone: prod then dev, two each.
    let forecast = run_plugin(
        None,
        &[
            "forecast",
            "--revert",
            &run,
            "--per-resource",
            "1m",
            "-o",
            "json",
            "--snapshot-namespace",
            &snapshot_ns,
        ],
    )
    .await
    .unwrap();
    assert_eq!(forecast.code, Some(0), "{}", forecast.stderr);
    let f: serde_json::Value = serde_json::from_str(&forecast.stdout).unwrap();
    assert_eq!(f["revertOf"], run.as_str());
    let groups: Vec<(&str, u64)> = f["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| (g["name"].as_str().unwrap(), g["resources"].as_u64().unwrap()))
        .collect();
    assert_eq!(groups, [("prod", 2), ("dev", 2)], "{}", forecast.stdout);
    assert!(f["finish"].is_string(), "{}", forecast.stdout);
    let out = run_plugin(
        None,
        &[
            "revert",
            &run,
            "--name",
            &format!("{run}-back"),
            "--snapshot-namespace",
            &snapshot_ns,
        ],
    )
    .await
    .unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let revert = out.stdout.trim().to_string();
    assert_eq!(revert, format!("{run}-back"), "it prints the revert's name alone");
    assert!(
        out.stderr.contains(&format!(
            "Reverting 4 resource(s) of upgraderun/{run} (--resources upgraded), each to the version it had: prod (2) then dev (2)"
        )),
        "{}",
        out.stderr
    );

    // Prod first: both started back, held; dev untouched until prod completes.
    for p in ["p0", "p1"] {
        env.wait_binding(&ns, &env.binding_name(p), WAIT, "moved back to v1.0.0", |b| {
            b.spec_version() == "v1.0.0"
        })
        .await
        .unwrap();
    }
    for d in ["d0", "d1"] {
        assert_eq!(
            applied(&env, &ns, d).await,
            ("v2.0.0".to_string(), "v2.0.0".to_string()),
            "{d} waits while prod is reverted"
        );
    }
    let status = run_plugin(None, &["status", &revert, "--snapshot-namespace", &snapshot_ns])
        .await
        .unwrap();
    assert!(
        status.stdout.contains(&format!("(plan {plan}, revert of {run})")),
        "{}",
        status.stdout
    );
    env.hold(&prod, false).await.unwrap();
    let ended = env.wait_ended(&revert).await.unwrap();
    assert_eq!(run_state(&ended), RunState::Completed);
    let c = find_condition(&ended.status.as_ref().unwrap().conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(c.message, "4/4 resources upgraded to v1.0.0");
    let (_, prod_done) = group_times(&ended, "prod");
    let (dev_started, _) = group_times(&ended, "dev");
    assert!(
        prod_done.unwrap() <= dev_started.unwrap(),
        "dev began once prod completed"
    );
    for name in ["d0", "d1", "p0", "p1"] {
        let b = env.live_binding(&ns, name).await.unwrap();
        assert_eq!(
            (b.spec_version(), b.last_applied_version()),
            ("v1.0.0", "v1.0.0"),
            "{name}"
        );
        assert_eq!(
            b.annotation(UPGRADED_BY_ANNOTATION),
            Some(revert.as_str()),
            "{name}: the record names the revert"
        );
    }
    let history = run_plugin(None, &["history", &plan]).await.unwrap();
    let line = |name: &str| {
        history
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        line(&revert).contains(&format!("revert of {run}")),
        "{}",
        history.stdout
    );
    assert!(
        line(&run).contains(&format!("(reverted by {revert})")),
        "{}",
        history.stdout
    );
    // Nothing is left to revert now: refused, saying why.
    let again = run_plugin(None, &["revert", &run, "--snapshot-namespace", &snapshot_ns])
        .await
        .unwrap();
    assert_eq!(again.code, Some(4), "{}", again.stderr);
    assert!(
        again.stderr.contains(&format!(
            "nothing to revert in upgraderun/{run} with --resources upgraded: of its resources, 4 not started by it"
        )),
        "{}",
        again.stderr
    );
    drop(controller);
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_failed_group_with_on_failure_revert_is_reverted_once_across_a_controller_restart() {
    let bindings = [("d0", "dev"), ("d1", "dev"), ("p0", "prod")];
    let Built { mut env, ns, .. } = World::new("revert-onfail", SIM)
        .bindings(&bindings)
        .build()
        .await
        .unwrap();
    // d1's upgrade to v2.0.0 fails, and only once the controller is down (held until then).
    env.patch_binding(
        &ns,
        &env.binding_name("d1"),
        json!({"metadata": {"annotations": {FAIL_VERSION_ANNOTATION: "v2.0.0", HOLD_ANNOTATION: "true"}}}),
    )
    .await
    .unwrap();
    let mut controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "onfail",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("dev", json!({"onFailure": "Revert"})), group("prod", json!({}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    env.wait_binding(&ns, &env.binding_name("d0"), WAIT, "d0 upgraded", |b| {
        b.last_applied_version() == "v2.0.0"
    })
    .await
    .unwrap();
    env.wait_binding(&ns, &env.binding_name("d1"), WAIT, "d1 started", |b| {
        b.spec_version() == "v2.0.0"
    })
    .await
    .unwrap();
    // The controller dies; Kratix fails d1 meanwhile; a new controller finds the failure.
    controller.kill().await;
    env.hold([&format!("{ns}/{}", env.binding_name("d1"))], false)
        .await
        .unwrap();
    env.wait_binding(&ns, &env.binding_name("d1"), WAIT, "d1 failed", |b| {
        b.failed_version() == Some("v2.0.0")
    })
    .await
    .unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let failed = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&failed), RunState::Failed);
    let revert = format!("{run}-revert");
    let ended = env.wait_ended(&revert).await.unwrap();
    // And once more: a restart after the revert finds nothing to create.
    drop(controller);
    let controller = env.start_controller(&[]).await.unwrap();
    env.settle_run(&controller, &run).await.unwrap();
    env.settle_run(&controller, &revert).await.unwrap();

    assert_eq!(run_state(&ended), RunState::Completed, "{:?}", ended.status);
    let reverts: Vec<String> = reverts_of(&env, &run).await.iter().map(|r| r.name_any()).collect();
    assert_eq!(
        reverts,
        std::slice::from_ref(&revert),
        "exactly one revert of the failed run"
    );
    let created = env
        .events_of(&run)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason, _)| reason == "RevertCreated")
        .count();
    assert_eq!(created, 1, "announced once");
    let r = env.runs().get(&revert).await.unwrap();
    assert_eq!(r.spec.revert_of.as_ref().map(|o| o.resources.as_str()), Some("all"));
    // d0 (upgraded) and d1 (failed: Kratix ran v1.0.0 again on the revert's request) are back;
    // prod never started and was never touched.
    for name in ["d0", "d1"] {
        let b = env.live_binding(&ns, name).await.unwrap();
        assert_eq!(
            (b.spec_version(), b.last_applied_version()),
            ("v1.0.0", "v1.0.0"),
            "{name}"
        );
        let ok = b.upgrade_condition().is_none_or(|c| c.status == "True");
        assert!(ok, "{name}: Kratix says it succeeded: {:?}", b.upgrade_condition());
        assert_eq!(b.annotation(UPGRADED_BY_ANNOTATION), Some(revert.as_str()), "{name}");
    }
    let p0 = env.live_binding(&ns, "p0").await.unwrap();
    assert_eq!(p0.annotation(UPGRADED_BY_ANNOTATION), None, "prod never started");
    assert_eq!(ended.status.as_ref().unwrap().completed_resources, 2);
    drop(controller);
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn a_revert_whose_target_revision_was_deleted_skips_that_resource() {
    let Built { mut env, ns, .. } = World::new("revert-gone", SIM)
        .versions(&["v0.9.0", "v1.0.0", "v2.0.0"], "v2.0.0")
        .bindings(&[("a1", "all")])
        .build()
        .await
        .unwrap();
    env.resource(&ns, "a0", &[("env", "all")], "v0.9.0").await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "gone",
            json!({"upgradePath": {"from": ["v0.9.0", "v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [group("all", json!({}))]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    assert_eq!(run_state(&env.wait_ended(&run).await.unwrap()), RunState::Completed);
    env.delete_revision("v0.9.0").await.unwrap();

    let snapshot_ns = env.snapshot_namespace();
    let out = run_plugin(None, &["revert", &run, "--snapshot-namespace", &snapshot_ns])
        .await
        .unwrap();
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    let revert = out.stdout.trim().to_string();
    let ended = env.wait_ended(&revert).await.unwrap();
    let s = ended.status.as_ref().unwrap();
    assert_eq!(run_state(&ended), RunState::Completed);
    assert_eq!(
        (s.rollout_groups[0].succeeded, s.rollout_groups[0].skipped),
        (1, 1),
        "a1 back, a0 skipped"
    );
    let c = find_condition(&s.conditions, reasons::TARGET_REVISION_READY).unwrap();
    assert_eq!(c.status, ConditionStatus::False);
    assert_eq!(
        c.message,
        format!(
            "PromiseRevision for promise \"{}\" version(s) v0.9.0 not found: their resources are skipped",
            env.promise
        )
    );
    let skipped: Vec<String> = env
        .events_of(&revert)
        .await
        .unwrap()
        .into_iter()
        .filter(|(_, reason, _)| reason == "ResourceSkipped")
        .map(|(_, _, note)| note)
        .collect();
    assert_eq!(
        skipped,
        [format!("Resource {ns}/a0 skipped: revision v0.9.0 no longer exists")]
    );
    assert_eq!(
        applied(&env, &ns, "a0").await,
        ("v2.0.0".to_string(), "v2.0.0".to_string()),
        "a0 left at v2.0.0"
    );
    assert_eq!(
        applied(&env, &ns, "a1").await,
        ("v1.0.0".to_string(), "v1.0.0".to_string())
    );
    // Someone changes the first run's snapshot since: reverting it is refused, naming why.
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(env.client.clone(), &snapshot_ns);
    let shard = format!("{run}-resource-snapshot");
    cms.patch(
        &shard,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(json!({"data": {"resources": "{\"groups\":[]}"}})),
    )
    .await
    .unwrap();
    let refused = run_plugin(
        None,
        &[
            "revert",
            &run,
            "--resources",
            "all",
            "--snapshot-namespace",
            &snapshot_ns,
        ],
    )
    .await
    .unwrap();
    assert_eq!(refused.code, Some(4), "{}", refused.stderr);
    assert!(
        refused.stderr.contains(&format!("cannot revert upgraderun/{run}"))
            && refused.stderr.contains(&format!(
                "snapshot ConfigMap {shard} does not match the digest recorded at"
            )),
        "{}",
        refused.stderr
    );
    drop(controller);
    env.teardown().await.unwrap();
}
