//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "warren",
    version,
    about = "Self-hosted sandboxes for AI agents"
)]
pub struct Cli {
    #[command(flatten)]
    pub conn: Conn,
    #[command(subcommand)]
    pub command: Command,
}

/// How client commands reach a node.
#[derive(Args, Debug, Clone)]
pub struct Conn {
    /// Node URL (default: the dev node at http://127.0.0.1:7070).
    #[arg(long, env = "WARREN_URL", global = true)]
    pub url: Option<String>,
    /// API key (default: the dev node's key file).
    #[arg(long, env = "WARREN_API_KEY", global = true, hide_env_values = true)]
    pub api_key: Option<String>,
    /// Print raw JSON.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a single node on embedded defaults, setting up Docker and the base image if needed.
    Dev(DevArgs),
    /// Run a node with explicit settings (or `--config FILE`); joins a cluster with `--join`.
    Serve(NodeArgs),
    /// Start N nodes in M regions on loopback addresses (a local multi-region cluster).
    LocalCluster(LocalClusterArgs),
    /// Create a sandbox (or ensure it runs).
    Create(CreateArgs),
    /// List sandboxes (every page), or the files of `SANDBOX:/dir`.
    #[command(alias = "ls")]
    List(ListArgs),
    /// Show one sandbox.
    Get { id: String },
    /// Delete sandboxes, or files named `SANDBOX:/path` (directories with -r).
    #[command(alias = "delete")]
    Rm {
        #[arg(required = true)]
        targets: Vec<String>,
        /// Directories too, with everything in them.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Rename or move a file inside a sandbox: `SANDBOX:/from /to`.
    Mv {
        src: String,
        dst: String,
        /// Replace what is at the destination.
        #[arg(short, long)]
        force: bool,
    },
    /// An interactive shell in a sandbox (Ctrl-] detaches; the shell runs on).
    Terminal(TerminalArgs),
    /// Print file events under `SANDBOX:/dir` as they happen.
    Watch(WatchArgs),
    /// Git checkouts in a sandbox.
    #[command(subcommand)]
    Git(GitCommand),
    /// Run code in the sandbox's interpreter (Python, JavaScript, TypeScript).
    Run(RunArgs),
    /// The cluster's members: status, drain, remove.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions { shell: clap_complete::Shell },
    /// Run a command in a sandbox; its exit code becomes warren's.
    Exec(ExecArgs),
    /// Copy a file to or from a sandbox (`SANDBOX:/path` names the sandbox side; `-` is
    /// stdio), or a directory with -r (as one tar stream).
    Cp {
        src: String,
        dst: String,
        /// Directories, with everything in them.
        #[arg(short, long)]
        recursive: bool,
    },
    /// Start a background process.
    Start(StartArgs),
    /// List a sandbox's background processes.
    Ps { id: String },
    /// Stop a background process (its whole tree).
    Kill(KillArgs),
    /// Print a background process's output.
    Logs(LogsArgs),
    /// Snapshots: create, list, get, rm.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Replace a sandbox's files with a snapshot's.
    Restore { id: String, snapshot: String },
    /// Snapshot a sandbox once and start COUNT new sandboxes from it.
    Fork(ForkArgs),
    /// Save a sandbox (per its persist setting) and stop it; the next call wakes it.
    Sleep { id: String },
    /// Expose a port inside a sandbox; prints its preview URL.
    Expose(ExposeArgs),
    /// Revoke a port's preview URL.
    Unexpose { id: String, port: u16 },
    /// List a sandbox's exposed ports.
    Ports { id: String },
    /// Secrets for the egress proxy's header rules (write-only): set, list, rm.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// A sandbox's egress policy: get, set.
    #[command(subcommand)]
    Egress(EgressCommand),
    /// API keys, admin or scoped to a tenant (with an admin key): create, list, revoke.
    #[command(subcommand)]
    Key(KeyCommand),
    /// What sandboxes used (CPU seconds, memory GiB-seconds, running seconds, egress bytes).
    Usage(UsageArgs),
    /// Print the OpenAPI 3.1 document of the API (what `GET /v1/openapi.json` serves).
    Openapi,
}

#[derive(Args, Debug)]
pub struct TerminalArgs {
    pub id: String,
    /// The terminal's name: each is its own shell; several clients may attach to one.
    #[arg(long, default_value = "main")]
    pub name: String,
    /// The shell to start when the terminal does not run yet (a program name or a path).
    #[arg(long)]
    pub shell: Option<String>,
}

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// `SANDBOX:/dir`.
    pub target: String,
    /// Only the directory itself, not what is below it.
    #[arg(long)]
    pub no_recursive: bool,
    /// Only paths matching this glob (repeatable).
    #[arg(long)]
    pub include: Vec<String>,
    /// Not paths matching this glob (repeatable).
    #[arg(long)]
    pub exclude: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub enum GitCommand {
    /// Clone a repository into the sandbox (default: /workspace/<repo name>).
    Clone(GitCloneArgs),
}

#[derive(Args, Debug)]
pub struct GitCloneArgs {
    pub id: String,
    /// The repository's URL (a field named `url` would be the global --url).
    #[arg(value_name = "URL")]
    pub repository: String,
    /// Where (absolute, or relative to /workspace).
    pub dir: Option<String>,
    #[arg(long, short)]
    pub branch: Option<String>,
    #[arg(long)]
    pub depth: Option<u32>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    pub id: String,
    /// The code (`-` or nothing: read from stdin).
    pub code: Option<String>,
    /// Language of a new context.
    #[arg(long, short, default_value = "python")]
    pub language: String,
    /// Run in this existing context (its variables persist between runs).
    #[arg(long)]
    pub context: Option<String>,
    /// Keep the new context (prints its id) instead of deleting it after the run.
    #[arg(long)]
    pub keep: bool,
    #[arg(long)]
    pub timeout_ms: Option<i64>,
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Leader, term and every member with its state and load.
    #[command(alias = "ls")]
    Status,
    /// Move every sandbox off a node, then mark it draining.
    Drain { node: String },
    /// Remove a node from the cluster.
    Remove {
        node: String,
        /// Also a node that is down or still holds sandboxes.
        #[arg(long)]
        force: bool,
    },
    /// Join tokens for new nodes, expiring and single-use unless asked otherwise.
    #[command(subcommand)]
    Token(JoinTokenCommand),
    /// Make this stopped node the only voter of its cluster, when the majority is lost for
    /// good (docs/operations.md, "Losing a majority"). Without --yes, only says what it
    /// would do. The lost nodes must never come back with their data dirs.
    #[command(group(clap::ArgGroup::new("node").required(true).args(["data_dir", "config"])))]
    Recover {
        /// The stopped node's data dir.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// Or the stopped node's config file (its `data_dir` and `ca_file`).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
        /// Rewrite the node's Raft state (its old state is kept beside it).
        #[arg(long)]
        yes: bool,
    },
    /// Save what rebuilds the cluster when every node is lost: a tar of the answering
    /// node's Raft state and cluster files (`GET /v1/cluster/backup`; admin key).
    Backup {
        /// Where to write the tar.
        #[arg(short, long)]
        output: std::path::PathBuf,
    },
    /// Rebuild a cluster whose every node is lost from a backup: unpack it into the empty
    /// data dir of a stopped node of the backed-up node's name, and make that node the only
    /// voter of the next generation (docs/operations.md, "Backups").
    #[command(group(clap::ArgGroup::new("target").required(true).args(["data_dir", "config"])))]
    Restore {
        /// The tar `warren cluster backup` wrote.
        #[arg(long)]
        from: std::path::PathBuf,
        /// The node's (empty) data dir.
        #[arg(long)]
        data_dir: Option<std::path::PathBuf>,
        /// Or the node's config file (its `data_dir`, `secrets_key_file` and `ca_file`).
        #[arg(long)]
        config: Option<std::path::PathBuf>,
    },
    /// Show, or set with --cluster-token, whether the cluster's own join token (the
    /// `join_token` setting) still admits new nodes; off, only issued tokens do.
    JoinPolicy {
        #[arg(long, value_parser = ["on", "off"])]
        cluster_token: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum JoinTokenCommand {
    /// Make a join token; its value is printed this once (a new node's `join_token`).
    Create {
        /// Seconds until it expires (default 3600, at most 30 days).
        #[arg(long)]
        ttl: Option<u64>,
        /// Let it admit any number of nodes until it expires.
        #[arg(long)]
        multi_use: bool,
        #[arg(long)]
        name: Option<String>,
    },
    /// List join tokens (never their values), with the nodes they admitted.
    #[command(alias = "ls")]
    List,
    /// Revoke join tokens by id: they admit nobody from then on.
    #[command(alias = "rm")]
    Revoke { ids: Vec<String> },
}

#[derive(Args, Debug)]
pub struct UsageArgs {
    /// Only this sandbox.
    #[arg(long)]
    pub sandbox: Option<String>,
    /// Only sandboxes with this label (KEY=VALUE, repeatable).
    #[arg(long = "label")]
    pub labels: Vec<String>,
    /// Start of the range (RFC 3339; default: 24 h before --to).
    #[arg(long)]
    pub from: Option<String>,
    /// End of the range (RFC 3339; default: now).
    #[arg(long)]
    pub to: Option<String>,
    /// sandbox, label:KEY or day.
    #[arg(long, default_value = "sandbox")]
    pub group_by: String,
}

#[derive(Subcommand, Debug)]
pub enum KeyCommand {
    /// Create a key; its value is printed this once.
    Create {
        /// The tenant whose sandboxes, snapshots, secrets and usage the key reaches.
        #[arg(long)]
        tenant: String,
        /// An admin key reaches every tenant, the cluster and the keys.
        #[arg(long)]
        admin: bool,
        #[arg(long)]
        name: Option<String>,
    },
    /// List keys (never their values).
    #[command(alias = "ls")]
    List,
    /// Revoke keys by id: refused by every node once this returns.
    #[command(alias = "rm")]
    Revoke { ids: Vec<String> },
}

#[derive(Subcommand, Debug)]
pub enum SecretCommand {
    /// Create or replace a secret; its value is read from stdin (or --from-file), so that
    /// it is in no shell history or process list.
    Set {
        name: String,
        #[arg(long)]
        from_file: Option<PathBuf>,
    },
    /// List secrets' names and times (never values).
    #[command(alias = "ls")]
    List,
    #[command(alias = "delete")]
    Rm { names: Vec<String> },
}

#[derive(Subcommand, Debug)]
pub enum EgressCommand {
    /// Print a sandbox's policy (JSON).
    Get { id: String },
    /// Replace a sandbox's policy with the JSON in FILE (`-`: stdin).
    Set { id: String, file: String },
}

#[derive(Args, Debug)]
pub struct ExposeArgs {
    pub id: String,
    pub port: u16,
    #[arg(long)]
    pub name: Option<String>,
    /// Your own token (20-63 of a-z0-9); one is generated otherwise.
    #[arg(long)]
    pub token: Option<String>,
    /// Anyone with the URL may open it (no token: `{port}-{id}-public.{domain}`).
    #[arg(long)]
    pub public: bool,
}

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Save a sandbox's files (or only --dir directories).
    Create {
        id: String,
        #[arg(long)]
        name: Option<String>,
        /// Directory to save (repeatable; default: every change to the image).
        #[arg(long = "dir")]
        dirs: Vec<String>,
    },
    #[command(alias = "ls")]
    List {
        #[arg(long)]
        sandbox: Option<String>,
    },
    Get {
        snapshot: String,
    },
    #[command(alias = "delete")]
    Rm {
        snapshots: Vec<String>,
    },
}

#[derive(Args, Debug)]
pub struct ForkArgs {
    pub id: String,
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// Ids of the new sandboxes (repeatable; default ID-fork-1…).
    #[arg(long = "to")]
    pub ids: Vec<String>,
}

#[derive(Args, Debug, Clone)]
pub struct NodeArgs {
    /// Read every setting from this TOML file instead (see docs/cluster.md); no other
    /// setting flag may be given with it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The settings given on the command line (not defaulted): with `--config`, each would
    /// be ignored, so the node refuses to start instead.
    #[arg(skip)]
    pub given: Vec<String>,
    /// Log lines as `pretty` text or as `json` (one object per line). Levels: `WARREN_LOG`
    /// (an env-filter directive; default `info` for warren, `warn` for its dependencies).
    #[arg(long, env = "WARREN_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
    /// Where records, Raft state, snapshots and the API key live.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Address of the public API.
    #[arg(long, default_value_t = warren_daemon::settings::default_listen())]
    pub listen: String,
    /// This node's name (a DNS label), unique in its cluster.
    #[arg(long = "node-id", alias = "name", default_value = "dev")]
    pub node_id: String,
    #[arg(long, default_value_t = warren_daemon::settings::default_region())]
    pub region: String,
    /// UDP address of the QUIC endpoint that peers use.
    #[arg(long, default_value_t = warren_daemon::settings::default_peer_listen())]
    pub peer_listen: String,
    /// Address other nodes and clients use for this node's API (default: the bound one).
    #[arg(long)]
    pub advertise_api: Option<String>,
    /// Address peers use for this node's QUIC endpoint (default: the bound one).
    #[arg(long)]
    pub advertise_peer: Option<String>,
    /// API URL of a cluster member to join through (otherwise: bootstrap a new cluster).
    #[arg(long)]
    pub join: Option<String>,
    /// Token for joining (generated and stored at bootstrap when absent).
    #[arg(long, env = "WARREN_JOIN_TOKEN", hide_env_values = true)]
    pub join_token: Option<String>,
    /// File holding the API key (created with a new key when missing). Default: DATA_DIR/api-key.
    #[arg(long)]
    pub api_key_file: Option<PathBuf>,
    /// Image of sandboxes that name none.
    #[arg(long)]
    pub image: Option<String>,
    /// The static guest agent binary (default: found next to this executable).
    #[arg(long, env = "WARREN_GUEST_BIN")]
    pub guest_bin: Option<PathBuf>,
    /// Docker endpoint (default: the local socket).
    #[arg(long, env = "DOCKER_HOST")]
    pub docker_host: Option<String>,
    /// IPv4 range for sandbox links (a /30 per running sandbox).
    #[arg(long, default_value_t = warren_daemon::settings::default_subnet_pool())]
    pub subnet_pool: String,
    /// No longer used: sandboxes get a link of their own at each start, not a Docker
    /// network from a pool (accepted so that existing scripts still run).
    #[arg(long, hide = true, default_value_t = warren_daemon::settings::default_spare())]
    pub spare_networks: usize,
    /// The OCI runtime of sandbox containers: `default` (the engine's), or the name of a
    /// runtime the engine has registered (`crun`).
    #[arg(long, env = "WARREN_OCI_RUNTIME", default_value_t = warren_daemon::settings::default_oci_runtime())]
    pub oci_runtime: String,
    /// Do not install the host firewall rules that isolate sandboxes (their traffic then
    /// reaches this host and every network it reaches). Never where untrusted code runs.
    #[arg(long)]
    pub no_firewall: bool,
    /// The iptables program the firewall rules are installed with (its `-restore` beside).
    #[arg(long, default_value_os_t = warren_daemon::settings::default_iptables())]
    pub iptables: PathBuf,
    /// The ip6tables program (IPv6 rules; skipped on hosts without IPv6).
    #[arg(long, default_value_os_t = warren_daemon::settings::default_ip6tables())]
    pub ip6tables: PathBuf,
    /// Start sandboxes even when Docker gives them no user namespace (no `userns-remap`):
    /// root in a sandbox is then root on this host. For development machines only.
    #[arg(long)]
    pub allow_host_root: bool,
    /// Size of each sandbox's guest run directory (a tmpfs: its socket, sessions and
    /// process logs, counted in the sandbox's memory), MiB.
    #[arg(long, default_value_t = warren_daemon::settings::default_run_dir_mb())]
    pub run_dir_mb: u64,
    /// CPUs' worth of time the node's host work (snapshot archiving and unpacking, chunk
    /// hashing and compression, fork copies) may use, in a cgroup of its own; 0: no quota.
    /// Default: half this machine's CPUs.
    #[arg(long)]
    pub host_work_cpus: Option<f64>,
    /// Disk bandwidth of the host work on each disk it reads and writes, MiB/s; 0: no
    /// limit. Default 256.
    #[arg(long)]
    pub host_work_io_mbps: Option<u64>,
    /// How often running sandboxes' writable layers are measured against their `disk_mb`
    /// where Docker enforces no quota (ext4), ms; one over its limit has its processes
    /// killed. 0: never.
    #[arg(long, default_value_t = warren_daemon::settings::default_disk_check_ms())]
    pub disk_check_ms: u64,
    /// How often this node's usage ledger is copied to the object store, ms; 0: never.
    #[arg(long, default_value_t = warren_daemon::settings::default_usage_export_ms())]
    pub usage_export_ms: u64,
    /// Usage records older than this many days are deleted (here and in the object store);
    /// 0: kept for ever.
    #[arg(long, default_value_t = 0)]
    pub usage_retention_days: u64,
    /// How often running sandboxes' usage is sampled, ms (1000 to 10000); 0: only when a
    /// container goes.
    #[arg(long, default_value_t = warren_daemon::settings::default_usage_sample_ms())]
    pub usage_sample_ms: u64,
    #[arg(long, default_value_t = warren_daemon::settings::default_max())]
    pub max_sandboxes: usize,
    /// CPUs the limits of this node's running sandboxes may add up to (0: no bound).
    #[arg(long, default_value_t = 0.0)]
    pub max_cpus: f64,
    /// Memory the limits of this node's running sandboxes may add up to, MiB (0: no bound).
    #[arg(long, default_value_t = 0)]
    pub max_memory_mb: u64,
    /// No container starts while the host has less memory available than this, MiB
    /// (default: a twentieth of the host's memory, between 256 and 4096).
    #[arg(long)]
    pub memory_reserve_mb: Option<u64>,
    /// Relative placement weight of this node.
    #[arg(long, default_value_t = warren_daemon::settings::default_capacity())]
    pub capacity: u32,
    #[arg(long, default_value_t = warren_daemon::settings::default_heartbeat())]
    pub heartbeat_ms: u64,
    #[arg(long, default_value_t = warren_daemon::settings::default_down_after())]
    pub down_after_ms: u64,
    #[arg(long, default_value_t = warren_daemon::settings::default_lease())]
    pub lease_ms: u64,
    /// Snapshot store shared by the cluster's nodes (directory; default DATA_DIR/objects).
    #[arg(long)]
    pub object_store: Option<String>,
    #[arg(long, default_value_t = warren_daemon::settings::default_chunk_cache_mb())]
    pub chunk_cache_mb: u64,
    /// Unreferenced snapshot chunks younger than this are kept.
    #[arg(long, default_value_t = warren_daemon::settings::default_gc_grace())]
    pub snapshot_gc_grace_s: u64,
    /// Domain of preview URLs (`{port}-{id}-{token}.DOMAIN`).
    #[arg(long, default_value_t = warren_daemon::settings::default_preview_domain())]
    pub preview_domain: String,
    /// Scheme of preview URLs (https when a TLS proxy fronts the nodes).
    #[arg(long, default_value_t = warren_daemon::settings::default_preview_scheme())]
    pub preview_scheme: String,
    /// Port written in preview URLs (default: the API listener's; 0: none).
    #[arg(long)]
    pub preview_port: Option<u16>,
    /// Snapshot running, active sandboxes this often (their recovery point if this node
    /// fails; what its death can lose: `loss_window_s` in `GET /v1/cluster`); 0: never.
    #[arg(long, default_value_t = warren_daemon::settings::default_checkpoint_every())]
    pub checkpoint_every_s: u64,
    /// Let the guest archive and unpack snapshots inside the sandbox (counted as the
    /// sandbox's CPU use) instead of the node entering the container's mount namespace
    /// (which needs root).
    #[arg(long)]
    pub pack_in_guest: bool,
    /// Write a restored snapshot's files only once its new container runs, in the
    /// container's mount namespace, instead of while Docker starts it (slower; for engines
    /// whose mounts behave unlike Docker's overlay2).
    #[arg(long)]
    pub restore_after_start: bool,
    /// Containers of the default image kept started and ready, so that a create, restore,
    /// wake or fork takes one instead of waiting for Docker to start one (0: none).
    #[arg(long, default_value_t = warren_daemon::settings::default_warm())]
    pub warm_containers: usize,
    /// Warm containers kept at most when demand is high: as many as the most requests for
    /// one within a minute of the last ten, between --warm-containers and this (at or below
    /// --warm-containers: a fixed pool).
    #[arg(long, env = "WARREN_WARM_MAX", default_value_t = warren_daemon::settings::default_warm_max())]
    pub warm_max: usize,
    /// Memory the warm containers may hold together, MiB (0: an eighth of this host's
    /// memory, at most 2048).
    #[arg(long, default_value_t = 0)]
    pub warm_memory_mb: u64,
    /// Start another warm container only when at least this fraction of the host's CPU
    /// time was idle just before (0: whatever the load).
    #[arg(long, default_value_t = warren_daemon::settings::default_warm_idle_reserve())]
    pub warm_idle_reserve: f64,
    /// How long a burst of requests keeps the warm pool above --warm-containers, seconds.
    #[arg(long, default_value_t = warren_daemon::settings::default_warm_horizon_s())]
    pub warm_horizon_s: u64,
    /// An image besides the default whose sandboxes also take warm containers, in a pool of
    /// its own that follows its recent demand from none, within --warm-max and
    /// --warm-memory-mb; repeatable. It must be present on this host.
    #[arg(long = "warm-image", env = "WARREN_WARM_IMAGES", value_delimiter = ',')]
    pub warm_images: Vec<String>,
    /// File of the cluster's secrets keys (made at bootstrap, received when joining).
    /// Default: DATA_DIR/cluster/secrets.key.
    #[arg(long)]
    pub secrets_key_file: Option<PathBuf>,
    /// The cluster CA's certificate and key (PEM) on a node that signs node certificates.
    /// Default: DATA_DIR/cluster/ca.pem (the first node writes it).
    #[arg(long)]
    pub ca_file: Option<PathBuf>,
    /// How long node certificates live, seconds; each node renews its own at half of it.
    #[arg(long, default_value_t = warren_daemon::settings::default_cert_lifetime_s())]
    pub cert_lifetime_s: u64,
    /// A network the egress proxy may connect to although it is not the public internet
    /// (private, loopback, link-local, ...), as a CIDR; repeatable. The node's own API,
    /// peer and proxy ports stay unreachable whatever is listed.
    #[arg(
        long = "egress-allow-net",
        env = "WARREN_EGRESS_ALLOW_NETS",
        value_delimiter = ','
    )]
    pub egress_allow_nets: Vec<String>,
    /// TCP port of the egress proxy on this host (default: the one used before, else the
    /// first free one from 47800 to 47899, the range the firewall opens to sandboxes).
    #[arg(long)]
    pub egress_port: Option<u16>,
    /// PEM file of CAs the egress proxy trusts for upstream HTTPS besides the public roots
    /// (an internal CA of private services).
    #[arg(long)]
    pub egress_ca_file: Option<PathBuf>,
    /// PEM certificate chain of the public API: with `--tls-key-file`, the API (and the
    /// join endpoint) speak HTTPS only. Both files are read again when they change.
    #[arg(long, requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file`.
    #[arg(long, requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// How often the TLS files are checked for a change, ms.
    #[arg(long, default_value_t = warren_daemon::settings::default_tls_reload_check_ms())]
    pub tls_reload_check_ms: u64,
    /// PEM file of the CA trusted for the seed's HTTPS API when joining (a seed whose
    /// certificate is not from a public CA).
    #[arg(long)]
    pub join_ca_file: Option<PathBuf>,
    /// Time a client has to send a request's header (also the longest a connection may
    /// sit idle between requests), ms.
    #[arg(long, default_value_t = warren_daemon::settings::default_header_read_timeout_ms())]
    pub header_read_timeout_ms: u64,
    /// Connections to the public API served at once (more wait in the kernel's backlog).
    #[arg(long, default_value_t = warren_daemon::settings::default_max_connections())]
    pub max_connections: usize,
    /// On shutdown, how long requests in progress may finish before they are cut, ms.
    #[arg(long, default_value_t = warren_daemon::settings::default_drain_timeout_ms())]
    pub drain_timeout_ms: u64,
    /// File holding the token `GET /metrics` asks for (as a bearer token; an admin key is
    /// taken too). Without it, `/metrics` is open.
    #[arg(long)]
    pub metrics_token_file: Option<PathBuf>,
    /// Wrong API keys (or tickets) a client address may present per minute before it is
    /// refused everything for a while (0: no limit).
    #[arg(long, default_value_t = warren_daemon::settings::default_auth_failures_per_min())]
    pub auth_failures_per_min: u32,
    /// Wrong preview tokens a client address may send per minute before its previews are
    /// refused for a while (0: no limit).
    #[arg(long, default_value_t = warren_daemon::settings::default_preview_guesses_per_min())]
    pub preview_guesses_per_min: u32,
    /// How long a request body may go without a byte before it is cut, ms.
    #[arg(long, default_value_t = warren_daemon::settings::default_body_read_timeout_ms())]
    pub body_read_timeout_ms: u64,
    /// Largest JSON request body, MiB (over it: 413 PAYLOAD_TOO_LARGE). File uploads and
    /// other streamed bodies are bounded by the sandbox's disk instead.
    #[arg(long, default_value_t = warren_daemon::settings::default_max_json_body_mb())]
    pub max_json_body_mb: u64,
    /// Requests per second each API key may make through this node on average (0: no
    /// limit); over it, 429 RATE_LIMITED with retry-after.
    #[arg(long, default_value_t = warren_daemon::settings::default_rate_limit_per_s())]
    pub rate_limit_per_s: u32,
    /// Requests a key may make at once above its average rate.
    #[arg(long, default_value_t = warren_daemon::settings::default_rate_limit_burst())]
    pub rate_limit_burst: u32,
}

