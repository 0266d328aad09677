//! Archives for snapshots: `POST /archive/pack` streams a tar of the paths the node names,
//! `POST /archive/remove` deletes paths, `POST /archive/unpack` extracts a tar stream over
//! the root filesystem. The node decides what changed (from the container engine); the
//! guest only reads and writes files, so that any image works.

use crate::http::{self, Body, Request, Response};
use bytes::Bytes;
use futures_util::TryStreamExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use std::io::Write;
use std::path::Path;
use tokio::sync::mpsc;
use warren_api::snapshot::{PackRequest, RemovePathsRequest};
use warren_api::ApiError;

/// Bytes gathered before a piece of the archive goes out.
const PIECE: usize = 256 * 1024;

/// A `Write` that hands the archive to the response body in pieces.
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
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "reader went away"))
    }
}

impl Write for ChannelWriter {
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

pub async fn pack(req: Request) -> Result<Response, ApiError> {
    let body: PackRequest = http::read_json(req).await?;
    for p in &body.paths {
        warren_api::files::validate_path(p)?;
    }
    if body.quiesce {
        quiesce().await;
    }
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(8);
    tokio::task::spawn_blocking(move || {
        let errors = tx.clone();
        if let Err(e) = write_archive(&body.paths, tx) {
            let _ = errors.blocking_send(Err(e));
        }
    });
    let stream = tokio_stream_from(rx).map_ok(Frame::data);
    let out: Body = BodyExt::boxed(StreamBody::new(stream));
    Ok(hyper::Response::builder()
        .status(200)
        .header("content-type", "application/x-tar")
        .body(out)
        .expect("valid response"))
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<std::io::Result<Bytes>>,
) -> impl futures_util::Stream<Item = std::io::Result<Bytes>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn write_archive(
    paths: &[String],
    tx: mpsc::Sender<std::io::Result<Bytes>>,
) -> std::io::Result<()> {
    let mut b = tar::Builder::new(ChannelWriter {
        tx,
        buf: Vec::with_capacity(PIECE),
    });
    b.follow_symlinks(false);
    b.mode(tar::HeaderMode::Complete);
    for p in paths {
        let name = p.trim_start_matches('/');
        if name.is_empty() {
            continue;
        }
        let meta = match std::fs::symlink_metadata(p) {
            Ok(m) => m,
            // Gone since the node listed it (a temporary file): nothing to save.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{p}: {e}"))),
        };
        let t = meta.file_type();
        // Sockets, pipes and devices are not saved (they are recreated by what uses them).
        if !(t.is_file() || t.is_dir() || t.is_symlink()) {
            continue;
        }
        match b.append_path_with_name(p, name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(std::io::Error::new(e.kind(), format!("{p}: {e}"))),
        }
    }
    b.into_inner()?.flush()
}

/// Stops every process of the sandbox but this one (PID 1 of its namespace), so that the
/// files are still while they are saved. Used only right before the sandbox sleeps.
async fn quiesce() {
    // SAFETY: kill(2) with pid -1 from PID 1 signals every other process in the namespace.
    unsafe {
        libc::kill(-1, libc::SIGKILL);
    }
    // Let the kernel finish tearing them down (their open files close with them).
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

pub async fn remove(req: Request) -> Result<Response, ApiError> {
    let body: RemovePathsRequest = http::read_json(req).await?;
    for p in &body.paths {
        warren_api::files::validate_path(p)?;
        if p == "/" {
            return Err(ApiError::invalid("refusing to remove /"));
        }
    }
    let removed = tokio::task::spawn_blocking(move || {
        let mut removed = 0u64;
        for p in &body.paths {
            let r = match std::fs::symlink_metadata(p) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
                Ok(_) => std::fs::remove_file(p),
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ApiError::internal(format!("cannot remove {p}: {e}"))),
            }
        }
        Ok(removed)
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))??;
    Ok(http::json(200, &serde_json::json!({ "removed": removed })))
}

pub async fn unpack(req: Request) -> Result<Response, ApiError> {
    let stream = req
        .into_body()
        .into_data_stream()
        .map_err(std::io::Error::other);
    // Large reads: every read through the bridge is a trip into the async runtime.
    let mut reader = std::io::BufReader::with_capacity(
        1 << 20,
        tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream)),
    );
    let (entries, bytes) = tokio::task::spawn_blocking(move || {
        let r = extract(&mut reader, Path::new("/"));
        if r.is_err() {
            // Read the rest, so the node gets this answer instead of a broken connection.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        }
        r
    })
    .await
    .map_err(|e| ApiError::internal(e.to_string()))?
    .map_err(|e| ApiError::internal(format!("cannot unpack the snapshot: {e}")))?;
    Ok(http::json(
        200,
        &serde_json::json!({ "entries": entries, "bytes": bytes }),
    ))
}

/// Extracts a tar over `root`, keeping modes, owners and times: (entries, bytes).
fn extract(reader: impl std::io::Read, root: &Path) -> std::io::Result<(u64, u64)> {
    let mut a = tar::Archive::new(reader);
    a.set_overwrite(true);
    a.set_preserve_permissions(true);
    a.set_preserve_ownerships(true);
    a.set_preserve_mtime(true);
    a.set_unpack_xattrs(false);
    let (mut entries, mut bytes) = (0u64, 0u64);
    for entry in a.entries()? {
        let mut e = entry?;
        bytes += e.size();
        e.unpack_in(root)?;
        entries += 1;
    }
    Ok((entries, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_round_trip_keeps_files_links_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::create_dir_all(s.join("d/e")).unwrap();
        std::fs::write(s.join("d/e/f.txt"), b"hello").unwrap();
        std::fs::set_permissions(s.join("d/e/f.txt"), std::fs::Permissions::from_mode(0o751))
            .unwrap();
        std::os::unix::fs::symlink("e/f.txt", s.join("d/link")).unwrap();
        let paths: Vec<String> = ["d", "d/e", "d/e/f.txt", "d/link", "d/vanished"]
            .iter()
            .map(|p| s.join(p).to_string_lossy().to_string())
            .collect();
        let (tx, mut rx) = mpsc::channel(64);
        let writer = std::thread::spawn(move || write_archive(&paths, tx));
        let mut tar_bytes = Vec::new();
        while let Some(piece) = rx.blocking_recv() {
            tar_bytes.extend_from_slice(&piece.unwrap());
        }
        writer.join().unwrap().unwrap();

        let dst = tempfile::tempdir().unwrap();
        let (entries, bytes) = extract(&tar_bytes[..], dst.path()).unwrap();
        assert_eq!((entries, bytes), (4, 5));
        let out = dst.path().join(s.strip_prefix("/").unwrap());
        assert_eq!(std::fs::read(out.join("d/e/f.txt")).unwrap(), b"hello");
        let mode = std::fs::metadata(out.join("d/e/f.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o751);
        assert_eq!(
            std::fs::read_link(out.join("d/link")).unwrap(),
            Path::new("e/f.txt")
        );
    }
}
