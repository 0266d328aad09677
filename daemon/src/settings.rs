//! A node's settings: one type read from `warren serve`'s flags, the environment
//! (`WARREN_*`) and a TOML file (`warren serve --config`), in that order of precedence.

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every setting of a node, read from one place per source: its flag (`--warm-max`), its
/// environment variable (`WARREN_WARM_MAX`: `WARREN_` and the key in capitals, but for
/// `DOCKER_HOST` and `WARREN_CLUSTER_CA_FILE`) and its key in the file (`warm_max`). Defaults are written once, in the `default_value` of each flag.
/// [`Settings::layered`] puts them together: flags over the environment over the file over
/// the defaults.
#[derive(Debug, Clone, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default = "Settings::defaults")]
pub struct Settings {
    /// This node's name (a DNS label), unique in the cluster.
    #[arg(
        long = "node-id",
        alias = "name",
        env = "WARREN_NAME",
        default_value = "dev"
    )]
    pub name: String,
    /// The region this node is in (placement keeps a sandbox in the region it asks for).
    #[arg(long, env = "WARREN_REGION", default_value_t = default_region())]
    pub region: String,
    /// Where records, Raft state, snapshots and keys live (default: the dev data dir).
    #[arg(long, env = "WARREN_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Address of the public API.
    #[arg(long, env = "WARREN_LISTEN", default_value_t = default_listen())]
    pub listen: String,
    /// Address other nodes and clients use for this node's API (default: the bound address).
    #[arg(long, env = "WARREN_ADVERTISE_API")]
    pub advertise_api: Option<String>,
    /// UDP address of the QUIC endpoint for peers.
    #[arg(long, env = "WARREN_PEER_LISTEN", default_value_t = default_peer_listen())]
    pub peer_listen: String,
    /// Address peers use to reach it (default: the bound address).
    #[arg(long, env = "WARREN_ADVERTISE_PEER")]
    pub advertise_peer: Option<String>,
    /// API URL of a member to join through (absent: bootstrap a new cluster).
    #[arg(long, env = "WARREN_JOIN")]
    pub join: Option<String>,
    /// Token a joining node must prove it knows (generated at bootstrap when absent).
    #[arg(long, env = "WARREN_JOIN_TOKEN", hide_env_values = true)]
    pub join_token: Option<String>,
    /// File holding the API key (created with a new key when missing; default
    /// DATA_DIR/api-key).
    #[arg(long, env = "WARREN_API_KEY_FILE")]
    pub api_key_file: Option<PathBuf>,
    /// The image of sandboxes that name none (default `warren/sandbox:1`).
    #[arg(long, env = "WARREN_IMAGE")]
    pub image: Option<String>,
    /// The static guest agent binary (default: found next to the warren executable).
    #[arg(long, env = "WARREN_GUEST_BIN")]
    pub guest_bin: Option<PathBuf>,
    /// Docker endpoint (default: the local socket).
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// IPv4 range sandbox links are cut from (a /30 per running sandbox).
    #[arg(long, env = "WARREN_SUBNET_POOL", default_value_t = default_subnet_pool())]
    pub subnet_pool: String,
    /// No longer used: sandboxes get a link of their own at each start instead of a Docker
    /// network from a pool (kept so that existing config files and flags still load).
    #[arg(long, hide = true, env = "WARREN_SPARE_NETWORKS", default_value_t = default_spare())]
    pub spare_networks: usize,
    /// The OCI runtime of sandbox containers: `default` (the engine's), or the name of a
    /// runtime the engine has registered (`crun`); the node does not start without it.
    #[arg(long, env = "WARREN_OCI_RUNTIME", default_value_t = default_oci_runtime())]
    pub oci_runtime: String,
    /// Install the sandbox firewall (default). Off: sandboxes reach this host and every
    /// network it reaches; never where untrusted code runs.
    #[arg(
        long = "no-firewall",
        env = "WARREN_FIREWALL",
        action = clap::ArgAction::SetFalse,
        help = "Do not install the host firewall rules that isolate sandboxes (their traffic \
                then reaches this host and every network it reaches); `WARREN_FIREWALL=false` \
                does the same. Never where untrusted code runs"
    )]
    pub firewall: bool,
    /// The iptables program the firewall rules are installed with (its `-restore` beside).
    #[arg(long, env = "WARREN_IPTABLES", default_value_os_t = default_iptables())]
    pub iptables: PathBuf,
    /// The ip6tables program (IPv6 rules; skipped on hosts without IPv6).
    #[arg(long, env = "WARREN_IP6TABLES", default_value_os_t = default_ip6tables())]
    pub ip6tables: PathBuf,
    /// Start sandboxes even when Docker gives them no user namespace: their root is then
    /// this host's root. Development machines only.
    #[arg(long, env = "WARREN_ALLOW_HOST_ROOT")]
    pub allow_host_root: bool,
    /// Size of each sandbox's guest run directory (a tmpfs: its socket, sessions and
    /// process logs, counted in the sandbox's memory), MiB.
    #[arg(long, env = "WARREN_RUN_DIR_MB", default_value_t = default_run_dir_mb())]
    pub run_dir_mb: u64,
    /// CPUs' worth of time the node's host work (snapshot archiving and unpacking, chunk
    /// hashing and compression, fork copies) may use; 0: no quota. Default: half the CPUs.
    #[arg(long, env = "WARREN_HOST_WORK_CPUS")]
    pub host_work_cpus: Option<f64>,
    /// Disk bandwidth of the host work on each disk it uses, MiB/s read and written; 0: no
    /// limit. Default 256.
    #[arg(long, env = "WARREN_HOST_WORK_IO_MBPS")]
    pub host_work_io_mbps: Option<u64>,
    /// How often running sandboxes' writable layers are measured against their `disk_mb`
    /// where Docker enforces no quota (one over its limit has its processes killed), ms;
    /// 0: never.
    #[arg(long, env = "WARREN_DISK_CHECK_MS", default_value_t = default_disk_check_ms())]
    pub disk_check_ms: u64,
    /// How often this node's usage ledger is copied to the object store, ms (what a node
    /// recorded survives it by this much at most); 0: never.
    #[arg(long, env = "WARREN_USAGE_EXPORT_MS", default_value_t = default_usage_export_ms())]
    pub usage_export_ms: u64,
    /// Usage records older than this many days are deleted, on this node and in the object
    /// store (records not yet exported are kept); 0: kept for ever.
    #[arg(long, env = "WARREN_USAGE_RETENTION_DAYS", default_value_t = 0)]
    pub usage_retention_days: u64,
    /// How often running sandboxes' usage is sampled, ms (1000 to 10000); 0: only when a
    /// container goes (sleep, move, delete), which loses nothing but a crashed container's
    /// use since it started.
    #[arg(long, env = "WARREN_USAGE_SAMPLE_MS", default_value_t = default_usage_sample_ms())]
    pub usage_sample_ms: u64,
    /// Sandboxes this node holds at most (announced to the cluster: placement passes over
    /// a node at its limit).
    #[arg(long, env = "WARREN_MAX_SANDBOXES", default_value_t = default_max())]
    pub max_sandboxes: usize,
    /// CPUs the limits of this node's running sandboxes may add up to (0: no bound); a start
    /// beyond is refused with CAPACITY_EXHAUSTED and new sandboxes go to other nodes.
    #[arg(long, env = "WARREN_MAX_CPUS", default_value_t = 0.0)]
    pub max_cpus: f64,
    /// Memory the limits of this node's running sandboxes may add up to, MiB (0: no bound).
    #[arg(long, env = "WARREN_MAX_MEMORY_MB", default_value_t = 0)]
    pub max_memory_mb: u64,
    /// No container starts while the host has less memory available than this, MiB
    /// (default: a twentieth of the host's memory, between 256 and 4096).
    #[arg(long, env = "WARREN_MEMORY_RESERVE_MB")]
    pub memory_reserve_mb: Option<u64>,
    /// Relative placement weight.
    #[arg(long, env = "WARREN_CAPACITY", default_value_t = default_capacity())]
    pub capacity: u32,
    /// Raft heartbeat: elections after 4–8 silent heartbeats. Each Raft call is given three
    /// of the longest round trips measured to another node, and at least a heartbeat, so any
    /// heartbeat serves regions far apart; 150 elects a new leader sooner, 500 (the
    /// default) stays calm on loaded machines.
    #[arg(long, env = "WARREN_HEARTBEAT_MS", default_value_t = default_heartbeat())]
    pub heartbeat_ms: u64,
    /// Raft log entries applied between two snapshots of the cluster state; the log is
    /// then cut to half of them behind the snapshot. A member further behind (a new one)
    /// catches up by receiving the snapshot. Lower: a smaller log, more snapshots.
    #[arg(long, env = "WARREN_RAFT_SNAPSHOT_EVERY", default_value_t = default_raft_snapshot_every())]
    pub raft_snapshot_every: u64,
    /// Largest message a Raft snapshot is sent in, KiB; each message has its own deadline
    /// (40 heartbeats, at least 20 s), so across a slow link smaller messages each arrive
    /// in time.
    #[arg(long, env = "WARREN_RAFT_SNAPSHOT_CHUNK_KB", default_value_t = default_raft_snapshot_chunk_kb())]
    pub raft_snapshot_chunk_kb: u64,
    /// Deadlines of Raft calls to the members of a region, `REGION=MS`, instead of three of
    /// their measured round trips (at least the heartbeat, at most a quarter of the lease):
    /// for links whose delay spikes past what is measured. Flag repeatable, variable
    /// comma-separated.
    #[arg(
        long = "raft-call-deadline",
        env = "WARREN_RAFT_CALL_DEADLINES",
        value_delimiter = ','
    )]
    pub raft_call_deadlines: Vec<String>,
    /// A node silent for this long is marked down.
    #[arg(long, env = "WARREN_DOWN_AFTER_MS", default_value_t = default_down_after())]
    pub down_after_ms: u64,
    /// A node out of touch with the majority this long stops serving (< down_after_ms).
    #[arg(long, env = "WARREN_LEASE_MS", default_value_t = default_lease())]
    pub lease_ms: u64,
    /// Where snapshots go, shared by every node of the cluster: an S3 bucket
    /// (`s3://bucket[/prefix]`, credentials and `?endpoint=` as docs/operations.md says), or
    /// a directory (`file:///…` or an absolute path; default DATA_DIR/objects, right for a
    /// single node).
    #[arg(long, env = "WARREN_OBJECT_STORE")]
    pub object_store: Option<String>,
    /// Size of the node-local cache of snapshot chunks, MiB.
    #[arg(long, env = "WARREN_CHUNK_CACHE_MB", default_value_t = default_chunk_cache_mb())]
    pub chunk_cache_mb: u64,
    /// Unreferenced snapshot chunks younger than this are kept, seconds.
    #[arg(long, env = "WARREN_SNAPSHOT_GC_GRACE_S", default_value_t = default_gc_grace())]
    pub snapshot_gc_grace_s: u64,
    /// Domain of preview URLs: requests for `{port}-{id}-{token}.DOMAIN` at any node reach
    /// that port in the sandbox (default `localhost`).
    #[arg(long, env = "WARREN_PREVIEW_DOMAIN", default_value_t = default_preview_domain())]
    pub preview_domain: String,
    /// Scheme written in preview URLs (`http`, or `https` behind a TLS proxy).
    #[arg(long, env = "WARREN_PREVIEW_SCHEME", default_value_t = default_preview_scheme())]
    pub preview_scheme: String,
    /// Port written in preview URLs (default: the API listener's; 0: none).
    #[arg(long, env = "WARREN_PREVIEW_PORT")]
    pub preview_port: Option<u16>,
    /// Running sandboxes active since their last checkpoint are snapshotted this often and
    /// the snapshot recorded in the cluster: what survivors restore if this node fails
    /// (`loss_window_s` in `GET /v1/cluster`), seconds. 0: never (a failed node's sandboxes
    /// then come back from their last sleep, or fresh).
    #[arg(long, env = "WARREN_CHECKPOINT_EVERY_S", default_value_t = default_checkpoint_every())]
    pub checkpoint_every_s: u64,
    /// Let the guest archive and unpack snapshots inside the sandbox (counted as the
    /// sandbox's CPU use) instead of the node entering the container's mount namespace
    /// (which needs root).
    #[arg(long, env = "WARREN_PACK_IN_GUEST")]
    pub pack_in_guest: bool,
    /// Write a restored snapshot's files only once its new container runs, in the
    /// container's mount namespace, instead of while Docker starts it (slower; for engines
    /// whose mounts behave unlike Docker's overlay2).
    #[arg(long, env = "WARREN_RESTORE_AFTER_START")]
    pub restore_after_start: bool,
    /// Containers of the default image kept started and ready, so that a create, restore,
    /// wake or fork takes one instead of waiting for Docker to start one (0: none).
    #[arg(long, env = "WARREN_WARM_CONTAINERS", default_value_t = default_warm())]
    pub warm_containers: usize,
    /// Warm containers kept at most when demand is high: the pool keeps as many as the
    /// most requests for one within a minute of the last ten, between `warm_containers` and
    /// this (at or below `warm_containers`: the pool does not follow demand).
    #[arg(long, env = "WARREN_WARM_MAX", default_value_t = default_warm_max())]
    pub warm_max: usize,
    /// Memory the warm containers may hold together, MiB (0: an eighth of this host's
    /// memory, at most 2048). Bounds `warm_max` at about 8 MiB per container.
    #[arg(long, env = "WARREN_WARM_MEMORY_MB", default_value_t = 0)]
    pub warm_memory_mb: u64,
    /// The pool starts another warm container only when at least this fraction of the
    /// host's CPU time was idle just before (0: whatever the load).
    #[arg(long, env = "WARREN_WARM_IDLE_RESERVE", default_value_t = default_warm_idle_reserve())]
    pub warm_idle_reserve: f64,
    /// How long a burst of requests keeps the warm pool above `warm_containers`, seconds.
    #[arg(long, env = "WARREN_WARM_HORIZON_S", default_value_t = default_warm_horizon_s())]
    pub warm_horizon_s: u64,
    /// Images besides the default whose sandboxes also take warm containers: each gets a
    /// pool of its own that follows its recent demand from none (no floor), within the same
    /// `warm_max` and `warm_memory_mb` as the default image's. The images must be present
    /// on this host. Flag repeatable, variable comma-separated.
    #[arg(long = "warm-image", env = "WARREN_WARM_IMAGES", value_delimiter = ',')]
    pub warm_images: Vec<String>,
    /// The cluster CA's certificate and private key (PEM), on the nodes that sign node
    /// certificates (default DATA_DIR/cluster/ca.pem; the first node writes it). Copy it
    /// to another node to make that one a signer too.
    #[arg(long, env = "WARREN_CLUSTER_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// How long node certificates live, seconds; each node renews its own at half of it. A
    /// node that was off for longer must be admitted again.
    #[arg(long, env = "WARREN_CERT_LIFETIME_S", default_value_t = default_cert_lifetime_s())]
    pub cert_lifetime_s: u64,
    /// File of the cluster's secrets keys (made at bootstrap, received when joining;
    /// default DATA_DIR/cluster/secrets.key).
    #[arg(long, env = "WARREN_SECRETS_KEY_FILE")]
    pub secrets_key_file: Option<PathBuf>,
    /// Networks (CIDRs) the egress proxy may reach although they are not the public
    /// internet (private, loopback, link-local, ...). The node's own API, peer and proxy
    /// ports stay unreachable whatever is listed. Flag repeatable, variable comma-separated.
    #[arg(
        long = "egress-allow-net",
        env = "WARREN_EGRESS_ALLOW_NETS",
        value_delimiter = ','
    )]
    pub egress_allow_nets: Vec<String>,
    /// TCP port of the egress proxy (default: the one used before, else the first free
    /// one from 47800 to 47899, the range the firewall opens to sandboxes).
    #[arg(long, env = "WARREN_EGRESS_PORT")]
    pub egress_port: Option<u16>,
    /// PEM file of CAs trusted for upstream HTTPS besides the public roots (an internal
    /// CA of private services).
    #[arg(long, env = "WARREN_EGRESS_CA_FILE")]
    pub egress_ca_file: Option<PathBuf>,
    /// PEM certificate chain of the public API; with `tls_key_file`, the API (and the
    /// join endpoint) speak HTTPS only. Both files are read again when they change.
    #[arg(long, env = "WARREN_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `tls_cert_file`.
    #[arg(long, env = "WARREN_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// How often the TLS files are checked for a change, ms.
    #[arg(long, env = "WARREN_TLS_RELOAD_CHECK_MS", default_value_t = default_tls_reload_check_ms())]
    pub tls_reload_check_ms: u64,
    /// PEM file of the CA a joining node trusts for the seed's HTTPS API (when the seed's
    /// certificate is not from a public CA).
    #[arg(long, env = "WARREN_JOIN_CA_FILE")]
    pub join_ca_file: Option<PathBuf>,
    /// Time a client has to send a request's header (also the longest a connection may
    /// sit idle between requests), ms.
    #[arg(long, env = "WARREN_HEADER_READ_TIMEOUT_MS", default_value_t = default_header_read_timeout_ms())]
    pub header_read_timeout_ms: u64,
    /// Connections to the public API served at once (more wait in the kernel's backlog).
    #[arg(long, env = "WARREN_MAX_CONNECTIONS", default_value_t = default_max_connections())]
    pub max_connections: usize,
    /// On shutdown, how long requests in progress may finish before they are cut, ms.
    #[arg(long, env = "WARREN_DRAIN_TIMEOUT_MS", default_value_t = default_drain_timeout_ms())]
    pub drain_timeout_ms: u64,
    /// File holding the token `GET /metrics` asks for (`Authorization: Bearer <token>`;
    /// an admin key is taken too). None: `/metrics` is open, as on a loopback dev node.
    #[arg(long, env = "WARREN_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,
    /// Wrong API keys (or tickets) a client address may present per minute before it is
    /// refused everything for a while (0: no limit).
    #[arg(long, env = "WARREN_AUTH_FAILURES_PER_MIN", default_value_t = default_auth_failures_per_min())]
    pub auth_failures_per_min: u32,
    /// Wrong preview tokens a client address may send per minute before its previews are
    /// refused for a while (0: no limit).
    #[arg(long, env = "WARREN_PREVIEW_GUESSES_PER_MIN", default_value_t = default_preview_guesses_per_min())]
    pub preview_guesses_per_min: u32,
    /// How long a request body may go without a byte before it is cut, ms.
    #[arg(long, env = "WARREN_BODY_READ_TIMEOUT_MS", default_value_t = default_body_read_timeout_ms())]
    pub body_read_timeout_ms: u64,
    /// Largest JSON request body, MiB (over it: 413 `PAYLOAD_TOO_LARGE`). File uploads and
    /// other streamed bodies are bounded by the sandbox's disk instead.
    #[arg(long, env = "WARREN_MAX_JSON_BODY_MB", default_value_t = default_max_json_body_mb())]
    pub max_json_body_mb: u64,
    /// Requests per second each API key may make through this node on average (0: no
    /// limit); over it, 429 `RATE_LIMITED` with `retry-after`.
    #[arg(long, env = "WARREN_RATE_LIMIT_PER_S", default_value_t = default_rate_limit_per_s())]
    pub rate_limit_per_s: u32,
    /// Requests a key may make at once above its average rate.
    #[arg(long, env = "WARREN_RATE_LIMIT_BURST", default_value_t = default_rate_limit_burst())]
    pub rate_limit_burst: u32,
}

