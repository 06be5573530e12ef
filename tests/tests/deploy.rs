//! deploy/: the RBAC is least-privilege (static checks) and sufficient (the controller, running
//! with the shipped ServiceAccount's token under the shipped RBAC, completes a multi-group run
//! with a failure, a cancel and a scheduled trigger); the kustomize base applies server-side.
#![allow(clippy::unwrap_used)]

use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, PostParams};
use serde_json::{json, Value};
use upgradeplan::api::{RunResult, RunState};
use upgradeplan_e2e::harness::{impersonating_kubeconfig, repo_root, run_plugin, wait_gone, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(120);

fn docs(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo_root().join(path)).unwrap();
    text.split("\n---")
        .filter(|d| d.contains("kind:"))
        .map(|d| serde_saphyr::from_str(d).unwrap())
        .collect()
}

#[test]
fn the_cluster_role_has_no_wildcards_and_no_secrets() {
    let rbac = docs("deploy/core/rbac.yaml");
    let roles: Vec<&Value> = rbac
        .iter()
        .filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role")
        .collect();
    assert_eq!(roles.len(), 5);
    for role in roles {
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs", "resourceNames"] {
                for v in rule[field].as_array().into_iter().flatten() {
                    assert_ne!(
                        v.as_str().unwrap(),
                        "*",
                        "wildcard in {}: {rule}",
                        role["metadata"]["name"]
                    );
                }
            }
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert!(
                !resources.contains(&"secrets"),
                "secrets in {}",
                role["metadata"]["name"]
            );
            let verbs: Vec<&str> = rule["verbs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_str().unwrap())
                .collect();
            assert!(
                !verbs.contains(&"escalate") && !verbs.contains(&"bind") && !verbs.contains(&"impersonate"),
                "{rule}"
            );
        }
    }
    // The metrics reader may get /metrics and nothing else.
    let reader = rbac
        .iter()
        .find(|d| d["metadata"]["name"] == "upgradeplan-metrics-reader")
        .unwrap();
    assert_eq!(
        reader["rules"],
        json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
    );
    // Namespaced access stays namespaced: configmaps, events and leases are not cluster-wide.
    let cluster_role = rbac.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let cluster_resources: Vec<String> = cluster_role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            r["resources"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
        })
        .collect();
    for r in ["configmaps", "events", "leases"] {
        assert!(
            !cluster_resources.contains(&r.to_string()),
            "{r} must be granted in its namespace only"
        );
    }
    // The Deployment is hardened as the issue asks.
    let deployment = docs("deploy/core/deployment.yaml")
        .into_iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    // Two replicas on one node are one failure away from none: spread, softly (a one-node
    // cluster still schedules both).
    let spread = pod["topologySpreadConstraints"].as_array().unwrap();
    assert!(
        spread.iter().any(|c| c["topologyKey"] == "kubernetes.io/hostname"
            && c["whenUnsatisfiable"] == "ScheduleAnyway"
            && c["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]),
        "{spread:?}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    let c = &pod["containers"][0];
    assert!(c["args"].as_array().unwrap().contains(&json!("--leader-elect")));
    assert!(c["args"].as_array().unwrap().contains(&json!("--metrics-secure")));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["resources"]["requests"]["memory"].is_string() && c["resources"]["limits"]["memory"].is_string());
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
}

/// A memory or CPU quantity as a number of MiB or millicores (the suffixes deploy/ uses).
fn quantity(q: &Value) -> f64 {
    let q = q.as_str().unwrap_or_else(|| panic!("not a quantity: {q}"));
    let (number, scale) = match q {
        _ if q.ends_with("Gi") => (&q[..q.len() - 2], 1024.0),
        _ if q.ends_with("Mi") => (&q[..q.len() - 2], 1.0),
        _ if q.ends_with('m') => (&q[..q.len() - 1], 1.0),
        _ => (q, 1000.0),
    };
    number.parse::<f64>().unwrap_or_else(|_| panic!("not a quantity: {q}")) * scale
}

/// The controller's container as `kubectl kustomize <dir>` renders it.
fn rendered_container(dir: &str) -> Value {
    let (ok, out) = kubectl(&["kustomize", repo_root().join(dir).to_str().unwrap()], None);
    assert!(ok, "kubectl kustomize {dir}: {out}");
    let deployment: Value = out
        .split("\n---")
        .map(|d| serde_saphyr::from_str::<Value>(d).unwrap())
        .find(|d| d["kind"] == "Deployment")
        .unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0].clone()
}

