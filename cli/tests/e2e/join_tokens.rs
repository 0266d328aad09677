//! Issued join tokens, tried as whoever holds one would: a single-use token admits one node
//! (also when two race with it), an expired or revoked one admits none, a guessed secret
//! for a real id admits none, and a node that joined with an issued token does not admit
//! others with it as if it were the cluster's token.

use super::cluster_harness::TestCluster;
use super::harness::unique;
use reqwest::Method;
use std::time::Duration;
use warren_consensus::join::{JoinRequest, JoinResponse};
use warren_transport::tls;

/// An admin call to node `i`: status and body.
async fn admin(
    c: &TestCluster,
    i: usize,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    call(c, i, c.admin_key(), method, path, body).await
}

/// A call to node `i` with `key`: status and body.
async fn call(
    c: &TestCluster,
    i: usize,
    key: &str,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}{path}", c.nodes[i].url))
        .bearer_auth(key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or_default())
}

/// A new tenant (not admin) key, made through node 0.
async fn tenant_key(c: &TestCluster) -> String {
    let (status, k) = admin(
        c,
        0,
        Method::POST,
        "/v1/keys",
        Some(serde_json::json!({"tenant": "acme", "scope": "tenant"})),
    )
    .await;
    assert_eq!(status, 201, "{k}");
    k["key"].as_str().unwrap().to_string()
}

/// A new token made through node `i`: its value and id.
async fn make_token(c: &TestCluster, i: usize, body: serde_json::Value) -> (String, String) {
    let (status, t) = admin(c, i, Method::POST, "/v1/cluster/join-tokens", Some(body)).await;
    assert_eq!(status, 201, "{t}");
    (
        t["token"].as_str().unwrap().to_string(),
        t["id"].as_str().unwrap().to_string(),
    )
}

