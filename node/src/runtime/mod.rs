//! The container runtime boundary. One real implementation (Docker, in `docker`); the
//! sandbox manager only sees this trait.

pub mod data_root;
pub mod docker;
pub mod enter;
pub mod etc_files;
mod fd_dir;
pub mod fence_file;
pub mod firewall;
pub mod host_load;
pub mod host_work;
pub mod links;
pub mod oci_runtime;
pub mod root_mount;
pub mod subnets;
pub mod upper_copy;
pub mod upper_dir;
pub mod upper_usage;
pub mod userns_limits;
pub mod uts;

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::OwnedRwLockReadGuard;
use warren_api::sandbox::Resources;
use warren_api::{ApiError, ErrorCode};

/// Labels on everything warren creates in Docker.
pub const LABEL_MANAGED: &str = "warren.managed";
pub const LABEL_NODE: &str = "warren.node";
/// The `WARREN_RUN_ID` of the process that started the node, when it set one.
pub const LABEL_RUN: &str = "warren.run";
pub const LABEL_SANDBOX: &str = "warren.sandbox";
pub const LABEL_KIND: &str = "warren.kind";

/// Whether this process runs as root (needed to enter containers' namespaces, change its
/// root directory into a container's files, and write overlay whiteouts).
pub fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Holds back the removal `ContainerRuntime::remove_soon` started until it is dropped.
#[derive(Debug, Default)]
pub struct RemoveAfter {
    _held: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RemoveAfter {
    /// How long a removal waits for its guard at most (a guard kept by mistake must not
    /// keep a container forever).
    pub const LONGEST: std::time::Duration = std::time::Duration::from_secs(120);

    /// A guard and what the removal waits on: it ends when the guard is dropped.
    pub fn pair() -> (RemoveAfter, tokio::sync::oneshot::Receiver<()>) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        (RemoveAfter { _held: Some(tx) }, rx)
    }
}

/// Paths a snapshot or a fork never carries over: the guest's own mount and the kernel's.
pub const NEVER_SAVED: &[&str] = &["/.warren", "/proc", "/sys", "/dev"];

/// Where the guest binary and its run directory appear inside a container. The run
/// directory is a tmpfs of the container's own (`ContainerSpec::run_dir_mb`): nothing of it
/// is on the host's disk, and the node reaches the guest's socket there through the
/// container's root (`guest::connect`).
pub const GUEST_BIN_IN_CONTAINER: &str = "/.warren/bin/warren-guest";
pub const GUEST_RUN_IN_CONTAINER: &str = "/.warren/run";

/// The capabilities a sandbox's processes may have: what a development machine needs
/// (package managers, `sudo`, `chown`, ports below 1024), and none of Docker's defaults
/// that reach past the container (`MKNOD`: device nodes; `NET_RAW`: forged packets;
/// `SETFCAP`: file capabilities; `AUDIT_WRITE`, `SETPCAP`). Everything else is dropped.
pub const SANDBOX_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "NET_BIND_SERVICE",
    "SYS_CHROOT",
];

/// What to create for one sandbox.
#[derive(Debug, Clone)]
pub struct ContainerSpec {
    pub sandbox_id: String,
    pub image: String,
    pub resources: Resources,
    pub env: BTreeMap<String, String>,
    /// Host path of the guest binary (mounted read-only).
    pub guest_binary: PathBuf,
    /// Size of the guest's run directory (a tmpfs: its socket, session state, process
    /// logs), in MiB. Its pages count against the sandbox's memory limit.
    pub run_dir_mb: u64,
    /// The upper directory of a paused container of the same image (a fork's source) whose
    /// entries this container starts with, copied in before it first starts.
    pub seed: Option<SeedCopy>,
}

/// What one ready warm container holds, MiB, for the pool's memory budget: its guest and
/// the kernel's share for its namespaces and network, rounded up (docs/benchmarks.md has
/// the measurement).
pub const WARM_IDLE_MB: u64 = 8;

