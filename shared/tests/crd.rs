#![allow(clippy::unwrap_used)]
//! The committed CRDs equal the generated ones, and their CEL rules behave as the spec says
//! (evaluated client-side: the test API server, Kubernetes 1.20, predates CEL).

use kube::core::cel::Validator;
use kube::CustomResourceExt;
use serde_json::{json, Value};
use upgradeplan::api::{UpgradePlan, UpgradeRun};

#[test]
fn committed_crds_are_up_to_date() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    for (file, generated) in upgradeplan::crd::crd_files() {
        let path = dir.join(file);
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            committed == generated,
            "{} is stale or missing: the API types changed. Regenerate it with:\n\n    make crds\n",
            path.display()
        );
    }
}

fn schema<K: CustomResourceExt>() -> Value {
    let crd = K::crd();
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// The messages of every CEL rule `object` violates.
fn violations(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<String> {
    match Validator::new().validate(schema, object, old) {
        Ok(()) => vec![],
        Err(errors) => errors.into_vec().into_iter().map(|e| e.to_string()).collect(),
    }
}

fn plan(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan", "metadata": {"name": name}, "spec": spec})
}

fn base_spec() -> Value {
    json!({
        "promiseRef": {"name": "redis"},
        "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
        "upgradeExecutionPolicy": {"repeatSchedule": "0 23 * * 6", "timeZone": "Europe/London"},
        "rolloutGroups": [{
            "name": "dev",
            "selectors": {"matchLabels": {"env": "dev"}, "matchExpressions": [{"key": "prod", "operator": "NotIn", "values": ["true"]}]},
            "maxConcurrent": 5,
            "resourceUpgradeWindows": [{"kind": "allow", "schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/London"}]
        }]
    })
}

/// `spec` with the field at `pointer` set (added when its parent object lacks it).
fn with(mut spec: Value, pointer: &str, value: Value) -> Value {
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    match spec.pointer_mut(parent).and_then(Value::as_object_mut) {
        Some(object) => {
            object.insert(field.to_string(), value);
        }
        None => *spec.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = value,
    }
    spec
}

#[test]
fn plan_cel_rules() {
    let s = schema::<UpgradePlan>();
    let long = "p".repeat(230);
    let cases: Vec<(&str, Value, Option<&str>)> = vec![
        ("the seed plan", plan("redis-v1-to-v2", base_spec()), None),
        (
            "229-character name with a policy",
            plan(&"p".repeat(229), base_spec()),
            None,
        ),
        (
            "230-character name with a policy",
            plan(&long, base_spec()),
            Some("at most 229 characters"),
        ),
        (
            "long name without a policy",
            plan(&long, {
                let mut spec = base_spec();
                spec.as_object_mut().unwrap().remove("upgradeExecutionPolicy");
                spec
            }),
            None,
        ),
        (
            "to is a pattern",
            plan("p", with(base_spec(), "/upgradePath/to", json!("/v2.*/"))),
            Some("not a /regex/ pattern"),
        ),
        (
            "to is latest",
            plan("p", with(base_spec(), "/upgradePath/to", json!("latest"))),
            Some("'latest' is not a version"),
        ),
        (
            "policy without trigger",
            plan(
                "p",
                with(base_spec(), "/upgradeExecutionPolicy", json!({"timeZone": "UTC"})),
            ),
            Some("set repeatSchedule, executeAt, or both"),
        ),
        (
            "percentage maxConcurrent",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxConcurrent", json!("25%"))),
            None,
        ),
        (
            "100%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxConcurrent", json!("100%"))),
            None,
        ),
        (
            "101%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxConcurrent", json!("101%"))),
            Some("percentage"),
        ),
        (
            "0%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxConcurrent", json!("0%"))),
            Some("percentage"),
        ),
        (
            "zero",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxConcurrent", json!(0))),
            Some("at least 1"),
        ),
        (
            "maxFailures 0",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxFailures", json!(0))),
            None,
        ),
        (
            "maxFailures 0%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxFailures", json!("0%"))),
            None,
        ),
        (
            "maxFailures 100%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxFailures", json!("100%"))),
            None,
        ),
        (
            "maxFailures 101%",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxFailures", json!("101%"))),
            Some("percentage from \"0%\""),
        ),
        (
            "maxFailures negative",
            plan("p", with(base_spec(), "/rolloutGroups/0/maxFailures", json!(-1))),
            Some("integer of 0 or more"),
        ),
        (
            "progressDeadline",
            plan(
                "p",
                with(base_spec(), "/rolloutGroups/0/progressDeadline", json!("30m")),
            ),
            None,
        ),
        (
            "zero progressDeadline",
            plan("p", with(base_spec(), "/rolloutGroups/0/progressDeadline", json!("0s"))),
            Some("greater than zero"),
        ),
        (
            "zero duration",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/resourceUpgradeWindows/0/duration",
                    json!("0s"),
                ),
            ),
            Some("greater than zero"),
        ),
        (
            "1h30m",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/resourceUpgradeWindows/0/duration",
                    json!("1h30m"),
                ),
            ),
            None,
        ),
        (
            "matchAll alone",
            plan(
                "p",
                with(base_spec(), "/rolloutGroups/0/selectors", json!({"matchAll": true})),
            ),
            None,
        ),
        (
            "matchAll with labels",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/selectors",
                    json!({"matchAll": true, "matchLabels": {"a": "b"}}),
                ),
            ),
            Some("cannot be combined"),
        ),
        (
            "In without values",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/selectors/matchExpressions/0",
                    json!({"key": "k", "operator": "In"}),
                ),
            ),
            Some("values must be non-empty"),
        ),
        (
            "NotIn with empty values",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/selectors/matchExpressions/0",
                    json!({"key": "k", "operator": "NotIn", "values": []}),
                ),
            ),
            Some("values must be non-empty"),
        ),
        (
            "Exists with values",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/selectors/matchExpressions/0",
                    json!({"key": "k", "operator": "Exists", "values": ["x"]}),
                ),
            ),
            Some("must be omitted for Exists"),
        ),
        (
            "DoesNotExist alone",
            plan(
                "p",
                with(
                    base_spec(),
                    "/rolloutGroups/0/selectors/matchExpressions/0",
                    json!({"key": "k", "operator": "DoesNotExist"}),
                ),
            ),
            None,
        ),
    ];
    for (name, object, want) in cases {
        let got = violations(&s, &object, None);
        match want {
            None => assert!(got.is_empty(), "{name}: unexpected {got:?}"),
            Some(text) => assert!(
                got.len() == 1 && got[0].contains(text),
                "{name}: want one violation with {text:?}, got {got:?}"
            ),
        }
    }
}

