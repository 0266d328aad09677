//! Snapshot, restore and fork churn (`churn`): `workers` agents at once, each doing
//! `rounds` times: a new sandbox with a small workspace (a git-checkout-sized tree of
//! ~4 MiB), a snapshot of it, a restore of that snapshot into a second new sandbox, a fork
//! of the first, and everything deleted again. The baseline, in the same run and with the
//! same concurrency: a container with the same files, `docker commit` of it, and a
//! `docker run -d` from the committed image (what a restore or a fork is with Docker
//! alone), then all removed.

use crate::node::BenchNode;
use crate::report::Table;
use std::time::{Duration, Instant};
use warren_api::sandbox::CreateSandboxRequest;
use warren_api::snapshot::{CreateSnapshotRequest, ForkRequest};
use warren_client::Client;

/// 200 files of 16 KiB of text and 20 of 32 KiB random: a small repository's checkout.
const MAKE_FILES: &str = "set -e; mkdir -p /workspace/repo/src /workspace/repo/bin; \
    for i in $(seq 1 200); do head -c 12000 /dev/urandom | base64 > /workspace/repo/src/$i.txt; done; \
    for i in $(seq 1 20); do head -c 32768 /dev/urandom > /workspace/repo/bin/$i; done";

#[derive(Default)]
struct Times {
    snapshot: Vec<Duration>,
    restore: Vec<Duration>,
    fork: Vec<Duration>,
    failed: Vec<String>,
}

impl Times {
    fn merge(&mut self, other: Times) {
        self.snapshot.extend(other.snapshot);
        self.restore.extend(other.restore);
        self.fork.extend(other.fork);
        self.failed.extend(other.failed);
    }
}

async fn timed<T, E: std::fmt::Display>(
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<(T, Duration), String> {
    let t = Instant::now();
    f.await.map(|v| (v, t.elapsed())).map_err(|e| e.to_string())
}

/// One agent's rounds on warren.
async fn warren_worker(c: Client, w: usize, rounds: usize, deadline: Instant) -> Times {
    let mut times = Times::default();
    let empty: CreateSandboxRequest =
        serde_json::from_value(serde_json::json!({})).expect("an empty create request parses");
    for r in 0..rounds {
        if Instant::now() > deadline {
            break;
        }
        let (src, copy) = (
            format!("bench-churn-{w}-{r}"),
            format!("bench-churn-{w}-{r}-r"),
        );
        let round = async {
            let made = c.sh(&src, MAKE_FILES).await.map_err(|e| e.to_string())?;
            if made.exit_code != 0 {
                return Err(format!("making files: exit {}", made.exit_code));
            }
            let (snap, took) =
                timed(c.create_snapshot(&src, &CreateSnapshotRequest::default())).await?;
            times.snapshot.push(took);
            c.put_sandbox(&copy, &empty)
                .await
                .map_err(|e| e.to_string())?;
            let (_, took) = timed(c.restore(&copy, &snap.id)).await?;
            times.restore.push(took);
            let req = ForkRequest {
                count: 1,
                ids: None,
            };
            let (forked, took) = timed(c.fork(&src, &req)).await?;
            times.fork.push(took);
            for s in &forked.sandboxes {
                let _ = c.delete_sandbox(&s.id).await;
            }
            let _ = c.delete_snapshot(&forked.snapshot.id).await;
            let _ = c.delete_snapshot(&snap.id).await;
            Ok::<(), String>(())
        }
        .await;
        if let Err(e) = round {
            times.failed.push(e);
        }
        let _ = c.delete_sandbox(&src).await;
        let _ = c.delete_sandbox(&copy).await;
    }
    times
}

/// `docker args`, timed; the error as text, as a round records it.
fn docker(args: &[&str]) -> Result<Duration, String> {
    crate::command::docker(args).map_err(|e| e.to_string())
}

/// One agent's rounds with Docker alone (blocking: run on a blocking thread).
fn docker_worker(image: &str, w: usize, rounds: usize, deadline: Instant) -> Times {
    let mut times = Times::default();
    let tag = hex::encode(rand::random::<[u8; 3]>());
    for r in 0..rounds {
        if Instant::now() > deadline {
            break;
        }
        let (name, copy) = (
            format!("wb-churn-{tag}-{w}-{r}"),
            format!("wb-churn-{tag}-{w}-{r}-r"),
        );
        let committed = format!("wb-churn-{tag}-{w}-{r}:1");
        let round = (|| {
            docker(&["run", "-d", "--name", &name, image, "sleep", "300"])?;
            docker(&["exec", &name, "sh", "-c", MAKE_FILES])?;
            let took = docker(&["commit", &name, &committed])?;
            times.snapshot.push(took);
            let took = docker(&["run", "-d", "--name", &copy, &committed, "sleep", "300"])?;
            times.restore.push(took);
            Ok::<(), String>(())
        })();
        if let Err(e) = round {
            times.failed.push(e);
        }
        let _ = docker(&["rm", "-f", &name, &copy]);
        let _ = docker(&["rmi", "-f", &committed]);
    }
    times
}

pub async fn churn(workers: usize, rounds: usize, table: &mut Table) -> anyhow::Result<()> {
    let node = BenchNode::start().await?;
    node.client.sh("bench-prime", "true").await?;
    node.client.delete_sandbox("bench-prime").await?;
    let deadline = Instant::now() + Duration::from_secs(600);

    eprintln!("bench churn: {workers} workers x {rounds} rounds with Docker alone");
    let t = Instant::now();
    let mut theirs = Times::default();
    let handles: Vec<_> = (0..workers)
        .map(|w| {
            let image = node.image.clone();
            tokio::task::spawn_blocking(move || docker_worker(&image, w, rounds, deadline))
        })
        .collect();
    for h in handles {
        theirs.merge(h.await?);
    }
    let docker_wall = t.elapsed();

    eprintln!("bench churn: {workers} workers x {rounds} rounds on warren");
    let t = Instant::now();
    let mut ours = Times::default();
    let handles: Vec<_> = (0..workers)
        .map(|w| tokio::spawn(warren_worker(node.client.clone(), w, rounds, deadline)))
        .collect();
    for h in handles {
        ours.merge(h.await?);
    }
    let wall = t.elapsed();

    let rows = [
        (
            "snapshot",
            &ours.snapshot,
            "docker commit",
            &theirs.snapshot,
        ),
        (
            "restore into a new sandbox",
            &ours.restore,
            "docker run -d from the committed image",
            &theirs.restore,
        ),
        (
            "fork (1 copy)",
            &ours.fork,
            "docker run -d from the committed image",
            &theirs.restore,
        ),
    ];
    for (what, ours_s, base_name, base_s) in rows {
        table.add_sampled(
            &format!("churn, {workers} at once: {what}"),
            ours_s,
            &format!("{base_name} (n={})", base_s.len()),
            base_s,
            "p50 <= 1x",
        );
    }
    let rounds_done = |t: &Times| t.snapshot.len();
    table.note(format!(
        "churn: warren {} rounds in {:.1} s ({} failed{}); Docker {} rounds in {:.1} s ({} failed{})",
        rounds_done(&ours),
        wall.as_secs_f64(),
        ours.failed.len(),
        ours.failed
            .first()
            .map(|e| format!(", first: {e}"))
            .unwrap_or_default(),
        rounds_done(&theirs),
        docker_wall.as_secs_f64(),
        theirs.failed.len(),
        theirs
            .failed
            .first()
            .map(|e| format!(", first: {e}"))
            .unwrap_or_default(),
    ));
    Ok(())
}
