//! Exec: shell state, env/cwd, exit codes, stdin, timeouts, streaming.

use super::harness::{unique, Node};
use futures_util::StreamExt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use warren_api::exec::{ExecEvent, ExecRequest};
use warren_api::ErrorCode;

fn sh(cmd: &str) -> ExecRequest {
    ExecRequest {
        command: Some(cmd.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn exit_codes_missing_commands_and_argv() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("codes-{}", unique());
    let r = c.sh(&id, "false").await.unwrap();
    assert_eq!((r.exit_code, r.success), (1, false));
    let r = c.sh(&id, "no-such-command-here").await.unwrap();
    assert_eq!(r.exit_code, 127);
    assert!(r.stderr.contains("command not found"), "{}", r.stderr);
    let r = c.sh(&id, "bash -c 'exit 42'").await.unwrap();
    assert_eq!(r.exit_code, 42);
    let argv = |a: &[&str]| ExecRequest {
        argv: Some(a.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    };
    let r = c
        .exec(&id, &argv(&["printf", "%s|", "a b", "$HOME", "*"]))
        .await
        .unwrap();
    assert_eq!(
        r.stdout, "a b|$HOME|*|",
        "argv words are not expanded by a shell"
    );
    let r = c.exec(&id, &argv(&["no-such-binary"])).await.unwrap();
    assert_eq!(r.exit_code, 127);
    let r = c
        .sh(
            &id,
            "echo out; echo err >&2; exit_code=3; (exit $exit_code)",
        )
        .await
        .unwrap();
    assert_eq!(
        (r.stdout.as_str(), r.stderr.as_str(), r.exit_code),
        ("out\n", "err\n", 3)
    );
}

#[tokio::test]
async fn stdin_is_empty_by_default_and_can_be_given() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("stdin-{}", unique());
    let started = Instant::now();
    let mut req = sh("cat; echo end");
    req.timeout_ms = Some(20_000);
    let r = c.exec(&id, &req).await.unwrap();
    assert_eq!(r.stdout, "end\n");
    assert!(!r.timed_out);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "cat must not wait for input"
    );
    let mut req = sh("wc -c");
    req.stdin = Some("hello".into());
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout.trim(), "5");
    let mut req = sh("od -An -tx1 | tr -d ' \\n'");
    req.stdin_base64 = Some("AP8Q".into()); // 00 ff 10
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout, "00ff10");
}

#[tokio::test]
async fn per_call_env_and_cwd_do_not_leak_and_precedence_holds() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("envcwd-{}", unique());
    let create =
        serde_json::from_value(serde_json::json!({"env": {"LEVEL": "sandbox", "ONLY_SB": "1"}}))
            .unwrap();
    c.put_sandbox(&id, &create).await.unwrap();
    let mut req = sh("pwd; echo $X; cd /; export Y=2");
    req.cwd = Some("/tmp".into());
    req.env = Some(BTreeMap::from([("X".to_string(), "1".to_string())]));
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout, "/tmp\n1\n");
    let r = c.sh(&id, "pwd; echo \"[$X][$Y]\"").await.unwrap();
    assert_eq!(r.stdout, "/workspace\n[][]\n");

    // image < sandbox/session < call
    let r = c
        .sh(&id, "echo $LEVEL $ONLY_SB; echo $PATH | grep -c /usr/bin")
        .await
        .unwrap();
    assert_eq!(r.stdout, "sandbox 1\n1\n");
    let s = serde_json::from_value(serde_json::json!({"id": "s2", "env": {"LEVEL": "session"}}))
        .unwrap();
    c.create_session(&id, &s).await.unwrap();
    let mut req = sh("echo $LEVEL $ONLY_SB");
    req.session = Some("s2".into());
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout, "session 1\n");
    req.env = Some(BTreeMap::from([("LEVEL".to_string(), "call".to_string())]));
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout, "call 1\n");
    req.env = None;
    assert_eq!(c.exec(&id, &req).await.unwrap().stdout, "session 1\n");
}

/// A client that gives up on a call (a timeout of its own, a dropped connection) while the
/// call runs: the call still runs to its end, and the session answers the next call with
/// its state, however many callers gave up before.
#[tokio::test]
async fn a_call_whose_client_went_away_runs_to_its_end_and_the_session_answers_next() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("gone-{}", unique());
    c.sh(&id, "export KEEP=yes").await.unwrap();
    let http = reqwest::Client::new();
    for i in 0..5 {
        let given_up = http
            .post(format!("{}/v1/sandboxes/{id}/exec", node.url))
            .bearer_auth(&node.key)
            .json(&sh(&format!("sleep 0.5; echo {i} >> /tmp/ends")))
            .timeout(Duration::from_millis(100 + 50 * i))
            .send()
            .await;
        assert!(
            given_up.is_err(),
            "call {i} answered before its client gave up"
        );
    }
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        c.sh(&id, "cat /tmp/ends; echo $KEEP"),
    )
    .await
    .expect("the session no longer answers after its callers gave up")
    .unwrap();
    assert_eq!(
        r.stdout, "0\n1\n2\n3\n4\nyes\n",
        "every given-up call ran to its end, in order"
    );
}

