//! A three-node cluster of `warren serve` processes from this build, for forwarding
//! benchmarks; removed afterwards.

use crate::report::{percentiles, Table};
use anyhow::Context;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warren_cli::wan::{DelayMatrix, WanRelay};
use warren_client::Client;

pub struct BenchCluster {
    children: Vec<Child>,
    pub names: Vec<String>,
    pub clients: Vec<Client>,
    dir: PathBuf,
    /// Between the nodes' QUIC endpoints when they are in regions apart (`start_wan`).
    wan: Option<Wan>,
}

/// Nodes spread over regions (`r1`, `r2`, …) whose datagrams pass a relay that delays them
/// by the regions' round trip.
struct Wan {
    relay: WanRelay,
    regions: usize,
}

fn free_port(udp: bool) -> u16 {
    if udp {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

impl BenchCluster {
    pub async fn start(n: usize) -> anyhow::Result<Self> {
        Self::start_with(n, "").await
    }

    /// Like [`start`](Self::start), with more settings (TOML lines) for every node.
    pub async fn start_with(n: usize, extra: &str) -> anyhow::Result<Self> {
        Self::start_each(n, |_| extra.to_string()).await
    }

    /// Like [`start`](Self::start), with more settings (TOML lines) for node `i` from
    /// `extra(i)`.
    pub async fn start_each(n: usize, extra: impl Fn(usize) -> String) -> anyhow::Result<Self> {
        Self::start_inner(n, extra, None).await
    }

    /// `n` nodes on default timing, node `i` in region `r{i % regions + 1}`, with the round
    /// trips of `delays` between the regions (the user-space relay `warren local-cluster
    /// --wan` uses). Call from a multi-threaded runtime: the relay runs on it.
    pub async fn start_wan(n: usize, regions: usize, delays: DelayMatrix) -> anyhow::Result<Self> {
        let wan = Wan {
            relay: WanRelay::new(delays, 0.0),
            regions: regions.max(1),
        };
        Self::start_inner(n, |_| String::new(), Some(wan)).await
    }

    async fn start_inner(
        n: usize,
        extra: impl Fn(usize) -> String,
        wan: Option<Wan>,
    ) -> anyhow::Result<Self> {
        let warren = std::env::current_exe()?.with_file_name("warren");
        let tag = hex::encode(rand::random::<[u8; 3]>());
        let dir = PathBuf::from(format!("/tmp/wbc-{tag}"));
        std::fs::create_dir_all(&dir)?;
        let key = format!("wk_{}", hex::encode(rand::random::<[u8; 12]>()));
        std::fs::write(dir.join("api-key"), &key)?;
        let mut me = BenchCluster {
            children: Vec::new(),
            names: Vec::new(),
            clients: Vec::new(),
            dir: dir.clone(),
            wan,
        };
        for i in 0..n {
            let name = format!("bc{tag}n{i}");
            let join = me
                .clients
                .first()
                .map(|c| format!("join = \"{}\"\n", c.base_url()))
                .unwrap_or_default();
            let cfg = dir.join(format!("{name}.toml"));
            let peer_port = free_port(true);
            let placed = match &me.wan {
                Some(wan) => {
                    let region = format!("r{}", i % wan.regions + 1);
                    let real = std::net::SocketAddr::from(([127, 0, 0, 1], peer_port));
                    let front = wan
                        .relay
                        .add_node([127, 0, 0, 1].into(), real, &region)
                        .context("a relay address")?;
                    format!("region = \"{region}\"\nadvertise_peer = \"{front}\"\n")
                }
                None => String::new(),
            };
            std::fs::write(
                &cfg,
                format!(
                    "name = \"{name}\"\ndata_dir = \"{}\"\nlisten = \"127.0.0.1:{}\"\npeer_listen = \"127.0.0.1:{peer_port}\"\n\
                     {join}join_token = \"wj_{tag}\"\napi_key_file = \"{}\"\nspare_networks = 1\nwarm_max = 0\nrate_limit_per_s = 0\n\
                     {placed}object_store = \"{}\"\n{}\n",
                    dir.join(&name).display(),
                    free_port(false),
                    dir.join("api-key").display(),
                    dir.join("objects").display(),
                    extra(i),
                ),
            )?;
            let mut child = Command::new(&warren)
                .args(["serve", "--config"])
                .arg(&cfg)
                .env(
                    "WARREN_LOG",
                    std::env::var("WARREN_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
                )
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                // Stops with this benchmark, however it ends.
                .env("WARREN_EXIT_WITH_PARENT", "1")
                .spawn()
                .context("start node")?;
            let mut out = BufReader::new(child.stdout.take().expect("stdout"));
            let mut line = String::new();
            out.read_line(&mut line)?;
            std::thread::spawn(move || for _ in out.lines() {});
            let ready: serde_json::Value = serde_json::from_str(&line)
                .with_context(|| format!("node did not start: {line:?}"))?;
            me.clients
                .push(Client::new(ready["ready"].as_str().context("url")?, &key)?);
            me.names.push(name);
            me.children.push(child);
        }
        // Wait for every node to be up, and for the voters the cluster wants (an odd number).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let v: serde_json::Value = me.clients[0]
                .request(reqwest::Method::GET, "/v1/cluster")
                .send()
                .await?
                .json()
                .await?;
            let voters = v["nodes"]
                .as_array()
                .map(|a| a.iter().filter(|n| n["voter"] == true).count())
                .unwrap_or(0);
            let all_up = v["nodes"]
                .as_array()
                .is_some_and(|a| a.len() == n && a.iter().all(|x| x["state"] == "up"));
            if all_up && voters == n.min(5) - (1 - n.min(5) % 2) {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "cluster did not form: {v}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(me)
    }
}

impl BenchCluster {
    /// Kills node `i` with SIGKILL (its containers are left to the cleanup at the end).
    pub fn kill(&mut self, i: usize) {
        let _ = self.children[i].kill();
        let _ = self.children[i].wait();
    }

    /// The process ids of the nodes.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// The directory the nodes keep snapshots in (their object store).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("objects")
    }

    /// The index of the current leader, by node 0's view.
    pub async fn leader(&self) -> anyhow::Result<usize> {
        let v: serde_json::Value = self.clients[0]
            .request(reqwest::Method::GET, "/v1/cluster")
            .send()
            .await?
            .json()
            .await?;
        let name = v["leader"].as_str().context("no leader")?;
        self.names
            .iter()
            .position(|n| n == name)
            .context("leader not a node of this cluster")
    }
}

impl Drop for BenchCluster {
    fn drop(&mut self) {
        for c in self.children.iter_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for name in &self.names {
            warren_node::runtime::docker::remove_node_resources_blocking(name);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `exec true` entering the owner vs entering another node, interleaved. Returns the index
/// of the owner of the sandbox it used (`bench-fwd`).
pub async fn forwarding_overhead(
    c: &BenchCluster,
    n: usize,
    table: &mut Table,
) -> anyhow::Result<usize> {
    let id = "bench-fwd";
    let r = c.clients[0]
        .request(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&serde_json::json!({"command": "true"}))
        .send()
        .await?;
    let owner_name = r
        .headers()
        .get("x-warren-node")
        .context("node header")?
        .to_str()?
        .to_string();
    let owner = c
        .names
        .iter()
        .position(|x| *x == owner_name)
        .context("owner")?;
    let other = (owner + 1) % 3;
    let (direct, forwarded) =
        interleaved_execs(&c.clients[owner], &c.clients[other], id, n).await?;
    let (d50, _) = percentiles(&direct);
    let (f50, _) = percentiles(&forwarded);
    table.add_sampled(
        "exec `true` entering a non-owner",
        &forwarded,
        "same, entering the owner",
        &direct,
        &format!("+{:.2} ms at p50 (target <= +1 ms)", f50 - d50),
    );
    Ok(owner)
}

/// `exec true` in sandbox `id` entering `owner` and entering `other`, interleaved, `n` each
/// (at most two minutes) after 20 of each not counted: the two arms' latencies.
pub async fn interleaved_execs(
    owner: &Client,
    other: &Client,
    id: &str,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    for _ in 0..20 {
        owner.sh(id, "true").await?;
        other.sh(id, "true").await?;
    }
    let (mut direct, mut forwarded) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..n {
        if Instant::now() > deadline {
            break;
        }
        let t = Instant::now();
        owner.sh(id, "true").await?;
        direct.push(t.elapsed());
        let t = Instant::now();
        other.sh(id, "true").await?;
        forwarded.push(t.elapsed());
    }
    Ok((direct, forwarded))
}
