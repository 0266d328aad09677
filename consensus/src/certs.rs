//! Node certificates. The cluster CA's private key is not in the replicated state: only
//! nodes that hold it in their CA file (the bootstrap node, and any node an operator copied
//! the file to) sign, and a member that holds none forwards a signing request to one that
//! does. A certificate is signed only for a registered member's own key (the one its join
//! proved), under that member's name and id. Certificates live `cert_lifetime`; every node
//! renews its own at half its lifetime, keeping its key, and a connection lasts no longer
//! than the certificate it was opened with (`warren_transport::Peers`). A removed node
//! cannot renew, and its certificate opens nothing meanwhile (`authority`).

use crate::cluster::Cluster;
use crate::rpc::{Reply, Request};
use crate::state::{ClusterState, NodeId, NodeState};
use std::sync::Arc;
use std::time::Duration;
use warren_transport::tls::{self, Validity, BACKDATE};
use warren_transport::{CaMaterial, NodeIdentity};

/// Stores a renewed identity (the node's identity file), before the node presents it.
pub type PersistIdentity = Box<dyn Fn(&NodeIdentity) -> Result<(), String> + Send + Sync>;

/// Why a certificate was not signed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignRefusal {
    #[error("this node's CA file does not hold this cluster's CA")]
    OtherCa,
    #[error("node {0} is not a member of this cluster")]
    NotMember(NodeId),
    #[error(
        "node {0} registered no key (it joined before keys were bound); it keeps its certificate"
    )]
    NoKey(NodeId),
    #[error("the request's key is not the one node {0} registered")]
    WrongKey(NodeId),
    #[error("invalid certificate signing request: {0}")]
    BadCsr(String),
    #[error("this node holds no CA key")]
    NotASigner,
    #[error("no member holding the cluster CA's key signed: {0}")]
    NoSigner(String),
    /// Every member answered and none holds the key: asking again changes nothing until an
    /// operator puts a CA file back.
    #[error("no member of this cluster holds the CA's key (every member answered): put the CA file with its key back on a member (docs/operations.md, backup and restore), then join again")]
    NoCaHolder,
}

impl SignRefusal {
    /// Whether asking again (or another signer) may succeed.
    pub fn retryable(&self) -> bool {
        matches!(self, SignRefusal::NoSigner(_) | SignRefusal::NotASigner)
    }
}

/// The name a certificate for member `node` carries, if a CA whose certificate is `ca_cert`
/// may sign a request with key `csr_key_id` for it under the applied `state`.
pub fn may_sign(
    state: &ClusterState,
    ca_cert: &str,
    node: NodeId,
    csr_key_id: &str,
) -> Result<String, SignRefusal> {
    if state.ca.as_ref().map(|c| c.cert_pem.as_str()) != Some(ca_cert) {
        return Err(SignRefusal::OtherCa);
    }
    let record = state.nodes.get(&node).ok_or(SignRefusal::NotMember(node))?;
    if record.key_id.is_empty() {
        return Err(SignRefusal::NoKey(node));
    }
    if record.key_id != csr_key_id {
        return Err(SignRefusal::WrongKey(node));
    }
    Ok(record.name.clone())
}

/// Whether a certificate with validity `v` is due for renewal at `now` (Unix seconds): half
/// its lifetime has passed, or it was issued for longer than the cluster's `lifetime` now
/// allows (a certificate from before lifetimes were short).
pub fn renewal_due(v: Validity, now: i64, lifetime: Duration) -> bool {
    let issued = v.not_before + BACKDATE.as_secs() as i64;
    let span = v.not_after - issued;
    let slack = BACKDATE.as_secs() as i64;
    span > lifetime.as_secs() as i64 + slack || now >= issued + span / 2
}

/// How often a node looks at its certificate: often enough to renew in the first tenth of
/// its second half.
pub fn check_every(lifetime: Duration) -> Duration {
    (lifetime / 20).clamp(Duration::from_millis(500), Duration::from_secs(60))
}

