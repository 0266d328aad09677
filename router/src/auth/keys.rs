//! API key values and their check. A key reads `wk_<id>_<secret>`: the id finds its record
//! in the cluster state, which holds only the SHA-256 of the secret (32 random bytes, so a
//! plain hash is as hard to invert as the secret is to guess). The bootstrap key is
//! compared as it is, in constant time.

use super::principal::{Principal, ROOT_KEY_ID};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use warren_consensus::state::KeyRecord;
use warren_consensus::ClusterState;

const PREFIX: &str = "wk_";

/// A new key: (id, the value shown once, the hash kept).
pub fn generate() -> (String, String, String) {
    let id = hex::encode(rand::random::<[u8; 8]>());
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let value = format!("{PREFIX}{id}_{secret}");
    (id, value, hash(&secret))
}

pub fn hash(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// The id and secret of a key value of the `wk_` form.
fn parse(value: &str) -> Option<(&str, &str)> {
    let (id, secret) = value.strip_prefix(PREFIX)?.split_once('_')?;
    let hexy = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hexy(id, 16) && hexy(secret, 64)).then_some((id, secret))
}

/// Whether `value` has the form of a `/v1/keys` key (worth a catch-up when unknown).
pub fn is_key_form(value: &str) -> bool {
    parse(value).is_some()
}

fn principal_of(id: &str, k: &KeyRecord) -> Principal {
    Principal {
        key_id: id.to_string(),
        tenant: k.tenant.clone(),
        admin: k.scope == warren_api::keys::KeyScope::Admin,
    }
}

/// Who `presented` is: the bootstrap key `root`, or a key of the state whose hash matches.
pub fn resolve(state: &ClusterState, root: &str, presented: &str) -> Option<Principal> {
    if !root.is_empty() && bool::from(presented.as_bytes().ct_eq(root.as_bytes())) {
        return Some(Principal::root());
    }
    let (id, secret) = parse(presented)?;
    if id == ROOT_KEY_ID {
        return None;
    }
    let k = state.keys.get(id)?;
    bool::from(hash(secret).as_bytes().ct_eq(k.hash.as_bytes())).then(|| principal_of(id, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_api::keys::KeyScope;

    fn state_with(id: &str, hash: &str, tenant: &str, scope: KeyScope) -> ClusterState {
        let mut s = ClusterState::default();
        s.keys.insert(
            id.into(),
            KeyRecord {
                hash: hash.into(),
                tenant: tenant.into(),
                scope,
                name: None,
                created_at: "2026-01-01T00:00:00Z".into(),
                last_used_at: None,
            },
        );
        s
    }

    #[test]
    fn a_generated_key_resolves_to_its_tenant_and_nothing_near_it_does() {
        let (id, value, h) = generate();
        let s = state_with(&id, &h, "acme", KeyScope::Tenant);
        let p = resolve(&s, "rootkey", &value).unwrap();
        assert_eq!(
            (p.key_id.as_str(), p.tenant.as_str(), p.admin),
            (id.as_str(), "acme", false)
        );
        // One flipped character of the secret, another id, the hash itself, truncation.
        let mut flipped = value.clone().into_bytes();
        let last = flipped.len() - 1;
        flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
        let flipped = String::from_utf8(flipped).unwrap();
        let other_id = value.replacen(&id, "0123456789abcdef", 1);
        let with_hash = format!("wk_{id}_{h}");
        for bad in [
            flipped.as_str(),
            other_id.as_str(),
            with_hash.as_str(),
            &value[..value.len() - 1],
            "",
            "rootke",
        ] {
            assert_eq!(resolve(&s, "rootkey", bad), None, "{bad:?}");
        }
        // Revoked: gone from the state.
        assert_eq!(resolve(&ClusterState::default(), "rootkey", &value), None);
    }

    #[test]
    fn the_bootstrap_key_is_an_admin_of_the_default_tenant_and_an_empty_one_matches_nothing() {
        let s = ClusterState::default();
        assert_eq!(resolve(&s, "rootkey", "rootkey"), Some(Principal::root()));
        assert_eq!(resolve(&s, "", ""), None);
        let (id, value, h) = generate();
        let s = state_with(&id, &h, "ops", KeyScope::Admin);
        assert!(resolve(&s, "rootkey", &value).unwrap().admin);
    }
}
