//! Terminals: named shells on pseudo-terminals that outlive the sockets attached to them.
//!
//! Each terminal keeps its recent output in an [`OutputLog`] addressed by cursor; every
//! attached socket replays from its cursor, then follows live output. The shell's exit is
//! announced to every socket, and the name becomes free for a new shell.

mod attach;
mod log;
mod pty;

pub use attach::attach;

use crate::reaper::{wait_exit, Reaper};
use log::OutputLog;
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use warren_api::terminal::{TerminalQuery, REPLAY_BYTES};
use warren_api::{ApiError, ErrorCode};

/// Most terminals one sandbox may hold at once.
pub const MAX_TERMINALS: usize = 64;
const DEFAULT_COLS: u16 = 80;
const DEFAULT_ROWS: u16 = 24;
const DEFAULT_SHELL: &str = "bash";
/// How long output still draining after the shell's exit may delay the exit message.
const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(300);

/// What sockets follow: how far output has come, and the shell's exit code once it ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    pub end: u64,
    pub exit: Option<i32>,
}

pub struct Terminal {
    pub name: String,
    pub pid: i32,
    shell: String,
    master: pty::Master,
    log: Mutex<OutputLog>,
    progress: watch::Sender<Progress>,
    input: tokio::sync::Mutex<()>,
    size: Mutex<(u16, u16)>,
    attached: AtomicUsize,
}

/// `GET /terminals` entries.
#[derive(Debug, Clone, Serialize)]
pub struct TerminalInfo {
    pub name: String,
    pub pid: i32,
    pub shell: String,
    pub cols: u16,
    pub rows: u16,
    pub cursor: u64,
    pub attached: usize,
}

impl Terminal {
    pub fn info(&self) -> TerminalInfo {
        let (cols, rows) = *self.size.lock().expect("size lock");
        TerminalInfo {
            name: self.name.clone(),
            pid: self.pid,
            shell: self.shell.clone(),
            cols,
            rows,
            cursor: self.progress.borrow().end,
            attached: self.attached.load(Ordering::Relaxed),
        }
    }

    /// Sends keystrokes to the shell.
    pub async fn write(&self, data: &[u8]) -> std::io::Result<()> {
        let _one_writer = self.input.lock().await;
        self.master.write_all(data).await
    }

    pub fn resize(&self, cols: u16, rows: u16) -> std::io::Result<()> {
        self.master.resize(cols, rows)?;
        *self.size.lock().expect("size lock") = (cols, rows);
        Ok(())
    }

    /// Output from `cursor` on, and where it really starts.
    pub fn output_since(&self, cursor: u64) -> (u64, Vec<u8>) {
        self.log.lock().expect("log lock").since(cursor)
    }

    pub fn follow(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// Copies the pty's output into the log until no process holds the slave side.
    async fn pump(self: Arc<Self>) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match self.master.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let end = {
                        let mut log = self.log.lock().expect("log lock");
                        log.push(&buf[..n]);
                        log.end()
                    };
                    self.progress.send_modify(|p| p.end = end);
                }
            }
        }
    }
}

pub struct Terminals {
    reaper: Arc<Reaper>,
    base_env: Arc<crate::sandbox_env::SandboxEnv>,
    map: Mutex<HashMap<String, Arc<Terminal>>>,
}

impl Terminals {
    pub fn new(reaper: Arc<Reaper>, base_env: Arc<crate::sandbox_env::SandboxEnv>) -> Arc<Self> {
        Arc::new(Terminals {
            reaper,
            base_env,
            map: Mutex::new(HashMap::new()),
        })
    }

