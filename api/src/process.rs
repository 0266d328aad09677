//! Background processes: start, list, kill, logs with cursors, and waits.

use crate::exec::Command;
use crate::sse::OutputData;
use crate::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct StartProcessRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

impl StartProcessRequest {
    pub fn validate(&self) -> Result<Command, ApiError> {
        let cmd = crate::exec::command_of(&self.command, &self.argv)?;
        if let Some(cwd) = &self.cwd {
            crate::files::validate_path(cwd)?;
        }
        if let Some(env) = &self.env {
            crate::sandbox::validate_env(env.keys())?;
        }
        if let Some(s) = &self.session {
            crate::ids::validate_name("session", s)?;
        }
        if let Some(id) = &self.id {
            crate::ids::validate_name("process", id)?;
        }
        Ok(cmd)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ProcessStatus {
    Running,
    Completed,
    Failed,
    Killed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Process {
    pub id: String,
    pub pid: u32,
    pub command: String,
    pub status: ProcessStatus,
    pub exit_code: Option<i32>,
    pub started_at: String,
    pub ended_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ProcessList {
    pub processes: Vec<Process>,
}

/// Query of `DELETE …/processes/{process}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct KillQuery {
    pub signal: Option<String>,
    pub grace_ms: Option<u64>,
}

/// Default grace between the first signal and SIGKILL.
pub const DEFAULT_KILL_GRACE_MS: u64 = 5000;

/// Signals accepted by name (`TERM`, `SIGTERM`) or number.
pub fn parse_signal(s: &str) -> Result<i32, ApiError> {
    let name = s.trim().to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    let num = match name {
        "HUP" => 1,
        "INT" => 2,
        "QUIT" => 3,
        "KILL" => 9,
        "USR1" => 10,
        "USR2" => 12,
        "TERM" => 15,
        "CONT" => 18,
        "STOP" => 19,
        n => n
            .parse::<i32>()
            .ok()
            .filter(|n| (1..=64).contains(n))
            .ok_or_else(|| ApiError::invalid(format!("unknown signal {s:?}")))?,
    };
    Ok(num)
}

/// Query of `GET …/logs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogsQuery {
    pub since: Option<u64>,
    pub follow: Option<bool>,
}

/// Non-streaming logs: everything after `since`, and the cursor to continue from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogsResponse {
    pub stdout: String,
    pub stderr: String,
    pub cursor: u64,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A chunk of output with the cursor just after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct LogChunk {
    #[serde(flatten)]
    pub data: OutputData,
    pub cursor: u64,
}

/// SSE events of a followed log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LogEvent {
    Stdout(LogChunk),
    Stderr(LogChunk),
    Exit {
        exit_code: i32,
    },
    Error {
        code: crate::ErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitLogRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

impl WaitLogRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        match (&self.pattern, &self.regex) {
            (Some(_), Some(_)) => Err(ApiError::invalid("give either pattern or regex, not both")),
            (None, None) => Err(ApiError::invalid("pattern or regex is required")),
            (Some(p), None) if p.is_empty() => Err(ApiError::invalid("pattern is empty")),
            (None, Some(r)) if r.is_empty() => Err(ApiError::invalid("regex is empty")),
            _ => validate_wait_timeout(self.timeout_ms),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitLogResponse {
    pub line: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PortMode {
    Tcp,
    Http,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitPortRequest {
    pub port: u16,
    #[serde(default = "default_port_mode")]
    pub mode: PortMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_min: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_max: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

fn default_port_mode() -> PortMode {
    PortMode::Tcp
}

impl WaitPortRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.port == 0 {
            return Err(ApiError::invalid("port must be between 1 and 65535"));
        }
        if let Some(p) = &self.path {
            if !p.starts_with('/') || p.chars().any(|c| c.is_control() || c == ' ') {
                return Err(ApiError::invalid(
                    "path must start with / and contain no spaces",
                ));
            }
        }
        let (lo, hi) = self.status_range();
        if lo > hi || !(100..=599).contains(&lo) || !(100..=599).contains(&hi) {
            return Err(ApiError::invalid(
                "status_min..status_max must be a range within 100..599",
            ));
        }
        validate_wait_timeout(self.timeout_ms)
    }

    /// Accepted HTTP statuses: 200..399 unless given.
    pub fn status_range(&self) -> (u16, u16) {
        (
            self.status_min.unwrap_or(200),
            self.status_max.unwrap_or(399),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitPortResponse {
    pub port: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitExitRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct WaitExitResponse {
    pub exit_code: i32,
}

/// Waits without `timeout_ms` give up after five minutes.
pub const DEFAULT_WAIT_TIMEOUT_MS: u64 = 300_000;

fn validate_wait_timeout(t: Option<u64>) -> Result<(), ApiError> {
    match t {
        Some(0) => Err(ApiError::invalid("timeout_ms must be positive")),
        Some(t) if t > crate::exec::MAX_TIMEOUT_MS => {
            Err(ApiError::invalid("timeout_ms must be at most 86400000"))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("TERM").unwrap(), 15);
        assert_eq!(parse_signal("sigkill").unwrap(), 9);
        assert_eq!(parse_signal("2").unwrap(), 2);
        assert!(parse_signal("NOPE").is_err());
        assert!(parse_signal("0").is_err());
    }

    #[test]
    fn wait_requests_validate() {
        let w: WaitPortRequest = serde_json::from_str(r#"{"port": 8080}"#).unwrap();
        assert!(w.validate().is_ok());
        assert_eq!(w.mode, PortMode::Tcp);
        let w: WaitPortRequest = serde_json::from_str(
            r#"{"port": 8080, "mode": "http", "status_min": 500, "status_max": 200}"#,
        )
        .unwrap();
        assert!(w.validate().is_err());
        let l: WaitLogRequest =
            serde_json::from_str(r#"{"pattern": "ready", "regex": "r"}"#).unwrap();
        assert!(l.validate().is_err());
    }

    #[test]
    fn log_chunk_flattens_data() {
        let e = LogEvent::Stderr(LogChunk {
            data: OutputData::from_bytes(b"x"),
            cursor: 9,
        });
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"stderr","data":"x","cursor":9}"#
        );
    }
}
