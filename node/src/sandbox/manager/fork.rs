//! Fork: one snapshot of the source, then new sandboxes started from it. On the source's
//! own node the new sandboxes do not unpack the snapshot: while the source is frozen, each
//! new container gets a kernel-side copy of the source's overlay upper directory before it
//! first starts (`runtime::upper_copy`), so a fork costs a snapshot plus a file copy per
//! sandbox instead of a snapshot plus a restore per sandbox. Sandboxes placed on other
//! nodes restore the snapshot as any new sandbox from a snapshot does.
//!
//! The freeze (the container paused) covers the snapshot and every copy, which run at the
//! same time, so the snapshot and every fork hold the same files. Calls to the source wait
//! for it to end.

use super::persist::{running, to_api};
use super::SandboxManager;
use crate::runtime::ContainerRuntime;
use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::watch;
use warren_api::snapshot::Snapshot;
use warren_api::ApiError;
use warren_storage::snapshots::{new_snapshot_id, SnapshotOrigin};

/// The files a fork on this node copies instead of restoring its snapshot.
#[derive(Debug, Clone)]
pub(super) struct Seed {
    /// The frozen source's overlay upper directory.
    pub upper: PathBuf,
    /// The source's image (the copy means nothing over any other).
    pub image: String,
}

/// A fork's seed, listed while it lives: removed when dropped, however the fork ends
/// (before its source is thawed, as it is declared after the `Frozen`).
struct SeedEntry<'a> {
    seeds: &'a Mutex<HashMap<String, Seed>>,
    snapshot: String,
}

impl<'a> SeedEntry<'a> {
    fn add(seeds: &'a Mutex<HashMap<String, Seed>>, snapshot: &str, seed: Seed) -> Self {
        seeds
            .lock()
            .expect("seeds lock")
            .insert(snapshot.to_string(), seed);
        SeedEntry {
            seeds,
            snapshot: snapshot.to_string(),
        }
    }
}

impl Drop for SeedEntry<'_> {
    fn drop(&mut self) {
        self.seeds
            .lock()
            .expect("seeds lock")
            .remove(&self.snapshot);
    }
}

/// A source container paused for a fork. Thawed by `thaw`, or on drop (an error, or the
/// request dropped half-way) in the background.
struct Frozen {
    runtime: Arc<dyn ContainerRuntime>,
    id: String,
    thawed: bool,
}

impl Frozen {
    async fn thaw(mut self) {
        self.thawed = true;
        unpause(self.runtime.clone(), self.id.clone()).await;
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        if !self.thawed {
            tokio::spawn(unpause(self.runtime.clone(), self.id.clone()));
        }
    }
}

async fn unpause(runtime: Arc<dyn ContainerRuntime>, id: String) {
    if let Err(e) = runtime.unpause(&id).await {
        tracing::error!(sandbox_id = %id, error = %e, "cannot thaw a fork's source");
    }
}

/// Resolves once a fork's snapshot is written (`true`) or has failed (`false`).
#[derive(Clone)]
pub struct SnapshotWritten(watch::Receiver<Option<bool>>);

impl SnapshotWritten {
    pub async fn wait(mut self) -> bool {
        self.0
            .wait_for(Option::is_some)
            .await
            .map(|v| v.unwrap_or(false))
            .unwrap_or(false)
    }
}

/// What a fork did: its snapshot (or why there is none) and what `create_all` returned.
pub struct Forked<T> {
    pub snapshot: Result<Snapshot, ApiError>,
    pub created: T,
}

impl SandboxManager {
    /// `POST /v1/sandboxes/{id}/fork` on the source's owner. `create_all` gets the id the
    /// fork's snapshot has and a way to wait until it is written. When the source can be
    /// frozen, `create_all` runs while the snapshot is written, and the sandboxes it creates
    /// on this node copy the frozen source's files; otherwise it runs once the snapshot is
    /// written (and not at all if that fails).
    pub async fn fork<F, Fut, T>(
        self: &Arc<Self>,
        id: &str,
        create_all: F,
    ) -> Result<Forked<T>, ApiError>
    where
        F: FnOnce(String, SnapshotWritten) -> Fut,
        Fut: Future<Output = T>,
    {
        self.ensure(id).await?;
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        let rec = running(&slot, id)?;
        let sid = new_snapshot_id();
        let (tx, written) = watch::channel(None);
        let frozen = self.freeze(id).await?;
        let capture = async {
            let r = self
                .capture_as(&rec, sid.clone(), SnapshotOrigin::Fork, None, &[], false)
                .await;
            tx.send_replace(Some(r.is_ok()));
            r.map(|m| to_api(&m))
        };
        let Some((frozen, upper)) = frozen else {
            let snapshot = capture.await?;
            let created = create_all(sid, SnapshotWritten(written)).await;
            return Ok(Forked {
                snapshot: Ok(snapshot),
                created,
            });
        };
        let seed = Seed {
            upper,
            image: rec.image.clone(),
        };
        let seeded = SeedEntry::add(&self.seeds, &sid, seed);
        let (snapshot, created) =
            tokio::join!(capture, create_all(sid.clone(), SnapshotWritten(written)));
        // No later sandbox from this snapshot may copy the source once it runs again.
        drop(seeded);
        frozen.thaw().await;
        Ok(Forked { snapshot, created })
    }

    /// Pauses the source when forks can copy its files: the node packs its snapshot itself
    /// (a frozen guest could not) and the engine shows its upper directory.
    async fn freeze(&self, id: &str) -> Result<Option<(Frozen, PathBuf)>, ApiError> {
        if self.enter_target(id).await?.is_none() {
            return Ok(None);
        }
        let Some(upper) = self.runtime.upper_dir(id).await? else {
            return Ok(None);
        };
        self.runtime.pause(id).await?;
        let frozen = Frozen {
            runtime: self.runtime.clone(),
            id: id.to_string(),
            thawed: false,
        };
        Ok(Some((frozen, upper)))
    }

    /// The seed of a fork in progress on this node from `snapshot`, if there is one.
    pub(super) fn seed_for(&self, snapshot: Option<&String>) -> Option<Seed> {
        let seeds = self.seeds.lock().expect("seeds lock");
        snapshot.and_then(|s| seeds.get(s).cloned())
    }
}