/// Flags of `serve` that are not settings of the file (they may go with `--config`).
const NOT_SETTINGS: &[&str] = &["config", "log_format", "url", "api_key", "json"];

impl Cli {
    /// Parses the command line, noting which of `serve`'s flags were given explicitly.
    pub fn parse_noting_flags() -> Result<Cli, clap::Error> {
        Cli::parse_noting_flags_from(std::env::args_os())
    }

    pub fn parse_noting_flags_from<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let matches = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&matches)?;
        if let (Command::Serve(node), Some(("serve", m))) = (&mut cli.command, matches.subcommand())
        {
            let cmd = Cli::command();
            let args: Vec<String> = cmd
                .find_subcommand("serve")
                .map(|c| c.get_arguments().map(|a| a.get_id().to_string()).collect())
                .unwrap_or_default();
            node.given = given_flags(m)
                .into_iter()
                .filter(|id| args.contains(id))
                .collect();
        }
        Ok(cli)
    }
}

/// The ids set on the command line (not those of the environment, which is ambient:
/// `WARREN_GUEST_BIN` may be set for every node a shell starts); groups included.
fn given_flags(m: &clap::ArgMatches) -> Vec<String> {
    use clap::parser::ValueSource;
    m.ids()
        .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
        .map(|id| id.as_str().to_string())
        .collect()
}

