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
//! the walk still only ever reaches the source's own entries (see `Dir`). The target is a
//! new container's directory that nobody else writes to before it starts.
//!
//! Every entry is reached by name from its open parent directory (`openat`, `fstatat`,
//! `mkdirat`, ...), on both sides. Whole paths cost a lookup per component, and in a mounted
//! overlay one in the overlay and each of its layers: perf of a fork of 4 on ext4 put 9 % of
//! all CPU samples in `statx` by path and 8 % in walking paths; by name, 1 % each.
//!
//! A warm container (one started before it was taken) already has its overlay mounted, and
//! the kernel does not allow writing into a mounted overlay's upper directory. Its files go
//! in through the mount instead (`copy_onto_mounted`): a whiteout there is a removal, an
//! opaque directory replaces what the image had, and overlay's own xattrs stay behind.

use super::fd_dir::Dir;
use rustix::fs::{self as at, AtFlags, FileType, Mode, OFlags, Stat, Timestamps};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use xattr::FileExt;

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
    let root = Dir::open(from)?;
    let target = Dir::open(to)?;
    let mut c = Copier {
        links: HashMap::new(),
        done: Copied::default(),
        onto_overlay,
    };
    let twin = from_mounted.and_then(|m| Dir::open(m).ok());
    c.dir_contents(&root, twin.as_ref(), &target, Some(skip))?;
    copy_xattrs(&root.file, &target.file, onto_overlay)
        .map_err(|e| annotate(e, "the top directory"))?;
    Ok(c.done)
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
        from: &Dir,
        twin: Option<&Dir>,
        to: &Dir,
        skip: Option<&[&str]>,
    ) -> io::Result<()> {
        for entry in fs::read_dir(from.entry_path(OsStr::new("")))? {
            let name = entry?.file_name();
            if skip.is_some_and(|s| s.iter().any(|n| OsStr::new(n) == name)) {
                continue;
            }
            self.entry(from, twin, to, &name)
                .map_err(|e| annotate(e, &to.path.join(&name).display().to_string()))?;
        }
        Ok(())
    }

    /// Copies entry `name` of `from` (`twin`: the same directory through the source's
    /// mount) into `to`.
    fn entry(&mut self, from: &Dir, twin: Option<&Dir>, to: &Dir, name: &OsStr) -> io::Result<()> {
        let Some(st) = from.stat(name)? else {
            return Err(io::Error::other("it vanished while it was copied"));
        };
        let kind = FileType::from_raw_mode(st.st_mode as _);
        if kind == FileType::Socket {
            return Ok(());
        }
        if kind == FileType::Directory {
            let dir = from.open_dir(name)?;
            if self.onto_overlay {
                make_way_for_dir(&dir, to, name)?;
            } else {
                refuse_unless_dir(to, name)?;
            }
            match at::mkdirat(&to.file, name, Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
            let target = to.open_dir(name)?;
            let twin = twin.and_then(|t| t.open_dir(name).ok());
            self.dir_contents(&dir, twin.as_ref(), &target, None)?;
            self.done.entries += 1;
            let st = at::fstat(&dir.file)?;
            return finish_open(&dir.file, &target.file, &st, self.onto_overlay);
        }
        if self.onto_overlay {
            make_way(to, name)?;
            if kind == FileType::CharacterDevice && st.st_rdev == 0 {
                // A whiteout: the path is gone, as it is in the source.
                self.done.entries += 1;
                return Ok(());
            }
        }
        if st.st_nlink > 1 {
            let key = (st.st_dev, st.st_ino);
            if let Some(first) = self.links.get(&key) {
                at::linkat(at::CWD, first.as_path(), &to.file, name, AtFlags::empty())?;
                self.done.entries += 1;
                return Ok(());
            }
            self.links.insert(key, to.path.join(name));
        }
        match kind {
            FileType::RegularFile => self.file(from, twin, to, name),
            FileType::Symlink => {
                let target = at::readlinkat(&from.file, name, Vec::new())?;
                at::symlinkat(target.as_c_str(), &to.file, name)?;
                self.done.entries += 1;
                finish_named(from, to, name, &st, false, self.onto_overlay)
            }
            _ => {
                // Character and block devices (whiteouts among them) and FIFOs.
                let mode = Mode::from_raw_mode(st.st_mode as _);
                at::mknodat(&to.file, name, kind, mode, st.st_rdev as _)?;
                self.done.entries += 1;
                finish_named(from, to, name, &st, true, self.onto_overlay)
            }
        }
    }

    /// A regular file: its bytes by `copy_file_range`, then owner, xattrs, mode and times,
    /// all through the open files.
    fn file(&mut self, from: &Dir, twin: Option<&Dir>, to: &Dir, name: &OsStr) -> io::Result<()> {
        let upper = from.open_file(name)?;
        let st = at::fstat(&upper)?;
        if FileType::from_raw_mode(st.st_mode as _) != FileType::RegularFile {
            return Err(io::Error::other("it changed while it was copied"));
        }
        // The same file through the source's mount (the same bytes: an upper file is what
        // the overlay shows), when it is there and is that file.
        let through = twin.and_then(|t| t.open_file(name).ok()).filter(|f| {
            at::fstat(f).is_ok_and(|m| {
                FileType::from_raw_mode(m.st_mode as _) == FileType::RegularFile
                    && m.st_size == st.st_size
            })
        });
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut target: File =
            at::openat(&to.file, name, flags, Mode::from_raw_mode(0o600))?.into();
        let mut source = through.as_ref().unwrap_or(&upper);
        self.done.bytes += io::copy(&mut source, &mut target)?;
        self.done.entries += 1;
        // The upper file's xattrs: what the overlay shows through the mount is its own view.
        finish_open(&upper, &target, &st, self.onto_overlay)
    }
}

