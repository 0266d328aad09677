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

pub async fn failover_time(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let mut c = BenchCluster::start_with(3, "checkpoint_every_s = 1\n").await?;
    let leader = c.leader().await?;
    // The victim is a follower (killing the leader adds an election: another scenario);
    // requests enter the leader.
    let victim = (leader + 1) % 3;
    let entry = leader;
    let (mut doomed, mut kept) = (Vec::new(), Vec::new());
    let tag = hex::encode(rand::random::<[u8; 3]>());
    for k in 0..(n * 12) {
        if doomed.len() >= n && kept.len() >= n {
            break;
        }
        let id = format!("fo-{tag}-{k}");
        let (node, _) = exec(&c.clients[entry], &id, &format!("echo {id} > /workspace/f")).await?;
        let list = if node == c.names[victim] {
            &mut doomed
        } else {
            &mut kept
        };
        if list.len() < n {
            list.push(id);
        } else {
            c.clients[entry].delete_sandbox(&id).await?;
        }
    }
    anyhow::ensure!(
        doomed.len() == n && kept.len() == n,
        "placement gave {} and {} of {n}",
        doomed.len(),
        kept.len()
    );

    // Baseline: N slept sandboxes on live nodes, woken at once.
    for id in &kept {
        c.clients[entry].sleep(id).await?;
    }
    let t0 = Instant::now();
    let wakes = futures_util::future::join_all(
        kept.iter()
            .map(|id| served_again(c.clients[entry].clone(), id.clone(), t0, back_within(n))),
    )
    .await
    .into_iter()
    .collect::<anyhow::Result<Vec<Duration>>>()?;

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
    let wake_all = wakes.iter().max().copied().unwrap_or_default();
    table.add(Row {
        name: format!("failover of {n} sandboxes (kill -9)"),
        n,
        ours: percentiles(&back),
        baseline_name: format!("down_after + waking {n} slept"),
        baseline: (
            (DOWN_AFTER + percentiles_dur(&wakes).0).as_secs_f64() * 1000.0,
            (DOWN_AFTER + wake_all).as_secs_f64() * 1000.0,
        ),
        target: format!(
            "all {n} back in {:.1} s after {victim_name} died (detector {} s)",
            all.as_secs_f64(),
            DOWN_AFTER.as_secs()
        ),
    });
    table.note(format!(
        "failover: each of {n} sandboxes asked once through the leader right after the kill (requests wait for the failover); waking {n} slept sandboxes at once on live nodes took {:.2} s",
        wake_all.as_secs_f64()
    ));
    Ok(())
}

fn percentiles_dur(samples: &[Duration]) -> (Duration, Duration) {
    let (a, b) = percentiles(samples);
    (
        Duration::from_secs_f64(a / 1000.0),
        Duration::from_secs_f64(b / 1000.0),
    )
}
