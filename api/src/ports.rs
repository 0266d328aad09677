//! Ports and preview URLs (api.md "Ports and preview URLs").

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// The `Upgrade` protocol of the guest's tunnel to a port inside the sandbox.
pub const GUEST_TUNNEL_UPGRADE: &str = "warren-tunnel";
/// Most ports one sandbox may expose.
pub const MAX_EXPOSED: usize = 32;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExposeRequest {
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A token of your own (20–63 of a-z, 0-9); one of 20 is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Anyone with the URL may open it (`{port}-{id}-public.{domain}`); by default a preview
    /// needs its token.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
}

impl ExposeRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.port == 0 {
            return Err(ApiError::invalid("port must be between 1 and 65535"));
        }
        if let Some(n) = &self.name {
            crate::ids::validate_name("port", n)?;
        }
        if let Some(t) = &self.token {
            validate_token(t)?;
        }
        Ok(())
    }
}

/// Shortest token one may choose: 20 of 36 symbols, about 103 bits, as generated ones.
pub const MIN_TOKEN_LEN: usize = 20;

/// Tokens are DNS-label friendly and carry no `-` (it separates the parts of the host).
pub fn validate_token(t: &str) -> Result<(), ApiError> {
    let ok = (MIN_TOKEN_LEN..=63).contains(&t.len())
        && t.bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "token must be {MIN_TOKEN_LEN} to 63 characters of a-z and 0-9"
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExposedPort {
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub url: String,
    pub token: String,
    /// Opened without a token (`url` is the public host then; the token host works too).
    #[serde(default)]
    pub public: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PortList {
    pub ports: Vec<ExposedPort>,
}

/// The preview URL of `port` of `sandbox`: the token host, or for a public port the host
/// that needs none (see [`crate::preview`]).
pub fn preview_url(
    scheme: &str,
    port: u16,
    sandbox: &str,
    token: Option<&str>,
    domain: &str,
    public_port: Option<u16>,
) -> String {
    let last = token.unwrap_or(crate::preview::PUBLIC_LABEL);
    match public_port {
        Some(p) => format!("{scheme}://{port}-{sandbox}-{last}.{domain}:{p}/"),
        None => format!("{scheme}://{port}-{sandbox}-{last}.{domain}/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_urls_parse_back_to_their_sandbox() {
        use crate::preview::{parse_preview_request, Credential, RequestParts};
        let back = |url: &str| {
            let host = url.trim_start_matches("http://").trim_end_matches('/');
            let r = parse_preview_request(
                "localhost",
                RequestParts {
                    host,
                    ..Default::default()
                },
            )
            .unwrap();
            (r.port, r.sandbox, r.credential)
        };
        let url = preview_url(
            "http",
            3000,
            "my-app",
            Some("tok12345"),
            "localhost",
            Some(7070),
        );
        assert_eq!(url, "http://3000-my-app-tok12345.localhost:7070/");
        assert_eq!(
            back(&url),
            (
                3000,
                "my-app".into(),
                Credential::HostToken("tok12345".into())
            )
        );
        let public = preview_url("http", 3000, "my-app", None, "localhost", None);
        assert_eq!(public, "http://3000-my-app-public.localhost/");
        assert_eq!(back(&public), (3000, "my-app".into(), Credential::Public));
    }

    #[test]
    fn requests_are_checked() {
        assert!(ExposeRequest {
            port: 0,
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(ExposeRequest {
            port: 80,
            token: Some("short".into()),
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(ExposeRequest {
            port: 80,
            token: Some("has-dash-123".into()),
            ..Default::default()
        }
        .validate()
        .is_err());
        assert!(
            ExposeRequest {
                port: 80,
                token: Some("abcdefgh12".into()),
                ..Default::default()
            }
            .validate()
            .is_err(),
            "a guessable 10-character token"
        );
        assert!(ExposeRequest {
            port: 80,
            token: Some("abcdefghij0123456789".into()),
            ..Default::default()
        }
        .validate()
        .is_ok());
    }
}