/// Before a directory is copied onto a mounted overlay: what is at `name` goes, unless it is
/// a directory that the source's merges into (not opaque). A redirected directory is refused.
fn make_way_for_dir(source: &Dir, to: &Dir, name: &OsStr) -> io::Result<()> {
    if overlay_xattr(&source.file, "redirect")?.is_some() {
        return Err(io::Error::other(
            "a renamed directory whose files the overlay keeps elsewhere",
        ));
    }
    let opaque = overlay_xattr(&source.file, "opaque")?.as_deref() == Some(b"y");
    match to.stat(name)? {
        Some(there) if FileType::from_raw_mode(there.st_mode as _) == FileType::Directory => {
            if opaque {
                fs::remove_dir_all(to.path.join(name))?;
            }
            Ok(())
        }
        Some(_) => Ok(at::unlinkat(&to.file, name, AtFlags::empty())?),
        None => Ok(()),
    }
}

/// Before anything but a directory is copied onto a mounted overlay: what is at `name` goes.
fn make_way(to: &Dir, name: &OsStr) -> io::Result<()> {
    match to.stat(name)? {
        Some(there) if FileType::from_raw_mode(there.st_mode as _) == FileType::Directory => {
            fs::remove_dir_all(to.path.join(name))
        }
        Some(_) => Ok(at::unlinkat(&to.file, name, AtFlags::empty())?),
        None => Ok(()),
    }
}

/// Into an upper directory, only a directory the engine made (a mount point) may be there.
fn refuse_unless_dir(to: &Dir, name: &OsStr) -> io::Result<()> {
    match to.stat(name)? {
        Some(there) if FileType::from_raw_mode(there.st_mode as _) != FileType::Directory => {
            Err(io::Error::from(io::ErrorKind::AlreadyExists))
        }
        _ => Ok(()),
    }
}

/// Owner, xattrs, mode and times of an open target (a file or directory) from the open
/// source. The mode goes after the owner (chown clears set-user-ID and set-group-ID bits)
/// and the times last (adding a directory's entries changed its mtime).
fn finish_open(source: &File, target: &File, st: &Stat, onto_overlay: bool) -> io::Result<()> {
    std::os::unix::fs::fchown(target, Some(st.st_uid), Some(st.st_gid))?;
    copy_xattrs(source, target, onto_overlay)?;
    at::fchmod(
        target,
        Mode::from_raw_mode(st.st_mode as _) & Mode::from_raw_mode(0o7777),
    )?;
    at::futimens(target, &times(st))?;
    Ok(())
}

