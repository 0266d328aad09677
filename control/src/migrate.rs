//! Moving sandboxes between nodes: one loop per node, once a second. A tick reads the
//! placements of this node (and, on the leader, of failed nodes) through the state's per-node
//! index, and its copy of the state shares the placements' structure (`Placements`): its cost
//! follows this node's sandboxes, not the cluster's.
//!
//! * **Out.** A sandbox here whose rendezvous winner is another up node (a node joined, or
//!   this one drains) moves: `BeginMove` (requests wait), the node saves it as a sleep does,
//!   `Move` to the winner with the handoff, then this node forgets its copy. A tick's moves
//!   run several at once (`MOVES_AT_ONCE`).
//! * **In.** A placement naming this node with a handoff it does not hold yet is taken over:
//!   it arrives asleep, and starts at once if it was running.
//! * **Failover** (leader only). Placements of a node that is down, draining but silent, or
//!   removed move to survivors with their last checkpoint's handoff, once its leases ran out:
//!   planned in one pure decision per tick (`warren_consensus::failover`: bounded batch,
//!   rendezvous by capacity, full survivors passed over) and committed concurrently.
//! * **Checkpoints** (`checkpoint`). Running sandboxes active since their last checkpoint
//!   are snapshotted every `checkpoint_every` and the handoff is recorded in their placement,
//!   bounding what a node failure can lose; a sandbox not yet checkpointed gets its record
//!   published at once. A tick's checkpoints run several at once.
//! * **Leftovers.** A copy here of a sandbox another node owns (after a failover this node
//!   missed) is removed, what it held saved as a conflict snapshot (`fence`).

use crate::checkpoint;
use crate::copies::LocalCopy;
use crate::Control;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use warren_consensus::failover::plan_failover;
use warren_consensus::placement::{choose_owner, choose_owner_excluding, needs_failover, room};
use warren_consensus::{
    ClusterState, Command, CommandResult, Handoff, NodeId, NodeState, Placement, PlacementState,
};
use warren_node::sandbox::manager::HandoffData;

const TICK: Duration = Duration::from_secs(1);
/// A sandbox moves to a node that joined only after this long without requests or open
/// streams: rebalancing never cuts work in progress.
const REBALANCE_QUIET: Duration = Duration::from_secs(5);
/// A draining node waits this long for requests in flight to end before saving a sandbox
/// (new ones wait for the move at the entry node).
const DRAIN_WAIT: Duration = Duration::from_secs(10);
/// Most placements of failed nodes the leader moves per tick.
const FAILOVER_BATCH: usize = 512;
/// Most failover commits in flight at once (Raft batches them into few log writes).
const FAILOVER_IN_FLIGHT: usize = 64;
/// Most sandboxes one node moves away at once (drain, rebalance): each move saves the
/// sandbox as a sleep does, and the node's host-work threads bound that work anyway.
const MOVES_AT_ONCE: usize = 8;

/// A handoff as the cluster records it.
pub(crate) fn to_raft(h: HandoffData) -> Handoff {
    Handoff {
        record: h.record,
        snapshot: h.snapshot,
        resume: h.resume,
    }
}

/// Runs the loop until `stop` is cancelled (a tick under way, a move included, ends first:
/// the node's shutdown waits for it within its deadline).
pub fn spawn(st: Control, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut checkpoints = checkpoint::Stamps::new();
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(TICK) => {}
            }
            tick(&st, &mut checkpoints).await;
        }
    })
}

async fn applied(st: &Control, cmd: Command) -> Option<Placement> {
    match st.cluster.propose(cmd).await {
        Ok(CommandResult::Placement {
            placement,
            applied: true,
        }) => placement,
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "placement change not committed");
            None
        }
    }
}

