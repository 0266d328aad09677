//! Preview URLs: a server in the sandbox, exposed, reached by its host name (HTTP, streaming,
//! redirects with cookies, WebSocket); wrong tokens and silent ports.

use super::harness::{api_err, unique, Node};
use futures_util::{SinkExt, StreamExt};
use std::net::SocketAddr;
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;
use warren_api::ports::ExposeRequest;
use warren_api::process::{PortMode, StartProcessRequest, WaitPortRequest};
use warren_api::ErrorCode;
use warren_client::Client;

pub const SERVER: &str = include_str!("fixtures/preview_server.py");

/// Starts the fixture server on `port` in sandbox `id` and waits until it answers.
pub async fn start_server(c: &Client, id: &str, port: u16) {
    c.write_file(id, "/workspace/srv.py", SERVER, None)
        .await
        .unwrap();
    c.start_process(
        id,
        &StartProcessRequest {
            command: Some(format!("python3 /workspace/srv.py {port}")),
            id: Some(format!("srv{port}")),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    c.wait_port(
        id,
        &format!("srv{port}"),
        &WaitPortRequest {
            port,
            mode: PortMode::Tcp,
            path: None,
            status_min: None,
            status_max: None,
            timeout_ms: Some(20_000),
        },
    )
    .await
    .unwrap();
}

/// An HTTP client that sends `url`'s host to `node` (as DNS for `*.localhost` would).
pub fn preview_client(url: &str, node: SocketAddr) -> reqwest::Client {
    let host = reqwest::Url::parse(url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string();
    reqwest::Client::builder()
        .resolve(&host, node)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Exposes `port` of sandbox `id`; returns its preview URL.
pub async fn expose(c: &Client, id: &str, port: u16) -> String {
    c.expose_port(
        id,
        &ExposeRequest {
            port,
            ..Default::default()
        },
    )
    .await
    .unwrap()
    .url
}

/// The preview `url` sent to the node at `node_url` instead of the one that made it.
pub fn entering(url: &str, node_url: &str) -> String {
    let mut u = reqwest::Url::parse(url).unwrap();
    u.set_port(Some(node_addr(node_url).port())).unwrap();
    u.to_string()
}

pub fn node_addr(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// Sends one WebSocket message through the preview URL and returns the reply.
pub async fn ws_echo(preview_url: &str, node: SocketAddr, text: &str) -> String {
    let ws_url = format!("{}ws", preview_url.replacen("http://", "ws://", 1));
    let tcp = tokio::net::TcpStream::connect(node).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(ws_url, tcp).await.unwrap();
    ws.send(Message::Text(text.to_string().into()))
        .await
        .unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(10), ws.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    reply.into_text().unwrap().to_string()
}

#[tokio::test]
async fn preview_urls_proxy_http_streams_redirects_and_websockets() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("prev-{}", unique());
    start_server(c, &id, 8000).await;
    let exposed = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8000,
                name: Some("web".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let addr = node_addr(&node.url);
    assert!(
        exposed.url.starts_with(&format!(
            "http://8000-{id}-{}.localhost:{}",
            exposed.token,
            addr.port()
        )),
        "{}",
        exposed.url
    );
    let http = preview_client(&exposed.url, addr);
    let r = http.get(&exposed.url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello from 8000");

    // The service's redirects and every Set-Cookie pass unchanged.
    let r = http
        .get(format!("{}redirect", exposed.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/target");
    let cookies: Vec<_> = r.headers().get_all("set-cookie").iter().collect();
    assert_eq!(cookies.len(), 2, "{cookies:?}");

    let r = http
        .get(format!("{}headers", exposed.url))
        .send()
        .await
        .unwrap();
    let text = r.text().await.unwrap();
    assert!(text.contains("fwd-host=8000-"), "{text}");
    assert!(text.contains("proto=http"), "{text}");

    // Request bodies go in; streamed bodies come out as they are produced.
    let r = http
        .post(format!("{}upload", exposed.url))
        .body(vec![7u8; 100_000])
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "got 100000 bytes");
    let started = std::time::Instant::now();
    let mut r = http
        .get(format!("{}stream", exposed.url))
        .send()
        .await
        .unwrap();
    let first = r.chunk().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert!(String::from_utf8_lossy(&first).contains("part-0"));
    let mut rest = Vec::new();
    while let Some(c) = r.chunk().await.unwrap() {
        rest.extend_from_slice(&c);
    }
    assert!(String::from_utf8_lossy(&rest).contains("part-2"));
    assert!(
        first_at + Duration::from_millis(500) < started.elapsed(),
        "the first chunk arrived before the stream ended ({first_at:?} of {:?})",
        started.elapsed()
    );

    assert_eq!(ws_echo(&exposed.url, addr, "ping").await, "echo:ping");

    // The list shows it; the same port keeps its token when exposed again.
    let list = c.ports(&id).await.unwrap();
    assert_eq!(list.ports.len(), 1);
    assert_eq!(list.ports[0].name.as_deref(), Some("web"));
    let again = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again.token, exposed.token);

    // Unexposed: the same URL is refused.
    c.unexpose_port(&id, 8000).await.unwrap();
    c.unexpose_port(&id, 8000).await.unwrap();
    let r = http.get(&exposed.url).send().await.unwrap();
    assert_eq!(r.status(), 404);
    let e: warren_api::ApiError = r.json().await.unwrap();
    assert_eq!(e.code, ErrorCode::InvalidToken);
}

#[tokio::test]
async fn preview_refuses_wrong_tokens_and_reports_silent_ports() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("prev2-{}", unique());
    let addr = node_addr(&node.url);
    let exposed = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 9000,
                token: Some("mytoken1234567890abc".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(exposed.token, "mytoken1234567890abc");
    // Nothing listens on 9000 yet.
    let http = preview_client(&exposed.url, addr);
    let r = http.get(&exposed.url).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let e: warren_api::ApiError = r.json().await.unwrap();
    assert_eq!(e.code, ErrorCode::PortNotListening);

    for host in [
        format!("9000-{id}-wrongtoken1.localhost"),
        format!("9001-{id}-mytoken1234567890abc.localhost"),
        format!("9000-nosuchbox-{}-mytoken1234567890abc.localhost", unique()),
    ] {
        let url = format!("http://{host}:{}/", addr.port());
        let r = preview_client(&url, addr).get(&url).send().await.unwrap();
        assert_eq!(r.status(), 404, "{host}");
        let e: warren_api::ApiError = r.json().await.unwrap();
        assert_eq!(e.code, ErrorCode::InvalidToken, "{host}");
    }
    let e = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 0,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::InvalidArgument);
}

/// A page in a sandbox is untrusted: the caller's warren key, a forged client address and the
/// principal header never reach it, and its answers do not leak the token as a `Referer`.
#[tokio::test]
async fn a_preview_never_hands_the_sandbox_the_callers_key_or_a_forged_address() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("prev3-{}", unique());
    start_server(c, &id, 8123).await;
    let url = expose(c, &id, 8123).await;
    let addr = node_addr(&node.url);
    let http = preview_client(&url, addr);
    let ask = |auth: String| {
        http.get(format!("{url}allheaders"))
            .header("authorization", auth)
            .header("x-forwarded-for", "6.6.6.6")
            .header("forwarded", "for=6.6.6.6")
            .header("x-warren-principal", "admin default root")
            .send()
    };
    // The node's admin key, as a browser that was given it might send it along.
    let r = ask(format!("Bearer {}", node.key)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()
            .get("referrer-policy")
            .map(|v| v.to_str().unwrap()),
        Some("no-referrer")
    );
    let seen: Vec<(String, String)> = r.json().await.unwrap();
    let get = |name: &str| -> Vec<&str> {
        seen.iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert!(
        get("authorization").is_empty(),
        "the key reached the sandbox: {seen:?}"
    );
    assert!(!seen.iter().any(|(_, v)| v.contains(&node.key)), "{seen:?}");
    assert!(get("x-warren-principal").is_empty(), "{seen:?}");
    assert!(get("forwarded").is_empty(), "{seen:?}");
    assert_eq!(get("x-forwarded-for"), vec!["127.0.0.1"], "{seen:?}");
    // The app's own credentials pass.
    let r = ask("Bearer app-token-123".into()).await.unwrap();
    let seen: Vec<(String, String)> = r.json().await.unwrap();
    assert!(seen.contains(&("authorization".into(), "Bearer app-token-123".into())));
    c.delete_sandbox(&id).await.unwrap();
}

/// Tokens are not guessed online: an address that sends wrong tokens past its rate is held
/// off (429 with `retry-after`), also for the right token, while the API still answers it.
#[tokio::test]
async fn an_address_guessing_preview_tokens_is_held_off() {
    let node = Node::start_with("127.0.0.1:0", &["--preview-guesses-per-min", "5"]).await;
    let c = &node.client;
    let id = format!("prev4-{}", unique());
    start_server(c, &id, 8124).await;
    let url = expose(c, &id, 8124).await;
    let addr = node_addr(&node.url);
    let good = preview_client(&url, addr)
        .get(format!("{url}headers"))
        .send()
        .await
        .unwrap();
    assert_eq!(good.status(), 200);
    let mut statuses = Vec::new();
    for i in 0..12 {
        let host = format!("8124-{id}-guess{i:015}.localhost");
        let wrong = format!("http://{host}:{}/", addr.port());
        let r = preview_client(&wrong, addr)
            .get(&wrong)
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("x-warren-preview-refused").is_none());
        statuses.push(r.status().as_u16());
        if r.status() == 429 {
            let after: u64 = r.headers()["retry-after"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            assert!(after >= 1);
        }
    }
    super::harness::first_held_off(&statuses, 404, 5);
    let r = preview_client(&url, addr)
        .get(format!("{url}headers"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        429,
        "the right token is held off too while guessing"
    );
    assert_eq!(c.sh(&id, "echo api").await.unwrap().stdout, "api\n");
    c.delete_sandbox(&id).await.unwrap();
}
