//! Who may say what over the peer protocol. Every peer presents a certificate from the
//! cluster CA; that only proves it was admitted once. What it may do depends on the node id
//! the certificate binds it to and on the membership:
//!
//! * a peer speaks only as itself: Raft entries, snapshots and vote requests name their
//!   sender, and a sender that names another node is refused;
//! * a removed node's certificate opens nothing any more (ids are never reused, so an id
//!   below `next_node_id` without a record was removed), and a certificate whose key is not
//!   the one the member registered with is refused;
//! * commands that act on one sandbox (checkpoint, egress, move, unplace) come from the node that
//!   owns it; a peer can never propose the cluster's initialisation.
//!
//! Pure: the caller passes its applied state. A node that lags may not know a member that
//! joined after its applied index: such a peer is trusted by its certificate alone, until
//! the log catches up.

use crate::rpc::Request;
use crate::state::{ClusterState, Command, NodeId};
use warren_transport::PeerId;

/// Why a peer was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} is not a member of this cluster")]
    Stranger(String),
    #[error("node {0} was removed from the cluster")]
    Removed(NodeId),
    #[error("the certificate of {name} does not match member {node}'s record")]
    Mismatch { name: String, node: NodeId },
    #[error("node {caller} spoke as node {claimed}")]
    Impersonation { caller: NodeId, claimed: NodeId },
    #[error("node {caller} does not own sandbox {sandbox}")]
    NotOwner { caller: NodeId, sandbox: String },
    #[error("a peer cannot propose {0}")]
    Forbidden(&'static str),
}

/// The member id a peer speaks as, from its certificate and the membership.
pub fn identify(state: &ClusterState, peer: &PeerId) -> Result<NodeId, Refusal> {
    let Some(id) = peer.node else {
        // A certificate issued before ids were bound: its name must be a member's, with the
        // member's key when the record has one.
        let n = state
            .node_by_name(&peer.name)
            .ok_or_else(|| Refusal::Stranger(peer.name.clone()))?;
        return matches(peer, n.id, &n.name, &n.key_id).map(|_| n.id);
    };
    match state.nodes.get(&id) {
        Some(n) => matches(peer, id, &n.name, &n.key_id).map(|_| id),
        None if id < state.next_node_id => Err(Refusal::Removed(id)),
        // Admitted after what this node applied so far.
        None => Ok(id),
    }
}

fn matches(peer: &PeerId, id: NodeId, name: &str, key_id: &str) -> Result<(), Refusal> {
    if peer.name != name || (!key_id.is_empty() && peer.key_id != key_id) {
        return Err(Refusal::Mismatch {
            name: peer.name.clone(),
            node: id,
        });
    }
    Ok(())
}

/// Whether member `caller` may send `req`.
pub fn authorize(state: &ClusterState, caller: NodeId, req: &Request) -> Result<(), Refusal> {
    let claimed = match req {
        Request::AppendEntries(r) => r.vote.leader_id().node_id,
        Request::InstallSnapshot(r) => r.vote.leader_id().node_id,
        Request::Vote(r) => r.vote.leader_id().node_id,
        Request::Propose(cmd) => return authorize_command(state, caller, cmd),
        // Any member may ask for a member's certificate: it is signed only for the key that
        // member registered (`certs::may_sign`), which only that member holds.
        Request::Ping | Request::Lease | Request::Sign { .. } => caller,
    };
    if claimed != caller {
        return Err(Refusal::Impersonation { caller, claimed });
    }
    Ok(())
}

