//! Snapshots, restore and fork (`/v1/snapshots`, `/v1/sandboxes/{id}/snapshots|restore|fork`),
//! and the node-to-guest archive calls behind them.

use crate::sandbox::Sandbox;
use crate::ApiError;
use serde::{Deserialize, Serialize};

/// A snapshot as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Snapshot {
    pub id: String,
    pub sandbox: String,
    pub name: Option<String>,
    pub created_at: String,
    /// Bytes of the saved files (uncompressed archive).
    pub size_bytes: u64,
    /// Directories saved; empty when the whole filesystem was.
    pub dirs: Vec<String>,
    pub image: String,
    /// `user`, `fork` or `sleep` (sleep snapshots go with their sandbox).
    pub origin: String,
    /// Compressed bytes of its chunks, shared ones included.
    pub stored_bytes: u64,
    /// Bytes this snapshot added to the store.
    pub new_bytes: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshotRequest {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub dirs: Option<Vec<String>>,
}

/// Longest snapshot name.
pub const MAX_SNAPSHOT_NAME: usize = 200;

impl CreateSnapshotRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(n) = &self.name {
            if n.is_empty() || n.len() > MAX_SNAPSHOT_NAME || n.chars().any(char::is_control) {
                return Err(ApiError::invalid(format!(
                    "invalid snapshot name: use 1-{MAX_SNAPSHOT_NAME} printable characters"
                )));
            }
        }
        if let Some(dirs) = &self.dirs {
            validate_dirs(dirs)?;
        }
        Ok(())
    }
}

/// Directories to save: absolute, normalised paths, not `/` (that is the whole filesystem).
pub fn validate_dirs(dirs: &[String]) -> Result<(), ApiError> {
    if dirs.is_empty() {
        return Err(ApiError::invalid("dirs must name at least one directory"));
    }
    for d in dirs {
        crate::files::validate_path(d)?;
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    pub snapshot: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    pub count: u32,
    #[serde(default)]
    pub ids: Option<Vec<String>>,
}

/// Most sandboxes one fork starts.
pub const MAX_FORK: u32 = 64;

impl ForkRequest {
    /// The new sandboxes' ids: given, or `{id}-fork-{i}` (i from 1).
    pub fn target_ids(&self, source: &str) -> Result<Vec<String>, ApiError> {
        if self.count == 0 || self.count > MAX_FORK {
            return Err(ApiError::invalid(format!(
                "count must be between 1 and {MAX_FORK}"
            )));
        }
        let ids: Vec<String> = match &self.ids {
            Some(ids) => {
                if ids.len() != self.count as usize {
                    return Err(ApiError::invalid(format!(
                        "ids names {} sandboxes but count is {}",
                        ids.len(),
                        self.count
                    )));
                }
                ids.clone()
            }
            None => (1..=self.count)
                .map(|i| format!("{source}-fork-{i}"))
                .collect(),
        };
        let mut seen = std::collections::HashSet::new();
        for id in &ids {
            crate::ids::validate_sandbox_id(id)?;
            if id == source || !seen.insert(id) {
                return Err(ApiError::invalid(format!(
                    "fork target {id} is the source or named twice"
                )));
            }
        }
        Ok(ids)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ForkResponse {
    pub snapshot: Snapshot,
    pub sandboxes: Vec<Sandbox>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotList {
    pub snapshots: Vec<Snapshot>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SnapshotListQuery {
    pub sandbox: Option<String>,
}

/// `warren-guest pack|unpack --enter`, started by the node on the host: the descriptors of
/// the container's mount namespace and root directory it finds open, and joins before it
/// touches a file (the node never runs a binary from inside a container).
pub const ENTER_NS_FD: i32 = 100;
pub const ENTER_ROOT_FD: i32 = 101;

/// How a sandbox's user and group ids appear on its host: a sandbox in a user namespace
/// (Docker's `userns-remap`) has its ids `0..len` at `uid..uid+len` and `gid..gid+len`
/// there. Archives always hold the ids as the sandbox sees them; the node's own archive
/// work on the host (`warren-guest pack|unpack --enter --id-shift U:G:L`) shifts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdShift {
    pub uid: u32,
    pub gid: u32,
    pub len: u32,
}

/// The id files owned by ids the sandbox has no name for are given (`nobody`).
pub const OVERFLOW_ID: u32 = 65534;

impl IdShift {
    /// The argument of `--id-shift`.
    pub fn to_arg(self) -> String {
        format!("{}:{}:{}", self.uid, self.gid, self.len)
    }

    pub fn parse(arg: &str) -> Option<IdShift> {
        let mut it = arg.split(':').map(|p| p.parse::<u32>().ok());
        let shift = IdShift {
            uid: it.next()??,
            gid: it.next()??,
            len: it.next()??,
        };
        (it.next().is_none() && shift.len > 0).then_some(shift)
    }

    /// A host uid as the sandbox sees it (`OVERFLOW_ID` when it has none).
    pub fn uid_in_sandbox(self, host: u64) -> u64 {
        Self::inward(host, self.uid, self.len)
    }

    pub fn gid_in_sandbox(self, host: u64) -> u64 {
        Self::inward(host, self.gid, self.len)
    }

    /// A sandbox uid as the host stores it (ids beyond the range become `OVERFLOW_ID`'s).
    pub fn uid_on_host(self, inside: u64) -> u64 {
        Self::outward(inside, self.uid, self.len)
    }

    pub fn gid_on_host(self, inside: u64) -> u64 {
        Self::outward(inside, self.gid, self.len)
    }

    fn inward(host: u64, base: u32, len: u32) -> u64 {
        match host.checked_sub(base as u64) {
            Some(id) if id < len as u64 => id,
            _ => OVERFLOW_ID as u64,
        }
    }

    fn outward(inside: u64, base: u32, len: u32) -> u64 {
        let id = if inside < len as u64 {
            inside
        } else {
            OVERFLOW_ID as u64
        };
        base as u64 + id
    }
}

/// Node → guest: archive these paths (`POST /archive/pack`), answered with a tar stream.
/// Directories are archived as entries only: their changed contents are listed themselves.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PackRequest {
    pub paths: Vec<String>,
    /// Stop every process but the guest first (the sandbox is about to sleep).
    #[serde(default)]
    pub quiesce: bool,
    /// A hold (`POST /archive/hold`) this archive is read under; it ends when the archive
    /// is written (or fails), and the processes it stopped go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<u64>,
}

/// Node → guest: stop every other process of the sandbox (SIGSTOP) until the pack that
/// claims the hold ends, or `max_ms` passes without a pack claiming it
/// (`POST /archive/hold`): the guest's archive is then one instant of the files.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldRequest {
    pub max_ms: u64,
}

/// Guest → node: the hold's id, and how many processes it stopped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldResponse {
    pub hold: u64,
    pub stopped: usize,
}

/// Node → guest: end a hold no pack claimed (`POST /archive/release`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReleaseRequest {
    pub hold: u64,
}

