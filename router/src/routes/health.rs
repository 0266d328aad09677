//! `/healthz` and `/metrics` (no auth).

use crate::state::AppState;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;

pub async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    let cfg = state.mgr.config();
    Json(serde_json::json!({
        "status": "ok",
        "node": cfg.node_id,
        "region": cfg.region,
        "version": env!("CARGO_PKG_VERSION"),
        "api_version": warren_api::API_VERSION,
        "disk_limits": state.mgr.disk_limits(),
    }))
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let mut out = String::new();
    let encoder = prometheus::TextEncoder::new();
    if let Err(e) = encoder.encode_utf8(&state.registry.gather(), &mut out) {
        out = format!("# cannot encode metrics: {e}\n");
    }
    (
        [(http::header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        out,
    )
}
