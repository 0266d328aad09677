//! openraft's network: Raft RPCs as [`rpc`](crate::rpc) calls over the node's QUIC endpoint.

use crate::call_deadlines::MemberDeadlines;
use crate::generation::Generation;
use crate::rpc::{self, Reply, Request};
use crate::types::{Peer, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Timeout, Unreachable,
};
use openraft::network::{RPCOption, RPCTypes, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use std::sync::Arc;
use std::time::Duration;
use warren_transport::{Peers, TransportError};

#[derive(Clone)]
pub struct Network {
    /// This member's node id (named in the errors of its calls).
    pub id: u64,
    pub peers: Arc<Peers>,
    /// This node's generation of the cluster, sent with every call (`generation`).
    pub generation: Arc<Generation>,
    /// The deadline of calls to each member (`call_deadlines`).
    pub deadlines: Arc<MemberDeadlines>,
}

pub struct Connection {
    id: u64,
    peers: Arc<Peers>,
    generation: Arc<Generation>,
    deadlines: Arc<MemberDeadlines>,
    target: u64,
    node: Peer,
}

/// What openraft is told about a failed call, which decides what its replication to that
/// member does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No connection to the member could be made: replication backs off
    /// ([`RaftNetwork::backoff`]) instead of retrying at every heartbeat.
    Unreachable,
    /// The answer did not come within the call's deadline: the next heartbeat tries again
    /// on time. A member that is merely slow (a busy CPU, a lost datagram) must not be left
    /// without heartbeats for a backoff: 500 ms of silence after one late answer is past
    /// the election timeout.
    Timeout,
    /// Anything else on the stream (reset, a bad frame): retried at the next heartbeat.
    Network,
}

/// Pure: how a transport error of a Raft call counts.
pub(crate) fn failure(e: &TransportError) -> Failure {
    match e {
        TransportError::Connect { .. } | TransportError::Tls(_) => Failure::Unreachable,
        TransportError::Timeout { .. } => Failure::Timeout,
        TransportError::Stream(_) | TransportError::Frame(_) | TransportError::Io(_) => {
            Failure::Network
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &Peer) -> Connection {
        Connection {
            id: self.id,
            peers: self.peers.clone(),
            generation: self.generation.clone(),
            deadlines: self.deadlines.clone(),
            target,
            node: node.clone(),
        }
    }
}

fn unexpected<E: std::error::Error>(reply: &Reply) -> RPCError<u64, Peer, E> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
        "unexpected reply {reply:?}"
    ))))
}

impl Connection {
    async fn call<E: std::error::Error>(
        &self,
        req: Request,
        option: &RPCOption,
    ) -> Result<Reply, RPCError<u64, Peer, E>> {
        // openraft gives up at the call's deadline, raised to the longest member's
        // (`raft_runtime`); the call ends itself a little before its own member's, to report
        // a timeout.
        let deadline = self
            .deadlines
            .of(&self.node.name)
            .unwrap_or_else(crate::raft_runtime::call_deadline);
        let least = deadline * 3 / 4;
        let ttl = option.soft_ttl().max(least).max(Duration::from_millis(50));
        let action = match &req {
            Request::Vote(_) => RPCTypes::Vote,
            Request::InstallSnapshot(_) => RPCTypes::InstallSnapshot,
            _ => RPCTypes::AppendEntries,
        };
        let (addr, name) = (&self.node.peer_addr, &self.node.name);
        rpc::call(&self.peers, &self.generation, addr, name, req, ttl)
            .await
            .map_err(|e| match failure(&e) {
                Failure::Unreachable => RPCError::Unreachable(Unreachable::new(&e)),
                Failure::Timeout => RPCError::Timeout(Timeout {
                    action,
                    id: self.id,
                    target: self.target,
                    timeout: ttl,
                }),
                Failure::Network => RPCError::Network(NetworkError::new(&e)),
            })
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, Peer, RaftError<u64>>> {
        match self.call(Request::AppendEntries(req), &option).await? {
            Reply::AppendEntries(Ok(r)) => Ok(r),
            Reply::AppendEntries(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, Peer, RaftError<u64, InstallSnapshotError>>,
    > {
        match self.call(Request::InstallSnapshot(req), &option).await? {
            Reply::InstallSnapshot(Ok(r)) => Ok(r),
            Reply::InstallSnapshot(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            other => Err(unexpected(&other)),
        }
    }

    async fn vote(
        &mut self,
        req: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, Peer, RaftError<u64>>> {
        match self.call(Request::Vote(req), &option).await? {
            Reply::Vote(Ok(r)) => Ok(r),
            Reply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            other => Err(unexpected(&other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_connection_that_cannot_be_made_backs_replication_off() {
        let connect = TransportError::Connect {
            addr: "127.0.0.2:7001".into(),
            message: "timed out".into(),
        };
        assert_eq!(failure(&connect), Failure::Unreachable);
        let late = TransportError::Timeout {
            peer: "b".into(),
            after: Duration::from_millis(100),
        };
        assert_eq!(failure(&late), Failure::Timeout);
        assert_eq!(
            failure(&TransportError::Stream("reset".into())),
            Failure::Network
        );
    }
}
