//! The guest's HTTP server on a unix socket, and its routing table.

use crate::http::{self, Request, Response};
use crate::processes::Processes;
use crate::sessions::Sessions;
use crate::terminal::Terminals;
use crate::{archive, dir_archive, exec, files, fsops, git, procs_api, terminal_api};
use hyper::Method;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use warren_api::files::{
    DeleteFileQuery, ListQuery, MkdirRequest, MoveRequest, PathResponse, StatQuery,
};
use warren_api::git::GitCheckoutRequest;
use warren_api::session::{CreateSessionRequest, GuestConfig, PatchEnvRequest, PatchEnvResponse};
use warren_api::ApiError;

/// Everything the handlers share.
pub struct Guest {
    pub sessions: Arc<Sessions>,
    pub processes: Arc<Processes>,
    pub terminals: Arc<Terminals>,
    pub interpreter: Arc<crate::interpreter::Interpreter>,
    /// The sandbox's environment as the node last sent it (`PUT /config`).
    pub env: Arc<crate::sandbox_env::SandboxEnv>,
    pub run_dir: PathBuf,
    pub started_at: String,
}

/// `GET /healthz` of the guest.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GuestHealth {
    pub protocol: u32,
    pub version: String,
    pub pid: u32,
    pub started_at: String,
}

pub async fn route(g: Arc<Guest>, req: Request) -> Response {
    match dispatch(g, req).await {
        Ok(r) => r,
        Err(e) => http::error(&e),
    }
}

