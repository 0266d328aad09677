//! Fork: one snapshot of the source, then new sandboxes started from it. On the source's
//! own node the new sandboxes do not unpack the snapshot: while the source is frozen, each
//! new container gets a kernel-side copy of the source's overlay upper directory before it
//! first starts (`runtime::upper_copy`), so a fork costs a snapshot plus a file copy per
//! sandbox instead of a snapshot plus a restore per sandbox. Sandboxes placed on other
//! nodes restore the snapshot as any new sandbox from a snapshot does.
//!
//! The freeze (the container paused, and its slot held) covers the snapshot and every
//! copy, which run at the same time, so the snapshot and every fork hold the same files.
//! It ends as soon as the snapshot is written and every target is settled (it took its
//! copy of the source here, or its first create answered: placed on another node, or
//! failed) and the copies under way are done; the new containers' starts, and the other
//! nodes' restores, go on after. Calls to the source wait for it to end.

use super::pause_holds::PauseHold;
use super::persist::{running, to_api};
use super::SandboxManager;
use crate::runtime::SeedCopy;
use crate::sandbox::record::SandboxRecord;
use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::{watch, RwLock};
use warren_api::sandbox::{CreateSandboxRequest, ResourcesRequest, SleepAfter};
use warren_api::snapshot::Snapshot;
use warren_api::ApiError;
use warren_storage::snapshots::{new_snapshot_id, SnapshotOrigin};

/// The files a fork on this node copies instead of restoring its snapshot.
#[derive(Debug)]
pub(super) struct Seed {
    /// The frozen source's overlay upper directory.
    upper: PathBuf,
    /// The source's image (the copy means nothing over any other).
    image: String,
    /// Read-held by every copy under way; the fork write-locks it before it thaws.
    copies: Arc<RwLock<()>>,
    /// The fork's targets that took a copy here or have answered (see `ForkTargets`).
    settled: watch::Sender<BTreeSet<String>>,
}

/// Given to a fork's `create_all`: it reports each target whose first create has answered,
/// whatever the answer. A target is settled once it took a copy of the source on this node
/// or has answered (it was placed elsewhere, or failed); the source is thawed once the
/// snapshot is written and every target is settled.
#[derive(Clone)]
pub struct ForkTargets(watch::Sender<BTreeSet<String>>);

impl ForkTargets {
    pub fn answered(&self, sandbox: &str) {
        self.0.send_if_modified(|s| s.insert(sandbox.to_string()));
    }
}

