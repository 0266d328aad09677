//! What a new owner takes a sandbox over from: the handoff its placement holds (the last
//! move's or checkpoint's), with the egress policy set through the API since then
//! (`Command::SetEgress`) in place of the one the checkpoint's record holds.

use warren_api::egress::EgressPolicy;
use warren_consensus::{Handoff, Placement};
use warren_node::sandbox::manager::HandoffData;
use warren_node::sandbox::record::SandboxRecord;

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
