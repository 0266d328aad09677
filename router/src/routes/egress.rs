//! `GET|PUT /v1/sandboxes/{id}/egress` (on the sandbox's owner; a policy set is committed
//! to the cluster too, `cluster::policy`).

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::Json;
use warren_api::egress::EgressPolicy;

pub async fn get(
    State(st): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<EgressPolicy>> {
    warren_api::ids::validate_sandbox_id(&id)?;
    Ok(Json(st.mgr.egress_policy(&id).await?))
}

pub async fn put(
    State(st): State<AppState>,
    Path(id): Path<String>,
    body: bytes::Bytes,
) -> ApiResult<Json<EgressPolicy>> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let policy: EgressPolicy = warren_api::error::parse_json(&body)?;
    let set = st.mgr.set_egress(&id, policy).await?;
    crate::cluster::policy::replicate(&st, &id, &set).await?;
    Ok(Json(set))
}
