//! The web page every node serves at `/` (no credentials needed to load it; it asks for an
//! API key and keeps it in the tab's session storage): the page, its script and styles, and
//! xterm.js bundled from npm at build time.

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use warren_api::{ApiError, ErrorCode};

const INDEX: &str = include_str!("../../../web/src/index.html");
const APP_JS: &str = include_str!("../../../web/src/app.js");
const CONSOLE_JS: &str = include_str!("../../../web/src/console.js");
const APP_CSS: &str = include_str!("../../../web/src/app.css");
const XTERM_JS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xterm.js"));
const XTERM_CSS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xterm.css"));
const FIT_JS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/addon-fit.js"));

const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

fn asset(content_type: &'static str, body: &'static [u8]) -> Response {
    (
        [
            (http::header::CONTENT_TYPE, content_type),
            (http::header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX.as_bytes())
}

pub async fn file(Path(name): Path<String>) -> Response {
    match name.as_str() {
        "app.js" => asset(JS, APP_JS.as_bytes()),
        "console.js" => asset(JS, CONSOLE_JS.as_bytes()),
        "app.css" => asset(CSS, APP_CSS.as_bytes()),
        "xterm.js" => asset(JS, XTERM_JS),
        "xterm.css" => asset(CSS, XTERM_CSS),
        "addon-fit.js" => asset(JS, FIT_JS),
        _ => crate::error::ApiErrorResponse(ApiError::new(
            ErrorCode::NotFound,
            format!("no such file: /ui/{name}"),
        ))
        .into_response(),
    }
}
