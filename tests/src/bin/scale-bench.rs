//! `make bench-scale`: the controller at scale on the real control plane, against the floor
//! measured in the same run. Prints the figures; docs/performance.md records them.
//!
//! Fifty plans at once (`plans:PxB[@BUDGET]`, `plans:50x200` by default, `plans:50x2000` for the
//! 100k of issue 43): see [`many_plans`].
//!
//! For each size N (1k five times and 10k once by default, `1000x5 10000`: `NxK` measures N
//! bindings K times, each with fresh bindings, and reports every ratio and the median; `make
//! bench-scale SIZES="10000 100000"` for 100k), N bindings in one group (maxConcurrent 100%,
//! kratix-sim without delay):
//! wall time from run creation to Completed; the controller's API requests per upgraded
//! resource (its own client counters); its peak RSS; the snapshot's sharding. Two yardsticks from
//! the same run: the *reference orchestrator* — a minimal client doing the run's job with nothing
//! else (list the eligible bindings, patch `spec.version` 16 requests at a time, wait for
//! kratix-sim's completions through one watch) against the same kratix-sim — and the bare floor of
//! the same number of `spec.version` patches without kratix-sim. The bindings are created by field
//! manager `kratix` (Kratix creates them in a real cluster), so that the reference, like the
//! controller, writes as a manager of its own; both timed phases carry the same observer watch
//! (when was every binding patched) and print the CPU each process spent: the cores are shared, so
//! where a phase's extra wall time goes shows there. Then reaction latency
//! (maxConcurrent 1: a binding's completion to the next start), and the plugin's `match` against
//! `kubectl get resourcebindings -A -o json` over the same bindings. Across the sizes: bytes per
//! cached binding and the cost per resource of the largest against the smallest (linear?).
//!
//! Nothing is timed until kube-controller-manager watches bindings (its garbage collector begins
//! to watch a new kind up to 30 s after it is installed), and each size's bindings are gone before
//! the next is created: both timed phases meet the same API-server load.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::json;
use upgradeplan::api::kratix::{BindingFacts, ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{RunState, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradeRun};
use upgradeplan_e2e::harness::{http_get, proc_stat, workspace_bin, TestEnv};

const CONCURRENCY: usize = 16;

/// How long one phase of size `n` may take: 30 min, or 50 ms per binding beyond that (a 100k run
/// on these 2 cores takes about 20 min; the margin is for a busy machine).
fn phase_timeout(n: usize) -> Duration {
    Duration::from_secs(1800).max(Duration::from_millis(50 * n as u64))
}

async fn create_bindings(env: &mut TestEnv, n: usize) -> anyhow::Result<Vec<(String, String)>> {
    create_bindings_in(env, n, 10).await
}

/// `n` bindings of `env`'s Promise at v1.0.0, over `namespaces` namespaces.
async fn create_bindings_in(env: &mut TestEnv, n: usize, namespaces: usize) -> anyhow::Result<Vec<(String, String)>> {
    let namespaces: Vec<String> = {
        let mut v = vec![];
        for i in 0..namespaces {
            v.push(env.namespace(&format!("n{i}")).await?);
        }
        v
    };
    let envref = &*env;
    let made: Vec<(String, String)> = futures::stream::iter(0..n)
        .map(|i| {
            let ns = namespaces[i % namespaces.len()].clone();
            async move {
                let name = format!("r{i:05}");
                envref.bench_binding(&ns, &name, &[("env", "all")], "v1.0.0").await?;
                Ok::<_, anyhow::Error>((ns, envref.binding_name(&name)))
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await?;
    Ok(made)
}

/// The floor: `n` spec.version merge patches, CONCURRENCY at a time, as fast as the server takes
/// them (then put back, untimed).
async fn floor(env: &TestEnv, bindings: &[(String, String)]) -> anyhow::Result<Duration> {
    let patch = |version: &'static str| {
        futures::stream::iter(bindings.iter().cloned())
            .map(move |(ns, name)| async move {
                env.bindings_api(&ns)
                    .patch(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"spec": {"version": version}})),
                    )
                    .await
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<_>>()
    };
    let t = Instant::now();
    patch("v1.0.0-floor").await?;
    let took = t.elapsed();
    patch("v1.0.0").await?;
    Ok(took)
}

/// The reference orchestrator: the run's job done by a minimal client with nothing else — one
/// watch for completions, one list of the Promise's bindings, `spec.version := to` (with the
/// resourceVersion precondition, as the controller sends it) on those at `from`, CONCURRENCY
/// requests in flight and no limit on upgrades in flight (maxConcurrent 100%), then the wait until
/// kratix-sim has applied `to` to every one. Returns its wall time and the number it upgraded. Its
/// patches are its own field manager's, not the bindings' creator's (Kratix, in a real cluster).
async fn reference(env: &TestEnv, from: &str, to: &str, n: usize) -> anyhow::Result<(Duration, usize)> {
    reference_over(env, &of_promises(&[env.promise.as_str()]), from, to, n).await
}

/// Untimed, before a reference is timed: the `n` bindings `selector` selects upgraded v1 -> v2 and
/// back with kratix-sim, so that the reference, like the runs after it, times bindings Kratix has
/// already upgraded. A binding's managedFields reach their size only with kratix-sim's status
/// writes (1,124 bytes when created, 1,706 from the second upgrade on): a reference timed on the
/// young bindings carried about a quarter less of every watch event than the runs after it, for
/// reasons of age alone (docs/performance.md). Returns how long it took.
async fn settle(env: &TestEnv, selector: &str, n: usize) -> anyhow::Result<Duration> {
    let t = Instant::now();
    for (from, to) in [("v1.0.0", "v2.0.0"), ("v2.0.0", "v1.0.0")] {
        let (_, moved) = reference_over(env, selector, from, to, n).await?;
        anyhow::ensure!(moved == n, "settling the bindings {from} -> {to}: moved {moved} of {n}");
    }
    Ok(t.elapsed())
}

/// The label selector of the bindings of `promises`.
fn of_promises(promises: &[&str]) -> String {
    match promises {
        [one] => format!("{PROMISE_NAME_LABEL}={one}"),
        many => format!("{PROMISE_NAME_LABEL} in ({})", many.join(",")),
    }
}

/// [`reference`] over the bindings `selector` selects (of many Promises: one orchestrator doing
/// every plan's upgrades).
async fn reference_over(
    env: &TestEnv,
    selector: &str,
    from: &str,
    to: &str,
    n: usize,
) -> anyhow::Result<(Duration, usize)> {
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let t = Instant::now();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel::<std::collections::HashSet<(String, String)>>();
    let watch = {
        let (api, config, to) = (api.clone(), watcher::Config::default().labels(selector), to.to_string());
        tokio::spawn(async move {
            let mut done = std::collections::HashSet::new();
            let mut stream = watcher(api, config).default_backoff().applied_objects().boxed();
            let mut listed_rx = listed_rx;
            let mut wanted: Option<std::collections::HashSet<(String, String)>> = None;
            loop {
                tokio::select! {
                    got = &mut listed_rx, if wanted.is_none() => wanted = Some(got.unwrap_or_default()),
                    item = stream.next() => match item {
                        Some(Ok(b)) if b.last_applied_version() == to => {
                            done.insert((b.namespace().unwrap_or_default(), b.name_any()));
                        }
                        Some(_) => {}
                        None => return Instant::now(),
                    },
                }
                if wanted.as_ref().is_some_and(|w| w.is_subset(&done)) {
                    return Instant::now();
                }
            }
        })
    };
    let listed = api.list(&kube::api::ListParams::default().labels(selector)).await?;
    let eligible: Vec<(String, String, Option<String>)> = listed
        .items
        .iter()
        .filter(|b| b.last_applied_version() == from)
        .map(|b| (b.namespace().unwrap_or_default(), b.name_any(), b.resource_version()))
        .collect();
    let _ = listed_tx.send(
        eligible
            .iter()
            .map(|(ns, name, _)| (ns.clone(), name.clone()))
            .collect(),
    );
    futures::stream::iter(eligible.iter().cloned())
        .map(|(ns, name, rv)| async move {
            env.bindings_api(&ns)
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"resourceVersion": rv}, "spec": {"version": to}})),
                )
                .await
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    let finished = tokio::time::timeout(phase_timeout(n), watch)
        .await
        .context("the reference orchestrator timed out")??;
    Ok((finished - t, eligible.len()))
}

