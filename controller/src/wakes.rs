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

/// A filter over a kind's triggers that passes an object only when its spec changed
/// (`metadata.generation` moved), it is new to the filter, or it is gone from `store`: a status
/// write is no news to a reconcile that derives everything else from other caches. Without it,
/// an UpgradeBudget's status write (its in-flight count, which moves with every upgrade) woke
/// every held run and the budget's own reconcile, which wrote the status again: fifty plans
/// under one budget made tens of thousands of passes of nothing.
pub fn spec_changes<K, E>(store: Store<K>) -> impl FnMut(&Result<K, E>) -> std::future::Ready<bool>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let mut seen: std::collections::HashMap<String, Option<i64>> = Default::default();
    move |object| {
        let Ok(object) = object else {
            return std::future::ready(true);
        };
        let name = object.meta().name.clone().unwrap_or_default();
        let news = if store.get(&ObjectRef::from_obj(object)).is_none() {
            seen.remove(&name);
            true
        } else {
            seen.insert(name, object.meta().generation) != Some(object.meta().generation)
        };
        std::future::ready(news)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};
    use upgradeplan::api::{UpgradeBudget, UpgradeBudgetSpec};

    #[test]
    fn only_spec_changes_new_objects_and_deletions_pass() {
        let (store, mut writer) = reflector::store::<UpgradeBudget>();
        let budget = |generation: i64, in_flight: i64| {
            let mut b = UpgradeBudget::new("saturday", UpgradeBudgetSpec::default());
            b.metadata.generation = Some(generation);
            b.status = Some(upgradeplan::api::UpgradeBudgetStatus {
                in_flight,
                ..Default::default()
            });
            b
        };
        let mut filter = spec_changes::<_, ()>(store);
        let mut pass = |b: &UpgradeBudget, in_store: bool| {
            let event = if in_store {
                watcher::Event::Apply(b.clone())
            } else {
                watcher::Event::Delete(b.clone())
            };
            writer.apply_watcher_event(&event);
            filter(&Ok(b.clone())).into_inner()
        };
        assert!(pass(&budget(1, 0), true), "new");
        assert!(!pass(&budget(1, 5), true), "a status write");
        assert!(pass(&budget(2, 5), true), "a spec change");
        assert!(!pass(&budget(2, 7), true), "a status write");
        assert!(pass(&budget(2, 7), false), "deleted");
        assert!(pass(&budget(2, 7), true), "created again");
        assert!(filter(&Err(())).into_inner(), "errors are passed on");
    }
}
