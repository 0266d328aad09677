//! The snapshot-bytes quota (`max_snapshot_bytes`). What a tenant keeps is summed from the
//! snapshot catalog in the object store by the node that takes the snapshot: checked before
//! (a tenant at its limit takes none) and after, once the size is known (a snapshot that does
//! not fit is deleted again and refused). The catalog is not a consensus: two snapshots taken
//! at the same moment on different nodes can together pass the limit by one snapshot.

use crate::state::AppState;
use std::collections::BTreeMap;
use warren_api::snapshot::Snapshot;
use warren_api::tenants::snapshot_bytes_refusal;
use warren_api::{ApiError, ErrorCode};
use warren_node::sandbox::manager::snapshot_error;

/// Bytes each tenant keeps in snapshots its quota counts.
pub async fn kept_by_tenant(state: &AppState) -> Result<BTreeMap<String, u64>, ApiError> {
    let all = state
        .mgr
        .snapshot_store()
        .list(None)
        .await
        .map_err(snapshot_error)?;
    let mut kept = BTreeMap::new();
    for m in all.iter().filter(|m| m.origin.counts_for_quota()) {
        *kept.entry(m.tenant().to_string()).or_insert(0u64) += m.size_bytes;
    }
    Ok(kept)
}

/// A tenant's limit and what it keeps now, when it has a limit.
#[derive(Debug, Clone, Copy)]
pub struct Held {
    limit: u64,
    kept: u64,
}

fn refused(tenant: &str, why: String) -> ApiError {
    ApiError::new(ErrorCode::Forbidden, why).with_details(serde_json::json!({"tenant": tenant}))
}

/// Before a snapshot of one of `tenant`'s sandboxes: refused when it keeps its limit already.
pub async fn before(state: &AppState, tenant: &str) -> Result<Option<Held>, ApiError> {
    let limit = state
        .cluster
        .cluster
        .read(|s| s.quotas.get(tenant).and_then(|q| q.max_snapshot_bytes));
    let Some(limit) = limit else {
        return Ok(None);
    };
    let kept = kept_by_tenant(state)
        .await?
        .get(tenant)
        .copied()
        .unwrap_or(0);
    match snapshot_bytes_refusal(tenant, limit, kept, 1) {
        Some(why) => Err(refused(tenant, why)),
        None => Ok(Some(Held { limit, kept })),
    }
}

/// Once `snap` is written: deleted again and refused when it does not fit.
pub async fn after(
    state: &AppState,
    tenant: &str,
    held: Option<Held>,
    snap: Snapshot,
) -> Result<Snapshot, ApiError> {
    let Some(h) = held else {
        return Ok(snap);
    };
    let Some(why) = snapshot_bytes_refusal(tenant, h.limit, h.kept, snap.size_bytes) else {
        return Ok(snap);
    };
    if let Err(e) = state.mgr.delete_snapshot(&snap.id).await {
        tracing::warn!(snapshot = %snap.id, error = %e.message, "a snapshot past its tenant's quota could not be deleted again");
    }
    Err(refused(tenant, why))
}
