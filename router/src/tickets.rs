//! Tickets (`POST /v1/tickets`): HMAC-signed with a key derived from the cluster's API key
//! (HKDF, so a ticket never shows anything about the API key itself), so any node can check
//! one, bound to a sandbox, a scope and the principal that asked for it, and single use. Each
//! node that accepts a ticket remembers it until it expires; every use of a sandbox's ticket
//! reaches the sandbox's owner (directly or forwarded), so a second use is refused there
//! even when it enters elsewhere.

use crate::auth::Principal;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;
use warren_api::ticket::{Ticket, TicketScope};
use warren_api::{ApiError, ErrorCode};

/// The key id a redeemed ticket's principal carries.
pub const TICKET_KEY_ID: &str = "ticket";

/// What the ticket key is derived for (HKDF's `info`): another use of the API key gets
/// another label, and so an unrelated key.
const TICKET_KEY_INFO: &[u8] = b"warren ticket signing key v1";

pub struct Tickets {
    key: [u8; 32],
    /// Redeemed tickets' nonces, with their expiry (unix seconds).
    used: Mutex<HashMap<String, u64>>,
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn refused() -> ApiError {
    ApiError::new(
        ErrorCode::Unauthorized,
        "invalid, expired or already used ticket",
    )
}

/// HKDF-SHA256 of the API key for ticket signing.
fn derive(api_key: &str) -> [u8; 32] {
    struct Len;
    impl ring::hkdf::KeyType for Len {
        fn len(&self) -> usize {
            32
        }
    }
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"warren").extract(api_key.as_bytes());
    let mut out = [0u8; 32];
    prk.expand(&[TICKET_KEY_INFO], Len)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32 bytes is a valid HKDF-SHA256 length");
    out
}

/// The principal's part of a ticket: `a-<tenant>` for an admin, `t-<tenant>` for a tenant.
fn who(p: &Principal) -> String {
    format!("{}-{}", if p.admin { "a" } else { "t" }, p.tenant)
}

fn principal_of(who: &str) -> Option<Principal> {
    let (kind, tenant) = who.split_once('-')?;
    let admin = match kind {
        "a" => true,
        "t" => false,
        _ => return None,
    };
    warren_api::keys::validate_tenant(tenant).ok()?;
    Some(Principal {
        key_id: TICKET_KEY_ID.into(),
        tenant: tenant.into(),
        admin,
    })
}

impl Tickets {
    pub fn new(api_key: &str) -> Self {
        Tickets {
            key: derive(api_key),
            used: Mutex::new(HashMap::new()),
        }
    }

    fn sign(
        &self,
        sandbox: &str,
        scope: TicketScope,
        expires: u64,
        nonce: &str,
        who: &str,
    ) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key size");
        mac.update(
            format!(
                "warren-ticket-v2|{sandbox}|{}|{expires}|{nonce}|{who}",
                scope.as_str()
            )
            .as_bytes(),
        );
        hex::encode(mac.finalize().into_bytes())
    }

    pub fn issue(&self, sandbox: &str, scope: TicketScope, ttl_s: u64, by: &Principal) -> Ticket {
        let expires = now_s() + ttl_s;
        let nonce = hex::encode(rand::random::<[u8; 12]>());
        let who = who(by);
        let sig = self.sign(sandbox, scope, expires, &nonce, &who);
        Ticket {
            ticket: format!("{expires}.{}.{nonce}.{who}.{sig}", scope.as_str()),
            expires_at: warren_api::time::rfc3339(UNIX_EPOCH + Duration::from_secs(expires)),
        }
    }

    /// Accepts `ticket` for `scope` on `sandbox` once: the principal that asked for it.
    pub fn redeem(
        &self,
        ticket: &str,
        sandbox: &str,
        scope: TicketScope,
    ) -> Result<Principal, ApiError> {
        let parts: Vec<&str> = ticket.split('.').collect();
        let [expires, given_scope, nonce, who, sig] = parts.as_slice() else {
            return Err(refused());
        };
        let expires: u64 = expires.parse().map_err(|_| refused())?;
        if TicketScope::parse(given_scope) != Some(scope) || expires < now_s() {
            return Err(refused());
        }
        let expected = self.sign(sandbox, scope, expires, nonce, who);
        if !bool::from(expected.as_bytes().ct_eq(sig.as_bytes())) {
            return Err(refused());
        }
        let principal = principal_of(who).ok_or_else(refused)?;
        let mut used = self.used.lock().expect("tickets lock");
        let now = now_s();
        used.retain(|_, exp| *exp >= now);
        if used.insert(nonce.to_string(), expires).is_some() {
            return Err(refused());
        }
        Ok(principal)
    }
}

