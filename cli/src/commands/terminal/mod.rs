//! `warren terminal ID`: an interactive shell in a sandbox over the terminal WebSocket
//! (api.md "Terminals"). The local terminal is put in raw mode; its size is sent on connect
//! and again on every SIGWINCH; a lost connection is made again with `since` set to the
//! cursor seen so far, so only missed output is replayed. Ctrl-] detaches and leaves the
//! shell running; the shell's exit ends the command with its code. A piped stdin works too:
//! its end is sent as Ctrl-D.

mod session;
mod tty;

use super::client;
use crate::args::{Conn, TerminalArgs};
use anyhow::{anyhow, Context};
use session::{on_control, split_at_detach, ControlAction, Progress};
use std::io::{Read, Write};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;
use warren_api::terminal::TerminalQuery;
use warren_client::{Client, TerminalEvent, TerminalSocket};

pub async fn terminal(conn: &Conn, a: TerminalArgs) -> anyhow::Result<i32> {
    let c = client(conn)?;
    let raw = tty::RawMode::enable(0).context("cannot put the terminal in raw mode")?;
    let say = Notices { raw: raw.is_some() };
    let mut progress = Progress::default();
    let mut socket = c
        .terminal(&a.id, &a.name, &query(&a, &progress))
        .await
        .with_context(|| format!("cannot attach to terminal {:?} of {}", a.name, a.id))?;
    if say.raw {
        say.note(&format!(
            "attached to {} · {}; Ctrl-] detaches",
            a.id, a.name
        ));
    }
    let mut input = stdin_reader();
    let mut stdin_open = true;
    let mut winch = signal(SignalKind::window_change()).context("SIGWINCH")?;
    let mut out = std::io::stdout();
    loop {
        let lost = tokio::select! {
            chunk = input.recv(), if stdin_open => match chunk {
                Some(bytes) => {
                    let (keys, detach) = split_at_detach(&bytes);
                    let lost = !keys.is_empty() && socket.send(keys.to_vec()).await.is_err();
                    if detach {
                        say.note(&format!(
                            "detached; the shell runs on (warren terminal {} --name {})",
                            a.id, a.name
                        ));
                        return Ok(0);
                    }
                    lost
                }
                None => {
                    stdin_open = false;
                    socket.send(vec![session::END_OF_INPUT]).await.is_err()
                }
            },
            _ = winch.recv() => match local_size() {
                Some((cols, rows)) => socket.resize(cols, rows).await.is_err(),
                None => false,
            },
            event = socket.next() => match event {
                Some(Ok(TerminalEvent::Output(bytes))) => {
                    progress.output(bytes.len());
                    out.write_all(&bytes)?;
                    out.flush()?;
                    false
                }
                Some(Ok(TerminalEvent::Control(control))) => {
                    match on_control(&mut progress, control) {
                        ControlAction::Continue => false,
                        ControlAction::Exit(code) => return Ok(code),
                        ControlAction::Warn(message) => {
                            say.note(&message);
                            false
                        }
                    }
                }
                Some(Err(_)) | None => true,
            },
        };
        if lost {
            say.note("connection lost; reconnecting");
            socket = reconnect(&c, &a, &progress).await?;
            say.note("reconnected");
        }
    }
}

/// The terminal's query: the local size (when there is a terminal), the shell, and where to
/// resume.
fn query(a: &TerminalArgs, progress: &Progress) -> TerminalQuery {
    let size = local_size();
    TerminalQuery {
        cols: size.map(|s| s.0),
        rows: size.map(|s| s.1),
        shell: a.shell.clone(),
        since: progress.since(),
    }
}

fn local_size() -> Option<(u16, u16)> {
    tty::size(1).or_else(|| tty::size(0))
}

/// Attaches again after a lost connection, for up to `RECONNECT_FOR`, while the failure is
/// one worth retrying.
async fn reconnect(
    c: &Client,
    a: &TerminalArgs,
    progress: &Progress,
) -> anyhow::Result<TerminalSocket> {
    let deadline = Instant::now() + session::RECONNECT_FOR;
    let mut attempt = 0;
    loop {
        tokio::time::sleep(session::retry_delay(attempt)).await;
        attempt += 1;
        match c.terminal(&a.id, &a.name, &query(a, progress)).await {
            Ok(socket) => return Ok(socket),
            Err(e) if session::worth_retrying(e.code()) && Instant::now() < deadline => continue,
            Err(e) => {
                return Err(anyhow!(
                    "the terminal connection was lost and could not be made again: {e}"
                ))
            }
        }
    }
}

/// Reads stdin on its own thread (a blocking read the runtime must not wait for at exit):
/// the channel closes at stdin's end.
fn stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    rx
}

/// Messages of the command itself, on stderr; in raw mode a line needs its carriage return.
struct Notices {
    raw: bool,
}

impl Notices {
    fn note(&self, message: &str) {
        let end = if self.raw { "\r\n" } else { "\n" };
        eprint!("{end}[warren: {message}]{end}");
    }
}
