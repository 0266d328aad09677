//! Recovery points as cluster state: a sandbox's sleep or checkpoint snapshot counts once the
//! committed placement names it (`Command::Checkpoint`), and a snapshot any placement names
//! is never deleted (`warren_node::sandbox::recovery`).

use crate::copies::{self, LocalCopy};
use async_trait::async_trait;
use std::sync::Arc;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::{Cluster, Command, CommandResult, Handoff, NodeId, Placement};
use warren_node::sandbox::manager::HandoffData;
use warren_node::sandbox::record::SandboxRecord;
use warren_node::sandbox::recovery::RecoveryPoints;

pub struct ClusterRecoveryPoints {
    cluster: Arc<Cluster>,
}

impl ClusterRecoveryPoints {
    pub fn new(cluster: Arc<Cluster>) -> Arc<Self> {
        Arc::new(ClusterRecoveryPoints { cluster })
    }
}

/// What recording a recovery point takes, from the applied state.
#[derive(Debug, PartialEq, Eq)]
enum Need {
    /// Nothing: a node alone, or a sandbox that was never placed (it predates the cluster).
    Nothing,
    /// A commit on the placement at this epoch.
    Commit(u64),
    /// The placement names another node: this copy is not the sandbox's.
    NotOwner,
}

/// Pure: from the number of nodes, the sandbox's placement, if any, and the epoch of the
/// copy whose recovery point it is (none: unknown, trusted). Only the owner's current copy
/// commits (`copies::judge`): not one another node owns, nor a stale one.
fn need(nodes: usize, placement: Option<&Placement>, me: NodeId, copy_epoch: Option<u64>) -> Need {
    if nodes < 2 {
        return Need::Nothing;
    }
    match (copies::judge(placement, me, copy_epoch), placement) {
        (LocalCopy::Current, Some(p)) => Need::Commit(p.epoch),
        (LocalCopy::Elsewhere | LocalCopy::Stale, _) => Need::NotOwner,
        _ => Need::Nothing,
    }
}

fn need_of(cl: &Cluster, id: &str, copy_epoch: Option<u64>) -> Need {
    cl.read(|s| need(s.nodes.len(), s.placements.get(id), cl.id, copy_epoch))
}

#[async_trait]
impl RecoveryPoints for ClusterRecoveryPoints {
    async fn record(&self, id: &str, h: &HandoffData) -> Result<(), ApiError> {
        let cl = &self.cluster;
        let copy_epoch = serde_json::from_str::<SandboxRecord>(&h.record)
            .ok()
            .and_then(|r| r.epoch);
        let epoch = match need_of(cl, id, copy_epoch) {
            Need::Nothing => return Ok(()),
            Need::Commit(epoch) => epoch,
            Need::NotOwner => {
                return Err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("this node's copy of sandbox {id} is not the owner's (another node owns it, or it is older than the cluster's); retry"),
                ))
            }
        };
        let cmd = Command::Checkpoint {
            sandbox: id.to_string(),
            epoch,
            handoff: Handoff {
                record: h.record.clone(),
                snapshot: h.snapshot.clone(),
                resume: h.resume,
            },
        };
        match cl.propose(cmd).await.map_err(ApiError::from)? {
            CommandResult::Placement { applied: true, .. } => Ok(()),
            other => Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("the recovery point of {id} was not recorded ({other:?}); retry"),
            )),
        }
    }

    fn in_use(&self, snapshot: &str) -> bool {
        let cl = &self.cluster;
        if cl.read(|s| s.nodes.len()) >= 2 && !cl.has_lease() {
            return true;
        }
        cl.read(|s| s.placements.snapshot_in_use(snapshot))
    }

    fn owns(&self, id: &str) -> bool {
        let cl = &self.cluster;
        match need_of(cl, id, None) {
            Need::Nothing => true,
            Need::Commit(_) => cl.has_lease(),
            Need::NotOwner => false,
        }
    }

    fn tenant_of(&self, id: &str) -> String {
        self.cluster.read(|s| {
            s.placements
                .get(id)
                .map_or(warren_api::keys::DEFAULT_TENANT, |p| p.tenant())
                .to_string()
        })
    }

    fn placed_here(&self, id: &str) -> bool {
        let cl = &self.cluster;
        cl.read(|s| new_sandbox_placed_here(s.nodes.len(), s.placements.get(id), cl.id))
    }

    async fn release_unused(&self, id: &str) -> Result<(), ApiError> {
        let cl = &self.cluster;
        let Some(epoch) = cl.read(|s| unused_placement(s.placements.get(id), cl.id)) else {
            return Ok(());
        };
        let cmd = Command::Unplace {
            sandbox: id.to_string(),
            epoch,
        };
        cl.propose(cmd).await.map_err(ApiError::from)?;
        tracing::info!(sandbox_id = %id, epoch, "a create was refused for want of room: its placement is given up");
        Ok(())
    }
}

