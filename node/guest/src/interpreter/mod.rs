//! The code interpreter: `/contexts`, notebook-like contexts whose state persists between
//! runs. Each context has one kernel process (Python, or node for JavaScript and
//! TypeScript); see `protocol.rs` for how the guest talks to it and `context.rs` for runs,
//! timeouts and kernel death.

mod context;
mod kernel;
mod protocol;

use crate::http::{self, Request, Response};
use crate::server::Guest;
use context::Context;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use warren_api::exec::{DEFAULT_CWD, DEFAULT_SESSION, JSON_OUTPUT_LIMIT};
use warren_api::interpreter::{
    Context as ContextInfo, ContextList, CreateContextRequest, RunCodeRequest, RunCodeResponse,
    RunEvent,
};
use warren_api::{ApiError, ErrorCode};

pub struct Interpreter {
    /// Where the kernel scripts are written.
    script_dir: PathBuf,
    contexts: Mutex<HashMap<String, Arc<Context>>>,
}

impl Interpreter {
    pub fn new(script_dir: PathBuf) -> Arc<Self> {
        Arc::new(Interpreter {
            script_dir,
            contexts: Mutex::new(HashMap::new()),
        })
    }

    fn get(&self, id: &str) -> Result<Arc<Context>, ApiError> {
        self.contexts
            .lock()
            .expect("contexts lock")
            .get(id)
            .cloned()
            .ok_or_else(|| ApiError::new(ErrorCode::ContextNotFound, format!("no context {id:?}")))
    }

    /// Kills every kernel (shutdown).
    pub async fn kill_all(&self) {
        let all: Vec<Arc<Context>> = self
            .contexts
            .lock()
            .expect("contexts lock")
            .drain()
            .map(|(_, c)| c)
            .collect();
        for c in all {
            c.delete().await;
        }
    }
}

fn check_cwd(cwd: &str) -> Result<(), ApiError> {
    if cwd == DEFAULT_CWD {
        std::fs::create_dir_all(DEFAULT_CWD)
            .map_err(|e| ApiError::internal(format!("cannot create {DEFAULT_CWD}: {e}")))?;
    }
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(ApiError::new(
            ErrorCode::NotADirectory,
            format!("cwd {cwd} is not a directory"),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::FileNotFound,
            format!("cwd {cwd} does not exist"),
        )),
    }
}

/// `POST /contexts` → 201 with the context, its kernel started.
pub async fn create(g: Arc<Guest>, req: Request) -> Result<Response, ApiError> {
    let body: CreateContextRequest = http::read_json(req).await?;
    let language = body.validate()?;
    let cwd = body.cwd.clone().unwrap_or_else(|| DEFAULT_CWD.to_string());
    check_cwd(&cwd)?;
    // The sandbox's env as the default session has it (image env, sandbox env, PATCH env),
    // then the request's.
    let mut env = g.sessions.get_or_create(DEFAULT_SESSION)?.context().env;
    env.extend(body.env.clone().unwrap_or_default());
    let info = ContextInfo {
        id: format!("ctx-{:08x}", crate::sessions::rand_u32()),
        language,
        cwd,
        created_at: warren_api::time::now_rfc3339(),
    };
    let ctx = Context::start(
        g.sessions.reaper(),
        info.clone(),
        env,
        g.interpreter.script_dir.clone(),
    )
    .await?;
    g.interpreter
        .contexts
        .lock()
        .expect("contexts lock")
        .insert(info.id.clone(), Arc::new(ctx));
    Ok(http::json(201, &info))
}

/// `GET /contexts`, oldest first.
pub fn list(g: &Guest) -> Response {
    let mut contexts: Vec<ContextInfo> = g
        .interpreter
        .contexts
        .lock()
        .expect("contexts lock")
        .values()
        .map(|c| c.info.clone())
        .collect();
    contexts.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
    http::json(200, &ContextList { contexts })
}

/// `DELETE /contexts/{cid}`: kills its kernel with everything it started.
pub async fn delete(g: &Guest, id: &str) -> Result<Response, ApiError> {
    let ctx = g.interpreter.get(id)?;
    g.interpreter
        .contexts
        .lock()
        .expect("contexts lock")
        .remove(id);
    ctx.delete().await;
    Ok(http::empty(204))
}

/// `POST /contexts/{cid}/run`, as JSON or as an SSE stream of [`RunEvent`]s.
pub async fn run(g: Arc<Guest>, id: &str, req: Request) -> Result<Response, ApiError> {
    let sse = http::wants_sse(&req);
    let ctx = g.interpreter.get(id)?;
    let body: RunCodeRequest = http::read_json(req).await?;
    body.validate()?;
    let timeout = body.timeout_ms.map(|t| Duration::from_millis(t as u64));
    let (tx, mut rx) = mpsc::channel::<RunEvent>(64);
    let reaper = g.sessions.reaper().clone();
    let task = tokio::spawn(async move {
        let r = ctx.run(&reaper, &body.code, timeout, &tx).await;
        drop(tx);
        r
    });

    if sse {
        let (events, response) = http::sse_stream();
        tokio::spawn(async move {
            // A client that went away stops receiving; the run still finishes.
            while let Some(e) = rx.recv().await {
                events.send(&e).await;
            }
            let last = match task.await {
                Ok(Ok(execution_count)) => RunEvent::Complete { execution_count },
                Ok(Err(e)) => RunEvent::api_error(&e),
                Err(e) => RunEvent::api_error(&ApiError::internal(format!("run failed: {e}"))),
            };
            events.send(&last).await;
        });
        return Ok(response);
    }

    let mut resp = RunCodeResponse::from_events(&[]);
    let room = |have: &str, more: &str| have.len() + more.len() <= JSON_OUTPUT_LIMIT;
    while let Some(e) = rx.recv().await {
        let keep = match &e {
            RunEvent::Stdout { text } => room(&resp.stdout, text),
            RunEvent::Stderr { text } => room(&resp.stderr, text),
            _ => true,
        };
        if keep {
            resp.push(&e);
        }
    }
    let count = task
        .await
        .map_err(|e| ApiError::internal(format!("run failed: {e}")))??;
    resp.execution_count = count;
    Ok(http::json(200, &resp))
}