/// Node → guest: remove these paths before unpacking (`POST /archive/remove`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RemovePathsRequest {
    pub paths: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_shift_both_ways_and_strangers_become_nobody() {
        let s = IdShift::parse("100000:200000:65536").unwrap();
        assert_eq!(IdShift::parse(&s.to_arg()), Some(s));
        assert_eq!(s.uid_on_host(0), 100000);
        assert_eq!(s.gid_on_host(1000), 201000);
        assert_eq!(s.uid_in_sandbox(101000), 1000);
        assert_eq!(s.gid_in_sandbox(200000), 0);
        // Host ids outside the range (the host's root) have no name in the sandbox.
        assert_eq!(s.uid_in_sandbox(0), OVERFLOW_ID as u64);
        assert_eq!(s.uid_in_sandbox(165536), OVERFLOW_ID as u64);
        // An id the sandbox cannot have is stored as its nobody.
        assert_eq!(s.uid_on_host(70000), 100000 + OVERFLOW_ID as u64);
        for bad in ["", "1:2", "1:2:0", "1:2:3:4", "a:b:c"] {
            assert_eq!(IdShift::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn fork_ids_default_and_are_checked() {
        let r = ForkRequest {
            count: 2,
            ids: None,
        };
        assert_eq!(r.target_ids("a").unwrap(), vec!["a-fork-1", "a-fork-2"]);
        let bad = |count, ids: Option<Vec<&str>>| {
            ForkRequest {
                count,
                ids: ids.map(|v| v.into_iter().map(String::from).collect()),
            }
            .target_ids("a")
            .is_err()
        };
        assert!(bad(0, None));
        assert!(bad(MAX_FORK + 1, None));
        assert!(bad(2, Some(vec!["b"])));
        assert!(bad(2, Some(vec!["b", "b"])));
        assert!(bad(1, Some(vec!["a"])));
        assert!(bad(1, Some(vec!["Bad_id"])));
        assert!(!bad(2, Some(vec!["b", "c"])));
    }

    #[test]
    fn snapshot_requests_validate() {
        let ok: CreateSnapshotRequest =
            serde_json::from_str(r#"{"name": "before", "dirs": ["/workspace"]}"#).unwrap();
        assert!(ok.validate().is_ok());
        let bad: CreateSnapshotRequest = serde_json::from_str(r#"{"dirs": []}"#).unwrap();
        assert!(bad.validate().is_err());
        let bad: CreateSnapshotRequest = serde_json::from_str(r#"{"dirs": ["rel"]}"#).unwrap();
        assert!(bad.validate().is_err());
        assert!(serde_json::from_str::<CreateSnapshotRequest>(r#"{"nope": 1}"#).is_err());
    }
}

/// Events of a snapshot, restore, fork or sleep asked for as a stream (`Accept:
/// text/event-stream`): `progress` while bytes move (`phase` is `archive`, `fetch` or
/// `unpack`; `total_bytes` when known), then `complete` with the body the plain call
/// answers, or `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TransferEvent {
    Progress {
        phase: String,
        bytes: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total_bytes: Option<u64>,
    },
    Complete {
        result: serde_json::Value,
    },
    Error {
        #[serde(flatten)]
        error: crate::ApiError,
    },
}
