//! The proxy server: one listener for every sandbox of the node. A request is judged by the
//! policy of the sandbox it comes from, looked up by the client's address for every
//! request: `CONNECT` opens a tunnel (`tunnel`), an absolute `http://` URL (or an
//! origin-form request with a `Host`) is forwarded (`forward`); both reach only what
//! `upstream` connects to after the guard and the policy agreed. Connections the firewall
//! redirected here are served by `transparent`, and the sandboxes' DNS by `dns`.

mod answer;
mod dns;
mod forward;
mod intercept;
mod transparent;
mod tunnel;
mod upstream;

use crate::guard::Guard;
use crate::usage::UsageBook;
use crate::{EgressContext, SandboxEgress};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub(crate) type Body = BoxBody<Bytes, hyper::Error>;

/// How long a connection to an upstream may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an upstream may take to start its answer.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(300);

/// Counters of the proxy, for `/metrics` (per decision and direction, not per sandbox:
/// per-sandbox totals are in [`UsageBook`]).
#[derive(Clone)]
pub struct ProxyMetrics {
    pub requests: prometheus::IntCounterVec,
    pub bytes: prometheus::IntCounterVec,
}

impl ProxyMetrics {
    pub fn register(reg: &prometheus::Registry) -> prometheus::Result<ProxyMetrics> {
        let requests = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "warren_egress_requests_total",
                "Requests and tunnels through the egress proxy, by decision",
            ),
            &["decision"],
        )?;
        let bytes = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "warren_egress_bytes_total",
                "Bytes through the egress proxy, by direction (up: sandbox to upstream)",
            ),
            &["direction"],
        )?;
        // Series from the start (at 0), so rates over them are never blind.
        for d in ["allow", "deny"] {
            requests.with_label_values(&[d]);
        }
        for d in ["up", "down"] {
            bytes.with_label_values(&[d]);
        }
        reg.register(Box::new(requests.clone()))?;
        reg.register(Box::new(bytes.clone()))?;
        Ok(ProxyMetrics { requests, bytes })
    }

    fn unregistered() -> ProxyMetrics {
        ProxyMetrics::register(&prometheus::Registry::new()).expect("fresh registry")
    }
}

/// How the proxy speaks TLS: as each sandbox's CA toward the sandbox (for hosts with a
/// rule), as a verifying client toward upstreams.
pub struct ProxyTls {
    /// The seed sandboxes' CAs are derived from (`ca`); None: nothing is intercepted, and
    /// HTTPS to a host with a rule is refused rather than sent without its headers.
    pub ca_seed: Option<[u8; 32]>,
    /// Toward upstreams over HTTP/1.1 only (WebSocket upgrades).
    pub client: Arc<rustls::ClientConfig>,
    /// Toward upstreams offering HTTP/2 first (what an upstream picks is used).
    pub client_h2: Arc<rustls::ClientConfig>,
}

impl ProxyTls {
    /// Upstreams verified against the public roots (Mozilla's) and `extra_roots` (PEM).
    pub fn new(ca_seed: Option<[u8; 32]>, extra_roots_pem: &[u8]) -> Result<ProxyTls, String> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(extra_roots_pem) {
            let cert: rustls::pki_types::CertificateDer<'static> =
                cert.map_err(|e| format!("the egress CA file: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("the egress CA file: {e}"))?;
        }
        let base = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let with_alpn = |protocols: &[&[u8]]| {
            let mut c = base.clone();
            c.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            Arc::new(c)
        };
        Ok(ProxyTls {
            ca_seed,
            client: with_alpn(&[b"http/1.1"]),
            client_h2: with_alpn(&[b"h2", b"http/1.1"]),
        })
    }
}

/// The proxy of one node.
pub struct Proxy {
    ctx: Arc<dyn EgressContext>,
    tls: ProxyTls,
    leaves: crate::ca::LeafCache,
    guard: RwLock<Guard>,
    pub usage: UsageBook,
    metrics: ProxyMetrics,
    tasks: TaskTracker,
}

impl Proxy {
    pub fn new(
        ctx: Arc<dyn EgressContext>,
        guard: Guard,
        tls: ProxyTls,
        metrics: Option<ProxyMetrics>,
    ) -> Arc<Proxy> {
        Arc::new(Proxy {
            ctx,
            tls,
            leaves: crate::ca::LeafCache::default(),
            guard: RwLock::new(guard),
            usage: UsageBook::default(),
            metrics: metrics.unwrap_or_else(ProxyMetrics::unregistered),
            tasks: TaskTracker::new(),
        })
    }

