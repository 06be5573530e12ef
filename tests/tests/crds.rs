//! Our CRDs on the real API server: they install with every CEL rule within the server's cost
//! budget, the seed plan applies unchanged, and the schema and the CEL rules reject what they
//! should, with the message a user sees (the same table shared/tests/crd.rs evaluates
//! client-side).
#![allow(clippy::unwrap_used)]

#[path = "../../shared/tests/cel_cases/mod.rs"]
mod cel_cases;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{json, Value};
use upgradeplan_e2e::harness::{repo_root, TestEnv};

fn plans(env: &TestEnv) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("platform.syntasso.io", "v1alpha1", "UpgradePlan"),
        "upgradeplans",
    );
    Api::all_with(env.client.clone(), &ar)
}

fn seed(name: &str) -> Value {
    json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan", "metadata": {"name": name},
        "spec": {
            "promiseRef": {"name": "redis"},
            "upgradePath": {"from": ["v1.0.0", "/v1\\.1\\..*/"], "to": "v2.0.0"},
            "upgradeExecutionPolicy": {"repeatSchedule": "0 23 * * 6", "executeAt": "2026-05-01T23:00", "timeZone": "Europe/London"},
            "rolloutGroups": [{
                "name": "dev",
                "selectors": {"matchExpressions": [{"key": "prod", "operator": "NotIn", "values": ["true"]}], "matchLabels": {"env": "dev"}},
                "maxConcurrent": 5,
                "resourceUpgradeWindows": [{"kind": "allow", "schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/London"}]
            }, {"name": "prod", "selectors": {"matchAll": true}, "maxConcurrent": "25%"}]
        }
    })
}

fn with(mut v: Value, pointer: &str, value: Value) -> Value {
    *v.pointer_mut(pointer).unwrap() = value;
    v
}

async fn create(env: &TestEnv, v: Value) -> Result<(), String> {
    let obj: DynamicObject = serde_json::from_value(v).unwrap();
    let result = plans(env)
        .create(&PostParams::default(), &obj)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let _ = plans(env)
        .delete(&obj.metadata.name.unwrap(), &Default::default())
        .await;
    result
}

#[tokio::test]
async fn seed_plan_applies_and_the_schema_rejects_bad_plans() {
    let env = TestEnv::new("crd").await.unwrap();
    let name = format!("{}-plan", env.id);
    create(&env, seed(&name)).await.unwrap();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "unknown window kind",
            with(
                seed(&name),
                "/spec/rolloutGroups/0/resourceUpgradeWindows/0/kind",
                json!("sometimes"),
            ),
            "kind",
        ),
        (
            "bad duration",
            with(
                seed(&name),
                "/spec/rolloutGroups/0/resourceUpgradeWindows/0/duration",
                json!("4 hours"),
            ),
            "duration",
        ),
        (
            "executeAt with seconds",
            with(
                seed(&name),
                "/spec/upgradeExecutionPolicy/executeAt",
                json!("2026-05-01T23:00:00"),
            ),
            "executeAt",
        ),
        (
            "unknown operator",
            with(
                seed(&name),
                "/spec/rolloutGroups/0/selectors/matchExpressions/0/operator",
                json!("Like"),
            ),
            "operator",
        ),
        (
            "no groups",
            with(seed(&name), "/spec/rolloutGroups", json!([])),
            "rolloutGroups",
        ),
        (
            "empty from",
            with(seed(&name), "/spec/upgradePath/from", json!([])),
            "from",
        ),
        (
            "missing to",
            with(seed(&name), "/spec/upgradePath", json!({"from": ["v1"]})),
            "to",
        ),
        (
            "duplicate group names",
            with(seed(&name), "/spec/rolloutGroups/1/name", json!("dev")),
            "rolloutGroups",
        ),
    ];
    for (what, plan, field) in cases {
        let err = create(&env, plan).await.expect_err(what);
        assert!(err.contains(field), "{what}: error should name {field}: {err}");
    }
    env.teardown().await.unwrap();
}

