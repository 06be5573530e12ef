//! A run's pass and the one send loop of its writes: the controller runs them against its caches
//! and the API server, the simulation (spec §14.3) against its world. [`pass`] gathers the facts
//! through a [`Gather`] shell, waits where a cache is not ready and takes the engine's step; the
//! engine decides every write ([`Step::writes`]); [`carry_out`] only sends them in order through a
//! [`Shell`], stops where the API server refuses a precondition, and withholds a start whose
//! admission ended while it waited for its turn (spec §14.1). Neither performs I/O of its own:
//! what a write does is the shell's request, what to do when it is refused is here, once. What a
//! process remembers between passes is [`RunMemory`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::ResourceExt;

use crate::api::{Gate, UpgradeBudget, UpgradePlan, UpgradePlanSpec, UpgradeRun, UpgradeRunStatus};
use crate::engine::admission::{reads_gates, RunFacts};
use crate::engine::admitted::{Admitted, Ended};
use crate::engine::gate::GateReading;
use crate::engine::lifecycle::{
    self, events, Announced, Announcement, Cluster, Counts, Facts, Gauges, KindsNeeded, SnapshotConfigMap,
    SnapshotFact, Step, Write,
};
use crate::engine::revert::RevertedFact;
use crate::engine::run::texts;
use crate::engine::snapshot::{Frozen, Snapshot, SnapshotResource};
use crate::engine::stage::ApprovalFact;
use crate::engine::upgrade_budget::{self, BudgetFacts};
use crate::engine::write::{ApprovalPatch, Attempt, BindingPatch, Release, RunPatch};

/// How many binding patches one pass has in flight at once (the shell may bound them further,
/// across runs, with its [`Shell::slot`]).
pub const PATCH_CONCURRENCY: usize = 16;

/// What the API server answered a conditional write of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunWrite {
    /// Taken; the run's resourceVersion now (`None` when the write changed nothing).
    Taken(Option<String>),
    /// Refused (409): decided from a copy older than the run.
    Refused,
}

/// The requests a step's writes make, and the process memory they touch. The controller's
/// implementation talks to the API server and its caches; the simulation's applies them to its
/// world. Every method that may fail returns the shell's error, which ends the pass (the caller's
/// error policy retries it); best-effort requests (events, counters) report their own failures
/// and return `Ok`.
#[allow(async_fn_in_trait)]
pub trait Shell {
    type Error;
    /// A turn to send one binding patch (the controller's is a permit shared by every run).
    type Slot<'a>
    where
        Self: 'a;

