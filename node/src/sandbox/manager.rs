//! The sandbox manager: get-or-create, recovery, deletion, listing, adoption at start-up,
//! activity tracking, and forwarding requests to each sandbox's guest agent. Snapshots,
//! sleep and wake are in `persist`; the idle sleeper in `idle`.
//!
//! Each sandbox id has a slot whose async lock serializes lifecycle changes (create, recover,
//! delete), so concurrent first calls create exactly one container. Calls on a running
//! sandbox take no lock and touch no Docker API: they go straight to the guest's socket.

mod capture;
mod disk;
mod egress;
mod fork;
mod freeze;
mod idle;
mod loops;
mod metering;
mod migrate;
mod pause_holds;
mod persist;
mod ports;
mod restore_fill;
mod resume;
mod upgrade;

pub use fork::{ForkTargets, Forked, SnapshotWritten};
pub use migrate::HandoffData;
pub use ports::PreviewAccess;

pub use persist::{normalize_dirs, snapshot_error, to_api as snapshot_to_api};

use super::admission;
use super::lifecycle::{self, Event};
use super::record::SandboxRecord;
use super::recovery::RecoveryPoints;
use super::store::RecordStore;
use crate::config::NodeConfig;
use crate::guest::client::{full, GuestBody, GuestClient};
use crate::guest::request::guest_request;
use crate::metrics::NodeMetrics;
use crate::runtime::host_work::HostWork;
use crate::runtime::{ContainerInfo, ContainerRuntime, ContainerSpec, RootFill, SeedCopy};
use crate::safety::Safety;
use bytes::Bytes;
use hyper::body::Incoming;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;
use warren_api::sandbox::{CreateSandboxRequest, Sandbox, SandboxList, SandboxState};
use warren_api::time::rfc3339;
use warren_api::{ApiError, ErrorCode};
use warren_storage::snapshots::{open_object_store, ChunkCache, SnapshotStore};

/// The isolation classes this node can run (`GET /healthz`, `GET /v1/cluster`). Every node
/// of this version offers the same, so a class no node offers is refused wherever the
/// sandbox is placed.
pub const ISOLATION_OFFERED: [warren_api::sandbox::Isolation; 1] =
    [warren_api::sandbox::Isolation::Container];

/// How long a new container's guest may take to answer.
const GUEST_READY_TIMEOUT: Duration = Duration::from_secs(30);

pub struct SandboxManager {
    cfg: NodeConfig,
    runtime: Arc<dyn ContainerRuntime>,
    guests: GuestClient,
    store: RecordStore,
    guest_binary: PathBuf,
    slots: Mutex<HashMap<String, Arc<Slot>>>,
    create_permits: Semaphore,
    /// Wakes in flight (`NodeConfig::wake_concurrency`), taken in arrival order.
    wake_permits: Semaphore,
    /// Sandboxes whose container is being started, with their limits: counted as running
    /// by the admission of the others (`admission`).
    admitting: Mutex<HashMap<String, warren_api::sandbox::Resources>>,
    /// Forks in progress on this node, by snapshot id: what their new sandboxes copy.
    seeds: Mutex<HashMap<String, fork::Seed>>,
    metrics: NodeMetrics,
    snapshots: SnapshotStore,
    /// One garbage collection of snapshot chunks at a time.
    gc: Arc<persist::GcState>,
    /// Sandboxes deleted here lately: never taken over again from a stale handoff.
    deleted: Mutex<HashMap<String, Instant>>,
    /// Whether containers may be started at all (`safety`).
    safety: Arc<Safety>,
    /// Sandboxes whose record could not be read: their container is left alone, and the id
    /// is not served until an operator has looked (`RecordStore::load_all`).
    quarantined: Mutex<HashSet<String>>,
    /// Where snapshot archiving, unpacking and chunk work run: bounded, not the node's own.
    host_work: Arc<HostWork>,
    /// Where recovery points are recorded (the cluster's placements, or nowhere but here).
    recovery: Arc<dyn RecoveryPoints>,
    /// Running sandboxes by their container's address: whom the egress proxy serves.
    addrs: egress::AddrBook,
    /// What each sandbox uses here (`crate::usage`).
    meter: Arc<crate::usage::Meter>,
    /// Who keeps which container paused (forks, snapshots, the disk-limit killer, the
    /// freezer).
    pauses: Arc<pause_holds::PauseHolds>,
    /// The manager's own loops, ended by `stop_loops`.
    loops: loops::Loops,
    /// Sandboxes taken over while running, owed a start (`resume`).
    resumes: Arc<resume::Resumes>,
}

/// A container start admitted and under way (`SandboxManager::admit`).
struct Admitted<'a> {
    mgr: &'a SandboxManager,
    id: String,
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.mgr
            .admitting
            .lock()
            .expect("admitting lock")
            .remove(&self.id);
    }
}

struct Slot {
    lock: tokio::sync::Mutex<()>,
    rec: Mutex<Option<SandboxRecord>>,
    last_active_ms: AtomicU64,
    streams: AtomicUsize,
    /// Set while a sleep saves the files and removes the container: calls that find the
    /// sandbox running wait for the slot lock instead of going to the guest (`close_to_calls`).
    closing: AtomicBool,
}

