//! What the egress proxy asks of the manager: which sandbox a container address is, and
//! its labels and policy (compiled once per policy, looked up for every request); and
//! `GET|PUT …/egress`.

use super::SandboxManager;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use warren_api::egress::EgressPolicy;
use warren_api::ApiError;
use warren_egress::{Compiled, SandboxEgress};

/// A sandbox's policy as last seen, and its compiled form.
type CompiledPolicy = (Option<EgressPolicy>, Arc<Compiled>);

/// Running sandboxes by the address of their container, and their compiled policies.
#[derive(Default)]
pub(super) struct AddrBook {
    by_addr: Mutex<HashMap<IpAddr, String>>,
    compiled: Mutex<HashMap<String, CompiledPolicy>>,
}

impl AddrBook {
    pub(super) fn set(&self, id: &str, addr: IpAddr) {
        let mut m = self.by_addr.lock().expect("addr book lock");
        m.retain(|_, v| v != id);
        m.insert(addr, id.to_string());
    }

    pub(super) fn remove(&self, id: &str) {
        self.by_addr
            .lock()
            .expect("addr book lock")
            .retain(|_, v| v != id);
        self.compiled.lock().expect("addr book lock").remove(id);
    }

    fn id_at(&self, addr: IpAddr) -> Option<String> {
        self.by_addr
            .lock()
            .expect("addr book lock")
            .get(&addr)
            .cloned()
    }

    fn compiled(&self, id: &str, policy: Option<&EgressPolicy>) -> Arc<Compiled> {
        let mut m = self.compiled.lock().expect("addr book lock");
        if let Some((p, c)) = m.get(id) {
            if p.as_ref() == policy {
                return c.clone();
            }
        }
        let c = Arc::new(Compiled::new(policy.cloned().unwrap_or_default()));
        m.insert(id.to_string(), (policy.cloned(), c.clone()));
        c
    }
}

impl SandboxManager {
    /// The sandbox whose running container has `addr`, as the egress proxy needs it.
    pub fn egress_at(&self, addr: IpAddr) -> Option<SandboxEgress> {
        let id = self.addrs.id_at(addr)?;
        let rec = self.existing_slot(&id)?.record()?;
        Some(SandboxEgress {
            policy: self.addrs.compiled(&id, rec.egress.as_ref()),
            id,
            labels: rec.labels,
        })
    }

    /// `GET …/egress`: its policy (the default one when it was given none). Like every call
    /// under `/v1/sandboxes/{id}/`, on a new id it creates the sandbox.
    pub async fn egress_policy(self: &Arc<Self>, id: &str) -> Result<EgressPolicy, ApiError> {
        if self.get(id).is_none() {
            self.ensure(id).await?;
        }
        let rec = self
            .existing_slot(id)
            .and_then(|s| s.record())
            .ok_or_else(|| super::not_found(id))?;
        Ok(rec.egress.unwrap_or_default())
    }

    /// `PUT …/egress`: replaces its policy, effective for the proxy's next request (also
    /// on connections already open). A sleeping sandbox keeps sleeping; a new id is
    /// created first.
    pub async fn set_egress(
        self: &Arc<Self>,
        id: &str,
        policy: EgressPolicy,
    ) -> Result<EgressPolicy, ApiError> {
        let policy = policy.normalized()?;
        if self.get(id).is_none() {
            self.ensure(id).await?;
        }
        let slot = self.existing_slot(id).ok_or_else(|| super::not_found(id))?;
        let _g = slot.lock.lock().await;
        let mut rec = slot.record().ok_or_else(|| super::not_found(id))?;
        rec.egress = Some(policy.clone());
        self.save(&rec)?;
        slot.set(Some(rec));
        tracing::info!(sandbox_id = %id, rules = policy.rules.len(), default = ?policy.default, "egress policy set");
        Ok(policy)
    }
}
