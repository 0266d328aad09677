//! A cluster across regions 20, 80 and 150 ms apart (a user-space relay delays every
//! datagram between the nodes' QUIC endpoints, `warren_cli::wan`), on default timing
//! settings: placements commit, requests are forwarded to the owner from every node, and a
//! node that joins late catches up.

use super::cluster_harness::{exec_via, TestCluster};
use super::harness::unique;
use std::time::{Duration, Instant};
use warren_cli::wan::DelayMatrix;

/// The round trips of the three regions.
pub fn three_regions() -> DelayMatrix {
    DelayMatrix::parse("r1/r2=20,r1/r3=80,r2/r3=150").unwrap()
}

/// Runs `echo {word}` in `sandbox` (created on first use) entering node `i`; the answer's
/// status, the node that ran it, and its stdout. A 503 is retried as the SDKs do, for at
/// most 20 s: a cluster that cannot commit at all fails here.
async fn echo_via(c: &TestCluster, i: usize, sandbox: &str, word: &str) -> (u16, String, String) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, node, body) = exec_via(c, i, sandbox, &format!("echo {word}")).await;
        if status == 503 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(250)).await;
            continue;
        }
        let stdout = body["stdout"].as_str().unwrap_or_default().to_string();
        return (status, node, format!("{stdout}{}", body["message"]));
    }
}

#[tokio::test]
async fn five_nodes_in_three_regions_up_to_150_ms_apart_commit_forward_and_catch_up() {
    let mut c = TestCluster::start_wan(5, 3, three_regions(), "").await;

    // One sandbox placed through each node: every placement commits across the regions.
    let ids: Vec<String> = (0..5).map(|i| format!("wan{i}-{}", unique())).collect();
    let placed = futures_util::future::join_all(
        ids.iter()
            .enumerate()
            .map(|(i, id)| echo_via(&c, i, id, "placed")),
    )
    .await;
    for (i, (status, node, out)) in placed.iter().enumerate() {
        assert_eq!(*status, 200, "placement through node {i}: {out}");
        assert!(
            !node.is_empty() && out.starts_with("placed"),
            "{node} {out}"
        );
    }

    // Every node reaches every sandbox: the owner answers, forwarded across the regions.
    for (k, id) in ids.iter().enumerate() {
        for i in 0..5 {
            let (status, node, out) = echo_via(&c, i, id, &format!("via{i}")).await;
            assert_eq!(status, 200, "{id} through node {i}: {out}");
            assert_eq!(node, placed[k].1, "{id} through node {i} ran elsewhere");
            assert!(out.starts_with(&format!("via{i}")), "{out}");
        }
    }

    // The relay is really in the path: the leader measures the round trips it adds.
    let leader = c.leader().await;
    let text = c.metrics_text(leader).await;
    let slowest = slowest_peer_rtt(&text);
    assert!(
        slowest >= 0.019,
        "the leader's slowest peer: {slowest} s\n{text}"
    );

    // A sixth node, in the farthest region, joins late and catches up: it serves the
    // sandboxes placed before it came.
    let late = c.add_node("r3").await;
    for (k, id) in ids.iter().enumerate() {
        let (status, node, out) = echo_via(&c, late, id, "late").await;
        assert_eq!(status, 200, "{id} through the late node: {out}");
        assert_eq!(node, placed[k].1);
    }
}

