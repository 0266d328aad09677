//! Preview tokens out of the host name: a browser's page load on the token host trades the
//! token for a host-only `HttpOnly` cookie of the session host `{port}-{id}`; the sandbox
//! never sees the cookie, the header or the query parameter, and cannot set the cookie itself;
//! public ports open without a token. Written as the page, the browser and a hostile sibling
//! would act; the last test drives a real headless Chromium.

use super::harness::{unique, Node};
use super::preview::{node_addr, start_server};
use std::net::SocketAddr;
use warren_api::ports::ExposeRequest;
use warren_api::ErrorCode;

/// A client that sends every `*.localhost` host it is given to `node`, following nothing.
fn client_for(hosts: &[&str], node: SocketAddr) -> reqwest::Client {
    let mut b = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
    for h in hosts {
        b = b.resolve(h, node);
    }
    b.build().unwrap()
}

fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .unwrap()
        .host_str()
        .unwrap()
        .to_string()
}

fn navigate(c: &reqwest::Client, url: &str) -> reqwest::RequestBuilder {
    c.get(url)
        .header("sec-fetch-mode", "navigate")
        .header("sec-fetch-dest", "document")
}

async fn code_of(r: reqwest::Response) -> ErrorCode {
    r.json::<warren_api::ApiError>().await.unwrap().code
}

async fn seen_headers(r: reqwest::Response) -> Vec<(String, String)> {
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

#[tokio::test]
async fn a_page_load_trades_the_token_for_a_host_only_cookie_the_sandbox_never_sees() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("sess-{}", unique());
    start_server(c, &id, 8131).await;
    let exposed = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8131,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let (url, token) = (exposed.url.clone(), exposed.token.clone());
    let addr = node_addr(&node.url);
    let session = format!("8131-{id}.localhost");
    let http = client_for(&[&host_of(&url), &session], addr);
    let session_url = format!("http://{session}:{}", addr.port());

    // A program on the token host is served as before (no redirect, nothing set).
    let r = http.get(format!("{url}page")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().get("set-cookie").is_none());

    // A browser's page load goes to the session host, the token in the query once.
    let r = navigate(&http, &format!("{url}page?q=1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 302);
    let to = r.headers()["location"].to_str().unwrap().to_string();
    assert_eq!(
        to,
        format!("{session_url}/page?q=1&warren_preview_token={token}")
    );
    assert!(r.headers().get("set-cookie").is_none());
    // There the token becomes a host-only, HttpOnly, SameSite cookie and leaves the URL.
    let r = navigate(&http, &to).send().await.unwrap();
    assert_eq!(r.status(), 302);
    assert_eq!(r.headers()["location"], "/page?q=1");
    let cookie = r.headers()["set-cookie"].to_str().unwrap().to_string();
    let name = format!("warren_preview_8131_{id}");
    assert_eq!(
        cookie,
        format!("{name}={token}; Path=/; HttpOnly; SameSite=Lax"),
        "no Domain attribute: the cookie is the session host's alone"
    );

    // With the cookie the session host serves, and the sandbox sees neither cookie nor token.
    let r = http
        .get(format!("{session_url}/allheaders"))
        .header("cookie", format!("theme=dark; {name}={token}"))
        .send()
        .await
        .unwrap();
    let seen = seen_headers(r).await;
    let cookies: Vec<&str> = seen
        .iter()
        .filter(|(k, _)| k == "cookie")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(cookies, vec!["theme=dark"], "{seen:?}");
    assert!(
        !seen.iter().any(|(_, v)| v.contains(&token)),
        "the token reached the sandbox: {seen:?}"
    );
    // A request that is not a page load keeps the parameter's token out of the sandbox too.
    let r = http
        .post(format!(
            "{session_url}/echo-path?warren_preview_token={token}&keep=1"
        ))
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "path=/echo-path?keep=1");
    // The header form, for programs on the session host: taken out the same way.
    let r = http
        .get(format!("{session_url}/allheaders"))
        .header("x-warren-preview-token", &token)
        .send()
        .await
        .unwrap();
    let seen = seen_headers(r).await;
    assert!(!seen.iter().any(|(_, v)| v.contains(&token)), "{seen:?}");
    assert!(!seen.iter().any(|(k, _)| k == "x-warren-preview-token"));

    // Without the cookie, or with a wrong one, the session host is a wrong token.
    for cookie in [None, Some(format!("{name}=wrongwrongwrongwrong1"))] {
        let mut q = http.get(format!("{session_url}/page"));
        if let Some(c) = &cookie {
            q = q.header("cookie", c);
        }
        let r = q.send().await.unwrap();
        assert_eq!(r.status(), 404, "{cookie:?}");
        assert_eq!(code_of(r).await, ErrorCode::InvalidToken);
    }

    // A hostile page cannot hand out the preview cookie; its own cookies pass.
    let r = http
        .get(format!("{session_url}/plant"))
        .header("cookie", format!("{name}={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let set: Vec<&str> = r
        .headers()
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(set, vec!["own=1; Path=/"]);

    // Unexposing revokes the session as well as the token host.
    c.unexpose_port(&id, 8131).await.unwrap();
    let r = http
        .get(format!("{session_url}/page"))
        .header("cookie", format!("{name}={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    c.delete_sandbox(&id).await.unwrap();
}

#[tokio::test]
async fn public_ports_open_without_a_token_and_private_ones_do_not() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("pub-{}", unique());
    start_server(c, &id, 8132).await;
    start_server(c, &id, 8133).await;
    let public = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8132,
                public: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(public.public);
    let addr = node_addr(&node.url);
    assert_eq!(
        public.url,
        format!("http://8132-{id}-public.localhost:{}/", addr.port())
    );
    let private = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8133,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(!private.public);
    let private_public = format!("http://8133-{id}-public.localhost:{}/", addr.port());
    let http = client_for(&[&host_of(&public.url), &host_of(&private_public)], addr);
    let r = http.get(&public.url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello from 8132");
    let r = http.get(&private_public).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(code_of(r).await, ErrorCode::InvalidToken);
    // Exposed again without `public`, the port needs its token again.
    c.expose_port(
        &id,
        &ExposeRequest {
            port: 8132,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(http.get(&public.url).send().await.unwrap().status(), 404);
    c.delete_sandbox(&id).await.unwrap();
}

/// A real browser: the page ends on the session host, the cookie is host-only and hidden
/// from scripts, a reload and a WebSocket of the page work on the cookie alone.
#[tokio::test]
async fn a_browser_ends_on_the_session_host_with_the_token_out_of_its_reach() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("brw-{}", unique());
    start_server(c, &id, 8134).await;
    let exposed = c
        .expose_port(
            &id,
            &ExposeRequest {
                port: 8134,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let env = vec![
        ("PREVIEW_URL", exposed.url.clone()),
        ("TOKEN", exposed.token.clone()),
        ("SESSION_HOST", format!("8134-{id}.localhost")),
    ];
    super::web::browser_script("preview.mjs", env, "browser preview test passed").await;
    c.delete_sandbox(&id).await.unwrap();
}
