//! `POST|GET /v1/keys`, `DELETE /v1/keys/{id}`: API keys, each an admin's or a tenant's.
//! A tenant key sees and acts only on its tenant's sandboxes, snapshots, secrets and usage.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// The tenant of everything made before tenants existed, and of the node's bootstrap key.
pub const DEFAULT_TENANT: &str = "default";

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// Every tenant's resources, the cluster's operations and the keys themselves.
    Admin,
    /// Its own tenant's resources only.
    Tenant,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyScope::Admin => "admin",
            KeyScope::Tenant => "tenant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    pub tenant: String,
    pub scope: KeyScope,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl CreateKeyRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        validate_tenant(&self.tenant)?;
        if let Some(n) = &self.name {
            if n.len() > 128 || n.chars().any(char::is_control) {
                return Err(ApiError::invalid(
                    "a key's name is at most 128 characters, none of them control characters",
                ));
            }
        }
        Ok(())
    }
}

/// The answer to `POST /v1/keys`: the only time the key's value is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedKey {
    pub id: String,
    pub key: String,
    pub tenant: String,
    pub scope: KeyScope,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
}

/// A key as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyInfo {
    pub id: String,
    pub tenant: String,
    pub scope: KeyScope,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
    /// When a node last saw it used (recorded at most once a minute per node).
    #[serde(default)]
    pub last_used_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

/// Tenant names: 1–63 characters of `[a-z0-9]`, inner `-` allowed (like sandbox ids).
pub fn validate_tenant(t: &str) -> Result<(), ApiError> {
    if crate::ids::is_dns_label(t) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid tenant {:?}: use 1-63 characters of a-z, 0-9 and inner '-'",
            crate::ids::truncate_for_message(t)
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenants_are_dns_labels_and_requests_refuse_unknown_fields() {
        for ok in ["a", "acme", "team-7", DEFAULT_TENANT] {
            validate_tenant(ok).unwrap();
        }
        for bad in ["", "-a", "a-", "Acme", "a/b", "a.b", &"x".repeat(64)] {
            assert!(validate_tenant(bad).is_err(), "{bad:?}");
        }
        let r: Result<CreateKeyRequest, _> =
            serde_json::from_str(r#"{"tenant":"a","scope":"tenant","admin":true}"#);
        assert!(r.is_err());
        let r: CreateKeyRequest =
            serde_json::from_str(r#"{"tenant":"a","scope":"admin"}"#).unwrap();
        assert_eq!(r.scope, KeyScope::Admin);
        let long = CreateKeyRequest {
            name: Some("n\u{7}".into()),
            ..r
        };
        assert!(long.validate().is_err());
    }
}