impl Slot {
    fn new(rec: Option<SandboxRecord>) -> Arc<Slot> {
        Arc::new(Slot {
            lock: tokio::sync::Mutex::new(()),
            rec: Mutex::new(rec),
            last_active_ms: AtomicU64::new(now_ms()),
            streams: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
        })
    }

    /// Until the guard is dropped, calls that find the sandbox running wait for the slot
    /// lock (which the caller holds) instead of going to the guest. A call that got past
    /// that point counted itself first (`streams`, sequentially consistent on both sides):
    /// after closing, `in_flight` sees every call that may still reach the guest.
    fn close_to_calls(self: &Arc<Self>) -> ClosedToCalls {
        self.closing.store(true, Ordering::SeqCst);
        ClosedToCalls(self.clone())
    }

    /// Requests and streams open on the sandbox.
    fn in_flight(&self) -> usize {
        self.streams.load(Ordering::SeqCst)
    }

    fn record(&self) -> Option<SandboxRecord> {
        self.rec.lock().expect("slot lock").clone()
    }

    fn set(&self, rec: Option<SandboxRecord>) {
        *self.rec.lock().expect("slot lock") = rec;
    }

    fn running_key(&self) -> Option<String> {
        let g = self.rec.lock().expect("slot lock");
        g.as_ref()
            .filter(|r| r.state == SandboxState::Running)
            .map(|r| r.guest_key())
    }

    fn touch(&self) {
        self.last_active_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn api(&self) -> Option<Sandbox> {
        let ms = self.last_active_ms.load(Ordering::Relaxed);
        self.record()
            .map(|r| r.to_api(Some(rfc3339(UNIX_EPOCH + Duration::from_millis(ms)))))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64
}

/// Opens the sandbox to calls again when dropped.
struct ClosedToCalls(Arc<Slot>);

impl Drop for ClosedToCalls {
    fn drop(&mut self) {
        self.0.closing.store(false, Ordering::SeqCst);
    }
}

/// A request body for the guest: replayable bytes, or a one-shot stream.
pub enum Payload {
    Bytes(Bytes),
    Stream(GuestBody),
}

/// Keeps a sandbox counted as active while a request or a response stream is open.
pub struct ActivityGuard {
    slot: Arc<Slot>,
    /// Counts as the sandbox's use (idle time starts over), not only as work in flight.
    touches: bool,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        self.slot.streams.fetch_sub(1, Ordering::SeqCst);
        if self.touches {
            self.slot.touch();
        }
    }
}

/// Filters of `GET /v1/sandboxes`.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub state: Option<SandboxState>,
    pub labels: Vec<(String, String)>,
    pub region: Option<String>,
    pub limit: usize,
    pub cursor: Option<String>,
    /// Only this tenant's sandboxes (none: every tenant's).
    pub tenant: Option<String>,
}

impl SandboxManager {
    /// Opens the store, installs the guest binary and re-adopts this node's containers.
    /// No container is started while `safety` says a guarantee does not hold.
    pub async fn start(
        cfg: NodeConfig,
        runtime: Arc<dyn ContainerRuntime>,
        metrics: NodeMetrics,
        safety: Arc<Safety>,
        host_work: Arc<HostWork>,
        recovery: Arc<dyn RecoveryPoints>,
    ) -> Result<Arc<Self>, ApiError> {
        let io = |what: &str, e: std::io::Error| ApiError::internal(format!("{what}: {e}"));
        let store = RecordStore::open(&cfg.sandboxes_dir())
            .map_err(|e| io("cannot open the sandbox store", e))?;
        // Run directories were on the host's disk before they moved into the containers:
        // what an earlier version left there is nobody's any more.
        let _ = std::fs::remove_dir_all(cfg.data_dir.join("run"));
        // Archives spooled by snapshots under way when the node stopped.
        let _ = std::fs::remove_dir_all(cfg.spool_dir());
        std::fs::create_dir_all(cfg.spool_dir())
            .map_err(|e| io("cannot create the snapshot spool", e))?;
        let guest_binary =
            crate::guest::binary::install(&cfg.guest_binary, &cfg.data_dir.join("bin"))
                .map_err(|e| io("cannot install the guest binary", e))?;
        let objects = warren_storage::metered::MeteredStore::wrap(
            open_object_store(&cfg.object_store).map_err(snapshot_error)?,
            metrics.object_store.clone(),
        );
        let cache = ChunkCache::open_on(
            &cfg.chunk_cache_dir(),
            cfg.chunk_cache_bytes,
            host_work.pool(),
            metrics.chunk_cache.clone(),
        )
        .map_err(|e| io("cannot open the chunk cache", e))?;
        let meter =
            crate::usage::Meter::open(&cfg.usage_dir(), &cfg.node_id, Some(metrics.usage.clone()))
                .map_err(|e| ApiError::internal(format!("cannot open the usage ledger: {e}")))?;
        let mgr = Arc::new(SandboxManager {
            meter: Arc::new(meter),
            guests: GuestClient::new(metrics.guest_refused.clone()),
            addrs: egress::AddrBook::default(),
            create_permits: Semaphore::new(cfg.create_concurrency.max(1)),
            wake_permits: Semaphore::new(cfg.wake_concurrency.max(1)),
            admitting: Mutex::new(HashMap::new()),
            cfg,
            pauses: pause_holds::PauseHolds::new(runtime.clone()),
            runtime,
            store,
            guest_binary,
            slots: Mutex::new(HashMap::new()),
            metrics,
            snapshots: SnapshotStore::new(objects, cache),
            gc: Arc::default(),
            deleted: Mutex::new(HashMap::new()),
            seeds: Mutex::new(HashMap::new()),
            safety,
            quarantined: Mutex::new(HashSet::new()),
            host_work,
            recovery,
            resumes: Arc::default(),
            loops: loops::Loops::default(),
        });
        mgr.adopt().await?;
        idle::spawn(&mgr);
        disk::spawn(&mgr);
        metering::spawn(&mgr);
        freeze::spawn(&mgr);
        resume::spawn(&mgr);
        let sweeper = mgr.clone();
        mgr.loops.spawn("recovery-point sweeper", async move {
            sweeper.sweep_recovery_points().await
        });
        Ok(mgr)
    }

