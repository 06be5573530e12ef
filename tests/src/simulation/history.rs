//! Histories: what happens, in order — the controller's reconciles (with its failures), Kratix's,
//! people's and the platform's actions, and the clock — drawn from a seed. An action names what
//! it acts on by a number taken modulo what exists when it happens, so a history stays valid when
//! the shrinker removes actions from it.

use super::world::{Health, Shape, Window};

/// The generator: the same seed, the same history, on every machine.
pub use upgradeplan::rng::SplitMix64 as Rng;

/// A number naming what an action acts on (taken modulo what exists when it happens).
fn target(rng: &mut Rng) -> usize {
    usize::try_from(rng.below(1 << 16)).unwrap_or(0)
}

/// How a controller's reconcile goes wrong (the Sieve study's failure patterns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The process dies after this many of the step's requests (a binding patch, an event, a
    /// status write each count); the next one starts from the API.
    CrashAfter(usize),
    /// The caches lag: the step sees the bindings, and its run, as they were before the last
    /// step's writes.
    StaleCache,
    /// The request after this many of the step's requests fails (a 500, a timeout) when its
    /// error fails the pass: the step ends there, the process lives on with its memory.
    WriteFails(usize),
    /// The step is taken by the deposed leader, from its lagging caches and with its own memory.
    Deposed,
    /// A watch event lands between two of the step's binding patches (after this many): the run
    /// is cancelled, suspended or superseded, or a freeze begins, while the sender is at work.
    Interrupted {
        after: usize,
        by: Interrupt,
    },
}

/// What lands in the middle of a step's sending ([`Fault::Interrupted`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interrupt {
    Cancel,
    Suspend,
    Supersede,
    Freeze,
}

/// People and the platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserAction {
    CreateRun {
        preview: bool,
    },
    Suspend {
        run: usize,
        suspend: bool,
    },
    Cancel {
        run: usize,
    },
    DeleteRun {
        run: usize,
    },
    /// The plan's group's window replaced, or removed (mid-run: changes nothing of the run).
    EditWindow {
        group: usize,
        window: Option<Window>,
    },
    /// The plan's group's `maxConcurrent` edited (mid-run: changes nothing of the run).
    EditLimit {
        group: usize,
        limit: i32,
    },
    /// What the resource's health checks report after an upgrade changes (`None`: it has none).
    Health {
        binding: usize,
        health: Option<Health>,
    },
    /// Kratix reconciles the resource's Resource Request and rewrites the binding's labels from
    /// it (`relabel`: someone moved the request to the other environment first).
    RequestReconciled {
        binding: usize,
        relabel: bool,
    },
    /// The resource's Resource Request is deleted: Kratix runs its delete workflows while the
    /// binding stays, unmarked, then deletes the binding (spec §2).
    DeleteRequest {
        binding: usize,
    },
    /// A new Resource Request (in the dev or prod environment): Kratix makes its binding at v1 and
    /// deploys it; a run whose snapshot predates it never touches it.
    CreateRequest {
        env: usize,
    },
    /// A deleted request is created again under its name: a binding of the same name, another
    /// object, at v1 and not yet applied — a run's recorded outcome of it stands (spec §5.5).
    RecreateRequest {
        request: usize,
    },
    /// The resource's next upgrade to v2 fails.
    FailNext {
        binding: usize,
    },
    /// Its upgrades succeed again.
    Fix {
        binding: usize,
    },
    /// Someone asks Kratix to retry (`kratix.io/manual-reconciliation`).
    RetryLabel {
        binding: usize,
    },
    /// A freeze from now, for this long.
    Freeze {
        minutes: u32,
    },
    EndFreezes,
    /// What the signal gate's query finds changes, or Prometheus becomes unreachable.
    Gate {
        firing: bool,
        reachable: bool,
    },
    /// `kubectl upgradeplan approve RUN GROUP`.
    Approve {
        run: usize,
        group: usize,
    },
    /// An UpgradeApproval deleted.
    Revoke {
        approval: usize,
    },
    /// The plan's Promise, target, groups' order, selectors or number edited (mid-run: changes
    /// nothing of the run).
    EditPlan {
        edit: usize,
    },
    /// The plan deleted: the garbage collector deletes the runs it owns.
    DeletePlan,
    /// The plan's `suspend` set or cleared (no scheduled runs while set).
    SuspendPlan {
        suspend: bool,
    },
    /// The leader's lease passes to the other controller.
    LeaderChange,
    /// The target version's PromiseRevision is deleted: it terminates while Kratix deletes the
    /// resources at it ([`Action::KratixRevisions`]), then goes.
    DeleteTargetRevision,
    /// The `from` version's PromiseRevision is deleted: likewise, for the resources still at it.
    DeleteFromRevision,
    /// A group's `onFailure` toggled between `Revert` and omitted (mid-run: changes nothing of the
    /// run).
    EditOnFailure {
        group: usize,
    },
    /// Someone moves a binding on by hand (`spec.version: v3`, a version without a revision yet):
    /// a run skips what someone else changed, or counts it its own success when it had started it;
    /// a revert leaves it alone (spec §5.5, §13.7). `back`: someone sets a binding pinned so (the
    /// `binding`th of those) back to the version it has applied — an undone skip, which the run's
    /// record of its outcomes must not follow.
    PinVersion {
        binding: usize,
        back: bool,
    },
    /// `kubectl upgradeplan revert RUN` (spec §13.7): a run reverting another, `resources` an
    /// index into upgraded, failed, all.
    Revert {
        run: usize,
        resources: usize,
        respect_policy: bool,
        preview: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    ReconcileRun {
        run: usize,
        fault: Fault,
    },
    ReconcilePlan,
    Kratix {
        binding: usize,
    },
    /// Kratix's PromiseRevision reconcile: each revision being deleted deletes the resources at
    /// its version, and goes once none is left.
    KratixRevisions,
    /// The clock moves to the next instant something is due, at most this many seconds on.
    Advance {
        seconds: u32,
    },
    User(UserAction),
}

