//! One socket attached to a terminal: replay from a cursor, `ready`, live output and the
//! exit, while keystrokes and resizes flow the other way.

use super::Terminal;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use warren_api::terminal::{
    frame_header, parse_frame_header, ClientControl, FrameKind, ServerControl, FRAME_HEADER,
};

/// Output is sent in frames of at most this many bytes.
const OUTPUT_FRAME: usize = 64 * 1024;

async fn send<W: AsyncWrite + Unpin>(w: &mut W, kind: FrameKind, payload: &[u8]) -> bool {
    let header = frame_header(kind, payload.len());
    w.write_all(&header).await.is_ok()
        && w.write_all(payload).await.is_ok()
        && w.flush().await.is_ok()
}

async fn send_output<W: AsyncWrite + Unpin>(w: &mut W, bytes: &[u8]) -> bool {
    for chunk in bytes.chunks(OUTPUT_FRAME) {
        if !send(w, FrameKind::Data, chunk).await {
            return false;
        }
    }
    true
}

async fn send_control<W: AsyncWrite + Unpin>(w: &mut W, c: &ServerControl) -> bool {
    send(w, FrameKind::Control, c.to_json().as_bytes()).await
}

/// Serves `io` until the client goes away or the shell exits.
pub async fn attach<S>(term: Arc<Terminal>, since: Option<u64>, io: S)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    term.attached.fetch_add(1, Ordering::Relaxed);
    let (rd, mut wr) = tokio::io::split(io);
    let (errors_tx, mut errors) = mpsc::channel::<String>(8);
    let mut reader = tokio::spawn(read_input(term.clone(), rd, errors_tx));

    // Subscribe before reading the log, so nothing produced in between is missed.
    let mut follow = term.follow();
    let mut progress = *follow.borrow_and_update();
    let (from, replay) = term.output_since(since.unwrap_or(0));
    let mut cursor = from + replay.len() as u64;
    let mut ok = send_output(&mut wr, &replay).await
        && send_control(&mut wr, &ServerControl::Ready { cursor }).await;
    while ok {
        let (from, bytes) = term.output_since(cursor);
        if from > cursor {
            report_lag(&mut wr, from - cursor).await;
        }
        cursor = from + bytes.len() as u64;
        ok = send_output(&mut wr, &bytes).await;
        if let Some(code) = progress.exit {
            if ok {
                send_control(&mut wr, &ServerControl::Exit { code }).await;
            }
            break;
        }
        tokio::select! {
            changed = follow.changed() => {
                if changed.is_err() {
                    break;
                }
                progress = *follow.borrow_and_update();
            }
            Some(message) = errors.recv() => {
                ok = ok && send_control(&mut wr, &ServerControl::Error { message }).await;
            }
            _ = &mut reader => break,
        }
    }
    reader.abort();
    let _ = wr.shutdown().await;
    term.attached.fetch_sub(1, Ordering::Relaxed);
}

/// A socket too slow to keep up lost output that the log no longer holds: say so.
async fn report_lag<W: AsyncWrite + Unpin>(w: &mut W, lost: u64) {
    let message = format!("{lost} bytes of output were dropped while this socket lagged");
    send_control(w, &ServerControl::Error { message }).await;
}

/// Keystrokes and control messages from the client, until it closes.
async fn read_input<R: AsyncRead + Unpin>(
    term: Arc<Terminal>,
    mut rd: R,
    errors: mpsc::Sender<String>,
) {
    let mut header = [0u8; FRAME_HEADER];
    loop {
        if rd.read_exact(&mut header).await.is_err() {
            return;
        }
        let (kind, len) = match parse_frame_header(&header) {
            Ok(x) => x,
            Err(e) => {
                let _ = errors.send(e).await;
                return;
            }
        };
        let mut payload = vec![0u8; len];
        if rd.read_exact(&mut payload).await.is_err() {
            return;
        }
        match kind {
            FrameKind::Data => {
                if term.write(&payload).await.is_err() {
                    return;
                }
            }
            FrameKind::Control => {
                let text = String::from_utf8_lossy(&payload);
                let outcome = ClientControl::parse(&text)
                    .map_err(|e| e.message)
                    .and_then(|c| match c {
                        ClientControl::Resize { cols, rows } => term
                            .resize(cols, rows)
                            .map_err(|e| format!("cannot resize: {e}")),
                    });
                if let Err(message) = outcome {
                    let _ = errors.send(message).await;
                }
            }
        }
    }
}