impl NodeArgs {
    /// The settings these flags describe, or those of `--config`.
    pub fn settings(&self) -> anyhow::Result<warren_daemon::settings::Settings> {
        if let Some(path) = &self.config {
            let ignored: Vec<String> = self
                .given
                .iter()
                .filter(|f| !NOT_SETTINGS.contains(&f.as_str()))
                .map(|f| format!("--{}", f.replace('_', "-")))
                .collect();
            anyhow::ensure!(
                ignored.is_empty(),
                "{} would be ignored with --config {}: put them in the file instead",
                ignored.join(", "),
                path.display()
            );
            return warren_daemon::settings::Settings::load(path);
        }
        let s = warren_daemon::settings::Settings {
            name: self.node_id.clone(),
            region: self.region.clone(),
            data_dir: self.data_dir.clone(),
            listen: self.listen.clone(),
            advertise_api: self.advertise_api.clone(),
            peer_listen: self.peer_listen.clone(),
            advertise_peer: self.advertise_peer.clone(),
            join: self.join.clone(),
            join_token: self.join_token.clone(),
            api_key_file: self.api_key_file.clone(),
            image: self.image.clone(),
            guest_bin: self.guest_bin.clone(),
            docker_host: self.docker_host.clone(),
            subnet_pool: self.subnet_pool.clone(),
            spare_networks: self.spare_networks,
            oci_runtime: self.oci_runtime.clone(),
            firewall: !self.no_firewall,
            iptables: self.iptables.clone(),
            ip6tables: self.ip6tables.clone(),
            allow_host_root: self.allow_host_root,
            run_dir_mb: self.run_dir_mb,
            host_work_cpus: self.host_work_cpus,
            host_work_io_mbps: self.host_work_io_mbps,
            disk_check_ms: self.disk_check_ms,
            usage_export_ms: self.usage_export_ms,
            usage_retention_days: self.usage_retention_days,
            usage_sample_ms: self.usage_sample_ms,
            max_sandboxes: self.max_sandboxes,
            max_cpus: self.max_cpus,
            max_memory_mb: self.max_memory_mb,
            memory_reserve_mb: self.memory_reserve_mb,
            capacity: self.capacity,
            heartbeat_ms: self.heartbeat_ms,
            down_after_ms: self.down_after_ms,
            lease_ms: self.lease_ms,
            object_store: self.object_store.clone(),
            chunk_cache_mb: self.chunk_cache_mb,
            snapshot_gc_grace_s: self.snapshot_gc_grace_s,
            preview_domain: self.preview_domain.clone(),
            preview_scheme: self.preview_scheme.clone(),
            preview_port: self.preview_port,
            checkpoint_every_s: self.checkpoint_every_s,
            pack_in_guest: self.pack_in_guest,
            restore_after_start: self.restore_after_start,
            warm_containers: self.warm_containers,
            warm_max: self.warm_max,
            warm_memory_mb: self.warm_memory_mb,
            warm_idle_reserve: self.warm_idle_reserve,
            warm_horizon_s: self.warm_horizon_s,
            warm_images: self.warm_images.clone(),
            secrets_key_file: self.secrets_key_file.clone(),
            ca_file: self.ca_file.clone(),
            cert_lifetime_s: self.cert_lifetime_s,
            egress_allow_nets: self.egress_allow_nets.clone(),
            egress_port: self.egress_port,
            egress_ca_file: self.egress_ca_file.clone(),
            tls_cert_file: self.tls_cert_file.clone(),
            tls_key_file: self.tls_key_file.clone(),
            tls_reload_check_ms: self.tls_reload_check_ms,
            join_ca_file: self.join_ca_file.clone(),
            header_read_timeout_ms: self.header_read_timeout_ms,
            max_connections: self.max_connections,
            drain_timeout_ms: self.drain_timeout_ms,
            metrics_token_file: self.metrics_token_file.clone(),
            body_read_timeout_ms: self.body_read_timeout_ms,
            preview_guesses_per_min: self.preview_guesses_per_min,
            max_json_body_mb: self.max_json_body_mb,
            auth_failures_per_min: self.auth_failures_per_min,
            rate_limit_per_s: self.rate_limit_per_s,
            rate_limit_burst: self.rate_limit_burst,
        };
        s.check()?;
        Ok(s)
    }
}

