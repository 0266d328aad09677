//! Exposed ports: recorded with their tokens in the sandbox's record (so they survive sleep
//! and node restarts), checked in constant time when a preview request arrives.

use super::SandboxManager;
use crate::sandbox::record::PortExposure;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use warren_api::ports::{preview_url, ExposeRequest, ExposedPort, PortList, MAX_EXPOSED};
use warren_api::{ApiError, ErrorCode};

fn invalid_token() -> ApiError {
    ApiError::new(
        ErrorCode::InvalidToken,
        "no such preview: the port is not exposed or the token is wrong",
    )
}

impl SandboxManager {
    fn exposed(&self, id: &str, port: u16, e: &PortExposure) -> ExposedPort {
        let p = &self.cfg.preview;
        ExposedPort {
            port,
            name: e.name.clone(),
            url: preview_url(
                &p.scheme,
                port,
                id,
                (!e.public).then_some(e.token.as_str()),
                &p.domain,
                p.public_port,
            ),
            token: e.token.clone(),
            public: e.public,
        }
    }

    /// Exposes `req.port` (keeping its token when exposed already and none is given).
    pub async fn expose(
        self: &Arc<Self>,
        id: &str,
        req: &ExposeRequest,
    ) -> Result<ExposedPort, ApiError> {
        req.validate()?;
        self.ensure(id).await?;
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        let mut rec = slot.record().ok_or_else(|| super::not_found(id))?;
        if !rec.ports.contains_key(&req.port) && rec.ports.len() >= MAX_EXPOSED {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("sandbox {id} already exposes {MAX_EXPOSED} ports; unexpose one"),
            ));
        }
        let token = match (&req.token, rec.ports.get(&req.port)) {
            (Some(t), _) => t.clone(),
            (None, Some(e)) => e.token.clone(),
            (None, None) => new_token(),
        };
        let exposure = PortExposure {
            name: req.name.clone(),
            token,
            public: req.public,
        };
        rec.ports.insert(req.port, exposure.clone());
        self.save(&rec)?;
        slot.set(Some(rec));
        Ok(self.exposed(id, req.port, &exposure))
    }

    /// Revokes `port`'s preview (nothing to do when it is not exposed).
    pub async fn unexpose(self: &Arc<Self>, id: &str, port: u16) -> Result<(), ApiError> {
        self.ensure(id).await?;
        let slot = self.slot(id);
        let _g = slot.lock.lock().await;
        let Some(mut rec) = slot.record() else {
            return Ok(());
        };
        if rec.ports.remove(&port).is_some() {
            self.save(&rec)?;
            slot.set(Some(rec));
        }
        Ok(())
    }

    pub async fn ports(self: &Arc<Self>, id: &str) -> Result<PortList, ApiError> {
        self.ensure(id).await?;
        let rec = self.slot(id).record().ok_or_else(|| super::not_found(id))?;
        Ok(PortList {
            ports: rec
                .ports
                .iter()
                .map(|(p, e)| self.exposed(id, *p, e))
                .collect(),
        })
    }

    /// Whether a preview request showing `access` may open `port` of sandbox `id` (never
    /// creates or wakes anything). Tokens are compared in constant time.
    pub fn check_preview(
        &self,
        id: &str,
        port: u16,
        access: PreviewAccess<'_>,
    ) -> Result<(), ApiError> {
        let rec = self
            .existing_slot(id)
            .and_then(|s| s.record())
            .ok_or_else(invalid_token)?;
        let expected = rec.ports.get(&port).ok_or_else(invalid_token)?;
        let open = match access {
            PreviewAccess::Public => expected.public,
            PreviewAccess::Tokens(tokens) => tokens.iter().fold(false, |any, t| {
                any | bool::from(expected.token.as_bytes().ct_eq(t.as_bytes()))
            }),
        };
        if open {
            Ok(())
        } else {
            Err(invalid_token())
        }
    }
}

/// What a preview request shows (see `warren_api::preview::Credential`).
#[derive(Debug, Clone, Copy)]
pub enum PreviewAccess<'a> {
    /// Any of these tokens (several cookies may come under one name).
    Tokens(&'a [&'a str]),
    /// No token: only a public port opens.
    Public,
}

/// 20 characters of a-z0-9 (about 103 bits).
fn new_token() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    (0..20)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}
