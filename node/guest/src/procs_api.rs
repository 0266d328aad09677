//! HTTP endpoints of background processes: `/processes…`.

use crate::http::{self, Request, Response};
use crate::logstore::STDERR;
use crate::processes::ProcEntry;
use crate::server::Guest;
use crate::waits;
use std::sync::Arc;
use std::time::Duration;
use warren_api::exec::JSON_OUTPUT_LIMIT;
use warren_api::process::{
    parse_signal, KillQuery, LogChunk, LogEvent, LogsQuery, LogsResponse, ProcessList,
    StartProcessRequest, WaitExitRequest, WaitLogRequest, WaitPortRequest, DEFAULT_KILL_GRACE_MS,
};
use warren_api::sse::OutputData;
use warren_api::ApiError;

pub async fn start(g: Arc<Guest>, req: Request) -> Result<Response, ApiError> {
    let body: StartProcessRequest = http::read_json(req).await?;
    let p = g.processes.start(&body).await?;
    Ok(http::json(201, &p))
}

pub fn list(g: &Guest) -> Response {
    http::json(
        200,
        &ProcessList {
            processes: g.processes.list(),
        },
    )
}

pub fn get(g: &Guest, id: &str) -> Result<Response, ApiError> {
    Ok(http::json(200, &g.processes.get(id)?.to_api()))
}

pub async fn kill(g: Arc<Guest>, id: &str, req: &Request) -> Result<Response, ApiError> {
    let q: KillQuery = http::query(req)?;
    let signal = parse_signal(q.signal.as_deref().unwrap_or("TERM"))?;
    let grace = Duration::from_millis(q.grace_ms.unwrap_or(DEFAULT_KILL_GRACE_MS).min(600_000));
    Ok(http::json(200, &g.processes.kill(id, signal, grace).await?))
}

pub async fn wait(g: Arc<Guest>, id: &str, kind: &str, req: Request) -> Result<Response, ApiError> {
    let entry = g.processes.get(id)?;
    match kind {
        "log" => {
            let body: WaitLogRequest = http::read_json(req).await?;
            Ok(http::json(200, &waits::wait_log(&entry, &body).await?))
        }
        "port" => {
            let body: WaitPortRequest = http::read_json(req).await?;
            Ok(http::json(200, &waits::wait_port(&entry, &body).await?))
        }
        "exit" => {
            let body: WaitExitRequest = http::read_json(req).await?;
            Ok(http::json(200, &waits::wait_exit_of(&entry, &body).await?))
        }
        other => Err(http::not_found(&format!("wait/{other}"))),
    }
}

pub async fn logs(g: Arc<Guest>, id: &str, req: Request) -> Result<Response, ApiError> {
    let q: LogsQuery = http::query(&req)?;
    let entry = g.processes.get(id)?;
    let since = q.since.unwrap_or(0);
    // Check the cursor now, so that a bad one is a 400 rather than an error event.
    entry.log.read(since, 0)?;
    if http::wants_sse(&req) {
        return Ok(follow(entry, since, q.follow != Some(false)));
    }
    let (mut stdout, mut stderr, mut truncated) = (Vec::new(), Vec::new(), false);
    let mut cursor = since;
    'read: loop {
        let frames = entry.log.read(cursor, 1024 * 1024)?;
        if frames.is_empty() {
            break;
        }
        for f in frames {
            let buf = if f.stream == STDERR {
                &mut stderr
            } else {
                &mut stdout
            };
            if buf.len() + f.data.len() > JSON_OUTPUT_LIMIT {
                truncated = true;
                break 'read;
            }
            buf.extend_from_slice(&f.data);
            cursor = f.cursor;
        }
    }
    Ok(http::json(
        200,
        &LogsResponse {
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
            cursor,
            truncated,
        },
    ))
}

/// Replays from `since`, then (when following) streams new output until the process has
/// ended and its output is collected, then sends `exit`.
fn follow(entry: Arc<ProcEntry>, since: u64, follow: bool) -> Response {
    let (events, response) = http::sse_stream();
    tokio::spawn(async move {
        let mut state_rx = entry.log.subscribe();
        let mut cursor = since;
        loop {
            let state = *state_rx.borrow_and_update();
            while cursor < state.len {
                let frames = match entry.log.read(cursor, 256 * 1024) {
                    Ok(f) => f,
                    Err(e) => {
                        let e = ApiError::from(e);
                        events
                            .send(&LogEvent::Error {
                                code: e.code,
                                message: e.message,
                            })
                            .await;
                        return;
                    }
                };
                for f in frames {
                    // Frames go out whole (base64 when not UTF-8), so that every cursor a
                    // client sees is exact: resuming from it repeats and loses nothing.
                    cursor = f.cursor;
                    let chunk = LogChunk {
                        data: OutputData::from_bytes(&f.data),
                        cursor,
                    };
                    let ev = if f.stream == STDERR {
                        LogEvent::Stderr(chunk)
                    } else {
                        LogEvent::Stdout(chunk)
                    };
                    if !events.send(&ev).await {
                        return;
                    }
                }
            }
            if state.ended {
                break;
            }
            if !follow {
                return;
            }
            tokio::select! {
                r = state_rx.changed() => if r.is_err() { break },
                _ = closed(&events) => return,
            }
        }
        let exit_code = entry.exit_status().map(|e| e.code).unwrap_or(-1);
        events.send(&LogEvent::Exit { exit_code }).await;
    });
    response
}

/// Resolves when the client has gone away.
async fn closed(events: &http::SseSender) {
    while !events.is_closed() {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
