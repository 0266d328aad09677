//! A node whose firewall stops holding while sandboxes run (another program flushed the
//! rules and they cannot be put back), or that lost its ownership lease (cut off from the
//! cluster's majority, which may start another copy of its sandboxes), freezes every running
//! sandbox until that holds again: frozen (the cgroup freezer, `docker pause`), a sandbox's
//! code cannot send a packet the rules would have dropped, nor write beside another copy;
//! its memory, processes and files are kept as they were, and it runs on from where it
//! stopped once all holds (a copy another node took over meanwhile is removed first, by the
//! cluster's fence). Calls to a sandbox meanwhile answer 503 `UNAVAILABLE` naming the
//! problem (`SandboxManager::ensure`), and no sandbox starts (`Safety::check`).
//!
//! While everything holds, each round also thaws containers the engine has paused that no
//! hold of this node keeps paused (`PauseHolds::thaw_strays`): paused behind the node's
//! back, or by a pause an earlier life of the node asked for that landed late.

use super::pause_holds::PauseHold;
use super::SandboxManager;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;
use warren_api::sandbox::SandboxState;

/// How often the freezer looks again without a change (a sandbox that was starting when the
/// firewall broke, a container that could not be paused at the first try).
const LOOK_AGAIN: Duration = Duration::from_secs(5);

/// What the freezer does now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Freeze these (running, not frozen yet).
    Freeze(Vec<String>),
    /// Thaw everything this freezer froze.
    ThawAll,
    Nothing,
}

/// Pure: the step for whether all that `freezes` holds, the running sandboxes and those
/// frozen.
pub(super) fn step(holds: bool, running: &[String], frozen: &HashSet<String>) -> Step {
    if holds {
        return if frozen.is_empty() {
            Step::Nothing
        } else {
            Step::ThawAll
        };
    }
    let todo: Vec<String> = running
        .iter()
        .filter(|id| !frozen.contains(*id))
        .cloned()
        .collect();
    if todo.is_empty() {
        Step::Nothing
    } else {
        Step::Freeze(todo)
    }
}

/// The sandboxes the freezer holds frozen. Thawed only when everything holds again
/// (`Step::ThawAll`): when the freezer ends (the node stops, the manager is dropped), they
/// stay paused, as the fence would stop them anyway, and the next start decides.
#[derive(Default)]
struct Frozen(HashMap<String, PauseHold>);

impl Drop for Frozen {
    fn drop(&mut self) {
        for (_, hold) in self.0.drain() {
            hold.leave_paused();
        }
    }
}

/// Runs until the manager is dropped or its loops are stopped.
pub(super) fn spawn(mgr: &Arc<SandboxManager>) {
    let weak: Weak<SandboxManager> = Arc::downgrade(mgr);
    let mut changes = mgr.safety.subscribe();
    mgr.loops.spawn("freezer", async move {
        // The freezer's own hold on each sandbox it froze.
        let mut frozen = Frozen::default();
        loop {
            {
                let Some(mgr) = weak.upgrade() else {
                    return;
                };
                let running: Vec<String> = mgr
                    .slots
                    .lock()
                    .expect("slots lock")
                    .iter()
                    .filter(|(_, s)| s.record().is_some_and(|r| r.state == SandboxState::Running))
                    .map(|(id, _)| id.clone())
                    .collect();
                let reason = mgr.safety.freeze_reason();
                let all_hold = reason.is_none();
                let ids: HashSet<String> = frozen.0.keys().cloned().collect();
                match step(all_hold, &running, &ids) {
                    Step::Freeze(ids) => {
                        let why = reason.unwrap_or_default();
                        for id in ids {
                            match mgr.pauses.hold(&id).await {
                                Ok(hold) => {
                                    tracing::warn!(sandbox_id = %id, %why, "frozen");
                                    frozen.0.insert(id, hold);
                                }
                                Err(e) => {
                                    tracing::error!(sandbox_id = %id, error = %e, %why, "the sandbox must be frozen and cannot be")
                                }
                            }
                        }
                    }
                    Step::ThawAll => {
                        for (id, hold) in frozen.0.drain() {
                            hold.release().await;
                            tracing::info!(sandbox_id = %id, "the freezer lets go: all holds again");
                        }
                    }
                    Step::Nothing => {}
                }
                if all_hold {
                    match mgr.pauses.thaw_strays().await {
                        Ok(thawed) => {
                            for id in thawed {
                                tracing::warn!(sandbox_id = %id, "thawed a container paused with no reason of this node's");
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot look for containers paused behind the node's back")
                        }
                    }
                }
            }
            tokio::select! {
                r = changes.changed() => {
                    if r.is_err() {
                        return;
                    }
                }
                _ = tokio::time::sleep(LOOK_AGAIN) => {}
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freezes_the_running_while_broken_and_thaws_what_it_froze() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let none = HashSet::new();
        assert_eq!(step(true, &ids(&["a"]), &none), Step::Nothing);
        assert_eq!(
            step(false, &ids(&["a", "b"]), &none),
            Step::Freeze(ids(&["a", "b"]))
        );
        let a: HashSet<String> = ["a".to_string()].into();
        assert_eq!(
            step(false, &ids(&["a", "b"]), &a),
            Step::Freeze(ids(&["b"]))
        );
        assert_eq!(step(false, &ids(&["a"]), &a), Step::Nothing);
        assert_eq!(step(true, &ids(&["a"]), &a), Step::ThawAll);
    }
}
