//! Snapshot, restore, fork and wake against baselines measured in the same run on the same
//! disk: `tar | zstd -3` and `zstd -d | tar` of the same workspace, and a cold create.

use crate::cpu;
use crate::node::BenchNode;
use crate::report::{percentiles, Row, Table};
use std::process::Command;
use std::time::{Duration, Instant};
use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest};
use warren_node::runtime::data_root::{self, DataRootFs};

/// A ~200 MiB workspace of mixed files: 100 × 1 MiB random (incompressible), 2000 small
/// text files (~48 MiB, base64), one 50 MiB repetitive log.
const MAKE_WORKSPACE: &str = "set -e; mkdir -p /workspace/ws/bin /workspace/ws/src; \
    for i in $(seq 1 100); do head -c 1048576 /dev/urandom > /workspace/ws/bin/$i; done; \
    for i in $(seq 1 2000); do head -c 18000 /dev/urandom | base64 > /workspace/ws/src/$i.txt; done; \
    yes 'GET /api/items 200 12ms user=alice region=eu' | head -c 52428800 > /workspace/ws/big.log; \
    du -sm /workspace/ws | cut -f1";

fn sh(script: &str) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let out = Command::new("bash").args(["-c", script]).output()?;
    anyhow::ensure!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(t.elapsed())
}

pub async fn snapshots(node: &BenchNode, rounds: usize, table: &mut Table) -> anyhow::Result<()> {
    let c = &node.client;
    let id = "bench-snap";
    let r = c.sh(id, MAKE_WORKSPACE).await?;
    anyhow::ensure!(
        r.exit_code == 0,
        "making the workspace failed: {}",
        r.stderr
    );
    let mib = r.stdout.trim().to_string();
    // The baseline works on a copy of the same files on the host's disk (or the directory
    // WARREN_BENCH_WORKDIR names, e.g. on the filesystem of Docker's data root).
    let workdir = std::env::var("WARREN_BENCH_WORKDIR").unwrap_or_else(|_| "/tmp".into());
    let dir = format!("{workdir}/warren-bench-ws-{}", std::process::id());
    sh(&format!("rm -rf {dir} && mkdir -p {dir}/restore"))?;
    sh(&format!(
        "docker cp {}:/workspace/ws {dir}/ws",
        node.container(id)
    ))?;
    let (mut snap_t, mut tar_t, mut restore_t, mut untar_t) = (vec![], vec![], vec![], vec![]);
    // CPU the machine spent on each restore and fork (everyone's: node, Docker, kernel).
    let (mut restore_cpu, mut fork_cpu) = (vec![], vec![]);
    let mut snaps = Vec::new();
    for _ in 0..rounds {
        // Later rounds find every chunk stored already (only the first uploads and
        // compresses); each still reads, archives, chunks and hashes the whole workspace.
        // Every step starts with nothing dirty in the page cache, so that one step's
        // writeback does not land on the next (ours or the baseline's), and with the warm
        // containers all started (refilling the pool after a take must not land on the
        // next step either).
        node.wait_warm().await?;
        sh("sync")?;
        let t = Instant::now();
        let s = c
            .create_snapshot(id, &CreateSnapshotRequest::default())
            .await?;
        snap_t.push(t.elapsed());
        sh("sync")?;
        tar_t.push(sh(&format!(
            "tar -C {dir} -cf - ws | zstd -3 -q -T1 -o {dir}/ws.tar.zst -f"
        ))?);
        sh(&format!("rm -rf {dir}/restore/ws && sync"))?;
        node.wait_warm().await?;
        let (t, cpu0) = (Instant::now(), cpu::busy());
        c.restore(id, &s.id).await?;
        restore_t.push(t.elapsed());
        restore_cpu.extend(cpu0.zip(cpu::busy()).map(|(a, b)| b - a));
        // The replaced container is removed after the restore answered; that work must not
        // land on the baseline measured next.
        replaced_gone(&node.container(id)).await?;
        node.wait_warm().await?;
        sh("sync")?;
        untar_t.push(sh(&format!(
            "zstd -d -q -c {dir}/ws.tar.zst | tar -C {dir}/restore -xf -"
        ))?);
        snaps.push(s);
    }
    // What copy-on-write forks would first need on this engine: the same files registered
    // as an image layer (Docker applies and hashes the layer itself).
    sh("sync")?;
    let tag = format!("warren-bench-layer:{}", std::process::id());
    let import = sh(&format!(
        "zstd -d -q -c {dir}/ws.tar.zst | docker import - {tag} >/dev/null"
    ))?;
    let _ = sh(&format!("docker rmi {tag} >/dev/null"));
    let untar_p50 = percentiles(&untar_t).0;
    table.note(format!(
        "the same archive as a Docker image layer (`docker import`, what a copy-on-write fork would first need): {:.0} ms, {:.2}x of zstd -d | tar -x ({:.0} ms)",
        import.as_secs_f64() * 1000.0,
        import.as_secs_f64() * 1000.0 / untar_p50,
        untar_p50
    ));
    let root = docker_info("{{.DockerRootDir}}");
    let root_fs = match data_root::inspect(std::path::Path::new(&root)) {
        Ok(DataRootFs::ExtJournaled) => "ext4 with a journal".to_string(),
        Ok(DataRootFs::ExtNoJournal { device }) => format!(
            "ext4 WITHOUT a journal ({device}): file creation after deletions is slow, see docs/benchmarks.md"
        ),
        Ok(DataRootFs::Other) => "not ext4".to_string(),
        Err(e) => format!("not visible from here: {e}"),
    };
    table.note(format!(
        "Docker's storage (forks copy with copy_file_range, which shares blocks on XFS and btrfs): {}; data root {root}: {root_fs}",
        docker_info("{{json .DriverStatus}}")
    ));
    let first = snaps.first().expect("at least one round");
    table.add(Row {
        name: format!("snapshot {mib} MiB workspace"),
        n: snap_t.len(),
        ours: percentiles(&snap_t),
        baseline_name: "tar | zstd -3 (same files)".into(),
        baseline: percentiles(&tar_t),
        target: "p50 <= 1.5x".into(),
    });
    let container = if node.warm > 0 {
        "a warm container"
    } else {
        "a new container"
    };
    table.add(Row {
        name: format!("restore {mib} MiB into {container}"),
        n: restore_t.len(),
        ours: percentiles(&restore_t),
        baseline_name: "zstd -d | tar -x".into(),
        baseline: percentiles(&untar_t),
        target: "p50 <= 1.5x".into(),
    });

    // Fork 4 vs one restore of the same snapshot.
    let mut fork_t = Vec::new();
    for round in 0..rounds {
        let ids: Vec<String> = (0..4).map(|i| format!("bench-fork-{round}-{i}")).collect();
        node.wait_warm().await?;
        sh("sync")?;
        let (t, cpu0) = (Instant::now(), cpu::busy());
        c.fork(
            id,
            &ForkRequest {
                count: 4,
                ids: Some(ids.clone()),
            },
        )
        .await?;
        fork_t.push(t.elapsed());
        fork_cpu.extend(cpu0.zip(cpu::busy()).map(|(a, b)| b - a));
        for f in &ids {
            c.delete_sandbox(f).await?;
        }
    }
    table.add(Row {
        name: format!("fork 4 of {mib} MiB into {}", container.replace("a ", "")),
        n: fork_t.len(),
        ours: percentiles(&fork_t),
        baseline_name: "one restore (above)".into(),
        baseline: percentiles(&restore_t),
        target: "p50 <= 2x".into(),
    });

    if !fork_cpu.is_empty() && !restore_cpu.is_empty() {
        let (fork_cpu_p50, restore_cpu_p50) = (
            percentiles(&fork_cpu).0 / 1000.0,
            percentiles(&restore_cpu).0 / 1000.0,
        );
        let cpus = cpu::count();
        table.note(format!(
            "CPU time the machine spent (/proc/stat, p50): fork 4 {fork_cpu_p50:.2} s, one restore {restore_cpu_p50:.2} s ({:.2}x); on {cpus} CPUs a fork 4 takes at least {:.0} ms",
            fork_cpu_p50 / restore_cpu_p50,
            fork_cpu_p50 * 1000.0 / cpus as f64
        ));
    }

    // Bytes a second snapshot stores after a 1 MiB change.
    let r = c
        .sh(id, "head -c 1048576 /dev/urandom > /workspace/ws/bin/new")
        .await?;
    anyhow::ensure!(r.exit_code == 0, "change failed");
    let second = c
        .create_snapshot(id, &CreateSnapshotRequest::default())
        .await?;
    table.note(format!(
        "snapshot of {mib} MiB: {:.1} MiB archive, {:.1} MiB stored compressed; after a 1 MiB change the next snapshot stored {:.2} MiB new (target < 5 MiB)",
        first.size_bytes as f64 / 1048576.0,
        first.new_bytes as f64 / 1048576.0,
        second.new_bytes as f64 / 1048576.0
    ));
    c.delete_sandbox(id).await?;
    let _ = sh(&format!("rm -rf {dir}"));
    wake(node, rounds.max(5), table).await
}

