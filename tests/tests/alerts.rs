//! Every shipped alert fires and resolves on a real Prometheus scraping a real controller, each
//! caused the way production causes it: a resource that fails, a run that hangs in Kratix, a run
//! whose Promise does not exist, an invalid plan, an admission webhook refusing the scheduled run
//! or the run's status writes, a controller that goes away. The rules are the shipped ones with
//! their durations shortened (every change is checked to apply, so a rule edit that the test no
//! longer shortens fails here rather than making the test wait for an hour).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use serde_json::{json, Value};
use upgradeplan::api::{RunState, PLAN_LABEL};
use upgradeplan_e2e::harness::{repo_root, ControllerProcess, Prometheus, TestEnv};

const SIM: &str = env!("CARGO_BIN_EXE_kratix-sim");
const WAIT: Duration = Duration::from_secs(90);
/// Long enough for a `for:`, a 20 s window and backoff; short of a test timeout.
const ALERT_WAIT: Duration = Duration::from_secs(120);

/// deploy/monitoring/rules.yaml with minutes and hours made seconds.
fn fast_rules(dir: &std::path::Path) -> std::path::PathBuf {
    let mut rules = std::fs::read_to_string(repo_root().join("deploy/monitoring/rules.yaml")).unwrap();
    for (pattern, with) in [
        (r"(?m)^(\s+)for: \d+[smh]$", "${1}for: 2s"),
        (r"(?m)^(\s+)keep_firing_for: \d+[smh]$", "${1}keep_firing_for: 10s"),
        (r"\[(10m|15m|1h)\]", "[20s]"),
        (r"(?m)< 600$", "< 20"),
        (r"> 600\)", "> 3)"),
    ] {
        let re = regex::Regex::new(pattern).unwrap();
        assert!(
            re.is_match(&rules),
            "{pattern} no longer in rules.yaml: update fast_rules"
        );
        rules = re.replace_all(&rules, with).into_owned();
    }
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("rules-fast.yaml");
    std::fs::write(&path, rules).unwrap();
    path
}

/// An admission webhook that cannot be reached (failurePolicy Fail) for `resources` of the runs
/// of `plan` only: the API server refuses those writes as it would behind a broken policy engine.
async fn refuse(env: &TestEnv, name: &str, plan: &str, resource: &str, operation: &str) -> String {
    let name = format!("{}-{name}", env.id);
    let api = webhooks(env);
    let webhook: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "refuse.upgradeplan.test", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "timeoutSeconds": 2,
            "clientConfig": {"url": "https://127.0.0.1:1/refuse"},
            "rules": [{"operations": [operation], "apiGroups": ["platform.syntasso.io"], "apiVersions": ["v1alpha1"],
                       "resources": [resource], "scope": "*"}],
            "objectSelector": {"matchLabels": {PLAN_LABEL: plan}}
        }]
    }))
    .unwrap();
    api.create(&Default::default(), &webhook).await.unwrap();
    name
}

fn webhooks(env: &TestEnv) -> kube::Api<kube::core::DynamicObject> {
    kube::Api::all_with(
        env.client.clone(),
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"),
            "validatingwebhookconfigurations",
        ),
    )
}

/// Patches plan `plan` (a merge patch, or a JSON patch when `patch` is a list).
async fn patch_plan(env: &TestEnv, plan: &str, patch: Value) {
    let patch = match patch {
        Value::Array(_) => kube::api::Patch::Json::<Value>(serde_json::from_value(patch).unwrap()),
        merge => kube::api::Patch::Merge(merge),
    };
    let patched = env.plans().patch(plan, &Default::default(), &patch).await.unwrap();
    // The plan and its runs come through different watches: a run created before the controller
    // saw this change would be judged by the plan as it was (one that fires no alert).
    let generation = patched.metadata.generation;
    env.wait_plan(plan, WAIT, "the patch observed", |p| {
        p.status.as_ref().and_then(|s| s.observed_generation) >= generation
    })
    .await
    .unwrap();
}

