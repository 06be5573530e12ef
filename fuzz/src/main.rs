//! `upgradeplan-fuzz`: runs the engine's fuzz targets for a bounded time each, on the stable
//! toolchain. Findings (a panic, or an input slower than --slow-ms) are written to the artifacts
//! directory and make the run exit 1; copy them to fuzz/regressions/<target>/ once fixed so
//! `cargo test -p upgradeplan-fuzz` replays them forever.

use std::collections::{BTreeSet, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use upgradeplan_fuzz::mutate::{mutate_json, mutate_text, Rng};
use upgradeplan_fuzz::targets::Shape;
use upgradeplan_fuzz::{Target, TARGETS};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Fuzz the upgradeplan engine's parsers and plan validation for a bounded time",
    after_help = "Targets: cron, execute-at, duration, version, max-concurrent, selectors, plan.\n\n\
Examples:\n  upgradeplan-fuzz --seconds 60                 every target, one minute each\n  \
upgradeplan-fuzz --target cron --seconds 600  one target, ten minutes\n  \
upgradeplan-fuzz --replay fuzz/artifacts/cron/crash-1a2b3c   re-run one finding (shows the panic)\n\n\
Exit status: 0 no findings, 1 findings (written to --artifacts), 2 usage error."
)]
struct Args {
    /// Run only this target (repeatable); default: all.
    #[arg(long = "target", value_name = "NAME")]
    targets: Vec<String>,
    /// Time budget per target.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Random seed (the same seed and budget replay the same inputs, machine speed permitting).
    #[arg(long, default_value_t = 0x5eed)]
    seed: u64,
    /// Where findings are written, one file per input: <dir>/<target>/{crash,slow,hang}-<hash>.
    #[arg(long, default_value = "fuzz/artifacts")]
    artifacts: PathBuf,
    /// An input slower than this is a finding (a stalled reconcile in the controller).
    #[arg(long, default_value_t = 2000)]
    slow_ms: u64,
    /// An input still running after this is a hang: it is saved and the run stops.
    #[arg(long, default_value_t = 30)]
    hang_seconds: u64,
    /// Run the one input in this file through --target (default: the target named by the
    /// file's parent directory) and print the outcome.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
}

struct Report {
    target: &'static str,
    execs: u64,
    seconds: f64,
    signatures: usize,
    corpus: usize,
    findings: Vec<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let selected: Vec<&Target> = if args.targets.is_empty() {
        TARGETS.iter().collect()
    } else {
        args.targets
            .iter()
            .map(|name| {
                TARGETS.iter().find(|t| t.name == name).with_context(|| {
                    let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
                    format!("--target {name}: no such target; choose from {}", names.join(", "))
                })
            })
            .collect::<anyhow::Result<_>>()?
    };

    if let Some(file) = &args.replay {
        return replay(file, &args.targets);
    }

    // Panics are findings, reported by the driver; keep the default hook's message for the log.
    let last_panic: Arc<Mutex<String>> = Arc::default();
    {
        let last_panic = last_panic.clone();
        panic::set_hook(Box::new(move |info| {
            if let Ok(mut slot) = last_panic.lock() {
                *slot = info.to_string();
            }
        }));
    }

    let mut reports = Vec::new();
    for target in selected {
        reports.push(fuzz(target, &args, &last_panic)?);
    }

    println!(
        "\n{:<16} {:>10} {:>9} {:>10} {:>7} {:>9}",
        "TARGET", "EXECS", "EXECS/S", "SIGNATURES", "CORPUS", "FINDINGS"
    );
    for r in &reports {
        println!(
            "{:<16} {:>10} {:>9.0} {:>10} {:>7} {:>9}",
            r.target,
            r.execs,
            r.execs as f64 / r.seconds,
            r.signatures,
            r.corpus,
            r.findings.len()
        );
    }
    let findings: Vec<&PathBuf> = reports.iter().flat_map(|r| &r.findings).collect();
    if findings.is_empty() {
        println!("no findings");
        Ok(())
    } else {
        for f in &findings {
            println!("finding: {}", f.display());
        }
        eprintln!(
            "{} finding(s); reproduce one with `upgradeplan-fuzz --replay <file>`, fix it, then copy it to fuzz/regressions/<target>/",
            findings.len()
        );
        std::process::exit(1)
    }
}

