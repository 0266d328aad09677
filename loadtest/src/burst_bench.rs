//! Bursts of new sessions. N get-or-create + first exec calls at once on new ids, against N
//! concurrent `docker run --rm IMAGE true` in the same run, on a node whose warm pool follows
//! demand: the first burst finds the pool at its floor (Docker's start rate bounds it), the
//! second finds it grown to the first burst's size. Between them: how long the pool took to
//! refill, and what each ready container costs the host in memory.

use crate::node::BenchNode;
use crate::report::Table;
use std::time::{Duration, Instant};
use warren_client::Client;

/// The outcome of one burst.
pub(crate) struct Burst {
    /// How long each call that succeeded took.
    pub ok: Vec<Duration>,
    /// Why each of the others failed.
    pub failed: Vec<String>,
    pub wall: Duration,
}

/// Runs every call at once (each: its time, and whether it succeeded), bounded at 600 s,
/// with a progress bar named `what`.
pub(crate) async fn all_at_once<F>(
    what: &str,
    calls: impl ExactSizeIterator<Item = F>,
) -> anyhow::Result<Burst>
where
    F: std::future::Future<Output = Result<(), String>>,
{
    let t = Instant::now();
    let bar = crate::progress::bar(calls.len(), what);
    let timed = calls.map(|call| {
        let bar = &bar;
        async move {
            let t = Instant::now();
            let r = call.await;
            bar.inc(1);
            r.map(|()| t.elapsed())
        }
    });
    let results = tokio::time::timeout(
        Duration::from_secs(600),
        futures_util::future::join_all(timed),
    )
    .await;
    bar.finish_and_clear();
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for r in results? {
        match r {
            Ok(d) => ok.push(d),
            Err(e) => failed.push(e),
        }
    }
    Ok(Burst {
        ok,
        failed,
        wall: t.elapsed(),
    })
}

/// A session's get-or-create and first exec (`true`) on `id`.
pub(crate) async fn first_exec(c: &Client, id: &str) -> Result<(), String> {
    match c.sh(id, "true").await {
        Ok(r) if r.exit_code == 0 => Ok(()),
        Ok(r) => Err(format!("first exec exited {}", r.exit_code)),
        Err(e) => Err(e.to_string()),
    }
}

async fn docker_burst(image: &str, n: usize) -> anyhow::Result<Burst> {
    all_at_once(
        "docker run at once",
        (0..n).map(|_| async move {
            let out = tokio::process::Command::new("docker")
                .args(["run", "--rm", image, "true"])
                .output()
                .await
                .map_err(|e| e.to_string())?;
            match out.status.success() {
                true => Ok(()),
                false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            }
        }),
    )
    .await
}

async fn warren_burst(node: &BenchNode, ids: &[String]) -> anyhow::Result<Burst> {
    all_at_once(
        "new sessions at once",
        ids.iter().map(|id| first_exec(&node.client, id)),
    )
    .await
}

/// Deletes every sandbox of `ids`, 16 at a time, each through `clients` in turn.
pub(crate) async fn delete_all(clients: &[Client], ids: &[String]) {
    use futures_util::StreamExt;
    futures_util::stream::iter(ids.iter().enumerate())
        .for_each_concurrent(16, |(i, id)| async move {
            let _ = clients[i % clients.len()].delete_sandbox(id).await;
        })
        .await;
}

async fn warm_ready(node: &BenchNode) -> anyhow::Result<usize> {
    node.metric("warren_warm_containers ").await
}

/// Waits (at most 900 s) until the node holds `at_least` warm containers ready: how many it
/// holds then, and how long that took.
async fn wait_ready(node: &BenchNode, at_least: usize) -> anyhow::Result<(usize, Duration)> {
    let t = Instant::now();
    let deadline = t + Duration::from_secs(900);
    let mut ready = warm_ready(node).await?;
    while ready < at_least && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        ready = warm_ready(node).await?;
    }
    Ok((ready, t.elapsed()))
}

fn mem_available_mb() -> u64 {
    warren_node::runtime::host_load::memory_available_mb().unwrap_or(0)
}

fn add_row(table: &mut Table, name: &str, ours: &Burst, docker: &Burst, target: &str) {
    let runs = docker.ok.len() + docker.failed.len();
    table.add_sampled(
        name,
        &ours.ok,
        &format!("{runs} x docker run at once"),
        &docker.ok,
        target,
    );
}

