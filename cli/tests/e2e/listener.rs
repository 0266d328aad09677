//! The public listener under clients that do not play along: silent and slow connections
//! (slowloris) are cut after the header timeout while others are served; SIGTERM with
//! event streams open ends the node within its drain time, answering the request in
//! progress; TLS from files, swapped without a restart.

use super::egress::ca_and_cert;
use super::harness::{unique, Node};
use futures_util::StreamExt;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;
use warren_client::Client;

/// Whether the server closed `s` within `within` (EOF or a reset), reading and dropping
/// whatever it sent.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[tokio::test]
async fn silent_and_slow_clients_are_cut_while_others_are_served() {
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--header-read-timeout-ms", "1500", "--max-connections", "6"],
    )
    .await;
    let addr = node.url.trim_start_matches("http://").to_string();
    // The attacker takes every connection slot: three say nothing, three send a header
    // a byte at a time and never finish it.
    let mut silent: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let mut slow: Vec<TcpStream> = (0..3).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let dripping = {
        let mut conns: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
        std::thread::spawn(move || {
            for c in &mut conns {
                let _ = c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n");
            }
            for _ in 0..40 {
                std::thread::sleep(Duration::from_millis(200));
                for c in &mut conns {
                    let _ = c.write_all(b"X");
                }
            }
        })
    };
    // A client arriving now waits for a slot, and gets one once the attacker's are cut.
    let started = Instant::now();
    let served = tokio::time::timeout(
        Duration::from_secs(20),
        node.req(reqwest::Method::GET, "/v1/sandboxes").send(),
    )
    .await
    .expect("a client was kept out by connections that never sent a request")
    .unwrap();
    assert_eq!(served.status(), 200);
    let waited = started.elapsed();
    for (what, conns) in [("silent", &mut silent), ("slow", &mut slow)] {
        for c in conns.iter_mut() {
            assert!(
                closed_within(c, Duration::from_secs(10)),
                "a {what} connection was still open"
            );
        }
    }
    // A connection that made one request and then idles is let go too.
    let mut idle = TcpStream::connect(&addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)),
        "an idle keep-alive connection was never closed"
    );
    dripping.join().unwrap();
    // On a new connection: the client's pooled ones have idled out by now.
    let metrics =
        super::harness::metrics_through(&Client::new(&node.url, &node.key).unwrap()).await;
    let cut = super::harness::metric_in(
        &metrics,
        "warren_http_connections_cut_total{reason=\"header_timeout\"}",
    );
    assert!(cut >= 7, "{cut} connections counted as cut");
    eprintln!("served after {waited:?} behind 6 hostile connections");
}

