//! The node's egress proxy, assembled: sandboxes by address from the manager, secrets from
//! the cluster's state (opened with the secrets key only here, for the request that needs
//! them), and a guard that follows the cluster's members and this host's addresses.

use crate::state::AppState;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_egress::{EgressContext, Guard, Proxy, ProxyMetrics, ProxyTls, SandboxEgress};

pub use warren_node::runtime::firewall::EGRESS_PORTS;

/// How often the guard's view of members and host addresses is refreshed.
const GUARD_REFRESH: Duration = Duration::from_secs(5);

struct NodeContext {
    state: AppState,
}

impl EgressContext for NodeContext {
    fn sandbox_at(&self, addr: IpAddr) -> Option<SandboxEgress> {
        self.state.mgr.egress_at(addr)
    }

    fn secret(&self, name: &str) -> Option<String> {
        let sealed = self
            .state
            .cluster
            .cluster
            .read(|s| s.secrets.get(name).map(|r| r.sealed.clone()))?;
        match self.state.cluster.secrets_key.open(name, &sealed) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(secret = name, error = %e, "a secret cannot be opened on this node");
                None
            }
        }
    }
}

/// Binds the proxy's port: `wanted`, else the first free one of `EGRESS_PORTS`.
pub async fn bind(wanted: Option<u16>) -> std::io::Result<tokio::net::TcpListener> {
    if let Some(p) = wanted {
        return tokio::net::TcpListener::bind(("0.0.0.0", p)).await;
    }
    let mut last = None;
    for p in EGRESS_PORTS {
        match tokio::net::TcpListener::bind(("0.0.0.0", p)).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port in the egress range")))
}

/// Starts the proxy on `listener` until `cancel`. `own_ports`: this node's API, peer and
/// metrics ports (never reachable through it); `allow_nets`: what the operator opened.
pub fn spawn(
    state: &AppState,
    listener: tokio::net::TcpListener,
    own_ports: Vec<u16>,
    allow_nets: Vec<ipnet::IpNet>,
    tls: ProxyTls,
    registry: &prometheus::Registry,
    cancel: CancellationToken,
) -> std::io::Result<(Arc<Proxy>, tokio::task::JoinHandle<()>)> {
    let port = listener.local_addr()?.port();
    let mut guard = Guard::new(allow_nets);
    guard.own_ports = own_ports;
    guard.own_ports.push(port);
    let metrics = ProxyMetrics::register(registry).ok();
    let proxy = Proxy::new(
        Arc::new(NodeContext {
            state: state.clone(),
        }),
        guard,
        tls,
        metrics,
    );
    let server = proxy.spawn(listener, cancel.clone());
    let (p, st) = (proxy.clone(), state.clone());
    let refresher = tokio::spawn(async move {
        loop {
            let members: Vec<SocketAddr> = st.cluster.cluster.read(|s| {
                s.nodes
                    .values()
                    .flat_map(|n| [n.api_addr.as_str(), n.peer_addr.as_str()])
                    .filter_map(|a| a.parse().ok())
                    .collect()
            });
            let local = warren_egress::guard::host_addrs();
            p.update_guard(|g| {
                g.members = members;
                g.local_addrs = local;
            });
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(GUARD_REFRESH) => {}
            }
        }
    });
    let task = tokio::spawn(async move {
        let _ = server.await;
        let _ = refresher.await;
    });
    tracing::info!(port, "egress proxy listening");
    Ok((proxy, task))
}