#[derive(Args, Debug)]
pub struct DevArgs {
    #[command(flatten)]
    pub node: NodeArgs,
    /// Do not install or start Docker, nor build the image: fail if they are missing.
    #[arg(long)]
    pub no_setup: bool,
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    pub id: String,
    #[arg(long)]
    pub image: Option<String>,
    #[arg(long)]
    pub instance_type: Option<String>,
    #[arg(long)]
    pub cpus: Option<f64>,
    #[arg(long)]
    pub memory_mb: Option<u64>,
    #[arg(long)]
    pub disk_mb: Option<u64>,
    #[arg(long)]
    pub pids: Option<u64>,
    /// KEY=VALUE (repeatable).
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
    /// KEY=VALUE (repeatable).
    #[arg(long = "label", short = 'l')]
    pub labels: Vec<String>,
    /// e.g. 30s, 10m.
    #[arg(long)]
    pub sleep_after: Option<String>,
    #[arg(long)]
    pub keep_alive: bool,
    #[arg(long)]
    pub region: Option<String>,
    /// Start from this snapshot.
    #[arg(long)]
    pub from_snapshot: Option<String>,
    /// What survives sleep: disk (default), none, or a directory (repeatable).
    #[arg(long)]
    pub persist: Vec<String>,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// `SANDBOX:/dir`: list that directory's files instead.
    pub target: Option<String>,
    /// Files: everything below the directory.
    #[arg(short, long)]
    pub recursive: bool,
    /// Files: hidden ones too.
    #[arg(short, long)]
    pub all: bool,
    #[arg(long)]
    pub state: Option<String>,
    /// KEY=VALUE (repeatable).
    #[arg(long = "label", short = 'l')]
    pub labels: Vec<String>,
    #[arg(long)]
    pub region: Option<String>,
    /// Sandboxes per page (every page is listed).
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
}

