//! Test harness for the real control plane: one isolated world per test.
//!
//! Each test gets a unique id, its own namespaces and its own Promise name, so tests run in
//! parallel against one API server without seeing each other.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use upgradeplan::api::kratix::BindingFacts;

use anyhow::{anyhow, bail, Context};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;
use upgradeplan::api::kratix::{
    Promise, PromiseRevision, ResourceBinding, LATEST_REVISION_LABEL, PROMISE_NAME_LABEL, PROMISE_VERSION_LABEL,
    RESOURCE_NAME_LABEL,
};
use upgradeplan::api::{UpgradePlan, UpgradeRun};

/// The workspace root (for fixtures and generated CRDs).
/// The user tests/cluster.sh's admin kubeconfig authenticates as (its client certificate's CN),
/// as a SelfSubjectReview names it.
pub const ADMIN_USER: &str = "upgradeplan-testenv-admin";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A client for the control plane named by `KUBECONFIG`.
pub async fn client() -> anyhow::Result<Client> {
    if std::env::var_os("KUBECONFIG").is_none() {
        bail!("KUBECONFIG is not set: these tests need the real control plane. Run `make test`, or `eval \"$(tests/cluster.sh start)\"` first");
    }
    Client::try_default().await.context("connecting with KUBECONFIG")
}

static CRDS: OnceCell<()> = OnceCell::const_new();

/// Installs the Kratix fixture CRDs and our generated CRDs (once per test binary), and waits
/// until they are established.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    CRDS.get_or_try_init(|| install_crds_on(client)).await?;
    Ok(())
}

/// Installs the CRDs on the API server `client` talks to (every call; for a test's own control
/// plane).
pub async fn install_crds_on(client: &Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let root = repo_root();
    let mut files = vec![root.join("tests/fixtures/kratix-crds.yaml")];
    for (name, _) in upgradeplan::crd::crd_files() {
        files.push(root.join("deploy/crds").join(name));
    }
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        for doc in text.split("\n---").filter(|d| d.contains("kind:")) {
            let crd: CustomResourceDefinition =
                serde_saphyr::from_str(doc).with_context(|| format!("parsing a CRD in {}", file.display()))?;
            let name = crd.name_any();
            apply_crd(&api, crd)
                .await
                .with_context(|| format!("installing CRD {name}"))?;
            tokio::time::timeout(
                Duration::from_secs(30),
                await_condition(api.clone(), &name, conditions::is_crd_established()),
            )
            .await
            .with_context(|| format!("CRD {name} not established within 30 s"))??;
        }
    }
    Ok(())
}

/// Waits (watch-driven) until the object `name` no longer exists, for at most `timeout`.
pub async fn wait_gone<K>(api: Api<K>, name: &str, timeout: Duration) -> anyhow::Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    match tokio::time::timeout(timeout, await_condition(api, name, |o: Option<&K>| o.is_none())).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(anyhow!("watching {name}: {e}")),
        Err(_) => Err(anyhow!("{name} still exists after {timeout:?}")),
    }
}

/// Waits (watch-driven) until the object `name` satisfies `pred`, for at most `timeout`; on
/// timeout the error shows the object as it is.
pub async fn wait_for<K>(
    api: Api<K>,
    name: &str,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&K) -> bool,
) -> anyhow::Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug + Send + 'static,
{
    let cond = move |o: Option<&K>| o.is_some_and(&pred);
    match tokio::time::timeout(timeout, await_condition(api.clone(), name, cond)).await {
        Ok(Ok(Some(o))) => Ok(o),
        Ok(Ok(None)) => Err(anyhow!("{name} disappeared while waiting for: {what}")),
        Ok(Err(e)) => Err(anyhow!("watching {name}: {e}")),
        Err(_) => {
            let now = api
                .get_opt(name)
                .await?
                .map(|o| serde_json::to_string_pretty(&o).unwrap_or_default());
            Err(anyhow!(
                "timed out after {timeout:?} waiting for {name}: {what}; it is now {}",
                now.unwrap_or_else(|| "gone".into())
            ))
        }
    }
}

/// Creates or updates `crd` by server-side apply: concurrent test binaries install the same
/// CRDs, and apply needs no resourceVersion to win a race.
async fn apply_crd(api: &Api<CustomResourceDefinition>, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply("upgradeplan-tests").force(),
        &Patch::Apply(&crd),
    )
    .await?;
    Ok(())
}

/// How long [`TestEnv::events_when`] waits for an event: a loaded machine delays the recorder's
/// writes by seconds, never by a minute.
pub const EVENT_WAIT: Duration = Duration::from_secs(60);

/// How long [`TestEnv::wait_ended`] waits for a run to end.
pub const RUN_WAIT: Duration = Duration::from_secs(90);

/// How long [`TestEnv::settle_run`] waits for the controller's reconcile.
const NUDGE_WAIT: Duration = Duration::from_secs(60);

/// The annotation [`nudge`] changes.
const NUDGE_ANNOTATION: &str = "upgradeplan-e2e/nudge";

/// Changes an annotation of a cluster-scoped object that no one reads (its value counts up), so
/// that the controllers watching it reconcile it again; returns its new resourceVersion.
async fn nudge<K>(api: &Api<K>, name: &str) -> anyhow::Result<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let touched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {NUDGE_ANNOTATION: n.to_string()}}})),
        )
        .await
        .with_context(|| format!("annotating {name}"))?;
    touched
        .meta()
        .resource_version
        .clone()
        .ok_or_else(|| anyhow!("{name} came back without a resourceVersion"))
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// A unique, DNS-compatible id: `<prefix>-<pid><counter><nanos>` (≤ 40 characters).
pub fn unique_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix: String = prefix.chars().take(20).collect();
    format!("{prefix}-{:x}{n:x}{:x}", std::process::id() % 0xfff, nanos % 0xfffff)
}

/// The field manager the test bindings are created by, as Kratix creates them in a real cluster.
const KRATIX_FIELD_MANAGER: &str = "kratix";

/// One test's world: a Promise, its revisions, namespaces and bindings, and optionally kratix-sim.
pub struct TestEnv {
    pub client: Client,
    pub id: String,
    /// The unique Promise name of this test.
    pub promise: String,
    namespaces: Vec<String>,
    sim: Option<tokio::process::Child>,
    /// kratix-sim's log, once started.
    sim_log: Option<PathBuf>,
    controllers: u32,
    /// The control plane's kubeconfig for child processes, when it is not `KUBECONFIG`'s.
    kubeconfig: Option<PathBuf>,
    /// Set by [`TestEnv::teardown`]; otherwise dropping the world removes it (a failing test
    /// leaks nothing).
    torn_down: bool,
    /// A token allowed to read a secure /metrics, made once (see [`TestEnv::metrics_reader`]).
    metrics_reader: Option<String>,
}

/// A controller process started by a test; killed when dropped.
pub struct ControllerProcess {
    pub child: tokio::process::Child,
    pub log: PathBuf,
    /// The `POD_NAME` it was started with: its leader-election identity begins `<pod name>_`.
    pub pod_name: String,
    /// Started under UPGRADEPLAN_CONTROLLER_PREFIX, in a process group of its own (led by
    /// `child`, the tool): signals go to the controller in that group.
    group: bool,
}

