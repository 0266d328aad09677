//! The public HTTP API of a node (`docs/api.md`): authentication, request ids, the error
//! model, sandbox lifecycle routes, and a validating proxy that hands sandbox operations to
//! the sandbox's guest agent through `warren-node`.
//!
//! In a cluster, `cluster/` routes each sandbox request to the node that owns it (committing a
//! placement through Raft for a new id) and forwards it over QUIC; peers' forwarded requests
//! run through the same router. Errors become HTTP in exactly one place (`error.rs`). This
//! crate must not talk to Docker or guests directly: everything below the HTTP surface goes
//! through `warren-node`, and consensus through `warren-consensus`.

pub mod auth;
pub mod cluster;
pub mod egress;
pub mod error;
pub mod listener;
pub mod metrics;
pub mod middleware;
pub mod preview;
pub mod request_log;
pub mod route_label;
pub mod routes;
pub mod state;
pub mod tickets;

pub use state::AppState;

use axum::Router;
use std::future::Future;

/// The whole API as an axum router.
pub fn app(state: AppState) -> Router {
    let app = routes::router(state.clone());
    state
        .self_app
        .write()
        .expect("self app lock")
        .get_or_insert_with(|| app.clone());
    app
}

/// Starts serving peers (Raft RPCs and forwarded requests) on the node's QUIC endpoint.
pub fn serve_peers(state: &AppState) -> tokio::task::JoinHandle<()> {
    let server = std::sync::Arc::new(cluster::peer_server::PeerServer {
        cluster: state.cluster.cluster.clone(),
        app: app(state.clone()),
    });
    state.cluster.cluster.peers().serve(server)
}

/// Serves the API on `listener` (TLS when `tls` is given) within `limits` until `shutdown`
/// resolves, then drains open requests for at most `limits.drain_timeout`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    tls: Option<std::sync::Arc<listener::tls::ReloadingCert>>,
    limits: listener::ListenerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = listener::ListenerMetrics::new(&state.registry);
    let served =
        listener::serve(listener, tls, app(state.clone()), limits, metrics, shutdown).await;
    // Served: the router no longer needs to call itself.
    state.let_go_of_router();
    served
}
