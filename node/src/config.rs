//! Configuration of one node.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Stable id of this node (DNS-label syntax); names its containers and networks.
    pub node_id: String,
    pub region: String,
    /// Sandbox records, the chunk cache and the guest binary live here.
    pub data_dir: PathBuf,
    /// Docker endpoint (`unix:///var/run/docker.sock` when `None`).
    pub docker_host: Option<String>,
    /// Image of sandboxes that name none.
    pub default_image: String,
    /// The static guest agent to mount into every sandbox.
    pub guest_binary: PathBuf,
    /// Each running sandbox's link (`runtime::links`) is a /30 of this IPv4 range.
    pub subnet_pool: (Ipv4Addr, u8),
    /// Install host firewall rules that cut sandboxes off from the host, each other and
    /// every network that is not the public internet. Off only on purpose: a node that
    /// should have them and cannot install them starts no sandbox (`safety`).
    pub firewall: bool,
    /// The programs the firewall rules are installed with.
    pub firewall_tools: crate::runtime::firewall::Tools,
    /// Run sandboxes even though the engine gives them no user namespace (their root is the
    /// host's root). For development machines whose Docker cannot be configured; never for
    /// untrusted code.
    pub allow_host_root: bool,
    /// Size of each sandbox's guest run directory (a tmpfs counted in its memory), MiB.
    pub run_dir_mb: u64,
    /// Most sandboxes this node runs at once (CAPACITY_EXHAUSTED beyond).
    pub max_sandboxes: usize,
    /// Container starts in flight at once, warm containers taken included (the engine's own
    /// starts are bounded further by the runtime).
    pub create_concurrency: usize,
    /// Wakes (a sleeping sandbox's files fetched from its snapshot and put into a new
    /// container) in flight at once; the others wait their turn in arrival order. A failover
    /// hands a survivor hundreds at once: unbounded, their fetches and starts starved the
    /// object store, the engine (API calls past their timeout) and the node's own Raft.
    pub wake_concurrency: usize,
    /// What the running sandboxes may add up to, and the host memory kept free: a start
    /// beyond is refused with CAPACITY_EXHAUSTED (`sandbox::admission`).
    pub capacity: crate::sandbox::admission::Capacity,
    /// Where snapshots are stored: a local directory (`file:///…` or an absolute path).
    /// Nodes of one cluster share it, so that any node can restore any snapshot.
    pub object_store: String,
    /// Bytes of chunks kept in the node-local cache.
    pub chunk_cache_bytes: u64,
    /// Unreferenced chunks younger than this are kept (a snapshot being written may use them).
    pub snapshot_gc_grace: Duration,
    /// How often idle sandboxes are looked for (they sleep after their `sleep_after`).
    pub idle_check_every: Duration,
    /// How often running sandboxes' writable layers are measured against their `disk_mb`
    /// where the storage driver enforces no quota (zero: never).
    pub disk_check_every: Duration,
    /// How often the usage ledger is exported to the object store (zero: never).
    pub usage_export_every: Duration,
    /// How long usage records are kept, here and in the object store (zero: for ever).
    pub usage_retention: Duration,
    /// How often running sandboxes are sampled by the meter (zero: only when a container
    /// goes).
    pub usage_sample_every: Duration,
    /// Preview URLs: `{scheme}://{port}-{id}-{token}.{domain}[:{public port}]/`.
    pub preview: PreviewConfig,
    /// Running sandboxes active since their last checkpoint are snapshotted this often (the
    /// recovery point if their node fails); zero: never.
    pub checkpoint_every: Duration,
    /// Snapshots are archived and unpacked by the node inside the container's mount
    /// namespace (outside the sandbox's cgroup); false: by the guest inside the sandbox
    /// (needed when the node may not enter the container's namespaces, e.g. without root).
    pub pack_in_node: bool,
    /// With `pack_in_node`: a restored snapshot's files are written into the new container's
    /// root filesystem while the engine starts it (where this process sees the engine's
    /// mount); false: once it runs, in its mount namespace.
    pub fill_while_starting: bool,
    /// The seed of sandboxes' egress CAs (`warren_egress::ca`): their certificates are
    /// given to their guests to trust. None: no interception, no CA in sandboxes.
    pub egress_ca_seed: Option<[u8; 32]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewConfig {
    /// Names under this domain are preview requests (`localhost` works locally: browsers and
    /// curl resolve `*.localhost` to the loopback address).
    pub domain: String,
    pub scheme: String,
    /// The port in preview URLs (the public listener's), none for 80/443 behind a proxy.
    pub public_port: Option<u16>,
}

impl Default for PreviewConfig {
    fn default() -> Self {
        PreviewConfig {
            domain: "localhost".into(),
            scheme: "http".into(),
            public_port: None,
        }
    }
}

impl NodeConfig {
    /// A configuration with the defaults of `warren dev`.
    pub fn new(
        node_id: impl Into<String>,
        data_dir: impl Into<PathBuf>,
        guest_binary: impl Into<PathBuf>,
    ) -> Self {
        let data_dir: PathBuf = data_dir.into();
        NodeConfig {
            object_store: data_dir.join("objects").to_string_lossy().into_owned(),
            chunk_cache_bytes: 10 << 30,
            snapshot_gc_grace: Duration::from_secs(3600),
            idle_check_every: Duration::from_secs(1),
            disk_check_every: Duration::from_secs(2),
            usage_export_every: Duration::from_secs(60),
            usage_retention: Duration::ZERO,
            usage_sample_every: crate::usage::SAMPLE_EVERY,
            preview: PreviewConfig::default(),
            checkpoint_every: Duration::from_secs(60),
            pack_in_node: true,
            fill_while_starting: true,
            egress_ca_seed: None,
            node_id: node_id.into(),
            region: "local".into(),
            data_dir,
            docker_host: None,
            default_image: DEFAULT_IMAGE.into(),
            guest_binary: guest_binary.into(),
            subnet_pool: (Ipv4Addr::new(10, 200, 0, 0), 16),
            firewall: true,
            firewall_tools: Default::default(),
            allow_host_root: false,
            run_dir_mb: 256,
            max_sandboxes: 2000,
            create_concurrency: 32,
            wake_concurrency: 8,
            capacity: Default::default(),
        }
    }

    pub fn sandboxes_dir(&self) -> PathBuf {
        self.data_dir.join("sandboxes")
    }

    /// The usage ledger (`crate::usage`).
    pub fn usage_dir(&self) -> PathBuf {
        self.data_dir.join("usage")
    }

    pub fn chunk_cache_dir(&self) -> PathBuf {
        self.data_dir.join("chunk-cache")
    }

    /// Where a snapshot's archive is written while its sandbox is frozen, before it goes to
    /// the object store (emptied when the node starts).
    pub fn spool_dir(&self) -> PathBuf {
        self.data_dir.join("spool")
    }
}

/// The base image built by `deploy/image/build-local.sh` (tag = deploy/image/VERSION).
pub const DEFAULT_IMAGE: &str = concat!(
    "warren/sandbox:",
    include_str!("../../deploy/image/VERSION")
);
