//! Prometheus metrics of the sandbox host.

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};

#[derive(Clone)]
pub struct NodeMetrics {
    pub sandboxes: IntGauge,
    pub creates: HistogramVec,
    pub recoveries: IntCounterVec,
    pub guest_requests: HistogramVec,
    /// Snapshot work by step: capture, apply, sleep, wake.
    pub snapshots: HistogramVec,
    /// Connections to what was not a sandbox's own guest, refused (by reason).
    pub guest_refused: IntCounterVec,
    /// Times the node killed a sandbox's processes for taking more disk than its `disk_mb`.
    pub disk_limit_kills: IntCounter,
}

impl NodeMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let buckets = vec![
            0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        ];
        let m = NodeMetrics {
            sandboxes: IntGauge::with_opts(Opts::new(
                "warren_sandboxes",
                "Sandboxes known to this node",
            ))?,
            creates: HistogramVec::new(
                HistogramOpts::new(
                    "warren_sandbox_create_seconds",
                    "Time to create and start a sandbox",
                )
                .buckets(buckets.clone()),
                &["outcome"],
            )?,
            recoveries: IntCounterVec::new(
                Opts::new(
                    "warren_sandbox_recoveries_total",
                    "Sandboxes brought back after their container stopped",
                ),
                &["how"],
            )?,
            guest_requests: HistogramVec::new(
                HistogramOpts::new(
                    "warren_guest_request_seconds",
                    "Time to the guest's response head",
                )
                .buckets(buckets.clone()),
                &["outcome"],
            )?,
            snapshots: HistogramVec::new(
                HistogramOpts::new(
                    "warren_snapshot_step_seconds",
                    "Time of snapshot steps (capture, apply after a start, start_and_apply when files are written while the container starts, fork_copy, sleep, wake)",
                )
                .buckets(buckets),
                &["step"],
            )?,
            guest_refused: IntCounterVec::new(
                Opts::new(
                    "warren_guest_connections_refused_total",
                    "Connections to a sandbox's guest socket refused because what answered was not that sandbox's guest (symlink, not_a_socket, wrong_peer, handshake, protocol, silent)",
                ),
                &["reason"],
            )?,
            disk_limit_kills: IntCounter::with_opts(Opts::new(
                "warren_sandbox_disk_limit_kills_total",
                "Times a sandbox's processes were killed for taking more disk than its disk_mb (where the storage driver enforces no quota)",
            ))?,
        };
        registry.register(Box::new(m.sandboxes.clone()))?;
        registry.register(Box::new(m.creates.clone()))?;
        registry.register(Box::new(m.recoveries.clone()))?;
        registry.register(Box::new(m.guest_requests.clone()))?;
        registry.register(Box::new(m.snapshots.clone()))?;
        registry.register(Box::new(m.guest_refused.clone()))?;
        registry.register(Box::new(m.disk_limit_kills.clone()))?;
        Ok(m)
    }
}
