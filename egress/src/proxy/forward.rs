//! Forwarding one HTTP request: the rule of its host, method and path sets and removes
//! headers (values expanded from secrets, id and labels; a missing secret refuses the
//! request before anything is sent), hop-by-hop headers stay on their hop, and the
//! client's keep-alive connection keeps one upstream connection while it names the same
//! host (checked against the policy again for every request); over TLS it is HTTP/2 when
//! the upstream picks it (ALPN), HTTP/1.1 otherwise. WebSocket upgrades are spliced once
//! the upstream agrees (always over HTTP/1.1).

use super::answer::{bad_gateway, bad_request, timeout};
use super::upstream::{self, ConnectError};
use super::{Body, Proxy, RESPONSE_TIMEOUT};
use crate::{EgressContext, SandboxEgress};
use http::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use http_body_util::BodyExt;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use warren_api::egress::{Template, TemplateContext};

/// What one client connection keeps between its requests.
#[derive(Default)]
pub(crate) struct ClientConn {
    upstream: tokio::sync::Mutex<Option<Cached>>,
}

struct Cached {
    host: String,
    port: u16,
    addr: SocketAddr,
    sender: Sender,
}

/// An upstream connection: HTTP/1.1, or HTTP/2 where a TLS upstream chose it.
enum Sender {
    H1(SendRequest<Body>),
    H2(hyper::client::conn::http2::SendRequest<Body>),
}

impl Sender {
    fn usable(&self) -> bool {
        match self {
            Sender::H1(s) => !s.is_closed() && s.is_ready(),
            Sender::H2(s) => !s.is_closed() && s.is_ready(),
        }
    }

    async fn send(
        &mut self,
        req: Request<Body>,
    ) -> Result<Response<hyper::body::Incoming>, hyper::Error> {
        match self {
            Sender::H1(s) => s.send_request(req).await,
            Sender::H2(s) => s.send_request(req).await,
        }
    }
}

const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

struct Vars<'a> {
    sandbox: &'a SandboxEgress,
    ctx: &'a dyn EgressContext,
}

impl TemplateContext for Vars<'_> {
    fn sandbox_id(&self) -> &str {
        &self.sandbox.id
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.sandbox.labels.get(key).map(String::as_str)
    }
    fn secret(&self, name: &str) -> Option<String> {
        self.ctx.secret(&self.sandbox.id, name)
    }
}

