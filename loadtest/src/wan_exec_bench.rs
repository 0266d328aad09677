//! What forwarding across regions adds: `exec true` in a sandbox of region `r1`, entering
//! the node of region `r2` (forwarded over QUIC through the WAN relay) against entering the
//! owner, interleaved, at 20, 80 and 150 ms between the regions. The target: a forwarded
//! request pays one round trip between the regions and nothing more (the entry node reads
//! the owner from its applied state, and the pooled connection needs no handshake).

use crate::cluster_node::{interleaved_execs, BenchCluster};
use crate::report::{percentiles, Table};
use anyhow::Context;
use std::time::Duration;
use warren_cli::wan::DelayMatrix;

/// The round trips between the two regions, in turn.
const RTTS_MS: [u64; 3] = [20, 80, 150];

pub async fn forwarded_exec_across_regions(n: usize, table: &mut Table) -> anyhow::Result<()> {
    for rtt_ms in RTTS_MS {
        let rtt = Duration::from_millis(rtt_ms);
        let mut delays = DelayMatrix::default();
        delays.set("r1", "r2", rtt);
        let c = BenchCluster::start_wan(2, 2, delays).await?;
        // Node 0 is in r1, node 1 in r2; the sandbox is placed in r1.
        let id = format!("wanexec-{rtt_ms}");
        let made = c.clients[1]
            .request(reqwest::Method::PUT, &format!("/v1/sandboxes/{id}"))
            .json(&serde_json::json!({ "region": "r1" }))
            .send()
            .await?;
        anyhow::ensure!(
            made.status().is_success(),
            "create in r1: {}",
            made.text().await?
        );
        let owner = c.clients[0]
            .request(reqwest::Method::GET, &format!("/v1/sandboxes/{id}"))
            .send()
            .await?
            .json::<serde_json::Value>()
            .await?["node"]
            .as_str()
            .context("the sandbox's node")?
            .to_string();
        anyhow::ensure!(owner == c.names[0], "placed on {owner}, not in r1");
        let (direct, forwarded) = interleaved_execs(&c.clients[0], &c.clients[1], &id, n).await?;
        let (d50, _) = percentiles(&direct);
        let (f50, _) = percentiles(&forwarded);
        let added = f50 - d50;
        table.add_sampled(
            &format!("exec `true` from a region {rtt_ms} ms away"),
            &forwarded,
            "same, entering the owner",
            &direct,
            &format!(
                "+{added:.1} ms at p50 = {:.2} round trips (target: 1)",
                added / rtt_ms as f64
            ),
        );
    }
    Ok(())
}
