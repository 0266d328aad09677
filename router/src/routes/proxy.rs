//! `/v1/sandboxes/{id}/{*rest}`: checked here, then run by the sandbox's guest agent.

use super::body::GuestResponseBody;
use super::validate::{classify, BodyKind};
use crate::error::ApiResult;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::response::Response;
use http_body_util::BodyExt;
use warren_node::sandbox::manager::Payload;

pub async fn forward(
    State(state): State<AppState>,
    Path((id, rest)): Path<(String, String)>,
    req: Request,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    let (parts, body) = req.into_parts();
    let query = parts.uri.query();
    let kind = classify(&parts.method, &rest, query)?;
    let payload = match kind {
        BodyKind::Empty => Payload::Bytes(bytes::Bytes::new()),
        BodyKind::Json(check) => {
            let bytes = http_body_util::Limited::new(body, state.max_json_body)
                .collect()
                .await
                .map_err(|e| super::body_limit::read_error(&*e, state.max_json_body))?
                .to_bytes();
            check(&bytes)?;
            Payload::Bytes(bytes)
        }
        BodyKind::Stream => Payload::Stream(body.map_err(|e| Box::new(e) as _).boxed_unsync()),
    };
    // The raw path keeps its percent-encoding: the guest decodes file paths itself.
    let raw_path = parts.uri.path();
    let guest_path = raw_path
        .split_once(&format!("/sandboxes/{id}/"))
        .map(|(_, r)| r)
        .unwrap_or(&rest);
    let pq = match query {
        Some(q) => format!("/{guest_path}?{q}"),
        None => format!("/{guest_path}"),
    };
    // Active from here: a long call keeps the sandbox awake and in place until it answers.
    let activity = state.mgr.activity(&id);
    let upstream = state
        .mgr
        .forward(&id, parts.method.clone(), &pq, &parts.headers, payload)
        .await?;
    let (up, incoming) = upstream.into_parts();
    let sse = up
        .headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(warren_api::sse::CONTENT_TYPE));
    let mut resp = Response::new(Body::new(GuestResponseBody::new(incoming, sse, activity)));
    *resp.status_mut() = up.status;
    for name in [
        http::header::CONTENT_TYPE,
        http::header::CONTENT_LENGTH,
        http::header::CACHE_CONTROL,
    ] {
        if let Some(v) = up.headers.get(&name) {
            resp.headers_mut().insert(name, v.clone());
        }
    }
    if sse {
        // Tell reverse proxies in front of the node not to buffer event streams.
        resp.headers_mut()
            .insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    }
    Ok(resp)
}
