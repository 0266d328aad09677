//! Routing a sandbox request to its owner.
//!
//! The committed placement names the owner. A request for an id with no placement that may
//! create the sandbox first commits one (compare-and-set on epoch 0, so concurrent creators
//! entering different nodes agree on a single owner), chosen by rendezvous hashing over the
//! up nodes of the requested region. The owner serves a request only while its own applied
//! state names it and it holds the lease; anyone else forwards to the owner. Preview URLs
//! take the same path (waiting for a move, lease, placement checks) with the preview proxy
//! in place of the API router.

use super::forward::{try_forward, Forwarded};
use super::route_decision::{decide, placed, Route, RouteInput};
use super::{cluster_error, FromPeer, HEADER_EPOCH};
use crate::auth::Principal;
use crate::error::ApiErrorResponse;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::Method;
use http_body_util::BodyExt;
use std::time::Duration;
use warren_api::preview::PreviewRequest;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::placement::{choose_owner_excluding, choose_owner_for_new};
use warren_consensus::state::{Size, QUOTA_EXCEEDED};
use warren_consensus::{Command, CommandResult, NodeId, NodeState, Placement, PlacementState};
use warren_control::copies::LocalCopy;
use warren_control::handoff::handoff_of;
use warren_control::{fence, migrate};
use warren_node::safety::Guarantee;

/// What serves a request once it reached the sandbox's owner.
pub(crate) enum Serve {
    /// The API's own routes.
    Api(Next),
    /// A preview URL: proxied to the port inside the sandbox.
    Preview(PreviewRequest),
}

impl Serve {
    async fn run(self, st: &AppState, req: Request) -> Response {
        match self {
            Serve::Api(next) => next.run(req).await,
            Serve::Preview(t) => crate::preview::serve(st, &t, req).await,
        }
    }

    fn is_api(&self) -> bool {
        matches!(self, Serve::Api(_))
    }
}

/// The sandbox id of `/v1/sandboxes/{id}` and `/v1/sandboxes/{id}/…`, and whether the path is
/// the sandbox itself.
fn sandbox_of(path: &str) -> Option<(&str, bool)> {
    let rest = path.strip_prefix("/v1/sandboxes/")?;
    match rest.split_once('/') {
        Some((id, _)) => Some((id, false)),
        None => Some((rest, true)),
    }
}

fn err(e: ApiError) -> Response {
    ApiErrorResponse(e).into_response()
}

/// How long a request waits for a sandbox that is moving between nodes.
const MOVE_WAIT: Duration = Duration::from_secs(60);

/// Largest sandbox-creating PUT body read here before it goes on.
const MAX_PUT_BODY: usize = 1024 * 1024;

