//! Route table of the public API.

pub(crate) mod body;
mod body_limit;
mod egress;
mod health;
mod join_tokens;
mod keys;
mod openapi;
mod ports;
mod proxy;
pub(crate) mod sandboxes;
mod secrets;
mod snapshot_quota;
mod snapshots;
mod tenants;
mod terminals;
mod tickets;
mod transfer;
mod usage;
pub(crate) mod validate;
mod web;

use crate::cluster;
use crate::error::ApiErrorResponse;
use crate::middleware;
use crate::state::AppState;
use axum::routing::{any, delete, get, post, put};
use axum::Router;
use warren_api::{ApiError, ErrorCode};

pub fn router(state: AppState) -> Router {
    // Sandbox routes go to the sandbox's owner (routing runs after authentication).
    let sandbox = Router::new()
        .route(
            "/v1/sandboxes/{id}",
            put(sandboxes::put)
                .get(sandboxes::get)
                .delete(sandboxes::delete),
        )
        .route("/v1/sandboxes/{id}/snapshots", post(snapshots::create))
        .route("/v1/sandboxes/{id}/restore", post(snapshots::restore))
        .route("/v1/sandboxes/{id}/fork", post(snapshots::fork))
        .route("/v1/sandboxes/{id}/sleep", post(snapshots::sleep))
        .route(
            "/v1/sandboxes/{id}/terminals/{name}",
            get(terminals::open).delete(terminals::close),
        )
        .route(
            "/v1/sandboxes/{id}/ports",
            post(ports::expose).get(ports::list),
        )
        .route("/v1/sandboxes/{id}/ports/{port}", delete(ports::unexpose))
        .route(
            "/v1/sandboxes/{id}/egress",
            get(egress::get).put(egress::put),
        )
        .route("/v1/sandboxes/{id}/{*rest}", any(proxy::forward))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            cluster::route::route_sandbox,
        ));
    let v1 = Router::new()
        .route("/v1/sandboxes", get(sandboxes::list))
        .route("/v1/snapshots", get(snapshots::list))
        .route(
            "/v1/snapshots/{sid}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .route("/v1/tickets", post(tickets::create))
        .route("/v1/secrets", get(secrets::list))
        .route(
            "/v1/secrets/{name}",
            put(secrets::put).get(secrets::get).delete(secrets::delete),
        )
        .route("/v1/usage", get(usage::get))
        .route("/v1/keys", post(keys::create).get(keys::list))
        .route("/v1/keys/{key}", delete(keys::delete))
        .route("/v1/tenants", get(tenants::list))
        .route("/v1/tenants/{tenant}", put(tenants::put).get(tenants::get))
        .route("/v1/cluster", get(cluster::api::get))
        .route("/v1/cluster/nodes/{node}/drain", post(cluster::api::drain))
        .route("/v1/cluster/nodes/{node}", delete(cluster::api::remove))
        .route("/v1/cluster/backup", get(cluster::backup::backup))
        .route(
            "/v1/cluster/join-tokens",
            post(join_tokens::create).get(join_tokens::list),
        )
        .route(
            "/v1/cluster/join-tokens/{token}",
            delete(join_tokens::delete),
        )
        .route(
            "/v1/cluster/join-policy",
            get(join_tokens::get_policy).put(join_tokens::put_policy),
        )
        .merge(sandbox)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::require_api_key,
        ));
    let routes = Router::new()
        .route("/", get(web::index))
        .route("/ui/{name}", get(web::file))
        .route("/healthz", get(health::healthz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(openapi::document))
        .route("/internal/v1/join", post(cluster::join::join))
        .merge(v1)
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(state.max_json_body))
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            body_limit::in_api_format,
        ))
        // Preview hosts never reach the API (or its authentication).
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::preview::intercept,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::node_and_metrics,
        ));
    crate::request_log::around(routes, &state).with_state(state)
}

async fn not_found(method: http::Method, uri: http::Uri) -> ApiErrorResponse {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such endpoint: {method} {}", uri.path()),
    )
    .into()
}
