//! Copies one container's overlay2 upper directory into another's, entry for entry, before
//! the second container starts: how a fork on the source's own node gets its files without
//! packing, compressing and unpacking them. Both containers sit on the same image, so the
//! upper directory means the same thing in both: whiteouts (character devices 0:0), opaque
//! directories and every other overlay xattr are copied as they are.
//!
//! Regular files go through `std::io::copy`, which on Linux is `copy_file_range`: the
//! kernel copies the bytes, nothing passes through this process. Hard links stay links,
//! devices and FIFOs are made again, owners, modes, times and xattrs are kept; sockets are
//! skipped (a snapshot does not keep them either).
//!
//! Nothing is followed. The source belongs to a sandbox and is frozen while it is copied
//! (its container paused), so that the copy is one moment's files; should it run anyway,
//! the walk still only ever reaches the source's own entries (see `SourceDir`). The target
//! is a new container's directory that nobody else writes to before it starts.

use filetime::FileTime;
use std::collections::HashMap;
use std::ffi::{CString, OsStr};
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What one copy did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    pub entries: u64,
    pub bytes: u64,
}

/// Copies every entry of `from` into `to` (an existing directory of a container that has
/// not started), except the top-level names in `skip`. Directories the engine made there
/// already (mount points) are kept and take the source's metadata; any other entry that
/// exists is an error, so two sandboxes' files never mix.
pub fn copy(from: &Path, to: &Path, skip: &[&str]) -> io::Result<Copied> {
    if !fs::symlink_metadata(to)?.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            to.display()
        )));
    }
    let root = SourceDir::open(from)?;
    let mut c = Copier {
        links: HashMap::new(),
        done: Copied::default(),
    };
    c.dir_contents(&root, to, Some(skip))?;
    copy_xattrs(&root.path(), to)?;
    Ok(c.done)
}

/// An open directory of the source. Its entries are reached as
/// `/proc/self/fd/<fd>/<name>`: the kernel goes from the open directory itself to the
/// entry, so no path is walked again and a directory the sandbox turned into a symlink
/// after it was listed is never followed (opening it as a directory then fails).
struct SourceDir(fs::File);

impl SourceDir {
    fn open(path: &Path) -> io::Result<SourceDir> {
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .map(SourceDir)
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()))
    }
}

struct Copier {
    /// (device, inode) of a source file with several names → the first target path.
    links: HashMap<(u64, u64), PathBuf>,
    done: Copied,
}

impl Copier {
    fn dir_contents(
        &mut self,
        from: &SourceDir,
        to: &Path,
        skip: Option<&[&str]>,
    ) -> io::Result<()> {
        let base = from.path();
        for entry in fs::read_dir(&base)? {
            let name = entry?.file_name();
            if skip.is_some_and(|s| s.iter().any(|n| OsStr::new(n) == name)) {
                continue;
            }
            self.entry(&base.join(&name), &to.join(&name))?;
        }
        Ok(())
    }

