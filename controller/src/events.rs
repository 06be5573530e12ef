//! Kubernetes Events in the core/v1 style of client-go's recorder (which controller-runtime
//! uses): events about cluster-scoped objects go to `default` with an empty involvedObject
//! namespace, which every API server version accepts and `kubectl describe` shows. (kube's
//! Recorder writes events.k8s.io/v1, which Kubernetes < 1.22 rejects for cluster-scoped objects.)
//!
//! Correlated as client-go's EventCorrelator does, so a run of 10,000 resources writes a few dozen
//! Events, not 10,000: a repeat of the same (object, type, reason, message) counts on the Event
//! already written; beyond [`SIMILAR_EVENTS_BEFORE_COMBINING`] different messages of one reason on
//! one object within [`SIMILAR_EVENTS_WINDOW_SECONDS`], one Event whose message starts
//! `(combined from similar events): ` ([`combined`]) counts the rest. Count updates are written at most every
//! [`COUNT_FLUSH_INTERVAL`] per Event, and no more than [`COUNT_WRITES_PER_SECOND`] across all of them
//! (client-go drops events beyond its spam filter's budget
//! instead; here none is lost). The durable per-resource record is the binding's `upgraded-by`
//! and `upgrade-started-at` annotations, which `history RUN` reads.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::json;
use upgradeplan::engine::lifecycle::events::{
    combined, is_combined, SIMILAR_EVENTS_BEFORE_COMBINING, SIMILAR_EVENTS_WINDOW_SECONDS,
};
use upgradeplan::time::{to_chrono, to_jiff};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    /// The type of an event the engine marks a warning or not.
    pub fn of(warning: bool) -> Self {
        match warning {
            true => EventType::Warning,
            false => EventType::Normal,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Where events about cluster-scoped objects (plans, runs) are recorded, as client-go does.
pub const CLUSTER_SCOPED_EVENTS_NAMESPACE: &str = "default";
/// How often, at most, one Event's count is written.
pub const COUNT_FLUSH_INTERVAL: Duration = Duration::from_secs(5);
/// Count writes per second across every Event with counts to write, at most (client-go's default
/// client QPS): fifty runs starting resources at once each have their count written every ten
/// seconds rather than every five, as their progress (`lifecycle::progress_every`).
pub const COUNT_WRITES_PER_SECOND: u32 = 5;

/// How long an Event's count waits between writes while `flushing` Events have counts to write.
pub fn count_flush_every(flushing: usize) -> Duration {
    upgradeplan::engine::lifecycle::shared_interval(flushing, COUNT_WRITES_PER_SECOND, COUNT_FLUSH_INTERVAL)
}

/// Objects whose events are remembered at most; beyond it everything is forgotten (at worst a
/// repeat becomes a new Event).
const REMEMBERED: usize = 4096;

/// (object uid, type, reason): events that are similar.
type SimilarKey = (String, &'static str, String);
/// An Event written or to be written: the similar key and, for one that is not combined, its
/// message.
type SlotKey = (SimilarKey, Option<String>);

/// One Event and its count: `count` is what it stands for, `written` what the API server has.
#[derive(Clone, Debug)]
struct Slot {
    namespace: String,
    name: String,
    message: String,
    count: i32,
    written: i32,
    last: DateTime<Utc>,
    /// Created on the API server (until then, more counts wait for the creation).
    created: bool,
    /// A count update is due or on its way.
    flushing: bool,
}

/// Messages of one similar key within the current window.
#[derive(Debug, Default)]
struct Window {
    started: Option<DateTime<Utc>>,
    messages: HashSet<String>,
}

/// What to do about one event.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Create this Event (message, count 1).
    Create { key: SlotKey, message: String },
    /// Counted on an existing Event; a count update is to be scheduled when `flush` is set.
    Counted { key: SlotKey, flush: bool },
}

/// The correlation rules, without I/O: what each event becomes, given what was written.
#[derive(Debug, Default)]
struct Correlator {
    windows: HashMap<SimilarKey, Window>,
    slots: HashMap<SlotKey, Slot>,
}

impl Correlator {
    fn decide(
        &mut self,
        similar: SimilarKey,
        message: &str,
        namespace: &str,
        name: &str,
        now: DateTime<Utc>,
    ) -> Decision {
        if self.slots.len() > REMEMBERED || self.windows.len() > REMEMBERED {
            self.slots.clear();
            self.windows.clear();
        }
        let own = (similar.clone(), Some(message.to_string()));
        if self.slots.contains_key(&own) {
            return self.count(own, message, now);
        }
        let window = self.windows.entry(similar.clone()).or_default();
        let expired = window
            .started
            .is_none_or(|s| (now - s).num_seconds() >= SIMILAR_EVENTS_WINDOW_SECONDS);
        if expired {
            *window = Window {
                started: Some(now),
                messages: HashSet::new(),
            };
        }
        if window.messages.len() < SIMILAR_EVENTS_BEFORE_COMBINING {
            window.messages.insert(message.to_string());
            return self.create(own, message.to_string(), namespace, name, now);
        }
        let key = (similar, None);
        let message = combined(message);
        if self.slots.contains_key(&key) {
            return self.count(key, &message, now);
        }
        self.create(key, message, namespace, name, now)
    }

    fn create(&mut self, key: SlotKey, message: String, namespace: &str, name: &str, now: DateTime<Utc>) -> Decision {
        self.slots.insert(
            key.clone(),
            Slot {
                namespace: namespace.to_string(),
                name: name.to_string(),
                message: message.clone(),
                count: 1,
                written: 0,
                last: now,
                created: false,
                flushing: false,
            },
        );
        Decision::Create { key, message }
    }

    fn count(&mut self, key: SlotKey, message: &str, now: DateTime<Utc>) -> Decision {
        let Some(slot) = self.slots.get_mut(&key) else {
            return Decision::Counted { key, flush: false };
        };
        slot.count += 1;
        slot.last = now;
        slot.message = message.to_string();
        let flush = slot.created && !slot.flushing;
        if flush {
            slot.flushing = true;
        }
        Decision::Counted { key, flush }
    }

    /// The Event was created: counts that arrived meanwhile need a flush (returned).
    fn created(&mut self, key: &SlotKey) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        slot.created = true;
        slot.written = 1;
        let flush = slot.count > slot.written && !slot.flushing;
        slot.flushing |= flush;
        flush
    }

    /// Creating failed: forget the Event (the next similar event tries again).
    fn failed(&mut self, key: &SlotKey) {
        self.slots.remove(key);
    }

    /// The Event whose count is to be written now: created, and counted beyond what was written.
    fn due(&self, key: &SlotKey) -> Option<Slot> {
        self.slots
            .get(key)
            .filter(|s| s.created && s.count > s.written)
            .cloned()
    }

    /// `count` was written; returns whether more arrived meanwhile (flush again).
    fn flushed(&mut self, key: &SlotKey, count: i32) -> bool {
        let Some(slot) = self.slots.get_mut(key) else {
            return false;
        };
        slot.written = slot.written.max(count);
        slot.flushing = slot.count > slot.written;
        slot.flushing
    }

    /// Remembers the Events an earlier process wrote about the object `uid`, so that correlation
    /// goes on where it left off: their messages fill the similar-events window, their counts are
    /// taken as written.
    fn remember(&mut self, uid: &str, namespace: &str, events: &[Recorded]) {
        for e in events {
            let Some(type_) = [EventType::Normal, EventType::Warning]
                .into_iter()
                .map(EventType::as_str)
                .find(|t| *t == e.type_)
            else {
                continue;
            };
            let similar = (uid.to_string(), type_, e.reason.clone());
            let combined = is_combined(&e.message);
            if !combined {
                let window = self.windows.entry(similar.clone()).or_default();
                window.started = Some(window.started.map_or(e.first, |s| s.min(e.first)));
                window.messages.insert(e.message.clone());
            }
            let key = (similar, (!combined).then(|| e.message.clone()));
            self.slots.entry(key).or_insert_with(|| Slot {
                namespace: namespace.to_string(),
                name: e.name.clone(),
                message: e.message.clone(),
                count: e.count,
                written: e.count,
                last: e.last,
                created: true,
                flushing: false,
            });
        }
    }
}

/// An Event as read back from the API server, for [`Publisher::remember`].
#[derive(Clone, Debug)]
pub struct Recorded {
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
    pub name: String,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
}

impl Recorded {
    pub fn of(e: &Event) -> Option<Recorded> {
        let last = e
            .last_timestamp
            .as_ref()
            .or(e.first_timestamp.as_ref())
            .map(|t| to_chrono(&t.0))?;
        Some(Recorded {
            type_: e.type_.clone()?,
            reason: e.reason.clone()?,
            message: e.message.clone()?,
            count: e.count.unwrap_or(1),
            name: e.metadata.name.clone()?,
            first: e.first_timestamp.as_ref().map_or(last, |t| to_chrono(&t.0)),
            last,
        })
    }
}

pub struct Publisher {
    client: Client,
    component: String,
    instance: String,
    correlator: Arc<Mutex<Correlator>>,
    /// Held while a count is written: counts are absolute, so writes of one Event must not cross.
    writing: Arc<tokio::sync::Mutex<()>>,
    /// Events with a count write scheduled ([`count_flush_every`]).
    flushing: Arc<std::sync::atomic::AtomicUsize>,
    /// The last name suffix used: events published concurrently within one clock tick must not
    /// share a name (client-go names events `<object>.<unix nanos>` too, but one at a time).
    last_nanos: Mutex<i128>,
}

impl Publisher {
    pub fn new(client: Client, component: &str, instance: String) -> Publisher {
        Publisher {
            client,
            component: component.to_string(),
            instance,
            correlator: Arc::default(),
            writing: Arc::default(),
            flushing: Arc::default(),
            last_nanos: Mutex::new(0),
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

    fn lock(correlator: &Mutex<Correlator>) -> std::sync::MutexGuard<'_, Correlator> {
        correlator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the Events an earlier process wrote about the object `uid` (events in `namespace`).
    pub fn remember(&self, uid: &str, namespace: &str, events: &[Recorded]) {
        Self::lock(&self.correlator).remember(uid, namespace, events);
    }

    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) -> Result<(), kube::Error> {
        let now = Utc::now();
        let namespace = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| CLUSTER_SCOPED_EVENTS_NAMESPACE.to_string());
        let object = regarding.name.clone().unwrap_or_default();
        let suffix = format!(".{:x}", self.unique_nanos(to_jiff(now).as_nanosecond()));
        let name = upgradeplan::engine::naming::derived_name(&object, &suffix);
        let similar = (
            regarding.uid.clone().unwrap_or_default(),
            type_.as_str(),
            reason.to_string(),
        );
        // The lock is never held across a request: events go out concurrently.
        let decision = Self::lock(&self.correlator).decide(similar, message, &namespace, &name, now);
        match decision {
            Decision::Counted { key, flush } => {
                if flush {
                    self.schedule_flush(key);
                }
                Ok(())
            }
            Decision::Create { key, message } => {
                // No eventTime: with it, API servers before 1.22 apply the events.k8s.io rules, which
                // refuse events about cluster-scoped objects.
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(namespace.clone()),
                        ..Default::default()
                    },
                    involved_object: regarding.clone(),
                    reason: Some(reason.to_string()),
                    message: Some(message),
                    type_: Some(type_.as_str().to_string()),
                    first_timestamp: Some(Time(to_jiff(now))),
                    last_timestamp: Some(Time(to_jiff(now))),
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
                let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
                match api.create(&PostParams::default(), &event).await {
                    Ok(_) => {
                        if Self::lock(&self.correlator).created(&key) {
                            self.schedule_flush(key);
                        }
                        Ok(())
                    }
                    Err(e) => {
                        Self::lock(&self.correlator).failed(&key);
                        Err(e)
                    }
                }
            }
        }
    }

    /// Writes the Event's count after [`count_flush_every`] (counts arriving meanwhile ride
    /// along), and again while more arrive.
    fn schedule_flush(&self, key: SlotKey) {
        let (client, correlator, writing) = (self.client.clone(), self.correlator.clone(), self.writing.clone());
        let flushing = Flushing::new(self.flushing.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(count_flush_every(flushing.now())).await;
                let _writing = writing.lock().await;
                match write_count(&client, &correlator, &key).await {
                    Ok(true) => {}
                    Ok(false) => return,
                    Err(e) => {
                        // Expired or removed: the next similar event starts a new one. Otherwise
                        // try again after the interval.
                        tracing::warn!(error = %e, "updating an event's count failed");
                        if matches!(&e, kube::Error::Api(a) if a.code == 404) {
                            Self::lock(&correlator).failed(&key);
                            return;
                        }
                    }
                }
            }
        });
    }

    /// Writes now every count of the object `uid` not yet written (before its run's end is
    /// announced, so that a crash right after loses none).
    pub async fn flush_counts(&self, uid: &str) {
        let _writing = self.writing.lock().await;
        let keys: Vec<SlotKey> = Self::lock(&self.correlator)
            .slots
            .keys()
            .filter(|((u, _, _), _)| u == uid)
            .cloned()
            .collect();
        for key in keys {
            if let Err(e) = write_count(&self.client, &self.correlator, &key).await {
                tracing::warn!(error = %e, "updating an event's count failed");
            }
        }
    }
}

