//! The CRDs' CEL rules (`x-kubernetes-validations`), case by case: what each accepts and what it
//! rejects, with the text of the message a user sees. One table for both evaluators, so that they
//! cannot drift apart: `shared/tests/crd.rs` evaluates it client-side (kube's CEL), and
//! `tests/tests/crds.rs` sends each case to the API server (`dryRun=All`), which estimates each
//! rule's cost when the CRD is created and enforces the rules on every write.
//!
//! Every object is otherwise valid against the OpenAPI schema, so a rejection is the rule's.
#![allow(dead_code)] // each including crate uses its part

use serde_json::{json, Value};

/// One write of one object.
pub struct CelCase {
    pub name: &'static str,
    /// `UpgradePlan`, `UpgradeRun`, `UpgradeFreeze` or `UpgradeBudget`.
    pub kind: &'static str,
    /// For an update: the object as stored before it (transition rules compare the two).
    pub old: Option<Value>,
    pub object: Value,
    /// `None`: accepted. `Some(text)`: rejected by exactly one rule, whose message contains `text`.
    pub want: Option<&'static str>,
}

/// The `kind` objects are named `name`; a plan's name may be padded to a length (`named`).
fn object(kind: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec})
}

/// `prefix` padded with `p` to `len` characters.
fn named(prefix: &str, len: usize) -> String {
    assert!(prefix.len() <= len, "{prefix} is longer than {len}");
    format!("{prefix}{}", "p".repeat(len - prefix.len()))
}

pub fn base_plan_spec() -> Value {
    json!({
        "promiseRef": {"name": "redis"},
        "upgradePath": {"from": ["v1.0.0"], "to": "v2.0.0"},
        "upgradeExecutionPolicy": {"repeatSchedule": "0 23 * * 6", "timeZone": "Europe/London"},
        "rolloutGroups": [{
            "name": "dev",
            "selectors": {"matchLabels": {"env": "dev"}, "matchExpressions": [{"key": "prod", "operator": "NotIn", "values": ["true"]}]},
            "maxConcurrent": 5,
            "resourceUpgradeWindows": [{"kind": "allow", "schedule": "0 22 * * *", "duration": "4h", "timeZone": "Europe/London"}]
        }],
        "gates": [{"name": "alerts", "prometheus": {"query": "ALERTS{severity=\"critical\"}"}}]
    })
}

/// `spec` with the field at `pointer` set (added when its parent object lacks it).
pub fn with(mut spec: Value, pointer: &str, value: Value) -> Value {
    let (parent, field) = pointer.rsplit_once('/').unwrap();
    match spec.pointer_mut(parent).and_then(Value::as_object_mut) {
        Some(object) => {
            object.insert(field.to_string(), value);
        }
        None => *spec.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer}")) = value,
    }
    spec
}

