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

/// Bindings by namespace, then name.
type ByName = HashMap<Arc<str>, HashMap<Arc<str>, Arc<CachedBinding>>>;

#[derive(Default)]
struct Inner {
    live: ByName,
    /// A re-list in progress (between `Init` and `InitDone`).
    relist: Option<ByName>,
}

/// A shared, cheaply cloned handle on the bindings' cache.
#[derive(Clone, Default)]
pub struct BindingStore {
    inner: Arc<RwLock<Inner>>,
}

fn insert(map: &mut ByName, b: &Arc<CachedBinding>) {
    let names = match map.get_mut(&*b.namespace) {
        Some(names) => names,
        None => map.entry(b.namespace.clone()).or_default(),
    };
    names.insert(b.name.clone(), Arc::clone(b));
}

impl BindingStore {
    /// Applies one watch event.
    pub fn apply(&self, event: &watcher::Event<Arc<CachedBinding>>) {
        // A poisoned lock means a panic while writing; the maps are still whole (each write is a
        // single insert or remove), so go on with them rather than lose the cache.
        let mut inner = self.inner.write().unwrap_or_else(|e| e.into_inner());
        match event {
            watcher::Event::Init => inner.relist = Some(ByName::new()),
            watcher::Event::InitApply(b) => match &mut inner.relist {
                Some(relist) => insert(relist, b),
                None => insert(&mut inner.live, b),
            },
            watcher::Event::InitDone => {
                if let Some(relist) = inner.relist.take() {
                    inner.live = relist;
                }
            }
            watcher::Event::Apply(b) => insert(&mut inner.live, b),
            watcher::Event::Delete(b) => {
                if let Some(names) = inner.live.get_mut(&*b.namespace) {
                    names.remove(&*b.name);
                    if names.is_empty() {
                        inner.live.remove(&*b.namespace);
                    }
                }
            }
        }
    }

    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<CachedBinding>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner.live.get(namespace)?.get(name).cloned()
    }

    /// Every cached binding of `promise`.
    pub fn of_promise(&self, promise: &str) -> Vec<Arc<CachedBinding>> {
        let inner = self.inner.read().unwrap_or_else(|e| e.into_inner());
        inner
            .live
            .values()
            .flat_map(HashMap::values)
            .filter(|b| b.promise() == promise)
            .cloned()
            .collect()
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
