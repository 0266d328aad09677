//! Snapshots, restore, fork and sleep.

use crate::{Client, Result};
use reqwest::Method;
use warren_api::sandbox::Sandbox;
use warren_api::snapshot::{
    CreateSnapshotRequest, ForkRequest, ForkResponse, RestoreRequest, Snapshot, SnapshotList,
    TransferEvent,
};

/// A progress report of a transfer: phase, bytes so far, total when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferProgress {
    pub phase: String,
    pub bytes: u64,
    pub total: Option<u64>,
}

impl Client {
    pub async fn create_snapshot(&self, id: &str, req: &CreateSnapshotRequest) -> Result<Snapshot> {
        self.call(Method::POST, &format!("/v1/sandboxes/{id}/snapshots"), req)
            .await
    }

    pub async fn list_snapshots(&self, sandbox: Option<&str>) -> Result<SnapshotList> {
        let mut rb = self.request(Method::GET, "/v1/snapshots");
        if let Some(s) = sandbox {
            rb = rb.query(&[("sandbox", s)]);
        }
        self.json(rb).await
    }

    pub async fn get_snapshot(&self, snapshot: &str) -> Result<Snapshot> {
        self.json(self.request(Method::GET, &format!("/v1/snapshots/{snapshot}")))
            .await
    }

    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<()> {
        let rb = self.request(Method::DELETE, &format!("/v1/snapshots/{snapshot}"));
        Self::check(rb.send().await?).await?;
        Ok(())
    }

    pub async fn restore(&self, id: &str, snapshot: &str) -> Result<Sandbox> {
        let req = RestoreRequest {
            snapshot: snapshot.to_string(),
        };
        self.call(Method::POST, &format!("/v1/sandboxes/{id}/restore"), &req)
            .await
    }

    pub async fn fork(&self, id: &str, req: &ForkRequest) -> Result<ForkResponse> {
        self.call(Method::POST, &format!("/v1/sandboxes/{id}/fork"), req)
            .await
    }

    pub async fn sleep(&self, id: &str) -> Result<Sandbox> {
        self.json(self.request(Method::POST, &format!("/v1/sandboxes/{id}/sleep")))
            .await
    }

    /// A snapshot, restore, fork or sleep (`method path` with `body`) as a stream: calls
    /// `on_progress` as bytes move and returns what the plain call returns.
    pub async fn transfer<B, T>(
        &self,
        method: Method,
        path: &str,
        body: Option<&B>,
        mut on_progress: impl FnMut(TransferProgress),
    ) -> Result<T>
    where
        B: serde::Serialize,
        T: serde::de::DeserializeOwned,
    {
        use futures_util::StreamExt;
        let mut rb = self.request(method, path);
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let mut events = crate::EventStream::<TransferEvent>::open(rb).await?;
        while let Some(ev) = events.next().await {
            match ev? {
                TransferEvent::Progress {
                    phase,
                    bytes,
                    total_bytes,
                } => on_progress(TransferProgress {
                    phase,
                    bytes,
                    total: total_bytes,
                }),
                TransferEvent::Complete { result } => {
                    return serde_json::from_value(result)
                        .map_err(|e| crate::Error::Decode(e.to_string()));
                }
                TransferEvent::Error { error } => {
                    return Err(crate::Error::Api {
                        status: error.http_status(),
                        error,
                    })
                }
            }
        }
        Err(crate::Error::Decode(
            "the stream ended before the operation did".into(),
        ))
    }
}
