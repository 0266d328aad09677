//! A container's changes read from its overlay2 upper directory: every entry there is added
//! or modified, a character device 0:0 is a deletion (a whiteout), and a directory marked
//! opaque replaced the image's directory of that name. Listing the upper directory costs
//! as much as the changes; Docker's own diff, on kernels where it cannot use overlay's
//! native diff, walks the whole filesystem against the image (seconds for a large image).
//!
//! Only names and types are read here, never contents, and nothing is followed: the walk
//! goes from open directory to open directory by name (`fd_dir`), so a directory the
//! running sandbox swaps for a symlink while it is listed is skipped, never entered (the
//! guest reads the files themselves, from inside the sandbox).

use super::fd_dir::Dir;
use super::{ChangeKind, FsChange};
use rustix::fs::FileType;
use std::ffi::OsStr;
use std::path::Path;
use xattr::FileExt;

/// The changes under `upper`, parents before children.
pub fn changes(upper: &Path) -> std::io::Result<Vec<FsChange>> {
    // It must be there (the engine may run on another machine): an error, not "no changes".
    let root = Dir::open(upper)?;
    let mut out = Vec::new();
    walk(&root, "", &mut out)?;
    Ok(out)
}

fn walk(dir: &Dir, prefix: &str, out: &mut Vec<FsChange>) -> std::io::Result<()> {
    let names = match dir.names() {
        Ok(n) => n,
        // Removed by the running sandbox while we looked.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in names {
        let path = format!("{prefix}/{}", name.to_string_lossy());
        // Gone since it was listed: nothing to report.
        let Some(st) = dir.stat(&name)? else { continue };
        match FileType::from_raw_mode(st.st_mode as _) {
            FileType::CharacterDevice if st.st_rdev == 0 => out.push(FsChange {
                path,
                kind: ChangeKind::Deleted,
            }),
            FileType::Directory => {
                // Removed or swapped since it was looked at: nothing to list in it.
                let Some(sub) = dir.open_dir_if_present(&name)? else {
                    continue;
                };
                if is_opaque(&sub) {
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
                walk(&sub, &path, out)?;
            }
            _ => out.push(FsChange {
                path,
                kind: ChangeKind::Added,
            }),
        }
    }
    Ok(())
}

/// Whether overlayfs marked the open directory opaque (`trusted.overlay.opaque = y`).
fn is_opaque(dir: &Dir) -> bool {
    dir.file
        .get_xattr(OsStr::new("trusted.overlay.opaque"))
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

    #[test]
    fn a_symlink_to_a_directory_is_an_entry_never_a_walk() {
        let d = tempfile::tempdir().unwrap();
        let host = d.path().join("host");
        std::fs::create_dir_all(host.join("secret-dir")).unwrap();
        std::fs::write(host.join("secret-dir/key"), b"k").unwrap();
        let u = d.path().join("upper");
        std::fs::create_dir_all(u.join("workspace")).unwrap();
        std::os::unix::fs::symlink(&host, u.join("workspace/escape")).unwrap();
        let got: Vec<String> = changes(&u).unwrap().into_iter().map(|c| c.path).collect();
        assert_eq!(got, vec!["/workspace", "/workspace/escape"]);
        // An upper directory that is itself a symlink is not followed either.
        std::os::unix::fs::symlink(&host, d.path().join("upper-link")).unwrap();
        assert!(changes(&d.path().join("upper-link")).is_err());
    }
}