#[derive(Args, Debug)]
pub struct ExecArgs {
    pub id: String,
    /// One argument is a bash script; several are an argv run without a shell.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    #[arg(long, short = 's')]
    pub session: Option<String>,
    #[arg(long, short = 'w')]
    pub cwd: Option<String>,
    /// KEY=VALUE for this call only (repeatable).
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
    /// Seconds before the command's tree is killed (exit 124).
    #[arg(long, short = 't')]
    pub timeout: Option<f64>,
    /// Send this program's stdin to the command.
    #[arg(long, short = 'i')]
    pub stdin: bool,
}

#[derive(Args, Debug)]
pub struct StartArgs {
    pub id: String,
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
    /// Process id to use (default: generated).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long, short = 's')]
    pub session: Option<String>,
    #[arg(long, short = 'w')]
    pub cwd: Option<String>,
    #[arg(long = "env", short = 'e')]
    pub env: Vec<String>,
}

#[derive(Args, Debug)]
pub struct KillArgs {
    pub id: String,
    pub process: String,
    #[arg(long, default_value = "TERM")]
    pub signal: String,
    #[arg(long, default_value_t = 5000)]
    pub grace_ms: u64,
}

#[derive(Args, Debug)]
pub struct LogsArgs {
    pub id: String,
    pub process: String,
    /// Keep following until the process exits.
    #[arg(long, short = 'f')]
    pub follow: bool,
    #[arg(long)]
    pub since: Option<u64>,
}

