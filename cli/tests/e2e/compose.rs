//! deploy/compose: `docker-compose up` of the compose file, on the files
//! deploy/compose/prepare.sh writes and the image deploy/node-image/build.sh makes from this
//! build, brings up a 3-region cluster whose nodes run in containers and start sandboxes on
//! the host's Docker; an exec is served through every node. `down` stops the nodes; what they
//! made carries this test's own run label and is removed by it.

use super::harness::unique;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use warren_client::Client;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed: {said}");
    said
}

/// The project and what its nodes made: taken down when the test ends, also on a panic.
struct Compose {
    dir: tempfile::TempDir,
    project: String,
    run_id: String,
    image: String,
}

impl Compose {
    fn command(&self) -> Command {
        let mut c = Command::new("docker-compose");
        // A test killed before it takes the project down leaves nodes that do not come back
        // with the next dockerd; remove-run.sh finds them by their label.
        c.env("WARREN_RESTART", "no");
        c.arg("--project-name")
            .arg(&self.project)
            .arg("--env-file")
            .arg(self.dir.path().join(".env"))
            .arg("-f")
            .arg(repo().join("deploy/compose/compose.yaml"));
        c
    }

    fn logs(&self) -> String {
        let out = self
            .command()
            .args(["logs", "--no-color", "--tail", "60"])
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- the nodes' logs ---\n{}", self.logs());
        }
        let _ = self.command().args(["down", "-t", "30"]).output();
        let _ = Command::new(repo().join("deploy/remove-run.sh"))
            .arg(&self.run_id)
            .output();
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.image])
            .output();
    }
}

fn guest_bin() -> String {
    std::env::var("WARREN_GUEST_BIN").expect("WARREN_GUEST_BIN names the static guest agent")
}

#[tokio::test]
async fn docker_compose_brings_up_a_three_region_cluster_that_serves_through_every_node() {
    let tag = format!("warren/node:e2e-{}", std::process::id());
    let built = tokio::task::spawn_blocking({
        let tag = tag.clone();
        move || {
            run(Command::new(repo().join("deploy/node-image/build.sh"))
                .arg(env!("CARGO_BIN_EXE_warren"))
                .arg(guest_bin())
                .arg(&tag))
        }
    })
    .await
    .unwrap();
    assert!(built.contains(&tag), "{built}");

    let id = unique();
    let compose = Compose {
        dir: tempfile::tempdir().unwrap(),
        project: format!("warrene2e{}", id.replace('-', "")),
        run_id: format!("compose-{id}"),
        image: tag.clone(),
    };
    // An address of its own on loopback: the nodes' fixed ports meet no other test's.
    let n = std::process::id();
    let addr = format!("127.77.{}.{}", (n >> 8) % 250 + 1, n % 250 + 1);
    run(Command::new(repo().join("deploy/compose/prepare.sh"))
        .arg(compose.dir.path())
        .arg(&addr)
        .env("WARREN_NODE_IMAGE", &tag)
        .env("WARREN_RUN_ID", &compose.run_id));
    let key = std::fs::read_to_string(compose.dir.path().join("api-key"))
        .unwrap()
        .trim()
        .to_string();
    let up = tokio::task::spawn_blocking({
        let mut cmd = compose.command();
        move || cmd.args(["up", "-d"]).output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        up.status.success(),
        "docker-compose up: {}\n{}",
        String::from_utf8_lossy(&up.stderr),
        compose.logs()
    );

    let urls: Vec<String> = (1..=3)
        .map(|i| format!("http://{addr}:{}", 7070 + i))
        .collect();
    let clients: Vec<Client> = urls.iter().map(|u| Client::new(u, &key).unwrap()).collect();
    // Three members in three regions, as every node sees them.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut settled = true;
        for c in &clients {
            let view = c.cluster().await.unwrap_or_default();
            let nodes = view["nodes"].as_array().cloned().unwrap_or_default();
            let mut regions: Vec<String> = nodes
                .iter()
                .filter(|x| x["state"] == "up")
                .filter_map(|x| x["region"].as_str().map(str::to_string))
                .collect();
            regions.sort();
            settled &= regions == ["region-1", "region-2", "region-3"];
        }
        if settled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the compose cluster did not come up: {}",
            compose.logs()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // Each node keeps warm containers ready: they mount the guest binary the node installed
    // in its data dir, a path the host's Docker sees (not the one inside the node's image).
    let http = reqwest::Client::new();
    for (i, url) in urls.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let metrics = http
                .get(format!("{url}/metrics"))
                .bearer_auth(&key)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            if super::harness::metric_in(&metrics, "warren_warm_containers") >= 1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "n{} keeps no warm container: {}",
                i + 1,
                compose.logs()
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    // A sandbox made through each node, and every sandbox's exec through every node.
    let ids: Vec<String> = (1..=3).map(|i| format!("cmp{i}-{id}")).collect();
    for (c, sid) in clients.iter().zip(&ids) {
        let out = c.sh(sid, "echo made").await.unwrap();
        assert_eq!(out.stdout, "made\n");
    }
    for (i, c) in clients.iter().enumerate() {
        for sid in &ids {
            let out = c.sh(sid, "hostname").await.unwrap();
            assert_eq!(out.stdout.trim(), sid.as_str(), "through n{}", i + 1);
        }
    }
    for sid in &ids {
        clients[0].delete_sandbox(sid).await.unwrap();
    }
}
