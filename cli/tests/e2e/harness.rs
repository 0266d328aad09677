//! Starts and stops real nodes for tests, and cleans up every container they made.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use warren_client::Client;

pub struct Node {
    child: Option<Child>,
    pub url: String,
    pub key: String,
    pub node_id: String,
    pub data_dir: PathBuf,
    pub listen: String,
    pub client: Client,
    /// More `warren serve` flags.
    extra: Vec<String>,
    /// Where the node's log goes (at level info), instead of the test's stderr.
    pub log_file: Option<PathBuf>,
    /// Its `WARREN_RUN_ID` (the label `warren.run` on what it makes).
    pub run: String,
}

/// The `WARREN_RUN_ID` test nodes get: the one of whoever runs the tests (a CI run removes
/// what its nodes made by it), else one of this test process.
pub fn run_id() -> String {
    std::env::var("WARREN_RUN_ID")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| format!("test-{}", std::process::id()))
}

/// A container of warren's as `docker ps` lists it: its name and its node.
struct Listed {
    name: String,
    node: String,
}

/// Every container warren made that Docker has (running ones only unless `all`).
fn docker_ps(all: bool) -> Vec<Listed> {
    let mut cmd = Command::new("docker");
    cmd.arg("ps");
    if all {
        cmd.arg("-a");
    }
    let out = cmd
        .args(["--filter", "label=warren.managed=true"])
        .args(["--format", "{{.Names}}\t{{.Label \"warren.node\"}}"])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(name, node)| Listed {
            name: name.to_string(),
            node: node.to_string(),
        })
        .collect()
}

/// Whether a container is `sandbox`'s: by name, since a warm container a sandbox took keeps
/// the labels it was made with. One being removed after a restore counts too.
fn of_sandbox(c: &Listed, sandbox: &str) -> bool {
    let own = format!("wrn-{}-{sandbox}", c.node);
    c.name == own || c.name.starts_with(&format!("{own}_replaced_"))
}

fn names_of(sandbox: &str, all: bool) -> Vec<String> {
    docker_ps(all)
        .into_iter()
        .filter(|c| of_sandbox(c, sandbox))
        .map(|c| c.name)
        .collect()
}

/// Running containers of `sandbox`, on any node (their names).
pub fn running_containers(sandbox: &str) -> Vec<String> {
    names_of(sandbox, false)
}

/// Every container of `sandbox` Docker has, running, paused or stopped.
pub fn all_containers(sandbox: &str) -> Vec<String> {
    names_of(sandbox, true)
}

/// What Docker says of every container of `sandbox`, for a failing test's message: its
/// name and status, and each of its processes with its state (`T`: stopped).
pub fn describe_containers(sandbox: &str) -> String {
    let mut out = Vec::new();
    for name in all_containers(sandbox) {
        let run = |args: &[&str]| {
            std::process::Command::new("docker")
                .args(args)
                .output()
                .map(|o| {
                    let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
                    text.push_str(&String::from_utf8_lossy(&o.stderr));
                    text.trim().to_string()
                })
                .unwrap_or_else(|e| e.to_string())
        };
        let status = run(&[
            "inspect",
            "-f",
            "{{.State.Status}} paused={{.State.Paused}}",
            &name,
        ]);
        let top = run(&["top", &name, "-o", "pid,stat,args"]);
        out.push(format!("{name}: {status}\n{top}"));
    }
    out.join("\n")
}

/// A create request from JSON (panics on an invalid one).
pub fn create(json: serde_json::Value) -> warren_api::sandbox::CreateSandboxRequest {
    serde_json::from_value(json).unwrap()
}

/// Forks `id` into `count` sandboxes with default ids; asserts it succeeded.
pub async fn fork(c: &Client, id: &str, count: u32) -> warren_api::snapshot::ForkResponse {
    let req = warren_api::snapshot::ForkRequest { count, ids: None };
    c.fork(id, &req).await.unwrap()
}

/// Runs a script; asserts it succeeded; returns its stdout.
pub async fn sh(c: &Client, id: &str, script: &str) -> String {
    let r = c.sh(id, script).await.unwrap();
    assert_eq!(
        r.exit_code, 0,
        "{script}: stderr {:?}, stdout {:?}",
        r.stderr, r.stdout
    );
    r.stdout
}

/// The static guest binary of this build.
pub fn guest_bin() -> String {
    std::env::var("WARREN_GUEST_BIN").unwrap_or_else(|_| {
        let exe = PathBuf::from(env!("CARGO_BIN_EXE_warren"));
        let target = exe.parent().and_then(|p| p.parent()).expect("target dir");
        target
            .join("x86_64-unknown-linux-musl/debug/warren-guest")
            .display()
            .to_string()
    })
}

