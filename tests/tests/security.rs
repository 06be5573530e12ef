//! Security (issue 24), end to end on the real control plane: the snapshot ConfigMaps that steer a
//! run are tamper-evident — an edit or a deletion mid-run fails the run, and nothing more is
//! patched; a secure /metrics serves only callers the API server authorizes.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use upgradeplan::api::{find_condition, reasons, RunState, UpgradeRun};
use upgradeplan::engine::snapshot::{SnapshotResource, SNAPSHOT_RESOURCES_KEY};
use upgradeplan_e2e::harness::{free_port, http_get, https_get, run_plugin, MetricsEndpoint, Prometheus, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);

fn succeeded_condition(r: &UpgradeRun) -> Option<(String, String)> {
    let c = find_condition(&r.status.as_ref()?.conditions, reasons::RUN_SUCCEEDED)?;
    Some((c.reason.clone(), c.message.clone()))
}

/// A run of four resources, one at a time (3 s each), in progress with its first upgrade
/// started: (env, namespace, run, its snapshot ConfigMap).
async fn running(
    prefix: &str,
) -> (
    TestEnv,
    upgradeplan_e2e::harness::ControllerProcess,
    String,
    String,
    String,
) {
    let mut env = TestEnv::new(prefix).await.unwrap();
    let bindings = [("d0", "dev"), ("d1", "dev"), ("d2", "dev"), ("d3", "dev")];
    let ns = env.upgrade_world(&bindings, SIM, &["--delay", "3s"]).await.unwrap();
    let controller = env.start_controller(&[]).await.unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let started = env
        .wait_run(&run, WAIT, "in progress with its snapshot", |r| {
            r.status.as_ref().is_some_and(|s| {
                s.state == RunState::InProgress && s.resource_list_refs.iter().all(|r| r.sha256.is_some())
            })
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let refs = &started.status.as_ref().unwrap().resource_list_refs;
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].sha256.as_ref().unwrap().len(), 64, "a SHA-256 in hex");
    let cm = refs[0].name.clone();
    (env, controller, ns, run, cm)
}

async fn failed(env: &TestEnv, run: &str, controller: &upgradeplan_e2e::harness::ControllerProcess) -> UpgradeRun {
    env.wait_run(run, WAIT, "failed", |r| {
        r.status.as_ref().is_some_and(|s| s.state.is_terminal())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()))
}

/// Someone who may write ConfigMaps in the snapshot namespace adds a binding of the Promise to a
/// running run's snapshot: the run fails with SnapshotTampered and the binding is never patched.
#[tokio::test]
async fn a_snapshot_edited_mid_run_fails_the_run_and_the_added_binding_is_never_patched() {
    let (env, controller, ns, run, cm) = running("tamper-edit").await;
    // A binding of the Promise outside the run (labelled for no group): the edit smuggles it in.
    env.resource(&ns, "intruder", &[("env", "none")], "v1.0.0")
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.snapshot_namespace());
    let current = cms.get(&cm).await.unwrap();
    let mut snapshot: serde_json::Value =
        serde_json::from_str(&current.data.as_ref().unwrap()[SNAPSHOT_RESOURCES_KEY]).unwrap();
    let intruder = SnapshotResource {
        namespace: ns.clone(),
        name: "intruder".into(),
        binding: env.binding_name("intruder"),
        last_applied_version: "v1.0.0".into(),
        spec_version: "v1.0.0".into(),
        target: None,
    };
    snapshot["groups"][0]["resources"]
        .as_array_mut()
        .unwrap()
        .insert(0, serde_json::to_value(&intruder).unwrap());
    cms.patch(
        &cm,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {SNAPSHOT_RESOURCES_KEY: snapshot.to_string()}})),
    )
    .await
    .unwrap();

    let done = failed(&env, &run, &controller).await;
    let status = done.status.as_ref().unwrap();
    assert_eq!(status.state, RunState::Failed);
    let recorded = upgradeplan::time::rfc3339(status.started_at.unwrap());
    assert_eq!(
        succeeded_condition(&done).unwrap(),
        (
            "SnapshotTampered".to_string(),
            format!("snapshot ConfigMap {cm} does not match the digest recorded at {recorded}")
        )
    );
    let events = env
        .events_when(&run, |(_, r, _)| r == "UpgradeRunFailed")
        .await
        .unwrap();
    assert!(
        events.iter().any(|(t, r, _)| t == "Warning" && r == "UpgradeRunFailed"),
        "{events:?}"
    );
    // Nothing more is patched: the intruder never, and no resource after the edit (checked once
    // the controller has reconciled the failed run again).
    env.settle_run(&controller, &run).await.unwrap();
    let b = env.bindings_api(&ns).get(&intruder.binding).await.unwrap();
    assert_eq!(
        b.spec.version, "v1.0.0",
        "the binding smuggled into the snapshot was patched"
    );
    let started: Vec<String> = env
        .bindings_api(&ns)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| b.spec.version == "v2.0.0")
        .filter_map(|b| b.metadata.name)
        .collect();
    assert!(started.len() <= 2, "upgrades went on after the edit: {started:?}");

    // The plugin says the same.
    let out = run_plugin(
        None,
        &["status", &run, "--snapshot-namespace", &env.snapshot_namespace()],
    )
    .await
    .unwrap();
    assert!(
        out.stdout.contains(&format!(
            "snapshot ConfigMap {cm} does not match the digest recorded at {recorded}"
        )),
        "{out:?}"
    );
    env.teardown().await.unwrap();
}

