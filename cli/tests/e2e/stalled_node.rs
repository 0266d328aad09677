//! A node whose request threads stall keeps its lease, and its sandboxes keep running.
//!
//! Under a saturated host (a failover restoring hundreds of sandboxes) a node's threads wait
//! on the run queue for seconds; when its lease renewals waited behind its request handling,
//! the node lost its lease about once a minute and every sandbox it runs was stopped until
//! the next renewal (docs/benchmarks.md, the 1,000-sandbox failover). Here the failing host
//! is made exact: every request thread of a follower (`warren-worker`) is frozen with the
//! cgroup freezer for three lease lengths, while one of its sandboxes writes a timestamp
//! every 100 ms. Raft, the lease keeper, the peer endpoint and the fence run on threads of
//! their own (`warren-raft`): the lease must hold throughout, and so the sandbox's processes
//! must never be stopped.

use super::cluster_harness::{exec_via, ids_on, TestCluster};
use super::harness::unique;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The lease of this test's cluster.
const LEASE: Duration = Duration::from_secs(2);

/// A cgroup v1 freezer group holding some threads of a process; thawed and removed when
/// dropped (the threads go back to the root group), however the test ends.
struct FrozenThreads {
    dir: PathBuf,
}

impl FrozenThreads {
    /// Freezes every thread of `pid` called `comm`; returns once the kernel says frozen.
    fn freeze(pid: i32, comm: &str) -> (FrozenThreads, usize) {
        let root = PathBuf::from("/sys/fs/cgroup/freezer");
        assert!(
            root.join("tasks").exists(),
            "this test needs the cgroup v1 freezer at {}",
            root.display()
        );
        let dir = root.join(format!("warren-test-{}", unique()));
        std::fs::create_dir(&dir).unwrap();
        let group = FrozenThreads { dir };
        let mut moved = 0;
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let task = task.unwrap().path();
            let name = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            if name.trim() != comm {
                continue;
            }
            let tid = task.file_name().unwrap().to_string_lossy().to_string();
            // One thread at a time: v1 groups take thread ids in `tasks`.
            std::fs::write(group.dir.join("tasks"), &tid).unwrap();
            moved += 1;
        }
        std::fs::write(group.dir.join("freezer.state"), "FROZEN").unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::read_to_string(group.dir.join("freezer.state"))
            .unwrap()
            .trim()
            != "FROZEN"
        {
            assert!(Instant::now() < deadline, "the threads did not freeze");
            std::thread::sleep(Duration::from_millis(10));
        }
        (group, moved)
    }
}

impl Drop for FrozenThreads {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        let tasks = std::fs::read_to_string(self.dir.join("tasks")).unwrap_or_default();
        for tid in tasks.lines() {
            let _ = std::fs::write("/sys/fs/cgroup/freezer/tasks", tid);
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The timestamps (ns) the sandbox's ticker wrote, read through its container's root on
/// this host (the node's API is what is stalled).
fn ticks(node: &str, sandbox: &str) -> Vec<u128> {
    let pid = super::cluster_harness::container_pid(node, sandbox).expect("container runs");
    std::fs::read_to_string(format!("/proc/{pid}/root/workspace/ticks"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// The longest gap between consecutive ticks written after `from_ns`, and after which tick.
fn longest_gap(ticks: &[u128], from_ns: u128) -> (Duration, u128) {
    ticks
        .windows(2)
        .filter(|w| w[1] >= from_ns)
        .map(|w| (Duration::from_nanos((w[1] - w[0]) as u64), w[0]))
        .max()
        .unwrap_or_default()
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[tokio::test]
async fn a_node_whose_request_threads_stall_keeps_its_lease_and_its_sandboxes_run_on() {
    // Nothing is handed on while the follower stalls: only its lease is at stake.
    let c = TestCluster::start_with(3, 1, "down_after_ms = 20000\nlease_ms = 2000\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    let name = c.nodes[follower].name.clone();
    let id = ids_on(&c, follower, &name, 1).await.remove(0);
    let (status, _, body) = exec_via(
        &c,
        follower,
        &id,
        "nohup sh -c 'while :; do date +%s%N >> /workspace/ticks; sleep 0.1; done' >/dev/null 2>&1 &",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let stalled_from = now_ns();
    let (frozen, threads) = FrozenThreads::freeze(c.nodes[follower].pid(), "warren-worker");
    assert!(
        threads >= 2,
        "the node's request threads were found ({threads})"
    );
    eprintln!("test: froze {threads} request threads of {name}");
    tokio::time::sleep(3 * LEASE).await;
    let stalled_until = now_ns();
    drop(frozen);

    // The node answers again, through itself, and its sandbox holds every tick.
    let (status, _, body) = exec_via(&c, follower, &id, "wc -l < /workspace/ticks").await;
    assert_eq!(status, 200, "{body}");
    let ticks = ticks(&name, &id);
    let during = ticks
        .iter()
        .filter(|t| (stalled_from..stalled_until).contains(*t))
        .count();
    let (gap, after) = longest_gap(&ticks, stalled_from);
    let lost_lease = c.nodes[follower]
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains("no lease this round"))
        .cloned()
        .collect::<Vec<_>>();
    assert!(
        gap < Duration::from_millis(1500),
        "the sandbox's processes were stopped for {gap:?} (after the tick at {after} ns; the stall ran from {stalled_from} to {stalled_until} ns, {during} ticks in it): the node lost its lease while its request threads stalled: {lost_lease:?}"
    );
    assert!(
        during >= 30,
        "the sandbox ticked {during} times in the 6 s stall"
    );
}
