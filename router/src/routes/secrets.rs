//! `PUT|GET|DELETE /v1/secrets/{name}`, `GET /v1/secrets`: write-only secrets, sealed with
//! the cluster's secrets key on the node that receives them and replicated through Raft as
//! ciphertext. No answer, log line or error carries a value. Each tenant has its own names
//! (`secret_slot`): a key sees and sets its tenant's secrets only, and a sandbox's egress
//! rules open only its tenant's.

use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use warren_api::egress::{validate_secret_name, PutSecretRequest, SecretInfo, SecretList};
use warren_api::{ApiError, ErrorCode};
use warren_consensus::state::{secret_slot, slot_owner, SecretRecord};
use warren_consensus::Command;

fn info(name: &str, r: &SecretRecord) -> SecretInfo {
    SecretInfo {
        name: name.to_string(),
        created_at: r.created_at.clone(),
        updated_at: r.updated_at.clone(),
        key_id: r.sealed.key_id.clone(),
    }
}

pub async fn put(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
    body: bytes::Bytes,
) -> ApiResult<Response> {
    validate_secret_name(&name)?;
    let slot = secret_slot(&who.tenant, &name);
    let req: PutSecretRequest = warren_api::error::parse_json(&body)
        .map_err(|_| ApiError::invalid("the body must be {\"value\": \"...\"}"))?;
    req.validate()?;
    let sealed = st.cluster.secrets_key.seal(&slot, &req.value);
    drop(req);
    let cmd = Command::PutSecret {
        name: slot,
        sealed,
        at: warren_api::time::now_rfc3339(),
    };
    st.cluster
        .cluster
        .propose(cmd)
        .await
        .map_err(ApiError::from)?;
    tracing::info!(secret = %name, tenant = %who.tenant, "secret set");
    Ok(http::StatusCode::NO_CONTENT.into_response())
}

pub async fn get(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Json<SecretInfo>> {
    validate_secret_name(&name)?;
    let slot = secret_slot(&who.tenant, &name);
    st.cluster
        .cluster
        .read(|s| s.secrets.get(&slot).map(|r| info(&name, r)))
        .map(Json)
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("no secret {name:?}")).into())
}

pub async fn list(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
) -> Json<SecretList> {
    let secrets = st.cluster.cluster.read(|s| {
        s.secrets
            .iter()
            .filter_map(|(slot, r)| {
                let (tenant, name) = slot_owner(slot);
                (tenant == who.tenant).then(|| info(name, r))
            })
            .collect()
    });
    Json(SecretList { secrets })
}

pub async fn delete(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    validate_secret_name(&name)?;
    let cmd = Command::DeleteSecret {
        name: secret_slot(&who.tenant, &name),
    };
    st.cluster
        .cluster
        .propose(cmd)
        .await
        .map_err(ApiError::from)?;
    tracing::info!(secret = %name, tenant = %who.tenant, "secret deleted");
    Ok(http::StatusCode::NO_CONTENT.into_response())
}
