//! Warm containers: sandboxes that take a container the node started ahead of need are
//! indistinguishable from ones that got a container of their own.

use super::harness::{self, create, running_containers, sh, unique, Node};
use std::time::{Duration, Instant};
use warren_api::snapshot::CreateSnapshotRequest;

async fn taken(node: &Node, outcome: &str) -> u64 {
    node.metric(&format!("warren_warm_takes_total{{outcome=\"{outcome}\"}}"))
        .await
}

/// Waits until the node has `n` warm containers ready (its gauge and Docker agree).
async fn wait_warm(node: &Node, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ready = node.metric("warren_warm_containers").await;
        if ready == n as u64 && node.warm_containers().len() == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ready} warm containers ready, Docker has {:?}",
            node.warm_containers()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the pool aims at `n` (its target gauge).
async fn wait_target(node: &Node, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(45);
    while node.metric("warren_warm_target").await != n {
        assert!(Instant::now() < deadline, "the pool never aimed at {n}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Limits as the sandbox sees them in its cgroup: memory bytes, pids, CPU quota.
const LIMITS: &str = r#"
  if [ -f /sys/fs/cgroup/memory.max ]; then cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max; cut -d' ' -f1 /sys/fs/cgroup/cpu.max;
  else cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us; fi"#;

#[tokio::test]
async fn a_taken_warm_container_is_the_sandboxs_own() {
    let node = Node::start_with("127.0.0.1:0", &["--warm-containers", "2"]).await;
    let c = &node.client;
    wait_warm(&node, 2).await;
    let warm_before = node.warm_containers();

    // Another instance type than the warm containers' (standard-1).
    let id = format!("taken-{}", unique());
    c.put_sandbox(&id, &create(serde_json::json!({"instance_type": "lite"})))
        .await
        .unwrap();
    assert_eq!(taken(&node, "taken").await, 1);
    assert_eq!(
        running_containers(&id),
        vec![format!("wrn-{}-{id}", node.node_id)]
    );
    let left: Vec<String> = node.warm_containers();
    assert_eq!(left.len(), 1, "one was taken: {left:?}");
    assert!(warm_before.contains(&left[0]));

    let names = sh(
        c,
        &id,
        "hostname; cat /etc/hostname; grep -cw \"$(hostname)\" /etc/hosts",
    )
    .await;
    assert_eq!(names, format!("{id}\n{id}\n1\n"));
    let limits = sh(c, &id, LIMITS).await;
    assert_eq!(
        limits.lines().collect::<Vec<_>>(),
        vec![(256u64 << 20).to_string().as_str(), "256", "6250"],
        "lite: 256 MiB, 256 processes, 1/16 CPU"
    );
    c.write_file(&id, "/workspace/a", "mine", None)
        .await
        .unwrap();
    assert_eq!(sh(c, &id, "cat /workspace/a").await, "mine");

    // One with an environment of its own takes one too: its env reaches its calls, over
    // the image's, and PATCH env still goes over it.
    let env_id = format!("env-{}", unique());
    let env = serde_json::json!({"env": {"COLOUR": "teal", "PATH": "/opt/x:/usr/bin:/bin"}});
    c.put_sandbox(&env_id, &create(env)).await.unwrap();
    assert_eq!(taken(&node, "taken").await, 2);
    assert_eq!(taken(&node, "cold").await, 0);
    assert_eq!(
        sh(c, &env_id, "echo $COLOUR $PATH; hostname").await,
        format!("teal /opt/x:/usr/bin:/bin\n{env_id}\n")
    );
    let patch: warren_api::session::PatchEnvRequest =
        serde_json::from_value(serde_json::json!({"env": {"COLOUR": "navy"}})).unwrap();
    c.patch_env(&env_id, &patch).await.unwrap();
    assert_eq!(sh(c, &env_id, "echo $COLOUR").await, "navy\n");
    // Its container stopped and started again (its run directory starts empty): the node
    // gives the new guest the sandbox's env again.
    let container = running_containers(&env_id).remove(0);
    let stopped = std::process::Command::new("docker")
        .args(["stop", "-t", "1", &container])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert_eq!(sh(c, &env_id, "echo $COLOUR").await, "teal\n");

    // The pool fills up again.
    wait_warm(&node, 2).await;

    // Warm containers that died while they waited are not given to a sandbox: with both
    // dead, the next create starts its own container, and the pool replaces them.
    let waiting = node.warm_containers();
    let killed = std::process::Command::new("docker")
        .arg("kill")
        .args(&waiting)
        .status()
        .unwrap();
    assert!(killed.success());
    let next = format!("after-kill-{}", unique());
    assert_eq!(sh(c, &next, "hostname").await, format!("{next}\n"));
    assert_eq!(taken(&node, "taken").await, 2);
    assert_eq!(taken(&node, "failed").await, 0);
    assert_eq!(taken(&node, "cold").await, 1);
    wait_warm(&node, 2).await;
    assert!(node.warm_containers().iter().all(|w| !waiting.contains(w)));
    c.delete_sandbox(&next).await.unwrap();

    // Deleting the sandbox takes its container; nothing of any run directory is on the
    // host's disk (they are the containers' own).
    c.delete_sandbox(&id).await.unwrap();
    assert!(running_containers(&id).is_empty());
    assert!(!node.data_dir.join("run").exists());
}

#[tokio::test]
async fn forks_and_restores_into_warm_containers_have_the_sources_files() {
    let mut node = Node::start_with("127.0.0.1:0", &["--warm-containers", "3"]).await;
    let c = node.client.clone();
    let id = format!("warmsrc-{}", unique());
    // Cold: the pool is not ready yet, or is; either way the source is an ordinary sandbox.
    c.put_sandbox(&id, &create(serde_json::json!({})))
        .await
        .unwrap();
    // An image file deleted, one changed, a directory replaced, new files with two names.
    sh(
        &c,
        &id,
        "rm /etc/issue && echo changed > /etc/issue.net && rm -rf /etc/apt && mkdir /etc/apt \
         && echo mine > /etc/apt/only && echo v1 > /workspace/f && ln /workspace/f /workspace/g",
    )
    .await;
    const CHECK: &str = "test -e /etc/issue && echo issue-there; cat /etc/issue.net; ls /etc/apt; \
                         cat /workspace/f; stat -c %h /workspace/g; hostname";
    let before = sh(&c, &id, CHECK).await;
    assert_eq!(before, format!("changed\nonly\nv1\n2\n{id}\n"));
    wait_warm(&node, 3).await;
    let taken_before = taken(&node, "taken").await;

    let fork = harness::fork(&c, &id, 2).await;
    assert_eq!(taken(&node, "taken").await, taken_before + 2);
    for sb in &fork.sandboxes {
        assert_eq!(
            sh(&c, &sb.id, CHECK).await,
            before.replace(&format!("{id}\n"), &format!("{}\n", sb.id))
        );
    }
    // Independent copies.
    let (f1, f2) = (&fork.sandboxes[0].id, &fork.sandboxes[1].id);
    sh(&c, f1, "echo f1 > /workspace/f").await;
    assert_eq!(sh(&c, f2, "cat /workspace/f").await, "v1\n");
    assert_eq!(sh(&c, &id, "cat /workspace/f").await, "v1\n");

    // A restore takes a warm container too, and the files are the snapshot's.
    let snap = c
        .create_snapshot(&id, &CreateSnapshotRequest::default())
        .await
        .unwrap();
    sh(&c, &id, "echo v2 > /workspace/f && touch /workspace/later").await;
    wait_warm(&node, 3).await;
    let taken_before = taken(&node, "taken").await;
    c.restore(&id, &snap.id).await.unwrap();
    assert_eq!(taken(&node, "taken").await, taken_before + 1);
    assert_eq!(sh(&c, &id, CHECK).await, before);
    assert_eq!(
        sh(&c, &id, "test -e /workspace/later || echo gone").await,
        "gone\n"
    );

    // A restarted node replaces its warm containers and keeps its sandboxes.
    let warm = node.warm_containers();
    node.restart().await;
    let c = node.client.clone();
    assert_eq!(
        sh(&c, f1, "cat /workspace/f; hostname").await,
        format!("f1\n{f1}\n")
    );
    wait_warm(&node, 3).await;
    assert!(
        node.warm_containers().iter().all(|w| !warm.contains(w)),
        "the old warm containers are gone"
    );
    // The restored sandbox's container was taken from the pool. One that stopped (its
    // guest died) starts again with its host name.
    sh(&c, &id, "echo still > /workspace/f").await;
    let container = running_containers(&id).remove(0);
    let stopped = std::process::Command::new("docker")
        .args(["stop", "-t", "1", &container])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert_eq!(
        sh(&c, &id, "cat /workspace/f; hostname; cat /etc/hostname").await,
        format!("still\n{id}\n{id}\n")
    );
}

/// The pool follows demand: a burst of creates larger than the pool raises its target to
/// the burst (within its ceiling), it refills to that, and once the burst is older than the
/// horizon it shrinks back to its floor. Docker holds what the pool says at each step.
#[tokio::test]
async fn the_pool_grows_to_a_burst_and_shrinks_back_when_it_ages_out() {
    let node = Node::start_with(
        "127.0.0.1:0",
        &[
            "--warm-containers",
            "1",
            "--warm-max",
            "4",
            "--warm-horizon-s",
            "30",
            // Refill whatever else runs on this host (the CPU check has unit tests).
            "--warm-idle-reserve",
            "0",
        ],
    )
    .await;
    let c = &node.client;
    wait_warm(&node, 1).await;
    assert_eq!(node.metric("warren_warm_target").await, 1);

    // Six at once: one takes the warm container, five start their own.
    let ids: Vec<String> = (0..6).map(|i| format!("burst{i}-{}", unique())).collect();
    let burst = Instant::now();
    let req = create(serde_json::json!({}));
    let made = futures_util::future::join_all(ids.iter().map(|id| c.put_sandbox(id, &req))).await;
    assert!(made.iter().all(|r| r.is_ok()), "{made:?}");
    assert_eq!(taken(&node, "taken").await + taken(&node, "cold").await, 6);

    // The ceiling, not the burst, bounds it; it refills to it and holds it.
    wait_target(&node, 4).await;
    wait_warm(&node, 4).await;
    assert!(
        burst.elapsed() < Duration::from_secs(25),
        "the refill took longer than the test's horizon allows: {:?}",
        burst.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(node.warm_containers().len(), 4);

    // Past the horizon, back to the floor: the extra containers are removed.
    wait_target(&node, 1).await;
    assert!(
        burst.elapsed() >= Duration::from_secs(30),
        "it shrank before the burst aged out: {:?}",
        burst.elapsed()
    );
    wait_warm(&node, 1).await;
    for id in &ids {
        c.delete_sandbox(id).await.unwrap();
    }
}

/// SIGTERM while the pool is still filling: the node waits for the warm container it is
/// starting and removes it with the ready ones, so nothing of the pool outlives the node
/// (before, the start in flight finished in Docker after the node had gone).
#[tokio::test]
async fn a_node_stopped_while_its_pool_fills_leaves_no_warm_container() {
    for round in 0..3 {
        let mut node = Node::start_with("127.0.0.1:0", &["--warm-containers", "6"]).await;
        // Stop as soon as the first is ready: the next one is being started.
        let deadline = Instant::now() + Duration::from_secs(60);
        while node.metric("warren_warm_containers").await < 1 {
            assert!(Instant::now() < deadline, "no warm container came up");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        node.terminate();
        let status = node.wait_exit(Duration::from_secs(60));
        assert!(status.is_some(), "round {round}: the node did not stop");
        // Whatever Docker was still doing for the node has had time to finish.
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            node.warm_containers(),
            Vec::<String>::new(),
            "round {round}: warm containers outlived their node"
        );
    }
}

/// The image of a container, as Docker names it.
fn image_of(container: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["inspect", "--format", "{{.Config.Image}}", container])
        .output()
        .expect("docker inspect");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// An image named in `--warm-image` gets a pool of its own, which follows that image's
/// demand from none: a burst of its sandboxes (cold, the first time) makes the node keep
/// containers of that image ready, the next sandbox of it takes one, and the default
/// image's pool (floor 0 here) stays empty meanwhile. Before, only the default image had
/// warm containers and every sandbox of another image started cold.
#[tokio::test]
async fn a_second_image_gets_a_pool_that_follows_its_own_demand() {
    let second = "warren/sandbox:warm-second";
    let tagged = std::process::Command::new("docker")
        .args(["tag", warren_node::config::DEFAULT_IMAGE, second])
        .status()
        .expect("docker tag");
    assert!(tagged.success());
    let node = Node::start_with(
        "127.0.0.1:0",
        &[
            "--warm-containers",
            "0",
            "--warm-max",
            "3",
            "--warm-image",
            second,
            "--warm-idle-reserve",
            "0",
        ],
    )
    .await;
    let c = &node.client;
    assert_eq!(node.metric("warren_warm_target").await, 0);

    // Two sandboxes of the second image: both start cold, and are its demand.
    let of_second = create(serde_json::json!({"image": second}));
    let ids: Vec<String> = (0..2).map(|i| format!("second{i}-{}", unique())).collect();
    let made =
        futures_util::future::join_all(ids.iter().map(|id| c.put_sandbox(id, &of_second))).await;
    assert!(made.iter().all(|r| r.is_ok()), "{made:?}");
    assert_eq!(taken(&node, "cold").await, 2);
    wait_target(&node, 2).await;
    wait_warm(&node, 2).await;
    for w in node.warm_containers() {
        assert_eq!(
            image_of(&w),
            second,
            "{w} is not of the image that was asked for"
        );
    }

    // The next one of that image takes a ready container and runs as its own.
    let next = format!("second-next-{}", unique());
    c.put_sandbox(&next, &of_second).await.unwrap();
    assert_eq!(taken(&node, "taken").await, 1);
    assert_eq!(sh(c, &next, "echo ok").await.trim(), "ok");
    assert_eq!(image_of(&format!("wrn-{}-{next}", node.node_id)), second);

    // One of the default image finds no warm container of its own (none was asked for)
    // and starts cold; the second image's pool is not given to it.
    let plain = format!("plain-{}", unique());
    c.put_sandbox(&plain, &create(serde_json::json!({})))
        .await
        .unwrap();
    assert_eq!(taken(&node, "cold").await, 3);
    assert_eq!(
        image_of(&format!("wrn-{}-{plain}", node.node_id)),
        warren_node::config::DEFAULT_IMAGE
    );
    for id in ids.iter().chain([&next, &plain]) {
        c.delete_sandbox(id).await.unwrap();
    }
}
