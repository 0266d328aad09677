//! Snapshots, restore, fork and sleep.

use crate::{Client, Result};
use reqwest::Method;
use warren_api::sandbox::Sandbox;
use warren_api::snapshot::{
    CreateSnapshotRequest, ForkRequest, ForkResponse, RestoreRequest, Snapshot, SnapshotList,
};

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
}
