//! The guest's socket: where the node reaches it, answered only after the handshake
//! (`warren_api::guest_auth`), and taken back when something in the sandbox replaces it.
//!
//! The socket lives in the run directory, which the sandbox's own processes (root in the
//! container) can write: they can unlink it, or put a symlink, a FIFO, a file or a socket of
//! their own in its place. The node refuses all of those; this module makes the sandbox
//! reachable again: once a second the guest connects to its own path, and when the
//! listening end is not this process it removes whatever is there and binds anew.

use crate::server::{self, Guest};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use warren_api::guest_auth;

/// How often the guest checks that its socket path still leads to it.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long a new connection may take to send its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// Binds the socket at `path` and serves it until the process ends, taking the path back
/// whenever it stops leading here. Fails only if the first bind fails.
pub async fn serve(g: Arc<Guest>, path: PathBuf, secret: Arc<str>) -> std::io::Result<()> {
    let mut accepting = tokio::spawn(accept_loop(g.clone(), bind(&path)?, secret.clone()));
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        if leads_here(&path).await {
            continue;
        }
        eprintln!(
            "warren-guest: {} no longer leads to this guest; binding it again",
            path.display()
        );
        match bind(&path) {
            Ok(listener) => {
                // The old listener is unreachable by path: stop it (open connections stay).
                accepting.abort();
                accepting = tokio::spawn(accept_loop(g.clone(), listener, secret.clone()));
            }
            Err(e) => eprintln!("warren-guest: cannot bind {}: {e}", path.display()),
        }
    }
}

/// Removes whatever is at `path` (never following it) and listens there.
fn bind(path: &Path) -> std::io::Result<UnixListener> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path)?,
        Ok(_) => std::fs::remove_file(path)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    UnixListener::bind(path)
}

/// Whether connecting to `path` reaches a socket this process listens on.
async fn leads_here(path: &Path) -> bool {
    let connected = tokio::time::timeout(WATCH_EVERY, UnixStream::connect(path)).await;
    let Ok(Ok(stream)) = connected else {
        return false;
    };
    let me = std::process::id() as i32;
    stream.peer_cred().is_ok_and(|c| c.pid() == Some(me))
}

async fn accept_loop(g: Arc<Guest>, listener: UnixListener, secret: Arc<str>) {
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                eprintln!("warren-guest: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (g, secret) = (g.clone(), secret.clone());
        tokio::spawn(async move {
            let mut stream = stream;
            let answered =
                tokio::time::timeout(HELLO_TIMEOUT, answer_hello(&mut stream, &secret)).await;
            // Anything but a node's hello (our own check above, a sandbox process poking
            // at the socket) gets nothing and is closed.
            if matches!(answered, Ok(Ok(()))) {
                server::serve_connection(g, stream).await;
            }
        });
    }
}

/// Reads the node's hello and answers it with this guest's proof.
async fn answer_hello(stream: &mut UnixStream, secret: &str) -> std::io::Result<()> {
    let bad = |e: guest_auth::AuthError| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
    let mut buf = Vec::with_capacity(128);
    let line = loop {
        let b = stream.read_u8().await?;
        if let Some(line) = guest_auth::take_line(&mut buf, b).map_err(bad)? {
            break line;
        }
    };
    let (_, nonce) = guest_auth::parse_hello(&line).map_err(bad)?;
    // A node of another version learns ours from the answer and refuses it.
    stream
        .write_all(guest_auth::answer(secret, &nonce).as_bytes())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replaced_path_is_detected() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("guest.sock");
        let _listener = bind(&path).unwrap();
        assert!(leads_here(&path).await);
        std::fs::remove_file(&path).unwrap();
        assert!(!leads_here(&path).await, "gone");
        std::fs::write(&path, b"x").unwrap();
        assert!(!leads_here(&path).await, "a file");
        let _again = bind(&path).unwrap();
        assert!(leads_here(&path).await, "bound again over the file");
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inner"), b"x").unwrap();
        let _third = bind(&path).unwrap();
        assert!(leads_here(&path).await, "bound again over a directory");
    }
}
