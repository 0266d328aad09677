//! Running a helper command to completion with captured output and a timeout (git).

use crate::proctree::{self, TreeSpec};
use crate::reaper::{wait_exit, ExitStatus, Reaper};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::net::unix::pipe;

pub struct Captured {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

pub enum RunError {
    Spawn(std::io::Error),
    TimedOut { stderr: Vec<u8> },
}

/// Keeps at most this much of each stream.
const MAX_CAPTURE: usize = 1024 * 1024;

async fn read_capped(rx: pipe::Receiver) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut rx = rx;
    while let Ok(n) = rx.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = MAX_CAPTURE.saturating_sub(out.len());
        out.extend_from_slice(&buf[..n.min(room)]);
    }
    out
}

/// Runs `argv` in its own session; on timeout the whole tree is killed.
pub async fn run_capture(
    reaper: &Reaper,
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: &str,
    timeout: Duration,
) -> Result<Captured, RunError> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (mut child, mut exit) = reaper.spawn(&mut cmd).map_err(RunError::Spawn)?;
    let pid = child.id() as i32;
    let out = pipe::Receiver::from_owned_fd(OwnedFd::from(child.stdout.take().expect("piped")))
        .map_err(RunError::Spawn)?;
    let err = pipe::Receiver::from_owned_fd(OwnedFd::from(child.stderr.take().expect("piped")))
        .map_err(RunError::Spawn)?;
    let out_task = tokio::spawn(read_capped(out));
    let err_task = tokio::spawn(read_capped(err));
    let status = match tokio::time::timeout(timeout, wait_exit(&mut exit)).await {
        Ok(s) => s,
        Err(_) => {
            proctree::kill_tree(TreeSpec {
                root: pid,
                include_root: true,
                include_session: true,
                started_since: None,
            })
            .await;
            let stderr = tokio::time::timeout(Duration::from_secs(2), err_task)
                .await
                .ok()
                .and_then(|r| r.ok())
                .unwrap_or_default();
            out_task.abort();
            return Err(RunError::TimedOut { stderr });
        }
    };
    // Output is complete once every holder of the pipes is gone; do not wait on strays.
    let grace = Duration::from_secs(2);
    let stdout = tokio::time::timeout(grace, out_task)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let stderr = tokio::time::timeout(grace, err_task)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    Ok(Captured {
        status,
        stdout,
        stderr,
    })
}
