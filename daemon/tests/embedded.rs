//! A node run as a library, in this test's own process: started with `start`, serving until
//! its caller's future resolves (no signal), stopped in order by `serve_until`, and started
//! again in the same process with its sandbox re-adopted. Needs Docker, as every node does.

use std::time::{Duration, Instant};
use warren_daemon::settings::Settings;

fn settings(data_dir: &std::path::Path) -> Settings {
    let guest = std::env::var("WARREN_GUEST_BIN").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../target/x86_64-unknown-linux-musl/debug/warren-guest"
        )
        .to_string()
    });
    let name = format!("embed{}", std::process::id());
    let file = data_dir.join("node.toml");
    std::fs::write(
        &file,
        format!(
            "name = {name:?}\ndata_dir = {:?}\nlisten = \"127.0.0.1:0\"\npeer_listen = \"127.0.0.1:0\"\n\
             guest_bin = {guest:?}\nspare_networks = 1\nwarm_containers = 0\nwarm_max = 0\n",
            data_dir.join("data").display().to_string(),
        ),
    )
    .unwrap();
    Settings::load(&file).unwrap()
}

/// Starts a node, runs `work` against it, stops it through the future `serve_until` was
/// given, and says how long the stop took.
async fn run_once<F, Fut>(s: &Settings, work: F) -> Duration
where
    F: FnOnce(warren_client::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let node = warren_daemon::start(s).await.expect("the node starts");
    let client =
        warren_client::Client::new(&node.ready().url, &node.ready().api_key).expect("client");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(node.serve_until(async move {
        let _ = stop_rx.await;
    }));
    work(client).await;
    let asked = Instant::now();
    stop_tx.send(()).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(60), serving)
        .await
        .expect("the node stops within a minute")
        .expect("its task ends")
        .expect("it stops cleanly");
    let took = asked.elapsed();
    assert_eq!(
        stopped.loops_running(),
        0,
        "the sandbox manager's loops (idle sleeper, metering, freezer, ...) outlived the stop"
    );
    assert!(
        stopped.released(Duration::from_secs(30)).await,
        "something of the stopped node is still held (its stores stay open)"
    );
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_embedded_as_a_library_serves_stops_on_its_callers_signal_and_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let s = settings(dir.path());
    let id = format!("embedded-{}", std::process::id());
    let url = std::sync::Arc::new(std::sync::Mutex::new(String::new()));

    let seen = url.clone();
    let stopped_in = run_once(&s, |c| {
        let id = id.clone();
        async move {
            c.health().await.expect("healthz");
            *seen.lock().unwrap() = c.base_url().to_string();
            c.put_sandbox(&id, &Default::default())
                .await
                .expect("create");
            let r = c.sh(&id, "echo kept > /tmp/kept; echo ok").await.unwrap();
            assert_eq!(r.stdout.trim(), "ok");
        }
    })
    .await;
    println!("stopped in {stopped_in:?}");
    // Stopped: the API no longer answers.
    let gone = warren_client::Client::new(&url.lock().unwrap(), "x").unwrap();
    assert!(gone.health().await.is_err(), "the API still answers");

    // Started again in the same process: the sandbox is adopted with its files.
    run_once(&s, |c| {
        let id = id.clone();
        async move {
            let r = c.sh(&id, "cat /tmp/kept").await.unwrap();
            assert_eq!(r.stdout.trim(), "kept");
            c.delete_sandbox(&id).await.expect("delete");
        }
    })
    .await;
}

/// Whether the node's redirect of its sandboxes' traffic to its egress proxy (a nat chain
/// of its own) is on this host's firewall.
fn egress_redirect_installed(node: &str) -> bool {
    let chain = warren_node::runtime::firewall::egress_chain(node);
    std::process::Command::new("iptables")
        .args(["-w", "-t", "nat", "-S", &chain])
        .stderr(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A start that fails late (after the firewall keeper, Raft and the manager are up) stops
/// what it had started before it returns the error: no redirect to a proxy that is not
/// there is left on the host's firewall, and no keeper puts it back (it checks every
/// `CHECK_EVERY`); the same data dir, its setting corrected, starts again in this process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_that_fails_part_way_stops_what_it_started_and_the_node_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings(dir.path());
    s.name = format!("embedfail{}", std::process::id());
    let token = dir.path().join("metrics-token");
    std::fs::write(&token, "short").unwrap();
    s.metrics_token_file = Some(token.clone());
    let Err(e) = warren_daemon::start(&s).await else {
        panic!("a metrics token of 5 characters was taken");
    };
    assert!(format!("{e:#}").contains("at least 16 characters"), "{e:#}");
    assert!(
        !egress_redirect_installed(&s.name),
        "the failed start left its redirect to the egress proxy on the firewall"
    );
    tokio::time::sleep(warren_node::runtime::firewall::CHECK_EVERY + Duration::from_secs(2)).await;
    assert!(
        !egress_redirect_installed(&s.name),
        "a firewall keeper of the failed start still runs: it put the redirect back"
    );

    std::fs::write(&token, "a-metrics-token-long-enough").unwrap();
    run_once(&s, |c| async move {
        c.health().await.expect("healthz");
    })
    .await;
    assert!(
        !egress_redirect_installed(&s.name),
        "the node's redirect outlived its stop"
    );
}
