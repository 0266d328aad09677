//! Joining a cluster: a new node proves it knows the join token (without sending it) over
//! every field it registers, gets a node id and a certificate for the CSR it sent (bound to
//! that id and to the CSR's key), and proof that the answer came from a holder of the same
//! token. A member's name is bound to its key: registering it again with another key (a
//! token holder posing as the leader, or the same name from a wiped disk) is refused.
//!
//! The token is the cluster's own (`join_token` setting, never expires) or an issued one
//! (`wjt_…`, `join_tokens`): then the request names its id, the member opens its sealed
//! value to check the proof, and the registration spends it in the same log entry.

use crate::cluster::{Cluster, ClusterError};
use crate::join_tokens::{seal_name, TokenSpend, CLUSTER_TOKEN_OFF, JOIN_TOKEN_REFUSED};
use crate::state::{Command, CommandResult, NodeId, NAME_TAKEN};
use serde::{Deserialize, Serialize};
use warren_transport::tls;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub name: String,
    pub region: String,
    pub api_addr: String,
    pub peer_addr: String,
    pub capacity: u32,
    pub csr_pem: String,
    /// The id of the issued join token the proof was made with (none: the cluster's token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// HMAC(token, name, region, api_addr, peer_addr, capacity, csr[, token_id]).
    pub proof: String,
}

/// Why a join was refused.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error("invalid join token (the proof does not cover this request)")]
    BadProof,
    #[error("this node admits no joins with the cluster's join token (none configured); use an issued join token")]
    NoClusterToken,
    #[error("{0}")]
    TokenRefused(String),
    #[error("invalid certificate signing request: {0}")]
    BadCsr(String),
    #[error("{0}")]
    NameTaken(String),
    #[error("the node was admitted but its certificate was not signed: {0}")]
    Sign(crate::certs::SignRefusal),
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    pub node_id: NodeId,
    pub cluster: String,
    pub cert_pem: String,
    pub ca_pem: String,
    /// HMAC(token, node id, certificate, CA): the joiner checks it before trusting the CA.
    pub proof: String,
    /// The cluster's secrets key, sealed under a key derived from the join token.
    #[serde(default)]
    pub secrets_key: Option<crate::secrets::Sealed>,
}

impl JoinRequest {
    pub fn new(
        token: &str,
        name: &str,
        region: &str,
        api_addr: &str,
        peer_addr: &str,
        capacity: u32,
        csr_pem: &str,
    ) -> Self {
        let mut req = JoinRequest {
            name: name.into(),
            region: region.into(),
            api_addr: api_addr.into(),
            peer_addr: peer_addr.into(),
            capacity,
            csr_pem: csr_pem.into(),
            token_id: warren_api::join_tokens::token_id(token).map(str::to_string),
            proof: String::new(),
        };
        req.proof = tls::proof(token, &as_slices(&req.signed_parts()));
        req
    }

    /// Whether the proof was made with `token` over exactly these fields.
    pub fn verify(&self, token: &str) -> bool {
        tls::verify_proof(token, &as_slices(&self.signed_parts()), &self.proof)
    }

    /// Every registered field, the CSR and the token's id if issued (each part
    /// length-prefixed by the proof).
    fn signed_parts(&self) -> Vec<Vec<u8>> {
        let mut parts = vec![
            self.name.as_bytes().to_vec(),
            self.region.as_bytes().to_vec(),
            self.api_addr.as_bytes().to_vec(),
            self.peer_addr.as_bytes().to_vec(),
            self.capacity.to_be_bytes().to_vec(),
            self.csr_pem.as_bytes().to_vec(),
        ];
        if let Some(id) = &self.token_id {
            parts.push(id.as_bytes().to_vec());
        }
        parts
    }
}

fn as_slices(parts: &[Vec<u8>]) -> Vec<&[u8]> {
    parts.iter().map(Vec::as_slice).collect()
}

impl JoinResponse {
    /// Whether the response was made by a holder of `token`.
    pub fn verify(&self, token: &str) -> bool {
        tls::verify_proof(
            token,
            &as_slices(&Self::parts(self.node_id, &self.cert_pem, &self.ca_pem)),
            &self.proof,
        )
    }

    fn parts(id: NodeId, cert: &str, ca: &str) -> [Vec<u8>; 3] {
        [
            id.to_be_bytes().to_vec(),
            cert.as_bytes().to_vec(),
            ca.as_bytes().to_vec(),
        ]
    }
}

