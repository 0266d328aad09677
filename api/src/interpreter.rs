//! The code interpreter: notebook-like contexts (`/v1/sandboxes/{id}/contexts`) whose
//! variables, imports and functions persist between runs.

use crate::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Longest accepted `timeout_ms` of a run: one day.
pub const MAX_TIMEOUT_MS: i64 = 24 * 3600 * 1000;
/// The `name` of the error a run gets when its `timeout_ms` expires.
pub const TIMEOUT_ERROR: &str = "TimeoutError";
/// The `name` of the error a run gets when its kernel process dies under it.
pub const KERNEL_DIED_ERROR: &str = "KernelDied";

/// Languages a context can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Language {
    Python,
    Javascript,
    Typescript,
}

impl Language {
    pub const ALL: [Language; 3] = [Language::Python, Language::Javascript, Language::Typescript];

    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
        }
    }

    /// Parses a request's language; anything else is 422 `UNSUPPORTED_LANGUAGE`.
    pub fn parse(s: &str) -> Result<Language, ApiError> {
        Language::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::UnsupportedLanguage,
                    format!("unsupported language {s:?}: use python, javascript or typescript"),
                )
            })
    }
}

/// `POST …/contexts`. `language` is a string so that an unknown one is a 422, not a parse
/// error.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateContextRequest {
    pub language: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
}

impl CreateContextRequest {
    pub fn validate(&self) -> Result<Language, ApiError> {
        let language = Language::parse(&self.language)?;
        if let Some(cwd) = &self.cwd {
            crate::files::validate_path(cwd)?;
        }
        if let Some(env) = &self.env {
            crate::sandbox::validate_env(env.keys())?;
            if env.values().any(|v| v.contains('\0')) {
                return Err(ApiError::invalid("environment values cannot contain NUL"));
            }
        }
        Ok(language)
    }
}

/// A context, as created and listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Context {
    pub id: String,
    pub language: Language,
    pub cwd: String,
    pub created_at: String,
}

/// `GET …/contexts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ContextList {
    pub contexts: Vec<Context>,
}

/// `POST …/contexts/{cid}/run`. `timeout_ms` is signed so that `<= 0` is a clear 400.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct RunCodeRequest {
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<i64>,
}

impl RunCodeRequest {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(t) = self.timeout_ms {
            if t <= 0 {
                return Err(ApiError::invalid("timeout_ms must be positive"));
            }
            if t > MAX_TIMEOUT_MS {
                return Err(ApiError::invalid("timeout_ms must be at most 86400000"));
            }
        }
        if self.code.contains('\0') {
            return Err(ApiError::invalid("code contains a NUL byte"));
        }
        Ok(())
    }
}

/// One displayed value: any of its representations (images are base64).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub markdown: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub png: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jpeg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub svg: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latex: Option<String>,
}

/// An error raised by the code (or the run's timeout, or its kernel's death).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ExecutionError {
    pub name: String,
    pub message: String,
    pub traceback: String,
}

/// JSON-mode answer of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunCodeResponse {
    pub stdout: String,
    pub stderr: String,
    pub results: Vec<ExecutionResult>,
    pub error: Option<ExecutionError>,
    pub execution_count: u64,
}

/// SSE events of a run. `complete` is the one terminal event; an error of the code is an
/// `error` event followed by `complete`. A failure of the platform itself (the sandbox went
/// away) is an `error` carrying `code` instead, and ends the stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Stdout {
        text: String,
    },
    Stderr {
        text: String,
    },
    Result(ExecutionResult),
    Error {
        #[serde(default)]
        name: String,
        message: String,
        #[serde(default)]
        traceback: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        code: Option<ErrorCode>,
    },
    Complete {
        execution_count: u64,
    },
}

impl RunEvent {
    pub fn error(e: &ExecutionError) -> Self {
        RunEvent::Error {
            name: e.name.clone(),
            message: e.message.clone(),
            traceback: e.traceback.clone(),
            code: None,
        }
    }

    /// A platform failure as the stream's last event.
    pub fn api_error(e: &ApiError) -> Self {
        RunEvent::Error {
            name: e.code.as_str().to_string(),
            message: e.message.clone(),
            traceback: String::new(),
            code: Some(e.code),
        }
    }
}

impl RunCodeResponse {
    /// Folds a run's events into the JSON answer (for clients and the guest's JSON mode).
    pub fn from_events<'a>(events: impl IntoIterator<Item = &'a RunEvent>) -> Self {
        let mut r = RunCodeResponse {
            stdout: String::new(),
            stderr: String::new(),
            results: Vec::new(),
            error: None,
            execution_count: 0,
        };
        for e in events {
            r.push(e);
        }
        r
    }

    pub fn push(&mut self, event: &RunEvent) {
        match event {
            RunEvent::Stdout { text } => self.stdout.push_str(text),
            RunEvent::Stderr { text } => self.stderr.push_str(text),
            RunEvent::Result(res) => self.results.push(res.clone()),
            RunEvent::Error {
                name,
                message,
                traceback,
                ..
            } => {
                self.error = Some(ExecutionError {
                    name: name.clone(),
                    message: message.clone(),
                    traceback: traceback.clone(),
                })
            }
            RunEvent::Complete { execution_count } => self.execution_count = *execution_count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_languages_are_422() {
        let req = |l: &str| CreateContextRequest {
            language: l.to_string(),
            ..Default::default()
        };
        assert_eq!(req("python").validate().unwrap(), Language::Python);
        assert_eq!(req("typescript").validate().unwrap(), Language::Typescript);
        let e = req("cobol").validate().unwrap_err();
        assert_eq!(e.code, ErrorCode::UnsupportedLanguage);
        assert_eq!(e.http_status(), 422);
        let mut r = req("python");
        r.cwd = Some("relative".into());
        assert_eq!(r.validate().unwrap_err().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn timeouts_must_be_positive() {
        let r = |j: &str| {
            serde_json::from_str::<RunCodeRequest>(j)
                .unwrap()
                .validate()
        };
        assert!(r(r#"{"code": "1"}"#).is_ok());
        assert!(r(r#"{"code": "1", "timeout_ms": 5}"#).is_ok());
        assert!(r(r#"{"code": "1", "timeout_ms": 0}"#).is_err());
        assert!(r(r#"{"code": "1", "timeout_ms": -3}"#).is_err());
        assert!(r(r#"{"code": "1", "timeout_ms": 90000000}"#).is_err());
        assert!(serde_json::from_str::<RunCodeRequest>(r#"{"timeout_ms": 5}"#).is_err());
    }

    #[test]
    fn events_fold_into_a_response() {
        let events: Vec<RunEvent> = [
            r#"{"type":"stdout","text":"a\n"}"#,
            r#"{"type":"result","text":"52","json":52}"#,
            r#"{"type":"error","name":"ValueError","message":"x","traceback":"tb"}"#,
            r#"{"type":"complete","execution_count":3}"#,
        ]
        .iter()
        .map(|j| serde_json::from_str(j).unwrap())
        .collect();
        let r = RunCodeResponse::from_events(&events);
        assert_eq!(r.stdout, "a\n");
        assert_eq!(r.results[0].text.as_deref(), Some("52"));
        assert_eq!(r.error.unwrap().name, "ValueError");
        assert_eq!(r.execution_count, 3);
        // The router's error event for a cut-off stream parses too.
        let cut: RunEvent =
            serde_json::from_str(r#"{"type":"error","code":"UNAVAILABLE","message":"gone"}"#)
                .unwrap();
        assert!(matches!(
            cut,
            RunEvent::Error {
                code: Some(ErrorCode::Unavailable),
                ..
            }
        ));
    }
}
