//! Cluster coordination with openraft 0.9 (storage v2 API) over QUIC.
//!
//! - `state`: the replicated state machine (nodes, placements, the cluster CA) and its
//!   commands — pure and deterministic.
//! - `placement`: rendezvous ownership (pure). `membership`: voter selection (pure).
//! - `store`: the openraft log store and state machine on `warren-storage` (RocksDB).
//! - `rpc` + `network`: Raft and cluster RPCs on QUIC streams (`warren-transport`).
//! - `timing`, `call_deadlines`, `raft_runtime`: Raft's timing from the heartbeat, and each
//!   call's deadline from the round trip measured to its member (or the operator's, per
//!   region).
//! - `cluster`: the running member: bootstrap, proposals forwarded to the leader, the
//!   leader's supervisor (liveness, learners, voters), and the leases that fence a node cut
//!   off from the majority.
//! - `liveness`: what a probe changes in a node's state (pure): down when silent, up only
//!   when heard.
//! - `lease`: the lease rules (pure): read-index grants, and when the leader may hand a
//!   node's sandboxes on.
//! - `addresses`: a member that starts on other addresses says so, and Raft follows (pure).
//! - `authority`: who may say what (pure): a peer speaks only as the node id its
//!   certificate binds, removed nodes are refused, sandbox commands come from their owner.
//! - `certs`: node certificates: signed only by nodes holding the CA key (never in the
//!   state), only for a member's registered key; renewed at half their lifetime.
//! - `secrets`: sealing secrets' values with the cluster's secrets key (never in the log).
//! - `join`: admission of a new node (join-token proof over every field, key-bound names).
//! - `join_tokens`: issued join tokens (pure): expiry, single use, spent by the
//!   registration they admit.
//! - `metrics`: the Raft and cluster series of `/metrics`, read when scraped; `latency`:
//!   the histograms of log writes and served AppendEntries they include.
//!
//! Must not depend on Docker, HTTP routing or sandbox code.

pub mod addresses;
pub mod authority;
pub mod call_deadlines;
pub mod certs;
pub mod cluster;
pub mod failover;
pub mod generation;
pub mod join;
pub mod join_tokens;
pub mod latency;
pub mod lease;
pub mod liveness;
pub mod membership;
pub mod metrics;
pub mod network;
pub mod placement;
pub mod placements;
pub mod raft_runtime;
pub mod recover;
pub mod rpc;
pub mod secrets;
pub mod snapshot_frame;
pub mod state;
pub mod state_codec;
pub mod store;
pub mod timing;
pub mod types;

pub use cluster::{Cluster, ClusterConfig, ClusterError};
pub use state::{
    ClusterState, Command, CommandResult, Handoff, NodeId, NodeRecord, NodeState, Placement,
    PlacementState,
};
pub use types::{Peer, TypeConfig};
