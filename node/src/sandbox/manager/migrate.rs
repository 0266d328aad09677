//! Moving sandboxes between nodes, as the node sees it: evacuate (save like a sleep, then
//! forget it here, keeping the snapshot), take over (take a sandbox over from what the previous
//! owner handed off: it arrives asleep, and starts at once if it was running), periodic
//! checkpoints (a snapshot of a running sandbox, the recovery point if this node fails),
//! and discarding a copy another node now owns. The cluster side (who moves what, and the
//! placement commits around it) lives in the router's `cluster/migrate.rs`.

use super::persist::saved_dirs;
use super::SandboxManager;
use crate::sandbox::record::SandboxRecord;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use warren_api::sandbox::SandboxState;
use warren_api::ApiError;
use warren_storage::snapshots::SnapshotOrigin;

/// A sandbox deleted here is not taken over from a handoff for this long (its placement's
/// removal may still be on its way).
pub(super) const TOMBSTONE: std::time::Duration = std::time::Duration::from_secs(60);

/// What another node needs to continue a sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffData {
    /// The sandbox record, serialized.
    pub record: String,
    /// The snapshot its files come back from (none: it starts from its image).
    pub snapshot: Option<String>,
    /// It was running: the new owner starts it at once.
    pub resume: bool,
}

