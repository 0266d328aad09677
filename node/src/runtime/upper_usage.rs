//! How much disk a container's overlay upper directory takes: the bytes allocated to every
//! entry in it (`st_blocks`), each hard-linked inode once. Where the storage driver sets no
//! quota (overlay2 on ext4), this is what the node holds a sandbox's `disk_mb` against.
//!
//! The walk goes from open directory to open directory by name (`fd_dir`) and follows
//! nothing, so the running sandbox cannot send it elsewhere; it keeps one descriptor per
//! level, and a tree deeper than `MAX_DEPTH` (which no real workload builds, and which a
//! sandbox could use to hide files from a bounded walk) is reported as such.

use super::fd_dir::Dir;
use rustix::fs::FileType;
use std::collections::HashSet;
use std::ffi::OsString;
use std::path::Path;

/// Directory levels the walk enters at most (one open descriptor each).
pub const MAX_DEPTH: usize = 512;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes allocated on disk.
    pub bytes: u64,
    /// Entries counted.
    pub entries: u64,
    /// Some directory was deeper than `MAX_DEPTH`: what lies below it is not counted.
    pub too_deep: bool,
}

/// One directory being walked: its descriptor, and the names still to look at.
struct Level {
    dir: Dir,
    names: Vec<OsString>,
}

/// What a container has written on this host: its upper directory and the files
/// bind-mounted writable into it (see `ContainerRuntime::written_on_host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub upper: std::path::PathBuf,
    pub files: Vec<std::path::PathBuf>,
}

/// [`usage`] of `w.upper` plus the blocks of each of `w.files` (a file that is gone counts
/// nothing: its container went with it, and the walk of `upper` says so).
pub fn usage_with_files(w: &Written) -> std::io::Result<Usage> {
    let mut out = usage(&w.upper)?;
    for f in &w.files {
        match std::fs::symlink_metadata(f) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                out.bytes += m.blocks() * 512;
                out.entries += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// The disk use of everything under `upper`.
pub fn usage(upper: &Path) -> std::io::Result<Usage> {
    let root = Dir::open(upper)?;
    let mut out = Usage::default();
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let names = root.names()?;
    let mut stack = vec![Level { dir: root, names }];
    loop {
        let depth = stack.len();
        let Some(level) = stack.last_mut() else {
            break;
        };
        let Some(name) = level.names.pop() else {
            stack.pop();
            continue;
        };
        // Gone since it was listed.
        let Some(st) = level.dir.stat(&name)? else {
            continue;
        };
        if st.st_nlink > 1 && !linked.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        out.entries += 1;
        out.bytes += (st.st_blocks as u64) * 512;
        if FileType::from_raw_mode(st.st_mode as _) != FileType::Directory {
            continue;
        }
        if depth >= MAX_DEPTH {
            out.too_deep = true;
            continue;
        }
        let Some(sub) = level.dir.open_dir_if_present(&name)? else {
            continue;
        };
        let names = match sub.names() {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        stack.push(Level { dir: sub, names });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn counts_allocated_bytes_once_per_inode_and_follows_nothing() {
        let d = tempfile::tempdir().unwrap();
        let u = d.path().join("upper");
        std::fs::create_dir_all(u.join("a/b")).unwrap();
        let mut f = std::fs::File::create(u.join("a/b/big")).unwrap();
        f.write_all(&vec![7u8; 4 << 20]).unwrap();
        f.sync_all().unwrap();
        // A hard link is the same blocks; a sparse file takes none.
        std::fs::hard_link(u.join("a/b/big"), u.join("a/link")).unwrap();
        std::fs::File::create(u.join("sparse"))
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        // A symlink out of the upper directory is not followed.
        let outside = d.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("huge"), vec![1u8; 8 << 20]).unwrap();
        std::os::unix::fs::symlink(&outside, u.join("escape")).unwrap();
        let got = usage(&u).unwrap();
        assert!(got.bytes >= 4 << 20, "{got:?}");
        assert!(got.bytes < 5 << 20, "{got:?}");
        // a, a/b, big and link (one inode), sparse, escape.
        assert_eq!(got.entries, 5, "{got:?}");
        assert!(!got.too_deep);
        assert!(usage(&d.path().join("missing")).is_err());
    }

    #[test]
    fn the_mounted_files_count_by_their_blocks_and_a_gone_one_counts_nothing() {
        let d = tempfile::tempdir().unwrap();
        let upper = d.path().join("upper");
        std::fs::create_dir(&upper).unwrap();
        let hosts = d.path().join("hosts");
        let mut f = std::fs::File::create(&hosts).unwrap();
        f.write_all(&vec![7u8; 3 << 20]).unwrap();
        f.sync_all().unwrap();
        let sparse = d.path().join("hostname");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let w = Written {
            upper,
            files: vec![hosts, sparse, d.path().join("gone")],
        };
        let got = usage_with_files(&w).unwrap();
        assert!(got.bytes >= 3 << 20 && got.bytes < 4 << 20, "{got:?}");
        assert_eq!(got.entries, 2, "{got:?}");
    }

    #[test]
    fn a_tree_deeper_than_the_walk_says_so() {
        let d = tempfile::tempdir().unwrap();
        let mut p = d.path().to_path_buf();
        for _ in 0..(MAX_DEPTH + 3) {
            p.push("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let got = usage(d.path()).unwrap();
        assert!(got.too_deep);
        assert_eq!(got.entries, MAX_DEPTH as u64);
    }
}