/// The CA key material a node signs with: its CA file's, or, in a cluster bootstrapped
/// before the key was kept out of the state, the state's.
fn signing_ca(cluster: &Cluster) -> Option<CaMaterial> {
    if let Some(ca) = &cluster.cfg.ca {
        return Some(ca.clone());
    }
    cluster.read(|s| s.ca.clone().filter(|c| !c.key_pem.is_empty()))
}

impl Cluster {
    /// A certificate for member `node`'s CSR: signed here when this node holds the CA key,
    /// otherwise by the first member that does (the leader first).
    pub async fn sign_member_csr(
        &self,
        node: NodeId,
        csr_pem: &str,
    ) -> Result<String, SignRefusal> {
        match self.sign_here(node, csr_pem).await {
            Err(SignRefusal::NotASigner) => {}
            done => return done,
        }
        let mut why = Vec::new();
        // Neither the node asking (it has no certificate to sign with yet) nor one called
        // down (each would cost the join a timeout).
        let skip = |n: &crate::NodeRecord| n.id == node || n.state == NodeState::Down;
        let down = self.read(|s| {
            s.nodes
                .values()
                .filter(|n| n.id != node && n.id != self.id && n.state == NodeState::Down)
                .count()
        });
        for (id, name, addr) in self.others_leader_first(skip) {
            let req = Request::Sign {
                node,
                csr_pem: csr_pem.to_string(),
            };
            match self
                .call_member(&addr, &name, req, Duration::from_secs(5))
                .await
            {
                Ok(Reply::Signed(Ok(cert))) => return Ok(cert),
                Ok(Reply::Signed(Err(e))) if e == SignRefusal::NotASigner.to_string() => {}
                Ok(Reply::Signed(Err(e))) => why.push(format!("node {id}: {e}")),
                Ok(other) => why.push(format!("node {id}: {other:?}")),
                Err(e) => why.push(format!("node {id}: {e}")),
            }
        }
        if why.is_empty() && down == 0 {
            return Err(SignRefusal::NoCaHolder);
        }
        if down > 0 {
            why.push(format!(
                "{down} member(s) down, which may hold it: asking again once they are up"
            ));
        }
        Err(SignRefusal::NoSigner(why.join("; ")))
    }

    /// Signs `node`'s CSR with this node's CA key (`NotASigner` without one). The member's
    /// registration may have been committed a moment ago: waits (bounded) to apply it.
    pub(crate) async fn sign_here(
        &self,
        node: NodeId,
        csr_pem: &str,
    ) -> Result<String, SignRefusal> {
        let ca = signing_ca(self).ok_or(SignRefusal::NotASigner)?;
        let key_id = tls::key_id_of_csr(csr_pem).map_err(|e| SignRefusal::BadCsr(e.to_string()))?;
        let check = |s: &ClusterState| may_sign(s, &ca.cert_pem, node, &key_id);
        if self.read(check).is_err() {
            self.wait_for(Duration::from_secs(2), |s| check(s).is_ok())
                .await;
        }
        let name = self.read(check)?;
        tls::sign_csr(&ca, csr_pem, &name, node, self.cfg.cert_lifetime)
            .map_err(|e| SignRefusal::BadCsr(e.to_string()))
    }

