//! File watches (api.md "Watch").

use crate::{Client, EventStream, Result};
use reqwest::Method;
use warren_api::watch::{WatchEvent, WatchQuery};

impl Client {
    /// `GET /v1/sandboxes/{id}/watch`: resolves once the watch is live (its `watching` event
    /// arrived), so changes made after this returns are seen.
    pub async fn watch(&self, id: &str, q: &WatchQuery) -> Result<EventStream<WatchEvent>> {
        let mut pairs: Vec<(&str, String)> = vec![
            ("path", q.path.clone()),
            ("recursive", q.recursive.to_string()),
        ];
        pairs.extend(q.include.iter().map(|p| ("include", p.clone())));
        pairs.extend(q.exclude.iter().map(|p| ("exclude", p.clone())));
        let rb = self
            .request(Method::GET, &format!("/v1/sandboxes/{id}/watch"))
            .query(&pairs);
        let mut stream = EventStream::open(rb).await?;
        match futures_util::StreamExt::next(&mut stream).await {
            Some(Ok(WatchEvent::Watching { .. })) => Ok(stream),
            Some(Ok(other)) => Err(crate::Error::Decode(format!(
                "a watch must start with `watching`, not {other:?}"
            ))),
            Some(Err(e)) => Err(e),
            None => Err(crate::Error::Decode("the watch ended at once".into())),
        }
    }
}