#[derive(Args, Debug)]
pub struct LocalClusterArgs {
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    #[arg(long, default_value_t = 2)]
    pub regions: usize,
    /// Each node's data dir and config go under here.
    #[arg(long, default_value = "/tmp/warren-cluster")]
    pub dir: PathBuf,
    /// API port of every node (each node has its own loopback address, 127.0.0.<10+i>).
    #[arg(long, default_value_t = 7070)]
    pub api_port: u16,
    #[arg(long, default_value_t = 7400)]
    pub peer_port: u16,
    /// No longer used (see `warren node --help`): accepted so that existing scripts run.
    #[arg(long, hide = true, default_value_t = 2)]
    pub spare_networks: usize,
    /// Round trips between regions, applied to the nodes' peer traffic in user space:
    /// `region-1/region-2=20,region-1/region-3=80,region-2/region-3=150` (milliseconds).
    #[arg(long, value_name = "PAIRS")]
    pub wan: Option<String>,
    /// With --wan: the probability that each datagram between nodes is lost (0 to 1).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(args: &[&str]) -> NodeArgs {
        let cli = Cli::parse_noting_flags_from(["warren", "serve"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Serve(n) => n,
            other => panic!("{other:?}"),
        }
    }

    /// The flags' defaults and the file's are the same settings: a node set up by flags
    /// and one set up by a file that names only itself behave alike.
    #[test]
    fn flags_and_the_file_default_every_setting_alike() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        let by_flags = serve(&["--node-id", "n1"]).settings().unwrap();
        std::fs::write(&file, "name = \"n1\"\n").unwrap();
        let by_file = warren_daemon::settings::Settings::load(&file).unwrap();
        let (a, b) = (
            serde_json::to_value(&by_flags).unwrap(),
            serde_json::to_value(&by_file).unwrap(),
        );
        // Flags that read the environment take what the test's environment holds.
        let from_env = [
            ("guest_bin", "WARREN_GUEST_BIN"),
            ("docker_host", "DOCKER_HOST"),
            ("join_token", "WARREN_JOIN_TOKEN"),
            ("egress_allow_nets", "WARREN_EGRESS_ALLOW_NETS"),
            ("warm_images", "WARREN_WARM_IMAGES"),
            ("oci_runtime", "WARREN_OCI_RUNTIME"),
        ];
        let differ: Vec<String> = a
            .as_object()
            .unwrap()
            .iter()
            .filter(|(k, _)| {
                !from_env
                    .iter()
                    .any(|(f, var)| f == k && std::env::var_os(var).is_some())
            })
            .filter(|(k, v)| b.get(k.as_str()) != Some(v))
            .map(|(k, v)| format!("{k}: flags {v}, file {}", b[k.as_str()]))
            .collect();
        assert!(differ.is_empty(), "defaults differ:\n{}", differ.join("\n"));
    }

    #[test]
    fn a_setting_flag_next_to_config_is_refused_instead_of_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, "name = \"n1\"\n").unwrap();
        let f = file.to_str().unwrap();
        let e = serve(&[
            "--config",
            f,
            "--listen",
            "0.0.0.0:9",
            "--max-connections",
            "5",
        ])
        .settings()
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("--listen") && e.contains("--max-connections"),
            "{e}"
        );
        // The file alone, or with flags that are not settings, is fine.
        assert_eq!(serve(&["--config", f]).settings().unwrap().name, "n1");
        assert_eq!(
            serve(&["--config", f, "--log-format", "json", "--url", "http://x"])
                .settings()
                .unwrap()
                .name,
            "n1"
        );
        // Without --config, flags are the settings.
        let s = serve(&["--node-id", "n2", "--listen", "127.0.0.1:9"])
            .settings()
            .unwrap();
        assert_eq!((s.name.as_str(), s.listen.as_str()), ("n2", "127.0.0.1:9"));
    }
}
