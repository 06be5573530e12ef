//! The cache of ResourceBindings: the one kind counted in tens of thousands.
//!
//! kube's reflector store keeps each object whole — its ObjectMeta with a `BTreeMap` node of eleven
//! entries for even one label, under a key holding copies of its name, namespace, resourceVersion
//! and UID — about 2 KiB per binding. This store keeps a [`CachedBinding`] (only what the engine
//! reads, compact) per namespace and name, with the reflector's semantics: a re-list is gathered
//! aside and replaces the whole cache when it is complete, so readers never see half a list.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use upgradeplan::api::kratix::{BindingFacts, CachedBinding, Interner, ResourceBinding};
use upgradeplan::engine::upgrade_budget::kratix_working_run;

/// A map with a fast seeded hasher: a run's pass looks up each binding of its snapshot, and
/// SipHash was an eighth of a budgeted pass's CPU.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// Bindings by namespace, then name.
type ByName = Map<Arc<str>, Map<Arc<str>, Arc<CachedBinding>>>;

/// The cached bindings, by name and by Promise, and the count Kratix works on per run: a run's
/// pass reads its own Promise's bindings and every budgeted run's count, never every binding
/// (fifty plans' passes each walking a hundred thousand bindings would make one binding event's
/// cost grow with the number of plans).
#[derive(Default)]
struct Index {
    by_name: ByName,
    by_promise: Map<Arc<str>, ByName>,
    /// [`kratix_working_run`] counted per run.
    in_flight: Map<Box<str>, usize>,
}

fn insert_into(map: &mut ByName, b: &Arc<CachedBinding>) -> Option<Arc<CachedBinding>> {
    let names = match map.get_mut(&*b.namespace) {
        Some(names) => names,
        None => map.entry(b.namespace.clone()).or_default(),
    };
    names.insert(b.name.clone(), Arc::clone(b))
}

fn remove_from(map: &mut ByName, namespace: &str, name: &str) -> Option<Arc<CachedBinding>> {
    let names = map.get_mut(namespace)?;
    let removed = names.remove(name);
    if names.is_empty() {
        map.remove(namespace);
    }
    removed
}

impl Index {
    fn insert(&mut self, b: &Arc<CachedBinding>) {
        let old = insert_into(&mut self.by_name, b);
        if let Some(old) = &old {
            self.forget(old);
        }
        // Looked up by the borrowed name first: a key is allocated once per Promise, not per event.
        let of_promise = match self.by_promise.get_mut(b.promise()) {
            Some(names) => names,
            None => self.by_promise.entry(Arc::from(b.promise())).or_default(),
        };
        insert_into(of_promise, b);
        if let Some(run) = kratix_working_run(b.as_ref()) {
            *self.in_flight.entry(run.into()).or_insert(0) += 1;
        }
    }

    fn remove(&mut self, namespace: &str, name: &str) {
        if let Some(old) = remove_from(&mut self.by_name, namespace, name) {
            self.forget(&old);
        }
    }

    /// Takes `old` (no longer in `by_name`) out of the other indices.
    fn forget(&mut self, old: &CachedBinding) {
        if let Some(names) = self.by_promise.get_mut(old.promise()) {
            remove_from(names, &old.namespace, &old.name);
            if names.is_empty() {
                self.by_promise.remove(old.promise());
            }
        }
        if let Some(run) = kratix_working_run(old) {
            if let Some(count) = self.in_flight.get_mut(run) {
                *count -= 1;
                if *count == 0 {
                    self.in_flight.remove(run);
                }
            }
        }
    }
}

#[derive(Default)]
struct Inner {
    live: Index,
    /// A re-list in progress (between `Init` and `InitDone`).
    relist: Option<Index>,
}

/// A shared, cheaply cloned handle on the bindings' cache.
#[derive(Clone, Default)]
pub struct BindingStore {
    inner: Arc<RwLock<Inner>>,
}

