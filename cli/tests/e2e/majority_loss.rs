//! A cluster that lost its majority for good is rebuilt from one survivor
//! (`warren cluster recover`, docs/operations.md "Losing a majority").

use super::cluster_harness::{exec_via, ids_on, try_exec_via, TestCluster};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `warren cluster recover --data-dir DIR [--yes]`.
fn recover(data_dir: &std::path::Path, yes: bool) -> Output {
    recover_node("--data-dir", data_dir, yes)
}

/// `warren cluster recover FLAG PATH [--yes]` (`--data-dir` or `--config`).
fn recover_node(flag: &str, path: &std::path::Path, yes: bool) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
    cmd.args(["cluster", "recover", flag]).arg(path);
    if yes {
        cmd.arg("--yes");
    }
    cmd.output().expect("run warren cluster recover")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `command` in `sandbox` through node `i`: its status, answering node and body; a request
/// that could not be sent (a pooled connection to the node's previous process) is sent again.
async fn answer(
    c: &TestCluster,
    i: usize,
    sandbox: &str,
    command: &str,
) -> (u16, String, serde_json::Value) {
    let mut tries = 0;
    loop {
        match try_exec_via(c, i, sandbox, command).await {
            Ok(a) => return a,
            Err(e) if tries < 10 => {
                eprintln!("through {}: {e}", c.nodes[i].name);
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => panic!("no answer through {}: {e}", c.nodes[i].name),
        }
    }
}

/// `GET /healthz` of node `i` (null when it does not answer).
async fn health(c: &TestCluster, i: usize) -> serde_json::Value {
    match c.nodes[i]
        .client
        .request(reqwest::Method::GET, "/healthz")
        .timeout(Duration::from_secs(3))
        .send()
        .await
    {
        Ok(r) => r.json().await.unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    }
}

/// Every one of `sandboxes` answers through node `via`, from it, with its file.
async fn assert_all_served_by(c: &TestCluster, via: usize, sandboxes: &[String]) {
    assert_all_served_through(c, via, via, sandboxes).await;
}

/// Every sandbox of `sandboxes` answers a request entering node `entry` from node `owner`,
/// with its mark.
async fn assert_all_served_through(
    c: &TestCluster,
    entry: usize,
    owner: usize,
    sandboxes: &[String],
) {
    let me = c.nodes[owner].name.as_str();
    for id in sandboxes {
        let (status, node, body) = answer(c, entry, id, "cat /workspace/mark").await;
        assert_eq!((status, node.as_str()), (200, me), "{id}: {body}");
        assert_eq!(body["stdout"], format!("kept-{id}\n"), "{id}");
    }
}

/// None of the nodes `lost` serves its own old sandbox (`sandboxes[i]`) itself.
async fn assert_none_serves_its_own(
    c: &TestCluster,
    lost: &[usize],
    sandboxes: &[String],
    when: &str,
) {
    for &i in lost {
        let theirs = &sandboxes[i];
        let (status, node, body) = answer(c, i, theirs, "cat /workspace/mark").await;
        assert_ne!(
            (status, node.as_str()),
            (200, c.nodes[i].name.as_str()),
            "{} served {theirs} {when}: {body}",
            c.nodes[i].name
        );
    }
}

/// How many lease requests node `i` made with `outcome` (`warren_lease_request_seconds`).
async fn lease_requests(c: &TestCluster, i: usize, outcome: &str) -> u64 {
    super::harness::metric_in(
        &c.metrics_text(i).await,
        &format!("warren_lease_request_seconds_count{{outcome=\"{outcome}\"}}"),
    )
}

/// Waits until node `i` says it leads.
async fn wait_leads(c: &TestCluster, i: usize) {
    let name = c.nodes[i].name.clone();
    let leads = |v: &serde_json::Value| v["leader"] == name.as_str();
    assert!(
        c.wait(Duration::from_secs(60), leads).await,
        "{name} does not lead"
    );
}

/// The ids of `sandbox`'s snapshots, listed through node `via`.
async fn snapshot_ids(c: &TestCluster, via: usize, sandbox: &str) -> Vec<String> {
    let list = c.nodes[via]
        .client
        .list_snapshots(Some(sandbox))
        .await
        .unwrap();
    list.snapshots.into_iter().map(|s| s.id).collect()
}

/// Waits until `sandbox` has a recovery point that holds what was written into it before
/// this was called: one listed only after a later write (a snapshot is taken only of a
/// sandbox active since its last one; one under way now is listed within the pause).
async fn wait_recovery_point(c: &TestCluster, via: usize, sandbox: &str) {
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before = snapshot_ids(c, via, sandbox).await;
    exec_via(c, via, sandbox, "sync").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while snapshot_ids(c, via, sandbox)
        .await
        .iter()
        .all(|id| before.contains(id))
    {
        assert!(
            Instant::now() < deadline,
            "no checkpoint of {sandbox} after {before:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Listed once written; recorded in the placement a commit later.
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

/// Two of three nodes die for good (the leader among them). The survivor alone commits
/// nothing, also after a restart. Recovered offline, it leads a cluster of one: it creates
/// sandboxes, keeps its own, brings the lost nodes' back from their recovery points with
/// their files, and takes in a new node. The lost nodes that come back with their old state
/// (a majority of the old voters) take nothing back.
#[tokio::test]
async fn a_survivor_of_a_lost_majority_becomes_the_cluster_with_every_sandbox() {
    let mut c = TestCluster::start_with(
        3,
        1,
        "checkpoint_every_s = 1\ndown_after_ms = 5000\nlease_ms = 2000\n",
    )
    .await;
    c.wait_voters_everywhere(3).await;
    let leader = c.leader().await;
    let survivor = (leader + 1) % 3;
    let lost: Vec<usize> = (0..3).filter(|i| *i != survivor).collect();
    // One sandbox per node, each with a file of its own.
    let mut sandboxes = Vec::new();
    for i in 0..3 {
        let name = c.nodes[i].name.clone();
        let id = ids_on(&c, survivor, &name, 1).await.remove(0);
        let (status, node, body) = exec_via(
            &c,
            survivor,
            &id,
            &format!("echo kept-{id} > /workspace/mark"),
        )
        .await;
        assert_eq!((status, node.as_str()), (200, name.as_str()), "{body}");
        sandboxes.push(id);
    }
    for id in &sandboxes {
        wait_recovery_point(&c, survivor, id).await;
    }

    // A follower renews its lease from the leader (and its metrics say so)...
    assert!(lease_requests(&c, survivor, "granted").await > 0);
    let failed_before = lease_requests(&c, survivor, "failed").await;
    for &i in &lost {
        c.kill(i);
    }
    // The survivor alone cannot place a new sandbox...
    let (status, _, body) = answer(&c, survivor, "after-the-loss", "true").await;
    assert_eq!(
        status, 503,
        "a placement committed without a majority: {body}"
    );
    // ...its lease requests fail (the lease runs out: its sandboxes freeze)...
    assert!(lease_requests(&c, survivor, "failed").await > failed_before);
    // ...nor after a restart: its Raft state still names the lost voters.
    c.terminate(survivor);
    c.restart(survivor);
    let (status, _, body) = answer(&c, survivor, "after-the-loss", "true").await;
    assert_eq!(
        status, 503,
        "a placement committed without a majority: {body}"
    );

    // The tool refuses to touch the state of a node that runs.
    let data_dir = c.data_dir(survivor);
    let running = recover(&data_dir, true);
    assert!(!running.status.success(), "{}", text(&running));
    assert!(
        text(&running).contains("stop the node first"),
        "{}",
        text(&running)
    );
    c.terminate(survivor);
    // Without --yes it only says what it would do, and changes nothing.
    let dry = recover(&data_dir, false);
    assert_eq!(dry.status.code(), Some(1), "{}", text(&dry));
    assert!(
        text(&dry).contains("would become the only voter"),
        "{}",
        text(&dry)
    );
    let again = recover(&data_dir, false);
    assert_eq!(text(&again).lines().next(), text(&dry).lines().next());
    // The cluster's CA key is on the first node only: an operator restores its backup on
    // the survivor (the tool says so), or no new node can join.
    let ca = data_dir.join("cluster/ca.pem");
    if survivor != 0 {
        assert!(text(&dry).contains("holds no cluster CA"), "{}", text(&dry));
        std::fs::copy(c.data_dir(0).join("cluster/ca.pem"), &ca).unwrap();
    }
    // As an operator would: the node's config file names its data dir.
    let done = recover_node("--config", &c.nodes[survivor].config, true);
    assert!(
        !text(&done).contains("holds no cluster CA"),
        "{}",
        text(&done)
    );
    assert!(done.status.success(), "{}", text(&done));
    for &i in &lost {
        assert!(
            text(&done).contains(&c.nodes[i].name),
            "{} not marked down: {}",
            c.nodes[i].name,
            text(&done)
        );
    }
    // Recovered once, it needs no second recovery.
    let twice = recover(&data_dir, true);
    assert!(!twice.status.success());
    assert!(
        text(&twice).contains("already its cluster's only voter"),
        "{}",
        text(&twice)
    );

    c.restart(survivor);
    wait_leads(&c, survivor).await;
    let me = c.nodes[survivor].name.clone();
    let (status, node, body) = answer(&c, survivor, "after-the-recovery", "true").await;
    assert_eq!((status, node.as_str()), (200, me.as_str()), "{body}");
    // Every sandbox serves from the survivor, with its file: its own kept, the lost nodes'
    // failed over from their recovery points.
    assert_all_served_by(&c, survivor, &sandboxes).await;

    // The lost nodes come back with their old state, together a majority of the old
    // voters. Each hears of the recovered generation at its first call to the survivor and
    // takes part in nothing after: they do not run their old cluster between them, serve
    // none of their old sandboxes, and cannot depose the survivor; it keeps serving.
    for &i in &lost {
        c.restart(i);
    }
    // Long enough for an election among them (their old lease and election timeouts).
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_none_serves_its_own(&c, &lost, &sandboxes, "after the recovery").await;
    wait_leads(&c, survivor).await;
    assert_all_served_by(&c, survivor, &sandboxes).await;
    // Each says why: on /healthz, and with no leader in its view.
    for &i in &lost {
        let health = health(&c, i).await;
        assert!(
            health["status"] != "ok"
                && health
                    .to_string()
                    .contains("this node's cluster was recovered without it"),
            "{} does not say it was left behind: {health}",
            c.nodes[i].name
        );
        let view = c.view(i).await.unwrap_or_default();
        assert!(view["leader"].is_null(), "{view}");
    }
    // Restarted where they reach each other and not the survivor, they remember that they
    // were left behind: they do not run their old cluster between them.
    c.partition(&lost, &[survivor]);
    for &i in &lost {
        c.terminate(i);
        c.restart(i);
    }
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_none_serves_its_own(&c, &lost, &sandboxes, "cut off from the survivor").await;
    for &i in &lost {
        let health = health(&c, i).await;
        assert!(
            health.to_string().contains("recovered without it"),
            "{} forgot it was left behind: {health}",
            c.nodes[i].name
        );
    }
    c.heal();
    let view = c.view(survivor).await.unwrap();
    assert_eq!(view["generation"], 1, "{view}");
    for &i in &lost {
        c.kill(i);
    }

    // The lost nodes are removed as any down node is; a new node joins and serves.
    for &i in &lost {
        let name = c.nodes[i].name.clone();
        let r = c.nodes[survivor]
            .client
            .request(
                reqwest::Method::DELETE,
                &format!("/v1/cluster/nodes/{name}?force=true"),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "{}", r.text().await.unwrap());
    }
    let new = c.join_through("r1", survivor).await;
    let (status, _, body) = exec_via(&c, new, "through-the-new-node", "true").await;
    assert_eq!(status, 200, "{body}");
}

/// Every node of a cluster is lost (processes, data dirs and containers); only a backup
/// taken while it ran (`warren cluster backup`, through a follower) and the object store are
/// left. Restored into the empty data dir of one node, on other addresses (a new machine),
/// that node is the cluster again: its keys work, every sandbox serves with its file, also
/// through a node that joins it afterwards. A tenant key gets no backup, and a restore
/// never overwrites a node's state.
#[tokio::test]
async fn a_cluster_whose_every_node_is_lost_comes_back_from_a_backup() {
    let mut c = TestCluster::start_with(
        3,
        1,
        "checkpoint_every_s = 1\ndown_after_ms = 5000\nlease_ms = 2000\n",
    )
    .await;
    c.wait_voters_everywhere(3).await;
    let via = (c.leader().await + 1) % 3;
    let mut sandboxes = Vec::new();
    for i in 0..3 {
        let name = c.nodes[i].name.clone();
        let id = ids_on(&c, via, &name, 1).await.remove(0);
        let (status, _, body) =
            exec_via(&c, via, &id, &format!("echo kept-{id} > /workspace/mark")).await;
        assert_eq!(status, 200, "{body}");
        sandboxes.push(id);
    }
    for id in &sandboxes {
        wait_recovery_point(&c, via, id).await;
    }
    let tenant = c.nodes[via]
        .client
        .create_key("acme", warren_api::keys::KeyScope::Tenant, Some("ci"))
        .await
        .unwrap();

    // Only an admin key gets a backup.
    let tenant_client = warren_client::Client::new(&c.nodes[via].url, &tenant.key).unwrap();
    let refused = tenant_client
        .request(reqwest::Method::GET, "/v1/cluster/backup")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("backup.tar");
    let out = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["cluster", "backup", "-o"])
        .arg(&tar)
        .env("WARREN_URL", &c.nodes[via].url)
        .env("WARREN_API_KEY", c.admin_key())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    // It holds the cluster's secrets key: for its owner's eyes only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&tar).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "backup mode {mode:o}");

    // The CA's key is on the first node only; the operator keeps its own backup of it.
    let ca_backup = dir.path().join("ca.pem");
    std::fs::copy(c.data_dir(0).join("cluster/ca.pem"), &ca_backup).unwrap();

    // Everything is lost.
    for i in 0..3 {
        c.kill(i);
        warren_node::runtime::docker::remove_node_resources_blocking(&c.nodes[i].name);
        std::fs::remove_dir_all(c.data_dir(i)).unwrap();
    }
    let config = c.nodes[via].config.clone();
    let restore = |from: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_warren"))
            .args(["cluster", "restore", "--from"])
            .arg(from)
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    // Something that is not a backup is refused, and leaves the data dir as it was.
    let junk = dir.path().join("junk.tar");
    std::fs::write(&junk, b"not a tar at all").unwrap();
    let refused = restore(&junk);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(!c.data_dir(via).join("cluster/raft").exists());
    let done = restore(&tar);
    assert!(done.status.success(), "{}", text(&done));
    // A second restore would overwrite a node's state: refused.
    let again = restore(&tar);
    assert!(!again.status.success());
    assert!(
        text(&again).contains("already holds a node's cluster state"),
        "{}",
        text(&again)
    );

    let ca = c.data_dir(via).join("cluster/ca.pem");
    if !ca.exists() {
        std::fs::copy(&ca_backup, &ca).unwrap();
    }
    // On a new machine: other addresses than the backup's node registered.
    c.restart_elsewhere(via);
    wait_leads(&c, via).await;
    let view = c.view(via).await.unwrap();
    assert_eq!(view["generation"], 1, "{view}");
    // The keys came back with the state: the tenant's key works, and sees only its own.
    let tenant_client = warren_client::Client::new(&c.nodes[via].url, &tenant.key).unwrap();
    let (status, body) = {
        let r = tenant_client
            .request(reqwest::Method::GET, "/v1/sandboxes")
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(status, 200, "{body}");
    for id in &sandboxes {
        assert!(!body.contains(id.as_str()), "{body}");
    }
    assert_all_served_by(&c, via, &sandboxes).await;
    // A new node joins the restored cluster and reaches it at its new addresses: Raft
    // catches it up, and requests entering it are forwarded there.
    let joined = c.join_through("r1", via).await;
    assert_all_served_through(&c, joined, via, &sandboxes).await;
}
