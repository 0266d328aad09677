//! Histories under faults, judged by `history::check`: clients entering every node append to
//! the sandboxes of a three-node cluster (one sandbox owned by each node; a fourth node that
//! owns nothing in one scenario) while the test cuts nodes apart, pauses and kills them; then the cluster is healed, the files are read once
//! every node reads the same, and every request of the history is judged.
//!
//! The tests run on a multi-threaded runtime: the nemesis blocks its thread while it waits
//! for a process to stop or die, and the clients must note their answers meanwhile, when
//! they come, not once the nemesis lets go.

use super::cluster_harness::{exec_through, ids_on, TestCluster};
use super::harness::create;
use super::history::{check, Allowances, Op, Outcome};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A client gives up on a request after this long. Longer than any wait the API does for a
/// failover or a move, so a missing answer is the node's silence, not the client's haste.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(75);

/// One append: the value and the line it landed on, under a lock, so that appends from
/// different clients report lines one at a time.
fn append_script(value: &str) -> String {
    format!(
        "flock /workspace/.log.lock sh -c 'echo {value} >> /workspace/log && wc -l < /workspace/log'"
    )
}

/// Sends one append of `value` to `sandbox` through the node at `url`.
async fn append(
    http: &reqwest::Client,
    url: &str,
    key: &str,
    sandbox: &str,
    value: &str,
) -> Outcome {
    let script = append_script(value);
    let (status, node, body) =
        match exec_through(http, url, key, sandbox, &script, CLIENT_TIMEOUT).await {
            Ok(answer) => answer,
            Err(why) => return Outcome::NoAnswer(why),
        };
    if !(200..300).contains(&status) {
        return Outcome::Refused {
            status,
            code: body["code"].as_str().unwrap_or_default().to_string(),
            retryable: body["retryable"].as_bool().unwrap_or(false),
        };
    }
    let stdout = body["stdout"].as_str().unwrap_or_default().trim();
    match (body["exit_code"].as_i64(), stdout.parse::<usize>()) {
        (Some(0), Ok(line)) => Outcome::Acked { node, line },
        _ => Outcome::Failed(body.to_string()),
    }
}

/// The clients: one per node and sandbox, so that a request waiting on one sandbox holds up
/// no other. Client `(k, j)` enters node `k` and appends `c<k>s<j>-<seq>` to sandbox `j`
/// until `until` has passed since `start`.
pub(super) fn start_clients(
    c: &TestCluster,
    sandboxes: &[String],
    start: Instant,
    until: Duration,
) -> Vec<tokio::task::JoinHandle<Vec<Op>>> {
    let mut clients = Vec::new();
    for k in 0..c.nodes.len() {
        for (j, sandbox) in sandboxes.iter().enumerate() {
            let url = c.nodes[k].url.clone();
            let key = c.admin_key().to_string();
            let sandbox = sandbox.clone();
            clients.push(tokio::spawn(async move {
                let http = reqwest::Client::new();
                let mut ops = Vec::new();
                let mut seq = 0usize;
                while start.elapsed() < until {
                    let value = format!("c{k}s{j}-{seq}");
                    let sent = start.elapsed();
                    let outcome = append(&http, &url, &key, &sandbox, &value).await;
                    let ended = start.elapsed();
                    // A refused or unanswered request is not retried at once: the history
                    // keeps moving and the load stays bounded.
                    let pause = match outcome {
                        Outcome::Acked { .. } => 100,
                        _ => 300,
                    };
                    ops.push(Op {
                        sandbox: sandbox.clone(),
                        value,
                        entry: k,
                        sent,
                        ended,
                        outcome,
                    });
                    seq += 1;
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                ops
            }));
        }
    }
    clients
}

/// One sandbox owned by each node (created through node 0).
async fn one_sandbox_per_node(c: &TestCluster) -> Vec<String> {
    let mut out = Vec::new();
    for n in &c.nodes {
        out.extend(ids_on(c, 0, &n.name, 1).await);
    }
    out
}

/// Once healed: waits until each sandbox runs in one container and every node reads the same
/// file, and returns the files. When one does not settle, the message says what each node
/// answered last, where each node places the sandbox and what its containers run.
pub(super) async fn settled_files(
    c: &TestCluster,
    sandboxes: &[String],
) -> BTreeMap<String, Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let http = reqwest::Client::new();
    let (key, timeout) = (c.admin_key(), Duration::from_secs(30));
    let mut files = BTreeMap::new();
    for id in sandboxes {
        loop {
            let mut reads: Vec<Result<String, String>> = Vec::new();
            for n in &c.nodes {
                let r = exec_through(&http, &n.url, key, id, "cat /workspace/log", timeout).await;
                reads.push(match r {
                    Ok((200..=299, _, body)) => body["stdout"]
                        .as_str()
                        .map(str::to_string)
                        .ok_or_else(|| body.to_string()),
                    Ok((status, node, body)) => Err(format!("{status} from {node:?}: {body}")),
                    Err(e) => Err(e),
                });
            }
            let containers = c.containers_of(id);
            if containers == 1 && reads.iter().all(|r| r.is_ok() && *r == reads[0]) {
                let text = reads[0].clone().unwrap();
                files.insert(id.clone(), text.lines().map(str::to_string).collect());
                break;
            }
            if Instant::now() >= deadline {
                let mut seen = Vec::new();
                for n in &c.nodes {
                    let r = http
                        .get(format!("{}/v1/sandboxes/{id}", n.url))
                        .bearer_auth(key)
                        .timeout(Duration::from_secs(5))
                        .send()
                        .await;
                    let said = match r {
                        Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
                        Err(e) => e.to_string(),
                    };
                    seen.push(format!("{}: {said}", n.name));
                }
                panic!(
                    "{id} did not settle: {containers} running containers, reads {reads:?}\nthe sandbox as each node says: {seen:?}\ncontainers:\n{}",
                    super::harness::describe_containers(id)
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    files
}

pub(super) async fn join_all(clients: Vec<tokio::task::JoinHandle<Vec<Op>>>) -> Vec<Op> {
    let mut ops = Vec::new();
    for h in clients {
        ops.extend(h.await.unwrap());
    }
    ops.sort_by_key(|o| o.sent);
    ops
}

/// How a history went, for the test's log.
fn summary(ops: &[Op]) -> String {
    let acked = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
        .count();
    let refused = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Refused { .. }))
        .count();
    let silent = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::NoAnswer(_)))
        .count();
    format!(
        "{} requests: {acked} acknowledged, {refused} refused (retryable or not), {silent} unanswered",
        ops.len()
    )
}

