//! When keys were last used: noted in memory on each use, committed to the cluster state
//! in one batch a minute per node (a Raft write per request would cost every call a round
//! trip), and shown by `GET /v1/keys`.

use crate::state::AppState;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_consensus::Command;

/// How often this node commits what it saw.
pub const EVERY: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct LastUsed {
    seen: Mutex<BTreeMap<String, String>>,
}

impl LastUsed {
    /// Notes a use of key `id` now (the bootstrap key and tickets are not `/v1/keys` keys).
    pub fn mark(&self, id: &str) {
        if id == super::principal::ROOT_KEY_ID || id == crate::tickets::TICKET_KEY_ID {
            return;
        }
        let now = warren_api::time::now_rfc3339();
        self.seen
            .lock()
            .expect("last-used lock")
            .insert(id.to_string(), now);
    }

    fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.seen.lock().expect("last-used lock"))
            .into_iter()
            .collect()
    }

    fn give_back(&self, used: Vec<(String, String)>) {
        let mut seen = self.seen.lock().expect("last-used lock");
        for (id, at) in used {
            seen.entry(id).or_insert(at);
        }
    }
}

/// Commits the uses seen, every [`EVERY`] and once more when cancelled.
pub fn spawn(st: AppState, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let stop = tokio::select! {
                _ = cancel.cancelled() => true,
                _ = tokio::time::sleep(EVERY) => false,
            };
            flush(&st).await;
            if stop {
                return;
            }
        }
    })
}

async fn flush(st: &AppState) {
    let used = st.last_used.take();
    if used.is_empty() {
        return;
    }
    let cmd = Command::TouchKeys { used: used.clone() };
    if let Err(e) = st.cluster.cluster.propose(cmd).await {
        tracing::debug!(error = %e, "cannot record when keys were last used; next round");
        st.last_used.give_back(used);
    }
}
