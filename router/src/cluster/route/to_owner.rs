//! Sending a request to the sandbox's owner on another node, following it through a
//! failover when that owner cannot be reached.

use super::*;
/// Where a forwarded request ended.
pub(super) enum Followed {
    /// The owner (or a node it failed over to) answered, or routing gave up.
    Answered(Response),
    /// The sandbox failed over to this node: the request is back, for routing to decide
    /// again (under the lease).
    CameHere(Request),
}

/// Sends a request for a sandbox placed on another node to its owner. An owner that cannot
/// be reached (it died, or is cut off) is waited for, bounded by [`failover_wait`]: it
/// answers again, or the leader fails its sandboxes over and the request follows them — a
/// client sees one slow answer instead of a string of 503s. Nothing was sent to an
/// unreachable owner, so the request goes out once.
pub(super) async fn route_to(
    st: &AppState,
    id: &str,
    owner: NodeId,
    epoch: u64,
    req: Request,
) -> Followed {
    let cl = &st.cluster.cluster;
    let deadline = tokio::time::Instant::now() + failover_wait(st);
    let (mut owner, mut epoch, mut req) = (owner, epoch, req);
    loop {
        if owner == cl.id {
            return Followed::CameHere(req);
        }
        let why = match try_forward_to_owner(st, id, owner, with_epoch(req, epoch)).await {
            Ok(resp) => return Followed::Answered(resp),
            Err((back, why)) => {
                req = back;
                why
            }
        };
        if tokio::time::Instant::now() >= deadline {
            return Followed::Answered(err(ApiError::new(ErrorCode::Unavailable, why)));
        }
        // Woken by any change of the state (a failover commits a move), at the latest in a
        // moment to try the owner again.
        let wait = deadline
            .saturating_duration_since(tokio::time::Instant::now())
            .min(Duration::from_millis(500));
        cl.wait_for(wait, |s| {
            s.placements
                .get(id)
                .is_none_or(|p| p.node != owner || p.epoch != epoch)
        })
        .await;
        match settled_placement(st, id).await {
            Ok(Some(p)) => (owner, epoch) = (p.node, p.epoch),
            Ok(None) => {
                return Followed::Answered(err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("sandbox {id} was deleted while its owner could not be reached; retry"),
                )))
            }
            Err(r) => return Followed::Answered(r),
        }
    }
}

/// How long a request waits for an unreachable owner: until the failure detector called it
/// down and its last lease ran out, then a few seconds for the failover to commit and the new
/// owner to take the sandbox over.
pub(super) fn failover_wait(st: &AppState) -> Duration {
    let cfg = &st.cluster.cluster.cfg;
    cfg.down_after.max(cfg.lease + cfg.lease_margin) + Duration::from_secs(5)
}

/// Forwards a request for sandbox `id` to its owner, another node (503 when it left the
/// cluster, is down or cannot be reached).
pub(crate) async fn forward_to_owner(
    st: &AppState,
    id: &str,
    owner: NodeId,
    req: Request,
) -> Response {
    match try_forward_to_owner(st, id, owner, req).await {
        Ok(resp) => resp,
        Err((_, why)) => err(ApiError::new(ErrorCode::Unavailable, why)),
    }
}

/// Like [`forward_to_owner`], but gives the request back (with why) when it never left this
/// node: the owner left the cluster, is down, or could not be reached.
pub(super) async fn try_forward_to_owner(
    st: &AppState,
    id: &str,
    owner: NodeId,
    req: Request,
) -> Result<Response, (Request, String)> {
    let cl = &st.cluster.cluster;
    let Some(node) = cl.read(|s| s.nodes.get(&owner).cloned()) else {
        return Err((req, format!("the owner of {id} left the cluster")));
    };
    if node.state == NodeState::Down {
        return Err((
            req,
            format!("the owner of {id}, node {}, is down", node.name),
        ));
    }
    match try_forward(st, &node, req).await {
        Forwarded::Response(r) => Ok(r),
        Forwarded::Unreachable(back, why) => Err((
            back,
            format!("the sandbox's node {} cannot be reached: {why}", node.name),
        )),
    }
}

pub(super) fn with_epoch(mut req: Request, epoch: u64) -> Request {
    req.headers_mut()
        .insert(HEADER_EPOCH, http::HeaderValue::from(epoch));
    req
}