/// deploy/ requests what docs/performance.md measured 10,000 resources need, and the example
/// overlay what 100,000 need: the peak resident memory within the request, the limit with room
/// above it, and the average CPU of a contended budget within the CPU request.
#[test]
fn the_deployment_requests_what_10k_and_100k_resources_were_measured_to_need() {
    // (directory, peak resident MiB, average millicores) from docs/performance.md's bench-scale
    // runs: 50 plans of 200 (at 2024edd, Kubernetes 1.37) and of 2,000 resources, the worse of with
    // and without a budget.
    for (dir, peak_mib, cpu_millis) in [
        ("deploy", 45.3, 130.0),
        ("examples/overlays/100k-resources", 268.2, 220.0),
    ] {
        let resources = &rendered_container(dir)["resources"];
        let (request, limit) = (
            quantity(&resources["requests"]["memory"]),
            quantity(&resources["limits"]["memory"]),
        );
        assert!(
            request >= peak_mib,
            "{dir}: memory request {request} MiB below the measured peak {peak_mib}"
        );
        assert!(
            limit >= 1.5 * peak_mib,
            "{dir}: memory limit {limit} MiB leaves the peak {peak_mib} no room"
        );
        let cpu = quantity(&resources["requests"]["cpu"]);
        assert!(
            cpu >= cpu_millis,
            "{dir}: CPU request {cpu}m below the measured {cpu_millis}m"
        );
    }
}

fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// `kubectl kustomize deploy/`.
fn rendered() -> String {
    let (ok, out) = kubectl(&["kustomize", repo_root().join("deploy").to_str().unwrap()], None);
    assert!(ok, "{out}");
    out
}

async fn ensure_namespace(env: &TestEnv, name: &str) {
    let api: Api<Namespace> = Api::all(env.client.clone());
    let _ = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap(),
        )
        .await;
}

/// The user the shipped ServiceAccount authenticates as.
const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:upgradeplan-system:upgradeplan-controller";

