//! Replays every target's seeds and every saved finding (fuzz/regressions/<target>/) through the
//! target: each must run without breaking an invariant. Runs in `make test`; the findings were
//! bugs once.

use std::path::Path;

use upgradeplan_fuzz::TARGETS;

#[test]
fn seeds_and_regressions_hold() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let mut replayed = 0;
    for target in TARGETS {
        for seed in target.seeds {
            (target.run)(seed.as_bytes());
            replayed += 1;
        }
        let Ok(entries) = std::fs::read_dir(root.join(target.name)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let input = std::fs::read(&path).expect("readable regression input");
            let outcome = std::panic::catch_unwind(|| (target.run)(&input));
            assert!(outcome.is_ok(), "{} regressed on {}", target.name, path.display());
            replayed += 1;
        }
    }
    assert!(replayed >= TARGETS.len() * 3, "only {replayed} inputs replayed");
}

#[test]
fn every_regression_directory_names_a_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    for entry in std::fs::read_dir(&root).expect("fuzz/regressions exists") {
        let name = entry.expect("entry").file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name.ends_with(".md") {
            continue;
        }
        assert!(
            TARGETS.iter().any(|t| t.name == name),
            "fuzz/regressions/{name} is not a target: it would never be replayed"
        );
    }
}
