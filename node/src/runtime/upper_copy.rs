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
//!
//! A warm container (one started before it was taken) already has its overlay mounted, and
//! the kernel does not allow writing into a mounted overlay's upper directory. Its files go
//! in through the mount instead (`copy_onto_mounted`): a whiteout there is a removal, an
//! opaque directory replaces what the image had, and overlay's own xattrs stay behind.

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
    copy_as(from, None, to, skip, false)
}

/// Copies the entries of upper directory `from` onto `to`, the mounted root of a running
/// container of the same image, so that it shows the same files as the source: a whiteout
/// removes the path, an opaque directory replaces the one there, any other entry there is
/// replaced, and `trusted.overlay.*` xattrs are not copied (the overlay keeps its own).
/// A directory that overlay redirected (renamed with `redirect_dir` on) is refused: its
/// files are not all in `from`.
///
/// `from_mounted` is the source's own mounted root, if this process sees it: file bytes are
/// then read through it, because the kernel copies between two overlays as between their
/// backing files (sharing blocks on XFS), while from a backing filesystem into an overlay
/// it refuses `copy_file_range` and the bytes would pass through this process.
pub fn copy_onto_mounted(
    from: &Path,
    from_mounted: Option<&Path>,
    to: &Path,
    skip: &[&str],
) -> io::Result<Copied> {
    copy_as(from, from_mounted, to, skip, true)
}

const OVERLAY_XATTRS: &str = "trusted.overlay.";

fn copy_as(
    from: &Path,
    from_mounted: Option<&Path>,
    to: &Path,
    skip: &[&str],
    onto_overlay: bool,
) -> io::Result<Copied> {
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
        onto_overlay,
    };
    let twin = from_mounted.and_then(|m| SourceDir::open(m).ok());
    c.dir_contents(&root, twin.as_ref(), to, Some(skip))?;
    copy_xattrs(&root.path(), to, onto_overlay)?;
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
    /// `to` is a mounted overlay, not an upper directory (see `copy_onto_mounted`).
    onto_overlay: bool,
}

impl Copier {
    /// `twin` is the same directory as the mounted source shows it, if known.
    fn dir_contents(
        &mut self,
        from: &SourceDir,
        twin: Option<&SourceDir>,
        to: &Path,
        skip: Option<&[&str]>,
    ) -> io::Result<()> {
        let base = from.path();
        let twin_base = twin.map(SourceDir::path);
        for entry in fs::read_dir(&base)? {
            let name = entry?.file_name();
            if skip.is_some_and(|s| s.iter().any(|n| OsStr::new(n) == name)) {
                continue;
            }
            let twin = twin_base.as_ref().map(|t| t.join(&name));
            self.entry(&base.join(&name), twin.as_deref(), &to.join(&name))?;
        }
        Ok(())
    }

