//! First-run setup of a dev machine: a Docker daemon and the sandbox base image.

use anyhow::{bail, Context};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BUILD_SCRIPT: &str = include_str!("../../deploy/image/build-local.sh");
const PACKAGES: &str = include_str!("../../deploy/image/packages.txt");
const IMAGE_VERSION: &str = include_str!("../../deploy/image/VERSION");

fn is_root() -> bool {
    std::env::var("USER").map(|u| u == "root").unwrap_or(false)
        || std::fs::read_to_string("/proc/self/status")
            .map(|s| {
                s.lines()
                    .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
            })
            .unwrap_or(false)
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Makes sure a Docker daemon answers: installs docker.io and starts dockerd when running as
/// root on Debian, otherwise explains what to do.
pub async fn ensure_docker(host: Option<&str>, data_dir: &Path) -> anyhow::Result<()> {
    if warren_node::runtime::docker::daemon_answers(host).await {
        return Ok(());
    }
    if host.is_some() {
        bail!("no Docker daemon answers at {}", host.unwrap_or_default());
    }
    if !is_root() {
        bail!("no Docker daemon answers on the local socket; start Docker (or run `warren dev` as root to let it do so)");
    }
    if !have("dockerd") {
        eprintln!("warren: installing docker.io (apt-get) …");
        let ok = Command::new("sh")
            .args(["-c", "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io"])
            .status()
            .context("cannot run apt-get")?
            .success();
        if !ok {
            bail!("apt-get install docker.io failed");
        }
    }
    std::fs::create_dir_all(data_dir)?;
    let log = std::fs::File::create(data_dir.join("dockerd.log"))?;
    eprintln!(
        "warren: starting dockerd (log: {}) …",
        data_dir.join("dockerd.log").display()
    );
    let mut cmd = Command::new("dockerd");
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    cmd.spawn().context("cannot start dockerd")?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if warren_node::runtime::docker::daemon_answers(None).await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!(
        "dockerd did not come up within 60 s; see {}",
        data_dir.join("dockerd.log").display()
    )
}

/// Makes sure the default sandbox image exists, building it locally (debootstrap) if needed.
pub async fn ensure_image(host: Option<&str>, image: &str) -> anyhow::Result<()> {
    if warren_node::runtime::docker::image_present(host, image).await? {
        return Ok(());
    }
    if image != warren_node::config::DEFAULT_IMAGE {
        bail!("image {image} is not present; pull or build it first");
    }
    eprintln!(
        "warren: building the sandbox base image {image} (debootstrap; a few minutes, once) …"
    );
    let dir = std::env::temp_dir().join(format!("warren-image-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("build-local.sh"), BUILD_SCRIPT)?;
    std::fs::write(dir.join("packages.txt"), PACKAGES)?;
    std::fs::write(dir.join("VERSION"), IMAGE_VERSION)?;
    let status = Command::new("bash")
        .arg(dir.join("build-local.sh"))
        .arg(image)
        .status();
    let _ = std::fs::remove_dir_all(&dir);
    if !status
        .context("cannot run the image build script")?
        .success()
    {
        bail!("building {image} failed");
    }
    Ok(())
}