/// When the bench's observer saw the first and the last of `n` bindings carry `spec.version == to`,
/// and the most it saw in flight at once (carrying `to`, not yet applied by kratix-sim).
struct Patched {
    first: Instant,
    all: Instant,
    peak_in_flight: usize,
}

/// The bench's observer, the same in both timed phases (so that neither carries more of the
/// bench's load than the other): a watch of the Promise's bindings that returns when all `n`
/// carry `spec.version == to`, i.e. every start patch is in. Returns once the watch has listed
/// the bindings: at 10k the list costs the API server seconds, which used to overlap the start of
/// the phase timed next (its first patch came 8 to 13 s after it began).
async fn observe_patched(env: &TestEnv, to: &str, n: usize) -> anyhow::Result<tokio::task::JoinHandle<Patched>> {
    observe_patched_over(env, &of_promises(&[env.promise.as_str()]), to, n).await
}

/// [`observe_patched`] over the bindings `selector` selects.
async fn observe_patched_over(
    env: &TestEnv,
    selector: &str,
    to: &str,
    n: usize,
) -> anyhow::Result<tokio::task::JoinHandle<Patched>> {
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let config = watcher::Config::default().labels(selector);
    let to = to.to_string();
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel::<()>();
    let observer = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        let mut started = std::collections::HashSet::new();
        let mut in_flight = std::collections::HashSet::new();
        let mut peak_in_flight = 0;
        let mut first = None;
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(Ok(event)) = stream.next().await {
            let b = match event {
                watcher::Event::Apply(b) | watcher::Event::InitApply(b) => b,
                watcher::Event::InitDone => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                watcher::Event::Init | watcher::Event::Delete(_) => continue,
            };
            let key = (b.namespace().unwrap_or_default(), b.name_any());
            if b.spec.version == to && b.last_applied_version() != to {
                in_flight.insert(key.clone());
                peak_in_flight = peak_in_flight.max(in_flight.len());
            } else {
                in_flight.remove(&key);
            }
            if b.spec.version == to {
                let now = Instant::now();
                first.get_or_insert(now);
                started.insert(key);
                if started.len() == n {
                    return Patched {
                        first: first.unwrap_or(now),
                        all: now,
                        peak_in_flight,
                    };
                }
            }
        }
        let now = Instant::now();
        Patched {
            first: first.unwrap_or(now),
            all: now,
            peak_in_flight,
        }
    });
    tokio::time::timeout(phase_timeout(n), listed_rx)
        .await
        .context("the observer's watch did not list the bindings")?
        .context("the observer's watch ended before it listed the bindings")?;
    Ok(observer)
}

