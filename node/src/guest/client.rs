//! HTTP/1.1 to guest agents over their unix sockets, with pooled keep-alive connections.
//! The URI's host is `<run key>-<generation>`: the run key names the sandbox (the connector
//! finds the guest registered under it and connects with `connect`, which authenticates
//! it), the generation keeps pooled connections of an earlier guest process from being
//! reused for a new one.

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::UnixStream;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// Request bodies sent to a guest.
pub type GuestBody = UnsyncBoxBody<Bytes, BoxError>;

use super::connect::{self, ConnectError, GuestPeer};

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// Nothing answers on the socket (the container is down or still starting).
    #[error("cannot connect to the guest agent: {0}")]
    Connect(String),
    #[error("guest agent request failed: {0}")]
    Request(String),
}

impl GuestError {
    pub fn is_connect(&self) -> bool {
        matches!(self, GuestError::Connect(_))
    }
}

/// The guests this node talks to, by run key.
type Registry = Arc<RwLock<HashMap<String, GuestPeer>>>;

/// Connects `http://<run key>-<generation>/…` to the guest registered under the run key.
#[derive(Clone)]
struct UnixConnector {
    guests: Registry,
    refused: prometheus::IntCounterVec,
}

struct UnixConn(TokioIo<UnixStream>);

impl Connection for UnixConn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for UnixConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for UnixConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = UnixConn;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<UnixConn>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        // `<run key>-<generation>`: the run key names the sandbox.
        let host = uri.host().unwrap_or_default();
        let key = host.split('-').next().unwrap_or_default().to_string();
        let peer = self.guests.read().expect("guests lock").get(&key).cloned();
        let refused = self.refused.clone();
        Box::pin(async move {
            let Some(peer) = peer else {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no guest of this sandbox runs here",
                ));
            };
            match connect::connect(&peer).await {
                Ok(stream) => Ok(UnixConn(TokioIo::new(stream))),
                Err(ConnectError::Refused(why)) => {
                    refused.with_label_values(&[why.reason()]).inc();
                    tracing::warn!(sandbox_id = %peer.sandbox_id, pid = peer.pid, reason = %why,
                        "refused a connection to what is not this sandbox's guest");
                    Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!("the guest socket was refused: {why}"),
                    ))
                }
                Err(ConnectError::Absent(e) | ConnectError::Io(e)) => Err(e),
            }
        })
    }
}

#[derive(Clone)]
pub struct GuestClient {
    client: Client<UnixConnector, GuestBody>,
    guests: Registry,
}

/// How long a guest may take to answer its health check.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

impl GuestClient {
    /// A client; connections refused as not the sandbox's guest are counted in `refused`
    /// (by reason).
    pub fn new(refused: prometheus::IntCounterVec) -> Self {
        let guests = Registry::default();
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(32)
            .build(UnixConnector {
                guests: guests.clone(),
                refused,
            });
        GuestClient { client, guests }
    }

    /// From now on, connections for `run_key` go to `peer` (a container that started, or
    /// was found running): the only guest this node accepts for that sandbox.
    pub fn register(&self, run_key: &str, peer: GuestPeer) {
        self.guests
            .write()
            .expect("guests lock")
            .insert(run_key.to_string(), peer);
    }

    /// No new connection for `run_key` (its container is gone).
    pub fn unregister(&self, run_key: &str) {
        self.guests.write().expect("guests lock").remove(run_key);
    }

    /// Sends `req` (whose URI is just the guest path, e.g. `/exec?x=1`) to the guest of
    /// `run_key`.
    pub async fn send(
        &self,
        run_key: &str,
        mut req: http::Request<GuestBody>,
    ) -> Result<http::Response<Incoming>, GuestError> {
        let pq = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        let uri: http::Uri = format!("http://{run_key}{pq}")
            .parse()
            .map_err(|e| GuestError::Request(format!("bad guest uri: {e}")))?;
        *req.uri_mut() = uri;
        self.client.request(req).await.map_err(|e| {
            if e.is_connect() {
                GuestError::Connect(e.to_string())
            } else {
                GuestError::Request(format!("{e}: {}", source_chain(&e)))
            }
        })
    }

    /// `GET /healthz` of a guest: succeeds once it serves (and answers within
    /// `HEALTH_TIMEOUT`).
    pub async fn health(&self, run_key: &str) -> Result<(), GuestError> {
        let req = http::Request::get("/healthz")
            .body(empty())
            .expect("valid request");
        let resp = tokio::time::timeout(HEALTH_TIMEOUT, self.send(run_key, req))
            .await
            .map_err(|_| {
                GuestError::Request("the guest did not answer its health check".into())
            })??;
        if resp.status().is_success() {
            super::body::collect_limited(resp.into_body(), super::body::SMALL_LIMIT).await?;
            Ok(())
        } else {
            Err(GuestError::Request(format!(
                "health check answered {}",
                resp.status()
            )))
        }
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}

/// An empty request body.
pub fn empty() -> GuestBody {
    http_body_util::Empty::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// A request body from bytes.
pub fn full(b: impl Into<Bytes>) -> GuestBody {
    http_body_util::Full::new(b.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}