/// openraft gives each Raft call the heartbeat as its deadline; warren gives it three of the
/// longest round trips measured (`timing::call_deadline`). So a LAN heartbeat (100 ms) across
/// regions 150 ms apart: every node becomes a voter, placements commit, requests are
/// forwarded. With the heartbeat as the deadline, no AppendEntries call came back in time.
#[tokio::test]
async fn a_heartbeat_shorter_than_the_round_trip_still_commits_across_regions() {
    let far = DelayMatrix::parse("r1/r2=150,r1/r3=150,r2/r3=150").unwrap();
    let c = TestCluster::start_wan(3, 3, far, "heartbeat_ms = 100\n").await;
    c.wait_voters_everywhere(3).await;
    let ids: Vec<String> = (0..3).map(|i| format!("lanhb{i}-{}", unique())).collect();
    let mut owners = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let (status, node, out) = echo_via(&c, i, id, "placed").await;
        assert_eq!(status, 200, "placement through node {i}: {out}");
        owners.push(node);
    }
    for (k, id) in ids.iter().enumerate() {
        for i in 0..3 {
            let (status, node, out) = echo_via(&c, i, id, &format!("via{i}")).await;
            assert_eq!(status, 200, "{id} through node {i}: {out}");
            assert_eq!(node, owners[k], "{id} through node {i} ran elsewhere");
        }
    }
    let leader = c.leader().await;
    let text = c.metrics_text(leader).await;
    let slowest = slowest_peer_rtt(&text);
    assert!(slowest >= 0.14, "the leader's slowest peer: {slowest} s");
}