impl ControllerProcess {
    /// The pids `signal` reaches: the child, or — under a tool — the controllers in the tool's
    /// process group (the processes of that group running the controller binary). The tool
    /// itself is left to finish: heaptrack writes its profile once the controller has exited.
    fn targets(&self) -> Vec<u32> {
        let Some(pid) = self.child.id() else {
            return vec![];
        };
        if !self.group {
            return vec![pid];
        }
        let binary = workspace_bin("upgradeplan-controller").ok();
        // pgrp is field 5 of /proc/<pid>/stat, the third after the command.
        let in_group = |p: u32| proc_stat(p).and_then(|f| f.get(2)?.parse::<u32>().ok()) == Some(pid);
        let runs_controller = |p: u32| std::fs::read_link(format!("/proc/{p}/exe")).ok() == binary;
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| in_group(*p) && runs_controller(*p))
            .collect()
    }

    /// Sends `signal` to the controller, by pid.
    fn signal(&self, signal: &str) -> std::io::Result<()> {
        for pid in self.targets() {
            std::process::Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .stderr(Stdio::null())
                .status()?;
        }
        Ok(())
    }

    /// SIGTERM, without waiting: the controller begins its graceful shutdown.
    pub fn request_stop(&self) -> anyhow::Result<()> {
        Ok(self.signal("TERM")?)
    }

    /// SIGKILL, as a crash would.
    pub async fn kill(&mut self) {
        if self.group {
            let _ = self.signal("KILL");
        }
        let _ = self.child.kill().await;
    }

    /// SIGTERM, then wait for the exit status.
    pub async fn terminate(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        self.signal("TERM")?;
        Ok(tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await??)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until this controller has finished a reconcile of `key` (`run/NAME`, `plan/NAME`,
    /// `freeze/NAME`) that saw the object at `resource_version` or later (its debug line
    /// `reconciled`): whatever that reconcile patched, announced or wrote is written by then. The
    /// positive marker before a test checks that nothing else happened.
    pub async fn wait_reconciled(&self, key: &str, resource_version: &str, timeout: Duration) -> anyhow::Result<()> {
        let needle = format!(" reconciled key={key} resource_version=");
        wait_logged_version(&self.log, &needle, resource_version, timeout).await
    }
}

/// Waits until the log file `log` has a line with `needle` followed by a resourceVersion of at
/// least `resource_version` (a process's "reconciled" line); on timeout, the error shows the log.
async fn wait_logged_version(
    log: &Path,
    needle: &str,
    resource_version: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    // resourceVersions are opaque to clients; this API server's are etcd revisions, which only
    // grow (a test-only reading, never the product's).
    let wanted: u64 = resource_version
        .parse()
        .with_context(|| format!("resourceVersion {resource_version:?}"))?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let done = text.lines().any(|line| {
            line.split_once(needle).is_some_and(|(_, rest)| {
                rest.split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .is_some_and(|v| v >= wanted)
            })
        });
        if done {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "no line `{}<{resource_version} or later>` in {} within {timeout:?}:\n{text}",
                needle.trim(),
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

impl Drop for ControllerProcess {
    /// Under a tool, SIGTERM to the controller in its group: it shuts down and the tool writes
    /// its results (`kill_on_drop` reaches the tool's wrapper alone). Otherwise `kill_on_drop`.
    fn drop(&mut self) {
        if self.group {
            let _ = self.signal("TERM");
        }
    }
}

/// The fields of `/proc/<pid>/stat` after the command (field 3, the state, onwards; see proc(5)):
/// counted from the command's closing parenthesis, as the command may hold spaces.
pub fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(String::from).collect())
}

/// A binary of this workspace, built next to the test executable (`cargo build --workspace --bins`).
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    // Tests live in target/<profile>/deps, binaries in target/<profile>.
    let mut dir = exe
        .parent()
        .ok_or_else(|| anyhow!("unexpected executable path {}", exe.display()))?;
    if dir.ends_with("deps") {
        dir = dir.parent().unwrap_or(dir);
    }
    let bin = dir.join(name);
    if !bin.exists() {
        bail!(
            "{} is missing: run `cargo build --workspace --bins` first (make test does)",
            bin.display()
        );
    }
    Ok(bin)
}

impl TestEnv {
    pub async fn new(prefix: &str) -> anyhow::Result<TestEnv> {
        let client = client().await?;
        install_crds(&client).await?;
        Ok(TestEnv::with_client(prefix, client, None))
    }

    /// A world on another control plane (see [`OwnControlPlane`]): its client, and the
    /// kubeconfig kratix-sim and controllers are started with.
    pub async fn on(prefix: &str, plane: &OwnControlPlane) -> anyhow::Result<TestEnv> {
        let client = plane.client().await?;
        install_crds_on(&client).await?;
        Ok(TestEnv::with_client(prefix, client, Some(plane.kubeconfig.clone())))
    }

    fn with_client(prefix: &str, client: Client, kubeconfig: Option<PathBuf>) -> TestEnv {
        let id = unique_id(prefix);
        TestEnv {
            client,
            promise: format!("{id}-promise"),
            id,
            namespaces: Vec::new(),
            sim: None,
            sim_log: None,
            controllers: 0,
            kubeconfig,
            torn_down: false,
            metrics_reader: None,
        }
    }

    /// `KUBECONFIG` for a child process of this world.
    fn child_kubeconfig(&self) -> Option<&Path> {
        self.kubeconfig.as_deref()
    }

