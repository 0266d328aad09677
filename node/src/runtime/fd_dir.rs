//! Directories opened once and walked by name: every entry is reached from its open parent
//! (`openat`, `fstatat`, ...) and nothing is followed. The node walks directories a sandbox
//! can change while they are walked (overlay upper directories): reached this way, a
//! directory swapped for a symlink is never entered, and no path leads out of the tree.

use rustix::fs::{self as at, AtFlags, Mode, OFlags, Stat};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// An open directory. Every entry is reached from it by name (`openat`, `fstatat`, `mkdirat`, ...): no path is
/// walked again, which in a mounted overlay means a lookup in the overlay and each of its
/// layers per component, and nothing is followed, so a directory the sandbox turned into a
/// symlink after it was listed is never entered (opening it as a directory then fails).
pub(crate) struct Dir {
    pub(crate) file: File,
    /// Where it is, for messages and the rare call that needs a whole path.
    pub(crate) path: PathBuf,
}

const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

impl Dir {
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        let fd = at::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("{}: {e}", path.display()),
            )
        })?;
        Ok(Dir {
            file: fd.into(),
            path: path.to_path_buf(),
        })
    }

    /// Its subdirectory `name`, not followed if a symlink.
    pub(crate) fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let fd = at::openat(&self.file, name, DIR_FLAGS, Mode::empty())?;
        Ok(Dir {
            file: fd.into(),
            path: self.path.join(name),
        })
    }

    /// Its subdirectory `name` if it still is one: `None` when the running sandbox removed
    /// it, or swapped it for something that is not a directory (a symlink is never
    /// followed), since it was listed.
    pub(crate) fn open_dir_if_present(&self, name: &OsStr) -> io::Result<Option<Dir>> {
        match self.open_dir(name) {
            Ok(d) => Ok(Some(d)),
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP)
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Its regular file `name`, for reading: not followed if a symlink, never blocking on
    /// a FIFO.
    pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        Ok(at::openat(&self.file, name, flags, Mode::empty())?.into())
    }

    /// The entry `name` itself (a symlink is not followed); `None` if there is none.
    pub(crate) fn stat(&self, name: &OsStr) -> io::Result<Option<Stat>> {
        match at::statat(&self.file, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The names of its entries (`.` and `..` left out).
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        fs::read_dir(self.entry_path(OsStr::new("")))?
            .map(|e| e.map(|e| e.file_name()))
            .collect()
    }

    /// A path that reaches entry `name` through this open directory (for the xattr calls
    /// of symlinks and devices, which cannot be opened): only `name` is looked up.
    pub(crate) fn entry_path(&self, name: &OsStr) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.file.as_raw_fd())).join(name)
    }
}
