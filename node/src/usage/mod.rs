//! Metering: what each sandbox uses on this node (CPU from its cgroup, provisioned memory
//! and running time, bytes through the egress proxy), sampled every `SAMPLE_EVERY` and
//! whenever its container is about to go (sleep, move, delete, restore), into the node's
//! usage ledger (`warren_storage::ledger`).
//!
//! The node's own work for a sandbox (snapshot packing and unpacking, fork copies) runs in
//! the host-work cgroup (`runtime/host_work`), never in the sandbox's: it is not counted.

pub mod account;
pub mod cgroup;
pub mod report;

use crate::metrics::UsageCounters;
use account::{add, cursor_at, interval_of, used_since, Reading};
use cgroup::{CgroupMounts, CpuFile};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use warren_api::usage::UsageItem;
use warren_storage::ledger::{LedgerBatch, RecordKey, UsageLedger, UsageRecord};
use warren_storage::StorageError;

/// How often running sandboxes are sampled by default (`usage_sample_ms`), and at most.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);

/// The proxy's byte count per sandbox since this node started.
pub trait EgressCounts: Send + Sync {
    fn bytes(&self, sandbox: &str) -> u64;
}

/// What the meter needs to know of a running sandbox besides its container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metered {
    pub id: String,
    pub memory_mb: u64,
    pub labels: BTreeMap<String, String>,
    /// Whose sandbox it is (`RecoveryPoints::tenant_of`).
    pub tenant: String,
}

struct Watched {
    pid: u32,
    file: CpuFile,
    /// When this node saw the container running.
    seen_ms: u64,
}

pub struct Meter {
    node: String,
    ledger: UsageLedger,
    mounts: CgroupMounts,
    watched: Mutex<HashMap<String, Watched>>,
    egress: OnceLock<Arc<dyn EgressCounts>>,
    /// One sample at a time: each reads a cursor and writes the next.
    turn: Mutex<()>,
    counters: Option<UsageCounters>,
}

fn now_ms() -> u64 {
    warren_api::time::unix_millis(std::time::SystemTime::now())
}

