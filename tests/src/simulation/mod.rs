//! The deterministic simulation (spec §14.3): the engine's run and plan steps, their writes
//! applied to simulated objects as the API server applies them, Kratix as kratix-sim plays it,
//! people and the platform acting, and the controller failing as the Sieve study found real
//! controllers fail — all in simulated time, from a seed, with the invariants of
//! [`invariants::Invariant`] checked around every write and after every action.
//!
//! A violation is shrunk to the shortest history that still breaks the same invariant, and
//! printed with its seed: `SIM_SEED=<seed> SIM_HISTORIES=1` replays it exactly.

pub mod history;
pub mod invariants;
pub mod world;

use history::{Action, Fault, History};
use invariants::{Checker, Invariant, Violation};
use world::World;

/// Actions per history.
pub const STEPS: usize = 120;
/// At most this many passes of everything (controller, Kratix, clock) settle a world.
const SETTLE_ROUNDS: usize = 200;

/// The outcome of replaying one history.
#[derive(Debug)]
pub struct Outcome {
    pub steps: usize,
    pub tally: world::Tally,
    /// The first violation, and the index of the action after which it was found
    /// (`actions.len()`: while settling).
    pub violation: Option<(usize, Violation)>,
}

/// Replays `history` from the start, then lets the world settle.
pub fn replay(history: &History) -> Outcome {
    replay_in(history).0
}

/// [`replay`], with the world as it ended (to show what a violation left).
pub fn replay_in(history: &History) -> (Outcome, World) {
    let mut world = World::new(&history.shape);
    let mut checker = Checker::default();
    world.create_run(false);
    let mut steps = 0;
    for (i, action) in history.actions.iter().enumerate() {
        steps += 1;
        if world::trace() {
            eprintln!("{i:>4}. {action:?} at {}", world.now);
        }
        if let Err(v) = act(&mut world, action, &mut checker).and_then(|()| checker.after_action(&world)) {
            let outcome = Outcome {
                steps,
                tally: world.tally.clone(),
                violation: Some((i, v)),
            };
            return (outcome, world);
        }
    }
    let settled = settle(&mut world, &mut checker, &mut steps);
    let outcome = Outcome {
        steps,
        tally: world.tally.clone(),
        violation: settled.err().map(|v| (history.actions.len(), v)),
    };
    (outcome, world)
}

fn act(world: &mut World, action: &Action, checker: &mut Checker) -> Result<(), Violation> {
    match *action {
        Action::ReconcileRun { run, fault } => world.reconcile_run(run, fault, checker)?,
        Action::ReconcilePlan if world.plan_deleted => {}
        Action::ReconcilePlan => {
            world.reconcile_plan();
            checker.plan_reconciled(world)?;
        }
        Action::Kratix { binding } => world.kratix(binding),
        Action::KratixRevisions => world.revision_cleanup(),
        Action::Advance { seconds } => {
            let cap = world.now + chrono::Duration::seconds(i64::from(seconds));
            world.now = world.next_due().map_or(cap, |due| due.min(cap));
        }
        Action::User(ref user) => world.user(user),
    }
    Ok(())
}

/// Nothing but the controller (without failures), Kratix and the clock, until every run has
/// ended or nothing changes any more; then every run must have ended or say why it waits.
/// The plan's schedule creates no more runs meanwhile.
fn settle(world: &mut World, checker: &mut Checker, steps: &mut usize) -> Result<(), Violation> {
    // The schedule stops with the actions (the plan suspended), or runs would never all end.
    world.plan.spec.suspend = true;
    for _ in 0..SETTLE_ROUNDS {
        let before = world.writes();
        world.revision_cleanup();
        for i in 0..world.resources.len() {
            world.kratix(i);
        }
        // By name: a run released in this round leaves the others' places. With missed watch
        // events, only a run whose own object changed or whose requeue is due is reconciled.
        let names: Vec<String> = world
            .runs
            .iter()
            .filter(|r| !world.missed_events || world.woken(r))
            .map(kube::ResourceExt::name_any)
            .collect();
        for name in names {
            if let Some(i) = world.runs.iter().position(|r| kube::ResourceExt::name_any(r) == name) {
                *steps += 1;
                world.reconcile_run(i, Fault::None, checker)?;
                checker.after_action(world)?;
            }
        }
        if !world.plan_deleted {
            world.reconcile_plan();
            checker.plan_reconciled(world)?;
        }
        let all_ended = world
            .runs
            .iter()
            .all(|r| r.status.as_ref().is_some_and(|s| s.state.is_terminal()));
        if all_ended {
            break;
        }
        // Something was written: its watchers act on it at once. Else the clock moves on.
        if world.writes() == before {
            match world.next_due() {
                Some(due) => world.now = due,
                None => break,
            }
        }
    }
    checker.settled(world)
}

