//! `warren cluster recover`: makes a stopped node the only voter of its cluster when the
//! majority is lost for good (`warren_consensus::recover`), from its data dir; and
//! `warren cluster restore`, the same from a backup (`GET /v1/cluster/backup`) unpacked into
//! an empty data dir, when every node is lost.

use crate::identity::{StoredIdentity, IDENTITY_FORMAT};
use anyhow::Context;
use std::path::{Path, PathBuf};
use warren_consensus::recover::{recover_alone, RecoverError, Recovered};

/// What a recovery did (or, without `write`, would do), for the operator.
pub struct RecoveryReport {
    pub node: String,
    pub recovered: Recovered,
    /// Where the old Raft state was copied (written only with `write`).
    pub backup: PathBuf,
    /// The node's CA file, when it has none: it cannot admit new nodes or renew
    /// certificates without one (docs/operations.md).
    pub missing_ca: Option<PathBuf>,
}

impl RecoveryReport {
    /// Lines for the operator.
    pub fn describe(&self, written: bool) -> String {
        let r = &self.recovered;
        let verb = if written { "is now" } else { "would become" };
        format!(
            "node {} {verb} the only voter of its cluster (voters before: {}), at term {} \
             index {} ({} log entries replayed on its last snapshot)\n\
             marked down, for their sandboxes to fail over here: {}\n\
             the old Raft state {}: {}",
            self.node,
            r.previous_voters.len(),
            r.log_id.leader_id.term,
            r.log_id.index,
            r.replayed,
            if r.marked_down.is_empty() {
                "none".to_string()
            } else {
                r.marked_down.join(", ")
            },
            if written {
                "is kept at"
            } else {
                "would be kept at"
            },
            self.backup.display(),
        ) + &match &self.missing_ca {
            None => String::new(),
            Some(ca) => format!(
                "\nthis node holds no cluster CA at {} (with --data-dir, the default place; \
                 --config reads its ca_file setting): without it no new node can join and \
                 certificates lapse within cert_lifetime_s; copy a backup of the CA file \
                 there before starting it",
                ca.display()
            ),
        }
    }
}

/// Reads the node's identity in `data_dir` and recovers its Raft state (`write`: for real;
/// otherwise only says what it would do). The node must be stopped. `ca_file`: its
/// `ca_file` setting, when it has one.
pub fn recover_cluster(
    data_dir: &Path,
    ca_file: Option<PathBuf>,
    write: bool,
) -> anyhow::Result<RecoveryReport> {
    let cluster_dir = data_dir.join("cluster");
    let id_path = cluster_dir.join("identity.json");
    let bytes = std::fs::read(&id_path).with_context(|| {
        format!(
            "{} has no cluster identity ({}): is it a node's data dir?",
            data_dir.display(),
            id_path.display()
        )
    })?;
    let stored: StoredIdentity = serde_json::from_slice(&bytes).context("identity.json")?;
    anyhow::ensure!(
        stored.format == IDENTITY_FORMAT,
        "identity.json has an unknown format {}",
        stored.format
    );
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let backup = cluster_dir.join(format!("raft.before-recovery-{stamp}"));
    let recovered = recover_alone(&cluster_dir.join("raft"), stored.node_id, &backup, write)?;
    let ca = ca_file.unwrap_or_else(|| cluster_dir.join("ca.pem"));
    Ok(RecoveryReport {
        node: stored.identity.name,
        recovered,
        backup,
        missing_ca: (!ca.exists()).then_some(ca),
    })
}

/// What a restore did: the node's recovery, or nothing to recover (the backup was of a
/// cluster of one, which the restored node is again as it was).
pub enum Restored {
    Recovered(Box<RecoveryReport>),
    Alone,
}

/// Unpacks a backup (`GET /v1/cluster/backup`) into `data_dir`, which must hold no cluster
/// state yet, and makes that node the only voter of the next generation of its cluster.
/// `secrets_key_file` and `ca_file`: the node's settings of those, when it has them.
pub fn restore_backup(
    backup: &Path,
    data_dir: &Path,
    secrets_key_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
) -> anyhow::Result<Restored> {
    let cluster_dir = data_dir.join("cluster");
    for held in ["raft", "identity.json"] {
        anyhow::ensure!(
            !cluster_dir.join(held).exists(),
            "{} already holds a node's cluster state ({held}): a backup is restored only into \
             an empty data dir",
            data_dir.display()
        );
    }
    std::fs::create_dir_all(&cluster_dir)
        .with_context(|| format!("cannot make {}", cluster_dir.display()))?;
    let unpacked = tempfile::Builder::new()
        .prefix(".restore-")
        .tempdir_in(&cluster_dir)?;
    let file =
        std::fs::File::open(backup).with_context(|| format!("cannot read {}", backup.display()))?;
    // `unpack` refuses entries whose paths would leave the directory.
    tar::Archive::new(file)
        .unpack(unpacked.path())
        .with_context(|| format!("{} is not a readable tar", backup.display()))?;
    let root = unpacked.path().join("cluster");
    for needed in ["raft", "identity.json"] {
        anyhow::ensure!(
            root.join(needed).exists(),
            "{} is not a warren backup: it has no cluster/{needed}",
            backup.display()
        );
    }
    let places = [
        ("identity.json", cluster_dir.join("identity.json")),
        (
            "secrets.key",
            secrets_key_file.unwrap_or_else(|| cluster_dir.join("secrets.key")),
        ),
        (
            "ca.pem",
            ca_file
                .clone()
                .unwrap_or_else(|| cluster_dir.join("ca.pem")),
        ),
    ];
    for (name, to) in places {
        let from = root.join(name);
        if from.exists() {
            if let Some(dir) = to.parent() {
                std::fs::create_dir_all(dir)?;
            }
            std::fs::copy(&from, &to).with_context(|| format!("cannot write {}", to.display()))?;
        }
    }
    // The database last: a restore cut short leaves no `raft`, and can be run again.
    std::fs::rename(root.join("raft"), cluster_dir.join("raft"))?;
    match recover_cluster(data_dir, ca_file, true) {
        Ok(report) => Ok(Restored::Recovered(Box::new(report))),
        Err(e) => match e.downcast_ref::<RecoverError>() {
            Some(RecoverError::AlreadyAlone(_)) => Ok(Restored::Alone),
            _ => Err(e),
        },
    }
}

/// Removes what a backup (`.backup-*`, beside the Raft database) or a restore
/// (`.restore-*`) cut short by the node's end left in `cluster_dir`.
pub fn remove_leftovers(cluster_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(cluster_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".backup-") || name.starts_with(".restore-") {
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                tracing::warn!(path = %e.path().display(), error = %err, "cannot remove what a backup or restore left");
            }
        }
    }
}
