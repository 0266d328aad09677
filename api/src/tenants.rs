//! `PUT|GET /v1/tenants/{tenant}`, `GET /v1/tenants`: what a tenant may hold at once, and
//! what it holds. A new sandbox past its tenant's quota is refused with 403 `FORBIDDEN`, and
//! so is a snapshot or fork past its snapshot bytes.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// Limits of one tenant, cluster-wide; an absent limit is no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TenantQuota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    /// CPUs of its sandboxes' `resources`, summed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cpus: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Bytes of the snapshots it keeps (`size_bytes` of its user and fork snapshots, summed;
    /// a sandbox's own sleep and checkpoint snapshots are not counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_bytes: Option<u64>,
}

/// How every quota refusal's message begins.
pub const QUOTA_EXCEEDED: &str = "quota exceeded";

/// Why `tenant`, holding `held` bytes of snapshots, may not keep `more`: `None` when it may.
/// Checked before a snapshot is taken (with `more` = 1: a tenant at its limit takes none)
/// and again once its size is known.
pub fn snapshot_bytes_refusal(tenant: &str, limit: u64, held: u64, more: u64) -> Option<String> {
    held.checked_add(more).is_none_or(|total| total > limit).then(|| {
        format!(
            "{QUOTA_EXCEEDED}: tenant {tenant} may keep {limit} bytes of snapshots, keeps {held}, and this snapshot needs {more} more; delete snapshots to make room"
        )
    })
}

impl TenantQuota {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(c) = self.max_cpus {
            if !c.is_finite() || !(0.0..=1_000_000.0).contains(&c) {
                return Err(ApiError::invalid(
                    "max_cpus must be a number between 0 and 1000000",
                ));
            }
        }
        Ok(())
    }
}

/// What a tenant holds now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantUse {
    pub sandboxes: u64,
    pub cpus: f64,
    pub memory_mb: u64,
    /// What `max_snapshot_bytes` counts.
    #[serde(default)]
    pub snapshot_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Tenant {
    pub tenant: String,
    pub quota: TenantQuota,
    pub in_use: TenantUse,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TenantList {
    pub tenants: Vec<Tenant>,
}

/// CPUs as the cluster counts them (thousandths, rounded up).
pub fn millicpus(cpus: f64) -> u64 {
    (cpus * 1000.0).ceil().max(0.0) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_refuse_nonsense_and_cpus_round_up() {
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let q = TenantQuota {
                max_cpus: Some(bad),
                ..Default::default()
            };
            assert!(q.validate().is_err(), "{bad}");
        }
        assert_eq!(millicpus(0.0625), 63);
        assert_eq!(millicpus(2.0), 2000);
        let r: Result<TenantQuota, _> = serde_json::from_str(r#"{"max_gpus": 1}"#);
        assert!(r.is_err());
    }

    #[test]
    fn snapshot_bytes_are_refused_past_the_limit_not_at_it() {
        assert_eq!(snapshot_bytes_refusal("t", 100, 40, 60), None);
        let why = snapshot_bytes_refusal("t", 100, 40, 61).unwrap();
        assert!(why.starts_with(QUOTA_EXCEEDED), "{why}");
        assert!(why.contains("100") && why.contains("61"), "{why}");
        assert!(
            snapshot_bytes_refusal("t", 100, 100, 1).is_some(),
            "full: none more"
        );
        assert_eq!(snapshot_bytes_refusal("t", 100, 99, 1), None);
        assert!(
            snapshot_bytes_refusal("t", u64::MAX, u64::MAX, 1).is_some(),
            "no overflow"
        );
    }
}