/// The controller's requests between two scrapes of its metrics, by method and resource, most first.
fn controller_requests(before: &str, after: &str) -> String {
    let counts = |text: &str| -> HashMap<String, f64> {
        text.lines()
            .filter(|l| l.starts_with("rest_client_requests_total{"))
            .filter_map(|l| {
                let (labels, value) = l.rsplit_once(' ')?;
                Some((
                    labels.trim_start_matches("rest_client_requests_total").to_string(),
                    value.parse().ok()?,
                ))
            })
            .collect()
    };
    let (before, after) = (counts(before), counts(after));
    let mut moved: Vec<(String, f64)> = after
        .into_iter()
        .map(|(k, v)| {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            (k, d)
        })
        .filter(|(_, d)| *d >= 1.0)
        .collect();
    moved.sort_by(|a, b| b.1.total_cmp(&a.1));
    moved
        .iter()
        .map(|(k, d)| format!("{k} {d:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a `rest_client_requests_total` line counts writes.
fn is_write(l: &str) -> bool {
    [
        "method=\"PATCH\"",
        "method=\"POST\"",
        "method=\"PUT\"",
        "method=\"DELETE\"",
    ]
    .iter()
    .any(|m| l.contains(m))
}

fn metric_sum(text: &str, name: &str, filter: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && filter(l))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A memory figure of /proc/<pid>/status (`VmHWM`: peak resident, `VmRSS`: resident now), in MiB.
fn memory_mib(pid: Option<u32>, field: &str) -> f64 {
    let status = pid
        .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

async fn wait_terminal(env: &TestEnv, run: &str, timeout: Duration) -> anyhow::Result<UpgradeRun> {
    upgradeplan_e2e::harness::wait_for(env.runs(), run, timeout, "terminal", |r: &UpgradeRun| {
        r.status.as_ref().is_some_and(|s| s.state.is_terminal())
    })
    .await
}

/// CPU time spent by the processes that share the machine's cores during a phase: where a run's
/// extra wall time goes when the cores are busy (read from /proc/<pid>/stat and /proc/stat).
struct Cpu {
    /// (name, pid) of the processes measured; a missing pid reads as zero.
    processes: Vec<(&'static str, Option<u32>)>,
    ticks_per_second: f64,
}

/// A reading of [`Cpu`]: each process's user+system ticks, and the machine's busy, stolen and
/// total ticks.
struct CpuReading {
    processes: Vec<u64>,
    busy: u64,
    /// Time the hypervisor gave this machine's virtual CPUs to others: noise the bench cannot control.
    stolen: u64,
    total: u64,
}

impl Cpu {
    /// The controller, kratix-sim, kube-apiserver and etcd (by the pid files of $TESTENV_DIR), and
    /// this bench (its reference orchestrator and watches).
    fn new(controller: Option<u32>, sim: Option<u32>) -> Self {
        let pid_file = |name: &str| {
            let dir = std::env::var("TESTENV_DIR").unwrap_or_else(|_| "/tmp/upgradeplan-testenv".into());
            std::fs::read_to_string(format!("{dir}/{name}.pid"))
                .ok()
                .and_then(|p| p.trim().parse().ok())
        };
        let ticks_per_second = std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0);
        Cpu {
            processes: vec![
                ("controller", controller),
                ("kratix-sim", sim),
                ("kube-apiserver", pid_file("kube-apiserver")),
                ("etcd", pid_file("etcd")),
                ("bench", Some(std::process::id())),
            ],
            ticks_per_second,
        }
    }

    fn read(&self) -> CpuReading {
        // utime and stime are fields 14 and 15: the 12th and 13th after the command.
        let ticks = |pid: Option<u32>| -> u64 {
            pid.and_then(proc_stat)
                .and_then(|f| Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?))
                .unwrap_or(0)
        };
        let (busy, stolen, total) = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| {
                let line = s.lines().next()?.to_string();
                let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
                // idle and iowait are the 4th and 5th, steal the 8th.
                let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                let stolen = v.get(7).copied().unwrap_or(0);
                let total: u64 = v.iter().take(8).sum();
                Some((total - idle - stolen, stolen, total))
            })
            .unwrap_or((0, 0, 0));
        CpuReading {
            processes: self.processes.iter().map(|(_, pid)| ticks(*pid)).collect(),
            busy,
            stolen,
            total,
        }
    }

    /// One line: CPU seconds per process between two readings, and how busy the machine was.
    fn report(&self, from: &CpuReading, to: &CpuReading) -> String {
        let secs = |a: u64, b: u64| b.saturating_sub(a) as f64 / self.ticks_per_second;
        let parts: Vec<String> = self
            .processes
            .iter()
            .zip(from.processes.iter().zip(&to.processes))
            .filter(|((_, pid), _)| pid.is_some())
            .map(|((name, _), (a, b))| format!("{name} {:.1} s", secs(*a, *b)))
            .collect();
        let share = |a: u64, b: u64| b.saturating_sub(a) as f64 / to.total.saturating_sub(from.total).max(1) as f64;
        format!(
            "CPU {}; machine {:.0}% busy, {:.1}% stolen by the host",
            parts.join(", "),
            share(from.busy, to.busy) * 100.0,
            share(from.stolen, to.stolen) * 100.0
        )
    }
}

/// The API server's request counters (`apiserver_request_total`), summed by (verb, resource), and
/// the watch events it sent.
async fn apiserver_requests(client: &kube::Client) -> HashMap<(String, String), f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap_or_default();
    let text = client.request_text(request).await.unwrap_or_default();
    let mut by = HashMap::new();
    // Also the watch events sent, and their bytes, by kind or resource (as "watch-events"/"watch-bytes").
    for line in text.lines() {
        let verb_of = |line: &str| -> Option<&'static str> {
            if line.starts_with("apiserver_request_total{") {
                Some("")
            } else if line.starts_with("apiserver_watch_events_total{") {
                Some("watch-events")
            } else if line.starts_with("apiserver_watch_events_sizes_sum{") {
                Some("watch-bytes")
            } else if line.starts_with("apiserver_registered_watchers{")
                || (line.starts_with("apiserver_longrunning_requests{") && line.contains("verb=\"WATCH\""))
            {
                // The watches open now: the gauge Kubernetes 1.20 had, or the long-running WATCH
                // requests of the releases after it dropped that gauge.
                Some("watchers-now")
            } else if line.starts_with("apiserver_terminated_watchers_total{") {
                // Watchers the API server closed because they read too slowly: their events stop.
                Some("terminated-watchers")
            } else {
                None
            }
        };
        let Some(fixed_verb) = verb_of(line) else {
            continue;
        };
        let label = |name: &str| {
            line.split(&format!("{name}=\"")[..])
                .nth(1)
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default()
                .to_string()
        };
        let value = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        let key = match fixed_verb {
            "" => (label("verb"), label("resource")),
            "terminated-watchers" => (fixed_verb.to_string(), label("resource")),
            // By kind (Kubernetes 1.20's label) or by resource (the label of later releases).
            verb => {
                let kind = label("kind");
                (verb.to_string(), if kind.is_empty() { label("resource") } else { kind })
            }
        };
        *by.entry(key).or_insert(0.0) += value;
    }
    by
}

