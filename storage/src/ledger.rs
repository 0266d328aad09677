//! The usage ledger of one node: what each sandbox used here, per interval, in RocksDB.
//!
//! A record is keyed by (interval start, sandbox, node) and holds that interval's totals;
//! writing it again replaces it, so that a sample applied twice counts once. Beside the
//! records, a cursor per sandbox holds the counters as last read (the CPU counter of its
//! container, its egress bytes, the time), written in the same batch as the records it
//! moved: after a crash or restart, the next sample goes on from exactly there.

use crate::raftdb::StorageError;
use rocksdb::{ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, DB};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

const CF_RECORDS: &str = "records";
const CF_CURSORS: &str = "cursors";
const CF_META: &str = "meta";
const KEY_EXPORTED: &[u8] = b"exported_from";

/// The totals of one sandbox on one node in one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageRecord {
    pub cpu_ns: u64,
    /// Provisioned memory × time running, in MiB × milliseconds.
    pub memory_mib_ms: u64,
    pub running_ms: u64,
    pub egress_bytes: u64,
    /// The sandbox's labels when last sampled (kept after it is deleted).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The sandbox's tenant when last sampled (none: sampled before tenants, the default's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// Which record: the interval's start (ms since the epoch), the sandbox, the node.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordKey {
    pub interval_ms: u64,
    pub sandbox: String,
    pub node: String,
}

impl RecordKey {
    fn encode(&self) -> Vec<u8> {
        let mut k = self.interval_ms.to_be_bytes().to_vec();
        k.extend_from_slice(self.sandbox.as_bytes());
        k.push(0);
        k.extend_from_slice(self.node.as_bytes());
        k
    }

    fn decode(k: &[u8]) -> Result<RecordKey, StorageError> {
        let bad = || StorageError::Corrupt(format!("usage key of {} bytes", k.len()));
        let (t, rest) = k.split_at_checked(8).ok_or_else(bad)?;
        let zero = rest.iter().position(|b| *b == 0).ok_or_else(bad)?;
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| bad());
        Ok(RecordKey {
            interval_ms: u64::from_be_bytes(t.try_into().map_err(|_| bad())?),
            sandbox: text(&rest[..zero])?,
            node: text(&rest[zero + 1..])?,
        })
    }
}

/// Where a sandbox's counters stood when last read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Which container incarnation the CPU counter is of (its main process on the host).
    pub pid: u32,
    pub cpu_ns: u64,
    pub egress_bytes: u64,
    pub at_ms: u64,
}

/// One sample's writes: records replaced, cursors set or dropped.
#[derive(Debug, Default)]
pub struct LedgerBatch {
    records: Vec<(RecordKey, UsageRecord)>,
    cursors: Vec<(String, Option<Cursor>)>,
}

impl LedgerBatch {
    pub fn record(&mut self, key: RecordKey, rec: UsageRecord) {
        self.records.push((key, rec));
    }

    pub fn cursor(&mut self, sandbox: &str, c: Option<Cursor>) {
        self.cursors.push((sandbox.to_string(), c));
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty() && self.cursors.is_empty()
    }
}

pub struct UsageLedger {
    db: DB,
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("usage values serialize")
}