#[tokio::test]
async fn binding_printer_columns_match_kratix() {
    let env = TestEnv::new("crd-cols").await.unwrap();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(env.client.clone());
    let crd = crds.get("resourcebindings.platform.kratix.io").await.unwrap();
    let cols: Vec<String> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(cols, vec!["Resource", "Promise", "Desired", "Applied"]);
    let plan = crds.get("upgradeplans.platform.syntasso.io").await.unwrap();
    let cols: Vec<String> = plan.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    assert_eq!(
        cols,
        vec![
            "Promise",
            "From",
            "To",
            "Phase",
            "Active Run",
            "Last Result",
            "Next Run",
            "Age"
        ]
    );

    // `kubectl get upgradeplans` shows a future nextRunAt as a time, not `<invalid>` (what a
    // date column prints for a future instant): the server's own table says so.
    let plan = env
        .create_plan(
            "cols",
            json!({"upgradePath": {"from": ["v1"], "to": "v2"},
        "rolloutGroups": [{"name": "all", "selectors": {"matchAll": true}}]}),
        )
        .await
        .unwrap();
    env.plans()
        .patch_status(
            &plan,
            &Default::default(),
            &kube::api::Patch::Merge(json!({"status": {"nextRunAt": "2099-01-02T03:04:00Z"}})),
        )
        .await
        .unwrap();
    let request = http::Request::get(format!("/apis/platform.syntasso.io/v1alpha1/upgradeplans/{plan}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = env.client.request(request).await.unwrap();
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let next = names.iter().position(|n| *n == "Next Run").unwrap();
    assert_eq!(table["rows"][0]["cells"][next], "2099-01-02T03:04:00Z", "{table:#}");
    env.plans().delete(&plan, &Default::default()).await.unwrap();

    // The same for `kubectl get upgradefreezes` (issue 40: it printed <invalid> for both).
    let freezes: kube::Api<upgradeplan::api::UpgradeFreeze> = kube::Api::all(env.client.clone());
    let name = format!("{}-cols", env.id);
    let freeze = serde_json::from_value(json!({
        "apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeFreeze",
        "metadata": {"name": name},
        "spec": {"reason": "columns", "planSelector": {"matchLabels": {"none": "none"}},
                 "periods": [{"start": "2099-01-02T00:00", "end": "2099-01-03T00:00"}]}
    }))
    .unwrap();
    freezes.create(&Default::default(), &freeze).await.unwrap();
    freezes
        .patch_status(
            &name,
            &Default::default(),
            &kube::api::Patch::Merge(
                json!({"status": {"nextStart": "2099-01-02T00:00:00Z", "nextEnd": "2099-01-03T00:00:00Z"}}),
            ),
        )
        .await
        .unwrap();
    let request = http::Request::get(format!("/apis/platform.syntasso.io/v1alpha1/upgradefreezes/{name}"))
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = env.client.request(request).await.unwrap();
    let column = |wanted: &str| {
        table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["name"] == wanted)
            .unwrap()
    };
    assert_eq!(
        (
            &table["rows"][0]["cells"][column("Next Start")],
            &table["rows"][0]["cells"][column("Next End")]
        ),
        (&json!("2099-01-02T00:00:00Z"), &json!("2099-01-03T00:00:00Z")),
        "{table:#}"
    );
    freezes.delete(&name, &Default::default()).await.unwrap();
    env.teardown().await.unwrap();
}

fn api_of(env: &TestEnv, kind: &str) -> Api<DynamicObject> {
    let plural = match kind {
        "UpgradePlan" => "upgradeplans",
        "UpgradeRun" => "upgraderuns",
        "UpgradeFreeze" => "upgradefreezes",
        "UpgradeBudget" => "upgradebudgets",
        other => panic!("no cases of {other}"),
    };
    let ar =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("platform.syntasso.io", "v1alpha1", kind), plural);
    Api::all_with(env.client.clone(), &ar)
}

