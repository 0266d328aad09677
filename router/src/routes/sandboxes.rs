//! `PUT/GET/DELETE /v1/sandboxes/{id}` and `GET /v1/sandboxes`.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use warren_api::sandbox::{
    parse_label_filter, validate_region, CreateSandboxRequest, SandboxState,
};
use warren_api::{ApiError, ErrorCode};
use warren_node::sandbox::manager::ListFilter;

pub async fn put(
    State(state): State<AppState>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let req: CreateSandboxRequest = warren_api::error::parse_json(&body)?;
    let (sandbox, created) = state.mgr.put(&id, &req).await?;
    let status = if created {
        http::StatusCode::CREATED
    } else {
        http::StatusCode::OK
    };
    Ok((status, Json(sandbox)).into_response())
}

pub async fn get(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let sandbox = state.mgr.get(&id).ok_or_else(|| {
        ApiError::new(
            ErrorCode::SandboxNotFound,
            format!("sandbox {id} not found"),
        )
    })?;
    Ok(Json(sandbox).into_response())
}

pub async fn delete(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    state.mgr.delete(&id).await?;
    Ok(http::StatusCode::NO_CONTENT.into_response())
}

pub async fn list(State(state): State<AppState>, RawQuery(q): RawQuery) -> ApiResult<Response> {
    let mut f = ListFilter {
        limit: 100,
        ..Default::default()
    };
    for (k, v) in form_urlencoded::parse(q.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "state" => f.state = Some(SandboxState::parse(&v)?),
            "label" => f.labels.push(parse_label_filter(&v)?),
            "region" => {
                validate_region(&v)?;
                f.region = Some(v.into_owned());
            }
            "limit" => {
                f.limit = v
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=1000).contains(n))
                    .ok_or_else(|| ApiError::invalid("limit must be between 1 and 1000"))?
            }
            "cursor" => f.cursor = Some(v.into_owned()),
            other => {
                return Err(ApiError::invalid(format!("unknown query parameter {other:?}")).into())
            }
        }
    }
    Ok(Json(state.mgr.list(&f)).into_response())
}
