//! The README's set-up on a machine that has nothing: `deploy/host-setup.sh` run with a PATH
//! that holds only basic tools, and stubs for the package manager, rustup's installer and
//! cargo, which record what they are asked to do. (The whole path, with real installs, is
//! run by hand in a fresh Debian root: docs/setup.md.)

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What every stub appends its name and arguments to.
const LOG: &str = "calls.log";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn write_exe(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A bare machine in `root`: `bin` with the basic tools of any Debian (linked from this
/// one; `make` too if `with_make`) and the stubs, and an empty home. Packages that provide
/// a stubbed command (curl) put it into `bin` when apt-get installs them.
fn bare_machine(root: &Path, with_make: bool) -> (PathBuf, PathBuf) {
    let bin = root.join("bin");
    let home = root.join("home");
    let pkgs = root.join("pkgs");
    for d in [&bin, &home, &pkgs] {
        std::fs::create_dir_all(d).unwrap();
    }
    let mut tools = vec![
        "bash", "sh", "cat", "grep", "sed", "dirname", "id", "mkdir", "ls", "seq", "sleep", "env",
        "tail", "rm", "chmod", "tr", "cut", "head", "touch", "cp", "mktemp", "uname",
    ];
    if with_make {
        tools.push("make");
    }
    for tool in tools {
        let real = which(tool);
        std::os::unix::fs::symlink(real, bin.join(tool)).unwrap();
    }
    let log = root.join(LOG);
    let log = log.display();
    write_exe(
        &bin.join("apt-get"),
        &format!(
            "echo \"apt-get $*\" >> {log}\nfor p in \"$@\"; do [ -e {pkgs}/$p ] && cp {pkgs}/$p {bin}/; done\nexit 0",
            pkgs = pkgs.display(),
            bin = bin.display()
        ),
    );
    write_exe(&bin.join("sudo"), "exec \"$@\"");
    write_exe(&pkgs.join("npm"), &format!("echo \"npm $*\" >> {log}"));
    // The SDKs' folders as a checkout has them.
    for f in [
        "sdk/typescript/package-lock.json",
        "sdk/python/pyproject.toml",
    ] {
        let p = root.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "").unwrap();
    }
    // rustup-init, as `curl -o FILE` downloads it: run, it puts cargo and rustup into
    // ~/.cargo/bin. cargo records its calls and "installs" what it is asked to.
    let cargo = format!(
        "echo \"cargo $*\" >> {log}\n[ \"$1\" = install ] && printf '#!/bin/sh\\n' > \"$HOME/.cargo/bin/$2\" && chmod +x \"$HOME/.cargo/bin/$2\"\nexit 0"
    );
    let rustup = format!("echo \"rustup $*\" >> {log}\nexit 0");
    let installer = format!(
        "echo \"rustup-init $*\" >> {log}\nmkdir -p \"$HOME/.cargo/bin\"\ncat > \"$HOME/.cargo/bin/cargo\" <<'X'\n#!/bin/sh\n{cargo}\nX\ncat > \"$HOME/.cargo/bin/rustup\" <<'X'\n#!/bin/sh\n{rustup}\nX\nchmod +x \"$HOME/.cargo/bin/cargo\" \"$HOME/.cargo/bin/rustup\""
    );
    write_exe(
        &pkgs.join("curl"),
        &format!(
            "echo \"curl $*\" >> {log}\nout=\nwhile [ $# -gt 0 ]; do [ \"$1\" = -o ] && out=$2; shift; done\ncase \"$out\" in */rustup-init) ;; *) exit 22;; esac\ncat > \"$out\" <<'EOF'\n#!/bin/sh\n{installer}\nEOF"
        ),
    );
    // No Python venv module (Debian without python3-venv); `-m venv DIR` makes a pip stub.
    write_exe(
        &bin.join("python3"),
        &format!(
            "echo \"python3 $*\" >> {log}\n[ \"$1\" = -c ] && exit 1\n[ \"$1\" = -m ] && mkdir -p \"$3/bin\" && printf '#!/bin/sh\\necho \"pip $*\" >> {log}\\n' > \"$3/bin/pip\" && chmod +x \"$3/bin/pip\"\nexit 0"
        ),
    );
    (bin, home)
}

fn which(tool: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/sbin", "/sbin"] {
        let p = Path::new(dir).join(tool);
        if p.exists() {
            return p;
        }
    }
    panic!("{tool} is not on this machine");
}