/// Replaces `name` with `edit` of its stored version, as a dry run (`dryRun=All`). Another suite
/// may write the same object meanwhile (installing the same CRDs, or a controller touching a run's
/// metadata): a conflict reads the newer version and edits that, up to five times.
async fn dry_run_replace<K>(api: &Api<K>, name: &str, edit: impl Fn(K) -> K) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut tries = 0;
    loop {
        let result = api.replace(name, &dry, &edit(api.get(name).await?)).await.map(|_| ());
        tries += 1;
        match &result {
            Err(kube::Error::Api(e)) if e.code == 409 && tries < 5 => continue,
            _ => return result,
        }
    }
}

/// The CRDs as the API server stored them: established, and every CEL rule kept (an API server
/// that cannot serve a rule, or whose cost estimate rejects it, fails the create instead; 1.20
/// dropped them silently).
#[tokio::test]
async fn the_api_server_accepts_every_crd_with_its_cel_rules() {
    let env = TestEnv::new("crd-cel").await.unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    for (file, _) in upgradeplan::crd::crd_files() {
        let text = std::fs::read_to_string(repo_root().join("deploy/crds").join(file)).unwrap();
        let doc = text.split("\n---").find(|d| d.contains("kind:")).unwrap();
        let committed: CustomResourceDefinition = serde_saphyr::from_str(doc).unwrap();
        let name = committed.metadata.name.clone().unwrap();
        let stored = api.get(&name).await.unwrap();
        let established = stored
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        assert!(established, "{name} is not established: {:?}", stored.status);
        let rules = |crd: &CustomResourceDefinition| {
            let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
            let mut out = vec![];
            cel_cases::rule_messages(&schema["openAPIV3Schema"], &name, &mut out);
            out
        };
        assert_eq!(
            rules(&stored),
            rules(&committed),
            "{name}: the server's rules are not the committed ones"
        );
        // And the server checks them again on a dry-run update of the whole CRD.
        dry_run_replace(&api, &name, |stored| CustomResourceDefinition {
            metadata: ObjectMeta {
                resource_version: stored.metadata.resource_version,
                ..committed.metadata.clone()
            },
            ..committed.clone()
        })
        .await
        .unwrap_or_else(|e| panic!("{name}: the API server refuses the committed CRD: {e}"));
    }
}

/// Every case of the CEL table, sent to the API server (`dryRun=All`; an update's old object is
/// created for real first), agrees with the table, and so with the client-side evaluation.
#[tokio::test]
async fn cel_rules_on_the_api_server_agree_with_the_table() {
    let env = TestEnv::new("cel").await.unwrap();
    let prefix = format!("{}-cel", env.id);
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut disagree = vec![];
    for (i, case) in cel_cases::cases(&prefix).into_iter().enumerate() {
        let api = api_of(&env, case.kind);
        let result = match case.old {
            None => {
                let obj: DynamicObject = serde_json::from_value(case.object).unwrap();
                api.create(&dry, &obj).await.map(|_| ())
            }
            Some(old) => {
                let name = format!("{prefix}-{i}");
                let mut old: DynamicObject = serde_json::from_value(old).unwrap();
                old.metadata.name = Some(name.clone());
                api.create(&PostParams::default(), &old).await.unwrap();
                // The stored object (a controller of another suite may have touched its
                // metadata or status), with the case's spec.
                let result = dry_run_replace(&api, &name, |mut stored| {
                    stored.data["spec"] = case.object["spec"].clone();
                    stored
                })
                .await;
                api.delete(&name, &DeleteParams::default()).await.unwrap();
                result
            }
        };
        let verdict = match (&result, case.want) {
            (Ok(()), None) => None,
            (Err(kube::Error::Api(e)), Some(text)) if e.code == 422 && e.message.contains(text) => {
                println!("{}: {}", case.name, e.message);
                None
            }
            (Ok(()), Some(text)) => Some(format!("{}: accepted, want rejected with {text:?}", case.name)),
            (Err(e), want) => Some(format!("{}: {e}; want {want:?}", case.name)),
        };
        disagree.extend(verdict);
    }
    assert!(
        disagree.is_empty(),
        "the API server disagrees with the table:\n{}",
        disagree.join("\n")
    );
}
