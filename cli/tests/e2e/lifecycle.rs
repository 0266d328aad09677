//! Sandbox lifecycle: create, list, delete, limits, concurrency, node restart, isolation.

use super::harness::{create, unique, Node};
use warren_api::sandbox::SandboxState;
use warren_api::ErrorCode;

#[tokio::test]
async fn the_largest_instance_type_runs_on_a_small_machine() {
    let node = Node::start().await;
    let id = format!("big-{}", unique());
    let (sb, created) = node
        .client
        .put_sandbox(
            &id,
            &create(serde_json::json!({"instance_type": "standard-4"})),
        )
        .await
        .unwrap();
    assert!(created);
    // The record keeps what was asked; the limit is capped at what the machine has.
    assert_eq!(sb.resources.cpus, 4.0);
    let r = node.client.sh(&id, "nproc").await.unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);
}

#[tokio::test]
async fn put_get_list_delete() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("life-{}", unique());
    let req = create(
        serde_json::json!({"instance_type": "basic", "labels": {"team": "a"}, "sleep_after": "5m"}),
    );
    let (sb, created) = c.put_sandbox(&id, &req).await.unwrap();
    assert!(created);
    assert_eq!(
        (sb.state, sb.sleep_after_s, sb.node.as_str()),
        (SandboxState::Running, 300, node.node_id.as_str())
    );
    assert_eq!(sb.resources.memory_mb, 1024);
    let (_, created) = c.put_sandbox(&id, &req).await.unwrap();
    assert!(!created, "PUT again is idempotent");
    let other = format!("life2-{}", unique());
    c.put_sandbox(
        &other,
        &create(serde_json::json!({"labels": {"team": "b"}})),
    )
    .await
    .unwrap();
    let ids = |l: warren_api::sandbox::SandboxList| {
        l.sandboxes.into_iter().map(|s| s.id).collect::<Vec<_>>()
    };
    assert_eq!(
        ids(c.list_sandboxes(&[("label", "team=a")]).await.unwrap()),
        vec![id.clone()]
    );
    assert_eq!(
        c.list_sandboxes(&[("state", "running")])
            .await
            .unwrap()
            .sandboxes
            .len(),
        2
    );
    let page = c.list_sandboxes(&[("limit", "1")]).await.unwrap();
    assert_eq!(page.sandboxes.len(), 1);
    let rest = c
        .list_sandboxes(&[("cursor", page.next_cursor.as_deref().unwrap())])
        .await
        .unwrap();
    assert_eq!(rest.sandboxes.len(), 1);
    assert_ne!(rest.sandboxes[0].id, page.sandboxes[0].id);
    let e = c
        .put_sandbox(&id, &create(serde_json::json!({"image": "other:1"})))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Conflict));

    assert_eq!(node.containers().len(), 2);
    c.delete_sandbox(&id).await.unwrap();
    c.delete_sandbox(&id).await.unwrap();
    assert_eq!(
        c.get_sandbox(&id).await.unwrap_err().code(),
        Some(ErrorCode::SandboxNotFound)
    );
    assert_eq!(node.containers().len(), 1);
    // A later call creates it again, fresh.
    assert_eq!(
        c.sh(&id, "ls /workspace | wc -l").await.unwrap().stdout,
        "0\n"
    );
}

#[tokio::test]
async fn resource_limits_reach_the_container() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("limits-{}", unique());
    let req =
        create(serde_json::json!({"resources": {"cpus": 0.5, "memory_mb": 512, "pids": 128}}));
    c.put_sandbox(&id, &req).await.unwrap();
    let script = r#"
      if [ -f /sys/fs/cgroup/memory.max ]; then cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; cut -d' ' -f1 /sys/fs/cgroup/cpu.max;
      else cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us; fi"#;
    let r = c.sh(&id, script).await.unwrap();
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(lines[0], (512u64 * 1024 * 1024).to_string());
    assert_eq!(lines[1], "128");
    assert_eq!(lines[2], "50000", "0.5 CPU = 50 ms per 100 ms period");
}

#[tokio::test]
async fn concurrent_first_calls_create_exactly_one_container() {
    let node = Node::start().await;
    let id = format!("race-{}", unique());
    let calls = (0..10).map(|i| {
        let c = node.client.clone();
        let id = id.clone();
        async move { c.sh(&id, &format!("echo {i}")).await }
    });
    let results = futures_util::future::join_all(calls).await;
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r.unwrap().stdout, format!("{i}\n"));
    }
    assert_eq!(node.containers().len(), 1);
}

#[tokio::test]
async fn a_restarted_node_adopts_its_running_sandboxes() {
    let mut node = Node::start().await;
    let id = format!("adopt-{}", unique());
    let c = node.client.clone();
    c.write_file(&id, "/workspace/state.txt", "still here", None)
        .await
        .unwrap();
    let p = c
        .start_process(
            &id,
            &serde_json::from_value(serde_json::json!({"command": "sleep 600", "id": "bg"}))
                .unwrap(),
        )
        .await
        .unwrap();
    let before = node.containers();
    node.restart().await;
    let c = node.client.clone();
    assert_eq!(
        c.get_sandbox(&id).await.unwrap().state,
        SandboxState::Running
    );
    assert_eq!(
        c.read_file(&id, "/workspace/state.txt")
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
        "still here"
    );
    let again = c.get_process(&id, "bg").await.unwrap();
    assert_eq!(
        (again.pid, again.status),
        (p.pid, warren_api::process::ProcessStatus::Running),
        "the container kept running"
    );
    assert_eq!(node.containers(), before);
}

/// A node killed while it wakes a sandbox (the container made, its files still going in)
/// must, once back, restore the files again instead of serving that container as it is:
/// before, the restarted node adopted the running container as the sandbox, and whatever
/// the restore had not written yet was gone for good (the next checkpoint then replaced
/// the snapshot that still held it).
#[tokio::test]
async fn a_node_killed_while_it_wakes_a_sandbox_restores_its_files_again_once_back() {
    let mut node = Node::start().await;
    let http = reqwest::Client::new();
    // Node kills at different points of the wake.
    for (k, kill_after_ms) in [20u64, 60, 100, 150, 220, 300].into_iter().enumerate() {
        let id = format!("halfwake-{k}-{}", unique());
        let r = node
            .client
            .sh(
                &id,
                "mkdir -p /workspace/d && python3 -c \"import os; [open('/workspace/d/%d' % i, 'w').write(os.urandom(600).hex()) for i in range(20000)]\" && cd /workspace && find d -type f | sort | xargs sha256sum > sums",
            )
            .await
            .unwrap();
        assert_eq!(r.exit_code, 0, "{}", r.stderr);
        node.client.sleep(&id).await.unwrap();
        let url = format!("{}/v1/sandboxes/{id}/exec", node.url);
        let wake = tokio::spawn(
            http.post(url)
                .bearer_auth(&node.key)
                .json(&serde_json::json!({"command": "true"}))
                .timeout(std::time::Duration::from_secs(60))
                .send(),
        );
        tokio::time::sleep(std::time::Duration::from_millis(kill_after_ms)).await;
        node.restart().await;
        let _ = wake.await;
        let r = node
            .client
            .sh(
                &id,
                "cd /workspace && sha256sum -c --quiet sums 2>&1 | head -5",
            )
            .await
            .unwrap();
        assert_eq!(
            (r.exit_code, r.stdout.trim()),
            (0, ""),
            "killed {kill_after_ms} ms into the wake: the files are not all back: {}",
            r.stderr
        );
    }
}
