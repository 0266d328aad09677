//! Prometheus metrics of the sandbox host.

use prometheus::{
    Counter, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// What the meter counted on this node, summed over its sandboxes (per sandbox: `GET
/// /v1/usage`; no sandbox id is ever a label).
#[derive(Clone)]
pub struct UsageCounters {
    pub cpu_seconds: Counter,
    pub memory_gib_seconds: Counter,
    pub running_seconds: Counter,
    pub egress_bytes: IntCounter,
}

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
    /// Container starts refused because the node was full (`sandbox::admission`).
    pub admission_refused: IntCounter,
    /// Sandboxes with a record here, by state (set when scraped).
    pub sandboxes_by_state: IntGaugeVec,
    pub usage: UsageCounters,
    /// Requests and bytes of the object store the node's snapshots and ledger go to.
    pub object_store: warren_storage::metered::ObjectStoreMetrics,
    /// 1 while a guarantee of `safety` holds, by guarantee (set when scraped).
    pub guarantees: IntGaugeVec,
    /// The filesystem of the node's data dir (set when scraped).
    pub data_disk_free_bytes: IntGauge,
    pub data_disk_size_bytes: IntGauge,
    pub chunk_cache: warren_storage::snapshots::ChunkCacheMetrics,
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
                    "Time of snapshot steps (capture, frozen: how long a running sandbox is paused for its snapshot, apply after a start, start_and_apply when files are written while the container starts, fork_copy, sleep, wake)",
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
            sandboxes_by_state: IntGaugeVec::new(
                Opts::new(
                    "warren_sandboxes_by_state",
                    "Sandboxes with a record on this node, by state",
                ),
                &["state"],
            )?,
            usage: UsageCounters {
                cpu_seconds: Counter::with_opts(Opts::new(
                    "warren_usage_cpu_seconds_total",
                    "CPU time sandboxes' own processes used on this node (cgroup accounting)",
                ))?,
                memory_gib_seconds: Counter::with_opts(Opts::new(
                    "warren_usage_memory_gib_seconds_total",
                    "Provisioned sandbox memory while running on this node, GiB x seconds",
                ))?,
                running_seconds: Counter::with_opts(Opts::new(
                    "warren_usage_running_seconds_total",
                    "Time sandboxes ran on this node, summed",
                ))?,
                egress_bytes: IntCounter::with_opts(Opts::new(
                    "warren_usage_egress_bytes_total",
                    "Bytes sandboxes of this node sent and received through the egress proxy",
                ))?,
            },
            admission_refused: IntCounter::with_opts(Opts::new(
                "warren_admission_refused_total",
                "Container starts refused with CAPACITY_EXHAUSTED: the running sandboxes' limits, or the host's free memory, left no room",
            ))?,
            disk_limit_kills: IntCounter::with_opts(Opts::new(
                "warren_sandbox_disk_limit_kills_total",
                "Times a sandbox's processes were killed for taking more disk than its disk_mb (where the storage driver enforces no quota)",
            ))?,
            object_store: Default::default(),
            chunk_cache: Default::default(),
            guarantees: IntGaugeVec::new(
                Opts::new(
                    "warren_safety_guarantee_holds",
                    "1 while a guarantee sandboxes rest on holds on this node (firewall, user_namespaces, cluster_lease); 0: the node refuses to start sandboxes (and freezes them, for firewall and cluster_lease)",
                ),
                &["guarantee"],
            )?,
            data_disk_free_bytes: IntGauge::with_opts(Opts::new(
                "warren_data_disk_free_bytes",
                "Bytes free to unprivileged writers on the filesystem of the node's data dir",
            ))?,
            data_disk_size_bytes: IntGauge::with_opts(Opts::new(
                "warren_data_disk_size_bytes",
                "Size of the filesystem of the node's data dir",
            ))?,
        };
        registry.register(Box::new(m.guarantees.clone()))?;
        registry.register(Box::new(m.data_disk_free_bytes.clone()))?;
        registry.register(Box::new(m.data_disk_size_bytes.clone()))?;
        m.object_store.register(registry)?;
        m.chunk_cache.register(registry)?;
        registry.register(Box::new(m.sandboxes.clone()))?;
        registry.register(Box::new(m.creates.clone()))?;
        registry.register(Box::new(m.recoveries.clone()))?;
        registry.register(Box::new(m.guest_requests.clone()))?;
        registry.register(Box::new(m.snapshots.clone()))?;
        // Every refusal reason is a series from the start (at 0): an alert on its rate is
        // never blind.
        for reason in crate::guest::connect::Refusal::REASONS {
            m.guest_refused.with_label_values(&[reason]);
        }
        registry.register(Box::new(m.guest_refused.clone()))?;
        registry.register(Box::new(m.disk_limit_kills.clone()))?;
        registry.register(Box::new(m.admission_refused.clone()))?;
        registry.register(Box::new(m.sandboxes_by_state.clone()))?;
        registry.register(Box::new(m.usage.cpu_seconds.clone()))?;
        registry.register(Box::new(m.usage.memory_gib_seconds.clone()))?;
        registry.register(Box::new(m.usage.running_seconds.clone()))?;
        registry.register(Box::new(m.usage.egress_bytes.clone()))?;
        Ok(m)
    }
}
