//! The TypeScript and Python SDKs' own suites (`sdk/typescript`: `npm test`; `sdk/python`:
//! pytest), run against a live node started here. Their dependencies are installed by
//! `make test`'s set-up (`deploy/host-setup.sh --test-deps`: `npm ci`, a virtualenv in
//! `sdk/python/.venv`).

use super::harness::Node;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;

/// Longer than either suite takes on a 2-core machine; a hang fails instead of stalling.
const SUITE_LIMIT: Duration = Duration::from_secs(600);

fn sdk(lang: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sdk")
        .join(lang)
}

/// Runs `cmd` to its end (within `SUITE_LIMIT`) and fails the test with its output unless
/// it succeeded.
async fn run(what: &str, cmd: &mut Command) {
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(SUITE_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {SUITE_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    eprintln!("{what}:\n{}", tail(&stdout, 30));
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[tokio::test]
async fn the_typescript_sdk_passes_its_suite_against_a_live_node() {
    let dir = sdk("typescript");
    run(
        "npm run build",
        Command::new("npm")
            .args(["run", "-s", "build"])
            .current_dir(&dir),
    )
    .await;
    let node = Node::start().await;
    run(
        "npm test",
        Command::new("npm")
            .arg("test")
            .current_dir(&dir)
            .env("WARREN_URL", &node.url)
            .env("WARREN_API_KEY", &node.key),
    )
    .await;
}

#[tokio::test]
async fn the_python_sdk_passes_its_suite_against_a_live_node() {
    let dir = sdk("python");
    let node = Node::start().await;
    run(
        "pytest",
        Command::new(dir.join(".venv/bin/python"))
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .current_dir(&dir)
            .env("PYTHONPATH", dir.join("src"))
            .env("WARREN_URL", &node.url)
            .env("WARREN_API_KEY", &node.key),
    )
    .await;
}
