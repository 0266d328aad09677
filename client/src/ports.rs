//! Exposed ports and preview URLs.

use crate::{Client, Result};
use reqwest::Method;
use warren_api::ports::{ExposeRequest, ExposedPort, PortList};

impl Client {
    /// `POST /v1/sandboxes/{id}/ports`.
    pub async fn expose_port(&self, id: &str, req: &ExposeRequest) -> Result<ExposedPort> {
        self.call(Method::POST, &Self::sandbox_path(id, "/ports"), req)
            .await
    }

    /// `GET /v1/sandboxes/{id}/ports`.
    pub async fn ports(&self, id: &str) -> Result<PortList> {
        self.json(self.request(Method::GET, &Self::sandbox_path(id, "/ports")))
            .await
    }

    /// `DELETE /v1/sandboxes/{id}/ports/{port}`.
    pub async fn unexpose_port(&self, id: &str, port: u16) -> Result<()> {
        let path = Self::sandbox_path(id, &format!("/ports/{port}"));
        Self::check(self.request(Method::DELETE, &path).send().await?).await?;
        Ok(())
    }
}