    pub fn list(&self) -> Vec<TerminalInfo> {
        let mut v: Vec<_> = self
            .map
            .lock()
            .expect("terminals lock")
            .values()
            .map(|t| t.info())
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// The terminal called `name`, started when it does not run. An explicit size resizes
    /// a running one (a reconnecting client brings its current size).
    pub fn open(
        self: &Arc<Self>,
        name: &str,
        q: &TerminalQuery,
    ) -> Result<Arc<Terminal>, ApiError> {
        warren_api::ids::validate_name("terminal", name)?;
        q.validate()?;
        let mut map = self.map.lock().expect("terminals lock");
        if let Some(t) = map.get(name) {
            if let (Some(c), Some(r)) = (q.cols, q.rows) {
                t.resize(c, r)
                    .map_err(|e| ApiError::internal(format!("cannot resize terminal: {e}")))?;
            }
            return Ok(t.clone());
        }
        if map.len() >= MAX_TERMINALS {
            return Err(ApiError::new(
                ErrorCode::Conflict,
                format!("this sandbox already runs {MAX_TERMINALS} terminals; exit or delete one"),
            ));
        }
        let shell_name = q.shell.as_deref().unwrap_or(DEFAULT_SHELL);
        let mut env = self.base_env.current();
        let shell = resolve(shell_name, env.get("PATH").map(String::as_str)).ok_or_else(|| {
            ApiError::invalid(format!(
                "shell {shell_name:?} is not installed in this sandbox"
            ))
        })?;
        let (cols, rows) = (
            q.cols.unwrap_or(DEFAULT_COLS),
            q.rows.unwrap_or(DEFAULT_ROWS),
        );
        env.insert("TERM".into(), "xterm-256color".into());
        env.insert("COLORTERM".into(), "truecolor".into());
        env.insert("WARREN_TERMINAL".into(), name.into());
        let cwd = Path::new(warren_api::exec::DEFAULT_CWD);
        let cwd = if cwd.is_dir() { cwd } else { Path::new("/") };
        let spawned = pty::spawn(&self.reaper, &shell, &env, cwd, cols, rows)
            .map_err(|e| ApiError::internal(format!("cannot start {}: {e}", shell.display())))?;
        let (progress, _) = watch::channel(Progress::default());
        let t = Arc::new(Terminal {
            name: name.to_string(),
            pid: spawned.pid,
            shell: shell.display().to_string(),
            master: spawned.master,
            log: Mutex::new(OutputLog::new(REPLAY_BYTES)),
            progress,
            input: tokio::sync::Mutex::new(()),
            size: Mutex::new((cols, rows)),
            attached: AtomicUsize::new(0),
        });
        map.insert(name.to_string(), t.clone());
        let pump = tokio::spawn(t.clone().pump());
        let this = self.clone();
        let (term, mut exit) = (t.clone(), spawned.exit);
        tokio::spawn(async move {
            let status = wait_exit(&mut exit).await;
            // Output written just before the exit may still be in the pty: let it drain.
            let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, pump).await;
            {
                let mut map = this.map.lock().expect("terminals lock");
                if map.get(&term.name).is_some_and(|t| Arc::ptr_eq(t, &term)) {
                    map.remove(&term.name);
                }
            }
            term.progress.send_modify(|p| p.exit = Some(status.code));
        });
        Ok(t)
    }

    /// Ends a terminal's shell and everything in its session (hangup, then kill).
    pub async fn close(&self, name: &str) -> Result<(), ApiError> {
        warren_api::ids::validate_name("terminal", name)?;
        let t = self.map.lock().expect("terminals lock").get(name).cloned();
        let Some(t) = t else {
            return Ok(());
        };
        // SAFETY: signalling the process group the shell leads (its session).
        unsafe { libc::kill(-t.pid, libc::SIGHUP) };
        let mut follow = t.follow();
        let ended = tokio::time::timeout(Duration::from_secs(2), async {
            while follow.borrow_and_update().exit.is_none() {
                if follow.changed().await.is_err() {
                    break;
                }
            }
        })
        .await;
        if ended.is_err() {
            // SAFETY: as above.
            unsafe { libc::kill(-t.pid, libc::SIGKILL) };
        }
        Ok(())
    }
}

/// A program name looked up in `path`, or an absolute path that exists.
fn resolve(shell: &str, path: Option<&str>) -> Option<PathBuf> {
    if shell.contains('/') {
        let p = PathBuf::from(shell);
        return (p.is_absolute() && p.is_file()).then_some(p);
    }
    path.unwrap_or("/usr/bin:/bin")
        .split(':')
        .map(|d| Path::new(d).join(shell))
        .find(|p| p.is_file())
}
