//! Assembling and running one node: Docker runtime, firewall, sandbox manager, cluster
//! membership (bootstrap, join or restart), the peer endpoint and the HTTP API.

use crate::settings::Settings;
use anyhow::{bail, Context};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_consensus::join::{JoinRequest, JoinResponse};
use warren_consensus::{Cluster, ClusterConfig};
use warren_node::runtime::docker::DockerRuntime;
use warren_node::runtime::docker::WarmSizing;
use warren_node::runtime::host_work::{self, HostWork, HostWorkConfig};
use warren_node::runtime::oci_runtime::OciRuntimeSetting;
use warren_node::runtime::subnets::{Cidr, SubnetPool};
use warren_node::runtime::{firewall, ContainerRuntime};
use warren_node::runtime::{WarmPoolConfig, WARM_IDLE_MB};
use warren_node::safety::{Guarantee, Safety};
use warren_node::{NodeConfig, SandboxManager};
use warren_transport::{tls, NodeIdentity, Peers};

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

/// Reads a secret file, or creates it with a new random value (mode 0600).
/// An error and every cause under it, as one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Whether a request failed because the server's certificate is not trusted (rustls says
/// so in the error's causes).
fn untrusted_certificate(e: &reqwest::Error) -> bool {
    let chain = error_chain(e);
    chain.contains("invalid peer certificate") || chain.contains("UnknownIssuer")
}

pub fn load_or_create_secret(path: &Path, prefix: &str) -> anyhow::Result<String> {
    if let Ok(k) = std::fs::read_to_string(path) {
        let k = k.trim().to_string();
        if !k.is_empty() {
            return Ok(k);
        }
    }
    let value = format!("{prefix}{}", hex::encode(rand::random::<[u8; 24]>()));
    write_private(path, &format!("{value}\n"))?;
    Ok(value)
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

pub fn data_dir_of(s: &Settings) -> PathBuf {
    s.data_dir
        .clone()
        .unwrap_or_else(warren_client::dev_data_dir)
}

/// The node's cluster identity on disk (format-versioned).
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredIdentity {
    format: u32,
    node_id: u64,
    identity: NodeIdentity,
    join_token: String,
    /// The CA this node created, kept until the cluster's first entries are committed (so an
    /// interrupted bootstrap resumes with the same CA).
    #[serde(default)]
    bootstrap_ca: Option<warren_transport::CaMaterial>,
}

const IDENTITY_FORMAT: u32 = 1;

/// With this set in its environment, a node stops (SIGTERM) when the process that started
/// it ends, however that ends: test harnesses and benchmarks set it, so that a crashed test
/// leaves no node running.
pub const EXIT_WITH_PARENT_ENV: &str = "WARREN_EXIT_WITH_PARENT";

/// Asks the kernel for a SIGTERM when the parent ends (`EXIT_WITH_PARENT_ENV`).
fn exit_with_parent() -> anyhow::Result<()> {
    // SAFETY: getppid and prctl(PR_SET_PDEATHSIG) have no memory effects.
    let parent = unsafe { libc::getppid() };
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) } != 0 {
        bail!(
            "cannot ask to stop with the parent: {}",
            std::io::Error::last_os_error()
        );
    }
    // It may have ended before the request was made.
    // SAFETY: as above.
    if unsafe { libc::getppid() } != parent {
        bail!("the process that started this node has ended");
    }
    Ok(())
}

