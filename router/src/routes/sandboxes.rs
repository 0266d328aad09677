//! `PUT/GET/DELETE /v1/sandboxes/{id}` and `GET /v1/sandboxes`.

use crate::auth::Principal;
use crate::cluster::gather::from_other_nodes;
use crate::cluster::FromPeer;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use warren_api::sandbox::SandboxList;
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
    if req.egress.is_some() {
        let set = state.mgr.egress_policy(&id).await?;
        crate::cluster::policy::replicate(&state, &id, &set).await?;
    }
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

/// `GET /v1/sandboxes`: from a client, gathered from every node that is not down; from a
/// peer, this node's own.
pub async fn list(
    State(state): State<AppState>,
    RawQuery(q): RawQuery,
    axum::Extension(who): axum::Extension<Principal>,
    req: axum::extract::Request,
) -> ApiResult<Response> {
    let mut f = list_filter(q.as_deref())?;
    // A tenant key lists its own tenant's sandboxes only (an admin may pick one).
    if let Some(t) = who.only_tenant() {
        f.tenant = Some(t.to_string());
    }
    let mut all = state.mgr.list(&f);
    if req.extensions().get::<FromPeer>().is_some() {
        return Ok(Json(all).into_response());
    }
    let path = format!("/v1/sandboxes?{}", q.clone().unwrap_or_default());
    let parts: Vec<SandboxList> =
        from_other_nodes(&state, &path, &who, "its list of sandboxes").await?;
    // Each node returned its first `limit` ids after the cursor; the merged page is the first
    // `limit` of those, and there is more if the merge overflows or any node had more.
    let mut more = all.next_cursor.is_some();
    for part in parts {
        more |= part.next_cursor.is_some();
        all.sandboxes.extend(part.sandboxes);
    }
    all.sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
    all.sandboxes.dedup_by(|a, b| a.id == b.id);
    let limit = f.limit.clamp(1, 1000);
    more |= all.sandboxes.len() > limit;
    all.sandboxes.truncate(limit);
    all.next_cursor = if more {
        all.sandboxes.last().map(|s| s.id.clone())
    } else {
        None
    };
    Ok(Json(all).into_response())
}

fn list_filter(q: Option<&str>) -> Result<ListFilter, ApiError> {
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
            "tenant" => {
                warren_api::keys::validate_tenant(&v)?;
                f.tenant = Some(v.into_owned());
            }
            other => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {other:?}"
                )))
            }
        }
    }
    Ok(f)
}