/// A world's shape and what happens in it.
#[derive(Clone, Debug)]
pub struct History {
    pub shape: Shape,
    pub actions: Vec<Action>,
}

impl History {
    /// History `seed` with `steps` actions.
    pub fn generate(seed: u64, steps: usize) -> History {
        let mut rng = Rng(seed);
        let sizes = [1 + rng.below(5) as usize, 1 + rng.below(5) as usize];
        let limit = |rng: &mut Rng| 1 + rng.below(3) as i32;
        let shape = Shape {
            sizes,
            limits: [limit(&mut rng), limit(&mut rng)],
            max_failures: [rng.below(2) as i32, rng.below(2) as i32],
            workflows: (0..sizes[0] + sizes[1]).map(|_| rng.below(300) as u32).collect(),
            kratix_retry_minutes: rng.chance(50).then(|| 5 + rng.below(60) as u32),
            gate: rng.chance(40),
            approval: rng.chance(40),
            soak_seconds: rng.chance(30).then(|| 1 + rng.below(900) as u32),
            health_check: rng
                .chance(40)
                .then(|| (rng.below(2) as usize, 1 + rng.below(1200) as u32)),
            health: (0..sizes[0] + sizes[1]).map(|_| health(&mut rng)).collect(),
            schedule: rng
                .chance(30)
                .then(|| ([30, 60][rng.below(2) as usize], rng.below(3) as usize)),
            windows: [window(&mut rng), window(&mut rng)],
            missed_events: rng.chance(30),
            on_failure_revert: {
                // Drawn apart, so that the rest of a seed's world is what it was before reverts.
                let mut own = Rng(seed ^ 0x5245_5645_5254);
                [own.chance(35), own.chance(35)]
            },
            budget: {
                // Drawn apart too, for the same reason.
                let mut own = Rng(seed ^ 0x4255_4447_4554);
                own.chance(35).then(|| 1 + own.below(3) as usize)
            },
            progress_deadline: {
                // Drawn apart too, for the same reason.
                let mut own = Rng(seed ^ 0x4445_4144_4c4e);
                [(); 2].map(|_| own.chance(30).then(|| 1 + own.below(20) as u32))
            },
        };
        let actions = (0..steps).map(|_| action(&mut rng)).collect();
        History { shape, actions }
    }
}

/// A group's window, a third of the time: allow or deny, open each hour or more often, for less
/// than the time between openings (an always-active window costs the engine a long search each
/// pass: too slow for thousands of histories).
fn window(rng: &mut Rng) -> Option<Window> {
    rng.chance(35).then(|| {
        let every = rng.chance(30).then(|| [15, 20, 30][rng.below(3) as usize]);
        let gap = every.unwrap_or(60);
        Window {
            allow: rng.chance(60),
            minute: rng.below(60) as u32,
            every,
            minutes: 5 + rng.below(u64::from(gap) - 9) as u32,
            zone: rng.below(3) as usize,
        }
    })
}

