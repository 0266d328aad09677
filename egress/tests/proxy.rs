//! The proxy against real upstream servers on loopback, with real TCP clients; the node's
//! side (which sandbox an address is, secrets' values) is the one fake here.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use warren_api::egress::EgressPolicy;
use warren_egress::{Compiled, EgressContext, Guard, Proxy, ProxyTls, SandboxEgress};

#[derive(Default)]
struct Node {
    sandboxes: Mutex<HashMap<IpAddr, SandboxEgress>>,
    secrets: Mutex<BTreeMap<String, String>>,
}

impl EgressContext for Node {
    fn sandbox_at(&self, addr: IpAddr) -> Option<SandboxEgress> {
        self.sandboxes.lock().unwrap().get(&addr).cloned()
    }
    fn secret(&self, _sandbox: &str, name: &str) -> Option<String> {
        self.secrets.lock().unwrap().get(name).cloned()
    }
}

impl Node {
    fn set(&self, ip: &str, id: &str, labels: &[(&str, &str)], policy: serde_json::Value) {
        let p: EgressPolicy = serde_json::from_value(policy).unwrap();
        self.sandboxes.lock().unwrap().insert(
            ip.parse().unwrap(),
            SandboxEgress {
                id: id.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                policy: Arc::new(Compiled::new(p.normalized().unwrap())),
            },
        );
    }
}

/// The seed of the sandboxes' CAs in these tests.
const SEED: [u8; 32] = [42u8; 32];

/// The upstreams' own CA (what an operator gives with `--egress-ca-file`), made once.
struct UpstreamCa {
    cert_pem: String,
    key_pem: String,
}

fn upstream_ca() -> &'static UpstreamCa {
    static CA: std::sync::OnceLock<UpstreamCa> = std::sync::OnceLock::new();
    CA.get_or_init(|| {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "test upstream CA");
        let cert = p.self_signed(&key).unwrap();
        UpstreamCa {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    })
}

/// A server config for `ip` with a certificate of the upstream CA, offering `alpn`.
fn upstream_server_config(ip: &str, alpn: &[&[u8]]) -> rustls::ServerConfig {
    let ca = upstream_ca();
    let ca_key = rcgen::KeyPair::from_pem(&ca.key_pem).unwrap();
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![ip.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let mut cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    cfg
}

/// An HTTPS upstream on `ip` with a certificate of the upstream CA; answers like the echo.
async fn tls_upstream(ip: &str) -> SocketAddr {
    let cfg = upstream_server_config(ip, &[]);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        let body = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                        buf.drain(..end + 4);
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
                            body.len(),
                            body
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// A TLS client to `name` over `s` that trusts only `ca_pem`.
async fn tls_client(
    s: TcpStream,
    name: &str,
    ca_pem: &str,
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(cfg))
        .connect(
            rustls::pki_types::ServerName::try_from(name.to_string()).unwrap(),
            s,
        )
        .await
}

/// Reads one response from any stream (content-length bodies only).
async fn read_any<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> (u16, String) {
    let mut buf = Vec::new();
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < end + 4 + len {
                let mut c = [0u8; 4096];
                let n = s.read(&mut c).await.unwrap();
                assert!(n > 0);
                buf.extend_from_slice(&c[..n]);
            }
            return (
                head[9..12].parse().unwrap(),
                String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).to_string(),
            );
        }
        let mut c = [0u8; 4096];
        let n = s.read(&mut c).await.unwrap();
        assert!(n > 0, "closed before a response");
        buf.extend_from_slice(&c[..n]);
    }
}