    /// Ends the manager's loops (see `loops`) and waits for them, at most `within`: whether
    /// all ended. A stopping node calls it before its last usage export.
    pub async fn stop_loops(&self, within: std::time::Duration) -> bool {
        self.loops.stop(within).await
    }

    /// How many of the manager's loops run.
    pub fn loops_running(&self) -> usize {
        self.loops.running()
    }

    pub fn config(&self) -> &NodeConfig {
        &self.cfg
    }

    /// The guest binary containers mount: the copy installed in the data dir (content
    /// addressed), not `config().guest_binary`, which may be a path only this process sees
    /// (a node in a container) or be rebuilt under a running container.
    pub fn guest_binary(&self) -> &std::path::Path {
        &self.guest_binary
    }

    pub fn disk_limits(&self) -> bool {
        self.runtime.disk_limits()
    }

    /// Where host work runs and how it is bounded (`/healthz`).
    pub fn host_work(&self) -> &HostWork {
        &self.host_work
    }

    /// What keeps this node from starting sandboxes, if anything.
    pub fn safety(&self) -> &Safety {
        &self.safety
    }

    /// Whether sandboxes here run in user namespaces.
    pub fn user_namespaces(&self) -> bool {
        self.runtime.id_shift().is_some()
    }

    /// Loads records and matches them with the containers that exist. A container whose
    /// record could not be read is left as it is (quarantined, never removed on doubt).
    async fn adopt(self: &Arc<Self>) -> Result<(), ApiError> {
        let loaded = self
            .store
            .load_all()
            .map_err(|e| ApiError::internal(format!("cannot load records: {e}")))?;
        let containers = self.runtime.list().await.map_err(ApiError::from)?;
        let mut known = HashSet::new();
        for q in &loaded.quarantined {
            if let Some(id) = &q.sandbox_id {
                let running = containers.iter().any(|c| &c.sandbox_id == id);
                tracing::error!(sandbox_id = %id, moved_to = %q.moved_to.display(), reason = %q.reason, container_left = running,
                    "quarantined an unreadable sandbox record; its container is left alone and the id is not served");
                self.quarantined
                    .lock()
                    .expect("quarantine lock")
                    .insert(id.clone());
                known.insert(id.clone());
            }
        }
        for mut rec in loaded.records {
            known.insert(rec.id.clone());
            let container = containers.iter().find(|c| c.sandbox_id == rec.id);
            let mut recover = false;
            // A restore cut short by this node's death: recovery restores the files again.
            let unfinished = lifecycle::restore_unfinished(rec.state, rec.snapshot.is_some());
            match container {
                Some(c) if c.running && !unfinished => {
                    rec.state = SandboxState::Running;
                    self.know_guest(&rec, c);
                }
                Some(_) => {
                    rec.state = SandboxState::Starting;
                    recover = true;
                }
                // Asleep: its files are in its snapshot, and no container is expected.
                None if rec.state == SandboxState::Sleeping => {}
                None if rec.state == SandboxState::Starting && rec.snapshot.is_none() => {
                    // Creation was interrupted before its container existed: it never was.
                    let _ = self.store.delete(&rec.id);
                    continue;
                }
                None => rec.state = SandboxState::Failed,
            }
            let id = rec.id.clone();
            self.slots
                .lock()
                .expect("slots lock")
                .insert(id.clone(), Slot::new(Some(rec)));
            if recover {
                let mgr = self.clone();
                tokio::spawn(async move {
                    if let Err(e) = mgr.recover(&id).await {
                        tracing::warn!(sandbox_id = %id, error = %e, "could not restart an adopted sandbox");
                    }
                });
            }
        }
        for c in containers.iter().filter(|c| !known.contains(&c.sandbox_id)) {
            tracing::warn!(sandbox_id = %c.sandbox_id, container = %c.name, "removing a container without a record");
            let _ = self.remove_container(&c.sandbox_id).await;
        }
        self.update_gauge();
        tracing::info!(sandboxes = known.len(), "adopted sandboxes");
        Ok(())
    }

    fn slot(&self, id: &str) -> Arc<Slot> {
        self.slots
            .lock()
            .expect("slots lock")
            .entry(id.to_string())
            .or_insert_with(|| Slot::new(None))
            .clone()
    }

    fn existing_slot(&self, id: &str) -> Option<Arc<Slot>> {
        self.slots.lock().expect("slots lock").get(id).cloned()
    }