/// A deleted snapshot shard fails the run the same way.
#[tokio::test]
async fn a_snapshot_deleted_mid_run_fails_the_run() {
    let (env, controller, _ns, run, cm) = running("tamper-delete").await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), &env.snapshot_namespace());
    cms.delete(&cm, &DeleteParams::default()).await.unwrap();
    let done = failed(&env, &run, &controller).await;
    let (reason, message) = succeeded_condition(&done).unwrap();
    assert_eq!(reason, "SnapshotTampered", "{message}\n{}", controller.log_text());
    assert!(message.starts_with(&format!(
        "snapshot ConfigMap {cm} does not match the digest recorded at "
    )));
    env.teardown().await.unwrap();
}

/// A CA and a serving certificate it signed for 127.0.0.1, written as `tls.crt`/`tls.key` (the
/// layout of a mounted kubernetes.io/tls Secret) and `ca.crt` in `dir`.
fn certificates(dir: &std::path::Path) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    std::fs::create_dir_all(dir).unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "upgradeplan test CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
}

/// `--metrics-secure` with a certificate from files: a real Prometheus, verifying the certificate
/// and sending a ServiceAccount token bound to the shipped reader role, scrapes it; no token, a bad
/// token and a token without the role get 401, 401 and 403; health stays plain on its own port.
#[tokio::test]
async fn secure_metrics_serve_only_callers_the_api_server_authorizes() {
    let mut env = TestEnv::new("metrics-auth").await.unwrap();
    let dir = std::env::temp_dir().join(format!("{}-certs", env.id));
    certificates(&dir);
    let reader = env.metrics_reader().await.unwrap();
    let stranger = env.service_account_token("stranger", false).await.unwrap();
    let health = format!("127.0.0.1:{}", free_port().unwrap());
    let (controller, plain) = env
        .start_secure_controller(&["--metrics-cert-dir", dir.to_str().unwrap(), "--health-addr", &health])
        .await
        .unwrap();
    let metrics = MetricsEndpoint {
        ca_file: Some(dir.join("ca.crt")),
        ..plain
    };
    let rules = std::env::temp_dir().join(format!("{}-no-rules.yaml", env.id));
    std::fs::write(&rules, "groups: []\n").unwrap();
    let prom = Prometheus::start(&env.id, &[&metrics], &[], &rules).await.unwrap();

    // Prometheus scrapes it: TLS verified against the CA, the token reviewed and authorized.
    let mut up = vec![];
    for _ in 0..60 {
        up = prom
            .query("up{job=\"upgradeplan-controller\"} == 1 and on() upgradeplan_build_info")
            .await
            .unwrap();
        if !up.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        !up.is_empty(),
        "Prometheus could not scrape the secure endpoint: {}\n{}",
        prom.log(),
        controller.log_text()
    );

    let ca = Some(dir.join("ca.crt"));
    let get = |token: Option<String>| {
        let (addr, ca) = (metrics.addr.clone(), ca.clone());
        async move {
            https_get(&addr, "/metrics", token.as_deref(), ca.as_deref())
                .await
                .unwrap()
        }
    };
    let (code, body) = get(Some(reader.clone())).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("upgradeplan_build_info"), "{body}");
    assert_eq!(get(None).await.0, 401, "no token");
    assert_eq!(
        get(Some("not-a-token".into())).await.0,
        401,
        "a token the API server does not know"
    );
    assert_eq!(get(Some(stranger)).await.0, 403, "a valid token without get /metrics");
    // Plain HTTP on the secure port gets no metrics.
    let plain_http = http_get(&metrics.addr, "/metrics").await;
    assert!(
        plain_http.as_ref().map_or(true, |(code, _)| *code != 200),
        "{plain_http:?}"
    );
    // Health stays plain HTTP on its own port, and does not serve the metrics.
    assert_eq!(http_get(&health, "/healthz").await.unwrap().0, 200);
    assert_eq!(http_get(&health, "/readyz").await.unwrap().0, 200);
    assert_eq!(http_get(&health, "/metrics").await.unwrap().0, 404);
    drop(prom);
    env.teardown().await.unwrap();
}

/// Issue 40 item 8 (spec §10): a kubeconfig whose CA does not vouch for the API server is a TLS
/// refusal, said as such — not "cannot be reached".
#[tokio::test]
async fn a_wrong_certificate_authority_is_reported_as_untrusted_not_unreachable() {
    let env = TestEnv::new("wrong-ca").await.unwrap();
    let dir = std::env::temp_dir().join(format!("{}-other-ca", env.id));
    certificates(&dir); // another CA than the API server's
    let admin = std::env::var("KUBECONFIG").expect("KUBECONFIG of the test control plane");
    let text = std::fs::read_to_string(&admin).unwrap();
    let other_ca = dir.join("ca.crt");
    let swapped: String = text
        .lines()
        .map(|l| match l.split_once("certificate-authority:") {
            Some((indent, _)) => format!("{indent}certificate-authority: {}", other_ca.display()),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(swapped, text, "the test kubeconfig names its CA by file");
    let kubeconfig = dir.join("wrong-ca.kubeconfig");
    std::fs::write(&kubeconfig, swapped).unwrap();
    let o = upgradeplan_e2e::harness::run_plugin(Some(kubeconfig.to_str().unwrap()), &["get"])
        .await
        .unwrap();
    assert_eq!(o.code, Some(4), "{o:?}");
    assert!(
        o.stderr
            .contains("answered with a certificate this kubeconfig does not trust")
            && !o.stderr.contains("cannot be reached"),
        "{}",
        o.stderr
    );
    std::fs::remove_dir_all(&dir).ok();
    env.teardown().await.unwrap();
}
