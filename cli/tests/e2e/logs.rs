//! The node's log as an operator reads it: one JSON object per line (`--log-format json`),
//! one access line per request, every line of a request's work in its span (request id,
//! sandbox, node, region), server errors logged, and dependencies quiet by default.

use super::harness::{sh, unique, Node};

fn lines(node: &Node) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(node.log_file.as_ref().unwrap()).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

#[tokio::test]
async fn json_lines_carry_the_request_span_and_an_access_line_per_request() {
    let node = Node::start_logged(&["--log-format", "json"]).await;
    let id = format!("logs-{}", unique());
    let rid = format!("probe-{}", unique());
    // A first call creates the sandbox: the manager's "sandbox created" line is logged
    // while the handler runs, so it must carry this request's span.
    let r = node
        .req(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .header("x-request-id", &rid)
        .json(&serde_json::json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    sh(&node.client, &id, "true").await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let all = lines(&node);
    let of_request: Vec<&serde_json::Value> = all
        .iter()
        .filter(|l| l["span"]["request_id"] == rid.as_str())
        .collect();
    let created = of_request
        .iter()
        .find(|l| l["fields"]["message"] == "sandbox created")
        .unwrap_or_else(|| {
            panic!("no 'sandbox created' line in request {rid}'s span: {of_request:?}")
        });
    assert_eq!(created["span"]["sandbox_id"], id.as_str());
    assert_eq!(created["span"]["node_id"], node.node_id.as_str());
    assert!(created["span"]["region"].is_string(), "{created}");
    let access: Vec<_> = of_request
        .iter()
        .filter(|l| l["fields"]["message"] == "request")
        .collect();
    assert_eq!(
        access.len(),
        1,
        "one access line per request: {of_request:?}"
    );
    assert_eq!(access[0]["fields"]["status"], 200);
    assert_eq!(
        access[0]["span"]["path"],
        format!("/v1/sandboxes/{id}/exec").as_str()
    );
    assert!(access[0]["fields"]["ms"].is_u64());
    // Dependencies say only what is wrong (openraft's elections are not info lines here).
    let chatty: Vec<_> = all
        .iter()
        .filter(|l| {
            l["level"] == "INFO"
                && !l["target"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("warren")
        })
        .collect();
    assert!(chatty.is_empty(), "dependencies log at info: {chatty:?}");
}

/// A request that enters one node and runs on another: both nodes' lines of it carry the
/// same request id (the entry node's), so that one search finds the whole story.
#[tokio::test]
async fn a_forwarded_requests_lines_on_both_nodes_share_its_request_id() {
    use super::cluster_harness::{ids_on, TestCluster};
    let c = TestCluster::start_logging(2, "warn,warren=info").await;
    let owner = c.nodes[1].name.clone();
    // A sandbox owned by node 1, called through node 0.
    let id = ids_on(&c, 0, &owner, 1).await.remove(0);
    let rid = format!("fwd-{}", unique());
    let r = c.nodes[0]
        .client
        .request(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .header("x-request-id", &rid)
        .json(&serde_json::json!({"command": "echo hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], rid.as_str());
    assert_eq!(r.headers()["x-warren-node"], owner.as_str());
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    for (i, n) in c.nodes.iter().enumerate() {
        let lines = n.log.lock().unwrap().clone();
        let access: Vec<&String> = lines
            .iter()
            .filter(|l| l.contains(&rid) && l.contains("request") && l.contains("status=200"))
            .collect();
        assert_eq!(
            access.len(),
            1,
            "node {i} logged the request once, with its id: {:?}",
            lines
                .iter()
                .filter(|l| l.contains(&rid))
                .collect::<Vec<_>>()
        );
    }
}
