//! Long transfers (snapshot, restore, fork, sleep) answered as plain JSON, or, with `Accept:
//! text/event-stream`, as a stream of `progress` events and then `complete` (or `error`).
//! Streamed operations run to the end even if the client goes away.

use crate::error::ApiErrorResponse;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_api::snapshot::TransferEvent;
use warren_api::{sse, ApiError};
use warren_node::sandbox::progress::{track, Progress};

/// Progress events are sent at most this often (and only when something moved).
const EVERY: Duration = Duration::from_millis(250);

pub fn wants_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(sse::CONTENT_TYPE)))
}

/// Runs `op`; answers with its JSON (and `status`) or, when `stream`, with its progress.
pub async fn respond<T, F>(stream: bool, status: http::StatusCode, op: F) -> Response
where
    T: Serialize + Send + 'static,
    F: Future<Output = Result<T, ApiError>> + Send + 'static,
{
    if !stream {
        return match op.await {
            Ok(v) => (status, axum::Json(v)).into_response(),
            Err(e) => ApiErrorResponse(e).into_response(),
        };
    }
    let progress = Arc::new(Progress::default());
    let task = tokio::spawn(track(progress.clone(), op));
    let state = (Some(task), progress, None, Instant::now());
    let events = futures_util::stream::unfold(state, |(task, progress, last, quiet)| async move {
        let mut task = task?;
        loop {
            tokio::select! {
                done = &mut task => {
                    let event = match done {
                        Ok(Ok(v)) => TransferEvent::Complete {
                            result: serde_json::to_value(v).expect("results serialize"),
                        },
                        Ok(Err(error)) => TransferEvent::Error { error },
                        Err(e) => TransferEvent::Error {
                            error: ApiError::internal(format!("the operation failed: {e}")),
                        },
                    };
                    let frame = Bytes::from(sse::frame(&event));
                    return Some((Ok::<_, std::convert::Infallible>(frame), (None, progress, last, quiet)));
                }
                _ = tokio::time::sleep(EVERY) => {
                    let now = progress.read();
                    if Some(now) != last && now.phase.is_empty() {
                        continue;
                    }
                    if Some(now) != last {
                        let event = TransferEvent::Progress {
                            phase: now.phase.to_string(),
                            bytes: now.bytes,
                            total_bytes: (now.total > 0).then_some(now.total),
                        };
                        let frame = Bytes::from(sse::frame(&event));
                        return Some((Ok(frame), (Some(task), progress, Some(now), Instant::now())));
                    }
                    if quiet.elapsed() >= Duration::from_secs(sse::KEEPALIVE_SECS) {
                        let frame = Bytes::from_static(sse::KEEPALIVE.as_bytes());
                        return Some((Ok(frame), (Some(task), progress, last, Instant::now())));
                    }
                }
            }
        }
    });
    let mut resp = Response::new(Body::from_stream(events.boxed()));
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(sse::CONTENT_TYPE),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    h.insert("x-accel-buffering", http::HeaderValue::from_static("no"));
    resp
}