async fn tick(st: &Control, checkpoints: &mut checkpoint::Stamps) {
    let cl = &st.cluster;
    // Every decision below needs this node's view to be current (caught up and in touch).
    if !cl.has_lease() {
        return;
    }
    let me = cl.id;
    announce_limits(st).await;
    let local = st.mgr.local_ids();
    // O(nodes): the placements are shared with the applied state, not copied.
    let state: ClusterState = cl.read(|s| s.clone());

    // Leftovers: another node owns these now, or this node's copy is older than its latest
    // ownership (the cluster's recovery point is newer).
    for id in &local {
        let epoch = st.mgr.copy_epoch(id).flatten();
        match crate::copies::judge(state.placements.get(id), me, epoch) {
            c if c.set_aside() => {
                crate::fence::discard_taken_over(st, id).await;
            }
            LocalCopy::Current if epoch.is_none() => stamp_new_copy(st, id).await,
            _ => {}
        }
    }
    // In: handed to this node.
    let local = st.mgr.local_ids();
    for p in state.placements.on_node(me) {
        let id = &p.sandbox;
        if p.state == PlacementState::Active && !local.contains(id) {
            if let Some(h) = crate::handoff::handoff_of(p) {
                if let Err(e) = st.mgr.take_over(id, &h, p.owner_since).await {
                    tracing::warn!(sandbox_id = %id, error = %e, "cannot take over a sandbox");
                }
            }
        }
    }
    if cl.is_leader() {
        fail_over(st, &state).await;
    }
    let draining = state
        .nodes
        .get(&me)
        .is_some_and(|n| n.state != NodeState::Up);
    let mut moves: Vec<(String, Placement, NodeId)> = Vec::new();
    let mut reachable: HashMap<NodeId, bool> = HashMap::new();
    let mut due: Vec<(String, Placement, checkpoint::Step)> = Vec::new();
    for id in &local {
        let Some(p) = state.placements.get(id) else {
            continue;
        };
        // Only the owner's copy is moved or checkpointed: never one another node owns, nor
        // a stale one not set aside yet (its conflict snapshot could not be written).
        let epoch = st.mgr.copy_epoch(id).flatten();
        if crate::copies::judge(Some(p), me, epoch) != LocalCopy::Current {
            continue;
        }
        if p.state == PlacementState::Migrating {
            // A move of ours that did not finish (this node restarted in between): it stays.
            applied(
                st,
                Command::Move {
                    sandbox: id.clone(),
                    expected_epoch: p.epoch,
                    node: me,
                    handoff: None,
                },
            )
            .await;
            continue;
        }
        let region = st.mgr.region_of(id).unwrap_or_default();
        let target = if draining {
            choose_owner_excluding(&state, id, &region, &[me])
        } else {
            choose_owner(&state, id, &region)
                .filter(|w| *w != me && st.mgr.is_quiet(id, REBALANCE_QUIET))
        };
        // A full node is not given more (a drain waits for room; a rebalance stays put).
        let target = target.filter(|t| room(&state, *t) != Some(0));
        // The applied state may still call a node up that just died (it was placed here
        // because that node did not answer): never hand a sandbox to a node that is silent.
        if let Some(target) = target {
            // One ping per target and tick, not one per sandbox.
            let answers = match reachable.get(&target).copied() {
                Some(a) => a,
                None => {
                    let a = cl.reachable(target).await;
                    reachable.insert(target, a);
                    a
                }
            };
            if answers {
                moves.push((id.clone(), p.clone(), target));
                checkpoints.remove(id);
                continue;
            }
        }
        let step = checkpoint::due(st, id, p, state.nodes.len(), checkpoints);
        if step.acts() {
            due.push((id.clone(), p.clone(), step));
        }
    }
    // The moves of this tick, several at once: each is its own sandbox's commits and save,
    // so a drain of many sandboxes takes the time of a few saves per round, not of all of
    // them one after another.
    futures_util::stream::iter(&moves)
        .for_each_concurrent(MOVES_AT_ONCE, |(id, p, target)| {
            move_out(st, id, p, *target, draining)
        })
        .await;
    checkpoint::run_all(st, due).await;
    checkpoints.retain(|id, _| local.contains(id));
}