/// The API server's requests between two readings, most first: what each phase asked of it.
fn requests_between(before: &HashMap<(String, String), f64>, after: &HashMap<(String, String), f64>) -> String {
    let of_bindings = |k: &(String, String)| k.1 == "ResourceBinding" || k.1 == "resourcebindings";
    let mut moved: Vec<(&(String, String), f64)> = after
        .iter()
        .map(|(k, v)| match k.0.as_str() {
            // A gauge: as it stands at the end.
            "watchers-now" => (k, *v),
            _ => (k, v - before.get(k).copied().unwrap_or(0.0)),
        })
        // Of the watchers (a gauge of every kind), only those of bindings.
        .filter(|(k, d)| *d >= 1.0 && (k.0 != "watchers-now" || of_bindings(k)))
        .collect();
    // Everything about bindings (watchers first), then the six largest of the rest.
    moved.sort_by(|a, b| {
        let rank = |k: &(String, String)| (!of_bindings(k), k.0 != "watchers-now");
        rank(a.0).cmp(&rank(b.0)).then(b.1.total_cmp(&a.1))
    });
    let bindings = moved.iter().filter(|(k, _)| of_bindings(k)).count();
    let parts: Vec<String> = moved
        .iter()
        .take(bindings + 6)
        .map(|((verb, resource), d)| format!("{verb} {resource} {d:.0}"))
        .collect();
    format!("API server requests: {}", parts.join(", "))
}

/// What one size measured, for the comparisons across sizes.
struct Measured {
    n: usize,
    /// The controller's resident MiB with its caches filled, before the run.
    cached_mib: f64,
    /// Run creation to Completed.
    wall: Duration,
    /// The reference orchestrator's wall time.
    reference: Duration,
}

/// Waits until the controller at `metrics_addr` has its caches filled and its plans reconciled:
/// the groups' resolved maxConcurrent (100%) counts all `n` bindings once the binding cache holds
/// them. Returns how long that took.
async fn caches_filled(metrics_addr: &str, n: usize) -> anyhow::Result<Duration> {
    let filled = Instant::now();
    loop {
        let text = http_get(metrics_addr, "/metrics")
            .await
            .map(|(_, t)| t)
            .unwrap_or_default();
        if metric_sum(&text, "upgradeplan_group_max_concurrent", |_| true) == n as f64 {
            return Ok(filled.elapsed());
        }
        anyhow::ensure!(
            filled.elapsed() < phase_timeout(n),
            "the controller's caches did not fill"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// One size: prints its figures.
async fn scale(n: usize) -> anyhow::Result<Measured> {
    let sim = workspace_bin("kratix-sim")?;
    let mut env = TestEnv::new(&format!("scale{n}")).await?;
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0").await?;
    let t = Instant::now();
    let bindings = create_bindings(&mut env, n).await?;
    println!(
        "[{n}] created {n} bindings (with status) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let floor = floor(&env, &bindings).await?;
    println!(
        "[{n}] floor: {n} spec.version merge patches by a minimal client ({CONCURRENCY} at a time): {:.2} s",
        floor.as_secs_f64()
    );

    env.start_sim(sim.to_str().unwrap_or_default(), &["--delay", "0s"])?;
    settle(&env, &of_promises(&[env.promise.as_str()]), n).await?;
    let cpu = Cpu::new(None, env.sim_pid());
    let observer = observe_patched(&env, "v2.0.0", n).await?;
    let requests_before = apiserver_requests(&env.client).await;
    let cpu_before = cpu.read();
    let t = Instant::now();
    let (reference_wall, upgraded) = reference(&env, "v1.0.0", "v2.0.0", n).await?;
    let reference_cpu = cpu.report(&cpu_before, &cpu.read());
    let reference_requests = requests_between(&requests_before, &apiserver_requests(&env.client).await);
    let observed = observer.await?;
    let reference_patched = observed.all - t;
    anyhow::ensure!(upgraded == n, "the reference orchestrator upgraded {upgraded} of {n}");
    println!(
        "[{n}] reference orchestrator: list, {n} spec.version patches ({CONCURRENCY} at a time), all of kratix-sim's completions watched: {:.2} s (first binding patched after {:.2} s, every one after {:.2} s)",
        reference_wall.as_secs_f64(),
        (observed.first - t).as_secs_f64(),
        reference_patched.as_secs_f64()
    );
    println!("[{n}] reference orchestrator: {reference_cpu}");
    println!("[{n}] reference orchestrator: {reference_requests}");
    // Back to v1.0.0 (untimed) for the controller's run.
    let (_, back) = reference(&env, "v2.0.0", "v1.0.0", n).await?;
    anyhow::ensure!(back == n, "put back {back} of {n}");
    let metrics_port = upgradeplan_e2e::harness::free_port()?;
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let controller = env
        .start_controller(&["--metrics-addr", &metrics_addr, "--log-level", "warn"])
        .await?;
    let plan = env
        .create_plan("plan", json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}, "maxConcurrent": "100%"}]}))
        .await?;
    let filled = caches_filled(&metrics_addr, n).await?;
    println!(
        "[{n}] controller started; caches filled and the plan reconciled after {:.1} s",
        filled.as_secs_f64()
    );
    let cached_mib = memory_mib(controller.child.id(), "VmRSS");
    println!("[{n}] controller resident with its caches filled, before the run: {cached_mib:.1} MiB");
    let (_, before) = http_get(&metrics_addr, "/metrics").await?;
    // The controller's own phase: until every binding carries the target version.
    let all_started = observe_patched(&env, "v2.0.0", n).await?;
    let cpu = Cpu::new(controller.child.id(), env.sim_pid());
    let requests_before = apiserver_requests(&env.client).await;
    let cpu_before = cpu.read();
    let t = Instant::now();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await?;
    let done = wait_terminal(&env, &run, phase_timeout(n)).await?;
    let wall = t.elapsed();
    let run_cpu = cpu.report(&cpu_before, &cpu.read());
    let run_requests = requests_between(&requests_before, &apiserver_requests(&env.client).await);
    let (_, after) = http_get(&metrics_addr, "/metrics").await?;
    let status = done.status.clone().unwrap_or_default();
    anyhow::ensure!(
        status.state == RunState::Completed && status.completed_resources == n as i64,
        "run ended {:?} with {}/{}",
        status.state,
        status.completed_resources,
        status.total_resources
    );
    let delta = |filter: &dyn Fn(&str) -> bool| {
        metric_sum(&after, "rest_client_requests_total", filter)
            - metric_sum(&before, "rest_client_requests_total", filter)
    };
    let writes = delta(&|l| is_write(l));
    let event_writes = delta(&|l| is_write(l) && l.contains("resource=\"events\""));
    let reads = delta(&|l| l.contains("method=\"GET\""));
    println!(
        "[{n}] run to Completed: {:.2} s = {:.2}x the reference orchestrator (target <= 1.10x at 1k and 10k), {:.2}x the bare floor",
        wall.as_secs_f64(),
        wall.as_secs_f64() / reference_wall.as_secs_f64(),
        wall.as_secs_f64() / floor.as_secs_f64()
    );
    let observed = all_started.await?;
    let patched = observed.all - t;
    println!(
        "[{n}] of which the controller's phase (run created -> all {n} bindings patched; the first after {:.2} s): {:.2} s = {:.2}x the floor, {:.2}x the reference's; the rest is kratix-sim's status writes",
        (observed.first - t).as_secs_f64(),
        patched.as_secs_f64(),
        patched.as_secs_f64() / floor.as_secs_f64(),
        patched.as_secs_f64() / reference_patched.as_secs_f64()
    );
    println!("[{n}] run: {run_cpu}");
    println!("[{n}] run: {run_requests}");
    println!(
        "[{n}] controller requests per upgraded resource: {:.2} writes ({:.2} excluding events; target <= 1.2), {:.3} reads",
        writes / n as f64,
        (writes - event_writes) / n as f64,
        reads / n as f64
    );
    println!(
        "[{n}] controller peak RSS: {:.1} MiB (targets: <= 50 MiB at 10k, <= 250 MiB at 100k)",
        memory_mib(controller.child.id(), "VmHWM")
    );
    println!(
        "[{n}] snapshot ConfigMaps: {} for {} resources",
        status.resource_list_refs.len(),
        status.total_resources
    );

    // The plugin against kubectl over the same bindings.
    let plugin = workspace_bin("kubectl-upgradeplan")?;
    let time = |cmd: &mut std::process::Command| -> anyhow::Result<f64> {
        let mut times = vec![];
        for _ in 0..3 {
            let t = Instant::now();
            let o = cmd.output()?;
            anyhow::ensure!(o.status.success(), "{:?}: {}", cmd, String::from_utf8_lossy(&o.stderr));
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(|a, b| a.total_cmp(b));
        Ok(times[1])
    };
    let kubectl = time(std::process::Command::new("kubectl").args(["get", "resourcebindings", "-A", "-o", "json"]))?;
    let matching = time(std::process::Command::new(&plugin).args(["match", &plan, "-o", "json"]))?;
    println!("[{n}] kubectl upgradeplan match: {matching:.2} s; kubectl get resourcebindings -A -o json: {kubectl:.2} s; ratio {:.2} (target <= 1.0)", matching / kubectl);
    drop(controller);
    env.teardown_settled(phase_timeout(n)).await?;
    Ok(Measured {
        n,
        cached_mib,
        wall,
        reference: reference_wall,
    })
}