/// A short unique suffix.
pub fn unique() -> String {
    hex::encode(rand::random::<[u8; 4]>())
}

/// Firewall tools in `dir` that fail while the shell condition `broken_when` holds (the
/// node's pid is `$PPID` there) and run the real ones otherwise: the `iptables` and
/// `ip6tables` to give a node (it runs the `-restore` beside each).
pub fn breakable_firewall_tools(dir: &std::path::Path, broken_when: &str) -> [String; 2] {
    for tool in [
        "iptables",
        "ip6tables",
        "iptables-restore",
        "ip6tables-restore",
    ] {
        let w = dir.join(tool);
        std::fs::write(
            &w,
            format!(
                "#!/bin/sh\nif {broken_when}; then\n  echo '{tool}: broken for the test' >&2; exit 1\nfi\nexec {tool} \"$@\"\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&w, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    ["iptables", "ip6tables"].map(|t| dir.join(t).display().to_string())
}

impl Node {
    /// Starts a node on a free loopback port with its own data dir and node id.
    pub async fn start() -> Node {
        Node::start_listening("127.0.0.1:0").await
    }

    /// Starts a node listening on `addr` (e.g. `0.0.0.0:0`).
    pub async fn start_listening(listen: &str) -> Node {
        Node::start_with(listen, &[]).await
    }

    /// Starts a node with more `warren serve` flags.
    pub async fn start_with(listen: &str, extra: &[&str]) -> Node {
        Node::spawned(listen, extra, false, run_id())
    }

    /// Starts a node whose containers and networks carry `run` as their `warren.run` label.
    pub async fn start_in_run(run: &str) -> Node {
        Node::spawned("127.0.0.1:0", &[], false, run.to_string())
    }

    /// Like `start_with`, with the node's log (its default levels) written to
    /// `/tmp/wt-<node id>.log` (`log_file`).
    pub async fn start_logged(extra: &[&str]) -> Node {
        Node::spawned("127.0.0.1:0", extra, true, run_id())
    }

    fn spawned(listen: &str, extra: &[&str], logged: bool, run: String) -> Node {
        let node_id = format!("t{}", unique());
        let data_dir = PathBuf::from(format!("/tmp/wt-{node_id}"));
        let mut n = Node {
            child: None,
            url: String::new(),
            key: String::new(),
            log_file: logged.then(|| PathBuf::from(format!("/tmp/wt-{node_id}.log"))),
            node_id,
            data_dir,
            listen: listen.into(),
            client: Client::new("http://127.0.0.1:1", "x").unwrap(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            run,
        };
        n.spawn();
        n
    }

    fn spawn(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.args(["serve", "--data-dir"])
            .arg(&self.data_dir)
            .args([
                "--listen",
                &self.listen,
                "--node-id",
                &self.node_id,
                "--spare-networks",
                "1",
                "--snapshot-gc-grace-s",
                "0",
                "--guest-bin",
            ])
            .arg(guest_bin())
            .args(&self.extra)
            // Stops with this test process, however it ends.
            .env(warren_daemon::EXIT_WITH_PARENT_ENV, "1")
            .env("WARREN_RUN_ID", &self.run)
            // A fixed pool of --warm-containers, unless a test asks for one that follows
            // demand (--warm-max): tests count containers.
            .env("WARREN_WARM_MAX", "0")
            .stdout(Stdio::piped());
        match &self.log_file {
            Some(path) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .expect("node log file");
                // The default levels (warren's own from info, its dependencies' from warn).
                cmd.env_remove("WARREN_LOG").stderr(f);
            }
            None => {
                cmd.env("WARREN_LOG", "warn,warren_node=info")
                    .stderr(Stdio::inherit());
            }
        }
        let mut child = cmd.spawn().expect("start warren serve");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        let mut reader = BufReader::new(stdout);
        reader.read_line(&mut line).expect("ready line");
        let ready: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("node did not start ({e}): {line:?}"));
        self.url = ready["ready"].as_str().expect("ready url").to_string();
        // Restarts keep the same address.
        self.listen = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_string();
        self.key = std::fs::read_to_string(self.data_dir.join("api-key"))
            .unwrap()
            .trim()
            .to_string();
        self.client = Client::new(&self.url, &self.key).unwrap();
        // Keep draining stdout so the node never blocks on it.
        std::thread::spawn(move || for _ in reader.lines() {});
        self.child = Some(child);
    }

    /// A Go template of `docker inspect` (`{{.State.Pid}}`) on sandbox `id`'s container.
    pub fn inspect(&self, id: &str, template: &str) -> String {
        let out = Command::new("docker")
            .args([
                "inspect",
                "-f",
                template,
                &format!("wrn-{}-{id}", self.node_id),
            ])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The node's `/healthz` body.
    pub async fn health(&self) -> serde_json::Value {
        reqwest::get(format!("{}/healthz", self.url))
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILLs the node process (its containers keep running).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends the node SIGTERM (an orderly stop).
    pub fn terminate(&self) {
        // SAFETY: kill(2) on the pid of a child of this process.
        let rc = unsafe { libc::kill(self.pid() as libc::pid_t, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill: {}", std::io::Error::last_os_error());
    }

    /// Waits up to `within` for the node process to exit; its status, if it did.
    pub fn wait_exit(&mut self, within: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + within;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Kills the node and starts it again on the same data dir, id and address.
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// A request with the API key.
    pub fn req(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, path)
    }

    /// Resident memory of the node process, and its peak, in KiB.
    pub fn memory_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// The node's `/metrics` page.
    pub async fn metrics_text(&self) -> String {
        metrics_through(&self.client).await
    }

    /// The value of one line of the node's metrics, named with its labels (0 when absent).
    pub async fn metric(&self, line_prefix: &str) -> u64 {
        metric_in(&self.metrics_text().await, line_prefix)
    }

    /// Containers Docker has for this node's sandboxes (names), warm ones not counted.
    pub fn containers(&self) -> Vec<String> {
        self.listed(|name| !name.contains("_warm_"))
    }

    /// This node's warm containers: started, and not yet taken by a sandbox.
    pub fn warm_containers(&self) -> Vec<String> {
        self.listed(|name| name.contains("_warm_"))
    }

    fn listed(&self, keep: impl Fn(&str) -> bool) -> Vec<String> {
        docker_ps(true)
            .into_iter()
            .filter(|c| c.node == self.node_id && keep(&c.name))
            .map(|c| c.name)
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
        warren_node::runtime::docker::remove_node_resources_blocking(&self.node_id);
        warren_node::runtime::host_work::remove_cgroup_of(&self.data_dir);
        let _ = std::fs::remove_dir_all(&self.data_dir);
        if let Some(log) = &self.log_file {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// The value of one line of a node's `/metrics` text, named with its labels (0 when absent).
pub fn metric_in(text: &str, line_prefix: &str) -> u64 {
    let prefix = format!("{line_prefix} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// The status, code and details of an API error (panics on anything else).
pub fn api_err(e: warren_client::Error) -> (u16, warren_api::ErrorCode, Option<serde_json::Value>) {
    match e {
        warren_client::Error::Api { status, error } => (status, error.code, error.details),
        other => panic!("not an API error: {other}"),
    }
}

/// Asserts a retryable 503.
pub fn assert_unavailable(e: &warren_client::Error) {
    match e {
        warren_client::Error::Api { status, error } => {
            assert_eq!((*status, error.retryable), (503, true), "{error:?}")
        }
        other => panic!("not an API error: {other}"),
    }
}

/// Runs `warren serve ARGS --data-dir DIR`, which must refuse to start within a minute;
/// returns what it said on stderr.
pub async fn refused_start(args: &[&str], data_dir: &std::path::Path) -> String {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .arg("serve")
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env(warren_daemon::EXIT_WITH_PARENT_ENV, "1")
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), out)
        .await
        .expect("the node kept running")
        .unwrap();
    assert!(!out.status.success(), "the node started");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Where a run of answers to one address's guesses first holds it off (429): after at
/// least `allowed` refusals (`refused`, each one), and never before.
pub fn first_held_off(statuses: &[u16], refused: u16, allowed: usize) -> usize {
    let first = statuses
        .iter()
        .position(|s| *s == 429)
        .expect("never held off");
    assert!(first >= allowed, "held off before the rate: {statuses:?}");
    assert!(
        statuses[..first].iter().all(|s| *s == refused),
        "{statuses:?}"
    );
    first
}

/// A streamed upload of `mib` MiB (chunk `i` repeats byte `i % 251`), and the sha256 hex of
/// what it sends.
pub fn patterned_upload(mib: u64) -> (reqwest::Body, String) {
    use futures_util::StreamExt;
    use sha2::{Digest, Sha256};
    const MIB: usize = 1 << 20;
    let chunk = |i: u64| bytes::Bytes::from(vec![(i % 251) as u8; MIB]);
    let mut h = Sha256::new();
    for i in 0..mib {
        h.update(chunk(i));
    }
    let body = futures_util::stream::iter(0..mib).map(move |i| Ok::<_, std::io::Error>(chunk(i)));
    (reqwest::Body::wrap_stream(body), hex::encode(h.finalize()))
}

/// The `/metrics` page of the node `client` talks to.
pub async fn metrics_through(client: &warren_client::Client) -> String {
    client
        .request(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