pub(super) fn judge(ops: &[Op], files: &BTreeMap<String, Vec<String>>, allow: &Allowances) {
    eprintln!("history: {}", summary(ops));
    let found = check(ops, files, allow);
    let text: Vec<String> = found.iter().map(|v| v.to_string()).collect();
    assert!(
        found.is_empty(),
        "{} violations:\n{}\nfiles: {files:?}",
        found.len(),
        text.join("\n")
    );
    let acked = ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
        .count();
    assert!(
        acked >= 20,
        "too few appends went through to judge: {ops:?}"
    );
}

/// Stops node `i` (SIGSTOP) until `until` is over, then lets it go on: when it was down,
/// since the history began.
async fn pause(
    c: &mut TestCluster,
    i: usize,
    start: Instant,
    until: impl std::future::Future<Output = ()>,
) -> (usize, Duration, Duration) {
    let from = start.elapsed();
    c.stop(i);
    until.await;
    c.cont(i);
    (i, from, start.elapsed())
}

/// When a kill happened, since the history began.
struct Killing {
    /// SIGKILL was sent: from here a request entering the victim may go unanswered.
    signalled: Duration,
    /// The victim was reaped: it answered nothing after this.
    reaped: Duration,
    /// It was started again and ready.
    back: Duration,
}

/// 6 s into the history, kills node `victim` with SIGKILL and starts it again `dead_for`
/// later.
async fn kill_and_restart(
    c: &mut TestCluster,
    victim: usize,
    start: Instant,
    dead_for: Duration,
) -> Killing {
    tokio::time::sleep(Duration::from_secs(6).saturating_sub(start.elapsed())).await;
    eprintln!("nemesis: killing {}", c.nodes[victim].name);
    let signalled = start.elapsed();
    c.kill(victim);
    let reaped = start.elapsed();
    tokio::time::sleep(dead_for).await;
    eprintln!("nemesis: starting {} again", c.nodes[victim].name);
    c.restart(victim);
    Killing {
        signalled,
        reaped,
        back: start.elapsed(),
    }
}

/// Whether node `entry` was stopped or killed while `op` was in flight.
pub(super) fn entry_down(windows: &[(usize, Duration, Duration)], op: &Op) -> bool {
    windows
        .iter()
        .any(|&(node, from, to)| node == op.entry && op.sent < to && from < op.ended)
}

/// Judges a history in which nothing acknowledged may be lost: only requests that entered a
/// node while it was down (`down`: node, from, to) may go unanswered.
fn judge_nothing_lost(
    ops: &[Op],
    files: &BTreeMap<String, Vec<String>>,
    down: &[(usize, Duration, Duration)],
) {
    let unanswered = |o: &Op| entry_down(down, o);
    judge(
        ops,
        files,
        &Allowances {
            may_lose: &|_| false,
            may_go_unanswered: &unanswered,
        },
    );
}

