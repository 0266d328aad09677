//! The RocksDB database behind a node's Raft state.

use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};
use std::path::Path;

/// Version of the on-disk layout; a database of another version is refused.
pub const FORMAT_VERSION: u32 = 1;

const CF_LOGS: &str = "logs";
const CF_META: &str = "meta";
const KEY_FORMAT: &[u8] = b"format";
const KEY_SNAPSHOT: &[u8] = b"snapshot";

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("database format {found} is not supported (this build reads format {FORMAT_VERSION})")]
    Format { found: u32 },
    #[error("corrupt entry: {0}")]
    Corrupt(String),
    #[error("no Raft database at {0}")]
    Missing(String),
}

pub struct RaftDb {
    db: DB,
}

fn key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn index_of(k: &[u8]) -> Result<u64, StorageError> {
    let b: [u8; 8] = k
        .try_into()
        .map_err(|_| StorageError::Corrupt(format!("log key of {} bytes", k.len())))?;
    Ok(u64::from_be_bytes(b))
}

impl RaftDb {
    /// Opens (or creates) the database at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = [CF_LOGS, CF_META].map(|n| ColumnFamilyDescriptor::new(n, Options::default()));
        let db = DB::open_cf_descriptors(&opts, path, cfs)?;
        let me = RaftDb { db };
        match me.get_meta(KEY_FORMAT)? {
            None => me.put_meta(KEY_FORMAT, &FORMAT_VERSION.to_be_bytes())?,
            Some(v) => {
                let found = u32::from_be_bytes(
                    v.as_slice()
                        .try_into()
                        .map_err(|_| StorageError::Corrupt("format key".into()))?,
                );
                if found != FORMAT_VERSION {
                    return Err(StorageError::Format { found });
                }
            }
        }
        Ok(me)
    }

    /// Opens the database at `path` only if one is there (an offline tool must not make an
    /// empty one); fails while another process has it open (RocksDB's lock).
    pub fn open_existing(path: &Path) -> Result<Self, StorageError> {
        if !path.join("CURRENT").is_file() {
            return Err(StorageError::Missing(path.display().to_string()));
        }
        Self::open(path)
    }

    /// A consistent copy of the whole database at `to` (a RocksDB checkpoint: files are
    /// hard-linked where they can be); `to` must not exist.
    pub fn checkpoint(&self, to: &Path) -> Result<(), StorageError> {
        rocksdb::checkpoint::Checkpoint::new(&self.db)?.create_checkpoint(to)?;
        Ok(())
    }

    /// Replaces the whole Raft state at once, durably: the snapshot, the given metadata
    /// values, and every log entry at or below `purge_upto` gone. One synced batch, so a
    /// crash leaves the old state or the new one, never a mix.
    pub fn replace_state(
        &self,
        snapshot: &[u8],
        meta: &[(&[u8], Vec<u8>)],
        purge_upto: u64,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), KEY_SNAPSHOT, snapshot);
        for (k, v) in meta {
            batch.put_cf(self.cf(CF_META), k, v);
        }
        batch.delete_range_cf(self.cf(CF_LOGS), key(0), key(purge_upto.saturating_add(1)));
        self.db.write_opt(batch, &Self::synced())?;
        Ok(())
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    fn synced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(true);
        w
    }

    /// Appends entries (index, bytes) atomically and durably.
    pub fn append(
        &self,
        entries: impl IntoIterator<Item = (u64, Vec<u8>)>,
    ) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        for (i, bytes) in entries {
            batch.put_cf(self.cf(CF_LOGS), key(i), bytes);
        }
        self.db.write_opt(batch, &Self::synced())?;
        Ok(())
    }

    /// Entries with `from <= index < to`, in order.
    pub fn range(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let mut out = Vec::new();
        let start = key(from);
        for item in self.db.iterator_cf(
            self.cf(CF_LOGS),
            IteratorMode::From(&start, Direction::Forward),
        ) {
            let (k, v) = item?;
            let i = index_of(&k)?;
            if i >= to {
                break;
            }
            out.push((i, v.to_vec()));
        }
        Ok(out)
    }

    /// The last entry, if any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
        match self
            .db
            .iterator_cf(self.cf(CF_LOGS), IteratorMode::End)
            .next()
        {
            None => Ok(None),
            Some(item) => {
                let (k, v) = item?;
                Ok(Some((index_of(&k)?, v.to_vec())))
            }
        }
    }

    /// Deletes entries with `index >= from`, durably (a conflicting suffix).
    pub fn truncate_from(&self, from: u64) -> Result<(), StorageError> {
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.cf(CF_LOGS), key(from), key(u64::MAX));
        if let Some((last, _)) = self.last()? {
            if last == u64::MAX {
                batch.delete_cf(self.cf(CF_LOGS), key(u64::MAX));
            }
        }
        self.db.write_opt(batch, &Self::synced())?;
        Ok(())
    }

    /// Deletes entries with `index <= upto` (compaction after a snapshot).
    pub fn purge_upto(&self, upto: u64) -> Result<(), StorageError> {
        self.db
            .delete_range_cf(self.cf(CF_LOGS), key(0), key(upto.saturating_add(1)))?;
        Ok(())
    }

    pub fn get_meta(&self, k: &[u8]) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.db.get_cf(self.cf(CF_META), k)?)
    }

    /// Writes a metadata value durably.
    pub fn put_meta(&self, k: &[u8], v: &[u8]) -> Result<(), StorageError> {
        self.db
            .put_cf_opt(self.cf(CF_META), k, v, &Self::synced())?;
        Ok(())
    }

    /// Writes a metadata value without waiting for the disk: visible at once, durable with
    /// the next synced write (or lost in a crash before one).
    pub fn put_meta_unsynced(&self, k: &[u8], v: &[u8]) -> Result<(), StorageError> {
        self.db.put_cf(self.cf(CF_META), k, v)?;
        Ok(())
    }

    pub fn get_snapshot(&self) -> Result<Option<Vec<u8>>, StorageError> {
        self.get_meta(KEY_SNAPSHOT)
    }

    /// Stores the latest state-machine snapshot durably.
    pub fn put_snapshot(&self, bytes: &[u8]) -> Result<(), StorageError> {
        self.put_meta(KEY_SNAPSHOT, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_range_truncate_purge_and_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = RaftDb::open(dir.path()).unwrap();
            db.append((1..=10).map(|i| (i, vec![i as u8]))).unwrap();
            assert_eq!(
                db.range(3, 6)
                    .unwrap()
                    .iter()
                    .map(|(i, _)| *i)
                    .collect::<Vec<_>>(),
                vec![3, 4, 5]
            );
            db.truncate_from(8).unwrap();
            assert_eq!(db.last().unwrap(), Some((7, vec![7])));
            db.purge_upto(2).unwrap();
            assert_eq!(db.range(0, 100).unwrap().first().map(|(i, _)| *i), Some(3));
            db.put_meta(b"vote", b"v1").unwrap();
            db.put_snapshot(b"snap").unwrap();
        }
        let db = RaftDb::open(dir.path()).unwrap();
        assert_eq!(db.last().unwrap(), Some((7, vec![7])));
        assert_eq!(db.get_meta(b"vote").unwrap().as_deref(), Some(&b"v1"[..]));
        assert_eq!(db.get_snapshot().unwrap().as_deref(), Some(&b"snap"[..]));
    }

    #[test]
    fn replacing_the_state_swaps_snapshot_and_meta_and_drops_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let db = RaftDb::open(dir.path()).unwrap();
        db.append((1..=10).map(|i| (i, vec![i as u8]))).unwrap();
        db.put_snapshot(b"old").unwrap();
        db.put_meta(b"vote", b"v1").unwrap();
        let copy = dir.path().join("copy");
        db.checkpoint(&copy).unwrap();
        db.replace_state(b"new", &[(b"vote", b"v2".to_vec())], 11)
            .unwrap();
        drop(db);
        let db = RaftDb::open_existing(dir.path()).unwrap();
        assert_eq!(db.last().unwrap(), None);
        assert_eq!(db.get_snapshot().unwrap().as_deref(), Some(&b"new"[..]));
        assert_eq!(db.get_meta(b"vote").unwrap().as_deref(), Some(&b"v2"[..]));
        // The checkpoint taken before still holds the old state.
        let old = RaftDb::open_existing(&copy).unwrap();
        assert_eq!(old.last().unwrap(), Some((10, vec![10])));
        assert_eq!(old.get_snapshot().unwrap().as_deref(), Some(&b"old"[..]));
    }

    #[test]
    fn an_offline_open_makes_no_database_and_waits_for_no_lock() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            RaftDb::open_existing(&dir.path().join("raft")),
            Err(StorageError::Missing(_))
        ));
        assert!(!dir.path().join("raft").exists());
        let _running = RaftDb::open(dir.path()).unwrap();
        // A second opener (a node still running) is refused at once.
        assert!(matches!(
            RaftDb::open_existing(dir.path()),
            Err(StorageError::Rocks(_))
        ));
    }

    #[test]
    fn refuses_another_format() {
        let dir = tempfile::tempdir().unwrap();
        RaftDb::open(dir.path())
            .unwrap()
            .put_meta(KEY_FORMAT, &99u32.to_be_bytes())
            .unwrap();
        assert!(matches!(
            RaftDb::open(dir.path()),
            Err(StorageError::Format { found: 99 })
        ));
    }
}
