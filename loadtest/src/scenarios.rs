//! The measured scenarios.

use crate::command::docker;
use crate::node::BenchNode;
use crate::report::{percentiles, Table};
use std::time::{Duration, Instant};

/// `exec true` through the API on a running sandbox vs `docker exec` in the same container.
pub async fn warm_exec(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let c = &node.client;
    let id = "bench-warm";
    c.sh(id, "true").await?;
    for _ in 0..20 {
        c.sh(id, "true").await?;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut ours = Vec::with_capacity(n);
    let mut theirs = Vec::new();
    let container = node.container(id);
    for i in 0..n {
        if Instant::now() > deadline {
            break;
        }
        let t = Instant::now();
        let r = c.sh(id, "true").await?;
        ours.push(t.elapsed());
        anyhow::ensure!(r.exit_code == 0, "exec true failed");
        // Interleave the baseline so both see the same machine noise.
        if i % (n / 30).max(1) == 0 {
            theirs.push(docker(&["exec", &container, "true"])?);
        }
    }
    table.add_sampled(
        "warm exec `true` via API",
        &ours,
        &format!("docker exec true (n={})", theirs.len()),
        &theirs,
        "p50 <= 0.1x",
    );
    Ok(())
}

/// Get-or-create plus first exec on a new id vs `docker run --rm IMAGE true`: on `node`,
/// taking a warm container (the pool full again before each), and on a second node without
/// warm containers, where each sandbox starts its own.
pub async fn cold_create(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let cold_node = BenchNode::start_with_warm(0).await?;
    let (c, cold_c) = (&node.client, &cold_node.client);
    // Warm Docker's caches for every path first.
    docker(&["run", "--rm", &node.image, "true"])?;
    for c in [c, cold_c] {
        c.sh("bench-prime", "true").await?;
        c.delete_sandbox("bench-prime").await?;
    }
    let (mut taken, mut started, mut theirs) = (vec![], vec![], vec![]);
    let deadline = Instant::now() + Duration::from_secs(300);
    for i in 0..n {
        if Instant::now() > deadline {
            break;
        }
        // Let the network and container pools refill, as they do between requests in
        // steady state.
        tokio::time::sleep(Duration::from_millis(600)).await;
        node.wait_warm().await?;
        let id = format!("bench-cold-{i}");
        let t = Instant::now();
        let r = c.sh(&id, "true").await?;
        taken.push(t.elapsed());
        anyhow::ensure!(r.exit_code == 0, "first exec failed");
        theirs.push(docker(&["run", "--rm", &node.image, "true"])?);
        node.wait_warm().await?;
        let t = Instant::now();
        let r = cold_c.sh(&id, "true").await?;
        started.push(t.elapsed());
        anyhow::ensure!(r.exit_code == 0, "first exec failed");
        c.delete_sandbox(&id).await?;
        cold_c.delete_sandbox(&id).await?;
    }
    let name = if node.warm > 0 {
        "get-or-create + first exec (takes a warm container)"
    } else {
        "get-or-create + first exec (no warm containers)"
    };
    let baseline = "docker run --rm IMAGE true";
    table.add_sampled(name, &taken, baseline, &theirs, "p50 <= 1x");
    table.add_sampled(
        "get-or-create + first exec (node without warm containers)",
        &started,
        baseline,
        &theirs,
        "p50 <= 1x",
    );
    Ok(())
}

/// `n` sandboxes created at once (first exec each): a burst of new sessions.
pub async fn burst_create(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let t = Instant::now();
    let calls = (0..n).map(|i| {
        let c = node.client.clone();
        async move {
            let t = Instant::now();
            let r = c.sh(&format!("bench-burst-{i}"), "true").await;
            (t.elapsed(), r.map(|r| r.exit_code))
        }
    });
    let results = tokio::time::timeout(
        Duration::from_secs(300),
        futures_util::future::join_all(calls),
    )
    .await?;
    let wall = t.elapsed();
    let ok: Vec<Duration> = results
        .iter()
        .filter(|(_, r)| matches!(r, Ok(0)))
        .map(|(d, _)| *d)
        .collect();
    let (p50, p99) = percentiles(&ok);
    table.note(format!(
        "burst: {n} concurrent first calls on new ids: {} ok, wall {:.0} ms, per-call p50 {p50:.0} ms p99 {p99:.0} ms",
        ok.len(),
        wall.as_secs_f64() * 1000.0
    ));
    for i in 0..n {
        let _ = node
            .client
            .delete_sandbox(&format!("bench-burst-{i}"))
            .await;
    }
    Ok(())
}
