//! The bad-input corpus (tests/fixtures/bad/, issue #10) against the real control plane, the
//! controller and the plugin. Each case says what must happen to it in its header:
//!
//! ```text
//! # case: <what it is>
//! # expect: rejected <text>        the API server refuses it; its message contains <text>
//! # expect: not-ready <field>      Ready=False naming <field>; or, where one of the CRD's CEL
//!                                  rules covers it, refused by the API server naming <field> (the
//!                                  controller's check still stands for plans written before a
//!                                  rule existed, and for `explain -f`)
//! # expect: ready                  hostile but valid: Ready=True, and nothing stalls
//! # expect: run <Type>=<Status> <text>   a run: that condition, its message containing <text>
//! # expect: ineligible <text>      a binding: left out of the probe run, the plugin says why
//! # plugin: <text>                 the plugin's message must contain <text> (default: the field)
//! # expand: <JSON pointer> <n>     the array's first element repeated n times, {i} numbered
//! ```
//!
//! `NAME` and `PROMISE` in a case are replaced by a unique name and the test's Promise. While the
//! corpus is applied, a healthy plan of the same Promise must complete a run: bad input never
//! stalls the controller.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};
use upgradeplan::api::kratix::{ResourceBinding, PROMISE_NAME_LABEL};
use upgradeplan::api::{find_condition, reasons, ConditionStatus, RunState, UpgradePlan, UpgradeRun};
use upgradeplan_e2e::harness::{repo_root, run_plugin, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, PartialEq)]
enum Expect {
    Rejected(String),
    NotReady(String),
    Ready,
    Run {
        type_: String,
        status: String,
        text: String,
    },
    Ineligible(String),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Plan,
    Run,
    Binding,
}

#[derive(Debug)]
struct Case {
    stem: String,
    kind: Kind,
    expect: Expect,
    plugin: Option<String>,
    doc: Value,
}

impl Case {
    fn name(&self) -> String {
        self.doc
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    }

    /// What the plugin's message must contain.
    fn plugin_text(&self) -> Option<String> {
        self.plugin.clone().or_else(|| match &self.expect {
            Expect::NotReady(field) => Some(field.clone()),
            _ => None,
        })
    }
}

/// Parses a case file, with `NAME` and `PROMISE` replaced and expansions applied.
fn load(path: &Path, id: &str, promise: &str) -> Case {
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let raw = std::fs::read_to_string(path).unwrap();
    let text = raw.replace("NAME", &format!("{id}-{stem}")).replace("PROMISE", promise);
    let header = |key: &str| {
        text.lines()
            .take_while(|l| l.starts_with('#'))
            .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
            .map(str::to_string)
    };
    let expect_line = header("expect").unwrap_or_else(|| panic!("{stem}: no `# expect:` line"));
    let (verb, rest) = expect_line.split_once(' ').unwrap_or((&expect_line, ""));
    let expect = match verb {
        "rejected" => Expect::Rejected(rest.to_string()),
        "not-ready" => Expect::NotReady(rest.to_string()),
        "ready" => Expect::Ready,
        "ineligible" => Expect::Ineligible(rest.to_string()),
        "run" => {
            let (cond, text) = rest.split_once(' ').unwrap_or((rest, ""));
            let (type_, status) = cond.split_once('=').unwrap();
            Expect::Run {
                type_: type_.into(),
                status: status.into(),
                text: text.into(),
            }
        }
        other => panic!("{stem}: unknown expectation {other:?}"),
    };
    let mut doc: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{stem}: {e}"));
    if let Some(expand) = header("expand") {
        let (pointer, n) = expand.rsplit_once(' ').unwrap();
        let n: usize = n.parse().unwrap();
        let array = doc.pointer_mut(pointer).and_then(Value::as_array_mut).unwrap();
        let template = serde_json::to_string(&array[0]).unwrap();
        *array = (0..n)
            .map(|i| serde_json::from_str(&template.replace("{i}", &i.to_string())).unwrap())
            .collect();
    }
    let kind = match doc["kind"].as_str() {
        Some("UpgradePlan") => Kind::Plan,
        Some("UpgradeRun") => Kind::Run,
        Some("ResourceBinding") => Kind::Binding,
        other => panic!("{stem}: unexpected kind {other:?}"),
    };
    Case {
        stem,
        kind,
        expect,
        plugin: header("plugin"),
        doc,
    }
}

