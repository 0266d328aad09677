//! Rebuilding a cluster from a minority: a surviving node, stopped, is made the only voter
//! of its cluster, with everything its own log holds.
//!
//! Raft cannot change its voters without a quorum of the old ones, so when a majority is
//! lost for good (its machines or disks are gone) nothing commits again. This rewrites one
//! survivor's Raft state offline, as hashicorp/raft's `RecoverCluster` and etcd's
//! `--force-new-cluster` do: its snapshot and every entry of its log are applied (entries
//! the old majority committed that never reached it are lost; entries it holds that were
//! never committed are kept), and the result becomes a snapshot whose membership is this
//! node alone, at a term above any it saw. The other members stay registered but down, so
//! that the new leader fails their sandboxes over from their last recovery points and an
//! operator removes them as usual. The cluster's generation goes up by one: nodes of the
//! generation before are refused, and stop once they hear of this one (`generation`).
//!
//! [`as_sole_voter`] decides the new state (pure); [`recover_alone`] reads and writes the
//! node's RocksDB, keeping a checkpoint of the old state next to it.

use crate::state::{NodeId, NodeState};
use crate::store::{SmData, META_COMMITTED, META_PURGED, META_VOTE};
use crate::types::{LogId, StoredMembership, TypeConfig};
use crate::{snapshot_frame, state_codec};
use openraft::{CommittedLeaderId, Entry, Membership, SnapshotMeta, Vote};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use warren_storage::RaftDb;

#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error("no Raft state at {0}: this data dir has never been part of a cluster")]
    Missing(String),
    #[error(
        "the Raft database at {0} is in use: stop the node first (recovery rewrites its state)"
    )]
    InUse(String),
    #[error("this node's Raft state holds no committed entry: there is nothing to recover")]
    Empty,
    #[error("node {0} is not a member of the cluster its own log describes")]
    NotAMember(NodeId),
    #[error("node {0} is already its cluster's only voter: it needs no recovery")]
    AlreadyAlone(NodeId),
    #[error("the log skips from entry {after} to {next}")]
    Gap { after: u64, next: u64 },
    #[error("the Raft state cannot be read or written: {0}")]
    Storage(String),
}

/// The state a recovered node starts from.
#[derive(Debug)]
pub struct Recovered {
    /// The applied state, its membership this node alone, its last log id `log_id`.
    pub data: SmData,
    /// The vote to store: the new term, cast for this node.
    pub vote: Vote<u64>,
    /// Where the new state stands (a term above every one seen, one index past the log).
    pub log_id: LogId,
    /// Log entries applied on top of the stored snapshot.
    pub replayed: usize,
    /// The voters before.
    pub previous_voters: BTreeSet<NodeId>,
    /// Names of the other members, now marked down.
    pub marked_down: Vec<String>,
}

/// The state that makes `me` the only voter: `snapshot` (the stored one, if any) with the
/// `entries` after it applied, `vote` the last vote this node stored.
pub fn as_sole_voter(
    snapshot: Option<SmData>,
    entries: Vec<Entry<TypeConfig>>,
    vote: Option<Vote<u64>>,
    me: NodeId,
) -> Result<Recovered, RecoverError> {
    let mut data = snapshot.unwrap_or_default();
    let mut replayed = 0;
    for entry in entries {
        let applied = data.last_applied.map_or(0, |l| l.index);
        if data.last_applied.is_some() && entry.log_id.index <= applied {
            continue;
        }
        if data.last_applied.is_some() && entry.log_id.index != applied + 1 {
            return Err(RecoverError::Gap {
                after: applied,
                next: entry.log_id.index,
            });
        }
        data.apply(&entry);
        replayed += 1;
    }
    let last = data.last_applied.ok_or(RecoverError::Empty)?;
    let membership = data.last_membership.membership().clone();
    let peer = membership
        .get_node(&me)
        .cloned()
        .ok_or(RecoverError::NotAMember(me))?;
    if !data.state.nodes.contains_key(&me) {
        return Err(RecoverError::NotAMember(me));
    }
    let previous_voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let alone = BTreeSet::from([me]);
    if previous_voters == alone && membership.nodes().count() == 1 {
        return Err(RecoverError::AlreadyAlone(me));
    }
    let seen_term = vote.map_or(0, |v| v.leader_id.term);
    let term = seen_term.max(last.leader_id.term) + 1;
    let log_id = LogId::new(CommittedLeaderId::new(term, me), last.index + 1);
    data.last_membership = StoredMembership::new(
        Some(log_id),
        Membership::new(vec![alone], BTreeMap::from([(me, peer)])),
    );
    data.last_applied = Some(log_id);
    // The nodes left behind are of the generation before: refused, and superseded once
    // they hear of this one (`generation`).
    data.state.generation += 1;
    let mut marked_down = Vec::new();
    for (id, node) in data.state.nodes.iter_mut() {
        if *id == me {
            node.state = NodeState::Up;
        } else {
            node.state = NodeState::Down;
            marked_down.push(node.name.clone());
        }
    }
    Ok(Recovered {
        data,
        vote: Vote::new(term, me),
        log_id,
        replayed,
        previous_voters,
        marked_down,
    })
}