pub async fn route_sandbox(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some((id, whole)) = sandbox_of(req.uri().path()) else {
        return next.run(req).await;
    };
    let id = id.to_string();
    if let Err(e) = warren_api::ids::validate_sandbox_id(&id) {
        return err(e);
    }
    let cl = &st.cluster.cluster;
    let Some(who) = req.extensions().get::<Principal>().cloned() else {
        return err(ApiError::internal(
            "a sandbox call reached routing unauthenticated",
        ));
    };
    let method = req.method().clone();
    let from_peer = req.extensions().get::<FromPeer>().is_some();
    let sent_epoch = peer_epoch(&req);
    let read_or_delete = whole && (method == Method::GET || method == Method::DELETE);
    let mut caught_up = false;
    // Every wait below (a move to end, a read barrier) is bounded by this.
    let deadline = tokio::time::Instant::now() + MOVE_WAIT;
    loop {
        let placement = cl.read(|s| s.placements.get(&id).cloned());
        let route = decide(&RouteInput {
            me: cl.id,
            placement: placement.as_ref(),
            who: &who,
            from_peer,
            sent_epoch,
            read_or_delete,
            caught_up,
        });
        match route {
            Route::AwaitMove => {
                if let Err(r) = await_move(&st, &id, deadline).await {
                    return r;
                }
            }
            Route::AwaitCatchUp => {
                // "Absent" only once this node applied everything committed before this
                // request (a sandbox created meanwhile is not 404).
                if let Err(e) = cl.read_barrier(Duration::from_secs(5)).await {
                    return err(ApiError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "this node cannot tell whether sandbox {id} exists right now ({e}); retry"
                        ),
                    ));
                }
                caught_up = true;
            }
            Route::Foreign { owner } => return foreign(&id, &method, whole, &owner),
            Route::ServeOwned { epoch } => {
                return serve_owned(&st, &id, epoch, req, Serve::Api(next)).await
            }
            Route::Forward { node, epoch } => {
                return route_to(&st, &id, node, epoch, req, Serve::Api(next)).await
            }
            Route::RefuseStale => return owned_elsewhere(&id),
            Route::LocalOrAbsent => return local_or_absent(&st, &id, req, next).await,
            Route::ServeAsSent => return next.run(req).await,
            Route::Place => {
                let (req, region, size, replay) = match precheck(req, &id, whole).await {
                    Ok(x) => x,
                    Err(r) => return r,
                };
                let region = region.unwrap_or_else(|| cl.cfg.region.clone());
                let new = NewSandbox {
                    id: &id,
                    region: &region,
                    who: &who,
                    size,
                    replay,
                };
                return place_and_route(&st, new, req, next).await;
            }
        }
    }
}

/// The answer for another tenant's sandbox: what an absent one gets (404; a delete, 204),
/// so that a key learns nothing of what other tenants hold beyond that an id cannot be
/// created (ids are one namespace).
fn foreign(id: &str, method: &Method, whole: bool, owner: &str) -> Response {
    tracing::info!(sandbox_id = %id, owner, "a call for another tenant's sandbox answered as absent");
    if whole && method == Method::DELETE {
        return http::StatusCode::NO_CONTENT.into_response();
    }
    err(ApiError::new(
        ErrorCode::SandboxNotFound,
        format!("sandbox {id} not found"),
    ))
}

/// Routes a preview URL's request like a request for its sandbox. A sandbox that was never
/// placed (or is unknown) is answered by the preview proxy here, which refuses its token.
pub(crate) async fn route_preview(st: &AppState, t: PreviewRequest, req: Request) -> Response {
    let id = t.sandbox.clone();
    match settled_placement(st, &id).await {
        Ok(Some(p)) => route_placed(st, &id, p, req, Serve::Preview(t)).await,
        Ok(None) => Serve::Preview(t).run(st, req).await,
        Err(r) => r,
    }
}

/// The sandbox's placement; while it is moving to another node, waits (bounded) for the move
/// to end and answers where it went.
async fn settled_placement(st: &AppState, id: &str) -> Result<Option<Placement>, Response> {
    let cl = &st.cluster.cluster;
    let placement = cl.read(|s| s.placements.get(id).cloned());
    if !placement
        .as_ref()
        .is_some_and(|p| p.state == PlacementState::Migrating)
    {
        return Ok(placement);
    }
    await_move(st, id, tokio::time::Instant::now() + MOVE_WAIT).await?;
    Ok(cl.read(|s| s.placements.get(id).cloned()))
}

/// Waits until sandbox `id` is not moving between nodes (at the latest until `deadline`).
async fn await_move(
    st: &AppState,
    id: &str,
    deadline: tokio::time::Instant,
) -> Result<(), Response> {
    let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
    let moved = st
        .cluster
        .cluster
        .wait_for(wait, |s| {
            s.placements
                .get(id)
                .is_none_or(|p| p.state != PlacementState::Migrating)
        })
        .await;
    if !moved {
        return Err(err(ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} is moving between nodes; retry"),
        )));
    }
    Ok(())
}

