//! The sandbox firewall as data: the chains the node keeps in iptables and ip6tables, and
//! the jumps into them. Pure: installing and checking them is `firewall`'s work.
//!
//! Every sandbox bridge is named `wrn…`. Two chains of the node's own hold every rule:
//! - `WARREN-INPUT`, jumped to from `INPUT` for packets from a sandbox bridge to this host
//!   (any of its addresses: the API, the QUIC peer port, metrics, sshd, ...): only the
//!   ports the node opens on purpose (its egress proxy) are accepted, everything else is
//!   rejected.
//! - `WARREN-FORWARD`, jumped to from `DOCKER-USER` (Docker's hook at the top of
//!   `FORWARD`) for packets a sandbox sends through this host: dropped toward any other
//!   sandbox bridge, every range that is not the public internet (private, loopback,
//!   link-local, CGNAT, multicast, reserved, documentation) and the cloud metadata addresses
//!   that sit in public space. What is left (the public internet) goes on to Docker's own
//!   rules.
//! - `WARREN-PEERS-<8 hex of the node's id>`, jumped to from `DOCKER-USER` as well: this
//!   node's cluster members on public addresses, dropped. One chain per node, so that nodes
//!   of different clusters on one machine (tests, `local-cluster`) each keep their own
//!   members out without undoing the others'; the two shared chains are the same for
//!   every node.
//!
//! IPv6 is off inside sandboxes (`net.ipv6.conf.all.disable_ipv6`); the IPv6 chains drop and
//! reject everything from a sandbox bridge all the same, so a sandbox that got an IPv6
//! address anyway would reach nothing.

use std::net::IpAddr;

/// Interface-name prefix of every sandbox bridge.
pub const BRIDGE_PREFIX: &str = "wrn";
pub const CHAIN_INPUT: &str = "WARREN-INPUT";
pub const CHAIN_FORWARD: &str = "WARREN-FORWARD";

/// The TCP ports on this host that sandboxes may connect to: those of egress proxies (one
/// per node on this host; each proxy serves only its own node's sandboxes).
pub const EGRESS_PORTS: std::ops::RangeInclusive<u16> = 47800..=47899;

/// IPv4 destinations a sandbox never reaches: every special-purpose range of RFC 6890 and
/// its successors (none of them is the public internet), and the metadata services of
/// clouds that answer on public addresses.
pub const DENIED_V4: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    // CGNAT; also Alibaba Cloud's metadata service, 100.100.100.200.
    "100.64.0.0/10",
    "127.0.0.0/8",
    // Link-local; the metadata service of AWS, GCP, Azure, OpenStack: 169.254.169.254.
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
    // Azure's wire server (metadata and agent traffic) on a public address.
    "168.63.129.16/32",
];

/// IP version of a rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// What the rules depend on besides the fixed ranges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The node these are for (names its chain of peers).
    pub node_id: String,
    /// TCP ports on this host a sandbox may connect to (the egress proxy's).
    pub open_ports: Vec<u16>,
    /// Addresses of the cluster's nodes (a node on a public address is still no target).
    /// Only those outside the fixed ranges make rules of their own, so that nodes of
    /// different clusters on one machine (tests, `local-cluster`, all on loopback) keep the
    /// same rules.
    pub peers: Vec<IpAddr>,
}

impl Options {
    /// With `addrs` (as `host:port` or bare IPs; names that are not addresses are skipped)
    /// as the cluster's node addresses, sorted and without duplicates.
    pub fn with_peers<'a>(mut self, addrs: impl IntoIterator<Item = &'a str>) -> Options {
        let mut peers: Vec<IpAddr> = addrs
            .into_iter()
            .filter_map(|a| {
                a.parse::<std::net::SocketAddr>()
                    .map(|s| s.ip())
                    .or_else(|_| a.parse::<IpAddr>())
                    .ok()
            })
            .filter(|ip| !covered_v4(ip))
            .collect();
        peers.sort();
        peers.dedup();
        self.peers = peers;
        self
    }
}

