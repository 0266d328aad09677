//! Putting the rules of `rules` in place with iptables and ip6tables, and checking that
//! they still are.

use super::rules::{plan, Family, Options, Place, Plan};
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

/// Installs every chain (atomically, per family) and keeps each jump first in its parent.
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
        for (parent, jump, place) in &p.jumps {
            match place {
                Place::First => keep_first(program, parent, jump)?,
                Place::Present => keep_present(program, parent, jump)?,
            }
        }
        if family == Family::V4 && !p.chains.iter().any(|(c, _)| c.starts_with("WARREN-PEERS-")) {
            remove_peers_chain(program, &opts.node_id);
        }
    }
    Ok(())
}

/// Takes away this node's chain of peers and its jump, if an earlier run made them (its
/// peers are all in the fixed ranges now).
pub fn remove_peers_chain(program: &Path, node_id: &str) {
    if node_id.is_empty() {
        return;
    }
    let chain = super::rules::peers_chain(node_id);
    if run(program, &["-w", "-S", &chain], None).is_err() {
        return;
    }
    for parent in ["DOCKER-USER", "FORWARD"] {
        let jump = ["-w", "-D", parent, "-i", "wrn+", "-j", chain.as_str()];
        while run(program, &jump, None).is_ok() {}
    }
    let _ = run(program, &["-w", "-F", &chain], None);
    let _ = run(program, &["-w", "-X", &chain], None);
}

/// Checks that every chain holds exactly its rules and every jump is first in its parent.
pub fn verify(tools: &Tools, opts: &Options) -> Result<(), FirewallError> {
    for family in families() {
        let p = effective_plan(tools, family, opts);
        let program = tools.of(family);
        for (chain, rules) in &p.chains {
            let listed = run(program, &["-w", "-S", chain], None)?;
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
        for (parent, jump, place) in &p.jumps {
            if *place == Place::Present {
                let mut check = vec!["-w", "-C", parent.as_str()];
                check.extend(jump.iter().map(String::as_str));
                if run(program, &check, None).is_err() {
                    return Err(FirewallError(format!(
                        "{} chain {parent} has no jump to {}",
                        program.display(),
                        jump.last().map(String::as_str).unwrap_or_default()
                    )));
                }
                continue;
            }
            if !sole_first(program, parent, jump)? {
                return Err(FirewallError(format!(
                    "{} chain {parent} does not start with the one jump to {}",
                    program.display(),
                    jump.last().map(String::as_str).unwrap_or_default()
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
        for (parent, _, _) in p.jumps.iter_mut() {
            if *parent == "DOCKER-USER" {
                *parent = "FORWARD".to_string();
            }
        }
        // The jumps kept in FORWARD beside Docker's hook are then the same rules: once.
        let mut seen = std::collections::HashSet::new();
        p.jumps
            .retain(|(parent, jump, _)| seen.insert((parent.clone(), jump.clone())));
    }
    p
}

fn format_jump(parent: &str, jump: &[String]) -> String {
    format!("-A {parent} {}", jump.join(" "))
}

/// Whether `jump` is the first rule of `parent`, and there only once.
fn sole_first(program: &Path, parent: &str, jump: &[String]) -> Result<bool, FirewallError> {
    let line = format_jump(parent, jump);
    let listed = run(program, &["-w", "-S", parent], None)?;
    let rules: Vec<&str> = listed.lines().filter(|l| l.starts_with("-A ")).collect();
    Ok(rules.first() == Some(&line.as_str()) && rules.iter().filter(|l| **l == line).count() == 1)
}

fn first_rule(program: &Path, parent: &str) -> Result<Option<String>, FirewallError> {
    Ok(run(program, &["-w", "-S", parent], None)?
        .lines()
        .find(|l| l.starts_with("-A "))
        .map(str::to_string))
}

/// Puts `jump` in `parent` when it is not there: second (the first is the jump kept first
/// there), so before Docker's own rules.
fn keep_present(program: &Path, parent: &str, jump: &[String]) -> Result<(), FirewallError> {
    let mut args = vec!["-w", "-C", parent];
    args.extend(jump.iter().map(String::as_str));
    if run(program, &args, None).is_ok() {
        return Ok(());
    }
    let at = if first_rule(program, parent)?.is_some() {
        "2"
    } else {
        "1"
    };
    let mut insert = vec!["-w", "-I", parent, at];
    insert.extend(jump.iter().map(String::as_str));
    run(program, &insert, None).map(|_| ())
}

/// Puts `jump` first in `parent`: inserted when missing, moved up when another rule (a
/// host firewall's ACCEPT, say) came before it.
fn keep_first(program: &Path, parent: &str, jump: &[String]) -> Result<(), FirewallError> {
    if sole_first(program, parent, jump)? {
        return Ok(());
    }
    let args = |op: &'static str| {
        let mut a = vec!["-w", op, parent];
        a.extend(jump.iter().map(String::as_str));
        a
    };
    // Every copy of it goes, then one at the top.
    while run(program, &args("-C"), None).is_ok() {
        run(program, &args("-D"), None)?;
    }
    let mut insert = vec!["-w", "-I", parent, "1"];
    insert.extend(jump.iter().map(String::as_str));
    run(program, &insert, None).map(|_| ())
}