    /// `src` is `/proc/self/fd/<parent>/<name>`: only `name` is looked up, never followed;
    /// `twin` the same for the entry as the mounted source shows it.
    fn entry(&mut self, src: &Path, twin: Option<&Path>, dst: &Path) -> io::Result<()> {
        let mut meta = fs::symlink_metadata(src)?;
        let t = meta.file_type();
        if t.is_socket() {
            return Ok(());
        }
        if self.onto_overlay && self.make_way(src, dst, &meta)? {
            self.done.entries += 1;
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
            let twin = twin.and_then(|t| SourceDir::open(t).ok());
            self.dir_contents(&dir, twin.as_ref(), dst, None)?;
        } else if t.is_file() {
            let mut from = open_file(src)?;
            meta = from.metadata()?;
            // The same file through the source's mount (the same bytes: an upper file is
            // what the overlay shows), when it is there and is that file.
            if let Some(through) = twin.and_then(|t| open_file(t).ok()) {
                let same = through
                    .metadata()
                    .is_ok_and(|m| m.is_file() && m.len() == meta.len());
                if same {
                    from = through;
                }
            }
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
            self.done.entries += 1;
            // Through the open file: no path is looked up again (each lookup of a path
            // in a mounted overlay walks it in the overlay and its layers).
            std::os::unix::fs::fchown(&to, Some(meta.uid()), Some(meta.gid()))?;
            copy_xattrs_to_file(src, &to, self.onto_overlay)?;
            to.set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))?;
            return to.set_times(
                fs::FileTimes::new()
                    .set_accessed(meta.accessed()?)
                    .set_modified(meta.modified()?),
            );
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
        copy_xattrs(src, dst, self.onto_overlay)?;
        if !t.is_symlink() {
            // After the owner: chown clears set-user-ID and set-group-ID bits.
            fs::set_permissions(dst, fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        set_times(dst, &meta)
    }
}

impl Copier {
    /// Onto a mounted overlay: removes what is at `dst` unless `src` is a directory that
    /// merges into the directory there. Whether `src` was a whiteout (nothing more to do).
    fn make_way(&self, src: &Path, dst: &Path, meta: &fs::Metadata) -> io::Result<bool> {
        let t = meta.file_type();
        let whiteout = t.is_char_device() && meta.rdev() == 0;
        let opaque = t.is_dir() && overlay_xattr(src, "opaque")?.as_deref() == Some(b"y");
        if t.is_dir() && overlay_xattr(src, "redirect")?.is_some() {
            return Err(io::Error::other(format!(
                "{} is a renamed directory whose files the overlay keeps elsewhere",
                dst.display()
            )));
        }
        let there = match fs::symlink_metadata(dst) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Some(there) = there {
            let merges = t.is_dir() && there.is_dir() && !opaque;
            if !merges {
                if there.is_dir() {
                    fs::remove_dir_all(dst)?;
                } else {
                    fs::remove_file(dst)?;
                }
            }
        }
        Ok(whiteout)
    }
}

/// An overlay xattr (`trusted.overlay.<name>`) of an upper directory's entry.
fn overlay_xattr(p: &Path, name: &str) -> io::Result<Option<Vec<u8>>> {
    match xattr::get(p, format!("{OVERLAY_XATTRS}{name}")) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(None),
        r => r,
    }
}

/// A regular file of the source, opened without following a symlink or blocking on a FIFO.
fn open_file(p: &Path) -> io::Result<fs::File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
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

/// `copy_xattrs` onto an open regular file.
fn copy_xattrs_to_file(src: &Path, dst: &fs::File, onto_overlay: bool) -> io::Result<()> {
    use xattr::FileExt;
    for (name, value) in xattrs_of(src, onto_overlay)? {
        dst.set_xattr(&name, &value)?;
    }
    Ok(())
}

/// Every extended attribute of `src` (overlay's `trusted.*` ones included, unless
/// `onto_overlay`) onto `dst`, neither followed if a symlink (the `xattr` crate's calls
/// never follow one).
fn copy_xattrs(src: &Path, dst: &Path, onto_overlay: bool) -> io::Result<()> {
    for (name, value) in xattrs_of(src, onto_overlay)? {
        xattr::set(dst, &name, &value)?;
    }
    Ok(())
}

