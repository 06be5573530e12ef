//! When Kratix re-runs a failed workflow by itself (spec §2): with its default
//! `workflows.reconcileAfterFailure: true`, once the reconciliation interval of the revision the
//! resource runs has passed since the failure. A run never counts on it (a failure stands, spec
//! §5.5); the views say when it will happen, so that nobody is surprised by an upgrade that turns
//! in progress on its own.
//!
//! Kratix's rule (`api/v1alpha1/promiserevision_types.go`, `PromiseRevision.ReconciliationInterval`,
//! used by `internal/controller/dynamic_resource_request_controller.go` with the revision the
//! binding's version names): the revision's annotation `kratix.io/reconciliation-interval` (a Go
//! duration of at least 1m; Kratix mirrors it from the Promise onto the revision of the Promise's
//! current version only), else the revision's `spec.promiseSpec.workflows.config.reconciliationInterval`,
//! else the platform's default (10h unless Kratix's own configuration says otherwise, which
//! upgradeplan cannot read). Only where the revision cannot be read do the Promise's annotation and
//! spec stand in for it.

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};

use super::window::WrittenDuration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::kratix::{Promise, PromiseRevision, PromiseSpec, RECONCILIATION_INTERVAL_ANNOTATION};

/// Kratix's platform-wide default reconciliation interval.
pub const KRATIX_DEFAULT_HOURS: i64 = 10;

/// Where an interval comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IntervalFrom {
    /// The annotation on the PromiseRevision named.
    RevisionAnnotation(String),
    /// The annotation on the Promise named.
    PromiseAnnotation(String),
    /// `spec.promiseSpec.workflows.config.reconciliationInterval` of the PromiseRevision named.
    Revision(String),
    /// `spec.workflows.config.reconciliationInterval` of the Promise named.
    Promise(String),
    KratixDefault,
}

/// How long after a failure Kratix re-runs the workflow by itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryInterval {
    pub every: Duration,
    /// As written where it comes from (`10h` for Kratix's default).
    pub written: String,
    pub from: IntervalFrom,
}

impl std::fmt::Display for RetryInterval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let annotation = RECONCILIATION_INTERVAL_ANNOTATION;
        match &self.from {
            IntervalFrom::RevisionAnnotation(name) => {
                write!(f, "{} ({annotation} on PromiseRevision {name})", self.written)
            }
            IntervalFrom::PromiseAnnotation(name) => write!(f, "{} ({annotation} on Promise {name})", self.written),
            IntervalFrom::Revision(name) => {
                write!(
                    f,
                    "{} (workflows.config.reconciliationInterval of PromiseRevision {name})",
                    self.written
                )
            }
            IntervalFrom::Promise(name) => {
                write!(
                    f,
                    "{} (workflows.config.reconciliationInterval of Promise {name})",
                    self.written
                )
            }
            IntervalFrom::KratixDefault => write!(f, "{} (Kratix's default)", self.written),
        }
    }
}

impl Default for RetryInterval {
    /// Kratix's default, for a resource whose revision and Promise say nothing (or are unknown).
    fn default() -> RetryInterval {
        RetryInterval {
            every: Duration::hours(KRATIX_DEFAULT_HOURS),
            written: format!("{KRATIX_DEFAULT_HOURS}h"),
            from: IntervalFrom::KratixDefault,
        }
    }
}

impl RetryInterval {
    /// When Kratix re-runs, by itself, a workflow that failed at `failed_at` (it times the
    /// interval from the workflow's completion, `shouldForcePipelineRun`), in words for a view:
    /// the instant while it is ahead of `now`, else that it does so every interval while the
    /// resource keeps failing. Kratix does this only with `workflows.reconcileAfterFailure` (on by
    /// default), a platform setting upgradeplan cannot read, hence the proviso.
    pub fn words(&self, failed_at: DateTime<Utc>, now: DateTime<Utc>) -> String {
        let next = failed_at.checked_add_signed(self.every);
        match next {
            Some(t) if t > now => format!(
                "Kratix retries it by itself around {} (reconciliation interval {self}), unless its reconcileAfterFailure is off",
                t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ),
            _ => format!(
                "Kratix retries it by itself every {self} while it fails, unless its reconcileAfterFailure is off"
            ),
        }
    }
}

