//! A real Prometheus server (Debian's `prometheus`) scraping a real two-node cluster through
//! the metrics token: the series parse, move when the operations happen, and every series
//! the Grafana dashboard and the alerting rules in `deploy/` name is one the nodes serve.
//! The rules load and evaluate in that server, and pass their own `promtool` unit tests.

use super::cluster_harness::TestCluster;
use super::harness::unique;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warren_api::exec::ExecRequest;

fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

fn tool(name: &str) -> String {
    let path = format!("/usr/bin/{name}");
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: `deploy/host-setup.sh --test-deps` installs Debian's prometheus package"
    );
    path
}

/// A Prometheus server, stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
    http: reqwest::Client,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    fn start(dir: &Path, targets: &[String], token_file: &Path) -> Prometheus {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - \"{}\"\n\
                 scrape_configs:\n  - job_name: warren\n    metrics_path: /metrics\n\
                 \x20   authorization:\n      type: Bearer\n      credentials_file: \"{}\"\n\
                 \x20   static_configs:\n      - targets: [{}]\n",
                repo_file("deploy/prometheus/warren-alerts.yml").display(),
                token_file.display(),
                targets.join(", ")
            ),
        )
        .unwrap();
        let child = Command::new(tool("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        Prometheus {
            child,
            url: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::new(),
        }
    }

    async fn api(&self, path: &str, params: &[(&str, &str)]) -> Option<serde_json::Value> {
        let url = reqwest::Url::parse_with_params(&format!("{}{path}", self.url), params).ok()?;
        let r = self.http.get(url).send().await.ok()?;
        let v: serde_json::Value = r.json().await.ok()?;
        (v["status"] == "success").then(|| v["data"].clone())
    }

    /// The value of an instant query that yields one number (None: no data or an error).
    async fn number(&self, query: &str) -> Option<f64> {
        let data = self.api("/api/v1/query", &[("query", query)]).await?;
        let first = data["result"].as_array()?.first()?.clone();
        first["value"][1].as_str()?.parse().ok()
    }

    /// Waits up to `limit` for `query` to satisfy `ok`; its last value.
    async fn until(&self, limit: Duration, query: &str, ok: impl Fn(f64) -> bool) -> Option<f64> {
        let deadline = Instant::now() + limit;
        loop {
            let v = self.number(query).await;
            if v.is_some_and(&ok) || Instant::now() > deadline {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// The metric names (`warren_…`, `process_…`, `up`) a PromQL expression or a file of them
/// mentions.
fn series_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || !ident(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            let word = &text[start..i];
            if word.starts_with("warren_") || word.starts_with("process_") {
                out.insert(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

async fn exec(c: &TestCluster, i: usize, id: &str, script: &str) -> String {
    let req = ExecRequest {
        command: Some(script.into()),
        ..Default::default()
    };
    let r = c.nodes[i].client.exec(id, &req).await.expect("exec");
    assert_eq!(r.exit_code, 0, "{r:?}");
    r.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_cluster_and_every_dashboard_and_alert_series_exists() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("metrics-token");
    std::fs::write(&token_file, format!("scrape-{}-{}", unique(), unique())).unwrap();
    let c = TestCluster::start_with(
        2,
        1,
        &format!("metrics_token_file = \"{}\"\n", token_file.display()),
    )
    .await;
    // Two nodes: one voter (voters are an odd number), one learner.
    c.wait_voters_everywhere(1).await;
    let targets: Vec<String> = c
        .nodes
        .iter()
        .map(|n| n.url.trim_start_matches("http://").to_string())
        .collect();
    let prom = Prometheus::start(dir.path(), &targets, &token_file);

    // Both targets up: scraped through the token.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let up = prom.number("sum(up{job=\"warren\"})").await;
        if up == Some(2.0) {
            break;
        }
        assert!(Instant::now() < deadline, "targets not up: {up:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let creates = "sum(warren_sandbox_create_seconds_count)";
    let before = prom.number(creates).await.unwrap_or(0.0);

    // The operations: a create, an exec entering each node (one of them forwarded), a
    // snapshot (object store), a restore from it (chunk cache).
    let id = format!("prom-{}", unique());
    exec(&c, 0, &id, "echo one > /workspace/f").await;
    exec(&c, 1, &id, "cat /workspace/f").await;
    let snap = c.nodes[0]
        .client
        .create_snapshot(&id, &Default::default())
        .await
        .expect("snapshot");
    c.nodes[0]
        .client
        .restore(&id, &snap.id)
        .await
        .expect("restore");
    assert_eq!(exec(&c, 1, &id, "cat /workspace/f").await.trim(), "one");

    let moved = prom
        .until(Duration::from_secs(30), creates, |v| v >= before + 1.0)
        .await;
    assert!(
        moved.is_some_and(|v| v >= before + 1.0),
        "creates did not move: {before} then {moved:?}"
    );
    let expect = [
        ("sum(warren_raft_is_leader)", 1.0, 1.0),
        ("min(warren_raft_has_leader)", 1.0, 1.0),
        ("min(warren_raft_voters)", 1.0, 1.0),
        ("min(warren_cluster_nodes{state=\"up\"})", 2.0, 2.0),
        ("max(warren_cluster_nodes{state=\"down\"})", 0.0, 0.0),
        ("min(warren_safety_guarantee_holds)", 1.0, 1.0),
        ("max(warren_raft_term)", 1.0, f64::MAX),
        ("min(warren_raft_applied_index)", 1.0, f64::MAX),
        ("sum(warren_peer_connections)", 1.0, f64::MAX),
        ("count(warren_peer_rtt_seconds)", 1.0, f64::MAX),
        (
            "sum(warren_peer_streams_total{direction=\"out\",kind=\"http\"})",
            1.0,
            f64::MAX,
        ),
        (
            "sum(warren_forward_seconds_count{outcome=\"response\"})",
            1.0,
            f64::MAX,
        ),
        (
            "sum(warren_http_request_seconds_count{route=\"/v1/sandboxes/{id}/exec\",role=\"entry\",status=\"200\"})",
            3.0,
            f64::MAX,
        ),
        (
            "sum(warren_object_store_request_seconds_count{op=\"put\",outcome=\"ok\"})",
            1.0,
            f64::MAX,
        ),
        (
            "sum(warren_object_store_bytes_total{direction=\"put\"})",
            1.0,
            f64::MAX,
        ),
        ("sum(warren_chunk_cache_lookups_total)", 1.0, f64::MAX),
        ("min(warren_data_disk_free_bytes)", 1.0, f64::MAX),
        ("min(process_resident_memory_bytes)", 1.0, f64::MAX),
        ("sum(warren_sandboxes_by_state{state=\"running\"})", 1.0, 1.0),
    ];
    for (q, lo, hi) in expect {
        let v = prom
            .until(Duration::from_secs(15), q, |v| (lo..=hi).contains(&v))
            .await;
        assert!(
            v.is_some_and(|v| (lo..=hi).contains(&v)),
            "{q} = {v:?}, want {lo}..={hi}"
        );
    }

    // Every series the dashboard and the rules name was scraped.
    let names: BTreeSet<String> = prom
        .api("/api/v1/label/__name__/values", &[])
        .await
        .and_then(|d| d.as_array().cloned())
        .expect("names")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    let dashboard_text = std::fs::read_to_string(repo_file("deploy/grafana/warren.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard_text).unwrap();
    let mut exprs = Vec::new();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    assert!(
        exprs.len() >= 20,
        "the dashboard has {} queries",
        exprs.len()
    );
    let rules_text =
        std::fs::read_to_string(repo_file("deploy/prometheus/warren-alerts.yml")).unwrap();
    let mut wanted = series_named(&rules_text);
    for e in &exprs {
        wanted.extend(series_named(e));
    }
    let missing: Vec<_> = wanted.iter().filter(|n| !names.contains(*n)).collect();
    assert!(
        missing.is_empty(),
        "series the dashboard or the alerts use that no node serves: {missing:?}"
    );
    // Every dashboard query is valid PromQL with its variables filled in.
    for e in &exprs {
        let q = e
            .replace("$__rate_interval", "1m")
            .replace("$instance", ".*");
        assert!(
            prom.api("/api/v1/query", &[("query", &q)]).await.is_some(),
            "the dashboard's query does not evaluate: {q}"
        );
    }

    // The alerting rules loaded and evaluate without error, and none fires on this healthy
    // cluster.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let groups = prom.api("/api/v1/rules", &[]).await.expect("rules");
        let rules: Vec<serde_json::Value> = groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        assert_eq!(rules.len(), 8, "{groups}");
        let evaluated = rules.iter().all(|r| {
            r["lastEvaluation"]
                .as_str()
                .is_some_and(|t| !t.starts_with("0001"))
        });
        if evaluated {
            for r in &rules {
                assert_eq!(r["health"], "ok", "{r}");
                assert_eq!(
                    r["state"], "inactive",
                    "an alert fires on a healthy cluster: {r}"
                );
            }
            break;
        }
        assert!(Instant::now() < deadline, "rules not evaluated: {groups}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(prom);
    c.nodes[0].client.delete_sandbox(&id).await.unwrap();
}

/// `promtool` accepts the rules, and their unit tests (each alert fires on its failure and
/// not before) pass.
#[test]
fn the_alerting_rules_pass_promtool_and_their_unit_tests() {
    let promtool = tool("promtool");
    let dir = repo_file("deploy/prometheus");
    for args in [
        &["check", "rules", "warren-alerts.yml"][..],
        &["test", "rules", "warren-alerts.test.yml"][..],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn series_names_are_read_out_of_promql() {
    let got = series_named(
        "sum by (le) (rate(warren_forward_seconds_bucket{instance=~\"$instance\"}[1m])) / process_open_fds + my_warren_x",
    );
    let want: BTreeSet<String> = ["warren_forward_seconds_bucket", "process_open_fds"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(got, want);
}
