//! The proxy's own answers: JSON bodies in the API's error model.

use super::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Response;
use std::net::SocketAddr;
use warren_api::{ApiError, ErrorCode};

pub(crate) fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}

pub(crate) fn empty() -> Body {
    full(Bytes::new())
}

fn json(status: u16, body: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .header("connection", "close")
        .body(full(body))
        .expect("static response parts")
}

/// 403 `EGRESS_DENIED`, naming the host and the sandbox.
pub(crate) fn denied(host: &str, sandbox: &str, why: &str) -> Response<Body> {
    let mut r = json(
        403,
        warren_api::egress::denied(host, sandbox, why).to_string(),
    );
    // The client may go on with another request on this connection.
    r.headers_mut().remove("connection");
    r
}

pub(crate) fn not_a_sandbox(peer: SocketAddr) -> Response<Body> {
    error(ApiError::new(
        ErrorCode::Forbidden,
        format!("{} is not a sandbox of this node", peer.ip()),
    ))
}

pub(crate) fn error(e: ApiError) -> Response<Body> {
    json(e.http_status(), e.to_json())
}

pub(crate) fn bad_gateway(host: &str, why: impl std::fmt::Display) -> Response<Body> {
    error(ApiError::new(
        ErrorCode::BadGateway,
        format!("the upstream {host} failed: {why}"),
    ))
}

pub(crate) fn timeout(host: &str) -> Response<Body> {
    error(ApiError::new(
        ErrorCode::UpstreamTimeout,
        format!("the upstream {host} did not answer in time"),
    ))
}

pub(crate) fn bad_request(message: impl Into<String>) -> Response<Body> {
    error(ApiError::invalid(message))
}
