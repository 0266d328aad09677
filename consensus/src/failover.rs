//! Which survivor takes each sandbox of a failed node: one pure decision per round of the
//! leader's loop, in a bounded batch, spread by rendezvous (weighted by capacity) and admitted
//! by room — a survivor at its sandbox limit is passed over for the next rendezvous choice,
//! never buried.

use crate::placement::choose_owner_with_room;
use crate::state::{ClusterState, NodeId, Placement};
use std::collections::BTreeMap;

/// One placement to move off a failed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailoverMove {
    pub sandbox: String,
    /// The placement's epoch the move is conditional on.
    pub epoch: u64,
    pub from: NodeId,
    pub to: NodeId,
}

/// A round's decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailoverPlan {
    pub moves: Vec<FailoverMove>,
    /// Placements no survivor has room for now: they wait for the next round.
    pub no_room: usize,
    /// Placements beyond this round's batch.
    pub deferred: usize,
}

/// Plans the moves of the placements on nodes for which `gone` holds and `may_act` allows
/// acting (their leases ran out), at most `batch` of them. Survivors are never the gone nodes;
/// each sandbox prefers its own region (from its record), then any other.
pub fn plan_failover(
    state: &ClusterState,
    gone: impl Fn(NodeId) -> bool,
    may_act: impl Fn(NodeId) -> bool,
    batch: usize,
) -> FailoverPlan {
    let mut excluded: Vec<NodeId> = state.nodes.keys().copied().filter(|n| gone(*n)).collect();
    let mut given: BTreeMap<NodeId, u64> = BTreeMap::new();
    let mut plan = FailoverPlan::default();
    let failed: Vec<NodeId> = state
        .placements
        .nodes()
        .filter(|n| gone(*n) && may_act(*n))
        .collect();
    // Placements past the batch, or once no survivor has room (room is per node, whatever
    // the sandbox: when none has room for one, none has for the rest), are counted, not
    // visited: a round costs O(batch), not O(placements of the failed nodes).
    let mut full = false;
    for from in failed {
        let total = state.placements.count_on(from);
        let mut visited = 0;
        for p in state.placements.on_node(from) {
            if full || plan.moves.len() >= batch {
                break;
            }
            visited += 1;
            let region = region_of(p);
            let promised = |n: NodeId| given.get(&n).copied().unwrap_or(0);
            let to = choose_owner_with_room(state, &p.sandbox, &region, &mut excluded, promised);
            let Some(to) = to else {
                plan.no_room += 1;
                full = true;
                break;
            };
            *given.entry(to).or_default() += 1;
            plan.moves.push(FailoverMove {
                sandbox: p.sandbox.clone(),
                epoch: p.epoch,
                from,
                to,
            });
        }
        let rest = total - visited;
        if full {
            plan.no_room += rest;
        } else {
            plan.deferred += rest;
        }
    }
    plan
}