/// The placement epoch a peer sent a request under: the one its entry node committed.
fn peer_epoch(req: &Request) -> Option<u64> {
    req.headers()
        .get(HEADER_EPOCH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
}

fn owned_elsewhere(id: &str) -> Response {
    err(ApiError::new(
        ErrorCode::Unavailable,
        format!("sandbox {id} is owned by another node; retry"),
    ))
}

/// Routes a request for a sandbox placed (and not moving) by [`placed`]: served here,
/// forwarded to the owner, or refused when a stale peer sent it.
async fn route_placed(
    st: &AppState,
    id: &str,
    p: Placement,
    req: Request,
    serve: Serve,
) -> Response {
    let from_peer = req.extensions().get::<FromPeer>().is_some();
    match placed(
        st.cluster.cluster.id,
        p.node,
        p.epoch,
        from_peer,
        peer_epoch(&req),
    ) {
        Route::ServeOwned { epoch } => serve_owned(st, id, epoch, req, serve).await,
        Route::Forward { node, epoch } => route_to(st, id, node, epoch, req, serve).await,
        _ => owned_elsewhere(id),
    }
}

/// A request for an id placed nowhere yet: what placing it needs.
struct NewSandbox<'a> {
    id: &'a str,
    region: &'a str,
    who: &'a Principal,
    size: Size,
    /// The request again, when its body was read whole (`precheck`): it can be sent to
    /// another node after the chosen one refused it for want of room.
    replay: Option<Replay>,
}

/// A request kept whole, to be sent again.
struct Replay {
    parts: http::request::Parts,
    body: bytes::Bytes,
}

impl Replay {
    fn request(&self) -> Request {
        Request::from_parts(self.parts.clone(), Body::from(self.body.clone()))
    }
}

/// Pure: whether an answer says its node refused to make the sandbox for want of room
/// (503 `CAPACITY_EXHAUSTED`), so that the next rendezvous choice may take it.
fn refused_for_room(status: http::StatusCode, body: &[u8]) -> bool {
    status == http::StatusCode::SERVICE_UNAVAILABLE
        && serde_json::from_slice::<ApiError>(body)
            .is_ok_and(|e| e.code == ErrorCode::CapacityExhausted)
}

/// Nodes a new sandbox is offered to at most (one that cannot be reached, or refuses it for
/// want of room, passes it on).
const ATTEMPTS: usize = 3;

/// The largest refusal body read to tell why a node refused (they are a few hundred bytes).
const REFUSAL_BODY_MAX: usize = 64 * 1024;

