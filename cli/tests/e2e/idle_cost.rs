//! What an idle sandbox costs its host: its guest does not wake more than it must.

use super::cluster_harness::{container_pid, owner_of, TestCluster};
use super::harness::unique;
use std::time::Duration;

/// Context switches so far of the thread named `name` of process `pid`.
fn switches_of_thread(pid: &str, name: &str) -> Option<u64> {
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
    {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).ok()?;
        return Some(
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .sum(),
        );
    }
    None
}

/// Counts the wake-ups of the fence thread of the container whose init is `pid` over 6 s:
/// between 0.5 and 3 a second (it looks about once a second, and still looks).
async fn assert_fence_wakes_about_once_a_second(pid: &str, whose: &str) {
    let window = Duration::from_secs(6);
    let before = switches_of_thread(pid, "fence").expect("the guest's fence thread");
    tokio::time::sleep(window).await;
    let after = switches_of_thread(pid, "fence").expect("the guest's fence thread");
    let per_second = (after - before) as f64 / window.as_secs_f64();
    eprintln!(
        "{whose} fence thread woke {} times in {window:?} ({per_second:.1} a second)",
        after - before
    );
    assert!(
        per_second <= 3.0,
        "{whose} fence thread woke {per_second:.1} times a second"
    );
    assert!(
        per_second >= 0.5,
        "{whose} fence thread stopped looking: {per_second:.1} a second"
    );
}

/// An idle sandbox of a node in a cluster (so its node vouches for it in the fence file,
/// renewed every 100 ms): the guest's fence thread wakes about once a second, at most at the
/// time the node vouched for. It read the file every 100 ms before, whatever it said: ten
/// wake-ups a second per idle sandbox, most of an idle guest's CPU (with 400 idle sandboxes
/// the guests took a sixth of a core, `loadtest/start-density.sh`). That a dead node's
/// sandboxes still stop in time is `ownership::a_dead_nodes_sandboxes_stop_by_themselves_and_go_on_when_it_returns`.
#[tokio::test]
async fn an_idle_sandboxs_fence_looks_about_once_a_second_not_ten_times() {
    let c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let id = format!("idle-{}", &unique()[..8]);
    let owner = owner_of(&c, 0, &id).await;
    let pid = container_pid(&owner, &id).expect("the sandbox's container runs");
    // The fence vouches (the file says "until"), and the sandbox runs.
    let fence = std::fs::read_to_string(format!("/proc/{pid}/root/.warren/fence/lease"))
        .expect("the fence file");
    assert!(
        fence.contains(" until "),
        "the node vouches nothing: {fence}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert_fence_wakes_about_once_a_second(&pid, "an idle sandbox's").await;
}

/// A dead node's sandboxes stop by themselves (their guests' fence) and stay stopped until
/// the node returns, which can take long: meanwhile their guests must not be what keeps the
/// host busy. A stopped sandbox's fence thread reads the file every 100 ms for its first
/// 10 s, then once a second, and looks its processes over with gaps doubling to 5 s. Before,
/// every stopped guest read the file and all of its `/proc` ten times a second for as long as
/// the node stayed away: a killed node's 1,000 sandboxes took this machine's two cores from
/// the survivors restoring them (`docs/benchmarks.md`).
#[tokio::test]
async fn a_dead_nodes_stopped_sandbox_looks_about_once_a_second_after_its_first_10_s() {
    let mut c = TestCluster::start_with(3, 1, "lease_ms = 2000\ndown_after_ms = 60000\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let (id, owner) = loop {
        let id = format!("dead-{}", &unique()[..8]);
        let owner = owner_of(&c, leader, &id).await;
        if owner != c.nodes[leader].name {
            break (id, c.index_of(&owner));
        }
        c.nodes[leader].client.delete_sandbox(&id).await.unwrap();
    };
    let name = c.nodes[owner].name.clone();
    let pid = container_pid(&name, &id).expect("the sandbox's container runs");
    c.kill(owner);
    // The lease runs out within 2 s; then 10 s of looks every 100 ms.
    tokio::time::sleep(Duration::from_secs(13)).await;
    let logs = std::process::Command::new("docker")
        .args(["logs", &format!("wrn-{name}-{id}")])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&logs.stderr).contains("lease ran out"),
        "the dead node's sandbox was not stopped"
    );
    assert_fence_wakes_about_once_a_second(&pid, "a dead node's stopped sandbox's").await;
}
