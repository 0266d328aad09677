//! Connecting to an upstream: resolve the name, keep the addresses that both the guard
//! and the sandbox's policy allow, connect to the first that answers. The checks are made
//! on the very address connected to, so that no resolution between check and connect can
//! slip another address in.

use super::{Proxy, CONNECT_TIMEOUT};
use crate::SandboxEgress;
use std::net::SocketAddr;
use tokio::net::TcpStream;

/// Why no connection was made.
pub(crate) enum ConnectError {
    /// The guard or the policy refused (every address).
    Refused(String),
    /// Resolution or connection failed.
    Failed(String),
    TimedOut,
}

pub(crate) async fn connect(
    proxy: &Proxy,
    sandbox: &SandboxEgress,
    host: &str,
    port: u16,
) -> Result<(TcpStream, SocketAddr), ConnectError> {
    if let Some(why) = sandbox.policy.denied_by_name(host) {
        return Err(ConnectError::Refused(why));
    }
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match bare.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => {
            match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((bare, port))).await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => {
                    return Err(ConnectError::Failed(format!("cannot resolve {host}: {e}")))
                }
                Err(_) => return Err(ConnectError::TimedOut),
            }
        }
    };
    let mut refused = None;
    let mut last_err = None;
    for addr in addrs {
        if let Some(why) = proxy.refuse(addr) {
            refused.get_or_insert(why);
            continue;
        }
        if let Err(why) = sandbox.policy.allows(host, addr.ip()) {
            refused.get_or_insert(why);
            continue;
        }
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok((s, addr));
            }
            Ok(Err(e)) => last_err = Some(format!("{addr}: {e}")),
            Err(_) => last_err = Some(format!("{addr}: no answer in {CONNECT_TIMEOUT:?}")),
        }
    }
    match (last_err, refused) {
        (Some(e), _) => Err(ConnectError::Failed(e)),
        (None, Some(why)) => Err(ConnectError::Refused(why)),
        (None, None) => Err(ConnectError::Failed(format!("{host} has no address"))),
    }
}

/// TLS to the upstream, verified against the proxy's roots (the public ones and those the
/// operator added) for `host`; offering HTTP/2 unless `h1_only`.
pub(crate) async fn tls(
    proxy: &Proxy,
    stream: TcpStream,
    host: &str,
    h1_only: bool,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(bare.to_string())
        .map_err(|e| format!("{host} is no TLS server name: {e}"))?;
    let config = if h1_only {
        &proxy.tls.client
    } else {
        &proxy.tls.client_h2
    };
    let connector = tokio_rustls::TlsConnector::from(config.clone());
    match tokio::time::timeout(CONNECT_TIMEOUT, connector.connect(name, stream)).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("TLS with {host}: {e}")),
        Err(_) => Err(format!("TLS with {host}: no answer in {CONNECT_TIMEOUT:?}")),
    }
}
