//! Limits the kernel counts per user: inotify instances and watches, and keys (each
//! container's session keyring; see `ensure_host_budget`), and the host's process ids. In a user namespace
//! they are counted at every level up to the host, and at the host's level every
//! container's namespace counts as its creator's, root's: without a limit of its own, one
//! sandbox holding 128 inotify instances leaves none for any other sandbox, nor for the
//! host's own root (systemd, dockerd). So each sandbox's namespace gets a budget of its
//! own (`apply`), and the host's root a budget that all of them fit in
//! (`ensure_host_budget`).
//!
//! The sandbox's root cannot raise its own: writing its namespace's `/proc/sys/user/*`
//! takes `CAP_SYS_RESOURCE` there, which sandboxes do not have.

use std::ffi::CString;
use std::io;
use std::os::fd::AsRawFd;

/// A sandbox's budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsernsLimits {
    pub inotify_instances: u64,
    pub inotify_watches: u64,
}

/// What every sandbox gets: the instances most distributions give a user, and the watches
/// an editor or a dev server watching a large tree needs.
pub const SANDBOX_LIMITS: UsernsLimits = UsernsLimits {
    inotify_instances: 128,
    inotify_watches: 65536,
};

/// Sets `limits` in the user namespace of process `pid` (a container's main process). A
/// forked child of this process joins that namespace, where the host's root holds every
/// capability, writes the namespace's `/proc/sys/user` files and exits; nothing is exec'd.
pub fn apply(pid: u32, limits: &UsernsLimits) -> io::Result<()> {
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    let writes: Vec<(CString, CString)> = [
        ("max_inotify_instances", limits.inotify_instances),
        ("max_inotify_watches", limits.inotify_watches),
    ]
    .into_iter()
    .map(|(name, value)| {
        (
            CString::new(format!("/proc/sys/user/{name}")).expect("no NUL"),
            CString::new(value.to_string()).expect("no NUL"),
        )
    })
    .collect();
    // SAFETY: the child only makes system calls on memory prepared before the fork
    // (async-signal-safe, as a child of a multi-threaded process must), then _exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io::Error::last_os_error());
    }
    if child == 0 {
        let code = match write_in_namespace(ns.as_raw_fd(), &writes) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(1).clamp(1, 255),
        };
        // SAFETY: ends the forked child without running any of the parent's exit code.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    if unsafe { libc::waitpid(child, &mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
        (true, 0) => Ok(()),
        (true, errno) => Err(io::Error::from_raw_os_error(errno)),
        _ => Err(io::Error::other("setting the sandbox's limits failed")),
    }
}

