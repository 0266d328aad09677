//! HTTP plumbing of the guest: body types, JSON and error responses, SSE streams, queries.

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::time::Duration;
use tokio::sync::mpsc;
use warren_api::{sse, ApiError, ErrorCode};

pub type Body = BoxBody<Bytes, std::io::Error>;
pub type Request = hyper::Request<Incoming>;
pub type Response = hyper::Response<Body>;

/// Largest JSON request body the guest accepts.
pub const MAX_JSON_BODY: usize = 32 * 1024 * 1024;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn json<T: Serialize>(status: u16, value: &T) -> Response {
    let body = serde_json::to_vec(value).expect("responses always serialize");
    hyper::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(full(body))
        .expect("valid response")
}

pub fn empty(status: u16) -> Response {
    hyper::Response::builder()
        .status(status)
        .body(full(Bytes::new()))
        .expect("valid response")
}

pub fn error(err: &ApiError) -> Response {
    hyper::Response::builder()
        .status(err.http_status())
        .header("content-type", "application/json")
        .body(full(err.to_json()))
        .expect("valid response")
}

pub fn not_found(what: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no such endpoint: {what}"))
}

/// Whether the client asked for an event stream.
pub fn wants_sse(req: &Request) -> bool {
    req.headers()
        .get_all("accept")
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(sse::CONTENT_TYPE)))
}

/// Collects a JSON body (bounded) and parses it; any problem is a 400.
pub async fn read_json<T: DeserializeOwned>(req: Request) -> Result<T, ApiError> {
    let bytes = read_body(req, MAX_JSON_BODY).await?;
    warren_api::error::parse_json(&bytes)
}

/// Collects a body of at most `limit` bytes.
pub async fn read_body(req: Request, limit: usize) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(req.into_body(), limit);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body larger than {limit} bytes"),
        )),
        Err(e) => Err(ApiError::invalid(format!("cannot read request body: {e}"))),
    }
}

/// Parses the query string into `T`.
pub fn query<T: DeserializeOwned + Default, B>(req: &hyper::Request<B>) -> Result<T, ApiError> {
    match req.uri().query() {
        None | Some("") => Ok(T::default()),
        Some(q) => serde_urlencoded::from_str(q)
            .map_err(|e| ApiError::invalid(format!("invalid query string: {e}"))),
    }
}

/// Reads the rest of a request body and drops it. An upload refused (or failed) before its
/// body was all read must still read it: the node is writing it meanwhile, and an answer
/// followed by a closed connection reaches the node as a broken pipe, which it can only
/// report as 503 `UNAVAILABLE`, instead of as the answer.
pub async fn discard_body(body: &mut Incoming) {
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
}

/// The sending half of an SSE response.
#[derive(Clone)]
pub struct SseSender {
    tx: mpsc::Sender<Bytes>,
}

impl SseSender {
    /// Sends one event; false when the client has gone away.
    pub async fn send<T: Serialize>(&self, event: &T) -> bool {
        self.tx.send(Bytes::from(sse::frame(event))).await.is_ok()
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Resolves once the client has gone away.
    pub async fn closed(&self) {
        self.tx.closed().await
    }
}

/// An SSE response and the sender that feeds it. Quiet streams get a keepalive comment
/// every [`sse::KEEPALIVE_SECS`] seconds; the stream ends when every sender is dropped.
pub fn sse_stream() -> (SseSender, Response) {
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let keepalive = Duration::from_secs(sse::KEEPALIVE_SECS);
    let stream = futures_util::stream::unfold(rx, move |mut rx| async move {
        match tokio::time::timeout(keepalive, rx.recv()).await {
            Ok(Some(b)) => Some((b, rx)),
            Ok(None) => None,
            Err(_) => Some((Bytes::from_static(sse::KEEPALIVE.as_bytes()), rx)),
        }
    })
    .map(|b| Ok::<_, std::io::Error>(Frame::data(b)));
    let response = hyper::Response::builder()
        .status(200)
        .header("content-type", sse::CONTENT_TYPE)
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .expect("valid response");
    (SseSender { tx }, response)
}

/// Percent-decodes a path taken from the URL.
pub fn decode_path(raw: &str) -> Result<String, ApiError> {
    let decoded = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| ApiError::invalid("path is not valid UTF-8 after percent-decoding"))?;
    Ok(decoded.into_owned())
}