pub fn default_auth_failures_per_min() -> u32 {
    120
}
pub fn default_preview_guesses_per_min() -> u32 {
    30
}
pub fn default_body_read_timeout_ms() -> u64 {
    30_000
}
/// The router's own default, in MiB: one number for both.
pub fn default_max_json_body_mb() -> u64 {
    (warren_router::state::DEFAULT_MAX_JSON_BODY / (1024 * 1024)) as u64
}
pub fn default_rate_limit_per_s() -> u32 {
    1000
}
pub fn default_rate_limit_burst() -> u32 {
    2000
}

pub fn default_region() -> String {
    "local".into()
}
pub fn default_listen() -> String {
    "127.0.0.1:7070".into()
}
pub fn default_peer_listen() -> String {
    "127.0.0.1:0".into()
}
pub fn default_subnet_pool() -> String {
    "10.200.0.0/16".into()
}
pub fn default_spare() -> usize {
    4
}
pub fn default_oci_runtime() -> String {
    "default".into()
}
pub fn default_warm() -> usize {
    4
}
pub fn default_warm_max() -> usize {
    256
}
pub fn default_warm_idle_reserve() -> f64 {
    0.5
}
pub fn default_warm_horizon_s() -> u64 {
    600
}
pub fn default_iptables() -> PathBuf {
    "iptables".into()
}
pub fn default_ip6tables() -> PathBuf {
    "ip6tables".into()
}
pub fn default_disk_check_ms() -> u64 {
    2000
}
pub fn default_usage_export_ms() -> u64 {
    60_000
}
pub fn default_usage_sample_ms() -> u64 {
    10_000
}
pub fn default_run_dir_mb() -> u64 {
    256
}
pub fn default_max() -> usize {
    2000
}
pub fn default_capacity() -> u32 {
    1
}
pub fn default_heartbeat() -> u64 {
    warren_consensus::timing::DEFAULT_HEARTBEAT.as_millis() as u64
}
pub fn default_raft_snapshot_every() -> u64 {
    warren_consensus::cluster::DEFAULT_RAFT_SNAPSHOT_EVERY
}
pub fn default_raft_snapshot_chunk_kb() -> u64 {
    warren_consensus::cluster::DEFAULT_RAFT_SNAPSHOT_CHUNK_KB
}
pub fn default_down_after() -> u64 {
    8000
}
/// What the leader adds to a lease before it hands a silent node's sandboxes on (clock rates
/// differ between machines): `lease_ms + LEASE_MARGIN_MS < down_after_ms`.
pub const LEASE_MARGIN_MS: u64 = 500;

