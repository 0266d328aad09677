//! `warren-bench`: starts a node from this build and compares it with Docker in one run.
//!
//! Environment: WARREN_BENCH_WARM (exec samples, default 300), WARREN_BENCH_COLD (cold
//! samples, default 10), WARREN_BENCH_BURST (concurrent creates, default 20),
//! WARREN_BENCH_COMMITS (placement commits, default 500), WARREN_BENCH_SIM_IDS (ids in the
//! placement simulation, default 1 000 000), WARREN_BENCH_SNAPSHOT_ROUNDS (snapshot, restore
//! and fork rounds on a ~200 MiB workspace, default 3), WARREN_BENCH_SURFACE (keystroke echo
//! and watch samples, default 200), WARREN_BENCH_INTERP (interpreter round trips, default
//! 200), WARREN_BENCH_FAILOVER (sandboxes on the node killed in the failover scenario,
//! default 10; a comma-separated list runs it once per size; WARREN_BENCH_FAILOVER_BASELINE=0
//! skips its wake baseline), WARREN_BENCH_EGRESS (requests per egress proxy scenario, default 2000),
//! WARREN_BENCH_METERED (running sandboxes in the metering scenario, default 200),
//! WARREN_BENCH_METER_WINDOW_S (its measured window, default 60),
//! WARREN_BENCH_METER_SAMPLED_FIRST=1 (its sampled arm first instead of second),
//! WARREN_BENCH_CHECKPOINTED and WARREN_BENCH_CHECKPOINT_WINDOW_S (active sandboxes and
//! seconds measured in the checkpoint-cost scenario, default 50 and 60),
//! WARREN_BENCH_ONLY (a comma-separated subset of `exec`, `create`,
//! `snapshots`, `watch`, `interpreter`, `userns`, `hostwork`, `cluster`, `failover`,
//! `commits`, `wan`, `checkpoints`, `placement`, `egress`, `metering`, `burst`,
//! `second-image`, `sessions`, `startpath`, `clusterburst`, `churn`, `wanexec`; default all),
//! WARREN_BENCH_CHURN_WORKERS and WARREN_BENCH_CHURN_ROUNDS (agents at once and rounds each
//! in the `churn` scenario, default 4 and 5),
//! WARREN_BENCH_CLUSTER_BURST (new sessions at once in the `clusterburst` scenario,
//! default 60),
//! WARREN_BENCH_START_N (starts per variant in the `startpath` scenario, default 10),
//! WARREN_BENCH_WAN (placement commits per region latency in the `wan` scenario, default 100),
//! WARREN_BENCH_WAN_EXEC (forwarded execs per region latency in the `wanexec` scenario,
//! default 100),
//! WARREN_BENCH_BURST_SESSIONS (new sessions per burst in the `burst` scenario, default 200),
//! WARREN_BENCH_SECOND_IMAGE_SESSIONS (new sessions per burst in the `second-image`
//! scenario, default 50),
//! WARREN_BENCH_SESSION_RATE and WARREN_BENCH_SESSION_SECS (arrivals per second and for how
//! long in the `sessions` scenario, default 5 and 30),
//! WARREN_BENCH_WORKDIR (where the snapshot baselines write, default /tmp),
//! WARREN_BENCH_JSON (a file to write the results to as JSON, besides the printed table),
//! WARREN_BENCH_REPORT (a directory to write an HTML report to: the table, the notes and a
//! latency plot per sampled scenario, `index.html` and PNGs).

