//! A running container's host name, changed from the host: a warm container is started
//! before anyone knows which sandbox it will be, and takes its sandbox's name when taken.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Sets the host name in the UTS namespace of process `pid` (the container's main process).
/// Needs root. The calling process keeps its own name: the namespace is entered by a thread
/// made for this alone, which ends right after.
pub fn set_hostname(pid: u32, name: &str) -> io::Result<()> {
    if name.is_empty() || name.len() > 64 {
        return Err(io::Error::other(format!("{name:?} is not a host name")));
    }
    let ns = File::open(format!("/proc/{pid}/ns/uts"))?;
    let name = name.as_bytes().to_vec();
    std::thread::Builder::new()
        .name("warren-uts".into())
        .spawn(move || -> io::Result<()> {
            // SAFETY: `ns` is an open namespace file; setns only changes this thread.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUTS) } != 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: the pointer and length describe `name`, which outlives the call.
            if unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) } != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        })?
        .join()
        .map_err(|_| io::Error::other("the host name thread panicked"))?
}

/// `hosts` (an `/etc/hosts` file's text) with every whole-word `old` name replaced by `new`.
pub fn rename_in_hosts(hosts: &str, old: &str, new: &str) -> String {
    let mut out = String::with_capacity(hosts.len());
    for line in hosts.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        let mut first = true;
        for field in body.split('\t') {
            if !first {
                out.push('\t');
            }
            first = false;
            let words: Vec<&str> = field
                .split(' ')
                .map(|w| if w == old { new } else { w })
                .collect();
            out.push_str(&words.join(" "));
        }
        out.push_str(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_entries_are_renamed_as_whole_words() {
        let hosts = "127.0.0.1\tlocalhost\n10.200.0.2\twarm-ab12\n10.200.0.3 warm-ab123 x\n";
        assert_eq!(
            rename_in_hosts(hosts, "warm-ab12", "my-box"),
            "127.0.0.1\tlocalhost\n10.200.0.2\tmy-box\n10.200.0.3 warm-ab123 x\n"
        );
        assert_eq!(rename_in_hosts("a b", "b", "c"), "a c");
    }

    #[test]
    fn a_host_name_is_set_in_a_new_uts_namespace_only() {
        if !crate::runtime::running_as_root() {
            eprintln!("skipped: needs root (unshare, setns)");
            return;
        }
        let mine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        // A child in its own UTS namespace, waiting to be looked at.
        let mut child = std::process::Command::new("unshare")
            .args(["--uts", "sleep", "30"])
            .spawn()
            .unwrap();
        // unshare execs sleep in the new namespace: wait until it differs from ours.
        let me = std::fs::read_link("/proc/self/ns/uts").unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::fs::read_link(format!("/proc/{}/ns/uts", child.id())).ok() == Some(me.clone()) {
            assert!(std::time::Instant::now() < deadline, "unshare did not run");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        set_hostname(child.id(), "warren-uts-test").unwrap();
        let seen = std::process::Command::new("nsenter")
            .args(["-t", &child.id().to_string(), "--uts", "hostname"])
            .output()
            .unwrap();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            String::from_utf8_lossy(&seen.stdout).trim(),
            "warren-uts-test"
        );
        assert_eq!(
            std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
            mine,
            "the node's own host name is unchanged"
        );
        assert!(set_hostname(1, "").is_err());
    }
}