pub fn default_lease() -> u64 {
    4000
}
pub fn default_cert_lifetime_s() -> u64 {
    warren_consensus::cluster::DEFAULT_CERT_LIFETIME.as_secs()
}
pub fn default_chunk_cache_mb() -> u64 {
    10 * 1024
}
pub fn default_gc_grace() -> u64 {
    3600
}
pub fn default_checkpoint_every() -> u64 {
    60
}
pub fn default_preview_domain() -> String {
    "localhost".into()
}
pub fn default_preview_scheme() -> String {
    "http".into()
}
pub fn default_tls_reload_check_ms() -> u64 {
    2000
}
pub fn default_header_read_timeout_ms() -> u64 {
    10_000
}
pub fn default_max_connections() -> usize {
    4096
}
pub fn default_drain_timeout_ms() -> u64 {
    10_000
}

impl Settings {
    /// The per-key rate limit of the API.
    pub fn key_rate(&self) -> warren_router::auth::rate::KeyRate {
        warren_router::auth::rate::KeyRate {
            per_second: self.rate_limit_per_s,
            burst: self.rate_limit_burst,
        }
    }

    /// Every setting at its default: what the flags default to, with no environment.
    pub fn defaults() -> Settings {
        use clap::{Args, FromArgMatches};
        let cmd = Settings::augment_args(clap::Command::new("defaults")).mut_args(|a| a.env(None));
        let m = cmd
            .try_get_matches_from(["defaults"])
            .expect("every setting has a default or may be absent");
        Settings::from_arg_matches(&m).expect("the defaults are settings")
    }

