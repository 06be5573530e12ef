//! Watch streams that survive malformed objects.
//!
//! A typed watch fails as a whole when one object does not deserialize, which would stop the
//! controller from seeing anything of that kind. These streams watch untyped objects and convert
//! each one, logging and skipping any that do not fit the type.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

fn typed<K: Resource<DynamicType = ()> + DeserializeOwned>(mut obj: DynamicObject) -> Option<K> {
    // Nothing reads managedFields; at thousands of bindings they are most of the cache's memory.
    obj.metadata.managed_fields = None;
    let name = format!(
        "{}/{}",
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default()
    );
    match serde_json::to_value(&obj).and_then(serde_json::from_value::<K>) {
        Ok(k) => Some(k),
        Err(e) => {
            tracing::warn!(kind = %K::kind(&()), object = %name.trim_start_matches('/'), error = %e, "ignoring an object that does not match its schema");
            None
        }
    }
}

fn convert<K: Resource<DynamicType = ()> + DeserializeOwned>(
    ev: watcher::Event<DynamicObject>,
) -> Option<watcher::Event<K>> {
    use watcher::Event::*;
    Some(match ev {
        Apply(o) => Apply(typed(o)?),
        Delete(o) => Delete(typed(o)?),
        InitApply(o) => InitApply(typed(o)?),
        Init => Init,
        InitDone => InitDone,
    })
}

/// Delays between a watch's attempts to reconnect: 0.5 s doubling to 5 s, with jitter, for ever,
/// reset by any event. kube-runtime's default doubles to 30 s; an API-server restart costs two
/// errors in a row (the outage, then "410 Expired" for the old resourceVersion), which left the
/// controller idle for up to half a minute after the server was back (docs/reliability.md).
/// One watch per kind, each retrying every 5 s, is no load for an API server.
pub fn reconnect_backoff() -> watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// A watch of every `K` in the cluster (all namespaces), with backoff, skipping malformed objects.
pub fn watch_all<K>(
    client: Client,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    let api: Api<DynamicObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    watcher(api, config)
        .backoff(reconnect_backoff())
        .filter_map(|ev| async move {
            match ev {
                Ok(ev) => convert(ev).map(Ok),
                Err(e) => {
                    tracing::warn!(kind = %K::kind(&()), error = %e, "watch error; retrying");
                    Some(Err(e))
                }
            }
        })
}

/// Splits one cached watch into `n` trigger streams of the objects it touched.
///
/// `source` is a reflector stream: it yields an event only after applying it to its store. Every
/// controller triggered by a kind therefore reads that kind's store *after* the change that
/// triggered it. Two independent watches of one kind (one feeding the store, one triggering) race:
/// a reconcile could run before the store saw its trigger and then wait for a change that never
/// comes. The returned future drives `source` and must be polled for as long as the triggers are.
/// Errors are not forwarded: `watch_all` has logged them and the watcher retries by itself.
///
/// Until `forwarding` is set, the store is kept but no trigger is sent (a standby keeps its caches
/// warm without queueing every change for controllers that do not run yet; they reconcile every
/// cached object when they start).
pub fn fan_out<K, S>(
    source: S,
    n: usize,
    forwarding: Arc<AtomicBool>,
) -> (
    impl std::future::Future<Output = ()> + Send,
    Vec<impl Stream<Item = Result<K, watcher::Error>> + Send>,
)
where
    K: Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send,
{
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| futures::channel::mpsc::unbounded::<K>()).unzip();
    let drive = source.touched_objects().for_each(move |touched| {
        if let (Ok(obj), true) = (touched, forwarding.load(Ordering::SeqCst)) {
            // A closed receiver is a controller that has shut down; the others still want it.
            for tx in &senders {
                let _ = tx.unbounded_send(obj.clone());
            }
        }
        futures::future::ready(())
    });
    (drive, receivers.into_iter().map(|rx| rx.map(Ok)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use upgradeplan::api::kratix::ResourceBinding;

    fn object(spec: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": "b", "namespace": "ns"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn malformed_objects_are_skipped_and_the_watch_goes_on() {
        let good = object(json!({"version": "v1"}));
        let bad = object(json!({"version": {"not": "a string"}}));
        assert!(
            matches!(convert::<ResourceBinding>(watcher::Event::Apply(good.clone())), Some(watcher::Event::Apply(b)) if b.spec.version == "v1")
        );
        assert!(convert::<ResourceBinding>(watcher::Event::Apply(bad.clone())).is_none());
        assert!(convert::<ResourceBinding>(watcher::Event::InitApply(bad)).is_none());
        assert!(matches!(
            convert::<ResourceBinding>(watcher::Event::InitDone),
            Some(watcher::Event::InitDone)
        ));
        assert!(matches!(
            convert::<ResourceBinding>(watcher::Event::Init),
            Some(watcher::Event::Init)
        ));
    }

    #[tokio::test]
    async fn every_trigger_sees_every_touched_object_and_the_store_applied_them_all() {
        use kube::runtime::reflector;
        let (store, writer) = reflector::store::<ResourceBinding>();
        let binding = |name: &str| -> ResourceBinding {
            serde_json::from_value(json!({
                "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
                "metadata": {"name": name, "namespace": "ns"}, "spec": {"version": "v1"}
            }))
            .unwrap()
        };
        let events = futures::stream::iter(vec![
            Ok(watcher::Event::Apply(binding("a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(watcher::Event::Apply(binding("b"))),
            Ok(watcher::Event::Delete(binding("a"))),
        ]);
        let forwarding = Arc::new(AtomicBool::new(true));
        let (drive, triggers) = fan_out(reflector::reflector(writer, events), 2, forwarding);
        drive.await;
        for trigger in triggers {
            let seen: Vec<_> = trigger.map(|b| b.unwrap().metadata.name.unwrap()).collect().await;
            assert_eq!(
                seen,
                ["a", "b", "a"],
                "each trigger sees every touched object, errors dropped"
            );
        }
        let names: Vec<_> = store.state().iter().map(|b| b.metadata.name.clone().unwrap()).collect();
        assert_eq!(names, ["b"]);
    }

    #[tokio::test]
    async fn a_standby_keeps_its_store_without_queueing_triggers() {
        use kube::runtime::reflector;
        let (store, writer) = reflector::store::<ResourceBinding>();
        let binding: ResourceBinding = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": "a", "namespace": "ns"}, "spec": {"version": "v1"}
        }))
        .unwrap();
        let events = futures::stream::iter(vec![Ok(watcher::Event::Apply(binding))]);
        let forwarding = Arc::new(AtomicBool::new(false));
        let (drive, mut triggers) = fan_out(reflector::reflector(writer, events), 1, forwarding);
        drive.await;
        assert_eq!(store.state().len(), 1, "the cache is warm");
        let queued: Vec<_> = triggers.remove(0).collect().await;
        assert!(queued.is_empty(), "nothing queued for controllers that do not run yet");
    }
}
