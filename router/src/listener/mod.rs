//! The public listener: accepts TCP connections (TLS when configured) and serves the API
//! on them with bounds a client cannot stretch. A connection must send a request's whole
//! header within `header_read_timeout`, also when it sits idle between requests (hyper's
//! timer runs from the moment it waits for a request), so slow or silent clients are cut.
//! At most `max_connections` are served at once; past that, new ones wait in the kernel's
//! backlog. On shutdown the listener stops accepting, lets requests in progress finish for
//! `drain_timeout`, then cuts what is still open (event streams, terminals, tunnels):
//! a shutdown never waits on a client. A request body the client stops sending for
//! `body_idle_timeout` fails its reader (`body`).

pub mod body;
pub mod tls;

use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// Bounds of the public listener.
#[derive(Debug, Clone)]
pub struct ListenerLimits {
    /// Time a client has to send a request's header, counted from when the connection
    /// waits for it (accept, or the end of the previous response).
    pub header_read_timeout: Duration,
    /// Time a TLS client has to finish its handshake.
    pub tls_handshake_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
    /// How long a shutdown lets requests in progress finish before it cuts them.
    pub drain_timeout: Duration,
    /// How long the server waits for the next bytes of a request body.
    pub body_idle_timeout: Duration,
}

impl Default for ListenerLimits {
    fn default() -> Self {
        ListenerLimits {
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            max_connections: 4096,
            drain_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(30),
        }
    }
}

/// Counts of what the listener did, for `/metrics`.
#[derive(Clone)]
pub struct ListenerMetrics {
    pub open: prometheus::IntGauge,
    /// Connections ended by the listener, by reason (`header_timeout`, `tls_handshake`,
    /// `drain_deadline`).
    pub cut: prometheus::IntCounterVec,
}

impl ListenerMetrics {
    pub fn new(registry: &prometheus::Registry) -> Self {
        let open = prometheus::IntGauge::new(
            "warren_http_connections_open",
            "Connections to the public API being served",
        )
        .expect("valid metric");
        let cut = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "warren_http_connections_cut_total",
                "Connections the public API listener ended itself, by reason",
            ),
            &["reason"],
        )
        .expect("valid metric");
        // Every reason is a series from the start (at 0), so a rate over it is never blind.
        for reason in [
            "tls_handshake",
            "header_timeout",
            "body_timeout",
            "drain_deadline",
        ] {
            cut.with_label_values(&[reason]);
        }
        for c in [
            Box::new(open.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(cut.clone()),
        ] {
            let _ = registry.register(c);
        }
        ListenerMetrics { open, cut }
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, then drains (see the module doc).
pub async fn serve(
    listener: TcpListener,
    tls: Option<Arc<tls::ReloadingCert>>,
    app: Router,
    limits: ListenerLimits,
    metrics: ListenerMetrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(Arc::new(t.server_config())));
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let draining = CancellationToken::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let slot = tokio::select! {
            s = slots.clone().acquire_owned() => s.expect("the semaphore is never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, remote) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors or memory: wait for connections to end.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let conn = Connection {
            app: app.clone(),
            limits: limits.clone(),
            metrics: metrics.clone(),
            draining: draining.clone(),
            remote,
        };
        let acceptor = acceptor.clone();
        connections.spawn(async move {
            let _slot = slot;
            let metrics = conn.metrics.clone();
            metrics.open.inc();
            match acceptor {
                None => conn.serve(stream).await,
                Some(acceptor) => {
                    let handshake = tokio::time::timeout(
                        conn.limits.tls_handshake_timeout,
                        acceptor.accept(stream),
                    );
                    match handshake.await {
                        Ok(Ok(tls)) => conn.serve(tls).await,
                        Ok(Err(e)) => tracing::debug!(%remote, error = %e, "TLS handshake failed"),
                        Err(_) => metrics.cut.with_label_values(&["tls_handshake"]).inc(),
                    }
                }
            }
            metrics.open.dec();
        });
    }
    drop(listener);
    draining.cancel();
    let open = connections.len();
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        let left = connections.len();
        tracing::warn!(
            connections = left,
            of = open,
            "cut the connections still open at the end of the drain"
        );
        metrics
            .cut
            .with_label_values(&["drain_deadline"])
            .inc_by(left as u64);
        connections.shutdown().await;
    }
    Ok(())
}

/// `keep-alive: timeout=N`: how long an idle connection stays open, a second short of the
/// header timeout that closes it, so that clients which read it (Node's, among others) stop
/// reusing a connection before the listener closes it under a request they are sending.
fn keep_alive_header(header_read_timeout: Duration) -> http::HeaderValue {
    let secs = header_read_timeout.as_secs().saturating_sub(1).max(1);
    http::HeaderValue::from_str(&format!("timeout={secs}")).expect("a valid header value")
}

/// One accepted connection.
struct Connection {
    app: Router,
    limits: ListenerLimits,
    metrics: ListenerMetrics,
    draining: CancellationToken,
    remote: SocketAddr,
}

impl Connection {
    async fn serve<IO>(self, io: IO)
    where
        IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let remote = self.remote;
        let app = self.app;
        let keep_alive = keep_alive_header(self.limits.header_read_timeout);
        let body_idle = self.limits.body_idle_timeout;
        let body_cut = self.metrics.cut.with_label_values(&["body_timeout"]);
        let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(remote));
            let cut = body_cut.clone();
            let req = req.map(|b| {
                axum::body::Body::new(body::IdleTimeoutBody::new(b, body_idle, Some(cut)))
            });
            let answer = app.clone().oneshot(req);
            let keep_alive = keep_alive.clone();
            async move {
                let mut resp = answer.await?;
                if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
                    resp.headers_mut().insert(
                        http::header::HeaderName::from_static("keep-alive"),
                        keep_alive,
                    );
                }
                Ok::<_, std::convert::Infallible>(resp)
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout)
            .keep_alive(true);
        let conn = builder
            .serve_connection(TokioIo::new(io), service)
            .with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let result = tokio::select! {
            r = conn.as_mut() => r,
            _ = self.draining.cancelled() => {
                // Finish the request in progress (if any), then close.
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = result {
            if e.is_timeout() {
                self.metrics
                    .cut
                    .with_label_values(&["header_timeout"])
                    .inc();
            } else {
                tracing::debug!(%remote, error = %e, "connection ended with an error");
            }
        }
    }
}
