//! The egress proxy's cost: requests on a kept-alive connection straight to an upstream
//! against the same requests through the proxy, in one run, all in this process on
//! loopback: plain HTTP forwarded with a header rule, HTTPS tunnelled (no rule), and HTTPS
//! intercepted (a rule: the proxy terminates TLS with the sandbox's CA and opens its own to
//! the upstream). Targets (issue "Egress proxy"): added p50 ≤ 1 ms for HTTP and tunnelled
//! HTTPS, ≤ 3 ms for intercepted HTTPS. Also requests per second of plain HTTP over several
//! connections at once, through the proxy and direct.

use crate::report::{percentiles, Row, Table};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use warren_api::egress::EgressPolicy;
use warren_egress::{Compiled, EgressContext, Guard, Proxy, ProxyTls, SandboxEgress};

const SEED: [u8; 32] = [3u8; 32];

struct Ctx(SandboxEgress);

impl EgressContext for Ctx {
    fn sandbox_at(&self, _addr: IpAddr) -> Option<SandboxEgress> {
        Some(self.0.clone())
    }
    fn secret(&self, _sandbox: &str, _name: &str) -> Option<String> {
        Some("bench-token".into())
    }
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Answers every request on a connection with `ok`.
async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = find(&buf, b"\r\n\r\n") {
            buf.drain(..end + 4);
            if s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await
                .is_err()
            {
                return;
            }
        }
    }
}

async fn upstream(ip: &str, tls: Option<Arc<rustls::ServerConfig>>) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind((ip, 0)).await?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let _ = s.set_nodelay(true);
            let tls = tls.clone();
            tokio::spawn(async move {
                match tls {
                    Some(cfg) => {
                        if let Ok(s) = tokio_rustls::TlsAcceptor::from(cfg).accept(s).await {
                            answer(s).await
                        }
                    }
                    None => answer(s).await,
                }
            });
        }
    });
    Ok(addr)
}

/// One request and its `ok`, on an open connection.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    req: &[u8],
) -> anyhow::Result<()> {
    s.write_all(req).await?;
    let mut buf = Vec::new();
    while !buf.ends_with(b"\r\n\r\nok") {
        let mut c = [0u8; 1024];
        let n = s.read(&mut c).await?;
        anyhow::ensure!(n > 0, "connection closed");
        buf.extend_from_slice(&c[..n]);
    }
    Ok(())
}

async fn sample<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    req: &[u8],
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    for _ in 0..n.min(50) {
        round_trip(s, req).await?;
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        round_trip(s, req).await?;
        out.push(t.elapsed());
    }
    Ok(out)
}

/// Requests per second over `conns` kept-alive connections at once, each sending `per_conn`
/// requests one after another (`req` is built for the connection's target).
async fn throughput(
    to: SocketAddr,
    req: &[u8],
    conns: usize,
    per_conn: usize,
) -> anyhow::Result<f64> {
    let mut streams = Vec::with_capacity(conns);
    for _ in 0..conns {
        let s = TcpStream::connect(to).await?;
        s.set_nodelay(true)?;
        streams.push(s);
    }
    let t = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut s in streams {
        let req = req.to_vec();
        tasks.spawn(async move {
            for _ in 0..per_conn {
                round_trip(&mut s, &req).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    Ok((conns * per_conn) as f64 / t.elapsed().as_secs_f64())
}

async fn connect_tunnel(proxy: SocketAddr, to: SocketAddr) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(proxy).await?;
    s.set_nodelay(true)?;
    s.write_all(format!("CONNECT {to} HTTP/1.1\r\nhost: {to}\r\n\r\n").as_bytes())
        .await?;
    let mut buf = Vec::new();
    while find(&buf, b"\r\n\r\n").is_none() {
        let mut c = [0u8; 512];
        let n = s.read(&mut c).await?;
        anyhow::ensure!(n > 0, "the proxy closed the tunnel");
        buf.extend_from_slice(&c[..n]);
    }
    anyhow::ensure!(
        buf.starts_with(b"HTTP/1.1 200"),
        "CONNECT: {}",
        String::from_utf8_lossy(&buf)
    );
    Ok(s)
}

async fn tls_to(
    s: TcpStream,
    ip: &str,
    ca_pem: &str,
) -> anyhow::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from_pem_slice(
        ca_pem.as_bytes(),
    )?)?;
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(rustls::pki_types::ServerName::try_from(ip.to_string())?, s)
        .await?)
}

