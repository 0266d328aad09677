//! Assembling and running one node: Docker runtime, firewall, sandbox manager, HTTP API.

use crate::args::NodeArgs;
use anyhow::{bail, Context};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use warren_node::runtime::docker::DockerRuntime;
use warren_node::runtime::subnets::{Cidr, SubnetPool};
use warren_node::{NodeConfig, SandboxManager};

/// What a started node tells its caller.
pub struct Ready {
    pub url: String,
    pub api_key: String,
    pub api_key_file: PathBuf,
    pub data_dir: PathBuf,
    pub node_id: String,
}

/// Reads the API key file, or creates it with a new random key (mode 0600).
pub fn load_or_create_key(path: &Path) -> anyhow::Result<String> {
    if let Ok(k) = std::fs::read_to_string(path) {
        let k = k.trim().to_string();
        if !k.is_empty() {
            return Ok(k);
        }
    }
    let key = format!("wk_{}", hex::encode(rand::random::<[u8; 24]>()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        writeln!(f, "{key}")?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    Ok(key)
}

pub fn data_dir_of(args: &NodeArgs) -> PathBuf {
    args.data_dir
        .clone()
        .unwrap_or_else(warren_client::dev_data_dir)
}

/// Runs the node until SIGINT or SIGTERM. Sandboxes keep running when it stops and are
/// re-adopted by the next start.
pub async fn run_node(args: &NodeArgs, on_ready: impl FnOnce(&Ready)) -> anyhow::Result<()> {
    warren_api::ids::validate_sandbox_id(&args.node_id)
        .map_err(|_| anyhow::anyhow!("--node-id must be a DNS label"))?;
    let data_dir = data_dir_of(args);
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("cannot create {}", data_dir.display()))?;
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700))?;
    }
    let data_dir = data_dir.canonicalize()?;
    // Guest sockets live at DATA_DIR/run/<16 hex>/guest.sock; unix socket paths max out at 108.
    if data_dir.as_os_str().len() > 70 {
        bail!(
            "the data dir path {} is too long for unix sockets (keep it under 70 bytes)",
            data_dir.display()
        );
    }
    let key_file = args
        .api_key_file
        .clone()
        .unwrap_or_else(|| warren_client::api_key_path(&data_dir));
    let api_key = load_or_create_key(&key_file)?;
    let guest = warren_node::guest::binary::locate(args.guest_bin.as_deref())
        .map_err(anyhow::Error::msg)?;
    let pool = Cidr::parse(&args.subnet_pool)
        .context("--subnet-pool must be an IPv4 CIDR such as 10.200.0.0/16")?;

    let mut cfg = NodeConfig::new(&args.node_id, &data_dir, guest);
    cfg.region = args.region.clone();
    cfg.docker_host = args.docker_host.clone();
    if let Some(i) = &args.image {
        cfg.default_image = i.clone();
    }
    cfg.subnet_pool = (Ipv4Addr::from(pool.base), pool.prefix);
    cfg.spare_networks = args.spare_networks;
    cfg.firewall = !args.no_firewall;
    cfg.max_sandboxes = args.max_sandboxes;

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
    if cfg.firewall {
        match warren_node::runtime::firewall::install() {
            Ok(()) => tracing::info!("sandbox firewall rules are in place"),
            Err(e) => {
                tracing::warn!(error = %e, "could not install the sandbox firewall rules: sandboxes may reach the host")
            }
        }
    }
    docker.replenish();
    let registry = prometheus::Registry::new();
    let metrics = warren_node::metrics::NodeMetrics::register(&registry)?;
    let mgr = SandboxManager::start(cfg.clone(), Arc::new(docker), metrics)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let state = warren_router::AppState::new(mgr, &api_key, registry)?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = listener.local_addr()?;
    on_ready(&Ready {
        url: format!("http://{addr}"),
        api_key,
        api_key_file: key_file,
        data_dir,
        node_id: cfg.node_id.clone(),
    });
    warren_router::serve(listener, state, shutdown_signal()).await?;
    tracing::info!("stopped; sandboxes keep running and are re-adopted on the next start");
    Ok(())
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
