//! Opening a connection to one container's guest, and making sure it is that guest.
//!
//! The guest listens on a unix socket in its run directory, a tmpfs inside the container
//! (`GUEST_RUN_IN_CONTAINER`). Everything on that path is the sandbox's to change, so the
//! node trusts none of it:
//! - the path is resolved inside the container's root (`/proc/<pid>/root`) by `openat2`
//!   with `RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`: a symlink
//!   anywhere on it (to a neighbour's socket, to dockerd's) is refused, never followed;
//! - the file opened (`O_PATH`, not followed) must be a socket, and the node connects to
//!   that very inode (`/proc/self/fd/<fd>`), so a swap after the check changes nothing;
//! - the listening end must belong to the container's main process, the guest
//!   (`SO_PEERCRED`): a socket another process of the sandbox made there is refused;
//! - the guest must prove it holds the container's secret, for a fresh nonce, and speak
//!   this node's protocol version (`warren_api::guest_auth`).
//!
//! Any failure is a refused connection: the caller never sends a byte of a request.

use crate::runtime::GUEST_RUN_IN_CONTAINER;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use warren_api::guest_auth::{self, AuthError, NONCE_LEN};

/// The socket file inside the guest's run directory.
pub const SOCKET_NAME: &str = "guest.sock";

/// How long a guest may take to answer the handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// A container's guest secret (`warren_api::guest_auth`). Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct GuestSecret(String);

impl GuestSecret {
    /// A new random one, for a container about to be made.
    pub fn random() -> GuestSecret {
        GuestSecret(warren_api::guest_auth::secret_from(&rand::random()))
    }

    /// The value as the container's environment carries it.
    pub fn from_env_value(v: &str) -> GuestSecret {
        GuestSecret(v.to_string())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for GuestSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuestSecret(..)")
    }
}

/// Who the node expects at the other end of a sandbox's guest socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestPeer {
    /// The sandbox (for logs).
    pub sandbox_id: String,
    /// The container's main process on this host: the guest.
    pub pid: u32,
    /// The secret the container was made with.
    pub secret: GuestSecret,
}

/// Why a connection to a guest was not made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing to connect to yet (the container is not running, or its guest has not
    /// bound its socket): the usual state while a container starts.
    #[error("the guest is not there: {0}")]
    Absent(std::io::Error),
    /// Something is there that is not this container's guest. A hostile sandbox, or a
    /// broken one: either way nothing is sent.
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("the guest connection failed: {0}")]
    Io(std::io::Error),
}

/// What was wrong with what answered.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("the socket path has a symlink in it or leaves the container's root")]
    Symlink,
    #[error("{0} is not a socket")]
    NotASocket(&'static str),
    #[error("the socket belongs to pid {got:?}, not to the container's guest (pid {expected})")]
    WrongPeer { expected: u32, got: Option<i32> },
    #[error("{0}")]
    Handshake(AuthError),
    #[error("no handshake answer within {0:?}")]
    Silent(Duration),
}

impl Refusal {
    /// Every `reason`.
    pub const REASONS: [&'static str; 6] = [
        "symlink",
        "not_a_socket",
        "wrong_peer",
        "protocol",
        "handshake",
        "silent",
    ];

    /// A short name for metrics (one of `REASONS`).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Symlink => "symlink",
            Refusal::NotASocket(_) => "not_a_socket",
            Refusal::WrongPeer { .. } => "wrong_peer",
            Refusal::Handshake(AuthError::Protocol { .. }) => "protocol",
            Refusal::Handshake(_) => "handshake",
            Refusal::Silent(_) => "silent",
        }
    }
}

/// Connects to `peer`'s guest and authenticates it (see the module's account).
pub async fn connect(peer: &GuestPeer) -> Result<UnixStream, ConnectError> {
    if peer.pid == 0 {
        return Err(ConnectError::Absent(std::io::Error::other(
            "the container is not running",
        )));
    }
    connect_in(&format!("/proc/{}/root", peer.pid), peer).await
}

