//! The controller's caches: one reflector store per kind it reads, each with its flags (see
//! [`watch::cache`]), and the trigger streams of the controllers that watch each kind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use upgradeplan::api::kratix::{CachedBinding, HealthRecord, Promise, PromiseRevision, ResourceBinding};
use upgradeplan::api::{UpgradeApproval, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradeRun};

use crate::{bindings, watch};

/// Whether each watch has delivered its initial list.
///
/// Tracked here rather than with `Store::wait_until_ready`: in kube-runtime 5 that future keeps
/// only the last waiter's waker, so a reconciler waiting beside the Controller can sleep forever.
#[derive(Default)]
pub struct Synced {
    flags: std::sync::Mutex<Vec<Arc<std::sync::atomic::AtomicBool>>>,
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

/// The trigger streams of one kind, one per controller that watches it.
pub type Triggers<K> = Vec<BoxStream<'static, Result<K, watcher::Error>>>;

fn boxed<K, S>(triggers: Vec<S>) -> Triggers<K>
where
    S: Stream<Item = Result<K, watcher::Error>> + Send + 'static,
{
    triggers.into_iter().map(StreamExt::boxed).collect()
}

/// Each kind's triggers.
pub struct AllTriggers {
    pub plans: Triggers<UpgradePlan>,
    pub runs: Triggers<UpgradeRun>,
    pub bindings: Triggers<Arc<CachedBinding>>,
    pub revisions: Triggers<PromiseRevision>,
    pub promises: Triggers<Promise>,
    pub health: Triggers<HealthRecord>,
    pub approvals: Triggers<UpgradeApproval>,
    pub freezes: Triggers<UpgradeFreeze>,
    pub budgets: Triggers<UpgradeBudget>,
    pub snapshots: Triggers<PartialObjectMeta<ConfigMap>>,
    /// Once each time a kind the cluster may not serve comes or goes (Kratix upgraded or
    /// downgraded underneath): every run looks again (`KindsServed`, spec §14.2).
    pub kinds_served: futures::channel::mpsc::UnboundedReceiver<()>,
}

/// Whether the cache of a kind the cluster may not serve has its list, or the API server said it
/// does not serve the kind (a 404 to the list). Such kinds are apart from `Stores::synced`: a
/// cluster without HealthRecords, or CRDs not yet updated to UpgradeApproval, must not stop every
/// run; the runs that need one wait for it (see `run::pass`).
#[derive(Clone, Default)]
pub struct KindFlags {
    synced: Arc<AtomicBool>,
    not_served: Arc<AtomicBool>,
}

impl KindFlags {
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    pub fn not_served(&self) -> bool {
        self.not_served.load(Ordering::SeqCst)
    }

    /// As the engine reads it.
    pub fn cache(&self) -> upgradeplan::engine::lifecycle::KindCache {
        upgradeplan::engine::lifecycle::KindCache {
            listed: self.synced(),
            not_served: self.not_served(),
        }
    }

    /// Listed, or not served (no object of the kind can exist).
    pub fn known(&self) -> bool {
        self.synced() || self.not_served()
    }

    fn cache_flags(&self, served_changed: &futures::channel::mpsc::UnboundedSender<()>) -> watch::CacheFlags {
        watch::CacheFlags {
            synced: self.synced.clone(),
            not_served: Some(self.not_served.clone()),
            served_changed: Some(served_changed.clone()),
        }
    }

    /// Listed and served, as a test's empty caches are.
    #[cfg(test)]
    pub fn listed() -> KindFlags {
        let flags = KindFlags::default();
        flags.synced.store(true, Ordering::SeqCst);
        flags
    }
}

/// The stores the controllers read, and whether they have their lists.
pub struct Stores {
    pub plans: Store<UpgradePlan>,
    pub runs: Store<UpgradeRun>,
    pub bindings: bindings::BindingStore,
    pub revisions: Store<PromiseRevision>,
    pub promises: Store<Promise>,
    /// Kratix's HealthRecords: only runs whose plan has a `healthCheck` wait for them.
    pub health: Store<HealthRecord>,
    /// UpgradeApprovals: only runs whose plan has `requireApproval` wait for them.
    pub approvals: Store<UpgradeApproval>,
    /// UpgradeFreezes: see `Ctx::freezes_known`.
    pub freezes: Store<UpgradeFreeze>,
    /// UpgradeBudgets: see `Ctx::budgets_known`.
    pub budgets: Store<UpgradeBudget>,
    /// The metadata of the snapshot ConfigMaps: a change to one, or its deletion, shows as a new
    /// resourceVersion, or none, and wakes its run, which reads and verifies it.
    pub snapshot_meta: Store<PartialObjectMeta<ConfigMap>>,
    /// Whether every cache above but `health`, `approvals` and `freezes` has its initial list.
    pub synced: Synced,
    pub health_kind: KindFlags,
    pub approvals_kind: KindFlags,
    pub freezes_kind: KindFlags,
    pub budgets_kind: KindFlags,
}

impl Stores {
    /// Empty stores, every list in (a test's controller context).
    #[cfg(test)]
    pub fn empty() -> Stores {
        Stores {
            plans: reflector::store().0,
            runs: reflector::store().0,
            bindings: Default::default(),
            revisions: reflector::store().0,
            promises: reflector::store().0,
            health: reflector::store().0,
            approvals: reflector::store().0,
            freezes: reflector::store().0,
            budgets: reflector::store().0,
            snapshot_meta: reflector::store().0,
            synced: Default::default(),
            health_kind: KindFlags::listed(),
            approvals_kind: KindFlags::listed(),
            freezes_kind: KindFlags::listed(),
            budgets_kind: KindFlags::listed(),
        }
    }
}

pub struct Caches {
    pub stores: Stores,
    /// Keeps every store current; polled for as long as the triggers are.
    pub drive: BoxFuture<'static, ()>,
    pub triggers: AllTriggers,
}

/// What a kind needs to be cached by a reflector.
trait Cached:
    kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static
{
}
impl<K> Cached for K where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static
{
}

/// Builds the caches, collecting what drives each.
struct Builder<'a> {
    client: &'a Client,
    forwarding: &'a Arc<AtomicBool>,
    drives: Vec<BoxFuture<'static, ()>>,
}

