//! Background processes: each runs in its own session (setsid) with the env and cwd of a
//! shell session, its output framed into a log file, its status kept until evicted.

use crate::logstore::{LogStore, LogWriter, STDERR, STDOUT};
use crate::proctree::{self, TreeSpec};
use crate::reaper::{wait_exit, ExitStatus, ExitWatch};
use crate::sessions::{rand_u32, Sessions};
use crate::shell::quote;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::unix::pipe;
use warren_api::exec::Command as ApiCommand;
use warren_api::process::{Process, ProcessStatus, StartProcessRequest};
use warren_api::time::now_rfc3339;
use warren_api::{ApiError, ErrorCode};

/// Ended processes kept for listing and logs; older ones are forgotten with their logs.
const KEEP_ENDED: usize = 256;
/// After a process exits, wait this long for children that still hold its pipes.
const EXIT_DRAIN_GRACE: Duration = Duration::from_millis(250);

pub struct Processes {
    sessions: Arc<Sessions>,
    dir: PathBuf,
    map: Mutex<BTreeMap<String, Arc<ProcEntry>>>,
}

pub struct ProcEntry {
    pub id: String,
    pub pid: i32,
    pub command: String,
    pub session: String,
    pub started_at: String,
    pub exit: ExitWatch,
    pub log: Arc<LogStore>,
    status: Mutex<StatusInner>,
}

#[derive(Debug, Clone, Default)]
struct StatusInner {
    exit: Option<ExitStatus>,
    ended_at: Option<String>,
    killed: bool,
}

impl ProcEntry {
    pub fn to_api(&self) -> Process {
        // The exit as the collector records it: once the process's output is in its log, so
        // that logs read after an answer that says "exited" hold all of it.
        let st = self.status.lock().expect("process status lock").clone();
        let status = match st.exit {
            None => ProcessStatus::Running,
            Some(_) if st.killed => ProcessStatus::Killed,
            Some(e) if e.code == 0 => ProcessStatus::Completed,
            Some(_) => ProcessStatus::Failed,
        };
        Process {
            id: self.id.clone(),
            pid: self.pid as u32,
            command: self.command.clone(),
            status,
            exit_code: st.exit.map(|e| e.code),
            started_at: self.started_at.clone(),
            ended_at: st.ended_at,
        }
    }

    /// Waits up to `limit` until the process has exited and its output is in its log (the
    /// log ended); whether it has.
    pub async fn wait_ended(&self, limit: Duration) -> bool {
        let mut log = self.log.subscribe();
        let ended = async {
            while !log.borrow_and_update().ended {
                if log.changed().await.is_err() {
                    return;
                }
            }
        };
        tokio::time::timeout(limit, ended).await.is_ok() && self.log.state().ended
    }

    pub fn exit_status(&self) -> Option<ExitStatus> {
        (*self.exit.borrow()).or(self.status.lock().expect("process status lock").exit)
    }

    fn tree(&self) -> TreeSpec {
        TreeSpec {
            root: self.pid,
            include_root: true,
            include_session: true,
            started_since: None,
        }
    }
}

