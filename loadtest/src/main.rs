//! `warren-bench`: starts a node from this build and compares it with Docker in one run.
//!
//! Environment: WARREN_BENCH_WARM (exec samples, default 300), WARREN_BENCH_COLD (cold
//! samples, default 10), WARREN_BENCH_BURST (concurrent creates, default 20).

use warren_loadtest::{node::BenchNode, report::Table, scenarios};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let warm_n = env_usize("WARREN_BENCH_WARM", 300).clamp(10, 5000);
    let cold_n = env_usize("WARREN_BENCH_COLD", 10).clamp(3, 100);
    let burst_n = env_usize("WARREN_BENCH_BURST", 20).clamp(1, 200);
    let node = BenchNode::start().await?;
    eprintln!("bench: node {} at {} (image {})", node.node_id, node.url, node.image);
    let mut table = Table::default();
    scenarios::warm_exec(&node, warm_n, &mut table).await?;
    scenarios::cold_create(&node, cold_n, &mut table).await?;
    scenarios::burst_create(&node, burst_n, &mut table).await?;
    table.print();
    Ok(())
}
