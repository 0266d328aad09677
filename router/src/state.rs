//! What every handler shares.

use crate::cluster::ClusterCtx;
use std::sync::Arc;
use warren_node::SandboxManager;

#[derive(Clone)]
pub struct AppState {
    pub mgr: Arc<SandboxManager>,
    pub cluster: Arc<ClusterCtx>,
    /// The node's bootstrap key: an admin of the default tenant (`auth`). Other keys live
    /// in the cluster state.
    pub api_key: Arc<str>,
    /// When `/v1/keys` keys were last used, as this node saw them.
    pub last_used: Arc<crate::auth::last_used::LastUsed>,
    /// Requests per key entering at this node (`auth::rate`).
    pub rate: Arc<crate::auth::rate::KeyLimiter>,
    /// Refused keys and tickets per client address entering at this node.
    pub key_guesses: Arc<crate::auth::rate::GuessLimiter>,
    /// Wrong preview tokens per client address entering at this node.
    pub preview_guesses: Arc<crate::auth::rate::GuessLimiter>,
    /// What `GET /metrics` asks for besides an admin key (none: open).
    pub metrics_token: Option<Arc<str>>,
    pub node_id: Arc<str>,
    pub registry: prometheus::Registry,
    pub metrics: crate::metrics::RouterMetrics,
    /// This node's own router, for calls that must be routed like a client's (fork).
    /// Emptied when the API stops serving: the router holds this state, so until then they
    /// keep each other (and the node's manager, cluster and stores) alive.
    pub self_app: Arc<std::sync::RwLock<Option<axum::Router>>>,
    pub tickets: Arc<crate::tickets::Tickets>,
    /// Largest JSON request body, bytes (`max_json_body_mb`); larger ones get 413.
    pub max_json_body: usize,
}

/// `max_json_body` unless the node's settings say otherwise: 32 MiB.
pub const DEFAULT_MAX_JSON_BODY: usize = 32 * 1024 * 1024;

impl AppState {
    /// Lets go of the router the state holds to call itself (`crate::app`): that ends the
    /// cycle through which the router and the state would outlive the node. Once the node
    /// has served, or when its start failed.
    pub fn let_go_of_router(&self) {
        self.self_app.write().expect("self app lock").take();
    }

    /// What the cluster's controller (`warren_control`) works with on this node.
    pub fn control(&self) -> warren_control::Control {
        warren_control::Control {
            cluster: self.cluster.cluster.clone(),
            mgr: self.mgr.clone(),
            fence_file: self.cluster.fence_file.clone(),
        }
    }

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
            tickets: Arc::new(crate::tickets::Tickets::new(&api_key)),
            api_key,
            last_used: Arc::default(),
            metrics_token: None,
            preview_guesses: Arc::new(crate::auth::rate::GuessLimiter::new(0)),
            key_guesses: Arc::new(crate::auth::rate::GuessLimiter::new(0)),
            rate: Arc::new(crate::auth::rate::KeyLimiter::new(
                crate::auth::rate::KeyRate {
                    per_second: 0,
                    burst: 0,
                },
            )),
            registry,
            metrics,
            self_app: Arc::default(),
            max_json_body: DEFAULT_MAX_JSON_BODY,
        })
    }
}