/// The shortest history found (removing one action at a time, then halving runs of them) that
/// still breaks `invariant`.
pub fn shrink(history: &History, invariant: Invariant) -> History {
    let breaks = |h: &History| replay(h).violation.is_some_and(|(_, v)| v.invariant == invariant);
    let mut best = history.clone();
    // Everything after the violating action is irrelevant to it.
    if let Some((i, _)) = replay(&best).violation {
        best.actions.truncate(i + 1);
    }
    let mut chunk = best.actions.len() / 2;
    while chunk >= 1 {
        let mut start = 0;
        while start < best.actions.len() {
            let mut candidate = best.clone();
            let end = (start + chunk).min(candidate.actions.len());
            candidate.actions.drain(start..end);
            if breaks(&candidate) {
                best = candidate;
            } else {
                start += chunk;
            }
        }
        chunk /= 2;
    }
    best
}

/// What a run of the simulation found.
#[derive(Debug, Default)]
pub struct Report {
    pub histories: u64,
    pub steps: u64,
    /// Summed over the histories.
    pub tally: world::Tally,
    /// (history seed, violation, shrunk history).
    pub violations: Vec<(u64, Violation, History)>,
}

/// The seed of history `i` of a run seeded `seed`: the first is `seed` itself, so a violation's
/// seed replays alone with `SIM_SEED=<seed> SIM_HISTORIES=1`.
pub fn history_seed(seed: u64, i: u64) -> u64 {
    if i == 0 {
        return seed;
    }
    history::Rng(seed ^ i.wrapping_mul(0xA076_1D64_78BD_642F)).next_u64()
}

/// Runs `histories` histories from `seed`; stops shrinking after `max_reported` violations.
pub fn run(seed: u64, histories: u64, max_reported: usize) -> Report {
    let mut report = Report::default();
    for i in 0..histories {
        let history_seed = history_seed(seed, i);
        let history = History::generate(history_seed, STEPS);
        let outcome = replay(&history);
        report.histories += 1;
        report.steps += outcome.steps as u64;
        report.tally.add(&outcome.tally);
        if let Some((_, v)) = outcome.violation {
            let shrunk = if report.violations.len() < max_reported {
                shrink(&history, v.invariant)
            } else {
                history
            };
            report.violations.push((history_seed, v, shrunk));
        }
    }
    report
}