/// Host and port a request is for: its absolute URL, or its `Host` header.
fn target<B>(req: &Request<B>) -> Result<(String, u16), String> {
    let uri = req.uri();
    if let Some(auth) = uri.authority() {
        match uri.scheme_str() {
            Some("http") | None => {}
            Some(other) => {
                return Err(format!(
                    "{other}:// URLs go through CONNECT (the proxy forwards http:// only)"
                ))
            }
        }
        return Ok((
            auth.host().to_ascii_lowercase(),
            auth.port_u16().unwrap_or(80),
        ));
    }
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .ok_or("the request names no host: send an absolute URL or a Host header")?;
    let auth: http::uri::Authority = host
        .parse()
        .map_err(|_| format!("invalid Host header {host:?}"))?;
    Ok((
        auth.host().to_ascii_lowercase(),
        auth.port_u16().unwrap_or(80),
    ))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(http::header::UPGRADE)
        && headers
            .get_all(http::header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
}

/// Removes hop-by-hop headers (those `Connection` names too); an upgrade keeps its two.
fn strip_hop_by_hop(headers: &mut HeaderMap, keep_upgrade: bool) {
    let named: Vec<String> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .filter(|t| !t.is_empty())
        .collect();
    for h in HOP_BY_HOP.iter().map(|s| s.to_string()).chain(named) {
        if keep_upgrade && (h == "connection" || h == "upgrade") {
            continue;
        }
        headers.remove(h.as_str());
    }
    if keep_upgrade {
        headers.insert(
            http::header::CONNECTION,
            HeaderValue::from_static("upgrade"),
        );
    }
}

/// Where a forwarded request goes.
pub(crate) struct Target {
    pub host: String,
    pub port: u16,
    /// Over TLS (a request of an intercepted HTTPS connection).
    pub tls: bool,
}

/// A plain HTTP request to the proxy: to its absolute URL or `Host`.
pub(crate) async fn forward(
    proxy: &Arc<Proxy>,
    sandbox: &SandboxEgress,
    req: Request<hyper::body::Incoming>,
    conn: &ClientConn,
    cancel: CancellationToken,
) -> Response<Body> {
    let (host, port) = match target(&req) {
        Ok(t) => t,
        Err(m) => return bad_request(m),
    };
    let to = Target {
        host,
        port,
        tls: false,
    };
    forward_to(proxy, sandbox, to, req, conn, cancel).await
}

pub(crate) async fn forward_to(
    proxy: &Arc<Proxy>,
    sandbox: &SandboxEgress,
    to: Target,
    mut req: Request<hyper::body::Incoming>,
    conn: &ClientConn,
    cancel: CancellationToken,
) -> Response<Body> {
    let Target { host, port, tls } = to;
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let rule = sandbox.policy.rule_for(&host, &method, &path).cloned();
    let mut set = Vec::new();
    if let Some(r) = &rule {
        let vars = Vars {
            sandbox,
            ctx: proxy.ctx.as_ref(),
        };
        for (name, tpl) in &r.set_headers {
            let expanded = Template::parse(tpl)
                .map_err(|e| e.to_string())
                .and_then(|t| t.expand(&vars).map_err(|e| e.to_string()));
            let value = match expanded.map(|v| HeaderValue::from_str(&v)) {
                Ok(Ok(mut v)) => {
                    v.set_sensitive(true);
                    v
                }
                Ok(Err(_)) => {
                    return proxy.refused(
                        sandbox,
                        &host,
                        &format!("the rule for {} made an invalid value for {name}", r.host),
                    )
                }
                Err(e) => {
                    return proxy.refused(
                        sandbox,
                        &host,
                        &format!("the rule for {} cannot set {name}: {e}", r.host),
                    )
                }
            };
            let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
                return bad_request(format!("invalid header name {name:?} in the policy"));
            };
            set.push((name, value));
        }
    }
    let upgrade = is_upgrade(req.headers());
    let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));

    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers, upgrade);
    let origin = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    parts.uri = match origin.parse() {
        Ok(u) => u,
        Err(_) => return bad_request("invalid request target"),
    };
    parts.version = http::Version::HTTP_11;
    if !parts.headers.contains_key(HOST) {
        let h = if port == 80 {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(v) = HeaderValue::from_str(&h) {
            parts.headers.insert(HOST, v);
        }
    }
    if let Some(r) = &rule {
        for h in &r.remove_headers {
            parts.headers.remove(h.as_str());
        }
    }
    for (name, value) in set {
        parts.headers.insert(name, value);
    }
    let (p, id) = (proxy.clone(), sandbox.id.clone());
    let body = body
        .map_frame(move |f| {
            if let Some(d) = f.data_ref() {
                p.count_bytes(&id, d.len() as u64, 0);
            }
            f
        })
        .boxed();
    let mut upstream_req = Request::from_parts(parts, body);

    let mut cached = conn.upstream.lock().await;
    let reusable = cached.as_ref().is_some_and(|c| {
        c.host == host
            && c.port == port
            && c.sender.usable()
            // An upgrade needs HTTP/1.1.
            && !(upgrade && matches!(c.sender, Sender::H2(_)))
            && proxy.refuse(c.addr).is_none()
            && sandbox.policy.allows(&host, c.addr.ip()).is_ok()
    });
    if !reusable {
        *cached = None;
        let (stream, addr) = match upstream::connect(proxy, sandbox, &host, port).await {
            Ok(c) => c,
            Err(ConnectError::Refused(why)) => return proxy.refused(sandbox, &host, &why),
            Err(ConnectError::Failed(e)) => return bad_gateway(&host, e),
            Err(ConnectError::TimedOut) => return timeout(&host),
        };
        let sender = if tls {
            let stream = match upstream::tls(proxy, stream, &host, upgrade).await {
                Ok(s) => s,
                Err(e) => return bad_gateway(&host, e),
            };
            if stream.get_ref().1.alpn_protocol() == Some(b"h2") {
                handshake_h2(proxy, stream, &cancel).await
            } else {
                handshake(proxy, stream, &cancel).await
            }
        } else {
            handshake(proxy, stream, &cancel).await
        };
        let sender = match sender {
            Ok(s) => s,
            Err(e) => return bad_gateway(&host, e),
        };
        *cached = Some(Cached {
            host: host.clone(),
            port,
            addr,
            sender,
        });
    }
    let sender = &mut cached.as_mut().expect("set above").sender;
    if let Sender::H2(_) = sender {
        // HTTP/2 names the host in the URI (`:authority`), not in a header.
        let (mut parts, body) = upstream_req.into_parts();
        let authority = if port == 443 {
            host.clone()
        } else {
            format!("{host}:{port}")
        };
        parts.uri = match format!("https://{authority}{origin}").parse() {
            Ok(u) => u,
            Err(_) => return bad_request("invalid request target"),
        };
        parts.version = http::Version::HTTP_2;
        parts.headers.remove(HOST);
        upstream_req = Request::from_parts(parts, body);
    }
    proxy.allowed(
        sandbox,
        &host,
        rule.as_ref().map(|r| r.host.as_str()),
        "http",
    );
    let sent = tokio::time::timeout(RESPONSE_TIMEOUT, sender.send(upstream_req)).await;
    let mut resp = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            *cached = None;
            return bad_gateway(&host, e);
        }
        Err(_) => {
            *cached = None;
            return timeout(&host);
        }
    };
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        // The upstream connection now belongs to the upgraded stream.
        *cached = None;
        if let Some(client_upgrade) = client_upgrade {
            let upstream_upgrade = hyper::upgrade::on(&mut resp);
            let (p, id, c) = (proxy.clone(), sandbox.id.clone(), cancel.clone());
            proxy.tasks.spawn(async move {
                let (Ok(client), Ok(upstream)) = (client_upgrade.await, upstream_upgrade.await)
                else {
                    return;
                };
                let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
                tokio::select! {
                    r = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
                        if let Ok((sent, received)) = r {
                            p.count_bytes(&id, sent, received);
                        }
                    }
                    _ = c.cancelled() => {}
                }
            });
        }
        let (parts, _) = resp.into_parts();
        return Response::from_parts(parts, super::answer::empty());
    }
    drop(cached);
    let (mut parts, body) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers, false);
    // Toward the sandbox, always HTTP/1.1.
    parts.version = http::Version::HTTP_11;
    let (p, id) = (proxy.clone(), sandbox.id.clone());
    let body = body
        .map_frame(move |f| {
            if let Some(d) = f.data_ref() {
                p.count_bytes(&id, 0, d.len() as u64);
            }
            f
        })
        .boxed();
    Response::from_parts(parts, body)
}

