//! Egress policies and secrets (`api.md`, "Egress and credentials"): what a sandbox may
//! reach through its node's egress proxy, the per-host rules that set headers from
//! secrets, and the names and metadata of secrets (never their values in a response).

pub mod host;
mod template;

pub use host::HostPattern;
pub use template::{ExpandError, Template, TemplateContext};

use crate::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Set in every container: the TCP port of its node's egress proxy on the container's
/// gateway. The guest turns it into `HTTP_PROXY` and its siblings for every process.
pub const PROXY_PORT_ENV: &str = "WARREN_EGRESS_PORT";

/// The environment variables that point a sandbox's programs at the proxy at `url`
/// (both spellings: curl reads the lowercase ones, others the uppercase).
pub fn proxy_env(url: &str) -> Vec<(&'static str, String)> {
    let no_proxy = "localhost,127.0.0.1,::1";
    vec![
        ("HTTP_PROXY", url.to_string()),
        ("http_proxy", url.to_string()),
        ("HTTPS_PROXY", url.to_string()),
        ("https_proxy", url.to_string()),
        ("NO_PROXY", no_proxy.to_string()),
        ("no_proxy", no_proxy.to_string()),
    ]
}

/// The system's trust bundle in the sandbox, to which the guest appends the sandbox's
/// egress CA (between `CA_BEGIN` and `CA_END`, replaced on every configuration).
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The sandbox's egress CA alone.
pub const CA_FILE: &str = "/etc/ssl/certs/warren-egress-ca.pem";
pub const CA_BEGIN: &str = "# BEGIN warren egress CA";
pub const CA_END: &str = "# END warren egress CA";

/// The variables that make curl, git, OpenSSL, Python (requests, pip, httpx) and Node trust
/// the bundle with the sandbox's egress CA.
pub fn ca_env() -> Vec<(&'static str, &'static str)> {
    vec![
        ("SSL_CERT_FILE", CA_BUNDLE),
        ("REQUESTS_CA_BUNDLE", CA_BUNDLE),
        ("CURL_CA_BUNDLE", CA_BUNDLE),
        ("GIT_SSL_CAINFO", CA_BUNDLE),
        ("PIP_CERT", CA_BUNDLE),
        ("NODE_EXTRA_CA_CERTS", CA_FILE),
    ]
}

/// `bundle` with `ca_pem` as its warren block (an earlier one replaced).
pub fn with_ca(bundle: &str, ca_pem: &str) -> String {
    let mut out = String::with_capacity(bundle.len() + ca_pem.len() + 64);
    let mut skipping = false;
    for line in bundle.lines() {
        if line == CA_BEGIN {
            skipping = true;
            continue;
        }
        if line == CA_END {
            skipping = false;
            continue;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push_str(CA_BEGIN);
    out.push('\n');
    out.push_str(ca_pem.trim_end());
    out.push('\n');
    out.push_str(CA_END);
    out.push('\n');
    out
}

/// What a host that no list or rule names gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum EgressDefault {
    #[default]
    Allow,
    Deny,
}

/// A sandbox's egress policy. A sandbox without one has the default policy: every public
/// destination allowed, no rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    #[serde(default)]
    pub default: EgressDefault,
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    #[serde(default)]
    pub deny_hosts: Vec<String>,
    #[serde(default)]
    pub rules: Vec<EgressRule>,
}

/// Headers set or removed on the requests to one host (optionally only some methods and
/// paths). A host with a rule is allowed (unless a deny entry names it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct EgressRule {
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_prefix: Option<String>,
    #[serde(default)]
    pub set_headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove_headers: Vec<String>,
}

/// Most entries in one host list.
pub const MAX_HOSTS: usize = 1024;
/// Most rules in one policy.
pub const MAX_RULES: usize = 256;
/// Longest header value template.
pub const MAX_HEADER_TEMPLATE: usize = 8192;

impl EgressPolicy {
    /// Checks every field: host patterns, methods, paths, header names and templates.
    pub fn validate(&self) -> Result<(), ApiError> {
        for (list, name) in [
            (&self.allow_hosts, "allow_hosts"),
            (&self.deny_hosts, "deny_hosts"),
        ] {
            if list.len() > MAX_HOSTS {
                return Err(ApiError::invalid(format!(
                    "egress.{name}: at most {MAX_HOSTS} entries"
                )));
            }
            for h in list {
                HostPattern::parse(h)
                    .map_err(|e| ApiError::invalid(format!("egress.{name}: {e}")))?;
            }
        }
        if self.rules.len() > MAX_RULES {
            return Err(ApiError::invalid(format!(
                "egress.rules: at most {MAX_RULES} rules"
            )));
        }
        for (i, r) in self.rules.iter().enumerate() {
            r.validate()
                .map_err(|e| ApiError::invalid(format!("egress.rules[{i}]: {e}")))?;
        }
        Ok(())
    }

