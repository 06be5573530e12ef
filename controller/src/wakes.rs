//! Which objects a change wakes: the controllers' mappers, over the caches. A run is woken by
//! what its step reads (its frozen plan's Promise's bindings, revisions and health records, its
//! approvals, the freezes, its plan, its snapshot); a plan by its runs, its Promise and the
//! freezes; a freeze by the plans (their labels decide which freezes hold them).

use std::sync::Weak;

use kube::runtime::reflector::{ObjectRef, Store};
use upgradeplan::api::{UpgradeFreeze, UpgradePlan, UpgradeRun};
use upgradeplan::engine::admission::is_dormant;

use crate::context::Ctx;

#[derive(Clone)]
pub struct Wakes {
    pub runs: Store<UpgradeRun>,
    pub plans: Store<UpgradePlan>,
    pub freezes: Store<UpgradeFreeze>,
    /// Weak: the context holds the stores, and the controllers hold these mappers.
    pub ctx: Weak<Ctx>,
}

fn unfinished(r: &UpgradeRun) -> bool {
    !r.status.as_ref().is_some_and(|s| s.state.is_terminal())
}

impl Wakes {
    /// Unfinished runs working on `promise` (their frozen plan's, spec §14.2); `dormant_too`:
    /// also superseded runs and previews not resumed, which only a revision concerns (a
    /// preview's snapshot waits for it).
    pub fn runs_of_promise(&self, promise: &str, dormant_too: bool) -> Vec<ObjectRef<UpgradeRun>> {
        let Some(ctx) = self.ctx.upgrade() else {
            return Vec::new();
        };
        self.runs
            .state()
            .iter()
            .filter(|r| unfinished(r))
            .filter(|r| dormant_too || !is_dormant(r))
            .filter(|r| ctx.promise_of_run(r).as_deref() == Some(promise))
            .map(|r| ObjectRef::from_obj(&**r))
            .collect()
    }

    /// A freeze, or a budget, can hold any run: every unfinished run of a known plan that can act.
    pub fn runs_a_freeze_may_hold(&self) -> Vec<ObjectRef<UpgradeRun>> {
        self.runs
            .state()
            .iter()
            .filter(|r| self.plans.get(&ObjectRef::new(r.plan_name())).is_some())
            .filter(|r| unfinished(r) && !is_dormant(r))
            .map(|r| ObjectRef::from_obj(&**r))
            .collect()
    }

    /// The runs of plan `name`.
    pub fn runs_of_plan(&self, name: &str) -> Vec<ObjectRef<UpgradeRun>> {
        self.runs
            .state()
            .iter()
            .filter(|r| r.plan_name() == name)
            .map(|r| ObjectRef::from_obj(&**r))
            .collect()
    }

    /// The plan of a run, when it exists.
    pub fn plan_of_run(&self, run: &UpgradeRun) -> Option<ObjectRef<UpgradePlan>> {
        let plan = ObjectRef::<UpgradePlan>::new(run.plan_name());
        self.plans.get(&plan).map(|_| plan)
    }

    /// The plans of Promise `name`.
    pub fn plans_of_promise(&self, name: &str) -> Vec<ObjectRef<UpgradePlan>> {
        self.plans
            .state()
            .iter()
            .filter(|p| p.spec.promise_ref.name == name)
            .map(|p| ObjectRef::from_obj(&**p))
            .collect()
    }

    /// Every plan: a freeze's periods move the gauges of every plan it holds.
    pub fn every_plan(&self) -> Vec<ObjectRef<UpgradePlan>> {
        self.plans.state().iter().map(|p| ObjectRef::from_obj(&**p)).collect()
    }

    /// Every freeze: a plan's labels decide which freezes hold it (`matchingPlans`).
    pub fn every_freeze(&self) -> Vec<ObjectRef<UpgradeFreeze>> {
        self.freezes.state().iter().map(|f| ObjectRef::from_obj(&**f)).collect()
    }
}

/// The mappers' form: a closure per kind, each with its own clone.
impl Wakes {
    pub fn by<T, R>(&self, f: impl Fn(&Wakes, T) -> R) -> impl Fn(T) -> R {
        let w = self.clone();
        move |t| f(&w, t)
    }
}
