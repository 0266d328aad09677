//! `POST|GET /v1/cluster/join-tokens`, `DELETE /v1/cluster/join-tokens/{id}`: tokens a new
//! node joins with, each expiring and single-use unless asked otherwise. A token reads
//! `wjt_<16 hex id>_<64 hex secret>`; the id finds its record in the cluster state, where the
//! whole value is kept sealed under the cluster's secrets key (a member proves a joiner's
//! request against it). The cluster's own join token (`join_token` setting) stays valid
//! beside them and never expires.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// What every issued join token starts with.
pub const PREFIX: &str = "wjt_";
/// Lifetime of a token when the request names none: an hour.
pub const DEFAULT_TTL_S: u64 = 3600;
/// The longest lifetime a token may ask for: 30 days.
pub const MAX_TTL_S: u64 = 30 * 24 * 3600;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateJoinTokenRequest {
    /// Seconds until the token expires (default 3600, at most 30 days).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_s: Option<u64>,
    /// Whether the token admits one node only (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub single_use: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl CreateJoinTokenRequest {
    /// The lifetime asked for, checked.
    pub fn ttl_s(&self) -> Result<u64, ApiError> {
        let ttl = self.ttl_s.unwrap_or(DEFAULT_TTL_S);
        if ttl == 0 || ttl > MAX_TTL_S {
            return Err(ApiError::invalid(format!(
                "ttl_s must be between 1 and {MAX_TTL_S} (30 days), not {ttl}"
            )));
        }
        Ok(ttl)
    }

    pub fn single_use(&self) -> bool {
        self.single_use.unwrap_or(true)
    }

    pub fn validate(&self) -> Result<(), ApiError> {
        self.ttl_s()?;
        if let Some(n) = &self.name {
            if n.len() > 128 || n.chars().any(char::is_control) {
                return Err(ApiError::invalid(
                    "a join token's name is at most 128 characters, none of them control characters",
                ));
            }
        }
        Ok(())
    }
}

/// The answer to `POST /v1/cluster/join-tokens`: the only time the token's value is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CreatedJoinToken {
    pub id: String,
    pub token: String,
    pub single_use: bool,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
    pub expires_at: String,
}

/// Whether a token can still admit a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JoinTokenState {
    Valid,
    Used,
    Expired,
}

/// A token as listed: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinTokenInfo {
    pub id: String,
    pub single_use: bool,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    /// The names of the nodes that joined with it.
    pub used_by: Vec<String>,
    pub state: JoinTokenState,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JoinTokenList {
    pub tokens: Vec<JoinTokenInfo>,
}

/// The id of an issued token's value (`wjt_<id>_<secret>`), or none for any other value
/// (such as the cluster's own join token).
pub fn token_id(value: &str) -> Option<&str> {
    let (id, secret) = value.strip_prefix(PREFIX)?.split_once('_')?;
    (is_hex(id, 16) && is_hex(secret, 64)).then_some(id)
}

/// Whether `id` has the form of an issued token's id.
pub fn is_token_id(id: &str) -> bool {
    is_hex(id, 16)
}

fn is_hex(s: &str, n: usize) -> bool {
    s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether a token admits one more node at `now_ms`: not expired, and not used up.
pub fn state_of(
    expires_at_ms: u64,
    single_use: bool,
    used_by: &[String],
    now_ms: u64,
) -> JoinTokenState {
    if single_use && !used_by.is_empty() {
        JoinTokenState::Used
    } else if now_ms >= expires_at_ms {
        JoinTokenState::Expired
    } else {
        JoinTokenState::Valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_issued_form_has_an_id() {
        let id = "0123456789abcdef";
        let value = format!("{PREFIX}{id}_{}", "ab".repeat(32));
        assert_eq!(token_id(&value), Some(id));
        for other in [
            "wj_0123456789abcdef0123",
            "wjt_0123456789abcdef",
            &format!("{PREFIX}{id}_{}", "ab".repeat(31)),
            &format!("{PREFIX}0123456789abcdeg_{}", "ab".repeat(32)),
            "",
        ] {
            assert_eq!(token_id(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_token_is_used_up_or_expired_or_valid() {
        let none: Vec<String> = vec![];
        let one = vec!["n2".to_string()];
        assert_eq!(state_of(1000, true, &none, 999), JoinTokenState::Valid);
        assert_eq!(state_of(1000, true, &none, 1000), JoinTokenState::Expired);
        assert_eq!(state_of(1000, true, &one, 10), JoinTokenState::Used);
        assert_eq!(state_of(1000, false, &one, 10), JoinTokenState::Valid);
        assert_eq!(state_of(1000, false, &one, 2000), JoinTokenState::Expired);
    }

    #[test]
    fn requests_are_checked() {
        let r: CreateJoinTokenRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(r.ttl_s().unwrap(), DEFAULT_TTL_S);
        assert!(r.single_use());
        for bad in [
            r#"{"ttl_s":0}"#,
            r#"{"ttl_s":2592001}"#,
            r#"{"name":"a\u0007"}"#,
        ] {
            let r: CreateJoinTokenRequest = serde_json::from_str(bad).unwrap();
            assert!(r.validate().is_err(), "{bad}");
        }
        assert!(serde_json::from_str::<CreateJoinTokenRequest>(r#"{"uses":3}"#).is_err());
    }
}

/// `GET|PUT /v1/cluster/join-policy`: whether the cluster's own join token (every node's
/// `join_token` setting) still admits new nodes. Turned off, only issued join tokens do, so
/// a cluster token that was shared once stops mattering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct JoinPolicy {
    pub cluster_token: bool,
}
