//! Network faults between the nodes of a test cluster: every node talks to its peers over
//! one QUIC endpoint (one UDP port, for the connections it accepts and those it opens), so
//! dropping the datagrams between two nodes' peer ports on loopback cuts them apart while
//! clients still reach every node's API. The rules live in a chain of the test's own,
//! jumped to from OUTPUT, and go when the cluster does.

use std::process::Command;

pub struct Faults {
    chain: String,
}

fn iptables(args: &[&str]) -> bool {
    Command::new("iptables")
        .args(["-w", "5"])
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

impl Faults {
    /// Creates the test's chain (`prefix` names the cluster).
    pub fn new(prefix: &str) -> Faults {
        let chain = format!("WT-{prefix}");
        assert!(
            iptables(&["-N", &chain]),
            "cannot create iptables chain {chain}"
        );
        assert!(
            iptables(&["-I", "OUTPUT", "1", "-o", "lo", "-p", "udp", "-j", &chain]),
            "cannot jump to {chain}"
        );
        Faults { chain }
    }

    /// Drops every datagram from peer port `from` to peer port `to` (one way).
    pub fn drop_one_way(&self, from: u16, to: u16) {
        let (from, to) = (from.to_string(), to.to_string());
        assert!(iptables(&[
            "-A",
            &self.chain,
            "-p",
            "udp",
            "--sport",
            &from,
            "--dport",
            &to,
            "-j",
            "DROP"
        ]));
    }

    /// Removes every fault.
    pub fn heal(&self) {
        assert!(iptables(&["-F", &self.chain]));
    }
}

impl Drop for Faults {
    fn drop(&mut self) {
        iptables(&["-D", "OUTPUT", "-o", "lo", "-p", "udp", "-j", &self.chain]);
        iptables(&["-F", &self.chain]);
        iptables(&["-X", &self.chain]);
    }
}
