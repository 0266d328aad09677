//! The error model of the public API: stable codes, their HTTP status, and the JSON body
//! `{code, message, retryable, details}` that every non-2xx response carries.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every error code of `api.md`. Serialized as `UPPER_SNAKE`; the HTTP status follows the code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidArgument,
    Unauthorized,
    Forbidden,
    SandboxNotFound,
    FileNotFound,
    ProcessNotFound,
    ContextNotFound,
    SnapshotNotFound,
    InvalidToken,
    NotFound,
    ReadyTimeout,
    Conflict,
    ProcessExited,
    IsADirectory,
    NotADirectory,
    AlreadyExists,
    SessionTerminated,
    PayloadTooLarge,
    GitFailed,
    UnsupportedLanguage,
    UpgradeRequired,
    RateLimited,
    Internal,
    PortNotListening,
    BadGateway,
    Unavailable,
    CapacityExhausted,
    UpstreamTimeout,
    EgressDenied,
}

impl ErrorCode {
    /// All codes, for exhaustive tests and documentation.
    pub const ALL: [ErrorCode; 29] = [
        ErrorCode::InvalidArgument,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::SandboxNotFound,
        ErrorCode::FileNotFound,
        ErrorCode::ProcessNotFound,
        ErrorCode::ContextNotFound,
        ErrorCode::SnapshotNotFound,
        ErrorCode::InvalidToken,
        ErrorCode::NotFound,
        ErrorCode::ReadyTimeout,
        ErrorCode::Conflict,
        ErrorCode::ProcessExited,
        ErrorCode::IsADirectory,
        ErrorCode::NotADirectory,
        ErrorCode::AlreadyExists,
        ErrorCode::SessionTerminated,
        ErrorCode::PayloadTooLarge,
        ErrorCode::GitFailed,
        ErrorCode::UnsupportedLanguage,
        ErrorCode::UpgradeRequired,
        ErrorCode::RateLimited,
        ErrorCode::Internal,
        ErrorCode::PortNotListening,
        ErrorCode::BadGateway,
        ErrorCode::Unavailable,
        ErrorCode::CapacityExhausted,
        ErrorCode::UpstreamTimeout,
        ErrorCode::EgressDenied,
    ];

    /// The HTTP status that `api.md` assigns to this code.
    pub fn http_status(self) -> u16 {
        use ErrorCode::*;
        match self {
            InvalidArgument => 400,
            Unauthorized => 401,
            Forbidden | EgressDenied => 403,
            SandboxNotFound | FileNotFound | ProcessNotFound | ContextNotFound
            | SnapshotNotFound | InvalidToken | NotFound => 404,
            ReadyTimeout => 408,
            Conflict | ProcessExited | IsADirectory | NotADirectory | AlreadyExists => 409,
            SessionTerminated => 410,
            PayloadTooLarge => 413,
            GitFailed | UnsupportedLanguage => 422,
            UpgradeRequired => 426,
            RateLimited => 429,
            Internal => 500,
            PortNotListening | BadGateway => 502,
            Unavailable | CapacityExhausted => 503,
            UpstreamTimeout => 504,
        }
    }

