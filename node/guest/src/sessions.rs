//! Sessions: named shells with their own env and cwd, sharing the sandbox's filesystem.
//! Calls on one session are serialized by its lock; different sessions run in parallel.

use crate::reaper::Reaper;
use crate::shell::{quote, CallEnd, CallSpec, Output, Shell, ShellStart};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use warren_api::exec::{DEFAULT_CWD, DEFAULT_SESSION};
use warren_api::session::{CreateSessionRequest, PatchEnvRequest, SessionInfo};
use warren_api::{ApiError, ErrorCode};

pub struct Sessions {
    reaper: Arc<Reaper>,
    dir: PathBuf,
    base_env: Arc<crate::sandbox_env::SandboxEnv>,
    /// `PATCH env` changes that sessions created later start with.
    overlay: Mutex<BTreeMap<String, Option<String>>>,
    map: Mutex<HashMap<String, Arc<Session>>>,
    calls: AtomicU64,
}

pub struct Session {
    pub name: String,
    state_path: PathBuf,
    state_tmp: PathBuf,
    /// Held for the whole of a call: this is what serializes calls on one session.
    inner: tokio::sync::Mutex<Inner>,
    /// Env and cwd a new shell starts with; readable while a call runs.
    conf: Mutex<Conf>,
}

struct Inner {
    shell: Option<Shell>,
}

#[derive(Clone)]
struct Conf {
    env: BTreeMap<String, String>,
    cwd: String,
}

/// What a process started "in" a session inherits.
#[derive(Debug, Clone)]
pub struct SessionContext {
    pub env: BTreeMap<String, String>,
    pub cwd: String,
    /// The session's last state dump, when it has one.
    pub state: Option<PathBuf>,
}

fn io_err(what: &str, e: std::io::Error) -> ApiError {
    ApiError::internal(format!("{what}: {e}"))
}

impl Sessions {
    pub fn new(
        reaper: Arc<Reaper>,
        dir: PathBuf,
        base_env: Arc<crate::sandbox_env::SandboxEnv>,
    ) -> Arc<Self> {
        Arc::new(Sessions {
            reaper,
            dir,
            base_env,
            overlay: Mutex::new(BTreeMap::new()),
            map: Mutex::new(HashMap::new()),
            calls: AtomicU64::new(0),
        })
    }

    /// Creates a session, or returns the existing one of that id (creation is idempotent).
    pub fn create(&self, req: &CreateSessionRequest) -> Result<(Arc<Session>, bool), ApiError> {
        let name = match &req.id {
            Some(id) => id.clone(),
            None => format!("s-{:08x}", rand_u32()),
        };
        if let Some(existing) = self.map.lock().expect("sessions lock").get(&name) {
            return Ok((existing.clone(), false));
        }
        let cwd = req.cwd.clone().unwrap_or_else(|| DEFAULT_CWD.to_string());
        if cwd == DEFAULT_CWD {
            std::fs::create_dir_all(DEFAULT_CWD)
                .map_err(|e| io_err("cannot create /workspace", e))?;
        }
        match std::fs::metadata(&cwd) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ApiError::new(
                    ErrorCode::NotADirectory,
                    format!("cwd {cwd} is not a directory"),
                ))
            }
            Err(_) => {
                return Err(ApiError::new(
                    ErrorCode::FileNotFound,
                    format!("cwd {cwd} does not exist"),
                ))
            }
        }
        let mut env = self.base_env.current();
        for (k, v) in self.overlay.lock().expect("overlay lock").iter() {
            match v {
                Some(v) => env.insert(k.clone(), v.clone()),
                None => env.remove(k),
            };
        }
        env.extend(req.env.clone().unwrap_or_default());
        let session = Arc::new(Session {
            state_path: self.dir.join(format!("{name}.state")),
            state_tmp: self.dir.join(format!("{name}.state.tmp")),
            name: name.clone(),
            inner: tokio::sync::Mutex::new(Inner { shell: None }),
            conf: Mutex::new(Conf { env, cwd }),
        });
        let mut map = self.map.lock().expect("sessions lock");
        // Another request may have created it meanwhile: keep the first.
        let entry = map.entry(name).or_insert_with(|| session.clone()).clone();
        let created = Arc::ptr_eq(&entry, &session);
        Ok((entry, created))
    }

    /// The named session, created with defaults when missing.
    pub fn get_or_create(&self, name: &str) -> Result<Arc<Session>, ApiError> {
        if let Some(s) = self.map.lock().expect("sessions lock").get(name) {
            return Ok(s.clone());
        }
        let req = CreateSessionRequest {
            id: Some(name.to_string()),
            ..Default::default()
        };
        Ok(self.create(&req)?.0)
    }

    pub fn get(&self, name: &str) -> Option<Arc<Session>> {
        self.map.lock().expect("sessions lock").get(name).cloned()
    }

    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .map
            .lock()
            .expect("sessions lock")
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// Removes a session and kills its shell with everything it started. Idempotent.
    pub async fn delete(&self, name: &str) {
        let session = self.map.lock().expect("sessions lock").remove(name);
        if let Some(s) = session {
            let mut inner = s.inner.lock().await;
            if let Some(mut shell) = inner.shell.take() {
                shell.kill().await;
            }
            let _ = std::fs::remove_file(&s.state_path);
            let _ = std::fs::remove_file(&s.state_tmp);
        }
    }

    /// Applies `PATCH env` to one session (or all when none is named) and to later sessions.
    pub async fn patch_env(&self, req: &PatchEnvRequest) -> Result<Vec<String>, ApiError> {
        {
            let mut overlay = self.overlay.lock().expect("overlay lock");
            for (k, v) in &req.env {
                overlay.insert(k.clone(), v.clone());
            }
        }
        let targets: Vec<Arc<Session>> = match &req.session {
            Some(name) => vec![self.get_or_create(name)?],
            None => self
                .map
                .lock()
                .expect("sessions lock")
                .values()
                .cloned()
                .collect(),
        };
        let mut names = Vec::new();
        for s in targets {
            s.patch_env(&self.reaper, &req.env, self.work_dir()).await?;
            names.push(s.name.clone());
        }
        names.sort();
        Ok(names)
    }

    /// A fresh private directory for one call's files.
    pub fn work_dir(&self) -> PathBuf {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        self.dir.join("calls").join(n.to_string())
    }

    pub fn reaper(&self) -> &Arc<Reaper> {
        &self.reaper
    }

    /// The environment sessions start from, as of now.
    pub fn base_env(&self) -> BTreeMap<String, String> {
        self.base_env.current()
    }

    /// Kills every session's shell (shutdown).
    pub async fn kill_all(&self) {
        let all: Vec<Arc<Session>> = self
            .map
            .lock()
            .expect("sessions lock")
            .values()
            .cloned()
            .collect();
        for s in all {
            if let Some(mut shell) = s.inner.lock().await.shell.take() {
                shell.kill().await;
            }
        }
    }
}

