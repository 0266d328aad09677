//! Preview URLs: a request whose Host names a preview under the preview domain (forms in
//! `warren_api::preview`) is not an API call. Any node takes it, forwards it to the sandbox's
//! owner like any sandbox request, and the owner checks what it showed (tokens in constant
//! time) and proxies the request through a tunnel the guest opens to that port: HTTP,
//! streamed bodies and WebSocket (or any upgrade), with the service's status, headers
//! (redirects, Set-Cookie) and body passed unchanged.
//!
//! A browser's top-level page load on the token host trades the token for a host-only
//! `HttpOnly` cookie of the session host `{port}-{id}` (two redirects), so that the pages it
//! loads from there, their `Origin` and the names it resolves carry no token. Programs and
//! frames keep using the token host as before.
//!
//! What the sandbox never gets: the caller's warren key (an `Authorization` header that is
//! one of the cluster's keys is dropped; any other, the app's own, passes), the preview
//! cookie, header or query parameter, nor a client's own `x-forwarded-for` (the entry node
//! sets it to the address the connection came from). What it cannot do: set a preview
//! cookie (its `Set-Cookie`s of that name are dropped). Every answer carries
//! `Referrer-Policy: no-referrer`. A client address that sends wrong tokens past its rate is
//! refused (429) for a while: tokens are not guessed online.

use crate::error::ApiErrorResponse;
use crate::routes::body::GuestResponseBody;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use warren_api::ports::GUEST_TUNNEL_UPGRADE;
use warren_api::preview::{
    cookies_without_preview, next_step, parse_preview_request, query_without, sets_preview_cookie,
    Credential, PreviewRequest, RequestParts, Step, StepInput, TOKEN_HEADER, TOKEN_QUERY,
};
use warren_api::{ApiError, ErrorCode};
use warren_node::sandbox::manager::PreviewAccess;

fn err(e: ApiError) -> Response {
    ApiErrorResponse(e).into_response()
}

fn host_of(req: &Request) -> Option<&str> {
    req.headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())
}

fn target(st: &AppState, req: &Request) -> Option<PreviewRequest> {
    let host = host_of(req)?;
    let headers = req.headers();
    let cookies: Vec<&str> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let parts = RequestParts {
        host,
        query: req.uri().query(),
        header_token: headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok()),
        cookies: &cookies,
    };
    parse_preview_request(&st.mgr.config().preview.domain, parts)
}

/// Marks the owner's refusal of a token for the entry node, which counts it per client.
const HEADER_REFUSED: &str = "x-warren-preview-refused";

pub async fn intercept(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let Some(t) = target(&st, &req) else {
        return next.run(req).await;
    };
    let entry = req.extensions().get::<crate::cluster::FromPeer>().is_none();
    let client = crate::auth::client_ip(req.extensions());
    if entry {
        if let Some(ip) = client {
            if let Err(e) = st.preview_guesses.check(ip) {
                return err(e);
            }
        }
        entering(&st, &mut req);
    }
    let mut resp = crate::cluster::route::route_preview(&st, t, req).await;
    if entry && resp.headers_mut().remove(HEADER_REFUSED).is_some() {
        if let Some(ip) = client {
            st.preview_guesses.refused(ip);
        }
    }
    resp.headers_mut().insert(
        http::header::REFERRER_POLICY,
        http::HeaderValue::from_static("no-referrer"),
    );
    resp
}

/// At the node a preview request entered: the client's address as `x-forwarded-for` (what
/// the client said there is dropped), and no warren key on to the sandbox.
fn entering(st: &AppState, req: &mut Request) {
    let remote = crate::auth::client_ip(req.extensions());
    let headers = req.headers_mut();
    headers.remove("x-forwarded-for");
    headers.remove("forwarded");
    if let Some(ip) = remote {
        if let Ok(v) = http::HeaderValue::from_str(&ip.to_string()) {
            headers.insert("x-forwarded-for", v);
        }
    }
    let is_warren_key = crate::auth::bearer_of(headers)
        .is_some_and(|k| crate::auth::key_principal(st, k).is_some());
    if is_warren_key {
        headers.remove(http::header::AUTHORIZATION);
    }
    headers.remove(crate::auth::principal::HEADER_PRINCIPAL);
}

/// Serves a preview request on the sandbox's owner (the router checked placement and lease).
pub(crate) async fn serve(st: &AppState, t: &PreviewRequest, req: Request) -> Response {
    match proxy(st, t, req).await {
        Ok(r) => r,
        Err(e) => {
            let refused = e.code == ErrorCode::InvalidToken;
            let mut r = err(e);
            if refused {
                r.headers_mut()
                    .insert(HEADER_REFUSED, http::HeaderValue::from_static("1"));
            }
            r
        }
    }
}

