//! Where a container start spends its time (`startpath`): on this machine, in one run,
//! - `docker create` and `docker start` of a container made like a sandbox's (capabilities
//!   cut, no new privileges, limits, a run tmpfs) under each OCI runtime the engine has
//!   (`runc`, and `crun` when registered), on a bridge network of its own and on none;
//! - the OCI runtime alone on an unpacked root filesystem (`<runtime> run`, no engine, no
//!   network, no user namespace): the floor a start path that bypassed the engine would
//!   stand on;
//! - warren's own get-or-create + first exec on a node without warm containers, under
//!   `--oci-runtime runc` and `--oci-runtime crun`.
//!
//! Every row's baseline is `docker run --rm IMAGE true` back to back, measured in the
//! same run.

use crate::command::{docker, run};
use crate::node::BenchNode;
use crate::report::Table;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The OCI runtimes the engine has, by name.
fn engine_runtimes() -> anyhow::Result<Vec<String>> {
    let (out, _) = run("docker", &["info", "--format", "{{json .Runtimes}}"])?;
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&out)?;
    Ok(map.keys().cloned().collect())
}

/// `docker create` flags of a container made like a sandbox's (see the node's
/// `container_body`).
fn sandbox_like<'a>(name: &'a str, runtime: &'a str, network: &'a str) -> Vec<&'a str> {
    vec![
        "create",
        "--name",
        name,
        "--runtime",
        runtime,
        "--network",
        network,
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CHOWN",
        "--cap-add",
        "SETUID",
        "--cap-add",
        "SETGID",
        "--security-opt",
        "no-new-privileges",
        "--memory",
        "512m",
        "--pids-limit",
        "512",
        "--tmpfs",
        "/run/warren:rw,nosuid,nodev,noexec,size=16m",
        "--sysctl",
        "net.ipv6.conf.all.disable_ipv6=1",
    ]
}

pub async fn start_path(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let image = crate::node::default_image();
    let deadline = Instant::now() + Duration::from_secs(600);
    // Caches warm for every path first.
    docker(&["run", "--rm", &image, "true"])?;
    let mut baseline = Vec::with_capacity(n);
    for _ in 0..n {
        baseline.push(docker(&["run", "--rm", &image, "true"])?);
    }
    let base_name = format!("docker run --rm IMAGE true (n={})", baseline.len());
    let add = |table: &mut Table, name: String, samples: &[Duration]| {
        table.add_sampled(&name, samples, &base_name, &baseline, "where the time goes")
    };

    let listed = engine_runtimes()?;
    let mut runtimes = vec!["runc"];
    if !listed.iter().any(|l| l == "crun") {
        table.note("startpath: the engine has no crun runtime (deploy/host-setup.sh registers it); crun rows skipped".into());
    } else if let Err(e) = docker(&["run", "--rm", "--runtime", "crun", &image, "true"]) {
        // On a cgroup v1 host crun refuses containers while controllers are left on the
        // v2 hierarchy (docs/benchmarks.md).
        table.note(format!(
            "startpath: crun cannot start a container here, crun rows skipped: {e}"
        ));
    } else {
        runtimes.push("crun");
    }
    let net = format!("wb-startpath-{}", hex::encode(rand::random::<[u8; 3]>()));
    docker(&["network", "create", &net])?;
    let engine = async {
        for rt in &runtimes {
            for network in [net.as_str(), "none"] {
                let (mut created, mut started) = (vec![], vec![]);
                for i in 0..n {
                    if Instant::now() > deadline {
                        break;
                    }
                    let name = format!("{net}-{rt}-{i}");
                    let mut args = sandbox_like(&name, rt, network);
                    args.extend([image.as_str(), "sleep", "60"]);
                    created.push(docker(&args)?);
                    let s = docker(&["start", &name]);
                    docker(&["rm", "-f", &name])?;
                    started.push(s?);
                }
                let on = if network == "none" {
                    "no network"
                } else {
                    "a bridge network"
                };
                add(table, format!("docker create, {rt}, {on}"), &created);
                add(table, format!("docker start, {rt}, {on}"), &started);
            }
        }
        anyhow::Ok(())
    }
    .await;
    let _ = docker(&["network", "rm", &net]);
    engine?;

    // The runtime alone, on the image's files unpacked once.
    let bundle = tempfile::tempdir()?;
    unpack_image(&image, bundle.path())?;
    // crun only where the engine could start a container with it (same reason).
    for rt in &runtimes {
        if which(rt).is_none() {
            continue;
        }
        let mut samples = vec![];
        for i in 0..n {
            if Instant::now() > deadline {
                break;
            }
            let id = format!("wb-{}-{i}", hex::encode(rand::random::<[u8; 3]>()));
            let dir = bundle.path().to_str().unwrap_or_default();
            samples.push(run(rt, &["run", "--bundle", dir, &id])?.1);
        }
        add(
            table,
            format!("{rt} run alone (no engine, no network, no user namespace)"),
            &samples,
        );
    }

    // warren without warm containers, back to back, under each runtime.
    for rt in &runtimes {
        let node = BenchNode::start_with(0, &["--oci-runtime", rt]).await?;
        let c = &node.client;
        c.sh("bench-prime", "true").await?;
        c.delete_sandbox("bench-prime").await?;
        let mut samples = vec![];
        for i in 0..n {
            if Instant::now() > deadline {
                break;
            }
            // The last sandbox's container goes in the background meanwhile, as between
            // sessions in steady state.
            tokio::time::sleep(Duration::from_millis(600)).await;
            let id = format!("bench-start-{i}");
            let t = Instant::now();
            let r = c.sh(&id, "true").await?;
            samples.push(t.elapsed());
            anyhow::ensure!(r.exit_code == 0, "first exec failed");
            c.delete_sandbox(&id).await?;
        }
        add(
            table,
            format!("warren get-or-create + first exec, no warm containers, {rt}"),
            &samples,
        );
    }
    Ok(())
}

/// The image's files under `bundle/rootfs`, and an OCI config that runs `true` there.
fn unpack_image(image: &str, bundle: &Path) -> anyhow::Result<()> {
    let name = format!("wb-export-{}", hex::encode(rand::random::<[u8; 3]>()));
    docker(&["create", "--name", &name, image, "true"])?;
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(&rootfs)?;
    let unpacked = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "docker export {name} | tar -x -C {}",
            rootfs.display()
        ))
        .status();
    docker(&["rm", "-f", &name])?;
    anyhow::ensure!(unpacked?.success(), "cannot unpack {image}");
    let spec = Command::new("runc")
        .args(["spec", "--bundle"])
        .arg(bundle)
        .status()?;
    anyhow::ensure!(spec.success(), "runc spec failed");
    let path = bundle.join("config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(["true"]);
    std::fs::write(&path, serde_json::to_vec(&config)?)?;
    Ok(())
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}
