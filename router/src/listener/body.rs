//! A request body with a bound on how long the server waits for its next bytes: a client
//! that sends a header and then trickles (or stops sending) its body is cut after
//! `idle` of silence, instead of holding a connection, a handler and perhaps a guest
//! connection for as long as it likes. Only time spent waiting on the client counts: a
//! handler that reads the body late (after starting a sandbox) is not charged for its
//! own delay.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// What a cut body's reader gets.
#[derive(Debug)]
pub struct BodyTimedOut(pub Duration);

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the client sent no part of the request body for {} ms",
            self.0.as_millis()
        )
    }
}

impl std::error::Error for BodyTimedOut {}

pub struct IdleTimeoutBody<B> {
    inner: B,
    idle: Duration,
    /// Armed while the server waits for the client (none: not waiting now).
    waiting: Option<Pin<Box<Sleep>>>,
    on_cut: Option<prometheus::IntCounter>,
}

impl<B> IdleTimeoutBody<B> {
    pub fn new(inner: B, idle: Duration, on_cut: Option<prometheus::IntCounter>) -> Self {
        IdleTimeoutBody {
            inner,
            idle,
            waiting: None,
            on_cut,
        }
    }
}

impl<B> Body for IdleTimeoutBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(r) => {
                this.waiting = None;
                Poll::Ready(r.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let sleep = this.waiting.get_or_insert_with(|| {
                    Box::pin(tokio::time::sleep_until(Instant::now() + idle))
                });
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.waiting = None;
                        if let Some(c) = &this.on_cut {
                            c.inc();
                        }
                        Poll::Ready(Some(Err(Box::new(BodyTimedOut(idle)))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn stream(
        rx: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let s = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::convert::Infallible>(Frame::data(b)), rx))
        });
        StreamBody::new(Box::pin(s))
    }

    #[tokio::test]
    async fn a_silent_client_is_cut_and_a_late_reader_is_not_charged() {
        let idle = Duration::from_secs(1);
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut body = IdleTimeoutBody::new(stream(rx), idle, None);
        // The server reads late: the client's bytes arrived long before.
        tx.send(Bytes::from_static(b"abc")).await.unwrap();
        tokio::time::sleep(2 * idle).await;
        let f = body.frame().await.unwrap().unwrap();
        assert_eq!(f.into_data().unwrap(), "abc");
        // A byte every tenth of the bound keeps it going, then silence (sender kept open).
        let feeder = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(idle / 10).await;
                tx.send(Bytes::from_static(b"x")).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(tx);
        });
        for _ in 0..5 {
            body.frame().await.unwrap().unwrap();
        }
        let started = Instant::now();
        let e = body.frame().await.unwrap().unwrap_err();
        assert!(e.to_string().contains("no part of the request body"), "{e}");
        assert!(started.elapsed() >= idle);
        feeder.abort();
    }
}