fn write_in_namespace(ns: libc::c_int, writes: &[(CString, CString)]) -> io::Result<()> {
    // SAFETY: plain system calls on a descriptor and NUL-terminated strings that outlive
    // them.
    unsafe {
        if libc::setns(ns, libc::CLONE_NEWUSER) != 0 {
            return Err(io::Error::last_os_error());
        }
        for (path, value) in writes {
            let f = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if f < 0 {
                return Err(io::Error::last_os_error());
            }
            let bytes = value.as_bytes();
            let n = libc::write(f, bytes.as_ptr().cast(), bytes.len());
            libc::close(f);
            if n != bytes.len() as isize {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// Keys a sandbox holds in the kernel's keyring quota: runc gives each container a session
/// keyring, owned by the user its root maps to — one user for every sandbox of the node.
/// Beyond the default quota (200 keys) no container starts ("unable to create session key:
/// disk quota exceeded"); seen at about 200 sandboxes on one node here.
const KEYS_PER_SANDBOX: u64 = 4;
/// Bytes of key payload and descriptions per key the default quota allows (20000 / 200).
const KEY_BYTES_PER_KEY: u64 = 100;

/// Process ids a sandbox takes from the host's `kernel.pid_max` beside what it runs itself:
/// measured with 1,755 sandboxes on this host's Docker, each had a containerd shim of ~11
/// threads, a guest agent of 4 and its init; twice that leaves room for its own processes.
pub const PIDS_PER_SANDBOX: u64 = 32;
/// The kernel's default `pid_max` (what the host's own processes had before sandboxes).
const HOST_PIDS: u64 = 32_768;
/// The largest `pid_max` the kernel takes (`PID_MAX_LIMIT` on 64-bit).
const PID_MAX_LIMIT: u64 = 4_194_304;

/// Raises the host's limits that every sandbox counts against — root's inotify limits, the
/// keyring quota of the user sandboxes' root maps to, and the host's process ids — so that
/// `sandboxes` full budgets fit beside the host's own use. Never lowers them. Returns what
/// it changed.
pub fn ensure_host_budget(sandboxes: u64) -> io::Result<Vec<String>> {
    let mut changed = Vec::new();
    // A host out of process ids starts no thread anywhere: guests, shims, dockerd and the
    // node itself fail ("Resource temporarily unavailable"); seen at ~1,750 sandboxes
    // under the default 32768.
    let pid_max = needed(PIDS_PER_SANDBOX, sandboxes, HOST_PIDS).min(PID_MAX_LIMIT);
    for (name, each, own) in [
        (
            "fs/inotify/max_user_instances",
            SANDBOX_LIMITS.inotify_instances,
            1024,
        ),
        (
            "fs/inotify/max_user_watches",
            SANDBOX_LIMITS.inotify_watches,
            1 << 20,
        ),
        ("kernel/keys/maxkeys", KEYS_PER_SANDBOX, 200),
        (
            "kernel/keys/maxbytes",
            KEYS_PER_SANDBOX * KEY_BYTES_PER_KEY,
            20_000,
        ),
        ("kernel/pid_max", PIDS_PER_SANDBOX, HOST_PIDS),
    ] {
        let path = format!("/proc/sys/{name}");
        let now: u64 = std::fs::read_to_string(&path)?
            .trim()
            .parse()
            .map_err(io::Error::other)?;
        let needed = if name == "kernel/pid_max" {
            pid_max
        } else {
            needed(each, sandboxes, own)
        };
        if now < needed {
            std::fs::write(&path, needed.to_string())?;
            changed.push(format!("{} {now} -> {needed}", name.replace('/', ".")));
        }
    }
    Ok(changed)
}

/// What `sandboxes` budgets of `each` need beside the host's `own`, as a sysctl can hold.
fn needed(each: u64, sandboxes: u64, own: u64) -> u64 {
    each.saturating_mul(sandboxes)
        .saturating_add(own)
        .min(i32::MAX as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_process_ids_fit_every_sandbox_up_to_the_kernels_limit() {
        let pid_max = |sandboxes| needed(PIDS_PER_SANDBOX, sandboxes, HOST_PIDS).min(PID_MAX_LIMIT);
        assert_eq!(pid_max(0), 32_768);
        assert_eq!(pid_max(2000), 2000 * 32 + 32_768);
        assert_eq!(pid_max(1_000_000), 4_194_304, "the kernel takes no more");
    }

    #[test]
    fn limits_are_set_in_a_child_namespace_only() {
        use std::process::Command;
        if !crate::runtime::running_as_root() {
            eprintln!("skipped: needs root (unshare, setns)");
            return;
        }
        let mine = std::fs::read_to_string("/proc/sys/user/max_inotify_instances").unwrap();
        let mut child = Command::new("unshare")
            .args(["--user", "sleep", "30"])
            .spawn()
            .unwrap();
        let me = std::fs::read_link("/proc/self/ns/user").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_link(format!("/proc/{}/ns/user", child.id())).ok() == Some(me.clone()) {
            assert!(std::time::Instant::now() < deadline, "unshare did not run");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let limits = UsernsLimits {
            inotify_instances: 7,
            inotify_watches: 99,
        };
        apply(child.id(), &limits).unwrap();
        let seen = Command::new("nsenter")
            .args([
                "-t",
                &child.id().to_string(),
                "--user",
                "--preserve-credentials",
            ])
            .args([
                "cat",
                "/proc/sys/user/max_inotify_instances",
                "/proc/sys/user/max_inotify_watches",
            ])
            .output()
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(String::from_utf8_lossy(&seen.stdout), "7\n99\n");
        assert_eq!(
            std::fs::read_to_string("/proc/sys/user/max_inotify_instances").unwrap(),
            mine,
            "the host's own namespace is unchanged"
        );
    }
}