    /// The run's own labels, annotations or suspension, conditional on the copy decided from.
    async fn patch_own(&self, patch: &RunPatch) -> Result<RunWrite, Self::Error>;
    async fn adopt_approvals(&self, patches: &[ApprovalPatch]) -> Result<(), Self::Error>;
    /// An older run asked to stand down; whether it was patched.
    async fn supersede(&self, patch: &RunPatch) -> Result<bool, Self::Error>;
    /// Whether run `name` is at `version` on the API server now (read there, not from a cache).
    async fn run_is_at(&self, name: &str, version: Option<&str>) -> Result<bool, Self::Error>;
    async fn write_snapshot(
        &self,
        run: &UpgradeRun,
        shards: &[SnapshotConfigMap],
        frozen: &Arc<Frozen>,
    ) -> Result<(), Self::Error>;
    /// This process's memory of its runs (held by the shell: the controller's for its life,
    /// the simulation's until it crashes the process).
    fn memory<R>(&self, f: impl FnOnce(&mut RunMemory) -> R) -> R;
    /// The decision clock.
    fn now(&self) -> DateTime<Utc>;
    /// The runs in progress in this controller, which share the progress writes.
    fn runs_in_progress(&self) -> usize;
    /// What `run`'s Events (by any process) announced; `None` when they cannot be listed now
    /// (announcements are best effort: the run does not wait on them).
    async fn list_announced(&self, run: &UpgradeRun) -> Result<Option<Announced>, Self::Error>;
    /// The start events `announced` lacks for upgrades already under way, as the shell's
    /// cluster view shows them (`lifecycle::lost_start_announcements`).
    fn lost_starts(&self, run: &UpgradeRun, snapshot: &Snapshot, to: &str, announced: &Announced) -> Vec<String>;
    /// Waits for a turn to send a binding patch.
    async fn slot(&self) -> Self::Slot<'_>;
    /// Whether what admitted a pass's starts still holds now (spec §14.1).
    fn still_admitted(&self, admitted: &Admitted) -> Result<(), Ended>;
    /// One binding patch with its precondition; whether it conflicted (409: changed since).
    async fn patch_binding(&self, patch: &BindingPatch) -> Result<bool, Self::Error>;
    /// The API server took `patch` of `run`'s binding (until the cache shows it, passes wait).
    fn wrote_binding(&self, run: &UpgradeRun, patch: &BindingPatch);
    /// This process started `resource`'s upgrade now (the start of its duration).
    fn started(&self, run: &UpgradeRun, resource: &Arc<SnapshotResource>);
    /// Starts a pass decided and did not send (their admission ended, `why`): a ledger holding
    /// them lets their units go.
    async fn withheld(&self, run: &UpgradeRun, patches: &[&BindingPatch], why: &Ended);
    /// An Event about `run`, published as it is (best effort). Its key is the engine's name for
    /// the occurrence it announces; the Event itself says only its reason and note.
    async fn event(&self, run: &UpgradeRun, announcement: &Announcement) -> Result<(), Self::Error>;
    async fn create_run(&self, run: &UpgradeRun) -> Result<(), Self::Error>;
    /// The run's counters written out before its end is announced.
    async fn flush_counts(&self, run: &UpgradeRun);
    fn gauges(&self, run: &UpgradeRun, gauges: &Gauges);
    /// The run's status, conditional on `version`.
    async fn write_status(
        &self,
        run: &UpgradeRun,
        status: &UpgradeRunStatus,
        version: Option<&str>,
    ) -> Result<RunWrite, Self::Error>;
    /// The step's results and end counted, its status written.
    fn count(&self, run: &UpgradeRun, counts: &Counts<'_>) -> Result<(), Self::Error>;
    /// The snapshot deleted and the finalizer removed; whether the run let go.
    async fn release(&self, run: &UpgradeRun, release: &Release) -> Result<bool, Self::Error>;
    /// A write decided from this copy of `run` was refused: the next pass reads it afresh.
    fn refused(&self, run: &UpgradeRun);
}

/// What a run's pass gathers, and from where: the shell's caches (the controller's) or objects
/// (the simulation's). Which facts a pass needs, when it waits for them and which budgets select
/// the run are decided in [`pass`], once.
#[allow(async_fn_in_trait)]
pub trait Gather: Shell {
    /// The cluster as the shell shows it now: bindings, revisions, HealthRecords, freezes.
    fn cluster(&self) -> &dyn Cluster;
    /// Whether the shell's view still misses a binding patch this process sent for `run`.
    fn awaits_own_writes(&self, run: &UpgradeRun) -> bool;
    /// The live plan named `name`.
    fn plan(&self, name: &str) -> Option<Arc<UpgradePlan>>;
    /// The admission facts of the other runs of `run`'s plan.
    fn others(&self, run: &UpgradeRun) -> Vec<RunFacts>;
    /// `run`'s snapshot, read back and verified against the digests its status records.
    async fn snapshot(&self, run: &UpgradeRun) -> Result<SnapshotFact, Self::Error>;
    /// The kinds `plan` needs that the API server does not serve, or that their list is to come.
    fn kinds_needed(&self, run: &UpgradeRun, plan: Option<&UpgradePlanSpec>) -> KindsNeeded;
    /// Whether the UpgradeFreezes, and the UpgradeBudgets, are listed.
    fn freezes_known(&self) -> bool;
    fn budgets_known(&self) -> bool;
    /// The latest reading of each of `gates` of `run`'s plan.
    async fn gates(&self, run: &UpgradeRun, gates: &[Gate], now: DateTime<Utc>) -> Vec<GateReading>;
    fn approvals(&self, run: &UpgradeRun) -> Vec<ApprovalFact>;
    /// The run a revert undoes, and its snapshot as read back (`None`: no run of that name).
    async fn reverted(&self, name: &str) -> Result<Option<(Arc<UpgradeRun>, SnapshotFact)>, Self::Error>;
    fn budgets(&self) -> Vec<Arc<UpgradeBudget>>;
    /// The facts of the budgets `selecting` (each selects `run`'s plan), taken under the shell's
    /// ledger of starts it sent: held until [`Gather::decided`], so that no unit is handed out
    /// twice and nothing is decided again (spec §13.8).
    async fn budget_facts(&self, run: &UpgradeRun, selecting: &[&UpgradeBudget]) -> Vec<BudgetFacts>;
    /// The controller's `--selector`.
    fn selector(&self) -> Option<&str>;
    /// The step decided from `facts`, before any of it is sent: a ledger records its starts and
    /// lets go; the simulation checks it.
    fn decided(&self, run: &UpgradeRun, facts: &Facts<'_>, step: &Step) -> Result<(), Self::Error>;
    /// Other runs to look at now: budget units this pass left free.
    fn wake(&self, runs: &[String]);
}

/// How long a reconcile waits before looking again while a cache is still filling.
pub const CACHE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Why a pass waits instead of deciding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Its own binding patches are not in the shell's view yet: decided now, it would start
    /// them again.
    OwnWrites,
    /// The list of a kind the run's plan needs (`<plural>.<group>`) is still to come.
    KindList(&'static str),
    /// The UpgradeFreezes or UpgradeBudgets are not listed yet: one must hold before anything
    /// starts.
    Freezes,
    Budgets,
}

impl Wait {
    /// How soon the pass looks again.
    pub fn after(self) -> std::time::Duration {
        match self {
            Wait::OwnWrites => std::time::Duration::from_millis(100),
            Wait::KindList(_) => std::time::Duration::from_secs(5),
            Wait::Freezes | Wait::Budgets => CACHE_WAIT,
        }
    }
}

/// How a run's pass ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Passed {
    Waits(Wait),
    Sent(Sent),
}

/// One pass of a run: gathers the facts through `shell`, takes the engine's step at `now` (the
/// pass's one reading of the decision clock) and sends it ([`carry_out`]). The controller's
/// reconcile and the simulation's run this same function.
pub async fn pass<S: Gather>(shell: &S, run: &UpgradeRun, now: DateTime<Utc>) -> Result<Passed, S::Error> {
    if shell.awaits_own_writes(run) {
        return Ok(Passed::Waits(Wait::OwnWrites));
    }
    let ended = run.status.as_ref().is_some_and(|s| s.state.is_terminal());
    let plan = shell.plan(run.plan_name());
    let others = shell.others(run);
    let snapshot = shell.snapshot(run).await?;
    // The plan the run follows: frozen once the snapshot exists, else the live one.
    let run_plan = match &snapshot {
        SnapshotFact::Found { frozen, .. } => Some(&frozen.plan),
        _ => plan.as_deref().map(|p| &p.spec),
    };
    // A kind the API server does not serve is a fact for the step (KindsServed, spec §14.2); a
    // list still to come is a short wait.
    let missing_kinds = match shell.kinds_needed(run, run_plan) {
        KindsNeeded::Known(missing) => missing,
        KindsNeeded::ListPending { resource } => return Ok(Passed::Waits(Wait::KindList(resource))),
    };
    // A freeze, and a budget, must hold before anything starts; their lists come moments after
    // the start.
    if !ended && !shell.freezes_known() {
        return Ok(Passed::Waits(Wait::Freezes));
    }
    if !ended && !shell.budgets_known() {
        return Ok(Passed::Waits(Wait::Budgets));
    }
    // Signal gates of the run's plan, read by the plan's active run only (see `reads_gates`).
    let gates = match run_plan.and_then(|p| p.gates.as_deref()) {
        Some(gates) if !gates.is_empty() && reads_gates(run) => shell.gates(run, gates, now).await,
        _ => Vec::new(),
    };
    let approvals = shell.approvals(run);
    // A revert before its snapshot derives it from the run it reverts (spec §13.7).
    let reverted_run = match (&run.spec.revert_of, &snapshot) {
        (Some(of), SnapshotFact::Absent) if !ended => Some(shell.reverted(&of.name).await?),
        _ => None,
    };
    let reverted = RevertedFact::of(reverted_run.as_ref().map(|r| r.as_ref().map(|(run, s)| (&**run, s))));
    // Budgets select by the run's Promise and its live plan's labels, as freezes do (spec §13.8).
    let promise = run_plan.map(|p| p.promise_ref.name.as_str()).unwrap_or_default();
    let labels = plan.as_deref().map(|p| p.labels().clone()).unwrap_or_default();
    let all_budgets = shell.budgets();
    let selecting = match ended {
        true => Vec::new(),
        false => upgrade_budget::selecting(&all_budgets, promise, &labels),
    };
    // A budgeted run decides once, holding the ledger from the budgets' facts until its starts are
    // recorded; only budgeted runs wait for one another there.
    let budgets = match selecting.is_empty() {
        true => Vec::new(),
        false => shell.budget_facts(run, &selecting).await,
    };
    let facts = Facts {
        plan: plan.as_deref(),
        others: &others,
        snapshot,
        gates: &gates,
        approvals: &approvals,
        missing_kinds: &missing_kinds,
        reverted,
        budgets: &budgets,
        selector: shell.selector(),
        now,
    };
    let mut step = lifecycle::step(run, &facts, shell.cluster());
    shell.decided(run, &facts, &step)?;
    let wake_runs = std::mem::take(&mut step.wake_runs);
    let sent = carry_out(shell, run, &step).await;
    shell.wake(&wake_runs);
    Ok(Passed::Sent(sent?))
}

/// How a pass's sending ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Sent {
    /// Every write went out; look again at the earlier of these (neither: on a change).
    Done {
        wake_at: Option<DateTime<Utc>>,
        progress_after: Option<std::time::Duration>,
    },
    /// A write was refused, a binding patch conflicted or starts were withheld: nothing is
    /// overwritten, the next pass (soon) decides again from the current objects.
    Again,
    /// The run let go of its finalizer: nothing more to do for it.
    Released,
}

