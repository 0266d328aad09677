//! `/terminals…` of the guest: list, attach (an HTTP upgrade to the framed terminal stream
//! of `warren_api::terminal`), and close.

use crate::http::{self, Request, Response};
use crate::server::Guest;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use warren_api::terminal::{TerminalQuery, GUEST_UPGRADE};
use warren_api::{ApiError, ErrorCode};

pub fn list(g: &Guest) -> Response {
    http::json(200, &serde_json::json!({ "terminals": g.terminals.list() }))
}

pub async fn open(g: Arc<Guest>, name: &str, mut req: Request) -> Result<Response, ApiError> {
    let upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(GUEST_UPGRADE));
    if !upgrade {
        return Err(ApiError::new(
            ErrorCode::UpgradeRequired,
            format!("a terminal is a stream: send Upgrade: {GUEST_UPGRADE}"),
        ));
    }
    let q: TerminalQuery = http::query(&req)?;
    let term = g.terminals.open(name, &q)?;
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            crate::terminal::attach(term, q.since, TokioIo::new(upgraded)).await;
        }
    });
    Ok(hyper::Response::builder()
        .status(101)
        .header(hyper::header::CONNECTION, "upgrade")
        .header(hyper::header::UPGRADE, GUEST_UPGRADE)
        .body(http::full(bytes::Bytes::new()))
        .expect("valid response"))
}

pub async fn close(g: &Guest, name: &str) -> Result<Response, ApiError> {
    g.terminals.close(name).await?;
    Ok(http::empty(204))
}
