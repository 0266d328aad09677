//! Which addresses the proxy never connects to, whatever a sandbox's policy says: every
//! range that is not the public internet (loopback, private, link-local, CGNAT, metadata,
//! multicast, reserved, documentation) unless the operator lists its network
//! (`--egress-allow-net`), and the node's own endpoints (its API, peer, metrics and proxy
//! ports on any of this host's addresses, and every cluster member's API and peer
//! addresses) even then. Checked on the address the proxy is about to connect to, after
//! resolution, so that a name resolving to a private address (DNS rebinding) gets nowhere.

use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use warren_api::egress::host::canonical;

/// Ranges outside the public internet (IANA special-purpose registries), and metadata
/// services that answer on public addresses.
const SPECIAL: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "168.63.129.16/32",
    "::/128",
    "::1/128",
    "64:ff9b::/96",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/23",
    "2001:db8::/32",
    "2002::/16",
    "fc00::/7",
    "fe80::/10",
    "ff00::/8",
    "fd00:ec2::254/128",
];

/// The fixed rules and what the node adds at run time.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    special: Vec<IpNet>,
    /// Networks the operator opened (`--egress-allow-net`).
    pub allow_nets: Vec<IpNet>,
    /// Ports of this node's own servers: refused on every address of this host.
    pub own_ports: Vec<u16>,
    /// The cluster's API and peer endpoints: refused wherever they are.
    pub members: Vec<SocketAddr>,
    /// This host's own addresses (its interfaces).
    pub local_addrs: Vec<IpAddr>,
}

impl Guard {
    pub fn new(allow_nets: Vec<IpNet>) -> Guard {
        Guard {
            special: SPECIAL
                .iter()
                .map(|s| s.parse().expect("special ranges are CIDRs"))
                .collect(),
            allow_nets,
            ..Default::default()
        }
    }

    /// Why the proxy must not connect to `to`, if it must not.
    pub fn refuse(&self, to: SocketAddr) -> Option<String> {
        let ip = canonical(to.ip());
        let to = SocketAddr::new(ip, to.port());
        let local = ip.is_loopback() || ip.is_unspecified() || self.local_addrs.contains(&ip);
        if local && self.own_ports.contains(&to.port()) {
            return Some(format!("{to} is this node's own endpoint"));
        }
        if self
            .members
            .iter()
            .any(|m| canonical(m.ip()) == ip && m.port() == to.port())
        {
            return Some(format!("{to} is an endpoint of a cluster node"));
        }
        if self.allow_nets.iter().any(|n| n.contains(&ip)) {
            return None;
        }
        if let Some(n) = self.special.iter().find(|n| n.contains(&ip)) {
            return Some(format!(
                "{ip} is in {n}, which is not the public internet (the operator can open it with --egress-allow-net)"
            ));
        }
        if self.local_addrs.contains(&ip) {
            return Some(format!("{ip} is an address of this node"));
        }
        None
    }
}

/// The addresses of this host's interfaces.
pub fn host_addrs() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that freeifaddrs releases; the list is
    // only read in between.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return out;
        }
        let mut cur = head;
        while !cur.is_null() {
            let addr = (*cur).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let sin = &*(addr as *const libc::sockaddr_in);
                        out.push(IpAddr::from(
                            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
                        ));
                    }
                    libc::AF_INET6 => {
                        let sin6 = &*(addr as *const libc::sockaddr_in6);
                        out.push(IpAddr::from(sin6.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            cur = (*cur).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_ranges_are_refused_and_the_public_internet_is_not() {
        let g = Guard::new(vec![]);
        for bad in [
            "127.0.0.1:80",
            "10.2.3.4:443",
            "169.254.169.254:80",
            "100.100.100.200:80",
            "192.168.1.1:80",
            "[::1]:80",
            "[::ffff:127.0.0.1]:80",
            "[fd00::1]:80",
            "[fe80::1]:80",
            "0.0.0.0:80",
        ] {
            assert!(g.refuse(sa(bad)).is_some(), "{bad}");
        }
        for ok in ["1.1.1.1:443", "[2606:4700::1111]:443"] {
            assert_eq!(g.refuse(sa(ok)), None, "{ok}");
        }
    }

    #[test]
    fn an_opened_network_is_reachable_but_never_the_nodes_own_endpoints() {
        let mut g = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        g.own_ports = vec![7000];
        g.members = vec![sa("127.0.0.9:7100")];
        g.local_addrs = vec!["203.0.113.5".parse().unwrap()];
        assert_eq!(g.refuse(sa("127.0.0.1:8080")), None);
        assert!(g.refuse(sa("127.0.0.1:7000")).is_some());
        assert!(g.refuse(sa("127.0.0.2:7000")).is_some());
        assert!(g.refuse(sa("[::ffff:127.0.0.1]:7000")).is_some());
        assert!(g.refuse(sa("203.0.113.5:7000")).is_some());
        assert!(g.refuse(sa("127.0.0.9:7100")).is_some());
        assert_eq!(g.refuse(sa("127.0.0.9:7101")), None);
    }

    #[test]
    fn this_hosts_addresses_are_found() {
        assert!(host_addrs().iter().any(|a| a.is_loopback()));
    }
}
