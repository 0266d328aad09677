//! `/healthz` and `/metrics` (no auth).

use crate::state::AppState;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::Json;

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

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    state.mgr.count_states();
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
