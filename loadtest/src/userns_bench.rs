//! What user namespaces cost: warm exec and create + first exec on a node whose Docker
//! remaps every container into a user namespace, against a node on a second Docker daemon
//! of this machine that does not (the setting before; `--allow-host-root`), measured
//! interleaved in one run.
//!
//! The second daemon is started for the run and stopped after it (by its pid): its own
//! data root, exec root and socket under `/var/lib/warren-bench-host-root` and
//! `/run/warren-bench-host-root`, no iptables rules (sandbox networks need no egress here),
//! a default bridge of its own (`BRIDGE`, made and removed here: a daemon told `--bridge
//! none` deletes `docker0`, the first daemon's), and the sandbox image imported from the
//! cached root filesystem tarball (`deploy/image/build-local.sh`).

use crate::node::BenchNode;
use crate::report::Table;
use anyhow::Context;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DATA_ROOT: &str = "/var/lib/warren-bench-host-root";
const RUN_DIR: &str = "/run/warren-bench-host-root";
const BRIDGE: &str = "wbhostroot0";

/// A Docker daemon without user namespaces, for this run only.
struct PlainDocker {
    child: Child,
    host: String,
}

impl PlainDocker {
    fn start() -> anyhow::Result<PlainDocker> {
        std::fs::create_dir_all(RUN_DIR)?;
        let _ = Command::new("ip").args(["link", "del", BRIDGE]).output();
        for args in [
            &["link", "add", BRIDGE, "type", "bridge"][..],
            &["addr", "add", "10.202.0.1/24", "dev", BRIDGE],
            &["link", "set", BRIDGE, "up"],
        ] {
            let out = Command::new("ip").args(args).output()?;
            anyhow::ensure!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let host = format!("unix://{RUN_DIR}/docker.sock");
        let log = std::fs::File::create(format!("{RUN_DIR}/dockerd.log"))?;
        let child = Command::new("dockerd")
            .args(["--data-root", DATA_ROOT])
            .args(["--exec-root", &format!("{RUN_DIR}/exec")])
            .args(["--pidfile", &format!("{RUN_DIR}/dockerd.pid")])
            .args(["--host", &host])
            .args(["--bridge", BRIDGE, "--iptables=false", "--ip-masq=false"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start a second dockerd")?;
        let d = PlainDocker { child, host };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !d.docker(&["info"]).is_ok_and(|o| o.status.success()) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the second dockerd did not answer; see {RUN_DIR}/dockerd.log"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let setup = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/image/build-local.sh");
        let built = Command::new(setup)
            .env("DOCKER_HOST", &d.host)
            .status()
            .context("cannot import the image into the second dockerd")?;
        anyhow::ensure!(built.success(), "the image could not be imported");
        Ok(d)
    }

    fn docker(&self, args: &[&str]) -> std::io::Result<std::process::Output> {
        Command::new("docker")
            .env("DOCKER_HOST", &self.host)
            .args(args)
            .output()
    }
}

impl Drop for PlainDocker {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of the child this struct started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = Command::new("ip").args(["link", "del", BRIDGE]).output();
    }
}

/// Warm exec and create + first exec, user namespaces vs none, interleaved.
pub async fn userns_cost(n_exec: usize, n_create: usize, table: &mut Table) -> anyhow::Result<()> {
    let plain = PlainDocker::start()?;
    let warm = 2;
    let remapped = BenchNode::start_with(warm, &[]).await?;
    let host_root = BenchNode::start_with(
        warm,
        &[
            "--docker-host",
            &plain.host,
            "--allow-host-root",
            "--subnet-pool",
            "10.201.0.0/16",
        ],
    )
    .await?;
    let result = measure(&remapped, &host_root, n_exec, n_create, table).await;
    // The host-root node's containers live in the second daemon: remove them there.
    if let Ok(out) = plain.docker(&["ps", "-aq", "--filter", "label=warren.managed=true"]) {
        let ids = String::from_utf8_lossy(&out.stdout).to_string();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            let mut args = vec!["rm", "-f"];
            args.extend(ids);
            let _ = plain.docker(&args);
        }
    }
    if let Ok(out) = plain.docker(&[
        "network",
        "ls",
        "-q",
        "--filter",
        "label=warren.managed=true",
    ]) {
        for net in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = plain.docker(&["network", "rm", net]);
        }
    }
    drop(host_root);
    drop(remapped);
    drop(plain);
    result
}

async fn measure(
    remapped: &BenchNode,
    host_root: &BenchNode,
    n_exec: usize,
    n_create: usize,
    table: &mut Table,
) -> anyhow::Result<()> {
    let id = "bench-userns";
    for node in [remapped, host_root] {
        for _ in 0..20 {
            node.client.sh(id, "true").await?;
        }
    }
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..n_exec {
        if Instant::now() > deadline {
            break;
        }
        let t = Instant::now();
        remapped.client.sh(id, "true").await?;
        ours.push(t.elapsed());
        let t = Instant::now();
        host_root.client.sh(id, "true").await?;
        theirs.push(t.elapsed());
    }
    table.add_sampled(
        "warm exec, user namespaces",
        &ours,
        "the same without (host root)",
        &theirs,
        "p50 <= 1.1x",
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(300);
    for i in 0..n_create {
        if Instant::now() > deadline {
            break;
        }
        let id = format!("bench-userns-{i}");
        for (node, out) in [(remapped, &mut ours), (host_root, &mut theirs)] {
            tokio::time::sleep(Duration::from_millis(600)).await;
            node.wait_warm().await?;
            let t = Instant::now();
            let r = node.client.sh(&id, "true").await?;
            out.push(t.elapsed());
            anyhow::ensure!(r.exit_code == 0, "first exec failed");
            node.client.delete_sandbox(&id).await?;
        }
    }
    table.add_sampled(
        "create + first exec, user namespaces (warm container)",
        &ours,
        "the same without (host root)",
        &theirs,
        "p50 <= 1.2x",
    );
    Ok(())
}
