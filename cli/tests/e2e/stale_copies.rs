//! A copy a node kept from an earlier time it owned a sandbox never wins over the cluster's
//! newer one. Node A owns a sandbox; A is cut off and the sandbox fails over (and is written
//! to) elsewhere; when A is back it cannot set its old copy aside (its object store is
//! read-only, so the conflict snapshot cannot be written, and the copy is kept); then the
//! sandbox is handed back to A by a drain. A must not serve its old copy: it answers 503
//! until it can save and remove it, then serves the cluster's newer files.

use super::cluster_harness::{drain, exec_through, ids_on, TestCluster};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A bind mount of the cluster's object store for one node, which the test can make
/// read-only for that node alone; unmounted when dropped.
struct StoreView {
    path: PathBuf,
}

fn mount(args: &[&str]) {
    let ok = Command::new("mount")
        .args(args)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "mount {args:?} failed");
}

impl StoreView {
    fn new(store: &Path, path: PathBuf) -> StoreView {
        std::fs::create_dir_all(store).unwrap();
        std::fs::create_dir_all(&path).unwrap();
        mount(&["--bind", store.to_str().unwrap(), path.to_str().unwrap()]);
        StoreView { path }
    }

    fn read_only(&self, ro: bool) {
        let opts = if ro {
            "remount,bind,ro"
        } else {
            "remount,bind,rw"
        };
        mount(&["-o", opts, self.path.to_str().unwrap()]);
    }
}

impl Drop for StoreView {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.path).status();
    }
}

/// Runs `script` in `sandbox` through node `i`: status, answering node, stdout (status 0:
/// no answer).
async fn sh(c: &TestCluster, i: usize, sandbox: &str, script: &str) -> (u16, String, String) {
    let http = reqwest::Client::new();
    let timeout = Duration::from_secs(40);
    match exec_through(
        &http,
        &c.nodes[i].url,
        c.admin_key(),
        sandbox,
        script,
        timeout,
    )
    .await
    {
        Ok((status, node, body)) => {
            let out = body["stdout"].as_str().unwrap_or_default().to_string();
            (status, node, out)
        }
        Err(_) => (0, String::new(), String::new()),
    }
}

/// The node that owns `sandbox` by node `i`'s view.
async fn owner(c: &TestCluster, i: usize, sandbox: &str) -> String {
    c.nodes[i]
        .client
        .get_sandbox(sandbox)
        .await
        .map(|s| s.node)
        .unwrap_or_default()
}

async fn wait_owner(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    pred: impl Fn(&str) -> bool,
) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let o = owner(c, i, sandbox).await;
        if !o.is_empty() && pred(&o) {
            return o;
        }
        assert!(Instant::now() < deadline, "{sandbox}: owner {o:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A new sandbox created through node `i`, if that answered.
async fn ids_on_probe(c: &TestCluster, i: usize) -> Option<String> {
    let id = format!("probe-{}", super::harness::unique());
    let (status, _, _) = sh(c, i, &id, "true").await;
    (status == 200).then_some(id)
}

#[tokio::test]
async fn a_copy_kept_from_an_earlier_ownership_never_wins_when_the_sandbox_comes_back() {
    let mut c = TestCluster::start_with(3, 1, "checkpoint_every_s = 1\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let a = (0..3).find(|&i| i != leader).unwrap();
    let a_name = c.nodes[a].name.clone();
    // A reads and writes the shared store through a view of its own.
    let store = c.store_dir();
    let view = StoreView::new(&store, store.with_file_name(format!("objects-{a_name}")));
    let cfg = std::fs::read_to_string(&c.nodes[a].config).unwrap();
    let cfg: Vec<String> = cfg
        .lines()
        .map(|l| {
            if l.starts_with("object_store = ") {
                format!("object_store = \"{}\"", view.path.display())
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&c.nodes[a].config, cfg.join("\n")).unwrap();
    c.restart(a);
    c.wait_voters_everywhere(3).await;
    // Serving again (its lease back): a sandbox of its own answers through it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let probe = loop {
        let probe = ids_on_probe(&c, a).await;
        if let Some(p) = probe {
            break p;
        }
        assert!(
            Instant::now() < deadline,
            "{a_name} does not serve after its restart"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    c.nodes[a].client.delete_sandbox(&probe).await.unwrap();

    // Owned by A (so A also wins among any set of nodes that holds it: rendezvous).
    let id = ids_on(&c, leader, &a_name, 1).await.remove(0);
    let (status, _, _) = sh(&c, leader, &id, "echo v1 > /workspace/f").await;
    assert_eq!(status, 200);
    // Checkpointed (A's store is still writable).
    tokio::time::sleep(Duration::from_secs(4)).await;

    // A cut off: the sandbox fails over and gets newer files elsewhere.
    view.read_only(true);
    let rest: Vec<usize> = (0..3).filter(|&i| i != a).collect();
    c.partition(&[a], &rest);
    let x_name = wait_owner(&c, leader, &id, |o| o != a_name).await;
    let (status, node, _) = sh(&c, leader, &id, "echo v2 > /workspace/f").await;
    assert_eq!((status, node.as_str()), (200, x_name.as_str()));

    // Back: A holds the lease again, but cannot save its old copy, so it keeps it.
    c.heal();
    let a_up = |v: &serde_json::Value| {
        v["nodes"].as_array().is_some_and(|n| {
            n.iter()
                .any(|x| x["id"] == a_name.as_str() && x["state"] == "up")
        })
    };
    assert!(
        c.wait(Duration::from_secs(30), a_up).await,
        "A is not up again"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}"])
        .arg(format!("wrn-{a_name}-{id}"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&kept.stdout).trim(),
        "true",
        "A's old copy is gone already: the test's precondition does not hold"
    );

    // Handed back to A. A never serves the old copy: while it cannot set it aside, it
    // refuses (retryable)...
    drain(&c, leader, &x_name).await;
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut refused_by_a = 0;
    while refused_by_a < 5 {
        let (status, node, out) = sh(&c, leader, &id, "cat /workspace/f").await;
        assert_ne!(
            out.trim(),
            "v1",
            "the old copy on {node} answered (status {status})"
        );
        assert!(
            status == 503 || (status == 200 && out.trim() == "v2"),
            "{status} from {node}: {out:?}"
        );
        if status == 503 && node == a_name {
            refused_by_a += 1;
        }
        assert!(
            Instant::now() < deadline,
            "the sandbox was not handed back to {a_name}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // ...and the cluster's files once it can.
    view.read_only(false);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, node, out) = sh(&c, leader, &id, "cat /workspace/f").await;
        assert_ne!(out.trim(), "v1", "the old copy on {node} answered");
        if status == 200 {
            let (_, _, err) = sh(
                &c,
                leader,
                &id,
                "ls -la /workspace 2>&1; cat /workspace/f 2>&1",
            )
            .await;
            assert_eq!(
                (node.as_str(), out.trim()),
                (a_name.as_str(), "v2"),
                "the sandbox as served: {err}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "not served again: {status}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // What the old copy held is kept, named for the conflict.
    let snapshots = c.nodes[leader]
        .client
        .list_snapshots(Some(&id))
        .await
        .unwrap();
    assert!(
        snapshots
            .snapshots
            .iter()
            .any(|s| s.origin == "conflict"
                && s.name.as_deref().is_some_and(|n| n.contains(&a_name))),
        "{:?}",
        snapshots.snapshots
    );
    drop(view);
}
