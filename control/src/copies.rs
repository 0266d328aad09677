//! Whether this node's copy of a sandbox is the one the cluster means. A copy is the
//! owner's only while the committed placement names this node and the copy was made or
//! taken over at or after the epoch this node got the sandbox (`Placement::owner_since`):
//! a copy left from an earlier time this node owned it — cut off, failed over, and then
//! handed back while the old copy was still here — is stale, and the cluster's newer
//! recovery point wins over it.

use warren_consensus::{NodeId, Placement};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalCopy {
    /// The owner's copy: serve it.
    Current,
    /// Another node owns the sandbox now.
    Elsewhere,
    /// This node owns it again, since a later epoch than its copy's.
    Stale,
    /// The cluster has no placement for it (a node alone, or deleted meanwhile).
    Unplaced,
}

impl LocalCopy {
    /// A copy to save as a conflict snapshot and remove (the cluster's copy wins).
    pub fn set_aside(self) -> bool {
        matches!(self, LocalCopy::Elsewhere | LocalCopy::Stale)
    }
}

/// Judges this node's (`me`) copy, whose epoch is `copy_epoch` (none: made before epochs
/// were recorded, trusted), against the committed `placement`.
pub fn judge(placement: Option<&Placement>, me: NodeId, copy_epoch: Option<u64>) -> LocalCopy {
    match placement {
        None => LocalCopy::Unplaced,
        Some(p) if p.node != me => LocalCopy::Elsewhere,
        Some(p) if copy_epoch.is_some_and(|e| e < p.owner_since) => LocalCopy::Stale,
        Some(_) => LocalCopy::Current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_consensus::PlacementState;

    fn placement(node: NodeId, epoch: u64, owner_since: u64) -> Placement {
        Placement {
            sandbox: "sb".into(),
            node,
            epoch,
            owner_since,
            state: PlacementState::Active,
            handoff: None,
            egress: None,
            tenant: None,
            size: None,
        }
    }

    #[test]
    fn a_copy_older_than_its_nodes_latest_ownership_is_stale() {
        // Owned by 1 since epoch 5 (it had it before, lost it at 3, got it back at 5).
        let p = placement(1, 6, 5);
        assert_eq!(judge(Some(&p), 1, Some(1)), LocalCopy::Stale);
        assert_eq!(judge(Some(&p), 1, Some(5)), LocalCopy::Current);
        // Taken over later than the placement says (a newer stamp) is current too.
        assert_eq!(judge(Some(&p), 1, Some(6)), LocalCopy::Current);
        // Without an epoch (made before they were recorded): trusted, as before.
        assert_eq!(judge(Some(&p), 1, None), LocalCopy::Current);
        assert!(judge(Some(&p), 1, Some(1)).set_aside());
        assert!(!judge(Some(&p), 1, Some(5)).set_aside());
    }

    #[test]
    fn a_copy_another_node_owns_goes_and_an_unplaced_one_stays() {
        let p = placement(2, 4, 4);
        assert_eq!(judge(Some(&p), 1, Some(9)), LocalCopy::Elsewhere);
        assert!(LocalCopy::Elsewhere.set_aside());
        assert_eq!(judge(None, 1, Some(1)), LocalCopy::Unplaced);
        assert!(!LocalCopy::Unplaced.set_aside());
    }
}