/// The result of a session call.
#[derive(Debug)]
pub struct RunResult {
    pub end: CallEnd,
    pub pid: i32,
}

impl Session {
    /// Runs one call on this session's shell, starting (or restoring) the shell first.
    /// `on_start` receives the shell's pid before any output.
    pub async fn run(
        &self,
        reaper: &Reaper,
        spec: &CallSpec,
        work: PathBuf,
        out: mpsc::Sender<Output>,
        on_start: impl FnOnce(i32),
    ) -> Result<RunResult, ApiError> {
        let mut inner = self.inner.lock().await;
        self.run_locked(&mut inner, reaper, spec, work, out, on_start)
            .await
    }

    async fn run_locked(
        &self,
        inner: &mut Inner,
        reaper: &Reaper,
        spec: &CallSpec,
        work: PathBuf,
        out: mpsc::Sender<Output>,
        on_start: impl FnOnce(i32),
    ) -> Result<RunResult, ApiError> {
        if inner.shell.as_ref().is_some_and(|s| s.exited()) {
            // Killed from outside (OOM, another session): come back as it was.
            inner.shell = None;
        }
        let abandoned = inner.shell.as_ref().and_then(|s| s.abandoned_call());
        if let Some(work) = abandoned.map(PathBuf::from) {
            // The last caller gave up midway: the shell may hang on that call's pipes
            // forever. Start again from the last state dump, as after a timeout.
            if let Some(mut shell) = inner.shell.take() {
                shell.kill_abandoned().await;
            }
            let _ = std::fs::remove_dir_all(&work);
        }
        if inner.shell.is_none() {
            let restore = self.state_path.exists().then(|| self.state_path.clone());
            let conf = self.conf();
            let start = ShellStart {
                env: conf.env,
                cwd: conf.cwd,
                restore,
            };
            let shell = Shell::start(reaper, &start)
                .await
                .map_err(|e| io_err("cannot start the session shell", e))?;
            inner.shell = Some(shell);
        }
        let shell = inner.shell.as_mut().expect("shell just ensured");
        let pid = shell.pid();
        on_start(pid);
        std::fs::create_dir_all(&work).map_err(|e| io_err("cannot create call directory", e))?;
        let result = shell.call(spec, &work, &self.state_tmp, out).await;
        let _ = std::fs::remove_dir_all(&work);
        let end = result.map_err(|e| io_err("session call failed", e))?;
        match end {
            CallEnd::Completed { .. } => {
                let _ = std::fs::rename(&self.state_tmp, &self.state_path);
            }
            CallEnd::TimedOut => {
                // Killed with the call; the next call restores the last state dump.
                inner.shell = None;
            }
            CallEnd::ShellExited { .. } => {
                // The script ended the shell: the next call gets a fresh one.
                inner.shell = None;
                let _ = std::fs::remove_file(&self.state_path);
                let _ = std::fs::remove_file(&self.state_tmp);
            }
        }
        Ok(RunResult { end, pid })
    }

