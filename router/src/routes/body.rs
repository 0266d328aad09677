//! Guest response bodies on their way to the client: they hold the sandbox's activity guard
//! while open, and an event stream cut off by the guest ends with an `error` event instead of
//! just stopping.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::pin::Pin;
use std::task::{Context, Poll};
use warren_api::exec::ExecEvent;
use warren_api::{sse, ApiError, ErrorCode};
use warren_node::sandbox::manager::ActivityGuard;

pub struct GuestResponseBody {
    inner: Incoming,
    sse: bool,
    finished: bool,
    _activity: ActivityGuard,
}

impl GuestResponseBody {
    pub fn new(inner: Incoming, sse: bool, activity: ActivityGuard) -> Self {
        GuestResponseBody {
            inner,
            sse,
            finished: false,
            _activity: activity,
        }
    }
}

impl Body for GuestResponseBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.finished {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Err(e))) if self.sse => {
                self.finished = true;
                let err = ApiError::new(
                    ErrorCode::Unavailable,
                    format!("the sandbox's stream was cut off: {e}"),
                );
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(sse::frame(
                    &ExecEvent::error(&err),
                ))))))
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