/// What happened when the case was created: Ok, or the API server's refusal (code, message).
type Created = Result<(), (u16, String)>;

async fn create(env: &TestEnv, ns: &str, case: &Case) -> Created {
    let mut doc = case.doc.clone();
    let status = doc.as_object_mut().and_then(|o| o.remove("status"));
    let (k, v) = env.selector();
    let (ar, namespace) = match case.kind {
        Kind::Plan => {
            doc["metadata"]["labels"] = json!({k: v});
            (ApiResource::erase::<UpgradePlan>(&()), None)
        }
        Kind::Run => {
            // Handled by this test's controller even when its plan does not exist.
            doc["metadata"]["annotations"] = json!({"platform.syntasso.io/controller-selector": format!("{k}={v}")});
            (ApiResource::erase::<UpgradeRun>(&()), None)
        }
        Kind::Binding => {
            doc["metadata"]["labels"] = json!({PROMISE_NAME_LABEL: env.promise, "resource": case.stem});
            // Kratix always writes the Resource Request a binding tracks (its schema requires
            // it): the bad values are elsewhere.
            doc["spec"]["resourceRef"] = json!({"name": case.stem, "namespace": ns});
            (ApiResource::erase::<ResourceBinding>(&()), Some(ns))
        }
    };
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(env.client.clone(), ns, &ar),
        None => Api::all_with(env.client.clone(), &ar),
    };
    // Literal names (the length cases) survive earlier runs on a long-lived control plane.
    let name = case.name();
    let _ = api.delete(&name, &DeleteParams::default()).await;
    let object: DynamicObject = match serde_json::from_value(doc) {
        Ok(o) => o,
        Err(e) => return Err((0, format!("not an object: {e}"))),
    };
    match api.create(&PostParams::default(), &object).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) => return Err((e.code, e.message)),
        Err(e) => return Err((0, e.to_string())),
    }
    if let Some(status) = status {
        if let Err(e) = api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
        {
            return Err(match e {
                kube::Error::Api(e) => (e.code, e.message),
                other => (0, other.to_string()),
            });
        }
    }
    Ok(())
}

fn ready_condition(p: &UpgradePlan) -> Option<(ConditionStatus, String)> {
    p.status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, reasons::READY))
        .map(|c| (c.status, c.message.clone()))
}

/// Runs the plugin; returns (exit code, stdout + stderr).
async fn plugin(args: &[&str]) -> (i32, String) {
    let out = run_plugin(None, args).await.unwrap();
    (out.code.unwrap_or(-1), format!("{}{}", out.stdout, out.stderr))
}

fn write_json(dir: &Path, stem: &str, doc: &Value) -> PathBuf {
    let path = dir.join(format!("{stem}.json"));
    std::fs::write(&path, serde_json::to_vec(doc).unwrap()).unwrap();
    path
}

