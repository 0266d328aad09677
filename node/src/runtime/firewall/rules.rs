//! The sandbox firewall as data: the chains the node keeps in iptables and ip6tables, and
//! the jumps into them. Pure: installing and checking them is `firewall`'s work.
//!
//! Every sandbox bridge is named `wrn…`, and those of one node `wrn<4 hex of its id>…`
//! (`bridge_prefix`). The node's egress proxy is a sandbox's only way out:
//! - `WARREN-INPUT`, jumped to from `INPUT` for packets from a sandbox bridge to this host
//!   (any of its addresses: the API, the QUIC peer port, metrics, sshd, ...): only the
//!   egress proxies' ports (TCP for the proxy, UDP for its name server) are accepted,
//!   everything else is rejected.
//! - `WARREN-FORWARD`, in `mangle` jumped to first from its `FORWARD` (which Docker never
//!   touches), and in `filter` from `DOCKER-USER` (Docker's hook at the top of `FORWARD`),
//!   for packets a sandbox sends through this host: all dropped, whatever the destination (another sandbox, a private network, cloud
//!   metadata, another node, the public internet). Nothing leaves a sandbox but through
//!   the proxy.
//! - `WARREN-EGRESS-<8 hex of the node's id>` in the `nat` table, jumped to from
//!   `PREROUTING` for this node's bridges: TCP to ports 80 and 443 that ignores the proxy
//!   variables is redirected to the node's proxy (which reads the destination from the
//!   `Host` header or the TLS server name), and DNS (UDP 53, to any address) to the
//!   proxy's name server, which answers per policy. One chain per node, so that nodes on
//!   one machine (tests, `local-cluster`) each send their sandboxes to their own proxy.
//!
//! IPv6 is off inside sandboxes (`net.ipv6.conf.all.disable_ipv6`); the IPv6 chains drop and
//! reject everything from a sandbox bridge all the same, so a sandbox that got an IPv6
//! address anyway would reach nothing.

use sha2::Digest;

/// Interface-name prefix of every sandbox bridge.
pub const BRIDGE_PREFIX: &str = "wrn";
pub const CHAIN_INPUT: &str = "WARREN-INPUT";
pub const CHAIN_FORWARD: &str = "WARREN-FORWARD";

/// The ports on this host that sandboxes may connect to: those of egress proxies (one per
/// node on this host; each proxy serves only its own node's sandboxes), TCP for the proxy
/// and UDP for its name server.
pub const EGRESS_PORTS: std::ops::RangeInclusive<u16> = 47800..=47899;

/// Destination ports whose TCP is redirected to the proxy when it bypasses it.
pub const TRANSPARENT_PORTS: [u16; 2] = [80, 443];

/// IP version of a rule set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

/// What the rules depend on besides the fixed parts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Options {
    /// The node these are for (names its bridges and its nat chain).
    pub node_id: String,
    /// The node's egress proxy port (TCP proxy, UDP name server); None: nothing is
    /// redirected (everything from a sandbox is dropped or rejected).
    pub egress_port: Option<u16>,
}

/// One rule: its arguments after the chain name (`-A CHAIN …`).
pub type Rule = Vec<String>;

/// Where a jump into one of the node's chains must be in its parent chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The first rule: nothing a host firewall accepts gets past it.
    First,
    /// Anywhere (before Docker's own rules, which come after `DOCKER-USER`).
    Present,
}

/// A table of iptables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Filter,
    Nat,
    Mangle,
}

impl Table {
    pub fn name(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
            Table::Mangle => "mangle",
        }
    }
}

/// A jump from a built-in (or Docker's) chain into one of ours.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jump {
    pub table: Table,
    pub parent: String,
    pub rule: Rule,
    pub place: Place,
}

/// The whole rule set of one family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub family: Family,
    /// Table, chain name and its rules, in order.
    pub chains: Vec<(Table, String, Vec<Rule>)>,
    pub jumps: Vec<Jump>,
}

fn tag(node_id: &str, bytes: usize) -> String {
    hex::encode(&sha2::Sha256::digest(node_id.as_bytes())[..bytes])
}

/// The name prefix of a node's sandbox bridges: `wrn` and 4 hex of its id (8 more follow,
/// within the 15 characters of an interface name).
pub fn bridge_prefix(node_id: &str) -> String {
    format!("{BRIDGE_PREFIX}{}", tag(node_id, 2))
}

/// The name of a node's nat chain.
pub fn egress_chain(node_id: &str) -> String {
    format!("WARREN-EGRESS-{}", tag(node_id, 4))
}

fn rule(args: &[&str]) -> Rule {
    args.iter().map(|s| s.to_string()).collect()
}

/// As `iptables -S` prints a port match (`-m tcp` made explicit), so that a check can
/// compare the listing with the plan.
fn port_match(proto: &str, port: &str) -> Vec<String> {
    rule(&["-p", proto, "-m", proto, "--dport", port])
}