/// Runs the node until SIGINT or SIGTERM. Sandboxes keep running when it stops and are
/// re-adopted by the next start.
pub async fn run_node(s: &Settings, on_ready: impl FnOnce(&Ready)) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if std::env::var_os(EXIT_WITH_PARENT_ENV).is_some() {
        exit_with_parent()?;
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
    let pool = Cidr::parse(&s.subnet_pool)
        .context("subnet_pool must be an IPv4 CIDR such as 10.200.0.0/16")?;

    let mut cfg = NodeConfig::new(&s.name, &data_dir, guest);
    cfg.region = s.region.clone();
    cfg.docker_host = s.docker_host.clone();
    if let Some(i) = &s.image {
        cfg.default_image = i.clone();
    }
    cfg.subnet_pool = (Ipv4Addr::from(pool.base), pool.prefix);
    cfg.spare_networks = s.spare_networks;
    cfg.firewall = s.firewall;
    cfg.firewall_tools = warren_node::runtime::firewall::Tools {
        iptables: s.iptables.clone(),
        ip6tables: s.ip6tables.clone(),
    };
    cfg.allow_host_root = s.allow_host_root;
    cfg.run_dir_mb = s.run_dir_mb;
    cfg.disk_check_every = std::time::Duration::from_millis(s.disk_check_ms);
    cfg.usage_export_every = std::time::Duration::from_millis(s.usage_export_ms);
    cfg.usage_retention = std::time::Duration::from_secs(s.usage_retention_days * 86_400);
    cfg.usage_sample_every = std::time::Duration::from_millis(s.usage_sample_ms);
    cfg.max_sandboxes = s.max_sandboxes;
    // What the defaults of the reserve and the warm pool's budget are shares of.
    let host_memory_mb = warren_node::runtime::host_load::memory_total_mb();
    cfg.capacity = warren_node::sandbox::admission::Capacity {
        max_cpus: (s.max_cpus > 0.0).then_some(s.max_cpus),
        max_memory_mb: (s.max_memory_mb > 0).then_some(s.max_memory_mb),
        memory_reserve_mb: s
            .memory_reserve_mb
            .unwrap_or_else(|| host_memory_mb.map_or(256, |total| (total / 20).clamp(256, 4096))),
    };
    if let Some(o) = &s.object_store {
        cfg.object_store = o.clone();
    }
    cfg.chunk_cache_bytes = s.chunk_cache_mb << 20;
    cfg.snapshot_gc_grace = std::time::Duration::from_secs(s.snapshot_gc_grace_s);
    cfg.preview.domain = s.preview_domain.trim_matches('.').to_ascii_lowercase();
    cfg.preview.scheme = s.preview_scheme.clone();
    cfg.checkpoint_every = std::time::Duration::from_secs(s.checkpoint_every_s);
    cfg.pack_in_node = !s.pack_in_guest;
    cfg.fill_while_starting = !s.restore_after_start;

    let subnets = SubnetPool {
        pool,
        block_prefix: cfg.subnet_prefix,
    };
    let docker = DockerRuntime::connect(
        cfg.docker_host.as_deref(),
        &cfg.node_id,
        subnets,
        cfg.spare_networks,
    )
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
    docker.use_host_work(host_work.pool());
    // The boundary before any container: firewall rules in place, user namespaces on. What
    // does not hold keeps this node from starting sandboxes (and says so in /healthz).
    let safety = Arc::new(Safety::default());
    let tasks = CancellationToken::new();
    // The egress proxy's port joins the rules once it is bound (below).
    let (firewall_opts, firewall_rx) = tokio::sync::watch::channel(firewall::Options {
        node_id: cfg.node_id.clone(),
        egress_port: None,
    });
    let firewall_keeper = if cfg.firewall {
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
        Some(task)
    } else {
        tracing::warn!("the sandbox firewall is off (--no-firewall): sandboxes reach this host and every network it reaches");
        None
    };
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
    if docker.id_shift().is_some() {
        // Every sandbox's namespace counts against the host root's inotify budget too, and
        // every sandbox's session keyring against one user's key quota.
        match warren_node::runtime::userns_limits::ensure_host_budget(cfg.max_sandboxes as u64) {
            Ok(changed) if !changed.is_empty() => {
                tracing::info!(changed = %changed.join(", "), "raised the host's per-user limits so that every sandbox's budget fits")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "cannot raise the host's per-user limits (inotify, keys): sandboxes together may use them up")
            }
        }
    }
    docker.replenish();

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
    let id_path = cluster_dir.join("identity.json");
    let secrets_key_path = s
        .secrets_key_file
        .clone()
        .unwrap_or_else(|| cluster_dir.join("secrets.key"));
    let ca_path = s
        .ca_file
        .clone()
        .unwrap_or_else(|| cluster_dir.join("ca.pem"));
    let cert_lifetime = std::time::Duration::from_secs(s.cert_lifetime_s);
    let (stored, bootstrap_ca) = if id_path.exists() {
        let stored: StoredIdentity =
            serde_json::from_slice(&std::fs::read(&id_path)?).context("identity.json")?;
        anyhow::ensure!(
            stored.format == IDENTITY_FORMAT,
            "identity.json has an unknown format {}",
            stored.format
        );
        anyhow::ensure!(
            stored.identity.name == s.name,
            "this data dir belongs to node {}",
            stored.identity.name
        );
        let ca = stored.bootstrap_ca.clone();
        (stored, ca)
    } else if let Some(seed) = &s.join {
        let token = s.join_token.clone().context("joining needs join_token")?;
        let peer_addr = s.advertise_peer.clone().unwrap_or(s.peer_listen.clone());
        anyhow::ensure!(
            !peer_addr.ends_with(":0"),
            "a joining node needs a fixed peer port (peer_listen)"
        );
        let stored = join(seed, &token, s, &api_addr, &peer_addr, &secrets_key_path).await?;
        write_private(&id_path, &serde_json::to_string(&stored)?)?;
        (stored, None)
    } else {
        let token = match &s.join_token {
            Some(t) => t.clone(),
            None => load_or_create_secret(&cluster_dir.join("join-token"), "wj_")?,
        };
        let ca = tls::new_ca(&s.name)?;
        // The CA's key is kept here, never in the cluster's replicated state.
        write_private(&ca_path, &ca.file_pem())?;
        // The first node of a cluster is node 1.
        let identity = tls::issue(&ca, &s.name, 1, cert_lifetime)?;
        let stored = StoredIdentity {
            format: IDENTITY_FORMAT,
            node_id: 1,
            identity,
            join_token: token,
            bootstrap_ca: Some(ca.clone()),
        };
        write_private(&id_path, &serde_json::to_string(&stored)?)?;
        (stored, Some(ca))
    };

    // Made at bootstrap, received when joining, read back on a restart.
    let secrets_key = warren_consensus::secrets::SecretsKey::load_or_create(&secrets_key_path)
        .with_context(|| format!("secrets key {}", secrets_key_path.display()))?;
    // The egress proxy's port is fixed before any container is made: containers are told
    // it once, when they are made, and keep it across restarts of the node.
    let egress_port_file = data_dir.join("egress-port");
    let remembered = std::fs::read_to_string(&egress_port_file)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok());
    let egress_listener = match (s.egress_port, remembered) {
        (Some(p), _) => warren_router::egress::bind(Some(p)).await,
        (None, Some(p)) => match warren_router::egress::bind(Some(p)).await {
            Ok(l) => Ok(l),
            Err(e) => {
                tracing::warn!(port = p, error = %e, "the egress port used before is taken; containers made before point at it");
                warren_router::egress::bind(None).await
            }
        },
        (None, None) => warren_router::egress::bind(None).await,
    }
    .context("cannot listen for the egress proxy")?;
    let egress_port = egress_listener.port()?;
    write_private(&egress_port_file, &format!("{egress_port}\n"))?;
    docker.use_egress_port(egress_port);
    firewall_opts.send_modify(|o| o.egress_port = Some(egress_port));
    let egress_ca_seed = secrets_key.derive("egress-ca");
    cfg.egress_ca_seed = Some(egress_ca_seed);
    let extra_roots = match &s.egress_ca_file {
        Some(f) => std::fs::read(f).with_context(|| format!("egress_ca_file {}", f.display()))?,
        None => Vec::new(),
    };
    let egress_tls = warren_egress::ProxyTls::new(Some(egress_ca_seed), &extra_roots)
        .map_err(anyhow::Error::msg)?;
    let egress_nets = s
        .egress_allow_nets
        .iter()
        .map(|n| {
            n.trim()
                .parse::<ipnet::IpNet>()
                .or_else(|_| n.trim().parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .with_context(|| format!("egress_allow_nets: {n:?} is not a CIDR"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;

    let peers = Peers::bind(
        s.peer_listen
            .parse()
            .context("peer_listen must be ip:port")?,
        &stored.identity,
    )?;
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
    ccfg.lease_margin = std::time::Duration::from_millis(crate::settings::LEASE_MARGIN_MS);
    ccfg.cert_lifetime = cert_lifetime;
    ccfg.ca = read_ca_file(&ca_path, bootstrap_ca.as_ref())?;
    warn_if_expired(&stored.identity);
    let cluster = Cluster::open(
        &cluster_dir.join("raft"),
        stored.node_id,
        ccfg,
        peers.clone(),
    )
    .await
    .map_err(|e| anyhow::anyhow!("{e}"))?;

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
    docker
        .start_warm_pool(
            WarmPoolConfig {
                sizing: WarmSizing {
                    floor: s.warm_containers,
                    ceiling: s.warm_max,
                    memory_budget_mb: match s.warm_memory_mb {
                        0 => host_memory_mb.map_or(512, |total| (total / 8).min(2048)),
                        mb => mb,
                    },
                    idle_mb: WARM_IDLE_MB,
                },
                horizon: std::time::Duration::from_secs(s.warm_horizon_s),
                memory_reserve_mb: cfg.capacity.memory_reserve_mb,
                idle_reserve: s.warm_idle_reserve,
                images: warm_images(&cfg.default_image, &s.warm_images)?,
                resources: warren_api::sandbox::instance_type(
                    warren_api::sandbox::DEFAULT_INSTANCE_TYPE,
                )?,
                guest_binary: mgr.guest_binary().to_path_buf(),
                run_dir_mb: cfg.run_dir_mb,
                safety: safety.clone(),
            },
            &registry,
        )
        .await
        .context("cannot start the warm containers")?;
    let join_token = stored.join_token.clone();
    let (stored_node_id, stored_join_token) = (stored.node_id, stored.join_token.clone());
    let ctx = Arc::new(warren_router::cluster::ClusterCtx {
        cluster: cluster.clone(),
        join_token: join_token.clone(),
        secrets_key,
        fence_file,
    });
    let own_ports = vec![listener.local_addr()?.port(), peers.local_addr()?.port()];
    let meter_owner = mgr.clone();
    let mut state = warren_router::AppState::new(mgr, ctx, &api_key, registry.clone())?;
    state.rate = Arc::new(warren_router::auth::rate::KeyLimiter::new(s.key_rate()));
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
    let (_proxy, egress_task) = warren_router::egress::spawn(
        &state,
        egress_listener,
        own_ports,
        egress_nets,
        egress_tls,
        &registry,
        tasks.clone(),
    )?;
    let peer_server = warren_router::serve_peers(&state);
    let migrator = warren_control::migrate::spawn(state.control(), tasks.clone());
    // The fence runs until the process ends: it vouches for the sandboxes as long as this
    // process lives, so that a quick restart does not stop them.
    warren_control::fence::spawn(state.control());
    let resealer = warren_router::cluster::reseal::spawn(state.clone(), tasks.clone());
    let key_uses = warren_router::auth::last_used::spawn(state.clone(), tasks.clone());
    if let Some(ca) = bootstrap_ca {
        cluster
            .bootstrap(ca)
            .await
            .map_err(|e| anyhow::anyhow!("bootstrap: {e}"))?;
        let done = StoredIdentity {
            bootstrap_ca: None,
            ..stored
        };
        write_private(&id_path, &serde_json::to_string(&done)?)?;
        tracing::info!(node = %s.name, "bootstrapped a new cluster");
    }
    cluster.start_supervisor();
    {
        let id_path = id_path.clone();
        cluster.start_cert_renewal(Box::new(move |identity| {
            let renewed = StoredIdentity {
                format: IDENTITY_FORMAT,
                node_id: stored_node_id,
                identity: identity.clone(),
                join_token: stored_join_token.clone(),
                bootstrap_ca: None,
            };
            serde_json::to_string(&renewed)
                .map_err(anyhow::Error::from)
                .and_then(|j| write_private(&id_path, &j))
                .map_err(|e| format!("cannot store the renewed certificate: {e}"))
        }));
    }

    on_ready(&Ready {
        url: format!("{scheme}://{}", listener.local_addr()?),
        api_key,
        api_key_file: key_file,
        data_dir,
        node_id: cfg.node_id.clone(),
        peer_addr,
        join_token,
    });
    warren_router::serve(listener, state, tls, s.listener_limits(), shutdown_signal()).await?;
    tasks.cancel();
    let firewall_kept = firewall_keeper.is_some();
    for (what, t) in [
        ("firewall keeper", firewall_keeper),
        ("egress proxy", Some(egress_task)),
        ("resealer", Some(resealer)),
        ("key use recorder", Some(key_uses)),
        ("migration loop", Some(migrator)),
    ] {
        if let Some(t) = t {
            stop_within(what, t, LOOPS_STOP_WITHIN).await;
        }
    }
    if firewall_kept {
        // The proxy is gone: what was redirected to it is dropped until the next start.
        let (iptables, node) = (cfg.firewall_tools.iptables.clone(), cfg.node_id.clone());
        let _ =
            tokio::task::spawn_blocking(move || firewall::remove_egress_chain(&iptables, &node))
                .await;
    }
    export_usage_at_exit(&meter_owner, cfg.usage_export_every).await;
    docker.stop_warm_pool().await;
    host_work.shutdown().await;
    cluster.shutdown().await;
    peers.close();
    stop_within("peer server", peer_server, LOOPS_STOP_WITHIN).await;
    tracing::info!("stopped; sandboxes keep running and are re-adopted on the next start");
    Ok(())
}

/// The longest a stopping node waits for one of its loops to end (a migration under way may
/// take this long) before it aborts it.
const LOOPS_STOP_WITHIN: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits for a task told to stop, for at most `within`; then aborts it, saying so.
async fn stop_within(
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
async fn export_usage_at_exit(mgr: &SandboxManager, every: std::time::Duration) {
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

/// The CA (with its key) this node signs with, from its CA file; a bootstrap interrupted
/// before the file was written writes it from the CA it kept. None: this node does not sign.
fn read_ca_file(
    path: &Path,
    bootstrap_ca: Option<&warren_transport::CaMaterial>,
) -> anyhow::Result<Option<warren_transport::CaMaterial>> {
    match std::fs::read_to_string(path) {
        Ok(pem) => warren_transport::CaMaterial::parse_file(&pem)
            .map(Some)
            .with_context(|| format!("CA file {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(ca) = bootstrap_ca {
                write_private(path, &ca.file_pem())?;
            }
            Ok(bootstrap_ca.cloned())
        }
        Err(e) => Err(anyhow::anyhow!("CA file {}: {e}", path.display())),
    }
}

/// Says at start when this node's certificate has expired: its peers refuse it, and it
/// cannot renew it over the peer protocol.
fn warn_if_expired(identity: &NodeIdentity) {
    if let Ok(v) = tls::validity_of(&identity.cert_pem) {
        if v.not_after <= tls::unix_now() {
            tracing::error!(
                expired_at = v.not_after,
                "this node's certificate has expired (it was off longer than cert_lifetime_s): peers refuse it; admit it again with a fresh data dir, or give it a CA file"
            );
        }
    }
}

/// Asks a member to admit this node; checks that the answer proves the same join token.
async fn join(
    seed: &str,
    token: &str,
    s: &Settings,
    api_addr: &str,
    peer_addr: &str,
    secrets_key_path: &Path,
) -> anyhow::Result<StoredIdentity> {
    let (key_pem, csr) = tls::new_key_and_csr(&s.name)?;
    let req = JoinRequest::new(
        token, &s.name, &s.region, api_addr, peer_addr, s.capacity, &csr,
    );
    let url = format!("{}/internal/v1/join", seed.trim_end_matches('/'));
    let mut http = reqwest::Client::builder();
    if let Some(path) = &s.join_ca_file {
        let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("{}: not a PEM certificate bundle", path.display()))?
        {
            http = http.add_root_certificate(cert);
        }
    }
    let http = http.build()?;
    let mut last = String::new();
    // The seed may still be starting: try for a while.
    for _ in 0..60 {
        match http.post(&url).json(&req).send().await {
            Ok(r) if r.status().is_success() => {
                let resp: JoinResponse = r.json().await?;
                anyhow::ensure!(
                    resp.verify(token),
                    "the answer from {seed} does not prove the join token"
                );
                let sealed = resp
                    .secrets_key
                    .as_ref()
                    .context("the cluster sent no secrets key (a member of an older version?)")?;
                warren_consensus::secrets::SecretsKey::open_from_join(token, sealed)
                    .and_then(|k| k.write(secrets_key_path))
                    .context("the secrets key from the join answer")?;
                let identity = NodeIdentity {
                    name: s.name.clone(),
                    cert_pem: resp.cert_pem,
                    key_pem,
                    ca_pem: resp.ca_pem,
                };
                tracing::info!(node_id = resp.node_id, cluster = %resp.cluster, "joined");
                return Ok(StoredIdentity {
                    format: IDENTITY_FORMAT,
                    node_id: resp.node_id,
                    identity,
                    // An issued token is spent (or expires): it is not this node's to admit
                    // others with. The cluster's own token is.
                    join_token: if warren_api::join_tokens::token_id(token).is_some() {
                        String::new()
                    } else {
                        token.to_string()
                    },
                    bootstrap_ca: None,
                });
            }
            // A wrong token, or a name that is already a member's: retrying cannot help.
            Ok(r) if r.status() == 403 || r.status() == 409 => bail!(
                "{seed} refused the join: {}",
                r.text().await.unwrap_or_default()
            ),
            Ok(r) => last = format!("{}: {}", r.status(), r.text().await.unwrap_or_default()),
            // A seed whose certificate this node does not trust will not become trusted by
            // waiting: say so at once (join_ca_file names the CA to trust).
            Err(e) if untrusted_certificate(&e) => bail!(
                "{seed}'s certificate is not trusted ({}); set join_ca_file to the CA that issued it",
                error_chain(&e)
            ),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    bail!("could not join through {seed}: {last}")
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// The images of the warm pools: the default image first (it keeps the floor), then the
/// others named, each once.
fn warm_images(default: &str, more: &[String]) -> anyhow::Result<Vec<String>> {
    let mut images = vec![default.to_string()];
    for image in more {
        warren_api::sandbox::validate_image(image)
            .map_err(|e| anyhow::anyhow!("warm_images: {}", e.message))?;
        if !images.contains(image) {
            images.push(image.clone());
        }
    }
    Ok(images)
}
