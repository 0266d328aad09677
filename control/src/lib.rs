//! The cluster's controller on each node. Routing (`warren_router::cluster`) decides where a
//! request goes; the controller keeps what runs on this node in agreement with the committed
//! placements:
//!
//! * `migrate` — the per-node loop: sandboxes move out to their rendezvous winner and in
//!   with their handoff, the leader fails over the placements of dead nodes in bounded
//!   batches, running sandboxes are checkpointed, leftover copies are set aside.
//! * `checkpoint` — which sandboxes are due a checkpoint (a pure decision), and taking
//!   them several at once.
//! * `fence` — while this node holds no lease from the majority its sandboxes are frozen,
//!   and the fence file tells their guests how long they may run without this process.
//! * `recovery` — a sleep's or checkpoint's snapshot counts as a sandbox's recovery point
//!   once its placement names it.
//! * `copies` — whether this node's copy of a sandbox is the one the cluster means.
//! * `handoff` — what a new owner takes a sandbox over from.

pub mod checkpoint;
pub mod copies;
pub mod fence;
pub mod handoff;
pub mod migrate;
pub mod recovery;

use std::sync::Arc;
use warren_consensus::Cluster;
use warren_node::runtime::fence_file::FenceFile;
use warren_node::sandbox::manager::SandboxManager;

/// What the controller works with on a node: the cluster (its applied state, its lease,
/// proposals), the node's sandboxes, and the fence file the sandboxes' guests watch.
#[derive(Clone)]
pub struct Control {
    pub cluster: Arc<Cluster>,
    pub mgr: Arc<SandboxManager>,
    pub fence_file: Arc<FenceFile>,
}
