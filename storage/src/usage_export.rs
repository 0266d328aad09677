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
        let name = meta.location.filename().unwrap_or_default();
        let Some(interval_ms) = name
            .strip_suffix(".json")
            .and_then(|n| n.parse::<u64>().ok())
        else {
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
}