#[tokio::test]
async fn timeout_kills_the_tree_and_the_session_keeps_its_state() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("timeout-{}", unique());
    c.sh(&id, "export KEEP=yes; cd /tmp; greet() { echo hello; }")
        .await
        .unwrap();
    let mut req = sh("sleep 300 & echo $! > /tmp/bg.pid; echo started; sleep 300");
    req.timeout_ms = Some(1500);
    let started = Instant::now();
    let r = c.exec(&id, &req).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!((r.exit_code, r.timed_out, r.success), (124, true, false));
    assert_eq!(r.stdout, "started\n");
    let r = c
        .sh(
            &id,
            "kill -0 $(cat /tmp/bg.pid) 2>/dev/null && echo alive || echo gone",
        )
        .await
        .unwrap();
    assert_eq!(
        r.stdout, "gone\n",
        "the background child of the timed-out command is killed too"
    );
    let r = c.sh(&id, "echo $KEEP; pwd; greet").await.unwrap();
    assert_eq!(
        r.stdout, "yes\n/tmp\nhello\n",
        "the session's state survives the timeout"
    );
}

#[tokio::test]
async fn sse_events_arrive_as_they_happen() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("sse-{}", unique());
    c.sh(&id, "true").await.unwrap();
    let req = sh("echo one; sleep 1; echo two >&2; sleep 1; echo three");
    let mut events = c.exec_stream(&id, &req).await.unwrap();
    let t0 = Instant::now();
    let mut seen = Vec::new();
    while let Some(ev) = events.next().await {
        seen.push((t0.elapsed(), ev.unwrap()));
    }
    assert!(
        matches!(seen.first(), Some((_, ExecEvent::Start { .. }))),
        "{seen:?}"
    );
    let (t_one, _) = seen
        .iter()
        .find(|(_, e)| matches!(e, ExecEvent::Stdout(d) if d.data.as_deref() == Some("one\n")))
        .unwrap();
    assert!(seen
        .iter()
        .any(|(_, e)| matches!(e, ExecEvent::Stderr(d) if d.data.as_deref() == Some("two\n"))));
    let (t_end, last) = seen.last().unwrap();
    assert!(
        matches!(
            last,
            ExecEvent::Complete {
                exit_code: 0,
                timed_out: false,
                ..
            }
        ),
        "{last:?}"
    );
    assert_eq!(
        seen.iter()
            .filter(|(_, e)| matches!(e, ExecEvent::Complete { .. } | ExecEvent::Error { .. }))
            .count(),
        1
    );
    assert!(
        *t_end >= *t_one + Duration::from_millis(1500),
        "first output at {t_one:?}, end at {t_end:?}: output must stream"
    );
}

#[tokio::test]
async fn streamed_exec_reports_timeouts_and_terminated_sessions() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("sse2-{}", unique());
    let mut req = sh("echo x; sleep 60");
    req.timeout_ms = Some(800);
    let events = c
        .exec_stream(&id, &req)
        .await
        .unwrap()
        .collect_all()
        .await
        .unwrap();
    assert!(
        matches!(
            events.last(),
            Some(ExecEvent::Complete {
                exit_code: 124,
                timed_out: true,
                ..
            })
        ),
        "{events:?}"
    );
    let events = c
        .exec_stream(&id, &sh("exit 9"))
        .await
        .unwrap()
        .collect_all()
        .await
        .unwrap();
    match events.last() {
        Some(ExecEvent::Error { code, details, .. }) => {
            assert_eq!(*code, ErrorCode::SessionTerminated);
            assert_eq!(details.as_ref().unwrap()["exit_code"], 9);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn binary_and_large_output() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("bigout-{}", unique());
    let r = c
        .sh(
            &id,
            "head -c 3000000 /dev/zero | tr '\\0' a; printf '\\xff\\xfe' >&2",
        )
        .await
        .unwrap();
    assert_eq!(r.stdout.len(), 3_000_000);
    assert!(!r.truncated);
    assert_eq!(r.stderr_base64.as_deref(), Some("//4="));
    let events = c
        .exec_stream(&id, &sh("seq 1 20000"))
        .await
        .unwrap()
        .collect_all()
        .await
        .unwrap();
    let out: Vec<u8> = events
        .iter()
        .filter_map(|e| {
            if let ExecEvent::Stdout(d) = e {
                Some(d.bytes())
            } else {
                None
            }
        })
        .flatten()
        .collect();
    let expected: String = (1..=20000).map(|i| format!("{i}\n")).collect();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}