    /// A file's settings over the defaults (no flags, no environment): what an embedding
    /// program or an offline command reads.
    pub fn load(path: &Path) -> anyhow::Result<Settings> {
        let s = Settings::from_file(path, false)?;
        s.check()?;
        Ok(s)
    }

    /// The settings of a node started from the command line: `args` holds the defaults,
    /// the environment and the flags (as clap read them), `given` the keys the environment
    /// or a flag set. With a file, those keys keep their value and every other comes from
    /// the file (or its default).
    pub fn layered(
        file: Option<&Path>,
        args: &Settings,
        given: &BTreeSet<String>,
    ) -> anyhow::Result<Settings> {
        let Some(path) = file else {
            args.check()?;
            return Ok(args.clone());
        };
        let from_file = Settings::from_file(path, given.contains("name"))?;
        let over = serde_json::to_value(args)?;
        let mut merged = serde_json::to_value(&from_file)?;
        for key in given {
            let value = over
                .get(key)
                .ok_or_else(|| anyhow::anyhow!("{key} is not a setting"))?;
            merged[key.as_str()] = value.clone();
        }
        let s: Settings = serde_json::from_value(merged)?;
        s.check()?;
        Ok(s)
    }

    /// The file over the defaults; the file must name the node unless `named` elsewhere.
    fn from_file(path: &Path, named: bool) -> anyhow::Result<Settings> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        anyhow::ensure!(
            named || table.contains_key("name"),
            "{}: `name` is missing (this node's name, unique in the cluster)",
            path.display()
        );
        toml::from_str(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
    }