/// Commits a placement for a new id and sends the request to the chosen node. If that node
/// cannot be reached before anything was sent to it (it just died and is not marked down
/// yet), it never saw the sandbox: the placement moves to the next candidate (compare-and-set
/// on the epoch just committed) and the request follows. If the node refuses it for want of
/// room (its own admission: a size larger than what it announced room for, or room gone
/// within the second before it said so), it gives the placement up, and a request that can
/// be sent again is placed on the next candidate.
async fn place_and_route(
    st: &AppState,
    new: NewSandbox<'_>,
    mut req: Request,
    next: Next,
) -> Response {
    let NewSandbox {
        id,
        region,
        who,
        size,
        replay,
    } = new;
    let cl = &st.cluster.cluster;
    let mut excluded: Vec<NodeId> = Vec::new();
    let mut expected_epoch = 0;
    for attempt in 0..ATTEMPTS {
        // A node at its sandbox limit, or one that said it is full, is passed over for the
        // next rendezvous choice (when every one said full, the first under its limit
        // decides for itself); when none is left, whether any was up at all says why.
        let choice = cl.read(|s| {
            choose_owner_for_new(s, id, region, &excluded)
                .ok_or_else(|| choose_owner_excluding(s, id, region, &excluded).is_some())
        });
        let choice = match choice {
            Ok(node) => node,
            Err(any_up) => {
                let why = if any_up {
                    "every node that is up runs its maximum of sandboxes"
                } else {
                    "no node is up to take a new sandbox"
                };
                return err(ApiError::new(ErrorCode::CapacityExhausted, why));
            }
        };
        let cmd = Command::Place {
            sandbox: id.to_string(),
            node: choice,
            expected_epoch,
            tenant: Some(who.tenant.clone()),
            size: Some(size),
        };
        let p = match cl.propose(cmd).await {
            Ok(CommandResult::Placement {
                placement: Some(p),
                applied: true,
            }) => p,
            // Placed concurrently by someone else: follow the winner (if it is ours to see).
            Ok(CommandResult::Placement {
                placement: Some(p),
                applied: false,
            }) => {
                if !who.may_touch(p.tenant()) {
                    return foreign(id, req.method(), false, p.tenant());
                }
                return route_to(st, id, p.node, p.epoch, req, Serve::Api(next)).await;
            }
            Ok(CommandResult::Rejected { reason }) if reason.starts_with(QUOTA_EXCEEDED) => {
                return err(ApiError::new(ErrorCode::Forbidden, reason)
                    .with_details(serde_json::json!({"tenant": who.tenant, "sandbox": id})))
            }
            Ok(other) => {
                return err(ApiError::internal(format!(
                    "placement of {id} gave {other:?}"
                )))
            }
            Err(e) => return err(cluster_error(e)),
        };
        let answer = if p.node == cl.id {
            serve_owned(st, id, p.epoch, req, Serve::Api(next.clone())).await
        } else {
            let Some(node) = cl.read(|s| s.nodes.get(&p.node).cloned()) else {
                return err(ApiError::internal(format!(
                    "placement of {id} names an unknown node"
                )));
            };
            match try_forward(st, &node, with_epoch(req, p.epoch)).await {
                Forwarded::Response(r) => r,
                Forwarded::Unreachable(back, why) => {
                    tracing::warn!(sandbox_id = %id, node = %node.name, %why, "new sandbox's node is unreachable; placing it elsewhere");
                    excluded.push(p.node);
                    expected_epoch = p.epoch;
                    req = back;
                    continue;
                }
            }
        };
        let Some(again) = replay.as_ref() else {
            return answer;
        };
        if answer.status() != http::StatusCode::SERVICE_UNAVAILABLE {
            return answer;
        }
        let (parts, body) = answer.into_parts();
        let body = match http_body_util::Limited::new(body, REFUSAL_BODY_MAX)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(e) => {
                return err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("the answer for new sandbox {id} was cut: {e}"),
                ))
            }
        };
        if !refused_for_room(parts.status, &body) {
            return Response::from_parts(parts, Body::from(body));
        }
        // The refusing node gave the placement up before it answered; once that is applied
        // here, the next candidate is placed (compare-and-set on "placed nowhere").
        cl.wait_for(Duration::from_secs(2), |s| {
            s.placements.get(id).is_none_or(|q| q.epoch != p.epoch)
        })
        .await;
        excluded.push(p.node);
        // The refusal stands when the id is still placed (not given up in time, or placed
        // anew by someone else meanwhile), or when no other node could take it (its words
        // say why).
        let still_placed = cl.read(|s| s.placements.contains_key(id));
        let another = cl.read(|s| choose_owner_for_new(s, id, region, &excluded).is_some());
        if still_placed || !another || attempt + 1 == ATTEMPTS {
            return Response::from_parts(parts, Body::from(body));
        }
        tracing::info!(sandbox_id = %id, node = p.node, "new sandbox refused for want of room; placing it on the next candidate");
        expected_epoch = 0;
        req = again.request();
    }
    err(ApiError::new(
        ErrorCode::Unavailable,
        format!("no node could take sandbox {id}"),
    ))
}

