//! Unknown fields, as the API server's strict field validation reports them (`kubectl apply`
//! rejects `maxConcurent: 5`): every key of a document that its CRD's structural schema does not
//! know, with its path. The schema is the one generated from our types, so the check cannot drift
//! from what the API server enforces.

use serde_json::Value;

use crate::engine::validate::Problem;

/// The fields of `metadata` (ObjectMeta) a manifest may carry.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "labels",
    "annotations",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "selfLink",
];

/// Unknown fields of `doc` against `schema` (an `openAPIV3Schema`), in document order.
pub fn unknown_fields(schema: &Value, doc: &Value) -> Vec<Problem> {
    let mut out = Vec::new();
    walk(schema, doc, "", &mut out);
    out
}

/// The unknown fields of an UpgradePlan manifest.
pub fn unknown_plan_fields(doc: &Value) -> Vec<Problem> {
    unknown_fields_of::<super::UpgradePlan>(doc)
}

/// The unknown fields of a manifest of our kind `K`.
pub fn unknown_fields_of<K: kube::CustomResourceExt>(doc: &Value) -> Vec<Problem> {
    let crd = serde_json::to_value(K::crd()).unwrap_or_default();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    unknown_fields(schema, doc)
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn walk(schema: &Value, doc: &Value, path: &str, out: &mut Vec<Problem>) {
    match doc {
        Value::Object(map) => {
            if path == "metadata" {
                for key in map.keys().filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str())) {
                    out.push(unknown(&join(path, key), key, OBJECT_META_FIELDS.iter().copied()));
                }
                return;
            }
            let preserves = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            for (key, value) in map {
                let here = join(path, key);
                let top_level = path.is_empty() && (key == "apiVersion" || key == "kind");
                if path.is_empty() && key == "metadata" {
                    // Not in a CRD's schema: the API server knows ObjectMeta itself.
                    walk(&Value::Null, value, &here, out);
                    continue;
                }
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => walk(s, value, &here, out),
                    (None, Some(Value::Object(s))) => walk(&Value::Object(s.clone()), value, &here, out),
                    (None, Some(Value::Bool(true))) => {}
                    _ if top_level || preserves || properties.is_none() => {}
                    _ => out.push(unknown(
                        &here,
                        key,
                        properties.into_iter().flat_map(|p| p.keys().map(String::as_str)),
                    )),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

fn unknown<'k>(field: &str, key: &str, known: impl Iterator<Item = &'k str>) -> Problem {
    let hint = closest(key, known)
        .map(|k| format!(" (did you mean {k:?}?)"))
        .unwrap_or_default();
    Problem {
        field: field.to_string(),
        message: format!("unknown field: the API server rejects it{hint}"),
    }
}

/// The candidate `key` was probably meant to be, for "did you mean": the nearest by edit
/// distance (case aside), within 2 edits or a quarter of its length.
pub fn closest<'k>(key: &str, candidates: impl Iterator<Item = &'k str>) -> Option<&'k str> {
    candidates
        .map(|k| (edit_distance(&key.to_lowercase(), &k.to_lowercase()), k))
        .filter(|(d, k)| *d <= 2.max(k.len() / 4))
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, for "did you mean".
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(spec: Value) -> Value {
        json!({"apiVersion": "platform.syntasso.io/v1alpha1", "kind": "UpgradePlan",
               "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": spec})
    }

    fn valid_spec() -> Value {
        json!({
            "promiseRef": {"name": "redis"},
            "upgradePath": {"from": ["v1"], "to": "v2"},
            "suspend": false,
            "upgradeExecutionPolicy": {"repeatSchedule": "0 1 * * *", "timeZone": "UTC"},
            "rolloutGroups": [{
                "name": "dev",
                "maxConcurrent": "50%",
                "selectors": {"matchLabels": {"env": "dev"},
                              "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]},
                "resourceUpgradeWindows": [{"kind": "allow", "schedule": "0 22 * * *", "duration": "4h"}]
            }]
        })
    }

    #[test]
    fn a_valid_plan_has_no_unknown_fields() {
        assert_eq!(unknown_plan_fields(&plan(valid_spec())), vec![]);
    }

    #[test]
    fn typos_anywhere_are_named_with_their_path() {
        let cases: Vec<(&str, Value, &str, &str)> = vec![
            (
                "a group field",
                json!("/rolloutGroups/0/maxConcurent"),
                "spec.rolloutGroups[0].maxConcurent",
                "maxConcurrent",
            ),
            (
                "selectors",
                json!("/rolloutGroups/0/selector"),
                "spec.rolloutGroups[0].selector",
                "selectors",
            ),
            (
                "in a window",
                json!("/rolloutGroups/0/resourceUpgradeWindows/0/timezone"),
                "spec.rolloutGroups[0].resourceUpgradeWindows[0].timezone",
                "timeZone",
            ),
            (
                "in the policy",
                json!("/upgradeExecutionPolicy/repeatSchedul"),
                "spec.upgradeExecutionPolicy.repeatSchedul",
                "repeatSchedule",
            ),
            ("top of spec", json!("/suspended"), "spec.suspended", "suspend"),
        ];
        for (case, pointer, field, hint) in cases {
            let mut spec = valid_spec();
            let pointer = pointer.as_str().unwrap();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            spec.pointer_mut(parent)
                .unwrap()
                .as_object_mut()
                .unwrap()
                .insert(key.to_string(), json!(5));
            let problems = unknown_plan_fields(&plan(spec));
            assert_eq!(problems.len(), 1, "{case}: {problems:?}");
            assert_eq!(problems[0].field, field, "{case}");
            assert!(
                problems[0].message.contains(&format!("did you mean {hint:?}")),
                "{case}: {}",
                problems[0].message
            );
        }
        // Metadata and the top level too; label values are free.
        let mut doc = plan(valid_spec());
        doc["metadata"]["lables"] = json!({});
        doc["sepc"] = json!({});
        let fields: Vec<String> = unknown_plan_fields(&doc).into_iter().map(|p| p.field).collect();
        assert_eq!(fields, vec!["metadata.lables", "sepc"]);
    }

    #[test]
    fn distances() {
        assert_eq!(edit_distance("maxconcurent", "maxconcurrent"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
