//! Terminals over WebSocket: resize, replay, several sockets, a shell that outlives them.

use super::harness::{api_err, unique, Node};
use std::time::Duration;
use warren_api::terminal::{ServerControl, TerminalQuery};
use warren_api::ticket::{TicketRequest, TicketScope};
use warren_api::ErrorCode;
use warren_client::{TerminalEvent, TerminalSocket};

pub fn size(cols: u16, rows: u16) -> TerminalQuery {
    TerminalQuery {
        cols: Some(cols),
        rows: Some(rows),
        ..Default::default()
    }
}

/// Everything a socket delivers until `needle` shows up in its output (or the limit passes);
/// also the cursor of its `ready`.
pub async fn read_until(
    sock: &mut TerminalSocket,
    needle: &str,
    limit: Duration,
) -> (String, Option<u64>, Option<i32>) {
    let mut out = String::new();
    let (mut cursor, mut exit) = (None, None);
    let deadline = tokio::time::Instant::now() + limit;
    while needle.is_empty() || !out.contains(needle) {
        let next = tokio::time::timeout_at(deadline, sock.next()).await;
        match next {
            Ok(Some(Ok(TerminalEvent::Output(b)))) => out.push_str(&String::from_utf8_lossy(&b)),
            Ok(Some(Ok(TerminalEvent::Control(ServerControl::Ready { cursor: c })))) => {
                cursor = Some(c);
                if needle.is_empty() {
                    break;
                }
            }
            Ok(Some(Ok(TerminalEvent::Control(ServerControl::Exit { code })))) => {
                exit = Some(code);
                break;
            }
            Ok(Some(Ok(TerminalEvent::Control(ServerControl::Error { message })))) => {
                out.push_str(&format!("[error: {message}]"));
            }
            Ok(Some(Err(e))) => panic!("socket failed: {e}; output so far: {out:?}"),
            Ok(None) | Err(_) => break,
        }
    }
    (out, cursor, exit)
}

const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn terminal_resize_reaches_stty_and_the_shell_outlives_its_socket() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("term-{}", unique());
    let mut s = c.terminal(&id, "main", &size(80, 24)).await.unwrap();
    let (_, ready, _) = read_until(&mut s, "", LIMIT).await;
    assert!(ready.is_some(), "ready comes first");
    // `$((…))` makes the expected text differ from the echoed command line.
    s.send("stty size; echo size-$((40+2))\n").await.unwrap();
    let (out, _, _) = read_until(&mut s, "size-42", LIMIT).await;
    assert!(out.contains("24 80"), "{out:?}");
    s.resize(120, 40).await.unwrap();
    s.send("stty size; echo resized-$((40+3))\n").await.unwrap();
    let (out, _, _) = read_until(&mut s, "resized-43", LIMIT).await;
    assert!(out.contains("40 120"), "{out:?}");

    // State typed before the disconnect is there after it; output is replayed first.
    s.send("export KEPT=kept-value; cd /tmp; echo marker-$((6*7))\n")
        .await
        .unwrap();
    let (_, _, _) = read_until(&mut s, "marker-42", LIMIT).await;
    s.close().await;
    let mut s = c
        .terminal(&id, "main", &TerminalQuery::default())
        .await
        .unwrap();
    let (replayed, cursor, _) = read_until(&mut s, "", LIMIT).await;
    assert!(replayed.contains("marker-42"), "{replayed:?}");
    let cursor = cursor.expect("ready");
    s.send("echo $KEPT $(pwd) done-$((1+1))\n").await.unwrap();
    let (out, _, _) = read_until(&mut s, "done-2", LIMIT).await;
    assert!(out.contains("kept-value /tmp"), "{out:?}");
    s.close().await;

    // Reconnecting from a cursor replays only what came after it.
    let q = TerminalQuery {
        since: Some(cursor),
        ..Default::default()
    };
    let mut s = c.terminal(&id, "main", &q).await.unwrap();
    let (replayed, _, _) = read_until(&mut s, "", LIMIT).await;
    assert!(!replayed.contains("marker-42"), "{replayed:?}");
    assert!(replayed.contains("done-2"), "{replayed:?}");

    // Leaving the shell ends every socket with its exit code.
    s.send("exit 3\n").await.unwrap();
    let (_, _, exit) = read_until(&mut s, "never printed", LIMIT).await;
    assert_eq!(exit, Some(3));
}