    /// Whether a client may retry the same request unchanged.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::Unavailable
                | ErrorCode::CapacityExhausted
                | ErrorCode::UpstreamTimeout
                | ErrorCode::RateLimited
        )
    }

    /// The `UPPER_SNAKE` spelling.
    pub fn as_str(self) -> &'static str {
        use ErrorCode::*;
        match self {
            InvalidArgument => "INVALID_ARGUMENT",
            Unauthorized => "UNAUTHORIZED",
            Forbidden => "FORBIDDEN",
            SandboxNotFound => "SANDBOX_NOT_FOUND",
            FileNotFound => "FILE_NOT_FOUND",
            ProcessNotFound => "PROCESS_NOT_FOUND",
            ContextNotFound => "CONTEXT_NOT_FOUND",
            SnapshotNotFound => "SNAPSHOT_NOT_FOUND",
            InvalidToken => "INVALID_TOKEN",
            NotFound => "NOT_FOUND",
            ReadyTimeout => "READY_TIMEOUT",
            Conflict => "CONFLICT",
            ProcessExited => "PROCESS_EXITED",
            IsADirectory => "IS_A_DIRECTORY",
            NotADirectory => "NOT_A_DIRECTORY",
            AlreadyExists => "ALREADY_EXISTS",
            SessionTerminated => "SESSION_TERMINATED",
            PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            GitFailed => "GIT_FAILED",
            UnsupportedLanguage => "UNSUPPORTED_LANGUAGE",
            UpgradeRequired => "UPGRADE_REQUIRED",
            RateLimited => "RATE_LIMITED",
            Internal => "INTERNAL",
            PortNotListening => "PORT_NOT_LISTENING",
            BadGateway => "BAD_GATEWAY",
            Unavailable => "UNAVAILABLE",
            CapacityExhausted => "CAPACITY_EXHAUSTED",
            UpstreamTimeout => "UPSTREAM_TIMEOUT",
            EgressDenied => "EGRESS_DENIED",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every non-2xx response, and the error that crosses node boundaries unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            retryable: code.retryable(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidArgument, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }

    pub fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// The JSON body, as sent on the wire.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("ApiError always serializes")
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

impl ApiError {
    /// The error a non-2xx response carries: its JSON body, or, when the body is not one,
    /// `INTERNAL` naming the status and the start of what was sent.
    pub fn from_response(status: u16, body: &[u8]) -> ApiError {
        serde_json::from_slice(body).unwrap_or_else(|_| {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]);
            ApiError::internal(format!("HTTP {status}: {}", text.trim()))
        })
    }
}

/// Parses a JSON request body, mapping any syntax or shape error to 400 `INVALID_ARGUMENT`.
pub fn parse_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return serde_json::from_slice(b"{}")
            .map_err(|e| ApiError::invalid(format!("a JSON body is required: {e}")));
    }
    serde_json::from_slice(body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))
}

#[cfg(test)]
mod tests {

    #[test]
    fn error_responses_read_back() {
        let e = ApiError::new(ErrorCode::SnapshotNotFound, "gone");
        assert_eq!(ApiError::from_response(404, e.to_json().as_bytes()), e);
        let other = ApiError::from_response(502, b"<html>bad gateway</html>");
        assert_eq!(other.code, ErrorCode::Internal);
        assert_eq!(other.message, "HTTP 502: <html>bad gateway</html>");
    }

    use super::*;

    #[test]
    fn every_code_serializes_to_its_upper_snake_name() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ErrorCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
        }
    }

    #[test]
    fn statuses_follow_the_contract() {
        assert_eq!(ErrorCode::SessionTerminated.http_status(), 410);
        assert_eq!(ErrorCode::GitFailed.http_status(), 422);
        assert_eq!(ErrorCode::PortNotListening.http_status(), 502);
        assert_eq!(ErrorCode::CapacityExhausted.http_status(), 503);
        assert!(ErrorCode::Unavailable.retryable());
        assert!(!ErrorCode::InvalidArgument.retryable());
    }

    #[test]
    fn error_body_round_trips_with_details() {
        let err = ApiError::new(ErrorCode::ProcessExited, "process exited")
            .with_details(serde_json::json!({"exit_code": 3}));
        let back: ApiError = serde_json::from_str(&err.to_json()).unwrap();
        assert_eq!(back, err);
        assert!(!err.to_json().contains("null"));
    }

    #[test]
    fn empty_body_parses_as_empty_object_and_garbage_is_invalid() {
        #[derive(Deserialize)]
        struct Opt {
            #[allow(dead_code)]
            a: Option<u32>,
        }
        assert!(parse_json::<Opt>(b"").is_ok());
        let err = parse_json::<Opt>(b"{not json").err().unwrap();
        assert_eq!(err.code, ErrorCode::InvalidArgument);
    }
}
