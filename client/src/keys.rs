//! API keys and tenants (admin keys only).

use crate::{Client, Result};
use reqwest::Method;
use warren_api::keys::{CreateKeyRequest, CreatedKey, KeyList, KeyScope};

impl Client {
    /// `POST /v1/keys`: the new key, whose value is shown this once.
    pub async fn create_key(
        &self,
        tenant: &str,
        scope: KeyScope,
        name: Option<&str>,
    ) -> Result<CreatedKey> {
        let req = CreateKeyRequest {
            tenant: tenant.to_string(),
            scope,
            name: name.map(str::to_string),
        };
        self.json(self.request(Method::POST, "/v1/keys").json(&req))
            .await
    }

    /// `GET /v1/keys`.
    pub async fn keys(&self) -> Result<KeyList> {
        self.json(self.request(Method::GET, "/v1/keys")).await
    }

    /// `DELETE /v1/keys/{id}`: answered once every node that is not down refuses the key.
    pub async fn revoke_key(&self, id: &str) -> Result<()> {
        let path = format!("/v1/keys/{id}");
        Self::check(self.request(Method::DELETE, &path).send().await?).await?;
        Ok(())
    }
}
