//! What stopping a node waits for, and how long: its loops, the last usage export, and the
//! signals that start it.

use warren_node::SandboxManager;

/// The longest a stopping node waits for one of its loops to end (a migration under way may
/// take this long) before it aborts it.
pub const LOOPS_STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for a task told to stop, for at most `within`; then aborts it, saying so.
pub async fn stop_within(
    what: &str,
    mut task: tokio::task::JoinHandle<()>,
    within: std::time::Duration,
) {
    if tokio::time::timeout(within, &mut task).await.is_err() {
        tracing::warn!(task = what, "did not stop in time; aborted");
        task.abort();
    }
}

/// The longest a stopping node spends writing its last usage export.
const EXIT_EXPORT_LIMIT: std::time::Duration = std::time::Duration::from_secs(15);

/// Samples the running sandboxes once more and exports what the ledger holds since the last
/// export: a node stopped in order and never started again loses none of it. (A killed node
/// loses what it recorded since its last periodic export.)
pub async fn export_usage_at_exit(mgr: &SandboxManager, every: std::time::Duration) {
    if every.is_zero() {
        return;
    }
    let last = async {
        mgr.sample_running().await;
        mgr.export_usage().await
    };
    match tokio::time::timeout(EXIT_EXPORT_LIMIT, last).await {
        Ok(Ok(())) => tracing::info!("usage exported"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "the last usage export failed: it is written at the next start")
        }
        Err(_) => tracing::warn!(
            "the last usage export did not finish in time: it is written at the next start"
        ),
    }
}

/// Resolves at the first SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Waits (at most `within`) until `part` is held only here; says so when something still
/// holds it (a task that outlived the stop would keep its stores open).
pub async fn released<T>(
    what: &str,
    part: &std::sync::Arc<T>,
    within: std::time::Duration,
) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while std::sync::Arc::strong_count(part) > 1 {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                part = what,
                holders = std::sync::Arc::strong_count(part) - 1,
                "still held after the node stopped"
            );
            return false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    true
}

/// The proxy is gone: what the firewall redirected to it is dropped until the next start.
pub async fn remove_egress_redirect(cfg: &warren_node::NodeConfig) {
    let (iptables, node) = (cfg.firewall_tools.iptables.clone(), cfg.node_id.clone());
    let _ = tokio::task::spawn_blocking(move || {
        warren_node::runtime::firewall::remove_egress_chain(&iptables, &node)
    })
    .await;
}
