//! The egress proxy's side of a node's start: its port, fixed before any container is made
//! (containers are told it once, when they are made, and keep it across restarts of the
//! node), the upstream CAs it trusts and the private networks it may reach.

use crate::files::write_private;
use crate::settings::Settings;
use anyhow::Context;
use std::path::Path;
use warren_router::egress::Listeners;

/// The proxy's listeners and port: the configured port, else the one used before
/// (remembered in the data dir), else the first free one of its range from a place this
/// data dir picks.
pub async fn listen(s: &Settings, data_dir: &Path) -> anyhow::Result<(Listeners, u16)> {
    let port_file = data_dir.join("egress-port");
    let remembered = std::fs::read_to_string(&port_file)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok());
    let spread = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        data_dir.hash(&mut h);
        h.finish()
    };
    let listeners = match (s.egress_port, remembered) {
        (Some(p), _) => warren_router::egress::bind(Some(p), spread).await,
        (None, Some(p)) => match warren_router::egress::bind(Some(p), spread).await {
            Ok(l) => Ok(l),
            Err(e) => {
                tracing::warn!(port = p, error = %e, "the egress port used before is taken; containers made before point at it");
                warren_router::egress::bind(None, spread).await
            }
        },
        (None, None) => warren_router::egress::bind(None, spread).await,
    }
    .context("cannot listen for the egress proxy")?;
    let port = listeners.port()?;
    write_private(&port_file, &format!("{port}\n"))?;
    Ok((listeners, port))
}

/// Networks (CIDRs, or single addresses) the proxy may reach although they are not public.
pub fn allowed_nets(s: &Settings) -> anyhow::Result<Vec<ipnet::IpNet>> {
    s.egress_allow_nets
        .iter()
        .map(|n| {
            n.trim()
                .parse::<ipnet::IpNet>()
                .or_else(|_| n.trim().parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .with_context(|| format!("egress_allow_nets: {n:?} is not a CIDR"))
        })
        .collect()
}

/// The proxy's TLS: its interception CA from the cluster's secrets (`seed`), and the
/// upstream roots it trusts besides the public ones (`egress_ca_file`).
pub fn proxy_tls(s: &Settings, seed: [u8; 32]) -> anyhow::Result<warren_egress::ProxyTls> {
    let extra_roots = match &s.egress_ca_file {
        Some(f) => std::fs::read(f).with_context(|| format!("egress_ca_file {}", f.display()))?,
        None => Vec::new(),
    };
    warren_egress::ProxyTls::new(Some(seed), &extra_roots).map_err(anyhow::Error::msg)
}