/// Partitions and pauses shorter than the failure timeout: an owner cut off from the rest, the
/// leader paused, a one-way loss from the leader to a follower, the leader cut off from both
/// followers, an owner paused. Nothing may be lost and nothing may fork; every request is answered (one that
/// entered the paused node once it runs again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_short_partitions_and_pauses_no_acknowledged_append_is_lost_or_forked() {
    let mut c = TestCluster::start_with(
        3,
        1,
        "checkpoint_every_s = 1\ndown_after_ms = 8000\nlease_ms = 2000\n",
    )
    .await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let followers: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let sandboxes = one_sandbox_per_node(&c).await;
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(40));
    let at = |s: u64| async move {
        let t = Duration::from_secs(s);
        if let Some(wait) = t.checked_sub(start.elapsed()) {
            tokio::time::sleep(wait).await;
        }
    };
    let mut down = Vec::new();

    at(2).await;
    eprintln!("nemesis: cutting owner {} off", followers[0]);
    c.partition(&[followers[0]], &[leader, followers[1]]);
    at(6).await;
    c.heal();

    at(10).await;
    eprintln!("nemesis: pausing the leader {leader}");
    down.push(pause(&mut c, leader, start, at(13)).await);

    at(17).await;
    let leader = c.leader().await;
    let other = (0..3).find(|&i| i != leader).unwrap();
    eprintln!("nemesis: dropping what {leader} sends {other}");
    c.drop_one_way(leader, other);
    at(21).await;
    c.heal();

    at(24).await;
    let leader = c.leader().await;
    let rest: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    eprintln!("nemesis: cutting the leader {leader} off");
    c.partition(&[leader], &rest);
    at(28).await;
    c.heal();

    at(31).await;
    let leader = c.leader().await;
    let owner = (0..3).find(|&i| i != leader).unwrap();
    eprintln!("nemesis: pausing owner {owner}");
    down.push(pause(&mut c, owner, start, at(34)).await);

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    judge_nothing_lost(&ops, &files, &down);
}

/// An owner killed with SIGKILL while clients write, failed over, then started again: what it
/// acknowledged in its last loss window (`loss_window_s` plus the time a checkpoint takes)
/// may be lost, nothing else; no two copies ever take appends together, also not when the
/// old owner returns with its containers; requests entering the dead node go unanswered
/// only while it is dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_killed_loses_at_most_its_loss_window_and_never_forks() {
    killed_owner(false).await;
}

/// The same with the leader as the owner killed: the survivors elect a leader, which waits
/// out the dead one's leases before it fails its sandbox over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_killed_loses_at_most_its_loss_window_and_never_forks() {
    killed_owner(true).await;
}

async fn killed_owner(the_leader: bool) {
    let mut c = TestCluster::start_with(3, 1, "checkpoint_every_s = 1\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let victim = if the_leader {
        leader
    } else {
        (0..3).find(|&i| i != leader).unwrap()
    };
    let victim_name = c.nodes[victim].name.clone();
    let loss_window = c.view(leader).await.unwrap()["loss_window_s"]
        .as_u64()
        .expect("checkpoints are on");
    let sandboxes = one_sandbox_per_node(&c).await;
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(34));

    eprintln!("nemesis: the victim is owner {victim_name} (the leader: {the_leader})");
    let kill = kill_and_restart(&mut c, victim, start, Duration::from_secs(14)).await;
    let killed = kill.reaped;

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    // A checkpoint of a busy debug-build sandbox takes a few seconds on this machine.
    let window = Duration::from_secs(loss_window + 4);
    // The victim answered before it was reaped, whenever the client noted the answer: one
    // received while the kill ran can be noted after `killed`.
    let lost_ok = |o: &Op| {
        matches!(&o.outcome, Outcome::Acked { node, .. } if *node == victim_name)
            && o.sent < killed
            && killed.saturating_sub(o.ended) <= window
    };
    let down = [(victim, kill.signalled, kill.back)];
    let unanswered = |o: &Op| entry_down(&down, o);
    let lost: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(o.outcome, Outcome::Acked { .. }) && !files[&o.sandbox].contains(&o.value)
        })
        .collect();
    if let Some(oldest) = lost.iter().map(|o| killed.saturating_sub(o.ended)).max() {
        eprintln!(
            "history: {} acknowledged appends lost with the owner; the oldest acknowledged {oldest:?} before the kill",
            lost.len()
        );
    }
    judge(
        &ops,
        &files,
        &Allowances {
            may_lose: &lost_ok,
            may_go_unanswered: &unanswered,
        },
    );
}