impl SandboxManager {
    /// Ids of the sandboxes this node holds.
    pub fn local_ids(&self) -> Vec<String> {
        self.slots
            .lock()
            .expect("slots lock")
            .iter()
            .filter(|(_, s)| s.record().is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// The region a local sandbox asked for.
    pub fn region_of(&self, id: &str) -> Option<String> {
        self.existing_slot(id)?.record().map(|r| r.region)
    }

    /// Milliseconds since the epoch of the sandbox's last request or open stream.
    pub fn last_active_ms(&self, id: &str) -> Option<u64> {
        let slot = self.existing_slot(id)?;
        if slot.streams.load(Ordering::Relaxed) > 0 {
            return Some(super::now_ms());
        }
        Some(slot.last_active_ms.load(Ordering::Relaxed))
    }

    /// Whether nothing of the sandbox is in flight (requests, streams, terminals, tunnels)
    /// and nothing was for at least `quiet`.
    pub fn is_quiet(&self, id: &str, quiet: std::time::Duration) -> bool {
        self.last_active_ms(id)
            .is_some_and(|at| super::now_ms().saturating_sub(at) >= quiet.as_millis() as u64)
    }

    /// Waits up to `timeout` for the sandbox's requests and streams in flight to end;
    /// whether they did.
    pub async fn wait_idle(&self, id: &str, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let busy = self
                .existing_slot(id)
                .is_some_and(|s| s.streams.load(Ordering::Relaxed) > 0);
            if !busy {
                return true;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// What a new owner would need right now, without changing anything (a sandbox that
    /// never slept nor was checkpointed hands off no snapshot).
    pub fn handoff_now(&self, id: &str) -> Option<HandoffData> {
        let rec = self.existing_slot(id)?.record()?;
        Some(HandoffData {
            record: serde_json::to_string(&rec).expect("records serialize"),
            snapshot: rec.snapshot.clone(),
            // One still starting was asked to run.
            resume: matches!(rec.state, SandboxState::Running | SandboxState::Starting),
        })
    }

    /// Saves the sandbox as a sleep does (per its `persist`) and returns what its next owner
    /// needs. It stays here, asleep, until the move is committed (then `discard` it); a
    /// move that fails leaves a sleeping sandbox, woken by the next request as usual.
    pub async fn hand_off(self: &Arc<Self>, id: &str) -> Result<HandoffData, ApiError> {
        let slot = self.existing_slot(id).ok_or_else(|| super::not_found(id))?;
        let _g = slot.lock.lock().await;
        let rec = slot.record().ok_or_else(|| super::not_found(id))?;
        let resume = rec.state == SandboxState::Running;
        if resume {
            self.sleep_locked(&slot, rec).await?;
        } else if rec.state != SandboxState::Sleeping {
            // Starting or failed: whatever container is left goes; the files come from
            // its last snapshot, if any.
            self.remove_container(id).await?;
        }
        let rec = slot.record().ok_or_else(|| super::not_found(id))?;
        Ok(HandoffData {
            record: serde_json::to_string(&rec).expect("records serialize"),
            snapshot: rec.snapshot.clone(),
            resume,
        })
    }

    /// The epoch this node's copy of `id` carries (`SandboxRecord::epoch`): None when there
    /// is no copy here, `Some(None)` for a copy without one.
    pub fn copy_epoch(&self, id: &str) -> Option<Option<u64>> {
        self.existing_slot(id)?.record().map(|r| r.epoch)
    }

    /// Records that this node's copy of `id` is the owner's from cluster epoch `epoch` on,
    /// unless it already says so (or later).
    pub async fn stamp_epoch(&self, id: &str, epoch: u64) -> Result<(), ApiError> {
        let Some(slot) = self.existing_slot(id) else {
            return Ok(());
        };
        let _g = slot.lock.lock().await;
        let Some(mut rec) = slot.record() else {
            return Ok(());
        };
        if rec.epoch.is_some_and(|e| e >= epoch) {
            return Ok(());
        }
        rec.epoch = Some(epoch);
        self.save(&rec)?;
        slot.set(Some(rec));
        Ok(())
    }

    /// Takes over a sandbox from `h`, as the owner from cluster epoch `owner_since` on (a
    /// no-op when this node already holds a copy: the caller sets a stale one aside first).
    /// It arrives asleep; if it was running it is woken in the background.
    pub async fn take_over(
        self: &Arc<Self>,
        id: &str,
        h: &HandoffData,
        owner_since: u64,
    ) -> Result<(), ApiError> {
        let mut rec: SandboxRecord = serde_json::from_str(&h.record)
            .map_err(|e| ApiError::internal(format!("unreadable handoff of {id}: {e}")))?;
        let recently_deleted = self
            .deleted
            .lock()
            .expect("deleted lock")
            .get(id)
            .is_some_and(|at| at.elapsed() < TOMBSTONE);
        if recently_deleted {
            return Ok(());
        }
        let slot = self.slot(id);
        {
            let _g = slot.lock.lock().await;
            if slot.record().is_some() {
                return Ok(());
            }
            rec.id = id.to_string();
            rec.node = self.cfg.node_id.clone();
            rec.epoch = Some(owner_since);
            rec.state = SandboxState::Sleeping;
            rec.snapshot = h.snapshot.clone();
            self.save(&rec)?;
            slot.set(Some(rec));
            self.update_gauge();
        }
        tracing::info!(sandbox_id = %id, snapshot = ?h.snapshot, resume = h.resume, "sandbox taken over");
        if h.resume {
            self.resumes.owe(id);
        }
        Ok(())
    }

    /// Removes this node's copy of a sandbox another node owns now (handed off, or taken
    /// over by survivors while this node was cut off): container, run directory and record
    /// go; snapshots stay (the new owner's now).
    pub async fn discard(self: &Arc<Self>, id: &str) -> Result<(), ApiError> {
        self.discard_if(id, |_| true).await.map(|_| ())
    }

    /// [`discard`](Self::discard), if `still` holds for the copy's epoch once its lock is
    /// held: the caller judged the copy before, and a take-over may have replaced it since
    /// (then it stays). False when the copy stayed.
    pub async fn discard_if(
        self: &Arc<Self>,
        id: &str,
        still: impl Fn(Option<u64>) -> bool,
    ) -> Result<bool, ApiError> {
        let Some(slot) = self.existing_slot(id) else {
            return Ok(true);
        };
        let _g = slot.lock.lock().await;
        if slot.record().is_some_and(|r| !still(r.epoch)) {
            return Ok(false);
        }
        self.remove_container(id).await?;
        if slot.record().is_none() {
            return Ok(true);
        }
        self.forget_locked(id, &slot)?;
        tracing::info!(sandbox_id = %id, "this node's copy removed: another node owns the sandbox, or its copy is outdated");
        Ok(true)
    }

    /// Saves what this node's running copy of `id` holds as a `conflict` snapshot (another
    /// node took the sandbox over while this copy was cut off); the snapshot's id, or `None`
    /// when there is nothing to save (not running, or `persist: none`). The copy may be
    /// frozen: the archive is packed from the host, not by the guest.
    pub async fn save_conflict(self: &Arc<Self>, id: &str) -> Result<Option<String>, ApiError> {
        let Some(slot) = self.existing_slot(id) else {
            return Ok(None);
        };
        let _g = slot.lock.lock().await;
        let Some(rec) = slot.record() else {
            return Ok(None);
        };
        if rec.state != SandboxState::Running {
            return Ok(None);
        }
        let Some(dirs) = saved_dirs(&rec.persist) else {
            return Ok(None);
        };
        let name = format!("conflict-{}-{}", self.cfg.node_id, super::now_ms() / 1000);
        let m = self
            .capture(&rec, SnapshotOrigin::Conflict, Some(name), &dirs, false)
            .await?;
        Ok(Some(m.id))
    }

    fn forget_locked(&self, id: &str, slot: &Arc<super::Slot>) -> Result<(), ApiError> {
        self.forget_guest(id);
        self.store
            .delete(id)
            .map_err(|e| ApiError::internal(format!("cannot delete record: {e}")))?;
        slot.set(None);
        self.update_gauge();
        Ok(())
    }

    /// Snapshots a running sandbox without stopping it (per its `persist`; nothing for
    /// `none`) and makes that its recovery point. Returns the handoff describing it and the
    /// snapshot it replaces, which the caller retires (`retire_replaced`) once the cluster
    /// has recorded the new one.
    pub async fn checkpoint(
        self: &Arc<Self>,
        id: &str,
    ) -> Result<Option<(HandoffData, Option<String>)>, ApiError> {
        let Some(slot) = self.existing_slot(id) else {
            return Ok(None);
        };
        let _g = slot.lock.lock().await;
        let Some(mut rec) = slot.record() else {
            return Ok(None);
        };
        if rec.state != SandboxState::Running {
            return Ok(None);
        }
        let Some(dirs) = saved_dirs(&rec.persist) else {
            return Ok(None);
        };
        let m = self
            .capture(&rec, SnapshotOrigin::Checkpoint, None, &dirs, false)
            .await?;
        let previous = rec.snapshot.replace(m.id);
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        let h = HandoffData {
            record: serde_json::to_string(&rec).expect("records serialize"),
            snapshot: rec.snapshot.clone(),
            resume: true,
        };
        Ok(Some((h, previous)))
    }

    /// Deletes the recovery point a checkpoint replaced.
    pub async fn retire_replaced(&self, id: &str, previous: Option<String>, current: &str) {
        self.retire_snapshot(id, previous, current).await;
    }
}
