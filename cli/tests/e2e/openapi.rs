//! `GET /v1/openapi.json` on a live node: served without a key, the same as the committed
//! `docs/openapi.json`, and every operation it lists reaches a handler (none answers the
//! router's "no such endpoint" or "no such sandbox operation").

use super::harness::{unique, Node};

#[tokio::test]
async fn the_document_is_served_without_a_key_and_every_operation_in_it_is_routed() {
    let node = Node::start().await;
    let http = reqwest::Client::new();
    let r = http
        .get(format!("{}/v1/openapi.json", node.url))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let doc: serde_json::Value = r.json().await.unwrap();
    let committed: serde_json::Value =
        serde_json::from_str(include_str!("../../../docs/openapi.json")).unwrap();
    assert_eq!(
        doc, committed,
        "the node serves another document than docs/openapi.json"
    );
    let id = format!("oa-{}", unique());
    let mut probed = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            let concrete = path
                .replace("{id}", &id)
                .replace("{path}", "tmp/probe")
                .replace("{port}", "3000")
                .replace("{node}", "no-such-node")
                .replace("{name}", "probe")
                .replace(['{', '}'], "");
            // Drains and removals of a node that does not exist: refused, never routed away.
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let resp = http
                .request(m, format!("{}{concrete}", node.url))
                .bearer_auth(&node.key)
                .header("content-type", "application/json")
                .body("{}")
                .timeout(std::time::Duration::from_secs(60))
                .send()
                .await
                .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            assert!(
                !(body.contains("no such endpoint") || body.contains("no such sandbox operation")),
                "{method} {path} is documented but not routed: {status} {body}"
            );
            assert_ne!(status, 405, "{method} {path}: {body}");
            assert!(
                status.as_u16() < 500 || status == 503,
                "{method} {path}: {status} {body}"
            );
            probed += 1;
        }
    }
    assert!(probed > 50, "only {probed} operations probed");
    node.client.delete_sandbox(&id).await.unwrap();
}
