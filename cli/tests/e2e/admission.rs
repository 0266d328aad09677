//! Admission across a cluster: a node at its sandbox limit is passed over for the next
//! rendezvous choice, and a cluster whose every node is full says so at once.

use super::cluster_harness::{exec_via, TestCluster};
use super::harness::unique;
use std::time::Duration;
use warren_consensus::NodeRecord;

/// Creates `sandbox` (an exec of `true`) entering node 0: the status, the node that ran it
/// and the error code, if any.
async fn create(c: &TestCluster, sandbox: &str) -> (u16, String, String) {
    let (status, node, body) = exec_via(c, 0, sandbox, "true").await;
    let code = body["code"].as_str().unwrap_or_default().to_string();
    (status, node, code)
}

/// Two nodes that each run at most two sandboxes. Three new ids whose first rendezvous choice
/// is the same node are all created: the third on the other node (before, its first choice
/// answered 503 `CAPACITY_EXHAUSTED` although the other node had room). With both full, a
/// fifth create is answered 503 `CAPACITY_EXHAUSTED` at once, naming the limit.
#[tokio::test]
async fn a_full_node_is_passed_over_and_a_full_cluster_says_so() {
    let c = TestCluster::start_with(2, 1, "max_sandboxes = 2\n").await;
    let announced = |v: &serde_json::Value| {
        v["nodes"]
            .as_array()
            .is_some_and(|a| a.len() == 2 && a.iter().all(|n| n["max_sandboxes"] == 2))
    };
    assert!(
        c.wait(Duration::from_secs(30), announced).await,
        "the nodes did not announce their limit: {:?}",
        c.view(0).await
    );
    let view = c.view(0).await.unwrap();
    let nodes: Vec<(u64, String)> = view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let id = n["raft_id"].as_u64().unwrap();
            (id, n["id"].as_str().unwrap().to_string())
        })
        .collect();
    let records: Vec<NodeRecord> = nodes
        .iter()
        .map(|(id, _)| NodeRecord::placeable(*id, "r1"))
        .collect();
    let (first, first_name) = nodes[0].clone();
    let preferring_first: Vec<String> = (0..)
        .map(|i| format!("adm{i}-{}", unique()))
        .filter(|id| warren_consensus::placement::owner_among(&records, id) == Some(first))
        .take(3)
        .collect();

    let mut ran = Vec::new();
    for id in &preferring_first {
        let (status, node, code) = create(&c, id).await;
        assert_eq!(status, 200, "{id}: {code}");
        ran.push(node);
    }
    assert_eq!(ran[0], first_name);
    assert_eq!(ran[1], first_name);
    assert_ne!(
        ran[2], first_name,
        "the full node was given a third sandbox"
    );

    // One more fits on the other node; after it, nothing fits anywhere.
    let other = format!("adm-other-{}", unique());
    assert_eq!(create(&c, &other).await.0, 200);
    let started = std::time::Instant::now();
    let (status, _, code) = create(&c, &format!("adm-full-{}", unique())).await;
    assert_eq!((status, code.as_str()), (503, "CAPACITY_EXHAUSTED"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a full cluster answered only after {:?}",
        started.elapsed()
    );
}

/// One node that lets its running sandboxes' limits add up to 5000 MiB and 1 CPU. A second
/// `standard-1` (4096 MiB, 0.5 CPU) is refused at once with 503 `CAPACITY_EXHAUSTED`, and
/// nothing of it is left (no record, no container); a `lite` one still fits. A sleeping
/// sandbox's limits do not count: once the first sleeps, the second starts, and waking the
/// first is refused in turn.
#[tokio::test]
async fn a_start_beyond_the_nodes_memory_is_refused_at_once_and_leaves_nothing() {
    use super::harness::{create as request, running_containers, Node};
    let node = Node::start_with(
        "127.0.0.1:0",
        &["--max-memory-mb", "5000", "--max-cpus", "1"],
    )
    .await;
    let c = &node.client;
    let standard = request(serde_json::json!({"instance_type": "standard-1"}));
    let lite = request(serde_json::json!({"instance_type": "lite"}));
    let (first, second, small) = (
        format!("adm-a-{}", unique()),
        format!("adm-b-{}", unique()),
        format!("adm-c-{}", unique()),
    );
    c.put_sandbox(&first, &standard).await.unwrap();

    let started = std::time::Instant::now();
    let refused = c.put_sandbox(&second, &standard).await.unwrap_err();
    assert_eq!(
        refused.code(),
        Some(warren_api::ErrorCode::CapacityExhausted),
        "{refused}"
    );
    assert!(refused.to_string().contains("5000 MiB"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(
        c.get_sandbox(&second).await.unwrap_err().code(),
        Some(warren_api::ErrorCode::SandboxNotFound)
    );
    assert!(running_containers(&second).is_empty());

    c.put_sandbox(&small, &lite).await.unwrap();
    c.sleep(&first).await.unwrap();
    c.put_sandbox(&second, &standard).await.unwrap();
    let woken = c.sh(&first, "true").await.unwrap_err();
    assert_eq!(
        woken.code(),
        Some(warren_api::ErrorCode::CapacityExhausted),
        "{woken}"
    );
    assert_eq!(node.metric("warren_admission_refused_total").await, 2);
    for id in [&first, &second, &small] {
        c.delete_sandbox(id).await.unwrap();
    }
}

/// A host with less memory available than the node keeps in reserve starts nothing: the
/// create is refused at once, naming the reserve, and leaves no container.
#[tokio::test]
async fn a_host_short_of_memory_starts_no_sandbox() {
    use super::harness::{create as request, running_containers, Node};
    // More than any host here has: the reserve is never met.
    let node = Node::start_with("127.0.0.1:0", &["--memory-reserve-mb", "100000000"]).await;
    let id = format!("adm-reserve-{}", unique());
    let refused = node
        .client
        .put_sandbox(&id, &request(serde_json::json!({})))
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(warren_api::ErrorCode::CapacityExhausted),
        "{refused}"
    );
    assert!(refused.to_string().contains("reserve"), "{refused}");
    assert!(running_containers(&id).is_empty());
}
