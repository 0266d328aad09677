//! `GET /v1/cluster`, `POST /v1/cluster/nodes/{node}/drain`, `DELETE /v1/cluster/nodes/{node}`.

use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::{Command, CommandResult, NodeRecord, NodeState};

#[derive(Debug, Serialize, Deserialize)]
pub struct ClusterNode {
    /// The node's name.
    pub id: String,
    pub region: String,
    pub api_addr: String,
    /// Empty for a tenant key: the cluster's inner addresses are the operator's.
    pub peer_addr: String,
    pub state: NodeState,
    /// Sandboxes placed on the node: the caller's tenant's only, for a tenant key.
    pub sandboxes: usize,
    pub capacity: u32,
    /// Added: the most sandboxes the node runs at once, as it announced it (`null` until it
    /// did); new placements, failover and rebalancing pass over a node at its limit.
    pub max_sandboxes: Option<u64>,
    /// Added: the node said it cannot start one more sandbox of the default size now (its
    /// running sandboxes' limits, or its host's free memory); new placements pass over it.
    pub full: bool,
    /// The isolation classes the node runs sandboxes in (every node of this version offers
    /// the same, `warren_node::sandbox::manager::ISOLATION_OFFERED`).
    pub isolation: Vec<String>,
    /// Added: the node's Raft id and role.
    pub raft_id: u64,
    pub voter: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ClusterView {
    pub leader: Option<String>,
    pub term: u64,
    /// How much recent activity an owner's death can lose: the checkpoint interval (plus
    /// the time one checkpoint takes); `null` when checkpoints are off.
    pub loss_window_s: Option<u64>,
    /// Added: how many times the cluster was rebuilt from a survivor of a lost majority
    /// (`warren cluster recover`), as this node's applied state says.
    #[serde(default)]
    pub generation: u64,
    pub nodes: Vec<ClusterNode>,
}

/// The cluster as `who` may see it: an admin sees everything; a tenant key sees the nodes,
/// their regions and states, but counts only its own sandboxes and no peer addresses.
pub async fn get(
    State(st): State<AppState>,
    axum::Extension(who): axum::Extension<crate::auth::Principal>,
) -> Json<ClusterView> {
    let only = who.only_tenant();
    let counted = |p: &warren_consensus::Placement| {
        only.is_none_or(|t| {
            p.tenant
                .as_deref()
                .unwrap_or(warren_api::keys::DEFAULT_TENANT)
                == t
        })
    };
    let cl = &st.cluster.cluster;
    let metrics = cl.raft.metrics().borrow().clone();
    let voters: BTreeSet<u64> = metrics.membership_config.membership().voter_ids().collect();
    let every = st.mgr.config().checkpoint_every.as_secs();
    let leader_id = cl.leader();
    let loss_window_s = (every > 0).then_some(every);
    let view = cl.read(|s| {
        let nodes = s
            .nodes
            .values()
            .map(|n| ClusterNode {
                id: n.name.clone(),
                region: n.region.clone(),
                api_addr: n.api_addr.clone(),
                peer_addr: if only.is_some() {
                    String::new()
                } else {
                    n.peer_addr.clone()
                },
                state: n.state,
                sandboxes: s.placements.on_node(n.id).filter(|p| counted(p)).count(),
                capacity: n.capacity,
                max_sandboxes: n.max_sandboxes,
                full: n.full,
                isolation: offered(),
                raft_id: n.id,
                voter: voters.contains(&n.id),
            })
            .collect();
        let leader = leader_id
            .and_then(|l| s.nodes.get(&l))
            .map(|n| n.name.clone());
        ClusterView {
            leader,
            term: metrics.current_term,
            loss_window_s,
            generation: s.generation,
            nodes,
        }
    });
    Json(view)
}

/// The isolation classes of `ISOLATION_OFFERED`, by name.
pub fn offered() -> Vec<String> {
    warren_node::sandbox::manager::ISOLATION_OFFERED
        .iter()
        .map(|i| i.as_str().to_string())
        .collect()
}

fn find(st: &AppState, node: &str) -> Result<NodeRecord, ApiError> {
    st.cluster
        .cluster
        .read(|s| {
            s.nodes
                .values()
                .find(|n| n.name == node || n.id.to_string() == node)
                .cloned()
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!("no node {node:?} in the cluster"),
            )
        })
}

/// Stops new placements on the node. (Moving its sandboxes away needs snapshots.)
pub async fn drain(
    State(st): State<AppState>,
    axum::Extension(who): axum::Extension<crate::auth::Principal>,
    Path(node): Path<String>,
) -> ApiResult<Response> {
    who.require_admin("draining a node")?;
    let n = find(&st, &node)?;
    let result = st
        .cluster
        .cluster
        .propose(Command::SetNodeState {
            node: n.id,
            state: NodeState::Draining,
        })
        .await
        .map_err(ApiError::from)?;
    refused_as_conflict(result)?;
    Ok(Json(serde_json::json!({"id": n.name, "state": "draining"})).into_response())
}

/// A command the state machine refused (the node went meanwhile, or it is the last one):
/// 409 `CONFLICT` with its reason.
fn refused_as_conflict(result: CommandResult) -> Result<(), ApiError> {
    match result {
        CommandResult::Rejected { reason } => Err(ApiError::new(ErrorCode::Conflict, reason)),
        _ => Ok(()),
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RemoveQuery {
    pub force: Option<bool>,
}

/// Removes a node from the cluster. A node that still owns sandboxes is kept unless `force`.
pub async fn remove(
    State(st): State<AppState>,
    axum::Extension(who): axum::Extension<crate::auth::Principal>,
    Path(node): Path<String>,
    Query(q): Query<RemoveQuery>,
) -> ApiResult<Response> {
    who.require_admin("removing a node")?;
    let n = find(&st, &node)?;
    let cl = &st.cluster.cluster;
    let owned = cl.read(|s| s.placements.count_on(n.id));
    if owned > 0 && !q.force.unwrap_or(false) {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "node {} still owns {owned} sandboxes; drain it first or pass force=true",
                n.name
            ),
        )
        .into());
    }
    let result = cl
        .propose(Command::RemoveNode { node: n.id })
        .await
        .map_err(ApiError::from)?;
    refused_as_conflict(result)?;
    Ok(http::StatusCode::NO_CONTENT.into_response())
}
