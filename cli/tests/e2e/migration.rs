//! Sandboxes moving between nodes: drain, and a failed owner's sandboxes coming back on
//! survivors from their last checkpoint (and the failed node's copy removed when it returns).

use super::cluster_harness::{
    any_overlap, describe_spans, ids_on, logged_spans, owner_of, wait_moved, TestCluster,
};
use super::harness::unique;
use reqwest::Method;
use std::time::{Duration, Instant};
use warren_api::sandbox::SandboxState;

/// Waits until a checkpoint of `sandbox` taken from now on is listed, and committed.
async fn wait_checkpoint(client: &warren_client::Client, sandbox: &str) {
    let written = warren_api::time::now_rfc3339();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snaps = client
            .list_snapshots(Some(sandbox))
            .await
            .unwrap()
            .snapshots;
        if snaps.iter().any(|s| s.created_at > written) {
            // The owner commits the checkpoint to the cluster right after writing it.
            tokio::time::sleep(Duration::from_secs(2)).await;
            return;
        }
        assert!(Instant::now() < deadline, "no checkpoint was taken");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Restarts the failed node `victim`: its stale copy of `sandbox` goes, one container
/// remains.
async fn restart_drops_stale_copy(c: &mut TestCluster, victim: usize, sandbox: &str) {
    c.restart(victim);
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.containers_of(sandbox) != 1 {
        assert!(
            Instant::now() < deadline,
            "the returning node kept its stale copy"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn migration_drain_moves_running_and_sleeping_sandboxes_with_their_files() {
    let c = TestCluster::start(3, 1).await;
    let x = c.nodes[0].name.clone();
    let ids = ids_on(&c, 1, &x, 2).await;
    let (running, sleeping) = (&ids[0], &ids[1]);
    let client = &c.nodes[1].client;
    for id in &ids {
        let r = client
            .sh(id, &format!("mkdir -p /workspace/d && echo {id} > /workspace/d/f && head -c 2000000 /dev/urandom > /workspace/d/r && sha256sum /workspace/d/r > /workspace/sum"))
            .await
            .unwrap();
        assert_eq!(r.exit_code, 0, "{}", r.stderr);
    }
    client.sleep(sleeping).await.unwrap();

    let r = client
        .request(Method::POST, &format!("/v1/cluster/nodes/{x}/drain"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let new_owner = wait_moved(&c, 2, running, &x).await;
    // A running sandbox resumes on its new node by itself (no request needed).
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.nodes[2].client.get_sandbox(running).await.unwrap().state != SandboxState::Running {
        assert!(
            Instant::now() < deadline,
            "the moved sandbox did not resume"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = c.nodes[2]
        .client
        .sh(
            running,
            "cat /workspace/d/f; sha256sum -c /workspace/sum >/dev/null && echo intact",
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, format!("{running}\nintact\n"));
    let served_by = owner_of(&c, 2, running).await;
    assert_eq!(served_by, new_owner);
    assert_ne!(served_by, x);
    assert_eq!(
        c.containers_of(running),
        1,
        "one container, on the new node"
    );

    wait_moved(&c, 2, sleeping, &x).await;
    let s = c.nodes[2].client.get_sandbox(sleeping).await.unwrap();
    assert_eq!(
        s.state,
        SandboxState::Sleeping,
        "a sleeping sandbox moves asleep"
    );
    let r = c.nodes[2]
        .client
        .sh(sleeping, "cat /workspace/d/f")
        .await
        .unwrap();
    assert_eq!(
        r.stdout,
        format!("{sleeping}\n"),
        "wakes on the new node with its files"
    );
    assert_ne!(owner_of(&c, 2, sleeping).await, x);
}

/// Calls sent while a drain moves the sandbox are answered, or refused with a retryable
/// 503, and no answered call is lost: each increments a counter file, and the counter on
/// the new node is at least the number of answered increments.
#[tokio::test]
async fn migration_calls_during_a_drain_are_answered_and_none_is_lost() {
    let c = TestCluster::start(3, 1).await;
    let x = c.nodes[0].name.clone();
    let id = ids_on(&c, 1, &x, 1).await.remove(0);
    let r = c.nodes[1]
        .client
        .sh(&id, "mkdir -p /workspace && echo 0 > /workspace/n")
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (client, id, stop) = (c.nodes[1].client.clone(), id.clone(), stop.clone());
        tokio::spawn(async move {
            let (mut answered, mut refused, mut wrong) = (0u64, 0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let inc = "n=$(cat /workspace/n) && echo $((n+1)) > /workspace/n";
                match client.sh(&id, inc).await {
                    Ok(r) if r.exit_code == 0 => answered += 1,
                    Ok(r) => wrong.push(format!("exit {}: {}", r.exit_code, r.stderr)),
                    Err(warren_client::Error::Api { status: 503, .. }) => refused += 1,
                    Err(e) => wrong.push(e.to_string()),
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (answered, refused, wrong)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = c.nodes[1]
        .client
        .request(Method::POST, &format!("/v1/cluster/nodes/{x}/drain"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    wait_moved(&c, 2, &id, &x).await;
    // Keep calling for a moment on the new node too.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (answered, refused, wrong) = prober.await.unwrap();
    assert!(wrong.is_empty(), "calls failed during the move: {wrong:?}");
    assert!(answered > 0);
    let r = c.nodes[2].client.sh(&id, "cat /workspace/n").await.unwrap();
    let n: u64 = r.stdout.trim().parse().unwrap();
    assert!(
        n >= answered && n <= answered + refused,
        "counter {n} after {answered} answered and {refused} refused increments"
    );
    assert_eq!(c.containers_of(&id), 1);
}

#[tokio::test]
async fn migration_after_kill_9_survivors_serve_the_last_checkpoint() {
    let mut c = TestCluster::start_with(3, 1, "checkpoint_every_s = 1").await;
    let leader = c.leader().await;
    let victim = (leader + 1) % 3;
    let x = c.nodes[victim].name.clone();
    let via = (victim + 1) % 3;
    let id = ids_on(&c, via, &x, 1).await.remove(0);
    let client = c.nodes[via].client.clone();
    client
        .sh(
            &id,
            "mkdir -p /workspace/d && echo checkpointed > /workspace/d/f",
        )
        .await
        .unwrap();
    wait_checkpoint(&client, &id).await;

    c.kill(victim);
    let other = (victim + 2) % 3;
    wait_moved(&c, other, &id, &x).await;
    let r = c.nodes[other]
        .client
        .sh(&id, "cat /workspace/d/f")
        .await
        .unwrap();
    assert_eq!(r.stdout, "checkpointed\n");

    restart_drops_stale_copy(&mut c, victim, &id).await;
    let r = c.nodes[victim]
        .client
        .sh(&id, "cat /workspace/d/f")
        .await
        .unwrap();
    assert_eq!(r.stdout, "checkpointed\n");
}

/// A policy set after the sandbox's last recovery point was taken holds on the node that
/// brings it back after its owner died (before, the new owner applied the checkpoint's).
#[tokio::test]
async fn migration_after_kill_9_the_new_owner_applies_the_policy_set_after_the_last_checkpoint() {
    // No periodic checkpoint in the test's time: the recovery point is the record the owner
    // publishes when the sandbox is new.
    let mut c = TestCluster::start_with(3, 1, "checkpoint_every_s = 3600").await;
    let leader = c.leader().await;
    let victim = (leader + 1) % 3;
    let x = c.nodes[victim].name.clone();
    let via = (victim + 1) % 3;
    let id = ids_on(&c, via, &x, 1).await.remove(0);
    let client = c.nodes[via].client.clone();
    // Published within a tick of the owner's loop (1 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let policy: warren_api::egress::EgressPolicy = serde_json::from_value(serde_json::json!({
        "default": "deny", "allow_hosts": ["api.example.com"]
    }))
    .unwrap();
    let set = client.put_egress(&id, &policy).await.unwrap();

    c.kill(victim);
    let other = (victim + 2) % 3;
    wait_moved(&c, other, &id, &x).await;
    let after = c.nodes[other].client.egress(&id).await.unwrap();
    assert_eq!(after, set);
}

#[tokio::test]
async fn migration_a_joining_node_takes_over_the_ids_it_wins() {
    joining_node_takes_over(TestCluster::start(2, 1).await).await;
}

/// A local S3 server (moto) with `bucket`, and the object store location of the cluster's
/// nodes in it. The server stops when the first value is dropped.
async fn s3_bucket(bucket: &str) -> (super::s3::moto::Moto, String) {
    use super::s3::moto;
    moto::set_test_credentials();
    let server = moto::Moto::start().await;
    server.bucket(bucket).await;
    let location = moto::location(server.port, bucket, "c");
    (server, location)
}

#[tokio::test]
async fn migration_through_s3_a_joining_node_takes_over_the_ids_it_wins() {
    let (_moto, location) = s3_bucket("warren-join").await;
    joining_node_takes_over(TestCluster::start_on_store(2, "", &location).await).await;
}

/// A third node joins a cluster of two: the ids it wins move to it with their files, the
/// others stay, and nothing moves back and forth.
async fn joining_node_takes_over(mut c: TestCluster) {
    let client = c.nodes[0].client.clone();
    // Ids the third node (id 3) will win, and ids it will not, by the placement function.
    let node = |id: u64| warren_consensus::NodeRecord::placeable(id, "r1");
    let three = [node(1), node(2), node(3)];
    let (mut won, mut kept) = (Vec::new(), Vec::new());
    while won.len() < 2 || kept.len() < 3 {
        let id = format!("join-{}", unique());
        match warren_consensus::placement::owner_among(&three, &id) {
            Some(3) if won.len() < 2 => won.push(id),
            Some(1 | 2) if kept.len() < 3 => kept.push(id),
            _ => {}
        }
    }
    let ids: Vec<String> = won.iter().chain(&kept).cloned().collect();
    for id in &ids {
        let r = client
            .sh(id, &format!("echo {id} > /workspace/who"))
            .await
            .unwrap();
        assert_eq!(r.exit_code, 0);
    }
    let new = c.add_node("r1").await;
    let new_name = c.nodes[new].name.clone();
    let deadline = Instant::now() + Duration::from_secs(90);
    let owners = loop {
        let mut owners = Vec::new();
        for id in &ids {
            owners.push(
                client
                    .get_sandbox(id)
                    .await
                    .map(|s| s.node)
                    .unwrap_or_default(),
            );
        }
        if owners[..2].iter().all(|o| *o == new_name) {
            break owners;
        }
        assert!(
            Instant::now() < deadline,
            "the new node did not take over what it wins: {owners:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    assert!(
        owners[2..].iter().all(|o| *o != new_name),
        "ids the new node does not win stay: {owners:?}"
    );
    // Every sandbox answers with its files, wherever it lives now, from every node.
    for (id, _) in ids.iter().zip(&owners) {
        for n in &c.nodes {
            let r = n.client.sh(id, "cat /workspace/who").await.unwrap();
            assert_eq!(r.stdout, format!("{id}\n"));
        }
        assert_eq!(c.containers_of(id), 1, "{id} runs once");
    }
    // Settled: nothing moves back and forth.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for (id, before) in ids.iter().zip(&owners) {
        let now = client.get_sandbox(id).await.unwrap().node;
        assert_eq!(&now, before, "{id} stays where it is");
    }
}

#[tokio::test]
async fn migration_preview_calls_during_a_drain_follow_the_move() {
    use super::preview::{entering, expose, node_addr, preview_client, start_server};
    let c = TestCluster::start(3, 1).await;
    let x = c.nodes[0].name.clone();
    let id = ids_on(&c, 1, &x, 1).await.remove(0);
    let client = c.nodes[1].client.clone();
    start_server(&client, &id, 8100).await;
    // Entering the owner that is about to drain: the one that must not serve mid-move.
    let url = entering(&expose(&client, &id, 8100).await, &c.nodes[0].url);
    let addr = node_addr(&c.nodes[0].url);
    let http = preview_client(&url, addr);
    assert_eq!(http.get(&url).send().await.unwrap().status(), 200);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let prober = {
        let (http, url, stop) = (http.clone(), url.clone(), stop.clone());
        tokio::spawn(async move {
            let mut statuses = std::collections::BTreeMap::<u16, u32>::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let status = match http.get(&url).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                *statuses.entry(status).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            statuses
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let r = client
        .request(Method::POST, &format!("/v1/cluster/nodes/{x}/drain"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let new_owner = wait_moved(&c, 1, &id, &x).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = prober.await.unwrap();
    // Served before the move; then the move's wait, and after it the new owner, where the
    // server (a process) did not come along: 502. Never a copy woken on the old node.
    assert!(statuses.get(&200).is_some_and(|n| *n > 0), "{statuses:?}");
    assert!(
        statuses.keys().all(|s| [200, 502, 503].contains(s)),
        "{statuses:?}"
    );
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 502, "the old node forwards to {new_owner}");
    assert_eq!(c.containers_of(&id), 1);
    // The server started again on the new owner answers through the drained node.
    start_server(&client, &id, 8100).await;
    let r = http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "hello from 8100");
}

#[tokio::test]
async fn migration_through_s3_drain_and_kill_9_keep_the_files() {
    let (_moto, location) = s3_bucket("warren-cluster").await;
    let mut c = TestCluster::start_on_store(3, "checkpoint_every_s = 1", &location).await;
    let x = c.nodes[0].name.clone();
    let id = ids_on(&c, 1, &x, 1).await.remove(0);
    let client = c.nodes[1].client.clone();
    let r = client
        .sh(&id, "mkdir -p /workspace/d && echo through-s3 > /workspace/d/f && head -c 3000000 /dev/urandom > /workspace/d/r && sha256sum /workspace/d/r > /workspace/sum")
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);

    // Drain: the snapshot goes through the bucket to the new owner.
    let r = client
        .request(Method::POST, &format!("/v1/cluster/nodes/{x}/drain"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let owner = wait_moved(&c, 1, &id, &x).await;
    let check = "cat /workspace/d/f && sha256sum -c /workspace/sum";
    let r = client.sh(&id, check).await.unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);
    assert!(r.stdout.starts_with("through-s3\n"), "{}", r.stdout);

    // Kill -9 of the new owner after a checkpoint: a survivor restores it from the bucket.
    client
        .sh(&id, "echo after-drain > /workspace/d/g")
        .await
        .unwrap();
    wait_checkpoint(&client, &id).await;
    let victim = c.index_of(&owner);
    c.kill(victim);
    let via = (0..3).find(|i| *i != victim && *i != 0).unwrap();
    wait_moved(&c, via, &id, &owner).await;
    let r = c.nodes[via]
        .client
        .sh(&id, &format!("{check} && cat /workspace/d/g"))
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);
    assert!(r.stdout.ends_with("after-drain\n"), "{}", r.stdout);
    restart_drops_stale_copy(&mut c, victim, &id).await;
}

/// A drain moves a node's sandboxes several at once: each move's span (from its log line
/// "sandbox moved … ms=N": it ended at the line and began N ms before) overlaps another's.
/// They ran strictly one after another before, so the drain of a node took the sum of all
/// its sandboxes' saves.
#[tokio::test]
async fn a_drain_moves_the_sandboxes_of_a_node_several_at_once() {
    let c = TestCluster::start_logging(3, "warn,warren_control::migrate=info").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let from = (leader + 1) % 3;
    let name = c.nodes[from].name.clone();
    let ids = ids_on(&c, leader, &name, 8).await;
    let client = &c.nodes[leader].client;
    for id in &ids {
        // Enough to save that a move takes a moment.
        let r = client
            .sh(
                id,
                &format!("echo {id} > /workspace/f && head -c 8000000 /dev/urandom > /workspace/r"),
            )
            .await
            .unwrap();
        assert_eq!(r.exit_code, 0, "{}", r.stderr);
    }
    super::cluster_harness::drain(&c, leader, &name).await;
    for id in &ids {
        wait_moved(&c, leader, id, &name).await;
        let r = client.sh(id, "cat /workspace/f").await.unwrap();
        assert_eq!(
            r.stdout.trim(),
            id.as_str(),
            "{id} lost its file in the move"
        );
    }
    let spans = logged_spans(&c, from, "sandbox moved", &ids);
    assert_eq!(
        spans.len(),
        ids.len(),
        "one move logged per sandbox: {spans:?}"
    );
    eprintln!("moves: {}", describe_spans(&spans));
    let overlapping = any_overlap(&spans);
    assert!(
        overlapping,
        "the drain moved one sandbox after another: {spans:?}"
    );
}

/// Firewall tools that fail on every node but the one whose config file is named in `flag`,
/// while `flag` exists; the config lines that give them to the nodes.
fn firewall_broken_but_on(dir: &std::path::Path, flag: &std::path::Path) -> String {
    let [iptables, ip6tables] = super::harness::breakable_firewall_tools(
        dir,
        &format!(
            "[ -e {f} ] && ! tr '\\0' ' ' < /proc/$PPID/cmdline | grep -qF \"$(cat {f})\"",
            f = flag.display()
        ),
    );
    format!("iptables = \"{iptables}\"\nip6tables = \"{ip6tables}\"\n")
}

/// A sandbox handed over while it runs must run again on its new node without a request,
/// also when that node could not start it when it arrived: here every other node's firewall
/// cannot be put in place during the move (the node refuses to start sandboxes, as it does
/// while it holds no lease from the majority). Before, the refused start was not tried
/// again: the sandbox slept until a request woke it.
#[tokio::test]
async fn migration_a_moved_sandbox_refused_at_first_runs_once_its_new_node_may_start_it() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("spared");
    let c = TestCluster::start_with(3, 1, &firewall_broken_but_on(dir.path(), &flag)).await;
    let x = c.nodes[0].name.clone();
    let id = ids_on(&c, 0, &x, 1).await.remove(0);
    let client = &c.nodes[0].client;
    let r = client.sh(&id, "echo moved > /workspace/f").await.unwrap();
    assert_eq!(r.exit_code, 0, "{}", r.stderr);

    // Only the draining node keeps its firewall; the others notice at their next check.
    std::fs::write(&flag, c.nodes[0].config.display().to_string()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in &c.nodes[1..] {
        while reqwest::get(format!("{}/healthz", node.url))
            .await
            .unwrap()
            .status()
            != 503
        {
            assert!(
                Instant::now() < deadline,
                "{} did not find its firewall broken",
                node.name
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    super::cluster_harness::drain(&c, 0, &x).await;
    let new_owner = wait_moved(&c, 0, &id, &x).await;
    // Taken over asleep, and not started: its new node may not start sandboxes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = client.get_sandbox(&id).await.unwrap();
    assert_eq!(
        (s.node.as_str(), s.state),
        (new_owner.as_str(), SandboxState::Sleeping),
        "the new owner started it with its firewall broken"
    );

    // The firewall holds again: the sandbox runs, with no request asking for it.
    std::fs::remove_file(&flag).unwrap();
    let deadline = Instant::now() + Duration::from_secs(45);
    while client.get_sandbox(&id).await.unwrap().state != SandboxState::Running {
        assert!(
            Instant::now() < deadline,
            "the sandbox taken over still sleeps 45 s after its new node may start it"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let r = client.sh(&id, "cat /workspace/f").await.unwrap();
    assert_eq!(r.stdout.trim(), "moved");
}