    /// Sandboxes with a record on this node.
    fn sandbox_count(&self) -> usize {
        self.slots
            .lock()
            .expect("slots lock")
            .values()
            .filter(|s| s.record().is_some())
            .count()
    }

    fn update_gauge(&self) {
        self.metrics.sandboxes.set(self.sandbox_count() as i64);
    }

    /// Sets the gauges read when `/metrics` is scraped: sandboxes by state, the safety
    /// guarantees, and the data dir's disk.
    pub fn sample_gauges(&self) {
        self.count_states();
        for g in crate::safety::Guarantee::ALL {
            self.metrics
                .guarantees
                .with_label_values(&[g.name()])
                .set(i64::from(self.safety.holds(g)));
        }
        if let Ok(fs) = rustix::fs::statvfs(&self.cfg.data_dir) {
            let unit = fs.f_frsize as i64;
            self.metrics
                .data_disk_free_bytes
                .set(fs.f_bavail as i64 * unit);
            self.metrics
                .data_disk_size_bytes
                .set(fs.f_blocks as i64 * unit);
        }
    }

    /// Sets `warren_sandboxes_by_state` from the records now.
    fn count_states(&self) {
        let mut by: HashMap<&'static str, i64> = HashMap::new();
        for s in self.slots.lock().expect("slots lock").values() {
            if let Some(r) = s.record() {
                *by.entry(r.state.as_str()).or_default() += 1;
            }
        }
        for state in SandboxState::ALL {
            let n = by.get(state.as_str()).copied().unwrap_or(0);
            self.metrics
                .sandboxes_by_state
                .with_label_values(&[state.as_str()])
                .set(n);
        }
    }

    /// `GET /v1/sandboxes/{id}`: never creates or wakes.
    pub fn get(&self, id: &str) -> Option<Sandbox> {
        self.existing_slot(id).and_then(|s| s.api())
    }

