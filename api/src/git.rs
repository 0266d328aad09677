//! `POST /v1/sandboxes/{id}/git/checkout`.

use crate::ApiError;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct GitCheckoutRequest {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
    /// Signed so that `timeout_ms <= 0` is a clear 400 rather than a parse error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
}

/// Default clone timeout: five minutes.
pub const DEFAULT_GIT_TIMEOUT_MS: u64 = 300_000;

impl GitCheckoutRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        let url = self.url.trim();
        if url.is_empty() {
            return Err(ApiError::invalid("url is required"));
        }
        if url.starts_with('-') || url.contains('\0') || url.chars().any(char::is_whitespace) {
            return Err(ApiError::invalid(format!("invalid repository url {url:?}")));
        }
        if let Some(b) = &self.branch {
            if b.is_empty() || b.starts_with('-') || b.contains('\0') || b.contains("..") {
                return Err(ApiError::invalid(format!("invalid branch {b:?}")));
            }
        }
        if let Some(t) = &self.target_dir {
            if t.is_empty() || t.contains('\0') {
                return Err(ApiError::invalid("invalid target_dir"));
            }
        }
        if self.depth == Some(0) {
            return Err(ApiError::invalid("depth must be at least 1"));
        }
        if let Some(t) = self.timeout_ms {
            if t <= 0 {
                return Err(ApiError::invalid("timeout_ms must be positive"));
            }
            if t as u64 > crate::exec::MAX_TIMEOUT_MS {
                return Err(ApiError::invalid("timeout_ms must be at most 86400000"));
            }
        }
        Ok(())
    }

    /// The repository's name: the last path segment of the url without `.git`.
    pub fn repo_name(&self) -> String {
        let trimmed = self.url.trim().trim_end_matches('/');
        let last = trimmed.rsplit(['/', ':']).next().unwrap_or(trimmed);
        let name = last.strip_suffix(".git").unwrap_or(last);
        if name.is_empty() || name == "." || name == ".." {
            "repo".to_string()
        } else {
            name.to_string()
        }
    }

    /// Where the checkout goes: `target_dir` (relative paths under `/workspace`), or
    /// `/workspace/<repo name>`.
    pub fn target(&self) -> String {
        match &self.target_dir {
            Some(t) if t.starts_with('/') => t.clone(),
            Some(t) => format!("{}/{}", crate::exec::DEFAULT_CWD, t),
            None => format!("{}/{}", crate::exec::DEFAULT_CWD, self.repo_name()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct GitCheckoutResponse {
    pub url: String,
    pub branch: String,
    pub target_dir: String,
    pub commit: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(url: &str) -> GitCheckoutRequest {
        GitCheckoutRequest {
            url: url.into(),
            ..Default::default()
        }
    }

    #[test]
    fn target_defaults_to_repo_name_under_workspace() {
        assert_eq!(req("https://h/x/proj.git").target(), "/workspace/proj");
        assert_eq!(req("git://127.0.0.1/proj/").target(), "/workspace/proj");
        assert_eq!(req("git@github.com:o/r.git").target(), "/workspace/r");
        let mut r = req("https://h/x/proj");
        r.target_dir = Some("src/p".into());
        assert_eq!(r.target(), "/workspace/src/p");
    }

    #[test]
    fn rejects_option_injection_and_bad_timeouts() {
        assert!(req("--upload-pack=x").validate().is_err());
        let mut r = req("https://h/r");
        r.timeout_ms = Some(0);
        assert!(r.validate().is_err());
        r.timeout_ms = Some(-5);
        assert!(r.validate().is_err());
        r.timeout_ms = Some(1000);
        assert!(r.validate().is_ok());
    }
}
