//! What a sandbox's policy says about one destination: pure, no IO.
//!
//! A destination is judged twice: by its name before it is resolved (name lists and rule
//! hosts), and by each address it resolves to before the proxy connects (networks in the
//! lists), so that a name cannot carry a request past a denied network. A deny match wins
//! over an allow match at either step; a host with a rule is allowed.

use std::net::IpAddr;
use warren_api::egress::{EgressDefault, EgressPolicy, EgressRule, HostPattern};

/// What one step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Named by a deny entry (the entry).
    Denied(String),
    /// Named by an allow entry or a rule's host (the entry).
    Allowed(String),
    /// Named by nothing: the policy's default applies.
    Unlisted,
}

/// A policy with its patterns parsed once.
#[derive(Debug, Clone, Default)]
pub struct Compiled {
    pub policy: EgressPolicy,
    allow: Vec<HostPattern>,
    deny: Vec<HostPattern>,
    rule_hosts: Vec<HostPattern>,
}

impl Compiled {
    /// From a validated policy (an entry that does not parse is skipped, never widened).
    pub fn new(policy: EgressPolicy) -> Compiled {
        let parse = |v: &[String]| -> Vec<HostPattern> {
            v.iter()
                .filter_map(|h| HostPattern::parse(h).ok())
                .collect()
        };
        let rule_hosts = policy
            .rules
            .iter()
            .map(|r| {
                HostPattern::parse(&r.host)
                    .unwrap_or_else(|_| HostPattern::Exact(String::from("\0")))
            })
            .collect();
        Compiled {
            allow: parse(&policy.allow_hosts),
            deny: parse(&policy.deny_hosts),
            rule_hosts,
            policy,
        }
    }

    /// The step before resolution: `host` as the client named it (a name or an address).
    pub fn by_name(&self, host: &str) -> Verdict {
        let ip = parse_ip(host);
        let hit = |p: &HostPattern| match ip {
            Some(ip) => p.matches_addr(ip),
            None => p.matches_name(host),
        };
        if let Some(p) = self.deny.iter().find(|p| hit(p)) {
            return Verdict::Denied(p.to_string());
        }
        if let Some(p) = self.allow.iter().chain(&self.rule_hosts).find(|p| hit(p)) {
            return Verdict::Allowed(p.to_string());
        }
        Verdict::Unlisted
    }

    /// The step after resolution, for one address the proxy would connect to.
    pub fn by_addr(&self, ip: IpAddr) -> Verdict {
        if let Some(p) = self.deny.iter().find(|p| p.matches_addr(ip)) {
            return Verdict::Denied(p.to_string());
        }
        if let Some(p) = self
            .allow
            .iter()
            .chain(&self.rule_hosts)
            .find(|p| p.matches_addr(ip))
        {
            return Verdict::Allowed(p.to_string());
        }
        Verdict::Unlisted
    }

    /// Whether a connection to `host` at `ip` is allowed, and why not.
    pub fn allows(&self, host: &str, ip: IpAddr) -> Result<(), String> {
        let name = self.by_name(host);
        if let Verdict::Denied(p) = &name {
            return Err(format!("denied by {p}"));
        }
        let addr = self.by_addr(ip);
        if let Verdict::Denied(p) = &addr {
            return Err(format!("{ip} is denied by {p}"));
        }
        let listed = matches!(name, Verdict::Allowed(_)) || matches!(addr, Verdict::Allowed(_));
        if listed || self.policy.default == EgressDefault::Allow {
            Ok(())
        } else {
            Err("not in allow_hosts and the policy's default is deny".into())
        }
    }

    /// Whether the name alone already settles a denial, so that it is never resolved: a deny
    /// entry names it, or nothing could allow it at the address step (the default is deny,
    /// the name is unlisted, and no network is in `allow_hosts` or a rule's host). Resolving
    /// such a name would only carry it to DNS servers: a way out of a sandbox that may
    /// reach no name.
    pub fn denied_by_name(&self, host: &str) -> Option<String> {
        match self.by_name(host) {
            Verdict::Denied(p) => Some(format!("denied by {p}")),
            Verdict::Allowed(_) => None,
            // An unlisted name can still be allowed by a network it resolves into, if any.
            Verdict::Unlisted => {
                let a_network_may_allow = self
                    .allow
                    .iter()
                    .chain(&self.rule_hosts)
                    .any(|p| matches!(p, HostPattern::Net(_)));
                (self.policy.default == EgressDefault::Deny && !a_network_may_allow)
                    .then(|| "not in allow_hosts and the policy's default is deny".to_string())
            }
        }
    }

    /// Whether any rule names this host: its HTTPS is then intercepted.
    pub fn has_rule_for(&self, host: &str) -> bool {
        let ip = parse_ip(host);
        self.rule_hosts.iter().any(|p| match ip {
            Some(ip) => p.matches_addr(ip),
            None => p.matches_name(host),
        })
    }

