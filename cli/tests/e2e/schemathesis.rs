//! schemathesis (PyPI, installed into `sdk/python/.venv` by `deploy/host-setup.sh
//! --test-deps` from the Python SDK's `test` extra) against the OpenAPI document a live node
//! serves at `GET /v1/openapi.json`: every answer must match the document's schema for its
//! status (`response_schema_conformance`) and no input may be answered with a 5xx
//! (`not_a_server_error`). Bounded in count (`--max-examples` per operation) and in time
//! (each request, and the whole run, which is killed past `RUN_LIMIT`).
//!
//! Which values the path parameters take, and which operations are left out (and why), is
//! in `fixtures/schemathesis.toml`; the ids it names are made here first.

use super::harness::{create, Node};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::process::Command;

/// The run takes about 25 s on a 2-core machine; a hang fails instead of stalling.
const RUN_LIMIT: Duration = Duration::from_secs(150);
/// Test cases per operation and phase: enough to reach every handler's refusals and its
/// answer, few enough to stay within `RUN_LIMIT`.
const MAX_EXAMPLES: &str = "50";
/// A fixed seed: a failure reproduces with the same command. `WARREN_SCHEMATHESIS_SEED`
/// tries others.
const DEFAULT_SEED: &str = "7";

/// What `fixtures/schemathesis.toml` names: the sandbox every operation works on, the one
/// that sleep, delete and fork get, and the (ended) process.
const MAIN: &str = "st-main";
const SPARE: &str = "st-spare";
const PROCESS: &str = "st-done";

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn schemathesis_bin() -> PathBuf {
    let bin = here().join("../sdk/python/.venv/bin/st");
    assert!(
        bin.exists(),
        "{} is missing: run deploy/host-setup.sh --test-deps (it installs the Python SDK's \
         test extra, schemathesis among it)",
        bin.display()
    );
    bin
}

/// Makes what the configuration's parameters name: two sandboxes and a process that ended.
async fn make_the_named_things(node: &Node) {
    for id in [MAIN, SPARE] {
        node.client
            .put_sandbox(id, &create(serde_json::json!({})))
            .await
            .unwrap();
    }
    let start = serde_json::from_value(serde_json::json!({
        "command": "echo ready",
        "id": PROCESS,
    }))
    .unwrap();
    node.client.start_process(MAIN, &start).await.unwrap();
    let ended = node
        .client
        .wait_exit(MAIN, PROCESS, Some(30_000))
        .await
        .unwrap();
    assert_eq!(ended.exit_code, 0);
}

fn tail(s: &str, lines: usize) -> String {
    let all: Vec<&str> = s.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[tokio::test]
async fn every_answer_matches_the_document_and_no_input_is_answered_with_a_server_error() {
    let st = schemathesis_bin();
    let node = Node::start().await;
    make_the_named_things(&node).await;
    let seed = std::env::var("WARREN_SCHEMATHESIS_SEED").unwrap_or_else(|_| DEFAULT_SEED.into());
    // Its working directory: nothing is written there (no reports, no example database),
    // but a stray `.hypothesis` must not land in the checkout.
    let work = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(&st);
    cmd.arg("--config-file")
        .arg(here().join("tests/e2e/fixtures/schemathesis.toml"))
        .arg("run")
        .arg(format!("{}/v1/openapi.json", node.url))
        .args(["--url", &node.url])
        .args(["--header", &format!("Authorization: Bearer {}", node.key)])
        .args(["--checks", "not_a_server_error,response_schema_conformance"])
        .args(["--max-examples", MAX_EXAMPLES])
        .args(["--request-timeout", "20"])
        .args(["--workers", "2"])
        .args(["--seed", &seed])
        .args(["--generation-database", "none"])
        .arg("--no-color")
        .current_dir(work.path())
        .kill_on_drop(true);
    let began = Instant::now();
    let out = tokio::time::timeout(RUN_LIMIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis ran longer than {RUN_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("{} did not start: {e}", st.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "schemathesis found answers that break the document ({}, seed {seed}):\n{stdout}\n{stderr}",
        out.status
    );
    eprintln!(
        "schemathesis, {:.0?}:\n{}",
        began.elapsed(),
        tail(&stdout, 12)
    );
    // DELETE /v1/cluster/nodes/{node} was in the run with this node's Raft id among its
    // guesses; the last node of a cluster is never removed (409), so the node is still the
    // cluster's one member and leader.
    let resp = node
        .req(
            reqwest::Method::DELETE,
            &format!("/v1/cluster/nodes/{}?force=true", node.node_id),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 409, "{}", resp.text().await.unwrap());
    let cluster = node.client.cluster().await.unwrap();
    assert_eq!(cluster["leader"], node.node_id.as_str(), "{cluster}");
    assert_eq!(
        cluster["nodes"].as_array().map(Vec::len),
        Some(1),
        "{cluster}"
    );
}
