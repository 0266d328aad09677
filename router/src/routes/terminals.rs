//! `GET /v1/sandboxes/{id}/terminals/{name}`: a WebSocket on the owner node, translated to
//! the guest's framed terminal stream (binary frames ↔ data, text frames ↔ control), and
//! `DELETE` of a terminal.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::ws::{rejection::WebSocketUpgradeRejection, Message, WebSocket};
use axum::extract::{Path, RawQuery, State, WebSocketUpgrade};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_api::terminal::{
    frame_header, parse_frame_header, FrameKind, TerminalQuery, FRAME_HEADER, GUEST_UPGRADE,
};
use warren_api::{ApiError, ErrorCode};
use warren_node::sandbox::manager::ActivityGuard;
use warren_node::sandbox::manager::Payload;

/// Idle sockets are pinged this often, so proxies in between keep them open.
const PING_EVERY: Duration = Duration::from_secs(20);

fn parse_query(query: Option<&str>) -> Result<TerminalQuery, ApiError> {
    let q: TerminalQuery = serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|e| ApiError::invalid(format!("invalid query string: {e}")))?;
    q.validate()?;
    Ok(q)
}

pub async fn open(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    warren_api::ids::validate_name("terminal", &name)?;
    let q = parse_query(query.as_deref())?;
    let ws = ws.map_err(|e| {
        ApiError::new(
            ErrorCode::UpgradeRequired,
            format!("a terminal is a WebSocket: connect with a WebSocket upgrade ({e})"),
        )
    })?;
    // The guest only needs what it understands; the ticket (if any) stays here.
    let guest_query = serde_urlencoded::to_string(&q).expect("query serializes");
    let guest = state
        .mgr
        .upgrade(
            &id,
            &format!("/terminals/{name}?{guest_query}"),
            GUEST_UPGRADE,
        )
        .await?;
    let activity = state.mgr.activity(&id);
    Ok(ws
        .on_upgrade(move |socket| bridge(socket, guest, activity))
        .into_response())
}

pub async fn close(
    State(state): State<AppState>,
    Path((id, name)): Path<(String, String)>,
) -> ApiResult<Response> {
    warren_api::ids::validate_sandbox_id(&id)?;
    warren_api::ids::validate_name("terminal", &name)?;
    let resp = state
        .mgr
        .forward(
            &id,
            http::Method::DELETE,
            &format!("/terminals/{name}"),
            &http::HeaderMap::new(),
            Payload::Bytes(bytes::Bytes::new()),
        )
        .await?;
    let status = resp.status();
    Ok(status.into_response())
}

/// Copies frames both ways until either side ends; the activity guard keeps the sandbox
/// awake while the socket is open.
async fn bridge(socket: WebSocket, guest: Upgraded, activity: ActivityGuard) {
    let (mut ws_tx, mut ws_rx) = socket.split();
    let (mut g_rx, mut g_tx) = tokio::io::split(TokioIo::new(guest));
    let to_guest = async move {
        while let Some(Ok(msg)) = ws_rx.next().await {
            let (kind, payload): (FrameKind, &[u8]) = match &msg {
                Message::Binary(b) => (FrameKind::Data, b),
                Message::Text(t) => (FrameKind::Control, t.as_bytes()),
                Message::Close(_) => break,
                Message::Ping(_) | Message::Pong(_) => continue,
            };
            let header = frame_header(kind, payload.len());
            if g_tx.write_all(&header).await.is_err() || g_tx.write_all(payload).await.is_err() {
                break;
            }
            let _ = g_tx.flush().await;
        }
        let _ = g_tx.shutdown().await;
    };
    let to_client = async move {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.tick().await;
        loop {
            let mut header = [0u8; FRAME_HEADER];
            let frame = tokio::select! {
                r = g_rx.read_exact(&mut header) => r,
                _ = ping.tick() => {
                    if ws_tx.send(Message::Ping(bytes::Bytes::new())).await.is_err() {
                        return;
                    }
                    continue;
                }
            };
            if frame.is_err() {
                break;
            }
            let Ok((kind, len)) = parse_frame_header(&header) else {
                break;
            };
            let mut payload = vec![0u8; len];
            if g_rx.read_exact(&mut payload).await.is_err() {
                break;
            }
            let msg = match kind {
                FrameKind::Data => Message::Binary(payload.into()),
                FrameKind::Control => match String::from_utf8(payload) {
                    Ok(t) => Message::Text(t.into()),
                    Err(_) => continue,
                },
            };
            if ws_tx.send(msg).await.is_err() {
                return;
            }
        }
        let _ = ws_tx.send(Message::Close(None)).await;
    };
    // Either side ending ends the bridge: a closed socket must release the guest stream.
    tokio::select! {
        _ = to_guest => {}
        _ = to_client => {}
    }
    drop(activity);
}
