//! The public HTTP API of a node (`shared/api.md`): authentication, request ids, the error
//! model, sandbox lifecycle routes, and a validating proxy that hands sandbox operations to
//! the sandbox's guest agent through `warren-node`.
//!
//! Errors become HTTP in exactly one place (`error.rs`). This crate must not talk to Docker
//! or guests directly: everything below the HTTP surface goes through `warren-node`.

pub mod error;
pub mod metrics;
pub mod middleware;
pub mod routes;
pub mod state;

pub use state::AppState;

use axum::Router;
use std::future::Future;

/// The whole API as an axum router.
pub fn app(state: AppState) -> Router {
    routes::router(state)
}

/// Serves the API on `listener` until `shutdown` resolves, then drains open requests.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, app(state))
        .with_graceful_shutdown(shutdown)
        .await
}