/// `finish_open` for a symlink or device made at `name` in `to`, which cannot be opened:
/// by name, never followed (a symlink keeps its own mode).
fn finish_named(
    from: &Dir,
    to: &Dir,
    name: &OsStr,
    st: &Stat,
    set_mode: bool,
    onto_overlay: bool,
) -> io::Result<()> {
    let (uid, gid) = (at::Uid::from_raw(st.st_uid), at::Gid::from_raw(st.st_gid));
    at::chownat(
        &to.file,
        name,
        Some(uid),
        Some(gid),
        AtFlags::SYMLINK_NOFOLLOW,
    )?;
    let (src, dst) = (from.entry_path(name), to.entry_path(name));
    for (attr, value) in xattrs_at(&src, onto_overlay)? {
        xattr::set(&dst, &attr, &value)?;
    }
    if set_mode {
        let mode = Mode::from_raw_mode(st.st_mode as _) & Mode::from_raw_mode(0o7777);
        at::chmodat(&to.file, name, mode, AtFlags::empty())?;
    }
    at::utimensat(&to.file, name, &times(st), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

fn times(st: &Stat) -> Timestamps {
    Timestamps {
        last_access: at::Timespec {
            tv_sec: st.st_atime as _,
            tv_nsec: st.st_atime_nsec as _,
        },
        last_modification: at::Timespec {
            tv_sec: st.st_mtime as _,
            tv_nsec: st.st_mtime_nsec as _,
        },
    }
}

/// An overlay xattr (`trusted.overlay.<name>`) of an open upper directory.
fn overlay_xattr(dir: &File, name: &str) -> io::Result<Option<Vec<u8>>> {
    match dir.get_xattr(format!("{OVERLAY_XATTRS}{name}")) {
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => Ok(None),
        r => r,
    }
}

/// Every extended attribute of open `source` (overlay's `trusted.*` ones included, unless
/// `onto_overlay`) onto open `target`.
fn copy_xattrs(source: &File, target: &File, onto_overlay: bool) -> io::Result<()> {
    let names = match source.list_xattr() {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names.filter(|n| keep_xattr(n, onto_overlay)) {
        if let Some(value) = source.get_xattr(&name)? {
            target.set_xattr(&name, &value)?;
        }
    }
    Ok(())
}

/// The extended attributes to copy of the entry at `src` (not followed if a symlink; none
/// where its filesystem has none).
fn xattrs_at(src: &Path, onto_overlay: bool) -> io::Result<Vec<(OsString, Vec<u8>)>> {
    let names = match xattr::list(src) {
        Ok(names) => names,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    for name in names.filter(|n| keep_xattr(n, onto_overlay)) {
        if let Some(value) = xattr::get(src, &name)? {
            out.push((name, value));
        }
    }
    Ok(out)
}

fn keep_xattr(name: &OsStr, onto_overlay: bool) -> bool {
    !(onto_overlay
        && name
            .as_encoded_bytes()
            .starts_with(OVERLAY_XATTRS.as_bytes()))
}

/// An error with the entry it happened at (the innermost one: outer ones keep it).
fn annotate(e: io::Error, at: &str) -> io::Error {
    if e.get_ref().is_some_and(|inner| inner.is::<AtEntry>()) {
        return e;
    }
    io::Error::new(e.kind(), AtEntry(format!("{at}: {e}")))
}

#[derive(Debug)]
struct AtEntry(String);

impl std::fmt::Display for AtEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AtEntry {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};

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
        let parent = Dir::open(t.path()).unwrap();
        // What the walk does with an entry it listed as a directory.
        let e = parent.open_dir(OsStr::new("swapped")).err().unwrap();
        // O_DIRECTORY | O_NOFOLLOW on a symlink: ENOTDIR (ELOOP on some kernels).
        assert!(
            matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)),
            "{e}"
        );
        assert!(parent.open_dir(OsStr::new("real")).is_ok());
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

    fn c_path(p: &Path) -> io::Result<std::ffi::CString> {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
    }

    fn xattr_set(p: &Path, name: &str, v: &[u8]) -> bool {
        xattr::set(p, name, v).is_ok()
    }

    fn xattr_get(p: &Path, name: &str) -> Vec<u8> {
        xattr::get(p, name).unwrap().unwrap_or_default()
    }
}
