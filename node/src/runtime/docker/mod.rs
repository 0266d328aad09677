//! The Docker implementation of [`ContainerRuntime`] (bollard): one container per sandbox,
//! started with no network of Docker's and given its own link by the node (`links`), many
//! of them taken already started from the warm containers (`warm`). Containers made before
//! links kept their own bridge network (`networks`).

use super::data_root;
use super::etc_files::{EtcFiles, EtcPaths, LABEL_ETC};
use super::links::Links;
use super::subnets::Cidr;
use super::{
    ChangeKind, ContainerInfo, ContainerRuntime, ContainerSpec, FsChange, RemoveAfter, RootFill,
    RuntimeError, GUEST_BIN_IN_CONTAINER, GUEST_RUN_IN_CONTAINER, LABEL_KIND, LABEL_MANAGED,
    LABEL_NODE, LABEL_RUN, LABEL_SANDBOX, NEVER_SAVED, SANDBOX_CAPABILITIES,
};
use crate::guest::connect::GuestSecret;
use async_trait::async_trait;
use backon::Retryable;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummaryStateEnum, HostConfig,
    HostConfigLogConfig, Mount, MountType, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, RenameContainerOptionsBuilder,
};
use bollard::Docker;
use futures_util::StreamExt;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warren_api::guest_auth::SECRET_ENV;
use warren_api::snapshot::IdShift;
use warren_storage::BlockingPool;

mod freeze_race;
mod networks;
mod warm;
use super::oci_runtime::{self, OciRuntimeSetting};
pub use warm::demand::Sizing as WarmSizing;
use warm::{TakeFailed, WARM};

/// Marks the name of a replaced container that is being removed in the background (never
/// in a sandbox id, which has no underscores).
const SET_ASIDE: &str = "_replaced_";

/// Engine starts in flight at once (`DockerRuntime::engine_starts`).
const ENGINE_STARTS: usize = 8;

pub struct DockerRuntime {
    docker: Docker,
    node_id: String,
    /// `WARREN_RUN_ID`: one more label (`warren.run`) on everything this node makes, so that
    /// whoever started the node (a CI run, a test harness) can remove exactly that.
    run_id: Option<String>,
    /// Each running container's network.
    links: Links,
    /// Where the node keeps its containers' `/etc/hosts` and `/etc/resolv.conf`
    /// (`use_etc_dir`); until set, containers get Docker's (and Docker's network setup).
    etc: std::sync::OnceLock<EtcFiles>,
    disk_limits: AtomicBool,
    disk_probed: AtomicBool,
    warm: std::sync::Mutex<warm::WarmState>,
    warm_setup: std::sync::OnceLock<warm::WarmSetup>,
    /// Container starts by the engine (a new container, or a stopped one again) in flight at
    /// once: they are what a burst costs dockerd. Taking a warm container is not one.
    engine_starts: tokio::sync::Semaphore,
    /// Docker runs containers in user namespaces (`userns-remap`), with this mapping.
    id_shift: Option<IdShift>,
    /// Where fork copies and upper-directory walks run (`host_work`); the current
    /// runtime's blocking threads until the node sets it.
    host_work: std::sync::OnceLock<BlockingPool>,
    /// Docker's data root (where the overlay upper directories are).
    data_root: Option<PathBuf>,
    /// The node's egress proxy port, given to every container it makes (0: none yet).
    egress_port: std::sync::atomic::AtomicU16,
    /// The node's fence directory (`fence_file`), mounted read-only into every container it
    /// makes once set.
    fence_dir: std::sync::OnceLock<PathBuf>,
    /// The OCI runtimes the engine has, by name (`docker info`).
    engine_runtimes: Vec<String>,
    /// The OCI runtime new containers get (`use_oci_runtime`; `None`: the engine's default).
    oci_runtime: std::sync::OnceLock<Option<String>>,
}

/// A container as Docker describes it.
struct Found {
    /// The engine's id (it stays when the container is renamed).
    id: String,
    /// The token of its files in the node's `etc` directory, when it has some.
    etc: Option<String>,
    info: ContainerInfo,
    /// Its own Docker network, when it was made before links.
    network: Option<String>,
}

/// The network mode of containers with a link: none of Docker's.
const NO_NETWORK: &str = "none";

/// A CPU limit for Docker: never more than the machine has (Docker refuses that, and a
/// sandbox could not use more anyway), so every instance type works on small machines.
fn nano_cpus(cpus: f64) -> i64 {
    let machine = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    (cpus.min(machine) * 1e9) as i64
}

fn docker_err(e: BollardError) -> RuntimeError {
    RuntimeError::Docker(e.to_string())
}

