//! Snapshots, restore, sleep and wake: a sandbox's files leave a container as an archive
//! in the snapshot store and come back into a fresh container from it.
//!
//! What is saved is what the container changed relative to its image (the engine lists the
//! paths; the guest archives them), plus the list of image paths it deleted. Restoring means
//! a fresh container of the snapshot's image, the deletions, then the archive unpacked —
//! and only after every chunk was fetched and verified, so a damaged snapshot fails before
//! anything changes.

use super::restore_fill::SnapshotFill;
use super::{guest_error, not_found, HandoffData, SandboxManager, Slot};
use crate::guest::client::{full, BoxError, GuestBody};
use crate::runtime::{enter, RootFill};
use crate::sandbox::lifecycle::{self, Event};
use crate::sandbox::record::SandboxRecord;
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_api::sandbox::{Persist, PersistMode, Sandbox, SandboxState};
use warren_api::snapshot::{CreateSnapshotRequest, RemovePathsRequest, Snapshot};
use warren_api::{ApiError, ErrorCode};
use warren_storage::snapshots::{Manifest, Prepared, SnapshotError, SnapshotOrigin};

/// Whether `path` is `dir` or inside it.
pub(super) fn under(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.strip_prefix(dir).is_some_and(|r| r.starts_with('/'))
}

/// What a sleep, checkpoint or conflict snapshot saves per the sandbox's `persist`: the
/// directories (empty: the whole disk), or `None` for `persist: none` (nothing is saved).
pub(super) fn saved_dirs(persist: &Persist) -> Option<Vec<String>> {
    match persist {
        Persist::Mode(PersistMode::Disk) => Some(Vec::new()),
        Persist::Dirs { dirs } => Some(normalize_dirs(dirs)),
        Persist::Mode(PersistMode::None) => None,
    }
}

/// Directories as saved: without trailing slashes, sorted, no duplicates; `/` means all.
pub fn normalize_dirs(dirs: &[String]) -> Vec<String> {
    let mut out: Vec<String> = dirs
        .iter()
        .map(|d| d.trim_end_matches('/').to_string())
        .collect();
    if out.iter().any(|d| d.is_empty()) {
        return Vec::new();
    }
    out.sort();
    out.dedup();
    out
}

pub fn to_api(m: &Manifest) -> Snapshot {
    Snapshot {
        id: m.id.clone(),
        sandbox: m.sandbox.clone(),
        name: m.name.clone(),
        created_at: m.created_at.clone(),
        size_bytes: m.size_bytes,
        dirs: m.dirs.clone(),
        image: m.image.clone(),
        origin: m.origin.as_str().to_string(),
        stored_bytes: m.stored_bytes,
        new_bytes: m.new_bytes,
    }
}

/// The one place where snapshot errors become API errors.
pub fn snapshot_error(e: SnapshotError) -> ApiError {
    match &e {
        SnapshotError::NotFound(id) => ApiError::new(
            ErrorCode::SnapshotNotFound,
            format!("snapshot {id} not found"),
        ),
        SnapshotError::Invalid(m) => ApiError::invalid(m.clone()),
        SnapshotError::Damaged { id, .. } | SnapshotError::Format { id, .. } => {
            ApiError::internal(e.to_string())
                .with_details(serde_json::json!({ "snapshot": id, "damaged": true }))
        }
        SnapshotError::Store(_) => ApiError::new(ErrorCode::Unavailable, e.to_string()),
        SnapshotError::Source(_) | SnapshotError::Cache(_) => ApiError::internal(e.to_string()),
    }
}

/// The sandbox's own recovery point (what it sleeps in, or came to this node with) cannot be
/// read: the store is down, or the object is missing or damaged. The sandbox is never
/// started without its files; the answer is retryable (the store may come back, an operator
/// may put the object back) and names the snapshot. Restoring it from another snapshot, or
/// deleting it, still works.
pub(super) fn recovery_point_unreadable(rec: &SandboxRecord, e: ApiError) -> ApiError {
    let snapshot = rec.snapshot.clone().unwrap_or_default();
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "sandbox {} cannot start: its files are in snapshot {snapshot}, which cannot be read now ({}); retry, restore it from another snapshot, or delete it",
            rec.id, e.message
        ),
    )
    .with_details(serde_json::json!({
        "sandbox": rec.id,
        "snapshot": snapshot,
        "cause": e.code.as_str(),
    }))
}

