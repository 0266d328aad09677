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
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PortList {
    pub ports: Vec<ExposedPort>,
}

/// The parts of a preview host name `{port}-{sandbox}-{token}.{domain}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewHost {
    pub port: u16,
    pub sandbox: String,
    pub token: String,
}

/// Parses `host` (a `Host` header, port suffix allowed) when it names a preview under
/// `domain`.
pub fn parse_preview_host(host: &str, domain: &str) -> Option<PreviewHost> {
    let host = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let host = host.to_ascii_lowercase();
    let label = host.strip_suffix(domain)?.strip_suffix('.')?;
    if label.contains('.') {
        return None;
    }
    let (port, rest) = label.split_once('-')?;
    let (sandbox, token) = rest.rsplit_once('-')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    crate::ids::validate_sandbox_id(sandbox).ok()?;
    Some(PreviewHost {
        port,
        sandbox: sandbox.to_string(),
        token: token.to_string(),
    })
}

/// The preview URL of `port` of `sandbox`.
pub fn preview_url(
    scheme: &str,
    port: u16,
    sandbox: &str,
    token: &str,
    domain: &str,
    public_port: Option<u16>,
) -> String {
    match public_port {
        Some(p) => format!("{scheme}://{port}-{sandbox}-{token}.{domain}:{p}/"),
        None => format!("{scheme}://{port}-{sandbox}-{token}.{domain}/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_hosts_parse_with_dashes_in_the_sandbox_id() {
        let h = parse_preview_host("3000-my-app-2-abcdef123.localhost:7070", "localhost").unwrap();
        assert_eq!(
            h,
            PreviewHost {
                port: 3000,
                sandbox: "my-app-2".into(),
                token: "abcdef123".into()
            }
        );
        assert_eq!(
            parse_preview_host(
                "8080-box-tok12345.Preview.Example.com",
                "preview.example.com"
            )
            .map(|h| h.port),
            Some(8080)
        );
        for bad in [
            "localhost:7070",
            "api.localhost",
            "3000-box.localhost",
            "0-box-tok12345.localhost",
            "x-box-tok12345.localhost",
            "3000-box-tok12345.a.localhost",
            "3000-box-tok12345.otherhost",
        ] {
            assert_eq!(parse_preview_host(bad, "localhost"), None, "{bad}");
        }
        let url = preview_url("http", 3000, "my-app", "tok12345", "localhost", Some(7070));
        assert_eq!(url, "http://3000-my-app-tok12345.localhost:7070/");
        let back = parse_preview_host(
            url.trim_start_matches("http://").trim_end_matches('/'),
            "localhost",
        )
        .unwrap();
        assert_eq!((back.port, back.sandbox.as_str()), (3000, "my-app"));
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