/// The sandbox and scope a ticket must name to open `GET path`, if tickets may open it.
pub fn scope_of(path: &str) -> Option<(&str, TicketScope)> {
    let rest = path.strip_prefix("/v1/sandboxes/")?;
    let (id, op) = rest.split_once('/')?;
    let segs: Vec<&str> = op.split('/').collect();
    let scope = match segs.as_slice() {
        ["terminals", _] => TicketScope::Terminal,
        ["watch"] => TicketScope::Watch,
        ["processes", _, "logs"] => TicketScope::Logs,
        _ => return None,
    };
    Some((id, scope))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_its_sandbox_and_scope_once() {
        let t = Tickets::new("key");
        let issued = t.issue("box1", TicketScope::Terminal, 60, &Principal::root());
        assert!(t
            .redeem(&issued.ticket, "box2", TicketScope::Terminal)
            .is_err());
        assert!(t
            .redeem(&issued.ticket, "box1", TicketScope::Watch)
            .is_err());
        t.redeem(&issued.ticket, "box1", TicketScope::Terminal)
            .unwrap();
        assert!(t
            .redeem(&issued.ticket, "box1", TicketScope::Terminal)
            .is_err());
    }

    #[test]
    fn forged_and_foreign_tickets_are_refused() {
        let t = Tickets::new("key");
        let other = Tickets::new("other key");
        let issued = other.issue("box1", TicketScope::Logs, 60, &Principal::root());
        assert!(t.redeem(&issued.ticket, "box1", TicketScope::Logs).is_err());
        assert!(t.redeem("garbage", "box1", TicketScope::Logs).is_err());
        let mine = t
            .issue("box1", TicketScope::Logs, 60, &Principal::root())
            .ticket;
        let (head, _) = mine.rsplit_once('.').unwrap();
        assert!(t
            .redeem(
                &format!("{head}.{}", "0".repeat(64)),
                "box1",
                TicketScope::Logs
            )
            .is_err());
    }

    #[test]
    fn a_ticket_carries_who_asked_and_a_changed_principal_breaks_its_signature() {
        let t = Tickets::new("key");
        let acme = Principal {
            key_id: "k".into(),
            tenant: "acme".into(),
            admin: false,
        };
        let issued = t.issue("box1", TicketScope::Watch, 60, &acme).ticket;
        let as_admin = issued.replace(".t-acme.", ".a-acme.");
        assert!(t.redeem(&as_admin, "box1", TicketScope::Watch).is_err());
        let p = t.redeem(&issued, "box1", TicketScope::Watch).unwrap();
        assert_eq!((p.tenant.as_str(), p.admin), ("acme", false));
        // The signing key is derived: the API key itself does not verify a ticket.
        assert_ne!(&derive("key")[..3], b"key");
    }

    #[test]
    fn paths_map_to_scopes() {
        assert_eq!(
            scope_of("/v1/sandboxes/a/terminals/main"),
            Some(("a", TicketScope::Terminal))
        );
        assert_eq!(
            scope_of("/v1/sandboxes/a/watch"),
            Some(("a", TicketScope::Watch))
        );
        assert_eq!(
            scope_of("/v1/sandboxes/a/processes/p/logs"),
            Some(("a", TicketScope::Logs))
        );
        assert_eq!(scope_of("/v1/sandboxes/a/exec"), None);
        assert_eq!(scope_of("/v1/sandboxes/a"), None);
    }
}
