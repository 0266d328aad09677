//! `POST /exec`: one call on a session's shell, answered as JSON or streamed as SSE.

use crate::http::{self, Request, Response};
use crate::server::Guest;
use crate::shell::{quote, CallEnd, CallSpec, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use warren_api::exec::{
    command_of, Command, ExecEvent, ExecRequest, ExecResponse, JSON_OUTPUT_LIMIT,
};
use warren_api::sse::{OutputData, Utf8Chunker};
use warren_api::{ApiError, ErrorCode};

/// The script a call sources: the command itself, or the argv quoted word by word and run
/// with `command` so that functions and aliases of the same name are bypassed.
pub fn script_of(command: &Command) -> String {
    match command {
        Command::Shell(s) => format!("{s}\n"),
        Command::Argv(a) => {
            let words: Vec<String> = a.iter().map(|w| quote(w)).collect();
            format!("builtin command -- {}\n", words.join(" "))
        }
    }
}

fn session_terminated(exit_code: i32, stdout: &[u8], stderr: &[u8]) -> ApiError {
    ApiError::new(
        ErrorCode::SessionTerminated,
        format!(
            "the session's shell exited with code {exit_code}; the next call starts a fresh shell"
        ),
    )
    .with_details(serde_json::json!({
        "exit_code": exit_code,
        "stdout": String::from_utf8_lossy(stdout),
        "stderr": String::from_utf8_lossy(stderr),
    }))
}

pub async fn handle(g: Arc<Guest>, req: Request) -> Result<Response, ApiError> {
    let sse = http::wants_sse(&req);
    let body: ExecRequest = http::read_json(req).await?;
    body.validate()?;
    let command = command_of(&body.command, &body.argv)?;
    let spec = CallSpec {
        script: script_of(&command),
        cwd: body.cwd.clone(),
        env: body.env.clone(),
        stdin: body.stdin_bytes()?,
        timeout: body.timeout_ms.map(Duration::from_millis),
    };
    let session = g.sessions.get_or_create(body.session_name())?;
    let work = g.sessions.work_dir();
    let started = Instant::now();

    if sse {
        let (events, response) = http::sse_stream();
        tokio::spawn(async move {
            let (out_tx, mut out_rx) = mpsc::channel::<Output>(16);
            let (pid_tx, pid_rx) = oneshot::channel::<i32>();
            let reaper = g.sessions.reaper().clone();
            let run = session.run(&reaper, &spec, work, out_tx, move |pid| {
                let _ = pid_tx.send(pid);
            });
            let forward = async {
                if let Ok(pid) = pid_rx.await {
                    events.send(&ExecEvent::Start { pid: pid as u32 }).await;
                }
                let mut out_utf8 = Utf8Chunker::default();
                let mut err_utf8 = Utf8Chunker::default();
                while let Some(o) = out_rx.recv().await {
                    let event = match o {
                        Output::Stdout(b) => ready(&mut out_utf8, &b).map(ExecEvent::Stdout),
                        Output::Stderr(b) => ready(&mut err_utf8, &b).map(ExecEvent::Stderr),
                    };
                    if let Some(e) = event {
                        // A client that went away stops receiving; the call still finishes.
                        events.send(&e).await;
                    }
                }
                for (c, wrap) in [
                    (
                        &mut out_utf8,
                        ExecEvent::Stdout as fn(OutputData) -> ExecEvent,
                    ),
                    (&mut err_utf8, ExecEvent::Stderr),
                ] {
                    let rest = c.finish();
                    if !rest.is_empty() {
                        events.send(&wrap(OutputData::from_bytes(&rest))).await;
                    }
                }
            };
            let (result, ()) = tokio::join!(run, forward);
            let last = match result {
                Ok(r) => match r.end {
                    CallEnd::Completed { exit_code } => ExecEvent::Complete {
                        exit_code,
                        duration_ms: started.elapsed().as_millis() as u64,
                        timed_out: false,
                    },
                    CallEnd::TimedOut => ExecEvent::Complete {
                        exit_code: 124,
                        duration_ms: started.elapsed().as_millis() as u64,
                        timed_out: true,
                    },
                    CallEnd::ShellExited { exit_code } => {
                        ExecEvent::error(&session_terminated(exit_code, b"", b""))
                    }
                },
                Err(e) => ExecEvent::error(&e),
            };
            events.send(&last).await;
        });
        return Ok(response);
    }

    let (out_tx, mut out_rx) = mpsc::channel::<Output>(16);
    let reaper = g.sessions.reaper().clone();
    // Its own task, as for a stream: a client that goes away stops receiving, and the call
    // still runs to its end instead of being cut at an arbitrary point.
    let run = tokio::spawn(async move { session.run(&reaper, &spec, work, out_tx, |_| {}).await });
    let run = async {
        run.await
            .unwrap_or_else(|e| Err(ApiError::internal(format!("the call's task failed: {e}"))))
    };
    let collect = async {
        let (mut out, mut err, mut truncated) = (Vec::new(), Vec::new(), false);
        while let Some(o) = out_rx.recv().await {
            let (buf, b) = match o {
                Output::Stdout(b) => (&mut out, b),
                Output::Stderr(b) => (&mut err, b),
            };
            let room = JSON_OUTPUT_LIMIT.saturating_sub(buf.len());
            if b.len() > room {
                truncated = true;
            }
            buf.extend_from_slice(&b[..b.len().min(room)]);
        }
        (out, err, truncated)
    };
    let (result, (out, err, truncated)) = tokio::join!(run, collect);
    let (exit_code, timed_out) = match result?.end {
        CallEnd::Completed { exit_code } => (exit_code, false),
        CallEnd::TimedOut => (124, true),
        CallEnd::ShellExited { exit_code } => {
            return Err(session_terminated(exit_code, &out, &err))
        }
    };
    let (stdout, stdout_base64) = text_and_base64(out);
    let (stderr, stderr_base64) = text_and_base64(err);
    Ok(http::json(
        200,
        &ExecResponse {
            exit_code,
            stdout,
            stderr,
            success: exit_code == 0 && !timed_out,
            duration_ms: started.elapsed().as_millis() as u64,
            timed_out,
            truncated,
            stdout_base64,
            stderr_base64,
        },
    ))
}

fn ready(chunker: &mut Utf8Chunker, bytes: &[u8]) -> Option<OutputData> {
    let b = chunker.push(bytes);
    (!b.is_empty()).then(|| OutputData::from_bytes(&b))
}

/// Text as is when it is UTF-8; otherwise a lossy rendering plus the exact bytes in base64.
pub fn text_and_base64(bytes: Vec<u8>) -> (String, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, None),
        Err(e) => {
            use base64::Engine;
            let b = e.into_bytes();
            (
                String::from_utf8_lossy(&b).into_owned(),
                Some(base64::engine::general_purpose::STANDARD.encode(&b)),
            )
        }
    }
}