impl Meter {
    /// Opens the ledger in `dir`; what is counted also goes to `counters` (`/metrics`).
    pub fn open(
        dir: &Path,
        node: &str,
        counters: Option<UsageCounters>,
    ) -> Result<Meter, StorageError> {
        let mounts = cgroup::host_mounts().unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot read this host's mounts: CPU is not metered");
            CgroupMounts::default()
        });
        Ok(Meter {
            node: node.to_string(),
            ledger: UsageLedger::open(dir)?,
            mounts,
            watched: Mutex::new(HashMap::new()),
            egress: OnceLock::new(),
            turn: Mutex::new(()),
            counters,
        })
    }

    /// Where egress bytes are counted (the node's proxy, once it runs).
    pub fn count_egress_with(&self, counts: Arc<dyn EgressCounts>) {
        let _ = self.egress.set(counts);
    }

    /// A container of `m` runs with main process `pid`: it is sampled from now on (its
    /// running time counts from now unless its cursor says it ran on under this node).
    pub fn watch(&self, m: &Metered, pid: u32) {
        let file = match cgroup::cpu_file_of(pid, &self.mounts) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(sandbox_id = %m.id, error = %e, "cannot find the sandbox's CPU count: it is not metered");
                return;
            }
        };
        let mut w = self.watched.lock().expect("meter lock");
        if w.get(&m.id).is_some_and(|x| x.pid == pid) {
            return;
        }
        w.insert(
            m.id.clone(),
            Watched {
                pid,
                file,
                seen_ms: now_ms(),
            },
        );
    }

    /// The container of `m` is about to go: a last sample, and it is no longer watched (its
    /// cursor goes in the same write: the next container of the sandbox counts anew).
    pub fn close(&self, m: &Metered) {
        self.sample_as(std::slice::from_ref(m), true);
        self.watched.lock().expect("meter lock").remove(&m.id);
    }

    /// The sandbox is deleted: its cursor goes (its records stay).
    pub fn forget(&self, id: &str) {
        self.watched.lock().expect("meter lock").remove(id);
        let mut b = LedgerBatch::default();
        b.cursor(id, None);
        if let Err(e) = self.ledger.apply(b) {
            tracing::error!(sandbox_id = %id, error = %e, "cannot drop a usage cursor");
        }
    }

    /// Samples the watched ones of `sandboxes`, in one durable write.
    pub fn sample(&self, sandboxes: &[Metered]) {
        self.sample_as(sandboxes, false)
    }

    fn sample_as(&self, sandboxes: &[Metered], closing: bool) {
        let _turn = self.turn.lock().expect("meter turn");
        let at_ms = now_ms();
        type Read<'a> = (&'a Metered, u32, u64, Result<u64, std::io::Error>);
        let reads: Vec<Read> = {
            let w = self.watched.lock().expect("meter lock");
            sandboxes
                .iter()
                .filter_map(|m| w.get(&m.id).map(|x| (m, x.pid, x.seen_ms, x.file.read())))
                .collect()
        };
        let egress = self.egress.get();
        let mut batch = LedgerBatch::default();
        let mut records: HashMap<RecordKey, UsageRecord> = HashMap::new();
        let mut total = account::Used::default();
        let mut memory_mib_ms = 0u64;
        for (m, pid, seen_ms, cpu) in reads {
            let cpu_ns = match cpu {
                Ok(n) => n,
                // Its container went without a last sample (it died): nothing more to read.
                Err(e) => {
                    tracing::debug!(sandbox_id = %m.id, error = %e, "cannot read the sandbox's CPU count");
                    continue;
                }
            };
            let now = Reading {
                pid,
                cpu_ns,
                egress_bytes: egress.map(|e| e.bytes(&m.id)).unwrap_or(0),
                at_ms,
            };
            let prev = match self.ledger.cursor(&m.id) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(sandbox_id = %m.id, error = %e, "cannot read a usage cursor");
                    continue;
                }
            };
            let used = used_since(prev.as_ref(), &now, seen_ms);
            let key = RecordKey {
                interval_ms: interval_of(at_ms),
                sandbox: m.id.clone(),
                node: self.node.clone(),
            };
            let rec = match records.remove(&key) {
                Some(r) => r,
                None => match self.ledger.record(&key) {
                    Ok(r) => r.unwrap_or_default(),
                    Err(e) => {
                        tracing::error!(sandbox_id = %m.id, error = %e, "cannot read a usage record");
                        continue;
                    }
                },
            };
            let mut rec = rec;
            add(&mut rec, &used, m.memory_mb);
            total.cpu_ns += used.cpu_ns;
            total.running_ms += used.running_ms;
            total.egress_bytes += used.egress_bytes;
            memory_mib_ms += used.running_ms.saturating_mul(m.memory_mb);
            rec.labels = m.labels.clone();
            rec.tenant = Some(m.tenant.clone());
            records.insert(key, rec);
            batch.cursor(&m.id, (!closing).then(|| cursor_at(&now)));
        }
        for (k, r) in records {
            batch.record(k, r);
        }
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.ledger.apply(batch) {
            tracing::error!(error = %e, "cannot write usage: this sample is counted at the next one");
            return;
        }
        if let Some(c) = &self.counters {
            c.cpu_seconds.inc_by(total.cpu_ns as f64 / 1e9);
            c.running_seconds.inc_by(total.running_ms as f64 / 1e3);
            c.memory_gib_seconds
                .inc_by(memory_mib_ms as f64 / 1024.0 / 1e3);
            c.egress_bytes.inc_by(total.egress_bytes);
        }
    }

    /// What the next export writes: the records of every interval from the export mark on,
    /// and the interval the mark moves to once they are written (the current one, which can
    /// still grow and is written again next time).
    pub fn pending_export(&self) -> Result<(u64, Vec<(RecordKey, UsageRecord)>), StorageError> {
        let next_mark = interval_of(now_ms());
        let records = self.ledger.range(self.ledger.exported_from()?, u64::MAX)?;
        Ok((next_mark, records))
    }

    /// Deletes the exported records of intervals before `before_ms`; how many went.
    pub fn prune_before(&self, before_ms: u64) -> Result<usize, StorageError> {
        self.ledger.prune_before(before_ms)
    }

    /// The records before `mark` are exported.
    pub fn exported(&self, mark: u64) -> Result<(), StorageError> {
        self.ledger.set_exported_from(mark)
    }

    /// This node's name in its records.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// This node's part of a usage report.
    pub fn report(&self, q: &report::UsageQuery) -> Result<Vec<UsageItem>, StorageError> {
        let records = self.ledger.range(q.from_ms, q.to_ms)?;
        Ok(report::aggregate(q, &records))
    }
}
