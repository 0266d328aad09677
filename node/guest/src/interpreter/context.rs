//! A context: one language, one kernel process at a time, runs serialized by a lock.
//! A kernel that dies is replaced at the next run (its state is lost); a run past its
//! timeout is interrupted, and its kernel killed when the interrupt does not end it.

use super::kernel::{kill_group, Kernel, KernelOutput, StartError};
use super::protocol::{self, KernelEvent};
use crate::reaper::{ExitStatus, Reaper};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, Mutex};
use warren_api::interpreter::{
    Context as ContextInfo, ExecutionError, Language, RunEvent, KERNEL_DIED_ERROR, TIMEOUT_ERROR,
};
use warren_api::sse::Utf8Chunker;
use warren_api::{ApiError, ErrorCode};

/// After an interrupt, how long a run has to end before its kernel is killed.
const INTERRUPT_GRACE: Duration = Duration::from_secs(2);

pub struct Context {
    pub info: ContextInfo,
    env: BTreeMap<String, String>,
    script_dir: PathBuf,
    /// Held for a whole run: this is what serializes runs of one context.
    state: Mutex<State>,
    /// The live kernel's pid (0: none), for deletion while a run holds the lock.
    pid: AtomicI32,
    deleted: AtomicBool,
}

struct State {
    kernel: Option<Kernel>,
    execution_count: u64,
}

fn start_error(language: Language, e: StartError) -> ApiError {
    let interpreter = protocol::program(language).interpreter;
    match e {
        StartError::Missing => ApiError::new(
            ErrorCode::UnsupportedLanguage,
            format!(
                "{} needs `{interpreter}`, which this sandbox's image does not have",
                language.as_str()
            ),
        ),
        StartError::Fatal(m) => ApiError::new(ErrorCode::UnsupportedLanguage, m),
        StartError::Other(m) => ApiError::internal(format!("cannot start the kernel: {m}")),
    }
}

impl Context {
    /// Creates the context and starts its kernel, so that a missing interpreter is an
    /// error now and the first run is warm.
    pub async fn start(
        reaper: &Reaper,
        info: ContextInfo,
        env: BTreeMap<String, String>,
        script_dir: PathBuf,
    ) -> Result<Context, ApiError> {
        let ctx = Context {
            info,
            env,
            script_dir,
            state: Mutex::new(State {
                kernel: None,
                execution_count: 0,
            }),
            pid: AtomicI32::new(0),
            deleted: AtomicBool::new(false),
        };
        {
            let mut state = ctx.state.lock().await;
            ctx.ensure_kernel(reaper, &mut state).await?;
        }
        Ok(ctx)
    }

