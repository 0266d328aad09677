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
use warren_node::sandbox::progress::{track, Progress, ProgressReading};

/// Progress events are sent at most this often (and only when something moved).
const EVERY: Duration = Duration::from_millis(250);

pub fn wants_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .any(|v| v.to_str().is_ok_and(|s| s.contains(sse::CONTENT_TYPE)))
}

/// The state of a progress stream.
struct Sending<T> {
    task: Option<tokio::task::JoinHandle<Result<T, ApiError>>>,
    /// The `complete` or `error` frame, once the operation ended.
    last_frame: Option<Bytes>,
    progress: Arc<Progress>,
    last: Option<ProgressReading>,
    quiet: Instant,
}

impl<T> Sending<T> {
    /// A `progress` frame, if the reading moved since the last one sent.
    fn changed(&mut self) -> Option<Bytes> {
        let now = self.progress.read();
        if Some(now) == self.last || now.phase.is_empty() {
            return None;
        }
        self.last = Some(now);
        self.quiet = Instant::now();
        let event = TransferEvent::Progress {
            phase: now.phase.to_string(),
            bytes: now.bytes,
            total_bytes: (now.total > 0).then_some(now.total),
        };
        Some(Bytes::from(sse::frame(&event)))
    }
}

/// Runs `op`; answers with its JSON (and `status`) or, when `stream`, with its progress.
pub async fn respond<T, F>(stream: bool, status: http::StatusCode, op: F) -> Response
where
    T: Serialize + Send + 'static,
    F: Future<Output = Result<T, ApiError>> + Send + 'static,
{
    if !stream {
        // Its own task: a client that goes away does not cut the operation short (a fork
        // holds its source frozen until every copy is made, a restore finishes its
        // container), in either mode.
        return match tokio::spawn(op).await {
            Ok(Ok(v)) => (status, axum::Json(v)).into_response(),
            Ok(Err(e)) => ApiErrorResponse(e).into_response(),
            Err(e) => ApiErrorResponse(ApiError::internal(e.to_string())).into_response(),
        };
    }
    let progress = Arc::new(Progress::default());
    let task = tokio::spawn(track(progress.clone(), op));
    let state = Sending {
        task: Some(task),
        last_frame: None,
        progress,
        last: None,
        quiet: Instant::now(),
    };
    let events = futures_util::stream::unfold(state, |mut st| async move {
        if let Some(frame) = st.last_frame.take() {
            return Some((Ok::<_, std::convert::Infallible>(frame), st));
        }
        let mut task = st.task.take()?;
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
                    // Where the transfer got to goes out before the end, even when its last
                    // phase took less than one interval.
                    return match st.changed() {
                        Some(progress) => {
                            st.last_frame = Some(frame);
                            Some((Ok(progress), st))
                        }
                        None => Some((Ok(frame), st)),
                    };
                }
                _ = tokio::time::sleep(EVERY) => {
                    if let Some(frame) = st.changed() {
                        st.task = Some(task);
                        return Some((Ok(frame), st));
                    }
                    if st.quiet.elapsed() >= Duration::from_secs(sse::KEEPALIVE_SECS) {
                        st.task = Some(task);
                        st.quiet = Instant::now();
                        return Some((Ok(Bytes::from_static(sse::KEEPALIVE.as_bytes())), st));
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
