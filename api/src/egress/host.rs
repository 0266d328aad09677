//! Host patterns of an egress policy: exact names, `*.` globs and CIDRs.

use ipnet::IpNet;
use std::net::IpAddr;

/// One entry of `allow_hosts`, `deny_hosts` or a rule's `host`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// One name (lowercase, no trailing dot), or one address.
    Exact(String),
    /// `*.example.com`: every name below `example.com` (at any depth), not the name itself.
    Subdomains(String),
    /// Addresses in a network (`10.1.0.0/16`, `fd00::/8`); a bare address is a /32 or /128.
    Net(IpNet),
}

impl HostPattern {
    pub fn parse(s: &str) -> Result<HostPattern, String> {
        let t = s.trim().trim_end_matches('.').to_ascii_lowercase();
        if t.contains('/') {
            return t
                .parse::<IpNet>()
                .map(|n| HostPattern::Net(n.trunc()))
                .map_err(|_| format!("invalid network {s:?}: use a CIDR such as 10.1.0.0/16"));
        }
        let bare = t.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(HostPattern::Net(IpNet::from(ip)));
        }
        if let Some(rest) = t.strip_prefix("*.") {
            if !is_dns_name(rest) {
                return Err(format!("invalid host glob {s:?}: use *.example.com"));
            }
            return Ok(HostPattern::Subdomains(rest.to_string()));
        }
        if !is_dns_name(&t) {
            return Err(format!(
                "invalid host {s:?}: use a name, *.name, an address or a CIDR"
            ));
        }
        Ok(HostPattern::Exact(t))
    }

    /// Whether a request's host name matches (names only: networks match addresses).
    pub fn matches_name(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        match self {
            HostPattern::Exact(n) => n.eq_ignore_ascii_case(host),
            HostPattern::Subdomains(suffix) => {
                host.len() > suffix.len() + 1
                    && host[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
                    && host.as_bytes()[host.len() - suffix.len() - 1] == b'.'
            }
            HostPattern::Net(_) => false,
        }
    }

    /// Whether an address matches (networks only).
    pub fn matches_addr(&self, ip: IpAddr) -> bool {
        match self {
            HostPattern::Net(n) => n.contains(&canonical(ip)),
            _ => false,
        }
    }
}

/// IPv4-mapped IPv6 addresses count as the IPv4 address they carry.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

impl std::fmt::Display for HostPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPattern::Exact(n) => f.write_str(n),
            HostPattern::Subdomains(s) => write!(f, "*.{s}"),
            HostPattern::Net(n) => write!(f, "{n}"),
        }
    }
}

/// Letters, digits, `-` and `_` in dot-separated labels of 1–63 chars, at most 253 in all.
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_parse_to_their_kind() {
        assert_eq!(
            HostPattern::parse("API.github.com.").unwrap(),
            HostPattern::Exact("api.github.com".into())
        );
        assert_eq!(
            HostPattern::parse("*.pypi.org").unwrap().to_string(),
            "*.pypi.org"
        );
        assert_eq!(
            HostPattern::parse("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert_eq!(
            HostPattern::parse("127.0.0.1").unwrap().to_string(),
            "127.0.0.1/32"
        );
        assert_eq!(HostPattern::parse("[::1]").unwrap().to_string(), "::1/128");
        for bad in ["", "*", "*.", "a..b", "a b", "x/y", "**.a.com", "a.*.com"] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn globs_match_names_below_and_not_the_name_or_lookalikes() {
        let p = HostPattern::parse("*.pypi.org").unwrap();
        assert!(p.matches_name("files.pypi.org"));
        assert!(p.matches_name("a.b.PYPI.org."));
        assert!(!p.matches_name("pypi.org"));
        assert!(!p.matches_name("evilpypi.org"));
        assert!(!p.matches_name("pypi.org.evil.com"));
        let e = HostPattern::parse("example.com").unwrap();
        assert!(e.matches_name("EXAMPLE.com"));
        assert!(!e.matches_name("www.example.com"));
    }

    #[test]
    fn networks_match_addresses_also_when_mapped_into_ipv6() {
        let n = HostPattern::parse("10.1.0.0/16").unwrap();
        assert!(n.matches_addr("10.1.200.3".parse().unwrap()));
        assert!(n.matches_addr("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!n.matches_addr("10.2.0.1".parse().unwrap()));
        assert!(!n.matches_name("10.1.0.1"));
    }
}
