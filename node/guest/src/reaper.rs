//! Child processes and their exit statuses, for an agent that runs as PID 1.
//!
//! As init, the guest must reap every zombie in the container, including orphans it never
//! spawned. A blind `waitpid(-1)` would steal the statuses of our own children, so all spawning
//! goes through [`Reaper::spawn`], which registers the pid while holding the lock that the
//! reaping loop takes before it reaps. The loop peeks with `WNOWAIT` first, so a child that
//! the standard library reaps itself (a failed `exec`) is never reaped twice.

use std::collections::HashMap;
use std::io;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

/// How a process ended, in shell terms: its exit code, or 128 + the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: i32,
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn from_wait_status(status: libc::c_int) -> Self {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            ExitStatus {
                code: 128 + sig,
                signal: Some(sig),
            }
        } else {
            ExitStatus {
                code: libc::WEXITSTATUS(status),
                signal: None,
            }
        }
    }
}

/// Resolves when the process exits; cloneable, so several waiters can watch one process.
pub type ExitWatch = watch::Receiver<Option<ExitStatus>>;

#[derive(Default)]
pub struct Reaper {
    waiters: Mutex<HashMap<i32, watch::Sender<Option<ExitStatus>>>>,
}

impl Reaper {
    pub fn new() -> Arc<Self> {
        Arc::new(Reaper::default())
    }

    /// Spawns `cmd` and returns the child with a watch on its exit.
    pub fn spawn(&self, cmd: &mut Command) -> io::Result<(Child, ExitWatch)> {
        let mut waiters = self.waiters.lock().expect("reaper lock");
        let child = cmd.spawn()?;
        let (tx, rx) = watch::channel(None);
        waiters.insert(child.id() as i32, tx);
        Ok((child, rx))
    }

    /// Reaps every exited child now; returns how many were reaped.
    pub fn reap_ready(&self) -> usize {
        let mut reaped = 0;
        loop {
            // SAFETY: siginfo_t is plain data; waitid fills it in.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: valid pointer to a siginfo_t; WNOWAIT leaves the zombie in place.
            let r = unsafe {
                libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            // SAFETY: si_pid is valid for SIGCHLD-style siginfo filled by waitid.
            let pid = unsafe { info.si_pid() };
            if r != 0 || pid == 0 {
                return reaped;
            }
            let mut waiters = self.waiters.lock().expect("reaper lock");
            let mut status: libc::c_int = 0;
            // SAFETY: plain syscall on a pid we just saw exit.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                reaped += 1;
                if let Some(tx) = waiters.remove(&pid) {
                    let _ = tx.send(Some(ExitStatus::from_wait_status(status)));
                }
            }
        }
    }

    /// Runs forever: reaps on every SIGCHLD (and every second, in case a signal was merged).
    pub async fn run(self: Arc<Self>) {
        let mut sigchld = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("warren-guest: cannot watch SIGCHLD: {e}");
                return;
            }
        };
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = sigchld.recv() => {}
                _ = tick.tick() => {}
            }
            self.reap_ready();
        }
    }
}

/// Waits until the watched process exits.
pub async fn wait_exit(w: &mut ExitWatch) -> ExitStatus {
    loop {
        if let Some(s) = *w.borrow_and_update() {
            return s;
        }
        if w.changed().await.is_err() {
            // The sender is gone without a status: treat as killed.
            return (*w.borrow()).unwrap_or(ExitStatus {
                code: 137,
                signal: Some(9),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_decode_like_a_shell() {
        // Exit code 3 is encoded as 3 << 8; death by SIGKILL as the signal number itself.
        assert_eq!(
            ExitStatus::from_wait_status(3 << 8),
            ExitStatus {
                code: 3,
                signal: None
            }
        );
        assert_eq!(
            ExitStatus::from_wait_status(9),
            ExitStatus {
                code: 137,
                signal: Some(9)
            }
        );
    }

    #[tokio::test]
    async fn spawned_children_report_their_exit() {
        let reaper = Reaper::new();
        tokio::spawn(reaper.clone().run());
        let (_child, mut w) = reaper
            .spawn(Command::new("sh").args(["-c", "exit 7"]))
            .unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), wait_exit(&mut w))
            .await
            .unwrap();
        assert_eq!(status.code, 7);
    }

    #[tokio::test]
    async fn exec_failure_does_not_confuse_the_reaper() {
        let reaper = Reaper::new();
        tokio::spawn(reaper.clone().run());
        assert!(reaper
            .spawn(&mut Command::new("/nonexistent/binary"))
            .is_err());
        let (_c, mut w) = reaper.spawn(&mut Command::new("true")).unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), wait_exit(&mut w))
            .await
            .unwrap();
        assert_eq!(status.code, 0);
    }
}
