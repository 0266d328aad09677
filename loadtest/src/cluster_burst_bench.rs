//! The same burst of new sessions through one node and through a 3-node cluster on this
//! machine (`clusterburst`), once with the nodes in one region and once in three: each
//! session is a get-or-create plus a first exec, all at once; through the cluster they enter
//! its nodes in turn (a platform spreading its requests over every entry node), and
//! placement spreads the sandboxes over the nodes (with regions, each stays in the region
//! it entered). Every node keeps
//! 4 warm containers, as by default. Throughput is sessions over wall time; the cluster's
//! is printed as a ratio of the single node's, measured in the same run.

use crate::cluster_node::BenchCluster;
use crate::node::BenchNode;
use crate::report::{percentiles, Row, Table};
use std::time::{Duration, Instant};
use warren_client::Client;

/// Warm containers every node keeps in this scenario.
const WARM: usize = 4;

struct Burst {
    ok: Vec<Duration>,
    failed: Vec<String>,
    wall: Duration,
}

/// `n` sessions at once, session `i` entering through `clients[i % clients.len()]`.
async fn burst(clients: &[Client], prefix: &str, n: usize) -> anyhow::Result<Burst> {
    let bar = crate::progress::bar(n, "sessions at once");
    let t = Instant::now();
    let calls = (0..n).map(|i| {
        let c = clients[i % clients.len()].clone();
        let id = format!("{prefix}-{i}");
        let bar = &bar;
        async move {
            let t = Instant::now();
            let r = c.sh(&id, "true").await;
            bar.inc(1);
            match r {
                Ok(r) if r.exit_code == 0 => Ok(t.elapsed()),
                Ok(r) => Err(format!("exit {}", r.exit_code)),
                Err(e) => Err(e.to_string()),
            }
        }
    });
    let results = tokio::time::timeout(
        Duration::from_secs(600),
        futures_util::future::join_all(calls),
    )
    .await;
    bar.finish_and_clear();
    let results = results?;
    let wall = t.elapsed();
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for r in results {
        match r {
            Ok(d) => ok.push(d),
            Err(e) => failed.push(e),
        }
    }
    Ok(Burst { ok, failed, wall })
}

async fn delete_all(clients: &[Client], prefix: &str, n: usize) {
    use futures_util::StreamExt;
    futures_util::stream::iter(0..n)
        .for_each_concurrent(16, |i| async move {
            let c = &clients[i % clients.len()];
            let _ = c.delete_sandbox(&format!("{prefix}-{i}")).await;
        })
        .await;
}

/// Waits (at most 120 s) until every node of `clients` has its warm containers ready.
async fn wait_warm(clients: &[Client]) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    for c in clients {
        loop {
            let text = c
                .request(reqwest::Method::GET, "/metrics")
                .send()
                .await?
                .text()
                .await?;
            let ready = text
                .lines()
                .find_map(|l| l.strip_prefix("warren_warm_containers "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0) as usize;
            if ready >= WARM {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "warm containers never ready");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// The burst through a 3-node cluster, entering its nodes in turn; with `regions`, node `i`
/// is in `region-i`, so each sandbox is placed in the region of the node it entered.
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
    let clients = cluster.clients.clone();
    for (i, c) in clients.iter().enumerate() {
        let id = format!("{prefix}-prime-{i}");
        c.sh(&id, "true").await?;
        c.delete_sandbox(&id).await?;
    }
    wait_warm(&clients).await?;
    let how = if regions { " in 3 regions" } else { "" };
    eprintln!("bench clusterburst: {n} new sessions at once through 3 nodes{how}, in turn");
    let b = burst(&clients, prefix, n).await?;
    delete_all(&clients, prefix, n).await;
    Ok(b)
}

pub async fn cluster_burst(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let one = {
        let node = BenchNode::start_with(WARM, &[]).await?;
        let clients = vec![node.client.clone()];
        clients[0].sh("bench-prime", "true").await?;
        clients[0].delete_sandbox("bench-prime").await?;
        wait_warm(&clients).await?;
        eprintln!("bench clusterburst: {n} new sessions at once through one node");
        let b = burst(&clients, "bench-cb1", n).await?;
        delete_all(&clients, "bench-cb1", n).await;
        b
    };
    let three = cluster_arm(n, "bench-cb3", false).await?;
    let regions = cluster_arm(n, "bench-cbr", true).await?;
    let rate = |b: &Burst| b.ok.len() as f64 / b.wall.as_secs_f64().max(1e-3);
    let row = Row {
        name: format!("burst of {n} through 3 nodes"),
        n: three.ok.len(),
        ours: percentiles(&three.ok),
        baseline_name: format!("the same burst through 1 node (n={})", one.ok.len()),
        baseline: percentiles(&one.ok),
        target: "throughput >= 2.5x one node's".into(),
    };
    table.add_sampled(row, &three.ok, &one.ok);
    let row = Row {
        name: format!("burst of {n} through 3 regions"),
        n: regions.ok.len(),
        ours: percentiles(&regions.ok),
        baseline_name: format!("the same burst through 1 node (n={})", one.ok.len()),
        baseline: percentiles(&one.ok),
        target: "throughput >= 2.5x one node's".into(),
    };
    table.add_sampled(row, &regions.ok, &one.ok);
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
