//! Sandboxes this node owes a start: taken over while they were running on their old owner
//! (a failover, a drain), they arrive asleep and must run again without waiting for a
//! request. A start can be refused for a while — the node lost its lease from the majority
//! under load, its firewall is being put back — or fail (the engine timed out, the object
//! store did not answer): the sandbox stays owed and is started again once the node may
//! start sandboxes, or after a backoff, up to `MAX_FAILURES` failures. A sandbox deleted,
//! handed on or woken by a request meanwhile is no longer owed.

use super::SandboxManager;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use warren_api::sandbox::SandboxState;

/// Failed starts (not counting refusals while the node may start nothing) before a sandbox
/// is left asleep for a request to wake.
pub(super) const MAX_FAILURES: u32 = 5;

/// How long the loop waits with nothing due (it also wakes for a new owed sandbox and for a
/// change of what the node may do).
const IDLE_LOOK: Duration = Duration::from_secs(60);

/// What is done after a start that did not happen.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AfterFailure {
    /// Tried again once the node may start sandboxes, counting nothing.
    WhenAllowed,
    /// Tried again after this long, as failure number `failures`.
    After { delay: Duration, failures: u32 },
    /// Left asleep: a request wakes it (and says why it cannot).
    GiveUp,
}

/// Pure: what follows a start that did not happen, given whether the node refused to start
/// anything at the time and how many real failures came before.
pub(super) fn after_failure(refused: bool, failures_before: u32) -> AfterFailure {
    if refused {
        return AfterFailure::WhenAllowed;
    }
    let failures = failures_before + 1;
    if failures >= MAX_FAILURES {
        return AfterFailure::GiveUp;
    }
    AfterFailure::After {
        delay: Duration::from_secs(1 << (failures - 1).min(4)),
        failures,
    }
}

#[derive(Debug, Clone, Copy)]
struct Owed {
    failures: u32,
    /// Not before then.
    due: Instant,
    /// A start is under way.
    starting: bool,
}

/// The sandboxes owed a start.
#[derive(Default)]
pub(super) struct Resumes {
    owed: Mutex<BTreeMap<String, Owed>>,
    more: Notify,
}

impl Resumes {
    /// Owes `id` a start now (again, if it was owed: the count starts over).
    pub(super) fn owe(&self, id: &str) {
        self.put(id, 0, Instant::now());
    }

    fn put(&self, id: &str, failures: u32, due: Instant) {
        self.owed.lock().expect("resumes lock").insert(
            id.to_string(),
            Owed {
                failures,
                due,
                starting: false,
            },
        );
        self.more.notify_one();
    }

    fn done(&self, id: &str) {
        self.owed.lock().expect("resumes lock").remove(id);
    }

    /// The owed sandboxes due at `now`, marked as being started, with their failures so far.
    fn take_due(&self, now: Instant) -> Vec<(String, u32)> {
        let mut owed = self.owed.lock().expect("resumes lock");
        owed.iter_mut()
            .filter(|(_, o)| !o.starting && o.due <= now)
            .map(|(id, o)| {
                o.starting = true;
                (id.clone(), o.failures)
            })
            .collect()
    }

    /// How long until the next one waiting for its backoff is due.
    fn next_due_in(&self, now: Instant) -> Option<Duration> {
        let owed = self.owed.lock().expect("resumes lock");
        owed.values()
            .filter(|o| !o.starting)
            .map(|o| o.due.saturating_duration_since(now))
            .min()
    }
}

/// Runs until the manager is dropped or its loops are stopped.
pub(super) fn spawn(mgr: &Arc<SandboxManager>) {
    let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
    let resumes = mgr.resumes.clone();
    let mut changes = mgr.safety.subscribe();
    mgr.loops.spawn("resumer", async move {
        loop {
            let Some(mgr) = weak.upgrade() else {
                return;
            };
            // While the node may start nothing, only a change of that (or a new sandbox
            // owed) is waited for: the owed ones are all due, and would wake this at once.
            let allowed = mgr.safety.check().is_ok();
            if allowed {
                for (id, failures) in resumes.take_due(Instant::now()) {
                    let mgr = mgr.clone();
                    tokio::spawn(async move { mgr.resume_owed(&id, failures).await });
                }
            }
            drop(mgr);
            let wait = resumes
                .next_due_in(Instant::now())
                .filter(|_| allowed)
                .unwrap_or(IDLE_LOOK);
            tokio::select! {
                _ = resumes.more.notified() => {}
                changed = changes.changed() => if changed.is_err() { return },
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
}

impl SandboxManager {
    /// Starts an owed sandbox if it is still here and asleep; owes it again if it could not.
    async fn resume_owed(self: &Arc<Self>, id: &str, failures: u32) {
        let outcome = match self.existing_slot(id) {
            None => Ok(false),
            Some(slot) => {
                let _g = slot.lock.lock().await;
                match slot.record() {
                    Some(r) if r.state != SandboxState::Running => {
                        self.bring_up_locked(&slot, r).await.map(|_| true)
                    }
                    _ => Ok(false),
                }
            }
        };
        let e = match outcome {
            Ok(started) => {
                if started {
                    tracing::info!(sandbox_id = %id, "a sandbox taken over runs again");
                }
                self.resumes.done(id);
                return;
            }
            Err(e) => e,
        };
        let refused = self.safety.check().is_err();
        match after_failure(refused, failures) {
            AfterFailure::WhenAllowed => self.resumes.put(id, failures, Instant::now()),
            AfterFailure::After { delay, failures } => {
                tracing::warn!(sandbox_id = %id, error = %e, failures, retry_in_s = delay.as_secs(),
                    "a sandbox taken over could not start; trying again");
                self.resumes.put(id, failures, Instant::now() + delay);
            }
            AfterFailure::GiveUp => {
                tracing::warn!(sandbox_id = %id, error = %e, failures = failures + 1,
                    "a sandbox taken over could not start; it stays asleep until a request wakes it");
                self.resumes.done(id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_wait_for_the_node_and_count_nothing() {
        assert_eq!(after_failure(true, 0), AfterFailure::WhenAllowed);
        assert_eq!(after_failure(true, 3), AfterFailure::WhenAllowed);
    }

    #[test]
    fn failures_back_off_and_end() {
        assert_eq!(
            after_failure(false, 0),
            AfterFailure::After {
                delay: Duration::from_secs(1),
                failures: 1
            }
        );
        assert_eq!(
            after_failure(false, 3),
            AfterFailure::After {
                delay: Duration::from_secs(8),
                failures: 4
            }
        );
        assert_eq!(after_failure(false, MAX_FAILURES - 1), AfterFailure::GiveUp);
    }

    #[test]
    fn a_start_under_way_is_not_taken_twice_and_backoffs_wait() {
        let r = Resumes::default();
        let now = Instant::now();
        r.owe("a");
        r.put("b", 1, now + Duration::from_secs(2));
        let taken = Instant::now();
        let due: Vec<String> = r.take_due(taken).into_iter().map(|(id, _)| id).collect();
        assert_eq!(due, ["a"]);
        assert!(r.take_due(taken).is_empty(), "a is being started already");
        let wait = r.next_due_in(now).expect("b waits");
        assert!(wait <= Duration::from_secs(2) && wait > Duration::from_secs(1));
        assert_eq!(r.take_due(now + Duration::from_secs(3)).len(), 1);
        r.done("a");
        r.done("b");
        assert!(r.next_due_in(now).is_none());
    }
}
