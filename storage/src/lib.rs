//! Durable storage of a node.
//!
//! - `raftdb`: the Raft log, Raft metadata (vote, purge point) and the latest state-machine
//!   snapshot, in one RocksDB database. Byte-level on purpose: it knows nothing of openraft
//!   or of what the entries mean (`warren-consensus` encodes them), so that RocksDB — slow to
//!   compile — is a dependency of this crate alone. Every write that Raft relies on is
//!   synced to the WAL before it returns.
//! - `snapshots`: sandbox snapshots in object storage (chunked, deduplicated, compressed),
//!   with a node-local chunk cache.
//! - `ledger`: the usage ledger of a node (per-interval records and counter cursors), and
//!   `usage_export`: its copy in the object store.
//! - `blocking`: the threads its CPU-heavy work runs on, chosen by the caller.
//! - `metered`: the object store wrapped to count its requests and bytes.
//! - `private_file`: files only this node's user may read, replaced atomically.
//!
//! It must not depend on the other warren crates.

mod blocking;
pub mod ledger;
pub mod metered;
pub mod private_file;
mod raftdb;
pub mod snapshots;
pub mod usage_export;

pub use blocking::BlockingPool;

pub use raftdb::{RaftDb, StorageError, FORMAT_VERSION};
