//! Capture: what a running sandbox changed, saved as a snapshot of one instant.
//!
//! When the node packs the archive itself (it can enter the container's mount namespace),
//! the container is paused (`PauseHold`) from the listing of its changes until their
//! archive is written to a spool file on the node's own disk; it runs on while the spool
//! goes to the object store. The snapshot then holds every file as it was at one instant, as
//! a power cut would leave them: no file read at the start of the archive beside another
//! read seconds later, after the code that wrote both had moved on. The sandbox stops for as
//! long as its changed files take to copy to the local disk, not to upload. A container that
//! is paused already (a fork's source, or frozen by the freezer) stays so for as long as
//! that lasts anyway: its archive streams straight to the store, under a hold of the
//! snapshot's own until it is written.
//!
//! When the guest packs (the node cannot enter the container), the sandbox cannot be
//! frozen (its guest would be frozen with it): the archive is read while it runs, and files
//! written meanwhile may be saved at different moments. That is logged.

use super::persist::{snapshot_error, under};
use super::SandboxManager;
use crate::guest::client::full;
use crate::runtime::{enter, ChangeKind, NEVER_SAVED};
use crate::sandbox::record::SandboxRecord;
use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use std::time::Instant;
use tokio::io::AsyncWriteExt;
use warren_api::snapshot::{HoldRequest, HoldResponse, PackRequest, ReleaseRequest};
use warren_api::time::now_rfc3339;
use warren_api::ApiError;
use warren_storage::snapshots::{new_snapshot_id, Manifest, NewSnapshot, SnapshotOrigin};

/// An archive as a stream of bytes.
type Archive = BoxStream<'static, std::io::Result<Bytes>>;

/// The longest the guest holds a sandbox for a pack that does not come (the node listing
/// what changed takes far less; a node that died meanwhile leaves it held this long).
const HOLD_UNCLAIMED: std::time::Duration = std::time::Duration::from_secs(30);

/// Bytes read from a spool file at a time.
const SPOOL_READ: usize = 256 * 1024;

impl SandboxManager {
    /// Saves what the running sandbox changed (under `dirs`, or everything) as a snapshot.
    pub(super) async fn capture(
        &self,
        rec: &SandboxRecord,
        origin: SnapshotOrigin,
        name: Option<String>,
        dirs: &[String],
        quiesce: bool,
    ) -> Result<Manifest, ApiError> {
        let id = new_snapshot_id();
        self.capture_as(rec, id, origin, name, dirs, quiesce).await
    }