#[test]
fn run_plan_ref_is_immutable() {
    let s = schema::<UpgradeRun>();
    let run = |plan: &str| json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun", "metadata": {"name": "r"}, "spec": {"upgradePlanRef": {"name": plan}}});
    assert_eq!(violations(&s, &run("a"), None), Vec::<String>::new());
    assert_eq!(violations(&s, &run("a"), Some(&run("a"))), Vec::<String>::new());
    let got = violations(&s, &run("b"), Some(&run("a")));
    assert!(got.len() == 1 && got[0].contains("immutable"), "{got:?}");
}

#[test]
fn revert_of_and_respect_policy_are_immutable_table() {
    let s = schema::<UpgradeRun>();
    let run = |extra: Value| {
        let mut spec = json!({"upgradePlanRef": {"name": "p"}});
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradeRun", "metadata": {"name": "r"}, "spec": spec})
    };
    let revert = |of: &str| json!({"revertOf": {"name": of, "resources": "upgraded"}});
    let cases = [
        ("a run stays a run", run(json!({})), run(json!({})), None),
        (
            "a revert stays the same revert",
            run(revert("a")),
            run(revert("a")),
            None,
        ),
        (
            "suspending a revert is fine",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "suspend": true})),
            None,
        ),
        (
            "made a revert",
            run(json!({})),
            run(revert("a")),
            Some("spec.revertOf is immutable"),
        ),
        (
            "no longer a revert",
            run(revert("a")),
            run(json!({})),
            Some("spec.revertOf is immutable"),
        ),
        (
            "another run reverted",
            run(revert("a")),
            run(revert("b")),
            Some("spec.revertOf is immutable"),
        ),
        (
            "other resources",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "all"}})),
            Some("spec.revertOf is immutable"),
        ),
        (
            "policy respected later",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "respectPolicy": true})),
            Some("spec.respectPolicy is immutable"),
        ),
        (
            "respectPolicy false written out is as omitted",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "respectPolicy": false})),
            None,
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(
            violations(&s, &old, None),
            Vec::<String>::new(),
            "{name}: the old object is valid"
        );
        let got = violations(&s, &new, Some(&old));
        match want {
            None => assert!(got.is_empty(), "{name}: unexpected {got:?}"),
            Some(text) => assert!(
                got.len() == 1 && got[0].contains(text),
                "{name}: want one violation with {text:?}, got {got:?}"
            ),
        }
    }
}