/// Sends `step`'s writes in the order the engine gives them ([`Step::writes`]): everything else
/// first, the status last. `run` is the copy the step was decided from.
pub async fn carry_out<S: Shell>(shell: &S, run: &UpgradeRun, step: &Step) -> Result<Sent, S::Error> {
    // The run as this pass saw it; this pass's own writes to it move the version on. The status
    // write is conditional on it.
    let mut version = run.metadata.resource_version.clone();
    let mut again = false;
    // Progress alone waits for its turn (`lifecycle::progress_every`): this pass looks again then.
    let (now, in_progress) = (shell.now(), shell.runs_in_progress());
    let progress_wait = shell.memory(|m| m.progress_wait(run, now, in_progress));
    let mut progress_after = None;
    for write in step.writes(run.status.as_ref(), progress_wait.is_some()) {
        match write {
            Write::Own(own) => match shell.patch_own(own).await? {
                RunWrite::Taken(Some(now)) => version = Some(now),
                RunWrite::Taken(None) => {}
                // Decided from a copy older than the run (the patch carries its version): nothing
                // of the step goes out; the next pass, from the current run, decides again.
                RunWrite::Refused => return Ok(refused(shell, run)),
            },
            Write::AdoptApprovals(patches) => shell.adopt_approvals(patches).await?,
            Write::Supersede(older) => {
                shell.supersede(older).await?;
            }
            Write::Snapshot(shards, frozen) => {
                // Only from the run as it is: a copy the cache has not caught up on (its status
                // already InProgress) would write again a snapshot someone deleted since, with
                // data its recorded digest still matches, and the deletion would go unseen. The
                // API server has no precondition across objects; one read per run taken.
                if !shell
                    .run_is_at(&run.metadata.name.clone().unwrap_or_default(), version.as_deref())
                    .await?
                {
                    return Ok(refused(shell, run));
                }
                shell.write_snapshot(run, shards, frozen).await?;
            }
            Write::Bindings(patches, frozen) => {
                repair_announcements(shell, run, &frozen.snapshot, &step.to).await?;
                again |= send_bindings(shell, run, patches, step.admitted.as_ref()).await?;
            }
            Write::CreateRevert(revert) => shell.create_run(&revert.0).await?,
            Write::FlushCounts => shell.flush_counts(run).await,
            Write::Announce(a) => announce(shell, run, a).await?,
            Write::Gauges(gauges) => shell.gauges(run, gauges),
            Write::ProgressLater => progress_after = progress_wait,
            Write::Status(status) => {
                // Computed from a copy older than the run: nothing of it is counted; the next
                // pass, from the current run, decides again.
                if shell.write_status(run, status, version.as_deref()).await? == RunWrite::Refused {
                    return Ok(refused(shell, run));
                }
                shell.memory(|m| m.status_written(run, now));
            }
            Write::Count(counts) => {
                shell.count(run, &counts)?;
                if counts.ended.is_some() {
                    // A finished run's memory goes.
                    shell.memory(|m| m.forget(&RunMemory::key(run)));
                }
            }
            Write::Release(release) => {
                return Ok(match shell.release(run, release).await? {
                    true => Sent::Released,
                    false => Sent::Again,
                })
            }
        }
    }
    Ok(match again {
        true => Sent::Again,
        false => Sent::Done {
            wake_at: step.wake_at,
            progress_after,
        },
    })
}