/// Two bursts of `n` new sessions on one node (pool floor 4, ceiling `n`).
pub async fn bursts(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let ceiling = n.to_string();
    let node = BenchNode::start_with(4, &["--warm-max", &ceiling]).await?;
    node.client.sh("bench-prime", "true").await?;
    node.client.delete_sandbox("bench-prime").await?;
    node.wait_warm().await?;

    eprintln!("bench burst: {n} x docker run --rm at once");
    let docker = docker_burst(&node.image, n).await?;

    eprintln!("bench burst: {n} new sessions at once, pool at its floor");
    let first_ids: Vec<String> = (0..n).map(|i| format!("bench-burst1-{i}")).collect();
    let first = warren_burst(&node, &first_ids).await?;
    delete_all(std::slice::from_ref(&node.client), &first_ids).await;

    // The pool refills to the burst's size in the background; measured to the last one.
    eprintln!("bench burst: waiting for the pool to refill to {n}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (ready_before, mem_before) = (warm_ready(&node).await?, mem_available_mb());
    let (ready, refill) = wait_ready(&node, n).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mem_after = mem_available_mb();
    let grown = ready.saturating_sub(ready_before);
    let per_container = mem_before.saturating_sub(mem_after) as f64 / grown.max(1) as f64;

    eprintln!("bench burst: {n} new sessions at once, pool grown to {ready}");
    let second_ids: Vec<String> = (0..n).map(|i| format!("bench-burst2-{i}")).collect();
    let second = warren_burst(&node, &second_ids).await?;
    delete_all(std::slice::from_ref(&node.client), &second_ids).await;

    add_row(
        table,
        &format!("burst of {n}, pool at its floor"),
        &first,
        &docker,
        "0 failures",
    );
    add_row(
        table,
        &format!("burst of {n}, pool grown"),
        &second,
        &docker,
        "p50 <= 2 s, p99 <= 5 s",
    );
    for (name, b) in [("pool at its floor", &first), ("pool grown", &second)] {
        table.note(format!(
            "burst of {n} ({name}): {} ok, {} failed, wall {:.1} s = {:.3}x of {n} x docker run at once ({:.1} s, {} failed)",
            b.ok.len(),
            b.failed.len(),
            b.wall.as_secs_f64(),
            b.wall.as_secs_f64() / docker.wall.as_secs_f64(),
            docker.wall.as_secs_f64(),
            docker.failed.len(),
        ));
    }
    table.note(format!(
        "warm pool: refilled from {ready_before} to {ready} in {:.1} s ({:.2} containers/s); host memory per ready container {per_container:.1} MiB (MemAvailable drop over the refill)",
        refill.as_secs_f64(),
        grown as f64 / refill.as_secs_f64().max(0.001),
    ));
    Ok(())
}

/// One agent session: get-or-create with its first exec (timed: the time to first exec),
/// two more execs, a file written, a moment idle, then sleep.
async fn session(c: warren_client::Client, id: String) -> Result<Duration, String> {
    let t = Instant::now();
    first_exec(&c, &id).await?;
    let to_first = t.elapsed();
    for cmd in ["echo hello > /workspace/a", "cat /workspace/a"] {
        c.sh(&id, cmd).await.map_err(|e| e.to_string())?;
    }
    c.write_file(&id, "/workspace/notes.txt", "notes", None)
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.sleep(&id).await.map_err(|e| e.to_string())?;
    Ok(to_first)
}

/// Sessions arriving at `rate` per second for `secs` seconds, on a node whose pool follows
/// demand (it learns the rate as the sessions come), against Docker's sustained rate of
/// sequential `docker create` + `docker start` of the same image, measured in the same run.
pub async fn sustained(rate: f64, secs: u64, table: &mut Table) -> anyhow::Result<()> {
    let node = BenchNode::start_with(4, &["--warm-max", "256"]).await?;
    node.client.sh("bench-prime", "true").await?;
    node.client.delete_sandbox("bench-prime").await?;
    node.wait_warm().await?;

    // Docker's own sustained rate: one create + start after another, for at most `secs`.
    eprintln!("bench sessions: sequential docker create + start for {secs} s");
    let t = Instant::now();
    let mut made = Vec::new();
    while t.elapsed() < Duration::from_secs(secs) && made.len() < 1000 {
        let out = tokio::process::Command::new("docker")
            .args([
                "create",
                "--label",
                "warren.bench=1",
                &node.image,
                "sleep",
                "30",
            ])
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "docker create failed");
        let cid = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let started = tokio::process::Command::new("docker")
            .args(["start", &cid])
            .output()
            .await?;
        anyhow::ensure!(started.status.success(), "docker start failed");
        made.push(cid);
    }
    let docker_rate = made.len() as f64 / t.elapsed().as_secs_f64();
    for chunk in made.chunks(50) {
        let _ = tokio::process::Command::new("docker")
            .args(["rm", "-f"])
            .args(chunk)
            .output()
            .await;
    }

    let n = ((rate * secs as f64).round() as usize).clamp(1, 2000);
    eprintln!("bench sessions: {n} sessions arriving at {rate}/s");
    let gap = Duration::from_secs_f64(1.0 / rate);
    let t = Instant::now();
    let mut running = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep_until((t + gap * i as u32).into()).await;
        let c = node.client.clone();
        running.push(tokio::spawn(session(c, format!("bench-sess-{i}"))));
    }
    let mut ok = Vec::new();
    let mut errors = Vec::new();
    let bar = crate::progress::bar(n, "sessions answered");
    for r in running {
        let answered = tokio::time::timeout(Duration::from_secs(600), r).await;
        bar.inc(1);
        match answered {
            Ok(Ok(Ok(d))) => ok.push(d),
            Ok(Ok(Err(e))) => errors.push(e),
            Ok(Err(e)) => errors.push(e.to_string()),
            Err(_) => errors.push("no answer within 600 s".into()),
        }
    }
    bar.finish_and_clear();
    let wall = t.elapsed();
    let taken = node
        .metric("warren_warm_takes_total{outcome=\"taken\"} ")
        .await?;
    let cold = node
        .metric("warren_warm_takes_total{outcome=\"cold\"} ")
        .await?;
    let ids: Vec<String> = (0..n).map(|i| format!("bench-sess-{i}")).collect();
    delete_all(std::slice::from_ref(&node.client), &ids).await;
    table.add_sampled(
        &format!("sessions at {rate}/s, first exec"),
        &ok,
        "— (rate below)",
        &[],
        "0 failures",
    );
    table.note(format!(
        "sessions: {n} arriving at {rate}/s ({:.2}x of Docker's sustained {docker_rate:.2} create+start/s, sequential, same run): {} ok, {} failed{}, all done in {:.1} s; containers taken warm {taken}, started cold {cold} (priming included)",
        rate / docker_rate,
        ok.len(),
        errors.len(),
        errors.first().map(|e| format!(" (first: {e})")).unwrap_or_default(),
        wall.as_secs_f64(),
    ));
    Ok(())
}