/// What a resource's health checks report: mostly healthy, sometimes not, sometimes nothing.
fn health(rng: &mut Rng) -> Option<Health> {
    rng.chance(85).then(|| Health {
        // unknown, ready, unhealthy, healthy, degraded: healthy and ready most often.
        state: [3, 3, 3, 1, 1, 0, 2, 4][rng.below(8) as usize],
        records: 1 + rng.below(3) as usize,
        delay: rng.below(600) as u32,
    })
}

fn action(rng: &mut Rng) -> Action {
    match rng.below(100) {
        0..=39 => Action::ReconcileRun {
            run: target(rng),
            fault: match rng.below(20) {
                0 | 1 => Fault::CrashAfter(rng.below(5) as usize),
                2 | 3 => Fault::StaleCache,
                4 => Fault::WriteFails(rng.below(5) as usize),
                5 => Fault::Deposed,
                6 => Fault::Interrupted {
                    after: rng.below(3) as usize,
                    by: [
                        Interrupt::Cancel,
                        Interrupt::Suspend,
                        Interrupt::Supersede,
                        Interrupt::Freeze,
                    ][rng.below(4) as usize],
                },
                _ => Fault::None,
            },
        },
        40..=47 => Action::ReconcilePlan,
        48..=69 => Action::Kratix { binding: target(rng) },
        70..=71 => Action::KratixRevisions,
        72..=83 => Action::Advance {
            seconds: 1 + rng.below(600) as u32,
        },
        // Resource Requests come and go: often enough that one deleted is created again while a
        // run that counted it is still going.
        84..=85 => Action::User(match rng.below(5) {
            0 | 1 => UserAction::DeleteRequest { binding: target(rng) },
            2 | 3 => UserAction::RecreateRequest { request: target(rng) },
            _ => UserAction::CreateRequest { env: target(rng) },
        }),
        _ => Action::User(user(rng)),
    }
}

fn user(rng: &mut Rng) -> UserAction {
    match rng.below(40) {
        0..=3 => UserAction::CreateRun {
            preview: rng.chance(25),
        },
        4..=6 => UserAction::Suspend {
            run: target(rng),
            suspend: rng.chance(50),
        },
        7 => UserAction::Cancel { run: target(rng) },
        8 => UserAction::DeleteRun { run: target(rng) },
        9 if rng.chance(50) => UserAction::EditWindow {
            group: target(rng),
            window: window(rng),
        },
        9..=10 => UserAction::EditLimit {
            group: target(rng),
            limit: 1 + rng.below(4) as i32,
        },
        // A check that starts reporting otherwise: any state, as often bad as good.
        11..=12 => UserAction::Health {
            binding: target(rng),
            health: rng.chance(90).then(|| Health {
                state: rng.below(5) as usize,
                records: 1 + rng.below(3) as usize,
                delay: rng.below(600) as u32,
            }),
        },
        13 if rng.chance(40) => UserAction::RequestReconciled {
            binding: target(rng),
            relabel: rng.chance(50),
        },
        13 => UserAction::FailNext { binding: target(rng) },
        14..=15 => UserAction::Fix { binding: target(rng) },
        16..=17 => UserAction::RetryLabel { binding: target(rng) },
        18..=19 => UserAction::Freeze {
            minutes: 1 + rng.below(120) as u32,
        },
        20..=21 => UserAction::EndFreezes,
        22..=24 => UserAction::Gate {
            firing: rng.chance(50),
            reachable: rng.chance(85),
        },
        25..=27 => UserAction::Approve {
            run: target(rng),
            group: target(rng),
        },
        28 => UserAction::Revoke { approval: target(rng) },
        29 if rng.chance(50) => UserAction::LeaderChange,
        29 if rng.chance(40) => UserAction::EditPlan { edit: target(rng) },
        // Rare: it ends every run the plan owns.
        29 if rng.chance(10) => UserAction::DeletePlan,
        29 if rng.chance(30) => UserAction::SuspendPlan {
            suspend: rng.chance(50),
        },
        33 => UserAction::EditOnFailure { group: target(rng) },
        34..=36 => UserAction::PinVersion {
            binding: target(rng),
            back: rng.chance(50),
        },
        30..=32 | 37 => UserAction::Revert {
            run: target(rng),
            resources: rng.below(3) as usize,
            respect_policy: rng.chance(30),
            preview: rng.chance(20),
        },
        // Rarer: it fails every run that has not finished, and no run upgrades after it.
        38 if rng.chance(40) => UserAction::DeleteTargetRevision,
        39 if rng.chance(40) => UserAction::DeleteFromRevision,
        _ => UserAction::CreateRun { preview: false },
    }
}