fn refused<S: Shell>(shell: &S, run: &UpgradeRun) -> Sent {
    shell.refused(run);
    Sent::Again
}

/// Sends a pass's binding patches, concurrently (bounded): a group of thousands starts at the
/// API server's pace, not one round trip at a time. Each carries its own precondition, and goes
/// only while what admitted it still holds (`admitted`, checked as each takes its turn: after a
/// cancel, a supersede or a freeze shows, at most one request per concurrent sender is still in
/// the air). Returns whether any conflicted or was withheld. An error does not abandon the
/// patches in flight: they finish and are announced; the first error is returned at the end.
async fn send_bindings<S: Shell>(
    shell: &S,
    run: &UpgradeRun,
    patches: &[BindingPatch],
    admitted: Option<&Admitted>,
) -> Result<bool, S::Error> {
    // Streams by index (a closure over borrowed items is not provably Send across the await):
    // only the futures in flight exist, however many thousands.
    let send = |i: usize| {
        let patch = &patches[i];
        async move {
            let _turn = shell.slot().await;
            if let Some(Err(ended)) = admitted.map(|a| shell.still_admitted(a)) {
                return (patch, Err(ended));
            }
            (patch, Ok(shell.patch_binding(patch).await))
        }
    };
    let mut sent = futures::stream::iter(0..patches.len())
        .map(send)
        .buffer_unordered(PATCH_CONCURRENCY);
    let mut conflict = false;
    let mut failed = None;
    let mut withheld: Vec<&BindingPatch> = Vec::new();
    let mut ended = None;
    while let Some((patch, result)) = sent.next().await {
        match result {
            Err(why) => {
                withheld.push(patch);
                ended.get_or_insert(why);
            }
            Ok(Ok(true)) => conflict = true,
            Ok(Ok(false)) => {
                shell.wrote_binding(run, patch);
                let Attempt::Start { from, to } = &patch.attempt else {
                    continue;
                };
                shell.started(run, &patch.resource);
                let note = texts::resource_started(&patch.resource.display_name(), from, to);
                if let Err(e) = shell.event(run, &started(note)).await {
                    failed.get_or_insert(e);
                }
            }
            Ok(Err(e)) => {
                failed.get_or_insert(e);
            }
        }
    }
    if let Some(why) = ended {
        shell.withheld(run, &withheld, &why).await;
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(conflict || !withheld.is_empty()),
    }
}