    pub fn check(&self) -> anyhow::Result<()> {
        warren_api::ids::validate_sandbox_id(&self.name)
            .map_err(|_| anyhow::anyhow!("name must be a DNS label"))?;
        warren_api::sandbox::validate_region(&self.region)
            .map_err(|_| anyhow::anyhow!("region must be a DNS label"))?;
        warren_consensus::lease::validate(self.lease_ms, LEASE_MARGIN_MS, self.down_after_ms)
            .map_err(|e| anyhow::anyhow!(e))?;
        warren_consensus::timing::validate(self.heartbeat_ms, self.lease_ms)
            .map_err(|e| anyhow::anyhow!(e))?;
        self.region_deadlines()?
            .validate(self.heartbeat(), Duration::from_millis(self.lease_ms))
            .map_err(|e| anyhow::anyhow!(e))?;
        warren_consensus::cluster::validate_raft_snapshots(
            self.raft_snapshot_every,
            self.raft_snapshot_chunk_kb,
        )
        .map_err(|e| anyhow::anyhow!(e))?;
        anyhow::ensure!(
            self.cert_lifetime_s >= warren_consensus::cluster::MIN_CERT_LIFETIME.as_secs(),
            "cert_lifetime_s must be at least {}",
            warren_consensus::cluster::MIN_CERT_LIFETIME.as_secs()
        );
        anyhow::ensure!(
            self.usage_sample_ms == 0 || (1000..=10_000).contains(&self.usage_sample_ms),
            "usage_sample_ms must be 0 (only when a container goes) or between 1000 and 10000"
        );
        anyhow::ensure!(
            self.max_cpus >= 0.0 && self.max_cpus.is_finite(),
            "max_cpus must be 0 (no bound) or a positive number"
        );
        warren_node::runtime::oci_runtime::OciRuntimeSetting::parse(&self.oci_runtime)
            .map_err(|e| anyhow::anyhow!(e))?;
        anyhow::ensure!(
            (0.0..1.0).contains(&self.warm_idle_reserve),
            "warm_idle_reserve must be at least 0 and below 1"
        );
        anyhow::ensure!(
            (1..=86_400).contains(&self.warm_horizon_s),
            "warm_horizon_s must be between 1 and 86400"
        );
        anyhow::ensure!(
            (16..=64 * 1024).contains(&self.run_dir_mb),
            "run_dir_mb must be between 16 and 65536"
        );
        anyhow::ensure!(
            self.tls_cert_file.is_some() == self.tls_key_file.is_some(),
            "tls_cert_file and tls_key_file go together"
        );
        anyhow::ensure!(
            self.header_read_timeout_ms >= 100,
            "header_read_timeout_ms must be at least 100"
        );
        anyhow::ensure!(
            self.max_connections >= 1,
            "max_connections must be at least 1"
        );
        anyhow::ensure!(
            self.body_read_timeout_ms >= 100,
            "body_read_timeout_ms must be at least 100"
        );
        anyhow::ensure!(
            self.tls_reload_check_ms >= 10,
            "tls_reload_check_ms must be at least 10"
        );
        if let Some(c) = self.host_work_cpus {
            anyhow::ensure!(
                c.is_finite() && (0.0..=1024.0).contains(&c),
                "host_work_cpus must be between 0 (no quota) and 1024"
            );
        }
        Ok(())
    }