/// An entry node that owns nothing — a voter, not the leader — killed with SIGKILL while
/// clients append through it and through the owners, then started again: no owner died, so
/// nothing acknowledged may be lost and nothing may fork; requests go unanswered only when
/// they entered the dead node (those in flight through it when it died may or may not have
/// reached their owner: the checker accepts either).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_node_that_owns_nothing_killed_loses_nothing_and_forks_nothing() {
    let mut c = TestCluster::start_with(4, 1, "checkpoint_every_s = 1\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let view = c.view(leader).await.unwrap();
    let voter = |i: usize| {
        view["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["id"] == c.nodes[i].name.as_str() && n["voter"] == true)
    };
    let victim = (0..4)
        .find(|&i| i != leader && voter(i))
        .expect("a voter besides the leader");
    let victim_name = c.nodes[victim].name.clone();
    let mut sandboxes = Vec::new();
    for i in (0..4).filter(|&i| i != victim) {
        sandboxes.extend(ids_on(&c, leader, &c.nodes[i].name, 1).await);
    }
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(30));

    eprintln!("nemesis: the victim is {victim_name}, a voter that owns nothing");
    let kill = kill_and_restart(&mut c, victim, start, Duration::from_secs(12)).await;
    let killed = kill.reaped;

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    let down = [(victim, kill.signalled, kill.back)];
    judge_nothing_lost(&ops, &files, &down);
    // Requests through the other nodes kept being acknowledged while it was dead.
    let acked_meanwhile = ops
        .iter()
        .filter(|o| {
            o.entry != victim
                && o.sent > killed
                && o.ended < kill.back
                && matches!(o.outcome, Outcome::Acked { .. })
        })
        .count();
    assert!(
        acked_meanwhile >= 20,
        "only {acked_meanwhile} appends through the other nodes while {victim_name} was dead"
    );
}

/// The lines of `/workspace/log` in every `conflict` snapshot of `sandbox` (what a fenced
/// copy held when its partition healed), read from a new sandbox started from each.
async fn conflict_lines(c: &TestCluster, sandbox: &str) -> Vec<String> {
    let client = &c.nodes[0].client;
    let list = client.list_snapshots(Some(sandbox)).await.unwrap();
    let mut lines = Vec::new();
    for (k, s) in list
        .snapshots
        .iter()
        .filter(|s| s.origin == "conflict")
        .enumerate()
    {
        let copy = format!("{sandbox}-conflict-{k}");
        client
            .put_sandbox(&copy, &create(serde_json::json!({"from_snapshot": s.id})))
            .await
            .unwrap();
        let out = client.sh(&copy, "cat /workspace/log").await.unwrap().stdout;
        lines.extend(out.lines().map(str::to_string));
    }
    lines
}

/// An owner cut off from the other two for longer than the failure timeout, its sandbox failed
/// over to them, then healed: the cut-off copy stops taking appends before the new copy takes
/// any (no fork); whatever it acknowledged that the new copy lacks is in the conflict snapshot
/// it leaves; everything else is in the settled file; every request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_cut_off_past_the_failure_timeout_forks_nothing_and_keeps_what_it_took() {
    let mut c = TestCluster::start_with(3, 1, "checkpoint_every_s = 1\n").await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let victim = (0..3).find(|&i| i != leader).unwrap();
    let victim_name = c.nodes[victim].name.clone();
    let rest: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
    let sandboxes = one_sandbox_per_node(&c).await;
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(32));

    tokio::time::sleep(Duration::from_secs(5)).await;
    eprintln!("nemesis: cutting owner {victim_name} off");
    c.partition(&[victim], &rest);
    tokio::time::sleep(Duration::from_secs(14)).await;
    eprintln!("nemesis: healing");
    c.heal();

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    let mut kept = BTreeMap::new();
    for id in &sandboxes {
        kept.insert(id.clone(), conflict_lines(&c, id).await);
    }
    let by_victim =
        |o: &Op| matches!(&o.outcome, Outcome::Acked { node, .. } if *node == victim_name);
    let in_conflict = |o: &Op| by_victim(o) && kept[&o.sandbox].contains(&o.value);
    let saved = ops
        .iter()
        .filter(|o| in_conflict(o) && !files[&o.sandbox].contains(&o.value))
        .count();
    eprintln!("history: {saved} acknowledged appends of the cut-off copy are only in its conflict snapshot");
    judge(
        &ops,
        &files,
        &Allowances {
            may_lose: &in_conflict,
            may_go_unanswered: &|_| false,
        },
    );
}

