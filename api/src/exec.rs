//! `POST /v1/sandboxes/{id}/exec`: run a command in a session, as JSON or as an SSE stream.

use crate::sse::OutputData;
use crate::ApiError;
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Session used when a request names none.
pub const DEFAULT_SESSION: &str = "default";
/// Working directory of a new session.
pub const DEFAULT_CWD: &str = "/workspace";
/// JSON mode keeps at most this many bytes of each stream.
pub const JSON_OUTPUT_LIMIT: usize = 16 * 1024 * 1024;
/// Longest accepted `timeout_ms`: one day.
pub const MAX_TIMEOUT_MS: u64 = 24 * 3600 * 1000;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_base64: Option<String>,
}

/// What to run: a shell script or an argument vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Shell(String),
    Argv(Vec<String>),
}

impl Command {
    /// A one-line description (for process listings and logs).
    pub fn display(&self) -> String {
        match self {
            Command::Shell(s) => s.clone(),
            Command::Argv(a) => a.join(" "),
        }
    }
}

/// Checks that exactly one of `command` and `argv` is given, and not empty.
pub fn command_of(
    command: &Option<String>,
    argv: &Option<Vec<String>>,
) -> Result<Command, ApiError> {
    match (command, argv) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give either command or argv, not both")),
        (None, None) => Err(ApiError::invalid("command or argv is required")),
        (Some(c), None) => {
            if c.trim().is_empty() {
                Err(ApiError::invalid("command is empty"))
            } else if c.contains('\0') {
                Err(ApiError::invalid("command contains a NUL byte"))
            } else {
                Ok(Command::Shell(c.clone()))
            }
        }
        (None, Some(a)) => {
            if a.is_empty() || a[0].is_empty() {
                Err(ApiError::invalid("argv must name a program"))
            } else if a.iter().any(|s| s.contains('\0')) {
                Err(ApiError::invalid("argv contains a NUL byte"))
            } else {
                Ok(Command::Argv(a.clone()))
            }
        }
    }
}

impl ExecRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        command_of(&self.command, &self.argv)?;
        if let Some(cwd) = &self.cwd {
            crate::files::validate_path(cwd)?;
        }
        if let Some(env) = &self.env {
            crate::sandbox::validate_env(env.keys())?;
        }
        if let Some(t) = self.timeout_ms {
            if t == 0 || t > MAX_TIMEOUT_MS {
                return Err(ApiError::invalid(
                    "timeout_ms must be between 1 and 86400000",
                ));
            }
        }
        if let Some(s) = &self.session {
            crate::ids::validate_name("session", s)?;
        }
        self.stdin_bytes()?;
        Ok(())
    }

    /// The bytes to feed on stdin (empty when neither `stdin` nor `stdin_base64` is given).
    pub fn stdin_bytes(&self) -> Result<Vec<u8>, ApiError> {
        match (&self.stdin, &self.stdin_base64) {
            (Some(_), Some(_)) => Err(ApiError::invalid(
                "give either stdin or stdin_base64, not both",
            )),
            (Some(s), None) => Ok(s.as_bytes().to_vec()),
            (None, Some(b)) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| ApiError::invalid(format!("stdin_base64 is not valid base64: {e}"))),
            (None, None) => Ok(Vec::new()),
        }
    }

    pub fn session_name(&self) -> &str {
        self.session.as_deref().unwrap_or(DEFAULT_SESSION)
    }
}

/// JSON-mode result of an exec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecResponse {
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub duration_ms: u64,
    pub timed_out: bool,
    pub truncated: bool,
    /// Set (with `stdout` holding a lossy rendering) when stdout is not valid UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
}

/// SSE events of an exec stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecEvent {
    Start {
        pid: u32,
    },
    Stdout(OutputData),
    Stderr(OutputData),
    Complete {
        exit_code: i32,
        duration_ms: u64,
        timed_out: bool,
    },
    Error {
        code: crate::ErrorCode,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<serde_json::Value>,
    },
}

impl ExecEvent {
    pub fn error(err: &ApiError) -> Self {
        ExecEvent::Error {
            code: err.code,
            message: err.message.clone(),
            details: err.details.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exactly_one_of_command_and_argv() {
        let r = |j: &str| serde_json::from_str::<ExecRequest>(j).unwrap().validate();
        assert!(r(r#"{"command": "echo hi"}"#).is_ok());
        assert!(r(r#"{"argv": ["ls", "-l"]}"#).is_ok());
        assert!(r(r#"{}"#).is_err());
        assert!(r(r#"{"command": "x", "argv": ["x"]}"#).is_err());
        assert!(r(r#"{"argv": []}"#).is_err());
        assert!(r(r#"{"command": "x", "timeout_ms": 0}"#).is_err());
        assert!(r(r#"{"command": "x", "cwd": "relative"}"#).is_err());
        assert!(r(r#"{"command": "x", "stdin_base64": "!!"}"#).is_err());
        assert!(r(r#"{"command": "x", "session": "../etc"}"#).is_err());
    }

    #[test]
    fn events_are_tagged_by_type() {
        let e = ExecEvent::Stdout(OutputData::from_bytes(b"hi\n"));
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"stdout","data":"hi\n"}"#
        );
        let e = ExecEvent::Complete {
            exit_code: 0,
            duration_ms: 3,
            timed_out: false,
        };
        assert_eq!(
            serde_json::to_string(&e).unwrap(),
            r#"{"type":"complete","exit_code":0,"duration_ms":3,"timed_out":false}"#
        );
        let back: ExecEvent = serde_json::from_str(r#"{"type":"start","pid":7}"#).unwrap();
        assert_eq!(back, ExecEvent::Start { pid: 7 });
    }
}
