//! Request ids, the node header, metrics, and bearer authentication.

use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use std::time::Instant;
use subtle::ConstantTimeEq;
use tracing::Instrument;
use warren_api::{ApiError, ErrorCode, HEADER_NODE, HEADER_REQUEST_ID};

/// Keeps a client's `x-request-id` when it is sane, else makes one; adds it and
/// `x-warren-node` to every response, and records the request's latency.
pub async fn request_context(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let given = req
        .headers()
        .get(HEADER_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string);
    let id = given.unwrap_or_else(|| hex::encode(rand::random::<[u8; 8]>()));
    let value = HeaderValue::from_str(&id).expect("ascii graphic");
    req.headers_mut().insert(HEADER_REQUEST_ID, value.clone());
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let role = if req.extensions().get::<crate::cluster::FromPeer>().is_some() {
        "owner"
    } else {
        "entry"
    };
    let sandbox = path
        .strip_prefix("/v1/sandboxes/")
        .and_then(|r| r.split('/').next())
        .unwrap_or_default()
        .to_string();
    let span = tracing::info_span!("request", request_id = %id, method = %method, path = %path, sandbox_id = %sandbox, node_id = %state.node_id, region = %state.mgr.config().region);
    let mut resp = next.run(req).instrument(span.clone()).await;
    // The access log: one line per request, in its span.
    span.in_scope(|| {
        tracing::info!(
            status = resp.status().as_u16(),
            ms = started.elapsed().as_millis() as u64,
            "request"
        )
    });
    resp.headers_mut().insert(HEADER_REQUEST_ID, value);
    // A forwarded response already names the node that ran the operation.
    if !resp.headers().contains_key(HEADER_NODE) {
        if let Ok(node) = HeaderValue::from_str(&state.node_id) {
            resp.headers_mut().insert(HEADER_NODE, node);
        }
    }
    state
        .metrics
        .requests
        .with_label_values(&[
            method.as_str(),
            &crate::route_label::route_of(&path),
            resp.status().as_str(),
            role,
        ])
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// `Authorization: Bearer <key>` on every `/v1` call, compared in constant time.
pub async fn require_api_key(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    if presented.is_none() {
        if let Some(ticket) = ticket_of(req.uri().query()) {
            let redeemed = match (req.method() == http::Method::GET)
                .then(|| crate::tickets::scope_of(req.uri().path()))
                .flatten()
            {
                Some((sandbox, scope)) => state.tickets.redeem(&ticket, sandbox, scope),
                None => Err(ApiError::new(
                    ErrorCode::Unauthorized,
                    "tickets open only terminals, watches and process logs; send the API key",
                )),
            };
            return match redeemed {
                Ok(()) => next.run(req).await,
                Err(e) => ApiErrorResponse(e).into_response(),
            };
        }
    }
    let ok = presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(state.api_key.as_bytes())));
    if !ok {
        let msg = if presented.is_none() {
            "missing bearer token"
        } else {
            "invalid API key"
        };
        return ApiErrorResponse(ApiError::new(ErrorCode::Unauthorized, msg)).into_response();
    }
    next.run(req).await
}

fn ticket_of(query: Option<&str>) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == "ticket")
        .map(|(_, v)| v.into_owned())
}
