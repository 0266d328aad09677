//! A snapshot written into a new container while the engine starts it. A restore (or a
//! wake, or a new sandbox from a snapshot) used to start the container, wait for its guest,
//! and only then remove the snapshot's deleted paths and unpack its archive. The engine
//! mounts the container's root filesystem at the very beginning of a start, though, so the
//! node can do both there while the rest of the start runs: the host's guest binary, given
//! that mount as its root (`enter::Target::host_mount`), as when it works inside a running
//! container. The sandbox is ready when both are done.

use super::persist::tar_stream;
use crate::runtime::host_work::HostWork;
use crate::runtime::{enter, RootFill};
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use warren_api::snapshot::{IdShift, RemovePathsRequest};
use warren_api::ApiError;
use warren_storage::snapshots::Prepared;

/// The snapshot to write, until it is written.
pub(super) struct SnapshotFill {
    prepared: Mutex<Option<Prepared>>,
    guest_binary: PathBuf,
    /// The new container's ids on the host (its user namespace).
    shift: Option<IdShift>,
    host_work: Arc<HostWork>,
}

impl SnapshotFill {
    pub(super) fn new(
        prepared: Prepared,
        guest_binary: PathBuf,
        shift: Option<IdShift>,
        host_work: Arc<HostWork>,
    ) -> Self {
        SnapshotFill {
            prepared: Mutex::new(Some(prepared)),
            guest_binary,
            shift,
            host_work,
        }
    }

    /// The snapshot back, when the fill never ran (the engine's mount was not visible).
    pub(super) fn into_unwritten(self) -> Option<Prepared> {
        self.prepared.into_inner().expect("fill lock")
    }

    /// Whether this node can write files into a mount as root would (the guest binary
    /// changes its root directory into it).
    pub(super) fn possible() -> bool {
        crate::runtime::running_as_root()
    }
}

#[async_trait]
impl RootFill for SnapshotFill {
    async fn fill(&self, root: std::fs::File) -> Result<(), ApiError> {
        let prepared = self
            .prepared
            .lock()
            .expect("fill lock")
            .take()
            .ok_or_else(|| ApiError::internal("the snapshot was already written"))?;
        let target = enter::Target::host_mount(root, &self.guest_binary)
            .map_err(|e| ApiError::internal(format!("cannot open the node's namespace: {e}")))?
            .with_id_shift(self.shift)
            .in_host_work(&self.host_work);
        // Deletions first: a directory the snapshot replaced is both deleted and saved.
        let deleted = &prepared.manifest().deleted;
        if !deleted.is_empty() {
            let request = serde_json::to_vec(&RemovePathsRequest {
                paths: deleted.clone(),
            })
            .expect("serializes");
            enter::remove_in_container(&target, request)
                .await
                .map_err(|e| ApiError::internal(format!("cannot remove deleted paths: {e}")))?;
        }
        let unpacker = enter::Unpacker::start(&target)
            .map_err(|e| ApiError::internal(format!("cannot start the unpacker: {e}")))?;
        unpacker
            .unpack(tar_stream(prepared))
            .await
            .map_err(|e| ApiError::internal(format!("cannot unpack the snapshot: {e}")))
    }
}
