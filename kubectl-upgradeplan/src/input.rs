//! Reading plans and bindings from files (YAML or JSON; "-" is stdin). Bad input becomes a
//! message naming the file and the problem, never a panic.

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use serde::Deserialize;
use upgradeplan::api::kratix::ResourceBinding;
use upgradeplan::api::{UpgradeFreeze, UpgradePlan};

fn read(path: &Path) -> anyhow::Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading stdin")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// A plan read from a file, with where it came from and its unknown fields (which the API
/// server would reject).
pub struct PlanFile {
    /// `FILE`, or `FILE: document N` / `FILE: items[N]` when the file holds several.
    pub source: String,
    pub plan: UpgradePlan,
    pub unknown: Vec<upgradeplan::engine::Problem>,
}

/// Reads the UpgradePlans of `paths` as `kubectl apply -f` takes them: files of one or more YAML
/// documents (`---`), JSON, Lists (`kubectl get -o yaml`), and directories (their `.yaml`,
/// `.yml` and `.json` files, in name order, not recursively). Other kinds are skipped, as a
/// GitOps repository mixes them; finding no plan at all is an error naming the paths.
pub fn plans(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<PlanFile>> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<std::path::PathBuf> = std::fs::read_dir(path)
                .with_context(|| format!("reading directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && p.extension()
                            .and_then(|e| e.to_str())
                            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
                })
                .collect();
            entries.sort();
            files.extend(entries);
        } else {
            files.push(path.clone());
        }
    }
    let mut found = Vec::new();
    let mut skipped = std::collections::BTreeSet::new();
    for file in &files {
        let text = read(file)?;
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
            .with_context(|| format!("{} is not valid YAML or JSON", file.display()))?;
        let several = docs.len() > 1;
        for (d, doc) in docs.into_iter().enumerate() {
            let at = if several {
                format!("{}: document {}", file.display(), d + 1)
            } else {
                file.display().to_string()
            };
            let kind = doc.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
            let items = if kind.ends_with("List") {
                let list: List = serde_json::from_value(doc).with_context(|| format!("{at} is not a valid List"))?;
                list.items
                    .into_iter()
                    .enumerate()
                    .map(|(i, item)| (format!("{at}: items[{i}]"), item))
                    .collect()
            } else {
                vec![(at, doc)]
            };
            for (source, item) in items {
                // An empty document (a leading or trailing `---`) is nothing, not an unknown kind.
                if item.is_null() {
                    continue;
                }
                match item.get("kind").and_then(|k| k.as_str()) {
                    Some("UpgradePlan") => {}
                    other => {
                        skipped.insert(other.unwrap_or("no kind").to_string());
                        continue;
                    }
                }
                let unknown = upgradeplan::api::strict::unknown_plan_fields(&item);
                let plan = serde_path_to_error::deserialize(item)
                    .with_context(|| format!("{source} is not a valid UpgradePlan"))?;
                found.push(PlanFile { source, plan, unknown });
            }
        }
    }
    if found.is_empty() {
        let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        let seen = if skipped.is_empty() {
            "no manifests".to_string()
        } else {
            format!("only {}", skipped.into_iter().collect::<Vec<_>>().join(", "))
        };
        bail!("no UpgradePlan in {} ({seen})", named.join(", "));
    }
    Ok(found)
}

/// Reads the one UpgradePlan of `paths`, for the views that work on one plan.
pub fn plan(paths: &[std::path::PathBuf]) -> anyhow::Result<(UpgradePlan, Vec<upgradeplan::engine::Problem>)> {
    let mut plans = plans(paths)?;
    if plans.len() > 1 {
        let names: Vec<String> = plans
            .iter()
            .map(|p| format!("{} ({})", p.plan.metadata.name.as_deref().unwrap_or("?"), p.source))
            .collect();
        bail!(
            "{} UpgradePlans found: {}; this view works on one plan (explain -f takes several)",
            plans.len(),
            names.join(", ")
        );
    }
    let one = plans.remove(0);
    Ok((one.plan, one.unknown))
}

#[derive(Deserialize)]
struct List {
    #[serde(default)]
    items: Vec<serde_json::Value>,
}

/// Reads ResourceBindings from a List (as `kubectl get -o yaml|json` prints it) or a single
/// binding. A binding that does not fit the type is reported by name.
pub fn bindings(path: &Path) -> anyhow::Result<Vec<ResourceBinding>> {
    documents(path, "ResourceBinding")?
        .into_iter()
        .map(|(i, doc)| typed(path, "ResourceBinding", i, doc))
        .collect()
}

/// Reads UpgradeFreezes (`kubectl get upgradefreezes -o yaml` output, or one freeze).
pub fn freezes(path: &Path) -> anyhow::Result<Vec<UpgradeFreeze>> {
    Ok(freezes_linted(path)?.into_iter().map(|(f, _)| f).collect())
}

/// Reads UpgradeFreezes with each one's unknown fields (which the API server would reject).
pub fn freezes_linted(path: &Path) -> anyhow::Result<Vec<(UpgradeFreeze, Vec<upgradeplan::engine::Problem>)>> {
    documents(path, "UpgradeFreeze")?
        .into_iter()
        .map(|(i, doc)| {
            let unknown = upgradeplan::api::strict::unknown_fields_of::<UpgradeFreeze>(&doc);
            Ok((typed(path, "UpgradeFreeze", i, doc)?, unknown))
        })
        .collect()
}

/// The documents of `kind` in a List (other kinds in it are skipped), with their index, or a
/// single object.
fn documents(path: &Path, kind: &str) -> anyhow::Result<Vec<(usize, serde_json::Value)>> {
    let text = read(path)?;
    let value: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("{} is not valid YAML or JSON", path.display()))?;
    let items = match value.get("kind").and_then(|k| k.as_str()) {
        Some(k) if k == kind => vec![value],
        Some(k) if k.ends_with("List") => serde_json::from_value::<List>(value)?.items,
        other => bail!(
            "{}: expected a {kind} or a List of them, found kind {other:?}",
            path.display()
        ),
    };
    // A List may mix kinds.
    Ok(items
        .into_iter()
        .enumerate()
        .filter(|(_, item)| item.get("kind").and_then(|k| k.as_str()) == Some(kind))
        .collect())
}

/// Document `i` of `path` as a `kind`; one that does not fit is reported by name.
fn typed<K: serde::de::DeserializeOwned>(
    path: &Path,
    kind: &str,
    i: usize,
    doc: serde_json::Value,
) -> anyhow::Result<K> {
    let name = doc
        .pointer("/metadata/name")
        .and_then(|n| n.as_str())
        .unwrap_or("?")
        .to_string();
    serde_path_to_error::deserialize(doc)
        .with_context(|| format!("{}: items[{i}] ({name}) is not a valid {kind}", path.display()))
}
