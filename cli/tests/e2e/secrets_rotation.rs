//! Rotating the secrets key of a real two-node cluster as an operator would: a new line
//! first in each node's key file, nodes restarted one by one; secrets are resealed under
//! the new key only once both nodes hold it, after which the old line can go and the
//! secrets still reach upstreams through the egress proxy.

use super::cluster_harness::TestCluster;
use super::egress::Upstream;
use super::harness::{create, sh, unique};
use std::time::{Duration, Instant};
use warren_consensus::secrets::SecretsKey;

fn key_file(c: &TestCluster, i: usize) -> std::path::PathBuf {
    c.data_dir(i).join("cluster").join("secrets.key")
}

async fn sealed_with(c: &TestCluster, i: usize, name: &str) -> String {
    c.nodes[i].client.secret(name).await.unwrap().key_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_key_reseals_the_secrets_once_every_node_holds_it_and_the_old_key_can_go() {
    let mut c = TestCluster::start_with(2, 1, r#"egress_allow_nets = ["127.0.0.0/8"]"#).await;
    c.nodes[0]
        .client
        .put_secret("rot", "ROTATED-VALUE")
        .await
        .unwrap();
    let old = sealed_with(&c, 0, "rot").await;
    let new = SecretsKey::generate();
    let prepend = |c: &TestCluster, i: usize| {
        let before = std::fs::read_to_string(key_file(c, i)).unwrap();
        assert!(before.contains(&old), "every node holds the cluster's key");
        std::fs::write(key_file(c, i), format!("{}{before}", new.to_file())).unwrap();
    };

    // One node has the new key: nothing is resealed (the other could not open it).
    prepend(&c, 0);
    c.restart(0);
    tokio::time::sleep(Duration::from_secs(12)).await;
    assert_eq!(sealed_with(&c, 1, "rot").await, old);

    // Both have it: resealed, without the value or its times changing.
    let info = c.nodes[1].client.secret("rot").await.unwrap();
    prepend(&c, 1);
    c.restart(1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while sealed_with(&c, 0, "rot").await != new.current_id() {
        assert!(Instant::now() < deadline, "the secret was not resealed");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let after = c.nodes[0].client.secret("rot").await.unwrap();
    assert_eq!(
        (&after.created_at, &after.updated_at),
        (&info.created_at, &info.updated_at)
    );

    // The old line goes from both files: the secret still opens wherever the sandbox runs.
    for i in 0..2 {
        std::fs::write(key_file(&c, i), new.to_file()).unwrap();
        c.restart(i);
    }
    let up = Upstream::start("127.0.0.9");
    let id = format!("rot-{}", unique());
    let client = c.nodes[0].client.clone();
    let req = create(
        serde_json::json!({"egress": {"rules": [{"host": "127.0.0.9",
        "set_headers": {"authorization": "token ${secret:rot}"}}]}}),
    );
    // The restarted pair elects a leader first.
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = client.put_sandbox(&id, &req).await {
        assert!(
            Instant::now() < deadline,
            "no sandbox after the restarts: {e}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        sh(&client, &id, &format!("curl -sS -m 10 {}", up.url("/rot"))).await,
        "ok"
    );
    assert!(
        up.last().contains("authorization: token rotated-value"),
        "{}",
        up.last()
    );
}
