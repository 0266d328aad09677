//! Who a preview request is for, and what it shows to be let in (api.md "Ports and preview
//! URLs"). Pure: the router calls it on the entry node and again on the owner, with the same
//! request, so both reach the same sandbox.
//!
//! Host forms under the preview domain:
//! - `{port}-{id}-{token}`: the token in the host name (what `POST …/ports` answers);
//! - `{port}-{id}-public`: a port exposed with `public: true`, no token;
//! - `{port}-{id}`: the session host, where the token travels out of the host name: as the
//!   cookie the exchange sets (`warren_preview_{port}_{id}`, host-only, `HttpOnly`), as the
//!   header `x-warren-preview-token`, or once as the query parameter `warren_preview_token`
//!   that the exchange turns into the cookie.
//!
//! `{port}-{id}` alone also reads as `{port}-{id'}-{token}` when the id has a `-`: what
//! decides is whether the request carries the session's credential, which only the session
//! host's own cookie, header or query parameter can be. A cookie is looked up by a name that
//! holds the port and the whole id, so a page that sets `warren_preview_…` cookies for a
//! parent domain cannot turn another preview's token host into a session host (it would have
//! to know that preview's token to name the cookie).

use crate::ids::validate_sandbox_id;

/// Prefix of the session cookies' names (`warren_preview_{port}_{id}`).
pub const COOKIE_PREFIX: &str = "warren_preview_";
/// The header a program may send the token in, on the session host.
pub const TOKEN_HEADER: &str = "x-warren-preview-token";
/// The query parameter the exchange carries the token in, once, to the session host.
pub const TOKEN_QUERY: &str = "warren_preview_token";
/// The last label part of a public port's host.
pub const PUBLIC_LABEL: &str = "public";

/// What a preview request shows to be let in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// `{port}-{id}-{token}`.
    HostToken(String),
    /// `?warren_preview_token=` on the session host: checked, then exchanged for the cookie.
    Exchange(String),
    /// The session host's cookie: every value sent under its name (a page may have set one
    /// for a parent domain too; any that matches lets the request in).
    Cookie(Vec<String>),
    /// `x-warren-preview-token` on the session host.
    Header(String),
    /// `{port}-{id}-public`.
    Public,
    /// The session host with no credential.
    Missing,
}

/// A preview request: which port of which sandbox, and what it showed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreviewRequest {
    pub port: u16,
    pub sandbox: String,
    pub credential: Credential,
}

/// The parts of an HTTP request the decision reads.
#[derive(Debug, Default, Clone, Copy)]
pub struct RequestParts<'a> {
    /// The `Host` header (a port suffix is allowed).
    pub host: &'a str,
    /// The URI's query, without `?`.
    pub query: Option<&'a str>,
    /// The `x-warren-preview-token` header.
    pub header_token: Option<&'a str>,
    /// Every `Cookie` header.
    pub cookies: &'a [&'a str],
}

/// The session cookie's name for `port` of `sandbox`.
pub fn cookie_name(port: u16, sandbox: &str) -> String {
    format!("{COOKIE_PREFIX}{port}_{sandbox}")
}

/// The label before the preview domain (lower case), when `host` is under `domain`.
fn preview_label(host: &str, domain: &str) -> Option<String> {
    let host = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let host = host.to_ascii_lowercase();
    let label = host
        .strip_suffix(&domain.to_ascii_lowercase())?
        .strip_suffix('.')?;
    (!label.contains('.')).then(|| label.to_string())
}

