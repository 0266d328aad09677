//! The cluster side of the API: which node owns a sandbox (`route_decision`, `route`),
//! forwarding to it over QUIC, the peer server that receives forwarded requests, the
//! `/v1/cluster` and join endpoints, egress policies as cluster state (`policy`), and
//! secrets resealed after a key rotation (`reseal`). What keeps this node's sandboxes and
//! the placements in agreement — moves, failover, checkpoints, recovery points and the
//! fence — is the controller, `warren_control`.

pub mod api;
pub mod backup;
pub mod forward;
pub mod gather;
pub mod join;
pub mod peer_server;
pub mod policy;
pub mod reseal;
pub mod route;
mod route_decision;

use std::sync::Arc;
use warren_consensus::Cluster;

/// Cluster context of a node's API.
pub struct ClusterCtx {
    pub cluster: Arc<Cluster>,
    /// Token that joining nodes must prove they know.
    pub join_token: String,
    /// Seals secrets before they are proposed, opens them for the egress proxy.
    pub secrets_key: warren_consensus::secrets::SecretsKey,
    /// Until when this node vouches for its sandboxes to their guests (`fence`).
    pub fence_file: Arc<warren_node::runtime::fence_file::FenceFile>,
    /// What `GET /v1/cluster/backup` puts in its tar (`backup`).
    pub backup: backup::BackupSources,
}

/// Marks a request that arrived from a peer over QUIC (never set by public clients).
#[derive(Debug, Clone)]
pub struct FromPeer {
    pub peer: String,
}

/// Header with the placement epoch the entry node routed by.
pub const HEADER_EPOCH: &str = "x-warren-placement-epoch";