/// Sends a request for a placed sandbox to its owner (or serves it here). An owner that
/// cannot be reached (it died, or is cut off) is waited for, bounded by [`failover_wait`]:
/// it answers again, or the leader fails its sandboxes over and the request follows them —
/// a client sees one slow answer instead of a string of 503s. Nothing was sent to an
/// unreachable owner, so the request goes out once.
async fn route_to(
    st: &AppState,
    id: &str,
    owner: NodeId,
    epoch: u64,
    req: Request,
    serve: Serve,
) -> Response {
    let cl = &st.cluster.cluster;
    let deadline = tokio::time::Instant::now() + failover_wait(st);
    let (mut owner, mut epoch, mut req) = (owner, epoch, req);
    loop {
        if owner == cl.id {
            return serve_owned(st, id, epoch, req, serve).await;
        }
        let why = match try_forward_to_owner(st, id, owner, with_epoch(req, epoch)).await {
            Ok(resp) => return resp,
            Err((back, why)) => {
                req = back;
                why
            }
        };
        if tokio::time::Instant::now() >= deadline {
            return err(ApiError::new(ErrorCode::Unavailable, why));
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
                return err(ApiError::new(
                    ErrorCode::Unavailable,
                    format!("sandbox {id} was deleted while its owner could not be reached; retry"),
                ))
            }
            Err(r) => return r,
        }
    }
}

/// How long a request waits for an unreachable owner: until the failure detector called it
/// down and its last lease ran out, then a few seconds for the failover to commit and the new
/// owner to take the sandbox over.
fn failover_wait(st: &AppState) -> Duration {
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
async fn try_forward_to_owner(
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

fn with_epoch(mut req: Request, epoch: u64) -> Request {
    req.headers_mut()
        .insert(HEADER_EPOCH, http::HeaderValue::from(epoch));
    req
}

/// Serves here once this node's applied state shows the placement (epoch at least `epoch`)
/// naming it. The lease comes first: a node that just restarted catches up on what it
/// missed before it trusts its own view (the sandbox may have moved meanwhile; then a
/// request that entered here follows it).
async fn serve_owned(st: &AppState, id: &str, epoch: u64, req: Request, serve: Serve) -> Response {
    let cl = &st.cluster.cluster;
    let me = cl.id;
    if !cl.wait_lease(Duration::from_secs(3)).await {
        return no_lease();
    }
    let current = |s: &warren_consensus::ClusterState| {
        s.placements
            .get(id)
            .filter(|p| p.epoch >= epoch)
            .map(|p| (p.node, p.epoch, p.state))
    };
    cl.wait_for(Duration::from_secs(3), |s| current(s).is_some())
        .await;
    match cl.read(current) {
        Some((node, _, PlacementState::Active)) if node == me => {
            serve_local(st, id, req, serve).await
        }
        Some((node, now, _)) if node != me && req.extensions().get::<FromPeer>().is_none() => {
            forward_to_owner(st, id, node, with_epoch(req, now)).await
        }
        _ => err(ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} is not placed on this node (yet); retry"),
        )),
    }
}

fn no_lease() -> Response {
    err(ApiError::new(
        ErrorCode::Unavailable,
        "this node has lost contact with the cluster majority and does not serve its sandboxes until it is back",
    ))
}

