//! A sandbox container's `/etc/hosts` and `/etc/resolv.conf`, kept by the node. Docker
//! writes these only for containers it networks; a sandbox's container has no network of
//! Docker's at all (`NetworkDisabled`, the start path without Docker's network setup, see
//! `links`), so the node writes them in a directory of its own, one per container, and
//! mounts them in as Docker would (read-write: programs edit `/etc/hosts`). `hosts` names
//! the container's host name at 127.0.1.1 (Debian's way); `resolv.conf` names the host's
//! end of the container's link, written at each start (the firewall sends DNS from a
//! sandbox to the node's egress proxy whatever server it names).

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The label that names a container's directory here.
pub const LABEL_ETC: &str = "warren.etc";

/// `/etc/hosts` of a container whose host name is `hostname`.
pub fn hosts_text(hostname: &str) -> String {
    format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    )
}

/// `/etc/resolv.conf` naming `server`.
pub fn resolv_text(server: Ipv4Addr) -> String {
    format!("nameserver {server}\noptions ndots:0\n")
}

/// Whether `token` can name a directory here (what `EtcFiles::make` makes: hex).
fn is_token(token: &str) -> bool {
    !token.is_empty() && token.len() <= 32 && token.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The node's directory of these files.
#[derive(Debug, Clone)]
pub struct EtcFiles {
    dir: PathBuf,
}

/// One container's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcPaths {
    pub token: String,
    pub hosts: PathBuf,
    pub resolv: PathBuf,
}

impl EtcFiles {
    pub fn new(dir: PathBuf) -> Self {
        EtcFiles { dir }
    }

    /// The files of the container labelled `token` (an error for a label that is not one of
    /// the node's tokens: it never becomes a path).
    pub fn paths(&self, token: &str) -> std::io::Result<EtcPaths> {
        if !is_token(token) {
            return Err(std::io::Error::other(format!(
                "{token:?} is not a container files token"
            )));
        }
        let d = self.dir.join(token);
        Ok(EtcPaths {
            token: token.to_string(),
            hosts: d.join("hosts"),
            resolv: d.join("resolv.conf"),
        })
    }

    /// Makes a new container's files, its host name in `hosts` and no server yet, owned by
    /// `owner` (uid, gid): the host ids of the container's root, which may write them.
    pub fn make(&self, hostname: &str, owner: Option<(u32, u32)>) -> std::io::Result<EtcPaths> {
        let token = hex::encode(rand::random::<[u8; 8]>());
        let p = self.paths(&token)?;
        std::fs::create_dir_all(self.dir.join(&token))?;
        std::fs::write(&p.hosts, hosts_text(hostname))?;
        std::fs::write(&p.resolv, "")?;
        if let Some((uid, gid)) = owner {
            for f in [&p.hosts, &p.resolv] {
                std::os::unix::fs::chown(f, Some(uid), Some(gid))?;
            }
        }
        Ok(p)
    }

    /// Names `server` in the container's `resolv.conf` (in place: the file is mounted).
    pub fn set_nameserver(&self, token: &str, server: Ipv4Addr) -> std::io::Result<()> {
        std::fs::write(self.paths(token)?.resolv, resolv_text(server))
    }

    /// Removes a container's files (none is fine).
    pub fn remove(&self, token: &str) {
        if let Ok(p) = self.paths(token) {
            if let Some(d) = p.hosts.parent() {
                let _ = std::fs::remove_dir_all(d);
            }
        }
    }

    /// Removes the files of every container not in `keep` (removed while the node was not
    /// looking). How many.
    pub fn sweep(&self, keep: &HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut removed = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if is_token(&name) && !keep.contains(&name) {
                let _ = std::fs::remove_dir_all(e.path());
                removed += 1;
            }
        }
        removed
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_resolves_and_dns_goes_to_the_links_host_end() {
        assert_eq!(
            hosts_text("my-box"),
            "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tmy-box\n"
        );
        assert_eq!(
            resolv_text(Ipv4Addr::new(10, 200, 0, 5)),
            "nameserver 10.200.0.5\noptions ndots:0\n"
        );
    }

    #[test]
    fn files_are_made_set_swept_and_a_label_never_names_another_path() {
        let d = tempfile::tempdir().unwrap();
        let etc = EtcFiles::new(d.path().to_path_buf());
        let a = etc.make("a", None).unwrap();
        let b = etc.make("b", None).unwrap();
        assert_eq!(std::fs::read_to_string(&a.hosts).unwrap(), hosts_text("a"));
        assert_eq!(std::fs::read_to_string(&a.resolv).unwrap(), "");
        etc.set_nameserver(&a.token, Ipv4Addr::new(10, 0, 0, 1))
            .unwrap();
        assert!(std::fs::read_to_string(&a.resolv)
            .unwrap()
            .starts_with("nameserver 10.0.0.1\n"));
        // A label someone else set on a container: not a path.
        for bad in ["../x", "", "/etc", "zz"] {
            assert!(etc.paths(bad).is_err(), "{bad:?}");
            assert!(etc.set_nameserver(bad, Ipv4Addr::LOCALHOST).is_err());
        }
        assert_eq!(etc.sweep(&HashSet::from([a.token.clone()])), 1);
        assert!(a.hosts.exists());
        assert!(!b.hosts.exists());
        etc.remove(&a.token);
        assert!(!a.hosts.exists());
    }
}
