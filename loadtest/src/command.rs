//! Programs the benchmarks time (Docker's CLI, OCI runtimes), run to completion.

use std::process::Command;
use std::time::{Duration, Instant};

/// Runs `program args`; its trimmed stdout and how long it took, or an error naming the
/// command and what it said on stderr.
pub fn run(program: &str, args: &[&str]) -> anyhow::Result<(String, Duration)> {
    let t = Instant::now();
    let out = Command::new(program).args(args).output()?;
    let took = t.elapsed();
    anyhow::ensure!(
        out.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok((
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        took,
    ))
}

/// `docker args`, timed.
pub fn docker(args: &[&str]) -> anyhow::Result<Duration> {
    run("docker", args).map(|(_, took)| took)
}