/// Waits (at most 60 s) until Docker has no container left whose name starts with `name`
/// other than `name` itself (a restore's replaced container is renamed `<name>_replaced_…`).
async fn replaced_gone(name: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("docker")
            .args(["ps", "-a", "--format", "{{.Names}}", "--filter"])
            .arg(format!("name={name}"))
            .output()?;
        let names = String::from_utf8_lossy(&out.stdout);
        if names.lines().all(|n| n.trim() == name) {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "a replaced container of {name} is still there after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One field of `docker info` (a Go template), empty if it cannot be read.
fn docker_info(format: &str) -> String {
    Command::new("docker")
        .args(["info", "--format", format])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Wake from sleep (a small workspace) vs get-or-create of a new id, both with a first exec.
async fn wake(node: &BenchNode, n: usize, table: &mut Table) -> anyhow::Result<()> {
    let c = &node.client;
    let id = "bench-wake";
    c.sh(id, "mkdir -p /workspace && echo state > /workspace/f")
        .await?;
    let (mut wake_t, mut cold_t) = (Vec::new(), Vec::new());
    for i in 0..n {
        c.sleep(id).await?;
        tokio::time::sleep(Duration::from_millis(600)).await;
        node.wait_warm().await?;
        let t = Instant::now();
        let r = c.sh(id, "cat /workspace/f").await?;
        wake_t.push(t.elapsed());
        anyhow::ensure!(r.stdout == "state\n", "woke without its file");
        tokio::time::sleep(Duration::from_millis(600)).await;
        node.wait_warm().await?;
        let cold = format!("bench-wcold-{i}");
        let t = Instant::now();
        c.sh(&cold, "true").await?;
        cold_t.push(t.elapsed());
        c.delete_sandbox(&cold).await?;
    }
    table.add_sampled(
        "wake from sleep + first exec",
        &wake_t,
        "create + first exec",
        &cold_t,
        "report",
    );
    c.delete_sandbox(id).await?;
    Ok(())
}
