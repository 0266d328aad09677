//! Egress policies as cluster state: a policy set through the API is committed to the
//! sandbox's placement (`Command::SetEgress`, by its owner), so that a node that takes the
//! sandbox over — after a failover from a checkpoint taken before the change — applies the
//! policy as last set, not the one in the checkpoint's record.

use crate::state::AppState;
use warren_api::egress::EgressPolicy;
use warren_api::{ApiError, ErrorCode};
use warren_consensus::{Command, CommandResult, Handoff, Placement};
use warren_node::sandbox::manager::HandoffData;
use warren_node::sandbox::record::SandboxRecord;

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
    match cl.propose(cmd).await.map_err(super::cluster_error)? {
        CommandResult::Placement { applied: true, .. } => Ok(()),
        _ => Err(moved()),
    }
}

/// What a new owner of `p` takes the sandbox over from: its latest handoff, with the
/// policy set since (if any) in place of the one its record holds.
pub fn handoff_of(p: &Placement) -> Option<HandoffData> {
    let h: &Handoff = p.handoff.as_ref()?;
    let mut record = h.record.clone();
    if let Some(policy) = &p.egress {
        match (
            serde_json::from_str::<SandboxRecord>(&record),
            serde_json::from_str::<EgressPolicy>(policy),
        ) {
            (Ok(mut rec), Ok(policy)) => {
                rec.egress = Some(policy);
                record = serde_json::to_string(&rec).expect("records serialize");
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(sandbox_id = %p.sandbox, error = %e, "the replicated egress policy cannot be applied to the handoff");
            }
        }
    }
    Some(HandoffData {
        record,
        snapshot: h.snapshot.clone(),
        resume: h.resume,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_consensus::PlacementState;

    fn placement(record: &str, egress: Option<&str>) -> Placement {
        Placement {
            sandbox: "sb".into(),
            node: 1,
            epoch: 1,
            owner_since: 1,
            state: PlacementState::Active,
            handoff: Some(Handoff {
                record: record.into(),
                snapshot: Some("snap".into()),
                resume: true,
            }),
            egress: egress.map(str::to_string),
            tenant: None,
            size: None,
        }
    }

    #[test]
    fn the_policy_set_after_the_checkpoint_replaces_the_records() {
        let rec = SandboxRecord::new(
            "sb",
            &warren_api::sandbox::CreateSandboxRequest::default(),
            "n1",
            "r1",
            "img",
        )
        .unwrap();
        let json = serde_json::to_string(&rec).unwrap();
        // Nothing set since: the record as checkpointed.
        let h = handoff_of(&placement(&json, None)).unwrap();
        assert_eq!(h.record, json);
        assert_eq!(h.snapshot.as_deref(), Some("snap"));
        let set = r#"{"default":"deny","allow_hosts":["api.example.com"]}"#;
        let h = handoff_of(&placement(&json, Some(set))).unwrap();
        let back: SandboxRecord = serde_json::from_str(&h.record).unwrap();
        let want: EgressPolicy = serde_json::from_str(set).unwrap();
        assert_eq!(back.egress, Some(want));
        assert_eq!(back.id, "sb");
        // No handoff, nothing to take over from.
        let mut p = placement(&json, Some(set));
        p.handoff = None;
        assert!(handoff_of(&p).is_none());
    }
}
