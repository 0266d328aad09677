//! A persistent bash process: the engine behind sessions.
//!
//! The shell reads wrapper lines on its stdin. Each call's script is written to a file and
//! evaluated at top level (so `cd`, `export`, functions and aliases persist), with stdin from a
//! file and stdout/stderr into FIFOs that the guest reads while the command runs. When the
//! script ends, the shell dumps its state (exported variables, functions, aliases, cwd) and
//! reports `<seq> <status>` on fd 3, a pipe that user code never sees.
//!
//! A call with its own `cwd` or `env` runs in a subshell, so neither leaks into the session.
//! A timeout kills the shell with everything the call started; the next call gets a new shell
//! restored from the last state dump. A script that runs `exit` ends the shell for good: the
//! session reports it and starts fresh.

use crate::proctree::{self, TreeSpec};
use crate::reaper::{wait_exit, ExitWatch, Reaper};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// A chunk of a call's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Stdout(Bytes),
    Stderr(Bytes),
}

/// How a call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallEnd {
    Completed {
        exit_code: i32,
    },
    TimedOut,
    /// The script ended the shell itself (`exit N`, or a fatal `set -e`).
    ShellExited {
        exit_code: i32,
    },
}

/// One call.
#[derive(Debug, Clone, Default)]
pub struct CallSpec {
    /// Bash source to run.
    pub script: String,
    /// Run in a subshell with this cwd (does not persist).
    pub cwd: Option<String>,
    /// Run in a subshell with these variables exported (they do not persist).
    pub env: Option<BTreeMap<String, String>>,
    pub stdin: Vec<u8>,
    pub timeout: Option<Duration>,
}

/// How to start a shell.
#[derive(Debug, Clone)]
pub struct ShellStart {
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// A state dump to source after start-up (after a timeout killed the previous shell).
    pub restore: Option<PathBuf>,
}

pub struct Shell {
    pid: i32,
    stdin: pipe::Sender,
    status: BufReader<pipe::Receiver>,
    exit: ExitWatch,
    seq: u64,
    /// A call whose line was sent and whose end was never read (its caller gave up midway:
    /// see `abandoned_call`): its work directory and when it started.
    in_call: Option<(PathBuf, u64)>,
}

/// Single-quotes a string for bash.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

const PRELUDE: &str = r#"shopt -s expand_aliases
__warren_done() {
  local __warren_rc=$1
  builtin unset __warren_script
  { builtin declare -px; builtin declare -f; builtin alias -p; builtin printf 'builtin cd -- %q\n' "$PWD"; } >"$3" 2>/dev/null
  builtin printf '%s %s\n' "$2" "$__warren_rc" >&3
  return "$__warren_rc"
}
"#;

