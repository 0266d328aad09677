//! `/healthz` (no auth) and `/metrics` (open, or behind the metrics token or an admin key).

use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use warren_api::{ApiError, ErrorCode};

/// 200 when the node serves; 503 with the reasons when it cannot start sandboxes safely
/// (a broken guarantee of `warren_node::safety`: no firewall, no user namespaces).
pub async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let cfg = state.mgr.config();
    let problems = state.mgr.safety().problems();
    let status = if problems.is_empty() {
        http::StatusCode::OK
    } else {
        http::StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Json(serde_json::json!({
        "status": if problems.is_empty() { "ok" } else { "unsafe" },
        "problems": problems,
        "node": cfg.node_id,
        "region": cfg.region,
        "version": env!("CARGO_PKG_VERSION"),
        "api_version": warren_api::API_VERSION,
        "disk_limits": state.mgr.disk_limits(),
        "isolation": crate::cluster::api::offered(),
        "user_namespaces": state.mgr.user_namespaces(),
        "firewall": cfg.firewall,
        "host_work": state.mgr.host_work().status(),
    }));
    (status, body)
}

/// Whether `headers` carry what `/metrics` asks for: nothing when no token is set, else the
/// token or an admin key.
fn may_scrape(state: &AppState, headers: &http::HeaderMap) -> bool {
    let Some(token) = &state.metrics_token else {
        return true;
    };
    let Some(presented) = crate::auth::bearer_of(headers) else {
        return false;
    };
    use subtle::ConstantTimeEq;
    bool::from(presented.as_bytes().ct_eq(token.as_bytes()))
        || crate::auth::key_principal(state, presented).is_some_and(|p| p.admin)
}

pub async fn metrics(State(state): State<AppState>, headers: http::HeaderMap) -> Response {
    if !may_scrape(&state, &headers) {
        return ApiErrorResponse(ApiError::new(
            ErrorCode::Unauthorized,
            "/metrics needs the metrics token or an admin key as a bearer token",
        ))
        .into_response();
    }
    state.mgr.sample_gauges();
    let mut out = String::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = encoder.encode_utf8(&state.registry.gather(), &mut out) {
        out = format!("# cannot encode metrics: {e}\n");
    }
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
        .into_response()
}
