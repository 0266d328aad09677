//! Route table of the public API.

mod body;
mod health;
mod proxy;
mod sandboxes;
mod validate;

use crate::error::ApiErrorResponse;
use crate::middleware;
use crate::state::AppState;
use axum::routing::{any, get, put};
use axum::Router;
use warren_api::{ApiError, ErrorCode};

pub fn router(state: AppState) -> Router {
    let v1 = Router::new()
        .route("/sandboxes", get(sandboxes::list))
        .route(
            "/sandboxes/{id}",
            put(sandboxes::put)
                .get(sandboxes::get)
                .delete(sandboxes::delete),
        )
        .route("/sandboxes/{id}/{*rest}", any(proxy::forward))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::require_api_key,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .nest("/v1", v1)
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::request_context,
        ))
        .with_state(state)
}

async fn not_found(method: http::Method, uri: http::Uri) -> ApiErrorResponse {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such endpoint: {method} {}", uri.path()),
    )
    .into()
}
