//! Background processes: tree kill, waits, logs with cursors.

use super::harness::{api_err, unique, Node};
use futures_util::StreamExt;
use warren_api::process::{
    LogEvent, ProcessStatus, StartProcessRequest, WaitLogRequest, WaitPortRequest,
};
use warren_api::ErrorCode;

fn start(cmd: &str, id: &str) -> StartProcessRequest {
    StartProcessRequest {
        command: Some(cmd.into()),
        id: Some(id.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn tree_kill_escalates_for_a_script_that_traps_term() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("tk-{}", unique());
    let script = "trap 'echo ignoring TERM' TERM; sleep 313 & while true; do sleep 0.2; done";
    let p = c
        .start_process(&id, &start(script, "stubborn"))
        .await
        .unwrap();
    assert_eq!(p.status, ProcessStatus::Running);
    c.wait_log(
        &id,
        "stubborn",
        &WaitLogRequest {
            pattern: Some("x".into()),
            timeout_ms: Some(300),
            ..Default::default()
        },
    )
    .await
    .unwrap_err();
    let t = std::time::Instant::now();
    let killed = c.kill_process(&id, "stubborn", "TERM", 1000).await.unwrap();
    assert!(
        t.elapsed() >= std::time::Duration::from_millis(900),
        "the grace is honoured"
    );
    assert_eq!(
        (killed.status, killed.exit_code),
        (ProcessStatus::Killed, Some(137))
    );
    let r = c
        .sh(&id, "pgrep -f 'sleep 313' || echo none")
        .await
        .unwrap();
    assert_eq!(r.stdout, "none\n", "the child is gone with its parent");
    assert!(c
        .logs(&id, "stubborn", None)
        .await
        .unwrap()
        .stdout
        .contains("ignoring TERM"));

    c.start_process(&id, &start("sleep 300", "polite"))
        .await
        .unwrap();
    let killed = c.kill_process(&id, "polite", "TERM", 5000).await.unwrap();
    assert_eq!(
        (killed.status, killed.exit_code),
        (ProcessStatus::Killed, Some(143))
    );
    // Killing an ended process is idempotent.
    assert_eq!(
        c.kill_process(&id, "polite", "KILL", 0)
            .await
            .unwrap()
            .exit_code,
        Some(143)
    );
}

#[tokio::test]
async fn wait_for_log_lines_on_stdout_and_stderr() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("wl-{}", unique());
    c.start_process(
        &id,
        &start(
            "echo starting; sleep 0.5; echo 'server ready on 80' >&2; sleep 300",
            "srv",
        ),
    )
    .await
    .unwrap();
    let l = c
        .wait_log(
            &id,
            "srv",
            &WaitLogRequest {
                pattern: Some("ready".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(l.line, "server ready on 80");
    let l = c
        .wait_log(
            &id,
            "srv",
            &WaitLogRequest {
                regex: Some("^sta.t".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(l.line, "starting");
    let e = c
        .wait_log(
            &id,
            "srv",
            &WaitLogRequest {
                pattern: Some("never".into()),
                timeout_ms: Some(500),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).0, 408);
    c.start_process(&id, &start("echo bye; exit 3", "quitter"))
        .await
        .unwrap();
    let e = c
        .wait_log(
            &id,
            "quitter",
            &WaitLogRequest {
                pattern: Some("never".into()),
                timeout_ms: Some(20_000),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    let (status, code_, details) = api_err(e);
    assert_eq!((status, code_), (409, ErrorCode::ProcessExited));
    assert_eq!(details.unwrap()["exit_code"], 3);
}

#[tokio::test]
async fn wait_for_port_and_exit() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("wp-{}", unique());
    c.start_process(
        &id,
        &start("sleep 0.5; exec python3 -m http.server 8123", "web"),
    )
    .await
    .unwrap();
    let req = |port, mode: &str, timeout| -> WaitPortRequest {
        serde_json::from_value(
            serde_json::json!({"port": port, "mode": mode, "timeout_ms": timeout}),
        )
        .unwrap()
    };
    let r = c
        .wait_port(&id, "web", &req(8123, "http", 20_000))
        .await
        .unwrap();
    assert_eq!((r.port, r.status), (8123, Some(200)));
    let r = c
        .wait_port(&id, "web", &req(8123, "tcp", 20_000))
        .await
        .unwrap();
    assert_eq!(r.status, None);
    let e = c
        .wait_port(&id, "web", &req(8124, "tcp", 600))
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::ReadyTimeout);
    c.start_process(&id, &start("sleep 0.3; exit 5", "short"))
        .await
        .unwrap();
    let e = c
        .wait_port(&id, "short", &req(8125, "tcp", 20_000))
        .await
        .unwrap_err();
    let (status, _, details) = api_err(e);
    assert_eq!(status, 409);
    assert_eq!(details.unwrap()["exit_code"], 5);
    assert_eq!(
        c.wait_exit(&id, "short", Some(10_000))
            .await
            .unwrap()
            .exit_code,
        5
    );
    let e = c.wait_exit(&id, "web", Some(300)).await.unwrap_err();
    assert_eq!(api_err(e).0, 408);
    let list = c.list_processes(&id).await.unwrap();
    let short = list.processes.iter().find(|p| p.id == "short").unwrap();
    assert_eq!(
        (short.status, short.exit_code),
        (ProcessStatus::Failed, Some(5))
    );
    assert!(short.ended_at.is_some());
}

#[tokio::test]
async fn logs_replay_from_a_cursor_then_follow_without_loss() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("logs-{}", unique());
    let script = "for i in $(seq 1 60); do echo out-$i; echo err-$i >&2; sleep 0.02; done";
    c.start_process(&id, &start(script, "counter"))
        .await
        .unwrap();
    c.wait_log(
        &id,
        "counter",
        &WaitLogRequest {
            pattern: Some("out-20".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let first = c.logs(&id, "counter", None).await.unwrap();
    assert!(first.stdout.starts_with("out-1\n"));
    let mut events = c
        .follow_logs(&id, "counter", Some(first.cursor))
        .await
        .unwrap();
    let (mut out, mut err, mut exit) = (first.stdout.clone(), first.stderr.clone(), None);
    let mut last_cursor = first.cursor;
    while let Some(ev) = events.next().await {
        match ev.unwrap() {
            LogEvent::Stdout(ch) => {
                assert!(ch.cursor > last_cursor);
                last_cursor = ch.cursor;
                out.push_str(ch.data.data.as_deref().unwrap());
            }
            LogEvent::Stderr(ch) => {
                last_cursor = ch.cursor;
                err.push_str(ch.data.data.as_deref().unwrap());
            }
            LogEvent::Exit { exit_code } => exit = Some(exit_code),
            LogEvent::Error { message, .. } => panic!("{message}"),
        }
    }
    let expect = |p: &str| (1..=60).map(|i| format!("{p}-{i}\n")).collect::<String>();
    assert_eq!(out, expect("out"));
    assert_eq!(err, expect("err"));
    assert_eq!(exit, Some(0));
    // Replay of everything, from the start, after the end.
    let all = c
        .follow_logs(&id, "counter", None)
        .await
        .unwrap()
        .collect_all()
        .await
        .unwrap();
    assert!(matches!(all.last(), Some(LogEvent::Exit { exit_code: 0 })));
    let rest = c.logs(&id, "counter", Some(last_cursor)).await.unwrap();
    assert_eq!((rest.stdout.as_str(), rest.stderr.as_str()), ("", ""));
    let e = c.logs(&id, "counter", Some(3)).await.unwrap_err();
    assert_eq!(
        api_err(e).0,
        400,
        "a cursor that is not a frame boundary is refused"
    );
    let e = c.get_process(&id, "nope").await.unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::ProcessNotFound);
    assert_eq!(
        c.get_process(&id, "counter").await.unwrap().status,
        ProcessStatus::Completed
    );
}
