//! The node's egress proxy, assembled: sandboxes by address from the manager, secrets from
//! the cluster's state (opened with the secrets key only here, for the request that needs
//! them), and a guard that follows the cluster's members and this host's addresses.

use crate::state::AppState;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_consensus::state::secret_slot;
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

    fn secret(&self, sandbox: &str, name: &str) -> Option<String> {
        let (slot, sealed) = self.state.cluster.cluster.read(|s| {
            let tenant = s
                .placements
                .get(sandbox)
                .map_or(warren_api::keys::DEFAULT_TENANT, |p| p.tenant());
            let slot = secret_slot(tenant, name);
            let sealed = s.secrets.get(&slot).map(|r| r.sealed.clone());
            (slot, sealed)
        });
        match self.state.cluster.secrets_key.open(&slot, &sealed?) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(secret = name, error = %e, "a secret cannot be opened on this node");
                None
            }
        }
    }
}

/// What the proxy counted, for the meter: bytes both ways.
/// Weak: the proxy holds the node's state, which holds the meter that holds this; a strong
/// reference would keep all of them alive after the node stopped.
struct ProxyCounts(std::sync::Weak<Proxy>);

impl warren_node::usage::EgressCounts for ProxyCounts {
    fn bytes(&self, sandbox: &str) -> u64 {
        self.0.upgrade().map_or(0, |p| {
            let u = p.usage.get(sandbox);
            u.bytes_up + u.bytes_down
        })
    }
}

/// The proxy's sockets: TCP for the proxy, UDP on the same port for its name server.
pub struct Listeners {
    pub tcp: tokio::net::TcpListener,
    pub udp: tokio::net::UdpSocket,
}

impl Listeners {
    pub fn port(&self) -> std::io::Result<u16> {
        Ok(self.tcp.local_addr()?.port())
    }
}

/// Pure: every port of `EGRESS_PORTS` once, from the one `spread` picks, wrapping around.
pub fn scan_order(spread: u64) -> impl Iterator<Item = u16> {
    let (first, len) = (
        *EGRESS_PORTS.start(),
        EGRESS_PORTS.end() - EGRESS_PORTS.start() + 1,
    );
    let from = (spread % u64::from(len)) as u16;
    (0..len).map(move |i| first + (from + i) % len)
}

async fn bind_port(port: u16) -> std::io::Result<Listeners> {
    let tcp = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    let udp = tokio::net::UdpSocket::bind(("0.0.0.0", port)).await?;
    Ok(Listeners { tcp, udp })
}

/// Binds the proxy's port (TCP and UDP): `wanted`, else the first of `EGRESS_PORTS` free
/// for both, looking from a place in the range that `spread` picks (a node's own: nodes on
/// one host then look in different places, and one that starts while another restarts
/// rarely takes the port the other's containers were told).
pub async fn bind(wanted: Option<u16>, spread: u64) -> std::io::Result<Listeners> {
    if let Some(p) = wanted {
        return bind_port(p).await;
    }
    let mut last = None;
    for p in scan_order(spread) {
        match bind_port(p).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no port in the egress range")))
}

/// Starts the proxy and its name server on `listeners` until `cancel`. `own_ports`: this node's API, peer and
/// metrics ports (never reachable through it); `allow_nets`: what the operator opened.
pub fn spawn(
    state: &AppState,
    listeners: Listeners,
    own_ports: Vec<u16>,
    allow_nets: Vec<ipnet::IpNet>,
    tls: ProxyTls,
    registry: &prometheus::Registry,
    cancel: CancellationToken,
) -> std::io::Result<(Arc<Proxy>, tokio::task::JoinHandle<()>)> {
    let port = listeners.port()?;
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
    state
        .mgr
        .meter()
        .count_egress_with(Arc::new(ProxyCounts(Arc::downgrade(&proxy))));
    let server = proxy.spawn(listeners.tcp, cancel.clone());
    let dns = proxy.spawn_dns(listeners.udp, cancel.clone());
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
        let _ = dns.await;
        let _ = refresher.await;
    });
    tracing::info!(port, "egress proxy and name server listening");
    Ok((proxy, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_port_of_the_range_is_tried_once_from_the_spread_place() {
        for spread in [0u64, 1, 99, 100, 12_345, u64::MAX] {
            let order: Vec<u16> = scan_order(spread).collect();
            assert_eq!(order.len(), EGRESS_PORTS.len());
            assert_eq!(order[0], EGRESS_PORTS.start() + (spread % 100) as u16);
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, EGRESS_PORTS.collect::<Vec<u16>>(), "{spread}");
        }
    }
}
