//! Putting the rules of `rules` in place with iptables and ip6tables, and checking that
//! they still are.

use super::rules::{plan, Family, Options, Plan};
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

/// Installs every chain (atomically, per family) and keeps each jump first in its parent.
pub fn install(tools: &Tools, opts: &Options) -> Result<(), FirewallError> {
    for family in families() {
        let p = effective_plan(tools, family, opts);
        let program = tools.of(family);
        run(
            &restore_of(program),
            &["-w", "--noflush"],
            Some(&p.restore_input()),
        )?;
        for (parent, jump) in &p.jumps {
            keep_first(program, parent, jump)?;
        }
    }
    Ok(())
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
        for (parent, jump) in &p.jumps {
            if first_rule(program, parent)?.as_deref() != Some(&format_jump(parent, jump)) {
                return Err(FirewallError(format!(
                    "{} chain {parent} does not start with the jump to {}",
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
        for (parent, _) in p.jumps.iter_mut() {
            if *parent == "DOCKER-USER" {
                *parent = "FORWARD";
            }
        }
    }
    p
}

fn format_jump(parent: &str, jump: &[String]) -> String {
    format!("-A {parent} {}", jump.join(" "))
}

fn first_rule(program: &Path, parent: &str) -> Result<Option<String>, FirewallError> {
    Ok(run(program, &["-w", "-S", parent], None)?
        .lines()
        .find(|l| l.starts_with("-A "))
        .map(str::to_string))
}

/// Puts `jump` first in `parent`: inserted when missing, moved up when another rule (a
/// host firewall's ACCEPT, say) came before it.
fn keep_first(program: &Path, parent: &str, jump: &[String]) -> Result<(), FirewallError> {
    if first_rule(program, parent)?.as_deref() == Some(&format_jump(parent, jump)) {
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
