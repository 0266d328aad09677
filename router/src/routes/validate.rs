//! Which sandbox operations exist, and the checks a request passes before the sandbox is
//! created or woken: a malformed request never starts a container.

use http::Method;
use warren_api::error::parse_json;
use warren_api::exec::ExecRequest;
use warren_api::files::{parse_mode, MkdirRequest, MoveRequest};
use warren_api::git::GitCheckoutRequest;
use warren_api::ids::validate_name;
use warren_api::interpreter::{CreateContextRequest, RunCodeRequest};
use warren_api::process::{
    parse_signal, StartProcessRequest, WaitExitRequest, WaitLogRequest, WaitPortRequest,
};
use warren_api::session::{CreateSessionRequest, PatchEnvRequest};
use warren_api::{ApiError, ErrorCode};

type JsonCheck = fn(&[u8]) -> Result<(), ApiError>;

/// How the request body travels to the guest.
pub enum BodyKind {
    /// No body is expected (whatever was sent is ignored).
    Empty,
    /// A JSON body, checked here, then sent as bytes (replayable).
    Json(JsonCheck),
    /// Raw content, streamed through (file uploads).
    Stream,
}

fn exec(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<ExecRequest>(b)?.validate()
}
fn session(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<CreateSessionRequest>(b)?.validate()
}
fn env(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<PatchEnvRequest>(b)?.validate()
}
fn process(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<StartProcessRequest>(b)?.validate().map(|_| ())
}
fn wait_log(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<WaitLogRequest>(b)?.validate()
}
fn wait_port(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<WaitPortRequest>(b)?.validate()
}
fn wait_exit(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<WaitExitRequest>(b).map(|_| ())
}
fn mkdir(b: &[u8]) -> Result<(), ApiError> {
    warren_api::files::validate_path(&parse_json::<MkdirRequest>(b)?.path)
}
fn move_(b: &[u8]) -> Result<(), ApiError> {
    let m = parse_json::<MoveRequest>(b)?;
    warren_api::files::validate_path(&m.from)?;
    warren_api::files::validate_path(&m.to)
}
fn egress_policy(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<warren_api::egress::EgressPolicy>(b)?.validate()
}
fn create_snapshot(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<warren_api::snapshot::CreateSnapshotRequest>(b)?.validate()
}
fn restore(b: &[u8]) -> Result<(), ApiError> {
    let r = parse_json::<warren_api::snapshot::RestoreRequest>(b)?;
    if r.snapshot.is_empty() {
        return Err(ApiError::invalid("snapshot is required"));
    }
    Ok(())
}
fn fork(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<warren_api::snapshot::ForkRequest>(b).map(|_| ())
}
fn expose(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<warren_api::ports::ExposeRequest>(b)?.validate()
}
fn context(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<CreateContextRequest>(b)?
        .validate()
        .map(|_| ())
}
fn run_code(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<RunCodeRequest>(b)?.validate()
}
fn git(b: &[u8]) -> Result<(), ApiError> {
    parse_json::<GitCheckoutRequest>(b)?.validate()
}

fn query_value<'a>(query: Option<&'a str>, key: &str) -> Option<std::borrow::Cow<'a, str>> {
    form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn check_bool(query: Option<&str>, key: &str) -> Result<(), ApiError> {
    match query_value(query, key).as_deref() {
        None | Some("true") | Some("false") => Ok(()),
        Some(v) => Err(ApiError::invalid(format!(
            "{key} must be true or false, not {v:?}"
        ))),
    }
}

fn check_u64(query: Option<&str>, key: &str) -> Result<(), ApiError> {
    match query_value(query, key) {
        Some(v) if v.parse::<u64>().is_err() => Err(ApiError::invalid(format!(
            "{key} must be a non-negative integer"
        ))),
        _ => Ok(()),
    }
}

fn required_path(query: Option<&str>) -> Result<(), ApiError> {
    let p = query_value(query, "path").ok_or_else(|| ApiError::invalid("path is required"))?;
    warren_api::files::validate_path(&p)
}