/// After a restart, announces the upgrades an earlier process started but whose
/// `ResourceUpgradeStarted` event a crash cut off (it came between the patch and the event).
/// Runs once per run per process, before this process starts anything for the run.
async fn repair_announcements<S: Shell>(
    shell: &S,
    run: &UpgradeRun,
    snapshot: &Snapshot,
    to: &str,
) -> Result<(), S::Error> {
    let Some(announced) = recall_first(shell, run).await? else {
        return Ok(());
    };
    let missing = shell.lost_starts(run, snapshot, to, &announced);
    let events: Vec<Announcement> = missing.into_iter().map(started).collect();
    // By index, as the binding patches (a closure over borrowed items is not provably Send).
    let publish = |i: usize| shell.event(run, &events[i]);
    let published: Vec<Result<(), S::Error>> = futures::stream::iter(0..events.len())
        .map(publish)
        .buffer_unordered(PATCH_CONCURRENCY)
        .collect()
        .await;
    published.into_iter().collect()
}

/// A `ResourceUpgradeStarted` event.
fn started(note: String) -> Announcement {
    Announcement {
        warning: false,
        reason: events::RESOURCE_UPGRADE_STARTED,
        note,
        key: String::new(),
    }
}

/// What earlier processes announced about `run`, read once per run per process: `Some` the first
/// time this process asks (and can list them), `None` after.
async fn recall_first<S: Shell>(shell: &S, run: &UpgradeRun) -> Result<Option<Arc<Announced>>, S::Error> {
    if shell.memory(|m| m.recalled(run).is_some()) {
        return Ok(None);
    }
    let listed = shell.list_announced(run).await?;
    Ok(listed.map(|announced| shell.memory(|m| m.recall(run, announced))))
}

