//! The caller a request runs as, and the pure rules of what it may touch.

use warren_api::keys::DEFAULT_TENANT;
use warren_api::{ApiError, ErrorCode};

/// Header carrying the entry node's principal to the owner (believed only from a peer).
pub const HEADER_PRINCIPAL: &str = "x-warren-principal";

/// Id of the node's bootstrap key (its `api_key` setting): an admin of the default tenant.
pub const ROOT_KEY_ID: &str = "root";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The key's id (`root` for the bootstrap key, `ticket` for a redeemed ticket).
    pub key_id: String,
    /// Its tenant: what it creates belongs to this tenant.
    pub tenant: String,
    /// Sees every tenant's resources and may run the cluster and the keys.
    pub admin: bool,
}

impl Principal {
    pub fn root() -> Self {
        Principal {
            key_id: ROOT_KEY_ID.into(),
            tenant: DEFAULT_TENANT.into(),
            admin: true,
        }
    }

    /// Whether it may see and act on what belongs to `owner` (a tenant). Another tenant's
    /// resource is answered as absent, never as forbidden.
    pub fn may_touch(&self, owner: &str) -> bool {
        self.admin || self.tenant == owner
    }

    /// The tenant whose resources a listing shows: none for an admin (all of them).
    pub fn only_tenant(&self) -> Option<&str> {
        (!self.admin).then_some(self.tenant.as_str())
    }

    /// Admin-only operations (keys, draining and removing nodes): 403 for a tenant key.
    pub fn require_admin(&self, what: &str) -> Result<(), ApiError> {
        if self.admin {
            Ok(())
        } else {
            Err(ApiError::new(
                ErrorCode::Forbidden,
                format!(
                    "{what} needs an admin key; this key is tenant {}'s",
                    self.tenant
                ),
            ))
        }
    }

    /// The header value that carries it to a peer: `admin|tenant`, tenant, key id.
    pub fn to_header(&self) -> String {
        let kind = if self.admin { "admin" } else { "tenant" };
        format!("{kind} {} {}", self.tenant, self.key_id)
    }

    pub fn from_header(v: &str) -> Option<Self> {
        let mut parts = v.split(' ');
        let admin = match parts.next()? {
            "admin" => true,
            "tenant" => false,
            _ => return None,
        };
        let tenant = parts.next()?;
        let key_id = parts.next()?;
        if parts.next().is_some() || warren_api::keys::validate_tenant(tenant).is_err() {
            return None;
        }
        Some(Principal {
            key_id: key_id.into(),
            tenant: tenant.into(),
            admin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(t: &str) -> Principal {
        Principal {
            key_id: "k1".into(),
            tenant: t.into(),
            admin: false,
        }
    }

    #[test]
    fn a_tenant_touches_its_own_only_and_an_admin_everything() {
        assert!(tenant("a").may_touch("a"));
        assert!(!tenant("a").may_touch("b"));
        assert!(!tenant("a").may_touch(DEFAULT_TENANT));
        assert!(Principal::root().may_touch("b"));
        assert_eq!(tenant("a").only_tenant(), Some("a"));
        assert_eq!(Principal::root().only_tenant(), None);
        let e = tenant("a").require_admin("creating keys").unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        Principal::root().require_admin("creating keys").unwrap();
    }

    #[test]
    fn the_peer_header_round_trips_and_refuses_anything_else() {
        for p in [tenant("acme"), Principal::root()] {
            assert_eq!(Principal::from_header(&p.to_header()), Some(p));
        }
        for bad in [
            "",
            "admin",
            "root default root",
            "tenant Acme k",
            "tenant a k extra",
            "tenant  k",
        ] {
            assert_eq!(Principal::from_header(bad), None, "{bad:?}");
        }
    }
}
