//! `POST|GET /v1/sandboxes/{id}/ports`, `DELETE /v1/sandboxes/{id}/ports/{port}`.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use warren_api::error::parse_json;
use warren_api::ports::ExposeRequest;
use warren_api::ApiError;

pub async fn expose(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: bytes::Bytes,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let req: ExposeRequest = parse_json(&body)?;
    let exposed = state.mgr.expose(&id, &req).await?;
    Ok((http::StatusCode::CREATED, axum::Json(exposed)).into_response())
}

pub async fn list(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    Ok(axum::Json(state.mgr.ports(&id).await?).into_response())
}

pub fn parse_port(port: &str) -> Result<u16, ApiError> {
    port.parse::<u16>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| ApiError::invalid(format!("port must be between 1 and 65535, not {port:?}")))
}

pub async fn unexpose(
    State(state): State<AppState>,
    Path((id, port)): Path<(String, String)>,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let port = parse_port(&port)?;
    state.mgr.unexpose(&id, port).await?;
    Ok(http::StatusCode::NO_CONTENT.into_response())
}
