//! Sessions: independent shells (env, cwd, functions) sharing one sandbox's filesystem.

use crate::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
pub struct SessionInfo {
    pub id: String,
    pub cwd: String,
}

/// The file in a guest's run directory that holds its sandbox's `env` (a JSON object of
/// strings) when the container was not made with it: a warm container, started before it
/// was known whose it would be. The guest reads it whenever it starts a session, terminal
/// or git call, over the container's own environment.
pub const GUEST_ENV_FILE: &str = "env.json";

/// `PATCH /v1/sandboxes/{id}/env`: set (string) or unset (null) variables.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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
pub struct PatchEnvResponse {
    pub sessions: Vec<String>,
}
