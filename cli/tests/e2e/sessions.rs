//! Sessions: persistent shells, isolation, serialization, env patches, termination.

use super::harness::{unique, Node};
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;
use warren_api::session::{CreateSessionRequest, PatchEnvRequest};
use warren_api::ErrorCode;

fn in_session(cmd: &str, session: &str) -> ExecRequest {
    ExecRequest {
        command: Some(cmd.into()),
        session: Some(session.into()),
        ..Default::default()
    }
}

#[tokio::test]
async fn shell_state_persists_within_a_session_and_not_across() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("sess-{}", unique());
    c.sh(
        &id,
        "cd /tmp; export A=1; B=local; f() { echo fn-$A; }; alias hi='echo alias-hi'",
    )
    .await
    .unwrap();
    let r = c.sh(&id, "pwd; echo $A $B; f; hi").await.unwrap();
    assert_eq!(
        r.stdout, "/tmp\n1 local\nfn-1\nalias-hi\n",
        "stderr: {}",
        r.stderr
    );

    let info = c
        .create_session(
            &id,
            &CreateSessionRequest {
                id: Some("other".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (info.id.as_str(), info.cwd.as_str()),
        ("other", "/workspace")
    );
    let r = c
        .exec(
            &id,
            &in_session(
                "pwd; echo \"[$A][$B]\"; type f >/dev/null 2>&1 || echo no-f",
                "other",
            ),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "/workspace\n[][]\nno-f\n");
    // Creating it again is idempotent.
    let again = c
        .create_session(
            &id,
            &CreateSessionRequest {
                id: Some("other".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(again.id, "other");
}

#[tokio::test]
async fn calls_on_one_session_are_serialized_and_sessions_run_in_parallel() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("par-{}", unique());
    c.sh(&id, "true").await.unwrap();
    let (s1, s2) = (in_session("sleep 1", "p1"), in_session("sleep 1", "p2"));
    let t = Instant::now();
    let (a, b) = tokio::join!(c.exec(&id, &s1), c.exec(&id, &s2));
    a.unwrap();
    b.unwrap();
    let parallel = t.elapsed();
    let t = Instant::now();
    let (a, b) = tokio::join!(c.exec(&id, &s1), c.exec(&id, &s1));
    a.unwrap();
    b.unwrap();
    let serial = t.elapsed();
    assert!(
        serial >= Duration::from_millis(2000),
        "one session runs one call at a time: {serial:?}"
    );
    assert!(
        parallel < Duration::from_millis(1900),
        "two sessions run at once: {parallel:?}"
    );
}

#[tokio::test]
async fn exiting_shell_is_reported_and_the_next_call_gets_a_fresh_one() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("exit-{}", unique());
    c.sh(&id, "export Z=1; cd /tmp").await.unwrap();
    let err = c.sh(&id, "echo bye; exit 42").await.unwrap_err();
    match err {
        warren_client::Error::Api { status, error } => {
            assert_eq!((status, error.code), (410, ErrorCode::SessionTerminated));
            let d = error.details.unwrap();
            assert_eq!(d["exit_code"], 42);
            assert_eq!(d["stdout"], "bye\n");
        }
        other => panic!("{other}"),
    }
    let r = c.sh(&id, "echo \"[$Z]\"; pwd").await.unwrap();
    assert_eq!(r.stdout, "[]\n/workspace\n");
}

#[tokio::test]
async fn patch_env_sets_and_unsets_and_reaches_later_sessions() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("penv-{}", unique());
    c.sh(&id, "true").await.unwrap();
    let set: PatchEnvRequest =
        serde_json::from_value(serde_json::json!({"env": {"P": "v1", "Q": "q"}})).unwrap();
    let r = c.patch_env(&id, &set).await.unwrap();
    assert_eq!(r.sessions, vec!["default".to_string()]);
    assert_eq!(c.sh(&id, "echo $P$Q").await.unwrap().stdout, "v1q\n");
    let unset: PatchEnvRequest =
        serde_json::from_value(serde_json::json!({"env": {"Q": null}})).unwrap();
    c.patch_env(&id, &unset).await.unwrap();
    assert_eq!(c.sh(&id, "echo \"$P[$Q]\"").await.unwrap().stdout, "v1[]\n");
    let r = c
        .exec(&id, &in_session("echo \"$P[$Q]\"", "later"))
        .await
        .unwrap();
    assert_eq!(
        r.stdout, "v1[]\n",
        "sessions created later start with the patched env"
    );
}

#[tokio::test]
async fn deleting_a_session_kills_its_processes() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("dsess-{}", unique());
    c.exec(
        &id,
        &in_session("sleep 300 & echo $! > /tmp/s.pid", "doomed"),
    )
    .await
    .unwrap();
    c.delete_session(&id, "doomed").await.unwrap();
    c.delete_session(&id, "doomed").await.unwrap();
    let r = c
        .sh(
            &id,
            "kill -0 $(cat /tmp/s.pid) 2>/dev/null && echo alive || echo gone",
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "gone\n");
}