/// Opens a CONNECT tunnel to `to` through the proxy.
async fn tunnel(proxy: SocketAddr, to: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(proxy).await.unwrap();
    c.write_all(format!("CONNECT {to} HTTP/1.1\r\nhost: {to}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let (status, body) = read_any(&mut c).await;
    assert_eq!(status, 200, "{body}");
    c
}

#[tokio::test]
async fn https_to_a_host_with_a_rule_is_intercepted_with_the_sandboxes_ca_and_without_one_is_tunnelled_untouched(
) {
    let t = setup(true).await;
    let up = tls_upstream("127.0.0.1").await;
    t.node
        .secrets
        .lock()
        .unwrap()
        .insert("tok".into(), "TLS-SECRET".into());
    t.node.set(
        "127.0.0.1",
        "sb-tls",
        &[],
        serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"authorization": "Bearer ${secret:tok}"}}]}),
    );

    // Intercepted: the sandbox's CA (and only it) vouches for the host.
    let sandbox_ca = warren_egress::ca::SandboxCa::derive(&SEED, "sb-tls")
        .unwrap()
        .cert_pem;
    let mut s = tls_client(tunnel(t.proxy, up).await, "127.0.0.1", &sandbox_ca)
        .await
        .unwrap();
    s.write_all(b"GET /private HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (status, seen) = read_any(&mut s).await;
    assert_eq!(status, 200, "{seen}");
    assert!(seen.contains("authorization: bearer tls-secret"), "{seen}");
    // Another request on the same connection, after the policy dropped the header.
    t.node.set(
        "127.0.0.1",
        "sb-tls",
        &[],
        serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"x-other": "1"}}]}),
    );
    s.write_all(b"GET /again HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (_, seen) = read_any(&mut s).await;
    assert!(
        !seen.contains("authorization") && seen.contains("x-other: 1"),
        "{seen}"
    );
    // Another sandbox's CA does not vouch for it.
    let other_ca = warren_egress::ca::SandboxCa::derive(&SEED, "sb-other")
        .unwrap()
        .cert_pem;
    assert!(
        tls_client(tunnel(t.proxy, up).await, "127.0.0.1", &other_ca)
            .await
            .is_err()
    );

    // No rule: the tunnel is the upstream's own TLS (its CA verifies it), nothing added.
    t.node
        .set("127.0.0.1", "sb-tls", &[], serde_json::json!({}));
    let mut s = tls_client(
        tunnel(t.proxy, up).await,
        "127.0.0.1",
        &upstream_ca().cert_pem,
    )
    .await
    .unwrap();
    s.write_all(b"GET /plain HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let (status, seen) = read_any(&mut s).await;
    assert_eq!(status, 200);
    assert!(!seen.contains("authorization"), "{seen}");
}

/// An upstream that answers every request with the request's head as its body.
async fn echo_upstream() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let n = match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = find(&buf, b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..end]).to_string();
                        buf.drain(..end + 4);
                        let body = head.to_ascii_lowercase();
                        let resp = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{}",
                            body.len(),
                            body
                        );
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// Reads one response (content-length bodies only): status and body.
async fn read_response(s: &mut TcpStream) -> (u16, String) {
    read_any(s).await
}

struct Setup {
    node: Arc<Node>,
    proxy: SocketAddr,
    upstream: SocketAddr,
    proxy_obj: Arc<Proxy>,
}

/// A proxy listening on 127.0.0.2 (the "sandbox" connects from 127.0.0.1), with
/// loopback opened as the operator would with `--egress-allow-net 127.0.0.0/8`.
async fn setup(allow_loopback: bool) -> Setup {
    let node = Arc::new(Node::default());
    let nets = if allow_loopback {
        vec!["127.0.0.0/8".parse().unwrap()]
    } else {
        vec![]
    };
    let l = TcpListener::bind("127.0.0.2:0").await.unwrap();
    let proxy_addr = l.local_addr().unwrap();
    let mut guard = Guard::new(nets);
    guard.own_ports = vec![proxy_addr.port()];
    let tls = ProxyTls::new(Some(SEED), upstream_ca().cert_pem.as_bytes()).unwrap();
    let proxy = Proxy::new(node.clone(), guard, tls, None);
    proxy.spawn(l, CancellationToken::new());
    Setup {
        node,
        proxy: proxy_addr,
        upstream: echo_upstream().await,
        proxy_obj: proxy,
    }
}

