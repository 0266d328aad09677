//! A node's usage ledger, exported to the object store: one object per (node, interval)
//! with every record of that node in that interval, `usage/<node>/<interval ms>.json`,
//! replaced as the interval grows. What a node exported is counted after the node itself is
//! gone (removed, or down for good).

use crate::ledger::{RecordKey, UsageRecord};
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

const PREFIX: &str = "usage";

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("exported usage {path} is unreadable: {error}")]
    Corrupt { path: String, error: String },
}

#[derive(Serialize, Deserialize)]
struct Exported {
    node: String,
    interval_ms: u64,
    records: Vec<ExportedRecord>,
}

#[derive(Serialize, Deserialize)]
struct ExportedRecord {
    sandbox: String,
    record: UsageRecord,
}

fn path_of(node: &str, interval_ms: u64) -> Path {
    Path::from(format!("{PREFIX}/{node}/{interval_ms:016}.json"))
}

/// Writes (replaces) the object of `node`'s interval with `records` (all of the interval's
/// records of that node).
pub async fn put_interval(
    objects: &dyn ObjectStore,
    node: &str,
    interval_ms: u64,
    records: &[(RecordKey, UsageRecord)],
) -> Result<(), ExportError> {
    let body = Exported {
        node: node.to_string(),
        interval_ms,
        records: records
            .iter()
            .filter(|(k, _)| k.node == node && k.interval_ms == interval_ms)
            .map(|(k, r)| ExportedRecord {
                sandbox: k.sandbox.clone(),
                record: r.clone(),
            })
            .collect(),
    };
    let bytes = serde_json::to_vec(&body).expect("usage serializes");
    objects
        .put(&path_of(node, interval_ms), PutPayload::from(bytes))
        .await?;
    Ok(())
}

/// The nodes that exported anything.
pub async fn exported_nodes(objects: &dyn ObjectStore) -> Result<Vec<String>, ExportError> {
    let listed = objects
        .list_with_delimiter(Some(&Path::from(PREFIX)))
        .await?;
    Ok(listed
        .common_prefixes
        .iter()
        .filter_map(|p| p.filename().map(str::to_string))
        .collect())
}

/// The interval of an exported object's file name (`<interval ms>.json`).
fn interval_of(meta: &object_store::ObjectMeta) -> Option<u64> {
    meta.location
        .filename()?
        .strip_suffix(".json")?
        .parse()
        .ok()
}

/// Deletes every node's exported intervals that start before `before_ms` (usage kept for
/// its retention and no longer); how many objects went. Every node may run it: a delete of
/// an object already gone is not an error.
pub async fn prune_before(objects: &dyn ObjectStore, before_ms: u64) -> Result<usize, ExportError> {
    let mut gone = 0;
    for node in exported_nodes(objects).await? {
        let listed: Vec<object_store::ObjectMeta> = objects
            .list(Some(&Path::from(format!("{PREFIX}/{node}"))))
            .try_collect()
            .await?;
        for meta in listed {
            if interval_of(&meta).is_some_and(|t| t < before_ms) {
                match objects.delete(&meta.location).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => gone += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(gone)
}

/// The records `node` exported for intervals starting in `[from_ms, to_ms)`.
pub async fn read_node(
    objects: &dyn ObjectStore,
    node: &str,
    from_ms: u64,
    to_ms: u64,
) -> Result<Vec<(RecordKey, UsageRecord)>, ExportError> {
    let listed: Vec<object_store::ObjectMeta> = objects
        .list(Some(&Path::from(format!("{PREFIX}/{node}"))))
        .try_collect()
        .await?;
    let mut out = Vec::new();
    for meta in listed {
        let Some(interval_ms) = interval_of(&meta) else {
            continue;
        };
        if interval_ms < from_ms || interval_ms >= to_ms {
            continue;
        }
        let bytes = objects.get(&meta.location).await?.bytes().await?;
        let e: Exported = serde_json::from_slice(&bytes).map_err(|e| ExportError::Corrupt {
            path: meta.location.to_string(),
            error: e.to_string(),
        })?;
        out.extend(e.records.into_iter().map(|r| {
            (
                RecordKey {
                    interval_ms,
                    sandbox: r.sandbox,
                    node: node.to_string(),
                },
                r.record,
            )
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(t: u64, s: &str, node: &str, cpu_ns: u64) -> (RecordKey, UsageRecord) {
        (
            RecordKey {
                interval_ms: t,
                sandbox: s.into(),
                node: node.into(),
            },
            UsageRecord {
                cpu_ns,
                ..Default::default()
            },
        )
    }

    #[tokio::test]
    async fn intervals_are_replaced_listed_by_node_and_read_by_range() {
        let dir = tempfile::tempdir().unwrap();
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        let first = vec![rec(60_000, "a", "n1", 1)];
        put_interval(&store, "n1", 60_000, &first).await.unwrap();
        // The interval grew: replaced, not added to.
        let grown = vec![rec(60_000, "a", "n1", 5), rec(60_000, "b", "n1", 2)];
        put_interval(&store, "n1", 60_000, &grown).await.unwrap();
        put_interval(&store, "n1", 120_000, &[rec(120_000, "a", "n1", 7)])
            .await
            .unwrap();
        put_interval(&store, "n2", 60_000, &[rec(60_000, "c", "n2", 9)])
            .await
            .unwrap();
        let mut nodes = exported_nodes(&store).await.unwrap();
        nodes.sort();
        assert_eq!(nodes, vec!["n1", "n2"]);
        let mut got = read_node(&store, "n1", 0, 120_000).await.unwrap();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, grown);
        assert_eq!(read_node(&store, "n1", 0, u64::MAX).await.unwrap().len(), 3);
        assert!(read_node(&store, "n3", 0, u64::MAX)
            .await
            .unwrap()
            .is_empty());
    }

    #[tokio::test]
    async fn pruning_drops_every_nodes_intervals_before_the_cutoff_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap();
        for (node, t) in [
            ("n1", 60_000),
            ("n1", 120_000),
            ("n2", 60_000),
            ("n2", 180_000),
        ] {
            put_interval(&store, node, t, &[rec(t, "a", node, 1)])
                .await
                .unwrap();
        }
        assert_eq!(prune_before(&store, 120_000).await.unwrap(), 2);
        let left = |node: &'static str| {
            let store = &store;
            async move {
                let mut t: Vec<u64> = read_node(store, node, 0, u64::MAX)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|(k, _)| k.interval_ms)
                    .collect();
                t.sort();
                t
            }
        };
        assert_eq!(left("n1").await, vec![120_000]);
        assert_eq!(left("n2").await, vec![180_000]);
        assert_eq!(prune_before(&store, 120_000).await.unwrap(), 0, "once");
    }
}