/// The retry interval of each version of one Promise (spec §2), for views that say when Kratix
/// will retry a failure by itself.
#[derive(Debug, Clone, Default)]
pub struct RetryIntervals {
    by_version: HashMap<String, RetryInterval>,
    /// For a version whose revision is not there: the Promise stands in.
    otherwise: RetryInterval,
}

impl RetryIntervals {
    /// From the Promise (when read) and its PromiseRevisions (others are passed over).
    pub fn of(promise: Option<&Promise>, revisions: &[PromiseRevision]) -> RetryIntervals {
        let name = promise.and_then(|p| p.metadata.name.as_deref());
        RetryIntervals {
            by_version: revisions
                .iter()
                .filter(|r| name.is_none_or(|n| r.promise() == n))
                .map(|r| (r.spec.version.clone(), retry_interval(Some(r), promise)))
                .collect(),
            otherwise: retry_interval(None, promise),
        }
    }

    /// The interval of a resource whose binding asks for `version`.
    pub fn at(&self, version: &str) -> &RetryInterval {
        self.by_version.get(version).unwrap_or(&self.otherwise)
    }
}

/// The interval after which Kratix re-runs a failed workflow of a resource at `revision` (the
/// one its binding asks for) of `promise`, by Kratix's rule (module docs). An annotation that is
/// not a Go duration of at least 1m is passed over, as Kratix passes over it.
pub fn retry_interval(revision: Option<&PromiseRevision>, promise: Option<&Promise>) -> RetryInterval {
    let annotation = |meta: &ObjectMeta| {
        let written = meta.annotations.as_ref()?.get(RECONCILIATION_INTERVAL_ANNOTATION)?;
        WrittenDuration::parse(written)
            .ok()
            .filter(|d| d.value >= Duration::minutes(1))
    };
    let configured = |spec: Option<&PromiseSpec>| {
        let config = spec?.workflows.as_ref()?.config.as_ref()?;
        WrittenDuration::parse(config.reconciliation_interval.as_deref()?).ok()
    };
    let name = |meta: &ObjectMeta| meta.name.clone().unwrap_or_default();
    let found = match (revision, promise) {
        (Some(r), _) => annotation(&r.metadata)
            .map(|d| (d, IntervalFrom::RevisionAnnotation(name(&r.metadata))))
            .or_else(|| {
                configured(r.spec.promise_spec.as_ref()).map(|d| (d, IntervalFrom::Revision(name(&r.metadata))))
            }),
        (None, Some(p)) => annotation(&p.metadata)
            .map(|d| (d, IntervalFrom::PromiseAnnotation(name(&p.metadata))))
            .or_else(|| configured(Some(&p.spec)).map(|d| (d, IntervalFrom::Promise(name(&p.metadata))))),
        (None, None) => None,
    };
    match found {
        Some((d, from)) => RetryInterval {
            every: d.value,
            written: d.written,
            from,
        },
        None => RetryInterval::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revision(annotation: Option<&str>, config: Option<&str>) -> PromiseRevision {
        let mut r: PromiseRevision = serde_json::from_value(json!({
            "apiVersion": "platform.kratix.io/v1alpha1", "kind": "PromiseRevision",
            "metadata": {"name": "redis-v2"},
            "spec": {"promiseRef": {"name": "redis"}, "version": "v2",
                     "promiseSpec": {"api": {"kind": "CustomResourceDefinition"},
                                     "workflows": {"config": {"pipelineNamespace": "ns"}}}}
        }))
        .unwrap();
        if let Some(a) = annotation {
            r.metadata.annotations = Some([(RECONCILIATION_INTERVAL_ANNOTATION.to_string(), a.to_string())].into());
        }
        if let Some(c) = config {
            let spec = r.spec.promise_spec.get_or_insert_with(Default::default);
            let w = spec.workflows.get_or_insert_with(Default::default);
            w.config.get_or_insert_with(Default::default).reconciliation_interval = Some(c.into());
        }
        r
    }

    fn promise(annotation: Option<&str>, config: Option<&str>) -> Promise {
        let mut p = Promise::new("redis", Default::default());
        if let Some(a) = annotation {
            p.metadata.annotations = Some([(RECONCILIATION_INTERVAL_ANNOTATION.to_string(), a.to_string())].into());
        }
        if let Some(c) = config {
            p.spec.workflows = Some(crate::api::kratix::Workflows {
                config: Some(crate::api::kratix::WorkflowConfig {
                    reconciliation_interval: Some(c.into()),
                }),
            });
        }
        p
    }

    /// Kratix's order: the revision's annotation, then the revision's spec, then the default;
    /// the Promise (whose annotation Kratix mirrors onto its current revision only) stands in
    /// only for a revision that cannot be read; an annotation under 1m or not a duration is
    /// passed over.
    #[test]
    fn kratix_retries_after_the_interval_of_the_revision() {
        let cases: Vec<(&str, Option<PromiseRevision>, Option<Promise>, &str)> = vec![
            (
                "nothing said",
                Some(revision(None, None)),
                Some(promise(None, None)),
                "10h (Kratix's default)",
            ),
            ("nothing known", None, None, "10h (Kratix's default)"),
            (
                "the revision's annotation first",
                Some(revision(Some("30m"), Some("2h"))),
                Some(promise(Some("1h"), Some("3h"))),
                "30m (kratix.io/reconciliation-interval on PromiseRevision redis-v2)",
            ),
            (
                "then the revision's workflows.config, whatever the Promise says now",
                Some(revision(None, Some("2h"))),
                Some(promise(Some("1h"), Some("3h"))),
                "2h (workflows.config.reconciliationInterval of PromiseRevision redis-v2)",
            ),
            (
                "a revision that says nothing has Kratix's default, not the Promise's",
                Some(revision(None, None)),
                Some(promise(Some("1h"), Some("3h"))),
                "10h (Kratix's default)",
            ),
            (
                "the Promise's annotation stands in for a revision not read",
                None,
                Some(promise(Some("1h"), Some("3h"))),
                "1h (kratix.io/reconciliation-interval on Promise redis)",
            ),
            (
                "then the Promise's workflows.config",
                None,
                Some(promise(None, Some("3h"))),
                "3h (workflows.config.reconciliationInterval of Promise redis)",
            ),
            (
                "an annotation under a minute is passed over, as Kratix passes over it",
                Some(revision(Some("30s"), Some("2h"))),
                None,
                "2h (workflows.config.reconciliationInterval of PromiseRevision redis-v2)",
            ),
            (
                "an annotation that is no duration is passed over",
                Some(revision(Some("soon"), None)),
                None,
                "10h (Kratix's default)",
            ),
        ];
        for (case, r, p, want) in cases {
            assert_eq!(retry_interval(r.as_ref(), p.as_ref()).to_string(), want, "{case}");
        }
        let d = retry_interval(Some(&revision(Some("90m"), None)), None);
        assert_eq!(d.every, Duration::minutes(90));
    }

    /// Each version reads its own revision; a version without one reads the Promise; the words
    /// name the instant while it is ahead, the interval once it has passed.
    #[test]
    fn each_version_has_its_revisions_interval() {
        let mut v1 = revision(None, Some("2h"));
        v1.metadata.name = Some("redis-v1".into());
        v1.spec.version = "v1".into();
        let v2 = revision(Some("30m"), None);
        let mut other = revision(Some("1m"), None);
        other.spec.promise_ref.name = "postgres".into();
        other.spec.version = "v3".into();
        let intervals = RetryIntervals::of(Some(&promise(None, Some("3h"))), &[v1, v2, other]);
        assert_eq!(intervals.at("v1").every, Duration::hours(2));
        assert_eq!(intervals.at("v2").every, Duration::minutes(30));
        assert_eq!(
            intervals.at("v3").to_string(),
            "3h (workflows.config.reconciliationInterval of Promise redis)",
            "another Promise's revision is not this Promise's"
        );
        assert_eq!(RetryIntervals::default().at("v2").to_string(), "10h (Kratix's default)");

        let failed: DateTime<Utc> = "2026-12-07T10:00:00Z".parse().unwrap();
        let at = |now: &str| intervals.at("v2").words(failed, now.parse().unwrap());
        assert_eq!(
            at("2026-12-07T10:10:00Z"),
            "Kratix retries it by itself around 2026-12-07T10:30:00Z (reconciliation interval 30m \
             (kratix.io/reconciliation-interval on PromiseRevision redis-v2)), unless its reconcileAfterFailure is off"
        );
        assert_eq!(
            at("2026-12-07T11:00:00Z"),
            "Kratix retries it by itself every 30m (kratix.io/reconciliation-interval on PromiseRevision redis-v2) \
             while it fails, unless its reconcileAfterFailure is off"
        );
    }
}