async fn get(s: &mut TcpStream, url: &str) -> (u16, String) {
    let req = format!("GET {url} HTTP/1.1\r\nhost: ignored.example\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    read_response(s).await
}

#[tokio::test]
async fn a_rule_injects_a_secret_per_label_and_a_change_applies_on_the_open_connection() {
    let t = setup(true).await;
    t.node
        .secrets
        .lock()
        .unwrap()
        .insert("tok-red".into(), "RED-SECRET".into());
    let policy = serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"authorization": "Bearer ${secret:tok-${sandbox.label.team}}"},
        "remove_headers": ["cookie"]}]});
    t.node
        .set("127.0.0.1", "sb-red", &[("team", "red")], policy);
    let url = format!("http://{}/repo", t.upstream);
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let req = format!(
        "GET {url} HTTP/1.1\r\nhost: {}\r\ncookie: c=1\r\nproxy-authorization: x\r\n\r\n",
        t.upstream
    );
    c.write_all(req.as_bytes()).await.unwrap();
    let (status, seen) = read_response(&mut c).await;
    assert_eq!(status, 200, "{seen}");
    assert!(seen.contains("authorization: bearer red-secret"), "{seen}");
    assert!(!seen.contains("cookie"), "{seen}");
    assert!(!seen.contains("proxy-authorization"), "{seen}");
    assert!(seen.starts_with("get /repo http/1.1"), "{seen}");

    // The same connection, the policy changed meanwhile: denied now.
    t.node.set(
        "127.0.0.1",
        "sb-red",
        &[("team", "red")],
        serde_json::json!({"deny_hosts": ["127.0.0.0/8"]}),
    );
    let (status, body) = get(&mut c, &url).await;
    assert_eq!(status, 403, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["code"], "EGRESS_DENIED");
    assert_eq!(v["sandbox"], "sb-red");
    assert_eq!(v["host"], "127.0.0.1");

    // And back, still on the same connection: the upstream sees no header any more.
    t.node.set(
        "127.0.0.1",
        "sb-red",
        &[("team", "red")],
        serde_json::json!({}),
    );
    let (status, seen) = get(&mut c, &url).await;
    assert_eq!(status, 200);
    assert!(!seen.contains("authorization"), "{seen}");
    let u = t.proxy_obj.usage.get("sb-red");
    assert_eq!((u.requests, u.denied), (2, 1));
    assert!(u.bytes_down > 0);
}

#[tokio::test]
async fn a_missing_secret_refuses_the_request_instead_of_sending_an_empty_header() {
    let t = setup(true).await;
    t.node.set(
        "127.0.0.1",
        "sb",
        &[],
        serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"authorization": "Bearer ${secret:absent}"}}]}),
    );
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let (status, body) = get(&mut c, &format!("http://{}/", t.upstream)).await;
    assert_eq!(status, 403);
    assert!(
        body.contains("EGRESS_DENIED") && body.contains("absent"),
        "{body}"
    );
}

#[tokio::test]
async fn private_destinations_are_refused_unless_opened_and_the_nodes_own_ports_always() {
    // Loopback not opened: refused although the policy allows everything.
    let t = setup(false).await;
    t.node.set(
        "127.0.0.1",
        "sb",
        &[],
        serde_json::json!({"default": "allow"}),
    );
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let (status, body) = get(&mut c, &format!("http://{}/", t.upstream)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("not the public internet"), "{body}");
    // A name that resolves to loopback gets no further than the address does.
    let (status, body) = get(&mut c, &format!("http://localhost:{}/", t.upstream.port())).await;
    assert_eq!(status, 403, "{body}");

    // Opened: the upstream answers, but the proxy's own port (the node's) stays refused.
    let t = setup(true).await;
    t.node.set("127.0.0.1", "sb", &[], serde_json::json!({}));
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let (status, _) = get(&mut c, &format!("http://{}/", t.upstream)).await;
    assert_eq!(status, 200);
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let (status, body) = get(&mut c, &format!("http://127.0.0.1:{}/", t.proxy.port())).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("own endpoint"), "{body}");
}