/// Classifies `METHOD /v1/sandboxes/{id}/{rest}`; unknown operations are 404 `NOT_FOUND`.
pub fn classify(method: &Method, rest: &str, query: Option<&str>) -> Result<BodyKind, ApiError> {
    if let Some(path) =
        rest.strip_prefix("files/")
            .or(if rest == "files" { Some("") } else { None })
    {
        let _ = path;
        return match *method {
            Method::GET => Ok(BodyKind::Empty),
            Method::PUT => {
                if let Some(m) = query_value(query, "mode") {
                    parse_mode(&m)?;
                }
                Ok(BodyKind::Stream)
            }
            Method::DELETE => check_bool(query, "recursive").map(|_| BodyKind::Empty),
            _ => Err(unknown(method, rest)),
        };
    }
    let segs: Vec<&str> = rest.split('/').collect();
    match (method, segs.as_slice()) {
        (&Method::POST, ["exec"]) => Ok(BodyKind::Json(exec)),
        (&Method::POST, ["sessions"]) => Ok(BodyKind::Json(session)),
        (&Method::GET, ["sessions"]) => Ok(BodyKind::Empty),
        (&Method::DELETE, ["sessions", sid]) => {
            validate_name("session", sid).map(|_| BodyKind::Empty)
        }
        (&Method::PATCH, ["env"]) => Ok(BodyKind::Json(env)),
        (&Method::POST, ["contexts"]) => Ok(BodyKind::Json(context)),
        (&Method::GET, ["contexts"]) => Ok(BodyKind::Empty),
        (&Method::DELETE, ["contexts", cid]) => {
            validate_name("context", cid).map(|_| BodyKind::Empty)
        }
        (&Method::POST, ["contexts", cid, "run"]) => {
            validate_name("context", cid).map(|_| BodyKind::Json(run_code))
        }
        (&Method::GET, ["watch"]) => {
            warren_api::watch::WatchQuery::parse(query).map(|_| BodyKind::Empty)
        }
        // Served by their own routes; listed here so a first call on a new id is checked
        // before a placement is committed.
        (&Method::POST, ["snapshots"]) => Ok(BodyKind::Json(create_snapshot)),
        (&Method::POST, ["restore"]) => Ok(BodyKind::Json(restore)),
        (&Method::POST, ["fork"]) => Ok(BodyKind::Json(fork)),
        (&Method::POST, ["sleep"]) => Ok(BodyKind::Empty),
        (&Method::GET, ["egress"]) => Ok(BodyKind::Empty),
        (&Method::PUT, ["egress"]) => Ok(BodyKind::Json(egress_policy)),
        (&Method::POST, ["ports"]) => Ok(BodyKind::Json(expose)),
        (&Method::GET, ["ports"]) => Ok(BodyKind::Empty),
        (&Method::DELETE, ["ports", port]) => {
            super::ports::parse_port(port).map(|_| BodyKind::Empty)
        }
        (&Method::GET, ["terminals"]) => Ok(BodyKind::Empty),
        (&Method::GET, ["terminals", name]) => {
            validate_name("terminal", name)?;
            let q: warren_api::terminal::TerminalQuery =
                serde_urlencoded::from_str(query.unwrap_or_default())
                    .map_err(|e| ApiError::invalid(format!("invalid query string: {e}")))?;
            q.validate().map(|_| BodyKind::Empty)
        }
        (&Method::DELETE, ["terminals", name]) => {
            validate_name("terminal", name).map(|_| BodyKind::Empty)
        }
        (&Method::POST, ["processes"]) => Ok(BodyKind::Json(process)),
        (&Method::GET, ["processes"]) => Ok(BodyKind::Empty),
        (&Method::GET, ["processes", p]) => validate_name("process", p).map(|_| BodyKind::Empty),
        (&Method::DELETE, ["processes", p]) => {
            validate_name("process", p)?;
            if let Some(s) = query_value(query, "signal") {
                parse_signal(&s)?;
            }
            check_u64(query, "grace_ms").map(|_| BodyKind::Empty)
        }
        (&Method::GET, ["processes", p, "logs"]) => {
            validate_name("process", p)?;
            check_u64(query, "since")?;
            check_bool(query, "follow").map(|_| BodyKind::Empty)
        }
        (&Method::POST, ["processes", p, "wait", kind]) => {
            validate_name("process", p)?;
            match *kind {
                "log" => Ok(BodyKind::Json(wait_log)),
                "port" => Ok(BodyKind::Json(wait_port)),
                "exit" => Ok(BodyKind::Json(wait_exit)),
                _ => Err(unknown(method, rest)),
            }
        }
        (&Method::GET, ["fs", "stat"]) => required_path(query).map(|_| BodyKind::Empty),
        (&Method::GET, ["fs", "list"]) => {
            if query_value(query, "path").is_some() {
                required_path(query)?;
            }
            check_bool(query, "recursive")?;
            check_bool(query, "hidden").map(|_| BodyKind::Empty)
        }
        (&Method::GET, ["fs", "archive"]) => required_path(query).map(|_| BodyKind::Empty),
        (&Method::PUT, ["fs", "archive"]) => required_path(query).map(|_| BodyKind::Stream),
        (&Method::POST, ["fs", "mkdir"]) => Ok(BodyKind::Json(mkdir)),
        (&Method::POST, ["fs", "move"]) => Ok(BodyKind::Json(move_)),
        (&Method::POST, ["git", "checkout"]) => Ok(BodyKind::Json(git)),
        _ => Err(unknown(method, rest)),
    }
}