fn status_of(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

impl DockerRuntime {
    /// Connects (negotiating the API version with older daemons) and removes this node's
    /// networks no container uses. Links take their addresses from `pool`.
    pub async fn connect(
        host: Option<&str>,
        node_id: &str,
        pool: Cidr,
    ) -> Result<Arc<Self>, RuntimeError> {
        let docker = match host {
            Some(h) => Docker::connect_with_host(h),
            None => Docker::connect_with_local_defaults(),
        }
        .map_err(docker_err)?;
        let docker = docker.negotiate_version().await.map_err(docker_err)?;
        docker.ping().await.map_err(docker_err)?;
        let info = docker.info().await.map_err(docker_err)?;
        let id_shift = id_shift_of(&info);
        match id_shift {
            Some(s) => tracing::info!(uid = s.uid, gid = s.gid, "sandboxes run in user namespaces"),
            None => tracing::warn!("Docker runs containers without user namespaces (no userns-remap): root in a sandbox would be root on this host"),
        }
        let rt = Arc::new(DockerRuntime {
            docker,
            node_id: node_id.to_string(),
            run_id: std::env::var("WARREN_RUN_ID")
                .ok()
                .filter(|v| !v.is_empty()),
            links: Links::new(node_id, pool),
            etc: Default::default(),
            disk_limits: AtomicBool::new(false),
            disk_probed: AtomicBool::new(false),
            egress_port: std::sync::atomic::AtomicU16::new(0),
            fence_dir: std::sync::OnceLock::new(),
            engine_runtimes: {
                let mut names: Vec<String> = info
                    .runtimes
                    .iter()
                    .flatten()
                    .map(|(n, _)| n.clone())
                    .collect();
                names.sort();
                names
            },
            oci_runtime: Default::default(),
            warm: Default::default(),
            warm_setup: Default::default(),
            engine_starts: tokio::sync::Semaphore::new(ENGINE_STARTS),
            id_shift,
            host_work: Default::default(),
            data_root: info.docker_root_dir.as_deref().map(PathBuf::from),
        });
        rt.remove_unused_networks().await?;
        rt.check_data_root().await;
        Ok(rt)
    }

    /// Fork copies and upper-directory walks run on `pool` from now on (the node's bounded
    /// host work); set once, at the node's start.
    pub fn use_host_work(&self, pool: BlockingPool) {
        let _ = self.host_work.set(pool);
    }

    /// Containers made from now on point their programs at the egress proxy on `port` of
    /// their network's gateway (`warren_api::egress::PROXY_PORT_ENV`, read by the guest).
    pub fn use_egress_port(&self, port: u16) {
        self.egress_port.store(port, Ordering::Relaxed);
    }

    /// Mounts `dir` read-only at `FENCE_DIR_IN_CONTAINER` in every container made from now
    /// on: the guests stop their sandboxes' processes when the node stops renewing the fence
    /// file there (`fence_file`).
    pub fn use_fence_dir(&self, dir: &Path) {
        let _ = self.fence_dir.set(dir.to_path_buf());
    }

    /// Containers made from now on get their `/etc/hosts` and `/etc/resolv.conf` from the
    /// node, in `dir` (`etc_files`), and no network setup of Docker's at all; the files of
    /// containers that are gone are removed now.
    pub async fn use_etc_dir(&self, dir: &Path) -> Result<(), RuntimeError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| RuntimeError::Other(format!("cannot create {}: {e}", dir.display())))?;
        let etc = EtcFiles::new(dir.to_path_buf());
        let keep: std::collections::HashSet<String> = self
            .list_summaries()
            .await?
            .into_iter()
            .filter_map(|c| c.labels?.remove(LABEL_ETC))
            .collect();
        let swept = etc.sweep(&keep);
        if swept > 0 {
            tracing::info!(swept, "removed the /etc files of containers that are gone");
        }
        let _ = self.etc.set(etc);
        Ok(())
    }

    /// Chooses the OCI runtime of the containers made from now on (`oci_runtime`) among the
    /// engine's runtimes; an error when the setting names one the engine does not have.
    pub fn use_oci_runtime(&self, setting: &OciRuntimeSetting) -> Result<(), RuntimeError> {
        let runtime =
            oci_runtime::choose(setting, &self.engine_runtimes).map_err(RuntimeError::Other)?;
        tracing::info!(
            runtime = runtime.as_deref().unwrap_or("the engine's default"),
            "sandbox containers' OCI runtime"
        );
        let _ = self.oci_runtime.set(runtime);
        Ok(())
    }

    /// The OCI runtime new containers get (`None`: the engine's default).
    pub fn oci_runtime(&self) -> Option<String> {
        self.oci_runtime.get().cloned().flatten()
    }

    fn host_pool(&self) -> BlockingPool {
        self.host_work.get().cloned().unwrap_or_default()
    }

    /// Docker's data root on this host, where the containers' files are.
    pub fn data_root(&self) -> Option<&Path> {
        self.data_root.as_deref()
    }

    /// Warns about a data root on a filesystem that makes sandboxes slow (`data_root`).
    async fn check_data_root(&self) {
        let Some(path) = self.data_root.clone() else {
            return;
        };
        let root = path.display().to_string();
        match tokio::task::spawn_blocking(move || data_root::inspect(&path)).await {
            Ok(Ok(fs)) => match fs.warning() {
                Some(w) => tracing::warn!(data_root = %root, "{w}"),
                None => tracing::debug!(data_root = %root, ?fs, "the engine's data root"),
            },
            // Not visible from here: the engine runs elsewhere.
            Ok(Err(e)) => {
                tracing::debug!(data_root = %root, error = %e, "cannot inspect the engine's data root")
            }
            Err(e) => tracing::debug!(error = %e, "the data root check did not finish"),
        }
    }

    /// Whether the daemon answers.
    pub async fn ping(&self) -> bool {
        self.docker.ping().await.is_ok()
    }

    pub async fn image_exists(&self, image: &str) -> bool {
        self.docker.inspect_image(image).await.is_ok()
    }

    fn container_name(&self, sandbox_id: &str) -> String {
        format!("wrn-{}-{}", self.node_id, sandbox_id)
    }

    /// The sandbox a container of this node belongs to, from its name (a warm container
    /// taken by a sandbox keeps the label it was created with).
    fn sandbox_of(&self, name: &str) -> String {
        name.trim_start_matches('/')
            .strip_prefix(&format!("wrn-{}-", self.node_id))
            .unwrap_or_default()
            .to_string()
    }

    fn labels(&self, kind: &str) -> HashMap<String, String> {
        let mut labels = HashMap::from([
            (LABEL_MANAGED.to_string(), "true".to_string()),
            (LABEL_NODE.to_string(), self.node_id.clone()),
            (LABEL_KIND.to_string(), kind.to_string()),
        ]);
        if let Some(run) = &self.run_id {
            labels.insert(LABEL_RUN.to_string(), run.clone());
        }
        labels
    }

    fn node_filter(&self, kind: &str) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_NODE}={}", self.node_id),
                format!("{LABEL_KIND}={kind}"),
            ],
        )])
    }

    async fn list_summaries(&self) -> Result<Vec<bollard::models::ContainerSummary>, RuntimeError> {
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&self.node_filter("sandbox"))
            .build();
        self.docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err)
    }

    /// What Docker is asked to make for `spec`: the guest binary mounted read-only as the
    /// entry point, the node's fence directory read-only, its run directory a bounded
    /// tmpfs, the limits, and the boundary
    /// (capabilities cut to `SANDBOX_CAPABILITIES`, no new privileges, Docker's default
    /// seccomp profile and masked `/proc` and `/sys`, no IPv6).
    fn container_body(
        &self,
        spec: &ContainerSpec,
        disk: bool,
        secret: &GuestSecret,
        etc: Option<&EtcPaths>,
    ) -> ContainerCreateBody {
        let mut labels = self.labels("sandbox");
        labels.insert(LABEL_SANDBOX.into(), spec.sandbox_id.clone());
        if let Some(etc) = etc {
            labels.insert(LABEL_ETC.into(), etc.token.clone());
        }
        let mem = (spec.resources.memory_mb * 1024 * 1024) as i64;
        // Mounts, not binds: Docker makes a missing bind source as an empty directory (in
        // the node's data dir, behind its back: a guest binary that is a directory, a fence
        // that says nothing), and refuses a missing mount source instead.
        let read_only = |source: &Path, target: &str| Mount {
            target: Some(target.into()),
            source: Some(source.display().to_string()),
            typ: Some(MountType::BIND),
            read_only: Some(true),
            ..Default::default()
        };
        let mut mounts = vec![read_only(&spec.guest_binary, GUEST_BIN_IN_CONTAINER)];
        if let Some(dir) = self.fence_dir.get() {
            mounts.push(read_only(dir, warren_api::fence::FENCE_DIR_IN_CONTAINER));
        }
        if let Some(etc) = etc {
            // Writable, as Docker's own are.
            for (source, target) in [
                (&etc.hosts, "/etc/hosts"),
                (&etc.resolv, "/etc/resolv.conf"),
            ] {
                mounts.push(Mount {
                    read_only: Some(false),
                    ..read_only(source, target)
                });
            }
        }
        let host = HostConfig {
            mounts: Some(mounts),
            tmpfs: Some(HashMap::from([(
                GUEST_RUN_IN_CONTAINER.to_string(),
                format!(
                    "rw,nosuid,nodev,noexec,mode=0755,size={}m",
                    spec.run_dir_mb.max(1)
                ),
            )])),
            nano_cpus: Some(nano_cpus(spec.resources.cpus)),
            memory: Some(mem),
            memory_swap: Some(mem),
            pids_limit: Some(spec.resources.pids as i64),
            network_mode: Some(NO_NETWORK.to_string()),
            // Its host name resolves (`sudo` and many servers look it up), as on Debian:
            // Docker writes no entry for it without a network of its own. (With the node's
            // files, their `hosts` has it.)
            extra_hosts: etc
                .is_none()
                .then(|| vec![format!("{}:127.0.1.1", spec.sandbox_id)]),
            cap_drop: Some(vec!["ALL".into()]),
            cap_add: Some(SANDBOX_CAPABILITIES.iter().map(|c| c.to_string()).collect()),
            security_opt: Some(vec!["no-new-privileges".into()]),
            sysctls: Some(HashMap::from([
                (
                    "net.ipv6.conf.all.disable_ipv6".to_string(),
                    "1".to_string(),
                ),
                (
                    "net.ipv6.conf.default.disable_ipv6".to_string(),
                    "1".to_string(),
                ),
            ])),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::NO),
                maximum_retry_count: None,
            }),
            log_config: Some(HostConfigLogConfig {
                typ: Some("json-file".into()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), "10m".to_string()),
                    ("max-file".to_string(), "2".to_string()),
                ])),
            }),
            storage_opt: disk.then(|| {
                HashMap::from([("size".to_string(), format!("{}M", spec.resources.disk_mb))])
            }),
            init: Some(false),
            runtime: self.oci_runtime(),
            ..Default::default()
        };
        ContainerCreateBody {
            image: Some(spec.image.clone()),
            hostname: Some(spec.sandbox_id.clone()),
            entrypoint: Some(vec![GUEST_BIN_IN_CONTAINER.into()]),
            cmd: Some(vec![]),
            env: Some(
                spec.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .chain([format!("{SECRET_ENV}={}", secret.expose())])
                    .chain(
                        Some(self.egress_port.load(Ordering::Relaxed))
                            .filter(|p| *p != 0)
                            .map(|p| format!("{}={p}", warren_api::egress::PROXY_PORT_ENV)),
                    )
                    .collect(),
            ),
            working_dir: Some(warren_api::exec::DEFAULT_CWD.into()),
            // With the node's own files, none of Docker's network setup at all (its
            // network sandbox and the hook that joins it): half of a start's time here.
            network_disabled: etc.is_some().then_some(true),
            labels: Some(labels),
            stop_signal: Some("SIGTERM".into()),
            stop_timeout: Some(5),
            host_config: Some(host),
            ..Default::default()
        }
    }

    async fn create_container(&self, spec: &ContainerSpec, name: &str) -> Result<(), RuntimeError> {
        let etc = match self.etc.get() {
            Some(files) => Some(
                files
                    .make(&spec.sandbox_id, self.id_shift.map(|s| (s.uid, s.gid)))
                    .map_err(|e| {
                        RuntimeError::Other(format!("cannot write the container's /etc files: {e}"))
                    })?,
            ),
            None => None,
        };
        let made = self.create_container_with(spec, name, etc.as_ref()).await;
        if let (Err(_), Some(etc), Some(files)) = (&made, &etc, self.etc.get()) {
            files.remove(&etc.token);
        }
        made
    }

    async fn create_container_with(
        &self,
        spec: &ContainerSpec,
        name: &str,
        etc: Option<&EtcPaths>,
    ) -> Result<(), RuntimeError> {
        let mut pulled = false;
        let mut replaced = false;
        let secret = GuestSecret::random();
        loop {
            let disk = !self.disk_probed.load(Ordering::Relaxed)
                || self.disk_limits.load(Ordering::Relaxed);
            let opts = CreateContainerOptionsBuilder::default().name(name).build();
            match self
                .docker
                .create_container(Some(opts), self.container_body(spec, disk, &secret, etc))
                .await
            {
                Ok(_) => {
                    if disk && !self.disk_probed.swap(true, Ordering::Relaxed) {
                        self.disk_limits.store(true, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                Err(e) if disk && e.to_string().to_lowercase().contains("storage") => {
                    // overlay2 enforces sizes only on xfs with pquota: run without, say so once.
                    tracing::warn!(error = %e, "disk limits are not enforced by this Docker storage driver");
                    self.disk_probed.store(true, Ordering::Relaxed);
                    self.disk_limits.store(false, Ordering::Relaxed);
                }
                Err(e) if status_of(&e) == Some(404) && !pulled => {
                    pulled = true;
                    self.pull(&spec.image).await?;
                }
                Err(e) if status_of(&e) == Some(409) && !replaced => {
                    // A leftover of an attempt that died half-way: replace it.
                    replaced = true;
                    self.force_remove(name).await?;
                }
                Err(e) => return Err(docker_err(e)),
            }
        }
    }

    async fn pull(&self, image: &str) -> Result<(), RuntimeError> {
        let opts = CreateImageOptionsBuilder::default()
            .from_image(image)
            .build();
        let mut stream = self.docker.create_image(Some(opts), None, None);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                return Err(RuntimeError::ImageMissing {
                    image: image.to_string(),
                    message: e.to_string(),
                });
            }
        }
        Ok(())
    }

    async fn force_remove(&self, name: &str) -> Result<(), RuntimeError> {
        let opts = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(true)
            .build();
        match self.docker.remove_container(name, Some(opts)).await {
            Ok(()) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Whether the engine has container `name` paused (false when it cannot tell).
    async fn is_paused(&self, name: &str) -> bool {
        self.docker
            .inspect_container(name, None)
            .await
            .ok()
            .and_then(|c| c.state)
            .and_then(|s| s.paused)
            .unwrap_or(false)
    }

    async fn inspect_name(&self, name: &str) -> Result<Option<Found>, RuntimeError> {
        match self.inspect_if_any(name).await? {
            Some(c) => Ok(Some(self.found_of(name, c).await)),
            None => Ok(None),
        }
    }

    /// The engine's description of container `name`; none if there is no such container.
    async fn inspect_if_any(
        &self,
        name: &str,
    ) -> Result<Option<ContainerInspectResponse>, RuntimeError> {
        match self.docker.inspect_container(name, None).await {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// What container `name` is, from its inspect response `c`.
    async fn found_of(&self, name: &str, c: ContainerInspectResponse) -> Found {
        let etc = etc_token_of(&c).map(str::to_string);
        let state = c.state.unwrap_or_default();
        let host = c.host_config.unwrap_or_default();
        let id = c.id.clone().unwrap_or_default();
        let running = state.running.unwrap_or(false);
        let pid = state.pid.unwrap_or(0).max(0) as u32;
        let linked = host.network_mode.as_deref() == Some(NO_NETWORK);
        let addr = match (linked, running && pid != 0) {
            (true, true) => self.links.addr_of(&id, pid).await.map(Into::into),
            (true, false) => None,
            (false, _) => c
                .network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .and_then(|nets| {
                    nets.values()
                        .filter_map(|e| e.ip_address.as_deref())
                        .find_map(|ip| ip.parse().ok())
                }),
        };
        let info = ContainerInfo {
            name: name.to_string(),
            sandbox_id: self.sandbox_of(name),
            running,
            pid,
            exit_code: state.exit_code,
            oom_killed: state.oom_killed.unwrap_or(false),
            guest_secret: guest_secret_of(c.config.as_ref()),
            addr,
        };
        Found {
            id,
            etc,
            info,
            network: host.network_mode.filter(|m| m != NO_NETWORK),
        }
    }

    /// Removes a container by name and gives its network back. Idempotent; whether there
    /// was such a container.
    async fn remove_named(&self, name: &str) -> Result<bool, RuntimeError> {
        let found = self.inspect_name(name).await?;
        self.force_remove(name).await?;
        if let Some(found) = &found {
            self.release_after_removal(found).await;
        }
        Ok(found.is_some())
    }

    /// What a removed container leaves: its own network, when it was made before links
    /// (its link went with it otherwise).
    async fn release_after_removal(&self, found: &Found) {
        self.links.forget(&found.id);
        if let (Some(files), Some(token)) = (self.etc.get(), &found.etc) {
            files.remove(token);
        }
        if let Some(n) = found.network.as_ref().filter(|n| n.starts_with("wrn-")) {
            self.remove_network(n).await;
        }
    }

    /// The overlay2 upper directory of a container, if the engine uses overlay2 and the
    /// directory is on this machine.
    async fn upper_of(&self, name: &str) -> Result<Option<PathBuf>, RuntimeError> {
        Ok(self.inspect_if_any(name).await?.as_ref().and_then(upper_in))
    }

    /// One of a container's overlay2 directories (`UpperDir`, `MergedDir`), if the engine
    /// uses overlay2 and the layer's directory is on this machine (`MergedDir` itself is
    /// only made when the engine first mounts it).
    async fn overlay_dir(&self, name: &str, which: &str) -> Result<Option<PathBuf>, RuntimeError> {
        Ok(self
            .inspect_if_any(name)
            .await?
            .and_then(|c| overlay_path(&c, which))
            .filter(|p| p.parent().is_some_and(Path::is_dir)))
    }

    /// Starts a created container and, once the engine has mounted its root filesystem
    /// where this process sees it, runs `fill` there while the start goes on. The started
    /// container (see `start_named`) and whether `fill` ran; its error, or the start's,
    /// otherwise.
    async fn start_filling(
        &self,
        name: &str,
        fill: &dyn RootFill,
    ) -> Result<(ContainerInspectResponse, bool), RuntimeError> {
        let Some(merged) = self.overlay_dir(name, "MergedDir").await? else {
            return Ok((self.start_named(name).await?, false));
        };
        let started = AtomicBool::new(false);
        let t = std::time::Instant::now();
        let start = async {
            let r = self.start_named(name).await;
            started.store(true, Ordering::SeqCst);
            tracing::debug!(container = %name, ms = t.elapsed().as_millis() as u64, "container started");
            r
        };
        let filling = async {
            let Some(root) = super::root_mount::wait_mounted(&merged, &started).await else {
                tracing::debug!(container = %name, "the container's root was not seen mounted; files go in after the start");
                return Ok(false);
            };
            let mounted = t.elapsed().as_millis() as u64;
            fill.fill(root).await.map_err(RuntimeError::Fill)?;
            tracing::debug!(container = %name, mounted_ms = mounted, filled_ms = t.elapsed().as_millis() as u64,
                "files written while the container started");
            Ok(true)
        };
        let (start, filled) = tokio::join!(start, filling);
        Ok((start?, filled?))
    }

    /// The host files bind-mounted writable into container `c`: its `/etc/hostname` (the
    /// engine's), `/etc/hosts` and `/etc/resolv.conf` (the node's when it keeps the
    /// container's, else the engine's).
    fn mounted_files(&self, c: &ContainerInspectResponse) -> Vec<PathBuf> {
        let (hosts, resolv) = match self.node_etc_paths(c) {
            Some(p) => (Some(p.hosts), Some(p.resolv)),
            None => (
                c.hosts_path.as_ref().map(PathBuf::from),
                c.resolv_conf_path.as_ref().map(PathBuf::from),
            ),
        };
        [c.hostname_path.as_ref().map(PathBuf::from), hosts, resolv]
            .into_iter()
            .flatten()
            .filter(|p| !p.as_os_str().is_empty())
            .collect()
    }

    /// Where container `c`'s `/etc/hosts` is on this host: the node's file when it keeps
    /// the container's, else Docker's.
    fn hosts_file(&self, c: &ContainerInspectResponse) -> Option<PathBuf> {
        match self.node_etc_paths(c) {
            Some(p) => Some(p.hosts),
            None => c.hosts_path.as_ref().map(PathBuf::from),
        }
    }

    /// Container `c`'s files in the node's `etc` directory, when the node keeps them.
    fn node_etc_paths(&self, c: &ContainerInspectResponse) -> Option<EtcPaths> {
        self.etc.get()?.paths(etc_token_of(c)?).ok()
    }

    /// Starts a created (or stopped) container and gives it its link. The container as the
    /// engine describes it once started (one inspect, which callers use instead of their own).
    async fn start_named(&self, name: &str) -> Result<ContainerInspectResponse, RuntimeError> {
        self.docker
            .start_container(name, None)
            .await
            .map_err(docker_err)?;
        self.link_started(name).await
    }

    /// Gives the running container `name` its link, unless it has one, or its own Docker
    /// network (made before links). The container as the engine describes it (running).
    async fn link_started(&self, name: &str) -> Result<ContainerInspectResponse, RuntimeError> {
        let c = self
            .docker
            .inspect_container(name, None)
            .await
            .map_err(docker_err)?;
        let linked = c
            .host_config
            .as_ref()
            .and_then(|h| h.network_mode.as_deref())
            == Some(NO_NETWORK);
        let pid = c.state.as_ref().and_then(|s| s.pid).unwrap_or(0).max(0) as u32;
        if !linked {
            return Ok(c);
        }
        if pid == 0 {
            return Err(RuntimeError::Other(format!(
                "container {name} stopped right after its start: {}",
                self.logs_of(name, 20).await.trim()
            )));
        }
        self.link(c.id.as_deref().unwrap_or(name), pid, etc_token_of(&c))
            .await?;
        Ok(c)
    }

    /// What a container that just started is, from `start_named`'s inspect.
    async fn started_info(&self, name: &str, c: ContainerInspectResponse) -> ContainerInfo {
        self.found_of(name, c).await.info
    }

    /// Makes the link of a running container (main process `pid`), and names its host end
    /// as the name server in the container's files (`etc`, when the node keeps them). The
    /// sandbox end's address.
    async fn link(
        &self,
        id: &str,
        pid: u32,
        etc: Option<&str>,
    ) -> Result<std::net::Ipv4Addr, RuntimeError> {
        let link = self.links.attach(id, pid).await?;
        if let (Some(files), Some(token)) = (self.etc.get(), etc) {
            files.set_nameserver(token, link.host_addr()).map_err(|e| {
                RuntimeError::Other(format!("cannot write the container's resolv.conf: {e}"))
            })?;
        }
        Ok(link.sandbox_addr())
    }

    /// Creates, fills (see `start_filling`) and starts a container; nothing of it is left
    /// when any step fails.
    async fn create_and_start(
        self: &Arc<Self>,
        spec: &ContainerSpec,
        fill: Option<&dyn RootFill>,
    ) -> Result<(ContainerInfo, bool), RuntimeError> {
        let _busy = warm::Busy::new(self);
        if let Some(w) = self.take_warm(spec) {
            match self.take_over(w, spec, fill).await {
                Ok(done) => {
                    self.count_take("taken");
                    return Ok(done);
                }
                Err(TakeFailed::After(e)) => {
                    self.count_take("taken");
                    return Err(e);
                }
                Err(TakeFailed::Before(e)) => {
                    tracing::warn!(sandbox_id = %spec.sandbox_id, error = %e, "could not take a warm container; starting one");
                    self.count_take("failed");
                }
            }
        }
        let _start = self
            .engine_starts
            .acquire()
            .await
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        let name = self.container_name(&spec.sandbox_id);
        let created = async {
            self.create_container(spec, &name).await?;
            if let Some(seed) = &spec.seed {
                let copied = self.copy_seed(&name, &seed.upper).await;
                seed.done();
                copied?;
            }
            let (started, filled) = match fill {
                Some(fill) => self.start_filling(&name, fill).await?,
                None => (self.start_named(&name).await?, false),
            };
            let info = self.started_info(&name, started).await;
            self.limit_userns(&name, info.pid).await?;
            Ok((info, filled))
        }
        .await;
        if created.is_err() {
            // Leave nothing behind: no half-created container (its link goes with it).
            let _ = self.remove_named(&name).await;
        }
        created
    }

    /// Copies a paused source container's upper directory into the new, not yet started
    /// container `name` (see `upper_copy`).
    async fn copy_seed(&self, name: &str, seed: &Path) -> Result<(), RuntimeError> {
        let upper = self.upper_of(name).await?.ok_or_else(|| {
            RuntimeError::Other(format!(
                "container {name} has no overlay2 upper directory to seed"
            ))
        })?;
        copy_fork_files(&self.host_pool(), name, seed, &upper, false).await
    }

    /// Gives a container that just started its user namespace's own budgets
    /// (`userns_limits`), before any of a sandbox's code runs there. A container whose
    /// budget cannot be set is not used: it could take the host's.
    async fn limit_userns(&self, name: &str, pid: u32) -> Result<(), RuntimeError> {
        if self.id_shift.is_none() {
            return Ok(());
        }
        tokio::task::spawn_blocking(move || {
            super::userns_limits::apply(pid, &super::userns_limits::SANDBOX_LIMITS)
        })
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?
        .map_err(|e| {
            RuntimeError::Other(format!(
                "cannot limit container {name}'s user namespace: {e}"
            ))
        })
    }

    /// The container `name` as it is now (an error if it is gone).
    async fn current_info(&self, name: &str) -> Result<ContainerInfo, RuntimeError> {
        self.inspect_name(name)
            .await?
            .map(|f| f.info)
            .ok_or_else(|| RuntimeError::Other("container vanished after start".into()))
    }

    /// The last `lines` lines container `name` printed.
    async fn logs_of(&self, name: &str, lines: usize) -> String {
        let opts = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail(&lines.to_string())
            .build();
        let mut stream = self.docker.logs(name, Some(opts));
        let mut out = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            out.push_str(&chunk.to_string());
            if out.len() > 8192 {
                break;
            }
        }
        out
    }

    /// Removes every container and network of this node (tests and `warren` uninstall).
    pub async fn remove_everything(&self) -> Result<(), RuntimeError> {
        // A create the stopped node had sent may still be finishing in Docker, and one
        // container that cannot be removed yet must not leave the others: a few passes,
        // each over everything, until one finds nothing left.
        let mut last: Result<usize, RuntimeError> = Ok(0);
        for pass in 0..5 {
            if pass > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            }
            last = self.remove_everything_once().await;
            if matches!(last, Ok(0)) {
                break;
            }
        }
        last.map(|_| ())
    }

    /// One pass of `remove_everything`: how many containers and networks it found.
    async fn remove_everything_once(&self) -> Result<usize, RuntimeError> {
        let ids: Vec<String> = self
            .list_summaries()
            .await?
            .into_iter()
            .filter_map(|c| c.id)
            .collect();
        let mut found = ids.len();
        // A few at once: one at a time, the 2,000 containers a failover benchmark leaves
        // took longer to remove than the benchmark took to run.
        let failed = futures_util::stream::iter(ids)
            .map(|id| async move { self.force_remove(&id).await })
            .buffer_unordered(REMOVE_AT_ONCE)
            .filter_map(|r| async move { r.err() })
            .collect::<Vec<_>>()
            .await
            .pop();
        for n in self.node_networks().await? {
            found += 1;
            let _ = self.docker.remove_network(&n).await;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(found),
        }
    }
}

/// The user namespace mapping of an engine that remaps (`userns-remap`): it says so in
/// its security options, and its data root is `<root>/<uid>.<gid>` of the remapped root.
/// Docker gives each remapped user a range of 65536 ids.
fn id_shift_of(info: &bollard::models::SystemInfo) -> Option<IdShift> {
    let remaps = info
        .security_options
        .iter()
        .flatten()
        .any(|o| o.split(',').any(|kv| kv == "name=userns"));
    if !remaps {
        return None;
    }
    let root = PathBuf::from(info.docker_root_dir.as_deref()?);
    let (uid, gid) = root.file_name()?.to_str()?.split_once('.')?;
    Some(IdShift {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        len: 65536,
    })
}

/// The token of the container's files in the node's `etc` directory (its `warren.etc`
/// label), when it has some.
fn etc_token_of(c: &ContainerInspectResponse) -> Option<&str> {
    c.config
        .as_ref()?
        .labels
        .as_ref()?
        .get(LABEL_ETC)
        .map(String::as_str)
}

/// The guest secret a container was made with (from its environment in the engine's
/// description of it, which only the host sees).
fn guest_secret_of(config: Option<&bollard::models::ContainerConfig>) -> Option<GuestSecret> {
    let prefix = format!("{SECRET_ENV}=");
    config?
        .env
        .as_ref()?
        .iter()
        .find_map(|e| e.strip_prefix(&prefix))
        .map(GuestSecret::from_env_value)
}

/// The overlay2 upper directory an inspect reports, if the engine uses overlay2 and the
/// directory is on this machine.
fn upper_in(c: &ContainerInspectResponse) -> Option<PathBuf> {
    overlay_path(c, "UpperDir").filter(|p| p.is_dir())
}

/// One of the overlay2 directories (`UpperDir`, `MergedDir`) an inspect reports, if the
/// engine uses overlay2.
fn overlay_path(c: &ContainerInspectResponse, which: &str) -> Option<PathBuf> {
    c.graph_driver
        .as_ref()
        .filter(|g| g.name == "overlay2")
        .and_then(|g| g.data.get(which).map(PathBuf::from))
}

/// A fork's files: the frozen source's upper directory `seed` copied entry for entry into
/// `to`, either the upper directory of a container that has not started, or (`mounted`) the
/// mounted root of a running one (`upper_copy::copy_onto_mounted`, file bytes read through
/// the source's own mount when it is visible, so that the kernel can share blocks).
async fn copy_fork_files(
    pool: &BlockingPool,
    name: &str,
    seed: &Path,
    to: &Path,
    mounted: bool,
) -> Result<(), RuntimeError> {
    let (from, to) = (seed.to_path_buf(), to.to_path_buf());
    // overlay2 mounts a layer's upper directory `diff` at `merged` beside it.
    let source_root = seed.with_file_name("merged");
    let from_mounted = (mounted
        && matches!(
            super::root_mount::open_if_mounted(&source_root),
            Ok(Some(_))
        ))
    .then_some(source_root);
    let t = std::time::Instant::now();
    let copied = pool
        .run(move || {
            let skip: Vec<&str> = NEVER_SAVED
                .iter()
                .map(|p| p.trim_start_matches('/'))
                .collect();
            if mounted {
                super::upper_copy::copy_onto_mounted(&from, from_mounted.as_deref(), &to, &skip)
            } else {
                super::upper_copy::copy(&from, &to, &skip)
            }
        })
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?
        .map_err(|e| RuntimeError::Other(format!("cannot copy the fork's files: {e}")))?;
    tracing::info!(container = %name, entries = copied.entries, bytes = copied.bytes, mounted,
        ms = t.elapsed().as_millis() as u64, "fork: files copied from the source");
    Ok(())
}

/// Whether a Docker daemon answers at `host` (or the local default).
pub async fn daemon_answers(host: Option<&str>) -> bool {
    let docker = match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_local_defaults(),
    };
    let Ok(docker) = docker else { return false };
    match docker.negotiate_version().await {
        Ok(d) => d.ping().await.is_ok(),
        Err(_) => false,
    }
}

/// Whether `image` exists locally.
pub async fn image_present(host: Option<&str>, image: &str) -> Result<bool, RuntimeError> {
    let docker = match host {
        Some(h) => Docker::connect_with_host(h),
        None => Docker::connect_with_local_defaults(),
    }
    .map_err(docker_err)?;
    let docker = docker.negotiate_version().await.map_err(docker_err)?;
    Ok(docker.inspect_image(image).await.is_ok())
}

/// Containers `remove_everything` removes at once.
const REMOVE_AT_ONCE: usize = 8;

/// Removes every container and network of node `node_id` on the local Docker daemon, and
/// its redirects to its egress proxy, from any context (test and benchmark teardown,
/// `Drop`): it runs on its own thread and runtime.
pub fn remove_node_resources_blocking(node_id: &str) {
    crate::runtime::firewall::remove_egress_chain(std::path::Path::new("iptables"), node_id);
    let node_id = node_id.to_string();
    let done = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let pool = Cidr {
                base: 0,
                prefix: 32,
            };
            match DockerRuntime::connect(None, &node_id, pool).await {
                Ok(rt) => rt.remove_everything().await,
                Err(e) => Err(e),
            }
        })
    })
    .join();
    if let Ok(Err(e)) = done {
        tracing::warn!(error = %e, "cleanup of a node's Docker resources failed");
    }
}

