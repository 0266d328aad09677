//! The warren guest agent: the process inside every sandbox container.
//!
//! It runs as the container's init (PID 1: it reaps every orphan) and serves the node over
//! HTTP/1.1 on a unix socket in its run directory (a tmpfs the node reaches through the
//! container's root), after a handshake that proves it holds its container's secret
//! (`socket`) — no TCP port, no `docker exec`.
//! It owns sessions (persistent bash shells), background processes with their logs, files,
//! git checkouts, and the archives that snapshots are made of. It must stay small and
//! static: it depends only on `warren-api` and runtime crates, never on the node or Docker.

pub mod archive;
pub mod cmd;
pub mod content_type;
pub mod dir_archive;
pub mod enter;
pub mod exec;
pub mod fence;
pub mod files;
pub mod fsops;
pub mod git;
pub mod http;
pub mod interpreter;
pub mod logstore;
pub mod net;
pub mod pack_hold;
pub mod processes;
pub mod procs_api;
pub mod proctree;
pub mod reaper;
pub mod sandbox_env;
pub mod server;
pub mod sessions;
pub mod shell;
pub mod socket;
pub mod terminal;
pub mod terminal_api;
pub mod trust;
pub mod tunnel;
pub mod waits;
pub mod watch;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the guest keeps its socket, session state and process logs (a tmpfs of bounded
/// size, whose pages count against the sandbox's memory).
pub const DEFAULT_RUN_DIR: &str = "/.warren/run";
/// The socket's file name inside the run dir.
pub const SOCKET_NAME: &str = "guest.sock";

/// The environment sessions start from: the container's, without the guest's own settings,
/// with the basics filled in for images that lack them.
pub fn base_env() -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| !k.starts_with("WARREN_GUEST_"))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    env.entry("HOME".into()).or_insert_with(|| "/root".into());
    env.entry("LANG".into()).or_insert_with(|| "C.UTF-8".into());
    env.remove("HOSTNAME");
    env
}

/// Builds the shared state.
pub fn guest(run_dir: PathBuf, reaper: Arc<reaper::Reaper>) -> Arc<server::Guest> {
    let env = Arc::new(sandbox_env::SandboxEnv::new(base_env()));
    let sessions = sessions::Sessions::new(reaper, run_dir.join("sessions"), env.clone());
    let processes = processes::Processes::new(sessions.clone(), run_dir.join("procs"));
    let terminals = terminal::Terminals::new(sessions.reaper().clone(), env.clone());
    let interpreter = interpreter::Interpreter::new(run_dir.join("interpreter"));
    Arc::new(server::Guest {
        sessions,
        processes,
        terminals,
        interpreter,
        env,
        run_dir,
        started_at: warren_api::time::now_rfc3339(),
    })
}
