//! What both reconcilers share: the client, caches, the event recorder, and status writes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use upgradeplan::api::kratix::{Promise, PromiseRevision, ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{UpgradePlan, UpgradeRun, FIELD_MANAGER, PLAN_LABEL};

use crate::error::Result;
use crate::events::{EventType, Publisher};
pub use upgradeplan::engine::snapshot::Frozen;

/// How long a reconcile waits before retrying while the caches are still filling.
pub const CACHE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether each watch has delivered its initial list.
///
/// Tracked here rather than with `Store::wait_until_ready`: in kube-runtime 5 that future keeps
/// only the last waiter's waker, so a reconciler waiting beside the Controller can sleep forever.
#[derive(Default)]
pub struct Synced {
    flags: Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>,
}

impl Synced {
    /// A new flag for one watch, set when its initial list is complete.
    pub fn flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Ok(mut flags) = self.flags.lock() {
            flags.push(flag.clone());
        }
        flag
    }

    pub fn all(&self) -> bool {
        self.flags
            .lock()
            .map(|f| f.iter().all(|x| x.load(std::sync::atomic::Ordering::SeqCst)))
            .unwrap_or(false)
    }
}

pub struct Ctx {
    pub client: Client,
    pub recorder: Publisher,
    pub snapshot_namespace: String,
    /// `--selector`: only plans matching it, and their runs, are ours.
    pub selector: Option<String>,
    pub plans: Store<UpgradePlan>,
    pub runs: Store<UpgradeRun>,
    pub bindings: Store<ResourceBinding>,
    pub revisions: Store<PromiseRevision>,
    pub promises: Store<Promise>,
    /// Whether every cache above has its initial list.
    pub synced: Synced,
    /// Snapshots by run UID: they never change once written.
    pub frozen: Mutex<HashMap<String, Arc<Frozen>>>,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// When this process started each resource's upgrade: (run UID, namespace/binding).
    pub started: Mutex<HashMap<(String, String), chrono::DateTime<chrono::Utc>>>,
    /// (run UID, event reason, binding) already reported, so per-resource events are not repeated
    /// on every reconcile. Lost on restart, which at worst repeats an event.
    pub reported: Mutex<HashSet<(String, &'static str, String)>>,
}

impl Ctx {
    pub fn plan(&self, name: &str) -> Option<Arc<UpgradePlan>> {
        self.plans.get(&ObjectRef::new(name))
    }

    /// Runs of `plan` (by label or, for runs not yet labelled, by reference).
    pub fn runs_of(&self, plan: &str) -> Vec<Arc<UpgradeRun>> {
        self.runs.state().into_iter().filter(|r| run_plan(r) == plan).collect()
    }

    /// Bindings of `promise`, all namespaces, from the cache (shared, never copied).
    pub fn bindings_of(&self, promise: &str) -> Vec<Arc<ResourceBinding>> {
        self.bindings
            .state()
            .into_iter()
            .filter(|b| b.labels().get(PROMISE_NAME_LABEL).map(String::as_str) == Some(promise))
            .collect()
    }

    pub fn binding(&self, namespace: &str, name: &str) -> Option<Arc<ResourceBinding>> {
        self.bindings.get(&ObjectRef::new(name).within(namespace))
    }

    /// Whether the PromiseRevision of (promise, version) exists.
    pub fn revision_exists(&self, promise: &str, version: &str) -> bool {
        self.revisions.state().iter().any(|r| {
            let of = r
                .labels()
                .get(PROMISE_NAME_LABEL)
                .cloned()
                .unwrap_or_else(|| r.spec.promise_ref.name.clone());
            of == promise && r.spec.version == version
        })
    }

    /// Publishes an event on `obj`; failures are logged, never fatal.
    pub async fn event<K: Resource<DynamicType = ()>>(&self, obj: &K, type_: EventType, reason: &str, note: String) {
        if let Err(e) = self.recorder.publish(&obj.object_ref(&()), type_, reason, &note).await {
            tracing::warn!(error = %e, reason, "publishing an event failed");
        }
    }

    /// True the first time `(run, kind, key)` is seen (per process).
    pub fn first_time(&self, run: &UpgradeRun, kind: &'static str, key: String) -> bool {
        self.reported
            .lock()
            .map(|mut seen| seen.insert((run.uid().unwrap_or_default(), kind, key)))
            .unwrap_or(true)
    }

    /// Reports a per-resource event once per run.
    pub async fn event_once(
        &self,
        run: &UpgradeRun,
        type_: EventType,
        reason: &'static str,
        binding: String,
        note: String,
    ) {
        if self.first_time(run, reason, binding) {
            self.event(run, type_, reason, note).await;
        }
    }

    /// Forgets what was cached for a run that is finished or gone.
    pub fn forget_run(&self, uid: &str) {
        if let Ok(mut f) = self.frozen.lock() {
            f.remove(uid);
        }
        if let Ok(mut r) = self.reported.lock() {
            r.retain(|(u, _, _)| u != uid);
        }
        if let Ok(mut s) = self.started.lock() {
            s.retain(|(u, _), _| u != uid);
        }
    }
}

/// Annotation naming the `--selector` of the controller that took a run on, so that the run
/// stays recognisably its own after the plan is deleted (to release the finalizer).
pub const SELECTOR_ANNOTATION: &str = "platform.syntasso.io/controller-selector";

impl Ctx {
    /// Whether this controller handles `run`: always without `--selector`; with one, when the
    /// run's plan is in our (selected) cache, or the run was taken on by a controller with our
    /// selector.
    pub fn handles(&self, run: &UpgradeRun) -> bool {
        match &self.selector {
            None => true,
            Some(sel) => {
                self.plan(&run.spec.upgrade_plan_ref.name).is_some()
                    || run.annotations().get(SELECTOR_ANNOTATION) == Some(sel)
            }
        }
    }
}

/// The plan a run belongs to.
pub fn run_plan(run: &UpgradeRun) -> &str {
    run.labels()
        .get(PLAN_LABEL)
        .map(String::as_str)
        .unwrap_or(run.spec.upgrade_plan_ref.name.as_str())
}

/// Writes `status` of a cluster-scoped object with server-side apply under our field manager.
pub async fn apply_status<K>(client: &Client, name: &str, status: impl serde::Serialize) -> Result<()>
where
    K: Resource<DynamicType = (), Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::all(client.clone());
    let body = json!({"apiVersion": K::api_version(&()), "kind": K::kind(&()), "status": status});
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(body))
        .await?;
    Ok(())
}
