//! Assembling and running one node: the host's boundary (firewall, user namespaces), the
//! Docker runtime and its warm pools, the cluster identity (restart, join or bootstrap),
//! Raft over the peer endpoint, the sandbox manager, the controller's loops, the egress
//! proxy and the HTTP API — and stopping them again in order.
//!
//! `start` brings a node up and gives back a `RunningNode` (what a caller is told is in
//! `Ready`); `RunningNode::serve_until` serves the API until a future resolves and then
//! stops every loop it started, in order, each within a deadline. `run_node` is both, until
//! SIGTERM or SIGINT, as `warren serve` and `warren dev` run it.

pub mod settings;

pub mod consensus_runtime;
mod cpu_share;
mod egress;
mod files;
mod host;
mod identity;
mod parent;
pub mod recover;
mod stop;
mod unwind;

pub use files::{data_dir_of, load_or_create_secret};
pub use parent::EXIT_WITH_PARENT_ENV;

use anyhow::Context;
use identity::{IdentityPaths, StoredIdentity, IDENTITY_FORMAT};
use settings::Settings;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_consensus::{Cluster, ClusterConfig};
use warren_node::runtime::docker::DockerRuntime;
use warren_node::runtime::host_work::{self, HostWork, HostWorkConfig};
use warren_node::runtime::oci_runtime::OciRuntimeSetting;
use warren_node::runtime::{firewall, ContainerRuntime};
use warren_node::safety::{Guarantee, Safety};
use warren_node::{NodeConfig, SandboxManager};
use warren_transport::{tls, Peers};

/// What a started node tells its caller.
pub struct Ready {
    pub url: String,
    pub api_key: String,
    pub api_key_file: PathBuf,
    pub data_dir: PathBuf,
    pub node_id: String,
    pub peer_addr: String,
    pub join_token: String,
}

/// A node that is up: its loops run and its API listens; `serve_until` serves it and then
/// stops it.
pub struct RunningNode {
    ready: Ready,
    cfg: NodeConfig,
    listener: tokio::net::TcpListener,
    state: warren_router::AppState,
    tls: Option<Arc<warren_router::listener::tls::ReloadingCert>>,
    limits: warren_router::listener::ListenerLimits,
    mgr: Arc<SandboxManager>,
    cluster: Arc<Cluster>,
    /// The egress proxy: it counts what each sandbox sent through it until the last usage
    /// export at the stop has read it.
    proxy: Arc<warren_egress::Proxy>,
    /// Everything the start started, stopped in order by `serve_until` as by a failed start.
    parts: unwind::Started,
}

/// Runs the node until SIGINT or SIGTERM. Sandboxes keep running when it stops and are
/// re-adopted by the next start.
pub async fn run_node(s: &Settings, on_ready: impl FnOnce(&Ready)) -> anyhow::Result<()> {
    let node = start(s).await?;
    on_ready(node.ready());
    // The process ends next: what it still holds goes with it.
    node.serve_until(stop::shutdown_signal()).await.map(drop)
}

/// Brings a node up from its settings: everything but serving the API, which
/// `RunningNode::serve_until` does. On an error, what was started so far is stopped again
/// (`unwind`) before the error is returned: the same data dir can be started again in this
/// process.
pub async fn start(s: &Settings) -> anyhow::Result<RunningNode> {
    let mut started = unwind::Started::default();
    match assemble(s, &mut started).await {
        Ok(node) => Ok(node),
        Err(e) => {
            tracing::warn!(error = %e, "the node did not start; stopping what it had started");
            started.stop(None).await;
            Err(e)
        }
    }
}

