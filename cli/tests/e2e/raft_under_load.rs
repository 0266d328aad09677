//! Raft's heartbeats from the leader to a follower stay on time while the same pair of
//! nodes carries a node's worth of forwarded traffic: 100 terminal sockets with output
//! flowing and a 1 GiB upload, all entering the leader for two sandboxes on the follower.
//!
//! The follower reports how long ago the leader's last heartbeat (or entries) reached it
//! (`warren_raft_leader_contact_age_ms`). Heartbeats are 100 ms apart here (the test
//! clusters' timing) and a follower starts an election after 400–800 ms without one: a
//! heartbeat held up behind forwarded streams (a shared stream budget, a full connection
//! window) shows as a contact older than that, or as an election (a new term).

use super::cluster_harness::{ids_on, TestCluster};
use super::terminals::{read_until, size};
use reqwest::Method;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use warren_client::{Client, TerminalEvent};

const TERMINALS: usize = 100;
const UPLOAD_MIB: u64 = 1024;
/// The follower starts an election after 4–8 heartbeats (100 ms each here) without one.
const ELECTION_MIN_MS: f64 = 400.0;

/// One metric's value in a Prometheus text exposition (an unlabelled series).
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// What the sampler saw of Raft while the load ran.
#[derive(Default, Debug)]
struct RaftSeen {
    /// Samples in which the follower answered with its contact age.
    samples: usize,
    /// The oldest the leader's last contact was, seen from the follower.
    max_contact_age_ms: f64,
    /// Every term any node reported.
    terms: Vec<f64>,
    /// Samples in which the follower knew no leader.
    follower_leaderless: usize,
}

async fn scrape(client: &Client) -> Option<String> {
    let resp = client
        .request(Method::GET, "/metrics")
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    resp.text().await.ok()
}

