//! Failover time: the node that owns N sandboxes (each holding a file, checkpointed) is
//! killed with SIGKILL; the clock runs until every one of them answers again, with its file,
//! through a surviving node. Requests wait for the failover at the entry node, so each
//! sandbox is asked once, with a long timeout, and asked again only on an error.
//!
//! Baselines from the same run: the failure detector's floor (`down_after`, the time before
//! anyone may act), and waking N slept sandboxes at once on a live node of the same cluster
//! (the restore work a failover repeats on the survivors).

use crate::cluster_node::BenchCluster;
use crate::report::{percentiles, Row, Table};
use anyhow::Context;
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use warren_client::Client;

/// The nodes' failure detector (the default).
const DOWN_AFTER: Duration = Duration::from_secs(8);

/// Exec `script` in `id` entering `client`: the answering node and stdout.
async fn exec(client: &Client, id: &str, script: &str) -> anyhow::Result<(String, String)> {
    let r = client
        .request(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&serde_json::json!({ "command": script }))
        .timeout(Duration::from_secs(60))
        .send()
        .await?;
    let node = r
        .headers()
        .get("x-warren-node")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let status = r.status();
    let body: serde_json::Value = r.json().await?;
    anyhow::ensure!(status.is_success(), "{status}: {body}");
    Ok((
        node,
        body["stdout"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Waits until every sandbox of `ids` has a snapshot listed (its first checkpoint), then a
/// moment for the commit that records it.
async fn wait_checkpoints(client: &Client, ids: &[String]) -> anyhow::Result<()> {
    let deadline = Instant::now() + back_within(ids.len());
    for id in ids {
        loop {
            let v: serde_json::Value = client
                .request(reqwest::Method::GET, &format!("/v1/snapshots?sandbox={id}"))
                .send()
                .await?
                .json()
                .await?;
            if v["snapshots"].as_array().is_some_and(|a| !a.is_empty()) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "no checkpoint of {id}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok(())
}

/// How long `n` sandboxes may take to come back: two minutes, and a second more for each
/// (restores on two cores run a few per second).
fn back_within(n: usize) -> Duration {
    Duration::from_secs(120 + n as u64)
}

/// Until `id` answers with its file through `client`: the time since `t0` (at most `limit`).
async fn served_again(
    client: Client,
    id: String,
    t0: Instant,
    limit: Duration,
) -> anyhow::Result<Duration> {
    let deadline = t0 + limit;
    loop {
        match exec(&client, &id, "cat /workspace/f").await {
            Ok((_, out)) if out.trim() == id => return Ok(t0.elapsed()),
            Ok((node, out)) => anyhow::bail!("{id} came back on {node} without its file: {out:?}"),
            Err(e) => {
                anyhow::ensure!(Instant::now() < deadline, "{id} did not come back: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Sandboxes created at once while setting up (Docker's start rate bounds them anyway).
const CREATE_AT_ONCE: usize = 8;

/// Runs `script` in each of `ids` (creating them) entering `client`, `CREATE_AT_ONCE` at a
/// time: the node that answered each.
async fn create_all(client: &Client, ids: &[String]) -> anyhow::Result<Vec<String>> {
    futures_util::stream::iter(ids)
        .map(|id| async move {
            exec(client, id, &format!("echo {id} > /workspace/f"))
                .await
                .map(|(node, _)| node)
                .with_context(|| format!("create {id}"))
        })
        .buffered(CREATE_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Applies `call` to every id, `CREATE_AT_ONCE` at a time.
async fn each<'a, F, Fut>(ids: &'a [String], call: F) -> anyhow::Result<()>
where
    F: Fn(&'a String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    futures_util::stream::iter(ids)
        .map(call)
        .buffer_unordered(CREATE_AT_ONCE)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// The baseline: `kept` made on the live nodes entering `entry`, slept, and woken at once;
/// deleted afterwards. How long each took to answer again.
async fn wake_baseline(
    c: &BenchCluster,
    entry: usize,
    victim: usize,
    kept: &[String],
) -> anyhow::Result<Vec<Duration>> {
    let n = kept.len();
    let t = Instant::now();
    let placed = create_all(&c.clients[entry], kept).await?;
    anyhow::ensure!(
        placed.iter().all(|node| node != &c.names[victim]),
        "a baseline sandbox was placed on the node to be killed"
    );
    eprintln!(
        "failover: {n} baseline sandboxes made in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let client = &c.clients[entry];
    each(kept, |id| async move {
        client.sleep(id).await.map(|_| ()).map_err(Into::into)
    })
    .await?;
    let t0 = Instant::now();
    let wakes = futures_util::future::join_all(
        kept.iter()
            .map(|id| served_again(c.clients[entry].clone(), id.clone(), t0, back_within(n))),
    )
    .await
    .into_iter()
    .collect::<anyhow::Result<Vec<Duration>>>()?;
    each(kept, |id| async move {
        client.delete_sandbox(id).await.map_err(Into::into)
    })
    .await?;

    Ok(wakes)
}

/// Three nodes, node 1 alone in region `r2`: what enters it is placed on it, so the doomed
/// sandboxes are made there directly, and the baseline's on the two nodes of `r1`.
/// `with_baseline`: whether the wake baseline runs (at 1,000 it takes longer than the
/// failover; without it the row compares with the detector's floor alone).
pub async fn failover_time(n: usize, with_baseline: bool, table: &mut Table) -> anyhow::Result<()> {
    let mut c = BenchCluster::start_each(3, |i| {
        format!(
            "checkpoint_every_s = 1\nregion = \"r{}\"\n",
            if i == 1 { 2 } else { 1 }
        )
    })
    .await?;
    let victim = 1;
    let leader = c.leader().await?;
    // Requests enter a survivor, the leader when it survives (killing the leader adds an
    // election: the row says so).
    let entry = if leader == victim { 0 } else { leader };
    let tag = hex::encode(rand::random::<[u8; 3]>());
    let doomed: Vec<String> = (0..n).map(|k| format!("fo-{tag}-d{k}")).collect();
    let kept: Vec<String> = (0..n).map(|k| format!("fo-{tag}-k{k}")).collect();

    // Baseline: N slept sandboxes on the live nodes, woken at once; deleted afterwards so
    // that only the failover's containers load the survivors.
    let wakes = if with_baseline {
        wake_baseline(&c, entry, victim, &kept).await?
    } else {
        Vec::new()
    };

    let t = Instant::now();
    let placed = create_all(&c.clients[victim], &doomed).await?;
    anyhow::ensure!(
        placed.iter().all(|node| node == &c.names[victim]),
        "a sandbox entering the only node of its region was placed elsewhere"
    );
    eprintln!(
        "failover: {n} sandboxes made on the node to be killed in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    wait_checkpoints(&c.clients[entry], &doomed).await?;
    let victim_name = c.names[victim].clone();
    c.kill(victim);
    let t0 = Instant::now();
    let back = futures_util::future::join_all(
        doomed
            .iter()
            .map(|id| served_again(c.clients[entry].clone(), id.clone(), t0, back_within(n))),
    )
    .await
    .into_iter()
    .collect::<anyhow::Result<Vec<Duration>>>()
    .context("failover")?;
    let all = back.iter().max().copied().unwrap_or_default();
    // Said now: the table prints after the cluster's removal, which can take minutes.
    let (p50, p99) = percentiles(&back);
    eprintln!(
        "failover: all {n} back in {:.1} s after the kill (p50 {:.0} ms, p99 {:.0} ms)",
        all.as_secs_f64(),
        p50,
        p99
    );
    let wake_all = wakes.iter().max().copied().unwrap_or_default();
    let election = if leader == victim {
        ", the leader: an election first"
    } else {
        ""
    };
    let (baseline_name, baseline) = if wakes.is_empty() {
        ("down_after alone (no wake baseline)".to_string(), {
            let floor = DOWN_AFTER.as_secs_f64() * 1000.0;
            (floor, floor)
        })
    } else {
        (
            format!("down_after + waking {n} slept"),
            (
                (DOWN_AFTER + percentiles_dur(&wakes).0).as_secs_f64() * 1000.0,
                (DOWN_AFTER + wake_all).as_secs_f64() * 1000.0,
            ),
        )
    };
    table.add(Row {
        name: format!("failover of {n} sandboxes (kill -9)"),
        n,
        ours: percentiles(&back),
        baseline_name,
        baseline,
        target: format!(
            "all {n} back in {:.1} s after {victim_name} died (detector {} s{election})",
            all.as_secs_f64(),
            DOWN_AFTER.as_secs()
        ),
    });
    let failover_rate = n as f64 / all.saturating_sub(DOWN_AFTER).as_secs_f64().max(0.001);
    table.note(if wakes.is_empty() {
        format!(
            "failover: each of {n} sandboxes asked once through a survivor right after the kill (requests wait for the failover); restores per second after the detector: {failover_rate:.2} (no wake baseline in this run)"
        )
    } else {
        format!(
            "failover: each of {n} sandboxes asked once through a survivor right after the kill (requests wait for the failover); waking {n} slept sandboxes at once on the live nodes took {:.2} s; restores per second: failover {failover_rate:.2}, waking {:.2}",
            wake_all.as_secs_f64(),
            n as f64 / wake_all.as_secs_f64().max(0.001),
        )
    });
    Ok(())
}

fn percentiles_dur(samples: &[Duration]) -> (Duration, Duration) {
    let (a, b) = percentiles(samples);
    (
        Duration::from_secs_f64(a / 1000.0),
        Duration::from_secs_f64(b / 1000.0),
    )
}
