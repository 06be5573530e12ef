//! Health-verified upgrades (spec §13.2): after Kratix reports an upgrade succeeded, the resource
//! is Verifying until its Kratix HealthRecords, combined by the worst state, say whether it works.
//!
//! SKE counts a successful workflow as success; a resource broken by its upgrade would still be
//! "Completed". With `rolloutGroups[].healthCheck`, its HealthRecord decides, and a Verifying
//! resource keeps its slot so that `maxConcurrent` bounds the unverified resources too.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::outcome::Outcome;
use super::snapshot::SnapshotResource;
use super::texts;
use super::window::WrittenDuration;
use crate::api::kratix::{BindingFacts, HealthRecord};
use crate::api::UPGRADE_STARTED_AT_ANNOTATION;

/// The HealthRecords of one Promise, by the (namespace, name) of the resource they describe.
#[derive(Debug, Clone, Default)]
pub struct HealthRecords {
    by_resource: HashMap<(String, String), Vec<Arc<HealthRecord>>>,
}

impl HealthRecords {
    /// Indexes the records of `promise` among `records`. A record's resource namespace is its
    /// `data.resourceRef.namespace`, else its own namespace (Kratix writes it beside the resource).
    pub fn index(promise: &str, records: impl IntoIterator<Item = Arc<HealthRecord>>) -> Self {
        let mut by_resource: HashMap<(String, String), Vec<Arc<HealthRecord>>> = HashMap::new();
        for r in records {
            if r.data.promise_ref.name != promise || r.data.resource_ref.name.is_empty() {
                continue;
            }
            let namespace = Some(r.data.resource_ref.namespace.clone())
                .filter(|n| !n.is_empty())
                .or_else(|| r.metadata.namespace.clone())
                .unwrap_or_default();
            by_resource
                .entry((namespace, r.data.resource_ref.name.clone()))
                .or_default()
                .push(r);
        }
        HealthRecords { by_resource }
    }

    fn of(&self, resource: &SnapshotResource) -> &[Arc<HealthRecord>] {
        self.by_resource
            .get(&(resource.namespace.clone(), resource.name.clone()))
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The records that speak for an upgrade to `to` completed at `upgraded_at` — those whose
    /// check ran no earlier (to the second: `lastRun` is Unix seconds; today's records carry no
    /// version, so an older one may describe the version before), and, where a record names its
    /// version (`data.promiseVersion`, Kratix's proposal kratix#945), only those of `to` — combined
    /// as Kratix combines a resource's records into its `status.healthStatus`: the worst state
    /// wins. That worst record; among records as bad, the most recent.
    pub fn combined(
        &self,
        (resource, to): (&SnapshotResource, &str),
        upgraded_at: DateTime<Utc>,
    ) -> Option<&HealthRecord> {
        self.of(resource)
            .iter()
            .filter(|r| r.data.last_run.is_some_and(|t| t >= upgraded_at.timestamp()))
            .filter(|r| r.data.promise_version.as_deref().is_none_or(|v| v == to))
            .min_by(|a, b| {
                rank(&a.data.state)
                    .cmp(&rank(&b.data.state))
                    .then(b.data.last_run.cmp(&a.data.last_run))
                    .then(a.metadata.name.cmp(&b.metadata.name))
            })
            .map(Arc::as_ref)
    }
}

/// Kratix's order of health states, worst first (`unhealthy < degraded < unknown < healthy <
/// ready`). A state a newer Kratix may add ranks as `unknown`: never conclusive, and never
/// hiding an unhealthy record.
fn rank(state: &str) -> u8 {
    match state {
        "unhealthy" => 1,
        "degraded" => 2,
        "healthy" => 4,
        "ready" => 5,
        _ => 3,
    }
}

/// When the upgrade of `live` completed: Kratix's `UpgradeSucceeded=True` transition; without
/// one, the start the start patch recorded; without that, the run's creation. Always a time, so
/// that the timeout always runs.
pub fn upgraded_at(live: &dyn BindingFacts, run_created: DateTime<Utc>) -> DateTime<Utc> {
    live.upgrade_condition()
        .filter(|c| c.status == "True")
        .and_then(|c| c.last_transition_time)
        .or_else(|| {
            let started = live.annotation(UPGRADE_STARTED_AT_ANNOTATION)?;
            Some(DateTime::parse_from_rfc3339(started).ok()?.with_timezone(&Utc))
        })
        .unwrap_or(run_created)
}

/// What a HealthRecord's state means for the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Healthy,
    Unhealthy,
    Wait,
}

