//! `PUT|GET /v1/tenants/{tenant}`, `GET /v1/tenants`: what a tenant may hold at once, and
//! what it holds. A new sandbox past its tenant's quota is refused with 403 `FORBIDDEN`.

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
}
