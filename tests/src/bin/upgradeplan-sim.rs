//! upgradeplan-sim: the deterministic simulation (spec §14.3). Runs `SIM_HISTORIES` histories
//! (default 1000) from `SIM_SEED` (default: from the clock, printed), checks every invariant
//! after every step, prints each violation with its seed and shrunk history, and ends with
//! `simulation: <N> histories, <M> steps, seed <S>, <V> violations` (exit 1 when V > 0).

use upgradeplan_e2e::simulation;

/// Violations shrunk and printed in full; the rest are counted.
const SHOWN: usize = 3;

fn env_u64(name: &str) -> anyhow::Result<Option<u64>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| anyhow::anyhow!("{name}={v:?} is not a whole number: {e}")),
        Err(_) => Ok(None),
    }
}

fn main() -> anyhow::Result<()> {
    let seed = match env_u64("SIM_SEED")? {
        Some(seed) => seed,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    let histories = env_u64("SIM_HISTORIES")?.unwrap_or(1000);
    let started = std::time::Instant::now();
    let report = simulation::run(seed, histories, SHOWN);
    for (history_seed, violation, shrunk) in report.violations.iter().take(SHOWN) {
        println!("VIOLATION: {}", violation.invariant);
        println!("  {}", violation.detail);
        println!("  seed {history_seed} (replay: SIM_SEED={history_seed} SIM_HISTORIES=1)");
        println!("  world: {:?}", shrunk.shape);
        println!(
            "  shortest history that still violates it ({} actions):",
            shrunk.actions.len()
        );
        for (i, action) in shrunk.actions.iter().enumerate() {
            println!("    {i:3}. {action:?}");
        }
        let (_, world) = simulation::replay_in(shrunk);
        println!("  the runs it left, at {}:", world.now);
        for run in &world.runs {
            println!("    {}", simulation::describe(run));
        }
    }
    let t = &report.tally;
    println!(
        "({} starts, {} retries, {} crashes mid-step, {} steps cut by a failed write, {} leader changes, {} steps by a deposed leader, {} patches refused as stale, {} run writes refused as stale, {} HealthRecords written, {} statuses compared with the plugin's view, {} steps of an edited plan compared with the unedited; runs: {} completed, {} failed, {} cancelled)",
        t.starts,
        t.retries,
        t.crashes,
        t.write_errors,
        t.leader_changes,
        t.deposed,
        t.conflicts,
        t.stale_run_writes,
        t.health_reports,
        t.plugin_views,
        t.edited_plan_steps,
        t.completed,
        t.failed,
        t.cancelled
    );
    println!(
        "(reverts: {} asked by people, {} created by onFailure: Revert, {} snapshots derived and checked against their record, {} starts back, {} completed, {} failed)",
        t.reverts_asked, t.reverts_created, t.revert_snapshots, t.revert_starts, t.reverts_completed, t.reverts_failed
    );
    println!(
        "(budgets: {} steps of runs under an UpgradeBudget, {} held by it; {} status writes of progress alone put off; {} resources failed on a progressDeadline; {} sends interrupted by a watch event, {} starts withheld)",
        t.budgeted_steps, t.budget_holds, t.progress_deferred, t.deadline_failures,
        t.interrupted_sends, t.starts_withheld
    );
    println!(
        "(Resource Requests: {} created, {} deleted, {} bindings deleted after their delete workflows, {} created again under their name, {} of them while a run was under way)",
        t.requests_created, t.requests_deleted, t.bindings_deleted, t.requests_recreated, t.recreated_mid_run
    );
    println!(
        "(counters: read from the runs at every action; {} runs deleted after their plan kept their counts, {} let go before it did)",
        t.deleted_kept, t.released_unkept
    );
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "({:.1} s: {:.0} histories/s, {:.0} steps/s)",
        elapsed,
        report.histories as f64 / elapsed.max(1e-9),
        report.steps as f64 / elapsed.max(1e-9)
    );
    println!(
        "simulation: {} histories, {} steps, seed {seed}, {} violations",
        report.histories,
        report.steps,
        report.violations.len()
    );
    if !report.violations.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