    /// The policy with every host pattern in its canonical spelling (lowercase names).
    pub fn normalized(mut self) -> Result<EgressPolicy, ApiError> {
        self.validate()?;
        let canon = |v: &mut Vec<String>| {
            for h in v.iter_mut() {
                *h = HostPattern::parse(h).expect("validated").to_string();
            }
        };
        canon(&mut self.allow_hosts);
        canon(&mut self.deny_hosts);
        for r in &mut self.rules {
            r.host = HostPattern::parse(&r.host).expect("validated").to_string();
            if let Some(m) = &mut r.methods {
                for x in m.iter_mut() {
                    *x = x.to_ascii_uppercase();
                }
            }
            r.set_headers = std::mem::take(&mut r.set_headers)
                .into_iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v))
                .collect();
            for h in &mut r.remove_headers {
                *h = h.to_ascii_lowercase();
            }
        }
        Ok(self)
    }

    /// Names of the secrets its templates name directly (a nested name depends on the
    /// sandbox and is not listed).
    pub fn secret_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .rules
            .iter()
            .flat_map(|r| r.set_headers.values())
            .filter_map(|v| Template::parse(v).ok())
            .flat_map(|t| t.literal_secrets())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl EgressRule {
    fn validate(&self) -> Result<(), String> {
        HostPattern::parse(&self.host)?;
        if let Some(methods) = &self.methods {
            if methods.is_empty() {
                return Err("methods, when given, must name at least one method".into());
            }
            for m in methods {
                if m.is_empty() || m.len() > 32 || !m.bytes().all(|c| c.is_ascii_alphabetic()) {
                    return Err(format!("invalid method {m:?}"));
                }
            }
        }
        if let Some(p) = &self.path_prefix {
            if !p.starts_with('/') || p.len() > 2048 || p.bytes().any(|c| c.is_ascii_control()) {
                return Err(format!(
                    "invalid path_prefix {p:?}: it starts with / and has no control characters"
                ));
            }
        }
        for (name, value) in &self.set_headers {
            validate_header_name(name)?;
            if value.len() > MAX_HEADER_TEMPLATE {
                return Err(format!(
                    "set_headers.{name}: longer than {MAX_HEADER_TEMPLATE} bytes"
                ));
            }
            if value.bytes().any(|c| c == b'\r' || c == b'\n' || c == 0) {
                return Err(format!("set_headers.{name}: control characters"));
            }
            Template::parse(value).map_err(|e| format!("set_headers.{name}: {e}"))?;
        }
        for name in &self.remove_headers {
            validate_header_name(name)?;
        }
        Ok(())
    }

    /// Whether the rule applies to a request with this method and path (its host matched).
    pub fn applies_to(&self, method: &str, path: &str) -> bool {
        let method_ok = self
            .methods
            .as_ref()
            .is_none_or(|ms| ms.iter().any(|m| m.eq_ignore_ascii_case(method)));
        let path_ok = self
            .path_prefix
            .as_ref()
            .is_none_or(|p| path.starts_with(p.as_str()));
        method_ok && path_ok
    }
}

/// HTTP header names (RFC 9110 tokens), at most 128 chars.
fn validate_header_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        });
    if ok {
        Ok(())
    } else {
        Err(format!("invalid header name {name:?}"))
    }
}

/// Body of `PUT /v1/secrets/{name}`.
#[derive(Clone, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PutSecretRequest {
    pub value: String,
}

impl std::fmt::Debug for PutSecretRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PutSecretRequest { value: <redacted> }")
    }
}

/// Longest secret value.
pub const MAX_SECRET_BYTES: usize = 16 * 1024;

impl PutSecretRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.value.is_empty() {
            return Err(ApiError::invalid("a secret's value must not be empty"));
        }
        if self.value.len() > MAX_SECRET_BYTES {
            return Err(ApiError::invalid(format!(
                "a secret's value is at most {MAX_SECRET_BYTES} bytes"
            )));
        }
        // Values go into header values: a line break would split the request.
        if self
            .value
            .bytes()
            .any(|c| c == b'\r' || c == b'\n' || c == 0)
        {
            return Err(ApiError::invalid(
                "a secret's value must not contain CR, LF or NUL (it is sent in HTTP headers)",
            ));
        }
        Ok(())
    }
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretInfo {
    pub name: String,
    pub created_at: String,
    pub updated_at: String,
    /// The id of the secrets key its value is sealed under (after a key rotation, an old
    /// key's line can leave the key files once no secret names it).
    #[serde(default)]
    pub key_id: String,
}

/// `GET /v1/secrets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SecretList {
    pub secrets: Vec<SecretInfo>,
}

/// Secret names: 1–128 chars of `[A-Za-z0-9_.-]`.
pub fn validate_secret_name(name: &str) -> Result<(), ApiError> {
    if is_secret_name(name) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid secret name {name:?}: 1-128 characters of A-Z, a-z, 0-9, _, . and -"
        )))
    }
}

pub(crate) fn is_secret_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'))
}

