//! What bounding the node's host work costs and buys: snapshots of a workspace with fresh
//! incompressible data (so that every round archives, hashes and compresses it all), taken
//! on a node whose host work is bounded (the default: half the CPUs, 256 MiB/s) against a
//! node whose host work is not (`--host-work-cpus 0 --host-work-io-mbps 0`, the setting
//! before), interleaved in one run; and a neighbour sandbox's exec latency while they run.

use crate::node::BenchNode;
use crate::report::{percentiles, Row, Table};
use std::time::{Duration, Instant};
use warren_api::snapshot::CreateSnapshotRequest;

/// 128 MiB of fresh random data in 1 MiB files, and a few thousand small files.
const REFRESH: &str =
    "set -e; rm -rf /workspace/hw; mkdir -p /workspace/hw/bin /workspace/hw/src; \
    for i in $(seq 1 128); do head -c 1048576 /dev/urandom > /workspace/hw/bin/$i; done; \
    for i in $(seq 1 2000); do echo \"line $i $RANDOM\" > /workspace/hw/src/$i.txt; done";

struct Sample {
    snapshots: Vec<Duration>,
    neighbour: Vec<Duration>,
}

/// One round on `node`: fresh data, then a snapshot while the neighbour is asked to run
/// `true` back to back.
async fn round(node: &BenchNode, s: &mut Sample) -> anyhow::Result<()> {
    let c = &node.client;
    let r = c.sh("hw-src", REFRESH).await?;
    anyhow::ensure!(r.exit_code == 0, "refresh failed: {}", r.stderr);
    node.wait_warm().await?;
    let t = Instant::now();
    let request = CreateSnapshotRequest::default();
    let snap = c.create_snapshot("hw-src", &request);
    tokio::pin!(snap);
    loop {
        let e = Instant::now();
        tokio::select! {
            done = &mut snap => {
                done?;
                s.snapshots.push(t.elapsed());
                return Ok(());
            }
            r = c.sh("hw-neighbour", "true") => {
                r?;
                s.neighbour.push(e.elapsed());
            }
        }
    }
}

pub async fn host_work_cost(rounds: usize, table: &mut Table) -> anyhow::Result<()> {
    let bounded = BenchNode::start_with(2, &[]).await?;
    let open =
        BenchNode::start_with(2, &["--host-work-cpus", "0", "--host-work-io-mbps", "0"]).await?;
    for n in [&bounded, &open] {
        n.client.sh("hw-neighbour", "true").await?;
    }
    let mut with = Sample {
        snapshots: vec![],
        neighbour: vec![],
    };
    let mut without = Sample {
        snapshots: vec![],
        neighbour: vec![],
    };
    for _ in 0..rounds {
        round(&bounded, &mut with).await?;
        round(&open, &mut without).await?;
    }
    table.add(Row {
        name: "snapshot, host work bounded".into(),
        n: with.snapshots.len(),
        ours: percentiles(&with.snapshots),
        baseline_name: "host work unbounded".into(),
        baseline: percentiles(&without.snapshots),
        target: "report".into(),
    });
    table.add(Row {
        name: "neighbour exec during a snapshot".into(),
        n: with.neighbour.len(),
        ours: percentiles(&with.neighbour),
        baseline_name: "host work unbounded".into(),
        baseline: percentiles(&without.neighbour),
        target: "p99 <= 1x".into(),
    });
    table.note(format!(
        "host work: 128 MiB of fresh random data per snapshot; bounded = {:.1} CPUs and 256 MiB/s (the default on this machine), unbounded = --host-work-cpus 0 --host-work-io-mbps 0; {} neighbour execs bounded, {} unbounded",
        (std::thread::available_parallelism().map_or(1, |n| n.get()) as f64 / 2.0).max(0.5),
        with.neighbour.len(),
        without.neighbour.len()
    ));
    Ok(())
}
