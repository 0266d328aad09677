//! `POST /v1/tickets`.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use warren_api::error::parse_json;
use warren_api::ticket::TicketRequest;

pub async fn create(State(state): State<AppState>, body: bytes::Bytes) -> ApiResult<Response> {
    let req: TicketRequest = parse_json(&body)?;
    let ttl = req.validate()?;
    let ticket = state.tickets.issue(&req.sandbox, req.scope, ttl);
    Ok((http::StatusCode::CREATED, axum::Json(ticket)).into_response())
}
