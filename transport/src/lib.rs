//! QUIC between the nodes of a cluster.
//!
//! - `tls`: the cluster CA (created at bootstrap), node certificates issued from a joiner's
//!   CSR (so private keys never travel), rustls configurations for mutual TLS, and the
//!   join-token proofs that authenticate a join without sending the token.
//! - `peers`: one QUIC endpoint per node; pooled connections to peers; each bidirectional
//!   stream starts with a [`StreamKind`] byte so Raft RPCs and forwarded HTTP share it.
//! - `frame`: length-prefixed JSON messages for RPCs.
//! - `udp_socket`: the endpoint's UDP socket, with buffers that hold bursts of datagrams.
//! - `quinn_runtime`: keeps the endpoint and every connection on the runtime it was bound on.
//!
//! It knows nothing about Raft or HTTP semantics; those crates bring their own handlers.

pub mod frame;
mod peer_metrics;
pub mod peers;
mod quinn_runtime;
pub mod tls;
pub mod udp_socket;

pub use peers::{Handler, Lane, Peers, StreamKind};
pub use quinn::{RecvStream, SendStream};
pub use tls::{CaMaterial, NodeIdentity, PeerId};

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("tls: {0}")]
    Tls(String),
    #[error("connect to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("stream: {0}")]
    Stream(String),
    #[error("frame: {0}")]
    Frame(String),
    /// The call's deadline passed before its answer arrived.
    #[error("no reply from {peer} within {after:?}")]
    Timeout {
        peer: String,
        after: std::time::Duration,
    },
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
}