/// Each member's calls get their own deadline: three of the round trip measured to that
/// member (at least the heartbeat), or what the operator fixed for its region
/// (`raft_call_deadlines`). At a 100 ms heartbeat across 20/80/150 ms, with r3's links fixed
/// at 900 ms: placements commit through every node; the leader gives each member outside r3
/// three of its own round trip (a near one is not given the far one's), every node outside
/// r3 gives the r3 node 900 ms. With one deadline per process, every member got the longest.
#[tokio::test]
async fn each_member_gets_its_own_call_deadline_and_an_operator_may_fix_a_regions() {
    let settings = "heartbeat_ms = 100\nraft_call_deadlines = [\"r3=900\"]\n";
    let c = TestCluster::start_wan(3, 3, three_regions(), settings).await;
    c.wait_voters_everywhere(3).await;
    for i in 0..3 {
        let id = format!("dl{i}-{}", unique());
        let (status, _, out) = echo_via(&c, i, &id, "placed").await;
        assert_eq!(status, 200, "placement through node {i}: {out}");
    }
    let region_of = |name: &str| {
        c.nodes
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.region.clone())
            .unwrap_or_default()
    };
    // (from, to) region pairs and the round trips between them.
    let rtt_ms = |a: &str, b: &str| -> f64 {
        match (a.min(b), a.max(b)) {
            ("r1", "r2") => 20.0,
            ("r1", "r3") => 80.0,
            _ => 150.0,
        }
    };
    // The leader calls every member and so has measured the round trip to each: its
    // deadlines follow them (sized every supervisor tick; wait until each was measured).
    let leader = c.leader().await;
    let (me, my_region) = (&c.nodes[leader].name, &c.nodes[leader].region);
    let want_of = |peer: &str| {
        let to = region_of(peer);
        (to != "r3").then(|| (3.0 * rtt_ms(my_region, &to)).max(100.0))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let peers = loop {
        let peers = call_deadlines(&c.metrics_text(leader).await);
        let settled = peers.len() == 2
            && (peers.iter()).all(|(p, ms)| want_of(p).is_none_or(|want| *ms >= want * 0.9));
        if settled || Instant::now() > deadline {
            break peers;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(
        peers.len(),
        2,
        "the leader {me}'s call deadlines: {peers:?}"
    );
    for (peer, ms) in &peers {
        match want_of(peer) {
            None => assert_eq!(*ms, 900.0, "{me} -> {peer} (r3, fixed): {peers:?}"),
            Some(want) => assert!(
                *ms >= want * 0.9 && *ms <= want * 2.0,
                "{me} ({my_region}) -> {peer} ({}): {ms} ms, want about {want} ms (3 round \
                 trips, at least the heartbeat): {peers:?}",
                region_of(peer)
            ),
        }
    }
    // Every other node outside r3 gives the r3 node the fixed deadline, measured or not.
    for (i, node) in c.nodes.iter().enumerate().filter(|(_, n)| n.region != "r3") {
        let peers = call_deadlines(&c.metrics_text(i).await);
        let to_r3 = peers.iter().find(|(p, _)| region_of(p) == "r3");
        assert_eq!(
            to_r3.map(|(_, ms)| *ms),
            Some(900.0),
            "{} -> r3: {peers:?}",
            node.name
        );
    }
}

/// Every `warren_raft_call_deadline_ms{peer="…"}` series of a node's metrics.
fn call_deadlines(metrics: &str) -> Vec<(String, f64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("warren_raft_call_deadline_ms{peer=\""))
        .filter_map(|l| {
            let (peer, rest) = l.split_once('"')?;
            Some((peer.to_string(), rest.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// The longest round trip (seconds) a node's metrics give for its peers.
fn slowest_peer_rtt(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("warren_peer_rtt_seconds{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, f64::max)
}

/// One unlabelled gauge of a node's metrics (-1 where the node says "none").
fn gauge(text: &str, name: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(i64::MIN, |v| v as i64)
}

/// A node that joins after the leader has cut its Raft log cannot be sent the entries it
/// lacks: it must receive a snapshot of the cluster state, from another region across the
/// relay, on default timing. Snapshots are taken every 20 entries here (`raft_snapshot_every`)
/// so that a few placements cut the log. The state carries 80 secrets of 16 KiB (sealed: over
/// 1.25 MiB), sent in messages of 256 KiB (`raft_snapshot_chunk_kb`): the snapshot takes
/// five messages and more, each a round trip of up to 150 ms and each under its own deadline.
#[tokio::test]
async fn a_node_that_joins_after_the_log_was_cut_catches_up_by_snapshot_across_regions() {
    let settings = "raft_snapshot_every = 20\nraft_snapshot_chunk_kb = 256\n";
    let mut c = TestCluster::start_wan(3, 3, three_regions(), settings).await;
    let leader = c.leader().await;
    const SECRETS: usize = 80;
    for k in 0..SECRETS {
        // 1024 × 16 hex digits: 16 KiB.
        let value: String = (0..1024)
            .map(|i| {
                format!(
                    "{:016x}",
                    ((k * 1024 + i) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                )
            })
            .collect();
        c.nodes[k % 3]
            .client
            .put_secret(&format!("big-{k}"), &value)
            .await
            .unwrap_or_else(|e| panic!("secret {k}: {e}"));
    }

    // Placements through every node until the leader has deleted part of its log (and six
    // at least).
    let (mut ids, deadline) = (Vec::new(), Instant::now() + Duration::from_secs(180));
    let purged = loop {
        let text = c.metrics_text(leader).await;
        let purged = gauge(&text, "warren_raft_purged_index");
        // The cluster's own entries (members, leases) cut the log early: a few sandboxes
        // more give the snapshot something to carry.
        if purged > 0 && ids.len() >= 6 {
            break purged;
        }
        assert!(
            Instant::now() < deadline && ids.len() < 60,
            "the leader never cut its log after {} placements (purged index {purged}, last \
             log {}, snapshot {})",
            ids.len(),
            gauge(&text, "warren_raft_last_log_index"),
            gauge(&text, "warren_raft_snapshot_index"),
        );
        let id = format!("cut{}-{}", ids.len(), unique());
        let (status, node, out) = echo_via(&c, ids.len() % 3, &id, "placed").await;
        assert_eq!(status, 200, "placement of {id}: {out}");
        ids.push((id, node));
    };

    // A node in the farthest region joins and serves every sandbox placed before it came,
    // from its own state: it got there by a snapshot, since the log before `purged` is gone.
    let late = c.add_node("r3").await;
    for (id, owner) in &ids {
        let (status, node, out) = echo_via(&c, late, id, "late").await;
        assert_eq!(status, 200, "{id} through the late node: {out}");
        assert_eq!(&node, owner, "{id} through the late node ran elsewhere");
    }
    let names = c.nodes[late]
        .client
        .secrets()
        .await
        .expect("secrets via the late node");
    assert_eq!(
        names
            .secrets
            .iter()
            .filter(|s| s.name.starts_with("big-"))
            .count(),
        SECRETS,
        "the late node lists these secrets"
    );
    let text = c.metrics_text(late).await;
    let (applied, snapshot, chunks) = (
        gauge(&text, "warren_raft_applied_index"),
        gauge(&text, "warren_raft_snapshot_index"),
        gauge(&text, "warren_raft_snapshot_chunks_received_total"),
    );
    assert!(
        applied >= purged && snapshot >= purged,
        "the late node applied {applied}, holds a snapshot to {snapshot}; the leader had cut \
         its log to {purged} before it joined"
    );
    // 256 KiB each: five carry the secrets' 1.25 MiB at least.
    assert!(
        chunks >= 5,
        "the late node took {chunks} snapshot messages of 256 KiB: the MiB snapshot was not \
         sent to it"
    );
    eprintln!(
        "log cut to {purged} after {} placements; the late node took {chunks} snapshot \
         messages, applied {applied}",
        ids.len()
    );
}

/// Clients in every region append to one sandbox per node while the leader's region is cut
/// off from the other two for longer than the failure timeout (default timing): the majority
/// elects a leader, fails the cut-off owners' sandboxes over and keeps serving; once healed,
/// nothing acknowledged is lost beyond the cut-off owners' loss window and no two copies of a
/// sandbox ever took appends together (`history::check`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_region_cut_off_keeps_one_owner_per_sandbox_and_loses_at_most_the_loss_window()
{
    use super::cluster_harness::ids_on;
    use super::histories::{entry_down, join_all, judge, settled_files, start_clients};
    use super::history::{Allowances, Op, Outcome};

    // Five nodes checkpointing every second collect garbage all the time: a grace keeps the
    // chunks of a snapshot being written (with none, a run lost a recovery point's chunk to
    // another node's collection, and its sandbox could not start after the failover).
    let c = TestCluster::start_wan(
        5,
        3,
        three_regions(),
        "checkpoint_every_s = 1\nsnapshot_gc_grace_s = 600\n",
    )
    .await;
    c.wait_voters_everywhere(5).await;
    let leader = c.leader().await;
    let region = c.nodes[leader].region.clone();
    let cut: Vec<usize> = (0..5).filter(|&i| c.nodes[i].region == region).collect();
    let cut_names: Vec<String> = cut.iter().map(|&i| c.nodes[i].name.clone()).collect();
    let loss_window = c.view(leader).await.unwrap()["loss_window_s"]
        .as_u64()
        .expect("checkpoints are on");
    // One sandbox owned by each node, created through the node itself: a new sandbox goes
    // to a node of the region it is created in.
    let mut sandboxes = Vec::new();
    for (i, n) in c.nodes.iter().enumerate() {
        sandboxes.extend(ids_on(&c, i, &n.name, 1).await);
    }
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(45));
    let at = |s: u64| async move {
        let t = Duration::from_secs(s);
        if let Some(wait) = t.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    };

    at(5).await;
    eprintln!("nemesis: cutting the leader's region {region} ({cut_names:?}) off");
    let cut_at = start.elapsed();
    c.cut_off_region(&region, true);
    at(25).await;
    c.cut_off_region(&region, false);
    let healed_at = start.elapsed();
    eprintln!("nemesis: healed");

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    // A checkpoint of a busy debug-build sandbox takes a few seconds on this machine.
    let window = Duration::from_secs(loss_window + 4);
    let lost_ok = |o: &Op| {
        matches!(&o.outcome, Outcome::Acked { node, .. } if cut_names.contains(node))
            && o.sent < healed_at
            && o.ended + window >= cut_at
    };
    let down: Vec<(usize, Duration, Duration)> =
        cut.iter().map(|&i| (i, cut_at, healed_at)).collect();
    let unanswered = |o: &Op| entry_down(&down, o);
    judge(
        &ops,
        &files,
        &Allowances {
            may_lose: &lost_ok,
            may_go_unanswered: &unanswered,
        },
    );
    // The majority served through the cut: appends entering it were acknowledged then.
    let served_during_cut = ops
        .iter()
        .filter(|o| {
            !cut.contains(&o.entry)
                && o.sent > cut_at + Duration::from_secs(12)
                && o.ended < healed_at
                && matches!(o.outcome, Outcome::Acked { .. })
        })
        .count();
    assert!(
        served_during_cut > 0,
        "the majority served nothing while the leader's region was cut off"
    );
}