/// Runs the `warren` CLI against node `i` with the admin key; its stdout (it must succeed).
fn warren_cli(c: &TestCluster, i: usize, args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(args)
        .env("WARREN_URL", &c.nodes[i].url)
        .env("WARREN_API_KEY", c.admin_key())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "warren {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A join request for a new name (and a new key) made with `token`.
fn request(token: &str) -> JoinRequest {
    let name = format!("j{}", unique());
    let (_key, csr) = tls::new_key_and_csr(&name).unwrap();
    JoinRequest::new(token, &name, "r1", "127.0.0.1:9", "127.0.0.1:9", 1, &csr)
}

fn names_in(view: &serde_json::Value) -> Vec<String> {
    view["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_use_join_token_admits_one_node_and_an_expired_or_revoked_one_none() {
    let mut c = TestCluster::start(2, 1).await;

    // A tenant key may not make one.
    let tenant = tenant_key(&c).await;
    let (status, _) = call(
        &c,
        0,
        &tenant,
        Method::POST,
        "/v1/cluster/join-tokens",
        Some(serde_json::json!({})),
    )
    .await;
    assert_eq!(status, 403);

    // A real node joins with a token made through a follower (by the CLI, as an operator
    // would), and is up.
    let follower = 1 - c.leader().await;
    let token = warren_cli(
        &c,
        follower,
        &["cluster", "token", "create", "--ttl", "600"],
    );
    let token = token.trim().to_string();
    let id = warren_api::join_tokens::token_id(&token)
        .expect("the CLI prints the token")
        .to_string();
    let joined = c.add_node_with_token("r1", &token).await;
    let joined_name = c.nodes[joined].name.clone();

    // The same token again, through every node, the one it admitted included: refused.
    for i in 0..c.nodes.len() {
        let (status, body) = c.post_join(i, &request(&token)).await;
        assert_eq!(
            status, 403,
            "a used single-use token admitted a node: {body}"
        );
        assert_eq!(body["code"], "FORBIDDEN", "{body}");
        let msg = body["message"].as_str().unwrap();
        assert!(
            msg.contains("single-use") && msg.contains(&joined_name),
            "{msg}"
        );
    }

    // The joined node does not take the spent token as the cluster's own: a request that
    // names no token id, proved with the spent value, is refused there.
    let mut as_cluster_token = request(&token);
    as_cluster_token.token_id = None;
    as_cluster_token.proof = tls::proof(
        &token,
        &[
            as_cluster_token.name.as_bytes(),
            as_cluster_token.region.as_bytes(),
            as_cluster_token.api_addr.as_bytes(),
            as_cluster_token.peer_addr.as_bytes(),
            &as_cluster_token.capacity.to_be_bytes(),
            as_cluster_token.csr_pem.as_bytes(),
        ],
    );
    let (status, body) = c.post_join(joined, &as_cluster_token).await;
    assert_eq!(
        status, 403,
        "the spent token worked as a cluster token: {body}"
    );

    // Two nodes racing with one fresh single-use token: exactly one gets in.
    let (token2, _) = make_token(&c, 0, serde_json::json!({})).await;
    let (a, b) = (request(&token2), request(&token2));
    let (ra, rb) = tokio::join!(c.post_join(0, &a), c.post_join(1, &b));
    let mut statuses = [ra.0, rb.0];
    statuses.sort();
    assert_eq!(statuses, [200, 403], "{ra:?} {rb:?}");
    // The winner's retry (its answer lost) gets the same id again.
    let (winner, first) = if ra.0 == 200 {
        (&a, &ra.1)
    } else {
        (&b, &rb.1)
    };
    let (status, again) = c.post_join(0, winner).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["node_id"], first["node_id"]);
    let resp: JoinResponse = serde_json::from_value(again).unwrap();
    assert!(resp.verify(&token2), "the answer proves the issued token");

    // A guessed secret for a real id: refused, and the token is not spent by it.
    let (token3, id3) = make_token(&c, 0, serde_json::json!({})).await;
    let forged = format!("wjt_{id3}_{}", "0".repeat(64));
    let (status, body) = c.post_join(0, &request(&forged)).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = c.post_join(1, &request(&token3)).await;
    assert_eq!(status, 200, "the forged try spent the token: {body}");

    // Expired.
    let (token4, _) = make_token(&c, 0, serde_json::json!({"ttl_s": 1})).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (status, body) = c.post_join(0, &request(&token4)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("expired"),
        "{body}"
    );

    // Revoked (through one node, refused through the other at once).
    let (token5, id5) = make_token(&c, 0, serde_json::json!({"single_use": false})).await;
    let (status, _) = c.post_join(1, &request(&token5)).await;
    assert_eq!(status, 200, "a multi-use token admits");
    let (status, _) = c.post_join(0, &request(&token5)).await;
    assert_eq!(status, 200, "a multi-use token admits again");
    let (status, _) = admin(
        &c,
        0,
        Method::DELETE,
        &format!("/v1/cluster/join-tokens/{id5}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, body) = c.post_join(1, &request(&token5)).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("revoked"),
        "{body}"
    );

    // The list shows what happened, and never a value.
    let (status, list) = admin(&c, 1, Method::GET, "/v1/cluster/join-tokens", None).await;
    assert_eq!(status, 200, "{list}");
    let text = list.to_string();
    for value in [&token, &token2, &token3, &token4, &token5] {
        assert!(!text.contains(value.as_str()), "a value is listed: {text}");
    }
    let first_token = list["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id.as_str())
        .unwrap();
    assert_eq!(first_token["state"], "used", "{first_token}");
    assert_eq!(first_token["used_by"][0], joined_name.as_str());
    let table = warren_cli(&c, 0, &["cluster", "token", "list"]);
    let row = table
        .lines()
        .find(|l| l.starts_with(&id))
        .unwrap_or_default();
    assert!(
        row.contains("used") && row.contains(&joined_name),
        "{table}"
    );
    assert!(names_in(&c.view(0).await.unwrap()).contains(&joined_name));
}

/// The cluster's own join token, shared once with every node, can be turned off: then no
/// member admits a node with it — also one that has not heard of the switch yet, as the
/// log refuses the registration — while issued tokens still admit. Tried as whoever kept a
/// copy of that token would: a join through every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_token_turned_off_admits_nobody_and_issued_tokens_still_do() {
    let c = TestCluster::start(2, 1).await;
    let (status, policy) = admin(&c, 0, Method::GET, "/v1/cluster/join-policy", None).await;
    assert_eq!(
        (status, &policy["cluster_token"]),
        (200, &serde_json::json!(true)),
        "{policy}"
    );
    let (status, _) = c.post_join(1, &request(c.join_token())).await;
    assert_eq!(status, 200, "the cluster token admits while on");

    // A tenant key may neither read nor change it.
    let tenant = tenant_key(&c).await;
    let path = "/v1/cluster/join-policy";
    let (status, _) = call(&c, 0, &tenant, Method::GET, path, None).await;
    assert_eq!(status, 403);
    let off = serde_json::json!({"cluster_token": false});
    let (status, _) = call(&c, 0, &tenant, Method::PUT, path, Some(off)).await;
    assert_eq!(status, 403);

    // Turned off through a follower, by the CLI; joins through every node right after.
    let follower = 1 - c.leader().await;
    let out = warren_cli(
        &c,
        follower,
        &["cluster", "join-policy", "--cluster-token", "off"],
    );
    assert!(out.contains("off"), "{out}");
    for i in 0..c.nodes.len() {
        let (status, body) = c.post_join(i, &request(c.join_token())).await;
        assert_eq!(
            status, 403,
            "the cluster token admitted a node after it was turned off: {body}"
        );
        assert!(
            body["message"].as_str().unwrap().contains("turned off"),
            "{body}"
        );
    }
    let (token, _) = make_token(&c, 0, serde_json::json!({})).await;
    let (status, body) = c.post_join(1, &request(&token)).await;
    assert_eq!(status, 200, "an issued token no longer admits: {body}");
    let (status, policy) = admin(&c, 0, Method::GET, "/v1/cluster/join-policy", None).await;
    assert_eq!(
        (status, &policy["cluster_token"]),
        (200, &serde_json::json!(false)),
        "{policy}"
    );

    // And on again (through the leader, which has applied it once it answers).
    let leader = c.leader().await;
    let (status, policy) = admin(
        &c,
        leader,
        Method::PUT,
        "/v1/cluster/join-policy",
        Some(serde_json::json!({"cluster_token": true})),
    )
    .await;
    assert_eq!(
        (status, &policy["cluster_token"]),
        (200, &serde_json::json!(true)),
        "{policy}"
    );
    let (status, body) = c.post_join(leader, &request(c.join_token())).await;
    assert_eq!(status, 200, "{body}");
}
