//! Snapshots, restore, fork and sleep.
//!
//! Sandbox-scoped calls run on the sandbox's owner (routed like every sandbox call). The
//! snapshot catalog lives in the object store that all nodes share, so `/v1/snapshots` is
//! served by whichever node receives it. A fork's new sandboxes are created through this
//! node's own router, so each lands on its own owner like any other new sandbox; those that
//! land on the source's node copy its files (see the node's `manager::fork`).

use super::snapshot_quota;
use super::transfer::{respond, wants_stream};
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::BodyExt;
use tower::ServiceExt;
use warren_api::error::parse_json;
use warren_api::sandbox::{CreateSandboxRequest, Sandbox};
use warren_api::snapshot::{
    CreateSnapshotRequest, ForkRequest, ForkResponse, RestoreRequest, SnapshotList,
    SnapshotListQuery,
};
use warren_api::{ApiError, ErrorCode};
use warren_node::sandbox::manager::{
    snapshot_error, snapshot_to_api, ForkTargets, SnapshotWritten,
};
use warren_storage::snapshots::{validate_snapshot_id, SnapshotOrigin};

pub async fn create(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: http::HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let req: CreateSnapshotRequest = parse_json(&body)?;
    req.validate()?;
    let op = async move {
        let tenant = state.mgr.tenant_of(&id);
        let held = snapshot_quota::before(&state, &tenant).await?;
        let snap = state.mgr.snapshot(&id, &req, SnapshotOrigin::User).await?;
        snapshot_quota::after(&state, &tenant, held, snap).await
    };
    Ok(respond(wants_stream(&headers), http::StatusCode::CREATED, op).await)
}

pub async fn restore(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: http::HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let req: RestoreRequest = parse_json(&body)?;
    validate_snapshot_id(&req.snapshot).map_err(ApiError::invalid)?;
    let op = async move { state.mgr.restore(&id, &req.snapshot).await };
    Ok(respond(wants_stream(&headers), http::StatusCode::OK, op).await)
}

pub async fn sleep(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: http::HeaderMap,
) -> Response {
    let op = async move { state.mgr.sleep(&id).await };
    respond(wants_stream(&headers), http::StatusCode::OK, op).await
}

/// One snapshot, then `count` new sandboxes started from it in parallel. All or nothing:
/// if one cannot be created, the others are deleted again and the error is returned.
pub async fn fork(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(id): Path<String>,
    headers: http::HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let req: ForkRequest = parse_json(&body)?;
    let targets = req.target_ids(&id)?;
    // The new sandboxes are the source's tenant's (also when an admin forks), so that they
    // may start from its snapshot.
    let as_owner = Principal {
        tenant: state.mgr.tenant_of(&id),
        ..who
    };
    let op = fork_all(state, id, targets, as_owner);
    Ok(respond(wants_stream(&headers), http::StatusCode::CREATED, op).await)
}

async fn fork_all(
    state: AppState,
    id: String,
    targets: Vec<String>,
    auth: Principal,
) -> Result<ForkResponse, ApiError> {
    refuse_existing(&state, &targets, &auth).await?;
    // Its snapshot is kept like any other: a tenant at its snapshot bytes forks nothing. (It
    // is checked before only: once taken, sandboxes already start from it.)
    snapshot_quota::before(&state, &auth.tenant).await?;
    // The sandboxes are created while the source is held as it was snapshotted, so the
    // ones placed on this node copy its files instead of restoring the snapshot.
    let (creator, creds, targets) = (&state, &auth, &targets);
    let create_all = |new: CreateSandboxRequest, written: SnapshotWritten, settled: ForkTargets| async move {
        let sid = new.from_snapshot.clone().unwrap_or_default();
        let body = serde_json::to_vec(&new).expect("serializes");
        let put = |t: &String| {
            call_self(
                creator,
                http::Method::PUT,
                format!("/v1/sandboxes/{t}"),
                creds.clone(),
                body.clone(),
            )
        };
        // Each first answer settles its target: the source need not stay frozen for it.
        let mut results = join_all(targets.iter().map(|t| {
            let (settled, put) = (settled.clone(), put(t));
            async move {
                let r = put.await;
                settled.answered(t);
                r
            }
        }))
        .await;
        // One placed on another node restores the snapshot, which may not have been written
        // yet when it asked (nothing of it was kept): it asks again once it is.
        let early: Vec<usize> = (0..results.len())
            .filter(|&i| matches!(&results[i], Err(e) if e.code == ErrorCode::SnapshotNotFound))
            .collect();
        if !early.is_empty() {
            tracing::info!(snapshot = %sid, sandboxes = early.len(), "fork: sandboxes placed on other nodes wait for the snapshot");
        }
        if !early.is_empty() && written.wait().await {
            let again = join_all(early.iter().map(|&i| put(&targets[i]))).await;
            for (i, r) in early.into_iter().zip(again) {
                results[i] = r;
            }
        }
        results
    };
    let forked = state.mgr.fork(&id, targets.len(), create_all).await?;
    let results = forked.created;
    let mut sandboxes = Vec::new();
    let mut failure = None;
    for r in results {
        match r.and_then(|b| parse_json::<Sandbox>(&b)) {
            Ok(s) => sandboxes.push(s),
            Err(e) => failure = failure.or(Some(e)),
        }
    }
    let snapshot = match (forked.snapshot, failure) {
        (Ok(s), None) => s,
        // The snapshot failed (the sandboxes that copied the source are deleted again), or
        // a sandbox could not be created.
        (Err(e), _) | (Ok(_), Some(e)) => {
            join_all(sandboxes.iter().map(|s| {
                call_self(
                    &state,
                    http::Method::DELETE,
                    format!("/v1/sandboxes/{}", s.id),
                    auth.clone(),
                    Vec::new(),
                )
            }))
            .await;
            return Err(e);
        }
    };
    Ok(ForkResponse {
        snapshot,
        sandboxes,
    })
}