fn unknown(method: &Method, rest: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!("no such sandbox operation: {method} {rest}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_archive_needs_an_absolute_path_and_streams_its_upload() {
        assert!(matches!(
            classify(&Method::GET, "fs/archive", Some("path=/workspace")),
            Ok(BodyKind::Empty)
        ));
        assert!(matches!(
            classify(&Method::PUT, "fs/archive", Some("path=/workspace/new")),
            Ok(BodyKind::Stream)
        ));
        for query in [None, Some("path=relative")] {
            let e = classify(&Method::PUT, "fs/archive", query).err().unwrap();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{query:?}");
        }
        assert!(classify(&Method::POST, "fs/archive", Some("path=/w")).is_err());
    }

    #[test]
    fn known_routes_and_their_bodies() {
        assert!(matches!(
            classify(&Method::POST, "exec", None),
            Ok(BodyKind::Json(_))
        ));
        assert!(matches!(
            classify(&Method::PUT, "files/tmp/x", Some("mode=0755")),
            Ok(BodyKind::Stream)
        ));
        assert!(classify(&Method::PUT, "files/tmp/x", Some("mode=abc")).is_err());
        assert!(matches!(
            classify(
                &Method::GET,
                "processes/web/logs",
                Some("since=10&follow=true")
            ),
            Ok(BodyKind::Empty)
        ));
        assert!(classify(&Method::GET, "processes/web/logs", Some("since=-1")).is_err());
        assert!(classify(&Method::DELETE, "processes/web", Some("signal=BOGUS")).is_err());
        assert_eq!(
            classify(&Method::POST, "nope", None).err().unwrap().code,
            ErrorCode::NotFound
        );
        assert_eq!(
            classify(&Method::GET, "exec", None).err().unwrap().code,
            ErrorCode::NotFound
        );
        assert!(classify(&Method::GET, "fs/stat", None).is_err());
    }

    #[test]
    fn interpreter_requests_are_checked_before_the_sandbox_starts() {
        let BodyKind::Json(create) = classify(&Method::POST, "contexts", None).unwrap() else {
            panic!()
        };
        assert!(create(br#"{"language": "python"}"#).is_ok());
        assert_eq!(
            create(br#"{"language": "cobol"}"#).unwrap_err().code,
            ErrorCode::UnsupportedLanguage
        );
        let BodyKind::Json(run) = classify(&Method::POST, "contexts/ctx-1/run", None).unwrap()
        else {
            panic!()
        };
        assert!(run(br#"{"code": "1+1"}"#).is_ok());
        assert_eq!(
            run(br#"{"code": "1+1", "timeout_ms": 0}"#)
                .unwrap_err()
                .code,
            ErrorCode::InvalidArgument
        );
        assert!(classify(&Method::DELETE, "contexts/../x", None).is_err());
        assert!(matches!(
            classify(&Method::GET, "contexts", None),
            Ok(BodyKind::Empty)
        ));
    }

    #[test]
    fn json_checks_run_before_anything_starts() {
        let BodyKind::Json(check) = classify(&Method::POST, "exec", None).unwrap() else {
            panic!()
        };
        assert!(check(br#"{"command": "true"}"#).is_ok());
        assert_eq!(
            check(b"{not json").unwrap_err().code,
            ErrorCode::InvalidArgument
        );
        assert_eq!(
            check(br#"{"argv": []}"#).unwrap_err().code,
            ErrorCode::InvalidArgument
        );
    }
}
