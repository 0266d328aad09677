//! A container's changes read from its overlay2 upper directory: every entry there is added
//! or modified, a character device 0:0 is a deletion (a whiteout), and a directory marked
//! opaque replaced the image's directory of that name. Listing the upper directory costs
//! as much as the changes; Docker's own diff, on kernels where it cannot use overlay's
//! native diff, walks the whole filesystem against the image (seconds for a large image).
//!
//! Only names and types are read here, never contents, and nothing is followed: the guest
//! reads the files themselves, from inside the sandbox.

use super::{ChangeKind, FsChange};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// The changes under `upper`, parents before children.
pub fn changes(upper: &Path) -> std::io::Result<Vec<FsChange>> {
    // It must be there (the engine may run on another machine): an error, not "no changes".
    if !std::fs::symlink_metadata(upper)?.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            upper.display()
        )));
    }
    let mut out = Vec::new();
    walk(upper, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<FsChange>) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // Removed by the running sandbox while we looked.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let path = format!("{prefix}/{}", name.to_string_lossy());
        let meta = match entry.path().symlink_metadata() {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let t = meta.file_type();
        if t.is_char_device() && meta.rdev() == 0 {
            out.push(FsChange {
                path,
                kind: ChangeKind::Deleted,
            });
        } else if t.is_dir() {
            if is_opaque(&entry.path()) {
                // The image's directory was removed and this one made in its place.
                out.push(FsChange {
                    path: path.clone(),
                    kind: ChangeKind::Deleted,
                });
            }
            out.push(FsChange {
                path: path.clone(),
                kind: ChangeKind::Added,
            });
            walk(&entry.path(), &path, out)?;
        } else {
            out.push(FsChange {
                path,
                kind: ChangeKind::Added,
            });
        }
    }
    Ok(())
}

/// Whether overlayfs marked the directory opaque (`trusted.overlay.opaque = y`; the
/// `xattr` crate does not follow a symlink).
fn is_opaque(dir: &Path) -> bool {
    xattr::get(dir, "trusted.overlay.opaque")
        .ok()
        .flatten()
        .is_some_and(|v| v == b"y")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_whiteouts_and_opaque_directories() {
        let d = tempfile::tempdir().unwrap();
        let u = d.path();
        std::fs::create_dir_all(u.join("workspace/app")).unwrap();
        std::fs::write(u.join("workspace/app/a.txt"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", u.join("workspace/link")).unwrap();
        std::fs::create_dir_all(u.join("usr/share/doc")).unwrap();
        let whiteout =
            std::ffi::CString::new(u.join("etc_motd").as_os_str().to_str().unwrap()).unwrap();
        // Whiteouts and trusted xattrs need root (as the node runs); skip those parts otherwise.
        let root = crate::runtime::running_as_root();
        if root {
            // SAFETY: a valid path; makedev(0, 0).
            assert_eq!(
                unsafe { libc::mknod(whiteout.as_ptr(), libc::S_IFCHR | 0o600, 0) },
                0
            );
            let doc = std::ffi::CString::new(u.join("usr/share/doc").to_str().unwrap()).unwrap();
            // SAFETY: valid pointers and lengths.
            let rc = unsafe {
                libc::lsetxattr(
                    doc.as_ptr(),
                    c"trusted.overlay.opaque".as_ptr(),
                    b"y".as_ptr().cast(),
                    1,
                    0,
                )
            };
            assert_eq!(rc, 0);
        }
        let mut got: Vec<(String, ChangeKind)> = changes(u)
            .unwrap()
            .into_iter()
            .map(|c| (c.path, c.kind))
            .collect();
        assert!(changes(&u.join("missing")).is_err());
        got.sort_by(|a, b| a.0.cmp(&b.0).then((a.1 as u8).cmp(&(b.1 as u8))));
        let mut want = vec![
            ("/usr".to_string(), ChangeKind::Added),
            ("/usr/share".to_string(), ChangeKind::Added),
            ("/usr/share/doc".to_string(), ChangeKind::Added),
            ("/workspace".to_string(), ChangeKind::Added),
            ("/workspace/app".to_string(), ChangeKind::Added),
            ("/workspace/app/a.txt".to_string(), ChangeKind::Added),
            ("/workspace/link".to_string(), ChangeKind::Added),
        ];
        if root {
            want.push(("/etc_motd".to_string(), ChangeKind::Deleted));
            want.push(("/usr/share/doc".to_string(), ChangeKind::Deleted));
        }
        want.sort_by(|a, b| a.0.cmp(&b.0).then((a.1 as u8).cmp(&(b.1 as u8))));
        assert_eq!(got, want);
    }
}
