//! Whole directories as tar streams (`GET|PUT /fs/archive?path=`), what `warren cp -r` and
//! the SDKs move directories with. A download holds the directory's entries named relative
//! to it (files, directories, symbolic links as links, hard links once; modes and times).
//! An upload makes a new directory: it is extracted beside the target and renamed into place
//! only once the whole archive was read, so a broken or refused upload leaves nothing behind.

use crate::archive::{append_entry, inside, tokio_stream_from, ChannelWriter};
use crate::fsops::{check_path, io_error, normalize, GUEST_DIR};
use crate::http::{self, Body, Request, Response};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use tokio::sync::mpsc;
use warren_api::files::{ArchiveUploadResponse, TAR_CONTENT_TYPE};
use warren_api::{ApiError, ErrorCode};

/// `GET /fs/archive?path=DIR`: a tar of what is below `DIR`.
pub async fn download(path: &str) -> Result<Response, ApiError> {
    check_path(path, false)?;
    let root = PathBuf::from(normalize(path));
    let meta = tokio::fs::metadata(&root)
        .await
        .map_err(|e| io_error(path, e))?;
    if !meta.is_dir() {
        return Err(ApiError::new(
            ErrorCode::NotADirectory,
            format!("{path}: not a directory (read a file with GET …/files{path})"),
        ));
    }
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let errors = tx.clone();
        let mut b = tar::Builder::new(ChannelWriter::new(tx));
        b.follow_symlinks(false);
        b.mode(tar::HeaderMode::Complete);
        let mut linked = HashMap::new();
        let written = append_tree(&mut b, &root, "", &mut linked)
            .and_then(|()| b.into_inner())
            .and_then(|mut w| w.flush());
        // A failure mid-way breaks the response off: the client sees an incomplete archive,
        // never a short one that looks whole.
        if let Err(e) = written {
            let _ = errors.blocking_send(Err(e));
        }
    });
    let stream = tokio_stream_from(rx).map_ok(Frame::data);
    let body: Body = BodyExt::boxed(StreamBody::new(stream));
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", TAR_CONTENT_TYPE)
        .body(body)
        .expect("valid response"))
}

/// Appends everything below `dir`, in name order, as `prefix` + its path below `dir`.
fn append_tree<W: Write>(
    b: &mut tar::Builder<W>,
    dir: &Path,
    prefix: &str,
    linked: &mut HashMap<(u64, u64), String>,
) -> std::io::Result<()> {
    let mut names = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<Vec<_>>>()?;
    names.sort();
    for n in names {
        let full = dir.join(&n);
        if full == Path::new(GUEST_DIR) {
            continue;
        }
        let (Some(full_str), Some(n)) = (full.to_str(), n.to_str()) else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: a name that is not UTF-8", full.display()),
            ));
        };
        let name = format!("{prefix}{n}");
        match append_entry(b, full_str, &name, linked, None) {
            Ok(()) => {}
            // Gone since it was listed: nothing to send.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{full_str}: {e}"))),
        }
        if std::fs::symlink_metadata(&full).is_ok_and(|m| m.is_dir()) {
            append_tree(b, &full, &format!("{name}/"), linked)?;
        }
    }
    Ok(())
}

/// `PUT /fs/archive?path=DIR`: the body, a tar, becomes the new directory `DIR`.
pub async fn upload(path: &str, req: Request) -> Result<Response, ApiError> {
    let mut body = req.into_body();
    let staging = match make_staging(path).await {
        Ok(staging) => staging,
        Err(e) => {
            http::discard_body(&mut body).await;
            return Err(e);
        }
    };
    let target = PathBuf::from(normalize(path));
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let mut reader = std::io::BufReader::with_capacity(
        1 << 20,
        tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream)),
    );
    let into = staging.clone();
    let extracted = tokio::task::spawn_blocking(move || {
        let r = extract_new(&mut reader, &into);
        // Read the rest (after a failure, and after the archive's end: the tar reader stops
        // at its first zero block, before the padding a writer adds), so the node's write
        // of the body ends and it gets this answer instead of a broken pipe.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        r
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))
    .and_then(|r| r.map_err(|e| upload_error(path, e)));
    let done = match extracted {
        Ok(counts) => tokio::fs::rename(&staging, &target)
            .await
            .map(|()| counts)
            .map_err(|e| io_error(path, e)),
        Err(e) => Err(e),
    };
    match done {
        Ok((entries, bytes)) => Ok(http::json(
            200,
            &ArchiveUploadResponse {
                path: path.to_string(),
                entries,
                bytes,
            },
        )),
        Err(e) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            Err(e)
        }
    }
}

/// Checks that `path` is new and makes the empty directory beside it that the upload is
/// unpacked into.
async fn make_staging(path: &str) -> Result<PathBuf, ApiError> {
    check_path(path, true)?;
    let target = PathBuf::from(normalize(path));
    if tokio::fs::symlink_metadata(&target).await.is_ok() {
        return Err(ApiError::new(
            ErrorCode::AlreadyExists,
            format!("{path}: already exists (an archive is unpacked into a new directory)"),
        ));
    }
    let parent = target.parent().unwrap_or(Path::new("/")).to_path_buf();
    tokio::fs::create_dir_all(&parent)
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => ApiError::new(
                ErrorCode::NotADirectory,
                format!("{path}: a path component is not a directory"),
            ),
            _ => io_error(path, e),
        })?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = parent.join(format!(
        ".{name}.warren-{:08x}.upload",
        crate::sessions::rand_u32()
    ));
    tokio::fs::create_dir(&staging)
        .await
        .map_err(|e| io_error(path, e))?;
    Ok(staging)
}