/// What the egress proxy answers a request it refuses (403 `EGRESS_DENIED`).
pub fn denied(host: &str, sandbox: &str, why: &str) -> serde_json::Value {
    serde_json::json!({
        "code": crate::ErrorCode::EgressDenied.as_str(),
        "message": format!("egress to {host} is not allowed for sandbox {sandbox}: {why}"),
        "retryable": false,
        "host": host,
        "sandbox": sandbox,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(json: serde_json::Value) -> Result<EgressPolicy, ApiError> {
        let p: EgressPolicy =
            serde_json::from_value(json).map_err(|e| ApiError::invalid(e.to_string()))?;
        p.normalized()
    }

    #[test]
    fn a_full_policy_reads_and_normalizes() {
        let p = policy(serde_json::json!({
            "default": "deny",
            "allow_hosts": ["*.PyPI.org", "10.1.0.0/16", "Example.COM"],
            "deny_hosts": ["evil.example.com"],
            "rules": [{"host": "git.internal", "methods": ["get", "POST"], "path_prefix": "/v1/",
                       "set_headers": {"Authorization": "Bearer ${secret:token-${sandbox.label.team}}"},
                       "remove_headers": ["Cookie"]}]
        }))
        .unwrap();
        assert_eq!(p.default, EgressDefault::Deny);
        assert_eq!(p.allow_hosts, ["*.pypi.org", "10.1.0.0/16", "example.com"]);
        assert_eq!(p.rules[0].methods.as_ref().unwrap(), &["GET", "POST"]);
        assert!(p.rules[0].set_headers.contains_key("authorization"));
        assert_eq!(p.rules[0].remove_headers, ["cookie"]);
        assert!(p.rules[0].applies_to("get", "/v1/repos"));
        assert!(!p.rules[0].applies_to("DELETE", "/v1/repos"));
        assert!(!p.rules[0].applies_to("GET", "/v2/"));
    }

    #[test]
    fn an_empty_policy_allows_by_default() {
        let p = policy(serde_json::json!({})).unwrap();
        assert_eq!(p, EgressPolicy::default());
        assert_eq!(p.default, EgressDefault::Allow);
    }

    #[test]
    fn bad_policies_are_refused_with_what_is_wrong() {
        for (bad, says) in [
            (serde_json::json!({"default": "maybe"}), "unknown variant"),
            (serde_json::json!({"allow": []}), "unknown field"),
            (serde_json::json!({"allow_hosts": ["a b"]}), "allow_hosts"),
            (
                serde_json::json!({"deny_hosts": ["10.0.0.0/33"]}),
                "deny_hosts",
            ),
            (serde_json::json!({"allow_hosts": ["*"]}), "allow_hosts"),
            (
                serde_json::json!({"rules": [{"host": "x.com", "methods": []}]}),
                "methods",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "path_prefix": "v1"}]}),
                "path_prefix",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "set_headers": {"bad header": "v"}}]}),
                "header name",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "set_headers": {"a": "${secret:}"}}]}),
                "set_headers.a",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "set_headers": {"a": "${nope}"}}]}),
                "set_headers.a",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "set_headers": {"a": "${secret:x"}}]}),
                "set_headers.a",
            ),
            (
                serde_json::json!({"rules": [{"host": "x.com", "set_headers": {"a": "x\ny"}}]}),
                "control",
            ),
        ] {
            let err = policy(bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.code, crate::ErrorCode::InvalidArgument);
            assert!(err.message.contains(says), "{bad}: {}", err.message);
        }
    }

    #[test]
    fn secret_names_and_values_are_checked() {
        validate_secret_name("gh.token-1_A").unwrap();
        for bad in ["", "a/b", "a b", &"x".repeat(129), "${x}"] {
            assert!(validate_secret_name(bad).is_err(), "{bad:?}");
        }
        let ok = PutSecretRequest {
            value: "ghp_abc".into(),
        };
        ok.validate().unwrap();
        for bad in ["", "a\r\nX-Evil: 1", "a\0"] {
            assert!(PutSecretRequest { value: bad.into() }.validate().is_err());
        }
        assert!(!format!("{ok:?}").contains("ghp_abc"));
    }

    #[test]
    fn the_ca_block_of_a_bundle_is_replaced_not_repeated() {
        let once = with_ca("A\nB\n", "CA1");
        assert_eq!(once, format!("A\nB\n{CA_BEGIN}\nCA1\n{CA_END}\n"));
        let twice = with_ca(&once, "CA2");
        assert_eq!(twice, format!("A\nB\n{CA_BEGIN}\nCA2\n{CA_END}\n"));
    }

    #[test]
    fn the_secrets_a_policy_names_are_listed() {
        let p = policy(serde_json::json!({"rules": [
            {"host": "a.com", "set_headers": {"authorization": "Bearer ${secret:A}", "x": "${secret:B}${secret:A}"}},
            {"host": "b.com", "set_headers": {"y": "${secret:t-${sandbox.id}}"}}
        ]}))
        .unwrap();
        assert_eq!(p.secret_names(), ["A", "B"]);
    }
}