impl BindingStore {
    /// Applies one watch event.
    pub fn apply(&self, event: &watcher::Event<Arc<CachedBinding>>) {
        // A poisoned lock means a panic while writing; the maps are still whole (each write is a
        // single insert or remove), so go on with them rather than lose the cache.
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => inner.relist = Some(Index::default()),
            watcher::Event::InitApply(b) => match &mut inner.relist {
                Some(relist) => relist.insert(b),
                None => inner.live.insert(b),
            },
            watcher::Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    inner.live = relist;
                }
            }
            watcher::Event::Apply(b) => inner.live.insert(b),
            watcher::Event::Delete(b) => inner.live.remove(&b.namespace, &b.name),
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedBinding>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.live.by_name.get(namespace)?.get(name).cloned()
    }

    /// The cached binding of each (namespace, name) of `keys`, in their order, under one read of
    /// the lock: a run's pass asks for its whole snapshot at once.
    pub fn get_each<'k>(&self, keys: impl Iterator<Item = (&'k str, &'k str)>) -> Vec<Option<Arc<CachedBinding>>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        keys.map(|(namespace, name)| inner.live.by_name.get(namespace)?.get(name).cloned())
            .collect()
    }

    /// Every cached binding of `promise`.
    pub fn of_promise(&self, promise: &str) -> Vec<Arc<CachedBinding>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .live
            .by_promise
            .get(promise)
            .into_iter()
            .flat_map(HashMap::values)
            .flat_map(HashMap::values)
            .cloned()
            .collect()
    }

    /// How many cached bindings Kratix works on for `run` ([`kratix_working_run`]).
    pub fn in_flight_of(&self, run: &str) -> usize {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.live.in_flight.get(run).copied().unwrap_or(0)
    }
}

/// A binding watch made compact and applied to `store`; each event is yielded after the store has
/// it (what `watch::fan_out` requires of its source, as of kube's `reflector`).
pub fn reflect<S>(
    store: BindingStore,
    source: S,
) -> impl Stream<Item = Result<watcher::Event<Arc<CachedBinding>>, watcher::Error>> + Send
where
    S: Stream<Item = Result<watcher::Event<ResourceBinding>, watcher::Error>> + Send,
{
    // One table for the stream's life: the watch is the only writer, so no lock is needed.
    let mut strings = Interner::default();
    source.map(move |event| {
        let event = event.map(|e| compact(e, &mut strings))?;
        store.apply(&event);
        Ok(event)
    })
}

