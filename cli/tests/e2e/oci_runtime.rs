//! `oci_runtime`: the OCI runtime a node's sandbox containers run under. A name the
//! engine does not have stops the node at its start; a name it has reaches every container
//! the node makes, warm ones included.

use super::harness::{refused_start, sh, unique, Node};
use std::process::Command;
use std::time::{Duration, Instant};

fn runtime_of(container: &str) -> String {
    let out = Command::new("docker")
        .args(["inspect", "-f", "{{.HostConfig.Runtime}}", container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[tokio::test]
async fn a_node_set_to_a_runtime_the_engine_lacks_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let said = refused_start(
        &[
            "--node-id",
            &format!("t{}", unique()),
            "--listen",
            "127.0.0.1:0",
            "--oci-runtime",
            "no-such-runtime",
        ],
        dir.path(),
    )
    .await;
    assert!(said.contains("no runtime named no-such-runtime"), "{said}");
}

/// Docker registers runc under a second name as well (`io.containerd.runc.v2`): a runtime
/// that is not the engine's default name but runs on every Docker host.
#[tokio::test]
async fn every_container_the_node_makes_runs_under_the_runtime_it_is_set_to() {
    const RUNTIME: &str = "io.containerd.runc.v2";
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--oci-runtime", RUNTIME, "--warm-containers", "1"],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let warm = loop {
        if let Some(w) = node.warm_containers().first() {
            break w.clone();
        }
        assert!(Instant::now() < deadline, "no warm container");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(runtime_of(&warm), RUNTIME, "warm container {warm}");
    // One sandbox takes the warm container, the next starts its own.
    for i in 0..2 {
        let id = format!("rt{i}-{}", unique());
        assert_eq!(sh(&node.client, &id, "echo ok").await.trim(), "ok");
        assert_eq!(
            node.inspect(&id, "{{.HostConfig.Runtime}}"),
            RUNTIME,
            "{id}"
        );
    }
    // The default leaves the engine's own.
    let plain = Node::start_with("127.0.0.1:0", &["--warm-containers", "0"]).await;
    let id = format!("rt-default-{}", unique());
    sh(&plain.client, &id, "true").await;
    assert_eq!(plain.inspect(&id, "{{.HostConfig.Runtime}}"), "runc");
}