#[async_trait]
impl ContainerRuntime for Arc<DockerRuntime> {
    async fn create(&self, spec: &ContainerSpec) -> Result<ContainerInfo, RuntimeError> {
        self.create_and_start(spec, None)
            .await
            .map(|(info, _)| info)
    }

    async fn create_filled(
        &self,
        spec: &ContainerSpec,
        fill: &dyn RootFill,
    ) -> Result<(ContainerInfo, bool), RuntimeError> {
        self.create_and_start(spec, Some(fill)).await
    }

    async fn start(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        let name = self.container_name(sandbox_id);
        let _start = self
            .engine_starts
            .acquire()
            .await
            .map_err(|e| RuntimeError::Other(e.to_string()))?;
        match self.docker.start_container(&name, None).await {
            Ok(()) => {}
            Err(e) if status_of(&e) == Some(304) => {} // already running
            Err(e) => return Err(docker_err(e)),
        }
        let started = self.link_started(&name).await?;
        // A taken warm container starts with the host name it was made with.
        self.rename_host_after_start(&started, sandbox_id).await?;
        let info = self.started_info(&name, started).await;
        self.limit_userns(&name, info.pid).await
    }

    async fn inspect(&self, sandbox_id: &str) -> Result<Option<ContainerInfo>, RuntimeError> {
        Ok(self
            .inspect_name(&self.container_name(sandbox_id))
            .await?
            .map(|f| f.info))
    }