#[tokio::test]
async fn connect_tunnels_to_allowed_hosts_and_refuses_the_rest() {
    let t = setup(true).await;
    t.node.set(
        "127.0.0.1",
        "sb",
        &[],
        serde_json::json!({"default": "deny", "allow_hosts": ["127.0.0.1"]}),
    );
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    c.write_all(format!("CONNECT {0} HTTP/1.1\r\nhost: {0}\r\n\r\n", t.upstream).as_bytes())
        .await
        .unwrap();
    let (status, _) = read_response(&mut c).await;
    assert_eq!(status, 200);
    // The tunnel carries anything: a request straight to the upstream.
    c.write_all(b"GET /through HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (status, seen) = read_response(&mut c).await;
    assert_eq!(status, 200);
    assert!(seen.starts_with("get /through"), "{seen}");

    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    c.write_all(
        format!(
            "CONNECT 127.0.0.3:{0} HTTP/1.1\r\nhost: 127.0.0.3\r\n\r\n",
            t.upstream.port()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let (status, body) = read_response(&mut c).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("default is deny"), "{body}");
}

#[tokio::test]
async fn a_client_that_is_no_sandbox_gets_nothing() {
    let t = setup(true).await;
    let mut c = TcpStream::connect(t.proxy).await.unwrap();
    let (status, body) = get(&mut c, &format!("http://{}/", t.upstream)).await;
    assert_eq!(status, 403);
    assert!(body.contains("FORBIDDEN"), "{body}");
}

#[tokio::test]
// tungstenite's handshake callback returns its (large) error response type.
#[allow(clippy::result_large_err)]
async fn a_websocket_upgrade_is_spliced_after_the_rule_set_its_headers() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::{handshake::server, Message};
    let t = setup(true).await;
    t.node
        .secrets
        .lock()
        .unwrap()
        .insert("ws".into(), "WS-SECRET".into());
    t.node.set(
        "127.0.0.1",
        "sb-ws",
        &[],
        serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"authorization": "Bearer ${secret:ws}"}}]}),
    );
    // A WebSocket echo upstream that keeps the authorization header of its handshake.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(String::new()));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let cb = |req: &server::Request, resp: server::Response| {
            let auth = req
                .headers()
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default();
            *seen2.lock().unwrap() = auth;
            Ok(resp)
        };
        let mut ws = tokio_tungstenite::accept_hdr_async(s, cb).await.unwrap();
        while let Some(Ok(m)) = ws.next().await {
            if m.is_text() && ws.send(m).await.is_err() {
                return;
            }
        }
    });
    // The client talks to the proxy as to the upstream (a request with a Host header).
    let s = TcpStream::connect(t.proxy).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(format!("ws://{up}/chat"), s)
        .await
        .unwrap();
    assert_eq!(resp.status(), 101);
    ws.send(Message::text("hello")).await.unwrap();
    let back = tokio::time::timeout(std::time::Duration::from_secs(5), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(back.into_text().unwrap().as_str(), "hello");
    assert_eq!(seen.lock().unwrap().as_str(), "Bearer WS-SECRET");
}

/// One DNS query from `from` to the proxy's name server at `server`: (code, addresses).
async fn dns(
    from: &str,
    server: SocketAddr,
    name: &str,
    kind: hickory_proto::rr::RecordType,
) -> (hickory_proto::op::ResponseCode, Vec<IpAddr>) {
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::Name;
    let mut q = Message::new();
    q.set_id(7).set_recursion_desired(true);
    q.add_query(Query::query(Name::from_ascii(name).unwrap(), kind));
    let s = tokio::net::UdpSocket::bind((from, 0)).await.unwrap();
    s.send_to(&q.to_vec().unwrap(), server).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), s.recv(&mut buf))
        .await
        .expect("an answer")
        .unwrap();
    let r = Message::from_vec(&buf[..n]).unwrap();
    assert_eq!(r.id(), 7);
    let addrs = r
        .answers()
        .iter()
        .filter_map(|a| match a.data() {
            hickory_proto::rr::RData::A(a) => Some(IpAddr::V4(a.0)),
            _ => None,
        })
        .collect();
    (r.response_code(), addrs)
}

