//! `POST /v1/cluster/join-tokens`, `GET /v1/cluster/join-tokens`,
//! `DELETE /v1/cluster/join-tokens/{id}`: tokens a new node joins with (admin only), each
//! expiring and single-use unless asked otherwise. The value is shown once and kept in the
//! cluster state sealed under the secrets key (`warren_consensus::join_tokens`).
//! `GET|PUT /v1/cluster/join-policy`: whether the cluster's own token admits nodes too.

use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use std::time::{Duration, SystemTime};
use warren_api::error::parse_json;
use warren_api::join_tokens::{
    CreateJoinTokenRequest, CreatedJoinToken, JoinPolicy, JoinTokenInfo, JoinTokenList, PREFIX,
};
use warren_api::{time, ApiError, ErrorCode};
use warren_consensus::join_tokens::{seal_name, JoinTokenRecord};
use warren_consensus::Command;

pub async fn create(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    body: bytes::Bytes,
) -> ApiResult<Response> {
    who.require_admin("making join tokens")?;
    let req: CreateJoinTokenRequest = parse_json(&body)?;
    req.validate()?;
    let id = hex::encode(rand::random::<[u8; 8]>());
    let value = format!("{PREFIX}{id}_{}", hex::encode(rand::random::<[u8; 32]>()));
    let now = SystemTime::now();
    let expires = now + Duration::from_secs(req.ttl_s()?);
    let record = JoinTokenRecord {
        sealed: st.cluster.secrets_key.seal(&seal_name(&id), &value),
        single_use: req.single_use(),
        name: req.name.clone(),
        created_at: time::rfc3339(now),
        expires_at: time::rfc3339(expires),
        expires_at_ms: time::unix_millis(expires),
        used_by: Vec::new(),
    };
    let created = CreatedJoinToken {
        id: id.clone(),
        token: value,
        single_use: record.single_use,
        name: record.name.clone(),
        created_at: record.created_at.clone(),
        expires_at: record.expires_at.clone(),
    };
    let cmd = Command::CreateJoinToken {
        id: id.clone(),
        token: record,
        now_ms: time::unix_millis(now),
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
    tracing::info!(token = %id, single_use = created.single_use, expires_at = %created.expires_at, by = %who.key_id, "join token made");
    Ok((http::StatusCode::CREATED, Json(created)).into_response())
}

pub async fn list(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<JoinTokenList>> {
    who.require_admin("listing join tokens")?;
    let now = time::unix_millis(SystemTime::now());
    let tokens = st.cluster.cluster.read(|s| {
        s.join_tokens
            .iter()
            .map(|(id, t)| JoinTokenInfo {
                id: id.clone(),
                single_use: t.single_use,
                name: t.name.clone(),
                created_at: t.created_at.clone(),
                expires_at: t.expires_at.clone(),
                used_by: t.used_by.clone(),
                state: t.state(now),
            })
            .collect()
    });
    Ok(Json(JoinTokenList { tokens }))
}

pub async fn delete(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    who.require_admin("revoking join tokens")?;
    if !warren_api::join_tokens::is_token_id(&id) {
        return Err(ApiError::invalid(format!("invalid join token id {id:?}")).into());
    }
    st.cluster
        .cluster
        .propose(Command::RevokeJoinToken { id: id.clone() })
        .await
        .map_err(ApiError::from)?;
    tracing::info!(token = %id, by = %who.key_id, "join token revoked");
    Ok(http::StatusCode::NO_CONTENT.into_response())
}

pub async fn get_policy(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<JoinPolicy>> {
    who.require_admin("reading the join policy")?;
    let off = st.cluster.cluster.read(|s| s.cluster_token_off);
    Ok(Json(JoinPolicy {
        cluster_token: !off,
    }))
}

/// Committed before it answers: from then on no member admits a node with the cluster's
/// token (the registration is refused in the log, whichever member proposes it).
pub async fn put_policy(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    body: bytes::Bytes,
) -> ApiResult<Json<JoinPolicy>> {
    who.require_admin("changing the join policy")?;
    let req: JoinPolicy = parse_json(&body)?;
    st.cluster
        .cluster
        .propose(Command::SetClusterTokenJoins {
            allowed: req.cluster_token,
        })
        .await
        .map_err(ApiError::from)?;
    // Applied here before it answers, so that this node's GET reads it back.
    st.cluster
        .cluster
        .read_barrier(Duration::from_secs(5))
        .await
        .map_err(ApiError::from)?;
    tracing::warn!(cluster_token = req.cluster_token, by = %who.key_id, "join policy changed");
    Ok(Json(req))
}
