//! Real multi-node clusters for tests: one `warren serve --config` process per node on
//! loopback, each with its own data dir; kill -9, SIGSTOP/SIGCONT and restarts per node;
//! partitions between chosen nodes (`faults`).

use super::faults::Faults;
use super::harness::{guest_bin, running_containers, unique};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warren_client::Client;

pub struct TestNode {
    pub name: String,
    pub region: String,
    pub config: PathBuf,
    pub url: String,
    pub client: Client,
    /// The UDP port of its QUIC endpoint (what partitions cut).
    pub peer_port: u16,
    child: Option<Child>,
    stopped: bool,
    /// Its log levels (`WARREN_LOG`).
    log_filter: String,
    /// Every line it logged, as well as printed.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    /// The `warren` binary it starts with (this build's unless a test says otherwise).
    bin: PathBuf,
}

pub struct TestCluster {
    pub nodes: Vec<TestNode>,
    dir: PathBuf,
    prefix: String,
    key: String,
    token: String,
    /// More settings (TOML lines) for every node.
    extra: String,
    /// The nodes' object store (default: a directory of the cluster's).
    store: Option<String>,
    /// Partitions, made on first use.
    faults: Option<Faults>,
    /// The nodes' log levels (`WARREN_LOG`).
    log_filter: String,
    /// The WAN between regions, when the test asked for one: every node advertises its
    /// relay address as its peer address.
    wan: Option<Wan>,
    /// The `warren` binary new nodes start with.
    bin: PathBuf,
}

/// This build's `warren` binary.
fn this_build() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_warren"))
}

