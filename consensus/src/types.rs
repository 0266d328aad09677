//! openraft's type configuration.

use serde::{Deserialize, Serialize};
use std::fmt;
#[allow(unused_imports)] // used by declare_raft_types!
use std::io::Cursor;

/// What Raft needs to know to reach a member.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub name: String,
    pub peer_addr: String,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.peer_addr)
    }
}

openraft::declare_raft_types!(
    /// warren's Raft types: commands of the state machine, u64 node ids, `Peer` nodes.
    pub TypeConfig:
        D = crate::state::Command,
        R = crate::state::CommandResult,
        Node = Peer,
        AsyncRuntime = crate::raft_runtime::RaftRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<u64>;
pub type StoredMembership = openraft::StoredMembership<u64, Peer>;
