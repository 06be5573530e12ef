//! Watch streams that survive malformed objects.
//!
//! A typed watch fails as a whole when one object does not deserialize, which would stop the
//! controller from seeing anything of that kind. These streams read each object once, straight
//! into its type, through [`Lenient`]: an object that does not fit is logged and skipped, and the
//! watch goes on.

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// An object of kind `K` as the API server sent it: `K` itself, or — when it does not fit `K`'s
/// schema — why, with the identity the watch needs to go on past it (name, namespace,
/// resourceVersion). Each object is parsed once, into `K`; the earlier route (an untyped object,
/// written back to JSON values and read again as `K`) cost three conversions per event, most of
/// the controller's CPU while thousands of bindings change.
#[derive(Clone, Debug)]
pub struct Lenient<K>(Result<K, Unfit>);

/// An object that does not fit its type: its identity, and why.
#[derive(Clone, Debug)]
struct Unfit {
    meta: ObjectMeta,
    error: String,
}

impl<'de, K: Resource<DynamicType = ()> + DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        match serde_json::from_str::<K>(raw.get()) {
            Ok(mut object) => {
                // Nothing reads managedFields; at thousands of objects they are most of a cache.
                object.meta_mut().managed_fields = None;
                Ok(Lenient(Ok(object)))
            }
            Err(e) => {
                let identity: Identity = serde_json::from_str(raw.get()).map_err(serde::de::Error::custom)?;
                let text = |key: &str| identity.metadata.get(key).and_then(|v| v.as_str()).map(String::from);
                let meta = ObjectMeta {
                    name: text("name"),
                    namespace: text("namespace"),
                    resource_version: text("resourceVersion"),
                    uid: text("uid"),
                    ..Default::default()
                };
                Ok(Lenient(Err(Unfit {
                    meta,
                    error: e.to_string(),
                })))
            }
        }
    }
}

/// Just enough of an object that does not fit its type to name it: any JSON is accepted.
#[derive(Deserialize)]
struct Identity {
    #[serde(default)]
    metadata: serde_json::Value,
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        match &self.0 {
            Ok(k) => k.meta(),
            Err(unfit) => &unfit.meta,
        }
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match &mut self.0 {
            Ok(k) => k.meta_mut(),
            Err(unfit) => &mut unfit.meta,
        }
    }
}

fn typed<K: Resource<DynamicType = ()>>(obj: Lenient<K>) -> Option<K> {
    match obj.0 {
        Ok(k) => Some(k),
        Err(Unfit { meta, error }) => {
            let name = format!(
                "{}/{}",
                meta.namespace.unwrap_or_default(),
                meta.name.unwrap_or_default()
            );
            tracing::warn!(kind = %K::kind(&()), object = %name.trim_start_matches('/'), error = %error, "ignoring an object that does not match its schema");
            None
        }
    }
}

fn convert<K: Resource<DynamicType = ()>>(ev: watcher::Event<Lenient<K>>) -> Option<watcher::Event<K>> {
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

/// Whether a watch that failed to start must list again. kube's watcher retries such a watch from
/// the resourceVersion it had, for ever: when the kind's CRD was deleted (404) it would never learn
/// the kind is gone, and when its resourceVersion expired meanwhile (410, the CRD installed again)
/// it would never list it again. Kratix downgraded or upgraded under a running controller does
/// exactly that (spec §14.2).
fn must_list_again(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 404 || s.code == 410)
}

