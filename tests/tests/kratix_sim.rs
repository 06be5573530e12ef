//! kratix-sim against the real control plane: it must behave as Kratix does (spec §2, §12).
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use kube::ResourceExt;
use serde_json::json;
use upgradeplan::api::kratix::{
    ResourceBinding, MANUAL_RECONCILIATION_LABEL, UPGRADE_COMPLETE, UPGRADE_FAILED, UPGRADE_IN_PROGRESS,
};
use upgradeplan_e2e::harness::{Built, World};
use upgradeplan_e2e::sim::{DELAY_ANNOTATION, FAILURE_MESSAGE, FAIL_VERSION_ANNOTATION};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(30);

fn reason(b: &ResourceBinding) -> &str {
    b.upgrade_condition().map(|c| c.reason).unwrap_or("")
}

fn completed(version: &'static str) -> impl Fn(&ResourceBinding) -> bool {
    move |b| b.last_applied_version() == version && reason(b) == UPGRADE_COMPLETE
}

fn failed(b: &ResourceBinding) -> bool {
    reason(b) == UPGRADE_FAILED
}

#[tokio::test]
async fn upgrade_succeeds_through_in_progress() {
    let Built { env, ns, .. } = World::new("sim-ok", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .build()
        .await
        .unwrap();
    let b = env.binding(&ns, "cache", &[], "v1.0.0", Some("v1.0.0")).await.unwrap();
    let name = b.metadata.name.clone().unwrap();
    env.patch_binding(
        &ns,
        &name,
        json!({"metadata": {"annotations": {DELAY_ANNOTATION: "1s"}}, "spec": {"version": "v2.0.0"}}),
    )
    .await
    .unwrap();
    let in_progress = env
        .wait_binding(&ns, &name, WAIT, "UpgradeInProgress", |b| {
            reason(b) == UPGRADE_IN_PROGRESS
        })
        .await
        .unwrap();
    assert_eq!(in_progress.upgrade_condition().unwrap().status, "Unknown");
    assert_eq!(
        in_progress.last_applied_version(),
        "v1.0.0",
        "not applied while in progress"
    );
    let done = env
        .wait_binding(&ns, &name, WAIT, "upgrade to v2.0.0", completed("v2.0.0"))
        .await
        .unwrap();
    assert_eq!(done.upgrade_condition().unwrap().status, "True");
    assert_eq!(done.failed_version(), None);
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn failure_is_reported_and_never_retried_until_asked() {
    let Built { env, ns, .. } = World::new("sim-fail", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .build()
        .await
        .unwrap();
    let b = env.binding(&ns, "db", &[], "v1.0.0", Some("v1.0.0")).await.unwrap();
    let name = b.metadata.name.clone().unwrap();
    env.patch_binding(
        &ns,
        &name,
        json!({"metadata": {"annotations": {FAIL_VERSION_ANNOTATION: "v2.0.0"}}, "spec": {"version": "v2.0.0"}}),
    )
    .await
    .unwrap();
    let f = env
        .wait_binding(&ns, &name, WAIT, "UpgradeFailed", failed)
        .await
        .unwrap();
    let cond = f.upgrade_condition().unwrap();
    assert_eq!((cond.status, cond.message), ("False", FAILURE_MESSAGE));
    assert_eq!(f.failed_version(), Some("v2.0.0"));
    assert_eq!(
        f.last_applied_version(),
        "v1.0.0",
        "a failure leaves lastAppliedVersion alone"
    );

    // Kratix never retries on its own: an unrelated change must not restart the upgrade.
    env.patch_and_settle_binding(&ns, &name, json!({"metadata": {"annotations": {"touched": "yes"}}}))
        .await
        .unwrap();
    let still = env.bindings_api(&ns).get(&name).await.unwrap();
    assert_eq!(
        still.upgrade_condition().unwrap(),
        cond,
        "the failed upgrade was retried without the retry label"
    );

    // The retry label asks for another attempt; it is removed, and this time the workflow passes.
    env.patch_binding(
        &ns,
        &name,
        json!({"metadata": {"annotations": {FAIL_VERSION_ANNOTATION: null}, "labels": {MANUAL_RECONCILIATION_LABEL: "true"}}}),
    )
    .await
    .unwrap();
    let done = env
        .wait_binding(&ns, &name, WAIT, "retry to succeed", completed("v2.0.0"))
        .await
        .unwrap();
    assert!(
        !done
            .metadata
            .labels
            .as_ref()
            .unwrap()
            .contains_key(MANUAL_RECONCILIATION_LABEL),
        "retry label removed"
    );
    assert_eq!(done.failed_version(), None);
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn missing_revision_keeps_the_binding_in_progress() {
    let Built { env, ns, .. } = World::new("sim-norev", SIM)
        .versions(&["v1.0.0"], "v1.0.0")
        .build()
        .await
        .unwrap();
    let b = env.binding(&ns, "queue", &[], "v1.0.0", Some("v1.0.0")).await.unwrap();
    let name = b.metadata.name.clone().unwrap();
    env.patch_binding(&ns, &name, json!({"spec": {"version": "v3.0.0"}}))
        .await
        .unwrap();
    env.wait_binding(&ns, &name, WAIT, "in progress, waiting for the revision", |b| {
        reason(b) == UPGRADE_IN_PROGRESS
    })
    .await
    .unwrap();
    // Reconciled again after its own write: it still waits.
    env.patch_and_settle_binding(&ns, &name, json!({"metadata": {"annotations": {"touched": "yes"}}}))
        .await
        .unwrap();
    let waiting = env.bindings_api(&ns).get(&name).await.unwrap();
    assert_eq!(waiting.last_applied_version(), "v1.0.0");
    assert_eq!(reason(&waiting), UPGRADE_IN_PROGRESS);
    // The revision appears: the revision watch wakes the binding and the upgrade completes.
    env.create_revision("v3.0.0", false).await.unwrap();
    env.wait_binding(
        &ns,
        &name,
        WAIT,
        "upgrade once the revision exists",
        completed("v3.0.0"),
    )
    .await
    .unwrap();
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn delay_annotation_holds_the_upgrade_in_progress() {
    let Built { env, ns, .. } = World::new("sim-delay", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .build()
        .await
        .unwrap();
    let b = env.binding(&ns, "slow", &[], "v1.0.0", Some("v1.0.0")).await.unwrap();
    let name = b.metadata.name.clone().unwrap();
    env.patch_binding(
        &ns,
        &name,
        json!({"metadata": {"annotations": {DELAY_ANNOTATION: "3s"}}, "spec": {"version": "v2.0.0"}}),
    )
    .await
    .unwrap();
    let started = env
        .wait_binding(&ns, &name, WAIT, "in progress", |b| reason(b) == UPGRADE_IN_PROGRESS)
        .await
        .unwrap();
    let done = env
        .wait_binding(&ns, &name, WAIT, "completion", completed("v2.0.0"))
        .await
        .unwrap();
    let t0 = started.upgrade_condition().unwrap().last_transition_time.unwrap();
    let t1 = done.upgrade_condition().unwrap().last_transition_time.unwrap();
    // Transition times have one-second resolution.
    assert!(
        t1 - t0 >= chrono::Duration::seconds(2),
        "completed {:?} after starting",
        t1 - t0
    );
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn floating_latest_binding_follows_the_latest_revision() {
    let Built { env, ns, .. } = World::new("sim-latest", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .build()
        .await
        .unwrap();
    let b = env
        .binding(&ns, "floating", &[], "latest", Some("v1.0.0"))
        .await
        .unwrap();
    let name = b.metadata.name.clone().unwrap();
    let done = env
        .wait_binding(&ns, &name, WAIT, "latest resolves to v2.0.0", completed("v2.0.0"))
        .await
        .unwrap();
    assert_eq!(done.spec.version, "latest", "the simulator never rewrites spec.version");
    env.create_revision("v3.0.0", false).await.unwrap();
    env.mark_latest("v3.0.0").await.unwrap();
    env.wait_binding(&ns, &name, WAIT, "latest moves to v3.0.0", completed("v3.0.0"))
        .await
        .unwrap();
    env.teardown().await.unwrap();
}

#[test]
fn help_documents_the_knobs() {
    let out = std::process::Command::new(SIM).arg("--help").output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--delay",
        "--promise",
        "kratix-sim/delay",
        "kratix-sim/fail-version",
        "kratix-sim/health",
        "kratix-sim/health-delay",
        "kratix-sim/health-records",
        "kratix-sim/hold",
        "kratix.io/manual-reconciliation",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}

/// Spec §13.2's test Kratix: after a successful upgrade a binding annotated
/// `kratix-sim/health` gets a HealthRecord saying that state, as Kratix's records do (no
/// version; `lastRun` the check's time), no sooner than `kratix-sim/health-delay` after its
/// success; `kratix-sim/health-records: 2` gives it a second, healthy record; a changed
/// annotation rewrites it; a binding without the annotation, or whose upgrade failed, gets none.
#[tokio::test]
async fn health_records_follow_successful_upgrades() {
    use upgradeplan::api::kratix::HealthRecord;
    use upgradeplan_e2e::sim::{HEALTH_ANNOTATION, HEALTH_DELAY_ANNOTATION, HEALTH_RECORDS_ANNOTATION};
    let Built { env, ns, .. } = World::new("sim-health", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .build()
        .await
        .unwrap();
    let records: kube::Api<HealthRecord> = kube::Api::namespaced(env.client.clone(), &ns);
    let upgrade = |name: &'static str, annotations: serde_json::Value| {
        let (env, ns) = (&env, ns.clone());
        async move {
            let b = env.binding(&ns, name, &[], "v1.0.0", Some("v1.0.0")).await.unwrap();
            let binding = b.metadata.name.clone().unwrap();
            env.patch_binding(
                &ns,
                &binding,
                json!({"metadata": {"annotations": annotations}, "spec": {"version": "v2.0.0"}}),
            )
            .await
            .unwrap();
            binding
        }
    };
    let healthy = upgrade("healthy", json!({HEALTH_ANNOTATION: "healthy"})).await;
    let delayed = upgrade(
        "delayed",
        json!({HEALTH_ANNOTATION: "unhealthy", HEALTH_DELAY_ANNOTATION: "3s"}),
    )
    .await;
    let silent = upgrade("silent", json!({})).await;
    let several = upgrade(
        "several",
        json!({HEALTH_ANNOTATION: "unhealthy", HEALTH_RECORDS_ANNOTATION: "2"}),
    )
    .await;
    let broken = upgrade(
        "broken",
        json!({HEALTH_ANNOTATION: "healthy", FAIL_VERSION_ANNOTATION: "v2.0.0"}),
    )
    .await;

    let wait_record = |name: String, state: &'static str| {
        let records = records.clone();
        async move {
            for _ in 0..100 {
                if let Some(r) = records.get_opt(&name).await.unwrap() {
                    if r.data.state == state {
                        return r;
                    }
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            panic!("no HealthRecord {name} saying {state}");
        }
    };
    let r = wait_record(healthy.clone(), "healthy").await;
    assert_eq!(r.data.promise_ref.name, env.promise);
    assert_eq!(
        (
            r.data.resource_ref.name.as_str(),
            r.data.resource_ref.namespace.as_str()
        ),
        ("healthy", ns.as_str())
    );
    let done = env
        .wait_binding(&ns, &delayed, WAIT, "upgraded", completed("v2.0.0"))
        .await
        .unwrap();
    let succeeded = done.upgrade_condition().unwrap().last_transition_time.unwrap();
    let r = wait_record(delayed.clone(), "unhealthy").await;
    let last_run = chrono::DateTime::from_timestamp(r.data.last_run.unwrap(), 0).unwrap();
    assert!(
        last_run >= succeeded + chrono::Duration::seconds(3),
        "reported at {last_run}, 3 s after the success at {succeeded}"
    );
    // Two health checks of one resource that disagree.
    wait_record(several.clone(), "unhealthy").await;
    wait_record(format!("{several}-2"), "healthy").await;
    // A changed annotation rewrites the record.
    env.patch_binding(
        &ns,
        &healthy,
        json!({"metadata": {"annotations": {HEALTH_ANNOTATION: "degraded"}}}),
    )
    .await
    .unwrap();
    wait_record(healthy, "degraded").await;
    // No annotation, or a failed upgrade: no record.
    env.wait_binding(&ns, &broken, WAIT, "failed", failed).await.unwrap();
    env.wait_binding(&ns, &silent, WAIT, "upgraded", completed("v2.0.0"))
        .await
        .unwrap();
    // Reconciled once more after their ends: still no record.
    for b in [&silent, &broken] {
        env.patch_and_settle_binding(&ns, b, json!({"metadata": {"annotations": {"touched": "yes"}}}))
            .await
            .unwrap();
    }
    assert!(records.get_opt(&silent).await.unwrap().is_none());
    assert!(records.get_opt(&broken).await.unwrap().is_none());
    env.teardown().await.unwrap();
}

/// Kratix's PromiseRevision controller (spec §2): every revision carries Kratix's cleanup
/// finalizer, and deleting one deletes the resources at its version — not those at another, not
/// a floating one — before the revision goes.
#[tokio::test]
async fn deleting_a_revision_deletes_the_resources_at_its_version() {
    use upgradeplan::api::kratix::PromiseRevision;
    let Built { env, ns, .. } = World::new("sim-revdel", SIM)
        .sim_args(&["--revision-cleanup"])
        .build()
        .await
        .unwrap();
    for (name, version, applied) in [
        ("old", "v1.0.0", "v1.0.0"),
        ("new", "v2.0.0", "v2.0.0"),
        ("floating", "latest", "v2.0.0"),
    ] {
        env.binding(&ns, name, &[], version, Some(applied)).await.unwrap();
    }
    env.wait_revision_finalizer("v1.0.0", WAIT).await.unwrap();
    let revisions: kube::Api<PromiseRevision> = kube::Api::all(env.client.clone());
    let v1 = env.revision_name("v1.0.0");
    env.delete_revision("v1.0.0").await.unwrap();
    // The finalizer goes only once the resources at v1.0.0 are gone: then the simulator is done.
    upgradeplan_e2e::harness::wait_gone(revisions, &v1, WAIT).await.unwrap();
    let remaining: Vec<String> = env
        .bindings_api(&ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any().trim_end_matches(&format!("-{}", env.promise)).to_string())
        .collect();
    assert_eq!(remaining, ["floating", "new"]);
    env.teardown().await.unwrap();
}
