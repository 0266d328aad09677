//! `GET /v1/cluster/backup` (admin): what rebuilds the cluster from this node when every
//! node is lost, as one tar (sent as `application/octet-stream`): a consistent copy of its Raft state (a RocksDB checkpoint taken
//! while it runs) and its cluster files (identity, secrets key, and the CA when this node
//! holds it). `warren cluster restore` unpacks it into an empty data dir and makes that node
//! the only voter of the next generation (`warren_consensus::recover`).

use crate::error::ApiResult;
use crate::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::path::{Path, PathBuf};
use warren_api::ApiError;
use warren_consensus::Cluster;

/// Where a backup's parts are: the node's cluster dir (its Raft database is `raft` in it;
/// the backup is put together beside it) and its cluster files, by their name in the tar.
#[derive(Debug, Clone)]
pub struct BackupSources {
    pub cluster_dir: PathBuf,
    pub files: Vec<(String, PathBuf)>,
}

/// The directory inside the tar that holds everything.
pub const TAR_ROOT: &str = "cluster";

pub async fn backup(
    State(st): State<AppState>,
    axum::Extension(who): axum::Extension<crate::auth::Principal>,
) -> ApiResult<Response> {
    who.require_admin("a backup of the cluster's state")?;
    let cluster = st.cluster.cluster.clone();
    let sources = st.cluster.backup.clone();
    let (dir, tar) = tokio::task::spawn_blocking(move || write_tar(&cluster, &sources))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))??;
    let file = tokio::fs::File::open(&tar)
        .await
        .map_err(|e| ApiError::internal(format!("backup: {e}")))?;
    // The directory (and the tar in it) goes once the body has been sent.
    let body = tokio_util::io::ReaderStream::new(file).map(move |chunk| {
        let _kept = &dir;
        chunk
    });
    let name = format!(
        "warren-backup-{}-{}.tar",
        st.node_id,
        warren_api::time::now_rfc3339().replace(':', "")
    );
    Ok((
        [
            (
                http::header::CONTENT_TYPE,
                "application/octet-stream".to_string(),
            ),
            (
                http::header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response())
}

/// Puts the tar together in a fresh directory beside the Raft database (so the checkpoint
/// hard-links its files): the directory, removed when dropped, and the tar's path.
fn write_tar(
    cluster: &Cluster,
    sources: &BackupSources,
) -> Result<(tempfile::TempDir, PathBuf), ApiError> {
    let failed = |e: &dyn std::fmt::Display| ApiError::internal(format!("backup: {e}"));
    let dir = tempfile::Builder::new()
        .prefix(".backup-")
        .tempdir_in(&sources.cluster_dir)
        .map_err(|e| failed(&e))?;
    let raft = dir.path().join("raft");
    cluster.checkpoint(&raft).map_err(|e| failed(&e))?;
    let tar = dir.path().join("backup.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&tar).map_err(|e| failed(&e))?);
    b.append_dir_all(Path::new(TAR_ROOT).join("raft"), &raft)
        .map_err(|e| failed(&e))?;
    for (name, path) in &sources.files {
        if path.is_file() {
            b.append_path_with_name(path, Path::new(TAR_ROOT).join(name))
                .map_err(|e| failed(&e))?;
        }
    }
    b.into_inner()
        .and_then(|f| f.sync_all())
        .map_err(|e| failed(&e))?;
    Ok((dir, tar))
}
