//! Which nodes vote: at most five, an odd number, spread over regions, keeping current voters
//! where possible. A draining node is still alive and keeps voting while the cluster needs its
//! vote (a drained node of three must not leave a single voter), but an up node takes a new
//! seat first. Pure; the cluster applies the result with `change_membership`.

use crate::state::{NodeId, NodeRecord, NodeState};
use std::collections::{BTreeMap, BTreeSet};

/// Largest voter set.
pub const MAX_VOTERS: usize = 5;

/// The voters a cluster of `nodes` should have, given the `current` ones. `nodes` holds
/// the candidates: the caller leaves out draining nodes that stopped answering.
pub fn desired_voters(nodes: &[NodeRecord], current: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
    let up: Vec<&NodeRecord> = nodes
        .iter()
        .filter(|n| matches!(n.state, NodeState::Up | NodeState::Draining))
        .collect();
    if up.is_empty() {
        return current.clone();
    }
    let want = match up.len().min(MAX_VOTERS) {
        n if n % 2 == 0 => n - 1,
        n => n,
    };
    // Candidates per region: up before draining, current voters first, then by id.
    let mut by_region: BTreeMap<&str, Vec<&NodeRecord>> = BTreeMap::new();
    for n in &up {
        by_region.entry(n.region.as_str()).or_default().push(n);
    }
    for list in by_region.values_mut() {
        list.sort_by_key(|n| {
            (
                n.state == NodeState::Draining,
                !current.contains(&n.id),
                n.id,
            )
        });
    }
    let mut chosen = BTreeSet::new();
    let mut taken: BTreeMap<&str, usize> = BTreeMap::new();
    while chosen.len() < want {
        // The region with the fewest voters so far that still has a candidate.
        let next = by_region
            .iter()
            .filter(|(r, list)| taken.get(*r).copied().unwrap_or(0) < list.len())
            .min_by_key(|(r, list)| {
                let t = taken.get(*r).copied().unwrap_or(0);
                let has_current = list.get(t).is_some_and(|n| current.contains(&n.id));
                (t, !has_current, **r)
            })
            .map(|(r, _)| *r);
        let Some(region) = next else { break };
        let t = taken.entry(region).or_insert(0);
        chosen.insert(by_region[region][*t].id);
        *t += 1;
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::test_node;

    fn n(id: NodeId, region: &str, up: bool) -> NodeRecord {
        test_node(id, region, if up { NodeState::Up } else { NodeState::Down })
    }

    fn set(ids: &[NodeId]) -> BTreeSet<NodeId> {
        ids.iter().copied().collect()
    }

    #[test]
    fn odd_counts_up_to_five() {
        let nodes: Vec<NodeRecord> = (1..=8).map(|i| n(i, "r", true)).collect();
        assert_eq!(desired_voters(&nodes[..1], &set(&[1])).len(), 1);
        assert_eq!(desired_voters(&nodes[..2], &set(&[1])).len(), 1);
        assert_eq!(desired_voters(&nodes[..4], &set(&[1])).len(), 3);
        assert_eq!(desired_voters(&nodes, &set(&[1])).len(), 5);
    }

    #[test]
    fn voters_spread_over_regions() {
        let nodes = vec![
            n(1, "eu", true),
            n(2, "eu", true),
            n(3, "eu", true),
            n(4, "us", true),
            n(5, "us", true),
            n(6, "ap", true),
        ];
        let v = desired_voters(&nodes, &set(&[1]));
        let regions: Vec<&str> = v
            .iter()
            .map(|id| nodes[*id as usize - 1].region.as_str())
            .collect();
        assert_eq!(v.len(), 5);
        for r in ["eu", "us", "ap"] {
            assert!(regions.contains(&r), "{r} has a voter: {v:?}");
        }
    }

    #[test]
    fn a_draining_node_votes_only_while_its_vote_is_needed() {
        let draining = |id| test_node(id, "r", NodeState::Draining);
        // Three nodes, one draining: all three still vote (not one voter left).
        let nodes = vec![draining(1), n(2, "r", true), n(3, "r", true)];
        assert_eq!(desired_voters(&nodes, &set(&[1, 2, 3])), set(&[1, 2, 3]));
        // A fourth, up node takes the draining node's seat.
        let nodes = vec![
            draining(1),
            n(2, "r", true),
            n(3, "r", true),
            n(4, "r", true),
        ];
        assert_eq!(desired_voters(&nodes, &set(&[1, 2, 3])), set(&[2, 3, 4]));
    }

    #[test]
    fn a_down_voter_is_replaced_and_current_voters_are_kept() {
        let nodes = vec![
            n(1, "r", true),
            n(2, "r", false),
            n(3, "r", true),
            n(4, "r", true),
        ];
        let v = desired_voters(&nodes, &set(&[1, 2, 3]));
        assert_eq!(v, set(&[1, 3, 4]));
        let nodes: Vec<NodeRecord> = (1..=5).map(|i| n(i, "r", true)).collect();
        assert_eq!(
            desired_voters(&nodes[..4], &set(&[2, 3, 4])),
            set(&[2, 3, 4]),
            "no churn without cause"
        );
    }
}
