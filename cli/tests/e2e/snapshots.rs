//! Snapshots, restore, fork, sleep and wake against real containers and a real
//! local-directory object store.

use super::harness::{all_containers, api_err, create, fork, running_containers, sh, unique, Node};
use std::time::{Duration, Instant};
use warren_api::sandbox::SandboxState;
use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest};
use warren_api::ErrorCode;
use warren_client::Client;

async fn state(c: &Client, id: &str) -> SandboxState {
    c.get_sandbox(id).await.unwrap().state
}

async fn wait_state(c: &Client, id: &str, want: SandboxState, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if state(c, id).await == want {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Stored chunk objects in a node's object store.
fn chunk_files(objects: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(objects.join("chunks"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            out.push(f.path());
        }
    }
    out
}

const WRITE_FILES: &str = "mkdir -p /workspace/app && echo hello > /workspace/app/a.txt \
    && head -c 3000000 /dev/urandom > /workspace/app/blob && sha256sum /workspace/app/blob \
    && ln -s a.txt /workspace/app/link && chmod 700 /workspace/app && echo root > /root/note \
    && rm /etc/debian_version && rm -rf /usr/share/doc && mkdir /usr/share/doc \
    && echo mine > /usr/share/doc/only && ln /workspace/app/a.txt /workspace/app/hard \
    && mkfifo -m 640 /workspace/app/pipe \
    && python3 -c \"import os; os.setxattr('/workspace/app/a.txt', 'user.tag', b'kept')\"";

const CHECK_FILES: &str = "cat /workspace/app/a.txt /root/note && readlink /workspace/app/link \
    && stat -c %a /workspace/app && sha256sum /workspace/app/blob \
    && stat -c '%h %F %a' /workspace/app/hard /workspace/app/pipe \
    && (test /workspace/app/a.txt -ef /workspace/app/hard && echo one inode) \
    && python3 -c \"import os; print(os.getxattr('/workspace/app/a.txt', 'user.tag'))\" \
    && (test -e /etc/debian_version && echo debian_version back || echo debian_version gone) \
    && ls /usr/share/doc";

#[tokio::test]
async fn sleep_then_any_call_wakes_with_the_same_files() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("sleep-{}", unique());
    c.put_sandbox(&id, &create(serde_json::json!({})))
        .await
        .unwrap();
    assert!(sh(c, &id, "test -e /etc/debian_version && echo yes")
        .await
        .contains("yes"));
    let sum = sh(c, &id, WRITE_FILES).await;
    let before = sh(c, &id, CHECK_FILES).await;
    assert!(before.contains(sum.split_whitespace().next().unwrap()));
    assert!(before.contains("debian_version gone"));
    for kept in ["2 regular file 644", "1 fifo 640", "one inode", "b'kept'"] {
        assert!(before.contains(kept), "{kept}: {before}");
    }
    // A directory removed and made again holds only what was put in it.
    assert!(before.ends_with("debian_version gone\nonly\n"), "{before}");

    let sb = c.sleep(&id).await.unwrap();
    assert_eq!(sb.state, SandboxState::Sleeping);
    assert!(
        node.containers().iter().all(|n| !n.ends_with(&id)),
        "its container is gone"
    );
    // GET neither creates nor wakes.
    assert_eq!(state(c, &id).await, SandboxState::Sleeping);
    assert_eq!(
        c.sleep(&id).await.unwrap().state,
        SandboxState::Sleeping,
        "idempotent"
    );
    let listed = c.list_snapshots(Some(&id)).await.unwrap().snapshots;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].origin, "sleep");

    // Any call wakes it, with its files as they were: deletions (a whiteout, a directory
    // replaced) and files written into the new container while it started.
    let filled_before = step_count(&node, "start_and_apply").await;
    assert_eq!(sh(c, &id, CHECK_FILES).await, before);
    assert_eq!(state(c, &id).await, SandboxState::Running);
    assert_eq!(
        step_count(&node, "start_and_apply").await - filled_before,
        1,
        "the files went in while the container started"
    );

    // A second sleep replaces the first sleep snapshot; a restart keeps it asleep.
    sh(c, &id, "echo more >> /workspace/app/a.txt").await;
    c.sleep(&id).await.unwrap();
    let mut node = node;
    node.restart().await;
    let c = &node.client;
    assert_eq!(state(c, &id).await, SandboxState::Sleeping);
    assert!(sh(c, &id, "cat /workspace/app/a.txt")
        .await
        .contains("hello\nmore"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.list_snapshots(Some(&id)).await.unwrap().snapshots.len() != 1 {
        assert!(
            Instant::now() < deadline,
            "the older sleep snapshot was not retired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Deleting the sandbox deletes its sleep snapshot and frees its chunks.
    c.sleep(&id).await.unwrap();
    c.delete_sandbox(&id).await.unwrap();
    let objects = node.data_dir.join("objects");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !(c
        .list_snapshots(Some(&id))
        .await
        .unwrap()
        .snapshots
        .is_empty()
        && chunk_files(&objects).is_empty())
    {
        assert!(
            Instant::now() < deadline,
            "sleep snapshot or chunks left behind: {:?} {:?}",
            c.list_snapshots(Some(&id)).await.unwrap().snapshots,
            chunk_files(&objects)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn idle_sandboxes_sleep_unless_kept_alive_or_streaming() {
    let node = Node::start().await;
    let c = &node.client;
    let idle = format!("idle-{}", unique());
    let kept = format!("kept-{}", unique());
    let streaming = format!("strm-{}", unique());
    for (id, extra) in [
        (&idle, serde_json::json!({})),
        (&kept, serde_json::json!({"keep_alive": true})),
        (&streaming, serde_json::json!({})),
    ] {
        let mut body = serde_json::json!({"sleep_after": "2s"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c.put_sandbox(id, &create(body)).await.unwrap();
    }
    sh(c, &idle, "echo kept > /workspace/f").await;
    // An open stream counts as activity.
    let p = c
        .start_process(
            &streaming,
            &serde_json::from_value(serde_json::json!({"command": "sleep 30"})).unwrap(),
        )
        .await
        .unwrap();
    let stream = c.follow_logs(&streaming, &p.id, None).await.unwrap();
    assert!(wait_state(c, &idle, SandboxState::Sleeping, Duration::from_secs(20)).await);
    assert_eq!(state(c, &kept).await, SandboxState::Running);
    assert_eq!(state(c, &streaming).await, SandboxState::Running);
    drop(stream);
    assert!(
        wait_state(
            c,
            &streaming,
            SandboxState::Sleeping,
            Duration::from_secs(20)
        )
        .await
    );
    assert_eq!(sh(c, &idle, "cat /workspace/f").await, "kept\n");
    assert_eq!(state(c, &kept).await, SandboxState::Running);
}

/// A client that writes just as the idle sleeper decides to put the sandbox to sleep: every
/// write it was told succeeded is there when the sandbox wakes. The waits around the
/// sleep-after mark put some writes into the sleep's capture, where a call that found the
/// sandbox running used to go straight to the guest and land after the files were saved.
#[tokio::test]
async fn writes_racing_the_idle_sleeper_are_never_lost() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("race-{}", unique());
    c.put_sandbox(&id, &create(serde_json::json!({"sleep_after": "1s"})))
        .await
        .unwrap();
    let mut acknowledged = Vec::new();
    let mut slept = 0;
    let mut boots = std::collections::HashSet::new();
    for i in 0..16u32 {
        // Around the sleeper's decision (idle after 1 s, checked every second).
        tokio::time::sleep(Duration::from_millis(1000 + u64::from(i % 5) * 200)).await;
        if state(c, &id).await == SandboxState::Sleeping {
            slept += 1;
        }
        let write = if i % 2 == 0 {
            // Also the start time of the container's first process: a new one after a wake.
            let r = c
                .sh(
                    &id,
                    &format!("echo {i} > /workspace/w{i} && cut -d' ' -f22 /proc/1/stat"),
                )
                .await;
            if let Ok(r) = &r {
                boots.insert(r.stdout.trim().to_string());
            }
            r.is_ok_and(|r| r.exit_code == 0)
        } else {
            c.write_file(&id, &format!("/workspace/w{i}"), format!("{i}\n"), None)
                .await
                .is_ok()
        };
        if write {
            acknowledged.push(i);
        }
    }
    // Seen asleep, or woken between two writes (a sleep that a write caught half-way is
    // seen only that way on a loaded machine).
    let slept = slept.max(boots.len().saturating_sub(1));
    assert!(slept > 0, "the sandbox never slept between the writes");
    c.sleep(&id).await.unwrap();
    let listing = sh(c, &id, "cat /workspace/w* 2>/dev/null; true").await;
    let present: Vec<u32> = listing.lines().filter_map(|l| l.parse().ok()).collect();
    let lost: Vec<u32> = acknowledged
        .iter()
        .copied()
        .filter(|i| !present.contains(i))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged writes lost: {lost:?} of {acknowledged:?} (slept {slept} times)"
    );
    assert!(
        acknowledged.len() >= 12,
        "too few writes answered: {acknowledged:?}"
    );
}

#[tokio::test]
async fn persist_none_wakes_fresh_and_persist_dirs_keeps_only_those() {
    let node = Node::start().await;
    let c = &node.client;
    let none = format!("pnone-{}", unique());
    let dirs = format!("pdirs-{}", unique());
    c.put_sandbox(&none, &create(serde_json::json!({"persist": "none"})))
        .await
        .unwrap();
    c.put_sandbox(
        &dirs,
        &create(serde_json::json!({"persist": {"dirs": ["/workspace/"]}})),
    )
    .await
    .unwrap();
    for id in [&none, &dirs] {
        sh(
            c,
            id,
            "mkdir -p /workspace && echo w > /workspace/w && echo r > /root/r",
        )
        .await;
        c.sleep(id).await.unwrap();
    }
    assert!(c
        .list_snapshots(Some(&none))
        .await
        .unwrap()
        .snapshots
        .is_empty());
    assert_eq!(
        sh(c, &none, "ls /workspace/w /root/r 2>/dev/null; true").await,
        "",
        "persist none wakes fresh"
    );
    assert_eq!(
        sh(
            c,
            &dirs,
            "cat /workspace/w; test -e /root/r && echo r-kept || echo r-gone"
        )
        .await,
        "w\nr-gone\n"
    );
}

#[tokio::test]
async fn restore_replaces_files_and_fork_makes_independent_copies() {
    let mut node = Node::start().await;
    let c = &node.client;
    let id = format!("rst-{}", unique());
    sh(c, &id, "mkdir -p /workspace && echo 1 > /workspace/a").await;
    let snap = c
        .create_snapshot(
            &id,
            &CreateSnapshotRequest {
                name: Some("before".into()),
                dirs: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (snap.sandbox.as_str(), snap.origin.as_str()),
        (id.as_str(), "user")
    );
    assert_eq!(snap.name.as_deref(), Some("before"));
    assert_eq!(c.get_snapshot(&snap.id).await.unwrap().id, snap.id);
    sh(
        c,
        &id,
        "echo 2 > /workspace/a && echo new > /workspace/b && rm -rf /usr/share/doc",
    )
    .await;
    let sb = c.restore(&id, &snap.id).await.unwrap();
    assert_eq!(sb.state, SandboxState::Running);
    assert_eq!(
        sh(
            c,
            &id,
            "cat /workspace/a; ls /workspace; test -d /usr/share/doc && echo doc"
        )
        .await,
        "1\na\ndoc\n"
    );
    // The replaced container was set aside and is removed once the new one started.
    let deadline = Instant::now() + Duration::from_secs(30);
    while all_containers(&id).len() != 1 {
        assert!(
            Instant::now() < deadline,
            "the replaced container is still there: {:?}",
            all_containers(&id)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Fork: one snapshot, four sandboxes, each its own copy. On this one node every fork
    // copies the frozen source's overlay files: an image file deleted (a whiteout), a hard
    // link, a symlink and a mode all come along.
    sh(
        c,
        &id,
        "rm -rf /usr/share/doc && ln /workspace/a /workspace/a-link && ln -s /etc/hostname /workspace/host && chmod 4750 /workspace/a",
    )
    .await;
    let copies_before = step_count(&node, "fork_copy").await;
    let out = c
        .fork(
            &id,
            &ForkRequest {
                count: 4,
                ids: None,
            },
        )
        .await
        .unwrap();
    let ids: Vec<String> = out.sandboxes.iter().map(|s| s.id.clone()).collect();
    assert_eq!(
        ids,
        (1..=4)
            .map(|i| format!("{id}-fork-{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(out.snapshot.origin, "fork");
    // (Mode before the writes below: root in a user namespace is not privileged over a
    // set-uid file, and a write clears the bit, as the kernel does for any such writer.)
    for f in &ids {
        assert_eq!(
            sh(
                c,
                f,
                "stat -c '%h %a' /workspace/a; readlink /workspace/host; cat /workspace/host; test -e /usr/share/doc || echo no-doc"
            )
            .await,
            format!("2 4750\n/etc/hostname\n{f}\nno-doc\n")
        );
    }
    for (i, f) in ids.iter().enumerate() {
        sh(c, f, &format!("echo {i} >> /workspace/a")).await;
    }
    for (i, f) in ids.iter().enumerate() {
        assert_eq!(sh(c, f, "cat /workspace/a").await, format!("1\n{i}\n"));
    }
    assert_eq!(step_count(&node, "fork_copy").await - copies_before, 4);
    // The source runs again, unchanged.
    assert_eq!(sh(c, &id, "cat /workspace/a").await, "1\n");
    // A copied fork is a sandbox like any other: its files survive sleep and wake.
    c.sleep(&ids[0]).await.unwrap();
    assert_eq!(
        sh(
            c,
            &ids[0],
            "cat /workspace/a-link; test -e /usr/share/doc || echo no-doc"
        )
        .await,
        "1\n0\nno-doc\n"
    );
    // A new sandbox from the user snapshot; the same PUT again is idempotent, another
    // snapshot for an existing sandbox is a conflict.
    let from = format!("from-{}", unique());
    let req = create(serde_json::json!({"from_snapshot": snap.id}));
    assert!(c.put_sandbox(&from, &req).await.unwrap().1);
    assert!(!c.put_sandbox(&from, &req).await.unwrap().1);
    assert_eq!(sh(c, &from, "cat /workspace/a").await, "1\n");
    let e = c
        .put_sandbox(
            &from,
            &create(serde_json::json!({"from_snapshot": out.snapshot.id})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::Conflict);
    // Forking onto an existing id fails as a whole, before anything is done: no partial
    // fork is left, and no fork snapshot is written.
    let snapshots_before = c.list_snapshots(Some(&id)).await.unwrap().snapshots.len();
    let fresh = format!("fresh-{}", unique());
    let e = c
        .fork(
            &id,
            &ForkRequest {
                count: 2,
                ids: Some(vec![fresh.clone(), from.clone()]),
            },
        )
        .await
        .unwrap_err();
    let warren_client::Error::Api { status, error } = e else {
        panic!("not an API error: {e}");
    };
    assert_eq!((status, error.code), (409, ErrorCode::Conflict));
    assert!(error.message.contains(&from), "{}", error.message);
    assert_eq!(
        api_err(c.get_sandbox(&fresh).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound
    );
    assert_eq!(
        c.list_snapshots(Some(&id)).await.unwrap().snapshots.len(),
        snapshots_before
    );
    assert_eq!(sh(c, &id, "cat /workspace/a").await, "1\n");
    // A node that stops while a fork holds the source frozen thaws it when it starts again.
    let source = running_containers(&id);
    assert_eq!(source.len(), 1);
    let paused = std::process::Command::new("docker")
        .args(["pause", &source[0]])
        .status()
        .unwrap();
    assert!(paused.success());
    node.restart().await;
    let c = &node.client;
    assert_eq!(sh(c, &id, "cat /workspace/a").await, "1\n");
    // Named snapshots outlive their sandbox.
    c.delete_sandbox(&id).await.unwrap();
    assert_eq!(c.get_snapshot(&snap.id).await.unwrap().id, snap.id);
    c.delete_snapshot(&snap.id).await.unwrap();
    assert_eq!(
        api_err(c.get_snapshot(&snap.id).await.unwrap_err()).1,
        ErrorCode::SnapshotNotFound
    );
}

#[tokio::test]
async fn snapshot_errors_are_clear_and_change_nothing() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("serr-{}", unique());
    sh(c, &id, "mkdir -p /workspace && head -c 2000000 /dev/urandom > /workspace/r && echo v1 > /workspace/v").await;
    let snap = c
        .create_snapshot(&id, &CreateSnapshotRequest::default())
        .await
        .unwrap();

    let (status, code, _) = api_err(c.restore(&id, "snap-missing").await.unwrap_err());
    assert_eq!((status, code), (404, ErrorCode::SnapshotNotFound));
    let (status, _, _) = api_err(c.restore(&id, "../x").await.unwrap_err());
    assert_eq!(status, 400);
    let e = c
        .fork(
            &id,
            &ForkRequest {
                count: 0,
                ids: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).0, 400);
    let e = c
        .create_snapshot(
            &id,
            &CreateSnapshotRequest {
                name: None,
                dirs: Some(vec!["rel".into()]),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).0, 400);
    let ghost = format!("ghost-{}", unique());
    let e = c
        .put_sandbox(
            &ghost,
            &create(serde_json::json!({"from_snapshot": "snap-nope"})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::SnapshotNotFound);
    assert_eq!(
        api_err(c.get_sandbox(&ghost).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound
    );

    // A second node sharing the object store, with an empty chunk cache, sees a damaged chunk
    // before it changes anything.
    let objects = node.data_dir.join("objects");
    let other = Node::start_with(
        "127.0.0.1:0",
        &["--object-store", objects.to_str().unwrap()],
    )
    .await;
    let oc = &other.client;
    let victim = chunk_files(&objects)
        .into_iter()
        .next()
        .expect("chunks stored");
    let mut bytes = std::fs::read(&victim).unwrap();
    let sound = bytes.clone();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, &bytes).unwrap();
    let fresh = format!("dmg-{}", unique());
    let (status, _, details) = api_err(
        oc.put_sandbox(
            &fresh,
            &create(serde_json::json!({"from_snapshot": snap.id})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(status, 500);
    assert_eq!(details.unwrap()["damaged"], true);
    assert_eq!(
        api_err(oc.get_sandbox(&fresh).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound
    );
    assert!(other.containers().is_empty(), "no half-restored container");
    let target = format!("tgt-{}", unique());
    sh(oc, &target, "echo mine > /root/mine").await;
    assert_eq!(
        api_err(oc.restore(&target, &snap.id).await.unwrap_err()).0,
        500
    );
    assert_eq!(
        sh(oc, &target, "cat /root/mine").await,
        "mine\n",
        "untouched"
    );
    // A missing chunk likewise.
    std::fs::remove_file(&victim).unwrap();
    let e = oc.restore(&target, &snap.id).await.unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    // The node that wrote it still restores from its verified local cache.
    sh(c, &id, "echo v2 > /workspace/v").await;
    c.restore(&id, &snap.id).await.unwrap();
    assert_eq!(sh(c, &id, "cat /workspace/v").await, "v1\n");

    // Damage on that node's own disk is found while the files go into the new container
    // (its start under way), and such a chunk is fetched from the store again. Here one of
    // them is missing from the store too: the sandbox is not created and its container is
    // removed.
    for f in std::fs::read_dir(node.data_dir.join("chunk-cache"))
        .unwrap()
        .flatten()
    {
        let mut bytes = std::fs::read(f.path()).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xff;
        std::fs::write(f.path(), &bytes).unwrap();
    }
    let broken = format!("brk-{}", unique());
    let from_snap = create(serde_json::json!({"from_snapshot": snap.id}));
    let e = c.put_sandbox(&broken, &from_snap).await.unwrap_err();
    assert!(e.to_string().contains("cannot unpack the snapshot"), "{e}");
    assert!(e.to_string().contains("missing"), "{e}");
    assert_eq!(api_err(e).0, 500);
    assert_eq!(
        api_err(c.get_sandbox(&broken).await.unwrap_err()).1,
        ErrorCode::SandboxNotFound
    );
    assert!(
        node.containers().iter().all(|n| !n.ends_with(&broken)),
        "no half-restored container"
    );
    // With the store whole again, the damaged cached chunks are fetched again in one go.
    std::fs::write(&victim, &sound).unwrap();
    c.put_sandbox(&broken, &from_snap).await.unwrap();
    assert_eq!(sh(c, &broken, "cat /workspace/v").await, "v1\n");
}

#[tokio::test]
async fn snapshot_and_restore_stream_their_progress() {
    use warren_client::TransferProgress;
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("prog-{}", unique());
    let r = c
        .sh(
            &id,
            "head -c 60000000 /dev/urandom > /workspace/big && echo ok",
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "ok\n");
    let mut seen: Vec<TransferProgress> = Vec::new();
    let snap: warren_api::snapshot::Snapshot = c
        .transfer(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(&serde_json::json!({})),
            |p| seen.push(p),
        )
        .await
        .unwrap();
    assert!(snap.size_bytes >= 60_000_000);
    assert!(
        seen.iter().any(|p| p.phase == "archive" && p.bytes > 0),
        "{seen:?}"
    );
    let mut seen: Vec<TransferProgress> = Vec::new();
    let sb: warren_api::sandbox::Sandbox = c
        .transfer(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/restore"),
            Some(&serde_json::json!({ "snapshot": snap.id })),
            |p| seen.push(p),
        )
        .await
        .unwrap();
    assert_eq!(sb.id, id);
    let unpack: Vec<_> = seen.iter().filter(|p| p.phase == "unpack").collect();
    assert!(!unpack.is_empty(), "{seen:?}");
    assert!(unpack
        .iter()
        .all(|p| p.total == Some(snap.size_bytes) && p.bytes <= snap.size_bytes));
    // Restoring into an id that does not exist yet makes it, from the snapshot.
    let fresh = format!("prog2-{}", unique());
    c.restore(&fresh, &snap.id).await.unwrap();
    let r = c.sh(&fresh, "stat -c %s /workspace/big").await.unwrap();
    assert_eq!(r.stdout, "60000000\n");
    // Errors arrive as the stream's last event, with the API's code.
    let e = c
        .transfer::<_, warren_api::sandbox::Sandbox>(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/restore"),
            Some(&serde_json::json!({ "snapshot": "snap-000000000000deadbeef" })),
            |_| {},
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::SnapshotNotFound);
}

/// A fork holds its source frozen only while the snapshot is written and the new sandboxes
/// copy its files: with a small source that is over long before four new containers have
/// started, and a call to the source made during the freeze is answered well before the
/// fork answers (before, the source stayed frozen until every new sandbox had started).
#[tokio::test]
async fn forks_keep_their_sources_settings() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("set-{}", unique());
    let req = create(serde_json::json!({
        "instance_type": "lite",
        "resources": {"memory_mb": 384},
        "env": {"FORKED_VAR": "kept"},
        "labels": {"team": "blue"},
        "sleep_after": "5m",
        "persist": {"dirs": ["/workspace"]},
    }));
    let (source, _) = c.put_sandbox(&id, &req).await.unwrap();
    sh(c, &id, "mkdir -p /workspace && echo f > /workspace/f").await;
    let out = fork(c, &id, 2).await;
    assert_eq!(out.sandboxes.len(), 2);
    for f in &out.sandboxes {
        let got = c.get_sandbox(&f.id).await.unwrap();
        assert_eq!(got.instance_type.as_deref(), Some("lite"), "{}", f.id);
        assert_eq!(got.resources, source.resources, "{}", f.id);
        assert_eq!(got.resources.memory_mb, 384);
        assert_eq!(got.labels, source.labels, "{}", f.id);
        assert_eq!(got.sleep_after_s, 300, "{}", f.id);
        assert_eq!(got.keep_alive, source.keep_alive, "{}", f.id);
        assert_eq!(
            serde_json::to_value(&got.persist).unwrap(),
            serde_json::to_value(&source.persist).unwrap()
        );
        assert_eq!(
            sh(c, &f.id, "echo $FORKED_VAR; cat /workspace/f").await,
            "kept\nf\n"
        );
    }
}

#[tokio::test]
async fn a_fork_thaws_its_source_before_its_sandboxes_have_started() {
    // Its sandboxes start cold: taking warm containers leaves no start to thaw before.
    let node = Node::start_with("127.0.0.1:0", &["--warm-containers", "0"]).await;
    let c = &node.client;
    let id = format!("thaw-{}", unique());
    sh(c, &id, "mkdir -p /workspace && echo src > /workspace/f").await;
    let freezer = FreezerState::of(container_pid(&id));
    assert!(!freezer.frozen());
    let copies_before = step_count(&node, "fork_copy").await;
    let targets: Vec<String> = (0..4).map(|i| format!("{id}-f{i}")).collect();
    let forking = {
        let c = c.clone();
        let (id, ids) = (id.clone(), targets.clone());
        tokio::spawn(async move {
            let r = c
                .fork(
                    &id,
                    &ForkRequest {
                        count: 4,
                        ids: Some(ids),
                    },
                )
                .await;
            (r, Instant::now())
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !freezer.frozen() {
        assert!(Instant::now() < deadline, "the source was never frozen");
        assert!(
            !forking.is_finished(),
            "the fork ended before its source was seen frozen"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(sh(c, &id, "cat /workspace/f").await, "src\n");
    let answered = Instant::now();
    let (forked, fork_done) = forking.await.unwrap();
    assert_eq!(forked.unwrap().sandboxes.len(), 4);
    eprintln!(
        "the source answered {:?} before the fork",
        fork_done.saturating_duration_since(answered)
    );
    assert!(
        answered + Duration::from_millis(100) < fork_done,
        "the source answered only {:?} before the fork did",
        fork_done.saturating_duration_since(answered)
    );
    // Every new sandbox copied the source before it was thawed, and holds its files.
    assert_eq!(step_count(&node, "fork_copy").await - copies_before, 4);
    for t in &targets {
        assert_eq!(sh(c, t, "cat /workspace/f").await, "src\n");
    }
}

/// A fork whose sandboxes cannot be created (this node is full) fails as a whole, with the
/// create's error, and leaves its source running, not frozen.
#[tokio::test]
async fn a_failed_fork_leaves_its_source_running() {
    let node = Node::start_with("127.0.0.1:0", &["--max-sandboxes", "1"]).await;
    let c = &node.client;
    let id = format!("full-{}", unique());
    sh(c, &id, "mkdir -p /workspace && echo src > /workspace/f").await;
    let freezer = FreezerState::of(container_pid(&id));
    let targets = vec![format!("{id}-a"), format!("{id}-b")];
    let e = c
        .fork(
            &id,
            &ForkRequest {
                count: 2,
                ids: Some(targets.clone()),
            },
        )
        .await
        .unwrap_err();
    assert_eq!(api_err(e).1, ErrorCode::CapacityExhausted);
    for t in &targets {
        assert_eq!(
            api_err(c.get_sandbox(t).await.unwrap_err()).1,
            ErrorCode::SandboxNotFound
        );
    }
    assert!(!freezer.frozen(), "the source is left frozen");
    assert_eq!(sh(c, &id, "cat /workspace/f").await, "src\n");
}

/// Whether a container's processes are frozen, read from its freezer cgroup (v1
/// `freezer.state`, v2 `cgroup.events`): cheap enough to poll every millisecond.
struct FreezerState(std::path::PathBuf, bool);

impl FreezerState {
    fn of(pid: u32) -> Self {
        let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        for line in cgroups.lines() {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
            let (Some(controllers), Some(path)) = (controllers, path) else {
                continue;
            };
            if controllers.split(',').any(|c| c == "freezer") {
                let file = format!("/sys/fs/cgroup/freezer{path}/freezer.state");
                return FreezerState(file.into(), true);
            }
            if controllers.is_empty() {
                let file = format!("/sys/fs/cgroup{path}/cgroup.events");
                return FreezerState(file.into(), false);
            }
        }
        panic!("no freezer cgroup in /proc/{pid}/cgroup: {cgroups}");
    }

    fn frozen(&self) -> bool {
        let text = std::fs::read_to_string(&self.0).unwrap_or_default();
        if self.1 {
            text.trim() == "FROZEN" || text.trim() == "FREEZING"
        } else {
            text.lines().any(|l| l.trim() == "frozen 1")
        }
    }
}

/// The main process of a sandbox's container, on the host.
fn container_pid(sandbox: &str) -> u32 {
    let container = super::harness::running_containers(sandbox).remove(0);
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Pid}}", &container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[tokio::test]
async fn the_node_packs_inside_the_sandbox_root_and_the_guest_can_instead() {
    use futures_util::TryStreamExt;
    use std::io::Read;
    use warren_api::snapshot::PackRequest;
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("pack-{}", unique());
    c.put_sandbox(&id, &create(serde_json::json!({})))
        .await
        .unwrap();
    sh(
        c,
        &id,
        "mkdir -p /workspace/p && echo inside > /workspace/p/f && ln -s / /workspace/p/root",
    )
    .await;
    let pid = container_pid(&id);
    // A path through a symlink to `/` resolves inside the sandbox's root, not the host's:
    // the packed hostname is the sandbox's own.
    let paths = [
        "/workspace/p",
        "/workspace/p/f",
        "/workspace/p/root",
        "/workspace/p/root/etc/hostname",
    ];
    let request = serde_json::to_vec(&PackRequest {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        quiesce: false,
        hold: None,
    })
    .unwrap();
    let guest_bin = std::path::PathBuf::from(super::harness::guest_bin());
    let target = warren_node::runtime::enter::Target::open(pid, &guest_bin).unwrap();
    let stream = warren_node::runtime::enter::pack_in_container(&target, request)
        .await
        .unwrap();
    let bytes: Vec<bytes::Bytes> = stream.try_collect().await.unwrap();
    let tar_bytes = bytes.concat();
    let mut found = std::collections::BTreeMap::new();
    for e in tar::Archive::new(&tar_bytes[..]).entries().unwrap() {
        let mut e = e.unwrap();
        let name = e.path().unwrap().to_string_lossy().to_string();
        let link = e
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().to_string());
        let mut text = String::new();
        e.read_to_string(&mut text).unwrap();
        found.insert(name, (link, text));
    }
    assert_eq!(found["workspace/p/f"].1, "inside\n");
    assert_eq!(found["workspace/p/root"].0.as_deref(), Some("/"));
    assert_eq!(found["workspace/p/root/etc/hostname"].1.trim(), id);

    // The sandbox swaps its /.warren for one whose guest binary is its own program: the
    // node still runs the host's binary, so the program never runs outside the sandbox.
    sh(
        c,
        &id,
        "mv /.warren /.warren-old && mkdir -p /.warren/bin \
         && printf '#!/bin/sh\\ntouch /ran-as-host-root\\n' > /.warren/bin/warren-guest \
         && chmod +x /.warren/bin/warren-guest",
    )
    .await;
    let request = serde_json::to_vec(&PackRequest {
        paths: vec!["/workspace/p/f".into()],
        quiesce: false,
        hold: None,
    })
    .unwrap();
    let again = warren_node::runtime::enter::Target::open(pid, &guest_bin).unwrap();
    let bytes: Vec<bytes::Bytes> = warren_node::runtime::enter::pack_in_container(&again, request)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut names = Vec::new();
    for e in tar::Archive::new(&bytes.concat()[..]).entries().unwrap() {
        names.push(e.unwrap().path().unwrap().to_string_lossy().to_string());
    }
    assert_eq!(names, ["workspace/p/f"]);
    let out = sh(
        c,
        &id,
        "test -e /ran-as-host-root && echo ran || echo never",
    )
    .await;
    assert_eq!(out, "never\n");

    // No such process: nothing to enter.
    assert!(warren_node::runtime::enter::Target::open(u32::MAX - 1, &guest_bin).is_err());
    // A packer that fails (a request it cannot read) ends its stream with an error.
    let stream = warren_node::runtime::enter::pack_in_container(&target, b"{".to_vec())
        .await
        .unwrap();
    let r: Result<Vec<bytes::Bytes>, _> = stream.try_collect().await;
    assert!(
        r.is_err(),
        "a failed packer must not end like a whole archive"
    );

    // With --pack-in-guest the guest archives inside the sandbox: the same files come back.
    let (guest, id, before) = node_with_files("--pack-in-guest", "gpack").await;
    let g = &guest.client;
    let snap = g
        .create_snapshot(&id, &CreateSnapshotRequest::default())
        .await
        .unwrap();
    sh(g, &id, "rm -rf /workspace/app /root/note").await;
    g.restore(&id, &snap.id).await.unwrap();
    assert_eq!(sh(g, &id, CHECK_FILES).await, before);

    // With --restore-after-start the node writes the files once the container runs, in its
    // mount namespace (what it also does when it cannot see Docker's mount): the same files.
    let (after, id, before) = node_with_files("--restore-after-start", "after").await;
    let a = &after.client;
    a.sleep(&id).await.unwrap();
    assert_eq!(sh(a, &id, CHECK_FILES).await, before);
    assert_eq!(step_count(&after, "start_and_apply").await, 0);
    assert_eq!(step_count(&after, "apply").await, 1);
}

/// A node started with `flag`, and a sandbox on it (id `{prefix}-…`) holding `WRITE_FILES`'
/// files: the node, the id and what `CHECK_FILES` printed.
async fn node_with_files(flag: &str, prefix: &str) -> (Node, String, String) {
    let node = Node::start_with("127.0.0.1:0", &[flag]).await;
    let id = format!("{prefix}-{}", unique());
    node.client
        .put_sandbox(&id, &create(serde_json::json!({})))
        .await
        .unwrap();
    sh(&node.client, &id, WRITE_FILES).await;
    let before = sh(&node.client, &id, CHECK_FILES).await;
    (node, id, before)
}

/// How many times this node timed a snapshot step (`fork_copy`: forks that started from a
/// copy of their source's files; `start_and_apply`: snapshots written while the container
/// started).
async fn step_count(node: &Node, step: &str) -> u64 {
    node.metric(&format!(
        "warren_snapshot_step_seconds_count{{step=\"{step}\"}}"
    ))
    .await
}

/// A snapshot of a running sandbox holds its files as they were at one instant, not a file
/// read at the start of the archive beside one read a second later. The sandbox's code
/// counts up into two files, /workspace/a then /workspace/z (each replaced whole, by
/// rename), with a large file between them in the archive's order: an archive read while
/// the counter runs finds z far ahead of a; one of a frozen sandbox finds z equal to a, or
/// one behind (frozen between the two renames).
#[tokio::test]
async fn a_snapshot_of_a_running_sandbox_is_one_instant_of_its_files() {
    one_instant(Node::start().await).await;
}

/// The same when the guest packs (`--pack-in-guest`: the freezer would stop the guest too):
/// it holds the sandbox's processes from before the changes are listed until the archive is
/// read, and the sandbox goes on afterwards.
#[tokio::test]
async fn a_snapshot_packed_by_the_guest_is_one_instant_of_its_files_too() {
    one_instant(Node::start_with("127.0.0.1:0", &["--pack-in-guest"]).await).await;
}

async fn one_instant(node: Node) {
    let c = &node.client;
    let id = format!("instant-{}", unique());
    sh(
        c,
        &id,
        "mkdir -p /workspace && head -c 96000000 /dev/urandom > /workspace/m \
         && echo 0 > /workspace/a && echo 0 > /workspace/z",
    )
    .await;
    sh(
        c,
        &id,
        "nohup sh -c 'i=0; while true; do i=$((i+1)); echo $i > /workspace/a.t; mv /workspace/a.t /workspace/a; \
         echo $i > /workspace/z.t; mv /workspace/z.t /workspace/z; done' >/dev/null 2>&1 & \
         sleep 0.5; echo started",
    )
    .await;
    let counter = |s: String| -> (u64, u64) {
        let mut it = s.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        (it.next().unwrap(), it.next().unwrap())
    };
    let snap = c
        .create_snapshot(
            &id,
            &CreateSnapshotRequest {
                name: None,
                dirs: None,
            },
        )
        .await
        .unwrap();
    // The sandbox runs on after its snapshot: the counter moves.
    let (then, _) = counter(sh(c, &id, "cat /workspace/a /workspace/z").await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (now, _) = counter(sh(c, &id, "cat /workspace/a /workspace/z").await);
    assert!(
        now > then,
        "the sandbox stopped counting after its snapshot"
    );

    let copy = format!("instant-copy-{}", unique());
    c.put_sandbox(&copy, &create(serde_json::json!({})))
        .await
        .unwrap();
    c.restore(&copy, &snap.id).await.unwrap();
    let (a, z) = counter(sh(c, &copy, "cat /workspace/a /workspace/z").await);
    assert!(
        a > 0 && (z == a || z + 1 == a),
        "a torn snapshot: /workspace/a says {a}, /workspace/z says {z}"
    );
}
