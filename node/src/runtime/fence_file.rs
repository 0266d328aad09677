//! The node's half of the dead-man fence (`warren_api::fence`): a directory of the node's
//! data dir that every container of the node has mounted read-only, holding one file that
//! says until when the node vouches for its sandboxes. Whoever holds the lease renews it;
//! when the node process dies, nobody does, and the guests stop their sandboxes' processes
//! once that time has passed — within a lease of the last renewal, before the cluster may
//! hand the sandboxes to another node.
//!
//! Each write replaces the file whole (a new file renamed over the old one), so a guest never
//! reads half of one; the directory, not the file, is what containers mount, so they see each
//! new file. Only the node writes there: the mount is read-only in every container.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;
use warren_api::fence::{boottime_ns, Fence, FENCE_FILE};

pub struct FenceFile {
    dir: PathBuf,
    /// What was written last, and whether that write failed (logged once per change).
    last: Mutex<Option<(Fence, bool)>>,
}

impl FenceFile {
    /// Makes the directory (readable by the containers' users, writable by the node only).
    /// Nothing is written yet: an earlier process's file stands until the node says more.
    pub fn open(dir: &Path) -> std::io::Result<FenceFile> {
        std::fs::create_dir_all(dir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        Ok(FenceFile {
            dir: dir.to_path_buf(),
            last: Mutex::new(None),
        })
    }

    /// The directory containers mount.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// No fence (a node alone in its cluster).
    pub fn off(&self) {
        self.write(Fence::Off);
    }

    /// Sandboxes stop at once.
    pub fn stop(&self) {
        self.write(Fence::STOP);
    }

    /// Sandboxes may run for `left` from now.
    pub fn hold_for(&self, left: Duration) {
        self.write(Fence::Until(
            boottime_ns().saturating_add(left.as_nanos() as u64),
        ));
    }

    /// What the file says now (None: no file, or not a fence). The node itself never reads
    /// the directory back: tests do.
    #[cfg(test)]
    fn read(&self) -> Option<Fence> {
        Fence::parse(&std::fs::read_to_string(self.dir.join(FENCE_FILE)).ok()?)
    }

    fn write(&self, fence: Fence) {
        let mut last = self.last.lock().expect("fence file lock");
        // `off` and `stop` say the same until they change; a time is renewed each time.
        let lasting = fence == Fence::Off || fence == Fence::STOP;
        if lasting && *last == Some((fence, true)) {
            return;
        }
        let result = replace(&self.dir, &fence.render());
        let ok = result.is_ok();
        if let Err(e) = result {
            // Logged once until it works again: the guests stop the sandboxes when the time
            // written last runs out, which is the safe side of the failure.
            if last.is_none_or(|(_, was_ok)| was_ok) {
                tracing::error!(dir = %self.dir.display(), error = %e, "cannot renew the sandboxes' fence file; they stop when the time written last runs out");
            }
        }
        *last = Some((fence, ok));
    }
}

/// Writes `content` as the fence file: to a new file, renamed over the old one.
fn replace(dir: &Path, content: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{FENCE_FILE}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(content.as_bytes())?;
    use std::os::unix::fs::PermissionsExt;
    f.set_permissions(std::fs::Permissions::from_mode(0o644))?;
    drop(f);
    std::fs::rename(&tmp, dir.join(FENCE_FILE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_api::fence::{verdict, Verdict};

    fn guest_sees(f: &FenceFile) -> Verdict {
        let text = std::fs::read_to_string(f.dir().join(FENCE_FILE)).ok();
        verdict(text.as_deref(), boottime_ns())
    }

    #[test]
    fn what_the_node_writes_is_what_a_guest_decides_on() {
        let d = tempfile::tempdir().unwrap();
        let f = FenceFile::open(&d.path().join("fence")).unwrap();
        assert_eq!(f.read(), None);
        assert_eq!(guest_sees(&f), Verdict::Run, "no file yet: no fence");
        f.stop();
        assert_eq!(f.read(), Some(Fence::STOP));
        assert_eq!(guest_sees(&f), Verdict::Stop);
        f.hold_for(Duration::from_secs(30));
        assert_eq!(guest_sees(&f), Verdict::Run);
        // Long enough that a loaded machine reads it back in time.
        f.hold_for(Duration::from_secs(1));
        assert_eq!(guest_sees(&f), Verdict::Run);
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(guest_sees(&f), Verdict::Stop, "not renewed: lapsed");
        f.off();
        assert_eq!(f.read(), Some(Fence::Off));
        assert_eq!(guest_sees(&f), Verdict::Run);
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(f.dir()), 0o755);
        assert_eq!(mode(&f.dir().join(FENCE_FILE)), 0o644);
        let names: Vec<_> = std::fs::read_dir(f.dir()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temporary file is left");
    }

    #[test]
    fn a_file_that_cannot_be_renewed_lapses_on_its_own() {
        let d = tempfile::tempdir().unwrap();
        let f = FenceFile::open(&d.path().join("fence")).unwrap();
        f.hold_for(Duration::from_millis(40));
        // The directory goes away under the node (a full or broken disk does the same).
        std::fs::remove_dir_all(f.dir()).unwrap();
        f.hold_for(Duration::from_secs(30));
        assert_eq!(f.read(), None);
        std::fs::create_dir_all(f.dir()).unwrap();
        f.hold_for(Duration::from_secs(30));
        assert!(
            matches!(f.read(), Some(Fence::Until(_))),
            "written again once it can be"
        );
    }
}
