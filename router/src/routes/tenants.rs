//! `PUT /v1/tenants/{tenant}` (admin): a tenant's quota; `GET /v1/tenants/{tenant}` (admin,
//! or the tenant's own key): its quota and what it holds; `GET /v1/tenants` (admin): every
//! tenant that has a quota, a key or a sandbox. Quotas are enforced where placements are
//! committed (`warren_consensus::state`), so creators on many nodes never overshoot together;
//! snapshot bytes where snapshots are taken (`snapshot_quota`).

use super::snapshot_quota::kept_by_tenant;
use crate::auth::Principal;
use crate::error::ApiResult;
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use std::collections::{BTreeMap, BTreeSet};
use warren_api::error::parse_json;
use warren_api::keys::validate_tenant;
use warren_api::tenants::{millicpus, Tenant, TenantList, TenantQuota, TenantUse};
use warren_api::{ApiError, ErrorCode};
use warren_consensus::state::Quota;
use warren_consensus::{ClusterState, Command};

fn view(s: &ClusterState, tenant: &str, snapshot_bytes: &BTreeMap<String, u64>) -> Tenant {
    let q = s.quotas.get(tenant).cloned().unwrap_or_default();
    let u = s.tenant_use(tenant);
    Tenant {
        tenant: tenant.to_string(),
        quota: TenantQuota {
            max_sandboxes: q.max_sandboxes,
            max_cpus: q.max_millicpus.map(|m| m as f64 / 1000.0),
            max_memory_mb: q.max_memory_mb,
            max_snapshot_bytes: q.max_snapshot_bytes,
        },
        in_use: TenantUse {
            sandboxes: u.sandboxes,
            cpus: u.size.millicpus as f64 / 1000.0,
            memory_mb: u.size.memory_mb,
            snapshot_bytes: snapshot_bytes.get(tenant).copied().unwrap_or(0),
        },
    }
}

pub async fn put(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(tenant): Path<String>,
    body: bytes::Bytes,
) -> ApiResult<Json<Tenant>> {
    who.require_admin("setting a tenant's quota")?;
    validate_tenant(&tenant)?;
    let q: TenantQuota = parse_json(&body)?;
    q.validate()?;
    let quota = Quota {
        max_sandboxes: q.max_sandboxes,
        max_millicpus: q.max_cpus.map(millicpus),
        max_memory_mb: q.max_memory_mb,
        max_snapshot_bytes: q.max_snapshot_bytes,
    };
    let cl = &st.cluster.cluster;
    cl.propose(Command::SetQuota {
        tenant: tenant.clone(),
        quota,
    })
    .await
    .map_err(ApiError::from)?;
    tracing::info!(%tenant, by = %who.key_id, "tenant quota set");
    let kept = kept_by_tenant(&st).await?;
    Ok(Json(cl.read(|s| view(s, &tenant, &kept))))
}

pub async fn get(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
    Path(tenant): Path<String>,
) -> ApiResult<Json<Tenant>> {
    validate_tenant(&tenant)?;
    if !who.may_touch(&tenant) {
        return Err(ApiError::new(ErrorCode::NotFound, format!("no tenant {tenant:?}")).into());
    }
    let kept = kept_by_tenant(&st).await?;
    Ok(Json(st.cluster.cluster.read(|s| view(s, &tenant, &kept))))
}

pub async fn list(
    State(st): State<AppState>,
    Extension(who): Extension<Principal>,
) -> ApiResult<Json<TenantList>> {
    who.require_admin("listing tenants")?;
    let kept = kept_by_tenant(&st).await?;
    let tenants = st.cluster.cluster.read(|s| {
        let names: BTreeSet<&str> = s
            .quotas
            .keys()
            .map(String::as_str)
            .chain(s.keys.values().map(|k| k.tenant.as_str()))
            .chain(s.placements.tenants().map(String::as_str))
            .chain(kept.keys().map(String::as_str))
            .collect();
        names.into_iter().map(|t| view(s, t, &kept)).collect()
    });
    Ok(Json(TenantList { tenants }))
}