/// An HTTP/2 client connection on `io`, driven by a task of the proxy's.
async fn handshake_h2<IO>(
    proxy: &Proxy,
    io: IO,
    cancel: &CancellationToken,
) -> Result<Sender, hyper::Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .timer(hyper_util::rt::TokioTimer::new())
            .handshake::<_, Body>(TokioIo::new(io))
            .await?;
    drive(proxy, connection, cancel);
    Ok(Sender::H2(sender))
}

/// An HTTP/1.1 client connection on `io`, driven by a task of the proxy's.
async fn handshake<IO>(
    proxy: &Proxy,
    io: IO,
    cancel: &CancellationToken,
) -> Result<Sender, hyper::Error>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::Builder::new()
        .preserve_header_case(true)
        .handshake::<_, Body>(TokioIo::new(io))
        .await?;
    drive(proxy, connection.with_upgrades(), cancel);
    Ok(Sender::H1(sender))
}

/// Drives an upstream connection in a task of the proxy's until it ends or `cancel`.
fn drive<F>(proxy: &Proxy, connection: F, cancel: &CancellationToken)
where
    F: std::future::Future + Send + 'static,
{
    let c = cancel.clone();
    proxy.tasks.spawn(async move {
        tokio::select! {
            _ = connection => {}
            _ = c.cancelled() => {}
        }
    });
}