/// Serves on this node, if it holds the lease; forgets the placement after a delete.
async fn serve_local(st: &AppState, id: &str, req: Request, serve: Serve) -> Response {
    let cl = &st.cluster.cluster;
    // Just after a restart or an election the lease takes a moment to come back, and the
    // fence a moment more to see it and thaw this node's sandboxes.
    if !cl.wait_lease(Duration::from_secs(3)).await
        || !st
            .mgr
            .safety()
            .wait_holds(Guarantee::Lease, Duration::from_secs(3))
            .await
    {
        return no_lease();
    }
    let api = serve.is_api();
    let delete = api
        && req.method() == Method::DELETE
        && sandbox_of(req.uri().path()).is_some_and(|(_, whole)| whole);
    // Handed to this node and not taken over yet (the migration loop does it within a
    // second): do it now, so the request finds the sandbox. A delete need not bring it
    // back first: forgetting the placement is all that is left to do.
    if delete && st.mgr.get(id).is_none() {
        // Still through the manager: it refuses a quarantined record and removes any
        // container of the id left in Docker.
        if let Err(e) = st.mgr.delete(id).await {
            return err(e);
        }
        return match unplace(st, id).await {
            Ok(()) => http::StatusCode::NO_CONTENT.into_response(),
            Err(e) => err(e),
        };
    }
    // A copy left from an earlier time this node owned the sandbox: the cluster's recovery
    // point is newer. It is set aside (saved as a conflict snapshot) before anything is
    // served; while that cannot be done, nothing is.
    let control = st.control();
    if fence::judge_copy(&control, id) == LocalCopy::Stale
        && !fence::discard_taken_over(&control, id).await
    {
        return err(ApiError::new(
            ErrorCode::Unavailable,
            format!("this node holds an outdated copy of sandbox {id} that it cannot set aside yet (its conflict snapshot cannot be written); retry"),
        ));
    }
    if st.mgr.get(id).is_none() {
        let handoff = cl.read(|s| {
            s.placements
                .get(id)
                .filter(|p| p.node == cl.id)
                .and_then(|p| handoff_of(p).map(|h| (h, p.owner_since)))
        });
        if let Some((h, since)) = handoff {
            if let Err(e) = st.mgr.take_over(id, &h, since).await {
                return err(e);
            }
        }
    }
    // Counted as in flight from here, then checked once more: a move that began meanwhile
    // either sees this request (and waits for it) or this request sees the move.
    let in_flight = st.mgr.in_flight(id);
    let moving = cl.read(|s| {
        s.placements
            .get(id)
            .is_some_and(|p| p.node != cl.id || p.state != PlacementState::Active)
    });
    if moving {
        return err(ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} is moving between nodes; retry"),
        ));
    }
    let resp = serve.run(st, req).await;
    drop(in_flight);
    if api && !delete && resp.status().is_success() {
        migrate::stamp_new_copy(&control, id).await;
        // A sandbox created by this request is recoverable elsewhere before it is answered.
        migrate::publish_first_handoff(&control, id).await;
    }
    if delete && resp.status().is_success() {
        // Deleted here; answered as deleted only once the cluster forgot it too (or its
        // recovery point would bring it back at the next request).
        if let Err(e) = unplace(st, id).await {
            return err(e);
        }
    }
    resp
}

/// Commits that `id` is gone (its placement removed), then deletes the recovery point the
/// placement held. A retryable error when the cluster cannot commit: the DELETE is retried.
async fn unplace(st: &AppState, id: &str) -> Result<(), ApiError> {
    let cl = &st.cluster.cluster;
    let Some((epoch, recovery_point)) = cl.read(|s| {
        s.placements
            .get(id)
            .map(|p| (p.epoch, p.handoff.as_ref().and_then(|h| h.snapshot.clone())))
    }) else {
        return Ok(());
    };
    if let Err(e) = cl
        .propose(Command::Unplace {
            sandbox: id.to_string(),
            epoch,
        })
        .await
    {
        tracing::warn!(sandbox_id = %id, error = %e, "a deleted sandbox's placement was not forgotten");
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} was deleted on its node, but the cluster could not record it ({e}); retry the DELETE"),
        ));
    }
    let gone = cl
        .wait_for(Duration::from_secs(3), |s| !s.placements.contains_key(id))
        .await;
    if !gone {
        // The epoch moved on between the read and the commit (a move began): not deleted.
        return Err(ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} changed hands while it was deleted; retry the DELETE"),
        ));
    }
    st.mgr.retire_replaced(id, recovery_point, "").await;
    Ok(())
}

/// GET or DELETE of an id without placement: it exists nowhere (a sandbox of a node that
/// predates the cluster is still answered locally).
async fn local_or_absent(st: &AppState, id: &str, req: Request, next: Next) -> Response {
    if st.mgr.get(id).is_some() {
        return serve_local(st, id, req, Serve::Api(next)).await;
    }
    if req.method() == Method::DELETE {
        return http::StatusCode::NO_CONTENT.into_response();
    }
    err(ApiError::new(
        ErrorCode::SandboxNotFound,
        format!("sandbox {id} not found"),
    ))
}

