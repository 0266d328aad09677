//! API keys, tenants' quotas and join tokens (admin keys; a tenant key reads its own
//! tenant).

use crate::{Client, Result};
use reqwest::Method;
use warren_api::join_tokens::{
    CreateJoinTokenRequest, CreatedJoinToken, JoinPolicy, JoinTokenList,
};
use warren_api::keys::{CreateKeyRequest, CreatedKey, KeyList, KeyScope};
use warren_api::tenants::{Tenant, TenantList, TenantQuota};

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

    /// `PUT /v1/tenants/{tenant}`: its quota (`TenantQuota::default()` clears it).
    pub async fn set_tenant_quota(&self, tenant: &str, quota: &TenantQuota) -> Result<Tenant> {
        let path = format!("/v1/tenants/{tenant}");
        self.json(self.request(Method::PUT, &path).json(quota))
            .await
    }

    /// `GET /v1/tenants/{tenant}`: its quota and what it holds.
    pub async fn tenant(&self, tenant: &str) -> Result<Tenant> {
        self.json(self.request(Method::GET, &format!("/v1/tenants/{tenant}")))
            .await
    }

    /// `GET /v1/tenants`.
    pub async fn tenants(&self) -> Result<TenantList> {
        self.json(self.request(Method::GET, "/v1/tenants")).await
    }

    /// `POST /v1/cluster/join-tokens`: a token for new nodes, whose value is shown this once.
    pub async fn create_join_token(
        &self,
        req: &CreateJoinTokenRequest,
    ) -> Result<CreatedJoinToken> {
        self.json(
            self.request(Method::POST, "/v1/cluster/join-tokens")
                .json(req),
        )
        .await
    }

    /// `GET /v1/cluster/join-tokens`.
    pub async fn join_tokens(&self) -> Result<JoinTokenList> {
        self.json(self.request(Method::GET, "/v1/cluster/join-tokens"))
            .await
    }

    /// `DELETE /v1/cluster/join-tokens/{id}`.
    pub async fn revoke_join_token(&self, id: &str) -> Result<()> {
        let path = format!("/v1/cluster/join-tokens/{id}");
        Self::check(self.request(Method::DELETE, &path).send().await?).await?;
        Ok(())
    }

    /// `GET /v1/cluster/join-policy`.
    pub async fn join_policy(&self) -> Result<JoinPolicy> {
        self.json(self.request(Method::GET, "/v1/cluster/join-policy"))
            .await
    }

    /// `PUT /v1/cluster/join-policy`: whether the cluster's own join token admits nodes.
    pub async fn set_join_policy(&self, policy: &JoinPolicy) -> Result<JoinPolicy> {
        self.json(
            self.request(Method::PUT, "/v1/cluster/join-policy")
                .json(policy),
        )
        .await
    }
}