/// Samples the follower's contact age and every node's term every 50 ms until `stop`.
async fn sample(nodes: Vec<Client>, follower: usize, stop: CancellationToken) -> RaftSeen {
    let mut seen = RaftSeen::default();
    while !stop.is_cancelled() {
        let texts = futures_util::future::join_all(nodes.iter().map(scrape)).await;
        for t in texts.iter().flatten() {
            if let Some(term) = metric(t, "warren_raft_term") {
                if !seen.terms.contains(&term) {
                    seen.terms.push(term);
                }
            }
        }
        if let Some(f) = &texts[follower] {
            if let Some(age) = metric(f, "warren_raft_leader_contact_age_ms").filter(|a| *a >= 0.0)
            {
                seen.samples += 1;
                seen.max_contact_age_ms = seen.max_contact_age_ms.max(age);
            }
            if metric(f, "warren_raft_has_leader") != Some(1.0) {
                seen.follower_leaderless += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// A node's Raft latency histograms (log writes, AppendEntries served) as exposed: where
/// a late heartbeat spent its time, for the failure message.
async fn raft_latency(node: &Client) -> String {
    let text = scrape(node).await.unwrap_or_default();
    text.lines()
        .filter(|l| {
            (l.starts_with("warren_raft_log_write_seconds")
                || l.starts_with("warren_raft_append_entries_seconds"))
                && !l.contains("le=\"+Inf\"")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The largest contact age the follower reports over `span`.
async fn worst_contact_age(follower: &Client, span: Duration) -> f64 {
    let started = Instant::now();
    let mut worst: f64 = -1.0;
    while started.elapsed() < span {
        if let Some(t) = scrape(follower).await {
            worst = worst.max(metric(&t, "warren_raft_leader_contact_age_ms").unwrap_or(-1.0));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    worst
}

/// A file whose existence ends every terminal's output loop.
const STOP_FILE: &str = "/tmp/stop-load";

/// Opens terminal `k` on `id` (through `client`) and starts a line of output every 100 ms in
/// it until [`STOP_FILE`] exists, then a marker; reads it all. Answers whether the marker
/// came back within 30 s of `stop` (the stream still works end to end), with the bytes read.
async fn terminal_under_load(
    client: Client,
    id: String,
    k: usize,
    opened: tokio::sync::mpsc::Sender<()>,
    stop: CancellationToken,
) -> (Result<(), String>, usize) {
    let mut sock = client
        .terminal(&id, &format!("t{k}"), &size(80, 24))
        .await
        .unwrap_or_else(|e| panic!("terminal {k}: {e}"));
    read_until(&mut sock, "", Duration::from_secs(30)).await;
    // The marker is computed by the shell: the echoed command line does not contain it.
    sock.send(format!(
        "while [ ! -e {STOP_FILE} ]; do echo tick-{k}; sleep 0.1; done; echo done-$((40+{k}))\n"
    ))
    .await
    .unwrap();
    let _ = opened.send(()).await;
    let marker = format!("done-{}", 40 + k);
    let (mut read, mut tail) = (0, String::new());
    // Read all along (output flows during the load); 30 s for the marker once stopped.
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let mut stopped = false;
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled(), if !stopped => {
                stopped = true;
                deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                continue;
            }
            ev = tokio::time::timeout_at(deadline, sock.next()) => ev,
        };
        match ev {
            Ok(Some(Ok(TerminalEvent::Output(b)))) => {
                read += b.len();
                tail.push_str(&String::from_utf8_lossy(&b));
                if tail.contains(&marker) {
                    return (Ok(()), read);
                }
                if tail.len() > 4096 {
                    tail.drain(..tail.len() - 256);
                }
            }
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => panic!("terminal {k} failed under load: {e}"),
            Ok(None) => return (Err(format!("terminal {k} closed")), read),
            Err(_) => {
                let end = tail.len().saturating_sub(300);
                let last = tail.get(end..).unwrap_or(&tail);
                return (
                    Err(format!(
                        "terminal {k} gave no marker; last output: {last:?}"
                    )),
                    read,
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raft_heartbeats_stay_on_time_under_100_terminals_and_a_1_gib_upload() {
    // Three voters (a cluster of two has one).
    let mut c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    // A sandbox runs at most 64 terminals: two sandboxes on the follower hold 50 each.
    let ids = ids_on(&c, leader, &c.nodes[follower].name, 2).await;
    let id = ids[0].clone();
    let through = c.nodes[leader].client.clone();

    let stop_terminals = CancellationToken::new();
    let (opened_tx, mut opened) = tokio::sync::mpsc::channel(TERMINALS);
    let terminals: Vec<_> = (0..TERMINALS)
        .map(|k| {
            tokio::spawn(terminal_under_load(
                through.clone(),
                ids[k % 2].clone(),
                k,
                opened_tx.clone(),
                stop_terminals.clone(),
            ))
        })
        .collect();
    drop(opened_tx);
    for _ in 0..TERMINALS {
        tokio::time::timeout(Duration::from_secs(120), opened.recv())
            .await
            .expect("100 terminals open within two minutes")
            .expect("every terminal opened");
    }

    let stop_sampling = CancellationToken::new();
    let sampler = tokio::spawn(sample(
        c.nodes.iter().map(|n| n.client.clone()).collect(),
        follower,
        stop_sampling.clone(),
    ));

    let (body, expected) = super::harness::patterned_upload(UPLOAD_MIB);
    let started = Instant::now();
    let written = through
        .write_file(&id, "/workspace/big", body, None)
        .await
        .unwrap();
    let upload = started.elapsed();
    stop_sampling.cancel();
    let seen = sampler.await.unwrap();
    for id in &ids {
        let touched = through
            .exec(
                id,
                &warren_api::exec::ExecRequest {
                    command: Some(format!("touch {STOP_FILE}")),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(touched.exit_code, 0);
    }
    stop_terminals.cancel();
    let mut silent = Vec::new();
    let mut bytes = 0;
    for t in terminals {
        let (answer, read) = t.await.unwrap();
        if let Err(why) = answer {
            silent.push(why);
        }
        bytes += read;
    }
    let latency = format!(
        "follower:\n{}\nleader:\n{}",
        raft_latency(&c.nodes[follower].client).await,
        raft_latency(&c.nodes[leader].client).await
    );
    eprintln!(
        "1 GiB uploaded through the leader in {upload:?}; terminals read {bytes} bytes; raft: {seen:?}\n{latency}"
    );

    assert_eq!(written.sha256, expected);
    assert_eq!(written.size, UPLOAD_MIB << 20);
    assert!(
        silent.is_empty(),
        "{} terminals no longer answer after the upload: {silent:#?}",
        silent.len()
    );
    assert!(bytes > 0, "output flowed through the terminals");
    assert!(seen.samples >= 10, "{seen:?}");
    assert_eq!(
        seen.terms.len(),
        1,
        "an election happened under load: {seen:?}"
    );
    assert_eq!(seen.follower_leaderless, 0, "{seen:?}");
    assert!(
        seen.max_contact_age_ms < ELECTION_MIN_MS,
        "the leader's heartbeats reached the follower later than an election starts: {seen:?}\n{latency}"
    );

    // The probe sees a stall when there is one: with the leader paused for 1.5 s, the
    // follower reports a contact older than the election timeout.
    let quiet = worst_contact_age(&c.nodes[follower].client, Duration::from_millis(300)).await;
    assert!((0.0..ELECTION_MIN_MS).contains(&quiet), "{quiet}");
    c.stop(leader);
    let worst = worst_contact_age(&c.nodes[follower].client, Duration::from_millis(1500)).await;
    c.cont(leader);
    // Three heartbeats missed (the follower may win the election that follows, and stops
    // reporting as soon as it leads).
    assert!(worst >= 300.0, "a silent leader went unseen: {worst} ms");
}

/// A follower that answers the leader late once (stopped for 200 ms: the leader's call to
/// it, 100 ms at most, runs out meanwhile) hears the leader again at the next heartbeats.
/// Before, the leader took the missed deadline for an unreachable member and its
/// replication backed off for 500 ms: after resuming, the follower went 350–475 ms more
/// without a heartbeat, near or past the 400 ms at which an election may start (the load
/// test above failed that way on a busy CI machine, and here with two busy CPU loops beside
/// it: 456 and 507 ms). Now about 150 ms (a heartbeat is 100 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_answers_one_heartbeat_late_hears_its_leader_at_the_next() {
    let mut c = TestCluster::start(3, 1).await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let follower = (leader + 1) % 3;
    let probe = c.nodes[follower].client.clone();
    let mut silences = Vec::new();
    // Not every stop catches a call in flight: eight rounds catch one or more.
    for _ in 0..8 {
        c.stop(follower);
        tokio::time::sleep(Duration::from_millis(200)).await;
        c.cont(follower);
        let resumed = Instant::now();
        // The longest the follower went without the leader since it resumed: what its
        // contact age says, but no more than the time since it resumed.
        let mut silence: f64 = 0.0;
        while resumed.elapsed() < Duration::from_millis(1200) {
            if let Some(t) = scrape(&probe).await {
                if let Some(age) = metric(&t, "warren_raft_leader_contact_age_ms") {
                    let since = resumed.elapsed().as_millis() as f64;
                    silence = silence.max(age.min(since));
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        silences.push(silence);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let terms: Vec<f64> = futures_util::future::join_all(c.nodes.iter().map(|n| scrape(&n.client)))
        .await
        .iter()
        .flatten()
        .filter_map(|t| metric(t, "warren_raft_term"))
        .collect();
    eprintln!("silences after resuming (ms): {silences:?}; terms: {terms:?}");
    assert!(
        silences.iter().all(|s| *s < 320.0),
        "the leader went silent for a follower that answered one call late: {silences:?} ms"
    );
    assert!(
        terms.iter().all(|t| *t == terms[0]),
        "an election happened: {terms:?}"
    );
}
