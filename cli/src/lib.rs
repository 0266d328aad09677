//! The `warren` command: the node daemon (`dev`, `serve`) and the client commands (`create`,
//! `exec`, `cp`, …) built on `warren-client`. Wiring and presentation only: sandbox logic
//! lives in `warren-node`, HTTP in `warren-router`.

pub mod args;
pub mod commands;
pub mod output;
pub mod setup;
pub mod sudo_user;
pub mod wan;

/// Exit code for failures of warren itself (not of the remote command), as `docker run` does.
pub const EXIT_WARREN_ERROR: i32 = 125;

pub fn run() -> i32 {
    let cli = match args::Cli::parse_noting_flags() {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // A node's request threads (`warren-worker`); its Raft runs on a runtime of its own
    // (`warren_daemon::consensus_runtime`, threads `warren-raft`).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .thread_name("warren-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("warren: cannot start the runtime: {e}");
            return EXIT_WARREN_ERROR;
        }
    };
    match rt.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("warren: {e:#}");
            EXIT_WARREN_ERROR
        }
    }
}
