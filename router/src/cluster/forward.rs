//! Sending a request to another node: one HTTP/1.1 exchange on one QUIC stream of the pooled
//! connection, bodies streamed both ways (SSE, file uploads and downloads included).

use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::NodeRecord;
use warren_transport::{Peers, StreamKind};

fn unavailable(node: &NodeRecord, what: impl std::fmt::Display) -> Response {
    ApiErrorResponse(ApiError::new(
        ErrorCode::Unavailable,
        format!("the sandbox's node {} cannot be reached: {what}", node.name),
    ))
    .into_response()
}

/// The outcome of a forward.
pub enum Forwarded {
    /// The owner's response (or a 503 if the exchange broke after the request went out).
    Response(Response),
    /// Nothing was sent: the node could not be reached. The request comes back unused.
    Unreachable(axum::extract::Request, String),
}

/// Forwards `req` to `node` and returns its response (status, headers and body unchanged).
pub async fn forward(st: &AppState, node: &NodeRecord, req: axum::extract::Request) -> Response {
    match try_forward(st, node, req).await {
        Forwarded::Response(r) => r,
        Forwarded::Unreachable(_, why) => unavailable(node, why),
    }
}

/// Like [`forward`], but says when the request never left this node. Timed to the owner's
/// response head in `warren_forward_seconds`.
pub async fn try_forward(
    st: &AppState,
    node: &NodeRecord,
    req: axum::extract::Request,
) -> Forwarded {
    let started = std::time::Instant::now();
    let out = exchange(st.cluster.cluster.peers(), node, req).await;
    let outcome = match &out {
        Forwarded::Response(r) if r.status() == http::StatusCode::SERVICE_UNAVAILABLE => {
            "unavailable"
        }
        Forwarded::Response(_) => "response",
        Forwarded::Unreachable(..) => "unreachable",
    };
    st.metrics
        .forwards
        .with_label_values(&[outcome])
        .observe(started.elapsed().as_secs_f64());
    out
}

async fn exchange(peers: &Peers, node: &NodeRecord, req: axum::extract::Request) -> Forwarded {
    let addr = match warren_consensus::rpc::resolve(&node.peer_addr).await {
        Ok(a) => a,
        Err(e) => return Forwarded::Unreachable(req, e.to_string()),
    };
    let (send, recv) = match peers.open(addr, &node.name, StreamKind::Http).await {
        Ok(s) => s,
        Err(e) => return Forwarded::Unreachable(req, e.to_string()),
    };
    let io = TokioIo::new(tokio::io::join(recv, send));
    let (mut sender, conn) = match hyper::client::conn::http1::handshake::<_, Body>(io).await {
        Ok(x) => x,
        Err(e) => return Forwarded::Unreachable(req, e.to_string()),
    };
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "forwarded connection ended");
        }
    });
    // A protocol upgrade (WebSocket) continues both ways once the owner agrees.
    let mut req = req;
    let client_side = req
        .headers()
        .contains_key(http::header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    match sender.send_request(req).await {
        Ok(mut resp) => {
            if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                if let Some(client_side) = client_side {
                    let owner_side = hyper::upgrade::on(&mut resp);
                    tokio::spawn(bridge(client_side, owner_side));
                }
            }
            Forwarded::Response(resp.map(Body::new))
        }
        Err(e) => Forwarded::Response(unavailable(node, e)),
    }
}

/// Copies bytes both ways between the client's upgraded connection and the owner's.
pub(crate) async fn bridge(client: hyper::upgrade::OnUpgrade, owner: hyper::upgrade::OnUpgrade) {
    let (client, owner) = match tokio::try_join!(client, owner) {
        Ok(x) => x,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade through the forwarder failed");
            return;
        }
    };
    let (mut a, mut b) = (TokioIo::new(client), TokioIo::new(owner));
    if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
        tracing::debug!(error = %e, "upgraded stream through the forwarder ended");
    }
}