/// Every case; objects are named from `prefix` (at most 229 characters), so that a test on a
/// shared API server can keep its own apart.
pub fn cases(prefix: &str) -> Vec<CelCase> {
    let plan_case = |name, spec: Value, want| CelCase {
        name,
        kind: "UpgradePlan",
        old: None,
        object: object("UpgradePlan", prefix, spec),
        want,
    };
    let field = |name, pointer: &str, value: Value, want| plan_case(name, with(base_plan_spec(), pointer, value), want);
    let mut cases = vec![
        plan_case("the seed plan", base_plan_spec(), None),
        CelCase {
            name: "229-character name with a policy",
            kind: "UpgradePlan",
            old: None,
            object: object("UpgradePlan", &named(prefix, 229), base_plan_spec()),
            want: None,
        },
        CelCase {
            name: "230-character name with a policy",
            kind: "UpgradePlan",
            old: None,
            object: object("UpgradePlan", &named(prefix, 230), base_plan_spec()),
            want: Some("at most 229 characters"),
        },
        CelCase {
            name: "230-character name without a policy",
            kind: "UpgradePlan",
            old: None,
            object: object("UpgradePlan", &named(prefix, 230), {
                let mut spec = base_plan_spec();
                spec.as_object_mut().unwrap().remove("upgradeExecutionPolicy");
                spec
            }),
            want: None,
        },
        field(
            "to is a pattern",
            "/upgradePath/to",
            json!("/v2.*/"),
            Some("not a /regex/ pattern"),
        ),
        field("to is a lone slash", "/upgradePath/to", json!("/"), None),
        field(
            "to is latest",
            "/upgradePath/to",
            json!("latest"),
            Some("'latest' is not a version"),
        ),
        field(
            "policy without a trigger",
            "/upgradeExecutionPolicy",
            json!({"timeZone": "UTC"}),
            Some("set repeatSchedule, executeAt, or both"),
        ),
        field(
            "policy with executeAt alone",
            "/upgradeExecutionPolicy",
            json!({"executeAt": "2026-05-01T23:00"}),
            None,
        ),
        field(
            "startingDeadline",
            "/upgradeExecutionPolicy/startingDeadline",
            json!("2h"),
            None,
        ),
        field(
            "zero startingDeadline",
            "/upgradeExecutionPolicy/startingDeadline",
            json!("0s"),
            Some("greater than zero"),
        ),
        field(
            "percentage maxConcurrent",
            "/rolloutGroups/0/maxConcurrent",
            json!("25%"),
            None,
        ),
        field(
            "maxConcurrent 100%",
            "/rolloutGroups/0/maxConcurrent",
            json!("100%"),
            None,
        ),
        field(
            "maxConcurrent as a string",
            "/rolloutGroups/0/maxConcurrent",
            json!("12"),
            None,
        ),
        field(
            "maxConcurrent 101%",
            "/rolloutGroups/0/maxConcurrent",
            json!("101%"),
            Some("percentage"),
        ),
        field(
            "maxConcurrent 0%",
            "/rolloutGroups/0/maxConcurrent",
            json!("0%"),
            Some("percentage"),
        ),
        field(
            "maxConcurrent zero",
            "/rolloutGroups/0/maxConcurrent",
            json!(0),
            Some("at least 1"),
        ),
        field("maxFailures 0", "/rolloutGroups/0/maxFailures", json!(0), None),
        field("maxFailures 0%", "/rolloutGroups/0/maxFailures", json!("0%"), None),
        field("maxFailures 100%", "/rolloutGroups/0/maxFailures", json!("100%"), None),
        field(
            "maxFailures 101%",
            "/rolloutGroups/0/maxFailures",
            json!("101%"),
            Some("percentage from \"0%\""),
        ),
        field(
            "maxFailures negative",
            "/rolloutGroups/0/maxFailures",
            json!(-1),
            Some("integer of 0 or more"),
        ),
        field(
            "progressDeadline",
            "/rolloutGroups/0/progressDeadline",
            json!("30m"),
            None,
        ),
        field(
            "zero progressDeadline",
            "/rolloutGroups/0/progressDeadline",
            json!("0s"),
            Some("greater than zero"),
        ),
        field("soakDuration", "/rolloutGroups/0/soakDuration", json!("1h"), None),
        field(
            "zero soakDuration",
            "/rolloutGroups/0/soakDuration",
            json!("0s"),
            Some("greater than zero"),
        ),
        field(
            "healthCheck timeout",
            "/rolloutGroups/0/healthCheck",
            json!({"timeout": "10m"}),
            None,
        ),
        field(
            "zero healthCheck timeout",
            "/rolloutGroups/0/healthCheck",
            json!({"timeout": "0s"}),
            Some("greater than zero"),
        ),
        field("gate failAfter", "/gates/0/failAfter", json!("2h"), None),
        field(
            "zero gate failAfter",
            "/gates/0/failAfter",
            json!("0s"),
            Some("greater than zero"),
        ),
        field(
            "zero window duration",
            "/rolloutGroups/0/resourceUpgradeWindows/0/duration",
            json!("0s"),
            Some("greater than zero"),
        ),
        field(
            "window of 1h30m",
            "/rolloutGroups/0/resourceUpgradeWindows/0/duration",
            json!("1h30m"),
            None,
        ),
        field(
            "matchAll alone",
            "/rolloutGroups/0/selectors",
            json!({"matchAll": true}),
            None,
        ),
        field(
            "matchAll false with labels",
            "/rolloutGroups/0/selectors",
            json!({"matchAll": false, "matchLabels": {"a": "b"}}),
            None,
        ),
        field(
            "matchAll with labels",
            "/rolloutGroups/0/selectors",
            json!({"matchAll": true, "matchLabels": {"a": "b"}}),
            Some("cannot be combined"),
        ),
        field(
            "In without values",
            "/rolloutGroups/0/selectors/matchExpressions/0",
            json!({"key": "k", "operator": "In"}),
            Some("values must be non-empty"),
        ),
        field(
            "NotIn with empty values",
            "/rolloutGroups/0/selectors/matchExpressions/0",
            json!({"key": "k", "operator": "NotIn", "values": []}),
            Some("values must be non-empty"),
        ),
        field(
            "Exists with values",
            "/rolloutGroups/0/selectors/matchExpressions/0",
            json!({"key": "k", "operator": "Exists", "values": ["x"]}),
            Some("must be omitted for Exists"),
        ),
        field(
            "DoesNotExist alone",
            "/rolloutGroups/0/selectors/matchExpressions/0",
            json!({"key": "k", "operator": "DoesNotExist"}),
            None,
        ),
    ];

    // Freezes: one-off or recurring, never both or half.
    let freeze = |name, period: Value, want| CelCase {
        name,
        kind: "UpgradeFreeze",
        old: None,
        object: object(
            "UpgradeFreeze",
            prefix,
            json!({"reason": "year end", "periods": [period]}),
        ),
        want,
    };
    let half = Some("a period is either one-off (start and end) or recurring (schedule and duration)");
    cases.extend([
        freeze(
            "one-off period",
            json!({"start": "2026-12-20T00:00", "end": "2027-01-04T00:00"}),
            None,
        ),
        freeze(
            "recurring period",
            json!({"schedule": "0 0 * * 5", "duration": "72h", "timeZone": "Europe/London"}),
            None,
        ),
        freeze("start without end", json!({"start": "2026-12-20T00:00"}), half),
        freeze("schedule without duration", json!({"schedule": "0 0 * * 5"}), half),
        freeze(
            "one-off and recurring at once",
            json!({"start": "2026-12-20T00:00", "end": "2027-01-04T00:00", "schedule": "0 0 * * 5", "duration": "1h"}),
            half,
        ),
    ]);

    // Plan selectors of freezes and budgets: a label requirement's values as in a plan's groups.
    let selector = |kind: &'static str, name, requirement: Value, want| {
        let spec = match kind {
            "UpgradeFreeze" => {
                json!({"reason": "year end", "periods": [{"start": "2026-12-20T00:00", "end": "2027-01-04T00:00"}],
                                      "planSelector": {"matchExpressions": [requirement]}})
            }
            _ => json!({"maxInFlight": 10, "planSelector": {"matchExpressions": [requirement]}}),
        };
        CelCase {
            name,
            kind,
            old: None,
            object: object(kind, prefix, spec),
            want,
        }
    };
    let values = Some("values must be non-empty for In and NotIn");
    cases.extend([
        selector(
            "UpgradeFreeze",
            "freeze of plans with a label",
            json!({"key": "tier", "operator": "Exists"}),
            None,
        ),
        selector(
            "UpgradeFreeze",
            "freeze of plans In nothing",
            json!({"key": "tier", "operator": "In"}),
            values,
        ),
        selector(
            "UpgradeBudget",
            "budget of plans In a set",
            json!({"key": "tier", "operator": "In", "values": ["gold"]}),
            None,
        ),
        selector(
            "UpgradeBudget",
            "budget of plans without a label, with values",
            json!({"key": "tier", "operator": "DoesNotExist", "values": ["gold"]}),
            Some("must be omitted for Exists and DoesNotExist"),
        ),
    ]);

    // Runs: what may not change once a run exists.
    let run = |extra: Value| {
        let mut spec = json!({"upgradePlanRef": {"name": "p"}});
        spec.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        object("UpgradeRun", prefix, spec)
    };
    let update = |name, old: Value, object: Value, want| CelCase {
        name,
        kind: "UpgradeRun",
        old: Some(old),
        object,
        want,
    };
    let revert = |of: &str| json!({"revertOf": {"name": of, "resources": "upgraded"}});
    cases.extend([
        CelCase {
            name: "a new run",
            kind: "UpgradeRun",
            old: None,
            object: run(json!({})),
            want: None,
        },
        update("a run stays a run", run(json!({})), run(json!({"suspend": true})), None),
        update(
            "another plan",
            run(json!({})),
            run(json!({"upgradePlanRef": {"name": "q"}})),
            Some("upgradePlanRef is immutable"),
        ),
        update(
            "a revert stays the same revert",
            run(revert("a")),
            run(revert("a")),
            None,
        ),
        update(
            "suspending a revert",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "suspend": true})),
            None,
        ),
        update(
            "made a revert",
            run(json!({})),
            run(revert("a")),
            Some("spec.revertOf is immutable"),
        ),
        update(
            "no longer a revert",
            run(revert("a")),
            run(json!({})),
            Some("spec.revertOf is immutable"),
        ),
        update(
            "another run reverted",
            run(revert("a")),
            run(revert("b")),
            Some("spec.revertOf is immutable"),
        ),
        update(
            "other resources reverted",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "all"}})),
            Some("spec.revertOf is immutable"),
        ),
        update(
            "policy respected later",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "respectPolicy": true})),
            Some("spec.respectPolicy is immutable"),
        ),
        update(
            "respectPolicy false written out is as omitted",
            run(revert("a")),
            run(json!({"revertOf": {"name": "a", "resources": "upgraded"}, "respectPolicy": false})),
            None,
        ),
    ]);
    cases
}

/// Every CEL rule message in `schema` (an OpenAPI v3 schema as JSON), with where it sits.
pub fn rule_messages(schema: &Value, path: &str, out: &mut Vec<(String, String)>) {
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        for rule in rules {
            out.push((
                path.to_string(),
                rule["message"].as_str().unwrap_or_default().to_string(),
            ));
        }
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            rule_messages(p, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        rule_messages(items, &format!("{path}[]"), out);
    }
}