    async fn patch_env(
        &self,
        reaper: &Reaper,
        changes: &BTreeMap<String, Option<String>>,
        work: PathBuf,
    ) -> Result<(), ApiError> {
        let mut inner = self.inner.lock().await;
        {
            let mut conf = self.conf.lock().expect("session conf lock");
            for (k, v) in changes {
                match v {
                    Some(v) => conf.env.insert(k.clone(), v.clone()),
                    None => conf.env.remove(k),
                };
            }
        }
        let live = inner.shell.as_ref().is_some_and(|s| !s.exited()) || self.state_path.exists();
        if !live {
            return Ok(()); // the next shell starts from `conf.env`
        }
        let mut script = String::new();
        for (k, v) in changes {
            match v {
                Some(v) => script.push_str(&format!("builtin export {k}={}\n", quote(v))),
                None => script.push_str(&format!("builtin unset {k}\n")),
            }
        }
        let (tx, _rx) = mpsc::channel(1);
        let spec = CallSpec {
            script,
            ..Default::default()
        };
        self.run_locked(&mut inner, reaper, &spec, work, tx, |_| {})
            .await?;
        Ok(())
    }

    /// The env, cwd and state a process started in this session inherits.
    /// Does not wait for a running call.
    pub fn context(&self) -> SessionContext {
        let conf = self.conf();
        SessionContext {
            env: conf.env,
            cwd: conf.cwd,
            state: self.state_path.exists().then(|| self.state_path.clone()),
        }
    }

    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            id: self.name.clone(),
            cwd: self.conf().cwd,
        }
    }

    fn conf(&self) -> Conf {
        self.conf.lock().expect("session conf lock").clone()
    }
}

/// The default session's name.
pub fn default_session() -> &'static str {
    DEFAULT_SESSION
}

pub fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: valid buffer; getrandom never returns more than asked.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != 4 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        return t.subsec_nanos() ^ std::process::id();
    }
    u32::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox_env::SandboxEnv;
    use std::time::Duration;

    async fn call(
        s: &Session,
        sessions: &Sessions,
        script: &str,
    ) -> (Result<RunResult, ApiError>, String) {
        let (tx, mut rx) = mpsc::channel(16);
        let spec = CallSpec {
            script: script.to_string(),
            ..Default::default()
        };
        let run = s.run(sessions.reaper(), &spec, sessions.work_dir(), tx, |_| {});
        let collect = async {
            let mut out = String::new();
            while let Some(o) = rx.recv().await {
                if let Output::Stdout(b) = o {
                    out.push_str(&String::from_utf8_lossy(&b));
                }
            }
            out
        };
        tokio::join!(run, collect)
    }

    /// A caller that gives up on a call (its client went away, its request was cut) while
    /// the shell has not yet taken the call's line, as a loaded machine can hold a shell:
    /// when the shell reads the line later, it opens the call's output pipes, which nobody
    /// reads any more. The session must still answer the next call.
    #[tokio::test]
    async fn a_call_given_up_before_the_shell_took_it_leaves_the_session_answering() {
        let dir = tempfile::tempdir().unwrap();
        let reaper = Reaper::new();
        tokio::spawn(reaper.clone().run());
        let path = std::env::var("PATH").unwrap_or_default();
        let env = Arc::new(SandboxEnv::new(BTreeMap::from([("PATH".into(), path)])));
        std::fs::create_dir_all(dir.path().join("sessions")).unwrap();
        let sessions = Sessions::new(reaper, dir.path().join("sessions"), env);
        let (s, _) = sessions
            .create(&CreateSessionRequest {
                id: Some("t".into()),
                cwd: Some(dir.path().to_string_lossy().into_owned()),
                ..Default::default()
            })
            .unwrap();
        let (first, out) = call(
            &s,
            &sessions,
            "export KEPT=yes; sleep 300 & echo $! > job.pid; echo first",
        )
        .await;
        let pid = first.unwrap().pid;
        assert_eq!(out, "first\n");
        // Later than the job's start, by more than a clock tick (what start times count).
        tokio::time::sleep(Duration::from_millis(100)).await;

        // SAFETY: plain signal to the shell this test started.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        let given_up =
            tokio::time::timeout(Duration::from_millis(300), call(&s, &sessions, "echo lost"))
                .await;
        assert!(given_up.is_err(), "the held shell answered");
        // What read the given-up call's output has stopped by the time the shell moves on.
        tokio::time::sleep(Duration::from_millis(200)).await;
        // SAFETY: as above.
        unsafe { libc::kill(pid, libc::SIGCONT) };

        let next = tokio::time::timeout(
            Duration::from_secs(20),
            call(&s, &sessions, "echo next $KEPT"),
        )
        .await
        .expect("the call after a given-up one never ended: the session is wedged");
        assert!(matches!(
            next.0.unwrap().end,
            CallEnd::Completed { exit_code: 0 }
        ));
        assert_eq!(next.1, "next yes\n", "the session's state is kept");
        let (alive, out) = call(
            &s,
            &sessions,
            "s=$(ps -o stat= -p $(cat job.pid)); case \"$s\" in *Z*|'') ;; *) echo alive ;; esac; kill $(cat job.pid)",
        )
        .await;
        alive.unwrap();
        assert_eq!(
            out, "alive\n",
            "a background job of an earlier call outlives the shell's replacement"
        );
    }
}
