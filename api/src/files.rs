//! Files and directories inside a sandbox.

use crate::ApiError;
use serde::{Deserialize, Serialize};

/// Paths are absolute, without NUL, at most 4096 bytes.
pub fn validate_path(path: &str) -> Result<(), ApiError> {
    if !path.starts_with('/') {
        return Err(ApiError::invalid(format!("path {path:?} must be absolute")));
    }
    if path.contains('\0') || path.len() > 4096 {
        return Err(ApiError::invalid("invalid path"));
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FileType {
    File,
    Directory,
    Symlink,
    Other,
}

/// `PUT …/files/{path}` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriteFileResponse {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// `PUT …/fs/archive?path=` response: the directory made from the uploaded tar.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ArchiveUploadResponse {
    pub path: String,
    /// Entries extracted (files, directories, links).
    pub entries: u64,
    /// Bytes of file content extracted.
    pub bytes: u64,
}

/// The media type of `…/fs/archive` bodies.
pub const TAR_CONTENT_TYPE: &str = "application/x-tar";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WriteFileQuery {
    /// Octal permission bits, e.g. `0644` or `755`.
    pub mode: Option<String>,
}

/// Parses an octal mode like `0644`, `755` or `0o600`.
pub fn parse_mode(s: &str) -> Result<u32, ApiError> {
    let t = s.trim();
    let t = t.strip_prefix("0o").unwrap_or(t);
    u32::from_str_radix(t, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| ApiError::invalid(format!("invalid mode {s:?}: use octal such as 0644")))
}

/// Formats permission bits as four octal digits.
pub fn format_mode(mode: u32) -> String {
    format!("{:04o}", mode & 0o7777)
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeleteFileQuery {
    pub recursive: Option<bool>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatQuery {
    pub path: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Stat {
    pub path: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    pub size: u64,
    pub mode: String,
    pub modified_at: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListQuery {
    pub path: Option<String>,
    pub recursive: Option<bool>,
    pub hidden: Option<bool>,
}

/// A listing stops after this many entries (and says so with `truncated`).
pub const LIST_LIMIT: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListEntry {
    pub name: String,
    pub path: String,
    pub relative_path: String,
    #[serde(rename = "type")]
    pub file_type: FileType,
    pub size: u64,
    pub mode: String,
    pub modified_at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ListResponse {
    pub entries: Vec<ListEntry>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    pub path: String,
    #[serde(default)]
    pub recursive: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub overwrite: bool,
}

/// Response of mkdir and move.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PathResponse {
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_octal() {
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        assert_eq!(parse_mode("0o600").unwrap(), 0o600);
        assert!(parse_mode("999").is_err());
        assert!(parse_mode("rwx").is_err());
        assert_eq!(format_mode(0o100644), "0644");
    }

    #[test]
    fn paths_must_be_absolute() {
        assert!(validate_path("/a/b").is_ok());
        assert!(validate_path("a/b").is_err());
        assert!(validate_path("/a\0b").is_err());
    }
}
