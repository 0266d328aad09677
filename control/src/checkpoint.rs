//! Checkpoints: what bounds the writes a node failure can lose. A running sandbox of this node
//! gets its record published in its placement as soon as it exists (survivors can then bring
//! it back with its settings), and a snapshot every `checkpoint_every` while it is active,
//! recorded as its recovery point.
//!
//! Which sandboxes are due is one pure decision per sandbox (`step`); the due ones of a tick
//! are checkpointed several at once (`CHECKPOINTS_AT_ONCE`): each reads its own sandbox's
//! files and writes its own snapshot, so a node with many active sandboxes refreshes their
//! recovery points in the time of a few snapshots per round, not of all of them in a row.

use crate::Control;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use warren_consensus::{Command, CommandResult, Placement};
use warren_node::sandbox::manager::HandoffData;

/// Most checkpoints one node takes at once. Each packs a sandbox's files on the node's
/// host-work threads and uploads them; more at once than this buys nothing on a few cores
/// and takes CPU from the sandboxes that run.
pub const CHECKPOINTS_AT_ONCE: usize = 4;

/// When each local sandbox was last considered for a snapshot: the instant (for the period)
/// and the wall-clock millisecond (to compare with its last activity, 0 before its first).
pub type Stamps = HashMap<String, (Instant, u64)>;

/// What a sandbox needs this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing: one node alone (no node could take it over), checkpoints off, not due yet,
    /// or no activity since the last snapshot.
    Nothing,
    /// First seen with a handoff (this node restarted, or took it over): its period starts
    /// now, nothing is taken.
    StartPeriod,
    /// Its record is not in its placement yet: publish it (a commit, no snapshot).
    PublishRecord,
    /// Snapshot its files and record that as its recovery point.
    Snapshot,
}

/// What the sandbox needs, from the cluster's size, whether its placement holds a handoff,
/// the period, when it was last considered (`last`: instant and wall-clock ms) and its last
/// activity (wall-clock ms).
pub fn step(
    nodes: usize,
    has_handoff: bool,
    every: Duration,
    last: Option<(Instant, u64)>,
    last_active_ms: Option<u64>,
    now: Instant,
) -> Step {
    if nodes < 2 {
        return Step::Nothing;
    }
    if !has_handoff {
        return Step::PublishRecord;
    }
    if every.is_zero() {
        return Step::Nothing;
    }
    let Some((at, at_ms)) = last else {
        return Step::StartPeriod;
    };
    let active_since = last_active_ms.is_some_and(|a| a > at_ms);
    if now.duration_since(at) >= every && active_since {
        Step::Snapshot
    } else {
        Step::Nothing
    }
}

impl Step {
    /// Whether the tick has work to do for it (`run_all`).
    pub fn acts(self) -> bool {
        matches!(self, Step::PublishRecord | Step::Snapshot)
    }
}

/// Decides what sandbox `id` (placement `p`, in a cluster of `nodes`) needs and stamps the
/// start of its period: a published record or a first sight counts activity from any time
/// before for the next snapshot; a snapshot counts activity from now on.
pub fn due(st: &Control, id: &str, p: &Placement, nodes: usize, stamps: &mut Stamps) -> Step {
    let now = Instant::now();
    let last = stamps.get(id).copied();
    let s = step(
        nodes,
        p.handoff.is_some(),
        st.mgr.config().checkpoint_every,
        last,
        st.mgr.last_active_ms(id),
        now,
    );
    match s {
        Step::PublishRecord | Step::StartPeriod => {
            stamps.insert(id.to_string(), (now, 0));
        }
        Step::Snapshot => {
            stamps.insert(id.to_string(), (now, now_ms()));
        }
        Step::Nothing => {}
    }
    s
}

/// Carries out the steps of a tick, several at once.
pub async fn run_all(st: &Control, due: Vec<(String, Placement, Step)>) {
    futures_util::stream::iter(due)
        .for_each_concurrent(CHECKPOINTS_AT_ONCE, |(id, p, s)| async move {
            match s {
                Step::PublishRecord => publish_first_handoff(st, &id).await,
                Step::Snapshot => snapshot(st, &id, &p).await,
                Step::Nothing | Step::StartPeriod => {}
            }
        })
        .await;
}