/// The size a sandbox made with `req` (or with defaults) has, for its tenant's quota.
fn size_of(req: Option<&warren_api::sandbox::CreateSandboxRequest>) -> Result<Size, ApiError> {
    let r = warren_api::sandbox::Resources::resolve(
        req.and_then(|r| r.instance_type.as_deref()),
        req.and_then(|r| r.resources.as_ref()),
    )?;
    Ok(Size {
        millicpus: warren_api::tenants::millicpus(r.cpus),
        memory_mb: r.memory_mb,
    })
}

/// Before a placement is committed for a new id: the request must be valid, so that bad
/// input never leaves a placement (or a container) behind. Returns the request with its body
/// restored, the region hint of a PUT, and the new sandbox's size.
async fn precheck(
    req: Request,
    id: &str,
    whole: bool,
) -> Result<(Request, Option<String>, Size, Option<Replay>), Response> {
    use crate::routes::validate::{classify, BodyKind};
    let method = req.method().clone();
    let rest = if whole {
        None
    } else {
        let path = req.uri().path();
        Some(
            path[path
                .find(&format!("/{id}/"))
                .map(|i| i + id.len() + 2)
                .unwrap_or(path.len())..]
                .to_string(),
        )
    };
    let defaults = size_of(None).map_err(err)?;
    let check = match &rest {
        None if method == Method::PUT => None,
        None => return Ok((req, None, defaults, None)),
        Some(rest) => match classify(&method, rest, req.uri().query()) {
            Ok(BodyKind::Json(check)) => Some(check),
            Ok(_) => return Ok((req, None, defaults, None)),
            Err(e) => return Err(err(e)),
        },
    };
    let (parts, body) = req.into_parts();
    let bytes = match http_body_util::Limited::new(body, MAX_PUT_BODY * 32)
        .collect()
        .await
    {
        Ok(c) => c.to_bytes(),
        Err(e) => {
            return Err(err(ApiError::invalid(format!(
                "cannot read the request body: {e}"
            ))))
        }
    };
    let (region, size) = match check {
        Some(check) => {
            check(&bytes).map_err(err)?;
            (None, defaults)
        }
        None => {
            let create: warren_api::sandbox::CreateSandboxRequest =
                warren_api::error::parse_json(&bytes).map_err(err)?;
            create.validate().map_err(err)?;
            let size = size_of(Some(&create)).map_err(err)?;
            (create.region, size)
        }
    };
    let replay = Replay {
        parts: parts.clone(),
        body: bytes.clone(),
    };
    Ok((
        Request::from_parts(parts, Body::from(bytes)),
        region,
        size,
        Some(replay),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_refusal_for_want_of_room_sends_a_new_sandbox_on() {
        let body = |code| ApiError::new(code, "x").to_json().into_bytes();
        let unavailable = http::StatusCode::SERVICE_UNAVAILABLE;
        assert!(refused_for_room(
            unavailable,
            &body(ErrorCode::CapacityExhausted)
        ));
        assert!(!refused_for_room(
            unavailable,
            &body(ErrorCode::Unavailable)
        ));
        assert!(!refused_for_room(unavailable, b"not json"));
        assert!(!refused_for_room(
            http::StatusCode::OK,
            &body(ErrorCode::CapacityExhausted)
        ));
    }

    #[test]
    fn sandbox_paths() {
        assert_eq!(sandbox_of("/v1/sandboxes/abc"), Some(("abc", true)));
        assert_eq!(sandbox_of("/v1/sandboxes/abc/exec"), Some(("abc", false)));
        assert_eq!(sandbox_of("/v1/sandboxes"), None);
        assert_eq!(sandbox_of("/v1/cluster"), None);
    }
}
