//! What can go wrong with a snapshot.

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot {0} not found")]
    NotFound(String),
    /// A chunk is missing or does not match its hash: the snapshot cannot be restored.
    #[error("snapshot {id} is damaged: {why}")]
    Damaged { id: String, why: String },
    #[error("snapshot manifest {id} has format {format}, this node reads {supported}")]
    Format {
        id: String,
        format: u32,
        supported: u32,
    },
    #[error("object store: {0}")]
    Store(object_store::Error),
    #[error("reading the snapshot's source: {0}")]
    Source(std::io::Error),
    #[error("chunk cache: {0}")]
    Cache(std::io::Error),
    #[error("{0}")]
    Invalid(String),
}