/// One Event counted among those with a count write scheduled, for as long as it is held.
struct Flushing(Arc<std::sync::atomic::AtomicUsize>);

impl Flushing {
    fn new(count: Arc<std::sync::atomic::AtomicUsize>) -> Flushing {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Flushing(count)
    }

    /// Events with a count write scheduled now, this one included.
    fn now(&self) -> usize {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Flushing {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Writes the slot's count when more was counted than written; returns whether still more
/// arrived meanwhile.
async fn write_count(client: &Client, correlator: &Mutex<Correlator>, key: &SlotKey) -> Result<bool, kube::Error> {
    let Some(slot) = Publisher::lock(correlator).due(key) else {
        return Ok(false);
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &slot.namespace);
    let patch = json!({"count": slot.count, "lastTimestamp": Time(to_jiff(slot.last)), "message": slot.message});
    api.patch(&slot.name, &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    Ok(Publisher::lock(correlator).flushed(key, slot.count))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use upgradeplan::engine::lifecycle::events::COMBINED_PREFIX;

    #[test]
    fn counts_are_written_every_five_seconds_or_longer_so_that_all_events_write_five_a_second() {
        let cases = [
            (1, Duration::from_secs(5)),
            (25, Duration::from_secs(5)),
            (26, Duration::from_millis(5200)),
            (50, Duration::from_secs(10)),
            (usize::MAX, Duration::from_millis(u64::MAX / 5)),
        ];
        for (flushing, want) in cases {
            assert_eq!(
                count_flush_every(flushing),
                want,
                "{flushing} events with counts to write"
            );
        }
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let one = Flushing::new(count.clone());
        let two = Flushing::new(count.clone());
        assert_eq!((one.now(), two.now()), (2, 2), "each counts itself and the others");
        drop(one);
        assert_eq!(two.now(), 1, "one done: no longer counted");
    }

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn similar(reason: &str) -> SimilarKey {
        ("run-uid".into(), "Normal", reason.into())
    }

    /// (creates, counted) after publishing `messages` of one reason at `at(second)`.
    fn publish(c: &mut Correlator, messages: &[(&str, i64)]) -> (Vec<String>, usize) {
        let (mut created, mut counted) = (vec![], 0);
        for (m, second) in messages {
            match c.decide(similar("ResourceUpgradeStarted"), m, "default", "ev", at(*second)) {
                Decision::Create { key, message } => {
                    c.created(&key);
                    created.push(message);
                }
                Decision::Counted { .. } => counted += 1,
            }
        }
        (created, counted)
    }

    #[test]
    fn beyond_ten_similar_events_in_ten_minutes_one_event_counts_the_rest() {
        let mut c = Correlator::default();
        let messages: Vec<String> = (0..1000).map(|i| format!("Resource ns/r{i} upgrading")).collect();
        let all: Vec<(&str, i64)> = messages.iter().map(|m| (m.as_str(), 1)).collect();
        let (created, counted) = publish(&mut c, &all);
        assert_eq!(created.len(), 11, "ten of their own and one combined");
        assert_eq!(created[10], format!("{COMBINED_PREFIX}Resource ns/r10 upgrading"));
        assert_eq!(counted, 989);
        let combined = c.slots.get(&(similar("ResourceUpgradeStarted"), None)).unwrap();
        assert_eq!(
            combined.count, 990,
            "the combined event stands for every message beyond ten"
        );
        assert_eq!(combined.message, format!("{COMBINED_PREFIX}Resource ns/r999 upgrading"));
        // Another reason, or another object, has a window of its own.
        let d = c.decide(similar("ResourceUpgradeFailed"), "x", "default", "f", at(2));
        assert!(matches!(d, Decision::Create { .. }));
    }

    #[test]
    fn a_repeat_counts_on_its_own_event_and_the_window_restarts_after_ten_minutes() {
        let mut c = Correlator::default();
        let (created, counted) = publish(&mut c, &[("same", 0), ("same", 10), ("same", 20)]);
        assert_eq!((created.len(), counted), (1, 2));
        let ten: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
        let early: Vec<(&str, i64)> = ten.iter().map(|m| (m.as_str(), 30)).collect();
        let (created, _) = publish(&mut c, &early);
        assert_eq!(created.len(), 10, "{created:?}");
        assert_eq!(
            created[9],
            format!("{COMBINED_PREFIX}m9"),
            "'same' took one of the ten places: the tenth message is combined"
        );
        let (created, counted) = publish(&mut c, &[("late", 599)]);
        assert_eq!(
            (created.len(), counted),
            (0, 1),
            "still in the window: counted on the combined Event"
        );
        let (created, _) = publish(&mut c, &[("later", 600)]);
        assert_eq!(created, vec!["later".to_string()], "a new window");
    }

    #[test]
    fn counts_are_flushed_once_per_interval_and_only_after_creation() {
        let mut c = Correlator::default();
        let key = (similar("R"), Some("m".to_string()));
        assert!(matches!(
            c.decide(similar("R"), "m", "default", "ev", at(0)),
            Decision::Create { .. }
        ));
        assert!(c.due(&key).is_none(), "nothing to write before the Event exists");
        // Counted before the creation returned: the creation schedules the flush.
        assert_eq!(
            c.decide(similar("R"), "m", "default", "ev", at(0)),
            Decision::Counted {
                key: key.clone(),
                flush: false
            }
        );
        assert!(c.created(&key), "created with a count waiting");
        assert_eq!(
            c.decide(similar("R"), "m", "default", "ev", at(1)),
            Decision::Counted {
                key: key.clone(),
                flush: false
            },
            "a flush is already due"
        );
        let due = c.due(&key).unwrap();
        assert_eq!((due.count, due.written), (3, 1));
        assert!(!c.flushed(&key, 3), "nothing more to write");
        assert!(c.due(&key).is_none());
        assert_eq!(
            c.decide(similar("R"), "m", "default", "ev", at(2)),
            Decision::Counted {
                key: key.clone(),
                flush: true
            }
        );
    }

    #[test]
    fn a_restarted_publisher_goes_on_where_the_events_left_off() {
        let mut c = Correlator::default();
        let recorded = |message: String, count: i32, name: &str| Recorded {
            type_: "Normal".into(),
            reason: "ResourceUpgradeStarted".into(),
            message,
            count,
            name: name.into(),
            first: at(0),
            last: at(5),
        };
        let mut events: Vec<Recorded> = (0..10)
            .map(|i| recorded(format!("m{i}"), 1, &format!("e{i}")))
            .collect();
        events.push(recorded(format!("{COMBINED_PREFIX}m42"), 33, "combined"));
        c.remember("run-uid", "default", &events);
        let (created, counted) = publish(&mut c, &[("m50", 10), ("m3", 10)]);
        assert!(created.is_empty(), "{created:?}");
        assert_eq!(counted, 2);
        let combined = c.slots.get(&(similar("ResourceUpgradeStarted"), None)).unwrap();
        assert_eq!(
            (combined.name.as_str(), combined.count, combined.written),
            ("combined", 34, 33)
        );
    }
}