/// Containers started ahead of need: a create (or restore, wake, fork) whose container
/// fits takes one that already runs instead of waiting for the engine to start one.
#[derive(Debug, Clone)]
pub struct WarmPoolConfig {
    /// How many to keep ready: a floor, a ceiling and a memory budget (a ceiling at or
    /// below the floor: the pool holds the floor and does not follow demand; both 0: no
    /// pool).
    pub sizing: docker::WarmSizing,
    /// How long a burst of requests keeps the pool above its floor.
    pub horizon: std::time::Duration,
    /// No warm container starts while the host has less memory available, MiB (as
    /// `sandbox::admission::Capacity::memory_reserve_mb`).
    pub memory_reserve_mb: u64,
    /// The pool starts another container only when at least this fraction of the host's
    /// CPU time was idle just before (0: whatever the load).
    pub idle_reserve: f64,
    /// The images they are of, one pool each: the first is the node's default image, kept
    /// at least at the floor; the others (`warm_images`) are kept warm only as their own
    /// recent demand asks. Sandboxes of any other image start cold.
    pub images: Vec<String>,
    /// Their limits until taken (a taken one gets its sandbox's, except the disk size).
    pub resources: Resources,
    pub guest_binary: PathBuf,
    /// Their run directories' size (as `ContainerSpec::run_dir_mb`).
    pub run_dir_mb: u64,
    /// None is started while a guarantee of the sandbox boundary does not hold.
    pub safety: Arc<crate::safety::Safety>,
}

/// A fork's source files for one new container: the frozen source's overlay upper
/// directory, and a claim that keeps the source frozen until this copy is done.
#[derive(Debug, Clone)]
pub struct SeedCopy {
    pub upper: PathBuf,
    claim: Arc<std::sync::Mutex<Option<OwnedRwLockReadGuard<()>>>>,
}

impl SeedCopy {
    pub fn new(upper: PathBuf, claim: OwnedRwLockReadGuard<()>) -> Self {
        SeedCopy {
            upper,
            claim: Arc::new(std::sync::Mutex::new(Some(claim))),
        }
    }

    /// The copy is over (done or failed): the source need not stay frozen for it. Also
    /// released when the last clone of this is dropped.
    pub fn done(&self) {
        self.claim.lock().expect("seed claim lock").take();
    }
}

/// A container as the runtime sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerInfo {
    pub name: String,
    pub sandbox_id: String,
    pub running: bool,
    /// Main process pid on the host (0 when not running).
    pub pid: u32,
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    /// The secret its guest proves it holds (`warren_api::guest_auth`), as it was made with.
    pub guest_secret: Option<crate::guest::connect::GuestSecret>,
    /// Its address on its own network (what the egress proxy knows it by), when running.
    pub addr: Option<std::net::IpAddr>,
}

impl ContainerInfo {
    /// Who the node accepts as this container's guest, when it runs.
    pub fn guest_peer(&self) -> Option<crate::guest::connect::GuestPeer> {
        let secret = self.guest_secret.clone()?;
        (self.running && self.pid != 0).then(|| crate::guest::connect::GuestPeer {
            sandbox_id: self.sandbox_id.clone(),
            pid: self.pid,
            secret,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("image {image} is not available: {message}")]
    ImageMissing { image: String, message: String },
    #[error("docker: {0}")]
    Docker(String),
    #[error("no free sandbox network: {0}")]
    Network(String),
    #[error("{0}")]
    Other(String),
    /// What a [`RootFill`] failed with, kept as it is.
    #[error("{0}")]
    Fill(ApiError),
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        match &e {
            RuntimeError::ImageMissing { .. } => ApiError::invalid(e.to_string()),
            RuntimeError::Network(_) => ApiError::new(ErrorCode::CapacityExhausted, e.to_string()),
            RuntimeError::Fill(e) => e.clone(),
            _ => ApiError::new(ErrorCode::Unavailable, e.to_string()),
        }
    }
}

/// How a path differs from the container's image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Modified,
    Added,
    Deleted,
}

/// One changed path of a container's filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsChange {
    pub path: String,
    pub kind: ChangeKind,
}

