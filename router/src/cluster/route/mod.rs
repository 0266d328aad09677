//! Routing a sandbox request to its owner.
//!
//! The committed placement names the owner. A request for an id with no placement that may
//! create the sandbox first commits one (compare-and-set on epoch 0, so concurrent creators
//! entering different nodes agree on a single owner), chosen by rendezvous hashing over the
//! up nodes of the requested region. The owner serves a request only while its own applied
//! state names it and it holds the lease; anyone else forwards to the owner. One pure
//! decision (`route_decision::decide`) says which, and one executor ([`execute`]) carries
//! it out, for API calls and preview URLs alike (the preview proxy in place of the API
//! router).

mod new_sandbox;
mod owned;
mod to_owner;

use new_sandbox::*;
use owned::*;
use to_owner::*;

use super::forward::{try_forward, Forwarded};
use super::route_decision::{decide, Route, RouteInput};
use super::{FromPeer, HEADER_EPOCH};
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

/// How long a request waits for this node's lease before it is refused.
const LEASE_WAIT: Duration = Duration::from_secs(3);

/// Routing rounds of one request at most: each decision to wait or to follow is followed by
/// deciding again; a create racing deletes without end is refused instead of looping.
const MAX_ROUNDS: usize = 16;

pub async fn route_sandbox(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some((id, whole)) = sandbox_of(req.uri().path()) else {
        return next.run(req).await;
    };
    let id = id.to_string();
    if let Err(e) = warren_api::ids::validate_sandbox_id(&id) {
        return err(e);
    }
    let Some(who) = req.extensions().get::<Principal>().cloned() else {
        return err(ApiError::internal(
            "a sandbox call reached routing unauthenticated",
        ));
    };
    let read_or_delete = whole && (req.method() == Method::GET || req.method() == Method::DELETE);
    let asked = Asked {
        who: Some(who),
        whole,
        read_or_delete,
    };
    execute(&st, &id, asked, req, Serve::Api(next)).await
}

/// Routes a preview URL's request like a request for its sandbox (it never creates one; no
/// read barrier for an unknown sandbox: the preview proxy refuses its token).
pub(crate) async fn route_preview(st: &AppState, t: PreviewRequest, req: Request) -> Response {
    let id = t.sandbox.clone();
    let asked = Asked {
        who: None,
        whole: false,
        read_or_delete: true,
    };
    execute(st, &id, asked, req, Serve::Preview(t)).await
}

/// What a request asks of routing, besides its sandbox.
struct Asked {
    /// The caller (none: a preview URL).
    who: Option<Principal>,
    /// The path is the sandbox itself (not one of its operations).
    whole: bool,
    /// A GET or DELETE of the sandbox itself, or a preview: it never creates one.
    read_or_delete: bool,
}

/// Carries out [`decide`]'s routes until one answers: every wait (a move, a read barrier,
/// the lease) and every follow (an owner that failed over to this node, a concurrent create
/// that won) ends in deciding again on what this node then has applied.
async fn execute(st: &AppState, id: &str, asked: Asked, req: Request, serve: Serve) -> Response {
    let cl = &st.cluster.cluster;
    let method = req.method().clone();
    let from_peer = req.extensions().get::<FromPeer>().is_some();
    let sent_epoch = peer_epoch(&req);
    let (mut req, mut serve) = (req, serve);
    let mut caught_up = asked.who.is_none();
    let mut lease_waited = false;
    // Every wait below (a move to end, a read barrier) is bounded by this.
    let deadline = tokio::time::Instant::now() + MOVE_WAIT;
    for _ in 0..MAX_ROUNDS {
        let placement = cl.read(|s| s.placements.get(id).cloned());
        let route = decide(&RouteInput {
            me: cl.id,
            placement: placement.as_ref(),
            who: asked.who.as_ref(),
            from_peer,
            sent_epoch,
            read_or_delete: asked.read_or_delete,
            caught_up,
            local_copy: placement.is_none() && st.mgr.get(id).is_some(),
            lease_held: cl.has_lease(),
            lease_waited,
        });
        match route {
            Route::AwaitMove => {
                if let Err(r) = await_move(st, id, deadline).await {
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
            Route::AwaitLease => {
                cl.wait_lease(LEASE_WAIT).await;
                lease_waited = true;
            }
            Route::NoLease => return no_lease(),
            Route::Foreign { owner } => return foreign(id, &method, asked.whole, &owner),
            Route::ServeOwned { epoch } => {
                return serve_owned(st, id, epoch, req, serve, LeaseHeld::decided()).await
            }
            Route::Forward { node, epoch } => match route_to(st, id, node, epoch, req).await {
                Followed::Answered(resp) => return resp,
                // Failed over to this node: decide again, the lease first.
                Followed::CameHere(back) => req = back,
            },
            Route::RefuseStale => return owned_elsewhere(id),
            Route::ServeUnplaced => {
                return serve_local(st, id, req, serve, LeaseHeld::decided()).await
            }
            Route::Absent => return absent(st, id, &method, req, serve).await,
            Route::ServeAsSent => return serve.run(st, req).await,
            Route::Place => {
                let Serve::Api(next) = serve else {
                    return owned_elsewhere(id);
                };
                let Some(who) = asked.who.as_ref() else {
                    return owned_elsewhere(id);
                };
                let (checked, region, size, replay) = match precheck(req, id, asked.whole).await {
                    Ok(x) => x,
                    Err(r) => return r,
                };
                let region = region.unwrap_or_else(|| cl.cfg.region.clone());
                let new = NewSandbox {
                    id,
                    region: &region,
                    who,
                    size,
                    replay,
                };
                match place_and_route(st, new, checked, next.clone()).await {
                    Placed::Answered(resp) => return resp,
                    // Placed by another request first: routed as that placement says.
                    Placed::PlacedMeanwhile(back) => (req, serve) = (back, Serve::Api(next)),
                }
            }
        }
    }
    err(ApiError::new(
        ErrorCode::Unavailable,
        format!("sandbox {id} changed hands too often while this request was routed; retry"),
    ))
}

/// Proof that this node held its lease when routing chose to serve here: what serves a
/// sandbox takes one, so that nothing is served without it.
pub(super) struct LeaseHeld(());

impl LeaseHeld {
    /// [`decide`] saw the lease (`RouteInput::lease_held`) in this round.
    fn decided() -> LeaseHeld {
        LeaseHeld(())
    }

    /// For a new sandbox placed on this node outside the decision (its create is answered
    /// where it was placed): waits for the lease, bounded as routing does.
    pub(super) async fn wait(st: &AppState) -> Option<LeaseHeld> {
        st.cluster
            .cluster
            .wait_lease(LEASE_WAIT)
            .await
            .then_some(LeaseHeld(()))
    }
}

/// A request for a sandbox placed nowhere and not here: 404 (a delete, 204); a preview
/// URL's is answered by the preview proxy, which refuses its token.
async fn absent(st: &AppState, id: &str, method: &Method, req: Request, serve: Serve) -> Response {
    if !serve.is_api() {
        return serve.run(st, req).await;
    }
    if method == Method::DELETE {
        return http::StatusCode::NO_CONTENT.into_response();
    }
    err(ApiError::new(
        ErrorCode::SandboxNotFound,
        format!("sandbox {id} not found"),
    ))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_paths() {
        assert_eq!(sandbox_of("/v1/sandboxes/abc"), Some(("abc", true)));
        assert_eq!(sandbox_of("/v1/sandboxes/abc/exec"), Some(("abc", false)));
        assert_eq!(sandbox_of("/v1/sandboxes"), None);
        assert_eq!(sandbox_of("/v1/cluster"), None);
    }
}
