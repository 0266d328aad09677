//! A new container's root filesystem as the engine mounts it on this host while it starts
//! the container. Docker mounts the overlay at the layer's `merged` directory first thing
//! in a start (tens of milliseconds into a start of hundreds), in the host's mount
//! namespace; from then on, files written there are the container's own, so a restore can
//! write them while the rest of the start (network, runc, the guest's boot) goes on.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often a start is checked for the mount.
const POLL: Duration = Duration::from_millis(2);

/// `dir`, open, if a filesystem is mounted on it: a directory whose device differs from its
/// parent's. `None` while nothing is mounted there (or it is not there at all).
pub fn open_if_mounted(dir: &Path) -> io::Result<Option<File>> {
    let parent = dir
        .parent()
        .ok_or_else(|| io::Error::other(format!("{} has no parent", dir.display())))?;
    let parent_dev = std::fs::metadata(parent)?.dev();
    let opened = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir);
    let dir = match opened {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    // Checked on the open directory itself: what was opened is the mount.
    Ok((dir.metadata()?.dev() != parent_dev).then_some(dir))
}

/// Waits until something is mounted on `dir`, for as long as the start it belongs to runs
/// (`started` turns true when it has returned). `None` if the start ended and this process
/// never saw a mount there (the engine runs in another mount namespace, or on another
/// machine), or if it cannot look.
pub async fn wait_mounted(dir: &Path, started: &AtomicBool) -> Option<File> {
    loop {
        // Read before looking, so that a mount made just before the start returned is seen.
        let over = started.load(Ordering::SeqCst);
        match open_if_mounted(dir) {
            Ok(Some(root)) => return Some(root),
            Ok(None) if over => return None,
            Ok(None) => tokio::time::sleep(POLL).await,
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "cannot look for the container's mount");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_directory_is_not_a_mount() {
        let d = tempfile::tempdir().unwrap();
        let merged = d.path().join("merged");
        assert!(open_if_mounted(&merged).unwrap().is_none());
        std::fs::create_dir(&merged).unwrap();
        assert!(open_if_mounted(&merged).unwrap().is_none());
    }

    #[tokio::test]
    async fn waiting_ends_with_the_start_when_nothing_is_mounted() {
        let d = tempfile::tempdir().unwrap();
        let started = AtomicBool::new(true);
        assert!(wait_mounted(d.path(), &started).await.is_none());
    }

    #[test]
    fn a_mounted_directory_is_opened() {
        if !crate::runtime::running_as_root() {
            eprintln!("skipped: mounting needs root");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let merged = d.path().join("merged");
        std::fs::create_dir(&merged).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "tmpfs"])
            .arg(&merged)
            .status()
            .unwrap();
        assert!(status.success());
        let opened = open_if_mounted(&merged);
        let _ = std::process::Command::new("umount").arg(&merged).status();
        let root = opened.unwrap().expect("mounted");
        assert!(root.metadata().unwrap().is_dir());
    }
}
