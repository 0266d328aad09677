//! Preview URLs: a request whose Host is `{port}-{id}-{token}.{preview domain}` is not an API
//! call. Any node takes it, forwards it to the sandbox's owner like any sandbox request, and
//! the owner checks the token (constant time) and proxies the request through a tunnel the
//! guest opens to that port: HTTP, streamed bodies and WebSocket (or any upgrade), with the
//! service's status, headers (redirects, every Set-Cookie) and body passed unchanged.

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

pub async fn intercept(State(st): State<AppState>, req: Request, next: Next) -> Response {
    match target(&st, &req) {
        Some(t) => crate::cluster::route::route_preview(&st, t, req).await,
        None => next.run(req).await,
    }
}

/// Serves a preview request on the sandbox's owner (the router checked placement and lease).
pub(crate) async fn serve(st: &AppState, t: &PreviewHost, req: Request) -> Response {
    match proxy(st, t, req).await {
        Ok(r) => r,
        Err(e) => err(e),
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
