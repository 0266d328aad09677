//! The same burst of new sessions through one node and through a 3-node cluster on this
//! machine (`clusterburst`), once with the nodes in one region and once in three: each
//! session is a get-or-create plus a first exec, all at once; through the cluster they enter
//! its nodes in turn (a platform spreading its requests over every entry node), and
//! placement spreads the sandboxes over the nodes (with regions, each stays in the region
//! it entered). Every node keeps 4 warm containers, as by default. Throughput is sessions
//! over wall time; the cluster's is printed as a ratio of the single node's, measured in
//! the same run.

use crate::burst_bench::{all_at_once, delete_all, first_exec, Burst};
use crate::cluster_node::BenchCluster;
use crate::node::{metric_of, BenchNode};
use crate::report::Table;
use std::time::{Duration, Instant};
use warren_client::Client;

/// Warm containers every node keeps in this scenario.
const WARM: usize = 4;

/// Primes every node of `clients` (one session made and deleted), waits for their warm
/// containers, then runs `n` sessions at once, session `i` entering through
/// `clients[i % clients.len()]`, and deletes them.
async fn burst(clients: &[Client], prefix: &str, n: usize) -> anyhow::Result<Burst> {
    for (i, c) in clients.iter().enumerate() {
        let id = format!("{prefix}-prime-{i}");
        c.sh(&id, "true").await?;
        c.delete_sandbox(&id).await?;
    }
    wait_warm(clients).await?;
    let ids: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    let b = all_at_once(
        "sessions at once",
        ids.iter()
            .enumerate()
            .map(|(i, id)| first_exec(&clients[i % clients.len()], id)),
    )
    .await?;
    delete_all(clients, &ids).await;
    Ok(b)
}

/// Waits (at most 120 s) until every node of `clients` has its warm containers ready.
async fn wait_warm(clients: &[Client]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    for c in clients {
        while metric_of(c, "warren_warm_containers ").await? < WARM {
            anyhow::ensure!(Instant::now() < deadline, "warm containers never ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The burst through a 3-node cluster; with `regions`, node `i` is in `region-i`, so each
/// sandbox is placed in the region of the node it entered.
async fn cluster_arm(n: usize, prefix: &str, regions: bool) -> anyhow::Result<Burst> {
    let cluster = BenchCluster::start_each(3, |i| {
        let region = if regions {
            format!("region = \"region-{}\"\n", i + 1)
        } else {
            String::new()
        };
        format!("warm_containers = {WARM}\n{region}")
    })
    .await?;
    let how = if regions { " in 3 regions" } else { "" };
    eprintln!("bench clusterburst: {n} new sessions at once through 3 nodes{how}, in turn");
    burst(&cluster.clients, prefix, n).await
}

pub async fn cluster_burst(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let one = {
        let node = BenchNode::start_with(WARM, &[]).await?;
        eprintln!("bench clusterburst: {n} new sessions at once through one node");
        burst(std::slice::from_ref(&node.client), "bench-cb1", n).await?
    };
    let three = cluster_arm(n, "bench-cb3", false).await?;
    let regions = cluster_arm(n, "bench-cbr", true).await?;
    let rate = |b: &Burst| b.ok.len() as f64 / b.wall.as_secs_f64().max(1e-3);
    for (through, b) in [("3 nodes", &three), ("3 regions", &regions)] {
        table.add_sampled(
            &format!("burst of {n} through {through}"),
            &b.ok,
            &format!("the same burst through 1 node (n={})", one.ok.len()),
            &one.ok,
            "throughput >= 2.5x one node's",
        );
    }
    for (name, b) in [
        ("1 node", &one),
        ("3 nodes", &three),
        ("3 nodes in 3 regions", &regions),
    ] {
        table.note(format!(
            "clusterburst ({name}): {} ok, {} failed{}, wall {:.1} s, {:.2} sessions/s",
            b.ok.len(),
            b.failed.len(),
            b.failed
                .first()
                .map(|e| format!(" (first: {e})"))
                .unwrap_or_default(),
            b.wall.as_secs_f64(),
            rate(b),
        ));
    }
    table.note(format!(
        "clusterburst: throughput against one node's: 3 nodes {:.2}x, 3 nodes in 3 regions {:.2}x (same machine, same Docker daemon)",
        rate(&three) / rate(&one).max(1e-9),
        rate(&regions) / rate(&one).max(1e-9),
    ));
    Ok(())
}