/// A watch of every `K` in the cluster (all namespaces), with backoff, skipping malformed objects;
/// started over with a fresh list when it cannot go on from where it was ([`must_list_again`]).
pub fn watch_all<K>(
    client: Client,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug + Send + 'static,
{
    let api: Api<Lenient<K>> = Api::all(client);
    let start = move || {
        watcher(api.clone(), config.clone())
            .backoff(reconnect_backoff())
            .boxed()
    };
    futures::stream::unfold(None, move |current: Option<futures::stream::BoxStream<'static, _>>| {
        let mut stream = current.unwrap_or_else(&start);
        async move {
            // A watcher's stream never ends.
            let item = stream.next().await?;
            let next = match &item {
                Err(e) if must_list_again(e) => None,
                _ => Some(stream),
            };
            Some((item, next))
        }
    })
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

/// The flags a cache of one kind keeps: `synced` once its initial list has been applied to the
/// store, and (for kinds a cluster may lack) `not_served` while the API server does not serve it.
pub struct CacheFlags {
    pub synced: Arc<AtomicBool>,
    pub not_served: Option<Arc<AtomicBool>>,
    /// Told each time `not_served` changes: the runs that need the kind look again.
    pub served_changed: Option<futures::channel::mpsc::UnboundedSender<()>>,
}

/// A cache of every `K` (`config`): its store fed by [`watch_all`] through `writer`, its
/// [`CacheFlags`] kept, and split into `n` triggers ([`fan_out`]) that flow once `forwarding`.
pub fn cache<K>(
    client: Client,
    writer: kube::runtime::reflector::store::Writer<K>,
    config: watcher::Config,
    n: usize,
    flags: CacheFlags,
    forwarding: Arc<AtomicBool>,
) -> (
    impl std::future::Future<Output = ()> + Send,
    Vec<impl Stream<Item = Result<K, watcher::Error>> + Send>,
)
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let CacheFlags {
        synced,
        not_served,
        served_changed,
    } = flags;
    let tell = move |changed: bool| {
        if let (true, Some(tx)) = (changed, &served_changed) {
            // A closed receiver is a run controller that has shut down.
            let _ = tx.unbounded_send(());
        }
    };
    let stream = kube::runtime::reflector(writer, watch_all::<K>(client, config)).inspect(move |ev| match ev {
        Ok(watcher::Event::InitDone) => {
            synced.store(true, Ordering::SeqCst);
            // Installed since: served now.
            if let Some(n) = &not_served {
                tell(n.swap(false, Ordering::SeqCst));
            }
        }
        // A 404 to the list: the kind is not served — at the start, or since its CRD was deleted
        // under the running controller (the cache's list is then no list of a served kind).
        // Code, not reason: a group that exists without this kind answers a plain-text "404 page
        // not found", which carries no reason (Status::is_not_found misses it).
        Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 404 => {
            if let Some(n) = &not_served {
                synced.store(false, Ordering::SeqCst);
                tell(!n.swap(true, Ordering::SeqCst));
            }
        }
        _ => {}
    });
    fan_out(stream, n, forwarding)
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
    use kube::ResourceExt;
    use serde_json::json;
    use upgradeplan::api::kratix::ResourceBinding;

    /// A watch that cannot start lists again when its kind is gone or its resourceVersion too
    /// old; any other failure (a timeout, 403, 500) retries the watch as kube's watcher does.
    #[test]
    fn a_watch_lists_again_only_when_it_cannot_go_on_from_where_it_was() {
        let api = |code: u16| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        let cases = [
            (watcher::Error::WatchStartFailed(api(404)), true),
            (watcher::Error::WatchStartFailed(api(410)), true),
            (watcher::Error::WatchStartFailed(api(403)), false),
            (watcher::Error::WatchStartFailed(api(500)), false),
            (watcher::Error::InitialListFailed(api(404)), false),
            (watcher::Error::WatchFailed(api(404)), false),
        ];
        for (e, want) in cases {
            assert_eq!(must_list_again(&e), want, "{e:?}");
        }
    }

    fn object(spec: serde_json::Value) -> Lenient<ResourceBinding> {
        serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "ResourceBinding",
            "metadata": {"name": "b", "namespace": "ns", "resourceVersion": "7",
                "managedFields": [{"manager": "kratix", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]},
            "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn a_list_with_an_object_that_does_not_fit_still_parses_and_names_it() {
        // What the watcher's initial list parses: one malformed item must not fail it.
        let list: kube::core::ObjectList<Lenient<ResourceBinding>> = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "9"},
            "items": [
                {"metadata": {"name": "good", "namespace": "ns", "resourceVersion": "8"}, "spec": {"version": "v1"}},
                {"metadata": {"name": "bad", "namespace": "ns", "resourceVersion": "9"}, "spec": {"version": 3}},
                {"metadata": "not an object", "spec": {}}
            ]
        }))
        .unwrap();
        assert_eq!(list.items.len(), 3);
        assert!(list.items[0].0.is_ok());
        let bad = &list.items[1];
        assert_eq!(bad.meta().name.as_deref(), Some("bad"));
        assert_eq!(
            bad.resource_version().as_deref(),
            Some("9"),
            "the watch can resume past it"
        );
        assert!(
            bad.0.as_ref().is_err_and(|u| u.error.contains("invalid type")),
            "{:?}",
            bad.0
        );
        assert!(list.items[2].0.is_err() && list.items[2].meta().name.is_none());
    }

    #[test]
    fn malformed_objects_are_skipped_and_the_watch_goes_on() {
        let good = object(json!({"version": "v1"}));
        let bad = object(json!({"version": {"not": "a string"}}));
        assert_eq!(good.resource_version().as_deref(), Some("7"));
        assert!(
            matches!(convert::<ResourceBinding>(watcher::Event::Apply(good.clone())), Some(watcher::Event::Apply(b)) if b.spec.version == "v1" && b.metadata.managed_fields.is_none())
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
