//! Self-fencing: while this node holds no ownership lease (cut off from the cluster's
//! majority, paused, or not yet in touch after a start), the majority may hand its sandboxes
//! to another node, so their processes must stop making progress here. The fence marks the
//! `cluster_lease` guarantee broken within one look (`LOOK_EVERY`): the manager's freezer
//! then freezes every running sandbox (the cgroup freezer), no sandbox starts, and calls
//! answer 503. When the lease is back, the copies another node took over meanwhile are
//! settled first — what each held is saved as a `conflict` snapshot, then the copy goes —
//! and only then are the rest thawed. A node alone in its cluster needs no fence.
//!
//! The same holds when the node process itself is gone: while it holds the lease, the fence
//! renews the fence file (`warren_node::runtime::fence_file`) with the time the lease still
//! runs, and every guest stops its sandbox's processes once that time has passed without a
//! renewal. The file is renewed only after the copies taken over meanwhile are settled, so a
//! copy that is about to go never runs on.

use crate::copies::{self, LocalCopy};
use crate::Control;
use std::time::Duration;
use warren_consensus::Cluster;
use warren_node::runtime::fence_file::FenceFile;
use warren_node::safety::{Guarantee, Safety};

/// How often the fence looks at the lease.
const LOOK_EVERY: Duration = Duration::from_millis(100);

const NO_LEASE: &str =
    "this node holds no lease from the cluster's majority; its sandboxes are frozen until it does";

/// Marks the lease missing before anything starts on a node of a real cluster: until its
/// first lease, it cannot know which of its sandboxes are still its own (and their guests
/// keep them stopped). A node alone lifts the fence file of an earlier life.
pub fn fence_until_leased(cluster: &Cluster, safety: &Safety, file: &FenceFile) {
    if cluster.read(|s| s.nodes.len()) >= 2 {
        safety.set(Guarantee::Lease, Some(NO_LEASE.to_string()));
        file.stop();
    } else {
        file.off();
    }
}

/// Runs the fence until its task is aborted: the node does so last when it stops, and the
/// fence file then says what it said last, as when the process ends. It runs on the
/// cluster's runtime, beside the lease it follows: while the node's request threads are
/// stalled, the fence file is still renewed for as long as the lease holds.
pub fn spawn(st: Control) -> tokio::task::JoinHandle<()> {
    let runtime = st.cluster.runtime().clone();
    runtime.spawn(async move {
        loop {
            look(&st).await;
            tokio::time::sleep(LOOK_EVERY).await;
        }
    })
}

async fn look(st: &Control) {
    let cl = &st.cluster;
    let safety = st.mgr.safety();
    let alone = cl.read(|s| s.nodes.len()) < 2;
    let fenced = !safety.holds(Guarantee::Lease);
    if alone || cl.has_lease() {
        if fenced {
            settle_taken_over(st).await;
            safety.set(Guarantee::Lease, None);
        }
    } else if let Some(why) = cl.superseded() {
        safety.set(Guarantee::Lease, Some(why));
    } else if !fenced {
        safety.set(Guarantee::Lease, Some(NO_LEASE.to_string()));
    }
    // Asked again after the settling, which can take seconds: what the guests may run is
    // never more than the lease that is left now.
    let file = &st.fence_file;
    match file_says(alone, cl.lease_left()) {
        FileSays::Off => file.off(),
        FileSays::RunFor(left) => file.hold_for(left),
        FileSays::Stop => file.stop(),
    }
}

/// What the fence file tells the guests.
#[derive(Debug, PartialEq, Eq)]
enum FileSays {
    /// No fence: a node alone in its cluster.
    Off,
    /// Run on for this long unless renewed (what the lease has left).
    RunFor(Duration),
    /// Stop now.
    Stop,
}

fn file_says(alone: bool, lease_left: Option<Duration>) -> FileSays {
    match (alone, lease_left) {
        (true, _) => FileSays::Off,
        (false, Some(left)) => FileSays::RunFor(left),
        (false, None) => FileSays::Stop,
    }
}

/// Every local copy of a sandbox that another node owns now, or that is older than this
/// node's latest ownership of it (`copies::judge`): settled (`discard_taken_over`).
async fn settle_taken_over(st: &Control) {
    for id in st.mgr.local_ids() {
        if judge_copy(st, &id).set_aside() {
            discard_taken_over(st, &id).await;
        }
    }
}

/// This node's copy of `id` against the committed placement.
pub fn judge_copy(st: &Control, id: &str) -> LocalCopy {
    judge_epoch(st, id, st.mgr.copy_epoch(id).flatten())
}

/// A copy of `id` that carries `epoch`, against the committed placement.
fn judge_epoch(st: &Control, id: &str, epoch: Option<u64>) -> LocalCopy {
    let cl = &st.cluster;
    cl.read(|s| copies::judge(s.placements.get(id), cl.id, epoch))
}

/// Removes this node's copy of a sandbox another node owns now (or a stale copy of one
/// handed back to it). A copy that was running may hold files the new owner's copy lacks
/// (written after the recovery point it came back from): those are saved first as a
/// `conflict` snapshot, logged and listed under the sandbox, so its owner can recover them.
/// If that snapshot cannot be written, the copy is kept (and tried again next time). True
/// when no such copy is left (removed, or replaced meanwhile by a take-over).
pub async fn discard_taken_over(st: &Control, id: &str) -> bool {
    match st.mgr.save_conflict(id).await {
        Ok(Some(snapshot)) => {
            tracing::warn!(sandbox_id = %id, %snapshot, "another node took this sandbox over; what this copy held is kept as a conflict snapshot")
        }
        Ok(None) => {}
        Err(e) => {
            tracing::error!(sandbox_id = %id, error = %e, "another node took this sandbox over and this copy's files cannot be saved; the copy is kept");
            return false;
        }
    }
    // Judged again under the copy's lock: a take-over that replaced it since (with the
    // cluster's recovery point) is not undone.
    let still = |epoch: Option<u64>| judge_epoch(st, id, epoch).set_aside();
    if let Err(e) = st.mgr.discard_if(id, still).await {
        tracing::warn!(sandbox_id = %id, error = %e, "cannot remove a copy another node owns");
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_runs_a_node_alone_and_otherwise_only_what_the_lease_has_left() {
        let left = Duration::from_millis(1500);
        assert_eq!(file_says(true, None), FileSays::Off);
        assert_eq!(file_says(true, Some(left)), FileSays::Off);
        assert_eq!(file_says(false, Some(left)), FileSays::RunFor(left));
        assert_eq!(file_says(false, None), FileSays::Stop);
    }
}