/// Publishes a step's announcement once: not again by this process, nor when an earlier process
/// published it (a run-level one reads the run's Events first, once per process).
async fn announce<S: Shell>(shell: &S, run: &UpgradeRun, a: &Announcement) -> Result<(), S::Error> {
    if a.key.is_empty() {
        recall_first(shell, run).await?;
    }
    if shell.memory(|m| m.first_announcement(run, a)) {
        shell.event(run, a).await?;
    }
    Ok(())
}

/// What a controller process remembers of its runs between passes, lost when it stops: the next
/// process starts from the API server's objects (and the runs' Events) alone.
#[derive(Clone, Debug, Default)]
pub struct RunMemory {
    /// (run, reason, key) this process published.
    reported: HashSet<(String, &'static str, String)>,
    /// Each run's Events as this process read them, once per run.
    recalled: HashMap<String, Arc<Announced>>,
    /// When this process last wrote each run's status: its progress alone waits
    /// [`lifecycle::progress_every`] after it.
    status_written: HashMap<String, DateTime<Utc>>,
}

impl RunMemory {
    /// The key a run is remembered by: its UID (a run deleted and created again under its name
    /// is another run), else its name.
    pub fn key(run: &UpgradeRun) -> String {
        run.metadata
            .uid
            .clone()
            .or_else(|| run.metadata.name.clone())
            .unwrap_or_default()
    }

    /// What this process read of `run`'s Events, if it did.
    pub fn recalled(&self, run: &UpgradeRun) -> Option<Arc<Announced>> {
        self.recalled.get(&Self::key(run)).cloned()
    }

