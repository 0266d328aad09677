//! Wire types shared by every part of warren: requests, responses, stream events and the
//! error model of the public API (`docs/api.md`), which the node also speaks to its guest
//! agent. Pure data and validation (and the one clock of the node-to-guest fence): this crate
//! must not depend on tokio, HTTP stacks or any other warren crate, so that the static guest
//! binary and SDKs can use it cheaply.

pub mod egress;
pub mod error;
pub mod exec;
pub mod fence;
pub mod files;
pub mod git;
pub mod guest_auth;
pub mod ids;
pub mod interpreter;
pub mod join_tokens;
pub mod keys;
#[cfg(feature = "openapi")]
pub mod openapi;
pub mod ports;
pub mod preview;
pub mod process;
pub mod sandbox;
pub mod session;
pub mod snapshot;
pub mod sse;
pub mod tenants;
pub mod terminal;
pub mod ticket;
pub mod time;
pub mod usage;
pub mod watch;

pub use error::{ApiError, ErrorCode};

/// Version of the public API served under `/v1`.
pub const API_VERSION: u32 = 1;

/// Version of the node-to-guest protocol; a node refuses a guest that speaks another one
/// (checked in the handshake of every connection, `guest_auth`). 2: the handshake, the run
/// directory inside the container, `PUT /config`.
pub const GUEST_PROTOCOL_VERSION: u32 = 2;

/// Header carrying the request id on every response.
pub const HEADER_REQUEST_ID: &str = "x-request-id";
/// Header naming the node that ran the operation.
pub const HEADER_NODE: &str = "x-warren-node";
