#![allow(clippy::unwrap_used)]
//! The committed CRDs equal the generated ones, and their CEL rules behave as the spec says,
//! evaluated client-side (kube's CEL) on the table the API server is given too (cel_cases/).

mod cel_cases;

use kube::core::cel::Validator;
use kube::CustomResourceExt;
use serde_json::{json, Value};
use upgradeplan::api::{UpgradeApproval, UpgradeBudget, UpgradeFreeze, UpgradePlan, UpgradeRun};

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

fn schema_of(kind: &str) -> Value {
    match kind {
        "UpgradePlan" => schema::<UpgradePlan>(),
        "UpgradeRun" => schema::<UpgradeRun>(),
        "UpgradeFreeze" => schema::<UpgradeFreeze>(),
        "UpgradeBudget" => schema::<UpgradeBudget>(),
        other => panic!("no schema for {other}"),
    }
}

/// The table of cel_cases/ (the one the API server is given in tests/tests/crds.rs), evaluated
/// client-side.
#[test]
fn cel_rules_accept_and_reject_as_the_table_says() {
    for case in cel_cases::cases("cel") {
        let s = schema_of(case.kind);
        if let Some(old) = &case.old {
            assert_eq!(
                violations(&s, old, None),
                Vec::<String>::new(),
                "{}: the old object is valid",
                case.name
            );
        }
        let got = violations(&s, &case.object, case.old.as_ref());
        match case.want {
            None => assert!(got.is_empty(), "{}: unexpected {got:?}", case.name),
            Some(text) => assert!(
                got.len() == 1 && got[0].contains(text),
                "{}: want one violation with {text:?}, got {got:?}",
                case.name
            ),
        }
    }
}

/// No rule without a case that it rejects: a new rule joins the table (and so the API server's
/// test) or this fails.
#[test]
fn every_cel_rule_has_a_case_it_rejects() {
    let cases = cel_cases::cases("cel");
    let mut rules = vec![];
    for kind in ["UpgradePlan", "UpgradeRun", "UpgradeFreeze", "UpgradeBudget"] {
        cel_cases::rule_messages(&schema_of(kind), kind, &mut rules);
    }
    // The kind without rules has none (else it needs cases here).
    let approval = serde_json::to_value(&UpgradeApproval::crd().spec.versions[0].schema).unwrap();
    let mut other = vec![];
    cel_cases::rule_messages(&approval["openAPIV3Schema"], "UpgradeApproval", &mut other);
    assert!(
        other.is_empty(),
        "UpgradeApproval has CEL rules but no cases: {other:?}"
    );
    assert_eq!(rules.len(), 20, "the CRDs' CEL rules: {rules:#?}");
    for (path, message) in rules {
        assert!(
            cases
                .iter()
                .any(|c| c.want.is_some_and(|w| message.contains(w)) && path.starts_with(c.kind)),
            "no case rejected by the rule at {path} ({message:?})"
        );
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
    // Bounds the API server's CEL cost estimate needs (it rejects the CRD without them).
    assert_eq!(groups["maxItems"], 100);
    for field in ["maxConcurrent", "maxFailures"] {
        assert_eq!(groups["items"]["properties"][field]["maxLength"], 16, "{field}");
    }
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