/// The region a sandbox was created for, from its last recorded handoff (empty: unknown).
pub fn region_of(p: &Placement) -> String {
    p.handoff
        .as_ref()
        .and_then(|h| serde_json::from_str::<serde_json::Value>(&h.record).ok())
        .and_then(|r| r.get("region")?.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{choose_owner_excluding, room};
    use crate::state::{test_node, Handoff, NodeState, PlacementState};
    use proptest::prelude::*;

    fn placement(id: &str, node: NodeId, region: &str) -> Placement {
        Placement {
            sandbox: id.into(),
            node,
            epoch: 4,
            owner_since: 4,
            state: PlacementState::Active,
            handoff: Some(Handoff {
                record: serde_json::json!({ "region": region }).to_string(),
                snapshot: Some(format!("snap-{id}")),
                resume: false,
            }),
            egress: None,
            tenant: None,
            size: None,
        }
    }

    /// Nodes 1..=n in regions r0/r1 (odd/even), `dead` down, with `on_dead` placements on it.
    fn cluster(n: u64, dead: NodeId, on_dead: usize, max: Option<u64>) -> ClusterState {
        let mut s = ClusterState::default();
        for id in 1..=n {
            let state = if id == dead {
                NodeState::Down
            } else {
                NodeState::Up
            };
            let mut rec = test_node(id, &format!("r{}", id % 2), state);
            rec.max_sandboxes = max;
            s.nodes.insert(id, rec);
        }
        for i in 0..on_dead {
            let id = format!("sb-{i}");
            s.placements
                .insert(id.clone(), placement(&id, dead, &format!("r{}", i % 2)));
        }
        s
    }

    fn is_down(s: &ClusterState) -> impl Fn(NodeId) -> bool + '_ {
        |n| s.nodes.get(&n).is_none_or(|r| r.state == NodeState::Down)
    }

    #[test]
    fn every_placement_of_the_dead_node_goes_to_a_survivor_of_its_region() {
        let s = cluster(5, 1, 200, None);
        let plan = plan_failover(&s, is_down(&s), |_| true, 1000);
        assert_eq!(plan.moves.len(), 200);
        for m in &plan.moves {
            assert_ne!(m.to, 1);
            assert_eq!(m.epoch, 4);
            assert_eq!(s.nodes[&m.to].region, region_of(&s.placements[&m.sandbox]));
        }
    }

    #[test]
    fn nothing_moves_before_the_dead_nodes_leases_ran_out() {
        let s = cluster(4, 2, 10, None);
        let plan = plan_failover(&s, is_down(&s), |_| false, 1000);
        assert!(plan.moves.is_empty());
    }

    #[test]
    fn a_batch_bounds_the_round_and_counts_the_rest() {
        let s = cluster(4, 2, 50, None);
        let plan = plan_failover(&s, is_down(&s), |_| true, 16);
        assert_eq!((plan.moves.len(), plan.deferred), (16, 34));
    }

    #[test]
    fn a_full_survivor_is_passed_over_not_buried() {
        // Three survivors that may each hold 10, already holding 5 each (placed on them):
        // 30 sandboxes of the dead node find room for 15, the rest wait.
        let mut s = cluster(4, 4, 30, Some(10));
        for n in 1..=3u64 {
            for i in 0..5 {
                let id = format!("own-{n}-{i}");
                s.placements.insert(id.clone(), placement(&id, n, "r1"));
            }
        }
        let plan = plan_failover(&s, is_down(&s), |_| true, 1000);
        assert_eq!(plan.moves.len(), 15);
        assert_eq!(plan.no_room, 15);
        for n in 1..=3u64 {
            let given = plan.moves.iter().filter(|m| m.to == n).count();
            assert_eq!(given, 5, "node {n} filled to its limit, not beyond");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Whatever the limits: no survivor is given more than its room, a sandbox lands on
        /// its rendezvous choice unless that one is full, and every placement is accounted
        /// for (moved, waiting for room, or deferred).
        #[test]
        fn limits_hold_and_nothing_is_lost(
            n in 3u64..9,
            on_dead in 0usize..120,
            max in proptest::option::of(0u64..40),
            batch in 1usize..200,
        ) {
            let s = cluster(n, 1, on_dead, max);
            let plan = plan_failover(&s, is_down(&s), |_| true, batch);
            prop_assert_eq!(plan.moves.len() + plan.no_room + plan.deferred, on_dead);
            let mut given: BTreeMap<NodeId, u64> = BTreeMap::new();
            for m in &plan.moves {
                prop_assert!(m.to != 1);
                *given.entry(m.to).or_default() += 1;
            }
            for (node, g) in &given {
                if let Some(r) = room(&s, *node) {
                    prop_assert!(*g <= r, "node {} given {} with room {}", node, g, r);
                }
            }
            if max.is_none() {
                prop_assert_eq!(plan.no_room, 0);
                for m in &plan.moves {
                    let first = choose_owner_excluding(&s, &m.sandbox, &region_of(&s.placements[&m.sandbox]), &[1]);
                    prop_assert_eq!(Some(m.to), first);
                }
            }
        }
    }
}
