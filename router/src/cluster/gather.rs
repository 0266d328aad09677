//! Asking every other node that is not down for its part of a cluster-wide answer (the
//! sandbox list, usage, keys), over the peers' forwarding path, as the client's principal.

use super::forward::forward;
use crate::state::AppState;
use http_body_util::BodyExt;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::NodeState;

/// `GET path_and_query` on every other node not down; each answer parsed as `T`. Any node
/// that does not answer fails the whole (`what` names the part in the error).
pub async fn from_other_nodes<T: serde::de::DeserializeOwned>(
    state: &AppState,
    path_and_query: &str,
    principal: &crate::auth::Principal,
    what: &str,
) -> Result<Vec<T>, ApiError> {
    let cl = &state.cluster.cluster;
    let others: Vec<_> = cl.read(|s| {
        s.nodes
            .values()
            .filter(|n| n.id != cl.id && n.state != NodeState::Down)
            .cloned()
            .collect()
    });
    let calls = others.iter().map(|node| {
        let r = http::Request::get(path_and_query)
            .header(
                crate::auth::principal::HEADER_PRINCIPAL,
                principal.to_header(),
            )
            .body(axum::body::Body::empty())
            .expect("valid request");
        async move {
            let resp = forward(state, node, r).await;
            if !resp.status().is_success() {
                return Err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("node {} did not send {what}", node.name),
                ));
            }
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
                .to_bytes();
            serde_json::from_slice::<T>(&bytes).map_err(|e| ApiError::internal(e.to_string()))
        }
    });
    futures_util::future::join_all(calls)
        .await
        .into_iter()
        .collect()
}