async fn dispatch(g: Arc<Guest>, req: Request) -> Result<Response, ApiError> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    if let Some(raw) = path.strip_prefix("/files/") {
        let file = format!("/{}", http::decode_path(raw)?);
        return match method {
            Method::GET => files::read(&file).await,
            Method::PUT => files::write(&file, req).await,
            Method::DELETE => {
                let q: DeleteFileQuery = http::query(&req)?;
                fsops::delete(&file, q.recursive.unwrap_or(false)).await?;
                Ok(http::empty(204))
            }
            _ => Err(http::not_found(&format!("{method} {path}"))),
        };
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (&method, segs.as_slice()) {
        (&Method::GET, ["healthz"]) => Ok(http::json(
            200,
            &GuestHealth {
                protocol: warren_api::GUEST_PROTOCOL_VERSION,
                version: env!("CARGO_PKG_VERSION").to_string(),
                pid: std::process::id(),
                started_at: g.started_at.clone(),
            },
        )),
        (&Method::PUT, ["config"]) => {
            let body: GuestConfig = http::read_json(req).await?;
            warren_api::sandbox::validate_env(body.env.keys())?;
            let mut env = body.env;
            if let Some(ca) = &body.egress_ca_pem {
                crate::trust::install(ca)?;
                for (k, v) in warren_api::egress::ca_env() {
                    env.entry(k.to_string()).or_insert_with(|| v.to_string());
                }
            }
            g.env.set_sandbox(env);
            Ok(http::empty(204))
        }
        (&Method::POST, ["exec"]) => exec::handle(g, req).await,
        (&Method::POST, ["sessions"]) => {
            let body: CreateSessionRequest = http::read_json(req).await?;
            body.validate()?;
            let (s, created) = g.sessions.create(&body)?;
            Ok(http::json(if created { 201 } else { 200 }, &s.info()))
        }
        (&Method::GET, ["sessions"]) => {
            let infos: Vec<_> = g
                .sessions
                .names()
                .iter()
                .filter_map(|n| g.sessions.get(n))
                .map(|s| s.info())
                .collect();
            Ok(http::json(200, &serde_json::json!({ "sessions": infos })))
        }
        (&Method::DELETE, ["sessions", sid]) => {
            warren_api::ids::validate_name("session", sid)?;
            g.processes.kill_session(sid).await;
            g.sessions.delete(sid).await;
            Ok(http::empty(204))
        }
        (&Method::PATCH, ["env"]) => {
            let body: PatchEnvRequest = http::read_json(req).await?;
            body.validate()?;
            let sessions = g.sessions.patch_env(&body).await?;
            Ok(http::json(200, &PatchEnvResponse { sessions }))
        }
        (&Method::POST, ["processes"]) => procs_api::start(g, req).await,
        (&Method::GET, ["processes"]) => Ok(procs_api::list(&g)),
        (&Method::GET, ["processes", id]) => procs_api::get(&g, id),
        (&Method::DELETE, ["processes", id]) => {
            let id = id.to_string();
            procs_api::kill(g, &id, &req).await
        }
        (&Method::GET, ["processes", id, "logs"]) => {
            let id = id.to_string();
            procs_api::logs(g, &id, req).await
        }
        (&Method::POST, ["processes", id, "wait", kind]) => {
            let (id, kind) = (id.to_string(), kind.to_string());
            procs_api::wait(g, &id, &kind, req).await
        }
        (&Method::GET, ["fs", "stat"]) => {
            let q: StatQuery = http::query(&req)?;
            let p = q
                .path
                .ok_or_else(|| ApiError::invalid("path is required"))?;
            Ok(http::json(200, &fsops::stat(&p).await?))
        }
        (&Method::GET, ["fs", "list"]) => {
            let q: ListQuery = http::query(&req)?;
            let p = q
                .path
                .unwrap_or_else(|| warren_api::exec::DEFAULT_CWD.to_string());
            let r =
                fsops::list(&p, q.recursive.unwrap_or(false), q.hidden.unwrap_or(false)).await?;
            Ok(http::json(200, &r))
        }
        (&Method::GET, ["fs", "archive"]) => {
            let q: StatQuery = http::query(&req)?;
            let p = q
                .path
                .ok_or_else(|| ApiError::invalid("path is required"))?;
            dir_archive::download(&p).await
        }
        (&Method::PUT, ["fs", "archive"]) => {
            let path = http::query::<StatQuery, _>(&req)
                .and_then(|q| q.path.ok_or_else(|| ApiError::invalid("path is required")));
            match path {
                Ok(p) => dir_archive::upload(&p, req).await,
                Err(e) => {
                    http::discard_body(&mut req.into_body()).await;
                    Err(e)
                }
            }
        }
        (&Method::POST, ["fs", "mkdir"]) => {
            let body: MkdirRequest = http::read_json(req).await?;
            let created = fsops::mkdir(&body.path, body.recursive).await?;
            Ok(http::json(
                if created { 201 } else { 200 },
                &PathResponse { path: body.path },
            ))
        }
        (&Method::POST, ["fs", "move"]) => {
            let body: MoveRequest = http::read_json(req).await?;
            fsops::move_path(&body.from, &body.to, body.overwrite).await?;
            Ok(http::json(200, &PathResponse { path: body.to }))
        }
        (&Method::GET, ["tunnel"]) => crate::tunnel::open(req).await,
        (&Method::GET, ["watch"]) => crate::watch::handle(req).await,
        (&Method::GET, ["terminals"]) => Ok(terminal_api::list(&g)),
        (&Method::GET, ["terminals", name]) => {
            let name = name.to_string();
            terminal_api::open(g, &name, req).await
        }
        (&Method::DELETE, ["terminals", name]) => terminal_api::close(&g, name).await,
        (&Method::POST, ["contexts"]) => crate::interpreter::create(g, req).await,
        (&Method::GET, ["contexts"]) => Ok(crate::interpreter::list(&g)),
        (&Method::DELETE, ["contexts", cid]) => crate::interpreter::delete(&g, cid).await,
        (&Method::POST, ["contexts", cid, "run"]) => {
            let cid = cid.to_string();
            crate::interpreter::run(g, &cid, req).await
        }
        (&Method::POST, ["archive", "pack"]) => archive::pack(req).await,
        (&Method::POST, ["archive", "quiesce"]) => archive::quiesce_all(req).await,
        (&Method::POST, ["archive", "hold"]) => archive::hold(req).await,
        (&Method::POST, ["archive", "release"]) => archive::release(req).await,
        (&Method::POST, ["archive", "remove"]) => archive::remove(req).await,
        (&Method::POST, ["archive", "unpack"]) => archive::unpack(req).await,
        (&Method::POST, ["git", "checkout"]) => {
            let body: GitCheckoutRequest = http::read_json(req).await?;
            Ok(http::json(200, &git::checkout(&g, &body).await?))
        }
        _ => Err(http::not_found(&format!("{method} {path}"))),
    }
}

/// Serves HTTP/1.1 on one connection whose handshake is done (`socket`), until it closes.
pub async fn serve_connection(g: Arc<Guest>, stream: tokio::net::UnixStream) {
    let service = hyper::service::service_fn(move |req| {
        let g = g.clone();
        async move { Ok::<_, std::convert::Infallible>(route(g, req).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades();
    let _ = conn.await;
}
