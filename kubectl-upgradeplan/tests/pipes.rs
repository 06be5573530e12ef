//! A closed stdout (`kubectl upgradeplan … | head -1`) ends the program quietly: no panic, no
//! message, exit 0, as kubectl does.
#![allow(clippy::unwrap_used)]

use std::process::{Command, Stdio};

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-upgradeplan");
const COMPLETE: &str = env!("CARGO_BIN_EXE_kubectl_complete-upgradeplan");

/// Runs `exe args` with its stdout's reading end closed before it writes anything.
fn with_stdout_closed(exe: &str, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(exe)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KUBECONFIG", "/nonexistent")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader is gone
    let out = child.wait_with_output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_closed_pipe_ends_every_kind_of_output_quietly() {
    let cases: &[(&str, &[&str])] = &[
        (PLUGIN, &["completion", "fish"]),
        (PLUGIN, &["completion", "bash"]),
        (
            PLUGIN,
            &[
                "explain",
                "-f",
                "tests/fixtures/three-groups.yaml",
                "--now",
                "2026-03-27T12:00:00Z",
            ],
        ),
        (
            PLUGIN,
            &[
                "explain",
                "-f",
                "tests/fixtures/three-groups.yaml",
                "-o",
                "json",
                "--now",
                "2026-03-27T12:00:00Z",
            ],
        ),
        (
            PLUGIN,
            &[
                "match",
                "-f",
                "tests/fixtures/three-groups.yaml",
                "--bindings",
                "tests/fixtures/bindings.json",
                "--now",
                "2026-03-27T12:00:00Z",
            ],
        ),
        (COMPLETE, &[""]),
    ];
    for (exe, args) in cases {
        let (code, stderr) = with_stdout_closed(exe, args);
        assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
        assert_eq!((code, stderr.as_str()), (Some(0), ""), "{args:?}");
    }
}
