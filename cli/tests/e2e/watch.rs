//! File watches: create, modify, delete, globs, recursion into new directories, and release.

use super::harness::{api_err, unique, Node};
use futures_util::StreamExt;
use std::time::Duration;
use warren_api::watch::{FsEventKind, WatchEvent, WatchQuery};
use warren_api::ErrorCode;
use warren_client::EventStream;

/// Collects events until `done` says so (or the limit passes).
async fn collect(
    s: &mut EventStream<WatchEvent>,
    limit: Duration,
    done: impl Fn(&[(FsEventKind, String)]) -> bool,
) -> Vec<(FsEventKind, String)> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + limit;
    while !done(&seen) {
        match tokio::time::timeout_at(deadline, s.next()).await {
            Ok(Some(Ok(WatchEvent::Event { event, path, .. }))) => seen.push((event, path)),
            Ok(Some(Ok(other))) => panic!("unexpected {other:?}"),
            Ok(Some(Err(e))) => panic!("stream failed: {e}"),
            Ok(None) | Err(_) => break,
        }
    }
    seen
}

fn has(seen: &[(FsEventKind, String)], kind: FsEventKind, path: &str) -> bool {
    seen.iter().any(|(k, p)| *k == kind && p == path)
}

#[tokio::test]
async fn watch_sees_create_modify_delete_and_honours_include() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("watch-{}", unique());
    c.sh(&id, "mkdir -p /workspace/w/.git").await.unwrap();
    let q = WatchQuery {
        path: "/workspace/w".into(),
        recursive: true,
        include: vec!["*.ts".into()],
        exclude: vec![".git".into()],
    };
    let mut s = c.watch(&id, &q).await.unwrap();
    c.sh(
        &id,
        "cd /workspace/w && echo a > a.ts && echo b > b.js && echo more >> a.ts \
         && touch .git/x.ts && mkdir -p sub/deep && echo c > sub/deep/c.ts && rm a.ts",
    )
    .await
    .unwrap();
    let seen = collect(&mut s, Duration::from_secs(10), |seen| {
        has(seen, FsEventKind::Delete, "/workspace/w/a.ts")
            && has(seen, FsEventKind::Create, "/workspace/w/sub/deep/c.ts")
    })
    .await;
    assert!(
        has(&seen, FsEventKind::Create, "/workspace/w/a.ts"),
        "{seen:?}"
    );
    assert!(
        has(&seen, FsEventKind::Modify, "/workspace/w/a.ts"),
        "{seen:?}"
    );
    assert!(
        has(&seen, FsEventKind::Delete, "/workspace/w/a.ts"),
        "{seen:?}"
    );
    assert!(
        has(&seen, FsEventKind::Create, "/workspace/w/sub/deep/c.ts"),
        "a file in a directory made after the watch started: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|(_, p)| p.ends_with(".ts") && !p.contains(".git")),
        "include and exclude: {seen:?}"
    );
    // The last event for a.ts is its deletion: coalescing never loses the final state.
    let last_a = seen.iter().rev().find(|(_, p)| p == "/workspace/w/a.ts");
    assert_eq!(last_a.map(|e| e.0), Some(FsEventKind::Delete));
}

#[tokio::test]
async fn watch_bursts_coalesce_and_closing_frees_the_watch() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("watch2-{}", unique());
    c.sh(&id, "mkdir -p /workspace/b").await.unwrap();
    let q = WatchQuery {
        path: "/workspace/b".into(),
        recursive: false,
        ..Default::default()
    };
    let mut s = c.watch(&id, &q).await.unwrap();
    c.sh(
        &id,
        "for i in $(seq 1 200); do echo $i >> /workspace/b/log; done; echo end > /workspace/b/done",
    )
    .await
    .unwrap();
    let seen = collect(&mut s, Duration::from_secs(10), |seen| {
        has(seen, FsEventKind::Create, "/workspace/b/done")
    })
    .await;
    let modifies = seen
        .iter()
        .filter(|(k, p)| *k == FsEventKind::Modify && p == "/workspace/b/log")
        .count();
    assert!(modifies >= 1, "{seen:?}");
    assert!(
        modifies < 200,
        "200 appends coalesce: {modifies} modify events"
    );
    drop(s);
    // The guest drops the inotify instance with the stream.
    let mut freed = false;
    for _ in 0..50 {
        let r = c
            .sh(&id, "ls -l /proc/1/fd | grep -c inotify || true")
            .await
            .unwrap();
        if r.stdout.trim() == "0" {
            freed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(freed, "the watch is released when its stream closes");
}

#[tokio::test]
async fn watch_of_a_missing_path_is_404_and_bad_globs_are_400() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("watch3-{}", unique());
    let missing = WatchQuery {
        path: "/nope/not/here".into(),
        recursive: true,
        ..Default::default()
    };
    let e = c.watch(&id, &missing).await.unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::FileNotFound);
    let bad = WatchQuery {
        path: "/workspace".into(),
        recursive: true,
        include: vec!["a[".into()],
        ..Default::default()
    };
    let e = c.watch(&id, &bad).await.unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::InvalidArgument);
}
