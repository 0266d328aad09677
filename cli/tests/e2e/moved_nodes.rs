//! A member that comes back on other addresses (its machine moved, or a backup was restored
//! on a new one) is reached there: it tells the cluster itself, and nothing of it is lost
//! meanwhile.

use super::cluster_harness::{exec_via, ids_on, owner_of, TestCluster};
use std::time::Duration;

/// Whether `view` lists node `name` as up at `api_addr` and `peer_addr`.
fn listed_at(view: &serde_json::Value, name: &str, api_addr: &str, peer_addr: &str) -> bool {
    view["nodes"].as_array().is_some_and(|nodes| {
        nodes.iter().any(|n| {
            n["id"] == name
                && n["api_addr"] == api_addr
                && n["peer_addr"] == peer_addr
                && n["state"] == "up"
        })
    })
}

/// Node `i`'s API and peer addresses as its configuration has them now.
fn addresses_of(c: &TestCluster, i: usize) -> (String, String) {
    let api = c.nodes[i].url.trim_start_matches("http://").to_string();
    (api, format!("127.0.0.1:{}", c.nodes[i].peer_port))
}

/// A follower restarted on other API and peer ports: every node lists its new addresses,
/// requests for its sandbox entering another node reach it there with its file (it also
/// needs the leader's Raft to reach it: a lease counts only once applied), nothing of it
/// moved away, and a request entering it reaches a sandbox elsewhere.
#[tokio::test]
async fn a_member_restarted_on_other_addresses_is_reached_there_and_keeps_its_sandboxes() {
    let mut c = TestCluster::start_with(3, 1, "down_after_ms = 20000\nlease_ms = 2000\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let (moved, via) = ((leader + 1) % 3, (leader + 2) % 3);
    let name = c.nodes[moved].name.clone();
    let theirs = ids_on(&c, via, &name, 1).await.remove(0);
    let (status, _, body) = exec_via(&c, via, &theirs, "echo kept > /workspace/mark").await;
    assert_eq!(status, 200, "{body}");
    let elsewhere = ids_on(&c, via, &c.nodes[via].name.clone(), 1)
        .await
        .remove(0);
    let before = addresses_of(&c, moved);

    c.restart_elsewhere(moved);
    let (api, peer) = addresses_of(&c, moved);
    assert_ne!((&api, &peer), (&before.0, &before.1));
    let listed = |v: &serde_json::Value| listed_at(v, &name, &api, &peer);
    assert!(
        c.wait_everywhere(Duration::from_secs(30), listed).await,
        "not every node lists {name} at {api} / {peer}: {:?}",
        [c.view(0).await, c.view(1).await, c.view(2).await]
    );
    let (status, node, body) = exec_via(&c, via, &theirs, "cat /workspace/mark").await;
    assert_eq!((status, node.as_str()), (200, name.as_str()), "{body}");
    assert_eq!(body["stdout"], "kept\n");
    assert_eq!(owner_of(&c, leader, &theirs).await, name);
    let (status, node, body) = exec_via(&c, moved, &elsewhere, "true").await;
    assert_eq!(
        (status, node.as_str()),
        (200, c.nodes[via].name.as_str()),
        "{body}"
    );
}