#[tokio::test]
async fn the_name_server_answers_per_policy_and_gives_no_address_the_sandbox_cannot_reach() {
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::RecordType;
    let t = setup(true).await;
    let udp = tokio::net::UdpSocket::bind("127.0.0.2:0").await.unwrap();
    let server = udp.local_addr().unwrap();
    t.proxy_obj.spawn_dns(udp, CancellationToken::new());
    t.node
        .set("127.0.0.1", "sb-dns", &[], serde_json::json!({}));
    let loopback: IpAddr = "127.0.0.1".parse().unwrap();
    assert_eq!(
        dns("127.0.0.1", server, "localhost", RecordType::A).await,
        (ResponseCode::NoError, vec![loopback])
    );
    assert_eq!(
        dns("127.0.0.1", server, "localhost.", RecordType::AAAA).await,
        (ResponseCode::NoError, vec![])
    );
    assert_eq!(
        dns("127.0.0.1", server, "localhost", RecordType::MX)
            .await
            .0,
        ResponseCode::NotImp
    );
    // Denied by name, or every address denied: refused, and counted as a refusal.
    t.node.set(
        "127.0.0.1",
        "sb-dns",
        &[],
        serde_json::json!({"deny_hosts": ["localhost"]}),
    );
    assert_eq!(
        dns("127.0.0.1", server, "LocalHost", RecordType::A).await,
        (ResponseCode::Refused, vec![])
    );
    t.node.set(
        "127.0.0.1",
        "sb-dns",
        &[],
        serde_json::json!({"deny_hosts": ["127.0.0.0/8"]}),
    );
    assert_eq!(
        dns("127.0.0.1", server, "localhost", RecordType::A).await.0,
        ResponseCode::Refused
    );
    assert!(t.proxy_obj.usage.get("sb-dns").denied >= 2);
    // An address that is no sandbox learns nothing.
    assert_eq!(
        dns("127.0.0.3", server, "localhost", RecordType::A).await.0,
        ResponseCode::Refused
    );
}

#[tokio::test]
async fn the_name_server_refuses_loopback_unless_the_operator_opened_it() {
    use hickory_proto::op::ResponseCode;
    use hickory_proto::rr::RecordType;
    let t = setup(false).await;
    let udp = tokio::net::UdpSocket::bind("127.0.0.2:0").await.unwrap();
    let server = udp.local_addr().unwrap();
    t.proxy_obj.spawn_dns(udp, CancellationToken::new());
    t.node
        .set("127.0.0.1", "sb-dns2", &[], serde_json::json!({}));
    assert_eq!(
        dns("127.0.0.1", server, "localhost", RecordType::A).await,
        (ResponseCode::Refused, vec![])
    );
}

/// An HTTPS upstream on `ip` that speaks only HTTP/2 and answers each request with its
/// version, path and headers; counts the connections it accepted.
async fn h2_upstream(ip: &str) -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(upstream_server_config(ip, &[b"h2"])));
    let l = TcpListener::bind((ip, 0)).await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = conns.clone();
    tokio::spawn(async move {
        loop {
            let (s, _) = l.accept().await.unwrap();
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    |req: hyper::Request<hyper::body::Incoming>| async move {
                        let mut body = format!("{:?} {}\n", req.version(), req.uri().path());
                        for (k, v) in req.headers() {
                            body.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("")));
                        }
                        Ok::<_, std::convert::Infallible>(hyper::Response::new(
                            http_body_util::Full::new(bytes::Bytes::from(
                                body.to_ascii_lowercase(),
                            )),
                        ))
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
            });
        }
    });
    (addr, conns)
}

#[tokio::test]
async fn an_intercepted_request_to_an_http2_upstream_goes_over_http2_on_one_connection() {
    let t = setup(true).await;
    let (up, conns) = h2_upstream("127.0.0.1").await;
    t.node
        .secrets
        .lock()
        .unwrap()
        .insert("tok".into(), "H2-SECRET".into());
    t.node.set(
        "127.0.0.1",
        "sb-h2",
        &[],
        serde_json::json!({"rules": [{"host": "127.0.0.1",
        "set_headers": {"authorization": "Bearer ${secret:tok}"}}]}),
    );
    let sandbox_ca = warren_egress::ca::SandboxCa::derive(&SEED, "sb-h2")
        .unwrap()
        .cert_pem;
    let mut s = tls_client(tunnel(t.proxy, up).await, "127.0.0.1", &sandbox_ca)
        .await
        .unwrap();
    for path in ["/one", "/two"] {
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let (status, seen) = read_any(&mut s).await;
        assert_eq!(status, 200, "{seen}");
        assert!(seen.starts_with(&format!("http/2.0 {path}\n")), "{seen}");
        assert!(seen.contains("authorization: bearer h2-secret"), "{seen}");
    }
    assert_eq!(conns.load(std::sync::atomic::Ordering::SeqCst), 1);
}