/// Pure: whether a new sandbox may be made on `me` given its placement. A node alone makes
/// any; in a cluster only the node the current placement names, while it is active.
fn new_sandbox_placed_here(nodes: usize, placement: Option<&Placement>, me: NodeId) -> bool {
    nodes < 2
        || placement
            .is_some_and(|p| p.node == me && p.state == warren_consensus::PlacementState::Active)
}

/// Pure: the epoch of a placement of a sandbox that holds nothing yet (it names `me`, is
/// active, and has no recovery point), which may be given up; none otherwise.
fn unused_placement(placement: Option<&Placement>, me: NodeId) -> Option<u64> {
    placement
        .filter(|p| {
            p.node == me
                && p.state == warren_consensus::PlacementState::Active
                && p.handoff.is_none()
        })
        .map(|p| p.epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(node: NodeId, epoch: u64, owner_since: u64) -> Placement {
        Placement {
            sandbox: "sb".into(),
            node,
            epoch,
            owner_since,
            state: warren_consensus::PlacementState::Active,
            handoff: None,
            egress: None,
            tenant: None,
            size: None,
        }
    }

    #[test]
    fn only_the_owner_in_a_real_cluster_commits() {
        assert_eq!(need(1, Some(&on(1, 3, 1)), 1, None), Need::Nothing, "alone");
        assert_eq!(need(2, None, 1, None), Need::Nothing, "never placed");
        assert_eq!(need(2, Some(&on(2, 4, 4)), 1, None), Need::NotOwner);
        assert_eq!(need(2, Some(&on(2, 4, 4)), 2, None), Need::Commit(4));
        assert_eq!(need(2, Some(&on(2, 4, 3)), 2, Some(3)), Need::Commit(4));
    }

    #[test]
    fn a_stale_copy_of_a_sandbox_handed_back_records_nothing() {
        // Node 2 owns it since epoch 5; its copy is from epoch 1 (before it lost it).
        assert_eq!(need(2, Some(&on(2, 6, 5)), 2, Some(1)), Need::NotOwner);
    }

    #[test]
    fn only_the_named_active_node_makes_a_new_sandbox() {
        assert!(new_sandbox_placed_here(1, None, 1), "a node alone");
        assert!(
            !new_sandbox_placed_here(2, None, 1),
            "given up, or never placed"
        );
        assert!(new_sandbox_placed_here(2, Some(&on(1, 1, 1)), 1));
        assert!(!new_sandbox_placed_here(2, Some(&on(2, 1, 1)), 1));
        let mut moving = on(1, 2, 1);
        moving.state = warren_consensus::PlacementState::Migrating;
        assert!(!new_sandbox_placed_here(2, Some(&moving), 1));
    }

    #[test]
    fn only_an_unused_placement_of_this_node_is_given_up() {
        assert_eq!(unused_placement(Some(&on(1, 4, 1)), 1), Some(4));
        assert_eq!(unused_placement(Some(&on(2, 4, 1)), 1), None);
        assert_eq!(unused_placement(None, 1), None);
        let mut kept = on(1, 4, 1);
        kept.handoff = Some(Handoff {
            record: "{}".into(),
            snapshot: Some("snap".into()),
            resume: false,
        });
        assert_eq!(
            unused_placement(Some(&kept), 1),
            None,
            "it has a recovery point"
        );
    }
}
