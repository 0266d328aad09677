//! Serving on this node, the owner: only under the lease (a [`LeaseHeld`] from routing's
//! decision) and a placement that names it, with this node's copy judged and taken over
//! first; forgetting the placement after a delete.

use super::*;
/// Serves here once this node's applied state shows the placement (epoch at least `epoch`)
/// naming it. The lease came first (routing decided under it): a node that just restarted
/// caught up on what it missed before it trusted its own view (the sandbox may have moved
/// meanwhile; then a request that entered here follows it).
pub(super) async fn serve_owned(
    st: &AppState,
    id: &str,
    epoch: u64,
    req: Request,
    serve: Serve,
    lease: LeaseHeld,
) -> Response {
    let cl = &st.cluster.cluster;
    let me = cl.id;
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
            serve_local(st, id, req, serve, lease).await
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

pub(super) fn no_lease() -> Response {
    err(ApiError::new(
        ErrorCode::Unavailable,
        "this node has lost contact with the cluster majority and does not serve its sandboxes until it is back",
    ))
}

/// Serves on this node, which holds the lease; forgets the placement after a delete.
pub(super) async fn serve_local(
    st: &AppState,
    id: &str,
    req: Request,
    serve: Serve,
    _lease: LeaseHeld,
) -> Response {
    let cl = &st.cluster.cluster;
    // Just after a restart or an election the fence takes a moment to see the lease come
    // back and thaw this node's sandboxes.
    if !st
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
        warren_control::checkpoint::publish_first_handoff(&control, id).await;
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
pub(super) async fn unplace(st: &AppState, id: &str) -> Result<(), ApiError> {
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