    /// The public listener's bounds.
    pub fn listener_limits(&self) -> warren_router::listener::ListenerLimits {
        warren_router::listener::ListenerLimits {
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            tls_handshake_timeout: Duration::from_millis(self.header_read_timeout_ms),
            max_connections: self.max_connections,
            drain_timeout: Duration::from_millis(self.drain_timeout_ms),
            body_idle_timeout: Duration::from_millis(self.body_read_timeout_ms),
        }
    }

    /// The public listener's TLS files, when it speaks TLS.
    pub fn tls_files(&self) -> Option<warren_router::listener::tls::TlsFiles> {
        Some(warren_router::listener::tls::TlsFiles {
            cert: self.tls_cert_file.clone()?,
            key: self.tls_key_file.clone()?,
            check_every: Duration::from_millis(self.tls_reload_check_ms),
        })
    }

    /// The Raft call deadlines fixed per region (`raft_call_deadlines`).
    pub fn region_deadlines(
        &self,
    ) -> anyhow::Result<warren_consensus::call_deadlines::RegionDeadlines> {
        warren_consensus::call_deadlines::RegionDeadlines::parse(&self.raft_call_deadlines)
            .map_err(|e| anyhow::anyhow!(e))
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }
}

#[cfg(test)]
mod example_file {
    //! `deploy/node.example.toml` names every setting, and shows each default as it is.

