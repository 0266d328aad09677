//! The code interpreter's round trip: `1+1` in a warm Python context, against running
//! `python3 -c '1+1'` through the exec API in the same sandbox (a new interpreter per call:
//! what an agent without contexts would pay).

use crate::node::BenchNode;
use crate::report::{percentiles, Table};
use anyhow::Context;
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;
use warren_api::interpreter::{CreateContextRequest, RunCodeRequest};

/// Interleaved samples of both, at most `n` each and at most two minutes in all.
pub async fn round_trip(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let c = &node.client;
    let id = "bench-interp";
    let ctx = c
        .create_context(
            id,
            &CreateContextRequest {
                language: "python".into(),
                ..Default::default()
            },
        )
        .await
        .context("create a python context")?;
    let run = RunCodeRequest {
        code: "1+1".into(),
        timeout_ms: Some(10_000),
    };
    let exec = ExecRequest {
        argv: Some(vec!["python3".into(), "-c".into(), "1+1".into()]),
        timeout_ms: Some(10_000),
        ..Default::default()
    };
    // Warm both paths (connections, page cache).
    for _ in 0..3 {
        c.run_code(id, &ctx.id, &run).await?;
        c.exec(id, &exec).await?;
    }
    let (mut interp, mut baseline) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..n {
        if Instant::now() > deadline {
            break;
        }
        let t = Instant::now();
        let r = c.run_code(id, &ctx.id, &run).await?;
        interp.push(t.elapsed());
        anyhow::ensure!(
            r.results.first().and_then(|x| x.text.as_deref()) == Some("2"),
            "unexpected result {r:?}"
        );
        let t = Instant::now();
        let r = c.exec(id, &exec).await?;
        baseline.push(t.elapsed());
        anyhow::ensure!(r.exit_code == 0, "python3 -c failed: {}", r.stderr);
    }
    let (i50, _) = percentiles(&interp);
    let (b50, _) = percentiles(&baseline);
    table.add_sampled(
        "interpreter run `1+1`, warm",
        &interp,
        "exec `python3 -c '1+1'`",
        &baseline,
        &format!("{:.1}x faster than a new interpreter at p50", b50 / i50),
    );
    let _ = c.delete_context(id, &ctx.id).await;
    Ok(())
}