/// Whether an address falls in a range `DENIED_V4` drops anyway.
fn covered_v4(ip: &IpAddr) -> bool {
    let IpAddr::V4(v4) = ip else { return false };
    DENIED_V4.iter().any(|range| {
        let (base, bits) = range.split_once('/').expect("ranges are CIDRs");
        let base: std::net::Ipv4Addr = base.parse().expect("ranges are IPv4");
        let bits: u32 = bits.parse().expect("prefix lengths are numbers");
        let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
        u32::from(*v4) & mask == u32::from(base) & mask
    })
}

/// One rule: its arguments after the chain name (`-A CHAIN …`).
pub type Rule = Vec<String>;

/// Where a jump into one of the node's chains must be in its parent chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The first rule: nothing a host firewall accepts gets past it.
    First,
    /// Anywhere (before Docker's own rules, which come after `DOCKER-USER`): a chain that
    /// only drops.
    Present,
}

/// The whole rule set of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub family: Family,
    /// Chain name and its rules, in order.
    pub chains: Vec<(String, Vec<Rule>)>,
    /// Built-in (or Docker's) chain, the rule that jumps from it into ours, and where.
    pub jumps: Vec<(String, Rule, Place)>,
}

/// The name of a node's chain of peers.
pub fn peers_chain(node_id: &str) -> String {
    use sha2::Digest;
    format!(
        "WARREN-PEERS-{}",
        hex::encode(&sha2::Sha256::digest(node_id.as_bytes())[..4])
    )
}

fn rule(args: &[&str]) -> Rule {
    args.iter().map(|s| s.to_string()).collect()
}

/// The rules for `family`.
pub fn plan(family: Family, opts: &Options) -> Plan {
    let bridges = format!("{BRIDGE_PREFIX}+");
    let mut input = Vec::new();
    let mut forward = vec![rule(&["-o", &bridges, "-j", "DROP"])];
    match family {
        Family::V4 => {
            let range = format!("{}:{}", EGRESS_PORTS.start(), EGRESS_PORTS.end());
            input.push(rule(&[
                "-p", "tcp", "-m", "tcp", "--dport", &range, "-j", "ACCEPT",
            ]));
            for port in &opts.open_ports {
                // As `iptables -S` prints it (`-m tcp` made explicit), so that a check can
                // compare the listing with this.
                input.push(rule(&[
                    "-p",
                    "tcp",
                    "-m",
                    "tcp",
                    "--dport",
                    &port.to_string(),
                    "-j",
                    "ACCEPT",
                ]));
            }
            input.push(rule(&[
                "-j",
                "REJECT",
                "--reject-with",
                "icmp-port-unreachable",
            ]));
            for range in DENIED_V4 {
                forward.push(rule(&["-d", range, "-j", "DROP"]));
            }
            forward.push(rule(&["-j", "RETURN"]));
        }
        Family::V6 => {
            input.push(rule(&[
                "-j",
                "REJECT",
                "--reject-with",
                "icmp6-port-unreachable",
            ]));
            forward.push(rule(&["-j", "DROP"]));
        }
    }
    // Docker's hook in FORWARD; made here when Docker has not (IPv6).
    let forward_parent = match family {
        Family::V4 => "DOCKER-USER",
        Family::V6 => "FORWARD",
    };
    let mut p = Plan {
        family,
        chains: vec![
            (CHAIN_INPUT.to_string(), input),
            (CHAIN_FORWARD.to_string(), forward),
        ],
        jumps: vec![
            (
                "INPUT".to_string(),
                rule(&["-i", &bridges, "-j", CHAIN_INPUT]),
                Place::First,
            ),
            (
                forward_parent.to_string(),
                rule(&["-i", &bridges, "-j", CHAIN_FORWARD]),
                Place::First,
            ),
        ],
    };
    if family == Family::V4 {
        // Also first in FORWARD itself: Docker moves its jump into DOCKER-USER to the top of
        // FORWARD by deleting and inserting it again whenever it makes a network (for that
        // moment nothing in DOCKER-USER is seen), and networks made at once can leave a
        // network's ACCEPT rules above that jump.
        p.jumps.push((
            "FORWARD".to_string(),
            rule(&["-i", &bridges, "-j", CHAIN_FORWARD]),
            Place::First,
        ));
    }
    // IPv6 forwarding drops everything already; a node whose peers are all in the fixed
    // ranges (loopback, private) needs no chain of its own.
    let v4_peers = opts.peers.iter().any(|p| p.is_ipv4());
    if family == Family::V4 && !opts.node_id.is_empty() && v4_peers {
        let chain = peers_chain(&opts.node_id);
        let drops = opts
            .peers
            .iter()
            .filter(|p| p.is_ipv4())
            .map(|peer| rule(&["-d", &format!("{peer}/32"), "-j", "DROP"]))
            .collect();
        for parent in [forward_parent, "FORWARD"] {
            p.jumps.push((
                parent.to_string(),
                rule(&["-i", &bridges, "-j", &chain]),
                Place::Present,
            ));
        }
        p.chains.push((chain, drops));
    }
    p
}