async fn assemble(s: &Settings, started: &mut unwind::Started) -> anyhow::Result<RunningNode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os(EXIT_WITH_PARENT_ENV).is_some() {
        parent::exit_with_parent()?;
    }
    let data_dir = data_dir_of(s);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let data_dir = data_dir.canonicalize()?;
    let key_file = s
        .api_key_file
        .clone()
        .unwrap_or_else(|| warren_client::api_key_path(&data_dir));
    // Every node of a cluster serves the same bootstrap key (and derives its tickets' key
    // from it): one that joins must be given it, not make up its own.
    if let Some(seed) = &s.join {
        let has_key = std::fs::read_to_string(&key_file).is_ok_and(|k| !k.trim().is_empty());
        anyhow::ensure!(
            has_key,
            "this node joins {seed} but has no API key at {}: copy the cluster's key file there (or point api_key_file at it)",
            key_file.display()
        );
    }
    let api_key = load_or_create_secret(&key_file, "wk_")?;
    let guest =
        warren_node::guest::binary::locate(s.guest_bin.as_deref()).map_err(anyhow::Error::msg)?;
    let (mut cfg, pool, host_memory_mb) = host::node_config(s, &data_dir, guest)?;

    let docker = DockerRuntime::connect(cfg.docker_host.as_deref(), &cfg.node_id, pool)
        .await
        .context("cannot use Docker")?;
    let oci = OciRuntimeSetting::parse(&s.oci_runtime).map_err(anyhow::Error::msg)?;
    docker
        .use_oci_runtime(&oci)
        .context("cannot choose the sandboxes' OCI runtime")?;
    // Every container this node makes sees its fence file (`fence_file`), warm ones too.
    let fence_file = Arc::new(
        warren_node::runtime::fence_file::FenceFile::open(&data_dir.join("fence"))
            .context("cannot make the fence directory")?,
    );
    docker.use_fence_dir(fence_file.dir());
    docker
        .use_etc_dir(&data_dir.join("etc"))
        .await
        .context("cannot keep the sandboxes' /etc files")?;
    // Snapshot archiving and unpacking, chunk work and fork copies: bounded, in a cgroup of
    // their own, on the disks of the data dir and of Docker's data root.
    let host_work = {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut hw = HostWorkConfig::for_cpus(cpus);
        if let Some(c) = s.host_work_cpus {
            hw.limits.cpus = c;
            hw.threads = host_work::threads_for(c);
        }
        if let Some(m) = s.host_work_io_mbps {
            hw.limits.io_bps = m << 20;
        }
        let mut disks: Vec<&Path> = vec![data_dir.as_path()];
        disks.extend(docker.data_root());
        HostWork::start(&data_dir, &disks, hw)
    };
    started.host_work = Some(host_work.clone());
    docker.use_host_work(host_work.pool());
    // The boundary before any container: firewall rules in place, user namespaces on. What
    // does not hold keeps this node from starting sandboxes (and says so in /healthz).
    let safety = Arc::new(Safety::default());
    let tasks = CancellationToken::new();
    started.tasks = Some(tasks.clone());
    // The egress proxy's port joins the rules once it is bound (below).
    let (firewall_opts, firewall_rx) = tokio::sync::watch::channel(firewall::Options {
        node_id: cfg.node_id.clone(),
        egress_port: None,
    });
    if cfg.firewall {
        let (task, first) = firewall::keep(
            cfg.firewall_tools.clone(),
            firewall_rx,
            safety.clone(),
            tasks.clone(),
        )
        .await;
        if first.is_ok() {
            tracing::info!("sandbox firewall rules are in place");
        }
        started.loops.push(("firewall keeper", task));
        started.egress_redirect = Some(cfg.clone());
    } else {
        tracing::warn!("the sandbox firewall is off (--no-firewall): sandboxes reach this host and every network it reaches");
    }
    if docker.id_shift().is_none() {
        if cfg.allow_host_root {
            tracing::warn!("--allow-host-root: sandboxes run without user namespaces; their root is this host's root");
        } else {
            safety.set(
                Guarantee::UserNamespaces,
                Some("Docker runs containers without user namespaces; start dockerd with --userns-remap=default (or run the node with --allow-host-root on a development machine)".into()),
            );
        }
    }
    match cpu_share::raise_own_share() {
        Ok(Some(done)) => {
            tracing::info!(%done, "this node's session weighs more than a sandbox's on the CPU")
        }
        Ok(None) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise this node's CPU share: under a saturated host its lease renewals may miss their deadline")
        }
    }
    if docker.id_shift().is_some() {
        // Every sandbox's namespace counts against the host root's inotify budget too,
        // every sandbox's session keyring against one user's key quota, and its shim,
        // guest and processes against the host's process ids.
        match warren_node::runtime::userns_limits::ensure_host_budget(cfg.max_sandboxes as u64) {
            Ok(changed) if !changed.is_empty() => {
                tracing::info!(changed = %changed.join(", "), "raised the host's limits so that every sandbox's budget fits")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the host's limits (inotify, keys, process ids): sandboxes together may use them up")
            }
        }
    }

    let listener = tokio::net::TcpListener::bind(&s.listen)
        .await
        .with_context(|| format!("cannot listen on {}", s.listen))?;
    // A certificate that cannot be used stops the start: never plain HTTP by mistake.
    let tls = match s.tls_files() {
        Some(files) => Some(
            warren_router::listener::tls::ReloadingCert::start(files, tasks.clone())
                .context("the API's TLS certificate")?,
        ),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    cfg.preview.public_port = match s.preview_port {
        Some(0) => None,
        Some(p) => Some(p),
        None => Some(listener.local_addr()?.port()),
    };
    let api_addr = s
        .advertise_api
        .clone()
        .unwrap_or(listener.local_addr()?.to_string());

    // Cluster identity: restart, join, or bootstrap.
    let cluster_dir = data_dir.join("cluster");
    std::fs::create_dir_all(&cluster_dir)?;
    recover::remove_leftovers(&cluster_dir);
    let paths = IdentityPaths::of(s, &cluster_dir);
    let (stored, bootstrap_ca) = identity::establish(s, &cluster_dir, &paths, &api_addr).await?;

    // Made at bootstrap, received when joining, read back on a restart.
    let secrets_key = warren_consensus::secrets::SecretsKey::load_or_create(&paths.secrets_key)
        .with_context(|| format!("secrets key {}", paths.secrets_key.display()))?;
    // The egress proxy's port is fixed before any container is made.
    let (egress_listener, egress_port) = egress::listen(s, &data_dir).await?;
    docker.use_egress_port(egress_port);
    firewall_opts.send_modify(|o| o.egress_port = Some(egress_port));
    let egress_ca_seed = secrets_key.derive("egress-ca");
    cfg.egress_ca_seed = Some(egress_ca_seed);
    let egress_tls = egress::proxy_tls(s, egress_ca_seed)?;
    let egress_nets = egress::allowed_nets(s)?;

    // Raft, the peer endpoint and the fence get a runtime of their own
    // (`consensus_runtime`); the endpoint runs on the runtime it is bound on.
    let consensus = consensus_runtime::ConsensusRuntime::start()
        .context("cannot start the consensus runtime")?;
    let on_consensus = consensus.handle().clone();
    started.consensus = Some(consensus);
    let peers = {
        let _on = on_consensus.enter();
        Peers::bind(
            s.peer_listen
                .parse()
                .context("peer_listen must be ip:port")?,
            &stored.identity,
        )?
    };
    started.peers = Some(peers.clone());
    let peer_addr = s
        .advertise_peer
        .clone()
        .unwrap_or(peers.local_addr()?.to_string());
    let mut ccfg = ClusterConfig::new(&s.name, &s.region, &api_addr, &peer_addr);
    ccfg.capacity = s.capacity;
    ccfg.key_id = tls::key_id_of_cert(&stored.identity.cert_pem)?;
    ccfg.heartbeat = s.heartbeat();
    ccfg.down_after = std::time::Duration::from_millis(s.down_after_ms);
    ccfg.lease = std::time::Duration::from_millis(s.lease_ms);
    ccfg.lease_margin = std::time::Duration::from_millis(settings::LEASE_MARGIN_MS);
    ccfg.cert_lifetime = std::time::Duration::from_secs(s.cert_lifetime_s);
    ccfg.raft_snapshot_every = s.raft_snapshot_every;
    ccfg.raft_snapshot_chunk_kb = s.raft_snapshot_chunk_kb;
    ccfg.region_deadlines = s.region_deadlines()?;
    ccfg.ca = identity::read_ca_file(&paths.ca, bootstrap_ca.as_ref())?;
    identity::warn_if_expired(&stored.identity);
    // Opened on the consensus runtime: Raft's tasks run where they are started.
    let raft_dir = cluster_dir.join("raft");
    let (node_id, raft_peers) = (stored.node_id, peers.clone());
    let cluster = on_consensus
        .spawn(async move { Cluster::open(&raft_dir, node_id, ccfg, raft_peers).await })
        .await
        .context("opening the cluster's state panicked")?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    started.cluster = Some(cluster.clone());

    let registry = prometheus::Registry::new();
    let metrics = warren_node::metrics::NodeMetrics::register(&registry)?;
    // The node process's own CPU, memory, open files and threads (`process_*`).
    registry.register(Box::new(
        prometheus::process_collector::ProcessCollector::for_self(),
    ))?;
    warren_consensus::metrics::register(&cluster, &registry)?;
    peers.register_metrics(&registry)?;
    // Adopted sandboxes stay frozen until this node knows they are still its own, and the
    // guests of every container stop their sandboxes when this process stops vouching for
    // them (it died, or lost its lease).
    warren_control::fence::fence_until_leased(&cluster, &safety, &fence_file);
    let mgr = SandboxManager::start(
        cfg.clone(),
        Arc::new(docker.clone()),
        metrics,
        safety.clone(),
        host_work.clone(),
        warren_control::recovery::ClusterRecoveryPoints::new(cluster.clone()),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    // After the manager adopted this node's sandboxes: the pool's leftovers are not theirs.
    let warm = host::warm_pool_config(
        s,
        &cfg,
        host_memory_mb,
        mgr.guest_binary().to_path_buf(),
        safety.clone(),
    )?;
    started.warm_pools = Some(docker.clone());
    docker
        .start_warm_pool(warm, &registry)
        .await
        .context("cannot start the warm containers")?;
    let join_token = stored.join_token.clone();
    let (stored_node_id, stored_join_token) = (stored.node_id, stored.join_token.clone());
    let ctx = Arc::new(warren_router::cluster::ClusterCtx {
        cluster: cluster.clone(),
        join_token: join_token.clone(),
        secrets_key,
        fence_file,
        backup: warren_router::cluster::backup::BackupSources {
            cluster_dir: cluster_dir.clone(),
            files: vec![
                ("identity.json".into(), paths.identity.clone()),
                ("secrets.key".into(), paths.secrets_key.clone()),
                ("ca.pem".into(), paths.ca.clone()),
            ],
        },
    });
    let own_ports = vec![listener.local_addr()?.port(), peers.local_addr()?.port()];
    let meter_owner = mgr.clone();
    let mut state = warren_router::AppState::new(mgr, ctx, &api_key, registry.clone())?;
    started.state = Some(state.clone());
    state.rate = Arc::new(warren_router::auth::rate::KeyLimiter::new(s.key_rate()));
    state.max_json_body =
        usize::try_from(s.max_json_body_mb.saturating_mul(1024 * 1024)).unwrap_or(usize::MAX);
    state.preview_guesses = Arc::new(warren_router::auth::rate::GuessLimiter::new(
        s.preview_guesses_per_min,
    ));
    state.key_guesses = Arc::new(warren_router::auth::rate::GuessLimiter::new(
        s.auth_failures_per_min,
    ));
    if let Some(f) = &s.metrics_token_file {
        let token = std::fs::read_to_string(f)
            .with_context(|| format!("metrics_token_file {}", f.display()))?;
        let token = token.trim();
        anyhow::ensure!(
            token.len() >= 16,
            "metrics_token_file {}: the token must be at least 16 characters",
            f.display()
        );
        state.metrics_token = Some(token.into());
    }
    let (proxy, egress_task) = warren_router::egress::spawn(
        &state,
        egress_listener,
        own_ports,
        egress_nets,
        egress_tls,
        &registry,
        tasks.clone(),
    )?;
    started.loops.push(("egress proxy", egress_task));
    started.peer_server = Some(warren_router::serve_peers(&state));
    started.loops.push((
        "migration loop",
        warren_control::migrate::spawn(state.control(), tasks.clone()),
    ));
    // The fence runs until the node has stopped everything else: it vouches for the
    // sandboxes as long as this node lives, so that a quick restart does not stop them.
    started.fence = Some(warren_control::fence::spawn(state.control()));
    started.loops.push((
        "resealer",
        warren_router::cluster::reseal::spawn(state.clone(), tasks.clone()),
    ));
    started.loops.push((
        "key use recorder",
        warren_router::auth::last_used::spawn(state.clone(), tasks.clone()),
    ));
    if let Some(ca) = bootstrap_ca {
        cluster
            .bootstrap(ca)
            .await
            .map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
        let done = StoredIdentity {
            bootstrap_ca: None,
            ..stored
        };
        identity::store(&paths.identity, &done)?;
        tracing::info!(node = %s.name, "bootstrapped a new cluster");
    }
    cluster.start_supervisor();
    {
        let id_path = paths.identity.clone();
        cluster.start_cert_renewal(Box::new(move |identity| {
            let renewed = StoredIdentity {
                format: IDENTITY_FORMAT,
                node_id: stored_node_id,
                identity: identity.clone(),
                join_token: stored_join_token.clone(),
                bootstrap_ca: None,
            };
            identity::store(&id_path, &renewed)
                .map_err(|e| format!("cannot store the renewed certificate: {e}"))
        }));
    }

    let ready = Ready {
        url: format!("{scheme}://{}", listener.local_addr()?),
        api_key,
        api_key_file: key_file,
        data_dir,
        node_id: cfg.node_id.clone(),
        peer_addr,
        join_token,
    };
    Ok(RunningNode {
        ready,
        cfg,
        listener,
        state,
        tls,
        limits: s.listener_limits(),
        mgr: meter_owner,
        cluster,
        proxy,
        // Up: from here on what was started is the running node's to stop.
        parts: std::mem::take(started),
    })
}

impl RunningNode {
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    /// Serves the API until `stop` resolves (and the connections drain, within the
    /// listener's drain timeout), then stops the node in order (`unwind::Started::stop`):
    /// its loops (each within a deadline, then aborted), the firewall's redirect to the
    /// proxy, the last usage export, the warm pools, host work, Raft, the peer endpoint, the
    /// fence. Sandboxes keep running.
    pub async fn serve_until(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<StoppedNode> {
        let RunningNode {
            cfg,
            listener,
            state,
            tls,
            limits,
            mgr,
            cluster,
            proxy,
            parts,
            ..
        } = self;
        let served = warren_router::serve(listener, state, tls, limits, stop).await;
        let last_export = unwind::LastExport {
            mgr: &mgr,
            every: cfg.usage_export_every,
            proxy,
        };
        parts.stop(Some(last_export)).await;
        tracing::info!("stopped; sandboxes keep running and are re-adopted on the next start");
        served?;
        Ok(StoppedNode { mgr, cluster })
    }
}

/// A node that has stopped, holding what it last held: its manager and cluster, and the
/// stores they keep open.
pub struct StoppedNode {
    mgr: Arc<SandboxManager>,
    cluster: Arc<Cluster>,
}

impl StoppedNode {
    /// How many of the sandbox manager's loops still run (none, once stopped in order).
    pub fn loops_running(&self) -> usize {
        self.mgr.loops_running()
    }

    /// Waits (each part at most `within`) until nothing but this holds the node's manager
    /// and cluster — requests and tasks that outlived the stop have let go — and lets go of
    /// them, so that their stores close and a node can start again in this process with the
    /// same data dir. False: something still held one after `within` (it is said which).
    pub async fn released(self, within: std::time::Duration) -> bool {
        let StoppedNode { mgr, cluster } = self;
        let manager_free = stop::released("sandbox manager", &mgr, within).await;
        // The manager holds the cluster (its recovery points are cluster state).
        drop(mgr);
        manager_free && stop::released("cluster", &cluster, within).await
    }
}
