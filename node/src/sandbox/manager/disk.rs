//! The disk keeper: where the storage driver enforces no quota on a container's writable
//! layer (overlay2 on ext4, this machine's), the node holds each running sandbox to its
//! `disk_mb` itself. Every `disk_check_every` it measures each running sandbox's upper
//! directory and the files bind-mounted writable into it (`/etc/hosts` and the like, which
//! live on the host's disk outside that directory: `upper_usage`, on the bounded host-work
//! threads); a sandbox over its limit has every process but its guest killed, as the OOM
//! killer does for memory: what wrote stops, the files stay, and the sandbox answers again
//! at once, so that its agent can delete what it wrote. A sandbox that writes again past
//! the limit is killed again at the next check. What a sandbox can write beyond its limit
//! is bounded by its write rate over one check interval (plus the time of one pass over all
//! sandboxes).

use super::{SandboxManager, Slot};
use crate::runtime::upper_usage::{self, Usage, Written};
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use warren_api::sandbox::SandboxState;

/// What the keeper does about one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Within,
    /// Over its limit: its processes are killed.
    Over,
}

/// Whether `usage` is within `disk_mb`. A tree too deep to measure whole counts as over: a
/// sandbox could otherwise hide any amount of data below the walk's depth.
pub(super) fn verdict(usage: &Usage, disk_mb: u64) -> Verdict {
    if usage.too_deep || usage.bytes > disk_mb << 20 {
        Verdict::Over
    } else {
        Verdict::Within
    }
}

/// Runs until the manager is dropped or its loops are stopped; nothing where the engine
/// enforces disk quotas itself or the interval is zero.
pub(super) fn spawn(mgr: &Arc<SandboxManager>) {
    let every = mgr.cfg.disk_check_every;
    if every.is_zero() {
        return;
    }
    let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
    mgr.loops.spawn("disk checker", async move {
        // Where each sandbox writes (its upper directory and mounted files), asked of the
        // engine once per container: a new container (a restore, a wake) has a new one, and
        // the old one is gone with its container, which the walk finds.
        let mut written: HashMap<String, Written> = HashMap::new();
        loop {
            tokio::time::sleep(every).await;
            let Some(mgr) = weak.upgrade() else {
                return;
            };
            // Frozen sandboxes (`freeze`) write nothing, and a kill would thaw them.
            if mgr.runtime.disk_limits() || mgr.safety.check().is_err() {
                continue;
            }
            let running: Vec<(String, Arc<Slot>)> = mgr
                .slots
                .lock()
                .expect("slots lock")
                .iter()
                .filter(|(_, s)| s.record().is_some_and(|r| r.state == SandboxState::Running))
                .map(|(id, s)| (id.clone(), s.clone()))
                .collect();
            written.retain(|id, _| running.iter().any(|(r, _)| r == id));
            for (id, slot) in running {
                mgr.keep_within_disk(&id, &slot, &mut written).await;
            }
        }
    });
}

impl SandboxManager {
    async fn keep_within_disk(
        &self,
        id: &str,
        slot: &Arc<Slot>,
        written: &mut HashMap<String, Written>,
    ) {
        let Some(rec) = slot.record().filter(|r| r.state == SandboxState::Running) else {
            return;
        };
        let paths = match written.get(id) {
            Some(w) => w.clone(),
            None => match self.runtime.written_on_host(id).await {
                Ok(Some(w)) => {
                    written.insert(id.to_string(), w.clone());
                    w
                }
                Ok(None) | Err(_) => return,
            },
        };
        // Measured without the sandbox's lock: requests and lifecycle changes go on.
        let measured = self
            .host_work
            .pool()
            .run(move || upper_usage::usage_with_files(&paths))
            .await;
        let usage = match measured {
            Ok(Ok(u)) => u,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                // Its container was replaced: asked again at the next round.
                written.remove(id);
                return;
            }
            Ok(Err(e)) => {
                tracing::debug!(sandbox_id = %id, error = %e, "cannot measure the sandbox's disk use");
                return;
            }
            Err(_) => return,
        };
        if verdict(&usage, rec.resources.disk_mb) == Verdict::Within {
            return;
        }
        // A lifecycle change in progress (a snapshot, a sleep, a delete) owns the container
        // meanwhile: the sandbox is measured again at the next round.
        let Ok(_g) = slot.lock.try_lock() else {
            return;
        };
        if slot
            .record()
            .is_none_or(|r| r.state != SandboxState::Running)
        {
            return;
        }
        // Frozen while its pids are listed and killed (with whatever else holds it so).
        let hold = match self.pauses.hold(id).await {
            Ok(hold) => hold,
            Err(e) => {
                tracing::error!(sandbox_id = %id, error = %e,
                    "the sandbox is over its disk_mb and cannot be frozen to kill its processes");
                return;
            }
        };
        let killed = self.runtime.kill_all_but_init(id).await;
        hold.release().await;
        match killed {
            Ok(killed) => {
                self.metrics.disk_limit_kills.inc();
                tracing::warn!(sandbox_id = %id, used_mib = usage.bytes >> 20,
                    disk_mb = rec.resources.disk_mb, too_deep = usage.too_deep, killed,
                    "the sandbox took more disk than its disk_mb: its processes were killed");
            }
            Err(e) => {
                tracing::error!(sandbox_id = %id, error = %e,
                    "the sandbox is over its disk_mb and its processes could not be killed")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_limit_or_too_deep_to_measure_is_over() {
        let u = |bytes, too_deep| Usage {
            bytes,
            entries: 1,
            too_deep,
        };
        assert_eq!(verdict(&u(256 << 20, false), 256), Verdict::Within);
        assert_eq!(verdict(&u((256 << 20) + 1, false), 256), Verdict::Over);
        assert_eq!(verdict(&u(0, true), 256), Verdict::Over);
    }
}
