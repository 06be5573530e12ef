//! Whether the starts a pass decided may still be sent (spec §14.1: a start leaves only while its
//! admission holds).
//!
//! A pass decides its starts from the facts as it gathered them; sending thousands takes seconds,
//! and meanwhile the run may be cancelled, suspended or superseded, a freeze may begin or the
//! group's window close. The sender asks [`Admitted::check`] before each request, against the run
//! and the freezes as its caches have them then and the clock: once it fails, the pass sends none
//! of its remaining starts, and the next pass decides again from the facts as they are.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::admission::superseded_by;
use super::freeze::{hold_at, holding};
use crate::api::{UpgradeFreeze, UpgradeRun};

/// What admitted a pass's starts, to be checked again before each is sent.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The run the starts are for.
    pub run: String,
    /// When the group's windows, with the freezes known at the decision, close next (spec §7,
    /// §13.5): known in advance, so a send needs no calendar search. `None`: not within the
    /// search horizon.
    closes_at: Option<DateTime<Utc>>,
    /// The freezes as the decision saw them (name, resourceVersion): one created or edited since
    /// is looked at when the next start is sent.
    freezes_seen: Vec<(Option<String>, Option<String>)>,
    /// The run's plan as freezes select it (its Promise and the live plan's labels); `None` for a
    /// revert that does not respect policy, which freezes do not hold (spec §13.7).
    freezes_select: Option<(String, BTreeMap<String, String>)>,
}

/// Why a pass's remaining starts are not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The run is gone, or being deleted.
    RunGone,
    /// Cancelled, suspended or superseded since the pass read it.
    RunStoodDown(&'static str),
    /// A freeze created or edited since holds the plan now.
    Frozen(String),
    /// The group's windows closed, or a freeze known at the decision began.
    WindowClosed,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::RunGone => write!(f, "the run is gone"),
            Ended::RunStoodDown(how) => write!(f, "the run was {how}"),
            Ended::Frozen(freeze) => write!(f, "UpgradeFreeze {freeze:?} holds the plan"),
            Ended::WindowClosed => write!(f, "the group's upgrade window closed or a freeze began"),
        }
    }
}

/// The freezes as a decision sees them: by name and resourceVersion.
fn seen(freezes: &[Arc<UpgradeFreeze>]) -> Vec<(Option<String>, Option<String>)> {
    freezes
        .iter()
        .map(|f| (f.metadata.name.clone(), f.metadata.resource_version.clone()))
        .collect()
}

impl Admitted {
    /// The admission of run `run`'s starts, decided with `freezes` known, in a group whose
    /// windows (with those freezes) close next at `closes_at`; its plan of `promise` labelled
    /// `plan_labels`.
    pub fn new(
        run: &UpgradeRun,
        closes_at: Option<DateTime<Utc>>,
        freezes: &[Arc<UpgradeFreeze>],
        promise: &str,
        plan_labels: &BTreeMap<String, String>,
    ) -> Admitted {
        Admitted {
            run: run.metadata.name.clone().unwrap_or_default(),
            closes_at,
            freezes_seen: seen(freezes),
            freezes_select: super::revert::held_by_policy(&run.spec)
                .then(|| (promise.to_string(), plan_labels.clone())),
        }
    }

    /// Whether `freezes` (a send's) are not those the decision saw: one created, deleted or
    /// edited since. Asked before every send, so it allocates nothing (names are unique).
    fn freezes_changed(&self, freezes: &[Arc<UpgradeFreeze>]) -> bool {
        freezes.len() != self.freezes_seen.len()
            || freezes.iter().any(|f| {
                !self
                    .freezes_seen
                    .iter()
                    .any(|(name, version)| *name == f.metadata.name && *version == f.metadata.resource_version)
            })
    }

    /// Whether the starts may still go out `now`: `run` as the sender's cache has it now (`None`:
    /// gone) and the freezes it has now.
    pub fn check(
        &self,
        run: Option<&UpgradeRun>,
        freezes: &[Arc<UpgradeFreeze>],
        now: DateTime<Utc>,
    ) -> Result<(), Ended> {
        let run = run
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .ok_or(Ended::RunGone)?;
        if run.spec.cancel {
            return Err(Ended::RunStoodDown("cancelled"));
        }
        if superseded_by(run).is_some() {
            return Err(Ended::RunStoodDown("superseded"));
        }
        if run.spec.suspend {
            return Err(Ended::RunStoodDown("suspended"));
        }
        if self.closes_at.is_some_and(|at| now >= at) {
            return Err(Ended::WindowClosed);
        }
        if let Some((promise, labels)) = self.freezes_select.as_ref().filter(|_| self.freezes_changed(freezes)) {
            if let Some(hold) = hold_at(&holding(freezes, promise, labels), now) {
                return Err(Ended::Frozen(hold.freeze));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{UpgradeFreezeSpec, UpgradeWindow, WindowKind, SUPERSEDED_BY_ANNOTATION};
    use crate::engine::window::{WindowState, Windows};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn run() -> UpgradeRun {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun",
            "metadata": {"name": "r1"}, "spec": {"upgradePlanRef": {"name": "p"}}
        }))
        .unwrap()
    }

