//! `CONNECT` to a host with a rule: the proxy answers the TLS handshake as that host with a
//! certificate of the sandbox's CA, then serves the decrypted HTTP/1.1 requests one by one
//! as it forwards plain ones (policy looked up again for each, headers set from secrets),
//! over TLS to the upstream. A tunnel whose first byte is no TLS handshake carries plain
//! HTTP, which gets the same rules (to the upstream in plain HTTP). A connection redirected
//! to the proxy (`transparent`) is served the same way once its server name is read.

use super::answer::{empty, error};
use super::forward::{forward_to, ClientConn, Target};
use super::{Body, Proxy};
use crate::SandboxEgress;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use warren_api::ApiError;

pub(crate) async fn intercept(
    proxy: &Arc<Proxy>,
    sandbox: &SandboxEgress,
    peer: SocketAddr,
    host: String,
    port: u16,
    req: Request<hyper::body::Incoming>,
    cancel: CancellationToken,
) -> Response<Body> {
    let server = match server_config(proxy, sandbox, &host) {
        Ok(c) => c,
        Err(refusal) => return *refusal,
    };
    let on_upgrade = hyper::upgrade::on(req);
    let p = proxy.clone();
    proxy.tasks.spawn(async move {
        let Ok(client) = on_upgrade.await else { return };
        let mut client = TokioIo::new(client);
        let mut first = [0u8; 1];
        match client.read(&mut first).await {
            Ok(1) => {}
            _ => return,
        }
        let client = Rewind::new(first[0], client);
        // 0x16: a TLS handshake record.
        if first[0] == 0x16 {
            accept_and_serve(p, server, peer, host, port, client, cancel).await;
        } else {
            serve(p, peer, host, port, false, client, cancel).await;
        }
    });
    Response::new(empty())
}

/// The TLS server the proxy plays toward the sandbox for `host`: a certificate of the
/// sandbox's CA. Refused (the answer to give) when the name alone is denied, or when this
/// node has no CA seed (HTTPS to a host with a rule is not sent without its headers).
pub(crate) fn server_config(
    proxy: &Proxy,
    sandbox: &SandboxEgress,
    host: &str,
) -> Result<Arc<rustls::ServerConfig>, Box<Response<Body>>> {
    let Some(seed) = proxy.tls.ca_seed else {
        return Err(Box::new(proxy.refused(
            sandbox,
            host,
            "its rule needs HTTPS interception, which this node cannot do (no CA seed)",
        )));
    };
    // The name alone can already be denied: say so before the tunnel opens.
    if let Some(why) = sandbox.policy.denied_by_name(host) {
        return Err(Box::new(proxy.refused(sandbox, host, &why)));
    }
    proxy
        .leaves
        .server_config(&seed, &sandbox.id, host)
        .map_err(|e| {
            Box::new(error(ApiError::internal(format!(
                "cannot make a certificate for {host}: {e}"
            ))))
        })
}

/// Answers the sandbox's TLS handshake with `server`, then serves the requests inside.
pub(crate) async fn accept_and_serve<IO>(
    p: Arc<Proxy>,
    server: Arc<rustls::ServerConfig>,
    peer: SocketAddr,
    host: String,
    port: u16,
    client: IO,
    cancel: CancellationToken,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(server);
    match acceptor.accept(client).await {
        Ok(tls) => serve(p, peer, host, port, true, tls, cancel).await,
        Err(e) => {
            tracing::info!(client = %peer, host, error = %e, "egress: the sandbox refused the intercepting certificate");
        }
    }
}

/// Serves the requests of one intercepted tunnel.
async fn serve<IO>(
    p: Arc<Proxy>,
    peer: SocketAddr,
    host: String,
    port: u16,
    tls: bool,
    io: IO,
    cancel: CancellationToken,
) where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let conn_state = Arc::new(ClientConn::default());
    let (p2, c2) = (p.clone(), cancel.clone());
    let service = service_fn(move |req| {
        let (p, conn_state, c, host) = (p2.clone(), conn_state.clone(), c2.clone(), host.clone());
        async move {
            let resp = match p.ctx.sandbox_at(peer.ip()) {
                Some(sb) => {
                    let to = Target { host, port, tls };
                    forward_to(&p, &sb, to, req, &conn_state, c).await
                }
                None => super::answer::not_a_sandbox(peer),
            };
            Ok::<_, std::convert::Infallible>(resp)
        }
    });
    let conn = http1::Builder::new()
        .preserve_header_case(true)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    tokio::select! {
        _ = conn => {}
        _ = cancel.cancelled() => {}
    }
}

/// A stream with one byte already read from it put back in front.
struct Rewind<S> {
    first: Option<u8>,
    inner: S,
}

impl<S> Rewind<S> {
    fn new(first: u8, inner: S) -> Self {
        Rewind {
            first: Some(first),
            inner,
        }
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Rewind<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(b) = self.first.take() {
            buf.put_slice(&[b]);
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Rewind<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
