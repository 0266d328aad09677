//! Metering overhead: one node holding N running sandboxes (`WARREN_BENCH_METERED`,
//! default 200), sampled every 10 s (the default `usage_sample_ms`) against the same node
//! with sampling off (`--usage-sample-ms 0`: only when a container goes), in one run. For
//! each: the node process's own CPU over an idle window, and exec latency through it while
//! the window runs. Target: sampling costs under 1 % of a core at 200 sandboxes.

use crate::node::BenchNode;
use crate::report::{percentiles, Row, Table};
use anyhow::Context;
use futures_util::StreamExt;
use std::time::{Duration, Instant};

struct Arm {
    /// The node's CPU over the window, as a share of one core.
    cpu_share: f64,
    execs: Vec<Duration>,
    made: usize,
}

async fn one_arm(n: usize, window: Duration, sample_ms: &str) -> anyhow::Result<Arm> {
    let node = BenchNode::start_with(4, &["--usage-sample-ms", sample_ms]).await?;
    let ids: Vec<String> = (0..n).map(|i| format!("bench-meter-{i}")).collect();
    // Made 4 at a time, bounded in time.
    let made = tokio::time::timeout(
        Duration::from_secs(900),
        futures_util::stream::iter(ids.iter().cloned())
            .map(|id| {
                let c = node.client.clone();
                async move { c.sh(&id, "true").await.is_ok_and(|r| r.exit_code == 0) }
            })
            .buffer_unordered(4)
            .filter(|ok| futures_util::future::ready(*ok))
            .count(),
    )
    .await
    .context("creating the sandboxes took over 15 minutes")?;
    // Past the creates' own work, and through one sample at least.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let cpu0 = crate::cpu::process(node.pid())?;
    let t0 = Instant::now();
    let mut execs = Vec::new();
    let mut k = 0;
    while t0.elapsed() < window {
        let id = &ids[k % made.max(1)];
        k += 1;
        let t = Instant::now();
        if node
            .client
            .sh(id, "true")
            .await
            .is_ok_and(|r| r.exit_code == 0)
        {
            execs.push(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let cpu = crate::cpu::process(node.pid())? - cpu0;
    let cpu_share = cpu.as_secs_f64() / t0.elapsed().as_secs_f64();
    for id in &ids {
        let _ = node.client.delete_sandbox(id).await;
    }
    Ok(Arm {
        cpu_share,
        execs,
        made,
    })
}

/// Runs the two arms one after the other, sampling off first unless `on_first` (the second
/// arm meets a Docker that just removed the first arm's containers: swapping the order shows
/// what that costs).
pub async fn metering_cost(
    n: usize,
    window: Duration,
    on_first: bool,
    table: &mut Table,
) -> anyhow::Result<()> {
    let (mut off, mut on) = (None, None);
    for sampled in if on_first {
        [true, false]
    } else {
        [false, true]
    } {
        if sampled {
            eprintln!("bench: metering: {n} sandboxes, sampled every 10 s");
            on = Some(one_arm(n, window, "10000").await?);
        } else {
            eprintln!("bench: metering: {n} sandboxes, sampling off");
            off = Some(one_arm(n, window, "0").await?);
        }
    }
    let (off, on) = (off.expect("ran"), on.expect("ran"));
    table.add(Row {
        name: format!("exec, {} sandboxes sampled", on.made),
        n: on.execs.len(),
        ours: percentiles(&on.execs),
        baseline_name: format!("{} sandboxes, sampling off", off.made),
        baseline: percentiles(&off.execs),
        target: "p50 x <= 1.1".into(),
    });
    let cost = on.cpu_share - off.cpu_share;
    table.note(format!(
        "metering ({} first): node CPU over {:.0} s with {} running sandboxes: {:.2} % of a core sampled every 10 s, {:.2} % with sampling off; sampling costs {:.2} % of a core (target < 1 %)",
        if on_first { "sampled" } else { "off" },
        window.as_secs_f64(),
        on.made,
        on.cpu_share * 100.0,
        off.cpu_share * 100.0,
        cost * 100.0
    ));
    Ok(())
}