fn verdict(state: &str) -> Verdict {
    match state {
        "healthy" | "ready" => Verdict::Healthy,
        "unhealthy" | "degraded" => Verdict::Unhealthy,
        // `unknown`, and any state a newer Kratix may add: not conclusive.
        _ => Verdict::Wait,
    }
}

/// The group's health check applied to the outcome of `resource` upgrading to `to`: a Succeeded
/// upgrade is Verifying until its health is conclusive; every other outcome is unchanged. Its
/// health is the one its binding carries for `to`, where Kratix writes it there (kratix#945);
/// otherwise its HealthRecords' ([`HealthRecords::combined`]).
pub fn apply_health_check(
    outcome: Outcome,
    (resource, to): (&SnapshotResource, &str),
    live: Option<&dyn BindingFacts>,
    timeout: Option<&WrittenDuration>,
    records: &HealthRecords,
    run_created: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Outcome {
    let (Outcome::Succeeded, Some(live), Some(timeout)) = (&outcome, live, timeout) else {
        return outcome;
    };
    if let Some(state) = live.health_state_for(to) {
        match verdict(state) {
            Verdict::Healthy => return Outcome::Succeeded,
            Verdict::Unhealthy => {
                let (namespace, name) = (live.binding_namespace(), live.binding_name());
                return Outcome::Failed {
                    message: texts::health_reported_on_binding(state, namespace, name, to),
                };
            }
            // Not conclusive yet: the records may be, and the timeout runs.
            Verdict::Wait => {}
        }
    }
    let upgraded = upgraded_at(live, run_created);
    let record = records.combined((resource, to), upgraded);
    match record.map(|r| verdict(&r.data.state)) {
        Some(Verdict::Healthy) => Outcome::Succeeded,
        Some(Verdict::Unhealthy) => {
            let r = record.expect("a verdict comes from a record");
            Outcome::Failed {
                message: texts::health_reported(
                    &r.data.state,
                    r.metadata.namespace.as_deref().unwrap_or_default(),
                    r.metadata.name.as_deref().unwrap_or_default(),
                ),
            }
        }
        Some(Verdict::Wait) | None => {
            let until = upgraded
                .checked_add_signed(timeout.value)
                .unwrap_or(DateTime::<Utc>::MAX_UTC);
            if until <= now {
                // An `unknown` record is not a report, but saying it exists saves a search.
                let mut message = texts::no_health_report(&timeout.written);
                if let Some(r) = record {
                    message += &format!(
                        " (HealthRecord {}/{} says {})",
                        r.metadata.namespace.as_deref().unwrap_or_default(),
                        r.metadata.name.as_deref().unwrap_or_default(),
                        r.data.state
                    );
                }
                Outcome::Failed { message }
            } else {
                Outcome::Verifying { until }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::api::kratix::{
        BindingCondition, HealthRecordData, NameRef, ObjectRef, ResourceBinding, UPGRADE_SUCCEEDED,
    };
    use crate::engine::snapshot::tests::binding;

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    const CREATED: &str = "2026-06-01T09:00:00Z";
    const SUCCEEDED_AT: &str = "2026-06-01T10:00:00Z";

    /// Binding `ns/web` upgraded to v2, Kratix's success at 10:00.
    fn upgraded() -> ResourceBinding {
        let mut b = binding("ns", "web", &[], "v2", "v2");
        b.status.as_mut().unwrap().conditions = vec![BindingCondition {
            type_: UPGRADE_SUCCEEDED.into(),
            status: "True".into(),
            reason: "UpgradeComplete".into(),
            message: String::new(),
            last_transition_time: Some(utc(SUCCEEDED_AT)),
        }];
        b
    }

    fn record(name: &str, state: &str, last_run: Option<&str>) -> Arc<HealthRecord> {
        record_of("web", name, state, last_run)
    }

    /// A record of Promise redis for resource `ns/resource`.
    pub(crate) fn record_of(resource: &str, name: &str, state: &str, last_run: Option<&str>) -> Arc<HealthRecord> {
        Arc::new(HealthRecord {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            data: HealthRecordData {
                promise_ref: NameRef { name: "redis".into() },
                resource_ref: ObjectRef {
                    name: resource.into(),
                    namespace: "ns".into(),
                },
                state: state.into(),
                last_run: last_run.map(|t| utc(t).timestamp()),
                promise_version: None,
            },
        })
    }

    fn check(timeout: &str) -> WrittenDuration {
        WrittenDuration::parse(timeout).unwrap()
    }

    fn decide(records: Vec<Arc<HealthRecord>>, outcome: Outcome, now: &str) -> Outcome {
        decide_on(&upgraded(), records, outcome, now)
    }

    fn decide_on(b: &ResourceBinding, records: Vec<Arc<HealthRecord>>, outcome: Outcome, now: &str) -> Outcome {
        let r = SnapshotResource::from_binding(b);
        let index = HealthRecords::index("redis", records);
        apply_health_check(
            outcome,
            (&r, "v2"),
            Some(b),
            Some(&check("10m")),
            &index,
            utc(CREATED),
            utc(now),
        )
    }

    fn failed(message: &str) -> Outcome {
        Outcome::Failed {
            message: message.into(),
        }
    }

    /// Spec §2 (kratix#945, not in Kratix yet): three shapes of health. Records that name no
    /// version follow today's rule; records that name one count only for the target's version;
    /// a binding carrying the health of the target's version decides by itself (its verdict
    /// wins over the records while conclusive), one of another version is not read.
    #[test]
    fn health_of_the_target_version_where_kratix_says_which_version() {
        let at = "2026-06-01T10:05:00Z";
        let after = Some("2026-06-01T10:01:00Z");
        let verifying = Outcome::Verifying {
            until: utc("2026-06-01T10:10:00Z"),
        };
        let versioned = |state: &str, version: &str| {
            let mut r = (*record("web", state, after)).clone();
            r.metadata.name = Some(format!("web-{version}"));
            r.data.promise_version = Some(version.into());
            Arc::new(r)
        };
        let on_binding = |state: &str, version: &str| {
            let mut b = upgraded();
            b.status.as_mut().unwrap().health_status = Some(crate::api::kratix::BindingHealth {
                state: state.into(),
                promise_version: version.into(),
            });
            b
        };
        let cases: Vec<(&str, ResourceBinding, Vec<Arc<HealthRecord>>, Outcome)> = vec![
            (
                "unversioned records: today's rule",
                upgraded(),
                vec![record("web", "healthy", after)],
                Outcome::Succeeded,
            ),
            (
                "a healthy record of the old version does not hide the new one",
                upgraded(),
                vec![versioned("healthy", "v1")],
                verifying.clone(),
            ),
            (
                "the target's record decides",
                upgraded(),
                vec![versioned("healthy", "v1"), versioned("unhealthy", "v2")],
                failed("health check reported unhealthy (HealthRecord ns/web-v2)"),
            ),
            (
                "an unhealthy record of the old version does not fail the new one",
                upgraded(),
                vec![versioned("unhealthy", "v1"), versioned("ready", "v2")],
                Outcome::Succeeded,
            ),
            (
                "the binding's health of the target decides",
                on_binding("unhealthy", "v2"),
                vec![record("web", "healthy", after)],
                failed("health check reported unhealthy (ResourceBinding ns/web-binding, status.healthStatus for v2)"),
            ),
            (
                "the binding says healthy",
                on_binding("healthy", "v2"),
                vec![],
                Outcome::Succeeded,
            ),
            (
                "the binding's health of the old version is not read",
                on_binding("healthy", "v1"),
                vec![],
                verifying.clone(),
            ),
            (
                "the binding unknown: the records decide",
                on_binding("unknown", "v2"),
                vec![versioned("degraded", "v2")],
                failed("health check reported degraded (HealthRecord ns/web-v2)"),
            ),
        ];
        for (case, b, records, want) in cases {
            assert_eq!(decide_on(&b, records, Outcome::Succeeded, at), want, "{case}");
        }
    }

    #[test]
    fn health_records_decide_a_succeeded_upgrade() {
        let verifying = Outcome::Verifying {
            until: utc("2026-06-01T10:10:00Z"),
        };
        let at = "2026-06-01T10:05:00Z";
        // Every record below ran after the upgrade completed (10:00) unless it says otherwise.
        let after = Some("2026-06-01T10:01:00Z");
        let later = Some("2026-06-01T10:02:00Z");
        let cases: Vec<(&str, Vec<Arc<HealthRecord>>, &str, Outcome)> = vec![
            ("no record: verifying until the timeout", vec![], at, verifying.clone()),
            (
                "no record at the timeout",
                vec![],
                "2026-06-01T10:10:00Z",
                failed("no health report within 10m"),
            ),
            ("healthy", vec![record("web", "healthy", after)], at, Outcome::Succeeded),
            ("ready", vec![record("web", "ready", after)], at, Outcome::Succeeded),
            (
                "unhealthy",
                vec![record("web", "unhealthy", after)],
                at,
                failed("health check reported unhealthy (HealthRecord ns/web)"),
            ),
            (
                "degraded",
                vec![record("web", "degraded", after)],
                at,
                failed("health check reported degraded (HealthRecord ns/web)"),
            ),
            (
                "unknown: keep waiting",
                vec![record("web", "unknown", after)],
                at,
                verifying.clone(),
            ),
            (
                "unknown at the timeout names the record",
                vec![record("web", "unknown", after)],
                "2026-06-01T10:11:00Z",
                failed("no health report within 10m (HealthRecord ns/web says unknown)"),
            ),
            (
                "a state Kratix may add later waits",
                vec![record("web", "sleepy", after)],
                at,
                verifying.clone(),
            ),
            (
                "checked in the very second of the upgrade",
                vec![record("web", "healthy", Some(SUCCEEDED_AT))],
                at,
                Outcome::Succeeded,
            ),
            (
                "checked before the upgrade: it may be about the old version",
                vec![record("web", "unhealthy", Some("2026-06-01T09:59:59Z"))],
                at,
                verifying.clone(),
            ),
            (
                "no lastRun: never counts",
                vec![record("web", "healthy", None)],
                at,
                verifying.clone(),
            ),
            (
                "two checks disagree: the worst wins, even when older",
                vec![
                    record("web-disk", "unhealthy", after),
                    record("web-live", "healthy", later),
                ],
                at,
                failed("health check reported unhealthy (HealthRecord ns/web-disk)"),
            ),
            (
                "degraded and unhealthy: the unhealthy one is named",
                vec![record("web-a", "degraded", later), record("web-b", "unhealthy", after)],
                at,
                failed("health check reported unhealthy (HealthRecord ns/web-b)"),
            ),
            (
                "healthy and unknown: not conclusive yet",
                vec![record("web-a", "healthy", later), record("web-b", "unknown", after)],
                at,
                verifying.clone(),
            ),
            (
                "healthy and a new state: not conclusive yet",
                vec![record("web-a", "healthy", later), record("web-b", "sleepy", after)],
                at,
                verifying.clone(),
            ),
            (
                "ready and healthy",
                vec![record("web-a", "ready", later), record("web-b", "healthy", after)],
                at,
                Outcome::Succeeded,
            ),
            (
                "an unhealthy check from before the upgrade does not count against it",
                vec![
                    record("web-a", "unhealthy", Some("2026-06-01T09:50:00Z")),
                    record("web-b", "healthy", after),
                ],
                at,
                Outcome::Succeeded,
            ),
            (
                "as bad twice: the most recent is named",
                vec![record("web-a", "degraded", after), record("web-b", "degraded", later)],
                at,
                failed("health check reported degraded (HealthRecord ns/web-b)"),
            ),
        ];
        for (what, records, now, want) in cases {
            assert_eq!(decide(records, Outcome::Succeeded, now), want, "{what}");
        }
    }

    #[test]
    fn only_succeeded_upgrades_of_groups_with_a_check_are_verified() {
        let unhealthy = vec![record("web", "unhealthy", Some("2026-06-01T10:01:00Z"))];
        for outcome in [
            Outcome::NotStarted,
            Outcome::InFlight,
            failed("workflow failed"),
            Outcome::Skipped(crate::engine::run::SkipReason::BindingGone),
        ] {
            assert_eq!(decide(unhealthy.clone(), outcome.clone(), CREATED), outcome);
        }
        let b = upgraded();
        let r = SnapshotResource::from_binding(&b);
        let index = HealthRecords::index("redis", unhealthy);
        let at = utc("2026-06-01T10:05:00Z");
        assert_eq!(
            apply_health_check(Outcome::Succeeded, (&r, "v2"), Some(&b), None, &index, utc(CREATED), at),
            Outcome::Succeeded,
            "no healthCheck: SKE's behaviour"
        );
    }

    #[test]
    fn records_of_other_promises_and_resources_do_not_count() {
        let after = Some("2026-06-01T10:01:00Z");
        let mut other_promise = (*record("web", "unhealthy", after)).clone();
        other_promise.data.promise_ref.name = "postgres".into();
        let mut other_resource = (*record("api", "unhealthy", after)).clone();
        other_resource.data.resource_ref.name = "api".into();
        let mut other_namespace = (*record("web", "unhealthy", after)).clone();
        other_namespace.data.resource_ref.namespace = "elsewhere".into();
        let mut namespace_from_metadata = (*record("web", "healthy", after)).clone();
        namespace_from_metadata.data.resource_ref.namespace = String::new();
        let records = [other_promise, other_resource, other_namespace].map(Arc::new).to_vec();
        assert!(matches!(
            decide(records.clone(), Outcome::Succeeded, "2026-06-01T10:05:00Z"),
            Outcome::Verifying { .. }
        ));
        let mut with_own = records;
        with_own.push(Arc::new(namespace_from_metadata));
        assert_eq!(
            decide(with_own, Outcome::Succeeded, "2026-06-01T10:05:00Z"),
            Outcome::Succeeded,
            "a record without resourceRef.namespace is in its resource's namespace"
        );
    }

    #[test]
    fn the_timeout_runs_from_the_success_else_the_start_else_the_run() {
        let created = utc(CREATED);
        let mut b = upgraded();
        assert_eq!(upgraded_at(&b, created), utc(SUCCEEDED_AT));
        b.status.as_mut().unwrap().conditions.clear();
        b.metadata.annotations = Some(
            [(
                UPGRADE_STARTED_AT_ANNOTATION.to_string(),
                "2026-06-01T09:30:00Z".to_string(),
            )]
            .into(),
        );
        assert_eq!(upgraded_at(&b, created), utc("2026-06-01T09:30:00Z"));
        b.metadata.annotations = None;
        assert_eq!(upgraded_at(&b, created), created);
    }
}