#[tokio::test]
async fn sigterm_with_streams_open_answers_the_call_in_progress_and_exits_within_the_drain() {
    let mut node = Node::start_with("127.0.0.1:0", &["--drain-timeout-ms", "3000"]).await;
    let id = format!("drain-{}", unique());
    let c = node.client.clone();
    // An event stream that would outlive any drain (on a session of its own: calls on one
    // session run one after another).
    c.create_session(
        &id,
        &warren_api::session::CreateSessionRequest {
            id: Some("stream".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut stream = c
        .exec_stream(
            &id,
            &ExecRequest {
                command: Some("echo up; sleep 300".into()),
                session: Some("stream".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(stream.next().await.is_some(), "the stream started");
    // A call in progress when the signal comes.
    let in_progress = {
        let c = c.clone();
        let id = id.clone();
        tokio::spawn(async move { c.sh(&id, "sleep 1; echo answered").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    node.terminate();
    let answer = in_progress.await.unwrap();

    assert_eq!(
        answer.map(|r| r.stdout).map_err(|e| e.to_string()),
        Ok("answered\n".to_string()),
        "the call in progress was not answered"
    );
    let exited = tokio::task::spawn_blocking(move || {
        let status = node.wait_exit(Duration::from_secs(30));
        (status, node)
    })
    .await
    .unwrap();
    let (status, node) = exited;
    let status =
        status.expect("the node was still running 30 s after SIGTERM (an open stream held it)");
    assert!(status.success(), "{status}");
    // The stream was cut, not left hanging.
    let rest = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(ev) = stream.next().await {
            if ev.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        rest.is_ok(),
        "the event stream stayed open after the node exited"
    );
    // Sandboxes outlive their node's restarts; this one goes now.
    let mut node = node;
    node.restart().await;
    node.client.delete_sandbox(&id).await.unwrap();
}

struct TlsDir {
    dir: tempfile::TempDir,
}

impl TlsDir {
    fn new() -> TlsDir {
        TlsDir {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
    /// Writes a certificate (of a new CA) for 127.0.0.1 and its key; returns the CA's PEM.
    fn issue(&self, ca_name: &str) -> String {
        let (ca, cert, key) = ca_and_cert(ca_name, "127.0.0.1");
        // Renewals replace files by rename: a reader never sees half of one.
        for (name, pem) in [("key.pem", key), ("cert.pem", cert)] {
            let tmp = self.path(&format!("{name}.new"));
            std::fs::write(&tmp, pem).unwrap();
            std::fs::rename(&tmp, self.path(name)).unwrap();
        }
        ca
    }
}

async fn lists_with(url: &str, key: &str, ca: &str) -> Result<(), String> {
    let c = Client::with_root_ca(url, key, Some(ca.as_bytes())).map_err(|e| e.to_string())?;
    c.list_sandboxes(&[])
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_api_speaks_tls_from_files_it_swaps_without_a_restart() {
    let tls = TlsDir::new();
    let ca1 = tls.issue("warren test API CA one");
    let (cert, key) = (tls.path("cert.pem"), tls.path("key.pem"));
    let node = Node::start_with(
        "127.0.0.1:0",
        &[
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-reload-check-ms",
            "100",
        ],
    )
    .await;
    assert!(node.url.starts_with("https://127.0.0.1:"), "{}", node.url);
    lists_with(&node.url, &node.key, &ca1).await.unwrap();
    // A whole call through TLS, streams included.
    let c = Client::with_root_ca(&node.url, &node.key, Some(ca1.as_bytes())).unwrap();
    let id = format!("tls-{}", unique());
    assert_eq!(
        c.sh(&id, "echo over-tls").await.unwrap().stdout,
        "over-tls\n"
    );
    // No plain HTTP on the TLS port, and no trust without the CA.
    let plain = node.url.replace("https://", "http://");
    let r = reqwest::get(format!("{plain}/healthz")).await;
    assert!(
        r.is_err() || !r.unwrap().status().is_success(),
        "plain HTTP was served"
    );
    let (other_ca, _, _) = ca_and_cert("a CA nobody installed", "127.0.0.1");
    assert!(lists_with(&node.url, &node.key, &other_ca).await.is_err());

    // A broken certificate file (a renewal gone wrong) leaves the old one in service.
    std::fs::write(&cert, "not a certificate").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    lists_with(&node.url, &node.key, &ca1).await.unwrap();

    // A renewed pair is served on new connections, without a restart.
    let ca2 = tls.issue("warren test API CA two");
    let deadline = Instant::now() + Duration::from_secs(10);
    while lists_with(&node.url, &node.key, &ca2).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let old = lists_with(&node.url, &node.key, &ca1).await;
    assert!(old.is_err(), "the replaced certificate is still served");
    let c = Client::with_root_ca(&node.url, &node.key, Some(ca2.as_bytes())).unwrap();
    c.delete_sandbox(&id).await.unwrap();
}

#[tokio::test]
async fn a_key_that_is_not_the_certificates_stops_the_start() {
    let tls = TlsDir::new();
    tls.issue("warren test API CA");
    let (_, _, other_key) = ca_and_cert("another CA", "127.0.0.1");
    std::fs::write(tls.path("key.pem"), other_key).unwrap();
    let data_dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["serve", "--listen", "127.0.0.1:0", "--node-id"])
        .arg(format!("t{}", unique()))
        .arg("--data-dir")
        .arg(data_dir.path())
        .args(["--tls-cert-file", &tls.path("cert.pem")])
        .args(["--tls-key-file", &tls.path("key.pem")])
        .args(["--guest-bin", &super::harness::guest_bin()])
        .args(["--warm-containers", "0", "--spare-networks", "0"])
        .env("WARREN_RUN_ID", super::harness::run_id())
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the node started with a key of another certificate"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is not the key of the certificate"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "it said it was ready: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A client that sends a file upload's header and the start of its body, then goes silent,
/// is cut after the body timeout: its connection closes, the file is never half written,
/// and other clients are served meanwhile.
#[tokio::test]
async fn a_body_that_stops_arriving_is_cut_and_leaves_no_half_written_file() {
    let node = Node::start_with("127.0.0.1:0", &["--body-read-timeout-ms", "1500"]).await;
    let id = format!("slowbody-{}", unique());
    node.client.sh(&id, "true").await.unwrap();
    let addr = node.url.trim_start_matches("http://").to_string();
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "PUT /v1/sandboxes/{id}/files/workspace/big.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: 1000000\r\n\r\n",
        node.key
    )
    .unwrap();
    s.write_all(&[b'a'; 4096]).unwrap();
    // Others are served while it hangs.
    assert_eq!(node.client.sh(&id, "echo up").await.unwrap().stdout, "up\n");
    let started = Instant::now();
    assert!(
        closed_within(&mut s, Duration::from_secs(20)),
        "a connection whose body stopped arriving stayed open"
    );
    let took = started.elapsed();
    let stat = node.client.stat(&id, "/workspace/big.bin").await;
    assert!(stat.is_err(), "a half-sent upload left a file: {stat:?}");
    let metrics = node.metrics_text().await;
    assert!(
        metrics.contains("warren_http_connections_cut_total{reason=\"body_timeout\"} 1"),
        "{}",
        metrics
            .lines()
            .filter(|l| l.contains("cut_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("cut {took:?} after the others were served");
    node.client.delete_sandbox(&id).await.unwrap();
}

/// A cluster whose API speaks TLS: a node joins its seed over HTTPS trusting the seed's CA
/// (`join_ca_file`), and the cluster serves through both nodes; a node that does not trust
/// that CA refuses the seed at once instead of joining it.
#[tokio::test]
async fn a_node_joins_a_tls_seed_over_https_only_when_it_trusts_the_seeds_ca() {
    use super::cluster_harness::TestCluster;
    let tls = TlsDir::new();
    let ca = tls.issue("warren test cluster CA");
    let ca_file = tls.path("ca.pem");
    std::fs::write(&ca_file, &ca).unwrap();
    // The harness's clients trust it too (this test's process only).
    std::env::set_var(warren_client::CA_FILE_ENV, &ca_file);
    let extra = format!(
        "tls_cert_file = \"{}\"\ntls_key_file = \"{}\"\njoin_ca_file = \"{ca_file}\"\n",
        tls.path("cert.pem"),
        tls.path("key.pem"),
    );
    let c = TestCluster::start_with(2, 1, &extra).await;
    let seed = c.nodes[0].url.clone();
    assert!(
        c.nodes
            .iter()
            .all(|n| n.url.starts_with("https://127.0.0.1:")),
        "{:?}",
        c.nodes.iter().map(|n| &n.url).collect::<Vec<_>>()
    );
    let id = format!("tlsj-{}", unique());
    for n in &c.nodes {
        assert_eq!(
            n.client.sh(&id, "echo joined").await.unwrap().stdout,
            "joined\n"
        );
    }
    // The same join without the CA: refused at once, and no identity is kept.
    let dir = tempfile::tempdir().unwrap();
    let first = std::fs::read_to_string(&c.nodes[0].config).unwrap();
    let key_file = first
        .lines()
        .find_map(|l| l.strip_prefix("api_key_file = "))
        .unwrap()
        .trim_matches('"')
        .to_string();
    let peer_port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    let peer_listen = format!("127.0.0.1:{peer_port}");
    let err = super::harness::refused_start(
        &[
            "--node-id",
            "untrusting",
            "--listen",
            "127.0.0.1:0",
            "--peer-listen",
            &peer_listen,
            "--join",
            &seed,
            "--join-token",
            c.join_token(),
            "--api-key-file",
            &key_file,
        ],
        dir.path(),
    )
    .await;
    assert!(err.contains("not trusted"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "refused only after {:?} of retries",
        started.elapsed()
    );
    c.nodes[0].client.delete_sandbox(&id).await.unwrap();
}

/// `max_json_body_mb`: a JSON body over it, to the API's own endpoints or to a sandbox
/// operation, is refused with 413 `PAYLOAD_TOO_LARGE` in the API's error format (before,
/// axum's own 2 MiB limit answered the first in plain text and the sandbox operation's
/// 32 MiB limit answered 400), one under it is served, and a file upload (streamed) is not
/// held by it.
#[tokio::test]
async fn json_bodies_over_the_limit_get_413_and_file_uploads_do_not() {
    let node = Node::start_with("127.0.0.1:0", &["--max-json-body-mb", "1"]).await;
    let id = format!("bodylimit-{}", unique());
    node.client.sh(&id, "true").await.unwrap();
    let big = "x".repeat(1024 * 1024 + 1);
    let assert_413 = |r: reqwest::Response, what: &'static str| async move {
        let status = r.status().as_u16();
        let content_type = r
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body: serde_json::Value = r.json().await.unwrap_or_default();
        assert_eq!(
            (status, content_type.as_str(), body["code"].as_str()),
            (413, "application/json", Some("PAYLOAD_TOO_LARGE")),
            "{what}: {body}"
        );
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("1 MiB"),
            "{what}: {body}"
        );
    };
    let key_body = serde_json::json!({"tenant": "acme", "name": big});
    let r = node
        .req(reqwest::Method::POST, "/v1/keys")
        .json(&key_body)
        .send()
        .await
        .unwrap();
    assert_413(r, "a key").await;
    let exec_body = serde_json::json!({"command": format!("echo {big} | wc -c")});
    let r = node
        .req(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&exec_body)
        .send()
        .await
        .unwrap();
    assert_413(r, "an exec").await;
    // Under the limit: served.
    let half = "y".repeat(512 * 1024);
    let r = node
        .client
        .sh(&id, &format!("printf %s {half} | wc -c"))
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "524288");
    // A 3 MiB upload streams past the JSON limit.
    let upload = vec![b'z'; 3 * 1024 * 1024];
    node.client
        .write_file(&id, "/workspace/big.bin", upload, None)
        .await
        .unwrap();
    let r = node
        .client
        .sh(&id, "wc -c < /workspace/big.bin")
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "3145728");
    node.client.delete_sandbox(&id).await.unwrap();
}