/// Moves one sandbox of this node to `target`.
async fn move_out(st: &Control, id: &str, p: &Placement, target: NodeId, draining: bool) {
    let me = st.cluster.id;
    let Some(moving) = applied(
        st,
        Command::BeginMove {
            sandbox: id.to_string(),
            epoch: p.epoch,
        },
    )
    .await
    else {
        return;
    };
    let started = Instant::now();
    let back_here = Command::Move {
        sandbox: id.to_string(),
        expected_epoch: moving.epoch,
        node: me,
        handoff: None,
    };
    // New requests now wait at their entry node, once this node has applied the move's
    // start (requests here check it after counting themselves in flight). Let those in
    // flight finish (a drain must go on after a bound; a rebalance found the sandbox quiet
    // and keeps it so).
    st.cluster
        .wait_for(Duration::from_secs(5), |s| {
            s.placements
                .get(id)
                .is_some_and(|p| p.epoch >= moving.epoch)
        })
        .await;
    let wait = if draining { DRAIN_WAIT } else { Duration::ZERO };
    let idle = st.mgr.wait_idle(id, wait).await;
    if !idle && !draining {
        tracing::info!(sandbox_id = %id, "busy again; the move waits for a quiet moment");
        applied(st, back_here).await;
        return;
    }
    let handoff = match st.mgr.hand_off(id).await {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(sandbox_id = %id, error = %e, "cannot save a sandbox to move it; it stays");
            applied(st, back_here).await;
            return;
        }
    };
    let moved = applied(
        st,
        Command::Move {
            sandbox: id.to_string(),
            expected_epoch: moving.epoch,
            node: target,
            handoff: Some(to_raft(handoff)),
        },
    )
    .await;
    if moved.is_none() {
        // Still ours (asleep): the next request wakes it here.
        applied(st, back_here).await;
        return;
    }
    if let Err(e) = st.mgr.discard(id).await {
        tracing::warn!(sandbox_id = %id, error = %e, "moved, but the local copy could not be removed");
    }
    tracing::info!(sandbox_id = %id, to = target, ms = started.elapsed().as_millis() as u64, "sandbox moved");
}

/// Leader: placements on nodes that are down, draining but silent, or removed go to
/// survivors, with their last handoff, once no lease of that node can still be running (it
/// stopped serving them by then). One batch per tick, its commits concurrent.
async fn fail_over(st: &Control, state: &ClusterState) {
    let cl = &st.cluster;
    let silent = cl.silent_nodes();
    let plan = plan_failover(
        state,
        |node| needs_failover(state, &silent, node, cl.id),
        |node| cl.may_fail_over(node),
        FAILOVER_BATCH,
    );
    if plan.moves.is_empty() {
        if plan.no_room > 0 {
            tracing::debug!(
                no_room = plan.no_room,
                "sandboxes of failed nodes wait for a survivor with room"
            );
        }
        return;
    }
    let started = Instant::now();
    let planned = plan.moves.len();
    let moved = futures_util::stream::iter(plan.moves)
        .map(|m| async move {
            let cmd = Command::Move {
                sandbox: m.sandbox.clone(),
                expected_epoch: m.epoch,
                node: m.to,
                handoff: None,
            };
            let done = applied(st, cmd).await;
            if let Some(p) = &done {
                tracing::warn!(sandbox_id = %m.sandbox, from = m.from, to = m.to, snapshot = ?p.handoff.as_ref().and_then(|h| h.snapshot.clone()), "sandbox failed over");
            }
            done.is_some()
        })
        .buffer_unordered(FAILOVER_IN_FLIGHT)
        .filter(|done| std::future::ready(*done))
        .count()
        .await;
    tracing::warn!(
        moved,
        planned,
        no_room = plan.no_room,
        deferred = plan.deferred,
        ms = started.elapsed().as_millis() as u64,
        "failover round"
    );
}

/// Tells the cluster this node's sandbox limit, and whether it is full (it would refuse to
/// start a sandbox of the default size now), when either differs from what the state says:
/// new placements, failover and rebalancing pass over a full node.
async fn announce_limits(st: &Control) {
    let cl = &st.cluster;
    let max = st.mgr.config().max_sandboxes as u64;
    let full = st.mgr.is_full();
    let said = cl.read(|s| s.nodes.get(&cl.id).map(|n| (n.max_sandboxes, n.full)));
    if said.is_some_and(|m| m != (Some(max), full)) {
        let cmd = Command::SetNodeLimits {
            node: cl.id,
            max_sandboxes: max,
            full,
        };
        if let Err(e) = cl.propose(cmd).await {
            tracing::warn!(error = %e, "cannot tell the cluster this node's sandbox limit");
        }
    }
}

/// A copy made here before its epoch was known (by the request that created it, or before
/// epochs were recorded): recorded as the owner's from the epoch the placement gave this
/// node (`copies`).
pub async fn stamp_new_copy(st: &Control, id: &str) {
    if st.mgr.copy_epoch(id) != Some(None) {
        return;
    }
    let cl = &st.cluster;
    let since = cl.read(|s| {
        s.placements
            .get(id)
            .filter(|p| p.node == cl.id)
            .map(|p| p.owner_since)
    });
    if let Some(since) = since {
        if let Err(e) = st.mgr.stamp_epoch(id, since).await {
            tracing::warn!(sandbox_id = %id, error = %e, "cannot record the epoch of a copy");
        }
    }
}