/// One line about a run: what a violation's reader needs to see of it.
pub fn describe(run: &upgradeplan::api::UpgradeRun) -> String {
    use kube::ResourceExt;
    let status = run.status.clone().unwrap_or_default();
    let conditions: Vec<String> = status
        .conditions
        .iter()
        .map(|c| format!("{}={:?}/{}", c.type_, c.status, c.reason))
        .collect();
    format!(
        "{} {:?} suspend={} cancel={} deleted={} finalizers={:?} annotations={:?} groups={:?} conditions=[{}]",
        run.name_any(),
        status.state,
        run.spec.suspend,
        run.spec.cancel,
        run.metadata.deletion_timestamp.is_some(),
        run.finalizers(),
        run.annotations().keys().collect::<Vec<_>>(),
        status
            .rollout_groups
            .iter()
            .map(|g| (g.name.as_str(), g.succeeded, g.failed, g.skipped))
            .collect::<Vec<_>>(),
        conditions.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use upgradeplan::api::{GroupStatus, RunState, UpgradeRunStatus};

    /// The same seed, the same history and the same outcome: what makes a printed seed replayable.
    #[test]
    fn a_seed_replays_exactly() {
        for seed in [1, 7, 42] {
            let (a, b) = (History::generate(seed, STEPS), History::generate(seed, STEPS));
            assert_eq!(a.actions, b.actions, "seed {seed}");
            let (x, y) = (replay(&a), replay(&b));
            assert_eq!(
                (x.steps, format!("{:?}", x.tally)),
                (y.steps, format!("{:?}", y.tally)),
                "seed {seed}"
            );
        }
    }

    /// Each case: (name, status before, status written, the invariant it breaks).
    fn status_written_table(cases: &[(&str, UpgradeRunStatus, UpgradeRunStatus, Option<Invariant>)]) {
        for (case, before, after, want) in cases {
            let got = Checker::default()
                .status_written("r", Some(before), after, &[])
                .err()
                .map(|v| v.invariant);
            assert_eq!(got, *want, "{case}");
        }
    }

    fn status(state: RunState, counts: (i64, i64, i64)) -> UpgradeRunStatus {
        UpgradeRunStatus {
            state,
            rollout_groups: vec![GroupStatus {
                name: "dev".into(),
                succeeded: counts.0,
                failed: counts.1,
                skipped: counts.2,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    /// The counts invariant, case by case.
    #[test]
    fn counts_never_move_back_table() {
        use RunState::*;
        let cases = [
            (
                "counts grow",
                status(InProgress, (1, 0, 0)),
                status(InProgress, (2, 0, 1)),
                None,
            ),
            (
                "a success taken back",
                status(InProgress, (2, 0, 0)),
                status(InProgress, (1, 0, 0)),
                Some(Invariant::CountsNeverMoveBack),
            ),
            (
                "a failure taken back (Kratix retried it)",
                status(InProgress, (0, 1, 0)),
                status(InProgress, (0, 0, 0)),
                Some(Invariant::CountsNeverMoveBack),
            ),
            (
                "a terminal run resumed",
                status(Failed, (0, 1, 0)),
                status(InProgress, (0, 1, 0)),
                Some(Invariant::CountsNeverMoveBack),
            ),
            (
                "a terminal run written again",
                status(Completed, (1, 0, 0)),
                status(Completed, (1, 0, 0)),
                None,
            ),
        ];
        status_written_table(&cases);
    }

    fn recorded(succeeded: &str, skipped: &str, failed: &[&str]) -> UpgradeRunStatus {
        let mut s = status(RunState::InProgress, (0, failed.len() as i64, 0));
        let g = &mut s.rollout_groups[0];
        g.succeeded_indexes = succeeded.into();
        g.skipped_indexes = skipped.into();
        g.failed_resources = failed
            .iter()
            .map(|name| upgradeplan::api::ResourceFailure {
                namespace: "ns".into(),
                name: name.to_string(),
                at: chrono::DateTime::UNIX_EPOCH,
                detail: "failed".into(),
            })
            .collect();
        s
    }

    /// The recorded-outcomes invariant, case by case.
    #[test]
    fn outcomes_stand_table() {
        let mut failure_dropped = recorded("", "", &[]);
        failure_dropped.rollout_groups[0].failed = 1;
        let cases = [
            (
                "outcomes added",
                recorded("0", "", &[]),
                recorded("0-2", "4", &["a"]),
                None,
            ),
            (
                "a skip undone",
                recorded("0", "3", &[]),
                recorded("0,1", "", &[]),
                Some(Invariant::OutcomesStand),
            ),
            (
                "a success undone",
                recorded("0-4", "", &[]),
                recorded("0-3", "", &[]),
                Some(Invariant::OutcomesStand),
            ),
            (
                "counted two ways",
                recorded("0", "", &[]),
                recorded("0,1", "1", &[]),
                Some(Invariant::OutcomesStand),
            ),
            (
                "a failure dropped",
                recorded("", "", &["a"]),
                failure_dropped,
                Some(Invariant::OutcomesStand),
            ),
            (
                "unreadable",
                recorded("", "", &[]),
                recorded("1,0", "", &[]),
                Some(Invariant::OutcomesStand),
            ),
        ];
        status_written_table(&cases);
    }
}
