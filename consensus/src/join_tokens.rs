//! Issued join tokens in the cluster state (pure): made by an admin, each with an expiry and
//! perhaps single-use; spent by the registration they admit, in the same log entry, so two
//! nodes racing with one single-use token cannot both get in. The value is kept sealed under
//! the cluster's secrets key (a member opens it to check a joiner's proof); the log never
//! holds it in the clear.

use crate::secrets::Sealed;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use warren_api::join_tokens::{state_of, JoinTokenState};

/// How a registration refused for its join token starts (the join endpoint answers 403).
pub const JOIN_TOKEN_REFUSED: &str = "join token refused";

/// Why a node joining with the cluster's own token is refused once an admin turned it off.
pub const CLUSTER_TOKEN_OFF: &str =
    "join token refused: the cluster's own join token was turned off \
    (PUT /v1/cluster/join-policy); join with an issued token (warren cluster token create)";

/// How long a token stays listed after its expiry (until a later token's creation forgets
/// it): a day.
pub const KEEP_SPENT_MS: u64 = 24 * 3600 * 1000;

/// The name the value is sealed under (the AEAD's associated data): a sealed value cannot
/// be passed off as another token's or as a secret.
pub fn seal_name(id: &str) -> String {
    format!("join-token/{id}")
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinTokenRecord {
    /// The whole value (`wjt_<id>_<secret>`), sealed with `seal_name(id)`.
    pub sealed: Sealed,
    pub single_use: bool,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
    pub expires_at: String,
    pub expires_at_ms: u64,
    /// Names of the nodes it admitted.
    #[serde(default)]
    pub used_by: Vec<String>,
}

impl JoinTokenRecord {
    pub fn state(&self, now_ms: u64) -> JoinTokenState {
        state_of(self.expires_at_ms, self.single_use, &self.used_by, now_ms)
    }
}

/// The token a registration was admitted with, and the time its admitter judged it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSpend {
    pub id: String,
    pub now_ms: u64,
}

/// Adds a token (refused when the id exists); forgets tokens that expired more than
/// `KEEP_SPENT_MS` before `now_ms` (the new token's creation time).
pub fn create(
    tokens: &mut BTreeMap<String, JoinTokenRecord>,
    id: &str,
    record: &JoinTokenRecord,
    now_ms: u64,
) -> Result<(), String> {
    if tokens.contains_key(id) {
        return Err(format!("join token {id} exists"));
    }
    // A valid token has not expired, so this keeps it; a used one goes a day after its expiry.
    tokens.retain(|_, t| t.expires_at_ms.saturating_add(KEEP_SPENT_MS) > now_ms);
    tokens.insert(id.to_string(), record.clone());
    Ok(())
}

/// Spends `spend` for the node `name`: refused when the token is unknown (never made, or
/// revoked), expired, or single-use and used already.
pub fn spend(
    tokens: &mut BTreeMap<String, JoinTokenRecord>,
    spend: &TokenSpend,
    name: &str,
) -> Result<(), String> {
    let Some(t) = tokens.get_mut(&spend.id) else {
        return Err(format!(
            "{JOIN_TOKEN_REFUSED}: join token {} is unknown or revoked",
            spend.id
        ));
    };
    match t.state(spend.now_ms) {
        JoinTokenState::Valid => {
            t.used_by.push(name.to_string());
            Ok(())
        }
        JoinTokenState::Used => Err(format!(
            "{JOIN_TOKEN_REFUSED}: join token {} was single-use and admitted {} already",
            spend.id,
            t.used_by.join(", ")
        )),
        JoinTokenState::Expired => Err(format!(
            "{JOIN_TOKEN_REFUSED}: join token {} expired at {}",
            spend.id, t.expires_at
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(expires_at_ms: u64, single_use: bool) -> JoinTokenRecord {
        JoinTokenRecord {
            sealed: Sealed {
                key_id: "k".into(),
                nonce: String::new(),
                ciphertext: String::new(),
            },
            single_use,
            name: None,
            created_at: "t0".into(),
            expires_at: "t1".into(),
            expires_at_ms,
            used_by: vec![],
        }
    }

    fn at(id: &str, now_ms: u64) -> TokenSpend {
        TokenSpend {
            id: id.into(),
            now_ms,
        }
    }

    #[test]
    fn a_single_use_token_admits_one_node_and_then_none() {
        let mut tokens = BTreeMap::new();
        create(&mut tokens, "a", &record(1000, true), 0).unwrap();
        spend(&mut tokens, &at("a", 10), "n2").unwrap();
        let second = spend(&mut tokens, &at("a", 20), "n3").unwrap_err();
        assert!(second.starts_with(JOIN_TOKEN_REFUSED), "{second}");
        assert!(second.contains("n2"), "{second}");
        assert_eq!(tokens["a"].used_by, vec!["n2".to_string()]);
    }

    #[test]
    fn an_expired_unknown_or_revoked_token_admits_nobody() {
        let mut tokens = BTreeMap::new();
        create(&mut tokens, "a", &record(1000, false), 0).unwrap();
        spend(&mut tokens, &at("a", 999), "n2").unwrap();
        spend(&mut tokens, &at("a", 999), "n3").unwrap();
        let late = spend(&mut tokens, &at("a", 1000), "n4").unwrap_err();
        assert!(late.contains("expired"), "{late}");
        let unknown = spend(&mut tokens, &at("b", 0), "n4").unwrap_err();
        assert!(unknown.contains("unknown or revoked"), "{unknown}");
        assert!(create(&mut tokens, "a", &record(5000, true), 0).is_err());
    }

    #[test]
    fn spent_tokens_are_forgotten_a_day_after_they_ended() {
        let mut tokens = BTreeMap::new();
        create(&mut tokens, "old", &record(1000, true), 0).unwrap();
        create(&mut tokens, "live", &record(10 * KEEP_SPENT_MS, false), 0).unwrap();
        create(
            &mut tokens,
            "x",
            &record(2000, true),
            1000 + KEEP_SPENT_MS - 1,
        )
        .unwrap();
        assert!(
            tokens.contains_key("old"),
            "kept for a day after it expired"
        );
        create(&mut tokens, "y", &record(9000, true), 1000 + KEEP_SPENT_MS).unwrap();
        assert!(!tokens.contains_key("old"));
        assert!(tokens.contains_key("live"));
    }
}
