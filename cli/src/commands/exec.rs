//! `warren exec`: streamed output; the remote exit code becomes ours.

use super::{client, pairs};
use crate::args::{Conn, ExecArgs};
use base64::Engine;
use futures_util::StreamExt;
use std::io::{Read, Write};
use warren_api::exec::{ExecEvent, ExecRequest};

pub async fn exec(conn: &Conn, a: ExecArgs) -> anyhow::Result<i32> {
    let (command, argv) = if a.command.len() == 1 {
        (Some(a.command[0].clone()), None)
    } else {
        (None, Some(a.command.clone()))
    };
    let stdin_base64 = if a.stdin {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf)?;
        Some(base64::engine::general_purpose::STANDARD.encode(&buf))
    } else {
        None
    };
    let req = ExecRequest {
        command,
        argv,
        cwd: a.cwd,
        env: (!a.env.is_empty())
            .then(|| pairs(&a.env, "--env"))
            .transpose()?,
        timeout_ms: a.timeout.map(|s| (s * 1000.0).round().max(1.0) as u64),
        session: a.session,
        stdin: None,
        stdin_base64,
    };
    let mut events = client(conn)?.exec_stream(&a.id, &req).await?;
    let mut out = std::io::stdout();
    let mut err = std::io::stderr();
    while let Some(ev) = events.next().await {
        match ev? {
            ExecEvent::Start { .. } => {}
            ExecEvent::Stdout(d) => {
                out.write_all(&d.bytes())?;
                out.flush()?;
            }
            ExecEvent::Stderr(d) => {
                err.write_all(&d.bytes())?;
                err.flush()?;
            }
            ExecEvent::Complete {
                exit_code,
                timed_out,
                ..
            } => {
                if timed_out {
                    eprintln!("warren: timed out; the command's processes were killed");
                }
                return Ok(exit_code);
            }
            ExecEvent::Error {
                code,
                message,
                details,
            } => {
                eprintln!("warren: {code}: {message}");
                let remote = details
                    .as_ref()
                    .and_then(|d| d.get("exit_code"))
                    .and_then(|c| c.as_i64());
                return Ok(remote.map(|c| c as i32).unwrap_or(crate::EXIT_WARREN_ERROR));
            }
        }
    }
    anyhow::bail!("the stream ended without a result")
}
