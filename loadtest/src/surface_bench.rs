//! Interactive surfaces: keystroke echo through a terminal (entering the owner and a
//! non-owner), and how soon a watch reports a change.

use crate::cluster_node::BenchCluster;
use crate::node::BenchNode;
use crate::report::{percentiles, Table};
use anyhow::Context;
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use warren_api::terminal::{ServerControl, TerminalQuery};
use warren_api::watch::{WatchEvent, WatchQuery};
use warren_client::{TerminalEvent, TerminalSocket};

const LIMIT: Duration = Duration::from_secs(10);

async fn until_ready(t: &mut TerminalSocket) -> anyhow::Result<()> {
    loop {
        match tokio::time::timeout(LIMIT, t.next()).await? {
            Some(Ok(TerminalEvent::Control(ServerControl::Ready { .. }))) => return Ok(()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("terminal closed before ready"),
        }
    }
}

/// Sends one key and waits until the shell's echo of it comes back.
async fn echo_once(t: &mut TerminalSocket, key: u8) -> anyhow::Result<Duration> {
    let started = Instant::now();
    t.send(vec![key]).await?;
    loop {
        match tokio::time::timeout(LIMIT, t.next()).await? {
            Some(Ok(TerminalEvent::Output(b))) if b.contains(&key) => return Ok(started.elapsed()),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => anyhow::bail!("terminal closed"),
        }
    }
}

/// Clears the shell's input line (Ctrl-U) and drains its redraw.
async fn clear_line(t: &mut TerminalSocket) -> anyhow::Result<()> {
    t.send(vec![0x15]).await?;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(30), t.next()).await {}
    Ok(())
}

/// Keystroke echo latency entering the sandbox's owner and entering another node,
/// interleaved so both see the same machine noise.
pub async fn terminal_echo(
    c: &BenchCluster,
    owner: usize,
    n: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    let id = "bench-fwd";
    let other = (owner + 1) % c.clients.len();
    let q = TerminalQuery {
        cols: Some(200),
        rows: Some(50),
        ..Default::default()
    };
    let mut direct_t = c.clients[owner].terminal(id, "bench-a", &q).await?;
    let mut fwd_t = c.clients[other].terminal(id, "bench-b", &q).await?;
    until_ready(&mut direct_t).await?;
    until_ready(&mut fwd_t).await?;
    let (mut direct, mut forwarded) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let deadline = Instant::now() + Duration::from_secs(120);
    let keys = b"abcdefghijklmnopqrstuvwxyz";
    for i in 0..n {
        if Instant::now() > deadline {
            break;
        }
        let key = keys[i % keys.len()];
        direct.push(echo_once(&mut direct_t, key).await?);
        forwarded.push(echo_once(&mut fwd_t, key).await?);
        if i % 50 == 49 {
            clear_line(&mut direct_t).await?;
            clear_line(&mut fwd_t).await?;
        }
    }
    let (d50, _) = percentiles(&direct);
    let (f50, _) = percentiles(&forwarded);
    table.add_sampled(
        "terminal keystroke echo, non-owner",
        &forwarded,
        "same, entering the owner",
        &direct,
        &format!("+{:.2} ms at p50 through the forwarder", f50 - d50),
    );
    Ok(())
}

/// Time from the start of `touch` through the exec API to the watch's event for it, vs the
/// exec call alone.
pub async fn watch_latency(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let c = &node.client;
    let id = "bench-watch";
    c.sh(id, "mkdir -p /workspace/watched").await?;
    let q = WatchQuery {
        path: "/workspace/watched".into(),
        recursive: true,
        ..Default::default()
    };
    let mut w = c.watch(id, &q).await?;
    let (mut seen, mut exec) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let deadline = Instant::now() + Duration::from_secs(120);
    for i in 0..n {
        if Instant::now() > deadline {
            break;
        }
        let path = format!("/workspace/watched/f{i}");
        let started = Instant::now();
        c.sh(id, &format!("touch {path}")).await?;
        exec.push(started.elapsed());
        loop {
            let ev = tokio::time::timeout(LIMIT, w.next())
                .await?
                .context("the watch ended")??;
            if matches!(&ev, WatchEvent::Event { path: p, .. } if *p == path) {
                seen.push(started.elapsed());
                break;
            }
        }
    }
    let (s50, _) = percentiles(&seen);
    table.add_sampled(
        "watch event after touch",
        &seen,
        "the touch's exec call alone",
        &exec,
        &format!("event {s50:.1} ms after the touch began (target <= 100 ms)"),
    );
    Ok(())
}