/// The rules for `family`.
pub fn plan(family: Family, opts: &Options) -> Plan {
    let bridges = format!("{BRIDGE_PREFIX}+");
    let mut input = Vec::new();
    let forward = vec![rule(&["-j", "DROP"])];
    match family {
        Family::V4 => {
            let range = format!("{}:{}", EGRESS_PORTS.start(), EGRESS_PORTS.end());
            for proto in ["tcp", "udp"] {
                let mut r = port_match(proto, &range);
                r.extend(rule(&["-j", "ACCEPT"]));
                input.push(r);
            }
            input.push(rule(&[
                "-j",
                "REJECT",
                "--reject-with",
                "icmp-port-unreachable",
            ]));
        }
        Family::V6 => {
            input.push(rule(&[
                "-j",
                "REJECT",
                "--reject-with",
                "icmp6-port-unreachable",
            ]));
        }
    }
    // Docker's hook in FORWARD; made here when Docker has not (IPv6).
    let forward_parent = match family {
        Family::V4 => "DOCKER-USER",
        Family::V6 => "FORWARD",
    };
    let jump = |table, parent: &str, rule: Rule, place| Jump {
        table,
        parent: parent.to_string(),
        rule,
        place,
    };
    let mut p = Plan {
        family,
        chains: vec![
            (Table::Filter, CHAIN_INPUT.to_string(), input),
            (Table::Filter, CHAIN_FORWARD.to_string(), forward.clone()),
            (Table::Mangle, CHAIN_FORWARD.to_string(), forward),
        ],
        jumps: vec![
            jump(
                Table::Filter,
                "INPUT",
                rule(&["-i", &bridges, "-j", CHAIN_INPUT]),
                Place::First,
            ),
            jump(
                Table::Filter,
                forward_parent,
                rule(&["-i", &bridges, "-j", CHAIN_FORWARD]),
                Place::First,
            ),
        ],
    };
    // The drop that holds whatever Docker does: `mangle`'s FORWARD, which every forwarded
    // packet passes before `filter`'s and which Docker never touches. In `filter`, Docker
    // deletes its jump into DOCKER-USER and inserts it again whenever anyone makes a
    // network, and puts each new network's ACCEPT rules at the top of FORWARD: in between,
    // a sandbox's packets passed (test `networks_made_by_docker_meanwhile_never_open_a_way_out`).
    p.jumps.push(jump(
        Table::Mangle,
        "FORWARD",
        rule(&["-i", &bridges, "-j", CHAIN_FORWARD]),
        Place::First,
    ));
    if let (Family::V4, Some(port), false) = (family, opts.egress_port, opts.node_id.is_empty()) {
        let chain = egress_chain(&opts.node_id);
        let to = port.to_string();
        let mut redirects: Vec<Rule> = TRANSPARENT_PORTS
            .iter()
            .map(|p| {
                let mut r = port_match("tcp", &p.to_string());
                r.extend(rule(&["-j", "REDIRECT", "--to-ports", &to]));
                r
            })
            .collect();
        let mut dns = port_match("udp", "53");
        dns.extend(rule(&["-j", "REDIRECT", "--to-ports", &to]));
        redirects.push(dns);
        let own = format!("{}+", bridge_prefix(&opts.node_id));
        p.jumps.push(jump(
            Table::Nat,
            "PREROUTING",
            rule(&["-i", &own, "-j", &chain]),
            Place::Present,
        ));
        p.chains.push((Table::Nat, chain, redirects));
    }
    p
}