/// Two bursts of `n` new sessions of an image besides the default (a tag of it here: no
/// registry), named in `--warm-image`: the first finds that image's pool empty (it starts
/// from none) and is as fast as Docker lets it be; the second finds the pool grown to the
/// first burst, as the default image's does. Docker's baseline: `n` concurrent `docker run`
/// of that image, same run.
pub async fn second_image_bursts(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let base = warren_node::config::DEFAULT_IMAGE;
    let second = "warren/sandbox:bench-second";
    let tagged = tokio::process::Command::new("docker")
        .args(["tag", base, second])
        .status()
        .await?;
    anyhow::ensure!(tagged.success(), "cannot tag {base} as {second}");
    // Room for the default image's floor and the whole burst.
    let ceiling = (n + 4).to_string();
    let node = BenchNode::start_with(4, &["--warm-max", &ceiling, "--warm-image", second]).await?;
    node.wait_warm().await?;
    let req = warren_api::sandbox::CreateSandboxRequest {
        image: Some(second.to_string()),
        ..Default::default()
    };
    let burst = |what: &'static str, ids: Vec<String>| {
        let (c, req) = (&node.client, &req);
        async move {
            all_at_once(
                what,
                ids.into_iter().map(|id| async move {
                    c.put_sandbox(&id, req).await.map_err(|e| e.to_string())?;
                    first_exec(c, &id).await
                }),
            )
            .await
        }
    };

    eprintln!("bench second image: {n} x docker run --rm {second} at once");
    let docker = docker_burst(second, n).await?;
    eprintln!("bench second image: {n} new sessions at once, its pool empty");
    let first_ids: Vec<String> = (0..n).map(|i| format!("bench-second1-{i}")).collect();
    let first = burst("second image, pool empty", first_ids.clone()).await?;
    delete_all(std::slice::from_ref(&node.client), &first_ids).await;

    eprintln!("bench second image: waiting for its pool to grow to {n}");
    let (ready, refill) = wait_ready(&node, n + node.warm).await?;
    eprintln!("bench second image: {n} new sessions at once, its pool grown");
    let second_ids: Vec<String> = (0..n).map(|i| format!("bench-second2-{i}")).collect();
    let grown = burst("second image, pool grown", second_ids.clone()).await?;
    delete_all(std::slice::from_ref(&node.client), &second_ids).await;
    let taken = node
        .metric("warren_warm_takes_total{outcome=\"taken\"} ")
        .await?;

    add_row(
        table,
        &format!("burst of {n}, second image, pool empty"),
        &first,
        &docker,
        "0 failures",
    );
    add_row(
        table,
        &format!("burst of {n}, second image, pool grown"),
        &grown,
        &docker,
        "p50 <= 2 s, p99 <= 5 s",
    );
    for (name, b) in [("pool empty", &first), ("pool grown", &grown)] {
        table.note(format!(
            "burst of {n} of a second image ({name}): {} ok, {} failed, wall {:.1} s = {:.3}x of {n} x docker run at once ({:.1} s)",
            b.ok.len(),
            b.failed.len(),
            b.wall.as_secs_f64(),
            b.wall.as_secs_f64() / docker.wall.as_secs_f64(),
            docker.wall.as_secs_f64(),
        ));
    }
    table.note(format!(
        "second image's pool: grew to {} ready in all (default image's floor {} included) in {:.1} s after the first burst; containers taken warm over both bursts: {taken}",
        ready,
        node.warm,
        refill.as_secs_f64(),
    ));
    Ok(())
}
