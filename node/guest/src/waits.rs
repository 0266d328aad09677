//! Waiting on a background process: for a log line, a listening port, or its exit.

use crate::processes::ProcEntry;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;
use warren_api::process::{
    PortMode, WaitExitRequest, WaitExitResponse, WaitLogRequest, WaitLogResponse, WaitPortRequest,
    WaitPortResponse, DEFAULT_WAIT_TIMEOUT_MS,
};
use warren_api::{ApiError, ErrorCode};

fn timeout_of(ms: Option<u64>) -> Duration {
    Duration::from_millis(ms.unwrap_or(DEFAULT_WAIT_TIMEOUT_MS))
}

fn timed_out(what: &str, t: Duration) -> ApiError {
    ApiError::new(
        ErrorCode::ReadyTimeout,
        format!("{what} not seen within {} ms", t.as_millis()),
    )
}

fn exited(entry: &ProcEntry, what: &str) -> ApiError {
    let code = entry.exit_status().map(|e| e.code).unwrap_or(-1);
    ApiError::new(
        ErrorCode::ProcessExited,
        format!("process {} exited with code {code} before {what}", entry.id),
    )
    .with_details(serde_json::json!({ "exit_code": code }))
}

/// Line matcher: a plain substring or a regular expression.
enum Matcher {
    Substring(String),
    Regex(regex::Regex),
}

impl Matcher {
    fn matches(&self, line: &str) -> bool {
        match self {
            Matcher::Substring(s) => line.contains(s.as_str()),
            Matcher::Regex(r) => r.is_match(line),
        }
    }
}

/// Splits a stream into lines across chunk boundaries.
#[derive(Default)]
struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    fn push(&mut self, data: &[u8], mut f: impl FnMut(&str) -> bool) -> Option<String> {
        for &b in data {
            if b == b'\n' {
                let line = String::from_utf8_lossy(&self.partial)
                    .trim_end_matches('\r')
                    .to_string();
                self.partial.clear();
                if f(&line) {
                    return Some(line);
                }
            } else {
                self.partial.push(b);
            }
        }
        None
    }

    fn last(&self) -> String {
        String::from_utf8_lossy(&self.partial)
            .trim_end_matches('\r')
            .to_string()
    }
}

pub async fn wait_log(
    entry: &ProcEntry,
    req: &WaitLogRequest,
) -> Result<WaitLogResponse, ApiError> {
    req.validate()?;
    let matcher = match (&req.pattern, &req.regex) {
        (Some(p), _) => Matcher::Substring(p.clone()),
        (None, Some(r)) => Matcher::Regex(
            regex::Regex::new(r).map_err(|e| ApiError::invalid(format!("invalid regex: {e}")))?,
        ),
        (None, None) => unreachable!("validated"),
    };
    let limit = timeout_of(req.timeout_ms);
    let deadline = Instant::now() + limit;
    let mut lines = [Lines::default(), Lines::default()];
    let mut cursor = 0u64;
    let mut state_rx = entry.log.subscribe();
    loop {
        let state = *state_rx.borrow_and_update();
        while cursor < state.len {
            for frame in entry.log.read(cursor, 1024 * 1024)? {
                cursor = frame.cursor;
                let idx = usize::from(frame.stream == crate::logstore::STDERR);
                if let Some(line) = lines[idx].push(&frame.data, |l| matcher.matches(l)) {
                    return Ok(WaitLogResponse { line });
                }
            }
        }
        if state.ended {
            for l in &lines {
                let last = l.last();
                if !last.is_empty() && matcher.matches(&last) {
                    return Ok(WaitLogResponse { line: last });
                }
            }
            return Err(exited(entry, "the log line appeared"));
        }
        match tokio::time::timeout_at(deadline, state_rx.changed()).await {
            Err(_) => return Err(timed_out("log line", limit)),
            Ok(Err(_)) => return Err(exited(entry, "the log line appeared")),
            Ok(Ok(())) => {}
        }
    }
}

pub async fn wait_exit_of(
    entry: &ProcEntry,
    req: &WaitExitRequest,
) -> Result<WaitExitResponse, ApiError> {
    if req.timeout_ms == Some(0) {
        return Err(ApiError::invalid("timeout_ms must be positive"));
    }
    let limit = timeout_of(req.timeout_ms);
    // Until its output is in its log too, so that logs read next hold all of it.
    if !entry.wait_ended(limit).await {
        return Err(timed_out("process exit", limit));
    }
    let code = entry.exit_status().map_or(-1, |e| e.code);
    Ok(WaitExitResponse { exit_code: code })
}

pub async fn wait_port(
    entry: &ProcEntry,
    req: &WaitPortRequest,
) -> Result<WaitPortResponse, ApiError> {
    req.validate()?;
    let limit = timeout_of(req.timeout_ms);
    let deadline = Instant::now() + limit;
    let mut exit = entry.exit.clone();
    loop {
        if exit.borrow().is_some() {
            return Err(exited(entry, &format!("port {} was ready", req.port)));
        }
        let attempt = match req.mode {
            PortMode::Tcp => tcp_ready(req.port).await.then_some(None),
            PortMode::Http => http_status(req.port, req.path.as_deref().unwrap_or("/"))
                .await
                .filter(|s| {
                    let (lo, hi) = req.status_range();
                    (lo..=hi).contains(s)
                })
                .map(Some),
        };
        if let Some(status) = attempt {
            return Ok(WaitPortResponse {
                port: req.port,
                status,
            });
        }
        let next = Instant::now() + Duration::from_millis(100);
        if next >= deadline {
            return Err(timed_out(&format!("port {}", req.port), limit));
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next) => {}
            _ = exit.changed() => {}
        }
    }
}

async fn connect(port: u16) -> Option<tokio::net::TcpStream> {
    for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        let c = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect(&addr),
        )
        .await;
        if let Ok(Ok(s)) = c {
            return Some(s);
        }
    }
    None
}

async fn tcp_ready(port: u16) -> bool {
    connect(port).await.is_some()
}

/// One `GET path` over a fresh connection; the status code of the answer.
async fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = connect(port).await?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\nUser-Agent: warren-wait\r\n\r\n");
    let io = async {
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = Vec::with_capacity(256);
        let mut chunk = [0u8; 256];
        while !buf.contains(&b'\n') && buf.len() < 4096 {
            let n = s.read(&mut chunk).await.ok()?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        let line = String::from_utf8_lossy(&buf).lines().next()?.to_string();
        let mut parts = line.split_whitespace();
        if !parts.next()?.starts_with("HTTP/") {
            return None;
        }
        parts.next()?.parse::<u16>().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), io)
        .await
        .ok()
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks() {
        let mut l = Lines::default();
        assert_eq!(l.push(b"hel", |_| true), None);
        assert_eq!(
            l.push(b"lo\r\nwor", |s| s == "hello"),
            Some("hello".to_string())
        );
        let mut l = Lines::default();
        assert_eq!(l.push(b"one\ntw", |_| false), None);
        assert_eq!(
            l.last(),
            "tw",
            "an unterminated last line is kept for the end-of-log check"
        );
    }
}
