//! Secrets and egress policies.

use crate::{Client, Result};
use reqwest::Method;
use warren_api::egress::{EgressPolicy, SecretInfo, SecretList};

impl Client {
    /// `PUT /v1/secrets/{name}`.
    pub async fn put_secret(&self, name: &str, value: &str) -> Result<()> {
        let body = serde_json::json!({ "value": value });
        let path = format!("/v1/secrets/{name}");
        Self::check(self.request(Method::PUT, &path).json(&body).send().await?).await?;
        Ok(())
    }

    /// `GET /v1/secrets`.
    pub async fn secrets(&self) -> Result<SecretList> {
        self.json(self.request(Method::GET, "/v1/secrets")).await
    }

    /// `GET /v1/secrets/{name}`.
    pub async fn secret(&self, name: &str) -> Result<SecretInfo> {
        self.json(self.request(Method::GET, &format!("/v1/secrets/{name}")))
            .await
    }

    /// `DELETE /v1/secrets/{name}`.
    pub async fn delete_secret(&self, name: &str) -> Result<()> {
        let path = format!("/v1/secrets/{name}");
        Self::check(self.request(Method::DELETE, &path).send().await?).await?;
        Ok(())
    }

    /// `GET /v1/sandboxes/{id}/egress`.
    pub async fn egress(&self, id: &str) -> Result<EgressPolicy> {
        self.json(self.request(Method::GET, &Self::sandbox_path(id, "/egress")))
            .await
    }

    /// `PUT /v1/sandboxes/{id}/egress`.
    pub async fn put_egress(&self, id: &str, policy: &EgressPolicy) -> Result<EgressPolicy> {
        self.call(Method::PUT, &Self::sandbox_path(id, "/egress"), policy)
            .await
    }
}