fn compact(event: watcher::Event<ResourceBinding>, strings: &mut Interner) -> watcher::Event<Arc<CachedBinding>> {
    use watcher::Event::*;
    let mut c = |b: ResourceBinding| Arc::new(CachedBinding::new(&b, strings));
    match event {
        Apply(b) => Apply(c(b)),
        Delete(b) => Delete(c(b)),
        InitApply(b) => InitApply(c(b)),
        Init => Init,
        InitDone => InitDone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(ns: &str, name: &str, promise: &str) -> ResourceBinding {
        serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": name, "namespace": ns, "labels": {"kratix.io/promise-name": promise}},
            "spec": {"version": "v1"}
        }))
        .unwrap()
    }

    fn names(store: &BindingStore, promise: &str) -> Vec<String> {
        let mut v: Vec<String> = store
            .of_promise(promise)
            .iter()
            .map(|b| format!("{}/{}", b.namespace, b.name))
            .collect();
        v.sort();
        v
    }

    /// A binding of `promise` that run `run` started at `spec` and Kratix has applied `applied` to.
    fn started(ns: &str, name: &str, promise: &str, run: &str, spec: &str, applied: &str) -> ResourceBinding {
        let mut b = binding(ns, name, promise);
        b.spec.version = spec.into();
        b.metadata.annotations = Some(
            [
                (upgradeplan::api::UPGRADED_BY_ANNOTATION.to_string(), run.to_string()),
                (
                    upgradeplan::api::UPGRADE_STARTED_AT_ANNOTATION.to_string(),
                    "2026-06-01T10:00:00Z".to_string(),
                ),
            ]
            .into(),
        );
        b.status = serde_json::from_value(json!({"lastAppliedVersion": applied})).unwrap();
        b
    }

    #[tokio::test]
    async fn keeps_the_count_kratix_works_on_per_run_through_changes_deletions_and_relists() {
        use watcher::Event::*;
        let store = BindingStore::default();
        let events = vec![
            Ok(Init),
            Ok(InitApply(started("a", "x", "redis", "up-1", "v2", "v1"))),
            Ok(InitApply(started("a", "y", "redis", "up-1", "v2", "v1"))),
            Ok(InitApply(started("b", "z", "postgres", "pg-1", "v2", "v1"))),
            Ok(InitApply(binding("b", "w", "postgres"))),
            Ok(InitDone),
        ];
        let _: Vec<_> = reflect(store.clone(), futures::stream::iter(events)).collect().await;
        assert_eq!((store.in_flight_of("up-1"), store.in_flight_of("pg-1")), (2, 1));
        let events = vec![
            // Kratix applied x: no longer in flight; the same version again changes nothing.
            Ok(Apply(started("a", "x", "redis", "up-1", "v2", "v2"))),
            Ok(Apply(started("a", "x", "redis", "up-1", "v2", "v2"))),
            // z deleted, w started by pg-1.
            Ok(Delete(started("b", "z", "postgres", "pg-1", "v2", "v1"))),
            Ok(Apply(started("b", "w", "postgres", "pg-1", "v2", "v1"))),
        ];
        let _: Vec<_> = reflect(store.clone(), futures::stream::iter(events)).collect().await;
        assert_eq!((store.in_flight_of("up-1"), store.in_flight_of("pg-1")), (1, 1));
        assert_eq!(names(&store, "postgres"), ["b/w"]);
        // A re-list counts afresh, and only once it is complete.
        let events = vec![Ok(Init), Ok(InitApply(started("a", "y", "redis", "up-1", "v2", "v2")))];
        let _: Vec<_> = reflect(store.clone(), futures::stream::iter(events)).collect().await;
        assert_eq!(store.in_flight_of("up-1"), 1, "the old cache until the re-list is done");
        let _: Vec<_> = reflect(store.clone(), futures::stream::iter(vec![Ok(InitDone)]))
            .collect()
            .await;
        assert_eq!((store.in_flight_of("up-1"), store.in_flight_of("pg-1")), (0, 0));
        assert_eq!(
            store.inner.read().unwrap().live.in_flight.len(),
            0,
            "no count of zero is kept"
        );
        assert!(names(&store, "postgres").is_empty());
    }

    #[tokio::test]
    async fn follows_the_watch_and_a_relist_replaces_the_cache_only_when_complete() {
        use watcher::Event::*;
        let store = BindingStore::default();
        let events = vec![
            Ok(Init),
            Ok(InitApply(binding("a", "x", "redis"))),
            Ok(InitApply(binding("b", "y", "redis"))),
            Ok(InitApply(binding("b", "z", "postgres"))),
            Ok(InitDone),
            Ok(Apply(binding("c", "w", "redis"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Delete(binding("a", "x", "redis"))),
            // A re-list: until it is done, readers see the old cache.
            Ok(Init),
            Ok(InitApply(binding("d", "v", "redis"))),
        ];
        let seen: Vec<_> = reflect(store.clone(), futures::stream::iter(events)).collect().await;
        assert_eq!(seen.len(), 10, "every event, errors included, is passed on");
        assert_eq!(names(&store, "redis"), ["b/y", "c/w"]);
        assert_eq!(names(&store, "postgres"), ["b/z"]);
        assert!(store.get("a", "x").is_none(), "deleted");
        assert_eq!(&*store.get("b", "y").unwrap().spec_version, "v1");

        let done: Vec<_> = reflect(store.clone(), futures::stream::iter(vec![Ok(InitDone)]))
            .collect()
            .await;
        assert_eq!(done.len(), 1);
        assert_eq!(names(&store, "redis"), ["d/v"], "the completed re-list is the cache");
        assert!(names(&store, "postgres").is_empty());
    }
}