/// `user`'s requests in the API server's audit log (tests/cluster.sh writes it): the response
/// code, and "verb resource[/subresource] namespace/name".
fn audited_requests(user: &str) -> Vec<(u16, String)> {
    let path = std::env::var("TESTENV_AUDIT_LOG")
        .expect("TESTENV_AUDIT_LOG is unset: start the control plane with this checkout's tests/cluster.sh");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete")
        .map(|e| {
            let o = &e["objectRef"];
            let resource = match o["subresource"].as_str() {
                Some(sub) => format!("{}/{sub}", o["resource"].as_str().unwrap_or_default()),
                None => o["resource"].as_str().unwrap_or_default().to_string(),
            };
            let code = e["responseStatus"]["code"].as_u64().unwrap_or_default() as u16;
            let at = format!(
                "{}/{}",
                o["namespace"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default()
            );
            (
                code,
                format!("{} {resource} {at}", e["verb"].as_str().unwrap_or_default()),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_shipped_rbac_is_sufficient_and_the_base_applies_server_side() {
    let mut env = TestEnv::new("deploy").await.unwrap();
    ensure_namespace(&env, "kratix-platform-system").await;
    // The operator's CRDs as released.
    let crds = std::fs::read_to_string(repo_root().join("tests/fixtures/prometheus-operator-crds.yaml")).unwrap();
    let (ok, out) = kubectl(&["apply", "--server-side", "-f", "-"], Some(&crds));
    assert!(ok, "{out}");
    kubectl(
        &[
            "wait",
            "--for",
            "condition=established",
            "crd/servicemonitors.monitoring.coreos.com",
            "crd/prometheusrules.monitoring.coreos.com",
        ],
        None,
    );
    // The README's install step, validated as kubectl validates by default (strict field
    // validation on the server: an unknown or duplicated field fails the apply).
    let manifests = rendered();
    let (ok, out) = kubectl(&["apply", "-f", "-"], Some(&manifests));
    assert!(ok, "kubectl apply -k deploy/: {out}");
    // No warning (a deprecated API version, an unknown field), but that the test's own
    // installation of the CRDs, by server-side apply, left no last-applied annotation.
    let warnings: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Warning") && !l.contains("kubectl.kubernetes.io/last-applied-configuration"))
        .collect();
    assert!(warnings.is_empty(), "kubectl apply -k deploy/ warned: {warnings:?}");
    let (ok, out) = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&manifests));
    assert!(ok, "server-side dry run: {out}");

    // The ServiceMonitor as the operator's own schema keeps it: nothing of it was pruned.
    let monitor = kubectl(
        &[
            "get",
            "servicemonitor",
            "-n",
            "upgradeplan-system",
            "upgradeplan-controller",
            "-o",
            "json",
        ],
        None,
    );
    let monitor: Value = serde_json::from_str(&monitor.1).unwrap_or_else(|e| panic!("{e}: {}", monitor.1));
    assert_eq!(
        monitor["spec"]["endpoints"][0]["authorization"],
        json!({"type": "Bearer", "credentials": {"name": "upgradeplan-metrics-scraper-token", "key": "token"}}),
        "{monitor}"
    );

    // A token of the shipped ServiceAccount (a TokenRequest, as the kubelet gets the pod's).
    let token = requested_token(&env, "upgradeplan-controller").await;
    let admin = kube::config::Kubeconfig::read().unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let kubeconfig = std::env::temp_dir().join(format!("{}-sa.kubeconfig", env.id));
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: {:?}, certificate-authority: {:?}}}}}]\nusers: [{{name: sa, user: {{token: {token:?}}}}}]\ncontexts: [{{name: sa, context: {{cluster: c, user: sa}}}}]\ncurrent-context: sa\n",
            cluster.server.unwrap(),
            cluster.certificate_authority.unwrap()
        ),
    )
    .unwrap();

    // A world, and the controller as the ServiceAccount, as deploy/ runs it.
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    for (name, group) in [("d0", "dev"), ("d1", "dev"), ("p0", "prod"), ("p1", "prod")] {
        env.resource(&ns, name, &[("env", group)], "v1.0.0").await.unwrap();
    }
    env.patch_binding(
        &ns,
        &env.binding_name("p1"),
        json!({"metadata": {"annotations": {"kratix-sim/fail-version": "v2.0.0"}}}),
    )
    .await
    .unwrap();
    let (controller, metrics) = env
        .start_secure_controller(&[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--snapshot-namespace",
            "kratix-platform-system",
            "--leader-elect",
            "--leader-election-namespace",
            "upgradeplan-system",
        ])
        .await
        .unwrap();
    let two_groups = json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [
        {"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}, "maxConcurrent": 1},
        {"name": "prod", "selectors": {"matchLabels": {"env": "prod"}}}]});
    let plan = env.create_plan("plan", two_groups.clone()).await.unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let done = env
        .wait_run(&run, WAIT, "terminal", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Failed, "{status:?}");
    assert_eq!(
        (status.rollout_groups[0].succeeded, status.rollout_groups[1].failed),
        (2, 1)
    );

    env.wait_plan(&plan, WAIT, "the failed run recorded as the last run", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.last_run.as_ref())
            .is_some_and(|l| l.name == run)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));

    // A cancel: a preview, then deleted (finalizer, snapshot deletion). A preview never resumed
    // does not write the plan's lastRun (spec §3.2): the failed run stays the last result.
    // Times have one-second resolution: a failure stamped in the run's creation second counts
    // for the run (spec: lastTransitionTime >= creation), so start the preview a second later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let preview = env.create_run(&format!("{plan}-2"), &plan, true).await.unwrap();
    env.wait_run(&preview, WAIT, "snapshot", |r| {
        r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
    })
    .await
    .unwrap();
    env.runs().delete(&preview, &Default::default()).await.unwrap();
    wait_gone(env.runs(), &preview, WAIT)
        .await
        .unwrap_or_else(|e| panic!("the finalizer was not released: {e}\n{}", controller.log_text()));
    let last = env.plans().get(&plan).await.unwrap().status.unwrap().last_run.unwrap();
    assert_eq!((last.name.as_str(), last.result), (run.as_str(), RunResult::Failed));

    // A scheduled trigger.
    let at = {
        use chrono::DurationRound;
        (chrono::Utc::now() + chrono::Duration::seconds(15))
            .duration_trunc(chrono::Duration::minutes(1))
            .unwrap()
            + chrono::Duration::minutes(1)
    };
    let mut spec = two_groups;
    spec["upgradeExecutionPolicy"] = json!({"executeAt": at.format("%Y-%m-%dT%H:%M").to_string()});
    spec["upgradePath"]["from"] = json!(["v9"]);
    let scheduled_plan = env.create_plan("sched", spec).await.unwrap();
    let scheduled = format!("{scheduled_plan}-{}", at.format("%Y%m%d-%H%M"));
    let r = env
        .wait_run(&scheduled, WAIT, "the scheduled run completes", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap();
    assert_eq!(r.status.unwrap().state, RunState::Completed);

    // --metrics-secure as deploy/ runs it: the ServiceAccount may review a reader's token.
    let exposition = metrics
        .scrape()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert!(exposition.contains("upgradeplan_runs_total"), "{exposition}");
    // ... and with the token the ServiceMonitor sends (the scraper ServiceAccount's Secret).
    let scraper = upgradeplan_e2e::harness::MetricsEndpoint {
        addr: metrics.addr.clone(),
        token: Some(shipped_token(&env, "upgradeplan-metrics-scraper").await),
        ca_file: metrics.ca_file.clone(),
    };
    let exposition = scraper
        .scrape()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    assert!(exposition.contains("upgradeplan_runs_total"), "{exposition}");

    // What the API server answered the ServiceAccount, from its audit log: nothing refused.
    let requests = audited_requests(SERVICE_ACCOUNT_USER);
    assert!(
        requests.len() > 10,
        "the audit log holds the controller's requests: {requests:?}"
    );
    let refused: Vec<&(u16, String)> = requests.iter().filter(|(code, _)| *code == 403).collect();
    assert!(refused.is_empty(), "the shipped RBAC refused: {refused:#?}");
    assert!(
        requests
            .iter()
            .any(|(code, r)| *code < 300 && r.contains(" leases upgradeplan-system/") && !r.starts_with("get")),
        "leader election works under the shipped Role: {requests:?}"
    );
    // Sizing: the controller's peak resident memory in this test.
    if let Some(pid) = controller.child.id() {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak = status.lines().find(|l| l.starts_with("VmHWM")).unwrap_or_default();
        eprintln!("upgradeplan-controller {peak}");
    }
    env.teardown().await.unwrap();
}

