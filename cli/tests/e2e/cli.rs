//! The `warren` CLI's client commands against a live node, as a user runs them.

use super::harness::{create, sh, unique, Node};
use std::process::{Command, Output, Stdio};

fn warren(node: &Node, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(args)
        .env("WARREN_URL", &node.url)
        .env("WARREN_API_KEY", &node.key)
        .output()
        .unwrap()
}

/// Runs and asserts success; stdout.
fn ok(node: &Node, args: &[&str]) -> String {
    let out = warren(node, args);
    assert!(
        out.status.success(),
        "warren {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test]
async fn files_code_git_and_listing_through_the_cli() {
    let node = Node::start().await;
    let id = format!("cli-{}", unique());
    let c = &node.client;
    sh(
        c,
        &id,
        "mkdir -p /workspace/d && echo one > /workspace/d/a.txt",
    )
    .await;

    // ls / mv / rm on SANDBOX:/path.
    let listed = ok(&node, &["ls", &format!("{id}:/workspace/d")]);
    assert!(listed.contains("a.txt"), "{listed}");
    ok(
        &node,
        &[
            "mv",
            &format!("{id}:/workspace/d/a.txt"),
            "/workspace/d/b.txt",
        ],
    );
    let listed = ok(&node, &["ls", &format!("{id}:/workspace/d"), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b.txt"]);
    let refused = warren(&node, &["rm", &format!("{id}:/workspace/d")]);
    assert!(!refused.status.success(), "a directory without -r");
    ok(&node, &["rm", "-r", &format!("{id}:/workspace/d")]);
    assert_eq!(sh(c, &id, "ls /workspace/d 2>/dev/null; true").await, "");

    // run: the last expression's value, and an exception's exit code.
    assert_eq!(ok(&node, &["run", &id, "x = 6\nx * 7"]).trim(), "42");
    let failed = warren(&node, &["run", &id, "1/0"]);
    assert_eq!(failed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&failed.stderr).contains("ZeroDivisionError"));

    // git clone from a daemon in the sandbox.
    sh(
        c,
        &id,
        "set -e; export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@t GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@t; \
         mkdir -p /srv/src /srv/git && cd /srv/src && echo hi > README && git init -q -b main . \
         && git add . && git commit -qm one && git clone -q --bare /srv/src /srv/git/r.git",
    )
    .await;
    c.start_process(
        &id,
        &serde_json::from_value(serde_json::json!({
            "command": "exec git daemon --reuseaddr --base-path=/srv/git --export-all --listen=127.0.0.1 --port=9418 /srv/git",
            "id": "gitd"})).unwrap(),
    )
    .await
    .unwrap();
    c.wait_port(
        &id,
        "gitd",
        &serde_json::from_value(serde_json::json!({"port": 9418, "timeout_ms": 20000})).unwrap(),
    )
    .await
    .unwrap();
    let cloned = ok(
        &node,
        &[
            "git",
            "clone",
            &id,
            "git://127.0.0.1:9418/r.git",
            "/workspace/r",
        ],
    );
    assert!(cloned.contains("/workspace/r"), "{cloned}");
    assert_eq!(sh(c, &id, "cat /workspace/r/README").await, "hi\n");

    // list pages through every result.
    let team = format!("t{}", unique());
    for i in 0..3 {
        c.put_sandbox(
            &format!("{id}-{i}"),
            &create(serde_json::json!({"labels": {"team": team}})),
        )
        .await
        .unwrap();
    }
    let all = ok(
        &node,
        &[
            "list",
            "--limit",
            "1",
            "-l",
            &format!("team={team}"),
            "--json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(v["sandboxes"].as_array().unwrap().len(), 3, "{all}");

    // cluster status and completions.
    let status = ok(&node, &["cluster", "status", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1);
    assert!(ok(&node, &["completions", "bash"]).contains("warren"));
}

#[tokio::test]
async fn watch_prints_an_edit_as_it_happens() {
    let node = Node::start().await;
    let id = format!("cliw-{}", unique());
    sh(&node.client, &id, "mkdir -p /workspace/w").await;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["watch", &format!("{id}:/workspace/w"), "--include", "*.ts"])
        .env("WARREN_URL", &node.url)
        .env("WARREN_API_KEY", &node.key)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut first = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut first);
        let _ = tx.send(first);
    });
    // Edits until one is seen (the watch goes live a moment after the command starts).
    let mut first = Err(std::sync::mpsc::RecvTimeoutError::Timeout);
    for i in 0..30 {
        sh(
            &node.client,
            &id,
            &format!("echo x > /workspace/w/skip{i}.md && echo y > /workspace/w/a{i}.ts"),
        )
        .await;
        first = rx.recv_timeout(std::time::Duration::from_secs(1));
        if first.is_ok() {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let first = first.expect("no event printed within 30 s");
    assert!(
        first.contains("/workspace/w/a") && first.contains(".ts"),
        "{first}"
    );
    assert!(!first.contains(".md"));
}