/// Snapshots the sandbox and records the snapshot as its recovery point; the one it replaces
/// is retired once the new one is recorded.
async fn snapshot(st: &Control, id: &str, p: &Placement) {
    let started = Instant::now();
    match st.mgr.checkpoint(id).await {
        Ok(Some((h, previous))) => {
            let current = h.snapshot.clone().unwrap_or_default();
            if record_handoff(st, id, p.epoch, h).await {
                // The cluster's recovery point until now differs from the local one when an
                // earlier checkpoint's commit failed: both are replaced.
                let recorded = p.handoff.as_ref().and_then(|h| h.snapshot.clone());
                if recorded != previous {
                    st.mgr.retire_replaced(id, recorded, &current).await;
                }
                st.mgr.retire_replaced(id, previous, &current).await;
                tracing::debug!(sandbox_id = %id, snapshot = %current, ms = started.elapsed().as_millis() as u64, "sandbox checkpointed");
            }
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(sandbox_id = %id, error = %e, "checkpoint failed"),
    }
}

/// Publishes the record of a sandbox of this node that has no recovery point in the cluster
/// yet (it was just created), so that survivors can bring it back with its settings if this
/// node fails. Costs one commit per sandbox; nothing once published, or in a one-node cluster.
pub async fn publish_first_handoff(st: &Control, id: &str) {
    let cl = &st.cluster;
    let epoch = cl.read(|s| {
        if s.nodes.len() < 2 {
            return None;
        }
        s.placements
            .get(id)
            .filter(|p| p.node == cl.id && p.handoff.is_none())
            .map(|p| p.epoch)
    });
    if let (Some(epoch), Some(h)) = (epoch, st.mgr.handoff_now(id)) {
        record_handoff(st, id, epoch, h).await;
    }
}

/// Commits `h` as the sandbox's recovery point; whether it was recorded.
async fn record_handoff(st: &Control, id: &str, epoch: u64, h: HandoffData) -> bool {
    let cmd = Command::Checkpoint {
        sandbox: id.to_string(),
        epoch,
        handoff: crate::migrate::to_raft(h),
    };
    match st.cluster.propose(cmd).await {
        Ok(CommandResult::Placement {
            placement: Some(_),
            applied: true,
        }) => true,
        Ok(_) => false,
        Err(e) => {
            tracing::warn!(sandbox_id = %id, error = %e, "checkpoint not committed");
            false
        }
    }
}

fn now_ms() -> u64 {
    warren_api::time::unix_millis(std::time::SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: Duration = Duration::from_secs(60);

    #[test]
    fn a_lone_node_checkpoints_nothing() {
        let now = Instant::now();
        assert_eq!(step(1, false, EVERY, None, Some(5), now), Step::Nothing);
        assert_eq!(
            step(1, true, EVERY, Some((now, 0)), Some(5), now),
            Step::Nothing
        );
    }

    #[test]
    fn a_sandbox_without_a_recorded_handoff_gets_its_record_published_whatever_the_period() {
        let now = Instant::now();
        assert_eq!(step(2, false, EVERY, None, None, now), Step::PublishRecord);
        assert_eq!(
            step(3, false, Duration::ZERO, Some((now, 9)), None, now),
            Step::PublishRecord
        );
    }

    #[test]
    fn a_snapshot_is_due_once_the_period_passed_and_only_after_activity_since_the_last() {
        let t0 = Instant::now();
        let later = t0 + EVERY;
        // Not seen before: the period starts.
        assert_eq!(
            step(2, true, EVERY, None, Some(5), later),
            Step::StartPeriod
        );
        // Period not over.
        let early = t0 + EVERY / 2;
        assert_eq!(
            step(2, true, EVERY, Some((t0, 0)), Some(5), early),
            Step::Nothing
        );
        // Over, active since: due.
        assert_eq!(
            step(2, true, EVERY, Some((t0, 0)), Some(5), later),
            Step::Snapshot
        );
        // Over, but quiet since the last snapshot (taken at ms 100).
        assert_eq!(
            step(2, true, EVERY, Some((t0, 100)), Some(100), later),
            Step::Nothing
        );
        assert_eq!(
            step(2, true, EVERY, Some((t0, 100)), None, later),
            Step::Nothing
        );
        // Checkpoints off.
        assert_eq!(
            step(2, true, Duration::ZERO, Some((t0, 0)), Some(5), later),
            Step::Nothing
        );
    }
}
