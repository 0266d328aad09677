//! The sandbox host: everything one node does to run sandboxes on its own machine.
//!
//! - `runtime`: the container runtime boundary (a trait) and its Docker implementation
//!   (bollard), with per-sandbox networks from a pre-created pool and host firewall rules.
//! - `guest`: locating the guest agent binary and talking to it over its unix socket.
//! - `sandbox`: records, the lifecycle state machine, and the manager that creates, adopts,
//!   recovers and deletes sandboxes.
//! - `usage`: metering (cgroup CPU, memory, running time, egress bytes) into the node's
//!   usage ledger, and the node's part of usage reports.
//!
//! It knows nothing of HTTP routing, auth or clustering (that is `warren-router`); it must not
//! depend on the router, the CLI or the client.

pub mod config;
pub mod error;
pub mod guest;
pub mod metrics;
pub mod runtime;
pub mod safety;
pub mod sandbox;
pub mod usage;

pub use config::NodeConfig;
pub use error::NodeError;
pub use sandbox::manager::SandboxManager;
