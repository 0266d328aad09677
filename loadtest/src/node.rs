//! A node started from this build for the duration of a benchmark, removed afterwards.

use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use warren_client::Client;

pub struct BenchNode {
    child: Child,
    pub url: String,
    pub node_id: String,
    pub image: String,
    pub client: Client,
    /// Warm containers the node keeps ready (`WARREN_BENCH_WARM_CONTAINERS`, default 4).
    pub warm: usize,
    data_dir: PathBuf,
}

impl BenchNode {
    /// Starts `warren serve` (the binary next to this one) on a free port, with
    /// `WARREN_BENCH_WARM_CONTAINERS` warm containers (default 4).
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with_warm(warm_size()).await
    }

    /// The same with `warm` warm containers.
    pub async fn start_with_warm(warm: usize) -> anyhow::Result<Self> {
        Self::start_with(warm, &[]).await
    }

    /// The same with more `warren serve` flags.
    pub async fn start_with(warm: usize, extra: &[&str]) -> anyhow::Result<Self> {
        let exe = std::env::current_exe()?;
        let warren = exe.with_file_name("warren");
        let node_id = format!("bench{}", hex::encode(rand::random::<[u8; 3]>()));
        let data_dir = PathBuf::from(format!("/tmp/wb-{node_id}"));
        let mut child = Command::new(&warren)
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--node-id",
                &node_id,
                "--data-dir",
            ])
            .arg(&data_dir)
            .args(["--warm-containers", &warm.to_string()])
            // A fixed pool unless a scenario asks for one that follows demand.
            .env("WARREN_WARM_MAX", "0")
            // Benchmarks measure the node, not the per-key limit.
            .args(["--rate-limit-per-s", "0"])
            .args(extra)
            .env(
                "WARREN_LOG",
                std::env::var("WARREN_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            // Stops with this benchmark, however it ends.
            .env("WARREN_EXIT_WITH_PARENT", "1")
            .spawn()
            .with_context(|| format!("cannot start {}", warren.display()))?;
        let mut line = String::new();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        out.read_line(&mut line)?;
        std::thread::spawn(move || for _ in out.lines() {});
        let ready: serde_json::Value =
            serde_json::from_str(&line).with_context(|| format!("node did not start: {line:?}"))?;
        let url = ready["ready"].as_str().context("ready line")?.to_string();
        let key = std::fs::read_to_string(data_dir.join("api-key"))?
            .trim()
            .to_string();
        let client = Client::new(&url, &key)?;
        client.health().await?;
        let image = default_image();
        Ok(BenchNode {
            child,
            url,
            node_id,
            image,
            client,
            warm,
            data_dir,
        })
    }

    /// Waits (at most 60 s) until the node has all its warm containers ready again: the
    /// steady state between requests, in which every measurement starts.
    pub async fn wait_warm(&self) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let ready = self.metric("warren_warm_containers ").await?;
            if ready >= self.warm {
                return Ok(());
            }
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "only {ready} of {} warm containers after 60 s",
                self.warm
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// The value of the node's metric line that starts with `prefix` (see [`metric_of`]).
    pub async fn metric(&self, prefix: &str) -> anyhow::Result<usize> {
        metric_of(&self.client, prefix).await
    }

    /// The node process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Docker's name for a sandbox's container.
    pub fn container(&self, sandbox: &str) -> String {
        format!("wrn-{}-{sandbox}", self.node_id)
    }
}

/// The value of the metric line that starts with `prefix` (name and labels, and the space
/// before the value) in the `/metrics` of the node `client` talks to, 0 when there is none.
pub async fn metric_of(client: &Client, prefix: &str) -> anyhow::Result<usize> {
    let text = client
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as usize)
}

fn warm_size() -> usize {
    std::env::var("WARREN_BENCH_WARM_CONTAINERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4)
}

pub fn default_image() -> String {
    format!(
        "warren/sandbox:{}",
        include_str!("../../deploy/image/VERSION").trim()
    )
}

impl Drop for BenchNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        warren_node::runtime::docker::remove_node_resources_blocking(&self.node_id);
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}