#[test]
fn host_setup_on_a_bare_machine_installs_everything_make_test_needs() {
    let root = tempfile::tempdir().unwrap();
    let (bin, home) = bare_machine(root.path(), false);
    let out = Command::new(bin.join("bash"))
        .arg(repo().join("deploy/host-setup.sh"))
        .args(["--no-docker", "--test-deps"])
        .env_clear()
        .env("PATH", &bin)
        .env("HOME", &home)
        .env("WARREN_TOOLS_DIR", root.path().join("tools"))
        .env("WARREN_SDK_DIR", root.path().join("sdk"))
        .output()
        .unwrap();
    let calls = std::fs::read_to_string(root.path().join(LOG)).unwrap_or_default();
    assert!(
        out.status.success(),
        "host-setup failed: {}\n{calls}",
        String::from_utf8_lossy(&out.stderr)
    );
    let apt: Vec<&str> = calls
        .lines()
        .filter_map(|l| l.strip_prefix("apt-get "))
        .filter(|l| l.contains("install"))
        .flat_map(|l| l.split_whitespace())
        .collect();
    for pkg in [
        "make",
        "build-essential",
        "musl-tools",
        "pkg-config",
        "iptables",
        "git",
        "curl",
        "nodejs",
        "npm",
        "chromium",
        "python3-venv",
        "docker-compose",
    ] {
        assert!(apt.contains(&pkg), "{pkg} is not installed: {calls}");
    }
    let line = |prefix: &str| {
        calls
            .lines()
            .find(|l| l.starts_with(prefix))
            .map(str::to_string)
    };
    let init = line("rustup-init").unwrap_or_else(|| panic!("no rustup: {calls}"));
    assert!(
        init.contains("rustfmt") && init.contains("clippy"),
        "{init}"
    );
    assert!(
        line("rustup target add x86_64-unknown-linux-musl").is_some(),
        "{calls}"
    );
    assert!(line("cargo install cargo-nextest").is_some(), "{calls}");
    let pip: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("pip install"))
        .collect();
    assert!(pip.iter().any(|l| l.contains("moto")), "{calls}");
    assert!(
        pip.iter().any(|l| l.contains("kubernetes-validate")),
        "{calls}"
    );
    assert!(
        pip.iter().any(|l| l.contains("sdk/python[test]")),
        "no Python SDK virtualenv: {calls}"
    );
    assert!(
        line("npm ci").is_some(),
        "no TypeScript SDK packages: {calls}"
    );
}

/// Each line of a Makefile recipe is a new shell: a toolchain host-setup installed in an
/// earlier line is found by the next one although the caller's PATH never had it.
#[test]
fn the_makefile_finds_a_toolchain_installed_during_the_same_make_run() {
    let root = tempfile::tempdir().unwrap();
    let (bin, home) = bare_machine(root.path(), true);
    let out = Command::new(bin.join("make"))
        .arg("-s")
        .arg("-C")
        .arg(repo())
        .arg("--eval")
        .arg("where-cargo:\n\t@mkdir -p $(HOME)/.cargo/bin && printf '#!/bin/sh\\n' > $(HOME)/.cargo/bin/cargo && chmod +x $(HOME)/.cargo/bin/cargo\n\t@command -v cargo")
        .arg("where-cargo")
        .env_clear()
        .env("PATH", &bin)
        .env("HOME", &home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        home.join(".cargo/bin/cargo").display().to_string()
    );
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `docker ps -a` / `docker network ls` ids with a label.
fn with_label(what: &str, label: &str) -> Vec<String> {
    let args: Vec<&str> = match what {
        "container" => vec!["ps", "-aq", "--filter", label],
        _ => vec!["network", "ls", "-q", "--filter", label],
    };
    docker(&args).lines().map(str::to_string).collect()
}

/// What a CI run removes on its way out is what its own nodes made: another node's
/// sandboxes on the same Docker host (another run, or one started without a run id) stay.
#[tokio::test]
async fn a_runs_clean_up_removes_its_nodes_containers_and_no_one_elses() {
    use super::harness::{unique, Node};
    let mine = format!("mine-{}", unique());
    let mut node = Node::start_in_run(&mine).await;
    let id = format!("run-{}", unique());
    node.client.sh(&id, "true").await.unwrap();
    let ours = format!("label=warren.run={mine}");
    assert!(
        !with_label("container", &ours).is_empty(),
        "the node's sandbox has no run label"
    );
    // Its sandboxes run on links of the node's, not on Docker networks (the clean-up still
    // removes a run's networks: those of containers made before links).
    // Bystanders, labelled as another node's: of another run, and of none.
    let other = format!("other-{}", unique());
    let mut bystanders = Vec::new();
    for run in [Some(other.as_str()), None] {
        let mut labels = vec![
            "--label".to_string(),
            "warren.managed=true".to_string(),
            "--label".to_string(),
            "warren.node=bystander".to_string(),
        ];
        if let Some(r) = run {
            labels.extend(["--label".to_string(), format!("warren.run={r}")]);
        }
        let name = format!("wrn-bystander-{}", unique());
        let mut args = vec!["create", "--name", &name];
        args.extend(labels.iter().map(String::as_str));
        args.extend(["warren/sandbox:1", "true"]);
        docker(&args);
        let mut args = vec!["network", "create"];
        args.extend(labels.iter().map(String::as_str));
        args.push(&name);
        docker(&args);
        bystanders.push(name);
    }
    // The clean-up runs once the run's nodes are gone (a running node refills its warm
    // pool, with containers made after the clean-up looked).
    node.kill();
    let out = Command::new(repo().join("deploy/remove-run.sh"))
        .arg(&mine)
        .output()
        .unwrap();
    let left_c = with_label("container", "label=warren.node=bystander");
    let left_n = with_label("network", "label=warren.node=bystander");
    for name in &bystanders {
        let _ = Command::new("docker").args(["rm", "-f", name]).output();
        let _ = Command::new("docker")
            .args(["network", "rm", name])
            .output();
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        with_label("container", &ours).is_empty(),
        "the run's sandbox is left"
    );
    assert!(
        with_label("network", &ours).is_empty(),
        "the run's network is left"
    );
    assert_eq!(left_c.len(), 2, "another node's containers were removed");
    assert_eq!(left_n.len(), 2, "another node's networks were removed");
}