/// Parses a request whose host names a preview under `domain`; `None` for anything else (an
/// API call).
pub fn parse_preview_request(domain: &str, parts: RequestParts<'_>) -> Option<PreviewRequest> {
    let label = preview_label(parts.host, domain)?;
    let (port, rest) = label.split_once('-')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let request = |sandbox: &str, credential| PreviewRequest {
        port,
        sandbox: sandbox.to_string(),
        credential,
    };
    if validate_sandbox_id(rest).is_ok() {
        if let Some(t) = query_value(parts.query, TOKEN_QUERY) {
            return Some(request(rest, Credential::Exchange(t)));
        }
        if let Some(t) = parts.header_token {
            return Some(request(rest, Credential::Header(t.trim().to_string())));
        }
        let values = cookie_values(parts.cookies, &cookie_name(port, rest));
        if !values.is_empty() {
            return Some(request(rest, Credential::Cookie(values)));
        }
    }
    if let Some((sandbox, last)) = rest.rsplit_once('-') {
        let token_like = !last.is_empty()
            && last
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if token_like && validate_sandbox_id(sandbox).is_ok() {
            let credential = if last == PUBLIC_LABEL {
                Credential::Public
            } else {
                Credential::HostToken(last.to_string())
            };
            return Some(request(sandbox, credential));
        }
    }
    validate_sandbox_id(rest).ok()?;
    Some(request(rest, Credential::Missing))
}

/// The first value of `name` in a query string (percent-decoded).
pub fn query_value(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The query string without `name` (`None` when nothing is left). Keys are compared
/// percent-decoded, as [`query_value`] finds them, so whatever it finds is taken out.
pub fn query_without(query: Option<&str>, name: &str) -> Option<String> {
    let kept: Vec<&str> = query?
        .split('&')
        .filter(|pair| {
            !pair.is_empty() && !form_urlencoded::parse(pair.as_bytes()).any(|(k, _)| k == name)
        })
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// Every value sent for cookie `name` across `Cookie` headers.
pub fn cookie_values(cookie_headers: &[&str], name: &str) -> Vec<String> {
    cookie_headers
        .iter()
        .flat_map(|h| h.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .filter(|(k, _)| k.trim() == name)
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .collect()
}

/// A `Cookie` header without the preview cookies (`None` when nothing is left): they are the
/// node's, never the sandbox's.
pub fn cookies_without_preview(cookie_header: &str) -> Option<String> {
    let kept: Vec<&str> = cookie_header
        .split(';')
        .map(str::trim)
        .filter(|pair| !pair.is_empty() && !pair.starts_with(COOKIE_PREFIX))
        .collect();
    (!kept.is_empty()).then(|| kept.join("; "))
}

/// Whether a `Set-Cookie` value from a service sets a preview cookie (the node drops those:
/// only the node hands out the session cookie).
pub fn sets_preview_cookie(set_cookie: &str) -> bool {
    set_cookie
        .trim_start()
        .to_ascii_lowercase()
        .starts_with(COOKIE_PREFIX)
}

/// The session host for `port` of `sandbox`, from the host the request came to
/// (`{label}.{domain}[:port]` → `{port}-{sandbox}.{domain}[:port]`).
pub fn session_host(request_host: &str, port: u16, sandbox: &str) -> Option<String> {
    let (_, after_label) = request_host.split_once('.')?;
    Some(format!("{port}-{sandbox}.{after_label}"))
}

/// The `Set-Cookie` value of the session cookie: host-only (no `Domain`), `HttpOnly`,
/// `SameSite=Lax` (sent on top-level navigations into the preview, also from another site;
/// not in another site's frames), `Secure` on HTTPS.
pub fn session_cookie(port: u16, sandbox: &str, token: &str, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{}={token}; Path=/; HttpOnly; SameSite=Lax{secure}",
        cookie_name(port, sandbox)
    )
}

/// What the owner does with a preview request whose credential checked out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Proxy it to the port.
    Proxy,
    /// A browser's page load on the token host: send it to the session host with the token in
    /// the query, once (the cookie can only be set by the session host itself).
    ToSession { location: String },
    /// The session host with the token in the query: set the cookie, load the page again
    /// without the token.
    SetCookie { location: String, cookie: String },
}

/// The request facts [`next_step`] reads.
#[derive(Debug, Clone, Copy)]
pub struct StepInput<'a> {
    pub credential: &'a Credential,
    pub port: u16,
    pub sandbox: &'a str,
    /// `GET` or `HEAD`.
    pub safe_method: bool,
    /// `sec-fetch-mode: navigate` and `sec-fetch-dest: document`: a browser loading a page
    /// at the top level (not a frame, a fetch or a program).
    pub top_level_navigation: bool,
    pub host: &'a str,
    pub scheme: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
}

