//! The controller as users run it (issue 41): the image built from the repository's Dockerfile
//! (`make image`), deploy/ applied through `deploy/overlays/local-node` to a control plane with a
//! real node (`TESTENV_NODE=1 tests/cluster.sh start`: kube-scheduler, a kubelet on containerd, and a
//! private Docker Engine that builds the image). Run by `make node-test`, not by `make integration`: it
//! needs that node.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use upgradeplan::api::RunState;
use upgradeplan_e2e::harness::{run_state, MetricsEndpoint, Prometheus, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const NS: &str = "upgradeplan-system";
const LEASE: &str = "upgradeplan-controller";
/// The Deployment's own timings: leader election's lease (the controller's default), and the
/// liveness probe (every 10 s, 3 failures) plus the 30 s grace the kubelet gives before SIGKILL.
const LEASE_DURATION: Duration = Duration::from_secs(15);
const WAIT: Duration = Duration::from_secs(180);

fn kubectl(args: &[&str]) -> String {
    let o = Command::new("kubectl").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "kubectl {args:?}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `ctr` against the node's containerd, in the kubelet's namespace (CONTAINERD_ADDRESS and
/// CONTAINERD_NAMESPACE, which `tests/cluster.sh start` exports).
fn ctr(args: &[&str]) -> String {
    let o = Command::new("ctr").args(args).output().unwrap();
    assert!(
        o.status.success(),
        "ctr {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The containerd id of `pod`'s container `name`, as the kubelet reports it (`containerd://<id>`).
async fn container_id(client: &kube::Client, pod: &str, name: &str) -> String {
    let p = Api::<Pod>::namespaced(client.clone(), NS).get(pod).await.unwrap();
    let statuses = p.status.and_then(|s| s.container_statuses).unwrap_or_default();
    let id = statuses
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.container_id.clone())
        .unwrap_or_else(|| panic!("{pod} has no running container {name}: {statuses:?}"));
    id.strip_prefix("containerd://")
        .unwrap_or_else(|| panic!("{pod}'s container {name} is not containerd's: {id}"))
        .to_string()
}

/// The process id of a running container's task (`ctr tasks ls`: TASK PID STATUS).
fn task_pid(container: &str) -> String {
    let tasks = ctr(&["tasks", "ls"]);
    tasks
        .lines()
        .find_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.first() == Some(&container)).then(|| cols[1].to_string())
        })
        .unwrap_or_else(|| panic!("no task for container {container}:\n{tasks}"))
}

/// The controller's pods, by name, with whether each is Ready and its restarts.
async fn pods(client: &kube::Client) -> Vec<(String, bool, i32, String)> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NS);
    let listed = api
        .list(&ListParams::default().labels("app.kubernetes.io/name=upgradeplan-controller"))
        .await
        .unwrap();
    listed
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let status = p.status.unwrap_or_default();
            let ready = status
                .conditions
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            let restarts = status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .map(|c| c.restart_count)
                .sum();
            (
                p.metadata.name.unwrap_or_default(),
                ready,
                restarts,
                status.pod_ip.unwrap_or_default(),
            )
        })
        .collect()
}