/// Runs the request against the port inside the sandbox (on the owner).
async fn proxy(st: &AppState, t: &PreviewRequest, mut req: Request) -> Result<Response, ApiError> {
    check(st, t)?;
    if let Some(answer) = exchange(st, t, &req) {
        return Ok(answer);
    }
    strip_credentials(&mut req);
    let tunnel = st
        .mgr
        .upgrade(
            &t.sandbox,
            &format!("/tunnel?port={}", t.port),
            GUEST_TUNNEL_UPGRADE,
        )
        .await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Body>(tunnel)
        .await
        .map_err(bad_gateway)?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let headers = req.headers_mut();
    if let Some(host) = headers.get(http::header::HOST).cloned() {
        headers.insert("x-forwarded-host", host);
    }
    let scheme = &st.mgr.config().preview.scheme;
    if let Ok(v) = http::HeaderValue::from_str(scheme) {
        headers.insert("x-forwarded-proto", v);
    }
    let client_upgrade = req
        .headers()
        .contains_key(http::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let activity = st.mgr.activity(&t.sandbox);
    let mut resp = sender.send_request(req).await.map_err(bad_gateway)?;
    if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client) = client_upgrade {
            let service = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                crate::cluster::forward::bridge(client, service).await;
                drop(activity);
            });
            return Ok(resp.map(Body::new));
        }
    }
    drop_preview_cookies(resp.headers_mut());
    Ok(resp.map(|b| Body::new(GuestResponseBody::new(b, false, activity))))
}

fn check(st: &AppState, t: &PreviewRequest) -> Result<(), ApiError> {
    let one;
    let many: Vec<&str>;
    let access = match &t.credential {
        Credential::HostToken(k) | Credential::Exchange(k) | Credential::Header(k) => {
            one = [k.as_str()];
            PreviewAccess::Tokens(&one)
        }
        Credential::Cookie(values) => {
            many = values.iter().map(String::as_str).collect();
            PreviewAccess::Tokens(&many)
        }
        Credential::Public => PreviewAccess::Public,
        Credential::Missing => PreviewAccess::Tokens(&[]),
    };
    st.mgr.check_preview(&t.sandbox, t.port, access)
}

/// The redirect of the token-for-cookie exchange, when this request is one of its steps.
fn exchange(st: &AppState, t: &PreviewRequest, req: &Request) -> Option<Response> {
    let headers = req.headers();
    let header_is = |name: &str, value: &str| {
        headers
            .get(name)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(value.as_bytes()))
    };
    let input = StepInput {
        credential: &t.credential,
        port: t.port,
        sandbox: &t.sandbox,
        safe_method: matches!(*req.method(), http::Method::GET | http::Method::HEAD),
        top_level_navigation: header_is("sec-fetch-mode", "navigate")
            && header_is("sec-fetch-dest", "document"),
        host: host_of(req)?,
        scheme: &st.mgr.config().preview.scheme,
        path: req.uri().path(),
        query: req.uri().query(),
    };
    let (location, cookie) = match next_step(input) {
        Step::Proxy => return None,
        Step::ToSession { location } => (location, None),
        Step::SetCookie { location, cookie } => (location, Some(cookie)),
    };
    let mut r = Response::builder()
        .status(http::StatusCode::FOUND)
        .header(http::header::LOCATION, location)
        .header(http::header::CACHE_CONTROL, "no-store");
    if let Some(c) = cookie {
        r = r.header(http::header::SET_COOKIE, c);
    }
    r.body(Body::empty()).ok()
}

/// Takes the preview's own credentials out of a request before the sandbox sees it.
fn strip_credentials(req: &mut Request) {
    let headers = req.headers_mut();
    headers.remove(TOKEN_HEADER);
    let cookies: Vec<String> = headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(cookies_without_preview)
        .collect();
    headers.remove(http::header::COOKIE);
    if !cookies.is_empty() {
        if let Ok(v) = http::HeaderValue::from_str(&cookies.join("; ")) {
            headers.insert(http::header::COOKIE, v);
        }
    }
    let uri = req.uri();
    let kept = query_without(uri.query(), TOKEN_QUERY);
    if kept.as_deref() != uri.query() {
        let path_and_query = match kept {
            Some(q) => format!("{}?{q}", uri.path()),
            None => uri.path().to_string(),
        };
        let mut parts = uri.clone().into_parts();
        if let Ok(pq) = path_and_query.parse() {
            parts.path_and_query = Some(pq);
            if let Ok(u) = http::Uri::from_parts(parts) {
                *req.uri_mut() = u;
            }
        }
    }
}

/// Only the node hands out the preview cookie: a service's own `Set-Cookie` of that name
/// (for its host or a parent domain) does not reach the browser.
fn drop_preview_cookies(headers: &mut http::HeaderMap) {
    let kept: Vec<http::HeaderValue> = headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter(|v| !v.to_str().is_ok_and(sets_preview_cookie))
        .cloned()
        .collect();
    headers.remove(http::header::SET_COOKIE);
    for v in kept {
        headers.append(http::header::SET_COOKIE, v);
    }
}

fn bad_gateway(e: hyper::Error) -> ApiError {
    ApiError::new(
        ErrorCode::BadGateway,
        format!("the service in the sandbox broke the connection: {e}"),
    )
}
