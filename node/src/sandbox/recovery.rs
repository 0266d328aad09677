//! Where a sandbox's recovery points are recorded. A sandbox that sleeps or is checkpointed
//! gets a snapshot that another node restores if this one dies; in a cluster that snapshot
//! counts only once the cluster's placement names it, so the manager records it there
//! before the container goes and before any older snapshot is deleted, and deletes a
//! snapshot only when nothing survivors would restore refers to it. The manager knows no
//! cluster: the router implements this boundary on the cluster's state; a node of its own
//! uses [`NodeLocal`]. The same placement says whose sandbox it is (`tenant_of`).

use super::manager::HandoffData;
use async_trait::async_trait;
use warren_api::ApiError;

#[async_trait]
pub trait RecoveryPoints: Send + Sync {
    /// Records `h` as the recovery point of sandbox `id`. An error: it was not recorded, so
    /// the caller keeps the container and every older snapshot.
    async fn record(&self, id: &str, h: &HandoffData) -> Result<(), ApiError>;

    /// Whether a recovery point others would restore refers to `snapshot` (it is never
    /// deleted then). When in doubt (this node's view of the cluster may be stale): true.
    fn in_use(&self, snapshot: &str) -> bool;

    /// Whether this node owns sandbox `id` by a current view (it may tidy the sandbox's old
    /// snapshots). When in doubt: false.
    fn owns(&self, id: &str) -> bool;

    /// The tenant sandbox `id` belongs to, as its placement says (the same record that holds
    /// its recovery point): what its snapshots and usage are recorded under, and which
    /// snapshots it may start from. Unknown: the default tenant.
    fn tenant_of(&self, _id: &str) -> String {
        warren_api::keys::DEFAULT_TENANT.to_string()
    }

    /// Whether a new sandbox `id` may be made on this node: where placements exist, only
    /// when the current one names this node. Asked under the sandbox's lock, so that a
    /// create never runs after [`RecoveryPoints::release_unused`] gave the id up.
    fn placed_here(&self, _id: &str) -> bool {
        true
    }

    /// A create of `id` was refused here for want of room and nothing of the sandbox
    /// exists: where it was placed on this node with no recovery point, the placement is
    /// given up, so that a retry is placed anew (on a node with room). Called under the
    /// sandbox's lock.
    async fn release_unused(&self, _id: &str) -> Result<(), ApiError> {
        Ok(())
    }
}

/// A node on its own: its records are the only recovery points.
pub struct NodeLocal;

#[async_trait]
impl RecoveryPoints for NodeLocal {
    async fn record(&self, _id: &str, _h: &HandoffData) -> Result<(), ApiError> {
        Ok(())
    }

    fn in_use(&self, _snapshot: &str) -> bool {
        false
    }

    fn owns(&self, _id: &str) -> bool {
        true
    }
}
