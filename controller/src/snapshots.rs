//! The run's snapshot in its ConfigMaps (spec §4.2): written by server-side apply, read back and
//! verified against the digests its status records, kept in memory while the watch of their
//! metadata shows them unchanged, and deleted when the run lets go.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use upgradeplan::api::{ResourceListRef, RunState, UpgradeRun, UpgradeRunStatus, PLAN_LABEL, RUN_LABEL};
use upgradeplan::engine::lifecycle::{SnapshotConfigMap, SnapshotFact};
use upgradeplan::engine::naming;
use upgradeplan::engine::snapshot::{check_shard, digest, read_frozen, snapshot_shard_index, ShardCheck};

use crate::context::{Ctx, Frozen};
use crate::error::{Error, Result};

/// The run's snapshot as it stands: before the run is InProgress, whatever an earlier pass wrote
/// (a crash between the write and the status, or a cached copy of the run older than the status
/// that pass wrote: a snapshot taken again would miss the bindings already upgraded); after, the
/// ConfigMaps its status names.
pub async fn gather_snapshot(ctx: &Ctx, run: &UpgradeRun, status: &UpgradeRunStatus) -> Result<SnapshotFact> {
    match status.state {
        RunState::Unresolved | RunState::Pending => {
            let ours = owned_config_maps(ctx, run).await?;
            if ours.is_empty() {
                return Ok(SnapshotFact::Absent);
            }
            let run_name = run.name_any();
            let mut refs: Vec<ResourceListRef> = ours
                .iter()
                .filter(|cm| snapshot_shard_index(&run_name, &cm.name_any()).is_some())
                .map(|cm| ResourceListRef {
                    name: cm.name_any(),
                    sha256: Some(digest(cm.data.as_ref().unwrap_or(&BTreeMap::new()))),
                })
                .collect();
            refs.sort_by_key(|r| snapshot_shard_index(&run_name, &r.name));
            // An incomplete earlier write is written again, whole.
            Ok(match read_shards(run, ours) {
                Ok(frozen) => SnapshotFact::Found { frozen, refs },
                Err(_) => SnapshotFact::Absent,
            })
        }
        RunState::InProgress => match load_snapshot(ctx, run, status).await {
            Ok(Loaded::Intact(frozen)) => Ok(SnapshotFact::Found {
                frozen,
                refs: status.resource_list_refs.clone(),
            }),
            Ok(Loaded::Tampered(config_map)) => {
                tracing::warn!(run = %run.name_any(), %config_map, "the run's snapshot does not match its recorded digest: failing the run");
                Ok(SnapshotFact::Tampered { config_map })
            }
            Err(Error::Snapshot { config_map, detail, .. }) => {
                tracing::warn!(run = %run.name_any(), %config_map, %detail, "the run's snapshot is lost");
                Ok(SnapshotFact::Lost { config_map })
            }
            Err(e) => Err(e),
        },
        _ => Ok(SnapshotFact::Absent),
    }
}

/// The run a revert undoes (spec §13.7), and its snapshot as read back and verified against the
/// digests its status records, whatever its state (a revert is mostly of an ended run): `Absent`
/// when it never took one. `None` when no run of that name exists.
pub async fn gather_reverted(ctx: &Ctx, name: &str) -> Result<Option<(Arc<UpgradeRun>, SnapshotFact)>> {
    let Some(run) = ctx.run(name) else {
        return Ok(None);
    };
    let status = run.status.clone().unwrap_or_default();
    if status.resource_list_refs.is_empty() {
        return Ok(Some((run, SnapshotFact::Absent)));
    }
    let fact = match load_snapshot(ctx, &run, &status).await {
        Ok(Loaded::Intact(frozen)) => SnapshotFact::Found {
            frozen,
            refs: status.resource_list_refs.clone(),
        },
        Ok(Loaded::Tampered(config_map)) => {
            tracing::warn!(run = %name, %config_map, "the snapshot of the run to revert does not match its recorded digest");
            SnapshotFact::Tampered { config_map }
        }
        Err(Error::Snapshot { config_map, detail, .. }) => {
            tracing::warn!(run = %name, %config_map, %detail, "the snapshot of the run to revert is lost");
            SnapshotFact::Lost { config_map }
        }
        Err(e) => return Err(e),
    };
    Ok(Some((run, fact)))
}

fn snapshot_error(run: &UpgradeRun, config_map: &str, detail: impl Into<String>) -> Error {
    Error::Snapshot {
        run: run.name_any(),
        config_map: config_map.to_string(),
        detail: detail.into(),
    }
}

/// The snapshot ConfigMaps this run owns (by label and ownerReference).
async fn owned_config_maps(ctx: &Ctx, run: &UpgradeRun) -> Result<Vec<ConfigMap>> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    let existing = cms
        .list(&ListParams::default().labels(&naming::selector(RUN_LABEL, &run.name_any())))
        .await?;
    Ok(existing
        .items
        .into_iter()
        .filter(|cm| cm.owner_references().iter().any(|o| Some(&o.uid) == run.uid().as_ref()))
        .collect())
}

/// A snapshot ConfigMap as applied, its data borrowed from the step.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct AppliedConfigMap<'a> {
    api_version: &'static str,
    kind: &'static str,
    metadata: kube::api::ObjectMeta,
    data: &'a BTreeMap<String, String>,
}

/// Asks the API server to reply with the object's metadata alone (a `PartialObjectMetadata`).
const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The one thing read of an applied ConfigMap's reply (its metadata alone, as asked).
#[derive(serde::Deserialize)]
struct WrittenMetadata {
    metadata: WrittenVersion,
}

