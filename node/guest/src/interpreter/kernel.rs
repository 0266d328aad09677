//! One kernel process: spawned through the reaper (so its exit status is ours), in its own
//! session and process group, with requests on fd 3, events on fd 4 and fd 1/2 as pipes.
//! A reader task turns the three output channels and the process's exit into one ordered
//! stream of [`KernelOutput`].

use super::protocol::{KernelEvent, KernelProgram, RunRequest};
use crate::proctree::{self, TreeSpec};
use crate::reaper::{wait_exit, ExitStatus, ExitWatch, Reaper};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

/// How long a kernel may take to say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// What comes out of a kernel, in order.
#[derive(Debug)]
pub enum KernelOutput {
    Event(KernelEvent),
    /// Raw bytes written to the kernel's fd 1 / fd 2 (subprocesses, C code).
    Stdout(Bytes),
    Stderr(Bytes),
    /// The process is gone; nothing follows.
    Exited(ExitStatus),
}

/// Why a kernel did not start.
#[derive(Debug)]
pub enum StartError {
    /// The interpreter is not installed.
    Missing,
    /// The kernel said it cannot work here.
    Fatal(String),
    Other(String),
}

pub struct Kernel {
    pid: i32,
    requests: pipe::Sender,
    outputs: mpsc::Receiver<KernelOutput>,
    exit: ExitWatch,
}

fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: valid pointer to two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 just returned these descriptors, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the child: `from` becomes `to` (without close-on-exec). `from` is above 10 (see
/// [`Kernel::start`]), so it is never one of the targets 3 and 4.
fn move_fd(from: i32, to: i32) -> io::Result<()> {
    // SAFETY: plain syscalls on descriptors of the child being set up.
    unsafe {
        if from == to {
            if libc::fcntl(to, libc::F_SETFD, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            return Ok(());
        }
        if libc::dup2(from, to) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

impl Kernel {
    /// Writes the script under `dir` and starts the kernel; returns once it is ready.
    pub async fn start(
        reaper: &Reaper,
        program: &KernelProgram,
        dir: &Path,
        env: &BTreeMap<String, String>,
        cwd: &str,
    ) -> Result<Kernel, StartError> {
        let script = write_script(dir, program).map_err(|e| {
            StartError::Other(format!(
                "cannot write the kernel script into {}: {e}",
                dir.display()
            ))
        })?;
        let other = |what: &str, e: io::Error| StartError::Other(format!("{what}: {e}"));
        if !Path::new(cwd).is_dir() {
            // Checked here so that ENOENT from the spawn can only mean a missing interpreter.
            return Err(StartError::Other(format!(
                "the context's cwd {cwd} is gone"
            )));
        }
        let (req_r, req_w) = cloexec_pipe().map_err(|e| other("pipe", e))?;
        let (ev_r, ev_w) = cloexec_pipe().map_err(|e| other("pipe", e))?;
        // Move the child's ends above 10 first, so that dup2 to 3 and 4 cannot clobber them.
        let high = |fd: &OwnedFd| -> io::Result<OwnedFd> {
            // SAFETY: plain syscall; the result is a new descriptor we own.
            let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 10) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: fcntl just returned it.
            Ok(unsafe { OwnedFd::from_raw_fd(n) })
        };
        let (req_r, ev_w) = {
            let moved = (
                high(&req_r).map_err(|e| other("dup", e))?,
                high(&ev_w).map_err(|e| other("dup", e))?,
            );
            drop((req_r, ev_w));
            moved
        };
        let (r, w) = (req_r.as_raw_fd(), ev_w.as_raw_fd());
        let mut cmd = Command::new(program.interpreter);
        cmd.arg(&script)
            .args(program.args)
            .env_clear()
            .envs(env)
            .current_dir(cwd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(io::Error::last_os_error());
                }
                move_fd(r, 3)?;
                move_fd(w, 4)?;
                Ok(())
            });
        }
        let (mut child, exit) = match reaper.spawn(&mut cmd) {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(StartError::Missing),
            Err(e) => return Err(other(&format!("cannot start {}", program.interpreter), e)),
        };
        drop((req_r, ev_w));
        let pid = child.id() as i32;
        let wrap = |fd: OwnedFd| pipe::Receiver::from_owned_fd(fd);
        let io = (|| -> io::Result<_> {
            let stdout = wrap(OwnedFd::from(child.stdout.take().expect("piped stdout")))?;
            let stderr = wrap(OwnedFd::from(child.stderr.take().expect("piped stderr")))?;
            let events = wrap(ev_r)?;
            let requests = pipe::Sender::from_owned_fd(req_w)?;
            Ok((stdout, stderr, events, requests))
        })();
        let (stdout, stderr, events, requests) = match io {
            Ok(x) => x,
            Err(e) => {
                kill_group(pid).await;
                return Err(other("kernel pipes", e));
            }
        };
        let (tx, outputs) = mpsc::channel(64);
        tokio::spawn(read_outputs(events, stdout, stderr, exit.clone(), tx));
        let mut kernel = Kernel {
            pid,
            requests,
            outputs,
            exit,
        };
        match tokio::time::timeout(START_TIMEOUT, kernel.wait_ready()).await {
            Ok(Ok(())) => Ok(kernel),
            Ok(Err(e)) => {
                kernel.kill().await;
                Err(e)
            }
            Err(_) => {
                kernel.kill().await;
                Err(StartError::Other(format!(
                    "the {} kernel did not start within {}s",
                    program.interpreter,
                    START_TIMEOUT.as_secs()
                )))
            }
        }
    }

    async fn wait_ready(&mut self) -> Result<(), StartError> {
        let mut stderr = Vec::new();
        loop {
            match self.outputs.recv().await {
                Some(KernelOutput::Event(KernelEvent::Ready { .. })) => return Ok(()),
                Some(KernelOutput::Event(KernelEvent::Fatal { message })) => {
                    return Err(StartError::Fatal(message))
                }
                Some(KernelOutput::Stderr(b)) => stderr.extend_from_slice(&b),
                Some(KernelOutput::Exited(status)) => return Err(exited(status.code, &stderr)),
                None => return Err(exited(-1, &stderr)),
                Some(_) => {}
            }
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn exited(&self) -> bool {
        self.exit.borrow().is_some()
    }

    /// Sends one run; its events follow on [`Kernel::next`].
    pub async fn send(&mut self, seq: u64, code: &str) -> io::Result<()> {
        let mut line = serde_json::to_vec(&RunRequest { seq, code }).map_err(io::Error::other)?;
        line.push(b'\n');
        self.requests.write_all(&line).await
    }

    /// The next output; `None` once the kernel is gone and everything was read.
    pub async fn next(&mut self) -> Option<KernelOutput> {
        self.outputs.recv().await
    }

    /// Drops output produced between runs (a background thread's prints).
    pub fn discard_pending(&mut self) {
        while let Ok(o) = self.outputs.try_recv() {
            if let KernelOutput::Exited(_) = o {
                break;
            }
        }
    }

    /// SIGINT to the kernel's process group: KeyboardInterrupt in Python, an interrupted run
    /// in node; subprocesses of the run get it too.
    pub fn interrupt(&self) {
        // SAFETY: plain syscall; the kernel leads its own process group.
        unsafe { libc::kill(-self.pid, libc::SIGINT) };
    }

    /// Kills the kernel and everything in its session, and waits for its exit (bounded).
    pub async fn kill(&mut self) {
        kill_group(self.pid).await;
        let _ = tokio::time::timeout(Duration::from_secs(5), wait_exit(&mut self.exit)).await;
    }
}

fn exited(code: i32, stderr: &[u8]) -> StartError {
    StartError::Other(format!(
        "the kernel exited while starting (code {code}): {}",
        String::from_utf8_lossy(stderr).trim()
    ))
}

/// SIGKILLs a kernel's session (it was started with setsid, so its pid is the session id).
pub async fn kill_group(pid: i32) {
    proctree::kill_tree(TreeSpec {
        root: pid,
        include_root: true,
        include_session: true,
        started_since: None,
    })
    .await;
}

/// Writes the script atomically (a running kernel of another context may be reading it).
fn write_script(dir: &Path, program: &KernelProgram) -> io::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(program.file_name);
    if std::fs::read_to_string(&path).is_ok_and(|s| s == program.script) {
        return Ok(path);
    }
    let tmp = dir.join(format!(
        ".{}.{:08x}",
        program.file_name,
        crate::sessions::rand_u32()
    ));
    std::fs::write(&tmp, program.script)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Reads events (lines on fd 4) and fd 1/2 until the kernel exits. Before a `done` event is
/// passed on, what fd 1/2 already hold is passed on first, so output of the run's
/// subprocesses precedes the end of the run.
async fn read_outputs(
    events: pipe::Receiver,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
    mut exit: ExitWatch,
    tx: mpsc::Sender<KernelOutput>,
) {
    let mut events = BufReader::new(events);
    let mut line = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut events_open, mut out_open, mut err_open) = (true, true, true);
    loop {
        tokio::select! {
            r = events.read_until(b'\n', &mut line), if events_open => match r {
                Ok(0) | Err(_) => events_open = false,
                Ok(_) => {
                    let event = KernelEvent::parse(&line);
                    line.clear();
                    if let Some(e) = event {
                        if matches!(e, KernelEvent::Done { .. }) {
                            drain(&stdout, &stderr, &mut buf, &tx).await;
                        }
                        if tx.send(KernelOutput::Event(e)).await.is_err() {
                            return;
                        }
                    }
                }
            },
            r = stdout.readable(), if out_open => {
                out_open = r.is_ok() && forward(&stdout, &mut buf, &tx, KernelOutput::Stdout).await;
            }
            r = stderr.readable(), if err_open => {
                err_open = r.is_ok() && forward(&stderr, &mut buf, &tx, KernelOutput::Stderr).await;
            }
            status = wait_exit(&mut exit) => {
                // What it wrote before dying still counts.
                while let Ok(Ok(n)) = tokio::time::timeout(
                    Duration::from_millis(50),
                    events.read_until(b'\n', &mut line),
                ).await {
                    if n == 0 {
                        break;
                    }
                    if let Some(e) = KernelEvent::parse(&line) {
                        let _ = tx.send(KernelOutput::Event(e)).await;
                    }
                    line.clear();
                }
                drain(&stdout, &stderr, &mut buf, &tx).await;
                let _ = tx.send(KernelOutput::Exited(status)).await;
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Passes on one read from `rx`; false when the pipe is closed or broken (then only the
/// other channels and the exit are left to watch).
async fn forward(
    rx: &pipe::Receiver,
    buf: &mut [u8],
    tx: &mpsc::Sender<KernelOutput>,
    wrap: fn(Bytes) -> KernelOutput,
) -> bool {
    match rx.try_read(buf) {
        Ok(0) => false,
        Ok(n) => tx
            .send(wrap(Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_ok(),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => true,
        Err(_) => false,
    }
}

/// Passes on whatever fd 1/2 hold right now (bounded).
async fn drain(
    stdout: &pipe::Receiver,
    stderr: &pipe::Receiver,
    buf: &mut [u8],
    tx: &mpsc::Sender<KernelOutput>,
) {
    for (rx, wrap) in [
        (stdout, KernelOutput::Stdout as fn(Bytes) -> KernelOutput),
        (stderr, KernelOutput::Stderr),
    ] {
        let mut total = 0usize;
        while total < 64 * 1024 * 1024 {
            match rx.try_read(buf) {
                Ok(n) if n > 0 => {
                    total += n;
                    let _ = tx.send(wrap(Bytes::copy_from_slice(&buf[..n]))).await;
                }
                _ => break,
            }
        }
    }
}
