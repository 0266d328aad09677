//! Joining a cluster: a new node proves it knows the join token (without sending it), gets a
//! node id and a certificate for the CSR it sent, and proof that the answer came from a
//! holder of the same token.

use crate::cluster::{Cluster, ClusterError};
use crate::state::{Command, CommandResult, NodeId};
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
    /// HMAC(token, name, csr).
    pub proof: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinResponse {
    pub node_id: NodeId,
    pub cluster: String,
    pub cert_pem: String,
    pub ca_pem: String,
    /// HMAC(token, node id, certificate, CA): the joiner checks it before trusting the CA.
    pub proof: String,
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
        JoinRequest {
            name: name.into(),
            region: region.into(),
            api_addr: api_addr.into(),
            peer_addr: peer_addr.into(),
            capacity,
            csr_pem: csr_pem.into(),
            proof: tls::proof(token, &[name.as_bytes(), csr_pem.as_bytes()]),
        }
    }
}

impl JoinResponse {
    /// Whether the response was made by a holder of `token`.
    pub fn verify(&self, token: &str) -> bool {
        tls::verify_proof(
            token,
            &Self::parts(self.node_id, &self.cert_pem, &self.ca_pem)
                .iter()
                .map(|v| v.as_slice())
                .collect::<Vec<_>>(),
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

/// Admits a node: checks its proof, registers it, signs its CSR. The leader's supervisor then
/// adds it to Raft as a learner (and perhaps a voter) once it runs.
pub async fn admit(
    cluster: &Cluster,
    token: &str,
    req: &JoinRequest,
) -> Result<JoinResponse, ClusterError> {
    if !tls::verify_proof(
        token,
        &[req.name.as_bytes(), req.csr_pem.as_bytes()],
        &req.proof,
    ) {
        return Err(ClusterError::Rejected("invalid join token".into()));
    }
    let cmd = Command::Register {
        name: req.name.clone(),
        region: req.region.clone(),
        api_addr: req.api_addr.clone(),
        peer_addr: req.peer_addr.clone(),
        capacity: req.capacity,
    };
    let node_id = match cluster.propose(cmd).await? {
        CommandResult::Registered { node } => node,
        other => {
            return Err(ClusterError::Rejected(format!(
                "registration gave {other:?}"
            )))
        }
    };
    let (ca, name) = cluster.read(|s| (s.ca.clone(), s.cluster.clone()));
    let ca = ca.ok_or_else(|| ClusterError::Rejected("the cluster has no CA yet".into()))?;
    let cert_pem = tls::sign_csr(&ca, &req.csr_pem, &req.name)
        .map_err(|e| ClusterError::Rejected(e.to_string()))?;
    let parts = JoinResponse::parts(node_id, &cert_pem, &ca.cert_pem);
    let proof = tls::proof(
        token,
        &parts.iter().map(|v| v.as_slice()).collect::<Vec<_>>(),
    );
    Ok(JoinResponse {
        node_id,
        cluster: name,
        cert_pem,
        ca_pem: ca.cert_pem,
        proof,
    })
}
