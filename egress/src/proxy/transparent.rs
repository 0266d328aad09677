//! Connections the host's firewall redirected to the proxy (TCP to ports 80 and 443 from a
//! program that ignores the proxy variables): the original destination is read from the
//! connection tracker (`SO_ORIGINAL_DST`). Plain HTTP needs nothing more — its `Host`
//! header names the destination, as for an origin-form request to the proxy. TLS is read
//! up to its ClientHello without consuming it: the server name (SNI) names the host, which
//! is then intercepted (a rule for it) or tunnelled untouched to that name at the original
//! port, the same decisions as for `CONNECT`.

use super::upstream::{self, ConnectError};
use super::Proxy;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// How long a redirected client may take to send its whole ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest ClientHello read (a TLS record is at most 16 KiB plus its header).
const HELLO_MAX: usize = 16 * 1024 + 5;

/// Where `stream` was headed before the firewall redirected it here; None when it was not
/// redirected (it was made to the proxy itself).
pub(crate) fn redirected_from(stream: &TcpStream) -> Option<SocketAddr> {
    let local = stream.local_addr().ok()?;
    let mut addr: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: getsockopt on a descriptor `stream` owns, into a buffer of the given length.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_IP,
            libc::SO_ORIGINAL_DST,
            (&mut addr as *mut libc::sockaddr_in).cast(),
            &mut len,
        )
    };
    if rc != 0 || addr.sin_family != libc::AF_INET as libc::sa_family_t {
        return None;
    }
    let original = SocketAddr::V4(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(addr.sin_addr.s_addr)),
        u16::from_be(addr.sin_port),
    ));
    (original != local).then_some(original)
}

/// Whether the client's first bytes are a TLS handshake (waits for them).
pub(crate) async fn starts_with_tls(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(HELLO_TIMEOUT, stream.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] == 0x16
    )
}

/// The server name of the ClientHello waiting on `stream`, read without taking it off.
/// Err: no complete ClientHello came, or it names no server.
async fn server_name(stream: &TcpStream) -> Result<String, String> {
    let deadline = tokio::time::Instant::now() + HELLO_TIMEOUT;
    let mut buf = vec![0u8; HELLO_MAX];
    let mut seen = 0;
    loop {
        let n = tokio::time::timeout_at(deadline, stream.peek(&mut buf))
            .await
            .map_err(|_| "no complete ClientHello in time".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the client closed before its ClientHello".into());
        }
        let mut acceptor = rustls::server::Acceptor::default();
        let mut data = &buf[..n];
        acceptor.read_tls(&mut data).map_err(|e| e.to_string())?;
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return accepted
                    .client_hello()
                    .server_name()
                    .map(str::to_ascii_lowercase)
                    .ok_or_else(|| "the ClientHello names no server (SNI)".to_string())
            }
            Ok(None) if n < HELLO_MAX => {
                // Part of it is here; wait for more (peek returns at once while data waits).
                if n == seen {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                seen = n;
            }
            Ok(None) => return Err("the ClientHello is larger than a TLS record".into()),
            Err((e, _)) => return Err(e.to_string()),
        }
    }
}

/// Serves one redirected TLS connection headed for port `port`.
pub(crate) async fn serve_tls(
    proxy: Arc<Proxy>,
    mut stream: TcpStream,
    peer: SocketAddr,
    port: u16,
    cancel: CancellationToken,
) {
    let Some(sandbox) = proxy.ctx.sandbox_at(peer.ip()) else {
        tracing::warn!(client = %peer, "egress proxy: a redirected connection from an address that is no sandbox of this node");
        return;
    };
    let host = match server_name(&stream).await {
        Ok(h) => h,
        Err(why) => {
            let _ = proxy.refused(
                &sandbox,
                &peer.ip().to_string(),
                &format!("a redirected TLS connection: {why}"),
            );
            return;
        }
    };
    if sandbox.policy.has_rule_for(&host) {
        let Ok(server) = super::intercept::server_config(&proxy, &sandbox, &host) else {
            return;
        };
        super::intercept::accept_and_serve(proxy, server, peer, host, port, stream, cancel).await;
        return;
    }
    let mut up = match upstream::connect(&proxy, &sandbox, &host, port).await {
        Ok((up, _)) => up,
        Err(ConnectError::Refused(why)) => {
            let _ = proxy.refused(&sandbox, &host, &why);
            return;
        }
        Err(ConnectError::Failed(e)) => {
            tracing::info!(sandbox = %sandbox.id, host, error = %e, "egress: a redirected TLS connection's upstream failed");
            return;
        }
        Err(ConnectError::TimedOut) => {
            tracing::info!(sandbox = %sandbox.id, host, "egress: a redirected TLS connection's upstream timed out");
            return;
        }
    };
    proxy.allowed(&sandbox, &host, None, "transparent tunnel");
    tokio::select! {
        r = tokio::io::copy_bidirectional(&mut stream, &mut up) => {
            if let Ok((sent, received)) = r {
                proxy.count_bytes(&sandbox.id, sent, received);
            }
        }
        _ = cancel.cancelled() => {}
    }
}