/// A rolling restart, the way an upgrade goes (docs/operations.md, "Rolling upgrade"): each
/// node in turn, the leader included, stopped in order (SIGTERM), started again on its data
/// directory and waited for until the cluster sees every node up, while clients append
/// through every node. The failure timeout is longer than a restart, so no sandbox is failed
/// over: nothing acknowledged may be lost, nothing may fork, and only requests that entered
/// a node while it was down may go unanswered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_of_every_node_loses_nothing_and_forks_nothing() {
    let c = TestCluster::start_with(3, 1, ROLLING).await;
    restart_one_by_one(c, false).await;
}

/// The same rolling restart as an upgrade from the previous version
/// (`test-support/previous-version`, built by `test-support/build-previous-version.sh`,
/// which `make test` runs and names in `WARREN_PREVIOUS_BIN`): the cluster forms on that
/// version's binary and each node is restarted on this build's in turn, so that for most of
/// the run the two versions serve side by side, the leader moving between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_upgrade_from_the_previous_version_loses_nothing_and_forks_nothing() {
    let previous = std::env::var("WARREN_PREVIOUS_BIN").expect(
        "WARREN_PREVIOUS_BIN names the previous version's warren: make test builds it (test-support/build-previous-version.sh)",
    );
    let c = TestCluster::start_on_binary(3, 1, ROLLING, previous.into()).await;
    restart_one_by_one(c, true).await;
}

/// Every request entering any of `nodes` for any of `sandboxes` was acknowledged at least
/// once among those sent in `[from, until)`, allowing the first 2 s (leases and forwarding
/// connections come back).
fn judge_every_entry_serves_every_sandbox(
    ops: &[Op],
    nodes: usize,
    sandboxes: &[String],
    from: Duration,
    until: Duration,
) {
    let from = from + Duration::from_secs(2);
    for entry in 0..nodes {
        for s in sandboxes {
            let acked = ops
                .iter()
                .filter(|o| o.entry == entry && &o.sandbox == s)
                .filter(|o| o.sent >= from && o.sent < until)
                .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
                .count();
            assert!(
                acked > 0,
                "no append to {s} entering node {entry} was acknowledged between {from:?} and {until:?}"
            );
        }
    }
}

/// The settings of the rolling restarts: a failure timeout longer than a restart.
const ROLLING: &str = "checkpoint_every_s = 1\ndown_after_ms = 15000\nlease_ms = 2000\n";

/// Restarts each node of `c` in turn (on this build's binary when `upgrade`) while clients
/// append through every node, and judges the history.
async fn restart_one_by_one(mut c: TestCluster, upgrade: bool) {
    c.wait_voters_everywhere(3).await;
    let sandboxes = one_sandbox_per_node(&c).await;
    let start = Instant::now();
    let clients = start_clients(&c, &sandboxes, start, Duration::from_secs(60));
    let all_up = |v: &serde_json::Value| {
        v["leader"].is_string()
            && v["nodes"]
                .as_array()
                .is_some_and(|a| a.len() == 3 && a.iter().all(|x| x["state"] == "up"))
    };
    let mut down = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for i in 0..3 {
        eprintln!("upgrade: restarting {}", c.nodes[i].name);
        let from = start.elapsed();
        c.terminate(i);
        if upgrade {
            c.use_this_build(i);
        }
        c.restart(i);
        assert!(
            c.wait(Duration::from_secs(60), all_up).await,
            "{} did not come back up",
            c.nodes[i].name
        );
        down.push((i, from, start.elapsed()));
        tokio::time::sleep(Duration::from_secs(6)).await;
    }
    let last_back = down.last().map(|d| d.2).unwrap_or_default();

    let ops = join_all(clients).await;
    let files = settled_files(&c, &sandboxes).await;
    judge_nothing_lost(&ops, &files, &down);
    // Between restarts (the two versions side by side, in an upgrade) the cluster serves in
    // full: every node forwards to every sandbox's owner and every owner serves.
    for (k, step) in down.iter().enumerate() {
        let until = down.get(k + 1).map_or(start.elapsed(), |next| next.1);
        judge_every_entry_serves_every_sandbox(&ops, c.nodes.len(), &sandboxes, step.2, until);
    }
    // Every sandbox took appends again after the last restart.
    for s in &sandboxes {
        let after = ops
            .iter()
            .filter(|o| &o.sandbox == s && o.sent > last_back)
            .filter(|o| matches!(o.outcome, Outcome::Acked { .. }))
            .count();
        assert!(after > 0, "{s} took no append after the last restart");
    }
}