/// Admits a node: finds the token its request names (the cluster's `cluster_token`, or an
/// issued one from the state), checks its proof, registers it (bound to its CSR's key,
/// spending an issued token), signs its CSR for the id it got. The leader's supervisor then
/// adds it to Raft as a learner (and perhaps a voter) once it runs.
pub async fn admit(
    cluster: &Cluster,
    cluster_token: &str,
    secrets_key: &crate::secrets::SecretsKey,
    req: &JoinRequest,
) -> Result<JoinResponse, JoinError> {
    let (token, spend) = match &req.token_id {
        None if cluster_token.is_empty() => return Err(JoinError::NoClusterToken),
        // Refused here at once when this member knows; the log decides otherwise.
        None if cluster.read(|s| s.cluster_token_off) => {
            return Err(JoinError::TokenRefused(CLUSTER_TOKEN_OFF.to_string()))
        }
        None => (cluster_token.to_string(), None),
        Some(id) => issued_token(cluster, secrets_key, id).await?,
    };
    if !req.verify(&token) {
        return Err(JoinError::BadProof);
    }
    let key_id = tls::key_id_of_csr(&req.csr_pem).map_err(|e| JoinError::BadCsr(e.to_string()))?;
    let cmd = Command::Register {
        name: req.name.clone(),
        region: req.region.clone(),
        api_addr: req.api_addr.clone(),
        peer_addr: req.peer_addr.clone(),
        capacity: req.capacity,
        key_id,
        join_token: spend,
    };
    // Whether the token is still good is decided where it is spent, in the log: a retry of
    // an admission whose answer was lost is answered with the same id, a second node is not.
    let node_id = match cluster.propose(cmd).await? {
        CommandResult::Registered { node } => node,
        CommandResult::Rejected { reason } if reason.starts_with(NAME_TAKEN) => {
            return Err(JoinError::NameTaken(reason))
        }
        CommandResult::Rejected { reason } if reason.starts_with(JOIN_TOKEN_REFUSED) => {
            return Err(JoinError::TokenRefused(reason))
        }
        other => return Err(ClusterError::Rejected(format!("registration gave {other:?}")).into()),
    };
    let (ca, name) = cluster.read(|s| (s.ca.clone(), s.cluster.clone()));
    let ca = ca.ok_or_else(|| ClusterError::Rejected("the cluster has no CA yet".into()))?;
    // Signed here if this member holds the CA key, else by one that does.
    let cert_pem = match cluster.sign_member_csr(node_id, &req.csr_pem).await {
        Ok(cert) => cert,
        Err(refusal) if refusal.retryable() => return Err(JoinError::Sign(refusal)),
        Err(refusal) => {
            // No try of this join will be signed: the registration goes again instead of
            // staying behind as a `joining` node nobody runs.
            forget_unsigned(cluster, node_id).await;
            return Err(JoinError::Sign(refusal));
        }
    };
    let parts = JoinResponse::parts(node_id, &cert_pem, &ca.cert_pem);
    let proof = tls::proof(&token, &as_slices(&parts));
    Ok(JoinResponse {
        node_id,
        cluster: name,
        cert_pem,
        ca_pem: ca.cert_pem,
        proof,
        secrets_key: Some(secrets_key.seal_for_join(&token)),
    })
}

/// Removes the registration of `node`, whose join was refused a certificate, while it is
/// still `joining` (a node that got a certificate in an earlier try and runs is kept).
async fn forget_unsigned(cluster: &Cluster, node: NodeId) {
    let joining = cluster.read(|s| {
        s.nodes
            .get(&node)
            .is_some_and(|n| n.state == crate::state::NodeState::Joining)
    });
    if !joining {
        return;
    }
    match cluster.propose(Command::RemoveNode { node }).await {
        Ok(_) => tracing::info!(
            node,
            "removed the registration of a join that cannot be signed"
        ),
        Err(e) => {
            tracing::warn!(node, error = %e, "cannot remove the registration of a join that cannot be signed: remove it with DELETE /v1/cluster/nodes/{{name}}?force=true")
        }
    }
}

/// How long a member that does not know a token's id waits to have applied what is
/// committed (the token may have been made through another node a moment ago).
const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// The value of the issued token `id`, and its spending at this node's time.
async fn issued_token(
    cluster: &Cluster,
    secrets_key: &crate::secrets::SecretsKey,
    id: &str,
) -> Result<(String, Option<TokenSpend>), JoinError> {
    let lookup = || cluster.read(|s| s.join_tokens.get(id).cloned());
    let record = match lookup() {
        Some(r) => Some(r),
        None => {
            cluster.read_barrier(CATCH_UP).await?;
            lookup()
        }
    };
    let Some(record) = record else {
        return Err(JoinError::TokenRefused(format!(
            "{JOIN_TOKEN_REFUSED}: join token {id} is unknown or revoked"
        )));
    };
    let value = secrets_key
        .open(&seal_name(id), &record.sealed)
        .map_err(|e| ClusterError::Rejected(format!("join token {id} cannot be opened: {e}")))?;
    let spend = TokenSpend {
        id: id.to_string(),
        now_ms: warren_api::time::unix_millis(std::time::SystemTime::now()),
    };
    Ok((value, Some(spend)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> JoinRequest {
        JoinRequest::new("tok", "n2", "eu", "127.0.0.2:1", "127.0.0.2:2", 4, "csr")
    }

    #[test]
    fn the_proof_covers_every_registered_field() {
        assert!(request().verify("tok"));
        assert!(!request().verify("other"));
        let tampered: [fn(&mut JoinRequest); 6] = [
            |r| r.name = "n1".into(),
            |r| r.region = "us".into(),
            |r| r.api_addr = "10.0.0.1:1".into(),
            |r| r.peer_addr = "10.0.0.1:2".into(),
            |r| r.capacity = 64,
            |r| r.csr_pem = "other csr".into(),
        ];
        let issued = format!("wjt_0123456789abcdef_{}", "cd".repeat(32));
        let with_id = JoinRequest::new(&issued, "n2", "eu", "a", "p", 4, "csr");
        assert_eq!(with_id.token_id.as_deref(), Some("0123456789abcdef"));
        assert!(with_id.verify(&issued));
        let mut other_id = with_id.clone();
        other_id.token_id = Some("fedcba9876543210".into());
        assert!(!other_id.verify(&issued), "the token's id is covered too");
        for (i, change) in tampered.iter().enumerate() {
            let mut r = request();
            change(&mut r);
            assert!(
                !r.verify("tok"),
                "field {i} changed and the proof still held"
            );
        }
    }
}
