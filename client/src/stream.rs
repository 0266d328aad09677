//! Server-Sent Event streams of JSON events.

use crate::{Client, Error, Result};
use futures_util::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A stream of typed events; ends after the server's terminal event.
pub struct EventStream<T> {
    inner: Pin<Box<dyn Stream<Item = Result<T>> + Send>>,
}

impl<T> std::fmt::Debug for EventStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

impl<T: DeserializeOwned + Send + 'static> EventStream<T> {
    /// Sends the request with `Accept: text/event-stream` and parses `data:` lines as JSON.
    pub async fn open(rb: reqwest::RequestBuilder) -> Result<Self> {
        let resp = Client::check(
            rb.header("accept", warren_api::sse::CONTENT_TYPE)
                .send()
                .await?,
        )
        .await?;
        let events =
            eventsource_stream::EventStream::new(resp.bytes_stream()).map(|item| match item {
                Ok(ev) => serde_json::from_str::<T>(&ev.data)
                    .map_err(|e| Error::Decode(format!("{e}: {}", ev.data))),
                Err(e) => Err(Error::Decode(format!("event stream: {e}"))),
            });
        Ok(EventStream {
            inner: Box::pin(events),
        })
    }

    /// Collects every event (for tests and small commands).
    pub async fn collect_all(mut self) -> Result<Vec<T>> {
        let mut out = Vec::new();
        while let Some(ev) = self.next().await {
            out.push(ev?);
        }
        Ok(out)
    }
}

impl<T> Stream for EventStream<T> {
    type Item = Result<T>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}