#[derive(serde::Deserialize)]
struct WrittenVersion {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

/// Writes the step's snapshot ConfigMaps (server-side apply: an incomplete earlier write is
/// completed, not duplicated). Returns the resourceVersion each was written at.
pub async fn write_snapshot(
    ctx: &Ctx,
    run: &UpgradeRun,
    shards: &[SnapshotConfigMap],
) -> Result<Vec<(String, String)>> {
    let mut versions = Vec::new();
    let run_name = run.name_any();
    // Exactly the data whose digests the step records in the status.
    for (name, data) in shards {
        let (mut labels, mut annotations) = (BTreeMap::new(), BTreeMap::new());
        naming::put_name(&mut labels, &mut annotations, PLAN_LABEL, run.plan_name());
        naming::put_name(&mut labels, &mut annotations, RUN_LABEL, &run_name);
        let body = AppliedConfigMap {
            api_version: "v1",
            kind: "ConfigMap",
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ctx.snapshot_namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations).filter(|a| !a.is_empty()),
                // A namespaced object may be owned by a cluster-scoped one: deleting the run
                // garbage-collects its snapshot even when the finalizer never ran.
                owner_references: run.controller_owner_ref(&()).map(|o| vec![o]),
                ..Default::default()
            },
            data,
        };
        let params = PatchParams::apply(upgradeplan::api::FIELD_MANAGER).force();
        // Serialized straight from the step's data, and only the reply's metadata asked for: a
        // shard is up to a MiB, and copying it into a ConfigMap and a JSON value, then receiving
        // and parsing the whole object back for its resourceVersion, was the controller's heap at
        // its peak (docs/performance.md).
        let url = ConfigMap::url_path(&(), Some(&ctx.snapshot_namespace));
        let mut request = kube::core::Request::new(url)
            .patch(name, &params, &Patch::Apply(&body))
            .map_err(kube::Error::BuildRequest)?;
        request
            .headers_mut()
            .insert(http::header::ACCEPT, http::HeaderValue::from_static(METADATA_ONLY));
        match ctx.client.request_text(request).await {
            Ok(reply) => {
                let written: WrittenMetadata = serde_json::from_str(&reply)?;
                versions.push((name.clone(), written.metadata.resource_version.unwrap_or_default()));
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(snapshot_error(
                    run,
                    name,
                    format!(
                        "namespace {:?} does not exist: create it or start the controller with --snapshot-namespace",
                        ctx.snapshot_namespace
                    ),
                ));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(versions)
}

fn read_shards(run: &UpgradeRun, mut cms: Vec<ConfigMap>) -> Result<Arc<Frozen>> {
    let run_name = run.name_any();
    cms.sort_by_key(|cm| snapshot_shard_index(&run_name, &cm.name_any()).unwrap_or(usize::MAX));
    let empty = BTreeMap::new();
    let frozen = read_frozen(cms.iter().map(|cm| {
        (
            cm.metadata.name.as_deref().unwrap_or_default(),
            cm.data.as_ref().unwrap_or(&empty),
        )
    }))
    .map_err(|e| {
        let first = cms.first().map(|cm| cm.name_any()).unwrap_or_default();
        snapshot_error(run, &first, e.to_string())
    })?;
    Ok(Arc::new(frozen))
}

/// A run's snapshot as read: what was written, or the first ConfigMap that is not.
enum Loaded {
    Intact(Arc<Frozen>),
    Tampered(String),
}

/// The run's snapshot, from memory while its ConfigMaps are unchanged (the watch of their
/// metadata says so), else read from the ConfigMaps its status names and verified against the
/// digests recorded there (spec §4.2): a change or a deletion since is `Tampered`.
async fn load_snapshot(ctx: &Ctx, run: &UpgradeRun, status: &UpgradeRunStatus) -> Result<Loaded> {
    let uid = run.uid().unwrap_or_default();
    let cached = ctx.frozen.lock().ok().and_then(|c| c.get(&uid).cloned());
    if let Some(c) = cached.filter(|c| ctx.snapshot_unchanged(&c.versions)) {
        return Ok(Loaded::Intact(c.frozen.clone()));
    }
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    let mut found = Vec::new();
    let empty = BTreeMap::new();
    for r in &status.resource_list_refs {
        let cm = cms.get_opt(&r.name).await?;
        let data = cm.as_ref().map(|c| c.data.as_ref().unwrap_or(&empty));
        if check_shard(r.sha256.as_deref(), data) == ShardCheck::Tampered {
            return Ok(Loaded::Tampered(r.name.clone()));
        }
        match cm {
            Some(cm) => found.push(cm),
            None => {
                return Err(snapshot_error(
                    run,
                    &r.name,
                    format!("ConfigMap {}/{} is missing", ctx.snapshot_namespace, r.name),
                ))
            }
        }
    }
    if found.is_empty() {
        let first = upgradeplan::engine::snapshot::snapshot_config_map_name(&run.name_any(), 0);
        return Err(snapshot_error(run, &first, "status.resourceListRefs is empty"));
    }
    let versions = found
        .iter()
        .map(|cm| (cm.name_any(), cm.resource_version().unwrap_or_default()))
        .collect();
    let frozen = read_shards(run, found)?;
    if let Ok(mut cache) = ctx.frozen.lock() {
        cache.insert(
            uid,
            Arc::new(crate::context::Verified {
                frozen: frozen.clone(),
                versions,
            }),
        );
    }
    Ok(Loaded::Intact(frozen))
}

/// Deletes the run's snapshot ConfigMaps (one already gone is no error).
pub async fn delete_snapshot(ctx: &Ctx, run: &UpgradeRun) -> Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.snapshot_namespace);
    for cm in owned_config_maps(ctx, run).await? {
        match cms.delete(&cm.name_any(), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
