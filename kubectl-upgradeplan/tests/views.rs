//! The plugin's offline views: golden text (stable with --now, --no-color and a fixed TZ), the
//! JSON contracts of spec §10, exit codes, bad input, completion and help.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const PLUGIN: &str = env!("CARGO_BIN_EXE_kubectl-upgradeplan");
const COMPLETE: &str = env!("CARGO_BIN_EXE_kubectl_complete-upgradeplan");

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn fixture(name: &str) -> String {
    root().join("tests/fixtures").join(name).display().to_string()
}

fn plugin(args: &[&str]) -> Output {
    Command::new(PLUGIN)
        .args(args)
        .env("TZ", "America/New_York")
        .env("NO_COLOR", "1")
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// Compares with `tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites it.
fn golden(name: &str, actual: &str) {
    let path = root().join("tests/golden").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(expected == actual, "{name} differs (UPDATE_GOLDEN=1 cargo test -p kubectl-upgradeplan to accept):\n--- expected\n{expected}\n--- actual\n{actual}");
}

const NOW: &str = "2026-03-27T12:00:00Z";

/// Every command of the plugin.
const COMMANDS: [&str; 16] = [
    "explain",
    "match",
    "freezes",
    "budgets",
    "forecast",
    "history",
    "get",
    "run",
    "status",
    "suspend",
    "resume",
    "cancel",
    "approve",
    "revert",
    "completion",
    "version",
];

#[test]
fn explain_golden() {
    let seed = root().join("../examples/plans/seed.yaml").display().to_string();
    let o = plugin(&["explain", "-f", &seed, "--now", "2026-04-30T12:00:00Z"]);
    assert!(o.status.success(), "{o:?}");
    golden("explain-seed.txt", &stdout(&o));
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "--runs",
        "3",
    ]);
    assert!(o.status.success());
    golden("explain-three-groups.txt", &stdout(&o));
}

/// Spec §13.1 in words: each group's failure budget (a percentage resolved against its
/// resources), the progress deadline, and what the history limits keep.
#[test]
fn explain_says_budgets_deadlines_and_history_limits() {
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("budgets-plan.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "--runs",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    golden("explain-budgets.txt", &stdout(&o));
}

/// Spec §13.2–13.3 in words: the health check of a group, and each gate with the groups it
/// holds and its failAfter (not evaluated without --prometheus-url).
#[test]
fn explain_says_health_checks_and_gates() {
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("verified-plan.yaml"),
        "--now",
        NOW,
        "--runs",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    golden("explain-verified.txt", &stdout(&o));
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("verified-plan.yaml"),
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json["groups"][0]["healthCheckTimeout"], "10m");
    assert_eq!(json["gates"][1]["groups"], serde_json::json!(["prod"]));
    assert_eq!(json["gates"][0]["failAfter"], "2h");
    assert!(json["gates"][0].get("open").is_none(), "not evaluated: {json}");
}

