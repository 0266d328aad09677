//! Command-line arguments.

use clap::{Args, Parser, Subcommand};
use std::collections::BTreeSet;
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
    /// A TOML file of settings (deploy/node.example.toml names them all); flags and
    /// `WARREN_*` variables given as well take precedence over it.
    #[arg(long, env = "WARREN_CONFIG")]
    pub config: Option<PathBuf>,
    /// The settings the command line or the environment set (not defaulted): they take
    /// precedence over the file's.
    #[arg(skip)]
    pub given: Given,
    /// Log lines as `pretty` text or as `json` (one object per line). Levels: `WARREN_LOG`
    /// (an env-filter directive; default `info` for warren, `warn` for its dependencies).
    #[arg(long, env = "WARREN_LOG_FORMAT", default_value = "pretty", value_parser = ["pretty", "json"])]
    pub log_format: String,
    #[command(flatten)]
    pub settings: warren_daemon::settings::Settings,
}

/// The settings a node's command line and environment set, by their key.
#[derive(Debug, Clone, Default)]
pub struct Given {
    pub by_flag: BTreeSet<String>,
    pub by_env: BTreeSet<String>,
}

impl Cli {
    /// Parses the command line, noting which settings of `serve` or `dev` were set by a
    /// flag or by the environment (rather than defaulted).
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
        let node = match (&mut cli.command, matches.subcommand()) {
            (Command::Serve(node), Some((_, m))) => Some((node, m)),
            (Command::Dev(dev), Some((_, m))) => Some((&mut dev.node, m)),
            _ => None,
        };
        if let Some((node, m)) = node {
            node.given = given(m);
        }
        Ok(cli)
    }
}

/// The keys of the settings that a flag or a variable set (`config`, `log_format` and the
/// client's flags are not settings).
fn given(m: &clap::ArgMatches) -> Given {
    use clap::parser::ValueSource;
    let keys = settings_keys();
    let set_by = |source: ValueSource| {
        m.ids()
            .map(|id| id.as_str())
            .filter(|id| keys.contains(*id) && m.value_source(id) == Some(source))
            .map(str::to_string)
            .collect()
    };
    Given {
        by_flag: set_by(ValueSource::CommandLine),
        by_env: set_by(ValueSource::EnvVariable),
    }
}

/// Every setting's key (its flag's id).
fn settings_keys() -> BTreeSet<String> {
    use clap::Args;
    warren_daemon::settings::Settings::augment_args(clap::Command::new("settings"))
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect()
}

