//! The idle sleeper: a sandbox with no request and no open stream for its `sleep_after`
//! sleeps (unless `keep_alive`). Also collects unreferenced snapshot chunks now and then.

use super::{now_ms, SandboxManager, Slot};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use warren_api::sandbox::SandboxState;

/// How often chunks nothing refers to any more are looked for, besides after deletions.
const GC_EVERY: Duration = Duration::from_secs(3600);

/// Whether the slot's sandbox has been idle past its `sleep_after`.
fn idle(slot: &Slot, now: u64) -> bool {
    let Some(rec) = slot.record() else {
        return false;
    };
    rec.state == SandboxState::Running
        && !rec.keep_alive
        && slot.in_flight() == 0
        && now.saturating_sub(slot.last_active_ms.load(Ordering::Relaxed))
            >= rec.sleep_after_s * 1000
}

/// Runs until the manager is dropped or its loops are stopped.
pub(super) fn spawn(mgr: &Arc<SandboxManager>) {
    let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
    let every = mgr.cfg.idle_check_every;
    mgr.loops.spawn("idle sleeper", async move {
        let mut last_gc = Instant::now();
        loop {
            tokio::time::sleep(every).await;
            let Some(mgr) = weak.upgrade() else {
                return;
            };
            // Frozen while the boundary does not hold (`freeze`): nothing can sleep.
            if mgr.safety.check().is_err() {
                continue;
            }
            let now = now_ms();
            let sleepy: Vec<(String, Arc<Slot>)> = mgr
                .slots
                .lock()
                .expect("slots lock")
                .iter()
                .filter(|(_, s)| idle(s, now))
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect();
            for (id, slot) in sleepy {
                let mgr = mgr.clone();
                tokio::spawn(async move { mgr.sleep_if_idle(&id, &slot).await });
            }
            if last_gc.elapsed() >= GC_EVERY {
                last_gc = Instant::now();
                mgr.collect_garbage_later();
            }
        }
    });
}

impl SandboxManager {
    async fn sleep_if_idle(&self, id: &str, slot: &Arc<Slot>) {
        // A lifecycle change in progress means activity; try again at the next round.
        let Ok(_g) = slot.lock.try_lock() else {
            return;
        };
        // From here new calls wait for this sleep (and then wake the sandbox). Look again: a
        // call that arrived before may be at the guest already, and its writes would land
        // after the files are saved.
        let _closed = slot.close_to_calls();
        if !idle(slot, now_ms()) {
            return;
        }
        let rec = slot.record().expect("idle implies a record");
        if let Err(e) = self.sleep_locked(slot, rec).await {
            tracing::warn!(sandbox_id = %id, error = %e, "an idle sandbox could not sleep");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::record::SandboxRecord;
    use warren_api::sandbox::CreateSandboxRequest;

    #[test]
    fn idle_needs_quiet_past_sleep_after_and_no_streams() {
        let mut rec =
            SandboxRecord::new("a", &CreateSandboxRequest::default(), "n", "r", "i").unwrap();
        rec.state = SandboxState::Running;
        rec.sleep_after_s = 10;
        let slot = Slot::new(Some(rec.clone()));
        let t0 = slot.last_active_ms.load(Ordering::Relaxed);
        assert!(!idle(&slot, t0 + 9_999));
        assert!(idle(&slot, t0 + 10_000));
        slot.streams.fetch_add(1, Ordering::Relaxed);
        assert!(!idle(&slot, t0 + 60_000));
        slot.streams.fetch_sub(1, Ordering::Relaxed);
        rec.keep_alive = true;
        slot.set(Some(rec.clone()));
        assert!(!idle(&slot, t0 + 60_000));
        rec.keep_alive = false;
        rec.state = SandboxState::Sleeping;
        slot.set(Some(rec));
        assert!(!idle(&slot, t0 + 60_000));
    }
}
