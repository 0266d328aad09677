//! What every handler shares.

use crate::cluster::ClusterCtx;
use std::sync::Arc;
use warren_node::SandboxManager;

#[derive(Clone)]
pub struct AppState {
    pub mgr: Arc<SandboxManager>,
    pub cluster: Arc<ClusterCtx>,
    /// The bearer token every `/v1` call must present.
    pub api_key: Arc<str>,
    pub node_id: Arc<str>,
    pub registry: prometheus::Registry,
    pub metrics: crate::metrics::RouterMetrics,
    /// This node's own router, for calls that must be routed like a client's (fork).
    pub self_app: Arc<std::sync::OnceLock<axum::Router>>,
    pub tickets: Arc<crate::tickets::Tickets>,
}

impl AppState {
    pub fn new(
        mgr: Arc<SandboxManager>,
        cluster: Arc<ClusterCtx>,
        api_key: &str,
        registry: prometheus::Registry,
    ) -> prometheus::Result<Self> {
        let metrics = crate::metrics::RouterMetrics::register(&registry)?;
        let api_key: Arc<str> = api_key.into();
        Ok(AppState {
            node_id: mgr.config().node_id.as_str().into(),
            mgr,
            cluster,
            tickets: Arc::new(crate::tickets::Tickets::new(api_key.clone())),
            api_key,
            registry,
            metrics,
            self_app: Arc::new(std::sync::OnceLock::new()),
        })
    }
}