/// The many-plans scenario (`plans:PxB`): P plans over P Promises, B bindings each, one
/// kratix-sim for all. The Saturday night of spec §13.8: every plan's run starts in the same
/// minute (all created while an UpgradeFreeze holds them, then the freeze is lifted), measured
/// without a budget and under one UpgradeBudget of `budget`, against the reference orchestrator
/// doing the same P×B upgrades ([`settle`]d first). Each variant upgrades every binding one
/// version on (the reference v1→v2, the runs without a budget v2→v3, under the budget v3→v4, or
/// v2→v3 when measured alone), so nothing is put back between them. Before each variant's timed phase, the cost of one binding event with one
/// run active and with all P active (held by the freeze): a binding event must wake only the runs
/// of its Promise's plan, so its cost stays flat as plans are added.
async fn many_plans(scenario: ManyPlans) -> anyhow::Result<()> {
    let ManyPlans {
        plans,
        per_plan,
        budget,
        budget_only,
    } = scenario;
    let total = plans * per_plan;
    let tag = format!("[{plans} plans x {per_plan}]");
    let sim = workspace_bin("kratix-sim")?;
    let t = Instant::now();
    let mut envs = Vec::with_capacity(plans);
    let mut bindings = Vec::with_capacity(plans);
    for i in 0..plans {
        let mut env = TestEnv::new(&format!("many{i}")).await?;
        env.promise_with_revisions(&["v1.0.0", "v2.0.0", "v3.0.0", "v4.0.0"], "v4.0.0")
            .await?;
        bindings.push(create_bindings_in(&mut env, per_plan, 2).await?);
        envs.push(env);
    }
    println!(
        "{tag} created {plans} Promises and {total} bindings (with status) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let promises: Vec<String> = envs.iter().map(|e| e.promise.clone()).collect();
    let selector = of_promises(&promises.iter().map(String::as_str).collect::<Vec<_>>());
    let first = envs.first_mut().context("no plans")?;
    first.start_sim_for_every_promise(sim.to_str().unwrap_or_default(), &["--delay", "0s"])?;
    let settled = settle(first, &selector, total).await?;
    println!(
        "{tag} bindings settled (upgraded there and back, untimed) in {:.1} s",
        settled.as_secs_f64()
    );

    // The reference orchestrator: every binding of every Promise, v1 -> v2.
    let cpu = Cpu::new(None, first.sim_pid());
    let observer = observe_patched_over(first, &selector, "v2.0.0", total).await?;
    let requests_before = apiserver_requests(&first.client).await;
    let cpu_before = cpu.read();
    let t = Instant::now();
    let (reference_wall, upgraded) = reference_over(first, &selector, "v1.0.0", "v2.0.0", total).await?;
    let reference_cpu = cpu.report(&cpu_before, &cpu.read());
    let reference_requests = requests_between(&requests_before, &apiserver_requests(&first.client).await);
    let observed = observer.await?;
    anyhow::ensure!(
        upgraded == total,
        "the reference orchestrator upgraded {upgraded} of {total}"
    );
    println!(
        "{tag} reference orchestrator: {total} upgrades of {plans} Promises ({CONCURRENCY} patches at a time, every completion watched): {:.2} s (every binding patched after {:.2} s; at most {} in flight)",
        reference_wall.as_secs_f64(),
        (observed.all - t).as_secs_f64(),
        observed.peak_in_flight
    );
    println!("{tag} reference orchestrator: {reference_cpu}");
    println!("{tag} reference orchestrator: {reference_requests}");

    let (k, v) = first.selector();
    let plan_names: Vec<String> = (0..plans).map(|i| format!("{}-plan{i:02}", first.id)).collect();
    let mut summary = vec![];
    let variants = match budget_only {
        false => vec![
            ("without a budget", ("v2.0.0", "v3.0.0"), None),
            ("under one budget", ("v3.0.0", "v4.0.0"), Some(budget)),
        ],
        true => vec![("under one budget", ("v2.0.0", "v3.0.0"), Some(budget))],
    };
    for (variant, (from, to), cap) in variants {
        let tag = match cap {
            Some(cap) => format!("{tag} {variant} of {cap}"),
            None => format!("{tag} {variant}"),
        };
        let plans_api: Api<UpgradePlan> = Api::all(first.client.clone());
        for (plan, promise) in plan_names.iter().zip(&promises) {
            let spec = json!({"promiseRef": {"name": promise}, "upgradePath": {"from": [from], "to": to},
                              "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}, "maxConcurrent": "100%"}]});
            let object: UpgradePlan = serde_json::from_value(json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
                "metadata": {"name": plan, "labels": {k.clone(): v.clone()}}, "spec": spec
            }))?;
            plans_api
                .patch(plan, &PatchParams::apply("scale-bench").force(), &Patch::Apply(&object))
                .await?;
        }
        let budget_name = format!("{}-saturday", first.id);
        let budgets: Api<UpgradeBudget> = Api::all(first.client.clone());
        if let Some(cap) = cap {
            let object: UpgradeBudget = serde_json::from_value(json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeBudget",
                "metadata": {"name": budget_name, "labels": {k.clone(): v.clone()}},
                "spec": {"maxInFlight": cap, "planSelector": {"matchLabels": {k.clone(): v.clone()}}}
            }))?;
            budgets.create(&PostParams::default(), &object).await?;
        }
        // The freeze that holds every run until the timed phase.
        let freeze_name = format!("{}-hold", first.id);
        let freezes: Api<UpgradeFreeze> = Api::all(first.client.clone());
        let now = chrono::Utc::now();
        let minute = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M").to_string();
        let freeze: UpgradeFreeze = serde_json::from_value(json!({
            "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeFreeze",
            "metadata": {"name": freeze_name, "labels": {k.clone(): v.clone()}},
            "spec": {"reason": "until the bench lifts it",
                     "periods": [{"start": minute(now - chrono::TimeDelta::hours(1)), "end": minute(now + chrono::TimeDelta::days(1))}],
                     "planSelector": {"matchLabels": {k.clone(): v.clone()}}}
        }))?;
        freezes.create(&PostParams::default(), &freeze).await?;

        let metrics_addr = format!("127.0.0.1:{}", upgradeplan_e2e::harness::free_port()?);
        let controller = first
            .start_controller(&["--metrics-addr", &metrics_addr, "--log-level", "warn"])
            .await?;
        let filled = caches_filled(&metrics_addr, total).await?;
        let cached_mib = memory_mib(controller.child.id(), "VmRSS");
        println!(
            "{tag} controller started; caches filled and {plans} plans reconciled after {:.1} s; resident {cached_mib:.1} MiB",
            filled.as_secs_f64()
        );

        // One binding event's cost, with one run active and then with every plan's run active.
        let run_name = |plan: &str| format!("{plan}-{}", to.replace('.', "-"));
        let mut costs = vec![];
        let mut created = 0;
        for active in [1, plans] {
            for plan in &plan_names[created..active] {
                first.create_run(&run_name(plan), plan, false).await?;
            }
            created = active;
            for plan in &plan_names[..active] {
                first
                    .wait_run(&run_name(plan), phase_timeout(per_plan), "held by the freeze", |r| {
                        upgradeplan::api::find_condition(
                            r.status.as_ref().map(|s| &s.conditions[..]).unwrap_or_default(),
                            upgradeplan::api::reasons::FROZEN,
                        )
                        .is_some_and(|c| c.status == upgradeplan::api::ConditionStatus::True)
                    })
                    .await?;
            }
            let cost = binding_event_cost(first, &bindings[0], &metrics_addr, controller.child.id(), active).await?;
            println!(
                "{tag} one binding event of plan00's Promise with {active} run(s) active: {:.2} run reconciles, {:.2} ms of controller CPU",
                cost.0, cost.1
            );
            costs.push(cost);
        }
        let (_, before) = http_get(&metrics_addr, "/metrics").await?;
        let observer = observe_patched_over(first, &selector, to, total).await?;
        let cpu = Cpu::new(controller.child.id(), first.sim_pid());
        let requests_before = apiserver_requests(&first.client).await;
        let cpu_before = cpu.read();
        // Lifted: every run starts at once.
        let t = Instant::now();
        freezes.delete(&freeze_name, &Default::default()).await?;
        let mut ends = vec![];
        for plan in &plan_names {
            let done = wait_terminal(first, &run_name(plan), phase_timeout(total)).await?;
            let status = done.status.clone().unwrap_or_default();
            anyhow::ensure!(
                status.state == RunState::Completed && status.completed_resources == per_plan as i64,
                "{} ended {:?} with {}/{}",
                run_name(plan),
                status.state,
                status.completed_resources,
                status.total_resources
            );
            ends.push(t.elapsed());
        }
        let wall = t.elapsed();
        let run_cpu = cpu.report(&cpu_before, &cpu.read());
        let run_requests = requests_between(&requests_before, &apiserver_requests(&first.client).await);
        let observed = observer.await?;
        let (_, after) = http_get(&metrics_addr, "/metrics").await?;
        let writes = metric_sum(&after, "rest_client_requests_total", is_write)
            - metric_sum(&before, "rest_client_requests_total", is_write);
        let peak = memory_mib(controller.child.id(), "VmHWM");
        println!("{tag} controller requests: {}", controller_requests(&before, &after));
        println!(
            "{tag} freeze lifted -> all {plans} runs Completed: {:.2} s = {:.2}x the reference orchestrator (target <= 1.25x); every binding patched after {:.2} s; at most {} in flight as the bench's watch saw it{}",
            wall.as_secs_f64(),
            wall.as_secs_f64() / reference_wall.as_secs_f64(),
            (observed.all - t).as_secs_f64(),
            observed.peak_in_flight,
            match cap {
                Some(cap) if observed.peak_in_flight <= cap => format!(" (the budget of {cap} held)"),
                Some(cap) => format!(" (ABOVE the budget of {cap})"),
                None => String::new(),
            }
        );
        println!("{tag} run: {run_cpu}");
        println!("{tag} run: {run_requests}");
        println!(
            "{tag} controller writes per upgraded resource: {:.3} (target <= 1.2); peak RSS {peak:.1} MiB (target <= 300 MiB)",
            writes / total as f64
        );
        summary.push((tag, wall, writes / total as f64, peak, costs));
        drop(controller);
        if cap.is_some() {
            budgets.delete(&budget_name, &Default::default()).await?;
        }
    }
    println!("{}", "-".repeat(40));
    for (tag, wall, writes, peak, costs) in &summary {
        println!(
            "{tag}: {:.2}x the reference ({:.1} s vs {:.1} s); {writes:.3} writes per resource; peak RSS {peak:.1} MiB; one binding event: {}",
            wall.as_secs_f64() / reference_wall.as_secs_f64(),
            wall.as_secs_f64(),
            reference_wall.as_secs_f64(),
            costs
                .iter()
                .zip([1, plans])
                .map(|((reconciles, ms), active)| format!("{reconciles:.2} reconciles and {ms:.2} ms with {active} active"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for env in envs {
        env.teardown_settled(phase_timeout(per_plan)).await?;
    }
    Ok(())
}

/// Events spaced beyond the controller's 50 ms debounce, so that each is reconciled on its own.
const EVENT_SPACING: Duration = Duration::from_millis(120);
/// How many binding events each cost is averaged over.
const EVENTS: usize = 100;

/// The cost of one binding event of `bindings`' Promise: run reconciles and controller CPU
/// milliseconds per event, over [`EVENTS`] label changes (a label nothing selects on), read once
/// the controller has gone quiet after the last.
async fn binding_event_cost(
    env: &TestEnv,
    bindings: &[(String, String)],
    metrics_addr: &str,
    controller: Option<u32>,
    round: usize,
) -> anyhow::Result<(f64, f64)> {
    let reconciles = || async {
        let text = http_get(metrics_addr, "/metrics")
            .await
            .map(|(_, t)| t)
            .unwrap_or_default();
        metric_sum(&text, "controller_runtime_reconcile_total", |l| {
            l.contains("controller=\"upgraderun\"")
        })
    };
    let cpu = Cpu::new(controller, None);
    let quiet = |since: f64| async move {
        // Quiet: no run reconcile for a second.
        let mut last = since;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = reconciles().await;
            if now == last {
                return now;
            }
            last = now;
        }
    };
    let start = quiet(reconciles().await).await;
    let cpu_before = cpu.read();
    let events = bindings.len().min(EVENTS);
    for (ns, name) in bindings.iter().take(events) {
        env.bindings_api(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"scale-bench/touched": round.to_string()}}})),
            )
            .await?;
        tokio::time::sleep(EVENT_SPACING).await;
    }
    let end = quiet(reconciles().await).await;
    let cpu_after = cpu.read();
    let ticks = cpu_after.processes[0].saturating_sub(cpu_before.processes[0]) as f64;
    // The idle controller's own ticks over the same time are part of it (timers, scrapes of this
    // bench): small beside a pass, and the same with one run active or fifty.
    Ok((
        (end - start) / events as f64,
        ticks / cpu.ticks_per_second * 1000.0 / events as f64,
    ))
}