impl Plan {
    /// The chains as `iptables-restore --noflush` input: declared, flushed and refilled in
    /// one transaction, so that no packet ever sees them half-written.
    pub fn restore_input(&self) -> String {
        let mut out = String::from("*filter\n");
        for (chain, _) in &self.chains {
            out.push_str(&format!(":{chain} - [0:0]\n"));
        }
        for (chain, rules) in &self.chains {
            out.push_str(&format!("-F {chain}\n"));
            for r in rules {
                out.push_str(&format!("-A {chain} {}\n", r.join(" ")));
            }
        }
        out.push_str("COMMIT\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_of<'a>(p: &'a Plan, name: &str) -> &'a Vec<Rule> {
        &p.chains.iter().find(|(c, _)| c == name).unwrap().1
    }

    fn forward_of(p: &Plan) -> &Vec<Rule> {
        &p.chains.iter().find(|(c, _)| c == CHAIN_FORWARD).unwrap().1
    }

    #[test]
    fn v4_drops_every_non_public_range_and_metadata_then_returns() {
        let p = plan(Family::V4, &Options::default());
        let fwd = forward_of(&p);
        assert_eq!(fwd.first().unwrap(), &rule(&["-o", "wrn+", "-j", "DROP"]));
        assert_eq!(fwd.last().unwrap(), &rule(&["-j", "RETURN"]));
        let denied: Vec<&str> = fwd
            .iter()
            .filter(|r| r[0] == "-d")
            .map(|r| r[1].as_str())
            .collect();
        for must in [
            "10.0.0.0/8",
            "172.16.0.0/12",
            "192.168.0.0/16",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "100.64.0.0/10",
            "168.63.129.16/32",
        ] {
            assert!(denied.contains(&must), "{must}");
        }
        // Every metadata address of the issue falls in a denied range.
        for addr in ["169.254.169.254", "100.100.100.200", "168.63.129.16"] {
            let a: std::net::Ipv4Addr = addr.parse().unwrap();
            assert!(
                DENIED_V4.iter().any(|r| in_range(a, r)),
                "{addr} is reachable"
            );
        }
        // A public address is not.
        assert!(!DENIED_V4
            .iter()
            .any(|r| in_range("1.1.1.1".parse().unwrap(), r)));
    }

    #[test]
    fn input_accepts_only_the_open_ports_and_rejects_the_rest() {
        let opts = Options {
            node_id: "n1".into(),
            open_ports: vec![3128],
            peers: vec!["203.0.114.7".parse().unwrap(), "fd00::1".parse().unwrap()],
        };
        let p = plan(Family::V4, &opts);
        let input = &p.chains[0].1;
        assert_eq!(
            input[0],
            rule(&[
                "-p",
                "tcp",
                "-m",
                "tcp",
                "--dport",
                "47800:47899",
                "-j",
                "ACCEPT"
            ])
        );
        assert_eq!(
            input[1],
            rule(&["-p", "tcp", "-m", "tcp", "--dport", "3128", "-j", "ACCEPT"])
        );
        assert_eq!(input.len(), 3);
        assert_eq!(input.last().unwrap()[1], "REJECT");
        let peers = chain_of(&p, &peers_chain("n1"));
        assert_eq!(peers, &vec![rule(&["-d", "203.0.114.7/32", "-j", "DROP"])]);
        let v6 = plan(Family::V6, &opts);
        assert_eq!(v6.chains[0].1.len(), 1, "no port is open over IPv6");
        assert_eq!(forward_of(&v6).last().unwrap(), &rule(&["-j", "DROP"]));
        assert_eq!(v6.jumps[1].0, "FORWARD");
        assert_eq!(v6.chains.len(), 2, "no chain of peers over IPv6");
    }

    #[test]
    fn only_public_node_addresses_make_rules_of_their_own() {
        let base = Options {
            node_id: "n1".into(),
            ..Default::default()
        };
        let o = base.with_peers([
            "127.0.0.10:7070",
            "10.0.4.2:7400",
            "11.22.33.44:7400",
            "11.22.33.44:7070",
            "node-3.example:7400",
            "[2001:db8::7]:7400",
        ]);
        assert_eq!(
            o.peers,
            vec![
                "11.22.33.44".parse::<IpAddr>().unwrap(),
                "2001:db8::7".parse().unwrap()
            ]
        );
        let p = plan(Family::V4, &o);
        let peers = chain_of(&p, &peers_chain("n1"));
        assert_eq!(peers, &vec![rule(&["-d", "11.22.33.44/32", "-j", "DROP"])]);
        // The shared chains are the same whatever the node's peers.
        let other = plan(Family::V4, &Options::default());
        assert_eq!(p.chains[..2], other.chains[..2]);
        // Without public peers, no chain of its own at all.
        let local = plan(
            Family::V4,
            &Options {
                node_id: "n1".into(),
                ..Default::default()
            },
        );
        assert_eq!(local.chains.len(), 2);
        assert_eq!(local.jumps.len(), 3);
        // Both forward chains are jumped to from FORWARD itself too, not only from Docker's
        // hook (which Docker takes out and puts back whenever it makes a network).
        let from_forward: Vec<&str> = p
            .jumps
            .iter()
            .filter(|(parent, _, _)| parent == "FORWARD")
            .map(|(_, j, _)| j.last().unwrap().as_str())
            .collect();
        assert_eq!(
            from_forward,
            vec![CHAIN_FORWARD, peers_chain("n1").as_str()]
        );
        // The shared chain first of all there: above any rule Docker puts at the top.
        assert!(p.jumps.iter().any(|(parent, j, place)| parent == "FORWARD"
            && j.last().map(String::as_str) == Some(CHAIN_FORWARD)
            && *place == Place::First));
        assert!(
            peers_chain("n1").len() <= 28,
            "iptables chain names are short"
        );
    }

    #[test]
    fn restore_input_declares_flushes_and_commits() {
        let text = plan(Family::V4, &Options::default()).restore_input();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "*filter");
        assert_eq!(lines[1], ":WARREN-INPUT - [0:0]");
        assert_eq!(lines[3], "-F WARREN-INPUT");
        assert_eq!(*lines.last().unwrap(), "COMMIT");
        assert!(lines.contains(&"-A WARREN-FORWARD -d 10.0.0.0/8 -j DROP"));
    }

    fn in_range(a: std::net::Ipv4Addr, range: &str) -> bool {
        let (base, bits) = range.split_once('/').unwrap();
        let base: std::net::Ipv4Addr = base.parse().unwrap();
        let bits: u32 = bits.parse().unwrap();
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits)
        };
        u32::from(a) & mask == u32::from(base) & mask
    }
}