fn status_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: valid pointer to two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn mkfifo(path: &Path) -> io::Result<()> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in path"))?;
    // SAFETY: valid C string.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Shell {
    /// Starts bash in its own session, with the status pipe on fd 3.
    pub async fn start(reaper: &Reaper, start: &ShellStart) -> io::Result<Shell> {
        let (status_r, status_w) = status_pipe()?;
        let w = status_w.as_raw_fd();
        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc"])
            .env_clear()
            .envs(&start.env)
            .current_dir(&start.cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                if w == 3 {
                    if libc::fcntl(3, libc::F_SETFD, 0) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                } else if libc::dup2(w, 3) < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (mut child, exit) = reaper.spawn(&mut cmd)?;
        drop(status_w);
        let stdin = child.stdin.take().expect("piped stdin");
        let stdin = pipe::Sender::from_owned_fd(OwnedFd::from(stdin))?;
        let status = pipe::Receiver::from_owned_fd(status_r)?;
        let mut shell = Shell {
            pid: child.id() as i32,
            stdin,
            status: BufReader::new(status),
            exit,
            seq: 0,
            in_call: None,
        };
        let mut init = String::from(PRELUDE);
        if let Some(state) = &start.restore {
            init.push_str(&format!(
                "builtin . {} >/dev/null 2>&1\n",
                quote(&state.to_string_lossy())
            ));
        }
        init.push_str("builtin printf 'ready 0\\n' >&3\n");
        shell.stdin.write_all(init.as_bytes()).await?;
        let ready = tokio::time::timeout(Duration::from_secs(10), shell.read_status_line()).await;
        match ready {
            Ok(Ok(Some((tag, _)))) if tag == "ready" => Ok(shell),
            _ => {
                shell.kill().await;
                Err(io::Error::other("bash did not start"))
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the shell has exited.
    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// The work directory of a call this shell was given and whose caller stopped waiting
    /// before it ended (the call's future was dropped). Such a shell can never be trusted
    /// with another call: its output pipes lost their reader, so the shell may wait forever
    /// to open them, and its status line may never come. It must be killed.
    pub fn abandoned_call(&self) -> Option<&Path> {
        self.in_call.as_ref().map(|(work, _)| work.as_path())
    }

    /// Kills a shell whose call was abandoned, with what that call started, as a timeout
    /// does: background jobs of earlier calls keep running.
    pub async fn kill_abandoned(&mut self) {
        let started_since = self.in_call.as_ref().map(|(_, started)| *started);
        self.kill_since(started_since).await;
    }

    /// Kills the shell and the processes of its tree and session started at or after
    /// `started_since` (all of them when `None`), then waits up to 5 s for the shell's exit.
    async fn kill_since(&mut self, started_since: Option<u64>) {
        proctree::kill_tree(TreeSpec {
            root: self.pid,
            include_root: true,
            include_session: true,
            started_since,
        })
        .await;
        let _ = tokio::time::timeout(Duration::from_secs(5), wait_exit(&mut self.exit)).await;
    }

    async fn read_status_line(&mut self) -> io::Result<Option<(String, i32)>> {
        let mut line = String::new();
        if self.status.read_line(&mut line).await? == 0 {
            return Ok(None);
        }
        let mut parts = line.split_whitespace();
        let tag = parts.next().unwrap_or_default().to_string();
        let rc = parts.next().and_then(|s| s.parse().ok()).unwrap_or(-1);
        Ok(Some((tag, rc)))
    }

    /// Runs one call. Output goes to `out` as it is produced; if `out` is closed, output is
    /// discarded and the call still runs to its end. `work` is an empty private directory;
    /// the state dump is written to `state_tmp`.
    pub async fn call(
        &mut self,
        spec: &CallSpec,
        work: &Path,
        state_tmp: &Path,
        out: mpsc::Sender<Output>,
    ) -> io::Result<CallEnd> {
        self.seq += 1;
        let seq = self.seq;
        let cmd_path = work.join("cmd");
        let out_path = work.join("out");
        let err_path = work.join("err");
        std::fs::write(&cmd_path, &spec.script)?;
        let stdin_redirect = if spec.stdin.is_empty() {
            "/dev/null".to_string()
        } else {
            let p = work.join("in");
            std::fs::File::create(&p)?.write_all(&spec.stdin)?;
            quote(&p.to_string_lossy())
        };
        mkfifo(&out_path)?;
        mkfifo(&err_path)?;
        let (stop_out, out_task) = spawn_reader(&out_path, out.clone(), Output::Stdout)?;
        let (stop_err, err_task) = spawn_reader(&err_path, out, Output::Stderr)?;

        // The script is read by a builtin and evaluated at top level: no fork, and bash's own
        // error wording ("bash: x: command not found"), without our file names in it.
        let source = format!(
            "IFS= builtin read -r -d '' __warren_script <{} || :; builtin eval \"$__warren_script\"",
            quote(&cmd_path.to_string_lossy())
        );
        let body = if spec.cwd.is_some() || spec.env.is_some() {
            let mut s = String::from("( ");
            if let Some(cwd) = &spec.cwd {
                s.push_str(&format!("builtin cd -- {} || builtin exit 1; ", quote(cwd)));
            }
            for (k, v) in spec.env.iter().flatten() {
                s.push_str(&format!("builtin export {k}={}; ", quote(v)));
            }
            s.push_str(&source);
            s.push_str(" )");
            s
        } else {
            format!("{{ {source}; }}")
        };
        let line = format!(
            "{body} 3>&- <{stdin_redirect} >{} 2>{}; __warren_done $? {seq} {}\n",
            quote(&out_path.to_string_lossy()),
            quote(&err_path.to_string_lossy()),
            quote(&state_tmp.to_string_lossy()),
        );
        let started = proctree::now_ticks();
        self.in_call = Some((work.to_path_buf(), started));
        self.stdin.write_all(line.as_bytes()).await?;

        let timeout = spec.timeout.unwrap_or(Duration::MAX);
        let deadline = tokio::time::sleep(timeout.min(Duration::from_secs(365 * 24 * 3600)));
        tokio::pin!(deadline);
        let mut exit = self.exit.clone();
        let end = loop {
            tokio::select! {
                biased;
                line = self.read_status_line() => match line {
                    Ok(Some((tag, rc))) if tag == seq.to_string() => break CallEnd::Completed { exit_code: rc },
                    Ok(Some(_)) => continue,
                    // EOF on fd 3: the shell is gone; its status tells why.
                    Ok(None) | Err(_) => break CallEnd::ShellExited { exit_code: wait_exit(&mut exit).await.code },
                },
                status = wait_exit(&mut exit) => break CallEnd::ShellExited { exit_code: status.code },
                _ = &mut deadline => break CallEnd::TimedOut,
            }
        };
        self.in_call = None;
        if end == CallEnd::TimedOut {
            self.kill_since(Some(started)).await;
        }
        let _ = stop_out.send(());
        let _ = stop_err.send(());
        let _ = out_task.await;
        let _ = err_task.await;
        Ok(end)
    }

    /// Kills the shell and every process of its session or tree (background jobs included).
    pub async fn kill(&mut self) {
        self.kill_since(None).await;
    }
}

/// At the end of a call, read at most this much more from each stream.
const MAX_DRAIN: usize = 64 * 1024 * 1024;

/// Reads a FIFO until told to stop, then drains what is already in it. The FIFO is opened
/// read-write so that it never reports end-of-file while the shell opens and closes it.
fn spawn_reader(
    path: &Path,
    out: mpsc::Sender<Output>,
    wrap: fn(Bytes) -> Output,
) -> io::Result<(oneshot::Sender<()>, JoinHandle<()>)> {
    let rx = pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(path)?;
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            tokio::select! {
                biased;
                _ = &mut stop_rx => break,
                r = rx.readable() => {
                    if r.is_err() { return; }
                    match rx.try_read(&mut buf) {
                        Ok(0) => return,
                        Ok(n) => { let _ = out.send(wrap(Bytes::copy_from_slice(&buf[..n]))).await; }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(_) => return,
                    }
                }
            }
        }
        // The call has ended: what its foreground wrote is already in the pipe. Take that,
        // but do not wait on (or chase for long) a background job that keeps writing.
        let mut drained = 0usize;
        while drained < MAX_DRAIN {
            match rx.try_read(&mut buf) {
                Ok(n) if n > 0 => {
                    drained += n;
                    let _ = out.send(wrap(Bytes::copy_from_slice(&buf[..n]))).await;
                }
                _ => break,
            }
        }
    });
    Ok((stop_tx, task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }
}