/// The snapshot's archive, reporting the `unpack` phase to the caller's progress.
pub(super) fn tar_stream(
    prepared: Prepared,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> + Send + 'static {
    let progress = crate::sandbox::progress::current();
    if let Some(p) = &progress {
        p.phase("unpack", prepared.manifest().size_bytes);
    }
    prepared.into_stream().inspect_ok(move |b| {
        if let Some(p) = &progress {
            p.add(b.len() as u64);
        }
    })
}

fn tar_body(prepared: Prepared) -> GuestBody {
    let stream = tar_stream(prepared)
        .map_ok(Frame::data)
        .map_err(|e| Box::new(e) as BoxError);
    StreamBody::new(stream).boxed_unsync()
}

impl SandboxManager {
    /// One POST to the guest whose non-2xx answers become the guest's own API error.
    pub(super) async fn guest_call(
        &self,
        rec: &SandboxRecord,
        path: &str,
        content_type: &str,
        body: GuestBody,
    ) -> Result<http::Response<Incoming>, ApiError> {
        self.guest_request(rec, http::Method::POST, path, content_type, body)
            .await
    }

    /// One call to the guest whose non-2xx answers become the guest's own API error.
    pub(super) async fn guest_request(
        &self,
        rec: &SandboxRecord,
        method: http::Method,
        path: &str,
        content_type: &str,
        body: GuestBody,
    ) -> Result<http::Response<Incoming>, ApiError> {
        let req = http::Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, content_type)
            .body(body)
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let resp = self
            .guests
            .send(&rec.guest_key(), req)
            .await
            .map_err(|e| guest_error(&rec.id, e))?;
        if resp.status().is_success() {
            return Ok(resp);
        }
        Err(crate::guest::body::error_of(resp).await)
    }

    /// Posts a JSON body to the guest; its (small) answer.
    pub(super) async fn guest_json(
        &self,
        rec: &SandboxRecord,
        path: &str,
        body: Vec<u8>,
    ) -> Result<bytes::Bytes, ApiError> {
        let resp = self
            .guest_call(rec, path, "application/json", full(body))
            .await?;
        crate::guest::body::collect_limited(resp.into_body(), crate::guest::body::SMALL_LIMIT)
            .await
            .map_err(|e| guest_error(&rec.id, e))
    }

    /// The running container's namespaces for the node's own archive work, unless the node
    /// is set to leave that to the guest or cannot open them.
    pub(super) async fn enter_target(&self, id: &str) -> Result<Option<enter::Target>, ApiError> {
        if !self.config().pack_in_node {
            return Ok(None);
        }
        let Some(before) = self.runtime.inspect(id).await?.filter(|i| i.running) else {
            return Ok(None);
        };
        let target = match enter::Target::open(before.pid, &self.config().guest_binary) {
            Ok(t) => t
                .with_id_shift(self.runtime.id_shift())
                .in_host_work(&self.host_work),
            Err(e) => {
                tracing::warn!(sandbox_id = %id, error = %e, "cannot open the container's namespaces; the guest does the archive work");
                return Ok(None);
            }
        };
        // Still the container's process now that its namespace is held open.
        let same = self
            .runtime
            .inspect(id)
            .await?
            .is_some_and(|i| i.running && i.pid == before.pid);
        Ok(same.then_some(target))
    }

    /// Writes the snapshot's files into the sandbox's fresh container: from the node, in the
    /// container's mount namespace (outside the sandbox's cgroup), or by the guest when the
    /// node cannot enter it.
    async fn unpack(&self, rec: &SandboxRecord, prepared: Prepared) -> Result<(), ApiError> {
        if let Some(target) = self.enter_target(&rec.id).await? {
            match enter::Unpacker::start(&target) {
                Ok(unpacker) => {
                    return unpacker.unpack(tar_stream(prepared)).await.map_err(|e| {
                        ApiError::internal(format!("cannot unpack the snapshot: {e}"))
                    })
                }
                Err(e) => {
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "cannot unpack in the container's namespace; the guest unpacks")
                }
            }
        }
        let resp = self
            .guest_call(
                rec,
                "/archive/unpack",
                "application/x-tar",
                tar_body(prepared),
            )
            .await?;
        crate::guest::body::collect_limited(resp.into_body(), crate::guest::body::SMALL_LIMIT)
            .await
            .map_err(|e| guest_error(&rec.id, e))?;
        Ok(())
    }

    /// Fetches and verifies every chunk of a snapshot into the local cache.
    /// Fetches and checks the chunks of `snapshot` for sandbox `sandbox`, which may start
    /// only from its own tenant's snapshots (another's is answered as absent).
    async fn prepare(&self, snapshot: &str, sandbox: &str) -> Result<Prepared, ApiError> {
        let m = self
            .snapshots
            .manifest(snapshot)
            .await
            .map_err(snapshot_error)?;
        if m.tenant() != self.recovery.tenant_of(sandbox) {
            return Err(ApiError::new(
                ErrorCode::SnapshotNotFound,
                format!("snapshot {snapshot} not found"),
            ));
        }
        if let Some(p) = crate::sandbox::progress::current() {
            p.phase("fetch", 0);
        }
        self.snapshots.prepare(&m).await.map_err(snapshot_error)
    }

    /// Starts a fresh container for `rec` (none may exist) and puts the snapshot's files in
    /// it. On failure the container goes again: never a half-restored sandbox.
    pub(super) async fn start_fresh(
        &self,
        rec: &mut SandboxRecord,
        prepared: Option<Prepared>,
    ) -> Result<(), ApiError> {
        let manifest = prepared.as_ref().map(|p| p.manifest().clone());
        match self.start_fresh_once(rec, prepared).await {
            // The guest's connection broke while files went in (a new container each time,
            // so a second try is safe); the chunks are in the local cache by now.
            Err(e) if e.code == ErrorCode::Unavailable => {
                let Some(m) = manifest else {
                    return Err(e);
                };
                tracing::warn!(sandbox_id = %rec.id, error = %e, "restoring files failed; trying once more in a new container");
                let again = self.snapshots.prepare(&m).await.map_err(snapshot_error)?;
                self.start_fresh_once(rec, Some(again)).await
            }
            r => r,
        }
    }

    async fn start_fresh_once(
        &self,
        rec: &mut SandboxRecord,
        prepared: Option<Prepared>,
    ) -> Result<(), ApiError> {
        // Session state and logs of an earlier container do not belong to the new one.
        self.forget_guest(&rec.id);
        let t = Instant::now();
        let Some(prepared) = prepared else {
            return self.start_container(rec, true).await;
        };
        // Where the node does the archive work, the files go in while the container starts.
        let cfg = self.config();
        let (fill, prepared) =
            if cfg.pack_in_node && cfg.fill_while_starting && SnapshotFill::possible() {
                let fill = SnapshotFill::new(
                    prepared,
                    cfg.guest_binary.clone(),
                    self.runtime.id_shift(),
                    self.host_work.clone(),
                );
                (Some(fill), None)
            } else {
                (None, Some(prepared))
            };
        // Otherwise unpacking is done after the start. Done in the node's cgroup it needs
        // nothing more; done by the guest, the container starts with the machine's CPUs,
        // and the sandbox's own limit applies once the files are in, before anyone else
        // can use it.
        let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let own = rec.resources.cpus;
        let lifted = !cfg.pack_in_node && machine > own;
        if lifted {
            rec.resources.cpus = machine;
        }
        let started = self
            .start_container_with(rec, true, None, fill.as_ref().map(|f| f as &dyn RootFill))
            .await;
        rec.resources.cpus = own;
        let filled = match started {
            Ok(filled) => filled,
            Err(e) => {
                if fill.is_some() {
                    // Its files may be half-written: never a half-restored sandbox.
                    tracing::warn!(sandbox_id = %rec.id, error = %e, "restoring files failed; removing the container");
                    let _ = self.remove_container(&rec.id).await;
                }
                return Err(e);
            }
        };
        if filled {
            self.metrics
                .snapshots
                .with_label_values(&["start_and_apply"])
                .observe(t.elapsed().as_secs_f64());
            tracing::info!(sandbox_id = %rec.id, ms = t.elapsed().as_millis() as u64,
                "restore: files written while the container started");
            return Ok(());
        }
        let prepared = prepared
            .or_else(|| fill.and_then(SnapshotFill::into_unwritten))
            .ok_or_else(|| ApiError::internal("the snapshot was neither written nor kept"))?;
        tracing::info!(sandbox_id = %rec.id, ms = t.elapsed().as_millis() as u64, "restore: new container ready");
        let started = Instant::now();
        let applied = async {
            let deleted = &prepared.manifest().deleted;
            if !deleted.is_empty() {
                let body = serde_json::to_vec(&RemovePathsRequest {
                    paths: deleted.clone(),
                })
                .expect("serializes");
                self.guest_json(rec, "/archive/remove", body).await?;
            }
            self.unpack(rec, prepared).await?;
            if lifted {
                self.runtime.set_cpus(&rec.id, rec.resources.cpus).await?;
            }
            Ok::<(), ApiError>(())
        }
        .await;
        if let Err(e) = applied {
            let info = self.runtime.inspect(&rec.id).await.ok().flatten();
            let logs = self.runtime.logs_tail(&rec.id, 20).await;
            tracing::warn!(sandbox_id = %rec.id, error = %e, running = ?info.map(|i| i.running), guest_output = %logs.trim(),
                "restoring files failed; removing the container");
            let _ = self.remove_container(&rec.id).await;
            return Err(e);
        }
        self.metrics
            .snapshots
            .with_label_values(&["apply"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(sandbox_id = %rec.id, ms = started.elapsed().as_millis() as u64, "restore: files unpacked");
        Ok(())
    }

    /// Prepares the snapshot a new or recovering sandbox starts from, if it has one.
    pub(super) async fn prepare_for(
        &self,
        rec: &SandboxRecord,
    ) -> Result<Option<Prepared>, ApiError> {
        match &rec.snapshot {
            Some(s) => self.prepare(s, &rec.id).await.map(Some),
            None => Ok(None),
        }
    }

    /// `POST /v1/sandboxes/{id}/snapshots` (and the snapshot of a fork).
    pub async fn snapshot(
        self: &Arc<Self>,
        id: &str,
        req: &CreateSnapshotRequest,
        origin: SnapshotOrigin,
    ) -> Result<Snapshot, ApiError> {
        req.validate()?;
        self.ensure(id).await?;
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        let rec = running(&slot, id)?;
        let dirs = normalize_dirs(req.dirs.as_deref().unwrap_or_default());
        let m = self
            .capture(&rec, origin, req.name.clone(), &dirs, false)
            .await?;
        Ok(to_api(&m))
    }

    /// `POST /v1/sandboxes/{id}/restore`: the sandbox's files become the snapshot's (a fresh
    /// container of the snapshot's image); running processes and sessions end.
    pub async fn restore(self: &Arc<Self>, id: &str, snapshot: &str) -> Result<Sandbox, ApiError> {
        warren_api::ids::validate_sandbox_id(id)?;
        if self.get(id).is_none() {
            self.ensure(id).await?;
        }
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        slot.touch();
        let mut rec = slot.record().ok_or_else(|| not_found(id))?;
        // Everything is fetched and verified before the current container is touched.
        let t = Instant::now();
        let prepared = self.prepare(snapshot, id).await?;
        tracing::info!(sandbox_id = %id, snapshot = %snapshot, ms = t.elapsed().as_millis() as u64, "restore: chunks ready");
        let previous = rec.snapshot.replace(snapshot.to_string());
        rec.image = prepared.manifest().image.clone();
        let event = if rec.state == SandboxState::Sleeping {
            Event::Waking
        } else {
            Event::Recovering
        };
        rec.state = lifecycle::next(rec.state, event)?;
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        // The old container is set aside and frozen now, and removed in the background once
        // the new one has started: the new one neither waits for it nor shares CPU with it.
        let old = self.remove_container_soon(id).await?;
        let result = self.start_fresh(&mut rec, Some(prepared)).await;
        drop(old);
        self.finish_start(&slot, rec, &result)?;
        self.retire_snapshot(id, previous, snapshot).await;
        result.map(|_| slot.api().expect("record present"))
    }

    /// Records the outcome of a start under the slot lock.
    pub(super) fn finish_start(
        &self,
        slot: &Arc<Slot>,
        mut rec: SandboxRecord,
        result: &Result<(), ApiError>,
    ) -> Result<SandboxRecord, ApiError> {
        let event = if result.is_ok() {
            Event::Started
        } else {
            Event::StartFailed
        };
        rec.state = lifecycle::next(rec.state, event)?;
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        // Idle time counts from the start: a slow start does not leave it asleep at once.
        slot.touch();
        self.update_gauge();
        Ok(rec)
    }

    /// `POST /v1/sandboxes/{id}/sleep`.
    pub async fn sleep(self: &Arc<Self>, id: &str) -> Result<Sandbox, ApiError> {
        warren_api::ids::validate_sandbox_id(id)?;
        if self.get(id).is_none() {
            self.ensure(id).await?;
        }
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        // New calls wait for the sleep; those already at the guest get a moment to answer
        // (beyond it they are cut, as the quiesce stops every process).
        let _closed = slot.close_to_calls();
        wait_for_other_calls(&slot, SLEEP_WAITS_FOR_CALLS).await;
        let rec = slot.record().ok_or_else(|| not_found(id))?;
        match rec.state {
            SandboxState::Sleeping => {}
            SandboxState::Running => self.sleep_locked(&slot, rec).await?,
            other => {
                return Err(ApiError::new(
                    ErrorCode::Conflict,
                    format!("sandbox {id} is {} and cannot sleep", other.as_str()),
                ))
            }
        }
        Ok(slot.api().expect("record present"))
    }

    /// Saves per `persist`, removes the container, and marks the sandbox sleeping.
    pub(super) async fn sleep_locked(
        &self,
        slot: &Arc<Slot>,
        mut rec: SandboxRecord,
    ) -> Result<(), ApiError> {
        let started = Instant::now();
        let dirs = saved_dirs(&rec.persist);
        let previous = rec.snapshot.clone();
        if let Some(dirs) = dirs {
            let m = self
                .capture(&rec, SnapshotOrigin::Sleep, None, &dirs, true)
                .await?;
            // Saved before the container goes: a crash in between recovers from it.
            rec.snapshot = Some(m.id);
            self.save(&rec)?;
            slot.set(Some(rec.clone()));
            // And recorded where survivors look, before the container goes and before the
            // older snapshot is deleted: until then the older one is what they restore.
            let asleep = SandboxRecord {
                state: SandboxState::Sleeping,
                ..rec.clone()
            };
            let h = HandoffData {
                record: serde_json::to_string(&asleep).expect("records serialize"),
                snapshot: rec.snapshot.clone(),
                resume: false,
            };
            self.recovery.record(&rec.id, &h).await?;
        }
        self.remove_container(&rec.id).await?;
        self.forget_guest(&rec.id);
        rec.state = lifecycle::next(rec.state, Event::Slept)?;
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        self.update_gauge();
        if let Some(keep) = rec.snapshot.as_deref() {
            self.retire_snapshot(&rec.id, previous, keep).await;
        }
        self.metrics
            .snapshots
            .with_label_values(&["sleep"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(sandbox_id = %rec.id, ms = started.elapsed().as_millis() as u64, "sandbox asleep");
        Ok(())
    }

    /// Wakes a sleeping sandbox under its slot lock: its files come back from its snapshot.
    /// If the snapshot cannot be read, nothing changes and the sandbox stays asleep.
    pub(super) async fn wake_locked(
        &self,
        slot: &Arc<Slot>,
        mut rec: SandboxRecord,
    ) -> Result<SandboxRecord, ApiError> {
        let started = Instant::now();
        // Fetch and start under one permit: a failover's hundreds of wakes go a few at a time.
        let _permit = self
            .wake_permits
            .acquire()
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?;
        let prepared = self
            .prepare_for(&rec)
            .await
            .map_err(|e| recovery_point_unreadable(&rec, e))?;
        rec.state = lifecycle::next(rec.state, Event::Waking)?;
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        let result = self.start_fresh(&mut rec, prepared).await;
        let rec = self.finish_start(slot, rec, &result)?;
        result?;
        self.metrics
            .snapshots
            .with_label_values(&["wake"])
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(sandbox_id = %rec.id, ms = started.elapsed().as_millis() as u64, "sandbox awake");
        Ok(rec)
    }

    /// Deletes the sandbox's earlier recovery point once a newer one, or another snapshot,
    /// holds its files; chunks only it used are collected in the background.
    pub(super) async fn retire_snapshot(&self, id: &str, previous: Option<String>, keep: &str) {
        if let Some(previous) = previous.filter(|p| p != keep) {
            self.retire(id, &previous).await;
        }
    }

    /// Deletes `snapshot` if it is a recovery point (sleep or checkpoint) of sandbox `id`
    /// that nothing survivors would restore refers to (other snapshots stay), then collects
    /// garbage in the background. Failures are logged: the sandbox is fine, the store merely
    /// keeps some bytes longer (see `sweep_recovery_points`).
    pub(super) async fn retire(&self, id: &str, snapshot: &str) {
        if self.recovery.in_use(snapshot) {
            tracing::info!(sandbox_id = %id, snapshot = %snapshot, "kept: the cluster's recovery point");
            return;
        }
        match self.snapshots.manifest(snapshot).await {
            Ok(m) if m.origin.is_recovery_point() && m.sandbox == id => {
                if let Err(e) = self.snapshots.delete(snapshot).await {
                    tracing::warn!(sandbox_id = %id, snapshot = %snapshot, error = %e, "could not delete an old sleep snapshot");
                    return;
                }
            }
            _ => return,
        }
        self.collect_garbage_later();
    }

    /// Runs a collection soon. Requests coalesce: while one waits to start, more are
    /// covered by it, so a burst of deletions costs one pass over the store, not one each.
    pub(super) fn collect_garbage_later(&self) {
        if self.gc.queued.swap(true, Ordering::SeqCst) {
            return;
        }
        let (store, grace, gc) = (
            self.snapshots.clone(),
            self.cfg.snapshot_gc_grace,
            self.gc.clone(),
        );
        tokio::spawn(async move {
            let _running = gc.lock.lock().await;
            // From here on, a new request queues another pass (it may miss this one's listing).
            gc.queued.store(false, Ordering::SeqCst);
            match store.collect_garbage(grace).await {
                Ok(r) => tracing::debug!(
                    deleted = r.deleted_chunks,
                    bytes = r.deleted_bytes,
                    kept = r.kept_chunks,
                    deferred = r.deferred,
                    "snapshot chunks collected"
                ),
                Err(e) => tracing::warn!(error = %e, "collecting snapshot chunks failed"),
            }
        });
    }

    /// Deletes recovery points of sandboxes this node owns that are not their current one
    /// (left behind when the node died between writing a new one and deleting the old). A
    /// sandbox this node holds a record of but does not own by a current view of the cluster
    /// is left alone: its snapshots may be another owner's by now.
    pub async fn sweep_recovery_points(&self) {
        let current: std::collections::HashMap<String, Option<String>> = self
            .slots
            .lock()
            .expect("slots lock")
            .iter()
            .filter_map(|(id, s)| s.record().map(|r| (id.clone(), r.snapshot)))
            .collect();
        let all = match self.snapshots.list(None).await {
            Ok(all) => all,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list snapshots to sweep old sleep snapshots");
                return;
            }
        };
        for m in all.iter().filter(|m| m.origin.is_recovery_point()) {
            if let Some(cur) = current.get(&m.sandbox) {
                if cur.as_deref() != Some(m.id.as_str()) && self.recovery.owns(&m.sandbox) {
                    self.retire(&m.sandbox, &m.id).await;
                }
            }
        }
    }

    /// The tenant sandbox `id` belongs to (`RecoveryPoints::tenant_of`).
    pub fn tenant_of(&self, id: &str) -> String {
        self.recovery.tenant_of(id)
    }

    pub fn snapshot_store(&self) -> &warren_storage::snapshots::SnapshotStore {
        &self.snapshots
    }

    /// Deletes a snapshot and collects the chunks only it used (`DELETE /v1/snapshots/{sid}`).
    /// A sandbox's recovery point in the cluster is refused (409): deleting it would leave
    /// the sandbox nothing to come back from.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), ApiError> {
        if self.recovery.in_use(snapshot) {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("snapshot {snapshot} is a sandbox's recovery point; it goes when the sandbox is deleted or saved anew"),
            ));
        }
        self.snapshots
            .delete(snapshot)
            .await
            .map_err(snapshot_error)?;
        self.collect_garbage_later();
        Ok(())
    }
}