    /// Starts renewing this node's certificate at half its lifetime. `persist` stores a
    /// renewed identity before it is used (a restart must not come back with the old one).
    pub fn start_cert_renewal(self: &Arc<Self>, persist: PersistIdentity) {
        let me = self.clone();
        self.spawn_owned(async move {
            let every = check_every(me.cfg.cert_lifetime);
            let mut warned_expired = false;
            while !me.is_stopping() {
                match me.renew_if_due(&persist).await {
                    Ok(Some(v)) => {
                        warned_expired = false;
                        tracing::info!(expires_at = v.not_after, "node certificate renewed");
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let current = tls::validity_of(&me.peers().identity().cert_pem);
                        let expired = current.is_ok_and(|v| v.not_after <= tls::unix_now());
                        if expired && !warned_expired {
                            warned_expired = true;
                            tracing::error!(error = %e, "this node's certificate has expired and could not be renewed: peers refuse it until a node holding the CA file signs a new one");
                        } else {
                            tracing::warn!(error = %e, "node certificate renewal failed; retrying");
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
        });
    }

    /// Renews the certificate if due; the new validity when it did.
    async fn renew_if_due(&self, persist: &PersistIdentity) -> Result<Option<Validity>, String> {
        let current = self.peers().identity();
        let v = tls::validity_of(&current.cert_pem).map_err(|e| e.to_string())?;
        if !renewal_due(v, tls::unix_now(), self.cfg.cert_lifetime) {
            return Ok(None);
        }
        let csr = tls::csr_for_key(&current.name, &current.key_pem).map_err(|e| e.to_string())?;
        let cert_pem = self
            .sign_member_csr(self.id, &csr)
            .await
            .map_err(|e| e.to_string())?;
        let renewed = NodeIdentity {
            cert_pem,
            ..current
        };
        let new_v = tls::validity_of(&renewed.cert_pem).map_err(|e| e.to_string())?;
        persist(&renewed)?;
        self.peers().rotate(&renewed).map_err(|e| e.to_string())?;
        Ok(Some(new_v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{test_node, NodeState};

    fn state(ca: &CaMaterial) -> ClusterState {
        let mut s = ClusterState {
            ca: Some(ca.public()),
            ..Default::default()
        };
        let mut n = test_node(2, "r", NodeState::Up);
        n.key_id = "k2".into();
        s.nodes.insert(2, n);
        s.nodes.insert(3, test_node(3, "r", NodeState::Up));
        s
    }

    #[test]
    fn only_a_members_own_key_is_signed_by_the_clusters_own_ca() {
        let ca = tls::new_ca("t").unwrap();
        let s = state(&ca);
        let name = s.nodes[&2].name.clone();
        assert_eq!(may_sign(&s, &ca.cert_pem, 2, "k2"), Ok(name));
        assert_eq!(
            may_sign(&s, &ca.cert_pem, 2, "other"),
            Err(SignRefusal::WrongKey(2)),
            "a member (or anyone asking for it) with another key"
        );
        assert_eq!(
            may_sign(&s, &ca.cert_pem, 4, "k2"),
            Err(SignRefusal::NotMember(4)),
            "removed, or never admitted"
        );
        assert_eq!(
            may_sign(&s, &ca.cert_pem, 3, ""),
            Err(SignRefusal::NoKey(3))
        );
        let other = tls::new_ca("other").unwrap();
        assert_eq!(
            may_sign(&s, &other.cert_pem, 2, "k2"),
            Err(SignRefusal::OtherCa),
            "a CA file from another cluster"
        );
    }

    #[test]
    fn a_certificate_is_renewed_at_half_its_life_or_when_it_outlives_the_setting() {
        let day = Duration::from_secs(86_400);
        let b = BACKDATE.as_secs() as i64;
        let issued = 1_000_000;
        let v = Validity {
            not_before: issued - b,
            not_after: issued + 86_400,
        };
        assert!(!renewal_due(v, issued, day));
        assert!(!renewal_due(v, issued + 43_199, day));
        assert!(renewal_due(v, issued + 43_200, day));
        assert!(renewal_due(v, issued + 90_000, day), "expired: still tried");
        // A ten-year certificate under a one-day setting: renewed at once.
        let long = Validity {
            not_before: issued - 3600,
            not_after: issued + 10 * 365 * 86_400,
        };
        assert!(renewal_due(long, issued, day));
        assert_eq!(check_every(day), Duration::from_secs(60));
        assert_eq!(
            check_every(Duration::from_secs(10)),
            Duration::from_millis(500)
        );
    }
}
