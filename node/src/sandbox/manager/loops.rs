//! The manager's own loops (idle sleeper, disk checker, metering sampler and exporter,
//! freezer, resumer, recovery-point sweeper): owned by one cancellation token and one task
//! tracker, so that a node that stops ends them (`SandboxManager::stop_loops`) before it
//! writes its last usage export and closes Raft and its stores, instead of leaving them to
//! run until the manager's last reference goes. Work a loop handed off (one sandbox's sleep
//! or resume) runs to its end as a request would.

use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Default)]
pub(super) struct Loops {
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Loops {
    /// Runs `body` until it returns or the loops are stopped (it is then dropped at its
    /// next await: a loop must leave nothing half done there).
    pub(super) fn spawn(
        &self,
        name: &'static str,
        body: impl Future<Output = ()> + Send + 'static,
    ) {
        let stop = self.stop.clone();
        self.tracker.spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => tracing::debug!(task = name, "stopped"),
                _ = body => {}
            }
        });
    }

    /// Ends every loop and waits for them (at most `within`): whether all ended. Loops
    /// spawned afterwards end at once.
    pub(super) async fn stop(&self, within: Duration) -> bool {
        self.stop.cancel();
        self.tracker.close();
        tokio::time::timeout(within, self.tracker.wait())
            .await
            .is_ok()
    }

    pub(super) fn running(&self) -> usize {
        self.tracker.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stopping_ends_every_loop_and_later_ones_at_once() {
        let loops = Loops::default();
        for _ in 0..3 {
            loops.spawn("forever", std::future::pending());
        }
        loops.spawn("short", async {});
        tokio::task::yield_now().await;
        assert_eq!(loops.running(), 3);
        assert!(loops.stop(Duration::from_secs(5)).await);
        assert_eq!(loops.running(), 0);
        loops.spawn("late", std::future::pending());
        tokio::task::yield_now().await;
        assert!(loops.stop(Duration::from_secs(5)).await);
        assert_eq!(loops.running(), 0);
    }
}