impl NodeArgs {
    /// The node's settings: flags over the environment over `--config`'s file over the
    /// defaults.
    pub fn settings(&self) -> anyhow::Result<warren_daemon::settings::Settings> {
        if !self.given.by_env.is_empty() {
            tracing::info!(settings = ?self.given.by_env, "settings taken from the environment");
        }
        let given: BTreeSet<String> = self
            .given
            .by_flag
            .union(&self.given.by_env)
            .cloned()
            .collect();
        warren_daemon::settings::Settings::layered(self.config.as_deref(), &self.settings, &given)
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
    use warren_daemon::settings::Settings;

    fn serve(args: &[&str]) -> NodeArgs {
        let cli = Cli::parse_noting_flags_from(["warren", "serve"].iter().chain(args)).unwrap();
        match cli.command {
            Command::Serve(n) => n,
            other => panic!("{other:?}"),
        }
    }

    fn file_with(text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("node.toml");
        std::fs::write(&file, text).unwrap();
        let path = file.to_str().unwrap().to_string();
        (dir, path)
    }

    /// A file that names only its node, and no file at all, give the same settings: the
    /// defaults are the flags' whichever way a node is started.
    #[test]
    fn a_file_that_names_only_its_node_changes_nothing_else() {
        let (_dir, f) = file_with("name = \"n1\"\n");
        let by_flags = serve(&["--node-id", "n1"]).settings().unwrap();
        let by_file = serve(&["--config", &f]).settings().unwrap();
        assert_eq!(
            serde_json::to_value(&by_flags).unwrap(),
            serde_json::to_value(&by_file).unwrap()
        );
    }

    /// Before, `--config` ignored every flag beside it (then refused them): now the flag
    /// wins over the file, and the file over the defaults, key by key.
    #[test]
    fn flags_take_precedence_over_the_file_and_the_file_over_the_defaults() {
        let (_dir, f) = file_with(
            "name = \"n1\"\nlisten = \"127.0.0.1:9001\"\nmax_connections = 7\n\
             warm_images = [\"a:1\"]\nfirewall = true\n",
        );
        let s = serve(&[
            "--config",
            &f,
            "--listen",
            "127.0.0.1:9002",
            "--warm-image",
            "b:1",
            "--no-firewall",
            "--log-format",
            "json",
        ])
        .settings()
        .unwrap();
        assert_eq!(s.name, "n1");
        assert_eq!(s.listen, "127.0.0.1:9002");
        assert_eq!(s.max_connections, 7);
        assert_eq!(s.warm_images, vec!["b:1".to_string()]);
        assert!(!s.firewall);
        assert_eq!(s.region, warren_daemon::settings::default_region());
        // A flag may name the node the file does not.
        let (_dir2, unnamed) = file_with("max_connections = 7\n");
        let s = serve(&["--config", &unnamed, "--node-id", "n9"])
            .settings()
            .unwrap();
        assert_eq!((s.name.as_str(), s.max_connections), ("n9", 7));
    }

    /// Every setting is read from `WARREN_` and its key in capitals, so an operator can
    /// guess the variable from the file; two are named otherwise, for a reason each.
    #[test]
    fn every_setting_has_a_variable_named_after_its_key() {
        use clap::Args;
        let named_otherwise = [
            // Docker's own variable, as every Docker client reads it.
            ("docker_host", "DOCKER_HOST"),
            // `WARREN_CA_FILE` is the CA a client trusts (the CLI's, the SDKs').
            ("ca_file", "WARREN_CLUSTER_CA_FILE"),
        ];
        let cmd = Settings::augment_args(clap::Command::new("t"));
        let wrong: Vec<String> = cmd
            .get_arguments()
            .filter_map(|a| {
                let key = a.get_id().as_str();
                let want = named_otherwise
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_else(|| format!("WARREN_{}", key.to_uppercase()));
                let has = a.get_env().map(|v| v.to_string_lossy().into_owned());
                (has.as_deref() != Some(want.as_str()))
                    .then(|| format!("{key}: {has:?}, want {want}"))
            })
            .collect();
        assert!(wrong.is_empty(), "{wrong:#?}");
        // Every key of the file is a flag's, and the other way round.
        let file_keys: BTreeSet<String> = match serde_json::to_value(Settings::defaults()).unwrap()
        {
            serde_json::Value::Object(m) => m.keys().cloned().collect(),
            _ => unreachable!(),
        };
        assert_eq!(file_keys, settings_keys());
    }

    /// The environment sits between the file and the flags. Variables this test sets are
    /// read by no other test of this binary.
    #[test]
    fn the_environment_takes_precedence_over_the_file_and_flags_over_it() {
        std::env::set_var("WARREN_CHUNK_CACHE_MB", "77");
        std::env::set_var("WARREN_SNAPSHOT_GC_GRACE_S", "5");
        std::env::set_var("WARREN_FIREWALL", "false");
        let (_dir, f) = file_with(
            "name = \"n1\"\nchunk_cache_mb = 10\nsnapshot_gc_grace_s = 9\ncapacity = 3\n",
        );
        let args = serve(&["--config", &f, "--snapshot-gc-grace-s", "6"]);
        assert!(args.given.by_env.contains("chunk_cache_mb"));
        let s = args.settings().unwrap();
        std::env::remove_var("WARREN_CHUNK_CACHE_MB");
        std::env::remove_var("WARREN_SNAPSHOT_GC_GRACE_S");
        std::env::remove_var("WARREN_FIREWALL");
        assert_eq!(s.chunk_cache_mb, 77, "the variable over the file");
        assert_eq!(s.snapshot_gc_grace_s, 6, "the flag over the variable");
        assert_eq!(s.capacity, 3, "the file over the default");
        assert!(
            !s.firewall,
            "WARREN_FIREWALL=false turns it off, as --no-firewall does"
        );
    }

    #[test]
    fn a_file_with_an_unknown_key_a_wrong_type_or_no_name_is_refused_with_its_key() {
        let (_d1, f) = file_with("name = \"n1\"\nwarm_maximum = 3\n");
        let e = serve(&["--config", &f]).settings().unwrap_err().to_string();
        assert!(e.contains("warm_maximum"), "{e}");
        let (_d2, f) = file_with("name = \"n1\"\nwarm_max = \"many\"\n");
        let e = serve(&["--config", &f]).settings().unwrap_err().to_string();
        assert!(e.contains("warm_max"), "{e}");
        let (_d3, f) = file_with("warm_max = 3\n");
        let e = serve(&["--config", &f]).settings().unwrap_err().to_string();
        assert!(e.contains("`name` is missing"), "{e}");
        // And a flag's nonsense is still checked after the layers are joined.
        let (_d4, f) = file_with("name = \"n1\"\n");
        let e = serve(&["--config", &f, "--usage-sample-ms", "5"])
            .settings()
            .unwrap_err()
            .to_string();
        assert!(e.contains("usage_sample_ms"), "{e}");
    }
}