/// maxConcurrent 1 over 100 bindings: from one binding's completion (seen by a watch) to the
/// next binding's start.
async fn reaction_latency() -> anyhow::Result<()> {
    let sim = workspace_bin("kratix-sim")?;
    let mut env = TestEnv::new("latency").await?;
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0").await?;
    create_bindings(&mut env, 100).await?;
    env.start_sim(sim.to_str().unwrap_or_default(), &["--delay", "0s"])?;
    let _controller = env.start_controller(&["--log-level", "warn"]).await?;
    let plan = env
        .create_plan("plan", json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}, "maxConcurrent": 1}]}))
        .await?;
    let api: Api<ResourceBinding> = Api::all(env.client.clone());
    let config = watcher::Config::default().labels(&format!("{PROMISE_NAME_LABEL}={}", env.promise));
    let watch = tokio::spawn(async move {
        let mut seen: HashMap<String, (bool, bool)> = HashMap::new();
        let mut events: Vec<(Instant, bool)> = vec![]; // (when, true = completion / false = start)
        let mut stream = watcher(api, config).default_backoff().applied_objects().boxed();
        while let Some(Ok(b)) = stream.next().await {
            let started = b.spec.version == "v2.0.0";
            let applied = b.last_applied_version() == "v2.0.0";
            let before = seen.insert(b.name_any(), (started, applied)).unwrap_or((false, false));
            if started && !before.0 {
                events.push((Instant::now(), false));
            }
            if applied && !before.1 {
                events.push((Instant::now(), true));
                if events.iter().filter(|(_, c)| *c).count() == 100 {
                    break;
                }
            }
        }
        events
    });
    env.runs().create(&PostParams::default(), &serde_json::from_value(json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun", "metadata": {"name": format!("{plan}-1")}, "spec": {"upgradePlanRef": {"name": plan}}}))?).await?;
    let events = tokio::time::timeout(Duration::from_secs(600), watch)
        .await
        .context("latency run timed out")??;
    let mut gaps: Vec<f64> = vec![];
    for w in events.windows(2) {
        if let [(t1, true), (t2, false)] = w {
            gaps.push((*t2 - *t1).as_secs_f64() * 1000.0);
        }
    }
    gaps.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        gaps.get(((gaps.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(f64::NAN)
    };
    println!(
        "[latency] completion -> next start over {} steps: median {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        gaps.len(),
        pct(0.5),
        pct(0.95),
        pct(1.0)
    );
    env.teardown_settled(phase_timeout(100)).await?;
    Ok(())
}

/// Waits until kube-controller-manager watches ResourceBindings, before anything is timed. Its
/// garbage collector watches every kind a real cluster serves, but begins to watch a newly
/// installed one only at its next discovery sync (every 30 s). A phase timed before then would
/// have its binding writes sent to one watcher fewer than a phase after: at 1k the reference
/// orchestrator's phase used to run before it and the controller's after (a quarter fewer
/// binding watch events for the reference). Called while none of the bench's own processes watch.
async fn wait_for_cluster_watchers() -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    upgradeplan_e2e::harness::install_crds(&client).await?;
    let t = Instant::now();
    let watching = |by: &HashMap<(String, String), f64>| {
        ["ResourceBinding", "resourcebindings"]
            .iter()
            .filter_map(|kind| by.get(&("watchers-now".to_string(), kind.to_string())))
            .sum::<f64>()
    };
    while watching(&apiserver_requests(&client).await) < 1.0 {
        if t.elapsed() > Duration::from_secs(90) {
            println!("warning: nothing in the cluster watches ResourceBindings after 90 s (no kube-controller-manager?); the phases are timed without it");
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "kube-controller-manager watches ResourceBindings (waited {:.0} s for its discovery sync)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A size and how many times to measure it: `N`, or `NxK` for K measurements of N bindings (fresh
/// bindings each time; a 1k phase lasts seconds and the shared cores make single runs noisy).
fn parse_size(arg: &str) -> anyhow::Result<(usize, usize)> {
    let (n, k) = arg.split_once('x').unwrap_or((arg, "1"));
    let parse = |v: &str, what: &str| {
        v.parse::<usize>().ok().filter(|v| *v > 0).with_context(|| {
            format!("{arg:?}: {what} must be a positive whole number (sizes are N or NxK, e.g. 1000x5 10000)")
        })
    };
    Ok((parse(n, "the size")?, parse(k, "the number of measurements")?))
}

/// The many-plans scenario's argument, `plans:PxB` or `plans:PxB@BUDGET` (P plans of B bindings
/// each, measured without a budget and under one of BUDGET, 200 unless given), with
/// `:budget-only` after it to measure only under the budget (at 100k, twenty minutes less).
fn parse_plans(arg: &str) -> anyhow::Result<Option<ManyPlans>> {
    let Some(rest) = arg.strip_prefix("plans:") else {
        return Ok(None);
    };
    let (rest, budget_only) = match rest.strip_suffix(":budget-only") {
        Some(rest) => (rest, true),
        None => (rest, false),
    };
    let (sizes, budget) = rest.split_once('@').unwrap_or((rest, "200"));
    let (p, b) = sizes
        .split_once('x')
        .with_context(|| format!("{arg:?}: many plans are plans:PxB[@BUDGET][:budget-only], e.g. plans:50x2000@200"))?;
    let parse = |v: &str, what: &str| {
        v.parse::<usize>().ok().filter(|v| *v > 0).with_context(|| {
            format!("{arg:?}: {what} must be a positive whole number (plans:PxB[@BUDGET][:budget-only], e.g. plans:50x2000@200)")
        })
    };
    Ok(Some(ManyPlans {
        plans: parse(p, "P (plans)")?,
        per_plan: parse(b, "B (bindings per plan)")?,
        budget: parse(budget, "BUDGET")?,
        budget_only,
    }))
}

/// A many-plans scenario to measure ([`many_plans`]).
struct ManyPlans {
    plans: usize,
    per_plan: usize,
    budget: usize,
    /// Only under the budget, not also without one.
    budget_only: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut sizes: Vec<(usize, usize)> = vec![];
    let mut many: Vec<ManyPlans> = vec![];
    for arg in std::env::args().skip(1) {
        match parse_plans(&arg)? {
            Some(m) => many.push(m),
            None => sizes.push(parse_size(&arg)?),
        }
    }
    // By default: 1k five times, 10k once, and fifty plans of 200 bindings each.
    let (sizes, many) = if sizes.is_empty() && many.is_empty() {
        let fifty = ManyPlans {
            plans: 50,
            per_plan: 200,
            budget: 200,
            budget_only: false,
        };
        (vec![(1_000, 5), (10_000, 1)], vec![fifty])
    } else {
        (sizes, many)
    };
    println!(
        "machine: {} cores; {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        env!("CARGO_PKG_VERSION")
    );
    wait_for_cluster_watchers().await?;
    for m in many {
        many_plans(m).await?;
    }
    if sizes.is_empty() {
        return Ok(());
    }
    reaction_latency().await?;
    let mut measured = vec![];
    for (n, times) in sizes {
        let mut of_size = vec![];
        for _ in 0..times {
            of_size.push(scale(n).await?);
        }
        let ratio = |m: &Measured| m.wall.as_secs_f64() / m.reference.as_secs_f64();
        of_size.sort_by(|a, b| ratio(a).total_cmp(&ratio(b)));
        if times > 1 {
            let ratios: Vec<String> = of_size.iter().map(|m| format!("{:.2}x", ratio(m))).collect();
            println!(
                "[{n}] {times} measurements, run / reference orchestrator: {}; median {:.2}x (target <= 1.10x)",
                ratios.join(", "),
                ratio(&of_size[times / 2])
            );
        }
        // The median measurement stands for the size below.
        measured.push(of_size.swap_remove(times / 2));
    }
    // Between the smallest and the largest size: what each cached binding costs (the growth of the
    // resident size with the caches filled: one Promise's bindings, its plan and nothing else), and
    // whether a resource costs the same at both (linear).
    if let (Some(small), Some(large)) = (measured.first(), measured.last()) {
        if large.n > small.n {
            println!(
                "cache: {:.0} bytes per binding (resident {:.1} MiB at {}, {:.1} MiB at {})",
                (large.cached_mib - small.cached_mib) * 1024.0 * 1024.0 / (large.n - small.n) as f64,
                small.cached_mib,
                small.n,
                large.cached_mib,
                large.n
            );
            let per = |m: &Measured, d: Duration| d.as_secs_f64() * 1000.0 / m.n as f64;
            let (run_small, run_large) = (per(small, small.wall), per(large, large.wall));
            let (ref_small, ref_large) = (per(small, small.reference), per(large, large.reference));
            println!(
                "per resource: run {run_small:.2} ms at {} and {run_large:.2} ms at {}: {:.2}x (target <= 1.2x); the reference orchestrator {ref_small:.2} and {ref_large:.2} ms: {:.2}x",
                small.n,
                large.n,
                run_large / run_small,
                ref_large / ref_small
            );
        }
    }
    Ok(())
}