pub async fn proxy_cost(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The upstreams' own CA and a certificate for each HTTPS upstream.
    let ca_key = rcgen::KeyPair::generate()?;
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new())?;
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = p.self_signed(&ca_key)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.pem(), ca_key)?;
    let server = |ip: &str| -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let key = rcgen::KeyPair::generate()?;
        let cert = rcgen::CertificateParams::new(vec![ip.to_string()])?.signed_by(&key, &issuer)?;
        Ok(Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )?,
        ))
    };
    let http_up = upstream("127.0.0.21", None).await?;
    let tunnelled_up = upstream("127.0.0.22", Some(server("127.0.0.22")?)).await?;
    let intercepted_up = upstream("127.0.0.23", Some(server("127.0.0.23")?)).await?;

    let policy: EgressPolicy = serde_json::from_value(serde_json::json!({"rules": [
        {"host": "127.0.0.21", "set_headers": {"authorization": "Bearer ${secret:t}"}},
        {"host": "127.0.0.23", "set_headers": {"authorization": "Bearer ${secret:t}"}}
    ]}))?;
    let sandbox = SandboxEgress {
        id: "bench".into(),
        labels: Default::default(),
        policy: Arc::new(Compiled::new(
            policy.normalized().map_err(|e| anyhow::anyhow!("{e}"))?,
        )),
    };
    let listener = TcpListener::bind("127.0.0.20:0").await?;
    let proxy_addr = listener.local_addr()?;
    let tls = ProxyTls::new(Some(SEED), ca.pem().as_bytes()).map_err(anyhow::Error::msg)?;
    let proxy = Proxy::new(
        Arc::new(Ctx(sandbox)),
        Guard::new(vec!["127.0.0.0/8".parse()?]),
        tls,
        None,
    );
    let cancel = tokio_util::sync::CancellationToken::new();
    let task = proxy.spawn(listener, cancel.clone());

    // HTTP: direct (origin form) vs through the proxy (absolute form, header rule).
    let mut direct = TcpStream::connect(http_up).await?;
    direct.set_nodelay(true)?;
    let base = sample(&mut direct, b"GET / HTTP/1.1\r\nhost: x\r\n\r\n", n).await?;
    let mut via = TcpStream::connect(proxy_addr).await?;
    via.set_nodelay(true)?;
    let req = format!("GET http://{http_up}/ HTTP/1.1\r\nhost: {http_up}\r\n\r\n");
    let ours = sample(&mut via, req.as_bytes(), n).await?;
    add(
        table,
        "egress HTTP (header rule)",
        n,
        &ours,
        "direct",
        &base,
        "added p50 <= 1 ms",
    );
    // Throughput: 8 connections at once, the same requests.
    let (conns, per_conn) = (8, (n / 8).max(10));
    let direct_rps = throughput(
        http_up,
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n",
        conns,
        per_conn,
    )
    .await?;
    let proxy_rps = throughput(proxy_addr, req.as_bytes(), conns, per_conn).await?;
    table.note(format!(
        "egress HTTP (header rule) throughput, {conns} connections x {per_conn} requests: {proxy_rps:.0} req/s through the proxy, {direct_rps:.0} req/s direct ({:.2}x)",
        proxy_rps / direct_rps
    ));

    // HTTPS without a rule: a tunnel.
    let mut direct = tls_to(
        TcpStream::connect(tunnelled_up).await?,
        "127.0.0.22",
        &ca.pem(),
    )
    .await?;
    let req = b"GET / HTTP/1.1\r\nhost: 127.0.0.22\r\n\r\n";
    let base = sample(&mut direct, req, n).await?;
    let mut via = tls_to(
        connect_tunnel(proxy_addr, tunnelled_up).await?,
        "127.0.0.22",
        &ca.pem(),
    )
    .await?;
    let ours = sample(&mut via, req, n).await?;
    add(
        table,
        "egress HTTPS tunnelled",
        n,
        &ours,
        "direct TLS",
        &base,
        "added p50 <= 1 ms",
    );

    // HTTPS with a rule: intercepted with the sandbox's CA.
    let mut direct = tls_to(
        TcpStream::connect(intercepted_up).await?,
        "127.0.0.23",
        &ca.pem(),
    )
    .await?;
    let req = b"GET / HTTP/1.1\r\nhost: 127.0.0.23\r\n\r\n";
    let base = sample(&mut direct, req, n).await?;
    let sandbox_ca =
        warren_egress::ca::SandboxCa::derive(&SEED, "bench").map_err(anyhow::Error::msg)?;
    let mut via = tls_to(
        connect_tunnel(proxy_addr, intercepted_up).await?,
        "127.0.0.23",
        &sandbox_ca.cert_pem,
    )
    .await?;
    let ours = sample(&mut via, req, n).await?;
    add(
        table,
        "egress HTTPS intercepted",
        n,
        &ours,
        "direct TLS",
        &base,
        "added p50 <= 3 ms",
    );

    cancel.cancel();
    drop((direct, via));
    let _ = tokio::time::timeout(Duration::from_secs(5), task).await;
    Ok(())
}

fn add(
    table: &mut Table,
    name: &str,
    n: usize,
    ours: &[Duration],
    base_name: &str,
    base: &[Duration],
    target: &str,
) {
    let (o, b) = (percentiles(ours), percentiles(base));
    table.note(format!(
        "{name}: adds {:.3} ms at p50 ({target})",
        o.0 - b.0
    ));
    table.add(Row {
        name: name.into(),
        n,
        ours: o,
        baseline_name: base_name.into(),
        baseline: b,
        target: target.into(),
    });
}
