//! The cost of continuous checkpoints: a two-node cluster (checkpoints run only where a
//! sandbox has somewhere to fail over to) with N sandboxes (`WARREN_BENCH_CHECKPOINTED`,
//! default 50), each of them active: every 5 s an exec appends 4 KiB of fresh bytes to a
//! file in it. Over a window (`WARREN_BENCH_CHECKPOINT_WINDOW_S`, default 60 s, after one
//! checkpoint round of warm-up), per minute: the bytes the object store grew by, the
//! nodes' own CPU and the whole machine's busy CPU (the capture's tar and Docker work
//! included). Baseline in the same run: the same cluster and workload with checkpoints off.

use crate::cluster_node::BenchCluster;
use crate::report::Table;
use anyhow::Context;
use futures_util::StreamExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// How often the benchmark's cluster checkpoints an active sandbox.
const EVERY_S: u64 = 15;

/// What one arm measured, per minute of the window.
struct Arm {
    made: usize,
    store_bytes: f64,
    node_cpu: Duration,
    machine_cpu: Duration,
    checkpoints: usize,
}

/// Bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_under(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

fn nodes_cpu(cluster: &BenchCluster) -> anyhow::Result<Duration> {
    cluster
        .pids()
        .into_iter()
        .map(crate::cpu::process)
        .sum::<anyhow::Result<Duration>>()
}

/// Checkpoint snapshots listed for the sandboxes (each sandbox keeps its latest).
async fn checkpoints_listed(cluster: &BenchCluster) -> usize {
    let Ok(list) = cluster.clients[0].list_snapshots(None).await else {
        return 0;
    };
    list.snapshots
        .iter()
        .filter(|s| s.origin == "checkpoint")
        .count()
}

async fn one_arm(n: usize, window: Duration, every_s: u64) -> anyhow::Result<Arm> {
    let cluster = BenchCluster::start_with(2, &format!("checkpoint_every_s = {every_s}\n")).await?;
    let ids: Vec<String> = (0..n).map(|i| format!("bench-ckpt-{i}")).collect();
    let touch = "head -c 4096 /dev/urandom >> /workspace/activity";
    let made = tokio::time::timeout(
        Duration::from_secs(900),
        futures_util::stream::iter(ids.iter().cloned())
            .map(|id| {
                let c = cluster.clients[0].clone();
                async move { c.sh(&id, touch).await.is_ok_and(|r| r.exit_code == 0) }
            })
            .buffer_unordered(4)
            .filter(|ok| futures_util::future::ready(*ok))
            .count(),
    )
    .await
    .context("creating the sandboxes took over 15 minutes")?;
    // The activity: every sandbox is touched every 5 s, from here to the end of the window.
    let activity = |until: Instant| {
        let clients = cluster.clients.clone();
        let ids = ids.clone();
        async move {
            let mut round = 0usize;
            while Instant::now() < until {
                let started = Instant::now();
                futures_util::stream::iter(ids.iter().cloned())
                    .map(|id| {
                        let c = clients[round % clients.len()].clone();
                        async move {
                            let _ = c.sh(&id, touch).await;
                        }
                    })
                    .buffer_unordered(8)
                    .collect::<Vec<()>>()
                    .await;
                round += 1;
                tokio::time::sleep(Duration::from_secs(5).saturating_sub(started.elapsed())).await;
            }
        }
    };
    // Warm-up: the first checkpoint of each sandbox is a whole one; the window measures the
    // steady state after it.
    let warm = Duration::from_secs(every_s.max(10) + 5);
    activity(Instant::now() + warm).await;
    let store0 = bytes_under(&cluster.store_dir());
    let node0 = nodes_cpu(&cluster)?;
    let machine0 = crate::cpu::busy().context("/proc/stat")?;
    let t0 = Instant::now();
    activity(t0 + window).await;
    let per_minute = 60.0 / t0.elapsed().as_secs_f64();
    let store = bytes_under(&cluster.store_dir()) as f64 - store0 as f64;
    let node = nodes_cpu(&cluster)? - node0;
    let machine = crate::cpu::busy().context("/proc/stat")? - machine0;
    let checkpoints = checkpoints_listed(&cluster).await;
    for id in &ids {
        let _ = cluster.clients[0].delete_sandbox(id).await;
    }
    Ok(Arm {
        made,
        store_bytes: store * per_minute,
        node_cpu: node.mul_f64(per_minute),
        machine_cpu: machine.mul_f64(per_minute),
        checkpoints,
    })
}

pub async fn checkpoint_cost(n: usize, window: Duration, table: &mut Table) -> anyhow::Result<()> {
    eprintln!("bench: checkpoints: {n} active sandboxes, checkpoints off");
    let off = one_arm(n, window, 0).await?;
    eprintln!("bench: checkpoints: {n} active sandboxes, checkpointed every {EVERY_S} s");
    let on = one_arm(n, window, EVERY_S).await?;
    let mib = |b: f64| b / (1024.0 * 1024.0);
    table.note(format!(
        "checkpoints: {} active sandboxes (4 KiB written each 5 s) on 2 nodes, checkpointed every {EVERY_S} s, per minute: \
         store grew {:.1} MiB (off: {:.1} MiB); nodes' CPU {:.1} s (off: {:.1} s, so {:.1} s for checkpoints); \
         machine busy {:.1} s (off: {:.1} s, so {:.1} s = {:.1} % of one core); {} checkpoint snapshots listed at the end (off: {})",
        on.made.min(off.made),
        mib(on.store_bytes),
        mib(off.store_bytes),
        on.node_cpu.as_secs_f64(),
        off.node_cpu.as_secs_f64(),
        on.node_cpu.as_secs_f64() - off.node_cpu.as_secs_f64(),
        on.machine_cpu.as_secs_f64(),
        off.machine_cpu.as_secs_f64(),
        on.machine_cpu.as_secs_f64() - off.machine_cpu.as_secs_f64(),
        (on.machine_cpu.as_secs_f64() - off.machine_cpu.as_secs_f64()) / 60.0 * 100.0,
        on.checkpoints,
        off.checkpoints,
    ));
    Ok(())
}