/// `connect`, with the guest's socket looked for under `root` (the container's root).
async fn connect_in(root: &str, peer: &GuestPeer) -> Result<UnixStream, ConnectError> {
    let socket = open_socket_file(root)?;
    let path = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let mut stream = UnixStream::connect(&path).await.map_err(|e| {
        if matches!(
            e.raw_os_error(),
            Some(libc::ECONNREFUSED) | Some(libc::ENOENT)
        ) {
            ConnectError::Absent(e)
        } else {
            ConnectError::Io(e)
        }
    })?;
    drop(socket);
    let got = stream.peer_cred().map_err(ConnectError::Io)?.pid();
    if got != Some(peer.pid as i32) {
        return Err(ConnectError::Refused(Refusal::WrongPeer {
            expected: peer.pid,
            got,
        }));
    }
    handshake(&mut stream, peer.secret.expose()).await?;
    Ok(stream)
}

/// The guest's socket file, resolved inside the container's root without following
/// anything, opened as a path (`O_PATH`), and checked to be a socket.
fn open_socket_file(root: &str) -> Result<OwnedFd, ConnectError> {
    let root = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| ConnectError::Absent(e.into()))?;
    let relative = format!(
        "{}/{SOCKET_NAME}",
        GUEST_RUN_IN_CONTAINER.trim_start_matches('/')
    );
    let fd = rustix::fs::openat2(
        &root,
        relative.as_str(),
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => {
            ConnectError::Refused(Refusal::Symlink)
        }
        rustix::io::Errno::NOENT => ConnectError::Absent(e.into()),
        e => ConnectError::Io(e.into()),
    })?;
    let st = rustix::fs::fstat(&fd).map_err(|e| ConnectError::Io(e.into()))?;
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::Socket => Ok(fd),
        rustix::fs::FileType::Symlink => Err(ConnectError::Refused(Refusal::Symlink)),
        rustix::fs::FileType::Fifo => Err(ConnectError::Refused(Refusal::NotASocket("a FIFO"))),
        rustix::fs::FileType::Directory => {
            Err(ConnectError::Refused(Refusal::NotASocket("a directory")))
        }
        rustix::fs::FileType::RegularFile => {
            Err(ConnectError::Refused(Refusal::NotASocket("a regular file")))
        }
        _ => Err(ConnectError::Refused(Refusal::NotASocket("a device"))),
    }
}

/// The node's side of `warren_api::guest_auth`.
async fn handshake(stream: &mut UnixStream, secret: &str) -> Result<(), ConnectError> {
    let nonce: [u8; NONCE_LEN] = rand::random();
    let exchange = async {
        stream
            .write_all(guest_auth::hello(&nonce).as_bytes())
            .await?;
        read_line(stream).await
    };
    let line = match tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange).await {
        Ok(Ok(line)) => line,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
            return Err(ConnectError::Refused(Refusal::Handshake(
                AuthError::Malformed(e.to_string()),
            )))
        }
        Ok(Err(e)) => return Err(ConnectError::Io(e)),
        Err(_) => return Err(ConnectError::Refused(Refusal::Silent(HANDSHAKE_TIMEOUT))),
    };
    guest_auth::check_answer(&line, secret, &nonce)
        .map_err(|e| ConnectError::Refused(Refusal::Handshake(e)))
}

