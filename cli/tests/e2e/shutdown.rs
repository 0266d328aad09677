//! SIGTERM under load: clients keep writing files and running commands in several sandboxes
//! when the node is told to stop. Every call is answered in full or refused cleanly (never a
//! success with a cut body), the node exits within its drain, no process it started is left
//! behind, and after a restart every acknowledged write is there whole while every other file
//! is either whole or absent.

use super::harness::{unique, Node};
use std::time::{Duration, Instant};
use warren_client::Error;

/// What one call came to.
enum Outcome {
    /// Answered in full (the write acknowledged, the command's whole output read).
    Done,
    /// Refused or cut before an answer began: an API error, or a connection that failed.
    Refused(String),
    /// An answer that began and was then wrong or cut: what must never happen.
    Broken(String),
}

fn classify(e: Error) -> Outcome {
    match e {
        Error::Api { status, error } => Outcome::Refused(format!("{status} {:?}", error.code)),
        Error::Http(e) if e.is_decode() || e.is_body() => Outcome::Broken(format!("{e:?}")),
        Error::Http(e) if e.is_connect() => Outcome::Refused("not accepted".into()),
        Error::Http(e) => Outcome::Refused(format!("cut before an answer: {:?}", e.status())),
        other => Outcome::Broken(other.to_string()),
    }
}

/// The content of write `n` of worker `w`: big enough to be in flight over several reads.
fn content(w: usize, n: usize) -> Vec<u8> {
    let line = format!("worker {w} write {n}\n");
    line.as_bytes().repeat(48 * 1024 / line.len())
}

/// Pids whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_under_load_answers_or_refuses_every_call_and_loses_no_acknowledged_write() {
    let mut node = Node::start_with("127.0.0.1:0", &["--drain-timeout-ms", "4000"]).await;
    let base = unique();
    let ids: Vec<String> = (0..3).map(|i| format!("term{i}-{base}")).collect();
    for id in &ids {
        node.client
            .sh(id, "mkdir -p /workspace/load")
            .await
            .unwrap();
    }
    let stop_at = Instant::now() + Duration::from_secs(20);
    let mut workers = Vec::new();
    for w in 0..9 {
        let c = node.client.clone();
        let id = ids[w % ids.len()].clone();
        workers.push(tokio::spawn(async move {
            let mut log: Vec<(usize, Outcome, Outcome)> = Vec::new();
            for n in 0.. {
                if Instant::now() > stop_at {
                    break;
                }
                let path = format!("/workspace/load/w{w}-{n}");
                let wrote = match c.write_file(&id, &path, content(w, n), None).await {
                    Ok(_) => Outcome::Done,
                    Err(e) => classify(e),
                };
                let want = format!("{}\n", content(w, n).len());
                let ran = match c.sh(&id, &format!("wc -c < {path} || true")).await {
                    Ok(r) if r.stdout == want || matches!(wrote, Outcome::Refused(_)) => {
                        Outcome::Done
                    }
                    Ok(r) => Outcome::Broken(format!("wc printed {:?}", r.stdout)),
                    Err(e) => classify(e),
                };
                let refused = matches!(ran, Outcome::Refused(_));
                log.push((n, wrote, ran));
                if refused {
                    break;
                }
            }
            (w, id, log)
        }));
    }
    // Load for a while, then the signal.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let pid = node.pid() as u32;
    let before_children = children_of(pid);
    let signalled = Instant::now();
    node.terminate();
    let mut logs = Vec::new();
    for w in workers {
        logs.push(w.await.unwrap());
    }
    let (status, mut node) = tokio::task::spawn_blocking(move || {
        let status = node.wait_exit(Duration::from_secs(30));
        (status, node)
    })
    .await
    .unwrap();
    let took = signalled.elapsed();
    let status = status.expect("the node still ran 30 s after SIGTERM");
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(4 + 6),
        "the node took {took:?} to stop (drain 4 s)"
    );
    // Nothing the node started runs on without it.
    let left: Vec<u32> = before_children
        .iter()
        .copied()
        .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .map(|s| !s.contains(") Z "))
                .unwrap_or(false)
        })
        .collect();
    assert!(left.is_empty(), "the node's children outlived it: {left:?}");

    let mut done = 0;
    let mut refusals = std::collections::BTreeSet::new();
    for (w, _, log) in &logs {
        for (n, wrote, ran) in log {
            for o in [wrote, ran] {
                match o {
                    Outcome::Broken(why) => panic!("worker {w} call {n} was cut: {why}"),
                    Outcome::Refused(how) => {
                        refusals.insert(how.clone());
                    }
                    Outcome::Done => {}
                }
            }
            done += usize::from(matches!(wrote, Outcome::Done));
        }
    }
    assert!(
        done >= 9,
        "too little load before the signal: {done} writes"
    );

    // After a restart: acknowledged writes whole, the rest whole or absent.
    node.restart().await;
    let c = node.client.clone();
    for (w, id, log) in &logs {
        for (n, wrote, _) in log {
            let path = format!("/workspace/load/w{w}-{n}");
            let size = c
                .sh(id, &format!("stat -c %s {path} 2>/dev/null || echo absent"))
                .await
                .unwrap()
                .stdout;
            let whole = format!("{}\n", content(*w, *n).len());
            match wrote {
                Outcome::Done => assert_eq!(size, whole, "acknowledged {path} lost or cut"),
                _ => assert!(
                    size == whole || size == "absent\n",
                    "{path} is half-written: {size}"
                ),
            }
        }
    }
    eprintln!(
        "{done} writes acknowledged; the node stopped {took:?} after SIGTERM; refused as: {refusals:?}"
    );
    for id in &ids {
        c.delete_sandbox(id).await.unwrap();
    }
}

/// Whether Docker has `container` paused.
fn paused(container: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Paused}}", container])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

/// A cluster's leader stopped in order (SIGTERM) leaves its sandboxes as they were, not
/// paused: its Raft stops before the process ends, and the fence must not take that for a
/// lost lease and freeze them on the way out — a pause still on its way through Docker as
/// the process ends lands after the next start adopted the sandbox, which then stays
/// paused and refuses every call. Started again, the node serves the sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_leader_stopped_in_order_leaves_its_sandboxes_unpaused() {
    use super::cluster_harness::{exec_through, ids_on, TestCluster};
    let mut c = TestCluster::start_with(3, 1, "lease_ms = 2000\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let name = c.nodes[leader].name.clone();
    let ids = ids_on(&c, (leader + 1) % 3, &name, 2).await;
    c.terminate(leader);
    // Whatever the stopping node asked Docker for has landed by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for id in &ids {
        let containers = super::harness::all_containers(id);
        assert_eq!(containers.len(), 1, "{id}: {containers:?}");
        assert!(
            !paused(&containers[0]),
            "{id} was paused by its node on the way out"
        );
    }
    c.restart(leader);
    let http = reqwest::Client::new();
    for id in &ids {
        let url = c.nodes[leader].url.clone();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = exec_through(
                &http,
                &url,
                c.admin_key(),
                id,
                "echo up",
                Duration::from_secs(20),
            )
            .await;
            match r {
                Ok((200, _, body)) if body["stdout"] == "up\n" => break,
                other => assert!(
                    Instant::now() < deadline,
                    "{id} is not served after the restart: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
