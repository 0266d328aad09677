//! `POST /v1/tickets`: for a sandbox the caller may touch (another tenant's is absent).

use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use warren_api::error::parse_json;
use warren_api::ticket::TicketRequest;
use warren_api::{ApiError, ErrorCode};

pub async fn create(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    body: bytes::Bytes,
) -> ApiResult<Response> {
    let req: TicketRequest = parse_json(&body)?;
    let ttl = req.validate()?;
    // An unplaced id may still be created by the ticket's stream (get-or-create): it will
    // be the caller's.
    let owner = state.cluster.cluster.read(|s| {
        s.placements
            .get(&req.sandbox)
            .map(|p| p.tenant().to_string())
    });
    if owner.is_some_and(|t| !who.may_touch(&t)) {
        return Err(ApiError::new(
            ErrorCode::SandboxNotFound,
            format!("sandbox {} not found", req.sandbox),
        )
        .into());
    }
    let ticket = state.tickets.issue(&req.sandbox, req.scope, ttl, &who);
    Ok((http::StatusCode::CREATED, axum::Json(ticket)).into_response())
}