impl Processes {
    pub fn new(sessions: Arc<Sessions>, dir: PathBuf) -> Arc<Self> {
        Arc::new(Processes {
            sessions,
            dir,
            map: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn get(&self, id: &str) -> Result<Arc<ProcEntry>, ApiError> {
        self.map
            .lock()
            .expect("processes lock")
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::new(ErrorCode::ProcessNotFound, format!("no process {id:?}")))
    }

    pub fn list(&self) -> Vec<Process> {
        let entries: Vec<Arc<ProcEntry>> = self
            .map
            .lock()
            .expect("processes lock")
            .values()
            .cloned()
            .collect();
        let mut v: Vec<Process> = entries.iter().map(|e| e.to_api()).collect();
        v.sort_by(|a, b| a.started_at.cmp(&b.started_at).then(a.id.cmp(&b.id)));
        v
    }

    /// Starts a process. An id in use by a running process is a conflict; an ended one is
    /// replaced (so `id: "web"` can be restarted).
    pub async fn start(&self, req: &StartProcessRequest) -> Result<Process, ApiError> {
        let command = req.validate()?;
        let id = req
            .id
            .clone()
            .unwrap_or_else(|| format!("p-{:08x}", rand_u32()));
        if let Some(old) = self.map.lock().expect("processes lock").get(&id) {
            if old.exit_status().is_none() {
                return Err(ApiError::new(
                    ErrorCode::AlreadyExists,
                    format!("process {id:?} is running"),
                ));
            }
        }
        let session_name = req
            .session
            .clone()
            .unwrap_or_else(|| crate::sessions::default_session().to_string());
        let ctx = self.sessions.get_or_create(&session_name)?.context();

        let mut script = String::new();
        if let Some(state) = &ctx.state {
            script.push_str(&format!(
                "builtin . {} >/dev/null 2>&1\n",
                quote(&state.to_string_lossy())
            ));
        }
        let cwd = req.cwd.clone().unwrap_or(ctx.cwd.clone());
        if req.cwd.is_some() || ctx.state.is_none() {
            script.push_str(&format!(
                "builtin cd -- {} || builtin exit 1\n",
                quote(&cwd)
            ));
        }
        for (k, v) in req.env.iter().flatten() {
            script.push_str(&format!("builtin export {k}={}\n", quote(v)));
        }
        match &command {
            ApiCommand::Shell(s) => script.push_str(s),
            ApiCommand::Argv(a) => {
                let args: Vec<String> = a.iter().map(|s| quote(s)).collect();
                script.push_str(&format!("builtin exec -- {}", args.join(" ")));
            }
        }

        std::fs::create_dir_all(&self.dir)
            .map_err(|e| ApiError::internal(format!("cannot create log dir: {e}")))?;
        let log_path = self.dir.join(format!("{id}.log"));
        let (log, writer) = LogStore::create(&log_path)
            .map_err(|e| ApiError::internal(format!("cannot create the process log: {e}")))?;

        let mut cmd = Command::new("bash");
        cmd.args(["--noprofile", "--norc", "-c", &script])
            .env_clear()
            .envs(&ctx.env)
            .current_dir("/")
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
        let (mut child, exit) = self
            .sessions
            .reaper()
            .spawn(&mut cmd)
            .map_err(|e| ApiError::internal(format!("cannot start the process: {e}")))?;
        let stdout =
            pipe::Receiver::from_owned_fd(OwnedFd::from(child.stdout.take().expect("piped")))
                .map_err(|e| ApiError::internal(e.to_string()))?;
        let stderr =
            pipe::Receiver::from_owned_fd(OwnedFd::from(child.stderr.take().expect("piped")))
                .map_err(|e| ApiError::internal(e.to_string()))?;

        let entry = Arc::new(ProcEntry {
            id: id.clone(),
            pid: child.id() as i32,
            command: command.display(),
            session: session_name,
            started_at: now_rfc3339(),
            exit: exit.clone(),
            log,
            status: Mutex::new(StatusInner::default()),
        });
        tokio::spawn(collect(entry.clone(), writer, stdout, stderr));
        let old = self
            .map
            .lock()
            .expect("processes lock")
            .insert(id, entry.clone());
        if let Some(old) = old {
            let _ = std::fs::remove_file(old.log.path());
        }
        self.evict();
        Ok(entry.to_api())
    }

    fn evict(&self) {
        let mut map = self.map.lock().expect("processes lock");
        let mut ended: Vec<(String, String)> = map
            .values()
            .filter_map(|e| {
                let st = e.status.lock().expect("process status lock");
                st.ended_at.clone().map(|t| (t, e.id.clone()))
            })
            .collect();
        if ended.len() <= KEEP_ENDED {
            return;
        }
        ended.sort();
        for (_, id) in ended.iter().take(ended.len() - KEEP_ENDED) {
            if let Some(e) = map.remove(id) {
                let _ = std::fs::remove_file(e.log.path());
            }
        }
    }

    /// Signals the whole tree, waits up to `grace`, then SIGKILLs what is left.
    pub async fn kill(&self, id: &str, signal: i32, grace: Duration) -> Result<Process, ApiError> {
        let entry = self.get(id)?;
        if entry.exit_status().is_some() {
            return Ok(entry.to_api());
        }
        entry.status.lock().expect("process status lock").killed = true;
        kill_entry(&entry, signal, grace).await;
        Ok(entry.to_api())
    }

    /// Kills every process of a session (when the session is deleted).
    pub async fn kill_session(&self, session: &str) {
        let entries: Vec<Arc<ProcEntry>> = self
            .map
            .lock()
            .expect("processes lock")
            .values()
            .filter(|e| e.session == session && e.exit_status().is_none())
            .cloned()
            .collect();
        for e in entries {
            e.status.lock().expect("process status lock").killed = true;
            kill_entry(&e, libc::SIGTERM, Duration::from_millis(2000)).await;
        }
    }
}

async fn kill_entry(entry: &ProcEntry, signal: i32, grace: Duration) {
    let tree = entry.tree();
    if signal != libc::SIGKILL {
        proctree::signal_tree(tree, signal);
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline {
            let members = proctree::tree(tree, &proctree::all_processes());
            if members.iter().all(|p| !proctree::alive(*p)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    proctree::kill_tree(tree).await;
    let mut exit = entry.exit.clone();
    let _ = tokio::time::timeout(Duration::from_secs(5), wait_exit(&mut exit)).await;
    // The status is recorded by the collector with the end of the output; wait for it
    // briefly so the response shows it.
    entry.wait_ended(EXIT_DRAIN_GRACE * 4).await;
}

/// Copies the process's output into its log, records its exit, then marks the log ended.
async fn collect(
    entry: Arc<ProcEntry>,
    mut writer: LogWriter,
    stdout: pipe::Receiver,
    stderr: pipe::Receiver,
) {
    let mut out_open = true;
    let mut err_open = true;
    let mut exit = entry.exit.clone();
    let mut exited = false;
    let mut out_buf = vec![0u8; 64 * 1024];
    let mut err_buf = vec![0u8; 64 * 1024];
    let mut finished = false;
    let mut ended: Option<(ExitStatus, String)> = None;
    let grace = tokio::time::sleep(Duration::from_secs(365 * 24 * 3600));
    tokio::pin!(grace);
    loop {
        if !out_open && !err_open && exited {
            break;
        }
        tokio::select! {
            r = stdout.readable(), if out_open => {
                match r.and_then(|_| stdout.try_read(&mut out_buf)) {
                    Ok(0) => out_open = false,
                    Ok(n) => writer.append(STDOUT, &out_buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => out_open = false,
                }
            }
            r = stderr.readable(), if err_open => {
                match r.and_then(|_| stderr.try_read(&mut err_buf)) {
                    Ok(0) => err_open = false,
                    Ok(n) => writer.append(STDERR, &err_buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(_) => err_open = false,
                }
            }
            status = wait_exit(&mut exit), if !exited => {
                exited = true;
                ended = Some((status, now_rfc3339()));
                grace.as_mut().reset(tokio::time::Instant::now() + EXIT_DRAIN_GRACE);
            }
            _ = &mut grace, if exited && !finished => {
                // Children of the process still hold its pipes. The process's own output is
                // complete, so the log ends here for followers; what the children still
                // write keeps being appended (and never blocks them on a full pipe).
                finished = true;
                record_end(&entry, &writer, ended.take());
            }
        }
    }
    if !finished {
        record_end(&entry, &writer, ended.take());
    }
}

/// Records the process's exit and then ends its log: an answer that says the process
/// exited comes after its output is in the log.
fn record_end(entry: &ProcEntry, writer: &LogWriter, ended: Option<(ExitStatus, String)>) {
    if let Some((status, at)) = ended {
        let mut st = entry.status.lock().expect("process status lock");
        st.exit = Some(status);
        st.ended_at = Some(at);
    }
    writer.finish();
}