    async fn remove(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        self.remove_named(&self.container_name(sandbox_id))
            .await
            .map(|_| ())
    }

    async fn remove_soon(&self, sandbox_id: &str) -> Result<RemoveAfter, RuntimeError> {
        let name = self.container_name(sandbox_id);
        let Some(found) = self.inspect_name(&name).await? else {
            return Ok(RemoveAfter::default());
        };
        let aside = format!(
            "{name}{SET_ASIDE}{}",
            hex::encode(rand::random::<[u8; 4]>())
        );
        let renamed = self
            .docker
            .rename_container(
                &name,
                RenameContainerOptionsBuilder::default()
                    .name(&aside)
                    .build(),
            )
            .await;
        if let Err(e) = renamed {
            if status_of(&e) == Some(404) {
                return Ok(RemoveAfter::default());
            }
            self.remove(sandbox_id).await?;
            return Ok(RemoveAfter::default());
        }
        let (guard, released) = RemoveAfter::pair();
        let me = self.clone();
        tokio::spawn(async move {
            // Its processes stop now (a paused container is removed as any other; one
            // that is not running just stays as it is).
            if let Err(e) = me.docker.pause_container(&aside).await {
                tracing::debug!(container = %aside, error = %e, "a replaced container was not paused");
            }
            let _ = tokio::time::timeout(RemoveAfter::LONGEST, released).await;
            if let Err(e) = me.force_remove(&aside).await {
                tracing::warn!(container = %aside, error = %e, "could not remove a replaced container");
            }
            me.release_after_removal(&found).await;
        });
        Ok(guard)
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let mut out = Vec::new();
        for c in self.list_summaries().await? {
            let Some(name) = c.names.and_then(|n| n.into_iter().next()) else {
                continue;
            };
            let name = name.trim_start_matches('/').to_string();
            if name.contains(WARM) {
                // Not a sandbox's (yet): the warm pool's own.
                continue;
            }
            if name.contains(SET_ASIDE) {
                // Replaced, and its removal did not finish (the node stopped): finish it.
                // Docker may still be at it (409), which must not keep the node from
                // starting; what it cannot remove now, the next start tries again.
                if let Err(e) = self.remove_named(&name).await {
                    tracing::warn!(container = %name, error = %e, "cannot remove a replaced container yet");
                }
                continue;
            }
            if c.state == Some(ContainerSummaryStateEnum::PAUSED) {
                // Frozen for a fork when the node stopped: the fork is gone, thaw it.
                self.docker
                    .unpause_container(&name)
                    .await
                    .map_err(docker_err)?;
            }
            if let Some(mut found) = self.inspect_name(&name).await? {
                let info = &mut found.info;
                if info.running && info.pid != 0 && found.network.is_none() && info.addr.is_none() {
                    // Started by a node that stopped before it made the link.
                    let addr = self.link(&found.id, info.pid, found.etc.as_deref()).await?;
                    info.addr = Some(addr.into());
                }
                out.push(found.info);
            }
        }
        Ok(out)
    }