/// Rules the API server enforces from the OpenAPI schema itself (any version, CEL or not).
#[test]
fn schema_carries_structural_rules() {
    let s = schema::<UpgradePlan>();
    let spec = &s["properties"]["spec"];
    assert_eq!(spec["required"], json!(["promiseRef", "rolloutGroups", "upgradePath"]));
    let groups = &spec["properties"]["rolloutGroups"];
    assert_eq!(groups["minItems"], 1);
    assert_eq!(groups["x-kubernetes-list-type"], "map");
    assert_eq!(groups["x-kubernetes-list-map-keys"], json!(["name"]));
    let path = &spec["properties"]["upgradePath"];
    assert_eq!(path["properties"]["from"]["minItems"], 1);
    assert_eq!(path["properties"]["from"]["items"]["minLength"], 1);
    assert_eq!(path["required"], json!(["from", "to"]));
    let policy = &spec["properties"]["upgradeExecutionPolicy"]["properties"];
    assert_eq!(
        policy["executeAt"]["pattern"],
        "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}$"
    );
    let group = &groups["items"]["properties"];
    assert_eq!(group["maxConcurrent"]["x-kubernetes-int-or-string"], true);
    let window = &group["resourceUpgradeWindows"]["items"];
    assert_eq!(window["properties"]["kind"]["enum"], json!(["allow", "deny"]));
    assert!(window["properties"]["duration"]["pattern"]
        .as_str()
        .unwrap()
        .contains("ns|us|µs|ms|s|m|h"));
    let expr = &group["selectors"]["properties"]["matchExpressions"]["items"]["properties"];
    assert_eq!(
        expr["operator"]["enum"],
        json!(["In", "NotIn", "Exists", "DoesNotExist"])
    );
    // Every property carries a description, so `kubectl explain` is useful.
    fn undocumented(path: &str, v: &Value, out: &mut Vec<String>) {
        if let Some(props) = v.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                let here = format!("{path}.{k}");
                if p.get("description").is_none() && !["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                    out.push(here.clone());
                }
                undocumented(&here, p, out);
                if let Some(items) = p.get("items") {
                    undocumented(&format!("{here}[]"), items, out);
                }
            }
        }
    }
    for (kind, s) in [("UpgradePlan", s.clone()), ("UpgradeRun", schema::<UpgradeRun>())] {
        let mut missing = vec![];
        undocumented(kind, &s, &mut missing);
        // Condition fields come from metav1.Condition's documented shape.
        missing.retain(|m| !m.contains(".conditions"));
        assert!(missing.is_empty(), "undocumented fields: {missing:?}");
    }
}