/// Decides the exchange. Programs and frames keep the token host (nothing changes for them);
/// a browser's top-level page load trades it for the session host's cookie.
pub fn next_step(i: StepInput<'_>) -> Step {
    match i.credential {
        Credential::HostToken(token) if i.safe_method && i.top_level_navigation => {
            let Some(host) = session_host(i.host, i.port, i.sandbox) else {
                return Step::Proxy;
            };
            let mut query: Vec<String> = query_without(i.query, TOKEN_QUERY).into_iter().collect();
            query.push(format!("{TOKEN_QUERY}={token}"));
            Step::ToSession {
                location: format!("{}://{host}{}?{}", i.scheme, i.path, query.join("&")),
            }
        }
        Credential::Exchange(token) if i.safe_method => {
            let location = match query_without(i.query, TOKEN_QUERY) {
                Some(q) => format!("{}?{q}", i.path),
                None => i.path.to_string(),
            };
            Step::SetCookie {
                location,
                cookie: session_cookie(i.port, i.sandbox, token, i.scheme == "https"),
            }
        }
        _ => Step::Proxy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(
        host: &str,
        query: Option<&str>,
        header: Option<&str>,
        cookies: &[&str],
    ) -> Option<PreviewRequest> {
        parse_preview_request(
            "localhost",
            RequestParts {
                host,
                query,
                header_token: header,
                cookies,
            },
        )
    }

    fn req(port: u16, sandbox: &str, credential: Credential) -> Option<PreviewRequest> {
        Some(PreviewRequest {
            port,
            sandbox: sandbox.into(),
            credential,
        })
    }

    #[test]
    fn token_hosts_parse_with_dashes_in_the_sandbox_id() {
        assert_eq!(
            parse("3000-my-app-2-abcdef123.localhost:7070", None, None, &[]),
            req(3000, "my-app-2", Credential::HostToken("abcdef123".into()))
        );
        assert_eq!(
            parse_preview_request(
                "preview.example.com",
                RequestParts {
                    host: "8080-box-tok12345.Preview.Example.com",
                    ..Default::default()
                }
            )
            .map(|r| r.port),
            Some(8080)
        );
        assert_eq!(
            parse("3000-my-app-public.localhost", None, None, &[]),
            req(3000, "my-app", Credential::Public)
        );
        for bad in [
            "localhost:7070",
            "api.localhost",
            "0-box-tok12345.localhost",
            "x-box-tok12345.localhost",
            "3000-box-tok12345.a.localhost",
            "3000-box-tok12345.otherhost",
            "3000-.localhost",
            "3000-box-.localhost",
        ] {
            assert_eq!(parse(bad, None, None, &[]), None, "{bad}");
        }
    }

    #[test]
    fn the_session_host_is_taken_only_with_its_own_credential() {
        // Without one, `3000-my-app` reads as sandbox `my` with token `app` (refused there),
        // and an id with no dash has nothing to show.
        assert_eq!(
            parse("3000-my-app.localhost", None, None, &[]),
            req(3000, "my", Credential::HostToken("app".into()))
        );
        assert_eq!(
            parse("3000-demo.localhost", None, None, &[]),
            req(3000, "demo", Credential::Missing)
        );
        assert_eq!(
            parse(
                "3000-my-app.localhost",
                Some("a=1&warren_preview_token=t0k"),
                None,
                &[]
            ),
            req(3000, "my-app", Credential::Exchange("t0k".into()))
        );
        assert_eq!(
            parse("3000-my-app.localhost", None, Some(" t0k "), &[]),
            req(3000, "my-app", Credential::Header("t0k".into()))
        );
        assert_eq!(
            parse(
                "3000-my-app.localhost",
                None,
                None,
                &[
                    "theme=dark; warren_preview_3000_my-app=t1",
                    "warren_preview_3000_my-app=\"t2\""
                ]
            ),
            req(
                3000,
                "my-app",
                Credential::Cookie(vec!["t1".into(), "t2".into()])
            )
        );
    }

    #[test]
    fn a_cookie_for_another_preview_does_not_turn_a_token_host_into_a_session_host() {
        // A page on a sibling preview set cookies for the parent domain: the victim's token
        // host still reads as the victim with its token.
        let planted = ["warren_preview_3000_victim=x; warren_preview_3000_victim-abc=y"];
        assert_eq!(
            parse(
                "3000-victim-tokentokentokentoken1.localhost",
                None,
                None,
                &planted
            ),
            req(
                3000,
                "victim",
                Credential::HostToken("tokentokentokentoken1".into())
            )
        );
    }

    #[test]
    fn preview_cookies_and_the_token_parameter_are_taken_out() {
        assert_eq!(
            cookies_without_preview("a=1; warren_preview_80_x=t; b=2").as_deref(),
            Some("a=1; b=2")
        );
        assert_eq!(cookies_without_preview("warren_preview_80_x=t"), None);
        assert_eq!(
            query_without(Some("warren_preview_token=t&q=1&&x"), TOKEN_QUERY).as_deref(),
            Some("q=1&x")
        );
        assert_eq!(
            query_without(Some("warren_preview_token=t"), TOKEN_QUERY),
            None
        );
        // Spelt with escapes, the parameter is still found, so it is still taken out.
        let escaped = Some("warren%5Fpreview_token=t&q=1");
        assert_eq!(query_value(escaped, TOKEN_QUERY).as_deref(), Some("t"));
        assert_eq!(query_without(escaped, TOKEN_QUERY).as_deref(), Some("q=1"));
        assert!(sets_preview_cookie(
            " Warren_Preview_80_x=t; Domain=localhost"
        ));
        assert!(!sets_preview_cookie("session=warren_preview_80"));
    }

    fn input<'a>(
        credential: &'a Credential,
        navigation: bool,
        query: Option<&'a str>,
    ) -> StepInput<'a> {
        StepInput {
            credential,
            port: 3000,
            sandbox: "my-app",
            safe_method: true,
            top_level_navigation: navigation,
            host: "3000-my-app-tok.localhost:7070",
            scheme: "http",
            path: "/page",
            query,
        }
    }

    #[test]
    fn a_page_load_trades_the_token_for_a_host_only_cookie() {
        let host_token = Credential::HostToken("tok".into());
        assert_eq!(
            next_step(input(&host_token, true, Some("q=1"))),
            Step::ToSession {
                location: "http://3000-my-app.localhost:7070/page?q=1&warren_preview_token=tok"
                    .into()
            }
        );
        // Programs and frames keep the token host.
        assert_eq!(next_step(input(&host_token, false, None)), Step::Proxy);
        let post = StepInput {
            safe_method: false,
            ..input(&host_token, true, None)
        };
        assert_eq!(next_step(post), Step::Proxy);
        let exchange = Credential::Exchange("tok".into());
        let step = next_step(StepInput {
            host: "3000-my-app.localhost:7070",
            ..input(&exchange, true, Some("q=1&warren_preview_token=tok"))
        });
        assert_eq!(
            step,
            Step::SetCookie {
                location: "/page?q=1".into(),
                cookie: "warren_preview_3000_my-app=tok; Path=/; HttpOnly; SameSite=Lax".into()
            }
        );
        let https = next_step(StepInput {
            scheme: "https",
            ..input(&exchange, false, None)
        });
        assert!(matches!(https, Step::SetCookie { cookie, .. } if cookie.ends_with("; Secure")));
        for settled in [
            Credential::Cookie(vec!["tok".into()]),
            Credential::Header("tok".into()),
            Credential::Public,
        ] {
            assert_eq!(next_step(input(&settled, true, None)), Step::Proxy);
        }
    }
}