/// A fork makes new sandboxes only: one of its ids in use fails it at once, before the
/// source is frozen or anything is written. (One made in between is still refused by its
/// create, and the fork is undone then.)
async fn refuse_existing(
    state: &AppState,
    targets: &[String],
    auth: &Principal,
) -> Result<(), ApiError> {
    let found = join_all(targets.iter().map(|t| {
        call_self(
            state,
            http::Method::GET,
            format!("/v1/sandboxes/{t}"),
            auth.clone(),
            Vec::new(),
        )
    }))
    .await;
    for (t, r) in targets.iter().zip(found) {
        match r {
            Ok(_) => {
                return Err(ApiError::new(
                    ErrorCode::Conflict,
                    format!("sandbox {t} exists; a fork makes new sandboxes only"),
                ))
            }
            Err(e) if e.code == ErrorCode::SandboxNotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A request through this node's own router (placement, forwarding and all), as `who`.
async fn call_self(
    state: &AppState,
    method: http::Method,
    path: String,
    who: Principal,
    body: Vec<u8>,
) -> Result<Bytes, ApiError> {
    let app = state
        .self_app
        .read()
        .expect("self app lock")
        .clone()
        .ok_or_else(|| ApiError::internal("the router is not ready"))?;
    let mut req = http::Request::builder()
        .method(method)
        .uri(&path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(body))
        .map_err(|e| ApiError::internal(e.to_string()))?;
    req.extensions_mut().insert(who);
    let resp = app
        .oneshot(req)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .to_bytes();
    if status.is_success() {
        Ok(bytes)
    } else {
        Err(ApiError::from_response(status.as_u16(), &bytes))
    }
}

pub async fn list(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Query(q): Query<SnapshotListQuery>,
) -> ApiResult<Json<SnapshotList>> {
    if let Some(s) = &q.sandbox {
        warren_api::ids::validate_sandbox_id(s)?;
    }
    let all = state
        .mgr
        .snapshot_store()
        .list(q.sandbox.as_deref())
        .await
        .map_err(snapshot_error)?;
    Ok(Json(SnapshotList {
        snapshots: all
            .iter()
            .filter(|m| who.may_touch(m.tenant()))
            .map(snapshot_to_api)
            .collect(),
    }))
}

/// The manifest of a snapshot `who` may see; another tenant's is answered as absent.
async fn visible_manifest(
    state: &AppState,
    who: &Principal,
    sid: &str,
) -> Result<warren_storage::snapshots::Manifest, ApiError> {
    validate_snapshot_id(sid).map_err(ApiError::invalid)?;
    let m = state
        .mgr
        .snapshot_store()
        .manifest(sid)
        .await
        .map_err(snapshot_error)?;
    if !who.may_touch(m.tenant()) {
        return Err(ApiError::new(
            ErrorCode::SnapshotNotFound,
            format!("snapshot {sid} not found"),
        ));
    }
    Ok(m)
}

pub async fn get(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    let m = visible_manifest(&state, &who, &sid).await?;
    Ok(Json(snapshot_to_api(&m)).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(sid): Path<String>,
) -> ApiResult<Response> {
    // An unknown snapshot is 404, and so is another tenant's.
    visible_manifest(&state, &who, &sid).await?;
    state.mgr.delete_snapshot(&sid).await?;
    Ok(http::StatusCode::NO_CONTENT.into_response())
}