    fn freeze(name: &str, from: &str, until: &str) -> Arc<UpgradeFreeze> {
        let spec: UpgradeFreezeSpec = serde_json::from_value(serde_json::json!({
            "reason": "code freeze", "periods": [{"start": &from[..16], "end": &until[..16]}]
        }))
        .unwrap();
        let mut f = UpgradeFreeze::new(name, spec);
        f.metadata.resource_version = Some("1".into());
        Arc::new(f)
    }

    /// The admission of a group's starts decided at `now` with `known` freezes, as the lifecycle
    /// decides it: its windows (an allow window 02:00–03:00 UTC) with those freezes, and when
    /// they close next.
    fn decided(run: &UpgradeRun, known: &[Arc<UpgradeFreeze>], now: DateTime<Utc>) -> Admitted {
        let windows = Windows::compile(&[UpgradeWindow {
            kind: WindowKind::Allow,
            schedule: "0 2 * * *".into(),
            duration: "1h".into(),
            time_zone: None,
        }])
        .unwrap();
        let labels = BTreeMap::new();
        let held = holding(known, "redis", &labels);
        let (state, _) = WindowState::of_group(&windows, &held, now);
        assert!(state.open, "admitted while open");
        Admitted::new(run, state.next_close, known, "redis", &labels)
    }

    /// Each change that ends an admission, against the run, the freezes and the clock as the
    /// sender has them at each send.
    #[test]
    fn a_start_leaves_only_while_its_admission_holds() {
        let decision = at("2026-06-01T02:30:00Z");
        let admitted = decided(&run(), &[], decision);
        let none: Vec<Arc<UpgradeFreeze>> = vec![];
        let with = |f: &dyn Fn(&mut UpgradeRun)| {
            let mut r = run();
            f(&mut r);
            r
        };
        let as_decided = run();
        let cancelled = with(&|r| r.spec.cancel = true);
        let suspended = with(&|r| r.spec.suspend = true);
        let superseded =
            with(&|r| r.metadata.annotations = Some([(SUPERSEDED_BY_ANNOTATION.to_string(), "r2".to_string())].into()));
        let deleting = with(&|r| {
            r.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ))
        });
        let begun = vec![freeze("xmas", "2026-06-01T02:00:00Z", "2026-06-02T00:00:00Z")];
        let to_come = vec![freeze("xmas", "2026-06-01T02:45:00Z", "2026-06-02T00:00:00Z")];
        // (case, the run now, the freezes now, now, the answer)
        type Case<'a> = (
            &'a str,
            Option<&'a UpgradeRun>,
            &'a [Arc<UpgradeFreeze>],
            &'a str,
            Result<(), Ended>,
        );
        let cases: Vec<Case> = vec![
            ("as decided", Some(&as_decided), &none, "2026-06-01T02:30:01Z", Ok(())),
            (
                "cancelled",
                Some(&cancelled),
                &none,
                "2026-06-01T02:30:01Z",
                Err(Ended::RunStoodDown("cancelled")),
            ),
            (
                "suspended",
                Some(&suspended),
                &none,
                "2026-06-01T02:30:01Z",
                Err(Ended::RunStoodDown("suspended")),
            ),
            (
                "superseded",
                Some(&superseded),
                &none,
                "2026-06-01T02:30:01Z",
                Err(Ended::RunStoodDown("superseded")),
            ),
            (
                "being deleted",
                Some(&deleting),
                &none,
                "2026-06-01T02:30:01Z",
                Err(Ended::RunGone),
            ),
            ("gone", None, &none, "2026-06-01T02:30:01Z", Err(Ended::RunGone)),
            (
                "a freeze created since, begun",
                Some(&as_decided),
                &begun,
                "2026-06-01T02:30:01Z",
                Err(Ended::Frozen("xmas".into())),
            ),
            (
                "a freeze created since, still to come",
                Some(&as_decided),
                &to_come,
                "2026-06-01T02:30:01Z",
                Ok(()),
            ),
            (
                "the window closed",
                Some(&as_decided),
                &none,
                "2026-06-01T03:00:00Z",
                Err(Ended::WindowClosed),
            ),
        ];
        for (case, current, freezes, now, want) in cases {
            assert_eq!(admitted.check(current, freezes, at(now)), want, "{case}");
        }
        // A freeze known at the decision: its start is when the windows close, known in advance.
        let admitted = decided(&run(), &to_come, decision);
        assert_eq!(
            admitted.check(Some(&as_decided), &to_come, at("2026-06-01T02:44:59Z")),
            Ok(())
        );
        assert_eq!(
            admitted.check(Some(&as_decided), &to_come, at("2026-06-01T02:45:00Z")),
            Err(Ended::WindowClosed)
        );
        // A revert that does not respect policy is not held by a freeze.
        let mut revert = run();
        revert.spec.revert_of = Some(crate::api::RevertOf {
            name: "r0".into(),
            resources: Default::default(),
        });
        let admitted = Admitted::new(&revert, None, &[], "redis", &BTreeMap::new());
        assert_eq!(admitted.check(Some(&revert), &begun, decision), Ok(()));
    }
}