/// Garbage collection of snapshot chunks on this node: one pass at a time, at most one
/// waiting.
#[derive(Default)]
pub(super) struct GcState {
    lock: tokio::sync::Mutex<()>,
    queued: AtomicBool,
}

/// How long `POST /sleep` lets calls already at the guest finish.
const SLEEP_WAITS_FOR_CALLS: Duration = Duration::from_secs(5);

/// Waits up to `limit` until no call but the caller's own (the sleep request) is open.
async fn wait_for_other_calls(slot: &Slot, limit: Duration) {
    let deadline = Instant::now() + limit;
    while slot.in_flight() > 1 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) fn running(slot: &Arc<Slot>, id: &str) -> Result<SandboxRecord, ApiError> {
    slot.record()
        .filter(|r| r.state == SandboxState::Running)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("sandbox {id} changed state meanwhile; retry"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_and_prefixes() {
        assert!(under("/workspace/a", "/workspace"));
        assert!(under("/workspace", "/workspace"));
        assert!(!under("/workspace2", "/workspace"));
        assert!(under("/x", "/"));
        let d = normalize_dirs(&["/b/".into(), "/a".into(), "/b".into()]);
        assert_eq!(d, vec!["/a", "/b"]);
        assert!(normalize_dirs(&["/".into()]).is_empty());
    }
}