/// The guest's answer line (`guest_auth::take_line`).
async fn read_line<R: tokio::io::AsyncRead + Unpin>(r: &mut R) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(128);
    loop {
        let b = r.read_u8().await?;
        if let Some(line) = guest_auth::take_line(&mut buf, b)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?
        {
            return Ok(line);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_is_bounded_and_leaves_the_rest() {
        let (mut a, mut b) = tokio::io::duplex(4096);
        a.write_all(b"WARREN-GUEST 2 ab\nHTTP/1.1").await.unwrap();
        assert_eq!(read_line(&mut b).await.unwrap(), "WARREN-GUEST 2 ab\n");
        let mut rest = [0u8; 8];
        b.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"HTTP/1.1");
        a.write_all(&[b'x'; guest_auth::MAX_LINE + 1])
            .await
            .unwrap();
        assert_eq!(
            read_line(&mut b).await.unwrap_err().kind(),
            std::io::ErrorKind::InvalidData
        );
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    /// A container root in a temporary directory, with a listener of this process at the
    /// guest's socket path answering every hello with `answer(nonce)`.
    fn fake_guest(answer: fn(&[u8; NONCE_LEN]) -> String) -> (tempfile::TempDir, String) {
        let root = tempfile::tempdir().unwrap();
        let run = root
            .path()
            .join(GUEST_RUN_IN_CONTAINER.trim_start_matches('/'));
        std::fs::create_dir_all(&run).unwrap();
        let listener = tokio::net::UnixListener::bind(run.join(SOCKET_NAME)).unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let Ok(line) = read_line(&mut s).await else {
                    continue;
                };
                let Ok((_, nonce)) = guest_auth::parse_hello(&line) else {
                    continue;
                };
                let _ = s.write_all(answer(&nonce).as_bytes()).await;
            }
        });
        let path = root.path().display().to_string();
        (root, path)
    }

    fn me() -> GuestPeer {
        GuestPeer {
            sandbox_id: "t".into(),
            pid: std::process::id(),
            secret: GuestSecret(SECRET.into()),
        }
    }

    fn refusal(r: Result<UnixStream, ConnectError>) -> &'static str {
        match r {
            Err(ConnectError::Refused(why)) => why.reason(),
            Err(e) => panic!("not refused: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[tokio::test]
    async fn the_guest_with_the_secret_is_accepted() {
        let (_root, path) = fake_guest(|n| guest_auth::answer(SECRET, n));
        connect_in(&path, &me()).await.unwrap();
    }

    #[tokio::test]
    async fn a_wrong_proof_an_old_protocol_or_an_http_answer_is_refused() {
        let (_a, path) = fake_guest(|n| guest_auth::answer("another container's secret", n));
        assert_eq!(refusal(connect_in(&path, &me()).await), "handshake");
        let (_b, path) = fake_guest(|n| {
            let v = warren_api::GUEST_PROTOCOL_VERSION;
            guest_auth::answer(SECRET, n).replacen(&format!(" {v} "), " 1 ", 1)
        });
        assert_eq!(refusal(connect_in(&path, &me()).await), "protocol");
        let (_c, path) = fake_guest(|_| "HTTP/1.1 400 Bad Request\r\n\r\n".into());
        assert_eq!(refusal(connect_in(&path, &me()).await), "handshake");
    }

    #[tokio::test]
    async fn a_socket_of_another_process_is_refused_before_a_byte_is_sent() {
        let (_root, path) = fake_guest(|n| guest_auth::answer(SECRET, n));
        let mut other = me();
        other.pid = 1;
        assert_eq!(refusal(connect_in(&path, &other).await), "wrong_peer");
    }

    #[tokio::test]
    async fn symlinks_fifos_and_files_in_the_path_are_refused_or_absent() {
        let (root, path) = fake_guest(|n| guest_auth::answer(SECRET, n));
        let run = root
            .path()
            .join(GUEST_RUN_IN_CONTAINER.trim_start_matches('/'));
        let sock = run.join(SOCKET_NAME);
        // The real socket, one level up, behind a symlink: never followed.
        std::fs::rename(&sock, root.path().join("real.sock")).unwrap();
        std::os::unix::fs::symlink("../../real.sock", &sock).unwrap();
        assert_eq!(refusal(connect_in(&path, &me()).await), "symlink");
        std::fs::remove_file(&sock).unwrap();
        std::fs::write(&sock, b"x").unwrap();
        assert_eq!(refusal(connect_in(&path, &me()).await), "not_a_socket");
        std::fs::remove_file(&sock).unwrap();
        let c = std::ffi::CString::new(sock.to_str().unwrap()).unwrap();
        // SAFETY: a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(refusal(connect_in(&path, &me()).await), "not_a_socket");
        std::fs::remove_file(&sock).unwrap();
        // A directory on the way swapped for a symlink.
        std::fs::rename(&run, root.path().join("elsewhere")).unwrap();
        std::os::unix::fs::symlink("../elsewhere", &run).unwrap();
        assert_eq!(refusal(connect_in(&path, &me()).await), "symlink");
        std::fs::remove_file(&run).unwrap();
        assert!(matches!(
            connect_in(&path, &me()).await,
            Err(ConnectError::Absent(_))
        ));
    }
}