#[tokio::test]
async fn the_bad_input_corpus_is_refused_with_field_paths_and_stalls_nothing() {
    let mut env = TestEnv::new("bad").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("res").await.unwrap();
    // kratix-sim makes the good resource, then stops until the corpus has been seen as created.
    env.start_sim(SIM, &[]).unwrap();
    env.resource(&ns, "good", &[("resource", "good")], "v1.0.0")
        .await
        .unwrap();
    env.stop_sim().await;
    let mut controller = env.start_controller(&[]).await.unwrap();

    let dir = repo_root().join("tests/fixtures/bad");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    let cases: Vec<Case> = paths.iter().map(|p| load(p, &env.id, &env.promise)).collect();
    assert!(
        cases.len() >= 50,
        "the corpus has {} cases; the issue asks for 50",
        cases.len()
    );

    // Everything at once, as a careless pipeline would apply it.
    let started = Instant::now();
    let created: Vec<Created> = futures::stream::iter(&cases)
        .map(|c| create(&env, &ns, c))
        .buffered(8)
        .collect()
        .await;
    let probe = env
        .create_plan("probe", json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}))
        .await
        .unwrap();
    let probe_run = env.create_run(&format!("{probe}-run"), &probe, false).await.unwrap();

    // kratix-sim (Kratix) would apply the unversioned bindings' spec.version: it starts once
    // the run has its snapshot and `match` has seen them as they were created.
    env.wait_run(&probe_run, WAIT, "the snapshot", |r| {
        r.status.as_ref().is_some_and(|s| s.total_resources > 0)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let (code, out) = plugin(&["match", &probe, "-o", "json"]).await;
    assert_eq!(code, 0, "{out}");
    let matched: Value = serde_json::from_str(&out).unwrap();
    env.start_sim(SIM, &[]).unwrap();

    let mut tally: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    let outcomes = futures::stream::iter(cases.iter().zip(&created))
        .map(|(case, created)| check_cluster(&env, case, created))
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    for outcome in outcomes {
        match outcome {
            Ok(label) => *tally.entry(label).or_default() += 1,
            Err(e) => failures.push(e),
        }
    }

    // The healthy plan's run completes amid the garbage, and takes only the good binding.
    let done = env
        .wait_run(&probe_run, WAIT, "a terminal state", |r| {
            r.status.as_ref().is_some_and(|s| s.state.is_terminal())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", controller.log_text()));
    let status = done.status.unwrap();
    assert_eq!(status.state, RunState::Completed, "{status:#?}");
    assert_eq!(
        (status.completed_resources, status.total_resources),
        (1, 1),
        "garbage bindings were taken into the run"
    );
    let cluster_seconds = started.elapsed().as_secs_f64();

    // The plugin: live `match` (above) explains every ineligible binding; offline files give a
    // clear message naming the field and a non-zero exit.
    let tmp = std::env::temp_dir().join(format!("{}-bad", env.id));
    std::fs::create_dir_all(&tmp).unwrap();
    let probe_file = write_json(
        &tmp,
        "probe",
        &json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan", "metadata": {"name": "probe"},
                "spec": {"promiseRef": {"name": env.promise}, "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                         "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}}),
    );
    let mut plugin_checked = 0;
    for case in &cases {
        match (&case.kind, &case.expect) {
            (Kind::Binding, Expect::Ineligible(why)) => {
                let entry = matched["ineligible"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|b| b["binding"] == case.name());
                let reason = entry.and_then(|e| e["reason"].as_str()).unwrap_or_default();
                if !reason.contains(why.as_str()) {
                    failures.push(format!(
                        "{}: plugin match gives {reason:?}, expected {why:?}",
                        case.stem
                    ));
                }
                plugin_checked += 1;
            }
            (Kind::Binding, Expect::Rejected(_)) => {
                let file = write_json(&tmp, &case.stem, &case.doc);
                let (code, out) = plugin(&[
                    "match",
                    "-f",
                    probe_file.to_str().unwrap(),
                    "--bindings",
                    file.to_str().unwrap(),
                ])
                .await;
                let want = case.plugin_text().unwrap_or_default();
                if code == 0 || !out.contains(&want) || out.contains("panicked") {
                    failures.push(format!(
                        "{}: plugin exit {code}, wanted non-zero and {want:?}: {out}",
                        case.stem
                    ));
                }
                plugin_checked += 1;
            }
            (Kind::Plan, expect) => {
                let file = write_json(&tmp, &case.stem, &case.doc);
                let (code, out) = plugin(&["explain", "-f", file.to_str().unwrap()]).await;
                let ok = match expect {
                    Expect::Ready => code == 0,
                    _ => code != 0 && case.plugin_text().is_none_or(|t| out.contains(&t)),
                };
                if !ok || out.contains("panicked") {
                    failures.push(format!(
                        "{}: plugin explain exit {code}, expected {}{}: {}",
                        case.stem,
                        if *expect == Expect::Ready { "0" } else { "non-zero" },
                        case.plugin_text().map(|t| format!(" and {t:?}")).unwrap_or_default(),
                        out.chars().take(600).collect::<String>()
                    ));
                }
                plugin_checked += 1;
            }
            _ => {}
        }
    }

    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
    assert!(
        controller.child.try_wait().unwrap().is_none(),
        "the controller exited: {}",
        controller.log_text()
    );
    assert!(!controller.log_text().contains("panicked"), "{}", controller.log_text());
    println!(
        "bad input: {} cases ({}); handled in {cluster_seconds:.1} s while a healthy run completed; \
         {plugin_checked} checked through the plugin",
        cases.len(),
        tally
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    controller.kill().await;
    for case in cases.iter().filter(|c| c.kind != Kind::Binding) {
        let ar = match case.kind {
            Kind::Plan => ApiResource::erase::<UpgradePlan>(&()),
            _ => ApiResource::erase::<UpgradeRun>(&()),
        };
        let _ = Api::<DynamicObject>::all_with(env.client.clone(), &ar)
            .delete(&case.name(), &DeleteParams::background())
            .await;
    }
    env.teardown().await.unwrap();
}

/// Checks one case on the cluster; returns how it was handled.
async fn check_cluster(env: &TestEnv, case: &Case, created: &Created) -> Result<&'static str, String> {
    let stem = &case.stem;
    match (&case.expect, created) {
        (Expect::Rejected(text), Err((code, message))) => {
            if (*code == 422 || *code == 400) && message.contains(text.as_str()) {
                Ok("rejected by the API server")
            } else {
                Err(format!(
                    "{stem}: refused with {code} {message:?}, expected {text:?} in it"
                ))
            }
        }
        (Expect::Rejected(text), Ok(())) => Err(format!("{stem}: accepted, expected a refusal naming {text:?}")),
        // A server that enforces the CRD's CEL rules refuses these at the door: as good.
        (Expect::NotReady(field), Err((422, message))) if message.contains(field.as_str()) => {
            Ok("rejected by the API server")
        }
        (_, Err((code, message))) => Err(format!("{stem}: refused ({code}): {message}")),
        (Expect::NotReady(field), Ok(())) => {
            let plan = env
                .wait_plan(&case.name(), WAIT, "Ready=False", |p| {
                    ready_condition(p).is_some_and(|(s, _)| s == ConditionStatus::False)
                })
                .await
                .map_err(|e| format!("{stem}: {e}"))?;
            let message = ready_condition(&plan).map(|(_, m)| m).unwrap_or_default();
            if !message.contains(field.as_str()) {
                return Err(format!(
                    "{stem}: Ready=False says {message:?}, which does not name {field}"
                ));
            }
            let events = env.events_of(&case.name()).await.map_err(|e| e.to_string())?;
            if !events
                .iter()
                .any(|(t, r, m)| t == "Warning" && r == reasons::INVALID_SPEC && m.contains(field.as_str()))
            {
                return Err(format!("{stem}: no Warning event naming {field}: {events:?}"));
            }
            Ok("Ready=False with the field path and a Warning event")
        }
        (Expect::Ready, Ok(())) => {
            let t0 = Instant::now();
            env.wait_plan(&case.name(), WAIT, "Ready=True", |p| {
                ready_condition(p).is_some_and(|(s, _)| s == ConditionStatus::True)
            })
            .await
            .map_err(|e| format!("{stem}: {e}"))?;
            println!("{stem}: Ready in {:.1} s", t0.elapsed().as_secs_f64());
            Ok("hostile but valid, Ready")
        }
        (Expect::Run { type_, status, text }, Ok(())) => {
            env.wait_run(&case.name(), WAIT, "the condition", |r| {
                r.status
                    .as_ref()
                    .and_then(|s| find_condition(&s.conditions, type_))
                    .is_some_and(|c| format!("{:?}", c.status) == *status && c.message.contains(text.as_str()))
            })
            .await
            .map_err(|e| format!("{stem}: {e}"))?;
            Ok("run condition with the cause")
        }
        (Expect::Ineligible(_), Ok(())) => Ok("binding left out, reason shown by the plugin"),
    }
}