    /// `capture`, under an id chosen beforehand.
    pub(super) async fn capture_as(
        &self,
        rec: &SandboxRecord,
        id: String,
        origin: SnapshotOrigin,
        name: Option<String>,
        dirs: &[String],
        quiesce: bool,
    ) -> Result<Manifest, ApiError> {
        let started = Instant::now();
        let target = self.enter_target(&rec.id).await?;
        if quiesce && target.is_some() {
            // The guest stops the sandbox's processes; it cannot answer once frozen.
            self.guest_json(rec, "/archive/quiesce", b"{}".to_vec())
                .await?;
        }
        // `kept`: a hold that lasts until the snapshot is written; `_spooled`: the spool
        // file, deleted then.
        let (archive, deleted, kept, _spooled) = match target {
            None => {
                let (archive, deleted) = self.guest_pack_held(rec, dirs, quiesce).await?;
                (archive, deleted, None, None)
            }
            Some(target) => {
                let hold = self.pauses.hold(&rec.id).await?;
                if hold.was_paused() {
                    // Frozen for a fork or by the freezer, which keep it so anyway: the
                    // archive streams straight to the store, under a hold of its own
                    // until it is written (the other may end first).
                    let (saved, deleted) = self.changed(rec, dirs).await?;
                    match self.pack_here(&target, saved).await {
                        Ok(archive) => (archive, deleted, Some(hold), None),
                        Err(e) => {
                            tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot pack in the container's namespace; the guest packs once the sandbox runs again");
                            hold.release().await;
                            let (archive, deleted) =
                                self.guest_pack_held(rec, dirs, quiesce).await?;
                            (archive, deleted, None, None)
                        }
                    }
                } else {
                    let frozen_at = Instant::now();
                    let listed = self.changed(rec, dirs).await;
                    let spooled = match &listed {
                        Ok((saved, _)) => Some(self.spool(&target, saved.clone()).await),
                        Err(_) => None,
                    };
                    hold.release().await;
                    self.metrics
                        .snapshots
                        .with_label_values(&["frozen"])
                        .observe(frozen_at.elapsed().as_secs_f64());
                    let (_, deleted) = listed?;
                    match spooled.expect("spooled once listed") {
                        Ok((file, path)) => {
                            let archive =
                                tokio_util::io::ReaderStream::with_capacity(file, SPOOL_READ);
                            (archive.boxed(), deleted, None, Some(path))
                        }
                        Err(e) => {
                            tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot pack in the container's namespace; the guest packs instead");
                            let (archive, deleted) =
                                self.guest_pack_held(rec, dirs, quiesce).await?;
                            (archive, deleted, None, None)
                        }
                    }
                }
            }
        };
        let new = NewSnapshot {
            id,
            sandbox: rec.id.clone(),
            name,
            origin,
            created_at: now_rfc3339(),
            image: rec.image.clone(),
            dirs: dirs.to_vec(),
            deleted,
            tenant: self.recovery.tenant_of(&rec.id),
        };
        let written = self.write_capture(new, archive).await;
        if let Some(hold) = kept {
            hold.release().await;
        }
        let m = written?;
        self.metrics
            .snapshots
            .with_label_values(&["capture"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(sandbox_id = %rec.id, snapshot = %m.id, bytes = m.size_bytes, new_bytes = m.new_bytes,
            ms = started.elapsed().as_millis() as u64, "snapshot written");
        Ok(m)
    }

    /// Writes `archive` as the snapshot `new` describes.
    async fn write_capture(
        &self,
        new: NewSnapshot,
        archive: Archive,
    ) -> Result<Manifest, ApiError> {
        let progress = crate::sandbox::progress::current();
        if let Some(p) = &progress {
            p.phase("archive", 0);
        }
        let reader = tokio_util::io::StreamReader::new(archive.inspect_ok(move |b| {
            if let Some(p) = &progress {
                p.add(b.len() as u64);
            }
        }));
        self.snapshots
            .write(new, reader)
            .await
            .map_err(snapshot_error)
    }

    /// The paths the container changed under `dirs` (or everywhere) that a snapshot saves,
    /// and those it deleted; each sorted (parents before their children, so an archive
    /// creates directories first).
    async fn changed(
        &self,
        rec: &SandboxRecord,
        dirs: &[String],
    ) -> Result<(Vec<String>, Vec<String>), ApiError> {
        let changes = self.runtime.changes(&rec.id).await?;
        let keep = |p: &str| {
            !NEVER_SAVED.iter().any(|n| under(p, n))
                && (dirs.is_empty() || dirs.iter().any(|d| under(p, d)))
        };
        let (mut saved, mut deleted) = (Vec::new(), Vec::new());
        for c in changes.into_iter().filter(|c| keep(&c.path)) {
            match c.kind {
                ChangeKind::Deleted => deleted.push(c.path),
                ChangeKind::Added | ChangeKind::Modified => saved.push(c.path),
            }
        }
        saved.sort();
        deleted.sort();
        Ok((saved, deleted))
    }

    /// The archive of `paths`, packed by the node (`pack_here`) into a file of the spool,
    /// read back from its start. The file is deleted when the path returned
    /// is dropped.
    async fn spool(
        &self,
        target: &enter::Target,
        paths: Vec<String>,
    ) -> std::io::Result<(tokio::fs::File, tempfile::TempPath)> {
        let (file, path) = tempfile::Builder::new()
            .prefix("capture-")
            .tempfile_in(self.cfg.spool_dir())?
            .into_parts();
        let mut out = tokio::fs::File::from_std(file);
        let mut archive = self.pack_here(target, paths).await?;
        while let Some(piece) = archive.next().await {
            out.write_all(&piece?).await?;
        }
        out.flush().await?;
        drop(out);
        let back = tokio::fs::File::open(&path).await?;
        Ok((back, path))
    }

    /// The archive of `paths`, packed by the node in the container's mount namespace
    /// (outside the sandbox's cgroup, so it runs while the sandbox is frozen).
    async fn pack_here(
        &self,
        target: &enter::Target,
        paths: Vec<String>,
    ) -> std::io::Result<Archive> {
        let request = serde_json::to_vec(&PackRequest {
            paths,
            quiesce: false,
            hold: None,
        })
        .expect("serializes");
        Ok(enter::pack_in_container(target, request).await?.boxed())
    }

    /// What changed (under `dirs`), packed by the guest, and what was deleted. The guest
    /// holds the sandbox's processes (SIGSTOP) from before the changes are listed until the
    /// archive is read, so that it is one instant of the files, as the freezer makes it when
    /// the node packs. A guest that cannot hold (made by an older version, or not the
    /// container's init) packs while the sandbox runs, and the node logs that. A quiesced
    /// sandbox (about to sleep) has no process left to hold.
    async fn guest_pack_held(
        &self,
        rec: &SandboxRecord,
        dirs: &[String],
        quiesce: bool,
    ) -> Result<(Archive, Vec<String>), ApiError> {
        let hold = if quiesce {
            None
        } else {
            self.guest_hold(rec).await
        };
        let packed = async {
            let (saved, deleted) = self.changed(rec, dirs).await?;
            let archive = self.guest_pack(rec, saved, quiesce, hold).await?;
            Ok((archive, deleted))
        }
        .await;
        if let (Err(_), Some(h)) = (&packed, hold) {
            let body = serde_json::to_vec(&ReleaseRequest { hold: h }).expect("serializes");
            if let Err(e) = self.guest_json(rec, "/archive/release", body).await {
                tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot end a pack hold; it ends by itself");
            }
        }
        packed
    }

    /// A hold on the sandbox's processes (`guest_pack_held`); None when the guest cannot.
    async fn guest_hold(&self, rec: &SandboxRecord) -> Option<u64> {
        let body = serde_json::to_vec(&HoldRequest {
            max_ms: HOLD_UNCLAIMED.as_millis() as u64,
        })
        .expect("serializes");
        let held = async {
            let answer = self.guest_json(rec, "/archive/hold", body).await?;
            serde_json::from_slice::<HoldResponse>(&answer)
                .map_err(|e| ApiError::internal(format!("hold answer: {e}")))
        };
        match held.await {
            Ok(h) => {
                tracing::debug!(sandbox_id = %rec.id, hold = h.hold, stopped = h.stopped, "guest holds the sandbox for its archive");
                Some(h.hold)
            }
            Err(e) => {
                tracing::warn!(sandbox_id = %rec.id, error = %e.message, "the guest cannot hold the sandbox: it packs while the sandbox runs (files written meanwhile may be saved at different moments)");
                None
            }
        }
    }

    /// The archive of `paths`, packed by the guest (under `hold`, if any).
    async fn guest_pack(
        &self,
        rec: &SandboxRecord,
        paths: Vec<String>,
        quiesce: bool,
        hold: Option<u64>,
    ) -> Result<Archive, ApiError> {
        let request = serde_json::to_vec(&PackRequest {
            paths,
            quiesce,
            hold,
        })
        .expect("serializes");
        let resp = self
            .guest_call(rec, "/archive/pack", "application/json", full(request))
            .await?;
        Ok(resp
            .into_body()
            .into_data_stream()
            .map_err(std::io::Error::other)
            .boxed())
    }
}