/// An upload's failure: the sandbox's own (no space, …) by its code; anything else is the
/// archive's (malformed, cut off, an entry that leaves the directory).
fn upload_error(path: &str, e: std::io::Error) -> ApiError {
    if e.raw_os_error().is_some() {
        return io_error(path, e);
    }
    ApiError::invalid(format!("{path}: the archive cannot be unpacked: {e}"))
}

/// Extracts a tar into the empty directory `root`: entries must stay inside it (no `..`,
/// no absolute names, no hard link to outside, nothing written through a symbolic link);
/// devices and FIFOs are refused. Owners are not taken from the archive: what is unpacked
/// belongs to the sandbox's user, as every other upload does. (entries, bytes).
fn extract_new(reader: impl std::io::Read, root: &Path) -> std::io::Result<(u64, u64)> {
    use tar::EntryType;
    let mut a = tar::Archive::new(reader);
    a.set_preserve_permissions(true);
    a.set_preserve_ownerships(false);
    a.set_preserve_mtime(true);
    a.set_overwrite(true);
    let (mut entries, mut bytes) = (0u64, 0u64);
    for entry in a.entries()? {
        let mut e = entry?;
        let rel: PathBuf = e
            .path()?
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        if rel.as_os_str().is_empty() {
            continue;
        }
        inside(root, &rel)?;
        match e.header().entry_type() {
            EntryType::Regular | EntryType::Directory | EntryType::Symlink => {}
            EntryType::Link => {
                let target = e.link_name()?.ok_or_else(|| {
                    bad(format!("{}: a hard link without a target", rel.display()))
                })?;
                inside(root, &target)?;
            }
            other => {
                return Err(bad(format!(
                    "{}: {other:?} entries are not accepted (files, directories and links are)",
                    rel.display()
                )))
            }
        }
        bytes += e.size();
        if !e.unpack_in(root)? {
            return Err(bad(format!("{} leaves the directory", rel.display())));
        }
        entries += 1;
    }
    Ok((entries, bytes))
}

fn bad(message: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        build(&mut b);
        b.into_inner().unwrap()
    }

    fn file(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o640);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, name, data).unwrap();
    }

    /// A header whose name is written raw (the tar crate's setters refuse `..`).
    fn raw_entry(b: &mut tar::Builder<Vec<u8>>, name: &str, kind: tar::EntryType, link: &str) {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
        h.set_entry_type(kind);
        h.set_size(0);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, std::io::empty()).unwrap();
    }

    #[test]
    fn a_tree_round_trips_with_its_modes_and_links() {
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::create_dir_all(s.join("a/b")).unwrap();
        std::fs::write(s.join("a/b/f.txt"), b"hello").unwrap();
        std::os::unix::fs::symlink("b/f.txt", s.join("a/link")).unwrap();
        std::fs::hard_link(s.join("a/b/f.txt"), s.join("a/hard")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(s.join("a/b/f.txt"), std::fs::Permissions::from_mode(0o751))
            .unwrap();

        let mut b = tar::Builder::new(Vec::new());
        append_tree(&mut b, s, "", &mut HashMap::new()).unwrap();
        let archive = b.into_inner().unwrap();

        let dst = tempfile::tempdir().unwrap();
        let (entries, bytes) = extract_new(&archive[..], dst.path()).unwrap();
        assert_eq!(
            (entries, bytes),
            (5, 5),
            "a, a/b, a/b/f.txt, a/hard, a/link"
        );
        let d = dst.path();
        assert_eq!(std::fs::read(d.join("a/hard")).unwrap(), b"hello");
        assert_eq!(
            std::fs::read_link(d.join("a/link")).unwrap(),
            Path::new("b/f.txt")
        );
        let mode = std::fs::metadata(d.join("a/b/f.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o751);
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            std::fs::metadata(d.join("a/hard")).unwrap().ino(),
            std::fs::metadata(d.join("a/b/f.txt")).unwrap().ino(),
            "a hard link stays one file"
        );
    }

    #[test]
    fn entries_that_leave_the_directory_are_refused() {
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        let victim_str = victim.to_str().unwrap().to_string();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "dot-dot",
                tar_of(|b| raw_entry(b, "../escape", tar::EntryType::Regular, "")),
            ),
            (
                "absolute",
                tar_of(|b| raw_entry(b, &victim_str, tar::EntryType::Regular, "")),
            ),
            (
                "hard link out",
                tar_of(|b| raw_entry(b, "h", tar::EntryType::Link, &victim_str)),
            ),
            (
                "through a symlink",
                tar_of(|b| {
                    raw_entry(
                        b,
                        "l",
                        tar::EntryType::Symlink,
                        outside.path().to_str().unwrap(),
                    );
                    file(b, "l/victim", b"overwritten");
                }),
            ),
            (
                "a device",
                tar_of(|b| raw_entry(b, "dev", tar::EntryType::Char, "")),
            ),
        ];
        for (what, archive) in cases {
            let dst = tempfile::tempdir().unwrap();
            let r = extract_new(&archive[..], dst.path());
            assert!(r.is_err(), "{what}: accepted");
            assert_eq!(
                std::fs::read(&victim).unwrap(),
                b"untouched",
                "{what}: wrote outside"
            );
        }
    }

    #[test]
    fn a_cut_archive_is_an_error() {
        let whole = tar_of(|b| file(b, "big", &[7u8; 4096]));
        let cut = &whole[..1024];
        let dst = tempfile::tempdir().unwrap();
        assert!(extract_new(cut, dst.path()).is_err());
    }
}