    /// Creates the namespace `<id>-<suffix>` and returns its name.
    pub async fn namespace(&mut self, suffix: &str) -> anyhow::Result<String> {
        let name = format!("{}-{suffix}", self.id);
        let api: Api<Namespace> = Api::all(self.client.clone());
        api.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": name}}))?,
        )
        .await?;
        self.namespaces.push(name.clone());
        Ok(name)
    }

    /// A token of a new ServiceAccount `name` of this world, bound (when `reader`) to the shipped
    /// `upgradeplan-metrics-reader` ClusterRole, applied from deploy/core/rbac.yaml.
    pub async fn service_account_token(&mut self, name: &str, reader: bool) -> anyhow::Result<String> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
        let ns = self.namespace(&format!("sa-{name}")).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client.clone(), &ns);
        accounts
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": name}}))?,
            )
            .await?;
        if reader {
            let rbac = std::fs::read_to_string(repo_root().join("deploy/core/rbac.yaml"))?;
            let role: serde_json::Value = rbac
                .split("\n---")
                .filter_map(|d| serde_saphyr::from_str::<serde_json::Value>(d).ok())
                .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == METRICS_READER)
                .ok_or_else(|| anyhow!("deploy/core/rbac.yaml has no ClusterRole {METRICS_READER}"))?;
            Api::<ClusterRole>::all(self.client.clone())
                .patch(
                    METRICS_READER,
                    &PatchParams::apply("upgradeplan-tests").force(),
                    &Patch::Apply(role),
                )
                .await?;
            let binding = json!({"metadata": {"name": format!("{ns}-{name}"), "labels": {WORLD_LABEL: self.promise}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}]});
            Api::<ClusterRoleBinding>::all(self.client.clone())
                .create(&PostParams::default(), &serde_json::from_value(binding)?)
                .await?;
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await?;
        issued
            .status
            .map(|s| s.token)
            .ok_or_else(|| anyhow!("the TokenRequest for {ns}/{name} returned no token"))
    }

    /// A token allowed to read a secure /metrics (made on first use).
    pub async fn metrics_reader(&mut self) -> anyhow::Result<String> {
        if let Some(token) = &self.metrics_reader {
            return Ok(token.clone());
        }
        let token = self.service_account_token("prometheus", true).await?;
        self.metrics_reader = Some(token.clone());
        Ok(token)
    }

    /// A controller serving /metrics as deploy/ does (`--metrics-secure`, a self-signed
    /// certificate) on a free port, unless `extra_args` names `--metrics-addr`; and how to read it.
    pub async fn start_secure_controller(
        &mut self,
        extra_args: &[&str],
    ) -> anyhow::Result<(ControllerProcess, MetricsEndpoint)> {
        let token = self.metrics_reader().await?;
        let given = extra_args
            .iter()
            .position(|a| *a == "--metrics-addr")
            .and_then(|i| extra_args.get(i + 1));
        let addr = match given {
            Some(a) => a.to_string(),
            None => format!("127.0.0.1:{}", free_port()?),
        };
        let mut args = vec!["--metrics-secure"];
        if given.is_none() {
            args.extend(["--metrics-addr", addr.as_str()]);
        }
        args.extend_from_slice(extra_args);
        let controller = self.start_controller(&args).await?;
        Ok((
            controller,
            MetricsEndpoint {
                addr,
                token: Some(token),
                ca_file: None,
            },
        ))
    }

    /// The usual world of an upgrade test on this environment (see [`World`]): the Promise with
    /// v1.0.0 and v2.0.0 (latest), kratix-sim (`sim`, with `sim_args`), and a namespace `apps`
    /// with a resource per entry of `bindings` (name, value of label `env`), made at v1.0.0.
    /// Returns the namespace.
    pub async fn upgrade_world(
        &mut self,
        bindings: &[(&str, &str)],
        sim: &str,
        sim_args: &[&str],
    ) -> anyhow::Result<String> {
        self.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0").await?;
        let ns = self.namespace("apps").await?;
        self.start_sim(sim, sim_args)?;
        self.resources_at_v1(&ns, bindings.iter().copied()).await?;
        Ok(ns)
    }

    /// Resources (name, value of label `env`) in `ns`, made as their users make them: Resource
    /// Requests created when v1.0.0 was the latest, their bindings made and applied by kratix-sim.
    /// Their bindings' names by `namespace/binding`, with their `env`.
    async fn resources_at_v1<'b>(
        &self,
        ns: &str,
        bindings: impl IntoIterator<Item = (&'b str, &'b str)>,
    ) -> anyhow::Result<BTreeMap<String, String>> {
        let made: Vec<(String, String)> = bindings
            .into_iter()
            .map(|(n, e)| (n.to_string(), e.to_string()))
            .collect();
        for (name, env) in &made {
            self.create_request(ns, name, &[("env", env)], "v1.0.0").await?;
        }
        let mut names = BTreeMap::new();
        for (name, env) in made {
            let b = self.wait_resource_applied(ns, &name).await?;
            names.insert(format!("{ns}/{}", b.name_any()), env);
        }
        Ok(names)
    }

    /// The binding of resource `name` in `ns` as the API server has it now.
    pub async fn live_binding(&self, ns: &str, name: &str) -> anyhow::Result<ResourceBinding> {
        Ok(self.bindings_api(ns).get(&self.binding_name(name)).await?)
    }

    /// The name Kratix gives the binding of this Promise's Resource Request `request`.
    pub fn binding_name(&self, request: &str) -> String {
        crate::sim::requests::binding_name(request, &self.promise)
    }

    /// Creates the Promise — with its Resource Request kind in `spec.api`, which kratix-sim
    /// installs — and a PromiseRevision per version; `latest` is marked latest.
    pub async fn promise_with_revisions(&self, versions: &[&str], latest: &str) -> anyhow::Result<()> {
        // Written untyped: upgradeplan's Promise type has no `spec.api`, which it never reads.
        let resource = kube::api::ApiResource::erase::<Promise>(&());
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let promise: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "Promise",
            "metadata": {"name": self.promise, "labels": {PROMISE_VERSION_LABEL: latest}},
            "spec": {"api": crate::sim::requests::request_crd(&self.promise)}
        }))?;
        api.create(&PostParams::default(), &promise).await?;
        for v in versions {
            self.create_revision(v, *v == latest).await?;
        }
        Ok(())
    }

    /// Waits until the PromiseRevision of `version` carries Kratix's cleanup finalizer (as
    /// `kratix-sim --revision-cleanup` gives it): deleted before, it would go without its resources.
    pub async fn wait_revision_finalizer(&self, version: &str, timeout: Duration) -> anyhow::Result<()> {
        let finalizer = crate::sim::RESOURCE_CLEANUP_FINALIZER;
        let api: Api<PromiseRevision> = Api::all(self.client.clone());
        let what = format!("Kratix's finalizer {finalizer}");
        wait_for(api, &self.revision_name(version), timeout, &what, |rev| {
            rev.finalizers().iter().any(|f| f == finalizer)
        })
        .await?;
        Ok(())
    }

    /// The name of this world's PromiseRevision of `version`.
    pub fn revision_name(&self, version: &str) -> String {
        format!(
            "{}-{}",
            self.promise,
            version.to_ascii_lowercase().replace(['.', '_'], "-")
        )
    }

    pub async fn create_revision(&self, version: &str, latest: bool) -> anyhow::Result<()> {
        let api: Api<PromiseRevision> = Api::all(self.client.clone());
        let mut labels = BTreeMap::from([(PROMISE_NAME_LABEL.to_string(), self.promise.clone())]);
        if latest {
            labels.insert(LATEST_REVISION_LABEL.to_string(), "true".to_string());
        }
        let name = self.revision_name(version);
        // As Kratix writes it: with the Promise's spec at that version (required by Kratix's
        // schema; upgradeplan never reads it, so its PromiseRevision type has no such field and
        // the object is written untyped).
        let resource = kube::api::ApiResource::erase::<PromiseRevision>(&());
        let untyped: Api<kube::api::DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let rev: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
            "metadata": {"name": name, "labels": labels},
            "spec": {"promiseRef": {"name": self.promise}, "version": version, "promiseSpec": {}}
        }))?;
        untyped.create(&PostParams::default(), &rev).await?;
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"latest": latest}})),
        )
        .await?;
        Ok(())
    }

    /// Moves the latest mark to `version` (as Kratix does when a Promise is upgraded).
    pub async fn mark_latest(&self, version: &str) -> anyhow::Result<()> {
        let api: Api<PromiseRevision> = Api::all(self.client.clone());
        let lp = kube::api::ListParams::default().labels(&format!("{PROMISE_NAME_LABEL}={}", self.promise));
        for rev in api.list(&lp).await? {
            let latest = rev.spec.version == version;
            let value = if latest { json!("true") } else { serde_json::Value::Null };
            let name = rev.name_any();
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {LATEST_REVISION_LABEL: value}}})),
            )
            .await?;
            api.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"latest": latest}})),
            )
            .await?;
        }
        Ok(())
    }

    pub async fn delete_revision(&self, version: &str) -> anyhow::Result<()> {
        let api: Api<PromiseRevision> = Api::all(self.client.clone());
        api.delete(&self.revision_name(version), &DeleteParams::default())
            .await?;
        Ok(())
    }

    /// A resource as its user makes it: the Resource Request `ns/name` of this test's Promise with
    /// `labels`, created when `version` was the Promise's latest (kratix-sim's
    /// `kratix-sim/binding-version`; `latest` floats). Waits until kratix-sim has made its binding
    /// and applied it, and returns the binding. kratix-sim must be running (it serves the
    /// Promise's request kind).
    pub async fn resource(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        version: &str,
    ) -> anyhow::Result<ResourceBinding> {
        self.create_request(ns, name, labels, version).await?;
        self.wait_resource_applied(ns, name).await
    }

    /// Creates the Resource Request of [`TestEnv::resource`] without waiting for its binding.
    pub async fn create_request(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        version: &str,
    ) -> anyhow::Result<()> {
        let pinned = [(crate::sim::requests::BINDING_VERSION_ANNOTATION, version)];
        self.post_request(ns, name, labels, &pinned).await
    }

    /// Creates this Promise's Resource Request `ns/name` with `labels` and `annotations`, once
    /// kratix-sim serves its kind.
    async fn post_request(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> anyhow::Result<()> {
        self.requests_served().await?;
        let kind = crate::sim::requests::request_kind(&self.promise);
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let rr: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": kind.api_version, "kind": kind.kind,
            "metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": annotations},
            "spec": {"size": "small"}
        }))?;
        self.requests_api(ns).create(&PostParams::default(), &rr).await?;
        Ok(())
    }

    /// Waits until kratix-sim has made request `ns/name`'s binding and applied a version to it.
    pub async fn wait_resource_applied(&self, ns: &str, name: &str) -> anyhow::Result<ResourceBinding> {
        let binding = self.binding_name(name);
        wait_for(
            self.bindings_api(ns),
            &binding,
            NUDGE_WAIT,
            "kratix-sim to make and apply the request's binding",
            |b| !upgradeplan::api::kratix::BindingFacts::last_applied_version(b).is_empty(),
        )
        .await
    }

    /// A binding written directly, as Kratix would have made it for the Resource Request
    /// `ns/name` (`spec.version` and `status.lastAppliedVersion` = `version`), without a request:
    /// only for `scale-bench`, whose 100k resources would otherwise be made one by one by
    /// kratix-sim before the measurement starts. Every test makes [`TestEnv::resource`]s.
    pub async fn bench_binding(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        version: &str,
    ) -> anyhow::Result<()> {
        let mut all: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        all.insert(PROMISE_NAME_LABEL.into(), self.promise.clone());
        all.insert(RESOURCE_NAME_LABEL.into(), name.into());
        let api: Api<ResourceBinding> = Api::namespaced(self.client.clone(), ns);
        let b: ResourceBinding = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": self.binding_name(name), "namespace": ns, "labels": all},
            "spec": {"version": version, "promiseRef": {"name": self.promise}, "resourceRef": {"name": name, "namespace": ns}}
        }))?;
        // Written as Kratix: whoever upgrades them later (the controller, scale-bench's reference
        // orchestrator) is another field manager.
        let kratix = || PatchParams {
            field_manager: Some(KRATIX_FIELD_MANAGER.into()),
            ..Default::default()
        };
        let pp = PostParams {
            field_manager: Some(KRATIX_FIELD_MANAGER.into()),
            ..Default::default()
        };
        let created = api.create(&pp, &b).await?;
        let status = Patch::Merge(json!({"status": {"lastAppliedVersion": version}}));
        api.patch_status(&created.name_any(), &kratix(), &status).await?;
        Ok(())
    }

    /// Waits until kratix-sim serves this Promise's Resource Request kind (it installs the CRD
    /// of the Promise's `spec.api`, as Kratix does, once it runs).
    pub async fn requests_served(&self) -> anyhow::Result<()> {
        let api = crate::sim::requests::request_crd(&self.promise);
        let crd_name = api["metadata"]["name"].as_str().unwrap_or_default().to_string();
        let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
            Api::all(self.client.clone());
        wait_for(
            crds,
            &crd_name,
            NUDGE_WAIT,
            "kratix-sim (is it started?) to install the request kind",
            |crd| {
                crd.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
            },
        )
        .await?;
        Ok(())
    }

    /// This Promise's Resource Requests in `ns`.
    pub fn requests_api(&self, ns: &str) -> Api<kube::api::DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            ns,
            &crate::sim::requests::request_kind(&self.promise),
        )
    }

    /// Creates the Resource Request `ns/name` of this Promise with `labels` and `annotations`
    /// (kratix-sim's knobs, e.g. the delete workflows' `kratix-sim/delay`), and waits until
    /// kratix-sim has made its binding (at the version its `--binding-version` gives), which it
    /// returns.
    pub async fn request(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> anyhow::Result<ResourceBinding> {
        self.post_request(ns, name, labels, annotations).await?;
        let binding = self.binding_name(name);
        wait_for(
            self.bindings_api(ns),
            &binding,
            NUDGE_WAIT,
            "kratix-sim to make the request's binding",
            |_| true,
        )
        .await
    }

    pub fn bindings_api(&self, ns: &str) -> Api<ResourceBinding> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Merge-patches a binding (spec, metadata).
    pub async fn patch_binding(
        &self,
        ns: &str,
        binding: &str,
        patch: serde_json::Value,
    ) -> anyhow::Result<ResourceBinding> {
        Ok(self
            .bindings_api(ns)
            .patch(binding, &PatchParams::default(), &Patch::Merge(patch))
            .await?)
    }

    /// Holds (`true`) or releases the upgrades of these bindings (`namespace/name` keys) in
    /// kratix-sim: a held upgrade starts but does not finish (annotation `kratix-sim/hold`).
    pub async fn hold<'a>(&self, bindings: impl IntoIterator<Item = &'a String>, held: bool) -> anyhow::Result<()> {
        let value = held.then_some("true");
        for key in bindings {
            let (ns, name) = key
                .split_once('/')
                .ok_or_else(|| anyhow!("{key:?} is not namespace/name"))?;
            self.patch_binding(
                ns,
                name,
                json!({"metadata": {"annotations": {crate::sim::HOLD_ANNOTATION: value}}}),
            )
            .await?;
        }
        Ok(())
    }

    /// Changes `binding` by `patch` (a merge patch) and waits until kratix-sim has reconciled it
    /// as changed: whatever the simulator does about the change is done by then.
    pub async fn patch_and_settle_binding(
        &self,
        ns: &str,
        binding: &str,
        patch: serde_json::Value,
    ) -> anyhow::Result<()> {
        let log = self
            .sim_log
            .clone()
            .ok_or_else(|| anyhow!("kratix-sim was not started by this test"))?;
        let patched = self.patch_binding(ns, binding, patch).await?;
        let version = patched.resource_version().unwrap_or_default();
        let needle = format!(" reconciled binding={ns}/{binding} resource_version=");
        wait_logged_version(&log, &needle, &version, NUDGE_WAIT).await
    }

    /// Waits until kratix-sim has seen the deletion of request `ns/name` (at `resource_version`
    /// or later): from then on it runs no workflow of its binding.
    pub async fn wait_request_deletion_seen(&self, ns: &str, name: &str, resource_version: &str) -> anyhow::Result<()> {
        let log = self
            .sim_log
            .clone()
            .ok_or_else(|| anyhow!("kratix-sim was not started by this test"))?;
        let needle = format!(" request deletion under way request={ns}/{name} resource_version=");
        wait_logged_version(&log, &needle, resource_version, NUDGE_WAIT).await
    }

    /// Makes `controller` reconcile the run `name` once more and waits until it has: a
    /// harmless annotation changes the run, and the reconcile that saw that change finished.
    /// After it, anything the controller would do about the run as it was has been done.
    pub async fn settle_run(&self, controller: &ControllerProcess, name: &str) -> anyhow::Result<()> {
        let touched = nudge(&self.runs(), name).await?;
        controller
            .wait_reconciled(&format!("run/{name}"), &touched, NUDGE_WAIT)
            .await
    }

    /// [`TestEnv::settle_run`] for a plan.
    pub async fn settle_plan(&self, controller: &ControllerProcess, name: &str) -> anyhow::Result<()> {
        let touched = nudge(&self.plans(), name).await?;
        controller
            .wait_reconciled(&format!("plan/{name}"), &touched, NUDGE_WAIT)
            .await
    }

    /// Waits (watch-driven) until `binding` satisfies `pred`, for at most `timeout` (as
    /// [`wait_for`]: on timeout the error shows the binding as it is).
    pub async fn wait_binding(
        &self,
        ns: &str,
        binding: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&ResourceBinding) -> bool,
    ) -> anyhow::Result<ResourceBinding> {
        wait_for(self.bindings_api(ns), binding, timeout, what, pred).await
    }

    /// Starts the kratix-sim binary (`exe`: `env!("CARGO_BIN_EXE_kratix-sim")` in a test) for
    /// this test's Promise. Its log goes to `$TMPDIR/<id>-kratix-sim.log`.
    pub fn start_sim(&mut self, exe: &str, extra_args: &[&str]) -> anyhow::Result<PathBuf> {
        let promise = self.promise.clone();
        self.start_sim_of(exe, Some(&promise), extra_args)
    }

    /// [`TestEnv::start_sim`] for the bindings of every Promise, as one Kratix serves them all
    /// (scale-bench's many plans).
    pub fn start_sim_for_every_promise(&mut self, exe: &str, extra_args: &[&str]) -> anyhow::Result<PathBuf> {
        self.start_sim_of(exe, None, extra_args)
    }

    fn start_sim_of(&mut self, exe: &str, promise: Option<&str>, extra_args: &[&str]) -> anyhow::Result<PathBuf> {
        let log = std::env::temp_dir().join(format!("{}-kratix-sim.log", self.id));
        let file = std::fs::File::create(&log)?;
        let mut command = tokio::process::Command::new(exe);
        if let Some(k) = self.child_kubeconfig() {
            command.env("KUBECONFIG", k);
        }
        // Its "reconciled" lines are what [`TestEnv::patch_and_settle_binding`] waits for.
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info,upgradeplan_e2e::sim=debug");
        }
        self.sim_log = Some(log.clone());
        if let Some(promise) = promise {
            command.args(["--promise", promise]);
        }
        let child = command
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {exe}"))?;
        self.sim = Some(child);
        Ok(log)
    }

    /// Stops kratix-sim (until [`TestEnv::start_sim`] starts it again).
    pub async fn stop_sim(&mut self) {
        if let Some(mut sim) = self.sim.take() {
            let _ = sim.kill().await;
        }
    }

    /// The process id of kratix-sim, when [`TestEnv::start_sim`] started it.
    pub fn sim_pid(&self) -> Option<u32> {
        self.sim.as_ref().and_then(|c| c.id())
    }

    /// The label every plan of this test carries; its controller only handles those.
    pub fn selector(&self) -> (String, String) {
        ("upgradeplan-test".to_string(), self.id.clone())
    }

    /// Name of this test's snapshot namespace (see [`TestEnv::start_controller`]).
    pub fn snapshot_namespace(&self) -> String {
        format!("{}-snap", self.id)
    }

    /// Starts `upgradeplan-controller` for this test's plans only, with its own snapshot
    /// namespace (created on first use), health port chosen by the OS, and a log file.
    pub async fn start_controller(&mut self, extra_args: &[&str]) -> anyhow::Result<ControllerProcess> {
        let snap = self.snapshot_namespace();
        if !self.namespaces.contains(&snap) {
            self.namespace("snap").await?;
        }
        self.controllers += 1;
        let log = std::env::temp_dir().join(format!("{}-controller-{}.log", self.id, self.controllers));
        let (k, v) = self.selector();
        // Defaults, each unless the test passes that flag itself.
        let defaults = [
            ("--snapshot-namespace", snap.as_str()),
            ("--health-addr", "127.0.0.1:0"),
            ("--metrics-addr", "127.0.0.1:0"),
            ("--log-level", "info,upgradeplan_controller=debug"),
        ];
        let pod_name = format!("{}-controller-{}", self.id, self.controllers);
        // UPGRADEPLAN_CONTROLLER_PREFIX runs the controller under a tool, e.g. `heaptrack -o
        // /tmp/heap/{name}` (a heap profile of a scale-bench run; docs/performance.md); `{name}`
        // is this controller's pod name, so that each controller has a file of its own. The tool
        // and the controller under it get a process group of their own, in which stopping finds
        // the controller: signalling the tool's wrapper alone would leave it running.
        let binary = workspace_bin("upgradeplan-controller")?;
        let (mut command, group) = match std::env::var("UPGRADEPLAN_CONTROLLER_PREFIX") {
            Ok(prefix) if !prefix.trim().is_empty() => {
                let prefix = prefix.replace("{name}", &pod_name);
                let mut words = prefix.split_whitespace();
                let mut c = tokio::process::Command::new(words.next().unwrap_or_default());
                c.args(words).arg(binary).process_group(0);
                (c, true)
            }
            _ => (tokio::process::Command::new(binary), false),
        };
        command.env("POD_NAME", &pod_name);
        if let Some(k) = self.child_kubeconfig() {
            command.env("KUBECONFIG", k);
        }
        let child = command
            .args(["--selector", &format!("{k}={v}")])
            .args(
                defaults
                    .iter()
                    .filter(|(flag, _)| !extra_args.contains(flag))
                    .flat_map(|(flag, value)| [*flag, *value]),
            )
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("starting upgradeplan-controller")?;
        Ok(ControllerProcess {
            child,
            log,
            pod_name,
            group,
        })
    }

    pub fn plans(&self) -> Api<UpgradePlan> {
        Api::all(self.client.clone())
    }

    pub fn runs(&self) -> Api<UpgradeRun> {
        Api::all(self.client.clone())
    }

    /// Creates the plan `<id>-<suffix>` (labelled for this test's controller) for this test's
    /// Promise. `spec` is the plan spec without `promiseRef`.
    pub async fn create_plan(&self, suffix: &str, mut spec: serde_json::Value) -> anyhow::Result<String> {
        let name = format!("{}-{suffix}", self.id);
        spec["promiseRef"] = json!({"name": self.promise});
        let (k, v) = self.selector();
        let plan: UpgradePlan = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
            "metadata": {"name": name, "labels": {k: v}}, "spec": spec
        }))?;
        self.plans()
            .create(&PostParams::default(), &plan)
            .await
            .with_context(|| format!("creating plan {name}"))?;
        Ok(name)
    }

    /// Creates a run of `plan` by hand, as a user would (no label, no owner).
    pub async fn create_run(&self, name: &str, plan: &str, suspend: bool) -> anyhow::Result<String> {
        let run: UpgradeRun = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
            "metadata": {"name": name}, "spec": {"upgradePlanRef": {"name": plan}, "suspend": suspend}
        }))?;
        self.runs()
            .create(&PostParams::default(), &run)
            .await
            .with_context(|| format!("creating run {name}"))?;
        Ok(name.to_string())
    }

    /// Waits (watch-driven) until the run satisfies `pred`.
    pub async fn wait_run(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&UpgradeRun) -> bool,
    ) -> anyhow::Result<UpgradeRun> {
        wait_for(self.runs(), name, timeout, what, pred).await
    }

    /// Waits (watch-driven) until the run `name` has ended, for at most [`RUN_WAIT`].
    pub async fn wait_ended(&self, name: &str) -> anyhow::Result<UpgradeRun> {
        self.wait_run(name, RUN_WAIT, "its end", run_ended).await
    }

    /// Waits (watch-driven) until the UpgradeFreeze `name` satisfies `pred`.
    pub async fn wait_freeze(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&upgradeplan::api::UpgradeFreeze) -> bool,
    ) -> anyhow::Result<upgradeplan::api::UpgradeFreeze> {
        wait_for(Api::all(self.client.clone()), name, timeout, what, pred).await
    }

    /// Waits (watch-driven) until the UpgradeBudget `name` satisfies `pred`.
    pub async fn wait_budget(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&upgradeplan::api::UpgradeBudget) -> bool,
    ) -> anyhow::Result<upgradeplan::api::UpgradeBudget> {
        wait_for(Api::all(self.client.clone()), name, timeout, what, pred).await
    }

    /// Waits (watch-driven) until the plan satisfies `pred`.
    pub async fn wait_plan(
        &self,
        name: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&UpgradePlan) -> bool,
    ) -> anyhow::Result<UpgradePlan> {
        wait_for(self.plans(), name, timeout, what, pred).await
    }

    /// Events of `name` once one satisfies `want` (events become visible to a list a moment
    /// after they are written); an error showing the events there are when none does within
    /// [`EVENT_WAIT`].
    pub async fn events_when(
        &self,
        name: &str,
        want: impl Fn(&(String, String, String)) -> bool,
    ) -> anyhow::Result<Vec<(String, String, String)>> {
        let deadline = tokio::time::Instant::now() + EVENT_WAIT;
        loop {
            let events = self.events_of(name).await?;
            if events.iter().any(&want) {
                return Ok(events);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!("no event of {name} as awaited within {EVENT_WAIT:?}; its events: {events:#?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Events recorded on cluster-scoped object `name`: (type, reason, message), oldest first, each
    /// repeated as often as it happened.
    pub async fn events_of(&self, name: &str) -> anyhow::Result<Vec<(String, String, String)>> {
        let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(self.client.clone(), "default");
        let lp = kube::api::ListParams::default().fields(&format!("involvedObject.name={name}"));
        let mut events = api.list(&lp).await?.items;
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        // An Event repeated is one object with a count: it appears here that many times.
        Ok(events
            .into_iter()
            .flat_map(|e| {
                let times = e.count.unwrap_or(1).max(1) as usize;
                let one = (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.message.unwrap_or_default(),
                );
                std::iter::repeat_n(one, times)
            })
            .collect())
    }

    /// Deletes what the test created (namespaces go in the background) and stops kratix-sim.
    pub async fn teardown(mut self) -> anyhow::Result<()> {
        if let Some(mut sim) = self.sim.take() {
            let _ = sim.kill().await;
        }
        remove_world(&self.client, &self.id, &self.namespaces, &self.promise).await;
        self.torn_down = true;
        Ok(())
    }

    /// [`TestEnv::teardown`], then waits (up to `timeout`) until its namespaces, and so its
    /// bindings, are gone: kube-controller-manager deletes their contents in the background, and
    /// a benchmark must not time its next phase on an API server still busy with that.
    pub async fn teardown_settled(self, timeout: Duration) -> anyhow::Result<()> {
        let (client, namespaces) = (self.client.clone(), self.namespaces.clone());
        self.teardown().await?;
        let api: Api<Namespace> = Api::all(client);
        let t = std::time::Instant::now();
        for ns in &namespaces {
            while api.get_opt(ns).await?.is_some() {
                if t.elapsed() > timeout {
                    bail!("namespace {ns} still exists {} s after teardown", timeout.as_secs());
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        Ok(())
    }
}

/// The shipped ClusterRole allowed to read a secure /metrics.
pub const METRICS_READER: &str = "upgradeplan-metrics-reader";
/// Labels a world's cluster-scoped objects other than its Promise (value: the Promise's name).
const WORLD_LABEL: &str = "upgradeplan-e2e/world";

/// Deletes a world's namespaces (and so its bindings), its PromiseRevisions, its Promise, its
/// ClusterRoleBindings and the cluster-scoped objects named for it (`<id>-…`: plans, runs,
/// approvals, freezes, budgets). Left behind, those pile up across suites, and every later controller
/// lists them and reconciles their runs' writes.
async fn remove_world(client: &Client, id: &str, namespaces: &[String], promise: &str) {
    let dp = DeleteParams::background();
    let (all, prefix) = (kube::api::ListParams::default(), format!("{id}-"));
    let named = |name: &str| name.starts_with(&prefix);
    remove_where::<UpgradeRun>(client, &all, named).await;
    remove_where::<UpgradePlan>(client, &all, named).await;
    remove_where::<upgradeplan::api::UpgradeApproval>(client, &all, named).await;
    remove_where::<upgradeplan::api::UpgradeFreeze>(client, &all, named).await;
    remove_where::<upgradeplan::api::UpgradeBudget>(client, &all, named).await;
    let bindings: Api<k8s_openapi::api::rbac::v1::ClusterRoleBinding> = Api::all(client.clone());
    let _ = bindings
        .delete_collection(
            &dp,
            &kube::api::ListParams::default().labels(&format!("{WORLD_LABEL}={promise}")),
        )
        .await;
    let ns_api: Api<Namespace> = Api::all(client.clone());
    for ns in namespaces {
        let _ = ns_api.delete(ns, &dp).await;
    }
    remove_requests(client, promise).await;
    // kratix-sim --revision-cleanup gives revisions Kratix's finalizer, and it may be gone.
    let of_promise = kube::api::ListParams::default().labels(&format!("{PROMISE_NAME_LABEL}={promise}"));
    remove_where::<PromiseRevision>(client, &of_promise, |_| true).await;
    let promises: Api<Promise> = Api::all(client.clone());
    let _ = promises.delete(promise, &dp).await;
}

/// Deletes the Resource Requests of `promise` (without waiting for Kratix's finalizers: kratix-sim
/// may be gone) and their CRD (every test Promise declares one, kratix-sim installs it).
async fn remove_requests(client: &Client, promise: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd = crate::sim::requests::request_crd(promise);
    let crd_name = crd["metadata"]["name"].as_str().unwrap_or_default();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if !matches!(crds.get_opt(crd_name).await, Ok(Some(_))) {
        return;
    }
    let requests: Api<kube::api::DynamicObject> =
        Api::all_with(client.clone(), &crate::sim::requests::request_kind(promise));
    if let Ok(list) = requests.list_metadata(&Default::default()).await {
        for rr in list.items {
            let ns = rr.metadata.namespace.clone().unwrap_or_default();
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &crate::sim::requests::request_kind(promise));
            let name = rr.metadata.name.clone().unwrap_or_default();
            let _ = api.delete(&name, &DeleteParams::background()).await;
            let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
            let _ = api.patch_metadata(&name, &PatchParams::default(), &strip).await;
        }
    }
    let _ = crds.delete(crd_name, &DeleteParams::background()).await;
}

/// Deletes the objects of kind `K` that `lp` lists and `named` accepts by name, then drops their
/// finalizers (after the delete, so a live controller cannot add one back): the controller that
/// would release them may be gone.
async fn remove_where<K>(client: &Client, lp: &kube::api::ListParams, named: impl Fn(&str) -> bool)
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let Ok(list) = api.list_metadata(lp).await else {
        return;
    };
    for object in list.items.iter().filter(|o| named(&o.name_any())) {
        let name = object.name_any();
        let _ = api.delete(&name, &DeleteParams::background()).await;
        let _ = api
            .patch_metadata(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
}

impl Drop for TestEnv {
    /// A test that failed before `teardown` still removes its world. The test's runtime may be
    /// unwinding, so this uses a runtime and a client of its own, on a thread of its own.
    fn drop(&mut self) {
        if self.torn_down {
            return;
        }
        if let Some(sim) = self.sim.as_mut() {
            let _ = sim.start_kill();
        }
        let (id, namespaces, promise, kubeconfig) = (
            self.id.clone(),
            self.namespaces.clone(),
            self.promise.clone(),
            self.kubeconfig.clone(),
        );
        let cleanup = std::thread::spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
                return;
            };
            runtime.block_on(async move {
                let client = match kubeconfig {
                    Some(path) => match kube::config::Kubeconfig::read_from(&path) {
                        Ok(kc) => match kube::Config::from_custom_kubeconfig(kc, &Default::default()).await {
                            Ok(config) => Client::try_from(config).ok(),
                            Err(_) => None,
                        },
                        Err(_) => None,
                    },
                    None => Client::try_default().await.ok(),
                };
                if let Some(client) = client {
                    let _ = tokio::time::timeout(
                        std::time::Duration::from_secs(20),
                        remove_world(&client, &id, &namespaces, &promise),
                    )
                    .await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// `GET path` over HTTP/1.0 (no chunking to decode): (status code, body).
pub async fn http_get(addr: &str, path: &str) -> anyhow::Result<(u16, String)> {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    exchange(stream, addr, path, None).await
}

/// GET `https://<addr><path>`, with `Authorization: Bearer <token>` when given, verifying the
/// server's certificate against `ca_file` (for the IP or name in `addr`), or accepting any
/// certificate without one (`curl -k`, for a self-signed server): (status, body).
pub async fn https_get(
    addr: &str,
    path: &str,
    token: Option<&str>,
    ca_file: Option<&Path>,
) -> anyhow::Result<(u16, String)> {
    let config = tls_client(ca_file)?;
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h).to_string();
    let name = rustls::pki_types::ServerName::try_from(host).context("server name")?;
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(name, stream)
        .await
        .with_context(|| format!("TLS handshake with {addr}"))?;
    exchange(stream, addr, path, token).await
}

/// One HTTP/1.0 request and its whole response: (status, body).
async fn exchange<S>(mut stream: S, addr: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{authorization}\r\n").as_bytes())
        .await?;
    let mut bytes = Vec::new();
    if let Err(e) = stream.read_to_end(&mut bytes).await {
        // A TLS peer closing without close_notify after a complete response is not a failure.
        if e.kind() != std::io::ErrorKind::UnexpectedEof || bytes.is_empty() {
            return Err(e.into());
        }
    }
    let response = String::from_utf8_lossy(&bytes);
    let code = response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        code,
        response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    ))
}

fn tls_client(ca_file: Option<&Path>) -> anyhow::Result<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder =
        rustls::ClientConfig::builder_with_provider(provider.clone()).with_safe_default_protocol_versions()?;
    Ok(match ca_file {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
                roots.add(cert?)?;
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
            .with_no_client_auth(),
    })
}

/// Accepts any server certificate (still checking the handshake's signatures): for a
/// self-signed /metrics, as the shipped ServiceMonitor's `insecureSkipVerify`.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A controller's `/metrics`: its address and, when served with `--metrics-secure`, the bearer
/// token to read it with and the CA of its certificate (None: self-signed, not verified).
#[derive(Clone, Debug)]
pub struct MetricsEndpoint {
    pub addr: String,
    pub token: Option<String>,
    pub ca_file: Option<PathBuf>,
}

impl MetricsEndpoint {
    /// The exposition, read as Prometheus reads it (HTTPS and the token when secure).
    pub async fn scrape(&self) -> anyhow::Result<String> {
        let (code, body) = match &self.token {
            Some(token) => https_get(&self.addr, "/metrics", Some(token), self.ca_file.as_deref()).await?,
            None => http_get(&self.addr, "/metrics").await?,
        };
        if code != 200 {
            bail!("GET {}/metrics: HTTP {code}: {body}", self.addr);
        }
        Ok(body)
    }
}

/// Percent-encodes a query parameter.
pub fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A TCP port free on 127.0.0.1 right now, chosen below the kernel's ephemeral range: a port
/// the kernel hands out (bind to port 0) is the kind it also gives the next outgoing connection,
/// so between this check and the server's own bind another process could take it (etcd once
/// failed with "address already in use" that way).
pub fn free_port() -> anyhow::Result<u16> {
    free_ports(1)
}

/// `count` consecutive ports, all free on 127.0.0.1 right now; returns the first.
pub fn free_ports(count: u16) -> anyhow::Result<u16> {
    use std::hash::{BuildHasher, RandomState};
    // Below the ephemeral range (Linux's default is 32768–60999) and above the fixed ports of
    // `make integration`, `bench` and `chaos` (12379–19443).
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (20000u16, ephemeral_low.max(20000 + 1000));
    let random = RandomState::new();
    for attempt in 0u32..200 {
        let first = low + (random.hash_one(attempt) % u64::from(high - low - count)) as u16;
        if (first..first + count).all(|p| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            return Ok(first);
        }
    }
    bail!("no {count} free consecutive ports on 127.0.0.1 in {low}..{high} after 200 tries")
}

/// A control plane of a test's own (`tests/cluster.sh` with its own directory and ports), for
/// tests that restart the API server under everyone's feet. Stopped (by PID) when dropped.
pub struct OwnControlPlane {
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    api_port: u16,
    etcd_port: u16,
}

impl OwnControlPlane {
    pub async fn start(name: &str) -> anyhow::Result<OwnControlPlane> {
        let dir = std::env::temp_dir().join(format!("upgradeplan-{}", unique_id(name)));
        // A port free when chosen can still be taken before the server binds it; then start
        // again on other ports (the failed start stopped what it had started).
        let mut attempt = 1;
        loop {
            // etcd's client port, its peer port (the next one), then the API server's.
            let first = free_ports(3)?;
            let plane = OwnControlPlane {
                kubeconfig: dir.join("admin.kubeconfig"),
                dir: dir.clone(),
                etcd_port: first,
                api_port: first + 2,
            };
            let out = plane.script("start").await?;
            if out.status.success() {
                return Ok(plane);
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            if attempt < 3 && stderr.contains("address already in use") {
                attempt += 1;
                continue;
            }
            bail!("tests/cluster.sh start failed: {stderr}");
        }
    }

    /// `tests/cluster.sh <command>` for this control plane.
    fn script_command(&self, command: &str) -> std::process::Command {
        let mut c = std::process::Command::new(repo_root().join("tests/cluster.sh"));
        c.arg(command)
            .env("TESTENV_DIR", &self.dir)
            .env("TESTENV_API_PORT", self.api_port.to_string())
            .env("TESTENV_ETCD_PORT", self.etcd_port.to_string());
        c
    }

    async fn script(&self, command: &str) -> anyhow::Result<std::process::Output> {
        tokio::process::Command::from(self.script_command(command))
            .output()
            .await
            .with_context(|| format!("running tests/cluster.sh {command}"))
    }

    pub async fn client(&self) -> anyhow::Result<Client> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Stops kube-apiserver alone (`signal`: TERM or KILL) and starts it again; returns how
    /// long the restart took (stop, start, ready).
    pub async fn restart_apiserver(&self, signal: &str) -> anyhow::Result<Duration> {
        let started = std::time::Instant::now();
        let mut command = self.script_command("restart-apiserver");
        command.env("RESTART_SIGNAL", signal);
        let out = tokio::process::Command::from(command).output().await?;
        if !out.status.success() {
            bail!(
                "tests/cluster.sh restart-apiserver failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(started.elapsed())
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        let _ = self
            .script_command("stop")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// What a watch saw of a Promise's bindings while a run went on. Bindings are keyed
/// `namespace/name`; their group is their `env` label.
#[derive(Default, Debug)]
pub struct Observed {
    /// Highest number of bindings in flight (spec at target, not yet applied) per `env` label.
    pub max_in_flight: HashMap<String, usize>,
    /// Highest number in flight across all groups.
    pub max_in_flight_total: usize,
    /// In flight now, per `env` label.
    pub in_flight: HashMap<String, usize>,
    /// In the order seen: ("start" | "finish", binding, env).
    pub timeline: Vec<(&'static str, String, String)>,
    /// How many times each binding's spec.version was set to the target (patches).
    pub spec_changes: HashMap<String, usize>,
    /// The `upgraded-by` annotation each time a binding's spec.version moved to the target.
    pub upgraded_by: HashMap<String, Vec<String>>,
    /// How many bindings the watch has seen: a negative ("nothing was patched") means something
    /// only when the watch saw them.
    pub bindings: usize,
}

/// Starts a watch on the bindings of `env`'s Promise that records what [`Observed`] holds.
pub fn observe_bindings(env: &TestEnv, to: &'static str) -> Arc<Mutex<Observed>> {
    let seen = Arc::new(Mutex::new(Observed::default()));
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let config = watcher::Config::default().labels(&format!("{PROMISE_NAME_LABEL}={}", env.promise));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut last: HashMap<String, (String, String, String)> = HashMap::new();
        let mut stream = watcher(api, config).default_backoff().applied_objects().boxed();
        // Errors (a restarting API server) are retried by the backoff; the stream never ends.
        while let Some(item) = stream.next().await {
            let Ok(b) = item else { continue };
            let key = format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any());
            let group = b.labels().get("env").cloned().unwrap_or_default();
            let now = (
                b.spec.version.clone(),
                b.last_applied_version().to_string(),
                group.clone(),
            );
            let before = last.insert(key.clone(), now.clone());
            let Ok(mut o) = out.lock() else { return };
            o.bindings = last.len();
            if now.0 == to && before.as_ref().is_none_or(|p| p.0 != to) {
                *o.spec_changes.entry(key.clone()).or_default() += 1;
                let by = b
                    .annotations()
                    .get(upgradeplan::api::UPGRADED_BY_ANNOTATION)
                    .cloned()
                    .unwrap_or_default();
                o.upgraded_by.entry(key.clone()).or_default().push(by);
                if now.1 != to {
                    o.timeline.push(("start", key.clone(), group.clone()));
                }
            }
            if now.1 == to && before.as_ref().is_none_or(|p| p.1 != to) {
                o.timeline.push(("finish", key.clone(), group.clone()));
            }
            let in_flight = |g: Option<&str>| {
                last.values()
                    .filter(|(spec, applied, x)| g.is_none_or(|g| x == g) && spec == to && applied != to)
                    .count()
            };
            let group_now = in_flight(Some(&group));
            let total_now = in_flight(None);
            o.in_flight.insert(group.clone(), group_now);
            let max = o.max_in_flight.entry(group).or_default();
            *max = (*max).max(group_now);
            o.max_in_flight_total = o.max_in_flight_total.max(total_now);
        }
    });
    seen
}

/// The run's state (`Unresolved` before its first status).
pub fn run_state(r: &UpgradeRun) -> upgradeplan::api::RunState {
    r.status.as_ref().map(|s| s.state).unwrap_or_default()
}

/// Whether the run has ended (Completed, Failed or Cancelled).
pub fn run_ended(r: &UpgradeRun) -> bool {
    run_state(r).is_terminal()
}

/// One row of [`group_counts`]: (group, total, succeeded, failed, skipped).
pub fn group_row(name: &str, total: i64, succeeded: i64, failed: i64, skipped: i64) -> (String, i64, i64, i64, i64) {
    (name.into(), total, succeeded, failed, skipped)
}

/// Waits until the watch of [`observe_bindings`] sees `n` bindings of `group` in flight at once:
/// a concurrency limit *used*. Only meaningful while the test holds the upgrades
/// ([`TestEnv::hold`]): then the controller has all the time it needs to fill its slots, and a
/// timeout is a controller that did not, whatever the machine's load.
pub async fn wait_in_flight(
    seen: &Arc<Mutex<Observed>>,
    group: &str,
    n: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        // A local read of what the watch recorded, not a request: polling it costs nothing.
        let now = seen
            .lock()
            .map_err(|_| anyhow!("the binding observer panicked"))?
            .in_flight
            .get(group)
            .copied()
            .unwrap_or(0);
        if now >= n {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            let o = seen.lock().map_err(|_| anyhow!("the binding observer panicked"))?;
            bail!("group {group:?} never had {n} upgrades in flight within {timeout:?} (now {now}); seen: {o:#?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs this workspace's `kubectl-upgradeplan` with its stdout on a terminal (a pseudo-terminal
/// from util-linux's `script`, essential on Debian), as a user at a shell sees it: what the
/// in-place redraw of the watching views writes. stderr arrives merged into stdout. With
/// `stop_after`, the plugin is interrupted then (for `get -w`, which never ends by itself).
pub async fn run_plugin_on_terminal(args: &[&str], stop_after: Option<Duration>) -> anyhow::Result<PluginOutput> {
    let bin = workspace_bin("kubectl-upgradeplan")?;
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let stop = stop_after
        .map(|d| format!("timeout --signal=INT {}s ", d.as_secs()))
        .unwrap_or_default();
    let command = std::iter::once(quote(&bin.to_string_lossy()))
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let command = format!("{stop}{command}");
    let o = tokio::process::Command::new("script")
        .args(["--quiet", "--flush", "--return", "--command", &command, "/dev/null"])
        .env("NO_COLOR", "1")
        .env("COLUMNS", "200")
        .stdin(Stdio::null())
        .output()
        .await
        .context("running kubectl-upgradeplan under script(1)")?;
    Ok(PluginOutput {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    })
}

/// A kubeconfig that acts as `user` (the admin's credentials, impersonating), for tests of what
/// a person with given rights can do against the real API server's RBAC.
pub fn impersonating_kubeconfig(user: &str) -> anyhow::Result<String> {
    let mut config = kube::config::Kubeconfig::read()?;
    for a in &mut config.auth_infos {
        if let Some(info) = a.auth_info.as_mut() {
            info.impersonate = Some(user.to_string());
        }
    }
    let path = std::env::temp_dir().join(format!("{}-{user}.kubeconfig", std::process::id()));
    std::fs::write(&path, serde_json::to_string(&config)?)?;
    Ok(path.to_string_lossy().into_owned())
}

/// What one run of `kubectl-upgradeplan` printed and how it exited.
#[derive(Debug)]
pub struct PluginOutput {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs this workspace's `kubectl-upgradeplan` with `args` (no colour, no stdin), against
/// `kubeconfig` when given, else `KUBECONFIG`.
pub async fn run_plugin(kubeconfig: Option<&str>, args: &[&str]) -> anyhow::Result<PluginOutput> {
    let mut cmd = tokio::process::Command::new(workspace_bin("kubectl-upgradeplan")?);
    cmd.args(args).env("NO_COLOR", "1").stdin(Stdio::null());
    if let Some(k) = kubeconfig {
        cmd.env("KUBECONFIG", k);
    }
    let o = cmd.output().await.context("running kubectl-upgradeplan")?;
    Ok(PluginOutput {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into(),
        stderr: String::from_utf8_lossy(&o.stderr).into(),
    })
}

/// A real Prometheus (Debian's package, installed by `tests/cluster.sh install`) scraping
/// `targets` every second and evaluating `rules` every second. Killed when dropped.
pub struct Prometheus {
    pub addr: String,
    pub dir: PathBuf,
    bin: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Prometheus {
    /// A Prometheus scraping every second the `controllers`' /metrics (job
    /// `upgradeplan-controller`, over HTTPS with the token when secure) and plain `others`
    /// (job `others`), evaluating `rules`.
    pub async fn start(
        name: &str,
        controllers: &[&MetricsEndpoint],
        others: &[&str],
        rules: &Path,
    ) -> anyhow::Result<Prometheus> {
        let bin = std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("prometheus"))
                    .find(|f| f.is_file())
            })
            .ok_or_else(|| {
                anyhow!("prometheus is not installed: `tests/cluster.sh install` installs Debian's package")
            })?;
        let dir = std::env::temp_dir().join(format!("{name}-prometheus"));
        std::fs::create_dir_all(&dir)?;
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut jobs = String::new();
        for (i, c) in controllers.iter().enumerate() {
            let secure = match &c.token {
                Some(token) => {
                    let file = dir.join(format!("token-{i}"));
                    std::fs::write(&file, token)?;
                    let tls = match &c.ca_file {
                        Some(ca) => format!("{{ca_file: {ca:?}}}"),
                        None => "{insecure_skip_verify: true}".to_string(),
                    };
                    format!(
                        "    scheme: https\n    authorization: {{credentials_file: {file:?}}}\n    tls_config: {tls}\n"
                    )
                }
                None => String::new(),
            };
            jobs += &format!(
                "  - job_name: upgradeplan-controller-{i}\n{secure}    static_configs: [{{targets: ['{}'], labels: {{job: upgradeplan-controller}}}}]\n",
                c.addr
            );
        }
        if !others.is_empty() {
            let targets: Vec<String> = others.iter().map(|t| format!("'{t}'")).collect();
            jobs += &format!(
                "  - job_name: others\n    static_configs: [{{targets: [{}]}}]\n",
                targets.join(", ")
            );
        }
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{rules:?}]\nscrape_configs:\n{jobs}"
            ),
        )?;
        let mut p = Prometheus {
            addr,
            dir,
            bin,
            child: None,
        };
        p.resume().await?;
        Ok(p)
    }

    /// A Prometheus scraping a controller of `env` (and plain `targets`) with `rules`, and that
    /// controller, started with its metrics served as deploy/ does (`--metrics-secure`) and its
    /// signal gates read from this Prometheus every `gate_interval`.
    pub async fn with_controller(
        env: &mut TestEnv,
        rules: &Path,
        targets: &[&str],
        gate_interval: &str,
    ) -> anyhow::Result<(ControllerProcess, Prometheus, MetricsEndpoint)> {
        let token = env.metrics_reader().await?;
        let metrics = MetricsEndpoint {
            addr: format!("127.0.0.1:{}", free_port()?),
            token: Some(token),
            ca_file: None,
        };
        let prom = Prometheus::start(&env.id, &[&metrics], targets, rules).await?;
        let url = format!("http://{}", prom.addr);
        let (controller, _) = env
            .start_secure_controller(&[
                "--metrics-addr",
                &metrics.addr,
                "--prometheus-url",
                &url,
                "--gate-interval",
                gate_interval,
            ])
            .await?;
        Ok((controller, prom, metrics))
    }

    /// Starts the server (again) on its address and data, and waits until it is ready.
    pub async fn resume(&mut self) -> anyhow::Result<()> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("prometheus.log"))?;
        self.child = Some(
            tokio::process::Command::new(&self.bin)
                .arg(format!("--config.file={}", self.dir.join("prometheus.yml").display()))
                .arg(format!("--storage.tsdb.path={}", self.dir.join("data").display()))
                .arg(format!("--web.listen-address={}", self.addr))
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()?,
        );
        for _ in 0..150 {
            if http_get(&self.addr, "/-/ready").await.is_ok_and(|(c, _)| c == 200) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        bail!("prometheus did not start: {}", self.log())
    }

    /// Stops the server (SIGKILL, by its PID) and waits for it to exit: an outage.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query: its result vector.
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let (code, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", urlencode(expr))).await?;
        let v: serde_json::Value = serde_json::from_str(&body).with_context(|| format!("query {expr}: {body}"))?;
        if code != 200 {
            bail!("query {expr}: HTTP {code}: {}", v["error"]);
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// A range query from `start` to now, one step per `step_seconds`: its result matrix.
    pub async fn query_range(
        &self,
        expr: &str,
        start: chrono::DateTime<chrono::Utc>,
        step_seconds: u32,
    ) -> anyhow::Result<Vec<serde_json::Value>> {
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={step_seconds}",
            urlencode(expr),
            start.timestamp(),
            chrono::Utc::now().timestamp()
        );
        let (code, body) = http_get(&self.addr, &path).await?;
        let v: serde_json::Value = serde_json::from_str(&body).with_context(|| format!("query {expr}: {body}"))?;
        if code != 200 {
            bail!("query {expr}: HTTP {code}: {}", v["error"]);
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Every alert Prometheus holds (pending and firing), as its API returns them.
    pub async fn alerts(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        let (_, body) = http_get(&self.addr, "/api/v1/alerts").await?;
        let v: serde_json::Value = serde_json::from_str(&body)?;
        Ok(v["data"]["alerts"].as_array().cloned().unwrap_or_default())
    }

    /// Waits until alert `name` with every label of `labels` is firing (`firing`), or is no
    /// longer there at all (`!firing`); returns the alert when firing.
    pub async fn wait_alert(
        &self,
        name: &str,
        labels: &[(&str, &str)],
        firing: bool,
        timeout: Duration,
    ) -> anyhow::Result<Option<serde_json::Value>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let found = self
                .alerts()
                .await?
                .into_iter()
                .find(|a| a["labels"]["alertname"] == name && labels.iter().all(|(k, v)| a["labels"][*k] == *v));
            match (&found, firing) {
                (Some(a), true) if a["state"] == "firing" => return Ok(found),
                (None, false) => return Ok(None),
                _ => {}
            }
            if tokio::time::Instant::now() > deadline {
                bail!(
                    "alert {name} {labels:?} did not {} within {timeout:?}; now: {found:?}",
                    if firing { "fire" } else { "resolve" }
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// An HTTP endpoint serving one gauge the test sets, for Prometheus to scrape:
/// `test_gate_signal{source="e2e"} <value>` at any path.
pub struct Signal {
    pub addr: String,
    value: Arc<std::sync::atomic::AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl Signal {
    pub async fn start(initial: i64) -> anyhow::Result<Signal> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let value = Arc::new(std::sync::atomic::AtomicI64::new(initial));
        let served = value.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let v = served.load(std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    // The request is read up to its blank line; its content does not matter.
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let body = format!("# TYPE test_gate_signal gauge\ntest_gate_signal{{source=\"e2e\"}} {v}\n");
                    let response = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(response.as_bytes()).await;
                });
            }
        });
        Ok(Signal { addr, value, task })
    }

    pub fn set(&self, value: i64) {
        self.value.store(value, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Signal {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A group's counts as a run records them: (name, total, succeeded, failed, skipped), for
/// comparisons that ignore the group's phase and times.
pub fn group_counts(groups: &[upgradeplan::api::GroupStatus]) -> Vec<(String, i64, i64, i64, i64)> {
    groups
        .iter()
        .map(|g| (g.name.clone(), g.total, g.succeeded, g.failed, g.skipped))
        .collect()
}

/// The world of an end-to-end test, built in the order every test needs: the Promise and its
/// revisions, kratix-sim, then the resources (requests created when v1.0.0 was the latest,
/// their bindings made and applied by kratix-sim). A controller the test starts after it
/// ([`TestEnv::start_controller`]) so finds every binding in its first list.
pub struct World<'a> {
    prefix: &'a str,
    sim: &'a str,
    versions: (&'a [&'a str], &'a str),
    /// (name, value of label `env`) in namespace `apps`.
    bindings: &'a [(&'a str, &'a str)],
    /// (env, how many): `n` bindings `<env>-<i>` labelled `env` in a namespace of their own.
    per_env: &'a [(&'a str, usize)],
    sim_args: &'a [&'a str],
}

/// A [`World`], built.
pub struct Built {
    pub env: TestEnv,
    /// The namespace `apps`.
    pub ns: String,
    /// Every binding made, by `namespace/binding`, with its `env`.
    pub bindings: BTreeMap<String, String>,
}

impl<'a> World<'a> {
    /// A Promise with v1.0.0 and v2.0.0 (latest), no bindings, kratix-sim (`sim`) as it starts by
    /// default.
    pub fn new(prefix: &'a str, sim: &'a str) -> World<'a> {
        World {
            prefix,
            sim,
            versions: (&["v1.0.0", "v2.0.0"], "v2.0.0"),
            bindings: &[],
            per_env: &[],
            sim_args: &[],
        }
    }

    /// The Promise's revisions, `latest` marked latest.
    pub fn versions(mut self, versions: &'a [&'a str], latest: &'a str) -> Self {
        self.versions = (versions, latest);
        self
    }

    pub fn bindings(mut self, bindings: &'a [(&'a str, &'a str)]) -> Self {
        self.bindings = bindings;
        self
    }

    pub fn per_env(mut self, per_env: &'a [(&'a str, usize)]) -> Self {
        self.per_env = per_env;
        self
    }

    pub fn sim_args(mut self, args: &'a [&'a str]) -> Self {
        self.sim_args = args;
        self
    }

    pub async fn build(self) -> anyhow::Result<Built> {
        let mut env = TestEnv::new(self.prefix).await?;
        env.promise_with_revisions(self.versions.0, self.versions.1).await?;
        let ns = env.namespace("apps").await?;
        // kratix-sim first: it makes the resources' bindings from their requests.
        env.start_sim(self.sim, self.sim_args)?;
        let mut bindings = env.resources_at_v1(&ns, self.bindings.iter().copied()).await?;
        for (group, n) in self.per_env {
            let group_ns = env.namespace(group).await?;
            let names: Vec<String> = (0..*n).map(|i| format!("{group}-{i}")).collect();
            let made = env
                .resources_at_v1(&group_ns, names.iter().map(|name| (name.as_str(), *group)))
                .await?;
            bindings.extend(made);
        }
        Ok(Built { env, ns, bindings })
    }
}

/// When the controller started `b`'s upgrade (its `upgrade-started-at` annotation, on the
/// controller's clock); panics, naming the binding, when it never did.
pub fn started_at(b: &ResourceBinding) -> chrono::DateTime<chrono::Utc> {
    b.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION))
        .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(|| panic!("{} never started (no upgrade-started-at annotation)", b.name_any()))
}