    async fn logs_tail(&self, sandbox_id: &str, lines: usize) -> String {
        self.logs_of(&self.container_name(sandbox_id), lines).await
    }

    async fn set_cpus(&self, sandbox_id: &str, cpus: f64) -> Result<(), RuntimeError> {
        let body = bollard::models::ContainerUpdateBody {
            nano_cpus: Some(nano_cpus(cpus)),
            ..Default::default()
        };
        self.docker
            .update_container(&self.container_name(sandbox_id), body)
            .await
            .map_err(docker_err)
    }

    async fn pause(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        let name = self.container_name(sandbox_id);
        let paused = (|| self.docker.pause_container(&name))
            .retry(freeze_race::pause_backoff())
            .when(|e| freeze_race::lost_freeze_race(status_of(e), &e.to_string()))
            .notify(|e, wait| {
                tracing::info!(sandbox_id, error = %e, ?wait, "the freezer lost the race with the sandbox's new processes: pausing again")
            })
            .await;
        match paused {
            Ok(()) => Ok(()),
            // The engine refuses a container it has paused already (409): paused is what
            // the caller asked for. Any other conflict (not running) stands.
            Err(e) if status_of(&e) == Some(409) && self.is_paused(&name).await => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    async fn unpause(&self, sandbox_id: &str) -> Result<(), RuntimeError> {
        match self
            .docker
            .unpause_container(&self.container_name(sandbox_id))
            .await
        {
            Ok(()) => Ok(()),
            // Not paused (any more), or gone: nothing is frozen.
            Err(e) if matches!(status_of(&e), Some(404 | 409)) => Ok(()),
            Err(e) => Err(docker_err(e)),
        }
    }

    async fn paused(&self) -> Result<Vec<String>, RuntimeError> {
        let mut filters = self.node_filter("sandbox");
        filters.insert("status".into(), vec!["paused".into()]);
        let opts = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let found = self
            .docker
            .list_containers(Some(opts))
            .await
            .map_err(docker_err)?;
        Ok(found
            .into_iter()
            .filter(|c| !c.names.iter().flatten().any(|n| n.contains(WARM)))
            .filter_map(|c| c.labels?.remove(LABEL_SANDBOX))
            .collect())
    }

    async fn upper_dir(&self, sandbox_id: &str) -> Result<Option<PathBuf>, RuntimeError> {
        self.upper_of(&self.container_name(sandbox_id)).await
    }

    async fn written_on_host(
        &self,
        sandbox_id: &str,
    ) -> Result<Option<super::upper_usage::Written>, RuntimeError> {
        let Some(c) = self
            .inspect_if_any(&self.container_name(sandbox_id))
            .await?
        else {
            return Ok(None);
        };
        let Some(upper) = upper_in(&c) else {
            return Ok(None);
        };
        Ok(Some(super::upper_usage::Written {
            upper,
            files: self.mounted_files(&c),
        }))
    }

    async fn kill_all_but_init(&self, sandbox_id: &str) -> Result<usize, RuntimeError> {
        let name = self.container_name(sandbox_id);
        let Some(info) = self.inspect(sandbox_id).await?.filter(|i| i.running) else {
            return Ok(0);
        };
        // The caller holds the container paused.
        let options = bollard::query_parameters::TopOptionsBuilder::default()
            .ps_args("-eo pid")
            .build();
        let top = self
            .docker
            .top_processes(&name, Some(options))
            .await
            .map_err(docker_err)?;
        let column = top
            .titles
            .iter()
            .flatten()
            .position(|t| t.trim() == "PID")
            .ok_or_else(|| RuntimeError::Other("docker top listed no PID column".into()))?;
        let mut killed = 0;
        for row in top.processes.iter().flatten() {
            let Some(pid) = row.get(column).and_then(|p| p.trim().parse::<i32>().ok()) else {
                continue;
            };
            if pid <= 1 || pid as u32 == info.pid {
                continue;
            }
            // SAFETY: kill(2) on a pid of the frozen container (it cannot exit or be
            // reused until the container is thawed).
            if unsafe { libc::kill(pid, libc::SIGKILL) } == 0 {
                killed += 1;
            }
        }
        Ok(killed)
    }

    async fn changes(&self, sandbox_id: &str) -> Result<Vec<FsChange>, RuntimeError> {
        use bollard::models::ChangeType;
        let name = self.container_name(sandbox_id);
        // overlay2: list the upper directory (as much work as there are changes).
        let upper = self.upper_of(&name).await.ok().flatten();
        if let Some(upper) = upper {
            let listed = self
                .host_pool()
                .run(move || super::upper_dir::changes(&upper))
                .await
                .map_err(|e| RuntimeError::Other(e.to_string()))?;
            match listed {
                Ok(changes) => return Ok(changes),
                Err(e) => {
                    tracing::warn!(sandbox_id, error = %e, "cannot list the upper directory; asking Docker for the changes")
                }
            }
        }
        let changes = self
            .docker
            .container_changes(&name)
            .await
            .map_err(|e| RuntimeError::Docker(e.to_string()))?
            .unwrap_or_default();
        Ok(changes
            .into_iter()
            .map(|c| FsChange {
                path: c.path,
                kind: match c.kind {
                    ChangeType::_0 => ChangeKind::Modified,
                    ChangeType::_1 => ChangeKind::Added,
                    ChangeType::_2 => ChangeKind::Deleted,
                },
            })
            .collect())
    }

    fn disk_limits(&self) -> bool {
        self.disk_limits.load(Ordering::Relaxed)
    }

    fn id_shift(&self) -> Option<IdShift> {
        self.id_shift
    }
}
