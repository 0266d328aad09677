//! Putting the rules of `rules` in place with iptables and ip6tables, and checking that
//! they still are.

use super::rules::{egress_chain, plan, Family, Jump, Options, Place, Plan, Table};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The programs the rules are installed with (the ones Docker uses: `iptables` and
/// `ip6tables` from `PATH` unless set), each with its `-restore` beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tools {
    pub iptables: PathBuf,
    pub ip6tables: PathBuf,
}

impl Default for Tools {
    fn default() -> Self {
        Tools {
            iptables: "iptables".into(),
            ip6tables: "ip6tables".into(),
        }
    }
}

impl Tools {
    fn of(&self, family: Family) -> &PathBuf {
        match family {
            Family::V4 => &self.iptables,
            Family::V6 => &self.ip6tables,
        }
    }
}

/// What could not be done, with the program's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FirewallError(pub String);

/// Whether this host has IPv6 at all (no IPv6, no IPv6 rules to keep).
fn has_ipv6() -> bool {
    std::path::Path::new("/proc/net/if_inet6").exists()
}

fn families() -> Vec<Family> {
    let mut f = vec![Family::V4];
    if has_ipv6() {
        f.push(Family::V6);
    }
    f
}

fn run(program: &Path, args: &[&str], stdin: Option<&str>) -> Result<String, FirewallError> {
    let shown = || format!("{} {}", program.display(), args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| FirewallError(format!("{}: {e}", shown())))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .map_err(|e| FirewallError(format!("{}: {e}", shown())))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| FirewallError(format!("{}: {e}", shown())))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(FirewallError(format!(
            "{} failed ({}): {}",
            shown(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The `-restore` program beside `program`.
fn restore_of(program: &Path) -> PathBuf {
    let mut name = program.as_os_str().to_owned();
    name.push("-restore");
    PathBuf::from(name)
}

/// Where the nodes of one machine take turns installing (`flock`): each iptables command
/// is atomic, a check-then-insert of two nodes at once is not.
const LOCK_FILE: &str = "/run/warren-firewall.lock";

/// Holds the machine's firewall lock until dropped.
struct Turn(std::fs::File);

impl Turn {
    fn take() -> Result<Turn, FirewallError> {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(LOCK_FILE)
            .map_err(|e| FirewallError(format!("{LOCK_FILE}: {e}")))?;
        // SAFETY: flock on a descriptor this process owns.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(FirewallError(format!(
                "{LOCK_FILE}: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Turn(f))
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        use std::os::fd::AsRawFd;
        // SAFETY: as in `take`.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// Installs every chain (atomically, per family) and keeps each jump in its place.
pub fn install(tools: &Tools, opts: &Options) -> Result<(), FirewallError> {
    let _turn = Turn::take()?;
    for family in families() {
        let p = effective_plan(tools, family, opts);
        let program = tools.of(family);
        run(
            &restore_of(program),
            &["-w", "--noflush"],
            Some(&p.restore_input()),
        )?;
        for j in &p.jumps {
            match j.place {
                Place::First => keep_first(program, j)?,
                Place::Present => keep_present(program, j)?,
            }
        }
        remove_legacy_forward_jump(program, &p);
        if family == Family::V4 {
            remove_legacy_peers_chain(program, &opts.node_id);
            if !p.chains.iter().any(|(t, _, _)| *t == Table::Nat) {
                remove_egress_chain(program, &opts.node_id);
            }
        }
    }
    Ok(())
}

/// Takes away a chain and every jump to it from `parents`, if there is such a chain.
fn remove_chain(program: &Path, table: Table, chain: &str, parents: &[&str], iface: &str) {
    let t = table.name();
    if run(program, &["-w", "-t", t, "-S", chain], None).is_err() {
        return;
    }
    for parent in parents {
        let jump = ["-w", "-t", t, "-D", parent, "-i", iface, "-j", chain];
        while run(program, &jump, None).is_ok() {}
    }
    let _ = run(program, &["-w", "-t", t, "-F", chain], None);
    let _ = run(program, &["-w", "-t", t, "-X", chain], None);
}

/// Takes away a node's nat chain and its jump (the node is gone for good, or runs without
/// a proxy now).
pub fn remove_egress_chain(program: &Path, node_id: &str) {
    if node_id.is_empty() {
        return;
    }
    let iface = format!("{}+", super::rules::bridge_prefix(node_id));
    remove_chain(
        program,
        Table::Nat,
        &egress_chain(node_id),
        &["PREROUTING"],
        &iface,
    );
}

/// Takes away the chain of cluster members an earlier version kept per node (everything
/// forwarded from a sandbox is dropped now, members included).
fn remove_legacy_peers_chain(program: &Path, node_id: &str) {
    if node_id.is_empty() {
        return;
    }
    let legacy = egress_chain(node_id).replace("WARREN-EGRESS-", "WARREN-PEERS-");
    remove_chain(
        program,
        Table::Filter,
        &legacy,
        &["DOCKER-USER", "FORWARD"],
        "wrn+",
    );
}

/// Takes away the jump an earlier version kept first in `filter`'s own FORWARD beside
/// Docker's hook, when the plan has it in the hook (the drop in `mangle` holds now).
fn remove_legacy_forward_jump(program: &Path, p: &Plan) {
    let Some(hooked) = p
        .jumps
        .iter()
        .find(|j| j.table == Table::Filter && j.parent == "DOCKER-USER")
    else {
        return;
    };
    let legacy = Jump {
        parent: "FORWARD".to_string(),
        ..hooked.clone()
    };
    while run(program, &jump_args(&legacy, "-D"), None).is_ok() {}
}

/// Checks that every chain holds exactly its rules and every jump is in its place.
pub fn verify(tools: &Tools, opts: &Options) -> Result<(), FirewallError> {
    for family in families() {
        let p = effective_plan(tools, family, opts);
        let program = tools.of(family);
        for (table, chain, rules) in &p.chains {
            let listed = run(program, &["-w", "-t", table.name(), "-S", chain], None)?;
            let have: Vec<&str> = listed.lines().filter(|l| l.starts_with("-A ")).collect();
            let want: Vec<String> = rules
                .iter()
                .map(|r| format!("-A {chain} {}", r.join(" ")))
                .collect();
            if have != want {
                return Err(FirewallError(format!(
                    "{} chain {chain} holds {} rules, not the {} expected",
                    program.display(),
                    have.len(),
                    want.len()
                )));
            }
        }
        for j in &p.jumps {
            let target = j.rule.last().map(String::as_str).unwrap_or_default();
            if j.place == Place::Present {
                if run(program, &jump_args(j, "-C"), None).is_err() {
                    return Err(FirewallError(format!(
                        "{} chain {} has no jump to {target}",
                        program.display(),
                        j.parent
                    )));
                }
                continue;
            }
            if !sole_first(program, j)? {
                return Err(FirewallError(format!(
                    "{} chain {} does not start with the one jump to {target}",
                    program.display(),
                    j.parent
                )));
            }
        }
    }
    Ok(())
}

/// The plan, with the IPv4 forward jump in `FORWARD` itself where Docker made no
/// `DOCKER-USER` chain (it runs with `--iptables=false`).
fn effective_plan(tools: &Tools, family: Family, opts: &Options) -> Plan {
    let mut p = plan(family, opts);
    if family == Family::V4 && run(&tools.iptables, &["-w", "-S", "DOCKER-USER"], None).is_err() {
        for j in p.jumps.iter_mut() {
            if j.parent == "DOCKER-USER" {
                j.parent = "FORWARD".to_string();
            }
        }
        // The jumps kept in FORWARD beside Docker's hook are then the same rules: once.
        let mut seen = std::collections::HashSet::new();
        p.jumps
            .retain(|j| seen.insert((j.table.name(), j.parent.clone(), j.rule.clone())));
    }
    p
}

/// `iptables -w -t TABLE OP PARENT RULE…` for `j`.
fn jump_args<'a>(j: &'a Jump, op: &'a str) -> Vec<&'a str> {
    let mut a = vec!["-w", "-t", j.table.name(), op, j.parent.as_str()];
    a.extend(j.rule.iter().map(String::as_str));
    a
}

/// The rules of `j`'s parent chain, as `iptables -S` lists them.
fn listed_rules(program: &Path, j: &Jump) -> Result<Vec<String>, FirewallError> {
    Ok(run(
        program,
        &["-w", "-t", j.table.name(), "-S", &j.parent],
        None,
    )?
    .lines()
    .filter(|l| l.starts_with("-A "))
    .map(str::to_string)
    .collect())
}

/// Whether `j` is the first rule of its parent, and there only once.
fn sole_first(program: &Path, j: &Jump) -> Result<bool, FirewallError> {
    let line = format!("-A {} {}", j.parent, j.rule.join(" "));
    let rules = listed_rules(program, j)?;
    Ok(rules.first() == Some(&line) && rules.iter().filter(|l| **l == line).count() == 1)
}

/// Puts `j` in its parent when it is not there: second (the first is the jump kept first
/// there), so before Docker's own rules.
fn keep_present(program: &Path, j: &Jump) -> Result<(), FirewallError> {
    if run(program, &jump_args(j, "-C"), None).is_ok() {
        return Ok(());
    }
    let at = if listed_rules(program, j)?.is_empty() {
        "1"
    } else {
        "2"
    };
    let mut insert = jump_args(j, "-I");
    insert.insert(5, at);
    run(program, &insert, None).map(|_| ())
}

/// Puts `j` first in its parent: inserted when missing, moved up when another rule (a
/// host firewall's ACCEPT, say) came before it.
fn keep_first(program: &Path, j: &Jump) -> Result<(), FirewallError> {
    if sole_first(program, j)? {
        return Ok(());
    }
    // Every copy of it goes, then one at the top.
    while run(program, &jump_args(j, "-C"), None).is_ok() {
        run(program, &jump_args(j, "-D"), None)?;
    }
    let mut insert = jump_args(j, "-I");
    insert.insert(5, "1");
    run(program, &insert, None).map(|_| ())
}
