//! Kubernetes Events in the core/v1 style of client-go's recorder (which controller-runtime
//! uses): events about cluster-scoped objects go to `default` with an empty involvedObject
//! namespace, which every API server version accepts and `kubectl describe` shows. (kube's
//! Recorder writes events.k8s.io/v1, which Kubernetes < 1.22 rejects for cluster-scoped objects.)
//!
//! Repeats of the same (object, type, reason, message) increment `count` on one Event instead of
//! creating another, as client-go's aggregation does.

use std::collections::HashMap;

use chrono::Utc;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use tokio::sync::Mutex;
use upgradeplan::time::to_jiff;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// Where events about cluster-scoped objects (plans, runs) are recorded, as client-go does.
pub const CLUSTER_SCOPED_EVENTS_NAMESPACE: &str = "default";

/// (object uid, type, reason, message): what makes two events the same.
type EventKey = (String, &'static str, String, String);
/// Where the aggregated Event lives: (namespace, name, count).
type EventSlot = (String, String, i32);

pub struct Publisher {
    client: Client,
    component: String,
    instance: String,
    seen: Mutex<HashMap<EventKey, EventSlot>>,
    /// The last name suffix used: events published concurrently within one clock tick must not
    /// share a name (client-go names events `<object>.<unix nanos>` too, but one at a time).
    last_nanos: std::sync::Mutex<i128>,
}

impl Publisher {
    pub fn new(client: Client, component: &str, instance: String) -> Publisher {
        Publisher {
            client,
            component: component.to_string(),
            instance,
            seen: Mutex::default(),
            last_nanos: std::sync::Mutex::new(0),
        }
    }

    /// `nanos`, or one more than the last suffix handed out when the clock has not moved on.
    fn unique_nanos(&self, nanos: i128) -> i128 {
        let Ok(mut last) = self.last_nanos.lock() else {
            return nanos;
        };
        *last = nanos.max(*last + 1);
        *last
    }

    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let type_s = match type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        };
        let now = to_jiff(Utc::now());
        let key = (
            regarding.uid.clone().unwrap_or_default(),
            type_s,
            reason.to_string(),
            message.to_string(),
        );
        // The cache lock is never held across a request: events go out concurrently.
        let cached = self.seen.lock().await.get(&key).cloned();
        if let Some((ns, name, count)) = cached {
            let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            let patch = json!({"count": count + 1, "lastTimestamp": Time(now)});
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
                Ok(_) => {
                    self.seen.lock().await.insert(key, (ns, name, count + 1));
                    return Ok(());
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {} // expired: create a new one
                Err(e) => return Err(e),
            }
        }
        let ns = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| CLUSTER_SCOPED_EVENTS_NAMESPACE.to_string());
        let object = regarding.name.clone().unwrap_or_default();
        let suffix = format!(".{:x}", self.unique_nanos(now.as_nanosecond()));
        let name = upgradeplan::engine::naming::derived_name(&object, &suffix);
        // No eventTime: with it, API servers before 1.22 apply the events.k8s.io rules, which
        // refuse events about cluster-scoped objects.
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns.clone()),
                ..Default::default()
            },
            involved_object: regarding.clone(),
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            type_: Some(type_s.to_string()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            action: Some(reason.to_string()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            reporting_component: Some(self.component.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        api.create(&PostParams::default(), &event).await?;
        let mut seen = self.seen.lock().await;
        if seen.len() > 4096 {
            seen.clear(); // bounded memory; at worst a repeat becomes a new Event
        }
        seen.insert(key, (ns, name, 1));
        Ok(())
    }
}