/// A fork's seed, listed while it lives: removed when dropped, however the fork ends
/// (before its source is thawed, as it is declared after the `PauseHold`).
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
    /// `POST /v1/sandboxes/{id}/fork` on the source's owner, making `count` sandboxes.
    /// `create_all` gets the body that creates one of the new sandboxes (from the fork's
    /// snapshot, with the source's settings: `new_sandbox`), a way to wait until the
    /// snapshot is written, and where to report the targets that answered. When the source can be
    /// frozen, `create_all` runs while the snapshot is written, and the sandboxes it creates
    /// on this node copy the frozen source's files; otherwise it runs once the snapshot is
    /// written (and not at all if that fails).
    pub async fn fork<F, Fut, T>(
        self: &Arc<Self>,
        id: &str,
        count: usize,
        create_all: F,
    ) -> Result<Forked<T>, ApiError>
    where
        F: FnOnce(CreateSandboxRequest, SnapshotWritten, ForkTargets) -> Fut,
        Fut: Future<Output = T>,
    {
        self.ensure(id).await?;
        let slot = self.slot(id);
        let held = slot.lock.lock().await;
        let rec = running(&slot, id)?;
        let sid = new_snapshot_id();
        let (tx, written) = watch::channel(None);
        let frozen_at = std::time::Instant::now();
        let frozen = self.freeze(id).await?;
        let capture = async {
            let r = self
                .capture_as(&rec, sid.clone(), SnapshotOrigin::Fork, None, &[], false)
                .await;
            tx.send_replace(Some(r.is_ok()));
            r.map(|m| to_api(&m))
        };
        let (settled, mut settled_rx) = watch::channel(BTreeSet::new());
        let targets = ForkTargets(settled.clone());
        let Some((frozen, upper)) = frozen else {
            let snapshot = capture.await?;
            drop(held);
            let created =
                create_all(new_sandbox(&rec, &sid), SnapshotWritten(written), targets).await;
            return Ok(Forked {
                snapshot: Ok(snapshot),
                created,
            });
        };
        let copies = Arc::new(RwLock::new(()));
        let seed = Seed {
            upper,
            image: rec.image.clone(),
            copies: copies.clone(),
            settled,
        };
        let seeded = SeedEntry::add(&self.seeds, &sid, seed);
        let (answered_tx, mut answered) = watch::channel(false);
        let creating = async {
            let created =
                create_all(new_sandbox(&rec, &sid), SnapshotWritten(written), targets).await;
            answered_tx.send_replace(true);
            created
        };
        let releasing = async move {
            let snapshot = capture.await;
            // Every target took its copy here or has answered (placed elsewhere, or
            // failed); or create_all is over.
            tokio::select! {
                _ = settled_rx.wait_for(|s| s.len() >= count) => {}
                _ = answered.wait_for(|&done| done) => {}
            }
            // No later sandbox from this snapshot may copy the source once it runs again,
            // and the copies under way finish first.
            drop(seeded);
            let _no_copies = copies.write().await;
            frozen.release().await;
            drop(held);
            tracing::info!(sandbox_id = %id, ms = frozen_at.elapsed().as_millis() as u64, "fork: source thawed");
            snapshot
        };
        let (snapshot, created) = tokio::join!(releasing, creating);
        Ok(Forked { snapshot, created })
    }

    /// Pauses the source when forks can copy its files: the node packs its snapshot itself
    /// (a frozen guest could not) and the engine shows its upper directory.
    async fn freeze(&self, id: &str) -> Result<Option<(PauseHold, PathBuf)>, ApiError> {
        if self.enter_target(id).await?.is_none() {
            return Ok(None);
        }
        let Some(upper) = self.runtime.upper_dir(id).await? else {
            return Ok(None);
        };
        Ok(Some((self.pauses.hold(id).await?, upper)))
    }

    /// A copy of the source of a fork in progress on this node from `snapshot`, for new
    /// sandbox `sandbox`, if there is one, and the source's image. The source stays frozen
    /// until the copy is done.
    pub(super) fn seed_for(
        &self,
        snapshot: Option<&String>,
        sandbox: &str,
    ) -> Option<(String, SeedCopy)> {
        let seeds = self.seeds.lock().expect("seeds lock");
        let seed = seeds.get(snapshot?)?;
        // Never refused while the seed is listed: the fork write-locks only after it took
        // the seed off the list (under this same lock).
        let claim = seed.copies.clone().try_read_owned().ok()?;
        seed.settled
            .send_if_modified(|s| s.insert(sandbox.to_string()));
        Some((seed.image.clone(), SeedCopy::new(seed.upper.clone(), claim)))
    }
}

/// What creates one of a fork's sandboxes: the fork's snapshot (its files and image), with
/// the source's settings (resources, env, labels, sleep, persistence, isolation, egress). Its region is not
/// kept: each new id is placed like any other.
fn new_sandbox(source: &SandboxRecord, snapshot: &str) -> CreateSandboxRequest {
    let r = &source.resources;
    CreateSandboxRequest {
        instance_type: source.instance_type.clone(),
        resources: Some(ResourcesRequest {
            cpus: Some(r.cpus),
            memory_mb: Some(r.memory_mb),
            disk_mb: Some(r.disk_mb),
            pids: Some(r.pids),
        }),
        sleep_after: Some(SleepAfter::Seconds(source.sleep_after_s)),
        keep_alive: Some(source.keep_alive),
        env: Some(source.env.clone()),
        labels: Some(source.labels.clone()),
        persist: Some(source.persist.clone()),
        from_snapshot: Some(snapshot.to_string()),
        isolation: Some(source.isolation),
        egress: source.egress.clone(),
        ..Default::default()
    }
}
