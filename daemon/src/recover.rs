//! `warren cluster recover`: makes a stopped node the only voter of its cluster when the
//! majority is lost for good (`warren_consensus::recover`), from its data dir.

use crate::identity::{StoredIdentity, IDENTITY_FORMAT};
use anyhow::Context;
use std::path::{Path, PathBuf};
use warren_consensus::recover::{recover_alone, Recovered};

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