fn parse<T: for<'de> Deserialize<'de>>(what: &str, b: &[u8]) -> Result<T, StorageError> {
    serde_json::from_slice(b).map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

impl UsageLedger {
    pub fn open(path: &Path) -> Result<UsageLedger, StorageError> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = [CF_RECORDS, CF_CURSORS, CF_META]
            .map(|n| ColumnFamilyDescriptor::new(n, Options::default()));
        Ok(UsageLedger {
            db: DB::open_cf_descriptors(&opts, path, cfs)?,
        })
    }

    fn cf(&self, name: &str) -> &rocksdb::ColumnFamily {
        self.db.cf_handle(name).expect("column family opened")
    }

    /// Writes the batch atomically and durably (synced).
    pub fn apply(&self, batch: LedgerBatch) -> Result<(), StorageError> {
        let mut wb = WriteBatch::default();
        for (k, r) in &batch.records {
            wb.put_cf(self.cf(CF_RECORDS), k.encode(), json(r));
        }
        for (s, c) in &batch.cursors {
            match c {
                Some(c) => wb.put_cf(self.cf(CF_CURSORS), s.as_bytes(), json(c)),
                None => wb.delete_cf(self.cf(CF_CURSORS), s.as_bytes()),
            }
        }
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(wb, &wo)?;
        Ok(())
    }

    pub fn record(&self, key: &RecordKey) -> Result<Option<UsageRecord>, StorageError> {
        self.db
            .get_cf(self.cf(CF_RECORDS), key.encode())?
            .map(|b| parse("usage record", &b))
            .transpose()
    }

    pub fn cursor(&self, sandbox: &str) -> Result<Option<Cursor>, StorageError> {
        self.db
            .get_cf(self.cf(CF_CURSORS), sandbox.as_bytes())?
            .map(|b| parse("usage cursor", &b))
            .transpose()
    }

    /// The first interval the next export must write (all before it are exported and can no
    /// longer change).
    pub fn exported_from(&self) -> Result<u64, StorageError> {
        match self.db.get_cf(self.cf(CF_META), KEY_EXPORTED)? {
            None => Ok(0),
            Some(v) => {
                Ok(u64::from_be_bytes(v.as_slice().try_into().map_err(
                    |_| StorageError::Corrupt("usage export mark".into()),
                )?))
            }
        }
    }

    pub fn set_exported_from(&self, interval_ms: u64) -> Result<(), StorageError> {
        self.db
            .put_cf(self.cf(CF_META), KEY_EXPORTED, interval_ms.to_be_bytes())?;
        Ok(())
    }

    /// Deletes the records of intervals starting before `before_ms` that are exported (an
    /// interval not yet exported is kept, whatever its age); how many went.
    pub fn prune_before(&self, before_ms: u64) -> Result<usize, StorageError> {
        let until = before_ms.min(self.exported_from()?);
        let doomed = self.range(0, until)?;
        if doomed.is_empty() {
            return Ok(0);
        }
        let mut wb = WriteBatch::default();
        for (k, _) in &doomed {
            wb.delete_cf(self.cf(CF_RECORDS), k.encode());
        }
        let mut wo = rocksdb::WriteOptions::default();
        wo.set_sync(true);
        self.db.write_opt(wb, &wo)?;
        Ok(doomed.len())
    }

    /// Every record of an interval starting in `[from_ms, to_ms)`, in key order.
    pub fn range(
        &self,
        from_ms: u64,
        to_ms: u64,
    ) -> Result<Vec<(RecordKey, UsageRecord)>, StorageError> {
        let start = from_ms.to_be_bytes();
        let mut out = Vec::new();
        let it = self.db.iterator_cf(
            self.cf(CF_RECORDS),
            IteratorMode::From(&start, Direction::Forward),
        );
        for item in it {
            let (k, v) = item?;
            let key = RecordKey::decode(&k)?;
            if key.interval_ms >= to_ms {
                break;
            }
            out.push((key, parse("usage record", &v)?));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: u64, s: &str) -> RecordKey {
        RecordKey {
            interval_ms: t,
            sandbox: s.into(),
            node: "n1".into(),
        }
    }

    #[test]
    fn records_replace_cursors_follow_and_ranges_are_by_interval() {
        let dir = tempfile::tempdir().unwrap();
        let cur = Cursor {
            pid: 7,
            cpu_ns: 5,
            egress_bytes: 1,
            at_ms: 9,
        };
        {
            let l = UsageLedger::open(dir.path()).unwrap();
            let mut b = LedgerBatch::default();
            b.record(
                key(60_000, "a"),
                UsageRecord {
                    cpu_ns: 1,
                    ..Default::default()
                },
            );
            b.record(key(120_000, "a"), UsageRecord::default());
            b.record(key(120_000, "b"), UsageRecord::default());
            b.cursor("a", Some(cur.clone()));
            l.apply(b).unwrap();
            // The same key again replaces, never adds.
            let mut b = LedgerBatch::default();
            b.record(
                key(60_000, "a"),
                UsageRecord {
                    cpu_ns: 3,
                    ..Default::default()
                },
            );
            l.apply(b).unwrap();
        }
        let l = UsageLedger::open(dir.path()).unwrap();
        assert_eq!(l.record(&key(60_000, "a")).unwrap().unwrap().cpu_ns, 3);
        assert_eq!(l.cursor("a").unwrap(), Some(cur));
        let keys: Vec<RecordKey> = l
            .range(60_000, 120_000)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(keys, vec![key(60_000, "a")]);
        assert_eq!(l.range(0, u64::MAX).unwrap().len(), 3);
        let mut b = LedgerBatch::default();
        b.cursor("a", None);
        l.apply(b).unwrap();
        assert_eq!(l.cursor("a").unwrap(), None);
        assert_eq!(l.exported_from().unwrap(), 0);
        l.set_exported_from(120_000).unwrap();
        assert_eq!(l.exported_from().unwrap(), 120_000);
    }

    #[test]
    fn pruning_drops_only_exported_records_older_than_the_cutoff() {
        let dir = tempfile::tempdir().unwrap();
        let l = UsageLedger::open(dir.path()).unwrap();
        let mut b = LedgerBatch::default();
        for t in [60_000, 120_000, 180_000, 240_000] {
            b.record(key(t, "a"), UsageRecord::default());
        }
        b.record(key(120_000, "b"), UsageRecord::default());
        l.apply(b).unwrap();
        // Nothing exported yet: nothing goes, however old.
        assert_eq!(l.prune_before(u64::MAX).unwrap(), 0);
        l.set_exported_from(180_000).unwrap();
        // Older than 240 000, but 180 000 is not exported: only 60 000 and 120 000 go.
        assert_eq!(l.prune_before(240_000).unwrap(), 3);
        let left: Vec<u64> = l
            .range(0, u64::MAX)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k.interval_ms)
            .collect();
        assert_eq!(left, vec![180_000, 240_000]);
        assert_eq!(l.prune_before(240_000).unwrap(), 0, "once");
        drop(l);
        let l = UsageLedger::open(dir.path()).unwrap();
        assert_eq!(l.range(0, u64::MAX).unwrap().len(), 2, "durable");
    }

    #[test]
    fn keys_round_trip_with_any_node_name() {
        let k = RecordKey {
            interval_ms: 42,
            sandbox: "s-1".into(),
            node: "node.a".into(),
        };
        assert_eq!(RecordKey::decode(&k.encode()).unwrap(), k);
        assert!(RecordKey::decode(b"short").is_err());
    }
}