    /// The first rule whose host, method and path match a request.
    pub fn rule_for(&self, host: &str, method: &str, path: &str) -> Option<&EgressRule> {
        let ip = parse_ip(host);
        self.policy
            .rules
            .iter()
            .zip(&self.rule_hosts)
            .find(|(r, p)| {
                let host_ok = match ip {
                    Some(ip) => p.matches_addr(ip),
                    None => p.matches_name(host),
                };
                host_ok && r.applies_to(method, path)
            })
            .map(|(r, _)| r)
    }
}

fn parse_ip(host: &str) -> Option<IpAddr> {
    host.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compiled(json: serde_json::Value) -> Compiled {
        let p: EgressPolicy = serde_json::from_value(json).unwrap();
        Compiled::new(p.normalized().unwrap())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_name_nothing_could_allow_is_denied_before_it_is_resolved() {
        let names_only =
            compiled(serde_json::json!({"default": "deny", "allow_hosts": ["pypi.org"]}));
        assert!(names_only.denied_by_name("exfil.invalid").is_some());
        assert!(names_only.denied_by_name("10.0.0.1").is_some());
        assert!(names_only.denied_by_name("pypi.org").is_none());
        // A network in the lists may allow a name by where it resolves: resolve first.
        let with_net =
            compiled(serde_json::json!({"default": "deny", "allow_hosts": ["10.1.0.0/16"]}));
        assert!(with_net.denied_by_name("db.internal").is_none());
        let open = compiled(serde_json::json!({"default": "allow"}));
        assert!(open.denied_by_name("exfil.invalid").is_none());
    }

    #[test]
    fn deny_wins_over_allow_and_over_a_rule() {
        let c = compiled(serde_json::json!({
            "allow_hosts": ["*.example.com"],
            "deny_hosts": ["bad.example.com"],
            "rules": [{"host": "bad.example.com", "set_headers": {"x": "1"}}]
        }));
        assert!(c.allows("bad.example.com", ip("1.2.3.4")).is_err());
        assert!(c.denied_by_name("bad.example.com").is_some());
        assert!(c.allows("good.example.com", ip("1.2.3.4")).is_ok());
    }

    #[test]
    fn default_deny_allows_only_what_is_listed_or_has_a_rule() {
        let c = compiled(serde_json::json!({
            "default": "deny",
            "allow_hosts": ["pypi.org", "10.1.0.0/16"],
            "rules": [{"host": "git.corp", "set_headers": {"x": "1"}}]
        }));
        assert!(c.allows("pypi.org", ip("1.1.1.1")).is_ok());
        assert!(c.allows("git.corp", ip("1.1.1.2")).is_ok());
        assert!(c.allows("other.org", ip("1.1.1.3")).is_err());
        // Allowed by the network its name resolves to, and as a literal address.
        assert!(c.allows("db.corp", ip("10.1.2.3")).is_ok());
        assert!(c.allows("10.1.2.3", ip("10.1.2.3")).is_ok());
        assert!(c.denied_by_name("other.org").is_none());
    }

    #[test]
    fn a_name_cannot_carry_a_request_into_a_denied_network() {
        let c = compiled(serde_json::json!({
            "allow_hosts": ["api.example.com"],
            "deny_hosts": ["192.0.2.0/24"]
        }));
        let err = c.allows("api.example.com", ip("192.0.2.7")).unwrap_err();
        assert!(err.contains("192.0.2.0/24"), "{err}");
        assert!(c.allows("[192.0.2.7]", ip("192.0.2.7")).is_err());
    }

    #[test]
    fn the_first_matching_rule_applies() {
        let c = compiled(serde_json::json!({"rules": [
            {"host": "api.x.com", "methods": ["POST"], "set_headers": {"a": "post"}},
            {"host": "api.x.com", "path_prefix": "/v1/", "set_headers": {"a": "v1"}},
            {"host": "*.x.com", "set_headers": {"a": "any"}}
        ]}));
        let which = |m, p| {
            c.rule_for("api.x.com", m, p)
                .map(|r| r.set_headers["a"].clone())
        };
        assert_eq!(which("POST", "/v1/a").as_deref(), Some("post"));
        assert_eq!(which("GET", "/v1/a").as_deref(), Some("v1"));
        assert_eq!(which("GET", "/v2").as_deref(), Some("any"));
        assert!(c.rule_for("x.com", "GET", "/").is_none());
        assert!(c.has_rule_for("deep.api.x.com"));
        assert!(!c.has_rule_for("y.com"));
    }

    #[test]
    fn no_policy_allows_everything_public() {
        let c = Compiled::default();
        assert!(c.allows("anything.org", ip("8.8.8.8")).is_ok());
        assert!(c.rule_for("anything.org", "GET", "/").is_none());
    }
}
