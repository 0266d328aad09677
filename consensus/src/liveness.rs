//! The leader's liveness rules (pure): what one probe of a node changes in its state.
//!
//! A node is *heard* when it answered this probe (or asked for a lease lately), and
//! *silent* when it has not been heard for longer than `down_after`. A new leader starts
//! every node's silence at its first probe, a grace period for nodes that may just not have
//! been asked yet; that grace keeps an up node up, but it is not news from a down node,
//! which comes back up only once it is heard.

use crate::state::NodeState;

/// What the leader knows of one node after a probe.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observation {
    pub heard: bool,
    pub silent: bool,
    /// It is in the Raft membership (caught up enough to be a learner or voter).
    pub member: bool,
    /// It is the leader itself.
    pub is_self: bool,
}

/// The state a node in `state` moves to after `seen`, if it changes.
pub fn judge(state: NodeState, seen: Observation) -> Option<NodeState> {
    match state {
        NodeState::Up if seen.silent => Some(NodeState::Down),
        NodeState::Down if seen.heard => Some(NodeState::Up),
        NodeState::Joining if seen.heard && seen.member && !seen.is_self => Some(NodeState::Up),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(heard: bool, silent: bool) -> Observation {
        Observation {
            heard,
            silent,
            member: true,
            is_self: false,
        }
    }

    #[test]
    fn a_down_node_comes_back_only_when_it_is_heard_not_when_a_new_leader_starts_counting() {
        // A new leader's first probe: the node did not answer, and its silence only began.
        assert_eq!(judge(NodeState::Down, seen(false, false)), None);
        assert_eq!(judge(NodeState::Down, seen(false, true)), None);
        assert_eq!(
            judge(NodeState::Down, seen(true, false)),
            Some(NodeState::Up)
        );
    }

    #[test]
    fn an_up_node_goes_down_when_silent_and_draining_nodes_keep_their_state() {
        assert_eq!(
            judge(NodeState::Up, seen(false, true)),
            Some(NodeState::Down)
        );
        assert_eq!(judge(NodeState::Up, seen(false, false)), None);
        assert_eq!(judge(NodeState::Up, seen(true, false)), None);
        assert_eq!(judge(NodeState::Draining, seen(false, true)), None);
        assert_eq!(judge(NodeState::Draining, seen(true, false)), None);
    }

    #[test]
    fn a_joining_node_is_up_once_heard_as_a_member() {
        assert_eq!(
            judge(NodeState::Joining, seen(true, false)),
            Some(NodeState::Up)
        );
        let not_member = Observation {
            member: false,
            ..seen(true, false)
        };
        assert_eq!(judge(NodeState::Joining, not_member), None);
        let leader = Observation {
            is_self: true,
            ..seen(true, false)
        };
        assert_eq!(judge(NodeState::Joining, leader), None);
        assert_eq!(judge(NodeState::Joining, seen(false, false)), None);
    }
}
