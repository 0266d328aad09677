//! The web page in a real headless Chromium (playwright-core): sign in, list with each
//! sandbox's usage, a terminal that shows typed output and replays it after a reload
//! (web/e2e/terminal.mjs); the operator's console: filters, start, processes and logs, files
//! (a hostile name stays text), ports, snapshots, sleep, wake, fork, delete, the cluster
//! (web/e2e/console.mjs).

use super::harness::{unique, Node};
use std::process::Command;

/// Runs `web/e2e/{script}` (a Chromium test through playwright-core) with `env`; asserts it
/// succeeded and printed `passed`.
pub async fn browser_script(script: &str, env: Vec<(&'static str, String)>, passed: &str) {
    let path = format!("{}/../web/e2e/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(path)
            .envs(env)
            .output()
            .expect("node runs (deploy/host-setup.sh installs Node.js and Chromium)")
    })
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains(passed), "{text}");
}

#[tokio::test]
async fn web_page_terminal_works_in_headless_chromium() {
    let node = Node::start().await;
    let id = format!("web-{}", unique());
    // One second of CPU, which its row must show.
    node.client
        .sh(
            &id,
            "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass'",
        )
        .await
        .unwrap();
    // The page is served by the node without credentials.
    let page = reqwest::get(format!("{}/", node.url)).await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("/ui/xterm.js"));
    let xterm = reqwest::get(format!("{}/ui/xterm.js", node.url))
        .await
        .unwrap();
    assert_eq!(xterm.status(), 200);

    let env = vec![
        ("WARREN_URL", node.url.clone()),
        ("WARREN_API_KEY", node.key.clone()),
        ("SANDBOX", id),
        ("MIN_CPU_S", "0.8".to_string()),
    ];
    browser_script("terminal.mjs", env, "browser terminal test passed").await;
}

#[tokio::test]
async fn the_operators_console_works_in_headless_chromium() {
    let node = Node::start().await;
    let base = unique();
    let (a, b) = (format!("con-{base}"), format!("new-{base}"));
    let env = vec![
        ("WARREN_URL", node.url.clone()),
        ("WARREN_API_KEY", node.key.clone()),
        ("SANDBOX", a.clone()),
        ("NEW_SANDBOX", b.clone()),
    ];
    browser_script("console.mjs", env, "browser console test passed").await;
    for id in [&a, &b, &format!("{b}-fork-1")] {
        node.client.delete_sandbox(id).await.unwrap();
    }
}
