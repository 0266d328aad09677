//! Checkpoints: a node refreshes the recovery points of its active sandboxes several at once.

use super::cluster_harness::{any_overlap, describe_spans, logged_spans, owner_of, TestCluster};
use super::harness::unique;
use std::time::{Duration, Instant};

/// Eight sandboxes of one node, each with 8 MB of files, all written to at the same moment
/// once their first checkpoint is behind them: the next checkpoints of several of them run
/// at the same time. Each checkpoint's span comes from the node's log line "sandbox
/// checkpointed … ms=N" (it ended at the line and began N ms before). They ran strictly one
/// after another before, so a node with many active sandboxes refreshed their recovery
/// points — what a failure of it loses — in the sum of all their snapshots' times.
#[tokio::test]
async fn a_node_checkpoints_its_active_sandboxes_several_at_once() {
    let c = TestCluster::start_with_logging(
        3,
        2,
        "checkpoint_every_s = 2\n",
        "warn,warren_control=debug",
    )
    .await;
    c.wait_voters_everywhere(3).await;
    // Node 1 is region r2's only node: what enters it is placed on it.
    let on = 1;
    let name = c.nodes[on].name.clone();
    let client = &c.nodes[on].client;
    let tag = &unique()[..8];
    let ids: Vec<String> = (0..8).map(|k| format!("cp-{tag}-{k}")).collect();
    let write = "head -c 8000000 /dev/urandom > /workspace/r && date +%s%N > /workspace/f";
    for id in &ids {
        assert_eq!(
            owner_of(&c, on, id).await,
            name,
            "{id} was placed elsewhere"
        );
        let r = client.sh(id, write).await.unwrap();
        assert_eq!(r.exit_code, 0, "{}", r.stderr);
    }
    // Every sandbox's first checkpoint is taken, then nothing happens for longer than the
    // period: all of them are due again at their next activity.
    let deadline = Instant::now() + Duration::from_secs(90);
    for id in &ids {
        while client
            .list_snapshots(Some(id))
            .await
            .unwrap()
            .snapshots
            .is_empty()
        {
            assert!(Instant::now() < deadline, "no first checkpoint of {id}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    c.nodes[on].log.lock().unwrap().clear();

    let writes = futures_util::future::join_all(ids.iter().map(|id| client.sh(id, write))).await;
    for (id, r) in ids.iter().zip(writes) {
        let r = r.unwrap_or_else(|e| panic!("write to {id}: {e}"));
        assert_eq!(r.exit_code, 0, "{}", r.stderr);
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let spans = loop {
        let spans = logged_spans(&c, on, "sandbox checkpointed", &ids);
        if spans.len() >= ids.len() {
            break spans;
        }
        assert!(
            Instant::now() < deadline,
            "not every sandbox was checkpointed again: {spans:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!("checkpoints: {}", describe_spans(&spans));
    assert!(
        any_overlap(&spans),
        "the node checkpointed one sandbox after another: {spans:?}"
    );
}