/// Files written into a new container while the engine starts it (`create_filled`).
#[async_trait]
pub trait RootFill: Send + Sync {
    /// Writes them under `root`: an open directory of the container's root filesystem, as
    /// the engine mounted it on this host. The container's own process may already run.
    async fn fill(&self, root: std::fs::File) -> Result<(), ApiError>;
}

/// What the node needs from a container engine.
#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// Creates and starts the sandbox's container (and its network).
    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerInfo, RuntimeError>;
    /// Creates and starts the container like `create`, and runs `fill` on its root
    /// filesystem while the engine starts it, so that writing the files and starting the
    /// container overlap. Returns whether `fill` ran: not when this process cannot see the
    /// engine's mount, in which case the caller writes the files once the container runs.
    /// Returns only once `fill` is done; if it fails the container is removed again.
    async fn create_filled(
        &self,
        spec: &ContainerSpec,
        fill: &dyn RootFill,
    ) -> Result<(ContainerInfo, bool), RuntimeError>;
    /// Starts an existing, stopped container.
    async fn start(&self, sandbox_id: &str) -> Result<(), RuntimeError>;
    /// The sandbox's container, if it exists.
    async fn inspect(&self, sandbox_id: &str) -> Result<Option<ContainerInfo>, RuntimeError>;
    /// Removes the container and releases its network. Idempotent.
    async fn remove(&self, sandbox_id: &str) -> Result<(), RuntimeError>;
    /// Takes the container out of the way at once (a new one of the same sandbox may be
    /// created right after), freezes its processes, and removes it in the background once
    /// the returned guard is dropped: the removal (a kill, the engine's teardown, deleting
    /// the files) then does not compete for CPU with the start that replaces it.
    /// Idempotent.
    async fn remove_soon(&self, sandbox_id: &str) -> Result<RemoveAfter, RuntimeError>;
    /// Every container of this node.
    async fn list(&self) -> Result<Vec<ContainerInfo>, RuntimeError>;
    /// The last lines the container printed (for error messages).
    async fn logs_tail(&self, sandbox_id: &str, lines: usize) -> String;
    /// Changes the CPU limit of a running container (`cpus` in CPUs).
    async fn set_cpus(&self, sandbox_id: &str, cpus: f64) -> Result<(), RuntimeError>;
    /// Freezes every process of the container (nothing runs until `unpause`). A container
    /// that is paused already (behind the node's back, or by an earlier life of the node
    /// whose request landed late) counts as paused: the caller's hold then covers it, and its
    /// release thaws it.
    async fn pause(&self, sandbox_id: &str) -> Result<(), RuntimeError>;
    /// Thaws a container frozen by `pause`.
    async fn unpause(&self, sandbox_id: &str) -> Result<(), RuntimeError>;
    /// The sandboxes of this node whose containers the engine has paused now, by whoever.
    async fn paused(&self) -> Result<Vec<String>, RuntimeError>;
    /// The host path of the container's overlay upper directory, where the engine has one
    /// this node can read.
    async fn upper_dir(&self, sandbox_id: &str) -> Result<Option<PathBuf>, RuntimeError>;
    /// What the container writes on this host where the engine enforces no quota: its upper
    /// directory and the files bind-mounted writable into it (`/etc/hosts`, `/etc/hostname`,
    /// `/etc/resolv.conf`). None where it has no upper directory this node can read.
    async fn written_on_host(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<upper_usage::Written>, RuntimeError>;
    /// The paths the container added, modified or deleted relative to its image.
    async fn changes(&self, sandbox_id: &str) -> Result<Vec<FsChange>, RuntimeError>;
    /// Whether per-container disk limits are enforced by this engine.
    fn disk_limits(&self) -> bool;
    /// Kills every process of the running container but its first (the guest). The caller
    /// keeps the container paused meanwhile (a `PauseHold`), so that none can fork past the
    /// kill or hand its pid to another process. How many were killed.
    async fn kill_all_but_init(&self, sandbox_id: &str) -> Result<usize, RuntimeError>;
    /// How the engine maps sandbox ids to host ids: `Some` when every sandbox runs in a
    /// user namespace (its root is not the host's root), `None` when none does.
    fn id_shift(&self) -> Option<warren_api::snapshot::IdShift>;
}
