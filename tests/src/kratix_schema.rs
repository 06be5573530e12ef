//! Every field upgradeplan reads or writes on Kratix's objects exists in Kratix's schemas (the
//! fixture `tests/fixtures/kratix-crds.yaml`, written from Kratix's CRDs): a field the API server
//! would prune in a real cluster cannot hide behind a test-only schema.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, JSONSchemaProps};
use serde_json::{json, Value};
use upgradeplan::api::kratix::{
    BindingCondition, HealthRecord, HealthRecordData, NameRef, ObjectRef, Promise, PromiseRevision,
    PromiseRevisionSpec, PromiseRevisionStatus, PromiseSpec, ResourceBinding, ResourceBindingSpec,
    ResourceBindingStatus, WorkflowConfig, Workflows,
};

fn fixture_schemas() -> Vec<(String, JSONSchemaProps)> {
    let path = crate::harness::repo_root().join("tests/fixtures/kratix-crds.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---")
        .filter(|d| d.contains("kind:"))
        .map(|doc| {
            let crd: CustomResourceDefinition = serde_saphyr::from_str(doc).unwrap();
            let schema = crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.clone())
                .unwrap();
            (crd.spec.names.kind, schema)
        })
        .collect()
}

/// The paths of `value` that `schema` does not declare (nor preserve).
fn undeclared(value: &Value, schema: &JSONSchemaProps, path: &str, out: &mut Vec<String>) {
    if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
        return;
    }
    match value {
        Value::Object(fields) if path == ".metadata" => {
            let _ = fields; // ObjectMeta: the API server's own schema.
        }
        Value::Object(fields) => {
            for (key, v) in fields {
                let declared = schema
                    .properties
                    .as_ref()
                    .and_then(|p| p.get(key))
                    .or_else(|| match &schema.additional_properties {
                        Some(k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrBool::Schema(s)) => {
                            Some(s.as_ref())
                        }
                        _ => None,
                    });
                match declared {
                    Some(s) => undeclared(v, s, &format!("{path}.{key}"), out),
                    None => out.push(format!("{path}.{key}")),
                }
            }
        }
        Value::Array(items) => {
            let item = match &schema.items {
                Some(
                    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaPropsOrArray::Schema(
                        s,
                    ),
                ) => Some(s.as_ref()),
                _ => None,
            };
            for (i, v) in items.iter().enumerate() {
                match item {
                    Some(s) => undeclared(v, s, &format!("{path}[{i}]"), out),
                    None => out.push(format!("{path}[{i}]")),
                }
            }
        }
        _ => {}
    }
}

/// A Promise's spec with the one field upgradeplan reads of it.
fn workflows() -> PromiseSpec {
    PromiseSpec {
        workflows: Some(Workflows {
            config: Some(WorkflowConfig {
                reconciliation_interval: Some("1h".into()),
            }),
        }),
    }
}

/// Each kind as upgradeplan models it, every field it has set, serialized as it writes them.
fn modelled() -> Vec<(&'static str, Value)> {
    let binding = ResourceBinding {
        metadata: Default::default(),
        spec: ResourceBindingSpec {
            version: "v2".into(),
            promise_ref: NameRef { name: "redis".into() },
            resource_ref: ObjectRef {
                name: "cache".into(),
                namespace: "apps".into(),
            },
        },
        status: Some(ResourceBindingStatus {
            last_applied_version: "v1".into(),
            failed_version: Some("v2".into()),
            conditions: vec![BindingCondition {
                type_: "UpgradeSucceeded".into(),
                status: "False".into(),
                reason: "UpgradeFailed".into(),
                message: "workflow failed".into(),
                last_transition_time: Some(chrono::Utc::now()),
            }],
            // Read where Kratix writes it, never written (FORWARD_COMPATIBLE).
            health_status: None,
        }),
    };
    let revision = PromiseRevision {
        metadata: Default::default(),
        spec: PromiseRevisionSpec {
            promise_ref: NameRef { name: "redis".into() },
            version: "v2".into(),
            promise_spec: Some(workflows()),
        },
        status: Some(PromiseRevisionStatus { latest: true }),
    };
    let promise = Promise {
        metadata: Default::default(),
        spec: workflows(),
    };
    let record = HealthRecord {
        metadata: Default::default(),
        data: HealthRecordData {
            promise_ref: NameRef { name: "redis".into() },
            resource_ref: ObjectRef {
                name: "cache".into(),
                namespace: "apps".into(),
            },
            state: "healthy".into(),
            last_run: Some(1_780_000_000),
            promise_version: None,
        },
    };
    let json = |v: Result<Value, serde_json::Error>| v.unwrap();
    vec![
        ("ResourceBinding", json(serde_json::to_value(&binding))),
        ("PromiseRevision", json(serde_json::to_value(&revision))),
        ("Promise", json(serde_json::to_value(&promise))),
        ("HealthRecord", json(serde_json::to_value(&record))),
    ]
}

#[test]
fn every_field_upgradeplan_models_exists_in_kratixs_schemas() {
    let schemas = fixture_schemas();
    let kinds: Vec<&str> = schemas.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds, ["Promise", "PromiseRevision", "ResourceBinding", "HealthRecord"]);
    for (kind, value) in modelled() {
        let (_, schema) = schemas.iter().find(|(k, _)| k == kind).unwrap();
        let mut missing = Vec::new();
        undeclared(&value, schema, "", &mut missing);
        assert!(
            missing.is_empty(),
            "{kind}: fields Kratix's schema would prune: {missing:?}"
        );
    }
}

/// The fields upgradeplan reads ahead of Kratix (its proposal kratix#945, spec §2): never written,
/// read only where a newer Kratix writes them. Kratix's schemas lack exactly these.
const FORWARD_COMPATIBLE: [(&str, &str); 2] = [
    ("ResourceBinding", ".status.healthStatus"),
    ("HealthRecord", ".data.promiseVersion"),
];

#[test]
fn only_the_forward_compatible_fields_are_ahead_of_kratix() {
    let schemas = fixture_schemas();
    let ahead = [
        (
            "ResourceBinding",
            json!({"status": {"lastAppliedVersion": "v1", "healthStatus": {"state": "healthy", "promiseVersion": "v2"}}}),
        ),
        (
            "HealthRecord",
            json!({"data": {"state": "healthy", "promiseVersion": "v2"}}),
        ),
    ];
    for ((kind, value), (want_kind, want_field)) in ahead.iter().zip(FORWARD_COMPATIBLE) {
        assert_eq!(*kind, want_kind);
        let (_, schema) = schemas.iter().find(|(k, _)| k == kind).unwrap();
        let mut missing = Vec::new();
        undeclared(value, schema, "", &mut missing);
        assert_eq!(missing, [want_field], "{kind}");
    }
}

/// The check can fail: a field Kratix does not have (as `data.promiseVersion` today) is named.
#[test]
fn a_field_kratix_does_not_have_is_named() {
    let schemas = fixture_schemas();
    let (_, schema) = schemas.iter().find(|(k, _)| k == "HealthRecord").unwrap();
    let mut missing = Vec::new();
    let record = json!({"data": {"state": "healthy", "promiseVersion": "v2"}, "metadata": {"name": "x"}});
    undeclared(&record, schema, "", &mut missing);
    assert_eq!(missing, [".data.promiseVersion"]);
}
