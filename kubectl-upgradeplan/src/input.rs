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

/// Reads one UpgradePlan, with its unknown fields (which the API server would reject).
pub fn plan(path: &Path) -> anyhow::Result<(UpgradePlan, Vec<upgradeplan::engine::Problem>)> {
    let text = read(path)?;
    let value: serde_json::Value =
        serde_saphyr::from_str(&text).with_context(|| format!("{} is not valid YAML or JSON", path.display()))?;
    let kind = value.get("kind").and_then(|k| k.as_str()).unwrap_or_default();
    if kind != "UpgradePlan" {
        bail!("{}: expected kind UpgradePlan, found {kind:?}", path.display());
    }
    let unknown = upgradeplan::api::strict::unknown_plan_fields(&value);
    let plan = serde_path_to_error::deserialize(value)
        .with_context(|| format!("{} is not a valid UpgradePlan", path.display()))?;
    Ok((plan, unknown))
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
