//! The filesystem under the engine's data root, where every sandbox's files are written.
//!
//! One kind makes sandboxes much slower without failing anything: ext4 (or ext2/3 through
//! the ext4 driver) without a journal. When it allocates an inode, ext4 without a journal
//! skips every free inode whose file was deleted in the last minute (five, while its inode
//! table block is unwritten), and checks them one at a time. A node deletes thousands of
//! files whenever a sandbox goes (sleep, delete, restore, move), so the next restore or fork
//! creating thousands more spends most of its time in that scan: four parallel copies of a
//! 200 MiB tree took 1.9 s there instead of 0.5 s (docs/benchmarks.md, "ext4 without a
//! journal"). The node says so when it starts.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `f_type` of ext2, ext3 and ext4 (one driver, one magic number).
const EXT_SUPER_MAGIC: i64 = 0xEF53;

/// What the data root's filesystem is, as far as it matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataRootFs {
    /// ext2/3/4 with a journal (`/proc/fs/jbd2` lists its device).
    ExtJournaled,
    /// ext2/3/4 without a journal: slow file creation after deletions.
    ExtNoJournal { device: String },
    /// Anything else (XFS, btrfs, tmpfs, ...).
    Other,
}

impl DataRootFs {
    /// What an operator should hear about it, if anything.
    pub fn warning(&self) -> Option<String> {
        match self {
            DataRootFs::ExtNoJournal { device } => Some(format!(
                "the engine's data root is on ext4 without a journal ({device}): ext4 then skips \
                 inodes freed in the last minute one by one, so restores and forks right after \
                 deletions create files several times slower; use XFS (with pquota) or ext4 \
                 with a journal"
            )),
            _ => None,
        }
    }
}

/// The filesystem `path` is on. Errors when `path` cannot be looked at from here (it is
/// missing, or the engine runs in another mount namespace or on another machine).
pub fn inspect(path: &Path) -> io::Result<DataRootFs> {
    if fs_type(path)? != EXT_SUPER_MAGIC {
        return Ok(DataRootFs::Other);
    }
    let dev = std::fs::metadata(path)?.dev();
    let device = block_device_name(libc::major(dev), libc::minor(dev))?;
    let journals = std::fs::read_dir("/proc/fs/jbd2")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    Ok(if has_journal(&device, &journals) {
        DataRootFs::ExtJournaled
    } else {
        DataRootFs::ExtNoJournal { device }
    })
}

/// Whether `/proc/fs/jbd2` (its entries: `<device>-<journal inode>`) has a journal for
/// `device`.
fn has_journal(device: &str, jbd2_entries: &[String]) -> bool {
    jbd2_entries.iter().any(|entry| {
        entry
            .rsplit_once('-')
            .is_some_and(|(dev, inode)| dev == device && inode.parse::<u64>().is_ok())
    })
}

fn fs_type(path: &Path) -> io::Result<i64> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::other("a path with a NUL byte"))?;
    // SAFETY: statfs writes only into `buf`, which is zeroed plain data of the right type,
    // and reads the NUL-terminated string `c` lives for the call.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut buf) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(buf.f_type as i64)
}

/// The kernel's name for a block device (`vda`, `loop3`, `dm-0`), as jbd2 uses it.
fn block_device_name(major: u32, minor: u32) -> io::Result<String> {
    let link = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}"))?;
    link.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io::Error::other(format!("no device name in {}", link.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::running_as_root;
    use std::process::Command;

    #[test]
    fn a_journal_is_found_by_its_device_name() {
        let entries = vec!["vda-8".to_string(), "dm-0-8".to_string()];
        assert!(has_journal("vda", &entries));
        assert!(has_journal("dm-0", &entries));
        assert!(!has_journal("vdb", &entries));
        assert!(!has_journal("dm", &entries));
        assert!(!has_journal("loop0", &[]));
    }

    #[test]
    fn only_ext4_without_a_journal_is_warned_about() {
        assert_eq!(DataRootFs::ExtJournaled.warning(), None);
        assert_eq!(DataRootFs::Other.warning(), None);
        let w = DataRootFs::ExtNoJournal {
            device: "vda".into(),
        }
        .warning()
        .expect("a warning");
        assert!(w.contains("without a journal (vda)"), "{w}");
    }

    #[test]
    fn tmpfs_is_not_ext4() {
        assert_eq!(inspect(Path::new("/dev/shm")).unwrap(), DataRootFs::Other);
        assert!(inspect(Path::new("/no/such/dir")).is_err());
    }

    /// Makes both kinds of ext4 on loop devices (root, mkfs.ext4), and tells them apart.
    #[test]
    fn ext4_is_told_apart_by_its_journal() {
        if !running_as_root() {
            eprintln!("skipped: needs root to mount loop devices");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        for (name, mkfs_extra, want_journal) in [
            ("with", &[][..], true),
            ("without", &["-O", "^has_journal"][..], false),
        ] {
            let img = tmp.path().join(format!("{name}.img"));
            let mnt = tmp.path().join(name);
            std::fs::create_dir(&mnt).unwrap();
            std::fs::File::create(&img)
                .unwrap()
                .set_len(32 << 20)
                .unwrap();
            run(Command::new("mkfs.ext4")
                .args(["-q", "-F"])
                .args(mkfs_extra)
                .arg(&img));
            run(Command::new("mount")
                .arg("-o")
                .arg("loop")
                .arg(&img)
                .arg(&mnt));
            let seen = inspect(&mnt);
            run(Command::new("umount").arg(&mnt));
            match seen.unwrap() {
                DataRootFs::ExtJournaled => assert!(want_journal, "{name}: saw a journal"),
                DataRootFs::ExtNoJournal { device } => {
                    assert!(!want_journal, "{name}: saw no journal");
                    assert!(device.starts_with("loop"), "{device}");
                }
                DataRootFs::Other => panic!("{name}: not seen as ext4"),
            }
        }
    }

    fn run(cmd: &mut Command) {
        let out = cmd.output().expect("runs");
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