    /// `src` is `/proc/self/fd/<parent>/<name>`: only `name` is looked up, never followed.
    fn entry(&mut self, src: &Path, dst: &Path) -> io::Result<()> {
        let mut meta = fs::symlink_metadata(src)?;
        let t = meta.file_type();
        if t.is_socket() {
            return Ok(());
        }
        if !t.is_dir() && meta.nlink() > 1 {
            if let Some(first) = self.links.get(&(meta.dev(), meta.ino())) {
                fs::hard_link(first, dst)?;
                self.done.entries += 1;
                return Ok(());
            }
            self.links
                .insert((meta.dev(), meta.ino()), dst.to_path_buf());
        }
        if t.is_dir() {
            let dir = SourceDir::open(src)?;
            meta = dir.0.metadata()?;
            match fs::create_dir(dst) {
                Err(e)
                    if e.kind() == io::ErrorKind::AlreadyExists
                        && fs::symlink_metadata(dst)?.is_dir() => {}
                r => r?,
            }
            self.dir_contents(&dir, dst, None)?;
        } else if t.is_file() {
            let mut from = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
                .open(src)?;
            meta = from.metadata()?;
            if !meta.is_file() {
                return Err(io::Error::other(format!(
                    "{} changed while it was copied",
                    dst.display()
                )));
            }
            let mut to = OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(dst)?;
            self.done.bytes += io::copy(&mut from, &mut to)?;
        } else if t.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(src)?, dst)?;
        } else {
            // Character and block devices (whiteouts among them) and FIFOs.
            let path = c_path(dst)?;
            // SAFETY: `path` is a valid C string; mknod reads nothing else.
            if unsafe { libc::mknod(path.as_ptr(), meta.mode(), meta.rdev() as libc::dev_t) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        self.done.entries += 1;
        std::os::unix::fs::lchown(dst, Some(meta.uid()), Some(meta.gid()))?;
        copy_xattrs(src, dst)?;
        if !t.is_symlink() {
            // After the owner: chown clears set-user-ID and set-group-ID bits.
            fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        set_times(dst, &meta)
    }
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Access and modification times, set without following a symlink (last, so that adding a
/// directory's entries does not change its mtime again).
fn set_times(dst: &Path, meta: &fs::Metadata) -> io::Result<()> {
    filetime::set_symlink_file_times(
        dst,
        FileTime::from_last_access_time(meta),
        FileTime::from_last_modification_time(meta),
    )
}

/// Every extended attribute of `src` (overlay's `trusted.*` ones included) onto `dst`,
/// neither followed if a symlink (the `xattr` crate's calls never follow one).
fn copy_xattrs(src: &Path, dst: &Path) -> io::Result<()> {
    let names = match xattr::list(src) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        if let Some(value) = xattr::get(src, &name)? {
            xattr::set(dst, &name, &value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn copies_files_links_modes_times_and_skips_top_level_names() {
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("from"), t.path().join("to"));
        fs::create_dir_all(from.join("w/sub")).unwrap();
        fs::create_dir_all(from.join(".warren/run")).unwrap();
        fs::create_dir(&to).unwrap();
        fs::write(from.join("w/a.txt"), b"alpha").unwrap();
        fs::write(from.join(".warren/run/x"), b"never").unwrap();
        fs::hard_link(from.join("w/a.txt"), from.join("w/sub/a-again")).unwrap();
        symlink("/", from.join("w/root")).unwrap();
        fs::set_permissions(from.join("w/a.txt"), fs::Permissions::from_mode(0o640)).unwrap();
        let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        fs::File::options()
            .write(true)
            .open(from.join("w/a.txt"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        let fifo = c_path(&from.join("w/pipe")).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let user_attr = xattr_set(&from.join("w/sub"), "user.warren", b"v");

        let done = copy(&from, &to, &[".warren"]).unwrap();
        assert_eq!(done.bytes, 5);
        assert!(!to.join(".warren").exists());
        assert_eq!(fs::read(to.join("w/a.txt")).unwrap(), b"alpha");
        let (a, again) = (
            fs::metadata(to.join("w/a.txt")).unwrap(),
            fs::metadata(to.join("w/sub/a-again")).unwrap(),
        );
        assert_eq!(a.ino(), again.ino(), "a hard link stays one inode");
        assert_eq!(a.mode() & 0o7777, 0o640);
        assert_eq!(a.modified().unwrap(), old);
        assert_eq!(fs::read_link(to.join("w/root")).unwrap(), Path::new("/"));
        assert!(fs::symlink_metadata(to.join("w/pipe"))
            .unwrap()
            .file_type()
            .is_fifo());
        if user_attr {
            assert_eq!(xattr_get(&to.join("w/sub"), "user.warren"), b"v");
        }
        // Files already there are never overwritten: two sandboxes' files never mix.
        let again = copy(&from, &to, &[]).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        // A directory the engine made already (a mount point) is fine.
        let to2 = t.path().join("to2");
        fs::create_dir_all(to2.join("w")).unwrap();
        copy(&from, &to2, &[".warren"]).unwrap();
        assert_eq!(fs::read(to2.join("w/a.txt")).unwrap(), b"alpha");
    }

    #[test]
    fn a_directory_turned_into_a_symlink_is_not_entered() {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir(t.path().join("real")).unwrap();
        fs::write(t.path().join("real/secret"), b"host").unwrap();
        symlink(t.path().join("real"), t.path().join("swapped")).unwrap();
        let parent = SourceDir::open(t.path()).unwrap();
        // What the walk does with an entry it listed as a directory.
        let e = SourceDir::open(&parent.path().join("swapped"))
            .err()
            .unwrap();
        // O_DIRECTORY | O_NOFOLLOW on a symlink: ENOTDIR (ELOOP on some kernels).
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e}"
        );
        assert!(SourceDir::open(&parent.path().join("real")).is_ok());
    }

    #[test]
    fn whiteouts_and_opaque_directories_are_kept() {
        if !crate::runtime::running_as_root() {
            eprintln!("skipped: needs root (mknod 0:0, trusted.* xattrs)");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (from, to) = (t.path().join("from"), t.path().join("to"));
        fs::create_dir_all(from.join("etc")).unwrap();
        fs::create_dir(&to).unwrap();
        let wh = c_path(&from.join("etc/motd")).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mknod(wh.as_ptr(), libc::S_IFCHR, 0) }, 0);
        assert!(xattr_set(&from.join("etc"), "trusted.overlay.opaque", b"y"));
        copy(&from, &to, &[]).unwrap();
        let m = fs::symlink_metadata(to.join("etc/motd")).unwrap();
        assert!(m.file_type().is_char_device() && m.rdev() == 0);
        assert_eq!(xattr_get(&to.join("etc"), "trusted.overlay.opaque"), b"y");
    }

    fn xattr_set(p: &Path, name: &str, v: &[u8]) -> bool {
        xattr::set(p, name, v).is_ok()
    }

    fn xattr_get(p: &Path, name: &str) -> Vec<u8> {
        xattr::get(p, name).unwrap().unwrap_or_default()
    }
}
