//! Host firewall rules that keep sandboxes away from the host and from each other.
//!
//! Every sandbox bridge is named `wrn…`. Traffic entering the host from such a bridge is
//! rejected (no node API, no host services), traffic between two such bridges is dropped, and
//! link-local metadata addresses are unreachable. Internet egress (forwarded, masqueraded)
//! stays open. Rules are inserted once and are idempotent (`iptables -C` before `-I`).

use std::process::Command;

/// Interface-name prefix of every sandbox bridge.
pub const BRIDGE_PREFIX: &str = "wrn";

/// The rules, as iptables argument lists (chain first).
pub fn rules() -> Vec<Vec<String>> {
    let any = format!("{BRIDGE_PREFIX}+");
    let r = |args: &[&str]| args.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    vec![
        r(&[
            "INPUT",
            "-i",
            &any,
            "-j",
            "REJECT",
            "--reject-with",
            "icmp-port-unreachable",
        ]),
        r(&["DOCKER-USER", "-i", &any, "-o", &any, "-j", "DROP"]),
        r(&[
            "DOCKER-USER",
            "-i",
            &any,
            "-d",
            "169.254.0.0/16",
            "-j",
            "DROP",
        ]),
    ]
}

/// Installs the rules; returns a description of what failed, if anything.
pub fn install() -> Result<(), String> {
    let mut failures = Vec::new();
    for rule in rules() {
        let check = Command::new("iptables")
            .arg("-w")
            .arg("-C")
            .args(&rule)
            .output();
        match check {
            Ok(o) if o.status.success() => continue,
            Err(e) => return Err(format!("iptables is not available: {e}")),
            _ => {}
        }
        match Command::new("iptables")
            .arg("-w")
            .arg("-I")
            .args(&rule)
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => failures.push(format!(
                "{}: {}",
                rule.join(" "),
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Err(e) => failures.push(format!("{}: {e}", rule.join(" "))),
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}
