//! openraft's network: Raft RPCs as [`rpc`](crate::rpc) calls over the node's QUIC endpoint.

use crate::rpc::{self, Reply, Request};
use crate::types::{Peer, TypeConfig};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use std::sync::Arc;
use std::time::Duration;
use warren_transport::Peers;

#[derive(Clone)]
pub struct Network {
    pub peers: Arc<Peers>,
}

pub struct Connection {
    peers: Arc<Peers>,
    target: u64,
    node: Peer,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: u64, node: &Peer) -> Connection {
        Connection {
            peers: self.peers.clone(),
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
        let ttl = option.soft_ttl().max(Duration::from_millis(50));
        rpc::call(&self.peers, &self.node.peer_addr, &self.node.name, req, ttl)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))
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
