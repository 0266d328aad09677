//! `GET /v1/openapi.json` (no key): the document of `warren_api::openapi`, and the test that
//! it lists exactly the routes this router serves (its own table in `routes/mod.rs`, and the
//! operations it lets through to the guest, `validate::classify`).

use axum::response::IntoResponse;

pub async fn document() -> impl IntoResponse {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(warren_api::openapi::document_json);
    (
        [(http::header::CONTENT_TYPE, "application/json")],
        doc.as_str(),
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    /// A route as (lower-case method, segments with `{}` for every parameter).
    type Route = (String, Vec<String>);

    fn segments(path: &str) -> Vec<String> {
        path.trim_matches('/')
            .split('/')
            .map(|s| {
                if s.starts_with('{') {
                    "{}".to_string()
                } else {
                    s.to_string()
                }
            })
            .collect()
    }

    /// The routes of the router's own table (`.route("PATH", get(..).put(..))`), but the
    /// catch-all to the guest, the web page and the cluster's internal join.
    fn router_routes() -> BTreeSet<Route> {
        let src = include_str!("mod.rs");
        let mut out = BTreeSet::new();
        for piece in src.split(".route(").skip(1) {
            let path = piece.split('"').nth(1).expect("a path literal");
            if path.contains("{*rest}")
                || path == "/"
                || path.starts_with("/ui/")
                || path.starts_with("/internal/")
            {
                continue;
            }
            let end = piece.find(".route(").unwrap_or(piece.len());
            let chain = &piece[..end];
            let chain = &chain[..chain
                .find(".merge(")
                .or(chain.find(".layer("))
                .unwrap_or(chain.len())];
            for m in ["get", "put", "post", "delete", "patch"] {
                if chain.contains(&format!("{m}(")) {
                    out.insert((m.to_string(), segments(path)));
                }
            }
        }
        out
    }

    /// The operations `classify` lets through to the guest, under `/v1/sandboxes/{id}/`.
    fn guest_routes() -> BTreeSet<Route> {
        let src = include_str!("validate.rs");
        let body = &src[src.find("pub fn classify").expect("classify")..];
        let body = &body[..body.find("\n}\n").expect("the end of classify")];
        let (files, arms) = body.split_at(body.find("let segs").expect("segments"));
        let mut out = BTreeSet::new();
        for m in ["GET", "PUT", "DELETE", "POST", "PATCH"] {
            if files.contains(&format!("Method::{m} =>")) {
                out.insert((
                    m.to_lowercase(),
                    segments("/v1/sandboxes/{id}/files/{path}"),
                ));
            }
        }
        for arm in arms.split("(&Method::").skip(1) {
            let method = &arm[..arm.find(',').unwrap()];
            let list = &arm[arm.find('[').unwrap() + 1..arm.find(']').unwrap()];
            let mut segs = vec!["v1".to_string(), "sandboxes".to_string(), "{}".to_string()];
            segs.extend(list.split(',').map(|s| {
                let s = s.trim();
                match s.strip_prefix('"') {
                    Some(lit) => lit.trim_end_matches('"').to_string(),
                    None => "{}".to_string(),
                }
            }));
            out.insert((method.to_lowercase(), segs));
        }
        out
    }

    /// Whether a documented route (concrete words where the code has a variable, such as
    /// `wait/{kind}` documented as `wait/log`) is one of the code's.
    fn covers(code: &Route, doc: &Route) -> bool {
        code.0 == doc.0
            && code.1.len() == doc.1.len()
            && code.1.iter().zip(&doc.1).all(|(c, d)| c == "{}" || c == d)
    }

    #[test]
    fn the_document_lists_exactly_the_routes_served() {
        let documented: Vec<Route> = warren_api::openapi::operations()
            .iter()
            .map(|o| (o.method.to_string(), segments(o.path)))
            .collect();
        let mut served = router_routes();
        served.extend(guest_routes());
        served.insert(("get".into(), segments("/healthz")));
        assert!(
            served.len() > 40,
            "the parse found too few routes: {served:?}"
        );
        let undocumented: Vec<&Route> = served
            .iter()
            .filter(|r| !documented.iter().any(|d| covers(r, d)))
            .collect();
        assert!(
            undocumented.is_empty(),
            "served but not documented: {undocumented:?}"
        );
        let unserved: Vec<&Route> = documented
            .iter()
            .filter(|d| !served.iter().any(|r| covers(r, d)))
            .collect();
        assert!(
            unserved.is_empty(),
            "documented but not served: {unserved:?}"
        );
    }
}
