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
    let b = env.resource(&ns, "cache", &[], "v1.0.0").await.unwrap();
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
    let b = env.resource(&ns, "db", &[], "v1.0.0").await.unwrap();
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
    let b = env.resource(&ns, "queue", &[], "v1.0.0").await.unwrap();
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
    let b = env.resource(&ns, "slow", &[], "v1.0.0").await.unwrap();
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
    let b = env.resource(&ns, "floating", &[], "latest").await.unwrap();
    let name = b.metadata.name.clone().unwrap();
    assert_eq!(b.last_applied_version(), "v2.0.0", "latest resolves to v2.0.0");
    assert!(
        b.upgrade_condition().is_none(),
        "deployed, not upgraded: no UpgradeSucceeded"
    );
    assert_eq!(b.spec.version, "latest", "the simulator never rewrites spec.version");
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
            let b = env.resource(&ns, name, &[], "v1.0.0").await.unwrap();
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
        let b = env.resource(&ns, name, &[], version).await.unwrap();
        assert_eq!(b.last_applied_version(), applied, "{name}");
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
        .map(|b| b.spec.resource_ref.name.clone())
        .collect();
    assert_eq!(remaining, ["floating", "new"]);
    env.teardown().await.unwrap();
}

/// Kratix's dynamic resource-request controller (`updateResourceBinding`): a request makes its
/// binding under Kratix's deterministic name, floating at `latest` by default; the binding's
/// whole label map follows the request's.
#[tokio::test]
async fn a_request_makes_its_binding_and_its_labels_follow_the_request() {
    let Built { env, ns, .. } = World::new("sim-rr", SIM).build().await.unwrap();
    let b = env.request(&ns, "cache", &[("env", "dev")], &[]).await.unwrap();
    assert_eq!(
        b.name_any(),
        upgradeplan_e2e::sim::requests::binding_name("cache", &env.promise)
    );
    assert!(
        b.name_any().starts_with(&format!("cache-{}-", env.promise)),
        "{}",
        b.name_any()
    );
    assert_eq!(b.spec.version, "latest", "Kratix's default strategy floats");
    assert_eq!(
        (
            b.spec.resource_ref.namespace.as_str(),
            b.spec.resource_ref.name.as_str()
        ),
        (ns.as_str(), "cache")
    );
    let labels = b.labels();
    assert_eq!(labels.get("env").map(String::as_str), Some("dev"));
    assert_eq!(labels.get("kratix.io/promise-name"), Some(&env.promise));
    assert_eq!(labels.get("kratix.io/resource-name").map(String::as_str), Some("cache"));
    let name = b.name_any();
    let deployed = env
        .wait_binding(&ns, &name, WAIT, "applied at the latest revision", |b| {
            b.last_applied_version() == "v2.0.0"
        })
        .await
        .unwrap();
    assert!(
        deployed.upgrade_condition().is_none(),
        "a new resource has no UpgradeSucceeded, as in Kratix"
    );
    let recorded = env.requests_api(&ns).get("cache").await.unwrap();
    assert_eq!(recorded.data["status"]["resourceBindingVersion"], "latest");

    // A label someone puts on the binding goes at the next reconcile of the request; the
    // request's labels are what a rollout group selects.
    env.patch_binding(&ns, &name, json!({"metadata": {"labels": {"stray": "x"}}}))
        .await
        .unwrap();
    env.requests_api(&ns)
        .patch(
            "cache",
            &Default::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {"env": "prod"}}})),
        )
        .await
        .unwrap();
    env.wait_binding(&ns, &name, WAIT, "labels rewritten from the request", |b| {
        b.labels().get("env").map(String::as_str) == Some("prod") && !b.labels().contains_key("stray")
    })
    .await
    .unwrap();
    env.teardown().await.unwrap();
}

