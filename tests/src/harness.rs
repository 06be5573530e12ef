//! Test harness for the real control plane: one isolated world per test.
//!
//! Each test gets a unique id, its own namespaces and its own Promise name, so tests run in
//! parallel against one API server without seeing each other.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::OnceCell;
use upgradeplan::api::kratix::{
    Promise, PromiseRevision, ResourceBinding, LATEST_REVISION_LABEL, PROMISE_NAME_LABEL, PROMISE_VERSION_LABEL,
    RESOURCE_NAME_LABEL,
};

/// The workspace root (for fixtures and generated CRDs).
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
    CRDS.get_or_try_init(|| async {
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
                create_or_replace(&api, crd)
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
        Ok::<(), anyhow::Error>(())
    })
    .await?;
    Ok(())
}

/// Creates `crd`, or replaces it when it exists. (Server-side apply would be simpler, but on
/// Kubernetes 1.20 it rejects `x-kubernetes-validations`, which create and replace drop.)
async fn create_or_replace(api: &Api<CustomResourceDefinition>, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    let name = crd.name_any();
    for _ in 0..5 {
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let mut replacement = crd.clone();
        replacement.metadata.resource_version = api.get(&name).await?.metadata.resource_version;
        match api.replace(&name, &PostParams::default(), &replacement).await {
            Ok(_) => return Ok(()),
            // Another test binary won the race; try again with the newer version.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    bail!("CRD {name} kept changing while being installed")
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

/// One test's world: a Promise, its revisions, namespaces and bindings, and optionally kratix-sim.
pub struct TestEnv {
    pub client: Client,
    pub id: String,
    /// The unique Promise name of this test.
    pub promise: String,
    namespaces: Vec<String>,
    sim: Option<tokio::process::Child>,
}

impl TestEnv {
    pub async fn new(prefix: &str) -> anyhow::Result<TestEnv> {
        let client = client().await?;
        install_crds(&client).await?;
        let id = unique_id(prefix);
        Ok(TestEnv {
            client,
            promise: format!("{id}-promise"),
            id,
            namespaces: Vec::new(),
            sim: None,
        })
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

    /// Creates the Promise with a PromiseRevision per version; `latest` is marked latest.
    pub async fn promise_with_revisions(&self, versions: &[&str], latest: &str) -> anyhow::Result<()> {
        let api: Api<Promise> = Api::all(self.client.clone());
        let promise: Promise = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "Promise",
            "metadata": {"name": self.promise, "labels": {PROMISE_VERSION_LABEL: latest}}, "spec": {}
        }))?;
        api.create(&PostParams::default(), &promise).await?;
        for v in versions {
            self.create_revision(v, *v == latest).await?;
        }
        Ok(())
    }

    fn revision_name(&self, version: &str) -> String {
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
        let rev: PromiseRevision = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
            "metadata": {"name": name, "labels": labels},
            "spec": {"promiseRef": {"name": self.promise}, "version": version}
        }))?;
        api.create(&PostParams::default(), &rev).await?;
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

    /// Creates a binding of this test's Promise for the Resource Request `ns/name`, with
    /// `spec.version = spec_version` and, when given, `status.lastAppliedVersion = applied`.
    pub async fn binding(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        spec_version: &str,
        applied: Option<&str>,
    ) -> anyhow::Result<ResourceBinding> {
        let mut all: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        all.insert(PROMISE_NAME_LABEL.into(), self.promise.clone());
        all.insert(RESOURCE_NAME_LABEL.into(), name.into());
        let api: Api<ResourceBinding> = Api::namespaced(self.client.clone(), ns);
        let b: ResourceBinding = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": format!("{name}-{}", self.promise), "namespace": ns, "labels": all},
            "spec": {"version": spec_version, "promiseRef": {"name": self.promise}, "resourceRef": {"name": name, "namespace": ns}}
        }))?;
        let created = api.create(&PostParams::default(), &b).await?;
        match applied {
            Some(v) => Ok(api
                .patch_status(
                    &created.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"lastAppliedVersion": v}})),
                )
                .await?),
            None => Ok(created),
        }
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

    /// Waits (watch-driven) until `binding` satisfies `pred`, for at most `timeout`.
    pub async fn wait_binding(
        &self,
        ns: &str,
        binding: &str,
        timeout: Duration,
        what: &str,
        pred: impl Fn(&ResourceBinding) -> bool,
    ) -> anyhow::Result<ResourceBinding> {
        let api = self.bindings_api(ns);
        let cond = move |b: Option<&ResourceBinding>| b.is_some_and(&pred);
        match tokio::time::timeout(timeout, await_condition(api.clone(), binding, cond)).await {
            Ok(Ok(Some(b))) => Ok(b),
            Ok(Ok(None)) => Err(anyhow!("{ns}/{binding} disappeared while waiting for: {what}")),
            Ok(Err(e)) => Err(anyhow!("watching {ns}/{binding}: {e}")),
            Err(_) => {
                let now = api.get_opt(binding).await?;
                Err(anyhow!(
                    "timed out after {timeout:?} waiting for {ns}/{binding}: {what}; it is now {:#?}",
                    now.map(|b| (b.spec, b.status, b.metadata.labels))
                ))
            }
        }
    }

    /// Starts the kratix-sim binary (`exe`: `env!("CARGO_BIN_EXE_kratix-sim")` in a test) for
    /// this test's Promise. Its log goes to `$TMPDIR/<id>-kratix-sim.log`.
    pub fn start_sim(&mut self, exe: &str, extra_args: &[&str]) -> anyhow::Result<PathBuf> {
        let log = std::env::temp_dir().join(format!("{}-kratix-sim.log", self.id));
        let file = std::fs::File::create(&log)?;
        let child = tokio::process::Command::new(exe)
            .args(["--promise", &self.promise])
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {exe}"))?;
        self.sim = Some(child);
        Ok(log)
    }

    /// Deletes what the test created (namespaces go in the background) and stops kratix-sim.
    pub async fn teardown(mut self) -> anyhow::Result<()> {
        if let Some(mut sim) = self.sim.take() {
            let _ = sim.kill().await;
        }
        let dp = DeleteParams::background();
        let ns_api: Api<Namespace> = Api::all(self.client.clone());
        for ns in &self.namespaces {
            let _ = ns_api.delete(ns, &dp).await;
        }
        let revs: Api<PromiseRevision> = Api::all(self.client.clone());
        let lp = kube::api::ListParams::default().labels(&format!("{PROMISE_NAME_LABEL}={}", self.promise));
        let _ = revs.delete_collection(&dp, &lp).await;
        let promises: Api<Promise> = Api::all(self.client.clone());
        let _ = promises.delete(&self.promise, &dp).await;
        Ok(())
    }
}
