//! Preview URLs: a request whose Host is `{port}-{id}-{token}.{preview domain}` is not an API
//! call. Any node takes it, forwards it to the sandbox's owner like any sandbox request, and
//! the owner checks the token (constant time) and proxies the request through a tunnel the
//! guest opens to that port: HTTP, streamed bodies and WebSocket (or any upgrade), with the
//! service's status, headers (redirects, every Set-Cookie) and body passed unchanged.
//!
//! What the sandbox never gets: the caller's warren key (an `Authorization` header that is
//! one of the cluster's keys is dropped; any other, the app's own, passes), nor a client's
//! own `x-forwarded-for` (the entry node sets it to the address the connection came from).
//! Every answer carries `Referrer-Policy: no-referrer`, so that the token in the host name
//! does not leave in the `Referer` of links the page follows. A client address that sends
//! wrong tokens past its rate is refused (429) for a while: tokens are not guessed online.

use crate::error::ApiErrorResponse;
use crate::routes::body::GuestResponseBody;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use warren_api::ports::{parse_preview_host, PreviewHost, GUEST_TUNNEL_UPGRADE};
use warren_api::{ApiError, ErrorCode};

fn err(e: ApiError) -> Response {
    ApiErrorResponse(e).into_response()
}

fn target(st: &AppState, req: &Request) -> Option<PreviewHost> {
    let host = req
        .headers()
        .get(http::header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())?;
    parse_preview_host(host, &st.mgr.config().preview.domain)
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
pub(crate) async fn serve(st: &AppState, t: &PreviewHost, req: Request) -> Response {
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
async fn proxy(st: &AppState, t: &PreviewHost, mut req: Request) -> Result<Response, ApiError> {
    st.mgr.check_preview(&t.sandbox, t.port, &t.token)?;
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
    Ok(resp.map(|b| Body::new(GuestResponseBody::new(b, false, activity))))
}

fn bad_gateway(e: hyper::Error) -> ApiError {
    ApiError::new(
        ErrorCode::BadGateway,
        format!("the service in the sandbox broke the connection: {e}"),
    )
}