/// Deleting a request runs its delete workflows while the binding stays, unmarked; then Kratix
/// deletes the binding. A request created again under the same name gets a binding of the same
/// name: another object (uid), at the version a new binding starts at.
#[tokio::test]
async fn a_deleted_request_keeps_its_binding_until_its_delete_workflows_end_and_a_new_one_gets_the_same_name() {
    let Built { env, ns, .. } = World::new("sim-rr-del", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v1.0.0")
        .sim_args(&["--binding-version", "pinned"])
        .build()
        .await
        .unwrap();
    let first = env
        .request(&ns, "cache", &[], &[(DELAY_ANNOTATION, "20s")])
        .await
        .unwrap();
    assert_eq!(first.spec.version, "v1.0.0", "pinned: the latest revision's version");
    let name = first.name_any();
    env.wait_binding(&ns, &name, WAIT, "deployed", |b| b.last_applied_version() == "v1.0.0")
        .await
        .unwrap();
    env.mark_latest("v2.0.0").await.unwrap();

    let requests = env.requests_api(&ns);
    requests.delete("cache", &Default::default()).await.unwrap();
    let terminating =
        upgradeplan_e2e::harness::wait_for(requests.clone(), "cache", WAIT, "the request terminating", |rr| {
            rr.metadata.deletion_timestamp.is_some()
        })
        .await
        .unwrap();
    assert!(
        terminating
            .finalizers()
            .iter()
            .any(|f| f == upgradeplan_e2e::sim::requests::DELETE_WORKFLOWS_FINALIZER),
        "its delete workflows still run: {:?}",
        terminating.finalizers()
    );
    let during = env.bindings_api(&ns).get(&name).await.unwrap();
    assert!(
        during.metadata.deletion_timestamp.is_none(),
        "the binding is not marked while they run"
    );
    // An upgrade asked meanwhile (a run sees an ordinary binding) does not run: Kratix reconciles
    // a request being deleted only to delete it.
    env.wait_request_deletion_seen(
        &ns,
        "cache",
        terminating.resource_version().as_deref().unwrap_or_default(),
    )
    .await
    .unwrap();
    env.patch_and_settle_binding(&ns, &name, json!({"spec": {"version": "v2.0.0"}}))
        .await
        .unwrap();
    let asked = env.bindings_api(&ns).get(&name).await.unwrap();
    assert_eq!(asked.last_applied_version(), "v1.0.0");
    assert!(
        asked.upgrade_condition().is_none(),
        "no workflow started: {:?}",
        asked.status
    );
    upgradeplan_e2e::harness::wait_gone(requests.clone(), "cache", Duration::from_secs(90))
        .await
        .unwrap();
    assert!(
        env.bindings_api(&ns).get_opt(&name).await.unwrap().is_none(),
        "the binding went with it"
    );

    let second = env.request(&ns, "cache", &[], &[]).await.unwrap();
    assert_eq!(second.name_any(), name, "the same binding name");
    assert_ne!(second.uid(), first.uid(), "another object");
    assert_eq!(
        second.spec.version, "v2.0.0",
        "a new binding starts at the version of now"
    );
    env.teardown().await.unwrap();
}

/// Kratix's PromiseRevision controller deletes the *requests* of the resources at a deleted
/// revision's version (their bindings go through the requests' deletion).
#[tokio::test]
async fn deleting_a_revision_deletes_the_requests_at_its_version() {
    let Built { env, ns, .. } = World::new("sim-rr-rev", SIM)
        .versions(&["v1.0.0", "v2.0.0"], "v1.0.0")
        .sim_args(&["--revision-cleanup", "--binding-version", "pinned"])
        .build()
        .await
        .unwrap();
    let old = env.request(&ns, "old", &[], &[]).await.unwrap();
    env.mark_latest("v2.0.0").await.unwrap();
    let new = env.request(&ns, "new", &[], &[]).await.unwrap();
    assert_eq!(
        (old.spec.version.as_str(), new.spec.version.as_str()),
        ("v1.0.0", "v2.0.0")
    );
    env.wait_revision_finalizer("v1.0.0", WAIT).await.unwrap();
    let revisions: kube::Api<upgradeplan::api::kratix::PromiseRevision> = kube::Api::all(env.client.clone());
    env.delete_revision("v1.0.0").await.unwrap();
    upgradeplan_e2e::harness::wait_gone(revisions, &env.revision_name("v1.0.0"), WAIT)
        .await
        .unwrap();
    let requests: Vec<String> = env
        .requests_api(&ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(requests, ["new"], "the request at v1.0.0 was deleted");
    let bindings: Vec<String> = env
        .bindings_api(&ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any())
        .collect();
    assert_eq!(bindings, [new.name_any()]);
    env.teardown().await.unwrap();
}
