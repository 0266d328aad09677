//! One live copy per sandbox and no acknowledged write lost, under partitions and crashes:
//! clients append numbered lines to a file in a sandbox through nodes on both sides of a
//! fault, record which appends were acknowledged and by which node, and check the history
//! afterwards.

use super::cluster_harness::TestCluster;
use super::harness::unique;
use reqwest::Method;
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;

/// The test clusters' lease (`lease_ms` in the harness).
const LEASE: Duration = Duration::from_secs(2);

/// One append that was acknowledged.
#[derive(Debug, Clone)]
struct Ack {
    line: String,
    /// The node that ran it (`x-warren-node`).
    node: String,
    /// Since the fault began.
    at: Duration,
}

/// Runs `script` in `sandbox` entering node `i`: the answering node and stdout, or why not
/// (no answer within 5 s: what a write during a fault may take at most).
async fn exec_on(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    script: &str,
) -> Result<(String, String), String> {
    exec_on_within(c, i, sandbox, script, Duration::from_secs(5)).await
}

/// [`exec_on`] with its own client timeout.
async fn exec_on_within(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    script: &str,
    timeout: Duration,
) -> Result<(String, String), String> {
    let req = ExecRequest {
        command: Some(script.into()),
        ..Default::default()
    };
    let r = c.nodes[i]
        .client
        .request(Method::POST, &format!("/v1/sandboxes/{sandbox}/exec"))
        .json(&req)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status();
    let node = r
        .headers()
        .get("x-warren-node")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: serde_json::Value = r.json().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {body}"));
    }
    if body["exit_code"] != 0 {
        return Err(format!("exit {body}"));
    }
    Ok((
        node,
        body["stdout"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Lines appended to `/workspace/log` that were acknowledged.
async fn append(c: &TestCluster, i: usize, sandbox: &str, line: &str) -> Option<String> {
    exec_on(c, i, sandbox, &format!("echo {line} >> /workspace/log"))
        .await
        .ok()
        .map(|(node, _)| node)
}

/// The write that creates `sandbox` (entering node `i`): the node that took it. A cold
/// create on a loaded machine takes longer than a write during a fault may.
async fn first_write(c: &TestCluster, i: usize, sandbox: &str, line: &str) -> Option<String> {
    let script = format!("echo {line} >> /workspace/log");
    exec_on_within(c, i, sandbox, &script, Duration::from_secs(60))
        .await
        .map(|(node, _)| node)
        .map_err(|e| eprintln!("first write to {sandbox} through node {i}: {e}"))
        .ok()
}

/// Waits until `sandbox` has a snapshot (its first checkpoint) and the cluster recorded it.
async fn wait_checkpoint(c: &TestCluster, sandbox: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.nodes[0]
            .client
            .request(Method::GET, &format!("/v1/snapshots?sandbox={sandbox}"))
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = r.json().await.unwrap();
        if v["snapshots"].as_array().is_some_and(|a| !a.is_empty()) {
            // Listed once written; recorded in the placement a commit later.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            return;
        }
        assert!(Instant::now() < deadline, "no checkpoint of {sandbox}: {v}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Lines of `/workspace/log` in the container of `sandbox` that node `node` runs, read from
/// the host (works while the container is frozen).
fn lines_in_container(node: &str, sandbox: &str, file: &str) -> Option<usize> {
    let pid = super::cluster_harness::container_pid(node, sandbox)?;
    let text = std::fs::read_to_string(format!("/proc/{pid}/root{file}")).ok()?;
    Some(text.lines().count())
}

/// The scenario of "Ownership you can bet on": a sandbox on a follower, then that follower
/// and the leader cut off from the other three of five nodes. The cut-off pair must stop
/// acknowledging writes (and the sandbox's own processes must stop making progress) before
/// the majority starts a copy of its own; after healing, the sandbox holds what was
/// checkpointed before the cut and every write the majority acknowledged.
#[tokio::test]
async fn a_cut_off_leader_and_its_follower_stop_before_the_majority_takes_over() {
    let mut c = TestCluster::start_with(5, 1, "checkpoint_every_s = 1\n").await;
    c.wait_voters_everywhere(5).await;
    let leader = c.leader().await;
    let leader_name = c.nodes[leader].name.clone();
    // A sandbox whose owner is not the leader.
    let mut chosen = None;
    for k in 0..20 {
        let id = format!("own-{}-{k}", unique());
        let node = first_write(&c, leader, &id, "before")
            .await
            .expect("first write");
        if node != leader_name {
            chosen = Some((id, node));
            break;
        }
        c.nodes[leader].client.delete_sandbox(&id).await.unwrap();
    }
    let (id, owner_name) = chosen.expect("some id is placed on a follower");
    let owner = c.index_of(&owner_name);
    let ticker = exec_on(
        &c,
        leader,
        &id,
        "nohup sh -c 'while true; do echo t >> /workspace/ticks; sleep 0.1; done' >/dev/null 2>&1 &",
    )
    .await;
    assert!(ticker.is_ok(), "{ticker:?}");
    wait_checkpoint(&c, &id).await;
    // The checkpoint may predate the ticker's first lines; what matters is `before`.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let minority = [leader, owner];
    let majority: Vec<usize> = (0..5).filter(|i| !minority.contains(i)).collect();
    eprintln!(
        "{} test: cutting {:?} off from {:?}",
        warren_api::time::now_rfc3339(),
        minority,
        majority
    );
    c.partition(&minority, &majority);
    let cut = Instant::now();

    let mut acks: Vec<Ack> = Vec::new();
    let mut fenced_check: Option<(Duration, Option<usize>)> = None;
    let mut frozen_for = None;
    let mut seq = 0;
    while cut.elapsed() < Duration::from_secs(25) {
        for (side, entry) in [("minority", owner), ("majority", majority[0])] {
            seq += 1;
            let line = format!("{seq}-{side}");
            if let Some(node) = append(&c, entry, &id, &line).await {
                acks.push(Ack {
                    line,
                    node,
                    at: cut.elapsed(),
                });
            }
        }
        // The old copy's own processes: stopped once its lease is gone (lease + renewal
        // slack), still stopped a while later.
        let at = cut.elapsed();
        match fenced_check {
            None if at > LEASE + Duration::from_secs(1) => {
                fenced_check = Some((at, lines_in_container(&owner_name, &id, "/workspace/ticks")));
            }
            Some((first, n)) if frozen_for.is_none() && at > first + Duration::from_secs(2) => {
                let later = lines_in_container(&owner_name, &id, "/workspace/ticks");
                frozen_for = Some((n, later));
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!("{} test: acks {acks:?}", warren_api::time::now_rfc3339());
    let old_copy: Vec<&Ack> = acks.iter().filter(|a| a.node == owner_name).collect();
    let new_copy: Vec<&Ack> = acks.iter().filter(|a| a.node != owner_name).collect();
    assert!(
        !new_copy.is_empty(),
        "the majority serves the sandbox again: {acks:?}"
    );
    let last_old = old_copy.iter().map(|a| a.at).max().unwrap_or_default();
    let first_new = new_copy.iter().map(|a| a.at).min().unwrap();
    assert!(
        last_old < first_new,
        "two live copies acknowledged writes: the cut-off owner at {last_old:?}, the majority's from {first_new:?}: {acks:?}"
    );
    assert!(
        last_old < LEASE + Duration::from_secs(1),
        "the cut-off owner acknowledged writes {last_old:?} after the cut (lease {LEASE:?})"
    );
    let (n1, n2) = frozen_for.expect("the old copy was looked at twice");
    assert!(
        n1.is_some() && n1 == n2,
        "the cut-off copy's processes keep running: {n1:?} then {n2:?} lines"
    );

    c.heal();
    eprintln!("{} test: healed", warren_api::time::now_rfc3339());
    // Once settled: one container, and every node reads the same file.
    let deadline = Instant::now() + Duration::from_secs(60);
    let content = loop {
        let running = c.containers_of(&id);
        let reads = futures_util::future::join_all(
            (0..5).map(|i| exec_on(&c, i, &id, "cat /workspace/log")),
        )
        .await;
        let firsts: Vec<_> = reads.iter().filter_map(|r| r.as_ref().ok()).collect();
        if running == 1 && firsts.len() == 5 && firsts.iter().all(|r| r.1 == firsts[0].1) {
            break firsts[0].1.clone();
        }
        assert!(
            Instant::now() < deadline,
            "not settled after healing: {running} containers, reads {reads:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let lines: Vec<&str> = content.lines().collect();
    assert!(
        lines.contains(&"before"),
        "the checkpointed write is lost: {lines:?}"
    );
    for a in &new_copy {
        assert!(
            lines.contains(&a.line.as_str()),
            "acknowledged write {a:?} is lost: {lines:?}"
        );
    }
    // What the cut-off copy held (frozen when it was saved) is kept, named for the conflict.
    let snapshots = c.nodes[majority[0]]
        .client
        .list_snapshots(Some(&id))
        .await
        .unwrap();
    assert!(
        snapshots.snapshots.iter().any(|s| s.origin == "conflict"
            && s.name.as_deref().is_some_and(|n| n.contains(&owner_name))),
        "no conflict snapshot of the cut-off copy: {:?}",
        snapshots.snapshots
    );
}

/// A sandbox that slept (its disk saved to the shared store) and then lost its node comes
/// back elsewhere with its files, not blank.
#[tokio::test]
async fn a_sleeping_sandbox_whose_node_dies_comes_back_with_its_files() {
    let mut c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let entry = (leader + 1) % 3;
    // A sandbox on a node that is neither the leader nor the entry node... or any, as long
    // as it is not the leader (killing the leader is another test).
    let mut chosen = None;
    for k in 0..20 {
        let id = format!("slept-{}-{k}", unique());
        let node = first_write(&c, entry, &id, "kept").await.expect("write");
        if node != c.nodes[leader].name {
            chosen = Some((id, node));
            break;
        }
        c.nodes[entry].client.delete_sandbox(&id).await.unwrap();
    }
    let (id, owner_name) = chosen.expect("an id placed on a follower");
    let owner = c.index_of(&owner_name);
    let slept = c.nodes[entry].client.sleep(&id).await.unwrap();
    assert_eq!(slept.state.as_str(), "sleeping");
    c.kill(owner);
    let survivor = (0..3).find(|i| *i != owner).unwrap();
    let t = Instant::now();
    let content = loop {
        match exec_on(&c, survivor, &id, "cat /workspace/log 2>&1 || true").await {
            Ok((node, out)) => {
                assert_ne!(node, owner_name);
                break out;
            }
            Err(e) => {
                assert!(
                    t.elapsed() < Duration::from_secs(40),
                    "the sandbox did not come back: {e}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(content.trim(), "kept", "the slept sandbox came back blank");
}

/// A three-node cluster (checkpoints every second) with a sandbox on a follower that holds
/// `kept` in its recovery point: the cluster, the sandbox, and the index of its owner.
async fn checkpointed_on_a_follower(prefix: &str) -> (TestCluster, String, usize) {
    checkpointed_on_a_follower_with(prefix, "").await
}

/// Like [`checkpointed_on_a_follower`], with more settings for every node.
async fn checkpointed_on_a_follower_with(
    prefix: &str,
    extra: &str,
) -> (TestCluster, String, usize) {
    let settings = format!("checkpoint_every_s = 1\n{extra}");
    let c = TestCluster::start_with(3, 1, &settings).await;
    c.wait_voters_everywhere(3).await;
    let (id, owner) = on_a_follower(&c, prefix).await;
    wait_checkpoint(&c, &id).await;
    (c, id, owner)
}

/// Reads `/workspace/log` entering node `entry` until the sandbox answers from a node other
/// than `gone` (up to 40 s); its content.
async fn comes_back_elsewhere(c: &TestCluster, entry: usize, id: &str, gone: &str) -> String {
    let t = Instant::now();
    loop {
        match exec_on(c, entry, id, "cat /workspace/log 2>&1 || true").await {
            Ok((node, out)) if node != gone => return out,
            other => {
                assert!(
                    t.elapsed() < Duration::from_secs(40),
                    "the sandbox did not come back: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Sends `method path` to node `i` until it answers other than 5xx; the status.
async fn admin(c: &TestCluster, i: usize, method: Method, path: &str) -> u16 {
    let t = Instant::now();
    loop {
        let r = c.nodes[i]
            .client
            .request(method.clone(), path)
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match r {
            Ok(r) if !r.status().is_server_error() => return r.status().as_u16(),
            other => {
                assert!(t.elapsed() < Duration::from_secs(30), "{path}: {other:?}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    }
}

/// A node that died and was then removed by force: its sandboxes fail over like a down
/// node's (they answered 503 "left the cluster" forever).
#[tokio::test]
async fn a_dead_node_removed_by_force_has_its_sandboxes_failed_over() {
    let (mut c, id, owner) = checkpointed_on_a_follower("removed").await;
    let owner_name = c.nodes[owner].name.clone();
    c.kill(owner);
    let survivor = (0..3).find(|i| *i != owner).unwrap();
    let path = format!("/v1/cluster/nodes/{owner_name}?force=true");
    assert_eq!(admin(&c, survivor, Method::DELETE, &path).await, 204);
    let content = comes_back_elsewhere(&c, survivor, &id, &owner_name).await;
    assert_eq!(content.trim(), "kept");
}

/// A node that died and was then told to drain (it cannot move anything away): its
/// sandboxes fail over (they answered 503 forever: a draining node was never failed over).
#[tokio::test]
async fn a_dead_node_that_is_drained_has_its_sandboxes_failed_over() {
    let (mut c, id, owner) = checkpointed_on_a_follower("drained").await;
    let owner_name = c.nodes[owner].name.clone();
    c.kill(owner);
    let survivor = (0..3).find(|i| *i != owner).unwrap();
    let path = format!("/v1/cluster/nodes/{owner_name}/drain");
    assert_eq!(admin(&c, survivor, Method::POST, &path).await, 200);
    let content = comes_back_elsewhere(&c, survivor, &id, &owner_name).await;
    assert_eq!(content.trim(), "kept");
}

/// A node cut off from the others (its view of the cluster stale) never answers 404 for a
/// sandbox created meanwhile: it answers a retryable 503 until it can tell.
#[tokio::test]
async fn a_cut_off_node_never_answers_404_for_a_sandbox_that_exists() {
    let mut c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let cut = (leader + 1) % 3;
    let others: Vec<usize> = (0..3).filter(|i| *i != cut).collect();
    c.partition(&[cut], &others);
    let id = format!("exists-{}", unique());
    let t = Instant::now();
    while append(&c, leader, &id, "x").await.is_none() {
        assert!(t.elapsed() < Duration::from_secs(30), "cannot create {id}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    for _ in 0..3 {
        let r = c.nodes[cut]
            .client
            .request(Method::GET, &format!("/v1/sandboxes/{id}"))
            .timeout(Duration::from_secs(20))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        assert_ne!(status, 404, "a sandbox that exists answered 404: {body}");
        assert_eq!(status, 503, "{body}");
    }
    c.heal();
    let t = Instant::now();
    loop {
        let r = c.nodes[cut]
            .client
            .request(Method::GET, &format!("/v1/sandboxes/{id}"))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{}", r.status());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A sandbox placed on a follower of `c`, with `kept` in its log: its id and owner.
async fn on_a_follower(c: &TestCluster, prefix: &str) -> (String, usize) {
    let leader = c.leader().await;
    for k in 0..20 {
        let id = format!("{prefix}-{}-{k}", unique());
        let node = first_write(c, leader, &id, "kept").await.expect("write");
        if node != c.nodes[leader].name {
            return (id, c.index_of(&node));
        }
        c.nodes[leader].client.delete_sandbox(&id).await.unwrap();
    }
    panic!("no id was placed on a follower");
}

/// Status and body of `method path` entering node `i`.
async fn call(
    c: &TestCluster,
    i: usize,
    method: Method,
    path: &str,
) -> Result<(u16, serde_json::Value), String> {
    let r = c.nodes[i]
        .client
        .request(method, path)
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or_default()))
}

/// DELETE answers 204 only once the cluster forgot the sandbox. The owner, cut off from the
/// majority while its lease still runs, deletes its copy but cannot commit that the sandbox
/// is gone: it says so (retryable), and a sandbox answered as deleted never comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_the_cluster_did_not_record_is_not_answered_as_done() {
    // A long lease, and no failover during the test: the cut-off owner still serves when
    // the DELETE arrives.
    let mut c = TestCluster::start_with(3, 1, "lease_ms = 8000\ndown_after_ms = 30000\n").await;
    c.wait_voters_everywhere(3).await;
    let (id, owner) = on_a_follower(&c, "del").await;
    let others: Vec<usize> = (0..3).filter(|i| *i != owner).collect();
    c.partition(&[owner], &others);
    let path = format!("/v1/sandboxes/{id}");
    let answered = call(&c, owner, Method::DELETE, &path).await;
    c.heal();
    match answered {
        Ok((204, _)) => {}
        Ok((503, body)) => {
            assert_eq!(body["retryable"], true, "{body}");
            // The client retries, as told, once the owner is back in touch.
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                match call(&c, others[0], Method::DELETE, &path).await {
                    Ok((204, _)) => break,
                    other => assert!(
                        Instant::now() < deadline,
                        "the retried DELETE did not succeed: {other:?}"
                    ),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        other => panic!("DELETE through the cut-off owner: {other:?}"),
    }
    // Answered as deleted: gone through every node, now and after the owner caught up.
    for round in 0..4 {
        for i in 0..3 {
            let got = call(&c, i, Method::GET, &path).await;
            assert!(
                matches!(got, Ok((404, _))),
                "round {round}: {id} came back after its DELETE was answered 204 (via {}): {got:?}",
                c.nodes[i].name
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The cluster holds no placement of it (a placement with a recovery point brings a
    // sandbox back wherever it lands next), also once the owner restarted and forgot that
    // it deleted it.
    let placed = |v: &serde_json::Value| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["sandboxes"].as_u64().unwrap())
            .sum::<u64>()
    };
    let view = c.view(others[0]).await.unwrap();
    assert_eq!(
        placed(&view),
        0,
        "a deleted sandbox is still placed: {view}"
    );
    c.restart(owner);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = call(&c, others[0], Method::GET, &path).await;
        match got {
            Ok((404, _)) => break,
            Ok((200, body)) => panic!("{id} came back after its owner restarted: {body}"),
            other => assert!(Instant::now() < deadline, "{other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(c.containers_of(&id), 0);
}

/// A sandbox whose recovery point cannot be read is never started without its files: while
/// the snapshot is missing every answer is retryable and names it; once it is back, the
/// sandbox comes back with its files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_whose_recovery_point_cannot_be_read_waits_for_it_instead_of_starting_blank() {
    let mut c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let (id, owner) = on_a_follower(&c, "unread").await;
    c.nodes[leader].client.sleep(&id).await.unwrap();
    // Its snapshots become unreadable (an outage of that part of the store, or an object
    // deleted behind the cluster's back); then its node dies.
    let manifests = c.store_dir().join("snapshots");
    let mut moved = Vec::new();
    for e in std::fs::read_dir(&manifests).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.contains(&format!("\"{id}\"")) {
            let away = path.with_extension("away");
            std::fs::rename(&path, &away).unwrap();
            moved.push((path, away));
        }
    }
    assert!(!moved.is_empty(), "no snapshot of {id} in {manifests:?}");
    c.kill(owner);
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut named = None;
    while Instant::now() < deadline {
        match exec_on(&c, leader, &id, "cat /workspace/log 2>&1 || true").await {
            Ok((node, out)) => panic!("{id} started on {node} without its files: {out:?}"),
            // A request that waited past the client's 5 s (the failover) got no answer yet.
            Err(e) if e.starts_with("error sending request") => {}
            Err(e) => {
                assert!(e.starts_with("503"), "not a retryable answer: {e}");
                if e.contains("\"snapshot\"") {
                    named = Some(e);
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let named = named.expect("no answer named the unreadable snapshot");
    assert!(named.contains("\"retryable\":true"), "{named}");
    // Readable again: the sandbox comes back with what it held.
    for (path, away) in &moved {
        std::fs::rename(away, path).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let content = loop {
        match exec_on(&c, leader, &id, "cat /workspace/log").await {
            Ok((_, out)) => break out,
            Err(e) => {
                assert!(Instant::now() < deadline, "did not come back: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };
    assert_eq!(content.trim(), "kept");
}

/// A request for a sandbox whose owner died waits for the failover (bounded) and is
/// answered by the new owner, with the sandbox's files, instead of failing while the
/// failure detector has not caught up yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_for_a_dead_owners_sandbox_waits_for_the_failover() {
    // A slow failure detector: the owner is unreachable for a while before it is called
    // down and its sandboxes move.
    let (mut c, id, owner) =
        checkpointed_on_a_follower_with("waits", "lease_ms = 2000\ndown_after_ms = 15000\n").await;
    let entry = c.leader().await;
    let owner_name = c.nodes[owner].name.clone();
    c.kill(owner);
    // Long enough for the entry node's pooled connection to the dead owner to time out
    // (6 s without an answer), short of the failure detector's 15 s.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let t = Instant::now();
    let r = c.nodes[entry]
        .client
        .request(Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&ExecRequest {
            command: Some("cat /workspace/log".into()),
            ..Default::default()
        })
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let node = r
        .headers()
        .get("x-warren-node")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    assert_eq!(
        status,
        200,
        "the request failed instead of waiting for the failover ({:?}): {body}",
        t.elapsed()
    );
    assert_ne!(node, owner_name);
    assert_eq!(
        body["stdout"].as_str().unwrap_or_default().trim(),
        "kept",
        "{body}"
    );
}

/// The names of the nodes that node `i`'s applied state records as down (None: no answer).
async fn recorded_down(c: &TestCluster, i: usize) -> Option<Vec<String>> {
    let v = c.view(i).await?;
    Some(
        v["nodes"]
            .as_array()?
            .iter()
            .filter(|n| n["state"] == "down")
            .filter_map(|n| n["id"].as_str().map(str::to_string))
            .collect(),
    )
}

/// A leader cut off alone finds every other node silent and proposes them down; those
/// writes cannot commit while it is cut off. When the cut heals it learns who leads now, and
/// its pending judgements must die with its term: handed to the new leader, they record
/// live, serving nodes as down (and their sandboxes are failed over from old checkpoints,
/// losing what they acknowledged since).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leaders_judgement_that_the_others_are_down_dies_with_its_term() {
    let (mut c, id, owner) = checkpointed_on_a_follower("deposed").await;
    let leader = c.leader().await;
    let others: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let majority_names: Vec<String> = others.iter().map(|&i| c.nodes[i].name.clone()).collect();
    let logged_before = c.nodes[leader].log.lock().unwrap().len();
    c.partition(&[leader], &others);
    // The cut-off leader judges the others down once they are silent for the failure
    // timeout (4 s); that write waits for a quorum (up to 10 s). The cut heals while it waits.
    let cut = Instant::now();
    let mut acked = Vec::new();
    let mut seq = 0;
    let mut judged_at = None;
    while judged_at.is_none_or(|t: Instant| t.elapsed() < Duration::from_secs(1)) {
        assert!(
            cut.elapsed() < Duration::from_secs(20),
            "the cut-off leader judged no node down"
        );
        seq += 1;
        let line = format!("{seq}-cut");
        if append(&c, owner, &id, &line).await.is_some() {
            acked.push(line);
        }
        if judged_at.is_none() {
            let log = c.nodes[leader].log.lock().unwrap();
            if log[logged_before..]
                .iter()
                .any(|l| l.contains("node liveness changed") && l.contains("state=Down"))
            {
                judged_at = Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.heal();
    let healed = Instant::now();
    let mut seen_down = Vec::new();
    while healed.elapsed() < Duration::from_secs(10) {
        for &i in &others {
            if let Some(down) = recorded_down(&c, i).await {
                for n in down.into_iter().filter(|n| majority_names.contains(n)) {
                    seen_down.push((healed.elapsed(), c.nodes[i].name.clone(), n));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        seen_down.is_empty(),
        "nodes that stayed with the majority were recorded down after the heal (when, seen by, node): {seen_down:?}"
    );
    let (node, content) = exec_on(&c, owner, &id, "cat /workspace/log")
        .await
        .expect("the sandbox answers");
    assert_eq!(node, c.nodes[owner].name, "the sandbox moved");
    for line in &acked {
        assert!(
            content.lines().any(|l| l == line),
            "acknowledged write {line} is lost: {content}"
        );
    }
    assert!(
        !acked.is_empty(),
        "the majority served nothing during the cut"
    );
}

/// The state node `name` has in the cluster view of node `i` (None: no answer).
async fn state_of(c: &TestCluster, i: usize, name: &str) -> Option<String> {
    let v = c.view(i).await?;
    v["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"] == name)
        .and_then(|n| n["state"].as_str().map(str::to_string))
}

/// A new leader gives the nodes it has heard from a grace period, not a node that is down
/// and silent: that one stays down until it answers. (Seen in CI: right after a node died, a
/// second change of leader marked the dead node up again, and new sandboxes were placed on
/// it and waited for a failover.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_keeps_a_dead_node_down_until_it_answers() {
    let mut c = TestCluster::start(5, 1).await;
    c.wait_voters_everywhere(5).await;
    let leader = c.leader().await;
    let dead = (0..5).find(|&i| i != leader).unwrap();
    let dead_name = c.nodes[dead].name.clone();
    c.kill(dead);
    let voters = |v: &serde_json::Value| {
        v["nodes"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|x| x["voter"] == true).count())
    };
    let down_and_settled = |v: &serde_json::Value| {
        voters(v) == 3
            && v["nodes"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|n| n["id"] == dead_name.as_str() && n["state"] == "down")
            })
    };
    assert!(
        c.wait(Duration::from_secs(40), down_and_settled).await,
        "the dead node was not recorded down with three voters left"
    );
    let old_leader = c.nodes[leader].name.clone();
    c.stop(leader);
    let running: Vec<usize> = (0..5).filter(|&i| i != leader && i != dead).collect();
    let t = Instant::now();
    let mut new_leader = None;
    let mut seen_up = Vec::new();
    while t.elapsed() < Duration::from_secs(15) {
        for &i in &running {
            if let Some(v) = c.view(i).await {
                if let Some(l) = v["leader"].as_str().filter(|l| *l != old_leader) {
                    new_leader.get_or_insert(l.to_string());
                }
            }
            if let Some(s) = state_of(&c, i, &dead_name).await {
                if s != "down" {
                    seen_up.push((t.elapsed(), c.nodes[i].name.clone(), s));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        new_leader.is_some(),
        "no new leader after stopping {old_leader}"
    );
    assert!(
        seen_up.is_empty(),
        "the dead node {dead_name} was recorded other than down after the leader changed to {new_leader:?}: {seen_up:?}"
    );
}

/// A node process that dies (`kill -9`: a crash, an OOM kill) leaves its containers running,
/// and nothing of it is left to freeze them. Once the lease it held has run out, the cluster
/// may start its sandboxes elsewhere, so their own processes must stop by themselves by then
/// (before: they ran on for as long as the node was gone); when the node comes back and
/// still owns them, they go on from where they stopped.
#[tokio::test]
async fn a_dead_nodes_sandboxes_stop_by_themselves_and_go_on_when_it_returns() {
    // No failover while the node is away: it comes back as the owner.
    let mut c = TestCluster::start_with(3, 1, "lease_ms = 2000\ndown_after_ms = 30000\n").await;
    c.wait_voters_everywhere(3).await;
    let (id, owner) = on_a_follower(&c, "deadman").await;
    let owner_name = c.nodes[owner].name.clone();
    // The sandbox's own work: a line every 100 ms, whoever calls it or not.
    c.nodes[owner]
        .client
        .start_process(
            &id,
            &warren_api::process::StartProcessRequest {
                command: Some("while :; do echo t >> /workspace/ticks; sleep 0.1; done".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let ticks = || lines_in_container(&owner_name, &id, "/workspace/ticks").unwrap_or(0);
    let grows_past = |n: usize, within: Duration| async move {
        let t = Instant::now();
        while t.elapsed() < within {
            if ticks() > n {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    };
    assert!(
        grows_past(5, Duration::from_secs(15)).await,
        "the process never wrote"
    );
    // The sandbox reads its node's fence and can neither change nor remove it.
    let tamper = "cat /.warren/fence/lease; \
        ! (echo 'warren-fence 1 off' > /.warren/fence/lease) 2>/dev/null \
        && ! rm -f /.warren/fence/lease 2>/dev/null \
        && ! mount -o remount,rw /.warren/fence 2>/dev/null \
        && ! mount -t tmpfs none /.warren/fence 2>/dev/null \
        && cat /.warren/fence/lease";
    let (_, out) = exec_on(&c, owner, &id, tamper)
        .await
        .expect("the sandbox changed its fence");
    assert!(
        out.lines().all(|l| l.starts_with("warren-fence 1 until ")),
        "{out}"
    );

    c.kill(owner);
    // Its lease ran out at most `LEASE` after it died; the guests look every 100 ms.
    tokio::time::sleep(LEASE + Duration::from_millis(1500)).await;
    let stopped_at = ticks();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = ticks();
    assert_eq!(
        stopped_at,
        later,
        "the dead node's sandbox went on: {} lines written between {:?} and {:?} after the node died",
        later - stopped_at,
        LEASE + Duration::from_millis(1500),
        LEASE + Duration::from_millis(4500)
    );

    c.restart(owner);
    assert!(
        grows_past(later + 5, Duration::from_secs(30)).await,
        "the sandbox's process did not go on once its node was back ({} lines)",
        ticks()
    );
    // The same container, not a new copy: nothing written before was lost.
    let (node, out) = exec_on(
        &c,
        owner,
        &id,
        "cat /workspace/log; wc -l < /workspace/ticks",
    )
    .await
    .unwrap();
    assert_eq!(node, owner_name);
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("kept"));
    let n: usize = lines.next().unwrap().trim().parse().unwrap();
    assert!(n > later, "{n} lines after the return, {later} before");
}