    /// Changes what the guard refuses (the cluster's members, this host's addresses).
    pub fn update_guard(&self, f: impl FnOnce(&mut Guard)) {
        f(&mut self.guard.write().expect("guard lock"));
    }

    /// Why the guard refuses `to`, read under its lock (no copy per request).
    fn refuse(&self, to: SocketAddr) -> Option<String> {
        self.guard.read().expect("guard lock").refuse(to)
    }

    /// Serves `listener` until `cancel`; the returned task ends once every connection and
    /// tunnel it started has ended.
    pub fn spawn(
        self: &Arc<Self>,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let proxy = self.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = cancel.cancelled() => break,
                    a = listener.accept() => a,
                };
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "egress proxy: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (p, c) = (proxy.clone(), cancel.clone());
                proxy
                    .tasks
                    .spawn(async move { p.serve_connection(stream, peer, c).await });
            }
            proxy.tasks.close();
            proxy.tasks.wait().await;
        })
    }

    async fn serve_connection(
        self: Arc<Self>,
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
        cancel: CancellationToken,
    ) {
        if let Some(original) = transparent::redirected_from(&stream) {
            if transparent::starts_with_tls(&stream).await {
                return transparent::serve_tls(self, stream, peer, original.port(), cancel).await;
            }
            // Plain HTTP: its Host header names the destination, as below.
        }
        let conn_state = Arc::new(forward::ClientConn::default());
        let proxy = self.clone();
        let cancel_inner = cancel.clone();
        let service = service_fn(move |req| {
            let (proxy, conn_state, cancel) =
                (proxy.clone(), conn_state.clone(), cancel_inner.clone());
            async move {
                Ok::<_, std::convert::Infallible>(
                    proxy.handle(req, peer, &conn_state, cancel).await,
                )
            }
        });
        let conn = http1::Builder::new()
            .preserve_header_case(true)
            .header_read_timeout(Duration::from_secs(30))
            .timer(hyper_util::rt::TokioTimer::new())
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        tokio::select! {
            r = conn => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, client = %peer, "egress proxy connection ended");
                }
            }
            _ = cancel.cancelled() => {}
        }
    }

    async fn handle(
        self: &Arc<Self>,
        req: Request<hyper::body::Incoming>,
        peer: SocketAddr,
        conn: &Arc<forward::ClientConn>,
        cancel: CancellationToken,
    ) -> Response<Body> {
        let Some(sandbox) = self.ctx.sandbox_at(peer.ip()) else {
            tracing::warn!(client = %peer, "egress proxy: a request from an address that is no sandbox of this node");
            return answer::not_a_sandbox(peer);
        };
        if req.method() == Method::CONNECT {
            return tunnel::connect(self, &sandbox, peer, req, cancel).await;
        }
        forward::forward(self, &sandbox, req, conn, cancel).await
    }

    /// Logs and counts a refusal; the answer a client gets.
    fn refused(&self, sandbox: &SandboxEgress, host: &str, why: &str) -> Response<Body> {
        tracing::info!(sandbox = %sandbox.id, host, decision = "deny", reason = why, "egress");
        self.metrics.requests.with_label_values(&["deny"]).inc();
        self.usage.add(&sandbox.id, |u| u.denied += 1);
        answer::denied(host, &sandbox.id, why)
    }

    /// Logs and counts an allowed request or tunnel.
    fn allowed(&self, sandbox: &SandboxEgress, host: &str, rule: Option<&str>, kind: &str) {
        tracing::info!(sandbox = %sandbox.id, host, decision = "allow", rule = rule.unwrap_or(""), kind, "egress");
        self.metrics.requests.with_label_values(&["allow"]).inc();
        self.usage.add(&sandbox.id, |u| u.requests += 1);
    }

    fn count_bytes(&self, sandbox: &str, up: u64, down: u64) {
        if up > 0 {
            self.metrics.bytes.with_label_values(&["up"]).inc_by(up);
        }
        if down > 0 {
            self.metrics.bytes.with_label_values(&["down"]).inc_by(down);
        }
        self.usage.add(sandbox, |u| {
            u.bytes_up += up;
            u.bytes_down += down;
        });
    }
}
