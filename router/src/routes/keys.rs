//! `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{id}`: keys made, listed and revoked
//! by an admin key, kept in the cluster state as hashes (`auth::keys`). A revocation is
//! answered once every node that is not down has applied it.

use crate::auth::{keys, Principal};
use crate::cluster::gather::from_other_nodes;
use crate::cluster::FromPeer;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::time::Duration;
use warren_api::error::parse_json;
use warren_api::keys::{CreateKeyRequest, CreatedKey, KeyInfo, KeyList};
use warren_api::{ApiError, ErrorCode};
use warren_consensus::state::KeyRecord;
use warren_consensus::Command;

/// How long a node answering a peer's list waits to have applied what is committed.
const CATCH_UP: Duration = Duration::from_secs(5);

pub async fn create(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    body: bytes::Bytes,
) -> ApiResult<Response> {
    who.require_admin("creating keys")?;
    let req: CreateKeyRequest = parse_json(&body)?;
    req.validate()?;
    let (id, value, hash) = keys::generate();
    let record = KeyRecord {
        hash,
        tenant: req.tenant.clone(),
        scope: req.scope,
        name: req.name.clone(),
        created_at: warren_api::time::now_rfc3339(),
        last_used_at: None,
    };
    let created = CreatedKey {
        id: id.clone(),
        key: value,
        tenant: record.tenant.clone(),
        scope: record.scope,
        name: record.name.clone(),
        created_at: record.created_at.clone(),
    };
    let cmd = Command::CreateKey {
        id: id.clone(),
        key: record,
    };
    let result = st
        .cluster
        .cluster
        .propose(cmd)
        .await
        .map_err(ApiError::from)?;
    if let warren_consensus::CommandResult::Rejected { reason } = result {
        return Err(ApiError::new(ErrorCode::Conflict, reason).into());
    }
    tracing::info!(key = %id, tenant = %created.tenant, scope = created.scope.as_str(), by = %who.key_id, "key created");
    Ok((http::StatusCode::CREATED, Json(created)).into_response())
}

pub async fn list(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    req: axum::extract::Request,
) -> ApiResult<Json<KeyList>> {
    who.require_admin("listing keys")?;
    let cl = &st.cluster.cluster;
    // A peer asks after a revocation: answered once this node applied it.
    if req.extensions().get::<FromPeer>().is_some() {
        cl.read_barrier(CATCH_UP).await.map_err(ApiError::from)?;
    }
    let keys = cl.read(|s| {
        s.keys
            .iter()
            .map(|(id, k)| KeyInfo {
                id: id.clone(),
                tenant: k.tenant.clone(),
                scope: k.scope,
                name: k.name.clone(),
                created_at: k.created_at.clone(),
                last_used_at: k.last_used_at.clone(),
            })
            .collect()
    });
    Ok(Json(KeyList { keys }))
}

pub async fn delete(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    who.require_admin("revoking keys")?;
    if id == crate::auth::principal::ROOT_KEY_ID {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            "the bootstrap key is the nodes' api_key setting: change it there (and restart the nodes) to replace it",
        )
        .into());
    }
    if id.len() > 64 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::invalid(format!("invalid key id {id:?}")).into());
    }
    let cl = &st.cluster.cluster;
    cl.propose(Command::RevokeKey { id: id.clone() })
        .await
        .map_err(ApiError::from)?;
    // This node too: a follower's proposal is committed by the leader's quorum, which need
    // not have included this node (its replication may be backing off).
    if let Err(e) = cl.read_barrier(CATCH_UP).await {
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("key {id} is revoked in the cluster, but this node has not applied it yet ({e}); retry the DELETE"),
        )
        .into());
    }
    // Every node that is not down answers its list only once it applied the revocation.
    let seen: Result<Vec<KeyList>, _> = from_other_nodes(&st, "/v1/keys", &who, "its keys").await;
    match seen {
        Ok(lists) if lists.iter().all(|l| l.keys.iter().all(|k| k.id != id)) => {}
        Ok(_) => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("key {id} is revoked, but a node still lists it; retry the DELETE"),
            )
            .into())
        }
        Err(e) => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("key {id} is revoked in the cluster, but not every node confirmed it yet ({}); retry the DELETE", e.message),
            )
            .into())
        }
    }
    tracing::info!(key = %id, by = %who.key_id, "key revoked");
    Ok(http::StatusCode::NO_CONTENT.into_response())
}