impl Builder<'_> {
    /// A cache of every `K` (`config`) with its `flags`, split into `n` triggers.
    fn cache<K: Cached>(
        &mut self,
        config: watcher::Config,
        n: usize,
        flags: watch::CacheFlags,
    ) -> (Store<K>, Triggers<K>) {
        let (store, writer) = reflector::store::<K>();
        let (drive, triggers) =
            watch::cache::<K>(self.client.clone(), writer, config, n, flags, self.forwarding.clone());
        self.drives.push(drive.boxed());
        (store, boxed(triggers))
    }

    /// A cache of a kind every run needs, counted in `synced`.
    fn needed<K: Cached>(&mut self, synced: &Synced, config: watcher::Config, n: usize) -> (Store<K>, Triggers<K>) {
        let flags = watch::CacheFlags {
            synced: synced.flag(),
            not_served: None,
            served_changed: None,
        };
        self.cache(config, n, flags)
    }

    /// Marks `flag` when `stream`'s initial list is in and splits it into one trigger.
    fn drive<K, S>(&mut self, stream: S, flag: Arc<AtomicBool>) -> Triggers<K>
    where
        K: Clone + Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let stream = stream.inspect(move |ev| {
            if let Ok(watcher::Event::InitDone) = ev {
                flag.store(true, Ordering::SeqCst);
            }
        });
        let (drive, triggers) = watch::fan_out(stream, 1, self.forwarding.clone());
        self.drives.push(drive.boxed());
        boxed(triggers)
    }
}

/// The caches of the kinds the controllers read: plans of `selector` only (when sharded), the
/// snapshot ConfigMaps' metadata in `snapshot_namespace`, everything else cluster-wide. Triggers
/// flow once `forwarding` is set; until then the stores fill and follow changes.
pub fn start(
    client: &Client,
    selector: Option<&str>,
    snapshot_namespace: &str,
    forwarding: &Arc<AtomicBool>,
) -> Caches {
    let all = watcher::Config::default;
    let plan_config = match selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let synced = Synced::default();
    let mut b = Builder {
        client,
        forwarding,
        drives: Vec::new(),
    };
    // Each cache is split into one trigger per controller that watches the kind.
    let (plans, plan_triggers) = b.needed::<UpgradePlan>(&synced, plan_config, 3);
    let (runs, run_triggers) = b.needed::<UpgradeRun>(&synced, all(), 2);
    let (revisions, revision_triggers) = b.needed::<PromiseRevision>(&synced, all(), 1);
    let (promises, promise_triggers) = b.needed::<Promise>(&synced, all(), 1);
    // Bindings have a store of their own, compact (see `bindings`).
    let bindings = bindings::BindingStore::default();
    let binding_triggers = b.drive(
        bindings::reflect(
            bindings.clone(),
            watch::watch_all::<ResourceBinding>(client.clone(), all()),
        ),
        synced.flag(),
    );
    let (health_kind, approvals_kind, freezes_kind) = Default::default();
    let (served_changed, kinds_served) = futures::channel::mpsc::unbounded();
    let flags = |kind: &KindFlags| kind.cache_flags(&served_changed);
    let (health, health_triggers) = b.cache::<HealthRecord>(all(), 1, flags(&health_kind));
    let (approvals, approval_triggers) = b.cache::<UpgradeApproval>(all(), 1, flags(&approvals_kind));
    let (freezes, freeze_triggers) = b.cache::<UpgradeFreeze>(all(), 3, flags(&freezes_kind));
    let budgets_kind = KindFlags::default();
    let (budgets, budget_triggers) = b.cache::<UpgradeBudget>(all(), 2, flags(&budgets_kind));
    // The metadata (no data) of the snapshot ConfigMaps: a change to one wakes its run, whose
    // pass verifies it against the digest its status recorded.
    let (snapshot_meta, snapshot_meta_w) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let snapshot_triggers = {
        // An Api of PartialObjectMeta makes metadata-only requests.
        let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), snapshot_namespace);
        let config = watcher::Config::default().labels(upgradeplan::api::RUN_LABEL);
        let stream = reflector::reflector(
            snapshot_meta_w,
            watcher(api, config).backoff(watch::reconnect_backoff()),
        )
        .inspect(|ev| {
            if let Err(e) = ev {
                tracing::warn!(kind = "ConfigMap", error = %e, "snapshot watch error; retrying");
            }
        });
        b.drive(stream, synced.flag())
    };
    let drive = futures::future::join_all(b.drives).map(|_| ());
    Caches {
        stores: Stores {
            plans,
            runs,
            bindings,
            revisions,
            promises,
            health,
            approvals,
            freezes,
            budgets,
            snapshot_meta,
            synced,
            health_kind,
            approvals_kind,
            freezes_kind,
            budgets_kind,
        },
        drive: drive.boxed(),
        triggers: AllTriggers {
            plans: plan_triggers,
            runs: run_triggers,
            bindings: binding_triggers,
            revisions: revision_triggers,
            promises: promise_triggers,
            health: health_triggers,
            approvals: approval_triggers,
            freezes: freeze_triggers,
            budgets: budget_triggers,
            snapshots: snapshot_triggers,
            kinds_served,
        },
    }
}
