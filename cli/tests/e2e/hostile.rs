//! Hostile sandboxes: code running as root inside a sandbox attacks the node's connection
//! to its guest agent. Every attack must fail closed: the node never talks to anything but
//! the sandbox's own guest, and the neighbour it points at is left untouched.

use super::harness::{sh, unique, Node};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use warren_api::exec::ExecRequest;
use warren_client::Client;

/// The run key of a sandbox id as the node derives it (the name of its run directory on the
/// host before the run directory moved into the container).
fn run_key(id: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..8])
}

/// What `n` concurrent calls to `id` printed (each its host name and the marker it saw), or
/// why they failed. Concurrent calls need more connections than the node's pool holds, so
/// the node opens new connections to the guest: the moment an attack would take effect.
async fn probe(c: &Client, id: &str, n: usize) -> Vec<Result<String, String>> {
    let calls = (0..n).map(|i| {
        let c = c.clone();
        let id = id.to_string();
        async move {
            let req = ExecRequest {
                command: Some(format!(
                    "sleep 0.3; touch /tmp/from-attacker-{i}; hostname; cat /workspace/marker 2>/dev/null || true"
                )),
                session: Some(format!("probe{i}")),
                ..Default::default()
            };
            match c.exec(&id, &req).await {
                Ok(r) => Ok(r.stdout),
                Err(e) => Err(e.to_string()),
            }
        }
    });
    futures_util::future::join_all(calls).await
}

/// Two sandboxes on one node: the victim holds a marker file.
async fn victim_and_attacker(node: &Node) -> (String, String) {
    let u = unique();
    let (victim, attacker) = (format!("victim-{u}"), format!("attacker-{u}"));
    let c = &node.client;
    sh(c, &victim, "echo VICTIM-DATA > /workspace/marker").await;
    sh(c, &attacker, "echo ATTACKER > /workspace/marker").await;
    (victim, attacker)
}

/// The victim answers as itself, still has its marker, and ran nothing of the attacker's.
async fn assert_victim_untouched(c: &Client, victim: &str) {
    let out = sh(
        c,
        victim,
        "hostname; cat /workspace/marker; ls /tmp | grep -c from-attacker || true",
    )
    .await;
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        vec![victim, "VICTIM-DATA", "0"],
        "the victim was reached: {out}"
    );
}

/// No call to the attacker ran anywhere but in the attacker.
fn assert_only_attacker(results: &[Result<String, String>], attacker: &str, what: &str) {
    for out in results.iter().flatten() {
        assert!(
            out.starts_with(&format!("{attacker}\n")) && out.contains("ATTACKER"),
            "{what}: a call to {attacker} was answered by something else: {out:?}"
        );
    }
}

/// The attacker points its socket at the victim's, by the path the node used to resolve on
/// the host (the issue's attack).
async fn redirect_to_victim(c: &Client, attacker: &str, victim: &str) {
    let kb = run_key(victim);
    sh(
        c,
        attacker,
        &format!("ln -sf ../{kb}/guest.sock /.warren/run/guest.sock"),
    )
    .await;
}