/// Spec §13.4 in `match --resource`: what else its group waits for before it starts.
#[test]
fn match_says_what_a_group_waits_for() {
    let o = plugin(&[
        "match",
        "-f",
        &fixture("staged-plan.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "--resource",
        "team-b/db",
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(
        text.contains("Before the group starts: a 2h soak after group canary; an approval of group prod (kubectl upgradeplan approve RUN prod)."),
        "{text}"
    );
}

/// Issue 37 item 5: a selected resource whose Resource Request Kratix will not reconcile now
/// (`kratix.io/paused`, `kratix.io/workflow-suspended`, copied to its binding) is named, in
/// text and JSON; one labelled `"false"` is not.
#[test]
fn match_names_resources_kratix_will_not_reconcile() {
    let mut list: Value = serde_json::from_str(&std::fs::read_to_string(fixture("bindings.json")).unwrap()).unwrap();
    let items = list["items"].as_array_mut().unwrap();
    items[0]["metadata"]["labels"]["kratix.io/paused"] = "true".into();
    items[1]["metadata"]["labels"]["kratix.io/workflow-suspended"] = "true".into();
    items[2]["metadata"]["labels"]["kratix.io/paused"] = "false".into();
    let names: Vec<String> = items[..2]
        .iter()
        .map(|b| {
            format!(
                "{}/{}",
                b["metadata"]["namespace"].as_str().unwrap(),
                b["spec"]["resourceRef"]["name"].as_str().unwrap()
            )
        })
        .collect();
    let dir = std::env::temp_dir().join(format!("views-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bindings.json");
    std::fs::write(&file, serde_json::to_string(&list).unwrap()).unwrap();
    let file = file.display().to_string();
    let args = [
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &file,
        "--now",
        NOW,
    ];
    let o = plugin(&args);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(text.contains("Kratix will not reconcile now"), "{text}");
    assert!(
        text.contains(&format!("{} (group ", names[0])) && text.contains("labelled kratix.io/paused=true"),
        "{text}"
    );
    assert!(
        text.contains(&format!("{} (group ", names[1])) && text.contains("labelled kratix.io/workflow-suspended=true"),
        "{text}"
    );
    let o = plugin(&[&args[..], &["-o", "json"]].concat());
    let json: Value = serde_json::from_slice(&o.stdout).unwrap();
    let idle: Vec<(String, String)> = json["kratixIdle"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                format!("{}/{}", i["namespace"].as_str().unwrap(), i["name"].as_str().unwrap()),
                i["label"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        idle,
        [
            (names[0].clone(), "kratix.io/paused".to_string()),
            (names[1].clone(), "kratix.io/workflow-suspended".to_string())
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Spec §13.4 in words: the soak after a group and the approval before one.
#[test]
fn explain_says_soaks_and_approvals() {
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("staged-plan.yaml"),
        "--now",
        NOW,
        "--runs",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    golden("explain-staged.txt", &stdout(&o));
}

/// Spec §13.5: a freeze holding the plan closes every group's gate, and explain, match and
/// `freezes` say which freeze, why and until when — across London's change to summer time (the
/// one-off period ends 09:00 BST, 08:00Z). A freeze selecting other plans holds nothing; one that
/// cannot be evaluated holds nothing and makes `freezes -f` exit 1.
#[test]
fn freezes_are_named_with_their_reason_and_end_in_every_view() {
    let freezes = fixture("freezes.yaml");
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("three-groups.yaml"),
        "--freezes",
        &freezes,
        "--now",
        NOW,
        "--runs",
        "1",
    ]);
    assert!(o.status.success(), "{o:?}");
    golden("explain-frozen.txt", &stdout(&o));

    let o = plugin(&[
        "explain",
        "-f",
        &fixture("three-groups.yaml"),
        "--freezes",
        &freezes,
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["freezes"].as_array().unwrap().len(),
        1,
        "only the freeze of this plan: {v}"
    );
    assert_eq!(v["freezes"][0]["name"], "release-freeze");
    assert_eq!(v["freezes"][0]["nextEnd"], "2026-03-30T08:00:00Z");
    assert_eq!(v["groups"][0]["window"]["open"], false);
    assert_eq!(v["groups"][0]["window"]["nextOpen"], "2026-03-30T08:00:00Z");
    assert_eq!(v["groups"][0]["window"]["nextClose"], Value::Null);

    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--freezes",
        &freezes,
        "--now",
        NOW,
        "--resource",
        "team-b/queue",
    ]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).contains("frozen until 2026-03-30 04:00 EDT (09:00 BST in Europe/London): quarter-end release freeze (UpgradeFreeze \"release-freeze\")"),
        "{}",
        stdout(&o)
    );

    let o = plugin(&["freezes", "-f", &freezes, "--now", NOW]);
    assert_eq!(o.status.code(), Some(1), "an unevaluable freeze fails the lint: {o:?}");
    golden("freezes.txt", &stdout(&o));
    let o = plugin(&["freezes", "-f", &freezes, "--now", NOW, "-o", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["broken", "release-freeze", "weekends"]);
    assert_eq!(
        keys(&v[1]),
        [
            "active",
            "name",
            "nextEnd",
            "nextStart",
            "periods",
            "problems",
            "reason",
            "timeZone",
            "valid"
        ]
    );
    assert_eq!(
        v[0]["problems"][0]["field"], "spec.planSelectr",
        "unknown fields first, as the API server rejects them"
    );
    assert_eq!(v[0]["problems"][1]["field"], "spec.periods[0].timeZone");
    assert_eq!(v[2]["periods"][0]["start"], "2026-03-27T22:00:00Z");
}

/// A forecast read from files cannot see the cluster's freezes: it says so rather than assuming
/// none silently; and a soak shorter than a minute reads to the second.
#[test]
fn forecast_offline_states_its_freezes_and_short_soaks_read_to_the_second() {
    let dir = std::env::temp_dir().join(format!("views-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.yaml");
    let staged = std::fs::read_to_string(fixture("staged-plan.yaml")).unwrap();
    std::fs::write(&plan, staged.replace("soakDuration: 2h", "soakDuration: 30s")).unwrap();
    let o = plugin(&[
        "forecast",
        "-f",
        plan.to_str().unwrap(),
        "--bindings",
        &fixture("bindings.json"),
        "--start",
        "2026-03-30T12:00:00Z",
        "--per-resource",
        "10s",
        "--utc",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    assert!(
        text.contains("freezes: none: read offline, so only --freezes FILE brings them in;"),
        "{text}"
    );
    let soak = text
        .lines()
        .find_map(|l| l.split("soak ").nth(1))
        .unwrap_or_else(|| panic!("no soak in {text}"));
    let (from, to) = soak.trim().split_once(" → ").unwrap_or_else(|| panic!("{soak}"));
    let clock = |t: &str| t.split(' ').nth(1).unwrap_or_default().to_string();
    assert_eq!(clock(from).len(), "12:00:30".len(), "to the second: {soak}");
    assert_ne!(clock(from), clock(to), "a 30 s soak has two ends: {soak}");
}

/// Spec §13.6: the forecast of a plan's next run, offline: it starts at the plan's next trigger,
/// the freeze holds the first group until its end (across London's change to summer time), the
/// windowed group waits for its window, and every assumption is stated; the warnings name the
/// long freeze and the trigger the run would still be going at.
#[test]
fn forecast_golden_and_json_contract() {
    let args = |extra: &[&str]| {
        let mut a = vec![
            "forecast".to_string(),
            "-f".into(),
            fixture("three-groups.yaml"),
            "--bindings".into(),
            fixture("bindings.json"),
            "--freezes".into(),
            fixture("freezes.yaml"),
            "--now".into(),
            NOW.into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let run = |extra: &[&str]| {
        let a = args(extra);
        plugin(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let o = run(&[]);
    assert!(o.status.success(), "{o:?}");
    golden("forecast-frozen.txt", &stdout(&o));
    let o = run(&["--start", "2026-03-30T12:00:00Z", "--per-resource", "90s", "-o", "json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        keys(&v),
        ["assumptions", "finish", "groups", "plan", "start", "warnings"]
    );
    assert_eq!(
        keys(&v["assumptions"]),
        [
            "approvals",
            "budgets",
            "failures",
            "freezes",
            "gates",
            "healthChecks",
            "perResource",
            "perResourceSeconds",
            "start"
        ]
    );
    // Read offline: no UpgradeBudget caps the plan.
    assert_eq!(v["assumptions"]["budgets"], "none caps the plan");
    assert_eq!(
        v["assumptions"]["freezes"],
        "those of the --freezes file (1 holding the plan)"
    );
    assert_eq!(
        keys(&v["groups"][0]),
        ["finish", "maxConcurrent", "name", "resources", "start", "waits"]
    );
    assert_eq!(v["assumptions"]["perResourceSeconds"], 90);
    assert_eq!(v["assumptions"]["start"], "given with --start");
    assert_eq!(v["start"], "2026-03-30T12:00:00Z");
    // After the freeze: dev (3, one at a time) at once; eu waits for 22:00 BST (21:00Z).
    assert_eq!(v["groups"][0]["finish"], "2026-03-30T12:04:30Z");
    assert_eq!(v["groups"][1]["start"], "2026-03-30T21:00:00Z");
    assert_eq!(v["groups"][1]["waits"][0]["reason"], "WindowClosed");
    assert_eq!(
        v["finish"], "2026-03-30T21:03:00Z",
        "rest only has a resource eu upgraded"
    );
    // --start as the plan's executeAt is written: local to its zone (13:00 BST is 12:00Z).
    let o = run(&["--start", "2026-03-30T13:00", "-o", "json"]);
    assert!(o.status.success(), "{o:?}");
    let local: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(local["start"], "2026-03-30T12:00:00Z");
    assert_eq!(
        local["assumptions"]["start"],
        "given with --start, 2026-03-30T13:00 in Europe/London"
    );
    let o = run(&["--start", "next tuesday"]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("is neither an RFC 3339 time"),
        "{o:?}"
    );
}

/// Issue 15: both day fields restricted are said in words, and a window whose starts fall in a
/// spring gap opens at the gap's end (Berlin, 2026-03-29 01:00Z), as the controller acts.
#[test]
fn explain_words_day_fields_and_opens_windows_at_the_gap() {
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("either-day-plan.yaml"),
        "--now",
        "2026-03-28T12:00:00Z",
        "--utc",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(
        text.contains("on the schedule \"0 0 13 * 5\" — on day 13 of the month or on Fridays (UTC)"),
        "{text}"
    );
    // --utc writes UTC, the windows' own zone beside (02:00 Berlin does not exist that night).
    assert!(
        text.contains(
            "closed now; opens 2026-03-29 01:00 UTC (03:00 CEST in Europe/Berlin), closes 2026-03-29 05:00 UTC (07:00 CEST in Europe/Berlin)"
        ),
        "{text}"
    );
}

#[test]
fn explain_is_a_lint_exit_1_on_an_invalid_plan() {
    let o = plugin(&["explain", "-f", &fixture("invalid-plan.yaml"), "--now", NOW]);
    assert_eq!(o.status.code(), Some(1));
    golden("explain-invalid.txt", &stdout(&o));
}

#[test]
fn match_golden() {
    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "--resource",
        "team-b/queue",
        "--all",
    ]);
    assert!(o.status.success(), "{o:?}");
    golden("match-three-groups.txt", &stdout(&o));
    // Without --all: that resource only.
    let mine = |resource: &str| {
        plugin(&[
            "match",
            "-f",
            &fixture("three-groups.yaml"),
            "--bindings",
            &fixture("bindings.json"),
            "--now",
            NOW,
            "--resource",
            resource,
        ])
    };
    golden("match-one-resource.txt", &stdout(&mine("team-b/queue")));
    golden("match-a-resource-in-two-groups.txt", &stdout(&mine("team-a/cache-0")));
    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "--resource",
        "team-c/old",
    ]);
    assert!(
        stdout(&o)
            .contains("team-c/old would not be upgraded: not eligible: version v0.9.0 is not in upgradePath.from"),
        "{}",
        stdout(&o)
    );
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort();
    k
}

#[test]
fn explain_json_contract() {
    let o = plugin(&[
        "explain",
        "-f",
        &fixture("three-groups.yaml"),
        "--now",
        NOW,
        "--runs",
        "2",
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in ["plan", "valid", "problems", "nextRuns", "groups"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }
    assert_eq!(v["plan"], "redis-v1-to-v2");
    assert_eq!(v["valid"], true);
    assert_eq!(
        v["nextRuns"],
        serde_json::json!(["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z"])
    );
    let eu = &v["groups"][1];
    assert_eq!(eu["name"], "eu");
    assert_eq!(keys(&eu["window"]), vec!["nextClose", "nextOpen", "open"]);
    assert_eq!(eu["window"]["open"], false);
    assert_eq!(eu["window"]["nextOpen"], "2026-03-27T22:00:00Z");
    assert_eq!(
        v["groups"][0]["window"],
        serde_json::json!({"open": true, "nextOpen": null, "nextClose": null})
    );

    let o = plugin(&[
        "explain",
        "-f",
        &fixture("invalid-plan.yaml"),
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert_eq!(keys(&v["problems"][0]), vec!["field", "message"]);
    assert_eq!(v["problems"][0]["field"], "spec.upgradePath.from[1]");
}

#[test]
fn match_json_contract() {
    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "-o",
        "json",
    ]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["plan"].as_str(), v["promise"].as_str(), v["to"].as_str()),
        (Some("redis-v1-to-v2"), Some("redis"), Some("v2.0.0"))
    );
    let dev = &v["groups"][0];
    assert_eq!(keys(dev), vec!["maxConcurrent", "name", "resources"]);
    assert_eq!(dev["maxConcurrent"], 1, "50% of 3, rounded down");
    assert_eq!(
        keys(&dev["resources"][0]),
        vec!["binding", "name", "namespace", "version"]
    );
    assert_eq!(v["groups"][2]["maxConcurrent"], Value::Null, "no limit");
    let ineligible = v["ineligible"].as_array().unwrap();
    assert_eq!(ineligible.len(), 5);
    assert!(
        ineligible
            .iter()
            .any(|i| i["name"] == "done" && i["reason"] == "already at v2.0.0"),
        "a resource at the target is said to be there: {ineligible:#?}"
    );
    assert_eq!(
        keys(&ineligible[0]),
        vec!["binding", "name", "namespace", "reason", "version"]
    );
    assert!(v["unassigned"].as_array().unwrap().is_empty());
    // YAML output carries the same document.
    let y = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
        "-o",
        "yaml",
    ]);
    let from_yaml: Value = serde_saphyr::from_str(&stdout(&y)).unwrap();
    assert_eq!(from_yaml, v);
}

#[test]
fn bad_input_gets_a_message_that_names_the_file() {
    let o = plugin(&["explain", "-f", "/nonexistent/plan.yaml"]);
    assert_eq!(o.status.code(), Some(4), "any error is exit 4");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("reading /nonexistent/plan.yaml"),
        "{o:?}"
    );
    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("three-groups.yaml"),
    ]);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("expected a ResourceBinding or a List of them"), "{err}");
    let o = plugin(&["explain", "-f", &fixture("bindings.json")]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no UpgradePlan in")
            && String::from_utf8_lossy(&o.stderr).contains("(only ResourceBinding)"),
        "{o:?}"
    );
    let o = plugin(&[
        "match",
        "-f",
        &fixture("three-groups.yaml"),
        "--bindings",
        &fixture("bindings.json"),
        "--resource",
        "no-slash",
    ]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--resource takes NAMESPACE/NAME"),
        "{o:?}"
    );
}

#[test]
fn help_reads_like_kubectl() {
    let o = plugin(&["--help"]);
    let h = stdout(&o);
    assert!(h.contains("Usage: kubectl upgradeplan"), "{h}");
    for (view, flags) in [
        (
            "explain",
            &[
                "--filename",
                "--now",
                "--runs",
                "--bindings",
                "--output",
                "--no-color",
                "--kubeconfig",
                "--context",
                "--request-timeout",
            ][..],
        ),
        (
            "match",
            &[
                "--resource",
                "--bindings",
                "--now",
                "--namespace",
                "--all-namespaces",
                "--no-headers",
            ][..],
        ),
        ("history", &["--limit"][..]),
        ("status", &["--watch", "--timeout"][..]),
        ("cancel", &["--yes"][..]),
        ("run", &["--preview", "--name"][..]),
    ] {
        let h = stdout(&plugin(&[view, "--help"]));
        assert!(h.contains(&format!("Usage: kubectl upgradeplan {view}")), "{h}");
        for f in flags {
            assert!(h.contains(f), "{view} --help lacks {f}");
        }
    }
}

#[test]
fn completion_scripts_and_the_completion_executable() {
    for shell in ["bash", "zsh", "fish"] {
        let o = plugin(&["completion", shell]);
        assert!(
            o.status.success() && stdout(&o).contains("kubectl-upgradeplan"),
            "{shell}"
        );
    }
    // As kubectl ≥ 1.26 calls it: the words after `kubectl upgradeplan`, the last being completed.
    let run = |args: &[&str]| {
        let o = Command::new(COMPLETE)
            .args(args)
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        stdout(&o).lines().map(str::to_string).collect::<Vec<_>>()
    };
    let top = run(&[""]);
    assert_eq!(top.last().unwrap(), ":4");
    for c in COMMANDS {
        assert!(top.contains(&c.to_string()), "{c} missing from {top:?}");
    }
    assert_eq!(run(&["st"]), vec!["status".to_string(), ":4".to_string()]);
    assert_eq!(run(&["explain", "-o", "j"]), vec!["json", "jsonpath=", ":4"]);
    assert_eq!(
        run(&["explain", "-o", "jsonp"]),
        vec!["jsonpath=", ":6"],
        "no space after ="
    );
    assert_eq!(run(&["explain", "-f", ""]), vec![":0".to_string()], "files for -f");
    assert!(run(&["match", "--res"]).contains(&"--resource".to_string()));
}

#[test]
fn exit_codes_tell_help_usage_errors_and_invalid_plans_apart() {
    // `kubectl upgradeplan` alone teaches, on stdout, and succeeds.
    let alone = plugin(&[]);
    assert_eq!(alone.status.code(), Some(0), "{alone:?}");
    assert!(String::from_utf8_lossy(&alone.stdout).contains("Usage: kubectl upgradeplan"));
    assert_eq!(plugin(&["--help"]).status.code(), Some(0));
    assert_eq!(plugin(&["get", "--help"]).status.code(), Some(0));
    // A usage error is an error: 4, like an API error or a missing object.
    let bogus = plugin(&["get", "--bogus"]);
    assert_eq!(bogus.status.code(), Some(4), "{bogus:?}");
    assert!(String::from_utf8_lossy(&bogus.stderr).contains("unexpected argument '--bogus'"));
    // An invalid plan is explain's own answer: 1.
    assert_eq!(
        plugin(&["explain", "-f", &fixture("invalid-plan.yaml"), "--now", NOW])
            .status
            .code(),
        Some(1)
    );
}

#[test]
fn explain_lints_unknown_fields_as_the_api_server_rejects_them() {
    let base = std::fs::read_to_string(fixture("three-groups.yaml")).unwrap();
    let dir = std::env::temp_dir().join(format!("upgradeplan-strict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // (typo, the field the lint names, its hint)
    let cases = [
        (
            base.replace("maxConcurrent: 1", "maxConcurent: 1"),
            "spec.rolloutGroups[1].maxConcurent",
            "maxConcurrent",
        ),
        (
            base.replace("selectors: {matchAll: true}", "selector: {matchAll: true}"),
            "spec.rolloutGroups[2].selector",
            "selectors",
        ),
        (
            base.replace("repeatSchedule:", "repeatSchedul:"),
            "spec.upgradeExecutionPolicy.repeatSchedul",
            "repeatSchedule",
        ),
        (
            base.replace("duration: 30m, timeZone", "duration: 30m, timezone"),
            "spec.rolloutGroups[1].resourceUpgradeWindows[1].timezone",
            "timeZone",
        ),
    ];
    for (i, (text, field, hint)) in cases.iter().enumerate() {
        assert_ne!(text, &base, "case {i} changed nothing");
        let path = dir.join(format!("plan-{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let o = plugin(&["explain", "-f", path.to_str().unwrap(), "--now", NOW, "-o", "json"]);
        assert_eq!(o.status.code(), Some(1), "{field}: {o:?}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let problem = v["problems"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["field"] == *field)
            .unwrap_or_else(|| panic!("{field} not reported: {v:#}"));
        assert!(
            problem["message"]
                .as_str()
                .unwrap()
                .contains(&format!("did you mean \"{hint}\"")),
            "{problem}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn explain_warns_about_what_is_allowed_but_probably_not_meant() {
    let base = std::fs::read_to_string(fixture("three-groups.yaml")).unwrap();
    let dir = std::env::temp_dir().join(format!("upgradeplan-warn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        (
            base.replace(r#"from: ["v1.0.0", "/v1\\.1\\..*/"]"#, r#"from: ["v1.0.0", "v2.0.0"]"#),
            "spec.upgradePath.from",
            "matches the target v2.0.0",
        ),
        (
            base.replace(
                "timeZone: Europe/London\n  rolloutGroups",
                "timeZone: Europe/London\n    executeAt: \"2026-01-02T03:00\"\n  rolloutGroups",
            ),
            "spec.upgradeExecutionPolicy.executeAt",
            "has passed: it fires no more",
        ),
    ];
    for (i, (text, field, words)) in cases.iter().enumerate() {
        assert_ne!(text, &base, "case {i} changed nothing");
        let path = dir.join(format!("plan-{i}.yaml"));
        std::fs::write(&path, text).unwrap();
        let file = path.to_str().unwrap();
        let o = plugin(&["explain", "-f", file, "--now", NOW, "-o", "json"]);
        assert_eq!(o.status.code(), Some(0), "a warning alone passes: {o:?}");
        let v: Value = serde_json::from_slice(&o.stdout).unwrap();
        let warning = v["warnings"].as_array().unwrap().iter().find(|w| w["field"] == *field);
        assert!(
            warning.is_some_and(|w| w["message"].as_str().unwrap().contains(words)),
            "{field}: {v:#}"
        );
        assert_eq!(v["valid"], true);
        let text = plugin(&["explain", "-f", file, "--now", NOW]);
        assert!(
            String::from_utf8_lossy(&text.stdout).contains("Warnings (1):"),
            "{text:?}"
        );
        let strict = plugin(&["explain", "-f", file, "--now", NOW, "--strict"]);
        assert_eq!(strict.status.code(), Some(1), "--strict fails on warnings: {strict:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn connection_errors_are_one_sentence_that_names_the_server_and_says_what_to_do() {
    let dir = std::env::temp_dir().join(format!("upgradeplan-conn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let refused = dir.join("refused.kubeconfig");
    std::fs::write(
        &refused,
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"https://127.0.0.1:1\"}\n  name: dead\n\
         contexts:\n- context: {cluster: dead, user: u}\n  name: deadctx\ncurrent-context: deadctx\n\
         users:\n- name: u\n  user: {token: x}\n",
    )
    .unwrap();
    let run = |kubeconfig: &str, home: &str| {
        let o = Command::new(PLUGIN)
            .args(["get"])
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", home)
            .output()
            .unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stderr).trim().to_string())
    };
    let cases = [
        (
            run("/nonexistent/kubeconfig", "/"),
            "error: kubeconfig /nonexistent/kubeconfig does not exist: point KUBECONFIG or --kubeconfig at a kubeconfig file".to_string(),
        ),
        (
            run(refused.to_str().unwrap(), "/"),
            "error: cannot list upgradeplans: the API server at https://127.0.0.1:1/ (context deadctx) cannot be reached: is the cluster running, and is this the right context (kubectl config current-context)?".to_string(),
        ),
        (
            run("", dir.to_str().unwrap()),
            "error: no cluster configured: no ~/.kube/config and not running in a pod; set KUBECONFIG or pass --kubeconfig (or --server)".to_string(),
        ),
    ];
    for ((code, stderr), want) in cases {
        assert_eq!((code, stderr), (Some(4), want));
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_command_teaches_with_examples_and_lists_global_flags_apart() {
    for command in COMMANDS {
        let o = plugin(&[command, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{command}");
        let help = stdout(&o);
        if command != "version" {
            assert!(help.contains("\nExamples:\n  "), "{command}:\n{help}");
        }
        assert!(help.contains("\nGlobal flags:\n"), "{command}:\n{help}");
        // Every argument is described.
        for line in help.lines().filter(|l| l.trim_start().starts_with('<')) {
            assert!(line.trim().contains("  "), "{command}: undescribed argument {line:?}");
        }
    }
}

#[test]
fn completion_offers_the_kubeconfig_contexts() {
    let dir = std::env::temp_dir().join(format!("upgradeplan-ctx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts:\n\
         - {name: prod-eu, context: {cluster: a, user: b}}\n- {name: prod-us, context: {cluster: a, user: b}}\n\
         - {name: dev, context: {cluster: a, user: b}}\ncurrent-context: dev\n",
    )
    .unwrap();
    let o = Command::new(COMPLETE)
        .args(["get", "--context", "prod"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "prod-eu\nprod-us\n:4\n");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_server_that_never_answers_is_given_up_on_after_the_request_timeout() {
    // Accepts connections and says nothing.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for c in listener.incoming().flatten() {
            held.push(c);
        }
    });
    let dir = std::env::temp_dir().join(format!("upgradeplan-hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("config");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://127.0.0.1:{port}\"}}\n  name: slow\n\
             contexts:\n- context: {{cluster: slow, user: u}}\n  name: slowctx\ncurrent-context: slowctx\n\
             users:\n- name: u\n  user: {{token: x}}\n"
        ),
    )
    .unwrap();
    let o = Command::new(PLUGIN)
        .args(["get", "--request-timeout", "1s"])
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the API server at https://127.0.0.1:{port}/ (context slowctx) did not answer in time (--request-timeout)"
        )),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Spec §6: `explain` says what `startingDeadline` does, and the lint names a bad one.
#[test]
fn explain_tells_the_starting_deadline_and_lints_a_bad_one() {
    let dir = std::env::temp_dir().join(format!("upgradeplan-deadline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = |deadline: &str| {
        let path = dir.join(format!("plan-{}.yaml", deadline.replace(' ', "-")));
        std::fs::write(
            &path,
            format!(
                "apiVersion: platform.syntasso.io/v1alpha1\nkind: UpgradePlan\nmetadata: {{name: nightly}}\nspec:\n  promiseRef: {{name: redis}}\n  upgradePath: {{from: [v1.0.0], to: v2.0.0}}\n  upgradeExecutionPolicy: {{repeatSchedule: \"0 23 * * *\", startingDeadline: \"{deadline}\"}}\n  rolloutGroups:\n  - name: all\n    selectors: {{matchAll: true}}\n"
            ),
        )
        .unwrap();
        path.display().to_string()
    };
    let o = plugin(&["explain", "-f", &plan("1h"), "--now", NOW]);
    assert!(o.status.success(), "{o:?}");
    assert!(
        stdout(&o).contains("a trigger found more than 1h late (an outage, a plan fixed later) is missed, not run"),
        "{}",
        stdout(&o)
    );
    let o = plugin(&["explain", "-f", &plan("an hour"), "--now", NOW]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(
        stdout(&o).contains("spec.upgradeExecutionPolicy.startingDeadline"),
        "{}",
        stdout(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 40 item 2: the lint takes ordinary Kubernetes files — several documents (the repo's
/// own demo file: a plan and a PromiseRevision), a List, a directory, several -f — and lints
/// every plan in them; the views that work on one plan say which ones they found.
#[test]
fn explain_lints_every_plan_of_multi_document_files_lists_and_directories() {
    let demo = root().join("../examples/demo").display().to_string();
    let failing = format!("{demo}/failing-plan.yaml");
    let o = plugin(&["explain", "-f", &failing, "--now", NOW]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).contains("redis-v2-to-v3"), "{}", stdout(&o));

    let dir = std::env::temp_dir().join(format!("upgradeplan-lint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seed = std::fs::read_to_string(root().join("../examples/plans/seed.yaml")).unwrap();
    let broken = seed
        .replace("to: \"v2.0.0\"", "to: latest")
        .replace("redis-v1-to-v2", "broken");
    std::fs::write(dir.join("a-seed.yaml"), &seed).unwrap();
    std::fs::write(dir.join("b-broken.yaml"), &broken).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a manifest").unwrap();
    // The directory: both plans, the invalid one fails the lint, each under its file's name.
    let o = plugin(&["explain", "-f", dir.to_str().unwrap(), "--now", NOW]);
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let out = stdout(&o);
    assert!(out.contains("a-seed.yaml") && out.contains("b-broken.yaml"), "{out}");
    assert!(out.contains("spec.upgradePath.to"), "{out}");
    // Plans of one Promise that would take the same resources are checked across the files.
    assert!(
        out.contains("UpgradePlan \"broken\" of the same Promise also upgrades from v1.0.0"),
        "{out}"
    );
    // -o json: a list of the two.
    let o = plugin(&["explain", "-f", dir.to_str().unwrap(), "--now", NOW, "-o", "json"]);
    let json: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(json.as_array().map(Vec::len), Some(2), "{json}");
    // A List, as `kubectl get upgradeplans -o yaml` prints it; and -f twice.
    let seed_doc: serde_json::Value = serde_saphyr::from_str(&seed).unwrap();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [seed_doc]});
    let list_file = dir.join("list.json");
    std::fs::write(&list_file, list.to_string()).unwrap();
    let o = plugin(&["explain", "-f", list_file.to_str().unwrap(), "--now", NOW]);
    assert!(o.status.success(), "{o:?}");
    let o = plugin(&[
        "explain",
        "-f",
        list_file.to_str().unwrap(),
        "-f",
        &failing,
        "--now",
        NOW,
    ]);
    assert!(o.status.success() && stdout(&o).contains("redis-v2-to-v3"), "{o:?}");
    // A view of one plan names what it found.
    let o = plugin(&[
        "match",
        "-f",
        dir.to_str().unwrap(),
        "--bindings",
        &fixture("bindings.json"),
        "--now",
        NOW,
    ]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("3 UpgradePlans found") && err.contains("broken"), "{err}");
    // Empty documents (a leading and a trailing `---`) are nothing.
    let framed = dir.join("framed.yaml");
    std::fs::write(&framed, format!("---\n{seed}\n---\n")).unwrap();
    let o = plugin(&["explain", "-f", framed.to_str().unwrap(), "--now", NOW]);
    assert!(o.status.success(), "{o:?}");
    // Nothing to lint.
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let o = plugin(&["explain", "-f", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no UpgradePlan in"),
        "{o:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn views_print_through_kubectls_jsonpath_and_custom_columns() {
    let seed = root().join("../examples/plans/seed.yaml").display().to_string();
    let view = |format: &str| plugin(&["explain", "-f", &seed, "--now", NOW, "-o", format]);
    let o = view(r#"jsonpath={.plan} {.to}{"\n"}{range .groups[*]}{.name}={.maxConcurrent}{"\n"}{end}"#);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "redis-v1-to-v2 v2.0.0\ndev=5\n");
    let o = view("custom-columns=PLAN:.plan,TO:{.to},NEXT:.nextRuns[0],NONE:.missing");
    assert!(o.status.success(), "{o:?}");
    let lines: Vec<Vec<String>> = stdout(&o)
        .lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    assert_eq!(
        lines,
        [
            vec!["PLAN", "TO", "NEXT", "NONE"],
            vec!["redis-v1-to-v2", "v2.0.0", "2026-03-28T23:00:00Z", "<none>"]
        ]
    );
    // A view is not made of objects: -o name says what to use instead, exit 4 as usage errors.
    let o = view("name");
    assert_eq!(o.status.code(), Some(4), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("use -o json, -o jsonpath="),
        "{o:?}"
    );
    // A bad template or format is refused before anything is read, naming what is wrong.
    for (format, says) in [
        ("jsonpath={.plan", "unclosed '{'"),
        ("custom-columns=PLAN", "HEADER:PATH"),
        ("bogus", "jsonpath=TEMPLATE, custom-columns=HEADER:PATH"),
    ] {
        let o = view(format);
        assert_eq!(o.status.code(), Some(4), "{format}: {o:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{format}: {err}");
    }
}