    pub fn list(&self, f: &ListFilter) -> SandboxList {
        let mut all: Vec<Sandbox> = self
            .slots
            .lock()
            .expect("slots lock")
            .iter()
            .filter(|(id, _)| {
                f.tenant
                    .as_ref()
                    .is_none_or(|t| *t == self.recovery.tenant_of(id))
            })
            .filter_map(|(_, s)| s.api())
            .filter(|s| f.state.is_none_or(|st| s.state == st))
            .filter(|s| f.region.as_ref().is_none_or(|r| &s.region == r))
            .filter(|s| f.labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .filter(|s| f.cursor.as_ref().is_none_or(|c| &s.id > c))
            .collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        let limit = f.limit.clamp(1, 1000);
        let next_cursor = (all.len() > limit).then(|| all[limit - 1].id.clone());
        all.truncate(limit);
        SandboxList {
            sandboxes: all,
            next_cursor,
        }
    }

    /// `PUT /v1/sandboxes/{id}`: ensures it exists and runs. True when it was created.
    pub async fn put(
        self: &Arc<Self>,
        id: &str,
        req: &CreateSandboxRequest,
    ) -> Result<(Sandbox, bool), ApiError> {
        warren_api::ids::validate_sandbox_id(id)?;
        req.validate()?;
        self.check_not_quarantined(id)?;
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        slot.touch();
        match slot.record() {
            Some(mut rec) => {
                if rec.apply_put(req)? {
                    self.save(&rec)?;
                    slot.set(Some(rec.clone()));
                }
                if let Some(s) = req.from_snapshot.as_ref() {
                    if rec.snapshot.as_ref() != Some(s) {
                        return Err(ApiError::new(
                            ErrorCode::Conflict,
                            format!(
                                "sandbox {id} exists; from_snapshot applies to new sandboxes only"
                            ),
                        ));
                    }
                }
                if rec.state != SandboxState::Running {
                    self.bring_up_locked(&slot, rec).await?;
                }
                Ok((slot.api().expect("record present"), false))
            }
            None => {
                self.create_locked(&slot, id, req).await?;
                Ok((slot.api().expect("record present"), true))
            }
        }
    }

    /// Get-or-create for every call under `/v1/sandboxes/{id}/…`; returns the run key of a
    /// running sandbox. The fast path takes no lock and makes no Docker call.
    pub async fn ensure(self: &Arc<Self>, id: &str) -> Result<String, ApiError> {
        // Frozen while the boundary does not hold (`freeze`): no call reaches a guest.
        self.safety.check()?;
        let slot = self.slot(id);
        slot.touch();
        // Straight to the guest unless a sleep is under way (then: wait for it, and wake).
        if !slot.closing.load(Ordering::SeqCst) {
            if let Some(key) = slot.running_key() {
                return Ok(key);
            }
        }
        warren_api::ids::validate_sandbox_id(id)?;
        self.check_not_quarantined(id)?;
        let _g = slot.lock.lock().await;
        match slot.record() {
            Some(r) if r.state == SandboxState::Running => Ok(r.guest_key()),
            Some(r) => Ok(self.bring_up_locked(&slot, r).await?.guest_key()),
            None => Ok(self
                .create_locked(&slot, id, &CreateSandboxRequest::default())
                .await?
                .guest_key()),
        }
    }

    /// Wakes a sleeping sandbox or recovers any other one (under the slot lock).
    async fn bring_up_locked(
        &self,
        slot: &Arc<Slot>,
        rec: SandboxRecord,
    ) -> Result<SandboxRecord, ApiError> {
        self.safety.check()?;
        if rec.state == SandboxState::Sleeping {
            self.wake_locked(slot, rec).await
        } else {
            self.recover_locked(slot, rec).await
        }
    }

    /// From now on the node talks to `c`'s guest for this sandbox, and to nothing else.
    fn know_guest(&self, rec: &SandboxRecord, c: &ContainerInfo) {
        match c.addr.filter(|_| c.running) {
            Some(addr) => self.addrs.set(&rec.id, addr),
            None => self.addrs.remove(&rec.id),
        }
        if c.running && c.pid != 0 {
            self.meter.watch(&self.metered(rec), c.pid);
        }
        match c.guest_peer() {
            Some(peer) => self.guests.register(&rec.run_key(), peer),
            None => {
                tracing::warn!(sandbox_id = %rec.id, "its container has no guest secret (made by an older version?): the node will not talk to it");
                self.guests.unregister(&rec.run_key());
            }
        }
    }

    /// The sandbox's container is gone: no connection to any guest of it any more.
    fn forget_guest(&self, id: &str) {
        self.addrs.remove(id);
        self.guests.unregister(&super::record::run_key(id));
    }

    /// Refuses ids whose record is quarantined (see `adopt`).
    fn check_not_quarantined(&self, id: &str) -> Result<(), ApiError> {
        if self
            .quarantined
            .lock()
            .expect("quarantine lock")
            .contains(id)
        {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("sandbox {id}'s record on this node is unreadable and was quarantined; its container is kept as it was until an operator looks at it"),
            ));
        }
        Ok(())
    }

    fn save(&self, rec: &SandboxRecord) -> Result<(), ApiError> {
        self.store
            .save(rec)
            .map_err(|e| ApiError::internal(format!("cannot save the record of {}: {e}", rec.id)))
    }

    fn spec(&self, rec: &SandboxRecord) -> ContainerSpec {
        ContainerSpec {
            sandbox_id: rec.id.clone(),
            image: rec.image.clone(),
            resources: rec.resources,
            env: rec.env.clone(),
            guest_binary: self.guest_binary.clone(),
            run_dir_mb: self.cfg.run_dir_mb,
            seed: None,
        }
    }

    /// Creates sandbox `id` (under its slot's lock). A create refused for want of room
    /// gives up the sandbox's placement on this node, still under the lock (nothing of the
    /// sandbox exists, and a create waiting for the lock then finds it placed nowhere), so
    /// that a retry is placed anew.
    async fn create_locked(
        &self,
        slot: &Arc<Slot>,
        id: &str,
        req: &CreateSandboxRequest,
    ) -> Result<SandboxRecord, ApiError> {
        if !self.recovery.placed_here(id) {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                format!("sandbox {id} is not placed on this node (any more); retry"),
            ));
        }
        let made = self.make_locked(slot, id, req).await;
        if let Err(e) = &made {
            if e.code == ErrorCode::CapacityExhausted {
                if let Err(why) = self.recovery.release_unused(id).await {
                    tracing::warn!(sandbox_id = %id, error = %why, "a refused create's placement could not be given up; a retry comes here again");
                }
            }
        }
        made
    }

    async fn make_locked(
        &self,
        slot: &Arc<Slot>,
        id: &str,
        req: &CreateSandboxRequest,
    ) -> Result<SandboxRecord, ApiError> {
        self.safety.check()?;
        if let Some(i) = req.isolation.filter(|i| !ISOLATION_OFFERED.contains(i)) {
            return Err(ApiError::new(
                ErrorCode::CapacityExhausted,
                format!(
                    "no node of this cluster offers isolation {}; this one offers {}",
                    i.as_str(),
                    ISOLATION_OFFERED.map(|i| i.as_str()).join(", ")
                ),
            ));
        }
        if self.sandbox_count() >= self.cfg.max_sandboxes {
            return Err(ApiError::new(
                ErrorCode::CapacityExhausted,
                format!(
                    "this node runs its maximum of {} sandboxes",
                    self.cfg.max_sandboxes
                ),
            ));
        }
        let started = Instant::now();
        let mut rec = SandboxRecord::new(
            id,
            req,
            &self.cfg.node_id,
            &self.cfg.region,
            &self.cfg.default_image,
        )?;
        rec.snapshot = req.from_snapshot.clone();
        // A fork on its source's node copies the frozen source's files; any other sandbox
        // from a snapshot has every chunk fetched and checked first.
        let seed = self.seed_for(rec.snapshot.as_ref(), id);
        let prepared = match seed {
            Some(_) => None,
            None => self.prepare_for(&rec).await?,
        };
        let image =
            (prepared.as_ref().map(|p| &p.manifest().image)).or(seed.as_ref().map(|s| &s.0));
        if let Some(image) = image {
            if req.image.as_ref().is_some_and(|i| i != image) {
                return Err(ApiError::invalid(format!(
                    "snapshot {} is of image {image}; omit image or name that one",
                    rec.snapshot.as_deref().unwrap_or_default()
                )));
            }
            rec.image = image.clone();
        }
        // The record exists before the container does, so no container is ever unaccounted for.
        self.save(&rec)?;
        slot.set(Some(rec.clone()));
        let result = match (prepared, seed) {
            (Some(p), _) => self.start_fresh(&mut rec, Some(p)).await,
            (None, Some((_, seed))) => self.start_seeded(&mut rec, seed).await,
            (None, None) => self.start_container(&mut rec, true).await,
        };
        match result {
            Ok(()) => {
                let mut rec = rec;
                rec.state = lifecycle::next(rec.state, Event::Started)?;
                self.save(&rec)?;
                slot.set(Some(rec.clone()));
                self.update_gauge();
                self.metrics
                    .creates
                    .with_label_values(&["ok"])
                    .observe(started.elapsed().as_secs_f64());
                tracing::info!(sandbox_id = %id, ms = started.elapsed().as_millis() as u64, "sandbox created");
                Ok(rec)
            }
            Err(e) => {
                let _ = self.remove_container(id).await;
                self.forget_guest(id);
                let _ = self.store.delete(id);
                slot.set(None);
                self.metrics
                    .creates
                    .with_label_values(&["error"])
                    .observe(started.elapsed().as_secs_f64());
                Err(e)
            }
        }
    }

    /// Creates (or restarts) the container and waits for its guest.
    async fn start_container(&self, rec: &mut SandboxRecord, fresh: bool) -> Result<(), ApiError> {
        self.start_container_with(rec, fresh, None, None)
            .await
            .map(|_| ())
    }

    /// Creates the container with a fork's files copied in before it starts.
    async fn start_seeded(&self, rec: &mut SandboxRecord, seed: SeedCopy) -> Result<(), ApiError> {
        let t = Instant::now();
        self.start_container_with(rec, true, Some(seed), None)
            .await?;
        self.metrics
            .snapshots
            .with_label_values(&["fork_copy"])
            .observe(t.elapsed().as_secs_f64());
        tracing::info!(sandbox_id = %rec.id, ms = t.elapsed().as_millis() as u64, "fork: started with the source's files");
        Ok(())
    }

    /// Creates (`fresh`) or restarts the container and waits for its guest: a new one with
    /// a fork's files copied in (`seed`), or with `fill` run on its files while it starts.
    /// Whether `fill` ran (see `ContainerRuntime::create_filled`).
    pub(super) async fn start_container_with(
        &self,
        rec: &mut SandboxRecord,
        fresh: bool,
        seed: Option<SeedCopy>,
        fill: Option<&dyn RootFill>,
    ) -> Result<bool, ApiError> {
        let _admitted = self.admit(rec)?;
        rec.generation += 1;
        let mut filled = false;
        let info = {
            let _permit = self
                .create_permits
                .acquire()
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?;
            if fresh {
                let mut spec = self.spec(rec);
                spec.seed = seed;
                match fill {
                    Some(fill) => {
                        let (info, f) = self.runtime.create_filled(&spec, fill).await?;
                        filled = f;
                        Some(info)
                    }
                    None => Some(self.runtime.create(&spec).await?),
                }
            } else {
                self.runtime.start(&rec.id).await?;
                None
            }
        };
        self.wait_guest(rec, info).await?;
        Ok(filled)
    }

    /// The limits of the running sandboxes and of those being started (`admitting`), `except`
    /// one.
    fn committed(
        &self,
        admitting: &HashMap<String, warren_api::sandbox::Resources>,
        except: &str,
    ) -> admission::Committed {
        let mut committed = admission::Committed::default();
        for slot in self.slots.lock().expect("slots lock").values() {
            let g = slot.rec.lock().expect("slot lock");
            if let Some(r) = g.as_ref() {
                let running = matches!(r.state, SandboxState::Running | SandboxState::Starting);
                if running && r.id != except && !admitting.contains_key(&r.id) {
                    committed.add(&r.resources);
                }
            }
        }
        for (id, r) in admitting {
            if id != except {
                committed.add(r);
            }
        }
        committed
    }

    /// Whether a container with limits `ask` (of sandbox `id`, if any) may start beside the
    /// running ones and those being started (`admitting`, locked by the caller).
    fn admissible(
        &self,
        admitting: &HashMap<String, warren_api::sandbox::Resources>,
        id: &str,
        ask: &warren_api::sandbox::Resources,
    ) -> Result<(), admission::Refusal> {
        let committed = self.committed(admitting, id);
        let available = crate::runtime::host_load::memory_available_mb();
        admission::admit(&self.cfg.capacity, committed, ask, available)
    }

    /// Whether this node would refuse to start a sandbox of the default size now.
    pub fn is_full(&self) -> bool {
        let Ok(default) =
            warren_api::sandbox::instance_type(warren_api::sandbox::DEFAULT_INSTANCE_TYPE)
        else {
            return false;
        };
        let admitting = self.admitting.lock().expect("admitting lock");
        self.admissible(&admitting, "", &default).is_err()
    }

    /// Admits a start of `rec`'s container beside the running ones and those being started
    /// (`admission`); it counts as being started until the returned guard goes.
    fn admit(&self, rec: &SandboxRecord) -> Result<Admitted<'_>, ApiError> {
        let mut admitting = self.admitting.lock().expect("admitting lock");
        if let Err(why) = self.admissible(&admitting, &rec.id, &rec.resources) {
            self.metrics.admission_refused.inc();
            return Err(ApiError::new(ErrorCode::CapacityExhausted, why.to_string()));
        }
        admitting.insert(rec.id.clone(), rec.resources);
        Ok(Admitted {
            mgr: self,
            id: rec.id.clone(),
        })
    }

    /// Waits until the container's guest answers (`info`: the container as it is after its
    /// start, when the caller has it), then gives the guest its sandbox's settings.
    async fn wait_guest(
        &self,
        rec: &SandboxRecord,
        info: Option<ContainerInfo>,
    ) -> Result<(), ApiError> {
        let key = rec.guest_key();
        let info = match info {
            Some(i) => Some(i),
            None => self.runtime.inspect(&rec.id).await?,
        };
        if let Some(c) = &info {
            self.know_guest(rec, c);
        }
        let deadline = Instant::now() + GUEST_READY_TIMEOUT;
        let mut attempt = 0u32;
        loop {
            if self.guests.health(&key).await.is_ok() {
                return self.configure_guest(rec).await;
            }
            attempt += 1;
            if attempt.is_multiple_of(50) || Instant::now() > deadline {
                let info = self.runtime.inspect(&rec.id).await?;
                if let Some(c) = info.as_ref().filter(|c| c.running) {
                    // Restarted in between (a new pid): that is the guest to accept now.
                    self.know_guest(rec, c);
                }
                let running = info.as_ref().is_some_and(|i| i.running);
                if !running || Instant::now() > deadline {
                    let logs = self.runtime.logs_tail(&rec.id, 20).await;
                    let why = if running {
                        "did not answer in time"
                    } else {
                        "exited"
                    };
                    return Err(ApiError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "the guest agent of sandbox {} {why}; container output: {}",
                            rec.id,
                            logs.trim()
                        ),
                    ));
                }
            }
            tokio::time::sleep(Duration::from_millis(if attempt < 100 { 2 } else { 20 })).await;
        }
    }

    /// Gives a guest that just answered its sandbox's settings (its `env`): a warm
    /// container was started without them, and a container's run directory, where a
    /// guest keeps what it was told, starts empty after every restart.
    async fn configure_guest(&self, rec: &SandboxRecord) -> Result<(), ApiError> {
        let egress_ca_pem = match &self.cfg.egress_ca_seed {
            Some(seed) => Some(
                warren_egress::ca::SandboxCa::derive(seed, &rec.id)
                    .map_err(|e| ApiError::internal(format!("the egress CA of {}: {e}", rec.id)))?
                    .cert_pem,
            ),
            None => None,
        };
        if rec.env.is_empty() && egress_ca_pem.is_none() {
            return Ok(());
        }
        let body = serde_json::to_vec(&warren_api::session::GuestConfig {
            env: rec.env.clone(),
            egress_ca_pem,
        })
        .map_err(|e| ApiError::internal(e.to_string()))?;
        let resp = self
            .guest_request(
                rec,
                http::Method::PUT,
                warren_api::session::GUEST_CONFIG_PATH,
                "application/json",
                full(body),
            )
            .await?;
        crate::guest::body::collect_limited(resp.into_body(), crate::guest::body::SMALL_LIMIT)
            .await
            .map_err(|e| guest_error(&rec.id, e))?;
        Ok(())
    }

    /// Brings a sandbox whose container stopped or vanished back (under the slot lock).
    async fn recover_locked(
        &self,
        slot: &Arc<Slot>,
        mut rec: SandboxRecord,
    ) -> Result<SandboxRecord, ApiError> {
        // As last saved: a restore that never finished (its caller went away, or this node
        // died mid-way) left a container that may hold only part of the files.
        let unfinished = self
            .store
            .load(&rec.id)
            .is_some_and(|r| lifecycle::restore_unfinished(r.state, r.snapshot.is_some()));
        rec.state = lifecycle::next(rec.state, Event::Recovering)?;
        // Whatever answers next is a new guest process.
        rec.generation += 1;
        slot.set(Some(rec.clone()));
        let mut found = self.runtime.inspect(&rec.id).await?;
        if unfinished && found.is_some() {
            tracing::warn!(sandbox_id = %rec.id, "a restore into this container never finished; it goes and the files are restored again");
            self.remove_container(&rec.id).await?;
            found = None;
        }
        let result = match found {
            Some(c) if c.running => {
                self.metrics
                    .recoveries
                    .with_label_values(&["reconnect"])
                    .inc();
                self.wait_guest(&rec, Some(c)).await
            }
            Some(_) => {
                self.metrics
                    .recoveries
                    .with_label_values(&["restart"])
                    .inc();
                self.start_container(&mut rec, false).await
            }
            None => {
                self.metrics
                    .recoveries
                    .with_label_values(&["recreate"])
                    .inc();
                match self.prepare_for(&rec).await {
                    Ok(prepared) => {
                        match &rec.snapshot {
                            Some(s) => {
                                tracing::warn!(sandbox_id = %rec.id, snapshot = %s, "container is gone; restoring its latest snapshot")
                            }
                            None => {
                                tracing::warn!(sandbox_id = %rec.id, "container is gone; creating a new one (it has no snapshot: its files are lost)")
                            }
                        }
                        self.start_fresh(&mut rec, prepared).await
                    }
                    Err(e) => Err(persist::recovery_point_unreadable(&rec, e)),
                }
            }
        };
        let rec = self.finish_start(slot, rec, &result)?;
        result.map(|_| rec)
    }

    /// Recovers a sandbox after a failed guest connection, unless another request already did.
    pub async fn recover(&self, id: &str) -> Result<(), ApiError> {
        let slot = self.existing_slot(id).ok_or_else(|| not_found(id))?;
        let _g = slot.lock.lock().await;
        let rec = slot.record().ok_or_else(|| not_found(id))?;
        if rec.state == SandboxState::Running && self.guests.health(&rec.guest_key()).await.is_ok()
        {
            return Ok(());
        }
        self.bring_up_locked(&slot, rec).await.map(|_| ())
    }

    /// `DELETE /v1/sandboxes/{id}`: container, network, run dir and record go. Idempotent.
    pub async fn delete(&self, id: &str) -> Result<(), ApiError> {
        warren_api::ids::validate_sandbox_id(id)?;
        self.check_not_quarantined(id)?;
        let Some(slot) = self.existing_slot(id) else {
            // Not known here; still make sure nothing of it is left in Docker.
            self.remove_container(id).await?;
            return Ok(());
        };
        let _g = slot.lock.lock().await;
        self.remove_container(id).await?;
        self.forget_guest(id);
        // Its sleep snapshot goes with it; snapshots taken on purpose stay.
        if let Some(s) = slot.record().and_then(|r| r.snapshot) {
            self.retire(id, &s).await;
        }
        self.store
            .delete(id)
            .map_err(|e| ApiError::internal(format!("cannot delete record: {e}")))?;
        slot.set(None);
        self.forget_meter(id).await;
        {
            let mut deleted = self.deleted.lock().expect("deleted lock");
            deleted.retain(|_, at| at.elapsed() < migrate::TOMBSTONE);
            deleted.insert(id.to_string(), Instant::now());
        }
        drop(_g);
        let mut slots = self.slots.lock().expect("slots lock");
        // Forget the slot unless another request holds it (it may be re-creating the id).
        // Activity guards (this request's own among them) hold it too, and are not that.
        let guards = slot.streams.load(Ordering::Relaxed);
        if Arc::strong_count(&slot).saturating_sub(guards) == 2 && slot.record().is_none() {
            slots.remove(id);
        }
        drop(slots);
        self.update_gauge();
        tracing::info!(sandbox_id = %id, "sandbox deleted");
        Ok(())
    }

    /// Sends a request to the sandbox's guest (creating or waking the sandbox first). If the
    /// guest cannot be reached, the sandbox is recovered and a replayable request resent.
    pub async fn forward(
        self: &Arc<Self>,
        id: &str,
        method: http::Method,
        path_and_query: &str,
        headers: &http::HeaderMap,
        payload: Payload,
    ) -> Result<http::Response<Incoming>, ApiError> {
        let key = self.ensure(id).await?;
        let build = |body: GuestBody| guest_request(&method, path_and_query, headers, body);
        let (first, replay) = match payload {
            Payload::Bytes(b) => (build(full(b.clone()))?, Some(b)),
            Payload::Stream(s) => (build(s)?, None),
        };
        let started = Instant::now();
        let result = self.guests.send(&key, first).await;
        let outcome = match result {
            Ok(resp) => Ok(resp),
            Err(e) if e.is_connect() => {
                tracing::warn!(sandbox_id = %id, error = %e, "guest unreachable; recovering the sandbox");
                self.recover(id).await?;
                match replay {
                    Some(b) => {
                        let key = self.ensure(id).await?;
                        self.guests
                            .send(&key, build(full(b))?)
                            .await
                            .map_err(|e| guest_error(id, e))
                    }
                    None => Err(ApiError::new(
                        ErrorCode::Unavailable,
                        format!("sandbox {id} was restarting; send the request again"),
                    )),
                }
            }
            Err(e) => Err(guest_error(id, e)),
        };
        let label = if outcome.is_ok() { "ok" } else { "error" };
        self.metrics
            .guest_requests
            .with_label_values(&[label])
            .observe(started.elapsed().as_secs_f64());
        outcome
    }

    /// Counts the sandbox as active until the guard is dropped: a request in flight, or a
    /// response stream, terminal or tunnel that is open. Idle sleep and moves wait for it.
    pub fn activity(&self, id: &str) -> ActivityGuard {
        let guard = self.guard(id, true);
        guard.slot.touch();
        guard
    }

    /// Counts a request as in flight (a move waits for it) without counting it as use:
    /// reading a sandbox's state does not keep it awake.
    pub fn in_flight(&self, id: &str) -> ActivityGuard {
        self.guard(id, false)
    }

    fn guard(&self, id: &str, touches: bool) -> ActivityGuard {
        let slot = self.slot(id);
        // Counted before `ensure` looks at `closing` (see `Slot::close_to_calls`).
        slot.streams.fetch_add(1, Ordering::SeqCst);
        ActivityGuard { slot, touches }
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::SandboxNotFound,
        format!("sandbox {id} not found"),
    )
}

fn guest_error(id: &str, e: crate::guest::GuestError) -> ApiError {
    ApiError::new(ErrorCode::Unavailable, format!("sandbox {id}: {e}"))
}
