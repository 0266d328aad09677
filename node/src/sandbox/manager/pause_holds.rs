//! Who keeps a container paused. Several things pause a sandbox for their own reasons and
//! at overlapping times: a fork (its source, for the snapshot and the copies), a snapshot
//! (for one instant of its files), the disk-limit killer (so that no process forks past
//! its kill), and the freezer (the firewall broke, or the lease was lost). A container is
//! paused by the first hold and unpaused when the last one ends, so one of them ending
//! never thaws a sandbox another still needs frozen, and none pauses a container that is
//! paused already (which the engine refuses).

use crate::runtime::{ContainerRuntime, RuntimeError};
use std::collections::HashMap;
use std::sync::Arc;

/// Pure: what one more hold (`+1`) or one fewer (`-1`) does to the container, given the
/// holds there were.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Turn {
    Pause,
    Unpause,
    Nothing,
}

pub(super) fn turn(holds_before: usize, adding: bool) -> Turn {
    match (holds_before, adding) {
        (0, true) => Turn::Pause,
        (1, false) => Turn::Unpause,
        _ => Turn::Nothing,
    }
}

/// Pure: of the sandboxes whose containers the engine has paused, those no hold covers.
pub(super) fn strays(paused: Vec<String>, holds: &HashMap<String, usize>) -> Vec<String> {
    paused
        .into_iter()
        .filter(|id| holds.get(id).copied().unwrap_or(0) == 0)
        .collect()
}

/// The holds on each paused container of this node.
pub struct PauseHolds {
    runtime: Arc<dyn ContainerRuntime>,
    /// Held across the engine's pause and unpause, so a second hold never returns before
    /// the container is paused.
    counts: tokio::sync::Mutex<HashMap<String, usize>>,
}

impl PauseHolds {
    pub fn new(runtime: Arc<dyn ContainerRuntime>) -> Arc<PauseHolds> {
        Arc::new(PauseHolds {
            runtime,
            counts: tokio::sync::Mutex::new(HashMap::new()),
        })
    }

    /// Pauses the sandbox's container (unless it is held paused already) until the hold
    /// returned is released or dropped.
    pub async fn hold(self: &Arc<Self>, id: &str) -> Result<PauseHold, RuntimeError> {
        let mut counts = self.counts.lock().await;
        let n = counts.get(id).copied().unwrap_or(0);
        if turn(n, true) == Turn::Pause {
            self.runtime.pause(id).await?;
        }
        counts.insert(id.to_string(), n + 1);
        Ok(PauseHold {
            holds: self.clone(),
            id: id.to_string(),
            released: false,
            others: n > 0,
        })
    }

    /// Thaws the containers the engine has paused that no hold of this node keeps paused
    /// (paused behind the node's back, or by a pause of an earlier life of the node that
    /// landed after this one adopted the container): calls to them would hang, and nothing
    /// else would ever thaw them. Answers which it thawed. Checked under the holds' lock, so
    /// a hold being taken now is never undone.
    pub async fn thaw_strays(&self) -> Result<Vec<String>, RuntimeError> {
        let counts = self.counts.lock().await;
        let mut thawed = Vec::new();
        for id in strays(self.runtime.paused().await?, &counts) {
            self.runtime.unpause(&id).await?;
            thawed.push(id);
        }
        Ok(thawed)
    }

    async fn release(&self, id: &str) {
        let mut counts = self.counts.lock().await;
        let n = counts.get(id).copied().unwrap_or(0);
        if n <= 1 {
            counts.remove(id);
        } else {
            counts.insert(id.to_string(), n - 1);
        }
        if turn(n, false) == Turn::Unpause {
            if let Err(e) = self.runtime.unpause(id).await {
                tracing::error!(sandbox_id = %id, error = %e, "cannot thaw the sandbox");
            }
        }
    }
}

/// One reason a container stays paused. Released by `release`, or on drop (an error, or a
/// request dropped half-way) in the background.
pub struct PauseHold {
    holds: Arc<PauseHolds>,
    id: String,
    released: bool,
    /// Whether another hold had the container paused already when this one was taken.
    others: bool,
}

impl PauseHold {
    /// Whether the container was held paused already (by a fork, or the freezer) when this
    /// hold was taken: it stays paused for as long as that other hold lasts anyway.
    pub fn was_paused(&self) -> bool {
        self.others
    }

    /// Ends this hold without thawing the container: it stays paused until the next start
    /// of the node looks at it (`ContainerRuntime::list` thaws what no hold keeps).
    pub fn leave_paused(mut self) {
        self.released = true;
    }

    pub async fn release(mut self) {
        self.released = true;
        self.holds.release(&self.id).await;
    }
}

impl Drop for PauseHold {
    fn drop(&mut self) {
        if !self.released {
            let (holds, id) = (self.holds.clone(), std::mem::take(&mut self.id));
            tokio::spawn(async move { holds.release(&id).await });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_hold_pauses_and_the_last_release_thaws() {
        assert_eq!(turn(0, true), Turn::Pause);
        assert_eq!(turn(1, true), Turn::Nothing);
        assert_eq!(turn(2, false), Turn::Nothing);
        assert_eq!(turn(1, false), Turn::Unpause);
        // A release with no hold (never happens) thaws nothing.
        assert_eq!(turn(0, false), Turn::Nothing);
    }

    #[test]
    fn only_paused_containers_nobody_holds_are_strays() {
        let holds = HashMap::from([("held".to_string(), 1), ("released".to_string(), 0)]);
        let paused = ["held", "released", "unknown"].map(String::from).to_vec();
        assert_eq!(strays(paused, &holds), ["released", "unknown"]);
        assert!(strays(Vec::new(), &holds).is_empty());
    }
}
