//! Raft and cluster RPCs: one request frame and one reply frame per QUIC stream.

use crate::generation::Generation;
use crate::state::{Command, CommandResult, NodeId};
use crate::types::TypeConfig;
use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use warren_transport::{frame, Peers, StreamKind, TransportError};

/// Version of the RPC messages; a peer that speaks another is refused. 2: `Proposed` carries
/// the commit's log index. 3: `Sign`.
pub const RPC_VERSION: u32 = 3;

#[derive(Debug, Serialize, Deserialize)]
pub struct Envelope<T> {
    pub version: u32,
    /// The sender's generation of the cluster (`generation`); none while it has applied
    /// nothing. Nodes before generations send none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<u64>,
    pub body: T,
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Request {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<u64>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Liveness probe from the leader.
    Ping,
    /// A command for the leader to commit (sent by followers).
    Propose(Command),
    /// A follower asks the leader for an ownership lease (`lease`): answered once a quorum
    /// confirmed the leader after the request arrived.
    Lease,
    /// A certificate for member `node`'s CSR, from a node that holds the CA key (`certs`).
    Sign {
        node: NodeId,
        csr_pem: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
pub enum Reply {
    AppendEntries(Result<AppendEntriesResponse<u64>, RaftError<u64>>),
    Vote(Result<VoteResponse<u64>, RaftError<u64>>),
    InstallSnapshot(Result<InstallSnapshotResponse<u64>, RaftError<u64, InstallSnapshotError>>),
    Pong {
        term: u64,
    },
    /// The leader's answer to `Propose`: the result and the log index it was committed at.
    Proposed(Result<Proposal, String>),
    /// A lease granted: it counts once `read_index` is applied.
    Lease {
        read_index: u64,
    },
    /// The answer to `Sign`: the certificate, or why not.
    Signed(Result<String, String>),
    Refused(String),
}

/// A command the leader committed and applied for a follower.
#[derive(Debug, Serialize, Deserialize)]
pub struct Proposal {
    pub result: CommandResult,
    /// Its log index: the follower answers its caller once it has applied this far itself.
    pub index: u64,
}

/// Resolves a peer address (`host:port`).
pub async fn resolve(addr: &str) -> Result<SocketAddr, TransportError> {
    if let Ok(a) = addr.parse() {
        return Ok(a);
    }
    tokio::net::lookup_host(addr)
        .await?
        .next()
        .ok_or_else(|| TransportError::Connect {
            addr: addr.into(),
            message: "no address".into(),
        })
}

/// Sends one request to the peer `name` at `addr` and waits for its reply. A node left
/// behind by a recovery of its cluster sends nothing, and a reply from one is not taken
/// (`generation`).
pub async fn call(
    peers: &Peers,
    generation: &Generation,
    addr: &str,
    name: &str,
    req: Request,
    timeout: Duration,
) -> Result<Reply, TransportError> {
    if let Some(why) = generation.superseded() {
        return Err(TransportError::Frame(why));
    }
    let addr = resolve(addr).await?;
    let exchange = async {
        let (mut send, mut recv) = peers.open(addr, name, StreamKind::Rpc).await?;
        frame::write(
            &mut send,
            &Envelope {
                version: RPC_VERSION,
                generation: generation.mine(),
                body: req,
            },
        )
        .await?;
        send.finish()
            .map_err(|e| TransportError::Stream(e.to_string()))?;
        let reply: Envelope<Reply> = frame::read(&mut recv).await?;
        if reply.version != RPC_VERSION {
            return Err(TransportError::Frame(format!(
                "peer speaks RPC version {}",
                reply.version
            )));
        }
        if let Some(why) = generation.meet(reply.generation).refusal() {
            return Err(TransportError::Frame(format!("{name}: {why}")));
        }
        Ok(reply.body)
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| TransportError::Timeout {
            peer: name.to_string(),
            after: timeout,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a node before generations wrote and read: the same envelope without the field.
    #[derive(Debug, Serialize, Deserialize)]
    struct EnvelopeBeforeGenerations<T> {
        version: u32,
        body: T,
    }

    #[test]
    fn envelopes_with_and_without_a_generation_read_both_ways() {
        // From a node before generations: read as "none", which every node proceeds with.
        let old = serde_json::to_vec(&EnvelopeBeforeGenerations {
            version: RPC_VERSION,
            body: Request::Ping,
        })
        .unwrap();
        let read: Envelope<Request> = serde_json::from_slice(&old).unwrap();
        assert_eq!(read.generation, None);
        assert!(matches!(read.body, Request::Ping));
        // To a node before generations: the field it does not know is passed over.
        let new = serde_json::to_vec(&Envelope {
            version: RPC_VERSION,
            generation: Some(1),
            body: Request::Ping,
        })
        .unwrap();
        let read: EnvelopeBeforeGenerations<Request> = serde_json::from_slice(&new).unwrap();
        assert_eq!(read.version, RPC_VERSION);
        // A node that has applied nothing sends no field at all.
        let none = serde_json::to_string(&Envelope {
            version: RPC_VERSION,
            generation: None,
            body: Request::Ping,
        })
        .unwrap();
        assert!(!none.contains("generation"), "{none}");
    }
}
