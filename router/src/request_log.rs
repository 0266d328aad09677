//! Request ids, the request span and the access log, on tower-http. A client's sane
//! `x-request-id` is kept (an empty, overlong or non-printable one is replaced), a new one is
//! made otherwise, and it is copied to the response; a forwarded request carries it to the
//! owner, whose lines then share it. Every request runs in one span named `request` with the
//! id, method, path, sandbox id, node and region, entered for the whole handler, and ends with
//! one access-log line (`request`, with `status` and `ms`). Failures are logged where they
//! are handled, not again here.

use crate::state::AppState;
use axum::Router;
use http::{HeaderName, HeaderValue, Request, Response};
use std::time::Duration;
use tower::ServiceBuilder;
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{MakeSpan, OnResponse, TraceLayer};
use tracing::Span;
use warren_api::HEADER_REQUEST_ID;

/// Whether a client's request id is kept: 1 to 128 printable ASCII characters.
pub fn sane_request_id(v: &[u8]) -> bool {
    !v.is_empty() && v.len() <= 128 && v.iter().all(|b| b.is_ascii_graphic())
}

fn header() -> HeaderName {
    HeaderName::from_static(HEADER_REQUEST_ID)
}

/// Drops a request id that is not kept, so that a new one is made.
fn drop_insane_id<B>(mut req: Request<B>) -> Request<B> {
    if req
        .headers()
        .get(HEADER_REQUEST_ID)
        .is_some_and(|v| !sane_request_id(v.as_bytes()))
    {
        req.headers_mut().remove(HEADER_REQUEST_ID);
    }
    req
}

/// New request ids: 16 hex digits.
#[derive(Clone, Copy)]
struct RandomId;

impl MakeRequestId for RandomId {
    fn make_request_id<B>(&mut self, _: &Request<B>) -> Option<RequestId> {
        let id = hex::encode(rand::random::<[u8; 8]>());
        Some(RequestId::new(HeaderValue::from_str(&id).ok()?))
    }
}

/// The `request` span of a request.
#[derive(Clone)]
struct RequestSpan {
    node: String,
    region: String,
}

impl<B> MakeSpan<B> for RequestSpan {
    fn make_span(&mut self, req: &Request<B>) -> Span {
        let id = req
            .headers()
            .get(HEADER_REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let path = req.uri().path();
        let sandbox = path
            .strip_prefix("/v1/sandboxes/")
            .and_then(|r| r.split('/').next())
            .unwrap_or_default();
        tracing::info_span!(
            "request",
            request_id = %id,
            method = %req.method(),
            path = %path,
            sandbox_id = %sandbox,
            node_id = %self.node,
            region = %self.region
        )
    }
}

/// The access log: one line per request, in its span.
#[derive(Clone, Copy)]
struct AccessLog;

impl<B> OnResponse<B> for AccessLog {
    fn on_response(self, resp: &Response<B>, latency: Duration, _: &Span) {
        tracing::info!(
            status = resp.status().as_u16(),
            ms = latency.as_millis() as u64,
            "request"
        );
    }
}

/// `router` with request ids, its span and the access log around it.
pub fn around(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    let span = RequestSpan {
        node: state.node_id.to_string(),
        region: state.mgr.config().region.clone(),
    };
    router.layer(
        ServiceBuilder::new()
            .map_request(drop_insane_id)
            .layer(SetRequestIdLayer::new(header(), RandomId))
            .layer(
                TraceLayer::new_for_http()
                    .make_span_with(span)
                    .on_request(())
                    .on_response(AccessLog)
                    .on_body_chunk(())
                    .on_eos(())
                    .on_failure(()),
            )
            .layer(PropagateRequestIdLayer::new(header())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_request_id_is_kept_only_when_short_and_printable() {
        assert!(sane_request_id(b"abc-123_X"));
        assert!(sane_request_id(&[b'a'; 128]));
        assert!(!sane_request_id(&[b'a'; 129]));
        assert!(!sane_request_id(b""));
        assert!(!sane_request_id(b"a b"));
        assert!(!sane_request_id(b"a\x7f"));
        let req = Request::builder()
            .header(HEADER_REQUEST_ID, "has space")
            .body(())
            .unwrap();
        assert!(drop_insane_id(req)
            .headers()
            .get(HEADER_REQUEST_ID)
            .is_none());
        let req = Request::builder()
            .header(HEADER_REQUEST_ID, "fine")
            .body(())
            .unwrap();
        assert_eq!(drop_insane_id(req).headers()[HEADER_REQUEST_ID], "fine");
    }
}