/// The extended attributes of `src` to copy (none where its filesystem has none).
fn xattrs_of(src: &Path, onto_overlay: bool) -> io::Result<Vec<(std::ffi::OsString, Vec<u8>)>> {
    let names = match xattr::list(src) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names {
        if onto_overlay
            && name
                .as_encoded_bytes()
                .starts_with(OVERLAY_XATTRS.as_bytes())
        {
            continue;
        }
        if let Some(value) = xattr::get(src, &name)? {
            out.push((name, value));
        }
    }
    Ok(out)
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

    #[test]
    fn onto_a_mounted_overlay_the_copy_shows_the_sources_files() {
        if !crate::runtime::running_as_root() {
            eprintln!("skipped: needs root (overlay mounts, whiteouts)");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let dir = |n: &str| {
            let p = t.path().join(n);
            fs::create_dir_all(&p).unwrap();
            p
        };
        // The image both containers share.
        let lower = dir("lower");
        fs::create_dir_all(lower.join("etc/conf.d")).unwrap();
        fs::write(lower.join("etc/motd"), b"image").unwrap();
        fs::write(lower.join("etc/keep"), b"image").unwrap();
        fs::write(lower.join("etc/conf.d/old"), b"image").unwrap();
        fs::write(lower.join("etc/file-then-dir"), b"image").unwrap();
        // The source's upper directory: motd deleted, keep changed, conf.d replaced, a file
        // turned into a directory, a new file with a second name.
        let from = dir("from");
        fs::create_dir_all(from.join("etc/conf.d")).unwrap();
        fs::create_dir_all(from.join("etc/file-then-dir")).unwrap();
        fs::create_dir_all(from.join("w")).unwrap();
        let wh = c_path(&from.join("etc/motd")).unwrap();
        // SAFETY: valid C string.
        assert_eq!(unsafe { libc::mknod(wh.as_ptr(), libc::S_IFCHR, 0) }, 0);
        assert!(xattr_set(
            &from.join("etc/conf.d"),
            "trusted.overlay.opaque",
            b"y"
        ));
        fs::write(from.join("etc/conf.d/new"), b"fork").unwrap();
        fs::write(from.join("etc/keep"), b"changed").unwrap();
        fs::write(from.join("etc/file-then-dir/inner"), b"fork").unwrap();
        fs::write(from.join("w/a"), b"alpha").unwrap();
        fs::hard_link(from.join("w/a"), from.join("w/b")).unwrap();
        // A running container of the same image, and the source: their overlays, mounted.
        let mount = |upper: &Path, work: &Path, at: &Path| {
            let opts = format!(
                "lowerdir={},upperdir={},workdir={}",
                lower.display(),
                upper.display(),
                work.display()
            );
            std::process::Command::new("mount")
                .args(["-t", "overlay", "overlay", "-o", &opts])
                .arg(at)
                .status()
                .unwrap()
                .success()
        };
        let (upper, merged) = (dir("upper"), dir("merged"));
        let source_root = dir("source-merged");
        if !mount(&upper, &dir("work"), &merged) {
            eprintln!("skipped: cannot mount an overlay here");
            return;
        }
        assert!(mount(&from, &dir("source-work"), &source_root));
        assert_eq!(fs::read(source_root.join("w/a")).unwrap(), b"alpha");
        let done = copy_onto_mounted(&from, Some(&source_root), &merged, &[]);
        let seen = |p: &str| fs::read(merged.join(p)).ok();
        let view = (
            seen("etc/motd"),
            seen("etc/keep"),
            seen("etc/conf.d/old"),
            seen("etc/conf.d/new"),
            seen("etc/file-then-dir/inner"),
            fs::metadata(merged.join("w/a")).map(|m| m.ino()).ok(),
            fs::metadata(merged.join("w/b")).map(|m| m.ino()).ok(),
        );
        let conf_xattr = xattr::get(upper.join("etc/conf.d"), "trusted.overlay.opaque");
        for m in [&merged, &source_root] {
            let _ = std::process::Command::new("umount").arg(m).status();
        }
        done.unwrap();
        assert_eq!(view.0, None, "the whiteout removed the image's file");
        assert_eq!(view.1.as_deref(), Some(&b"changed"[..]));
        assert_eq!(
            view.2, None,
            "the opaque directory hides the image's entries"
        );
        assert_eq!(view.3.as_deref(), Some(&b"fork"[..]));
        assert_eq!(view.4.as_deref(), Some(&b"fork"[..]));
        assert!(
            view.5.is_some() && view.5 == view.6,
            "a hard link stays one inode"
        );
        // The overlay made its own opaque directory; nothing of the source's xattr leaked.
        assert_eq!(conf_xattr.unwrap().as_deref(), Some(&b"y"[..]));
        assert_eq!(fs::read(lower.join("etc/motd")).unwrap(), b"image");
    }

    fn xattr_set(p: &Path, name: &str, v: &[u8]) -> bool {
        xattr::set(p, name, v).is_ok()
    }

    fn xattr_get(p: &Path, name: &str) -> Vec<u8> {
        xattr::get(p, name).unwrap().unwrap_or_default()
    }
}