/// What a failure needs to be understood after the fact (the control plane is gone by then):
/// each pod's events and the logs of its last exited container and of its current one.
fn why_not_ready(pods: &[(String, bool, i32, String)]) -> String {
    let run = |args: &[&str]| {
        Command::new("kubectl")
            .args(args)
            .output()
            .map(|o| {
                format!(
                    "{}{}",
                    String::from_utf8_lossy(&o.stdout),
                    String::from_utf8_lossy(&o.stderr)
                )
            })
            .unwrap_or_else(|e| format!("kubectl {args:?}: {e}"))
    };
    let tail = |text: String| {
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    };
    pods.iter()
        .map(|(name, ..)| {
            format!(
                "--- {name}: events\n{}\n--- {name}: previous container's log\n{}\n--- {name}: log\n{}",
                tail(run(&[
                    "get",
                    "events",
                    "-n",
                    NS,
                    "--field-selector",
                    &format!("involvedObject.name={name}")
                ])),
                tail(run(&["logs", "-n", NS, name, "--previous"])),
                tail(run(&["logs", "-n", NS, name])),
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

async fn both_ready(client: &kube::Client, within: Duration) -> Vec<(String, bool, i32, String)> {
    let deadline = Instant::now() + within;
    loop {
        let p = pods(client).await;
        if p.len() == 2 && p.iter().all(|(_, ready, _, _)| *ready) {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "the controller's pods are not both Ready: {p:?}\n{}",
            why_not_ready(&p)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The pod holding the Lease (its holder identity is `<pod name>_<suffix>`).
async fn leader(client: &kube::Client) -> Option<String> {
    let lease = Api::<Lease>::namespaced(client.clone(), NS)
        .get_opt(LEASE)
        .await
        .unwrap()?;
    let holder = lease.spec?.holder_identity?;
    Some(
        holder
            .rsplit_once('_')
            .map_or(holder.clone(), |(pod, _)| pod.to_string()),
    )
}

/// The pod that holds the Lease once one other than `not` does, and how long that took.
async fn leader_other_than(client: &kube::Client, not: &[&str], within: Duration) -> (String, Duration) {
    let t0 = Instant::now();
    loop {
        let holder = leader(client).await;
        if let Some(l) = holder.clone().filter(|l| !not.contains(&l.as_str())) {
            return (l, t0.elapsed());
        }
        assert!(
            t0.elapsed() < within,
            "the Lease is still held by {holder:?} after {within:?}, not by a pod other than {not:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn deploy_on_a_real_node_leads_upgrades_probes_and_hands_over() {
    assert!(
        std::env::var_os("CONTAINERD_ADDRESS").is_some(),
        "needs the test node: run `make node-test` (TESTENV_NODE=1 tests/cluster.sh start)"
    );
    let client = kube::Client::try_default().await.unwrap();
    // Kratix's namespace, where the snapshots go (deploy/: --snapshot-namespace, and a Role there),
    // as a Kratix installation has it.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt("kratix-platform-system").await.unwrap().is_none() {
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kratix-platform-system"}})).unwrap();
        namespaces.create(&PostParams::default(), &ns).await.unwrap();
    }
    // deploy/ as an operator applies it, through the local-node overlay (validated, as kubectl
    // does by default: the API server checks every field, CEL rules included).
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    kubectl(&["apply", "-k", &format!("{root}/deploy/overlays/local-node")]);

    // Both replicas Ready (the readiness probe on the health port), one leading.
    let running = both_ready(&client, WAIT).await;
    let names: Vec<&str> = running.iter().map(|(n, ..)| n.as_str()).collect();
    let (first, _) = leader_other_than(&client, &[], WAIT).await;
    assert!(names.contains(&first.as_str()), "{first} leads, not one of {names:?}");
    let d: Deployment = Api::namespaced(client.clone(), NS).get(LEASE).await.unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let sc = pod.security_context.unwrap();
    assert_eq!(
        (sc.run_as_user, sc.run_as_non_root),
        (Some(65532), Some(true)),
        "deploy/'s, unchanged"
    );
    // In the container (its OCI spec, as containerd runs it): the user, a read-only root.
    let container = container_id(&client, &first, "controller").await;
    let info: serde_json::Value = serde_json::from_str(&ctr(&["containers", "info", &container])).unwrap();
    let spec = &info["Spec"];
    assert_eq!(
        (
            &spec["process"]["user"]["uid"],
            &spec["process"]["user"]["gid"],
            &spec["root"]["readonly"]
        ),
        (&json!(65532), &json!(65532), &json!(true)),
        "{container}: {}",
        spec["process"]
    );
    // The ServiceAccount's token and CA, mounted where the client looks for them.
    let mounts = spec["mounts"].as_array().cloned().unwrap_or_default();
    assert!(
        mounts
            .iter()
            .any(|m| m["destination"] == "/var/run/secrets/kubernetes.io/serviceaccount"),
        "{container}: no ServiceAccount token mounted: {mounts:?}"
    );
    // Its logs, through the API server and the kubelet (the node's address, reachable).
    let logs = kubectl(&["logs", "-n", NS, &first]);
    assert!(logs.contains("upgradeplan-controller starting"), "{logs}");

    // A plan's run completes with the controller in pods.
    let mut env = TestEnv::new("node").await.unwrap();
    env.upgrade_world(&[("r0", "dev"), ("r1", "dev")], SIM, &[])
        .await
        .unwrap();
    let plan = env
        .create_plan(
            "plan",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env.wait_ended(&run).await.unwrap();
    assert_eq!(run_state(&done), RunState::Completed, "{:?}", done.status);

    // Prometheus scrapes each pod's secure /metrics with the reader role's token.
    let token = env.metrics_reader().await.unwrap();
    let endpoints: Vec<MetricsEndpoint> = running
        .iter()
        .map(|(_, _, _, ip)| MetricsEndpoint {
            addr: format!("{ip}:8443"),
            token: Some(token.clone()),
            ca_file: None,
        })
        .collect();
    let rules = std::env::temp_dir().join(format!("{}-no-rules.yaml", env.id));
    std::fs::write(&rules, "groups: []\n").unwrap();
    let prom = Prometheus::start(&env.id, &endpoints.iter().collect::<Vec<_>>(), &[], &rules)
        .await
        .unwrap();
    let t0 = Instant::now();
    loop {
        let up = prom.query("sum(up{job=\"upgradeplan-controller\"})").await.unwrap();
        if up.first().and_then(|s| s["value"][1].as_str()) == Some("2") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "both pods not scraped: {up:?}\n{}",
            prom.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let leading = prom
        .query("sum(leader_election_master_status{job=\"upgradeplan-controller\"})")
        .await
        .unwrap();
    assert_eq!(
        leading.first().and_then(|s| s["value"][1].as_str()),
        Some("1"),
        "one leader"
    );

    // Deleting the leader's pod hands over within the lease duration and a second (to the standby,
    // or to the pod that replaces the deleted one: whichever asks first once the Lease is free).
    Api::<Pod>::namespaced(client.clone(), NS)
        .delete(&first, &DeleteParams::default())
        .await
        .unwrap();
    let (second, took) = leader_other_than(&client, &[&first], LEASE_DURATION + Duration::from_secs(1)).await;
    println!("handover after deleting the leader's pod: {took:?} (to {second})");

    // A frozen leader fails its liveness probe and is restarted; the standby takes over.
    let running = both_ready(&client, WAIT).await;
    let restarts_before = running.iter().find(|(n, ..)| *n == second).unwrap().2;
    let container = container_id(&client, &second, "controller").await;
    let pid = task_pid(&container);
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let (third, took) = leader_other_than(&client, &[&second], WAIT).await;
    println!("takeover from a frozen leader: {took:?} (to {third})");
    assert!(running.iter().any(|(n, ..)| *n == third), "{third} is not the standby");
    let t0 = Instant::now();
    loop {
        let p = pods(&client).await;
        if p.iter()
            .any(|(n, _, restarts, _)| *n == second && *restarts > restarts_before)
        {
            println!("liveness restart of the frozen leader after {:?}", t0.elapsed());
            break;
        }
        assert!(t0.elapsed() < WAIT, "the frozen leader was not restarted: {p:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    both_ready(&client, WAIT).await;
}
