//! openraft's log store and state machine, on the node's RocksDB (`warren-storage`).
//!
//! The state machine lives in memory behind a lock that readers share (routing reads it on
//! every request) and is persisted as snapshots; after a restart it is the latest snapshot
//! plus the committed log entries after it, which openraft re-applies.

// openraft's storage traits fix the error type (`StorageError`, which is large); the helpers
// here return it unboxed because every caller hands it straight back to openraft.
#![allow(clippy::result_large_err)]

use crate::state::{ClusterState, CommandResult};
use crate::types::{LogId, StoredMembership, TypeConfig};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    AnyError, Entry, EntryPayload, ErrorSubject, ErrorVerb, OptionalSend, RaftLogReader,
    RaftSnapshotBuilder, SnapshotMeta, StorageError, StorageIOError, Vote,
};
use serde::{Deserialize, Serialize};
use std::fmt::Debug;
use std::io::Cursor;
use std::ops::{Bound, RangeBounds};
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

const META_VOTE: &[u8] = b"vote";
const META_PURGED: &[u8] = b"last_purged";
const META_COMMITTED: &[u8] = b"committed";
/// Version of a serialized snapshot.
const SNAPSHOT_FORMAT: u32 = 1;

#[derive(Clone)]
pub struct LogStore {
    db: Arc<RaftDb>,
}

impl LogStore {
    pub fn new(db: Arc<RaftDb>) -> Self {
        LogStore { db }
    }

    fn meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>> {
        match self.db.get_meta(key).map_err(logs_read)? {
            None => Ok(None),
            Some(b) => serde_json::from_slice(&b).map(Some).map_err(logs_read),
        }
    }

    fn put_meta<T: Serialize>(&self, key: &[u8], v: &T) -> Result<()> {
        let bytes = serde_json::to_vec(v).map_err(logs_write)?;
        self.db.put_meta(key, &bytes).map_err(logs_write)
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
        self.put_meta(META_VOTE, vote)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>> {
        self.meta(META_VOTE)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<()> {
        self.put_meta(META_COMMITTED, &committed)
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
        self.db.append(batch).map_err(logs_write)?;
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<()> {
        self.db.truncate_from(log_id.index).map_err(logs_write)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<()> {
        // The purge point is recorded first: entries at or below it are ignored afterwards.
        self.put_meta(META_PURGED, &log_id)?;
        self.db.purge_upto(log_id.index).map_err(logs_write)
    }
}

/// What the state machine holds besides the cluster state.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SmData {
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership,
    pub state: ClusterState,
}

#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    format: u32,
    meta: SnapshotMeta<u64, crate::types::Peer>,
    data: Vec<u8>,
}

/// A shared, read-mostly view of the applied state.
#[derive(Clone)]
pub struct StateView {
    inner: Arc<RwLock<SmData>>,
    applied: watch::Receiver<u64>,
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

    /// Resolves when the applied index changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.clone()
    }
}

#[derive(Clone)]
pub struct StateMachine {
    db: Arc<RaftDb>,
    sm: Arc<RwLock<SmData>>,
    applied: Arc<watch::Sender<u64>>,
}

fn sm_err(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError<u64> {
    io_err(ErrorSubject::StateMachine, verb, e)
}

impl StateMachine {
    /// Loads the latest snapshot, if any.
    pub fn open(db: Arc<RaftDb>) -> std::result::Result<Self, String> {
        let mut data = SmData::default();
        if let Some(bytes) = db.get_snapshot().map_err(|e| e.to_string())? {
            let snap: StoredSnapshot =
                serde_json::from_slice(&bytes).map_err(|e| format!("snapshot: {e}"))?;
            if snap.format != SNAPSHOT_FORMAT {
                return Err(format!("snapshot format {} is not supported", snap.format));
            }
            data = serde_json::from_slice(&snap.data).map_err(|e| format!("snapshot data: {e}"))?;
        }
        let index = data.last_applied.map(|l| l.index).unwrap_or(0);
        let (tx, _) = watch::channel(index);
        Ok(StateMachine {
            db,
            sm: Arc::new(RwLock::new(data)),
            applied: Arc::new(tx),
        })
    }

    pub fn view(&self) -> StateView {
        StateView {
            inner: self.sm.clone(),
            applied: self.applied.subscribe(),
        }
    }

    fn persist(&self, meta: &SnapshotMeta<u64, crate::types::Peer>, data: &[u8]) -> Result<()> {
        let stored = StoredSnapshot {
            format: SNAPSHOT_FORMAT,
            meta: meta.clone(),
            data: data.to_vec(),
        };
        let bytes = serde_json::to_vec(&stored).map_err(|e| sm_err(ErrorVerb::Write, e))?;
        self.db
            .put_snapshot(&bytes)
            .map_err(|e| sm_err(ErrorVerb::Write, e))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        let (data, last_applied, last_membership) = {
            let sm = self.sm.read().expect("state lock");
            let data = serde_json::to_vec(&*sm).map_err(|e| sm_err(ErrorVerb::Read, e))?;
            (data, sm.last_applied, sm.last_membership.clone())
        };
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{}", l.leader_id, l.index, now_millis()),
            None => format!("empty-{}", now_millis()),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership,
            snapshot_id,
        };
        self.persist(&meta, &data)?;
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
                sm.last_applied = Some(entry.log_id);
                last = Some(entry.log_id.index);
                out.push(match &entry.payload {
                    EntryPayload::Blank => CommandResult::Done,
                    EntryPayload::Normal(cmd) => {
                        sm.state.apply_entry(cmd, entry.log_id.leader_id.term)
                    }
                    EntryPayload::Membership(m) => {
                        sm.last_membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        CommandResult::Done
                    }
                });
            }
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
        let new: SmData = serde_json::from_slice(&data).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        let index = new.last_applied.map(|l| l.index).unwrap_or(0);
        self.persist(meta, &data)?;
        *self.sm.write().expect("state lock") = new;
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
        let snap: StoredSnapshot =
            serde_json::from_slice(&bytes).map_err(|e| sm_err(ErrorVerb::Read, e))?;
        Ok(Some(Snapshot {
            meta: snap.meta,
            snapshot: Box::new(Cursor::new(snap.data)),
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
            Ok((dir, LogStore::new(db), sm))
        }
    }

    /// openraft's own conformance suite for storage implementations.
    #[test]
    fn openraft_storage_suite() {
        Suite::test_all(Builder).expect("storage suite");
    }
}
