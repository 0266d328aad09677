//! `warren cp -r`: whole directories to or from a sandbox as one tar stream
//! (`…/fs/archive`). Named as `cp -r` names them: into an existing directory the copy goes
//! below it under the source's name; otherwise it becomes the destination. Neither side
//! sees a half-copied directory: the node unpacks an upload beside its target and renames it
//! into place, and a download is unpacked here beside its target, then renamed.

use super::client;
use crate::args::Conn;
use anyhow::{bail, Context};
use bytes::Bytes;
use futures_util::TryStreamExt;
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;
use warren_api::files::FileType;
use warren_api::ErrorCode;

/// Where a copy of `src` lands when `dst` is named, as `cp -r` decides: below `dst` when it
/// is an existing directory, `dst` itself when nothing is there.
pub fn landing(src: &str, dst: &str, dst_is_dir: bool) -> anyhow::Result<String> {
    if !dst_is_dir {
        return Ok(dst.to_string());
    }
    let name = Path::new(src.trim_end_matches('/'))
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| *n != "." && *n != "..")
        .with_context(|| format!("{src} has no name to copy it under in {dst}"))?;
    Ok(format!("{}/{name}", dst.trim_end_matches('/')))
}

/// Local directory `src` into sandbox `id` at `dst`.
pub async fn upload(conn: &Conn, src: &str, id: &str, dst: &str) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let meta = std::fs::metadata(src).with_context(|| format!("cannot read {src}"))?;
    if !meta.is_dir() {
        bail!("{src} is not a directory (copy a file without -r)");
    }
    let dst_is_dir = match c.stat(id, dst).await {
        Ok(s) if s.file_type == FileType::Directory => true,
        Ok(_) => bail!("{id}:{dst} exists and is not a directory"),
        Err(e) if e.code() == Some(ErrorCode::FileNotFound) => false,
        Err(e) => return Err(e.into()),
    };
    let target = landing(src, dst, dst_is_dir)?;
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(8);
    let root = PathBuf::from(src);
    let packing = tokio::task::spawn_blocking(move || pack(&root, tx));
    let body = reqwest::Body::wrap_stream(futures_util::stream::unfold(rx, |mut rx| async {
        rx.recv().await.map(|item| (item, rx))
    }));
    let sent = c.upload_dir(id, &target, body).await;
    // A local read error ends the body early: the node refuses the cut archive, and the
    // local error is the one worth telling.
    packing
        .await?
        .with_context(|| format!("cannot read {src}"))?;
    let r = sent?;
    if conn.json {
        crate::output::json(&r);
    } else {
        eprintln!("{} entries, {} bytes → {id}:{}", r.entries, r.bytes, r.path);
    }
    Ok(0)
}

/// Writes a tar of what is below `root` into `tx`, piece by piece.
fn pack(root: &Path, tx: mpsc::Sender<std::io::Result<Bytes>>) -> std::io::Result<()> {
    let mut b = tar::Builder::new(ChannelWriter {
        tx,
        buf: Vec::with_capacity(PIECE),
    });
    b.follow_symlinks(false);
    b.append_dir_all(".", root)?;
    b.into_inner()?.send()
}

const PIECE: usize = 256 * 1024;

struct ChannelWriter {
    tx: mpsc::Sender<std::io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let piece = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(PIECE)));
        self.tx
            .blocking_send(Ok(piece))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "upload ended"))
    }
}

impl std::io::Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// Directory `src` of sandbox `id` into local `dst`.
pub async fn download(conn: &Conn, id: &str, src: &str, dst: &str) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let dst_is_dir = match std::fs::metadata(dst) {
        Ok(m) if m.is_dir() => true,
        Ok(_) => bail!("{dst} exists and is not a directory"),
        Err(_) => false,
    };
    let target = PathBuf::from(landing(src, dst, dst_is_dir)?);
    if target.symlink_metadata().is_ok() {
        bail!("{} already exists", target.display());
    }
    let resp = c.download_dir(id, src).await?;
    let staging = PathBuf::from(format!(
        "{}.warren-partial-{}",
        target.display(),
        std::process::id()
    ));
    std::fs::create_dir(&staging)
        .with_context(|| format!("cannot create {}", staging.display()))?;
    let stream = resp.bytes_stream().map_err(std::io::Error::other);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let into = staging.clone();
    let unpacked = tokio::task::spawn_blocking(move || unpack(reader, &into)).await?;
    let done = unpacked
        .with_context(|| format!("cannot copy {id}:{src}"))
        .and_then(|n| {
            std::fs::rename(&staging, &target)
                .with_context(|| format!("cannot move the copy to {}", target.display()))?;
            Ok(n)
        });
    match done {
        Ok(entries) => {
            if !conn.json {
                eprintln!("{entries} entries ← {id}:{src} into {}", target.display());
            } else {
                crate::output::json(&serde_json::json!({
                    "path": target.display().to_string(),
                    "entries": entries,
                }));
            }
            Ok(0)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Unpacks a sandbox's archive under `root`. The archive comes from inside the sandbox, so
/// it is treated as hostile: the tar crate keeps every entry inside `root`, and neither
/// owners nor set-id bits are taken from it.
fn unpack(reader: impl std::io::Read, root: &Path) -> std::io::Result<u64> {
    let mut a = tar::Archive::new(reader);
    a.set_preserve_ownerships(false);
    a.set_preserve_permissions(false);
    a.set_preserve_mtime(true);
    let mut entries = 0u64;
    for entry in a.entries()? {
        let mut e = entry?;
        if !e.unpack_in(root)? {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} leaves the directory", e.path()?.display()),
            ));
        }
        entries += 1;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_lands_as_cp_r_lands_it() {
        assert_eq!(landing("src", "/w/new", false).unwrap(), "/w/new");
        assert_eq!(landing("a/src/", "/w", true).unwrap(), "/w/src");
        assert_eq!(landing("/x/proj", "out/", true).unwrap(), "out/proj");
        assert!(landing(".", "/w", true).is_err(), "no name to copy under");
        assert_eq!(landing(".", "/w/new", false).unwrap(), "/w/new");
    }

    #[test]
    fn a_packed_tree_unpacks_the_same_and_without_set_id_bits() {
        use std::os::unix::fs::PermissionsExt;
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("d/e")).unwrap();
        std::fs::write(src.path().join("d/e/f"), b"data").unwrap();
        std::fs::set_permissions(
            src.path().join("d/e/f"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        std::os::unix::fs::symlink("e/f", src.path().join("d/l")).unwrap();
        let (tx, mut rx) = mpsc::channel(64);
        let root = src.path().to_path_buf();
        std::thread::spawn(move || pack(&root, tx).unwrap())
            .join()
            .unwrap();
        let mut archive = Vec::new();
        while let Ok(piece) = rx.try_recv() {
            archive.extend_from_slice(&piece.unwrap());
        }
        let dst = tempfile::tempdir().unwrap();
        unpack(&archive[..], dst.path()).unwrap();
        assert_eq!(std::fs::read(dst.path().join("d/e/f")).unwrap(), b"data");
        assert_eq!(
            std::fs::read_link(dst.path().join("d/l")).unwrap(),
            Path::new("e/f")
        );
        let mode = std::fs::metadata(dst.path().join("d/e/f"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7000, 0, "no set-id bit from a sandbox's archive");
        assert_eq!(mode & 0o100, 0o100, "the execute bit stays");
    }
}