    use super::Settings;
    use std::collections::BTreeMap;

    const EXAMPLE: &str = include_str!("../../deploy/node.example.toml");

    /// `key = value` of every line, commented out (`# key = value`) or not.
    fn keys_in(text: &str) -> BTreeMap<String, toml::Value> {
        text.lines()
            .filter_map(|l| {
                let l = l.trim_start_matches('#').trim();
                let (k, _) = l.split_once(" = ")?;
                if !k
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    return None;
                }
                let table: toml::Table = toml::from_str(l).ok()?;
                table.into_iter().next()
            })
            .collect()
    }

    fn defaults() -> serde_json::Map<String, serde_json::Value> {
        let s: Settings = toml::from_str("name = \"n1\"").unwrap();
        match serde_json::to_value(s).unwrap() {
            serde_json::Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn the_example_file_names_every_setting_with_its_default() {
        let shown = keys_in(EXAMPLE);
        let defaults = defaults();
        let missing: Vec<&String> = defaults
            .keys()
            .filter(|k| !shown.contains_key(*k))
            .collect();
        assert!(
            missing.is_empty(),
            "deploy/node.example.toml lacks {missing:?}; defaults: {}",
            serde_json::to_string_pretty(&defaults).unwrap()
        );
        let unknown: Vec<&String> = shown
            .keys()
            .filter(|k| !defaults.contains_key(*k))
            .collect();
        assert!(unknown.is_empty(), "not settings: {unknown:?}");
        // A setting with a default shows that default (one without shows an example).
        let wrong: Vec<String> = defaults
            .iter()
            .filter(|(k, v)| !v.is_null() && *k != "name")
            .filter_map(|(k, v)| {
                let shown = serde_json::to_value(&shown[k]).unwrap();
                (shown != *v).then(|| format!("{k}: file {shown}, default {v}"))
            })
            .collect();
        assert!(wrong.is_empty(), "defaults differ:\n{}", wrong.join("\n"));
    }

    #[test]
    fn the_example_file_loads_as_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("node.toml");
        std::fs::write(&path, EXAMPLE).unwrap();
        let s = Settings::load(&path).unwrap();
        assert_eq!(s.name, "n1");
    }
}
