//! Sessions: independent shells (env, cwd, functions) sharing one sandbox's filesystem.

use crate::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSessionRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

impl CreateSessionRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(id) = &self.id {
            crate::ids::validate_name("session", id)?;
        }
        if let Some(env) = &self.env {
            crate::sandbox::validate_env(env.keys())?;
        }
        if let Some(cwd) = &self.cwd {
            crate::files::validate_path(cwd)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    pub id: String,
    pub cwd: String,
}

/// `PUT /config` to a guest (node to guest only): what the node tells a guest after every
/// start of its container. `env` is the sandbox's environment, which the guest puts over the
/// container's own whenever it starts a session, terminal or git call (a warm container was
/// started before it was known whose it would be, so its own environment lacks it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GuestConfig {
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The certificate of the sandbox's egress CA (`egress`): the guest adds it to the
    /// system's trust store and points the usual variables at it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_ca_pem: Option<String>,
}

/// The guest path of [`GuestConfig`].
pub const GUEST_CONFIG_PATH: &str = "/config";

/// `PATCH /v1/sandboxes/{id}/env`: set (string) or unset (null) variables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PatchEnvRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    pub env: BTreeMap<String, Option<String>>,
}

impl PatchEnvRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(s) = &self.session {
            crate::ids::validate_name("session", s)?;
        }
        crate::sandbox::validate_env(self.env.keys())?;
        if self.env.values().flatten().any(|v| v.contains('\0')) {
            return Err(ApiError::invalid("environment values cannot contain NUL"));
        }
        Ok(())
    }
}

/// Response of `PATCH …/env`: the sessions it applied to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PatchEnvResponse {
    pub sessions: Vec<String>,
}
