//! Verified upgrades end to end (spec §13.2): the real control plane, kratix-sim writing Kratix
//! HealthRecords as each binding's annotations say, the controller verifying each upgrade.
#![allow(clippy::unwrap_used)]

use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use chrono::DateTime;
use kube::api::Api;
use serde_json::json;
use upgradeplan::api::kratix::HealthRecord;
use upgradeplan::api::{find_condition, reasons, ConditionStatus, RunState};
use upgradeplan_e2e::harness::{started_at, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

/// One at a time, so that each start shows when the slot before it was freed: a resource is
/// Verifying (and holds the slot) until its HealthRecords are conclusive — combined as Kratix
/// combines them, the worst state winning — or the check times out.
#[tokio::test]
async fn upgrades_count_only_once_their_health_records_say_healthy() {
    let mut env = TestEnv::new("verify").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let health = [
        (
            "h0",
            json!({"kratix-sim/health": "healthy", "kratix-sim/health-delay": "3s"}),
        ),
        // Two health checks that disagree: Kratix's worst state (unhealthy) decides.
        (
            "h1",
            json!({"kratix-sim/health": "unhealthy", "kratix-sim/health-records": "2"}),
        ),
        ("h2", json!({})), // never reports
    ];
    for (name, annotations) in &health {
        env.resource(&ns, name, &[("env", "dev")], "v1.0.0").await.unwrap();
        env.patch_binding(
            &ns,
            &env.binding_name(name),
            json!({"metadata": {"annotations": annotations}}),
        )
        .await
        .unwrap();
    }
    env.resource(&ns, "p0", &[("env", "prod")], "v1.0.0").await.unwrap();
    let plan = env
        .create_plan(
            "verified",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [
                       {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1,
                        "maxFailures": 2, "healthCheck": {"timeout": "6s"}},
                       {"name": "prod", "selectors": {"matchLabels": {"env": "prod"}}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();

    // h0 is upgraded and waits for its record (3 s): Verifying, in flight, nothing else starts.
    let verifying = env
        .wait_run(&run, WAIT, "h0 verifying", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.rollout_groups.first().is_some_and(|g| g.verifying == 1))
        })
        .await
        .unwrap();
    assert_eq!(verifying.status.unwrap().rollout_groups[0].succeeded, 0);

    let done = env
        .wait_run(&run, WAIT, "finished", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap();
    let status = done.status.clone().unwrap();
    assert_eq!(status.state, RunState::Completed, "{}", controller.log_text());
    let c = find_condition(&status.conditions, reasons::RUN_SUCCEEDED).unwrap();
    assert_eq!(
        (c.status, c.reason.as_str(), c.message.as_str()),
        (
            ConditionStatus::True,
            "RunCompletedWithFailures",
            "2/4 resources upgraded to v2.0.0; 2 failed within the failure budget"
        )
    );
    let dev = &status.rollout_groups[0];
    assert_eq!((dev.succeeded, dev.failed, dev.verifying), (1, 2, 0));

    let bindings = env.bindings_api(&ns);
    let get = |name: &'static str| {
        let (bindings, binding) = (bindings.clone(), env.binding_name(name));
        async move { bindings.get(&binding).await.unwrap() }
    };
    let records: Api<HealthRecord> = Api::namespaced(env.client.clone(), &ns);
    let last_run = |r: HealthRecord| DateTime::from_timestamp(r.data.last_run.unwrap(), 0).unwrap();
    let h0_healthy = last_run(records.get(&env.binding_name("h0")).await.unwrap());
    let h1_unhealthy = last_run(records.get(&env.binding_name("h1")).await.unwrap());
    let h1_second = records.get(&format!("{}-2", env.binding_name("h1"))).await.unwrap();
    assert_eq!(h1_second.data.state, "healthy", "h1's second check disagrees");
    let (h1, h2, p0) = (get("h1").await, get("h2").await, get("p0").await);
    // Each slot was freed only by the health verdict (records are to the second).
    assert!(started_at(&h1) >= h0_healthy, "h1 started before h0 was healthy");
    assert!(started_at(&h2) >= h1_unhealthy, "h2 started before h1 was reported");
    let h2_succeeded = h2.upgrade_condition().and_then(|c| c.last_transition_time).unwrap();
    assert!(
        started_at(&p0) >= h2_succeeded + chrono::Duration::seconds(6),
        "prod started before h2's health check timed out ({} < {h2_succeeded} + 6s)",
        started_at(&p0)
    );

    let events = env
        .events_when(&run, |(_, r, m)| {
            r == "ResourceUpgradeFailed" && m.contains("no health report")
        })
        .await
        .unwrap();
    let failed: Vec<&str> = events
        .iter()
        .filter(|(_, r, _)| r == "ResourceUpgradeFailed")
        .map(|(_, _, m)| m.as_str())
        .collect();
    for want in [
        format!(
            "health check reported unhealthy (HealthRecord {ns}/{})",
            env.binding_name("h1")
        ),
        "no health report within 6s".to_string(),
    ] {
        assert!(
            failed.iter().any(|m| m.ends_with(&want)),
            "no event ends with {want:?}: {failed:?}"
        );
    }
}

/// Issue 36 D3 (spec §14.2): on a cluster that does not serve HealthRecords, a run of a plan
/// with a `healthCheck` waits with `KindsServed=False/KindNotServed` and one Warning event that
/// says what to install — and deleting it cancels it (its finalizer is not held by the wait).
#[tokio::test]
async fn a_health_checked_run_on_a_cluster_without_health_records_waits_says_why_and_can_be_cancelled() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use upgradeplan_e2e::harness::{wait_gone, OwnControlPlane};
    // Its own control plane: the HealthRecord CRD is removed from it.
    let plane = OwnControlPlane::start("kinds").await.unwrap();
    let mut env = TestEnv::on("kinds", &plane).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let health_crd = "healthrecords.platform.kratix.io";
    crds.delete(health_crd, &Default::default()).await.unwrap();
    wait_gone(crds, health_crd, WAIT).await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    // kratix-sim makes r0 from its request, then this world has no Kratix: r0's upgrade starts
    // and stays in flight.
    env.start_sim(SIM, &[]).unwrap();
    env.resource(&ns, "r0", &[], "v1.0.0").await.unwrap();
    env.stop_sim().await;
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "checked", "selectors": {"matchAll": true}, "healthCheck": {"timeout": "5m"}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let message = format!(
        "the cluster does not serve {health_crd}, which group \"checked\" needs (healthCheck); install its CRD"
    );
    let waiting = env
        .wait_run(&run, WAIT, "KindsServed=False", |r| {
            r.status
                .as_ref()
                .and_then(|s| find_condition(&s.conditions, "KindsServed"))
                .is_some_and(|c| c.status == ConditionStatus::False)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let c = find_condition(&waiting.status.as_ref().unwrap().conditions, "KindsServed").unwrap();
    assert_eq!(
        (c.reason.as_str(), c.message.as_str()),
        ("KindNotServed", message.as_str())
    );
    let events = env
        .events_when(&run, |(t, r, _)| t == "Warning" && r == "KindNotServed")
        .await
        .unwrap();
    assert!(
        events.iter().any(|(_, r, m)| r == "KindNotServed" && *m == message),
        "{events:?}"
    );
    // Nothing was upgraded while it waited.
    let b = env.bindings_api(&ns).get(&env.binding_name("r0")).await.unwrap();
    assert_eq!(b.spec.version, "v1.0.0");

    env.runs().delete(&run, &Default::default()).await.unwrap();
    wait_gone(env.runs(), &run, WAIT)
        .await
        .unwrap_or_else(|e| panic!("the finalizer was held: {e}\n{}", controller.log_text()));
    env.teardown().await.unwrap();
}

/// Issue 67 (spec §14.2): a kind deleted under a running controller — Kratix downgraded
/// underneath it — is noticed as when the controller started without it: the health-checked run
/// waits with `KindsServed=False/KindNotServed`; installed again, the run goes on. (kube's watcher
/// retried its watch of the deleted kind for ever from the resourceVersion it had, so the run
/// stayed silent.)
#[tokio::test]
async fn a_kind_deleted_under_a_running_controller_holds_its_runs_until_it_returns() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use upgradeplan_e2e::harness::{install_crds_on, wait_gone, OwnControlPlane};
    let plane = OwnControlPlane::start("kinds-churn").await.unwrap();
    let mut env = TestEnv::on("kinds-churn", &plane).await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    // kratix-sim makes r0 from its request, then this world has no Kratix: r0's upgrade starts
    // and stays in flight.
    env.start_sim(SIM, &[]).unwrap();
    env.resource(&ns, "r0", &[], "v1.0.0").await.unwrap();
    env.stop_sim().await;
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "checked", "selectors": {"matchAll": true}, "healthCheck": {"timeout": "30m"}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    // No Kratix here: the upgrade stays in flight, and the run in progress.
    let kinds_served = |want: ConditionStatus| {
        move |r: &upgradeplan::api::UpgradeRun| {
            r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
                && r.status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, "KindsServed"))
                    .map_or(want == ConditionStatus::True, |c| c.status == want)
        }
    };
    env.wait_run(&run, WAIT, "in progress", kinds_served(ConditionStatus::True))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));

    let crds: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let health_crd = "healthrecords.platform.kratix.io";
    crds.delete(health_crd, &Default::default()).await.unwrap();
    wait_gone(crds, health_crd, WAIT).await.unwrap();
    let waiting = env
        .wait_run(&run, WAIT, "KindsServed=False", kinds_served(ConditionStatus::False))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let c = find_condition(&waiting.status.as_ref().unwrap().conditions, "KindsServed").unwrap();
    assert_eq!(c.reason, "KindNotServed", "{}", c.message);
    assert!(c.message.contains(health_crd), "{}", c.message);

    install_crds_on(&env.client).await.unwrap();
    let back = env
        .wait_run(&run, WAIT, "KindsServed=True", kinds_served(ConditionStatus::True))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let c = find_condition(&back.status.as_ref().unwrap().conditions, "KindsServed").unwrap();
    assert_eq!(c.reason, "KindsServed", "{}", c.message);
    env.teardown().await.unwrap();
}