    async fn ensure_kernel<'a>(
        &self,
        reaper: &Reaper,
        state: &'a mut State,
    ) -> Result<&'a mut Kernel, ApiError> {
        if state.kernel.as_ref().is_some_and(|k| k.exited()) {
            state.kernel = None;
        }
        if state.kernel.is_none() {
            let language = self.info.language;
            let program = protocol::program(language);
            let kernel = Kernel::start(
                reaper,
                &program,
                &self.script_dir,
                &self.env,
                &self.info.cwd,
            )
            .await
            .map_err(|e| start_error(language, e))?;
            self.pid.store(kernel.pid(), Ordering::SeqCst);
            state.kernel = Some(kernel);
            if self.deleted.load(Ordering::SeqCst) {
                self.kill_now().await;
            }
        }
        Ok(state.kernel.as_mut().expect("kernel just ensured"))
    }

    /// Marks the context deleted and kills its kernel, without waiting for a run.
    pub async fn delete(&self) {
        self.deleted.store(true, Ordering::SeqCst);
        self.kill_now().await;
    }

    async fn kill_now(&self) {
        let pid = self.pid.swap(0, Ordering::SeqCst);
        if pid > 0 {
            kill_group(pid).await;
        }
    }

    fn not_found(&self) -> ApiError {
        ApiError::new(
            ErrorCode::ContextNotFound,
            format!("context {} was deleted", self.info.id),
        )
    }

    /// Runs `code`, sending its events (without the final `complete`) to `out`; returns the
    /// execution count. Waits for the run before it in this context.
    pub async fn run(
        &self,
        reaper: &Reaper,
        code: &str,
        timeout: Option<Duration>,
        out: &mpsc::Sender<RunEvent>,
    ) -> Result<u64, ApiError> {
        let mut state = self.state.lock().await;
        if self.deleted.load(Ordering::SeqCst) {
            return Err(self.not_found());
        }
        state.execution_count += 1;
        let count = state.execution_count;
        let kernel = self.ensure_kernel(reaper, &mut state).await?;
        kernel.discard_pending();
        if let Err(e) = kernel.send(count, code).await {
            // The kernel died between runs: the next run starts a fresh one.
            state.kernel = None;
            send_error(
                out,
                KERNEL_DIED_ERROR,
                format!("the kernel is gone ({e}); the next run starts a fresh kernel"),
            )
            .await;
            return Ok(count);
        }
        let ended = self.follow(kernel, count, timeout, out).await;
        if ended == RunEnd::KernelGone {
            if let Some(mut k) = state.kernel.take() {
                k.kill().await;
            }
            self.pid.store(0, Ordering::SeqCst);
        }
        Ok(count)
    }

    /// Passes a run's events on until its `done`, its kernel's death or its timeout.
    async fn follow(
        &self,
        kernel: &mut Kernel,
        seq: u64,
        timeout: Option<Duration>,
        out: &mpsc::Sender<RunEvent>,
    ) -> RunEnd {
        let far = Duration::from_secs(365 * 24 * 3600);
        let deadline = tokio::time::sleep(timeout.unwrap_or(far).min(far));
        tokio::pin!(deadline);
        let mut timed_out = false;
        let mut timeout_reported = false;
        let (mut out_utf8, mut err_utf8) = (Utf8Chunker::default(), Utf8Chunker::default());
        let timeout_message = || {
            format!(
                "the run exceeded its timeout of {} ms and was interrupted",
                timeout.unwrap_or_default().as_millis()
            )
        };
        loop {
            tokio::select! {
                o = kernel.next() => match o {
                    Some(KernelOutput::Stdout(b)) => send_text(out, &mut out_utf8, &b, true).await,
                    Some(KernelOutput::Stderr(b)) => send_text(out, &mut err_utf8, &b, false).await,
                    Some(KernelOutput::Event(e)) => match e {
                        KernelEvent::Stdout { text } => { let _ = out.send(RunEvent::Stdout { text }).await; }
                        KernelEvent::Stderr { text } => { let _ = out.send(RunEvent::Stderr { text }).await; }
                        KernelEvent::Result(r) => { let _ = out.send(RunEvent::Result(r)).await; }
                        KernelEvent::Error(mut err) => {
                            if timed_out && !timeout_reported {
                                // The interrupt's KeyboardInterrupt is the timeout's error.
                                err.name = TIMEOUT_ERROR.to_string();
                                err.message = timeout_message();
                                timeout_reported = true;
                            }
                            let _ = out.send(RunEvent::error(&err)).await;
                        }
                        KernelEvent::Done { seq: s } if s == seq => {
                            flush_text(out, &mut out_utf8, &mut err_utf8).await;
                            if timed_out && !timeout_reported {
                                send_error(out, TIMEOUT_ERROR, timeout_message()).await;
                            }
                            return RunEnd::Done;
                        }
                        KernelEvent::Done { .. } | KernelEvent::Ready { .. } | KernelEvent::Fatal { .. } => {}
                    },
                    Some(KernelOutput::Exited(status)) => {
                        flush_text(out, &mut out_utf8, &mut err_utf8).await;
                        kernel_gone(out, Some(status), timed_out.then(timeout_message)).await;
                        return RunEnd::KernelGone;
                    }
                    None => {
                        flush_text(out, &mut out_utf8, &mut err_utf8).await;
                        kernel_gone(out, None, timed_out.then(timeout_message)).await;
                        return RunEnd::KernelGone;
                    }
                },
                _ = &mut deadline => {
                    if timed_out {
                        // The interrupt did not end the run: kill the kernel; its exit ends it.
                        kill_group(kernel.pid()).await;
                        deadline.as_mut().reset(tokio::time::Instant::now() + far);
                    } else {
                        timed_out = true;
                        kernel.interrupt();
                        deadline.as_mut().reset(tokio::time::Instant::now() + INTERRUPT_GRACE);
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunEnd {
    Done,
    KernelGone,
}

/// The error a run gets when its kernel is gone: the timeout's, when the kernel was killed
/// for not stopping, otherwise [`KERNEL_DIED_ERROR`].
async fn kernel_gone(
    out: &mpsc::Sender<RunEvent>,
    status: Option<ExitStatus>,
    timeout: Option<String>,
) {
    if let Some(t) = timeout {
        let m = format!("{t}; the kernel did not stop and was restarted, its state is lost");
        send_error(out, TIMEOUT_ERROR, m).await;
        return;
    }
    let how = match status {
        Some(ExitStatus {
            signal: Some(sig), ..
        }) => format!("was killed by signal {sig}"),
        Some(s) => format!("exited with code {}", s.code),
        None => "is gone".to_string(),
    };
    let m = format!("the kernel {how}; its state is lost, the next run starts a fresh kernel");
    send_error(out, KERNEL_DIED_ERROR, m).await;
}

async fn send_error(out: &mpsc::Sender<RunEvent>, name: &str, message: String) {
    let e = ExecutionError {
        name: name.to_string(),
        message,
        traceback: String::new(),
    };
    let _ = out.send(RunEvent::error(&e)).await;
}

async fn send_text(out: &mpsc::Sender<RunEvent>, c: &mut Utf8Chunker, b: &[u8], stdout: bool) {
    let ready = c.push(b);
    if ready.is_empty() {
        return;
    }
    let text = String::from_utf8_lossy(&ready).into_owned();
    let e = if stdout {
        RunEvent::Stdout { text }
    } else {
        RunEvent::Stderr { text }
    };
    let _ = out.send(e).await;
}

async fn flush_text(out: &mpsc::Sender<RunEvent>, o: &mut Utf8Chunker, e: &mut Utf8Chunker) {
    for (c, stdout) in [(o, true), (e, false)] {
        let rest = c.finish();
        if !rest.is_empty() {
            let text = String::from_utf8_lossy(&rest).into_owned();
            let ev = if stdout {
                RunEvent::Stdout { text }
            } else {
                RunEvent::Stderr { text }
            };
            let _ = out.send(ev).await;
        }
    }
}