/// Calls to the attacker work again within a few seconds: its guest takes its socket back.
async fn assert_attacker_recovers(c: &Client, attacker: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let results = probe(c, attacker, 3).await;
        assert_only_attacker(&results, attacker, "after the attack");
        if results.iter().all(|r| r.is_ok()) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the attacker's own calls did not work again: {results:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn a_guest_socket_redirected_to_a_neighbour_or_a_host_socket_reaches_neither() {
    let node = Node::start().await;
    let c = &node.client;
    let (victim, attacker) = victim_and_attacker(&node).await;

    redirect_to_victim(c, &attacker, &victim).await;
    let results = probe(c, &attacker, 6).await;
    assert_only_attacker(&results, &attacker, "symlink to the neighbour's socket");
    assert_victim_untouched(c, &victim).await;
    assert_attacker_recovers(c, &attacker).await;

    // Any other unix socket on the host (dockerd's, say): here one this test listens on.
    let trap_path = format!("/tmp/wt-trap-{}.sock", unique());
    let trap = tokio::net::UnixListener::bind(&trap_path).unwrap();
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let trap_task = tokio::spawn(async move {
        while let Ok((_conn, _)) = trap.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    sh(
        c,
        &attacker,
        &format!("ln -sf {trap_path} /.warren/run/guest.sock"),
    )
    .await;
    let results = probe(c, &attacker, 6).await;
    assert_only_attacker(&results, &attacker, "symlink to a host socket");
    assert_eq!(
        reached.load(Ordering::SeqCst),
        0,
        "the node connected to a host socket the sandbox pointed at"
    );
    assert_victim_untouched(c, &victim).await;
    assert_attacker_recovers(c, &attacker).await;
    trap_task.abort();
    let _ = std::fs::remove_file(&trap_path);
}

/// A program in the sandbox that takes the guest's socket path and answers like a guest.
const IMPOSTOR: &str = r#"
import os, socket, threading
path = "/.warren/run/guest.sock"
body = b'{"exit_code":0,"stdout":"IMPOSTOR\\n","stderr":"","success":true,"duration_ms":1,"timed_out":false,"truncated":false}'
def serve(conn):
    try:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    finally:
        conn.close()
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(64)
open("/tmp/impostor-ready", "w").close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

#[tokio::test]
async fn an_impostor_guest_in_the_sandbox_is_refused() {
    let node = Node::start().await;
    let c = &node.client;
    let (victim, attacker) = victim_and_attacker(&node).await;
    c.write_file(
        &attacker,
        "/tmp/impostor.py",
        IMPOSTOR.as_bytes().to_vec(),
        None,
    )
    .await
    .unwrap();
    sh(
        c,
        &attacker,
        "nohup python3 /tmp/impostor.py >/tmp/impostor.log 2>&1 & \
         for i in $(seq 100); do [ -e /tmp/impostor-ready ] && break; sleep 0.05; done; \
         [ -e /tmp/impostor-ready ]",
    )
    .await;
    let results = probe(c, &attacker, 6).await;
    for r in results.iter().flatten() {
        assert!(
            !r.contains("IMPOSTOR"),
            "the node took the impostor's answer: {results:?}"
        );
    }
    assert_only_attacker(&results, &attacker, "impostor socket");
    assert_victim_untouched(c, &victim).await;
    assert_attacker_recovers(c, &attacker).await;
}

#[tokio::test]
async fn a_fifo_a_file_or_a_swap_in_place_of_the_socket_fails_closed() {
    let node = Node::start().await;
    let c = &node.client;
    let (victim, attacker) = victim_and_attacker(&node).await;
    for (what, script) in [
        (
            "a FIFO",
            "rm -f /.warren/run/guest.sock && mkfifo /.warren/run/guest.sock",
        ),
        (
            "a regular file",
            "rm -f /.warren/run/guest.sock && echo x > /.warren/run/guest.sock",
        ),
        (
            "a directory",
            "rm -f /.warren/run/guest.sock && mkdir /.warren/run/guest.sock",
        ),
    ] {
        sh(c, &attacker, script).await;
        let results = probe(c, &attacker, 6).await;
        assert_only_attacker(&results, &attacker, what);
        assert_victim_untouched(c, &victim).await;
        assert_attacker_recovers(c, &attacker).await;
    }
    // Swapped while the node holds connections: a long call keeps one open across the swap.
    let long = {
        let c = c.clone();
        let attacker = attacker.clone();
        tokio::spawn(async move {
            let req = ExecRequest {
                command: Some("sleep 2; hostname".into()),
                session: Some("long".into()),
                ..Default::default()
            };
            c.exec(&attacker, &req).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    redirect_to_victim(c, &attacker, &victim).await;
    let results = probe(c, &attacker, 6).await;
    assert_only_attacker(&results, &attacker, "a swap during a call");
    let long = long.await.unwrap().unwrap();
    assert_eq!(
        long.stdout.trim(),
        attacker,
        "the open call stays with its guest"
    );
    assert_victim_untouched(c, &victim).await;
    assert_attacker_recovers(c, &attacker).await;
}

#[tokio::test]
async fn a_corrupt_record_leaves_its_container_running() {
    let mut node = Node::start().await;
    let c = node.client.clone();
    let id = format!("rec-{}", unique());
    sh(&c, &id, "echo kept > /workspace/f").await;
    let container = format!("wrn-{}-{id}", node.node_id);
    node.kill();
    let record = node.data_dir.join(format!("sandboxes/{id}.json"));
    let good = std::fs::read(&record).unwrap();
    std::fs::write(&record, b"{\"format\": 1, \"id\": ").unwrap();
    node.restart().await;
    let c = node.client.clone();
    // Not taken for an orphan: the container runs on, untouched.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        super::harness::running_containers(&id),
        vec![container.clone()],
        "the container of a corrupt record was removed"
    );
    // Its id is not served (nor replaced by a new, empty sandbox) until someone looks.
    let e = c.sh(&id, "cat /workspace/f").await.unwrap_err();
    super::harness::assert_unavailable(&e);
    assert!(e.to_string().contains("quarantined"), "{e}");
    let e = c.delete_sandbox(&id).await.unwrap_err();
    super::harness::assert_unavailable(&e);
    assert_eq!(super::harness::running_containers(&id), vec![container]);
    // The record was kept aside, not deleted: put back, the sandbox is whole again.
    let aside: Vec<_> = std::fs::read_dir(node.data_dir.join("sandboxes/quarantine"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    std::fs::remove_file(&aside[0]).unwrap();
    std::fs::write(&record, good).unwrap();
    node.restart().await;
    assert_eq!(sh(&node.client, &id, "cat /workspace/f").await, "kept\n");
}

/// Threads that keep this host's CPUs busy until dropped.
struct BusyHost(
    Arc<std::sync::atomic::AtomicBool>,
    Vec<std::thread::JoinHandle<()>>,
);

impl BusyHost {
    fn start(threads: usize) -> BusyHost {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinners = (0..threads)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyHost(stop, spinners)
    }
}

impl Drop for BusyHost {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
        for t in self.1.drain(..) {
            let _ = t.join();
        }
    }
}

/// A sandbox whose code starts programs without pause (sixteen shell loops, each starting
/// two at a time), on a host kept busy, makes the cgroup v1 freezer lose its race with the
/// sandbox's tasks: the engine then answers a pause with 500 "unable to freeze" (12 times in
/// 30 with `docker pause` here), and the snapshot, the fork or the freeze on a lost lease
/// that needed the pause failed (a snapshot answered 503, as one in CI did on an ordinary
/// sandbox of a busy host). Every snapshot and fork of such a sandbox must succeed and
/// hold its files, and it must run on afterwards (not be left frozen).
#[tokio::test]
async fn a_sandbox_that_never_stops_starting_programs_is_still_paused_for_snapshots_and_forks() {
    use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest};
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("forker-{}", unique());
    sh(c, &id, "echo kept > /workspace/marker").await;
    let storm = "for j in $(seq 1 16); do (while :; do sh -c '/bin/true & /bin/true & wait'; done) & done; wait";
    c.start_process(
        &id,
        &serde_json::from_value(serde_json::json!({"command": storm})).unwrap(),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let procs = sh(c, &id, "ps -e --no-headers | wc -l").await;
    assert!(
        procs.trim().parse::<u32>().unwrap_or(0) > 16,
        "the loops do not run: {procs}"
    );
    let busy = BusyHost::start(2);
    let mut snapshots = Vec::new();
    for i in 0..8 {
        let snap = c
            .create_snapshot(&id, &CreateSnapshotRequest::default())
            .await
            .unwrap_or_else(|e| panic!("snapshot {i} of a forking sandbox failed: {e}"));
        snapshots.push(snap.id);
    }
    let mut forks = Vec::new();
    for i in 0..2 {
        let req = ForkRequest {
            count: 1,
            ids: Some(vec![format!("{id}-f{i}")]),
        };
        let forked = c
            .fork(&id, &req)
            .await
            .unwrap_or_else(|e| panic!("fork {i} of a forking sandbox failed: {e}"));
        forks.extend(forked.sandboxes.into_iter().map(|f| f.id));
    }
    drop(busy);
    for f in &forks {
        assert_eq!(sh(c, f, "cat /workspace/marker").await, "kept\n");
        c.delete_sandbox(f).await.unwrap();
    }
    // Not left frozen: a call to it answers (a frozen guest answers nothing).
    assert_eq!(sh(c, &id, "cat /workspace/marker").await, "kept\n");
    for s in snapshots {
        c.delete_snapshot(&s).await.unwrap();
    }
}
