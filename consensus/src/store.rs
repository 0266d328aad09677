//! openraft's log store and state machine, on the node's RocksDB (`warren-storage`).
//!
//! The state machine lives in memory behind a lock that readers share (routing reads it on
//! every request) and is persisted as snapshots; after a restart it is the latest snapshot
//! plus the committed log entries after it, which openraft re-applies.
//!
//! A snapshot copies the state under the lock in O(nodes) (the placements are persistent
//! maps, shared rather than copied) and is serialized and written on a blocking thread after
//! the lock is released: neither readers nor the applier wait for it.

// openraft's storage traits fix the error type (`StorageError`, which is large); the helpers
// here return it unboxed because every caller hands it straight back to openraft.
#![allow(clippy::result_large_err)]

use crate::latency::RaftLatency;
use crate::state::{ClusterState, CommandResult};
use crate::types::{LogId, StoredMembership, TypeConfig};
use crate::{snapshot_frame, state_codec};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::watch;
use warren_storage::RaftDb;

type Result<T> = std::result::Result<T, StorageError<u64>>;

fn io_err(
    subject: ErrorSubject<u64>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError<u64> {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

fn logs_read(e: impl std::error::Error + 'static) -> StorageError<u64> {
    io_err(ErrorSubject::Logs, ErrorVerb::Read, e)
}

fn logs_write(e: impl std::error::Error + 'static) -> StorageError<u64> {
    io_err(ErrorSubject::Logs, ErrorVerb::Write, e)
}

pub(crate) const META_VOTE: &[u8] = b"vote";
pub(crate) const META_PURGED: &[u8] = b"last_purged";
pub(crate) const META_COMMITTED: &[u8] = b"committed";

#[derive(Clone)]
pub struct LogStore {
    db: Arc<RaftDb>,
    latency: Arc<RaftLatency>,
}

impl LogStore {
    pub fn new(db: Arc<RaftDb>, latency: Arc<RaftLatency>) -> Self {
        LogStore { db, latency }
    }

    /// Runs a durable write on a blocking thread (a synced write can take as long as the
    /// disk's queue: it must not hold a runtime thread that serves heartbeats), timed.
    async fn durably<T: Send + 'static>(
        &self,
        write: impl FnOnce(&RaftDb) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let db = self.db.clone();
        let timer = self.latency.log_writes.start_timer();
        let done = tokio::task::spawn_blocking(move || write(&db))
            .await
            .map_err(logs_write)?;
        timer.observe_duration();
        done
    }

    fn meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>> {
        match self.db.get_meta(key).map_err(logs_read)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b).map(Some).map_err(logs_read),
        }
    }

    async fn put_meta<T: Serialize>(&self, key: &'static [u8], v: &T) -> Result<()> {
        let bytes = serde_json::to_vec(v).map_err(logs_write)?;
        self.durably(move |db| db.put_meta(key, &bytes).map_err(logs_write))
            .await
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x + 1,
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(x) => x.saturating_add(1),
            Bound::Excluded(x) => *x,
            Bound::Unbounded => u64::MAX,
        };
        self.db
            .range(start, end)
            .map_err(logs_read)?
            .into_iter()
            .map(|(_, bytes)| serde_json::from_slice(&bytes).map_err(logs_read))
            .collect()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>> {
        let last_purged: Option<LogId> = self.meta(META_PURGED)?;
        let last = match self.db.last().map_err(logs_read)? {
            Some((_, bytes)) => Some(
                serde_json::from_slice::<Entry<TypeConfig>>(&bytes)
                    .map_err(logs_read)?
                    .log_id,
            ),
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<()> {
        self.put_meta(META_VOTE, vote).await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>> {
        self.meta(META_VOTE)
    }

    /// Written but not synced: a commit index lost in a crash is an older one, which only
    /// means re-applying fewer entries at start until the leader says more are committed
    /// (the entries themselves were synced when appended). One fsync fewer per commit.
    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<()> {
        let bytes = serde_json::to_vec(&committed).map_err(logs_write)?;
        self.db
            .put_meta_unsynced(META_COMMITTED, &bytes)
            .map_err(logs_write)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>> {
        Ok(self.meta::<Option<LogId>>(META_COMMITTED)?.flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = Vec::new();
        for e in entries {
            batch.push((e.log_id.index, serde_json::to_vec(&e).map_err(logs_write)?));
        }
        // Synced before the callback: openraft counts the entries as persisted from here.
        self.durably(move |db| db.append(batch).map_err(logs_write))
            .await?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<()> {
        self.durably(move |db| db.truncate_from(log_id.index).map_err(logs_write))
            .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<()> {
        // The purge point is recorded first: entries at or below it are ignored afterwards.
        self.put_meta(META_PURGED, &log_id).await?;
        self.durably(move |db| db.purge_upto(log_id.index).map_err(logs_write))
            .await
    }
}

/// What the state machine holds besides the cluster state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SmData {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
    pub state: ClusterState,
}

impl SmData {
    /// Applies one log entry: a command to the cluster state, a membership to the last
    /// membership.
    pub fn apply(&mut self, entry: &Entry<TypeConfig>) -> CommandResult {
        self.last_applied = Some(entry.log_id);
        match &entry.payload {
            EntryPayload::Blank => CommandResult::Done,
            EntryPayload::Normal(cmd) => self.state.apply_entry(cmd, entry.log_id.leader_id.term),
            EntryPayload::Membership(m) => {
                self.last_membership = StoredMembership::new(Some(entry.log_id), m.clone());
                CommandResult::Done
            }
        }
    }
}

/// A shared, read-mostly view of the applied state.
#[derive(Clone)]
pub struct StateView {
    inner: Arc<RwLock<SmData>>,
    applied: watch::Receiver<u64>,
    /// The applied state's `generation`, readable without the state's lock (peer calls
    /// and the lease read it, also from code that holds the lock: a second read lock
    /// behind a waiting writer would never be granted).
    generation: Arc<AtomicU64>,
}

impl StateView {
    /// Reads the current cluster state.
    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        f(&self.inner.read().expect("state lock").state)
    }

    /// Index of the last applied entry.
    pub fn applied_index(&self) -> u64 {
        *self.applied.borrow()
    }

    /// The applied state's generation (`ClusterState::generation`), without its lock.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Resolves when the applied index changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.clone()
    }
}

/// Work a test runs where a snapshot is about to be serialized.
#[cfg(test)]
type EncodeHook = Box<dyn FnOnce() + Send>;

#[derive(Clone)]
pub struct StateMachine {
    db: Arc<RaftDb>,
    sm: Arc<RwLock<SmData>>,
    applied: Arc<watch::Sender<u64>>,
    generation: Arc<AtomicU64>,
    /// Runs on the encoding thread before a snapshot is serialized (tests hold it there).
    #[cfg(test)]
    before_encode: Arc<std::sync::Mutex<Option<EncodeHook>>>,
}

fn sm_err(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError<u64> {
    io_err(ErrorSubject::StateMachine, verb, e)
}

impl StateMachine {
    /// Loads the latest snapshot, if any.
    pub fn open(db: Arc<RaftDb>) -> std::result::Result<Self, String> {
        let mut data = SmData::default();
        if let Some(bytes) = db.get_snapshot().map_err(|e| e.to_string())? {
            let (_, state) = snapshot_frame::decode(&bytes).map_err(|e| e.to_string())?;
            data = state_codec::decode(&state).map_err(|e| e.to_string())?;
        }
        let index = data.last_applied.map(|l| l.index).unwrap_or(0);
        let (tx, _) = watch::channel(index);
        let generation = Arc::new(AtomicU64::new(data.state.generation));
        Ok(StateMachine {
            db,
            sm: Arc::new(RwLock::new(data)),
            applied: Arc::new(tx),
            generation,
            #[cfg(test)]
            before_encode: Default::default(),
        })
    }

    pub fn view(&self) -> StateView {
        StateView {
            inner: self.sm.clone(),
            applied: self.applied.subscribe(),
            generation: self.generation.clone(),
        }
    }
}

/// Writes a snapshot durably (a blocking write: called on a blocking thread).
fn persist(db: &RaftDb, meta: &SnapshotMeta<u64, crate::types::Peer>, data: &[u8]) -> Result<()> {
    db.put_snapshot(&snapshot_frame::encode(meta, data))
        .map_err(|e| sm_err(ErrorVerb::Write, e))
}

/// Runs blocking work (serializing, parsing, synced writes) off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| sm_err(ErrorVerb::Write, e))?
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        // O(nodes) under the lock: the placements are shared, not copied.
        let copy: SmData = self.sm.read().expect("state lock").clone();
        let snapshot_id = match copy.last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, now_millis()),
            None => format!("empty-{}", now_millis()),
        };
        let meta = SnapshotMeta {
            last_log_id: copy.last_applied,
            last_membership: copy.last_membership.clone(),
            snapshot_id,
        };
        let db = self.db.clone();
        #[cfg(test)]
        let hook = self.before_encode.lock().expect("hook lock").take();
        let stored = meta.clone();
        let data = blocking(move || {
            #[cfg(test)]
            if let Some(hook) = hook {
                hook();
            }
            let data = state_codec::encode(&copy).map_err(|e| sm_err(ErrorVerb::Read, e))?;
            drop(copy);
            persist(&db, &stored, &data)?;
            Ok(data)
        })
        .await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

fn now_millis() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis()
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership)> {
        let sm = self.sm.read().expect("state lock");
        Ok((sm.last_applied, sm.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResult>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        let mut last = None;
        {
            let mut sm = self.sm.write().expect("state lock");
            for entry in entries {
                last = Some(entry.log_id.index);
                out.push(sm.apply(&entry));
            }
            self.generation
                .store(sm.state.generation, Ordering::Release);
        }
        if let Some(i) = last {
            self.applied.send_replace(i);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, crate::types::Peer>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let (db, meta) = (self.db.clone(), meta.clone());
        let new = blocking(move || {
            let new: SmData = state_codec::decode(&data).map_err(|e| sm_err(ErrorVerb::Read, e))?;
            persist(&db, &meta, &data)?;
            Ok(new)
        })
        .await?;
        let index = new.last_applied.map(|l| l.index).unwrap_or(0);
        let generation = new.state.generation;
        {
            let mut sm = self.sm.write().expect("state lock");
            *sm = new;
            self.generation.store(generation, Ordering::Release);
        }
        self.applied.send_replace(index);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let Some(bytes) = self
            .db
            .get_snapshot()
            .map_err(|e| sm_err(ErrorVerb::Read, e))?
        else {
            return Ok(None);
        };
        let (meta, data) =
            snapshot_frame::decode(&bytes).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::{StoreBuilder, Suite};

    struct Builder;

    impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for Builder {
        async fn build(&self) -> Result<(tempfile::TempDir, LogStore, StateMachine)> {
            let dir = tempfile::tempdir().expect("temp dir");
            let db = Arc::new(RaftDb::open(dir.path()).expect("open db"));
            let sm = StateMachine::open(db.clone()).expect("open state machine");
            Ok((dir, LogStore::new(db, Default::default()), sm))
        }
    }

    fn entry(index: u64, cmd: crate::state::Command) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(cmd),
        }
    }

    fn place(index: u64, sandbox: &str) -> Entry<TypeConfig> {
        let cmd = crate::state::Command::Place {
            sandbox: sandbox.into(),
            node: 1,
            expected_epoch: 0,
            tenant: None,
            size: None,
        };
        entry(index, cmd)
    }

    /// While a snapshot is being serialized (held there), entries still apply and readers
    /// still read: the snapshot works from its own copy, taken when it began, not under the
    /// state lock. (Before, serialization ran under the read lock, and the applier — and, the
    /// lock being writer-preferring, every reader after it — waited for it.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_in_progress_blocks_neither_the_applier_nor_readers() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(RaftDb::open(dir.path()).unwrap());
        let mut sm = StateMachine::open(db.clone()).unwrap();
        let register = crate::state::Command::Register {
            name: "n1".into(),
            region: "r".into(),
            api_addr: String::new(),
            peer_addr: String::new(),
            capacity: 1,
            key_id: String::new(),
            join_token: None,
        };
        sm.apply([entry(1, register), place(2, "before")])
            .await
            .unwrap();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        *sm.before_encode.lock().unwrap() = Some(Box::new(move || {
            started_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        }));
        let mut builder = sm.get_snapshot_builder().await;
        let building = tokio::spawn(async move { builder.build_snapshot().await });
        tokio::task::spawn_blocking(move || started_rx.recv().unwrap())
            .await
            .unwrap();
        // The applier takes the state lock on a thread of its own: if it has to wait, the
        // test sees it time out instead of hanging with it.
        let (applied_tx, applied_rx) = std::sync::mpsc::channel();
        let view = sm.view();
        let runtime = tokio::runtime::Handle::current();
        let applier = std::thread::spawn(move || {
            runtime.block_on(sm.apply([place(3, "during")])).unwrap();
            applied_tx.send(()).unwrap();
            sm
        });
        let applied = applied_rx.recv_timeout(std::time::Duration::from_secs(5));
        let readable = applied.is_ok() && view.read(|s| s.placements.contains_key("during"));
        release_tx.send(()).unwrap();
        let snap = building.await.unwrap().unwrap();
        let sm = applier.join().unwrap();
        assert!(applied.is_ok(), "the applier waited for the snapshot");
        assert!(readable, "a reader did not see the entry applied meanwhile");
        assert_eq!(snap.meta.last_log_id.map(|l| l.index), Some(2));
        let data: SmData = state_codec::decode(snap.snapshot.get_ref()).unwrap();
        assert!(data.state.placements.contains_key("before"));
        assert!(
            !data.state.placements.contains_key("during"),
            "the snapshot is of its start"
        );
        // Stored as the binary frame, and loaded back after a restart.
        drop(sm);
        let again = StateMachine::open(db).unwrap();
        assert!(again.view().read(|s| s.placements.contains_key("before")));
    }

    /// A snapshot an older node stored or sent (its state as plain JSON, not compressed) is
    /// still loaded after an upgrade in place, and still installed from an older leader.
    #[tokio::test]
    async fn a_snapshot_with_the_state_as_plain_json_loads_and_installs() {
        let mut old = SmData::default();
        old.state.placements.insert(
            "old".into(),
            serde_json::from_value(serde_json::json!({"sandbox": "old", "node": 1, "epoch": 4}))
                .unwrap(),
        );
        let json = serde_json::to_vec(&old).unwrap();
        let meta = SnapshotMeta::default();
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(RaftDb::open(dir.path()).unwrap());
        db.put_snapshot(&snapshot_frame::encode(&meta, &json))
            .unwrap();
        let mut sm = StateMachine::open(db.clone()).unwrap();
        assert!(sm.view().read(|s| s.placements.contains_key("old")));

        let dir = tempfile::tempdir().unwrap();
        let mut fresh = StateMachine::open(Arc::new(RaftDb::open(dir.path()).unwrap())).unwrap();
        fresh
            .install_snapshot(&meta, Box::new(Cursor::new(json)))
            .await
            .unwrap();
        assert!(fresh.view().read(|s| s.placements.contains_key("old")));
        // What this node stores and sends from now on is compressed.
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert!(snap.snapshot.get_ref().starts_with(b"WRSZ"));
        let stored = sm.get_current_snapshot().await.unwrap().unwrap();
        assert!(stored.snapshot.get_ref().starts_with(b"WRSZ"));
    }

    /// openraft's own conformance suite for storage implementations.
    #[test]
    fn openraft_storage_suite() {
        Suite::test_all(Builder).expect("storage suite");
    }
}
