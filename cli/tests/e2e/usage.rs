//! Metering, tried on a real node: CPU from the sandbox's cgroup (what it used, not what it
//! was allotted or what the node did for it), memory and running time, per sandbox, across
//! sleep, wake and a node killed and started again.

use super::harness::{sh, unique, Node};
use warren_api::usage::UsageItem;
use warren_client::Client;

/// The sandbox's totals over the last day (sampled up to now by the query itself).
async fn usage_of(c: &Client, id: &str) -> UsageItem {
    let r = c.usage(&[("sandbox", id)]).await.unwrap();
    assert!(r.items.len() <= 1, "{r:?}");
    r.items.into_iter().next().unwrap_or_default()
}

/// Burns `secs` of CPU in the sandbox (its own process time, whatever else runs).
fn burn(secs: f64) -> String {
    format!(
        "python3 -c 'import time\nt = time.process_time()\nwhile time.process_time() - t < {secs}: pass'"
    )
}

#[tokio::test]
async fn a_busy_sandbox_is_billed_its_cpu_and_an_idle_one_almost_nothing() {
    let node = Node::start().await;
    let c = &node.client;
    let (busy, idle) = (format!("busy-{}", unique()), format!("idle-{}", unique()));
    sh(c, &idle, "true").await;
    sh(c, &busy, "true").await;
    // What starting them cost (their guest's start and first call) is theirs too; the bill
    // compared is what came after.
    let (b0, i0) = (usage_of(c, &busy).await, usage_of(c, &idle).await);
    let wall = std::time::Instant::now();
    sh(c, &busy, &burn(2.0)).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    // Both ran at least from before `wall` to the query (which samples them then).
    let elapsed = wall.elapsed().as_secs_f64();
    let (b, i) = (usage_of(c, &busy).await, usage_of(c, &idle).await);
    let (busy_cpu, idle_cpu) = (
        b.cpu_seconds - b0.cpu_seconds,
        i.cpu_seconds - i0.cpu_seconds,
    );
    assert!(
        (1.8..=2.2).contains(&busy_cpu),
        "the busy sandbox was billed {busy_cpu} s of CPU for 2 s ({b0:?} then {b:?})"
    );
    assert!(
        idle_cpu < 0.1,
        "the idle sandbox was billed {idle_cpu} s of CPU meanwhile ({i0:?} then {i:?})"
    );
    assert!(
        b0.cpu_seconds < 0.5 && i0.cpu_seconds < 0.5,
        "{b0:?} {i0:?}"
    );
    // Running the whole time, both: at least the time measured here, with their memory
    // (the same instance type) provisioned for as long.
    for u in [&b, &i] {
        assert!(
            u.running_seconds >= elapsed,
            "{u:?} ran {elapsed} s at least"
        );
        assert!(u.running_seconds < elapsed + 30.0, "{u:?}");
        assert!(u.memory_gib_seconds > 0.0, "{u:?}");
    }
    let ratio = |u: &UsageItem| u.memory_gib_seconds / u.running_seconds;
    assert!((ratio(&b) - ratio(&i)).abs() < 1e-6, "{b:?} {i:?}");
    // The report without a filter has both, by sandbox; by day, one day's sum.
    let all = c.usage(&[]).await.unwrap();
    assert!(all
        .items
        .iter()
        .any(|x| x.sandbox.as_deref() == Some(&busy)));
    assert!(all
        .items
        .iter()
        .any(|x| x.sandbox.as_deref() == Some(&idle)));
    let days = c.usage(&[("group_by", "day")]).await.unwrap();
    assert!(!days.items.is_empty() && days.items.iter().all(|x| x.day.is_some()));
}

#[tokio::test]
async fn packing_a_snapshot_is_not_billed_to_the_sandbox() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("snapbill-{}", unique());
    sh(c, &id, "head -c 200M /dev/urandom > /workspace/big && sync").await;
    let before = usage_of(c, &id).await;
    let snap = c
        .create_snapshot(&id, &serde_json::from_value(serde_json::json!({})).unwrap())
        .await
        .unwrap();
    assert!(snap.size_bytes >= 200 << 20, "{snap:?}");
    let after = usage_of(c, &id).await;
    let added = after.cpu_seconds - before.cpu_seconds;
    assert!(
        added < 0.1,
        "a 200 MiB snapshot added {added} s of CPU to the sandbox's bill"
    );
}

#[tokio::test]
async fn usage_goes_on_across_sleep_wake_and_a_node_restart_and_is_counted_once() {
    let mut node = Node::start().await;
    let id = format!("cont-{}", unique());
    // Put to sleep right after it burned (no sample in between but the one taken as its
    // container goes), woken by the next call: a new container, counted on its own.
    sh(&node.client, &id, &burn(1.0)).await;
    node.client.sleep(&id).await.unwrap();
    sh(&node.client, &id, &burn(1.0)).await;
    let woken = usage_of(&node.client, &id).await;
    assert!(
        (1.9..=2.5).contains(&woken.cpu_seconds),
        "after sleep and wake {woken:?}"
    );
    // It burns, and the node dies before any sample (its containers run on) and starts
    // again on the same disk: the count goes on from the cursor it wrote.
    sh(&node.client, &id, &burn(1.0)).await;
    node.restart().await;
    sh(&node.client, &id, &burn(1.0)).await;
    let last = usage_of(&node.client, &id).await;
    assert!(
        (3.8..=4.8).contains(&last.cpu_seconds),
        "4 s burned, across a node restart: {last:?}"
    );
    assert!(
        last.running_seconds > woken.running_seconds,
        "{woken:?} {last:?}"
    );
    // Asked again: the same (nothing counted twice by asking).
    let again = usage_of(&node.client, &id).await;
    assert!(
        again.cpu_seconds - last.cpu_seconds < 0.05,
        "{last:?} then {again:?}"
    );
    // Deleted, it keeps its history.
    node.client.delete_sandbox(&id).await.unwrap();
    let gone = usage_of(&node.client, &id).await;
    assert!(gone.cpu_seconds >= last.cpu_seconds, "{gone:?}");
}

