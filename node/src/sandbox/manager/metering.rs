//! The manager's side of metering: which sandboxes run (and with what memory and labels),
//! a sample of them all every `usage_sample_every` (`SAMPLE_EVERY` by default), and a last sample of a container before it is
//! removed (sleep, move, delete, restore, failed start), so that nothing between samples
//! is lost. The sampling itself is `crate::usage`.

use super::SandboxManager;
use crate::runtime::{RemoveAfter, RuntimeError};
use crate::sandbox::record::SandboxRecord;
use crate::usage::report::{aggregate, UsageQuery};
use crate::usage::{Meter, Metered};
use std::collections::HashSet;
use std::sync::{Arc, Weak};
use warren_api::sandbox::SandboxState;
use warren_api::usage::UsageItem;
use warren_api::ApiError;
use warren_storage::usage_export;

/// Runs the meter's blocking work (cgroup reads, a synced write) off the async threads.
async fn blocking(meter: &Arc<Meter>, f: impl FnOnce(&Meter) + Send + 'static) {
    let meter = meter.clone();
    let _ = tokio::task::spawn_blocking(move || f(&meter)).await;
}

/// Samples every running sandbox, and exports the ledger every `usage_export_every`, until
/// the manager is dropped or its loops are stopped.
pub(super) fn spawn(mgr: &Arc<SandboxManager>) {
    let sample_every = mgr.cfg.usage_sample_every;
    if !sample_every.is_zero() {
        let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
        mgr.loops.spawn("usage sampler", async move {
            loop {
                tokio::time::sleep(sample_every).await;
                let Some(mgr) = weak.upgrade() else { return };
                mgr.sample_running().await;
            }
        });
    }
    let every = mgr.cfg.usage_export_every;
    if every.is_zero() {
        return;
    }
    let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
    mgr.loops.spawn("usage exporter", async move {
        let mut pruned_at: Option<std::time::Instant> = None;
        loop {
            tokio::time::sleep(every).await;
            let Some(mgr) = weak.upgrade() else { return };
            if let Err(e) = mgr.export_usage().await {
                tracing::warn!(error = %e, "cannot export usage to the object store; trying again next time");
                continue;
            }
            let retention = mgr.cfg.usage_retention;
            if !retention.is_zero() && pruned_at.is_none_or(|t| t.elapsed() >= PRUNE_EVERY) {
                pruned_at = Some(std::time::Instant::now());
                if let Err(e) = mgr.prune_usage(retention).await {
                    tracing::warn!(error = %e, "cannot delete usage records past their retention; trying again later");
                }
            }
        }
    });
}

/// How often usage past its retention is looked for (after an export).
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// The first interval kept when records are kept for `retention` (none: keep everything).
pub(crate) fn retention_cutoff(now_ms: u64, retention: std::time::Duration) -> Option<u64> {
    if retention.is_zero() {
        return None;
    }
    Some(now_ms.saturating_sub(retention.as_millis() as u64))
}

impl SandboxManager {
    /// What the meter records of a sandbox besides its container.
    pub(super) fn metered(&self, rec: &SandboxRecord) -> Metered {
        Metered {
            id: rec.id.clone(),
            memory_mb: rec.resources.memory_mb,
            labels: rec.labels.clone(),
            tenant: self.recovery.tenant_of(&rec.id),
        }
    }

    /// The meter (egress counts are connected to it once the proxy runs).
    pub fn meter(&self) -> &Arc<Meter> {
        &self.meter
    }

    fn running_metered(&self) -> Vec<Metered> {
        self.slots
            .lock()
            .expect("slots lock")
            .values()
            .filter_map(|s| s.record())
            .filter(|r| r.state == SandboxState::Running)
            .map(|r| self.metered(&r))
            .collect()
    }

    /// Samples every running sandbox now.
    pub async fn sample_running(&self) {
        let running = self.running_metered();
        blocking(&self.meter, move |m| m.sample(&running)).await;
    }