/// Reads the Raft state in `dir` (the node must be stopped) and, with `write`, replaces it
/// with the state of [`as_sole_voter`], after copying the old one to `backup` (a RocksDB
/// checkpoint that a node can be started on again by moving it back).
pub fn recover_alone(
    dir: &Path,
    me: NodeId,
    backup: &Path,
    write: bool,
) -> Result<Recovered, RecoverError> {
    let db = RaftDb::open_existing(dir).map_err(|e| match e {
        warren_storage::StorageError::Missing(p) => RecoverError::Missing(p),
        warren_storage::StorageError::Rocks(e) if e.to_string().contains("lock") => {
            RecoverError::InUse(dir.display().to_string())
        }
        other => RecoverError::Storage(other.to_string()),
    })?;
    let storage = |e: &dyn std::fmt::Display| RecoverError::Storage(e.to_string());
    let snapshot = match db.get_snapshot().map_err(|e| storage(&e))? {
        None => None,
        Some(bytes) => {
            let (_, state) = snapshot_frame::decode(&bytes).map_err(|e| storage(&e))?;
            Some(state_codec::decode::<SmData>(&state).map_err(|e| storage(&e))?)
        }
    };
    let entries = db
        .range(0, u64::MAX)
        .map_err(|e| storage(&e))?
        .into_iter()
        .map(|(_, bytes)| serde_json::from_slice(&bytes).map_err(|e| storage(&e)))
        .collect::<Result<Vec<Entry<TypeConfig>>, _>>()?;
    let vote = match db.get_meta(META_VOTE).map_err(|e| storage(&e))? {
        None => None,
        Some(b) => Some(serde_json::from_slice(&b).map_err(|e| storage(&e))?),
    };
    let recovered = as_sole_voter(snapshot, entries, vote, me)?;
    if write {
        db.checkpoint(backup).map_err(|e| storage(&e))?;
        let meta = SnapshotMeta {
            last_log_id: Some(recovered.log_id),
            last_membership: recovered.data.last_membership.clone(),
            snapshot_id: format!(
                "recovered-{}-{}",
                recovered.log_id.leader_id.term, recovered.log_id.index
            ),
        };
        let state = state_codec::encode(&recovered.data).map_err(|e| storage(&e))?;
        let json = |v: serde_json::Result<Vec<u8>>| v.map_err(|e| storage(&e));
        let metas: [(&[u8], Vec<u8>); 3] = [
            (META_VOTE, json(serde_json::to_vec(&recovered.vote))?),
            (META_PURGED, json(serde_json::to_vec(&recovered.log_id))?),
            (
                META_COMMITTED,
                json(serde_json::to_vec(&Some(recovered.log_id)))?,
            ),
        ];
        db.replace_state(
            &snapshot_frame::encode(&meta, &state),
            &metas,
            recovered.log_id.index,
        )
        .map_err(|e| storage(&e))?;
    }
    Ok(recovered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{test_node, Command};
    use crate::types::Peer;
    use openraft::EntryPayload;

    fn peer(id: NodeId) -> Peer {
        Peer {
            name: format!("n{id}"),
            peer_addr: format!("127.0.0.1:{}", 7000 + id),
        }
    }

    fn entry(term: u64, index: u64, payload: EntryPayload<TypeConfig>) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload,
        }
    }

    fn three_voters() -> Membership<NodeId, Peer> {
        Membership::new(
            vec![BTreeSet::from([1, 2, 3])],
            BTreeMap::from([(1, peer(1)), (2, peer(2)), (3, peer(3))]),
        )
    }

    /// A snapshot at index 5 (term 2) of a three-node cluster, node 2 down already.
    fn snapshot() -> SmData {
        let mut data = SmData {
            last_applied: Some(LogId::new(CommittedLeaderId::new(2, 1), 5)),
            last_membership: StoredMembership::new(
                Some(LogId::new(CommittedLeaderId::new(1, 1), 2)),
                three_voters(),
            ),
            ..SmData::default()
        };
        for (id, state) in [(1, NodeState::Up), (2, NodeState::Down), (3, NodeState::Up)] {
            data.state.nodes.insert(id, test_node(id, "r1", state));
        }
        data
    }

    fn drain(node: NodeId) -> EntryPayload<TypeConfig> {
        EntryPayload::Normal(Command::SetNodeState {
            node,
            state: NodeState::Draining,
        })
    }

    #[test]
    fn the_survivor_becomes_the_only_voter_above_every_term_it_saw() {
        // Entries up to 5 are in the snapshot (a purged log keeps some); 6 and 7 are not.
        let entries = vec![
            entry(2, 5, EntryPayload::Blank),
            entry(3, 6, EntryPayload::Blank),
            entry(3, 7, drain(3)),
        ];
        let r = as_sole_voter(Some(snapshot()), entries, Some(Vote::new(4, 3)), 3).unwrap();
        assert_eq!(r.replayed, 2);
        assert_eq!(r.log_id.index, 8);
        assert_eq!(r.log_id.leader_id.term, 5, "above the vote's term 4");
        assert_eq!(r.vote, Vote::new(5, 3));
        assert_eq!(r.data.last_applied, Some(r.log_id));
        let m = r.data.last_membership.membership();
        assert_eq!(m.voter_ids().collect::<Vec<_>>(), vec![3]);
        assert_eq!(m.nodes().map(|(id, _)| *id).collect::<Vec<_>>(), vec![3]);
        assert_eq!(m.get_node(&3), Some(&peer(3)));
        assert_eq!(r.data.last_membership.log_id(), &Some(r.log_id));
        assert_eq!(r.previous_voters, BTreeSet::from([1, 2, 3]));
        assert_eq!(r.data.state.generation, 1);
        // Its own log's last command was applied (it drained itself), then it is up: the
        // only node left must take placements; the others are down.
        assert_eq!(r.data.state.nodes[&3].state, NodeState::Up);
        assert_eq!(r.data.state.nodes[&1].state, NodeState::Down);
        assert_eq!(r.data.state.nodes[&2].state, NodeState::Down);
        assert_eq!(r.marked_down, vec!["n1".to_string(), "n2".to_string()]);
    }

    #[test]
    fn a_term_only_in_the_log_counts_too() {
        let entries = vec![entry(9, 6, EntryPayload::Blank)];
        let r = as_sole_voter(Some(snapshot()), entries, Some(Vote::new(3, 1)), 1).unwrap();
        assert_eq!(r.log_id.leader_id.term, 10);
    }

    #[test]
    fn a_membership_in_the_log_is_the_one_recovered_from() {
        // The log removed node 3 after the snapshot: node 3 cannot recover, node 1 can.
        let two = Membership::new(
            vec![BTreeSet::from([1, 2])],
            BTreeMap::from([(1, peer(1)), (2, peer(2))]),
        );
        let entries = vec![entry(3, 6, EntryPayload::Membership(two))];
        assert!(matches!(
            as_sole_voter(Some(snapshot()), entries.clone(), None, 3),
            Err(RecoverError::NotAMember(3))
        ));
        let r = as_sole_voter(Some(snapshot()), entries, None, 1).unwrap();
        assert_eq!(r.previous_voters, BTreeSet::from([1, 2]));
    }

    #[test]
    fn nothing_to_recover_is_said_not_invented() {
        assert!(matches!(
            as_sole_voter(None, vec![], None, 1),
            Err(RecoverError::Empty)
        ));
        let mut alone = snapshot();
        alone.last_membership = StoredMembership::new(
            None,
            Membership::new(vec![BTreeSet::from([1])], BTreeMap::from([(1, peer(1))])),
        );
        assert!(matches!(
            as_sole_voter(Some(alone), vec![], None, 1),
            Err(RecoverError::AlreadyAlone(1))
        ));
        let gap = vec![entry(3, 7, EntryPayload::Blank)];
        assert!(matches!(
            as_sole_voter(Some(snapshot()), gap, None, 1),
            Err(RecoverError::Gap { after: 5, next: 7 })
        ));
    }
}
