//! Tickets (`POST /v1/tickets`): HMAC-signed with the cluster's API key, so any node can check
//! one, bound to a sandbox and a scope, and single use. Each node that accepts a ticket
//! remembers it until it expires; every use of a sandbox's ticket reaches the sandbox's owner
//! (directly or forwarded), so a second use is refused there even when it enters elsewhere.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use subtle::ConstantTimeEq;
use warren_api::ticket::{Ticket, TicketScope};
use warren_api::{ApiError, ErrorCode};

pub struct Tickets {
    key: Arc<str>,
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

impl Tickets {
    pub fn new(key: Arc<str>) -> Self {
        Tickets {
            key,
            used: Mutex::new(HashMap::new()),
        }
    }

    fn sign(&self, sandbox: &str, scope: TicketScope, expires: u64, nonce: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(self.key.as_bytes()).expect("any key size");
        mac.update(
            format!(
                "warren-ticket-v1|{sandbox}|{}|{expires}|{nonce}",
                scope.as_str()
            )
            .as_bytes(),
        );
        hex::encode(mac.finalize().into_bytes())
    }

    pub fn issue(&self, sandbox: &str, scope: TicketScope, ttl_s: u64) -> Ticket {
        let expires = now_s() + ttl_s;
        let nonce = hex::encode(rand::random::<[u8; 12]>());
        let sig = self.sign(sandbox, scope, expires, &nonce);
        Ticket {
            ticket: format!("{expires}.{}.{nonce}.{sig}", scope.as_str()),
            expires_at: warren_api::time::rfc3339(UNIX_EPOCH + Duration::from_secs(expires)),
        }
    }

    /// Accepts `ticket` for `scope` on `sandbox` once.
    pub fn redeem(&self, ticket: &str, sandbox: &str, scope: TicketScope) -> Result<(), ApiError> {
        let parts: Vec<&str> = ticket.split('.').collect();
        let [expires, given_scope, nonce, sig] = parts.as_slice() else {
            return Err(refused());
        };
        let expires: u64 = expires.parse().map_err(|_| refused())?;
        if TicketScope::parse(given_scope) != Some(scope) || expires < now_s() {
            return Err(refused());
        }
        let expected = self.sign(sandbox, scope, expires, nonce);
        if !bool::from(expected.as_bytes().ct_eq(sig.as_bytes())) {
            return Err(refused());
        }
        let mut used = self.used.lock().expect("tickets lock");
        let now = now_s();
        used.retain(|_, exp| *exp >= now);
        if used.insert(nonce.to_string(), expires).is_some() {
            return Err(refused());
        }
        Ok(())
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
        let t = Tickets::new("key".into());
        let issued = t.issue("box1", TicketScope::Terminal, 60);
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
        let t = Tickets::new("key".into());
        let other = Tickets::new("other key".into());
        let issued = other.issue("box1", TicketScope::Logs, 60);
        assert!(t.redeem(&issued.ticket, "box1", TicketScope::Logs).is_err());
        assert!(t.redeem("garbage", "box1", TicketScope::Logs).is_err());
        let mine = t.issue("box1", TicketScope::Logs, 60).ticket;
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