async fn allow(env: &TestEnv, webhook: &str) {
    let api = webhooks(env);
    api.delete(webhook, &Default::default()).await.unwrap();
}

fn group(role: &str) -> Value {
    json!([{"name": role, "selectors": {"matchLabels": {"role": role}}}])
}

#[tokio::test]
async fn every_alert_fires_and_resolves() {
    let mut env = TestEnv::new("alerts").await.unwrap();
    env.promise_with_revisions(&["v1.0.0", "v2.0.0"], "v2.0.0")
        .await
        .unwrap();
    let ns = env.namespace("apps").await.unwrap();
    env.start_sim(SIM, &[]).unwrap();
    for role in ["bad", "slow", "ok", "tolerated"] {
        env.resource(&ns, role, &[("role", role)], "v1.0.0").await.unwrap();
    }
    let annotate = |name: &str, k: &str, v: &str| {
        let binding = env.binding_name(name);
        let patch = json!({"metadata": {"annotations": {k: v}}});
        let ns = ns.clone();
        let env = &env;
        async move { env.patch_binding(&ns, &binding, patch).await.unwrap() }
    };
    annotate("bad", "kratix-sim/fail-version", "v2.0.0").await;
    annotate("tolerated", "kratix-sim/fail-version", "v2.0.0").await;
    annotate("slow", "kratix-sim/delay", "1h").await;
    // Scraped as deploy/ serves it: HTTPS, a ServiceAccount token bound to the reader role.
    let (mut controller, metrics) = env.start_secure_controller(&[]).await.unwrap();
    let dir = std::env::temp_dir().join(format!("{}-alerts", env.id));
    let prom = Prometheus::start(&env.id, &[&metrics], &[], &fast_rules(&dir))
        .await
        .unwrap();
    let spec = |role: &str| json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"}, "rolloutGroups": group(role)});
    {
        let env = &env;
        let prom = &prom;

        // UpgradeRunFailed: one alert naming the failed run, kept for a while, then resolved.
        let failed = async {
            let plan = env.create_plan("failing", spec("bad")).await.unwrap();
            // As in production, Prometheus has scraped the plan's counters (at 0) before its run
            // fails: the failure is then an increase.
            let counter =
                format!("upgradeplan_resource_upgrades_total{{plan=\"{plan}\",group=\"bad\",result=\"failed\"}}");
            for _ in 0..60 {
                if !prom.query(&counter).await.unwrap().is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
            let r = env
                .wait_run(&run, WAIT, "failed", |r| {
                    r.status.as_ref().is_some_and(|s| s.state.is_terminal())
                })
                .await
                .unwrap();
            assert_eq!(r.status.unwrap().state, RunState::Failed);
            let alert = prom
                .wait_alert("UpgradeRunFailed", &[("plan", &plan), ("run", &run)], true, ALERT_WAIT)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(alert["labels"]["reason"], "ResourceUpgradeFailed", "{alert}");
            let summary = alert["annotations"]["summary"].as_str().unwrap();
            let description = alert["annotations"]["description"].as_str().unwrap();
            assert_eq!(
                summary,
                format!("UpgradeRun {run} of plan {plan} failed (ResourceUpgradeFailed)")
            );
            assert!(
                description.contains("resources failed in group bad")
                    && description.contains(&format!("kubectl upgradeplan history {plan} {run}")),
                "{description}"
            );
            prom.wait_alert("UpgradeRunFailed", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
        };

        // UpgradeRunCompletedWithFailures: a failure within the group's budget; a clean run
        // after the fix resolves it.
        let tolerated = async {
            let mut s = spec("tolerated");
            s["rolloutGroups"][0]["maxFailures"] = json!(1);
            let plan = env.create_plan("tolerated", s).await.unwrap();
            let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
            let alert = prom
                .wait_alert(
                    "UpgradeRunCompletedWithFailures",
                    &[("plan", &plan), ("run", &run)],
                    true,
                    ALERT_WAIT,
                )
                .await
                .unwrap()
                .unwrap();
            assert_eq!(
                alert["annotations"]["summary"],
                format!(
                    "UpgradeRun {run} of plan {plan} completed with 1 failed resource(s) within its failure budget"
                ),
                "{alert}"
            );
            let binding = env.binding_name("tolerated");
            env.patch_binding(
                &ns,
                &binding,
                json!({"metadata": {"annotations": {"kratix-sim/fail-version": null}}}),
            )
            .await
            .unwrap();
            let again = env.create_run(&format!("{plan}-2"), &plan, false).await.unwrap();
            let r = env
                .wait_run(&again, WAIT, "completed", |r| {
                    r.status.as_ref().is_some_and(|s| s.state.is_terminal())
                })
                .await
                .unwrap();
            assert_eq!(r.status.unwrap().state, RunState::Completed);
            prom.wait_alert("UpgradeRunCompletedWithFailures", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
        };

        // UpgradeRunStuck: an upgrade that hangs in Kratix with the window open; cancelling resolves it.
        let stuck = async {
            let plan = env.create_plan("stuck", spec("slow")).await.unwrap();
            let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
            env.wait_run(&run, WAIT, "in progress", |r| {
                r.status.as_ref().is_some_and(|s| s.state == RunState::InProgress)
            })
            .await
            .unwrap();
            prom.wait_alert("UpgradeRunStuck", &[("plan", &plan), ("run", &run)], true, ALERT_WAIT)
                .await
                .unwrap();
            env.runs().delete(&run, &Default::default()).await.unwrap();
            prom.wait_alert("UpgradeRunStuck", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
        };

        // UpgradeRunPending: the plan's Promise does not exist.
        let pending = async {
            let plan = env.create_plan("orphan", spec("ok")).await.unwrap();
            patch_plan(
                env,
                &plan,
                json!({"spec": {"promiseRef": {"name": format!("{}-missing", env.id)}}}),
            )
            .await;
            let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
            let alert = prom
                .wait_alert("UpgradeRunPending", &[("plan", &plan), ("run", &run)], true, ALERT_WAIT)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(alert["labels"]["reason"], "PromiseNotFound", "{alert}");
            assert!(
                alert["annotations"]["description"]
                    .as_str()
                    .unwrap()
                    .contains("the plan's Promise does not exist"),
                "{alert}"
            );
            env.runs().delete(&run, &Default::default()).await.unwrap();
            prom.wait_alert("UpgradeRunPending", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
        };

        // UpgradePlanInvalid: an unknown time zone; fixing it resolves the alert.
        let invalid = async {
            let mut s = spec("ok");
            s["rolloutGroups"][0]["resourceUpgradeWindows"] =
                json!([{"kind": "allow", "schedule": "0 2 * * *", "duration": "1h", "timeZone": "Mars/Olympus_Mons"}]);
            let plan = env.create_plan("invalid", s).await.unwrap();
            prom.wait_alert("UpgradePlanInvalid", &[("plan", &plan)], true, ALERT_WAIT)
                .await
                .unwrap();
            let zone = "/spec/rolloutGroups/0/resourceUpgradeWindows/0/timeZone";
            patch_plan(env, &plan, json!([{"op": "replace", "path": zone, "value": "UTC"}])).await;
            prom.wait_alert("UpgradePlanInvalid", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
        };

        // UpgradeFreezeInvalid: a freeze with an unknown time zone (labelled for this test's
        // controller, which writes and exports the freezes matching its --selector); fixing it
        // resolves the alert. Its period is long past, and it selects no plan.
        let freeze_invalid = async {
            let name = format!("{}-typo", env.id);
            let (k, v) = env.selector();
            let freezes: kube::Api<upgradeplan::api::UpgradeFreeze> = kube::Api::all(env.client.clone());
            let freeze = serde_json::from_value(json!({
                "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeFreeze",
                "metadata": {"name": name, "labels": {k.clone(): v.clone()}},
                "spec": {"reason": "typo", "planSelector": {"matchLabels": {k: v, "none": "none"}},
                         "periods": [{"start": "2020-01-01T00:00", "end": "2020-01-02T00:00", "timeZone": "Europe/Londn"}]}
            }))
            .unwrap();
            freezes.create(&Default::default(), &freeze).await.unwrap();
            prom.wait_alert("UpgradeFreezeInvalid", &[("freeze", &name)], true, ALERT_WAIT)
                .await
                .unwrap();
            let zone = json!([{"op": "replace", "path": "/spec/periods/0/timeZone", "value": "Europe/London"}]);
            freezes
                .patch(
                    &name,
                    &Default::default(),
                    &kube::api::Patch::<()>::Json(serde_json::from_value(zone).unwrap()),
                )
                .await
                .unwrap();
            prom.wait_alert("UpgradeFreezeInvalid", &[("freeze", &name)], false, ALERT_WAIT)
                .await
                .unwrap();
            freezes.delete(&name, &Default::default()).await.unwrap();
        };

        // UpgradePlanCannotSchedule and UpgradeScheduleMissed: the scheduled run is refused by an
        // admission webhook until it is removed.
        let refused = async {
            let mut s = spec("none");
            s["upgradeExecutionPolicy"] = json!({"repeatSchedule": "* * * * *"});
            let name = format!("{}-refused", env.id);
            let webhook = refuse(env, "runs", &name, "upgraderuns", "CREATE").await;
            let plan = env.create_plan("refused", s).await.unwrap();
            assert_eq!(plan, name);
            prom.wait_alert("UpgradePlanCannotSchedule", &[("plan", &plan)], true, ALERT_WAIT)
                .await
                .unwrap();
            prom.wait_alert("UpgradeScheduleMissed", &[("plan", &plan)], true, ALERT_WAIT)
                .await
                .unwrap();
            let events = env
                .events_when(&plan, |(t, reason, _)| t == "Warning" && reason == "RunCreateFailed")
                .await
                .unwrap();
            assert!(
                events.iter().any(|(_, reason, message)| reason == "RunCreateFailed"
                    && message.starts_with(&format!("Cannot create UpgradeRun \"{plan}-"))
                    && message.contains("failed calling webhook")),
                "{events:?}"
            );
            allow(env, &webhook).await;
            prom.wait_alert("UpgradePlanCannotSchedule", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
            prom.wait_alert("UpgradeScheduleMissed", &[("plan", &plan)], false, ALERT_WAIT)
                .await
                .unwrap();
            patch_plan(env, &plan, json!({"spec": {"suspend": true}})).await;
        };

        tokio::join!(failed, tolerated, stuck, pending, invalid, freeze_invalid, refused);
    }

    // UpgradeControllerReconcileErrors: the run's status writes are refused; the ratio of failed
    // reconciles, not their rate, fires it. After the others, so that the ratio is of this run's
    // reconciles: the refused run's retries back off to one per 30 s, and on a busy machine the
    // other scenarios' reconciles held it under 10%.
    {
        let env = &env;
        let prom = &prom;
        let name = format!("{}-errors", env.id);
        let webhook = refuse(env, "status", &name, "upgraderuns/status", "UPDATE").await;
        let plan = env.create_plan("errors", spec("ok")).await.unwrap();
        assert_eq!(plan, name);
        let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
        prom.wait_alert(
            "UpgradeControllerReconcileErrors",
            &[("controller", "upgraderun")],
            true,
            ALERT_WAIT,
        )
        .await
        .unwrap();
        allow(env, &webhook).await;
        env.wait_run(&run, WAIT, "completed", |r| {
            r.status.as_ref().is_some_and(|s| s.state == RunState::Completed)
        })
        .await
        .unwrap();
        prom.wait_alert(
            "UpgradeControllerReconcileErrors",
            &[("controller", "upgraderun")],
            false,
            ALERT_WAIT,
        )
        .await
        .unwrap();
    }

    // UpgradeControllerAbsent: the controller stops; a new one resolves it.
    prom.wait_alert("UpgradeControllerAbsent", &[], false, ALERT_WAIT)
        .await
        .unwrap();
    controller.terminate().await.unwrap();
    prom.wait_alert("UpgradeControllerAbsent", &[], true, ALERT_WAIT)
        .await
        .unwrap();
    let _controller = env
        .start_secure_controller(&["--metrics-addr", &metrics.addr])
        .await
        .unwrap();
    prom.wait_alert("UpgradeControllerAbsent", &[], false, ALERT_WAIT)
        .await
        .unwrap();
    env.teardown().await.unwrap();
}

/// A Promise (v1.0.0 → v2.0.0) with one binding `r0` (label `env=dev`), kratix-sim, and a
/// controller scraped by a Prometheus with the fast rules, which its signal gates also ask.
async fn one_binding_world(prefix: &str) -> (TestEnv, Prometheus, ControllerProcess) {
    let mut env = TestEnv::new(prefix).await.unwrap();
    env.upgrade_world(&[("r0", "dev")], SIM, &[]).await.unwrap();
    let dir = std::env::temp_dir().join(format!("{}-alerts", env.id));
    let (controller, prom, _) = Prometheus::with_controller(&mut env, &fast_rules(&dir), &[], "1s")
        .await
        .unwrap();
    (env, prom, controller)
}

/// UpgradeGateClosed and UpgradeGateError (spec §13.3): a gate whose signal fires and a gate whose
/// query Prometheus rejects, read by a controller that asks the same Prometheus that scrapes it;
/// both resolve when the run they held ends.
#[tokio::test]
async fn gate_alerts_fire_while_a_gate_holds_a_run_and_resolve_when_it_ends() {
    let (env, prom, _controller) = one_binding_world("gatealerts").await;
    let plan = env
        .create_plan(
            "gated",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "gates": [{"name": "firing", "prometheus": {"query": "vector(1)"}},
                             {"name": "broken", "prometheus": {"query": "up{"}}],
                   "rolloutGroups": [{"name": "dev", "selectors": {"matchLabels": {"env": "dev"}}}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let closed = prom
        .wait_alert(
            "UpgradeGateClosed",
            &[("plan", &plan), ("gate", "firing")],
            true,
            ALERT_WAIT,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed["labels"]["severity"], "warning");
    prom.wait_alert(
        "UpgradeGateError",
        &[("plan", &plan), ("gate", "broken")],
        true,
        ALERT_WAIT,
    )
    .await
    .unwrap();
    // The broken gate is closed by fail-safe, not by a signal: it does not page as "closed".
    assert!(prom
        .alerts()
        .await
        .unwrap()
        .iter()
        .all(|a| !(a["labels"]["alertname"] == "UpgradeGateClosed" && a["labels"]["gate"] == "broken")));

    env.runs().delete(&run, &Default::default()).await.unwrap();
    for alert in ["UpgradeGateClosed", "UpgradeGateError"] {
        prom.wait_alert(alert, &[("plan", &plan)], false, ALERT_WAIT)
            .await
            .unwrap();
    }
    env.teardown().await.unwrap();
}

/// UpgradeApprovalPending (spec §13.4): a group waiting for its UpgradeApproval, named with the run;
/// `approve` resolves it.
#[tokio::test]
async fn approval_pending_fires_while_a_group_waits_and_resolves_when_approved() {
    let (env, prom, _controller) = one_binding_world("approvalalert").await;
    let plan = env
        .create_plan(
            "approval",
            json!({"upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
                   "rolloutGroups": [{"name": "prod", "selectors": {"matchAll": true}, "requireApproval": true}]}),
        )
        .await
        .unwrap();
    let run = env.create_run(&format!("{plan}-1"), &plan, false).await.unwrap();
    let alert = prom
        .wait_alert(
            "UpgradeApprovalPending",
            &[("plan", &plan), ("run", &run), ("group", "prod")],
            true,
            ALERT_WAIT,
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(alert["labels"]["severity"], "info");
    let out = upgradeplan_e2e::harness::run_plugin(None, &["approve", &run])
        .await
        .unwrap();
    assert_eq!(out.code, Some(0), "{}{}", out.stdout, out.stderr);
    prom.wait_alert("UpgradeApprovalPending", &[("plan", &plan)], false, ALERT_WAIT)
        .await
        .unwrap();
    env.teardown().await.unwrap();
}