    /// This node's part of a usage report, sampled up to now.
    pub async fn usage_report(&self, q: UsageQuery) -> Result<Vec<UsageItem>, ApiError> {
        self.sample_running().await;
        let meter = self.meter.clone();
        tokio::task::spawn_blocking(move || meter.report(&q))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| ApiError::internal(format!("the usage ledger: {e}")))
    }

    /// Deletes usage records older than `retention`: this node's exported ones, and every
    /// node's exported objects in the store.
    pub async fn prune_usage(&self, retention: std::time::Duration) -> Result<(), String> {
        let now = warren_api::time::unix_millis(std::time::SystemTime::now());
        let Some(cutoff) = retention_cutoff(now, retention) else {
            return Ok(());
        };
        let meter = self.meter.clone();
        let local = tokio::task::spawn_blocking(move || meter.prune_before(cutoff))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let exported = usage_export::prune_before(self.snapshots.objects().as_ref(), cutoff)
            .await
            .map_err(|e| e.to_string())?;
        if local + exported > 0 {
            tracing::info!(
                records = local,
                exported_objects = exported,
                "usage past its retention deleted"
            );
        }
        Ok(())
    }

    /// Writes what the ledger holds since the last export to the object store.
    pub async fn export_usage(&self) -> Result<(), String> {
        let meter = self.meter.clone();
        let (mark, records) = tokio::task::spawn_blocking(move || meter.pending_export())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        let intervals: std::collections::BTreeSet<u64> =
            records.iter().map(|(k, _)| k.interval_ms).collect();
        let objects = self.snapshots.objects();
        for t in intervals {
            usage_export::put_interval(objects.as_ref(), self.meter.node(), t, &records)
                .await
                .map_err(|e| e.to_string())?;
        }
        let meter = self.meter.clone();
        tokio::task::spawn_blocking(move || meter.exported(mark))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }

    /// The usage that nodes outside `live` exported (removed nodes, nodes that are down):
    /// counted from their copy in the object store.
    pub async fn exported_usage(
        &self,
        q: &UsageQuery,
        live: &HashSet<String>,
    ) -> Result<Vec<UsageItem>, ApiError> {
        let objects = self.snapshots.objects().as_ref();
        let failed = |e: usage_export::ExportError| {
            ApiError::new(
                warren_api::ErrorCode::Unavailable,
                format!("exported usage cannot be read: {e}"),
            )
        };
        let mut records = Vec::new();
        for node in usage_export::exported_nodes(objects)
            .await
            .map_err(failed)?
        {
            if live.contains(&node) {
                continue;
            }
            records.extend(
                usage_export::read_node(objects, &node, q.from_ms, q.to_ms)
                    .await
                    .map_err(failed)?,
            );
        }
        Ok(aggregate(q, &records))
    }

    /// A last sample of the sandbox's container, which is about to go.
    async fn close_meter(&self, id: &str) {
        let Some(rec) = self.existing_slot(id).and_then(|s| s.record()) else {
            return;
        };
        let m = self.metered(&rec);
        blocking(&self.meter, move |meter| meter.close(&m)).await;
    }

    /// Removes the sandbox's container, sampled first. Every removal of a container that
    /// may have run goes through here.
    pub(super) async fn remove_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.close_meter(id).await;
        self.runtime.remove(id).await
    }

    /// Sets the sandbox's container aside for removal, sampled first.
    pub(super) async fn remove_container_soon(
        &self,
        id: &str,
    ) -> Result<RemoveAfter, RuntimeError> {
        self.close_meter(id).await;
        self.runtime.remove_soon(id).await
    }

    /// The sandbox is deleted: its usage cursor goes, its records stay.
    pub(super) async fn forget_meter(&self, id: &str) {
        let id = id.to_string();
        blocking(&self.meter, move |m| m.forget(&id)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::retention_cutoff;
    use std::time::Duration;

    #[test]
    fn records_are_kept_for_their_retention_or_for_ever() {
        let day = Duration::from_secs(86_400);
        assert_eq!(retention_cutoff(10 * 86_400_000, Duration::ZERO), None);
        assert_eq!(retention_cutoff(10 * 86_400_000, day), Some(9 * 86_400_000));
        assert_eq!(
            retention_cutoff(1_000, day),
            Some(0),
            "never before the epoch"
        );
    }
}
