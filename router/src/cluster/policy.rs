//! Egress policies as cluster state: a policy set through the API is committed to the
//! sandbox's placement (`Command::SetEgress`, by its owner), so that a node that takes the
//! sandbox over — after a failover from a checkpoint taken before the change — applies the
//! policy as last set, not the one in the checkpoint's record
//! (`warren_control::handoff::handoff_of`).

use crate::state::AppState;
use warren_api::egress::EgressPolicy;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::{Command, CommandResult};

/// Commits `policy` (already in force on this node) as sandbox `id`'s. A sandbox the
/// cluster has no placement for has nothing to replicate; one that moved meanwhile
/// answers 503 (the request is retried at its new owner).
pub async fn replicate(st: &AppState, id: &str, policy: &EgressPolicy) -> Result<(), ApiError> {
    let cl = &st.cluster.cluster;
    let Some((node, epoch)) = cl.read(|s| s.placements.get(id).map(|p| (p.node, p.epoch))) else {
        return Ok(());
    };
    let moved = || {
        ApiError::new(
            ErrorCode::Unavailable,
            format!("sandbox {id} moved while its egress policy was set; retry"),
        )
    };
    if node != cl.id {
        return Err(moved());
    }
    let cmd = Command::SetEgress {
        sandbox: id.to_string(),
        epoch,
        policy: serde_json::to_string(policy).expect("policies serialize"),
    };
    match cl.propose(cmd).await.map_err(ApiError::from)? {
        CommandResult::Placement { applied: true, .. } => Ok(()),
        _ => Err(moved()),
    }
}