/// A token for `account` in upgradeplan-system, from the TokenRequest API.
async fn requested_token(env: &TestEnv, account: &str) -> String {
    use k8s_openapi::api::authentication::v1::TokenRequest;
    use k8s_openapi::api::core::v1::ServiceAccount;
    let accounts: Api<ServiceAccount> = Api::namespaced(env.client.clone(), "upgradeplan-system");
    let request: TokenRequest = serde_json::from_value(json!({"spec": {"expirationSeconds": 3600}})).unwrap();
    let issued = accounts
        .create_token_request(account, &PostParams::default(), &request)
        .await
        .unwrap();
    issued.status.unwrap().token
}

/// The token Kubernetes wrote into the `kubernetes.io/service-account-token` Secret deploy/
/// ships for `account` in upgradeplan-system (the scraper's: a Prometheus outside the cluster
/// reads it; Kubernetes creates no such Secret by itself since 1.24).
async fn shipped_token(env: &TestEnv, account: &str) -> String {
    let secrets: Api<Secret> = Api::namespaced(env.client.clone(), "upgradeplan-system");
    for _ in 0..100 {
        let list = secrets.list(&Default::default()).await.unwrap();
        let token = list
            .items
            .into_iter()
            .find(|s| {
                s.type_.as_deref() == Some("kubernetes.io/service-account-token")
                    && s.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("kubernetes.io/service-account.name"))
                        .map(String::as_str)
                        == Some(account)
            })
            .and_then(|s| s.data?.get("token").map(|t| String::from_utf8_lossy(&t.0).to_string()));
        if let Some(token) = token {
            return token;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("no token Secret for the ServiceAccount {account}")
}

/// Applies deploy/core/user-roles.yaml.
async fn apply_user_roles(env: &TestEnv) {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    use kube::api::{Patch, PatchParams};
    let roles: Api<ClusterRole> = Api::all(env.client.clone());
    for role in docs("deploy/core/user-roles.yaml") {
        let name = role["metadata"]["name"].as_str().unwrap().to_string();
        roles
            .patch(
                &name,
                &PatchParams::apply("upgradeplan-tests").force(),
                &Patch::Apply(role),
            )
            .await
            .unwrap();
    }
}

/// Spec §13.4: a user bound only to `upgradeplan-approver` approves a rollout group with the
/// plugin, and may neither change plans nor cancel runs.
#[tokio::test]
async fn an_approver_approves_and_cannot_edit_plans_or_runs() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let env = TestEnv::new("approver").await.unwrap();
    apply_user_roles(&env).await;
    let user = format!("{}-approver", env.id);
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client.clone());
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "upgradeplan-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    bindings
        .create(&PostParams::default(), &serde_json::from_value(binding).unwrap())
        .await
        .unwrap();
    let approver = impersonating_kubeconfig(&user).unwrap();
    let plan = env
        .create_plan(
            "p",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "prod", "selectors": {"matchAll": true}, "requireApproval": true}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, true).await.unwrap();
    let mut approved = None;
    for _ in 0..60 {
        let out = run_plugin(Some(&approver), &["approve", &run, "prod", "--comment", "CHG-1"])
            .await
            .unwrap();
        if out.code == Some(0) {
            approved = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let approved = approved.expect("the approver could not approve");
    assert_eq!(
        approved.stdout,
        format!("upgradeapproval/{run}-prod created by {user}: rollout group \"prod\" of upgraderun/{run} may start\n"),
        "the approver is the user the kubeconfig impersonates, as the API server's SelfSubjectReview names it"
    );
    let approval: upgradeplan::api::UpgradeApproval =
        Api::all(env.client.clone()).get(&format!("{run}-prod")).await.unwrap();
    assert_eq!(
        (
            approval.spec.group.as_str(),
            approval.spec.comment.as_deref(),
            approval.spec.approver.clone()
        ),
        ("prod", Some("CHG-1"), Some(user.clone()))
    );
    // Plans are out of reach altogether; runs can be read, not changed.
    for (args, verb) in [
        (vec!["suspend", plan.as_str()], "upgradeplans"),
        (vec!["run", plan.as_str()], "upgradeplans"),
        (vec!["cancel", run.as_str(), "--yes"], "delete upgraderuns"),
        (vec!["resume", &format!("run/{run}")], "patch upgraderuns"),
    ] {
        let refused = run_plugin(Some(&approver), &args).await.unwrap();
        assert_eq!(refused.code, Some(4), "{args:?}: {}{}", refused.stdout, refused.stderr);
        assert!(
            refused.stderr.contains("forbidden") && refused.stderr.contains(verb),
            "{args:?}: {}",
            refused.stderr
        );
    }
    bindings.delete(&user, &Default::default()).await.unwrap();
    env.teardown().await.unwrap();
}

/// deploy/core/user-roles.yaml joins the built-in roles by aggregation: a user bound to `view`
/// reads plans and runs with the plugin but cannot start a run; one bound to `edit` can.
#[tokio::test]
async fn view_and_edit_users_get_plans_and_runs_through_aggregation() {
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    let env = TestEnv::new("users").await.unwrap();
    apply_user_roles(&env).await;
    let bindings: Api<ClusterRoleBinding> = Api::all(env.client.clone());
    let mut users = vec![];
    for builtin in ["view", "edit"] {
        let user = format!("{}-{builtin}er", env.id);
        let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": builtin},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
        bindings
            .create(&PostParams::default(), &serde_json::from_value(binding).unwrap())
            .await
            .unwrap();
        users.push((user.clone(), impersonating_kubeconfig(&user).unwrap()));
    }
    let plan = env
        .create_plan(
            "p",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, true).await.unwrap();
    let (viewer, editor) = (&users[0].1, &users[1].1);

    // The aggregation controller merges the rules into `view` and `edit` within moments.
    let mut got = None;
    for _ in 0..60 {
        let out = run_plugin(Some(viewer), &["get", &plan]).await.unwrap();
        if out.code == Some(0) {
            got = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let got = got.expect("a view user cannot get plans: upgradeplan-view did not join `view`");
    assert!(got.stdout.contains(&plan), "{}", got.stdout);
    let status = run_plugin(Some(viewer), &["status", &run]).await.unwrap();
    assert_eq!(status.code, Some(0), "{}{}", status.stdout, status.stderr);
    assert!(status.stdout.contains(&run), "{}", status.stdout);
    // The views that read Kratix's objects work for viewers too (issue 40 item 12: forbidden).
    for view in ["match", "forecast"] {
        let out = run_plugin(Some(viewer), &[view, &plan]).await.unwrap();
        assert_eq!(out.code, Some(0), "{view}: {}{}", out.stdout, out.stderr);
    }
    let refused = run_plugin(Some(viewer), &["run", &plan]).await.unwrap();
    assert_eq!(refused.code, Some(4), "{}{}", refused.stdout, refused.stderr);
    assert!(
        refused.stderr.contains("forbidden") && refused.stderr.contains("create upgraderuns"),
        "{}",
        refused.stderr
    );
    // kubectl's identity flags (spec §10): the admin's kubeconfig acting as the viewer reads and
    // is refused what the viewer is refused.
    let viewer_name = users[0].0.as_str();
    let as_viewer = run_plugin(None, &["--as", viewer_name, "get", &plan]).await.unwrap();
    assert_eq!(as_viewer.code, Some(0), "{}{}", as_viewer.stdout, as_viewer.stderr);
    let as_viewer = run_plugin(None, &["--as", viewer_name, "run", &plan]).await.unwrap();
    assert_eq!(as_viewer.code, Some(4), "{}{}", as_viewer.stdout, as_viewer.stderr);
    assert!(
        as_viewer.stderr.contains("forbidden")
            && as_viewer
                .stderr
                .contains(&format!("User \"{viewer_name}\" cannot create")),
        "{}",
        as_viewer.stderr
    );
    let groups_alone = run_plugin(None, &["--as-group", "system:masters", "get", &plan])
        .await
        .unwrap();
    assert_eq!(groups_alone.code, Some(4));
    assert!(
        groups_alone.stderr.contains("--as-group needs --as"),
        "{}",
        groups_alone.stderr
    );
    // --server, --certificate-authority and --token without a kubeconfig (an empty KUBECONFIG is
    // none): the test control plane's token user `no-rights` is who the API server sees.
    let admin = kube::config::Kubeconfig::read().unwrap();
    let cluster = admin.clusters[0].cluster.clone().unwrap();
    let ca = std::path::PathBuf::from(cluster.certificate_authority.unwrap());
    let tokens = std::fs::read_to_string(ca.with_file_name("tokens.csv")).unwrap();
    let token = tokens.split(',').next().unwrap();
    let by_token = run_plugin(
        Some(""),
        &[
            "--server",
            cluster.server.as_deref().unwrap(),
            "--certificate-authority",
            ca.to_str().unwrap(),
            "--token",
            token,
            "get",
            &plan,
        ],
    )
    .await
    .unwrap();
    assert_eq!(by_token.code, Some(4), "{}{}", by_token.stdout, by_token.stderr);
    assert!(
        by_token.stderr.contains("User \"no-rights\" cannot get"),
        "{}",
        by_token.stderr
    );
    let mut started = None;
    for _ in 0..60 {
        let out = run_plugin(Some(editor), &["run", &plan, "--preview"]).await.unwrap();
        if out.code == Some(0) {
            started = Some(out);
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let started = started.expect("an edit user cannot start a run: upgradeplan-edit did not join `edit`");
    assert!(
        started.stdout.trim().starts_with(&format!("{plan}-")),
        "{}",
        started.stdout
    );
    for (user, _) in &users {
        bindings.delete(user, &Default::default()).await.unwrap();
    }
    env.teardown().await.unwrap();
}

#[test]
fn the_user_roles_aggregate_and_view_only_reads() {
    let roles = docs("deploy/core/user-roles.yaml");
    let role = |name: &str| roles.iter().find(|r| r["metadata"]["name"] == name).unwrap();
    let view = role("upgradeplan-view");
    assert_eq!(
        view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"],
        "true"
    );
    for rule in view["rules"].as_array().unwrap() {
        for verb in rule["verbs"].as_array().unwrap() {
            assert!(["get", "list", "watch"].contains(&verb.as_str().unwrap()), "{rule}");
        }
    }
    let edit = role("upgradeplan-edit");
    for label in ["aggregate-to-edit", "aggregate-to-admin"] {
        assert_eq!(
            edit["metadata"]["labels"][format!("rbac.authorization.k8s.io/{label}")],
            "true"
        );
    }
    for r in &roles {
        assert!(!r.to_string().contains('*'), "no wildcards: {r}");
        assert!(r.to_string().contains("platform.syntasso.io"), "{r}");
    }
}