/// A sandbox on node 0 burns 1 s of CPU there, then node 0 is drained: its name and the
/// sandbox's id, once the sandbox is served elsewhere.
async fn burned_then_drained(c: &super::cluster_harness::TestCluster) -> (String, String) {
    use super::cluster_harness::{drain, ids_on, wait_moved};
    let x = c.nodes[0].name.clone();
    let id = ids_on(c, 1, &x, 1).await.remove(0);
    sh(&c.nodes[1].client, &id, &burn(1.0)).await;
    drain(c, 1, &x).await;
    wait_moved(c, 1, &id, &x).await;
    (x, id)
}

/// A sandbox that ran on one node and was drained to another: both nodes' parts are
/// counted, once each, and every node answers the same totals.
#[tokio::test]
async fn a_moved_sandbox_is_billed_once_and_every_node_answers_the_same() {
    use super::cluster_harness::TestCluster;
    let c = TestCluster::start(3, 1).await;
    let (_, id) = burned_then_drained(&c).await;
    sh(&c.nodes[2].client, &id, &burn(1.0)).await;
    let mut seen = Vec::new();
    for n in &c.nodes {
        seen.push(usage_of(&n.client, &id).await);
    }
    for u in &seen {
        assert!(
            (1.8..=2.6).contains(&u.cpu_seconds),
            "2 s burned on two nodes: {seen:?}"
        );
        assert!(
            (u.cpu_seconds - seen[0].cpu_seconds).abs() < 0.05,
            "{seen:?}"
        );
        assert!(
            (u.running_seconds - seen[0].running_seconds).abs() < 5.0,
            "{seen:?}"
        );
    }
}

/// What a node recorded is counted after the node is gone for good, from what it exported
/// to the object store (every second here; every minute by default).
#[tokio::test]
async fn a_removed_nodes_usage_is_still_counted_from_its_export() {
    use super::cluster_harness::TestCluster;
    let mut c = TestCluster::start_with(3, 1, "usage_export_ms = 1000\n").await;
    let (x, id) = burned_then_drained(&c).await;
    // Its last sample (as the container went) is exported within a second or two.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    c.kill(0);
    removed_for_good(&c, &x).await;
    counted_from_export(&c, &x, &id).await;
}

/// A node stopped in order (SIGTERM) writes its last export as it stops: what it recorded
/// since the one before (an hour before, here) is counted after it is removed for good.
#[tokio::test]
async fn a_node_stopped_in_order_exports_its_usage_before_it_exits() {
    use super::cluster_harness::TestCluster;
    let mut c = TestCluster::start_with(3, 1, "usage_export_ms = 3600000\n").await;
    let (x, id) = burned_then_drained(&c).await;
    c.terminate(0);
    removed_for_good(&c, &x).await;
    counted_from_export(&c, &x, &id).await;
}

/// Removes node `x` (down) through node 1, and waits until node 1 no longer lists it.
async fn removed_for_good(c: &super::cluster_harness::TestCluster, x: &str) {
    c.remove_node(1, x).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let view = c.nodes[1]
            .client
            .request(reqwest::Method::GET, "/v1/cluster")
            .send()
            .await
            .unwrap();
        let v: serde_json::Value = view.json().await.unwrap();
        let names: Vec<&str> = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|n| n["id"].as_str())
            .collect();
        if !names.contains(&x) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{x} is still a member: {v}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The 1 s `id` burned on the removed node `x` is counted by the nodes left.
async fn counted_from_export(c: &super::cluster_harness::TestCluster, x: &str, id: &str) {
    for i in [1, 2] {
        let u = usage_of(&c.nodes[i].client, id).await;
        assert!(
            (0.9..=1.5).contains(&u.cpu_seconds),
            "the 1 s burned on the removed node {x}, asked of node {i}: {u:?}"
        );
    }
}

/// `/metrics` counts what the meter counted (summed over the node's sandboxes), sandboxes by
/// state, and requests by route with ids as placeholders: no sandbox id is a label value.
#[tokio::test]
async fn metrics_count_usage_states_and_routes_but_never_a_sandbox_id() {
    let node = Node::start().await;
    let c = &node.client;
    let id = format!("metered-{}", unique());
    sh(c, &id, &burn(1.0)).await;
    usage_of(c, &id).await;
    let text = node.metrics_text().await;
    let value = |series: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(series))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {series} in /metrics"))
    };
    assert!(value("warren_usage_cpu_seconds_total ") >= 0.9, "{text}");
    assert!(value("warren_usage_running_seconds_total ") > 0.0);
    assert!(value("warren_usage_memory_gib_seconds_total ") > 0.0);
    assert!(value("warren_sandboxes_by_state{state=\"running\"} ") >= 1.0);
    let exec = text
        .lines()
        .find(|l| {
            l.starts_with("warren_http_request_seconds_count{")
                && l.contains("route=\"/v1/sandboxes/{id}/exec\"")
                && l.contains("role=\"entry\"")
                && l.contains("status=\"200\"")
        })
        .unwrap_or_else(|| panic!("no exec route series: {text}"));
    assert!(exec.rsplit(' ').next().unwrap().parse::<f64>().unwrap() >= 1.0);
    assert!(!text.contains(&id), "a sandbox id is in /metrics");
}
