//! Process trees from `/proc`: who descends from whom, and killing a whole tree.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: i32,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Parses `/proc/<pid>/stat`. The command name is in parentheses and may contain anything,
/// so fields are counted from the last `)`.
pub fn parse_stat(text: &str) -> Option<ProcInfo> {
    let pid: i32 = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) pgrp(2) session(3) ... starttime is field 22 overall,
    // index 19 here.
    Some(ProcInfo {
        pid,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        session: fields.get(3)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// Every process visible in `/proc`.
pub fn all_processes() -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let e = e.ok()?;
        let name = e.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        parse_stat(&text)
    })
    .collect()
}

/// The current time in the unit of [`ProcInfo::start_ticks`].
pub fn now_ticks() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_BOOTTIME is what /proc start times are measured against.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ts.tv_sec as u64 * hz + (ts.tv_nsec as u64 * hz) / 1_000_000_000
}

/// Which processes make up a tree.
#[derive(Debug, Clone, Copy)]
pub struct TreeSpec {
    pub root: i32,
    pub include_root: bool,
    /// Also every process in the session whose id is the root's pid (the root was started
    /// with setsid). Catches children that left the tree by double-forking, as long as they
    /// did not call setsid themselves, and still works once the root has exited.
    pub include_session: bool,
    /// Only processes started at or after this tick (the root itself excepted).
    pub started_since: Option<u64>,
}

/// The pids of the tree described by `spec` within `procs`.
pub fn tree(spec: TreeSpec, procs: &[ProcInfo]) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<&ProcInfo>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p);
    }
    let recent = |p: &ProcInfo| spec.started_since.is_none_or(|t| p.start_ticks >= t);
    let mut out: HashSet<i32> = HashSet::new();
    let mut stack = vec![spec.root];
    while let Some(pid) = stack.pop() {
        for c in children.get(&pid).into_iter().flatten() {
            if recent(c) && out.insert(c.pid) {
                stack.push(c.pid);
            }
        }
    }
    if spec.include_session && spec.root > 1 {
        for p in procs {
            if p.session == spec.root && p.pid != spec.root && recent(p) {
                out.insert(p.pid);
            }
        }
    }
    out.remove(&1);
    out.remove(&(std::process::id() as i32));
    if spec.include_root {
        out.insert(spec.root);
    } else {
        out.remove(&spec.root);
    }
    let mut v: Vec<i32> = out.into_iter().collect();
    v.sort_unstable();
    v
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: plain syscall; a vanished pid only gives ESRCH.
    unsafe { libc::kill(pid, sig) };
}

/// Sends `sig` to every process of the tree. The tree is frozen with SIGSTOP first so that no
/// member can fork a new child between our scan and our signal, then resumed so that handlers
/// for catchable signals run.
pub fn signal_tree(spec: TreeSpec, sig: i32) -> Vec<i32> {
    let mut hit: HashSet<i32> = HashSet::new();
    // Repeat: a process may have forked between the scan and the SIGSTOP.
    for _ in 0..8 {
        let pids = tree(spec, &all_processes());
        let new: Vec<i32> = pids.iter().copied().filter(|p| !hit.contains(p)).collect();
        if new.is_empty() {
            break;
        }
        for &p in &new {
            signal(p, libc::SIGSTOP);
        }
        hit.extend(new);
    }
    for &p in &hit {
        signal(p, sig);
    }
    if sig != libc::SIGKILL {
        for &p in &hit {
            signal(p, libc::SIGCONT);
        }
    }
    let mut v: Vec<i32> = hit.into_iter().collect();
    v.sort_unstable();
    v
}

/// SIGKILLs the tree until no member is left (bounded).
pub async fn kill_tree(spec: TreeSpec) {
    for _ in 0..20 {
        if signal_tree(spec, libc::SIGKILL).is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Whether a process is still alive (and not a zombie).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(text) => {
            let state = text
                .rfind(')')
                .and_then(|i| text[i + 1..].split_whitespace().next());
            !matches!(state, Some("Z") | Some("X") | None)
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32, session: i32, start: u64) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            pgrp: pid,
            session,
            start_ticks: start,
        }
    }

    #[test]
    fn parses_names_with_spaces_and_parens() {
        let line =
            "42 (my (odd) name) S 7 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 100 10";
        let info = parse_stat(line).unwrap();
        assert_eq!(
            info,
            ProcInfo {
                pid: 42,
                ppid: 7,
                pgrp: 42,
                session: 42,
                start_ticks: 12345
            }
        );
    }

    #[test]
    fn tree_follows_parents_and_session_and_start_time() {
        let procs = vec![
            p(10, 1, 10, 100),  // root (a shell)
            p(11, 10, 10, 50),  // old background job
            p(12, 10, 10, 200), // this call's command
            p(13, 12, 10, 210), // its child
            p(14, 1, 10, 220),  // double-forked daemon, same session (sid = root pid)
            p(15, 1, 15, 230),  // unrelated
        ];
        let all = TreeSpec {
            root: 10,
            include_root: false,
            include_session: true,
            started_since: None,
        };
        assert_eq!(tree(all, &procs), vec![11, 12, 13, 14]);
        let recent = TreeSpec {
            started_since: Some(150),
            include_root: true,
            ..all
        };
        assert_eq!(tree(recent, &procs), vec![10, 12, 13, 14]);
        let no_session = TreeSpec {
            include_session: false,
            ..all
        };
        assert_eq!(tree(no_session, &procs), vec![11, 12, 13]);
    }
}