    /// Remembers what `run`'s Events announced.
    pub fn recall(&mut self, run: &UpgradeRun, announced: Announced) -> Arc<Announced> {
        let announced = Arc::new(announced);
        self.recalled.insert(Self::key(run), announced.clone());
        announced
    }

    /// Whether `a` is to be published now: this process has not, and no earlier process's Event
    /// (as recalled) says it. Remembers it as published.
    pub fn first_announcement(&mut self, run: &UpgradeRun, a: &Announcement) -> bool {
        let key = Self::key(run);
        let earlier = self.recalled.get(&key).is_some_and(|r| r.contains(a.reason, &a.note));
        self.reported.insert((key, a.reason, a.key.clone())) && !earlier
    }

    pub fn status_written(&mut self, run: &UpgradeRun, at: DateTime<Utc>) {
        self.status_written.insert(Self::key(run), at);
    }

    /// How long a status of `run` that is only progress must still wait at `now`, with
    /// `in_progress` runs sharing the progress writes: `None` when it may go now.
    pub fn progress_wait(
        &self,
        run: &UpgradeRun,
        now: DateTime<Utc>,
        in_progress: usize,
    ) -> Option<std::time::Duration> {
        let since = self
            .status_written
            .get(&Self::key(run))
            .map(|at| (now - *at).to_std().unwrap_or_default());
        lifecycle::progress_wait(since, in_progress)
    }

    /// Forgets run `key` (finished or gone).
    pub fn forget(&mut self, key: &str) {
        self.reported.retain(|(run, ..)| run != key);
        self.recalled.remove(key);
        self.status_written.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(uid: &str) -> UpgradeRun {
        let mut r = UpgradeRun::new("r", Default::default());
        r.metadata.uid = Some(uid.into());
        r
    }

    fn said(reason: &'static str, note: &str, key: &str) -> Announcement {
        Announcement {
            warning: false,
            reason,
            note: note.into(),
            key: key.into(),
        }
    }

    #[test]
    fn an_announcement_is_published_once_per_process_and_not_when_an_earlier_process_did() {
        let mut m = RunMemory::default();
        let (a, b) = (run("u1"), run("u2"));
        let started = said("UpgradeRunStarted", "started", "");
        assert!(m.first_announcement(&a, &started), "first time");
        assert!(!m.first_announcement(&a, &started), "not again in this process");
        assert!(m.first_announcement(&b, &started), "another run (by UID) is its own");
        let per_resource = |key: &str| said("ResourceUpgradeFailed", "db failed", key);
        assert!(m.first_announcement(&a, &per_resource("ns/db")));
        assert!(
            m.first_announcement(&a, &per_resource("ns/cache")),
            "its key tells occurrences apart"
        );
        m.forget("u1");
        assert!(m.first_announcement(&a, &started), "a forgotten run starts afresh");

        let mut m = RunMemory::default();
        m.recall(
            &a,
            Announced::from_events([("UpgradeRunStarted".to_string(), "started".to_string(), 1)]),
        );
        assert!(
            !m.first_announcement(&a, &started),
            "an earlier process's Event already says it"
        );
        assert!(
            !m.first_announcement(&a, &said("UpgradeRunStarted", "another note", "")),
            "a reason without a key is announced once per run: the key tells occurrences apart"
        );
        assert!(m.first_announcement(&a, &said("UpgradeRunStarted", "another note", "2")));
    }

    #[test]
    fn progress_alone_waits_after_this_processs_last_status_write() {
        let mut m = RunMemory::default();
        let r = run("u1");
        let t0: DateTime<Utc> = "2026-06-01T10:00:00Z".parse().expect("a time");
        assert_eq!(m.progress_wait(&r, t0, 1), None, "never written by this process");
        m.status_written(&r, t0);
        let later = t0 + chrono::Duration::milliseconds(400);
        assert_eq!(
            m.progress_wait(&r, later, 1),
            Some(std::time::Duration::from_millis(600))
        );
        assert_eq!(m.progress_wait(&r, t0 + chrono::Duration::seconds(1), 1), None);
    }
}