/// Whether member `caller` may propose `cmd` (through the leader).
pub fn authorize_command(
    state: &ClusterState,
    caller: NodeId,
    cmd: &Command,
) -> Result<(), Refusal> {
    let sandbox = match cmd {
        Command::Init { .. } => return Err(Refusal::Forbidden("the cluster's initialisation")),
        // Only the leader judges liveness, and it writes its judgements itself.
        Command::Liveness { .. } => return Err(Refusal::Forbidden("a liveness judgement")),
        Command::SetSecretsKeys { node, .. }
        | Command::SetNodeLimits { node, .. }
        | Command::SetAddresses { node, .. }
            if *node != caller =>
        {
            return Err(Refusal::Impersonation {
                caller,
                claimed: *node,
            })
        }
        Command::Checkpoint { sandbox, .. }
        | Command::SetEgress { sandbox, .. }
        | Command::BeginMove { sandbox, .. }
        | Command::Move { sandbox, .. }
        | Command::Unplace { sandbox, .. } => sandbox,
        Command::Register { .. }
        | Command::SetNodeState { .. }
        | Command::RemoveNode { .. }
        | Command::Place { .. }
        | Command::PutSecret { .. }
        | Command::ResealSecret { .. }
        | Command::SetSecretsKeys { .. }
        | Command::SetNodeLimits { .. }
        | Command::SetAddresses { .. }
        | Command::DeleteSecret { .. }
        | Command::CreateKey { .. }
        | Command::RevokeKey { .. }
        | Command::CreateJoinToken { .. }
        | Command::RevokeJoinToken { .. }
        | Command::SetClusterTokenJoins { .. }
        | Command::TouchKeys { .. }
        | Command::SetQuota { .. } => return Ok(()),
    };
    match state.placements.get(sandbox) {
        Some(p) if p.node != caller => Err(Refusal::NotOwner {
            caller,
            sandbox: sandbox.clone(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{test_node, NodeState, Placement, PlacementState};
    use openraft::raft::{AppendEntriesRequest, VoteRequest};
    use openraft::Vote;

    fn state() -> ClusterState {
        let mut s = ClusterState {
            next_node_id: 5,
            ..Default::default()
        };
        for id in [1, 2, 3] {
            let mut n = test_node(id, "r", NodeState::Up);
            n.key_id = format!("key{id}");
            s.nodes.insert(id, n);
        }
        s.placements.insert(
            "sb".into(),
            Placement {
                sandbox: "sb".into(),
                node: 2,
                epoch: 3,
                owner_since: 3,
                state: PlacementState::Active,
                handoff: None,
                egress: None,
                tenant: None,
                size: None,
            },
        );
        s
    }

    fn peer(name: &str, node: Option<NodeId>, key: &str) -> PeerId {
        PeerId {
            name: name.into(),
            node,
            key_id: key.into(),
            expires_at: i64::MAX,
        }
    }

    #[test]
    fn a_peer_is_the_member_its_certificate_binds_with_that_members_key() {
        let s = state();
        assert_eq!(identify(&s, &peer("n2", Some(2), "key2")), Ok(2));
        assert_eq!(
            identify(&s, &peer("n2", None, "key2")),
            Ok(2),
            "legacy cert"
        );
        assert!(matches!(
            identify(&s, &peer("n2", Some(2), "other")),
            Err(Refusal::Mismatch { .. })
        ));
        assert!(matches!(
            identify(&s, &peer("n1", Some(2), "key2")),
            Err(Refusal::Mismatch { .. })
        ));
        assert_eq!(
            identify(&s, &peer("n4", Some(4), "key4")),
            Err(Refusal::Removed(4)),
            "id 4 was allocated and has no record"
        );
        assert_eq!(
            identify(&s, &peer("n7", Some(7), "key7")),
            Ok(7),
            "admitted after what this node applied"
        );
        assert!(matches!(
            identify(&s, &peer("x", None, "k")),
            Err(Refusal::Stranger(_))
        ));
    }

    #[test]
    fn raft_messages_must_name_their_sender() {
        let s = state();
        let vote = Request::Vote(VoteRequest::new(Vote::new(9, 1), None));
        assert_eq!(
            authorize(&s, 3, &vote),
            Err(Refusal::Impersonation {
                caller: 3,
                claimed: 1
            })
        );
        let vote = Request::Vote(VoteRequest::new(Vote::new(9, 3), None));
        assert_eq!(authorize(&s, 3, &vote), Ok(()));
        let append = Request::AppendEntries(AppendEntriesRequest {
            vote: Vote::new_committed(9, 1),
            prev_log_id: None,
            entries: vec![],
            leader_commit: None,
        });
        assert!(authorize(&s, 3, &append).is_err());
        assert_eq!(authorize(&s, 1, &append), Ok(()));
        assert_eq!(authorize(&s, 3, &Request::Lease), Ok(()));
    }

    #[test]
    fn sandbox_commands_come_from_the_owner_and_nobody_proposes_init() {
        let s = state();
        let checkpoint = |sandbox: &str| {
            Request::Propose(Command::Unplace {
                sandbox: sandbox.into(),
                epoch: 3,
            })
        };
        assert!(matches!(
            authorize(&s, 3, &checkpoint("sb")),
            Err(Refusal::NotOwner { .. })
        ));
        assert_eq!(authorize(&s, 2, &checkpoint("sb")), Ok(()));
        assert_eq!(authorize(&s, 3, &checkpoint("unplaced")), Ok(()));
        let mv = Request::Propose(Command::Move {
            sandbox: "sb".into(),
            expected_epoch: 3,
            node: 3,
            handoff: None,
        });
        assert!(authorize(&s, 3, &mv).is_err(), "taking a sandbox");
        let place = Request::Propose(Command::Place {
            sandbox: "new".into(),
            node: 1,
            expected_epoch: 0,
            tenant: None,
            size: None,
        });
        assert_eq!(authorize(&s, 3, &place), Ok(()));
        let keys = |node| {
            Request::Propose(Command::SetSecretsKeys {
                node,
                keys: vec!["k2".into()],
            })
        };
        assert_eq!(authorize(&s, 3, &keys(3)), Ok(()));
        assert!(
            matches!(
                authorize(&s, 3, &keys(2)),
                Err(Refusal::Impersonation { .. })
            ),
            "speaking for another node's keys"
        );
        let limits = |node| {
            Request::Propose(Command::SetNodeLimits {
                node,
                max_sandboxes: 0,
                full: false,
            })
        };
        assert_eq!(authorize(&s, 3, &limits(3)), Ok(()));
        assert!(
            matches!(
                authorize(&s, 3, &limits(2)),
                Err(Refusal::Impersonation { .. })
            ),
            "declaring another node full (failover and placement would pass it over)"
        );
        let addresses = |node| {
            Request::Propose(Command::SetAddresses {
                node,
                api_addr: "127.0.0.9:1".into(),
                peer_addr: "127.0.0.9:2".into(),
            })
        };
        assert_eq!(authorize(&s, 3, &addresses(3)), Ok(()));
        assert!(
            matches!(
                authorize(&s, 3, &addresses(2)),
                Err(Refusal::Impersonation { .. })
            ),
            "pointing another node's traffic (forwarded requests, Raft) at an address of its choosing"
        );
        let ca = warren_transport::tls::new_ca("t").unwrap();
        let init = Request::Propose(Command::Init {
            cluster: "x".into(),
            ca,
        });
        assert!(matches!(
            authorize(&s, 1, &init),
            Err(Refusal::Forbidden(_))
        ));
        // A node that was leader and is no longer (or any member) cannot hand its
        // judgement of who is down to the leader: only the leader writes those.
        let judgement = Request::Propose(Command::Liveness {
            node: 2,
            from: NodeState::Up,
            to: NodeState::Down,
            term: 7,
        });
        assert!(matches!(
            authorize(&s, 1, &judgement),
            Err(Refusal::Forbidden(_))
        ));
    }
}