#[tokio::test]
async fn terminal_sockets_share_output_and_names_are_independent() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("term2-{}", unique());
    let mut a = c.terminal(&id, "shared", &size(80, 24)).await.unwrap();
    let mut b = c.terminal(&id, "shared", &size(80, 24)).await.unwrap();
    read_until(&mut a, "", LIMIT).await;
    read_until(&mut b, "", LIMIT).await;
    a.send("echo both-$((1+1))\n").await.unwrap();
    let (seen_by_b, _, _) = read_until(&mut b, "both-2", LIMIT).await;
    assert!(seen_by_b.contains("both-2"), "{seen_by_b:?}");
    let (seen_by_a, _, _) = read_until(&mut a, "both-2", LIMIT).await;
    assert!(seen_by_a.contains("both-2"), "{seen_by_a:?}");

    // Another name is another shell with its own cwd.
    a.send("cd /tmp\n").await.unwrap();
    let mut other = c.terminal(&id, "other", &size(80, 24)).await.unwrap();
    read_until(&mut other, "", LIMIT).await;
    other.send("echo cwd=$(pwd)-$((2+2))\n").await.unwrap();
    // (Not just "-4": the prompt shows the sandbox id, whose random hex may hold it.)
    let (out, _, _) = read_until(&mut other, "workspace-4", LIMIT).await;
    assert!(out.contains("cwd=/workspace-4"), "{out:?}");

    // Deleting a terminal ends its shell; its sockets see the exit.
    c.close_terminal(&id, "other").await.unwrap();
    let (_, _, exit) = read_until(&mut other, "never printed", LIMIT).await;
    assert!(exit.is_some(), "the socket is told the shell ended");
    c.close_terminal(&id, "other").await.unwrap();
}

#[tokio::test]
async fn terminal_requests_are_checked_and_tickets_open_once() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("term3-{}", unique());
    // Not a WebSocket → 426; bad sizes and names → 400 before any container starts.
    let resp = node
        .req(
            reqwest::Method::GET,
            &format!("/v1/sandboxes/{id}/terminals/main"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 426);
    let e = c.terminal(&id, "main", &size(0, 24)).await.unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::InvalidArgument);
    let e = c
        .terminal(&id, "bad%20name", &size(80, 24))
        .await
        .unwrap_err();
    assert_eq!(api_err(e).0, 400);
    assert!(c.get_sandbox(&id).await.is_err(), "no sandbox was made");
    let q = TerminalQuery {
        shell: Some("no-such-shell".into()),
        ..Default::default()
    };
    let e = c.terminal(&id, "main", &q).await.unwrap_err();
    let (status, code, _) = api_err(e);
    assert_eq!((status, code), (400, ErrorCode::InvalidArgument));

    // A control message the server does not know is answered with an error, not a hang-up.
    let mut s = c.terminal(&id, "main", &size(80, 24)).await.unwrap();
    read_until(&mut s, "", LIMIT).await;
    s.send_text(r#"{"type":"launch"}"#).await.unwrap();
    let (out, _, _) = read_until(&mut s, "[error:", LIMIT).await;
    assert!(out.contains("invalid control message"), "{out:?}");
    s.send("echo still-$((3+4))\n").await.unwrap();
    assert!(read_until(&mut s, "still-7", LIMIT)
        .await
        .0
        .contains("still-7"));

    // Tickets: bound to sandbox and scope, single use.
    let t = c
        .ticket(&TicketRequest {
            sandbox: id.clone(),
            scope: TicketScope::Terminal,
            ttl_s: Some(60),
        })
        .await
        .unwrap();
    let bare = warren_client::Client::new(&node.url, "wrong-key").unwrap();
    let mut s = bare
        .terminal_with_ticket(&id, "main", &TerminalQuery::default(), &t.ticket)
        .await
        .unwrap();
    let (replayed, _, _) = read_until(&mut s, "", LIMIT).await;
    assert!(replayed.contains("still-7"));
    let e = bare
        .terminal_with_ticket(&id, "main", &TerminalQuery::default(), &t.ticket)
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::Unauthorized);
    let e = c
        .ticket(&TicketRequest {
            sandbox: id.clone(),
            scope: TicketScope::Terminal,
            ttl_s: Some(3600),
        })
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::InvalidArgument);
}