impl Plan {
    /// The chains as `iptables-restore --noflush` input: declared, flushed and refilled in
    /// one transaction per table, so that no packet ever sees them half-written.
    pub fn restore_input(&self) -> String {
        let mut out = String::new();
        for table in [Table::Filter, Table::Mangle, Table::Nat] {
            let chains: Vec<_> = self.chains.iter().filter(|(t, _, _)| *t == table).collect();
            if chains.is_empty() {
                continue;
            }
            out.push_str(&format!("*{}\n", table.name()));
            for (_, chain, _) in &chains {
                out.push_str(&format!(":{chain} - [0:0]\n"));
            }
            for (_, chain, rules) in &chains {
                out.push_str(&format!("-F {chain}\n"));
                for r in rules.iter() {
                    out.push_str(&format!("-A {chain} {}\n", r.join(" ")));
                }
            }
            out.push_str("COMMIT\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_of<'a>(p: &'a Plan, name: &str) -> &'a Vec<Rule> {
        &p.chains.iter().find(|(_, c, _)| c == name).unwrap().2
    }

    fn opts() -> Options {
        Options {
            node_id: "n1".into(),
            egress_port: Some(47801),
        }
    }

    #[test]
    fn everything_a_sandbox_sends_through_the_host_is_dropped() {
        for family in [Family::V4, Family::V6] {
            let p = plan(family, &opts());
            assert_eq!(chain_of(&p, CHAIN_FORWARD), &vec![rule(&["-j", "DROP"])]);
        }
        // Jumped to first from mangle's FORWARD (which Docker never touches) and from
        // Docker's hook in filter.
        let p = plan(Family::V4, &opts());
        let parents: Vec<(&str, &str)> = p
            .jumps
            .iter()
            .filter(|j| j.rule.last().map(String::as_str) == Some(CHAIN_FORWARD))
            .inspect(|j| assert_eq!(j.place, Place::First))
            .map(|j| (j.table.name(), j.parent.as_str()))
            .collect();
        assert_eq!(
            parents,
            vec![("filter", "DOCKER-USER"), ("mangle", "FORWARD")]
        );
        let dropped: Vec<Table> = p
            .chains
            .iter()
            .filter(|(_, c, _)| c == CHAIN_FORWARD)
            .inspect(|(_, _, r)| assert_eq!(r, &vec![rule(&["-j", "DROP"])]))
            .map(|(t, _, _)| *t)
            .collect();
        assert_eq!(dropped, vec![Table::Filter, Table::Mangle]);
    }

    #[test]
    fn input_accepts_only_the_proxy_ports_and_rejects_the_rest() {
        let p = plan(Family::V4, &opts());
        let input = chain_of(&p, CHAIN_INPUT);
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
            rule(&[
                "-p",
                "udp",
                "-m",
                "udp",
                "--dport",
                "47800:47899",
                "-j",
                "ACCEPT"
            ])
        );
        assert_eq!(input.len(), 3);
        assert_eq!(input.last().unwrap()[1], "REJECT");
        let v6 = plan(Family::V6, &opts());
        assert_eq!(
            chain_of(&v6, CHAIN_INPUT).len(),
            1,
            "nothing is open over IPv6"
        );
        assert!(
            v6.chains.iter().all(|(t, _, _)| *t != Table::Nat),
            "nothing is redirected over IPv6"
        );
    }

    #[test]
    fn the_nodes_bridges_have_web_ports_and_dns_redirected_to_its_proxy() {
        let p = plan(Family::V4, &opts());
        let chain = egress_chain("n1");
        let nat = p.chains.iter().find(|(_, c, _)| *c == chain).unwrap();
        assert_eq!(nat.0, Table::Nat);
        assert_eq!(
            nat.2,
            vec![
                rule(&[
                    "-p",
                    "tcp",
                    "-m",
                    "tcp",
                    "--dport",
                    "80",
                    "-j",
                    "REDIRECT",
                    "--to-ports",
                    "47801"
                ]),
                rule(&[
                    "-p",
                    "tcp",
                    "-m",
                    "tcp",
                    "--dport",
                    "443",
                    "-j",
                    "REDIRECT",
                    "--to-ports",
                    "47801"
                ]),
                rule(&[
                    "-p",
                    "udp",
                    "-m",
                    "udp",
                    "--dport",
                    "53",
                    "-j",
                    "REDIRECT",
                    "--to-ports",
                    "47801"
                ]),
            ]
        );
        let j = p.jumps.iter().find(|j| j.table == Table::Nat).unwrap();
        assert_eq!(j.parent, "PREROUTING");
        assert_eq!(
            j.rule,
            rule(&["-i", &format!("{}+", bridge_prefix("n1")), "-j", &chain])
        );
        // Another node's bridges go to its own proxy; the shared chains are the same.
        let other = plan(
            Family::V4,
            &Options {
                node_id: "n2".into(),
                egress_port: Some(47802),
            },
        );
        assert_ne!(bridge_prefix("n1"), bridge_prefix("n2"));
        assert_eq!(p.chains[..3], other.chains[..3]);
        // Without a proxy, nothing is redirected.
        let none = plan(
            Family::V4,
            &Options {
                node_id: "n1".into(),
                egress_port: None,
            },
        );
        assert!(none.chains.iter().all(|(t, _, _)| *t != Table::Nat));
        assert!(chain.len() <= 28, "iptables chain names are short");
        assert_eq!(
            bridge_prefix("n1").len() + 8,
            15,
            "interface names are short"
        );
    }

    #[test]
    fn restore_input_declares_flushes_and_commits_each_table() {
        let text = plan(Family::V4, &opts()).restore_input();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "*filter");
        assert_eq!(lines[1], ":WARREN-INPUT - [0:0]");
        assert_eq!(lines[3], "-F WARREN-INPUT");
        assert!(lines.contains(&"-A WARREN-FORWARD -j DROP"));
        let mangle = lines.iter().position(|l| *l == "*mangle").unwrap();
        assert_eq!(lines[mangle - 1], "COMMIT");
        assert_eq!(lines[mangle + 1], ":WARREN-FORWARD - [0:0]");
        let nat = lines.iter().position(|l| *l == "*nat").unwrap();
        assert_eq!(lines[nat - 1], "COMMIT");
        assert_eq!(lines[nat + 1], format!(":{} - [0:0]", egress_chain("n1")));
        assert_eq!(*lines.last().unwrap(), "COMMIT");
    }
}
