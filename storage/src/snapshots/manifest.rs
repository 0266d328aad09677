//! The snapshot manifest: what a snapshot is made of (versioned, written once).

use serde::{Deserialize, Serialize};
use warren_api::keys::DEFAULT_TENANT;

/// Version of the manifest format. Readers refuse formats they do not know.
pub const MANIFEST_FORMAT: u32 = 1;

/// Why a snapshot exists. Sleep snapshots belong to their sandbox and go with it; the others
/// stay until deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotOrigin {
    User,
    Fork,
    Sleep,
    /// A running sandbox's periodic recovery point.
    Checkpoint,
    /// What a fenced copy held when the copy that replaced it won (kept for recovery).
    Conflict,
}

impl SnapshotOrigin {
    /// Snapshots the node makes and retires by itself (sleep and checkpoint): a sandbox's
    /// recovery points. The others stay until deleted.
    pub fn is_recovery_point(self) -> bool {
        matches!(self, SnapshotOrigin::Sleep | SnapshotOrigin::Checkpoint)
    }

    /// Snapshots a tenant's `max_snapshot_bytes` counts: those its calls made (a snapshot or
    /// a fork), which stay until it deletes them.
    pub fn counts_for_quota(self) -> bool {
        matches!(self, SnapshotOrigin::User | SnapshotOrigin::Fork)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotOrigin::User => "user",
            SnapshotOrigin::Fork => "fork",
            SnapshotOrigin::Sleep => "sleep",
            SnapshotOrigin::Checkpoint => "checkpoint",
            SnapshotOrigin::Conflict => "conflict",
        }
    }
}

/// One chunk of the archive, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// BLAKE3 of the raw bytes (hex): the chunk's name and checksum.
    pub hash: String,
    /// Raw bytes.
    pub size: u32,
    /// Compressed bytes as stored.
    pub stored: u32,
}

/// What the caller says about a snapshot it is about to write.
#[derive(Debug, Clone)]
pub struct NewSnapshot {
    pub id: String,
    pub sandbox: String,
    pub name: Option<String>,
    pub origin: SnapshotOrigin,
    pub created_at: String,
    pub image: String,
    /// Directories saved; empty means the whole filesystem.
    pub dirs: Vec<String>,
    /// Paths of the image that the sandbox deleted (restores delete them again).
    pub deleted: Vec<String>,
    /// The tenant whose sandbox it was saved from.
    pub tenant: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: u32,
    pub id: String,
    pub sandbox: String,
    pub name: Option<String>,
    pub origin: SnapshotOrigin,
    pub created_at: String,
    pub image: String,
    pub dirs: Vec<String>,
    pub deleted: Vec<String>,
    /// Raw bytes of the archive.
    pub size_bytes: u64,
    /// Bytes of its chunks as stored (compressed), counting shared chunks too.
    pub stored_bytes: u64,
    /// Bytes this snapshot added to the store (chunks no earlier snapshot had).
    pub new_bytes: u64,
    pub chunks: Vec<ChunkRef>,
    /// The tenant whose sandbox it was saved from (none: saved before tenants, the default
    /// tenant's). Only that tenant's sandboxes start from it, and only its keys see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

impl Manifest {
    /// The tenant it belongs to.
    pub fn tenant(&self) -> &str {
        self.tenant.as_deref().unwrap_or(DEFAULT_TENANT)
    }

    pub fn key(id: &str) -> object_store::path::Path {
        object_store::path::Path::from(format!("snapshots/{id}.json"))
    }
}

/// A new, unique, time-ordered snapshot id: `snap-` + 12 hex digits of milliseconds + 8 random.
pub fn new_snapshot_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    format!("snap-{ms:012x}{:08x}", rand::random::<u32>())
}

/// Snapshot ids are DNS-label-like: 1–80 of `[a-z0-9-]`.
pub fn validate_snapshot_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 80
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid snapshot id {id:?}: use 1-80 characters of a-z, 0-9 and -"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_valid_unique_and_ordered() {
        let a = new_snapshot_id();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = new_snapshot_id();
        assert!(validate_snapshot_id(&a).is_ok());
        assert!(a < b);
        assert!(validate_snapshot_id("../x").is_err());
        assert!(validate_snapshot_id("").is_err());
        assert!(validate_snapshot_id("Snap").is_err());
    }
}
