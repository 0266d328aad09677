//! Snapshots in object storage.
//!
//! A snapshot is an archive (a tar stream the caller produces) cut into content-defined
//! chunks (FastCDC), each compressed with zstd and stored once under its BLAKE3 hash, plus a
//! versioned manifest that lists the chunks in order. Identical content — a second snapshot
//! of a barely changed sandbox, many forks — is stored once. Chunks nothing refers to are
//! collected by [`SnapshotStore::collect_garbage`].
//!
//! Nothing here holds a whole snapshot in memory: chunks stream in and out, a few at a time.
//! A node-local [`ChunkCache`] (bounded, least recently used first) keeps recently written or
//! read chunks, so that restoring a popular snapshot reads local disk.

mod cache;
mod chunk;
mod error;
mod location;
mod manifest;
mod store;

pub use cache::{ChunkCache, ChunkCacheMetrics};
pub use error::SnapshotError;
pub use location::open_object_store;
pub use manifest::{
    new_snapshot_id, validate_snapshot_id, ChunkRef, Manifest, NewSnapshot, SnapshotOrigin,
    MANIFEST_FORMAT,
};
pub use store::{GcReport, Prepared, SnapshotStore};