use warren_loadtest::{
    burst_bench, checkpoint_bench, churn_bench, cluster_burst_bench, cluster_node, commit_bench,
    egress_bench, failover_bench, host_work_bench, html_report, interpreter_bench, metering_bench,
    node::BenchNode, placement_bench, report::Table, scenarios, snapshot_bench, start_path_bench,
    surface_bench, userns_bench, wan_exec_bench,
};

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let warm_n = env_usize("WARREN_BENCH_WARM", 300).clamp(10, 5000);
    let cold_n = env_usize("WARREN_BENCH_COLD", 10).clamp(3, 100);
    let burst_n = env_usize("WARREN_BENCH_BURST", 20).clamp(1, 200);
    let commits_n = env_usize("WARREN_BENCH_COMMITS", 500).clamp(10, 10_000);
    let snap_rounds = env_usize("WARREN_BENCH_SNAPSHOT_ROUNDS", 3).clamp(1, 20);
    let surface_n = env_usize("WARREN_BENCH_SURFACE", 200).clamp(10, 5000);
    let interp_n = env_usize("WARREN_BENCH_INTERP", 200).clamp(10, 5000);
    let failover_sizes: Vec<usize> = std::env::var("WARREN_BENCH_FAILOVER")
        .unwrap_or_else(|_| "10".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .map(|n: usize| n.clamp(1, 1000))
        .collect();
    let failover_baseline =
        std::env::var("WARREN_BENCH_FAILOVER_BASELINE").map_or(true, |v| v != "0");
    let checkpointed_n = env_usize("WARREN_BENCH_CHECKPOINTED", 50).clamp(1, 500);
    let checkpoint_window = env_usize("WARREN_BENCH_CHECKPOINT_WINDOW_S", 60).clamp(15, 900);
    let egress_n = env_usize("WARREN_BENCH_EGRESS", 2000).clamp(100, 100_000);
    let metered_n = env_usize("WARREN_BENCH_METERED", 200).clamp(1, 1000);
    let meter_window = env_usize("WARREN_BENCH_METER_WINDOW_S", 60).clamp(10, 600);
    let sim_ids = env_usize("WARREN_BENCH_SIM_IDS", 1_000_000).clamp(1000, 5_000_000);
    let wan_n = env_usize("WARREN_BENCH_WAN", 100).clamp(10, 2000);
    let wan_exec_n = env_usize("WARREN_BENCH_WAN_EXEC", 100).clamp(10, 1000);
    let only = std::env::var("WARREN_BENCH_ONLY").unwrap_or_default();
    let run = |part: &str| only.is_empty() || only.split(',').any(|p| p.trim() == part);
    let mut table = Table::default();
    if ["exec", "create", "snapshots", "watch", "interpreter"]
        .iter()
        .any(|p| run(p))
    {
        let node = BenchNode::start().await?;
        eprintln!(
            "bench: node {} at {} (image {})",
            node.node_id, node.url, node.image
        );
        if run("exec") {
            scenarios::warm_exec(&node, warm_n, &mut table).await?;
        }
        if run("create") {
            scenarios::cold_create(&node, cold_n, &mut table).await?;
            scenarios::burst_create(&node, burst_n, &mut table).await?;
        }
        if run("snapshots") {
            snapshot_bench::snapshots(&node, snap_rounds, &mut table).await?;
        }
        if run("watch") {
            surface_bench::watch_latency(&node, surface_n, &mut table).await?;
        }
        if run("interpreter") {
            interpreter_bench::round_trip(&node, interp_n, &mut table).await?;
        }
    }
    if run("burst") {
        let n = env_usize("WARREN_BENCH_BURST_SESSIONS", 200).clamp(10, 1000);
        eprintln!("bench: bursts of {n} new sessions (warm pool that follows demand)");
        burst_bench::bursts(n, &mut table).await?;
    }
    if run("second-image") {
        let n = env_usize("WARREN_BENCH_SECOND_IMAGE_SESSIONS", 50).clamp(5, 500);
        eprintln!("bench: bursts of {n} new sessions of a second image (its own warm pool)");
        burst_bench::second_image_bursts(n, &mut table).await?;
    }
    if run("sessions") {
        let rate = std::env::var("WARREN_BENCH_SESSION_RATE")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(5.0)
            .clamp(0.1, 100.0);
        let secs = env_usize("WARREN_BENCH_SESSION_SECS", 30).clamp(5, 600) as u64;
        eprintln!("bench: agent sessions arriving at {rate}/s for {secs} s");
        burst_bench::sustained(rate, secs, &mut table).await?;
    }
    if run("churn") {
        let workers = env_usize("WARREN_BENCH_CHURN_WORKERS", 4).clamp(1, 64);
        let rounds = env_usize("WARREN_BENCH_CHURN_ROUNDS", 5).clamp(1, 100);
        eprintln!("bench: snapshot, restore and fork churn ({workers} x {rounds})");
        churn_bench::churn(workers, rounds, &mut table).await?;
    }
    if run("clusterburst") {
        let n = env_usize("WARREN_BENCH_CLUSTER_BURST", 60).clamp(3, 600);
        eprintln!("bench: a burst of {n} sessions through one node and through three");
        cluster_burst_bench::cluster_burst(n, &mut table).await?;
    }
    if run("startpath") {
        let n = env_usize("WARREN_BENCH_START_N", 10).clamp(3, 100);
        eprintln!("bench: where a container start spends its time ({n} starts per variant)");
        start_path_bench::start_path(n, &mut table).await?;
    }
    if run("userns") {
        eprintln!("bench: user namespaces vs a second Docker daemon without them");
        userns_bench::userns_cost(warm_n, cold_n, &mut table).await?;
    }
    if run("hostwork") {
        eprintln!("bench: bounded host work vs unbounded");
        host_work_bench::host_work_cost(snap_rounds, &mut table).await?;
    }
    if run("cluster") {
        eprintln!("bench: three-node cluster");
        let cluster = cluster_node::BenchCluster::start(3).await?;
        let owner = cluster_node::forwarding_overhead(&cluster, warm_n, &mut table).await?;
        surface_bench::terminal_echo(&cluster, owner, surface_n, &mut table).await?;
    }
    if run("failover") {
        eprintln!("bench: failover of a killed node's sandboxes");
        for n in &failover_sizes {
            failover_bench::failover_time(*n, failover_baseline, &mut table).await?;
        }
    }
    if run("checkpoints") {
        checkpoint_bench::checkpoint_cost(
            checkpointed_n,
            std::time::Duration::from_secs(checkpoint_window as u64),
            &mut table,
        )
        .await?;
    }
    if run("commits") {
        commit_bench::commit_latency(commits_n, &mut table).await?;
    }
    if run("wan") {
        eprintln!("bench: placement commits across regions (user-space WAN relay)");
        commit_bench::wan_commit_latency(wan_n, &mut table).await?;
    }
    if run("wanexec") {
        eprintln!("bench: forwarded exec across regions (user-space WAN relay)");
        wan_exec_bench::forwarded_exec_across_regions(wan_exec_n, &mut table).await?;
    }
    if run("egress") {
        egress_bench::proxy_cost(egress_n, &mut table).await?;
    }
    if run("metering") {
        metering_bench::metering_cost(
            metered_n,
            std::time::Duration::from_secs(meter_window as u64),
            std::env::var("WARREN_BENCH_METER_SAMPLED_FIRST").is_ok_and(|v| v == "1"),
            &mut table,
        )
        .await?;
    }
    if run("placement") {
        placement_bench::lookup_cost(&mut table);
        placement_bench::simulate(sim_ids, &mut table);
        placement_bench::state_at_scale(sim_ids, &mut table);
    }
    table.print();
    if let Ok(path) = std::env::var("WARREN_BENCH_JSON") {
        std::fs::write(&path, serde_json::to_vec_pretty(&table.to_json())?)?;
        eprintln!("bench: results written to {path}");
    }
    if let Ok(dir) = std::env::var("WARREN_BENCH_REPORT") {
        let context = format!(
            "WARREN_BENCH_ONLY={}; {} CPUs, {} MiB of memory; finished {}",
            if only.is_empty() { "(all)" } else { &only },
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            warren_node::runtime::host_load::memory_total_mb().unwrap_or(0),
            humantime::format_rfc3339_seconds(std::time::SystemTime::now()),
        );
        let page = html_report::write(&table, std::path::Path::new(&dir), &context)?;
        eprintln!("bench: report written to {}", page.display());
    }
    Ok(())
}
