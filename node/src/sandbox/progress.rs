//! Progress of long transfers (snapshot, restore, wake), for callers that show it.
//!
//! The caller runs the operation inside [`track`]; the places that move bytes pick the
//! tracker up with [`current`] when they build their streams, so no signature in between
//! has to carry it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
pub struct Progress {
    phase: Mutex<&'static str>,
    bytes: AtomicU64,
    total: AtomicU64,
}

/// A reading of a [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgressReading {
    pub phase: &'static str,
    pub bytes: u64,
    /// Zero when unknown.
    pub total: u64,
}

impl Progress {
    /// Starts a phase: bytes count from zero towards `total` (0: unknown).
    pub fn phase(&self, phase: &'static str, total: u64) {
        *self.phase.lock().expect("progress lock") = phase;
        self.bytes.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }

    pub fn add(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub fn read(&self) -> ProgressReading {
        ProgressReading {
            phase: *self.phase.lock().expect("progress lock"),
            bytes: self.bytes.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
        }
    }
}

tokio::task_local! {
    static CURRENT: Arc<Progress>;
}

/// Runs `f` with `p` as the progress its transfers report to.
pub async fn track<F: Future>(p: Arc<Progress>, f: F) -> F::Output {
    CURRENT.scope(p, f).await
}

/// The progress of the operation running in this task, if someone tracks it.
pub fn current() -> Option<Arc<Progress>> {
    CURRENT.try_with(|p| p.clone()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn transfers_report_to_the_tracker_of_their_task() {
        assert!(current().is_none());
        let p = Arc::new(Progress::default());
        track(p.clone(), async {
            let t = current().expect("tracked");
            t.phase("upload", 10);
            t.add(4);
            t.add(3);
        })
        .await;
        assert_eq!(
            p.read(),
            ProgressReading {
                phase: "upload",
                bytes: 7,
                total: 10
            }
        );
    }
}