/// The relay between a WAN cluster's regions, on a runtime of its own: the harness blocks
/// its test's thread while a node starts (reading its ready line), and a node that joins
/// needs the cluster to commit through the relay meanwhile.
struct Wan {
    relay: warren_cli::wan::WanRelay,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Wan {
    fn new(delays: warren_cli::wan::DelayMatrix) -> Wan {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("wan-relay")
            .enable_all()
            .build()
            .expect("a runtime for the relay");
        Wan {
            relay: warren_cli::wan::WanRelay::new(delays, 0.0),
            runtime: Some(runtime),
        }
    }
}

impl Drop for Wan {
    fn drop(&mut self) {
        // Without blocking: a test drops its cluster inside its own runtime.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl TestNode {
    fn spawn(&mut self) {
        if let Err(e) = self.try_spawn() {
            panic!("node {} did not start: {e}", self.name);
        }
    }

    /// Starts the node; why not, when it exits before it is ready.
    fn try_spawn(&mut self) -> Result<(), String> {
        let mut child = Command::new(&self.bin)
            .args(["serve", "--config"])
            .arg(&self.config)
            // Stops with this test process, however it ends.
            .env(warren_daemon::EXIT_WITH_PARENT_ENV, "1")
            .env("WARREN_RUN_ID", super::harness::run_id())
            // WARREN_TEST_LOG widens the nodes' logs when a test needs investigating.
            .env(
                "WARREN_LOG",
                std::env::var("WARREN_TEST_LOG").unwrap_or_else(|_| self.log_filter.clone()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start node");
        // Kept, and printed as they come only with WARREN_TEST_LOG_LIVE: a failing test
        // prints its own lines and its panic first, then the nodes' last lines (Drop), so
        // that a truncated CI log still shows why it failed.
        let err = BufReader::new(child.stderr.take().unwrap());
        let (name, log) = (self.name.clone(), self.log.clone());
        let live = std::env::var_os("WARREN_TEST_LOG_LIVE").is_some_and(|v| !v.is_empty());
        let reader = std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                if live {
                    eprintln!("[{name}] {line}");
                }
                log.lock().unwrap().push(line);
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let ready: serde_json::Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = child.kill();
                let status = child.wait().unwrap();
                // Its standard error ends with it: why it stopped is in its last lines.
                let _ = reader.join();
                let log = self.log.lock().unwrap();
                let last = log[log.len().saturating_sub(30)..].join("\n");
                return Err(format!("{status} ({e}): {line:?}\n{last}"));
            }
        };
        self.url = ready["ready"].as_str().unwrap().to_string();
        std::thread::spawn(move || for _ in out.lines() {});
        self.child = Some(child);
        self.stopped = false;
        Ok(())
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    pub fn running(&self) -> bool {
        self.child.is_some() && !self.stopped
    }

    fn signal(&self, sig: &str) {
        Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
    }
}

impl TestCluster {
    /// Starts `n` nodes spread over `regions` regions; returns once all are members.
    pub async fn start(n: usize, regions: usize) -> TestCluster {
        TestCluster::start_with(n, regions, "").await
    }

    /// Like [`start_with`](Self::start_with), with every node on the object store at
    /// `location` (e.g. an S3 bucket) instead of a shared directory.
    pub async fn start_on_store(n: usize, extra: &str, location: &str) -> TestCluster {
        TestCluster::start_inner(n, 1, extra, Some(location.to_string()), None, None, None).await
    }

    /// Like [`start_with`](Self::start_with), with the round trips of `wan` (the regions are
    /// `r1`, `r2`, …) between the nodes' QUIC endpoints (`warren_cli::wan`).
    pub async fn start_wan(
        n: usize,
        regions: usize,
        wan: warren_cli::wan::DelayMatrix,
        extra: &str,
    ) -> TestCluster {
        TestCluster::start_inner(n, regions, extra, None, None, Some(wan), None).await
    }

    /// Like [`start`](Self::start), with more settings (TOML lines) for every node.
    pub async fn start_with(n: usize, regions: usize, extra: &str) -> TestCluster {
        TestCluster::start_inner(n, regions, extra, None, None, None, None).await
    }

    /// Like `start`, the nodes logging at `log_filter` (a `WARREN_LOG` directive).
    pub async fn start_logging(n: usize, log_filter: &str) -> TestCluster {
        TestCluster::start_inner(n, 1, "", None, Some(log_filter), None, None).await
    }

    /// Like [`start_with`](Self::start_with), the nodes logging at `log_filter`.
    pub async fn start_with_logging(
        n: usize,
        regions: usize,
        extra: &str,
        log_filter: &str,
    ) -> TestCluster {
        TestCluster::start_inner(n, regions, extra, None, Some(log_filter), None, None).await
    }

    /// Like [`start_with`](Self::start_with), every node started with the `warren` binary
    /// at `bin` (another version's; [`use_this_build`](Self::use_this_build) upgrades one).
    pub async fn start_on_binary(
        n: usize,
        regions: usize,
        extra: &str,
        bin: PathBuf,
    ) -> TestCluster {
        TestCluster::start_inner(n, regions, extra, None, None, None, Some(bin)).await
    }

    async fn start_inner(
        n: usize,
        regions: usize,
        extra: &str,
        store: Option<String>,
        log_filter: Option<&str>,
        wan: Option<warren_cli::wan::DelayMatrix>,
        bin: Option<PathBuf>,
    ) -> TestCluster {
        let prefix = format!("c{}", &unique()[..6]);
        let dir = PathBuf::from(format!("/tmp/wc-{prefix}"));
        std::fs::create_dir_all(&dir).unwrap();
        let key = format!("wk_{}", unique());
        std::fs::write(dir.join("api-key"), &key).unwrap();
        let mut cluster = TestCluster {
            nodes: Vec::new(),
            dir,
            prefix,
            key,
            token: format!("wj_{}", unique()),
            extra: extra.to_string(),
            store,
            faults: None,
            log_filter: log_filter
                .unwrap_or("warn,warren_consensus=info")
                .to_string(),
            wan: wan.map(Wan::new),
            bin: bin.unwrap_or_else(this_build),
        };
        let token = cluster.token.clone();
        for i in 0..n {
            cluster.spawn_node(&format!("r{}", i % regions + 1), &token, 0);
        }
        let want = n;
        let formed = |c: &serde_json::Value| {
            c["leader"].is_string()
                && c["nodes"]
                    .as_array()
                    .is_some_and(|a| a.len() == want && a.iter().all(|x| x["state"] == "up"))
        };
        assert!(
            cluster.wait(Duration::from_secs(60), formed).await,
            "cluster of {n} did not form"
        );
        cluster
    }

    /// Starts one more node (in `region`) that joins through the first; returns its index
    /// once the cluster lists it as up.
    pub async fn add_node(&mut self, region: &str) -> usize {
        let token = self.token.clone();
        self.add_node_with_token(region, &token).await
    }

    /// `add_node` with `token` as its `join_token` (an issued one, say).
    pub async fn add_node_with_token(&mut self, region: &str, token: &str) -> usize {
        self.add_node_via(region, token, 0).await
    }

    /// `add_node_with_token`, joining through node `seed`.
    pub async fn add_node_via(&mut self, region: &str, token: &str, seed: usize) -> usize {
        self.spawn_node(region, token, seed);
        let want = self.nodes.len();
        let formed = |c: &serde_json::Value| {
            c["nodes"]
                .as_array()
                .is_some_and(|a| a.len() == want && a.iter().all(|x| x["state"] == "up"))
        };
        assert!(
            self.wait(Duration::from_secs(60), formed).await,
            "the new node did not join"
        );
        want - 1
    }

    /// Starts one more node (in `region`) that joins through node `seed`; returns its index
    /// once `seed` lists it as up, whatever became of the nodes before it.
    pub async fn join_through(&mut self, region: &str, seed: usize) -> usize {
        let token = self.token.clone();
        self.spawn_node(region, &token, seed);
        let name = self.nodes.last().expect("spawned").name.clone();
        let up = |c: &serde_json::Value| {
            c["nodes"].as_array().is_some_and(|a| {
                a.iter()
                    .any(|x| x["id"] == name.as_str() && x["state"] == "up")
            })
        };
        assert!(
            self.wait(Duration::from_secs(60), up).await,
            "{name} did not join through {}",
            self.nodes[seed].name
        );
        self.nodes.len() - 1
    }

    /// Starts a node; it joins through node `seed` unless it is the first.
    fn spawn_node(&mut self, region: &str, token: &str, seed: usize) {
        let name = format!("{}n{}", self.prefix, self.nodes.len() + 1);
        let data_dir = self.dir.join(&name);
        let join = match self.nodes.get(seed) {
            Some(seed) => format!("join = \"{}\"\n", seed.url),
            None => String::new(),
        };
        let config = self.dir.join(format!("{name}.toml"));
        let peer_port = free_udp_port();
        let advertise = match &self.wan {
            Some(wan) => {
                let real = std::net::SocketAddr::from(([127, 0, 0, 1], peer_port));
                let _on_its_runtime = wan.runtime.as_ref().expect("running").enter();
                let front = wan
                    .relay
                    .add_node([127, 0, 0, 1].into(), real, region)
                    .expect("a relay address");
                format!("advertise_peer = \"{front}\"\n")
            }
            None => String::new(),
        };
        std::fs::write(
            &config,
            format!(
                "name = \"{name}\"\nregion = \"{region}\"\ndata_dir = \"{}\"\nlisten = \"127.0.0.1:{}\"\n\
                 peer_listen = \"127.0.0.1:{}\"\n{join}join_token = \"{}\"\napi_key_file = \"{}\"\n\
                 guest_bin = \"{}\"\nspare_networks = 1\nwarm_max = 0\n{}\
                 object_store = \"{}\"\n{}{advertise}{}\n",
                data_dir.display(),
                free_tcp_port(),
                peer_port,
                token,
                self.dir.join("api-key").display(),
                guest_bin(),
                // Quick failure detection on loopback; a test may set its own lease (and
                // failure timeout with it); a WAN cluster runs on the defaults, as deployed.
                if self.wan.is_some() {
                    ""
                } else if self.extra.contains("lease_ms") {
                    "heartbeat_ms = 100\n"
                } else {
                    "heartbeat_ms = 100\ndown_after_ms = 4000\nlease_ms = 2000\n"
                },
                self.store
                    .clone()
                    .unwrap_or_else(|| self.dir.join("objects").display().to_string()),
                // Unreferenced chunks go at once, unless a test keeps a grace: with none, a
                // collection on one node can take a chunk another node uploaded for a
                // snapshot whose manifest it has not written yet (what the grace is for).
                if self.extra.contains("snapshot_gc_grace_s") {
                    ""
                } else {
                    "snapshot_gc_grace_s = 0\n"
                },
                self.extra,
            ),
        )
        .unwrap();
        let mut node = TestNode {
            name,
            region: region.to_string(),
            config,
            url: String::new(),
            client: Client::new("http://127.0.0.1:1", &self.key).unwrap(),
            peer_port,
            child: None,
            stopped: false,
            log_filter: self.log_filter.clone(),
            log: Default::default(),
            bin: self.bin.clone(),
        };
        node.spawn();
        node.client = Client::new(&node.url, &self.key).unwrap();
        self.nodes.push(node);
    }

    /// `GET /v1/cluster` from node `i`.
    pub async fn view(&self, i: usize) -> Option<serde_json::Value> {
        let r = self.nodes[i]
            .client
            .request(reqwest::Method::GET, "/v1/cluster")
            .timeout(Duration::from_secs(3))
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    /// Node `i`'s `/metrics` page (as [`Node::metrics_text`](super::harness::Node) reads a
    /// single node's).
    pub async fn metrics_text(&self, i: usize) -> String {
        super::harness::metrics_through(&self.nodes[i].client).await
    }

    /// Waits until `pred` holds on the cluster view of some running node.
    pub async fn wait(&self, limit: Duration, pred: impl Fn(&serde_json::Value) -> bool) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            for i in 0..self.nodes.len() {
                if !self.nodes[i].running() {
                    continue;
                }
                if let Some(v) = self.view(i).await {
                    if pred(&v) {
                        return true;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// Waits until every node's view shows `n` voters: the voter changes reached them all
    /// and none is in flight (tests of a settled cluster meeting a fault).
    pub async fn wait_voters_everywhere(&self, n: usize) {
        let voters = |v: &serde_json::Value| {
            v["nodes"]
                .as_array()
                .map_or(0, |a| a.iter().filter(|x| x["voter"] == true).count())
        };
        assert!(
            self.wait_everywhere(Duration::from_secs(60), |v| voters(v) == n)
                .await,
            "the voters did not settle"
        );
    }

    /// Waits until `pred` holds on the cluster view of every node at once.
    pub async fn wait_everywhere(
        &self,
        limit: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let mut settled = true;
            for i in 0..self.nodes.len() {
                settled &= self.view(i).await.is_some_and(|v| pred(&v));
            }
            if settled {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .expect("known node")
    }

    pub async fn leader(&self) -> usize {
        for _ in 0..100 {
            for i in 0..self.nodes.len() {
                if self.nodes[i].running() {
                    if let Some(l) = self
                        .view(i)
                        .await
                        .and_then(|v| v["leader"].as_str().map(str::to_string))
                    {
                        return self.index_of(&l);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("no leader");
    }

    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops node `i` in order (SIGTERM) and returns once it has exited.
    pub fn terminate(&mut self, i: usize) {
        self.nodes[i].signal("TERM");
        let mut child = self.nodes[i].child.take().expect("running");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "node {} did not exit within 60 s of SIGTERM",
                self.nodes[i].name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops node `i` (SIGSTOP) and returns once every one of its threads is stopped. The
    /// kernel stops a multi-threaded process only when one of its threads takes the signal,
    /// so on a busy machine its other threads run on for a few milliseconds after `kill`
    /// returns: long enough to acknowledge a Raft append made after the "stop".
    pub fn stop(&mut self, i: usize) {
        self.nodes[i].signal("STOP");
        self.nodes[i].stopped = true;
        let pid = self.nodes[i].pid();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(
                Instant::now() < deadline,
                "node {} did not stop within 10 s of SIGSTOP",
                self.nodes[i].name
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    pub fn cont(&mut self, i: usize) {
        self.nodes[i].signal("CONT");
        self.nodes[i].stopped = false;
    }

    pub fn restart(&mut self, i: usize) {
        if let Err(e) = self.try_restart(i) {
            panic!("node {} did not restart: {e}", self.nodes[i].name);
        }
    }

    /// Removes member `name` through node `via` (`DELETE /v1/cluster/nodes/{name}`): 204.
    pub async fn remove_node(&self, via: usize, name: &str) {
        let r = self.nodes[via]
            .client
            .request(
                reqwest::Method::DELETE,
                &format!("/v1/cluster/nodes/{name}"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    }

    /// The bootstrap (admin) key every node of the cluster takes.
    pub fn admin_key(&self) -> &str {
        &self.key
    }

    /// The join token of the cluster (what an operator hands a new node).
    pub fn join_token(&self) -> &str {
        &self.token
    }

    /// A join request for a node called `name` with the CSR `csr_pem`, proved with the
    /// cluster's token, in region `r1`, at addresses nothing listens on.
    pub fn join_request(&self, name: &str, csr_pem: &str) -> warren_consensus::join::JoinRequest {
        warren_consensus::join::JoinRequest::new(
            self.join_token(),
            name,
            "r1",
            "127.0.0.1:9",
            "127.0.0.1:9",
            1,
            csr_pem,
        )
    }

    /// Posts a join request to node `i`, as a joining node would: status and body.
    pub async fn post_join(
        &self,
        i: usize,
        req: &warren_consensus::join::JoinRequest,
    ) -> (u16, serde_json::Value) {
        let r = reqwest::Client::new()
            .post(format!("{}/internal/v1/join", self.nodes[i].url))
            .json(req)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or_default())
    }

    /// The directory the nodes keep snapshots in (their object store), unless the cluster
    /// was started on another store.
    pub fn store_dir(&self) -> PathBuf {
        self.dir.join("objects")
    }

    /// Node `i`'s data directory.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(&self.nodes[i].name)
    }

    /// Restarts node `i` with its data dir as it is now; why not, when it exits before it is
    /// ready (e.g. its join is refused).
    pub fn try_restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        // Keep the node's API address: pin the port it had.
        let port = self.nodes[i].url.rsplit(':').next().unwrap().to_string();
        self.set_in_config(i, &[("listen", format!("127.0.0.1:{port}"))]);
        self.nodes[i].try_spawn()
    }

    /// Sets string settings of node `i`'s config file (each `key = "value"` line it has).
    fn set_in_config(&self, i: usize, settings: &[(&str, String)]) {
        let cfg = std::fs::read_to_string(&self.nodes[i].config).unwrap();
        let cfg: String = cfg
            .lines()
            .map(|l| {
                let key = l.split(" = ").next().unwrap_or_default();
                match settings.iter().find(|(k, _)| *k == key) {
                    Some((k, v)) => format!("{k} = \"{v}\""),
                    None => l.to_string(),
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&self.nodes[i].config, cfg).unwrap();
    }

    /// Node `i` starts with this build's `warren` from its next (re)start on: an upgrade.
    pub fn use_this_build(&mut self, i: usize) {
        self.nodes[i].bin = this_build();
    }

    /// Restarts node `i` with its data dir on other addresses (new API and peer ports), as
    /// when its machine moved: its client follows it.
    pub fn restart_elsewhere(&mut self, i: usize) {
        assert!(
            self.wan.is_none(),
            "a WAN node's peer address is its relay's"
        );
        self.kill(i);
        let (api, peer) = (free_tcp_port(), free_udp_port());
        self.set_in_config(
            i,
            &[
                ("listen", format!("127.0.0.1:{api}")),
                ("peer_listen", format!("127.0.0.1:{peer}")),
            ],
        );
        self.nodes[i].peer_port = peer;
        self.nodes[i].spawn();
        self.nodes[i].client = Client::new(&self.nodes[i].url, &self.key).unwrap();
    }

    /// Cuts the nodes of `a` off from those of `b`, both ways (clients still reach all).
    pub fn partition(&mut self, a: &[usize], b: &[usize]) {
        for &x in a {
            for &y in b {
                self.drop_one_way(x, y);
                self.drop_one_way(y, x);
            }
        }
    }

    /// Drops every datagram from node `from` to node `to` (an asymmetric fault).
    pub fn drop_one_way(&mut self, from: usize, to: usize) {
        let (f, t) = (self.nodes[from].peer_port, self.nodes[to].peer_port);
        let prefix = self.prefix.clone();
        self.faults
            .get_or_insert_with(|| Faults::new(&prefix))
            .drop_one_way(f, t);
    }

    /// Cuts `region` off from every other region of a WAN cluster (`start_wan`), both ways,
    /// in the relay; `false` heals it.
    pub fn cut_off_region(&self, region: &str, cut: bool) {
        let relay = &self.wan.as_ref().expect("a WAN cluster").relay;
        for other in self.nodes.iter().map(|n| n.region.as_str()) {
            if other != region {
                relay.set_cut(region, other, cut);
            }
        }
    }

    /// Removes every partition.
    pub fn heal(&mut self) {
        if let Some(f) = &self.faults {
            f.heal();
        }
    }

    /// Containers of `sandbox` on every node of this cluster.
    pub fn containers_of(&self, sandbox: &str) -> usize {
        running_containers(sandbox).len()
    }
}

/// Lines of each node's log printed when a cluster test fails.
const LOG_TAIL_ON_FAILURE: usize = 150;

impl Drop for TestCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for n in &self.nodes {
                let log = n.log.lock().unwrap();
                let from = log.len().saturating_sub(LOG_TAIL_ON_FAILURE);
                eprintln!(
                    "--- the last {} lines of {}'s log ---",
                    log.len() - from,
                    n.name
                );
                for line in &log[from..] {
                    eprintln!("[{}] {line}", n.name);
                }
            }
        }
        self.faults = None;
        for i in 0..self.nodes.len() {
            if self.nodes[i].stopped {
                self.cont(i);
            }
            self.kill(i);
        }
        for n in &self.nodes {
            warren_node::runtime::docker::remove_node_resources_blocking(&n.name);
            warren_node::runtime::host_work::remove_cgroup_of(&self.dir.join(&n.name));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether every thread of process `pid` is stopped (state `T` in `/proc/<pid>/task/*/stat`).
fn all_threads_stopped(pid: i32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(|t| t.ok()).all(|t| {
        std::fs::read_to_string(t.path().join("stat"))
            .ok()
            // The state follows the command name, which is in parentheses.
            .and_then(|stat| {
                stat.rsplit_once(')')
                    .map(|(_, rest)| rest.trim_start().to_string())
            })
            .is_some_and(|rest| rest.starts_with('T') || rest.starts_with('t'))
    })
}

/// `command` run in `sandbox` (created on first use) entering node `i`, waiting at most 60 s:
/// the status, the node that answered (`x-warren-node`, empty when none did) and the body.
pub async fn exec_via(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    command: &str,
) -> (u16, String, serde_json::Value) {
    try_exec_via(c, i, sandbox, command).await.unwrap()
}

/// [`exec_via`], or why no answer came (the request could not be sent, or 60 s passed).
pub async fn try_exec_via(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    command: &str,
) -> Result<(u16, String, serde_json::Value), String> {
    let r = c.nodes[i]
        .client
        .request(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{sandbox}/exec"),
        )
        .json(&serde_json::json!({ "command": command }))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let node = r
        .headers()
        .get("x-warren-node")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body: serde_json::Value = r.json().await.unwrap_or_default();
    Ok((status, node, body))
}

/// The node that answers for `sandbox` (creating it through node `i` if needed).
pub async fn owner_of(c: &TestCluster, i: usize, sandbox: &str) -> String {
    let r = c.nodes[i]
        .client
        .request(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{sandbox}/exec"),
        )
        .json(&serde_json::json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    r.headers()["x-warren-node"].to_str().unwrap().to_string()
}

/// The host pid of the main process of `sandbox`'s container on node `node` (`None`: no
/// such container, or it does not run).
pub fn container_pid(node: &str, sandbox: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Pid}}"])
        .arg(format!("wrn-{node}-{sandbox}"))
        .output()
        .ok()?;
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && pid != "0").then_some(pid)
}

/// Ids owned by node `name`, created through node `via` (new ids until `n` land there).
pub async fn ids_on(c: &TestCluster, via: usize, name: &str, n: usize) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..60 {
        let id = format!("mv-{}", unique());
        if owner_of(c, via, &id).await == name {
            out.push(id);
            if out.len() == n {
                return out;
            }
        } else {
            c.nodes[via].client.delete_sandbox(&id).await.unwrap();
        }
    }
    panic!("no ids landed on {name}");
}

/// Waits until `sandbox` is served by a node other than `from` (seen from node `via`).
pub async fn wait_moved(c: &TestCluster, via: usize, sandbox: &str, from: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Ok(s) = c.nodes[via].client.get_sandbox(sandbox).await {
            if s.node != from && !s.node.is_empty() {
                return s.node;
            }
        }
        assert!(Instant::now() < deadline, "{sandbox} did not leave {from}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Asks node `via` to drain node `name` (its sandboxes move away); the request is accepted.
pub async fn drain(c: &TestCluster, via: usize, name: &str) {
    let r = c.nodes[via]
        .client
        .request(
            reqwest::Method::POST,
            &format!("/v1/cluster/nodes/{name}/drain"),
        )
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

/// One exec of `script` in `sandbox` through the node at `url`, as any client would send it:
/// the status, the node that ran it (`x-warren-node`) and the body; why not, when no whole
/// answer came within `timeout`.
pub async fn exec_through(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    sandbox: &str,
    script: &str,
    timeout: Duration,
) -> Result<(u16, String, serde_json::Value), String> {
    let r = http
        .post(format!("{url}/v1/sandboxes/{sandbox}/exec"))
        .bearer_auth(key)
        .json(&serde_json::json!({ "command": script }))
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = r.status().as_u16();
    let node = r
        .headers()
        .get("x-warren-node")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = r
        .json()
        .await
        .map_err(|e| format!("{status}, body cut: {e}"))?;
    Ok((status, node, body))
}

/// Seconds since midnight of a node's log line (`2026-12-06T11:04:58.722337Z  INFO …`).
pub fn logged_at(line: &str) -> Option<f64> {
    let time = line.get(11..26)?;
    let (h, rest) = time.split_once(':')?;
    let (m, s) = rest.split_once(':')?;
    Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?)
}

/// The spans of node `i`'s log lines with `message` for the sandboxes `ids`: each ended at
/// its line and began its `ms=N` before.
pub fn logged_spans(c: &TestCluster, i: usize, message: &str, ids: &[String]) -> Vec<(f64, f64)> {
    c.nodes[i]
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(message))
        .filter(|l| {
            ids.iter()
                .any(|id| l.contains(&format!("sandbox_id={id} ")))
        })
        .filter_map(|l| {
            let end = logged_at(l)?;
            let ms: f64 = l.rsplit_once("ms=")?.1.trim().parse().ok()?;
            Some((end - ms / 1000.0, end))
        })
        .collect()
}

/// How many spans, from the first start to the last end, and their lengths summed:
/// "8 in 1.98 s, 3.85 s in all".
pub fn describe_spans(spans: &[(f64, f64)]) -> String {
    let first = spans.iter().map(|s| s.0).fold(f64::MAX, f64::min);
    let last = spans.iter().map(|s| s.1).fold(f64::MIN, f64::max);
    let sum: f64 = spans.iter().map(|s| s.1 - s.0).sum();
    format!(
        "{} in {:.2} s, {sum:.2} s in all",
        spans.len(),
        last - first
    )
}

/// Whether any two spans overlap.
pub fn any_overlap(spans: &[(f64, f64)]) -> bool {
    spans
        .iter()
        .enumerate()
        .any(|(i, a)| spans[i + 1..].iter().any(|b| a.0 < b.1 && b.0 < a.1))
}