fn fuzz(target: &'static Target, args: &Args, last_panic: &Arc<Mutex<String>>) -> anyhow::Result<Report> {
    let mut rng = Rng::new(args.seed ^ hash(target.name.as_bytes()));
    let mut corpus: Vec<Vec<u8>> = target.seeds.iter().map(|s| s.as_bytes().to_vec()).collect();
    corpus.extend(regressions(target.name)?);
    let mut signatures: BTreeSet<String> = BTreeSet::new();
    let mut seen_findings: HashSet<u64> = HashSet::new();
    let mut findings = Vec::new();

    // The watchdog saves an input that never returns, then ends the process: nothing else can
    // interrupt a stuck call on the stable toolchain.
    let current: Arc<Mutex<Vec<u8>>> = Arc::default();
    let started_ms = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let epoch = Instant::now();
    let watchdog = {
        let (current, started_ms, done) = (current.clone(), started_ms.clone(), done.clone());
        let dir = args.artifacts.join(target.name);
        let hang = Duration::from_secs(args.hang_seconds);
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let since = started_ms.load(Ordering::Relaxed);
                if since > 0 && epoch.elapsed().as_millis() as u64 - since > hang.as_millis() as u64 {
                    let input = current.lock().map(|c| c.clone()).unwrap_or_default();
                    let path = save(&dir, "hang", &input).unwrap_or_default();
                    eprintln!(
                        "hang: an input ran longer than {}s, saved to {}",
                        hang.as_secs(),
                        path.display()
                    );
                    std::process::exit(1);
                }
            }
        })
    };

    let budget = Duration::from_secs(args.seconds);
    let start = Instant::now();
    let mut execs = 0u64;
    let mut index = 0usize;
    while start.elapsed() < budget {
        // Seeds and regressions first, unmutated; then mutants of the growing corpus.
        let input = if index < corpus.len() {
            index += 1;
            corpus[index - 1].clone()
        } else {
            let parent = rng.pick(&corpus).clone();
            match target.shape {
                Shape::Text => mutate_text(&mut rng, &parent, target.dictionary, &corpus),
                Shape::Json => mutate_json(&mut rng, &parent, target.dictionary, &corpus),
            }
        };
        if let Ok(mut c) = current.lock() {
            c.clone_from(&input);
        }
        started_ms.store(epoch.elapsed().as_millis().max(1) as u64, Ordering::Relaxed);
        let t0 = Instant::now();
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
        let took = t0.elapsed();
        started_ms.store(0, Ordering::Relaxed);
        execs += 1;

        let dir = args.artifacts.join(target.name);
        match outcome {
            Ok(signature) => {
                if took > Duration::from_millis(args.slow_ms) && seen_findings.insert(hash(&input)) {
                    let path = save(&dir, "slow", &input)?;
                    eprintln!(
                        "{}: slow input ({} ms) saved to {}",
                        target.name,
                        took.as_millis(),
                        path.display()
                    );
                    findings.push(path);
                }
                if signatures.insert(signature) {
                    corpus.push(input);
                }
            }
            Err(_) => {
                let message = last_panic.lock().map(|m| m.clone()).unwrap_or_default();
                // One finding per panic location: the same bug reached by many inputs is one bug.
                let location = message.lines().next().unwrap_or_default().to_string();
                if seen_findings.insert(hash(location.as_bytes())) {
                    let path = save(&dir, "crash", &input)?;
                    eprintln!("{}: {message}\n  input saved to {}", target.name, path.display());
                    findings.push(path);
                }
            }
        }
    }
    done.store(true, Ordering::Relaxed);
    let _ = watchdog.join();
    let report = Report {
        target: target.name,
        execs,
        seconds: start.elapsed().as_secs_f64(),
        signatures: signatures.len(),
        corpus: corpus.len(),
        findings,
    };
    eprintln!(
        "{}: {} execs in {:.0} s, {} signatures, {} findings",
        report.target,
        report.execs,
        report.seconds,
        report.signatures,
        report.findings.len()
    );
    Ok(report)
}

fn replay(file: &Path, targets: &[String]) -> anyhow::Result<()> {
    let name = match targets {
        [one] => one.clone(),
        [] => file
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .context("--replay: name the target with --target")?,
        _ => bail!("--replay takes one --target"),
    };
    let target = TARGETS
        .iter()
        .find(|t| t.name == name)
        .with_context(|| format!("--replay: no target {name:?}; pass --target"))?;
    let input = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let t0 = Instant::now();
    let signature = (target.run)(&input);
    println!("{}: {signature} in {} ms", target.name, t0.elapsed().as_millis());
    Ok(())
}

/// Saved findings and regression inputs of a target, from fuzz/regressions/<target>/.
fn regressions(target: &str) -> anyhow::Result<Vec<Vec<u8>>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions").join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry?.path();
        out.push(std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?);
    }
    Ok(out)
}

fn save(dir: &Path, kind: &str, input: &[u8]) -> anyhow::Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!("{kind}-{:016x}", hash(input)));
    std::fs::write(&path, input).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}
