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
use upgradeplan::api::{UpgradeApproval, UpgradeFreeze, UpgradePlan, UpgradeRun};

use crate::{bindings, context, watch};

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
    pub snapshots: Triggers<PartialObjectMeta<ConfigMap>>,
}

pub struct Caches {
    pub plans: Store<UpgradePlan>,
    pub runs: Store<UpgradeRun>,
    pub bindings: bindings::BindingStore,
    pub revisions: Store<PromiseRevision>,
    pub promises: Store<Promise>,
    pub health: Store<HealthRecord>,
    pub approvals: Store<UpgradeApproval>,
    pub freezes: Store<UpgradeFreeze>,
    pub snapshot_meta: Store<PartialObjectMeta<ConfigMap>>,
    /// The caches every run needs.
    pub synced: context::Synced,
    /// Caches apart from `synced` (see `Ctx`): each with its own flags.
    pub health_synced: Arc<AtomicBool>,
    pub approvals_synced: Arc<AtomicBool>,
    pub freezes_synced: Arc<AtomicBool>,
    pub health_not_served: Arc<AtomicBool>,
    pub approvals_not_served: Arc<AtomicBool>,
    pub freezes_not_served: Arc<AtomicBool>,
    /// Keeps every store current; polled for as long as the triggers are.
    pub drive: BoxFuture<'static, ()>,
    pub triggers: AllTriggers,
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
    let (plans, plans_w) = reflector::store::<UpgradePlan>();
    let (runs, runs_w) = reflector::store::<UpgradeRun>();
    let bindings = bindings::BindingStore::default();
    let (revisions, revisions_w) = reflector::store::<PromiseRevision>();
    let (promises, promises_w) = reflector::store::<Promise>();
    let (health, health_w) = reflector::store::<HealthRecord>();
    let (approvals, approvals_w) = reflector::store::<UpgradeApproval>();
    let (freezes, freezes_w) = reflector::store::<UpgradeFreeze>();
    let plan_config = || match selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let synced = context::Synced::default();
    // Each cache marks its flags (see `watch::cache`) and is split into one trigger per
    // controller that watches the kind (see `watch::fan_out`).
    let cache = |flag: Arc<AtomicBool>, not_served: Option<&Arc<AtomicBool>>| watch::CacheFlags {
        synced: flag,
        not_served: not_served.cloned(),
    };
    macro_rules! cached {
        ($writer:expr, $kind:ty, $config:expr, $triggers:expr, $flags:expr) => {
            watch::cache::<$kind>(
                client.clone(),
                $writer,
                $config,
                $triggers,
                $flags,
                forwarding.clone(),
            )
        };
    }
    let (drive_plans, plan_triggers) = cached!(plans_w, UpgradePlan, plan_config(), 3, cache(synced.flag(), None));
    let (drive_runs, run_triggers) = cached!(runs_w, UpgradeRun, all(), 2, cache(synced.flag(), None));
    // Bindings have a store of their own, compact (see `bindings`).
    let (drive_bindings, binding_triggers) = {
        let flag = synced.flag();
        let stream = bindings::reflect(
            bindings.clone(),
            watch::watch_all::<ResourceBinding>(client.clone(), all()),
        )
        .inspect(move |ev| {
            if let Ok(watcher::Event::InitDone) = ev {
                flag.store(true, Ordering::SeqCst);
            }
        });
        watch::fan_out(stream, 1, forwarding.clone())
    };
    let (drive_revisions, revision_triggers) =
        cached!(revisions_w, PromiseRevision, all(), 1, cache(synced.flag(), None));
    let (drive_promises, promise_triggers) = cached!(promises_w, Promise, all(), 1, cache(synced.flag(), None));
    // Caches apart from `synced`, each with its own flag: a cluster without their kind (Kratix
    // without HealthRecords, or CRDs not yet updated to UpgradeApproval) must not stop every run;
    // the runs that need one wait for it (see `run::pass`).
    let health_synced = Arc::new(AtomicBool::new(false));
    let approvals_synced = Arc::new(AtomicBool::new(false));
    let health_not_served = Arc::new(AtomicBool::new(false));
    let approvals_not_served = Arc::new(AtomicBool::new(false));
    let (drive_health, health_triggers) = cached!(
        health_w,
        HealthRecord,
        all(),
        1,
        cache(health_synced.clone(), Some(&health_not_served))
    );
    let (drive_approvals, approval_triggers) = cached!(
        approvals_w,
        UpgradeApproval,
        all(),
        1,
        cache(approvals_synced.clone(), Some(&approvals_not_served))
    );
    // Freezes hold every run: a run starts nothing until their list is in, unless the API server
    // does not serve the kind (no freeze can exist then; see `Ctx::freezes_known`).
    let freezes_synced = Arc::new(AtomicBool::new(false));
    let freezes_not_served = Arc::new(AtomicBool::new(false));
    let (drive_freezes, freeze_triggers) = cached!(
        freezes_w,
        UpgradeFreeze,
        all(),
        3,
        cache(freezes_synced.clone(), Some(&freezes_not_served))
    );
    // The metadata (no data) of the snapshot ConfigMaps: a change to one wakes its run, whose
    // pass verifies it against the digest its status recorded.
    let (snapshot_meta, snapshot_meta_w) = reflector::store::<PartialObjectMeta<ConfigMap>>();
    let (drive_snapshots, snapshot_triggers) = {
        let flag = synced.flag();
        // An Api of PartialObjectMeta makes metadata-only requests.
        let api: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), snapshot_namespace);
        let config = watcher::Config::default().labels(upgradeplan::api::RUN_LABEL);
        let stream = reflector::reflector(
            snapshot_meta_w,
            watcher(api, config).backoff(watch::reconnect_backoff()),
        )
        .inspect(move |ev| match ev {
            Ok(watcher::Event::InitDone) => flag.store(true, Ordering::SeqCst),
            Err(e) => tracing::warn!(kind = "ConfigMap", error = %e, "snapshot watch error; retrying"),
            _ => {}
        });
        watch::fan_out(stream, 1, forwarding.clone())
    };
    let drive = async move {
        tokio::join!(
            drive_snapshots,
            drive_plans,
            drive_runs,
            drive_bindings,
            drive_revisions,
            drive_promises,
            drive_health,
            drive_approvals,
            drive_freezes
        );
    };
    Caches {
        plans,
        runs,
        bindings,
        revisions,
        promises,
        health,
        approvals,
        freezes,
        snapshot_meta,
        synced,
        health_synced,
        approvals_synced,
        freezes_synced,
        health_not_served,
        approvals_not_served,
        freezes_not_served,
        drive: drive.boxed(),
        triggers: AllTriggers {
            plans: boxed(plan_triggers),
            runs: boxed(run_triggers),
            bindings: boxed(binding_triggers),
            revisions: boxed(revision_triggers),
            promises: boxed(promise_triggers),
            health: boxed(health_triggers),
            approvals: boxed(approval_triggers),
            freezes: boxed(freeze_triggers),
            snapshots: boxed(snapshot_triggers),
        },
    }
}
