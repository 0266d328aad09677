//! `warren-guest [--run-dir DIR]`: the agent inside a sandbox (see the library docs).
//! `warren-guest pack` / `unpack` / `remove`: writes a snapshot's archive to stdout, its files
//! from stdin, or removes the paths it deleted (run by the node in the sandbox's filesystem).

use std::path::PathBuf;
use std::time::Duration;
use warren_guest::{guest, reaper::Reaper, server, DEFAULT_RUN_DIR, SOCKET_NAME};

fn main() {
    let mut run_dir = PathBuf::from(DEFAULT_RUN_DIR);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--run-dir" => run_dir = PathBuf::from(args.next().expect("--run-dir needs a value")),
            "pack" | "unpack" | "remove" => {
                // Started by the node on the host: into the sandbox's filesystem first.
                if args.next().as_deref() == Some("--enter") {
                    if let Err(e) = warren_guest::enter::enter_container() {
                        eprintln!("warren-guest {a}: cannot enter the container: {e}");
                        std::process::exit(1);
                    }
                }
                std::process::exit(match a.as_str() {
                    "pack" => warren_guest::archive::pack_stdio(),
                    "unpack" => warren_guest::archive::unpack_stdio(),
                    _ => warren_guest::archive::remove_stdio(),
                });
            }
            "--version" => {
                println!("warren-guest {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            other => {
                eprintln!("warren-guest: unknown argument {other:?}");
                std::process::exit(2);
            }
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run(run_dir));
}

async fn run(run_dir: PathBuf) {
    for d in ["sessions", "sessions/calls", "procs"] {
        if let Err(e) = std::fs::create_dir_all(run_dir.join(d)) {
            eprintln!(
                "warren-guest: cannot create {}: {e}",
                run_dir.join(d).display()
            );
            std::process::exit(1);
        }
    }
    // Leftovers of a previous life of this container (its calls and logs are gone).
    let _ = std::fs::remove_dir_all(run_dir.join("sessions/calls"));
    let _ = std::fs::create_dir_all(run_dir.join("sessions/calls"));
    let _ = std::fs::create_dir_all(warren_api::exec::DEFAULT_CWD);

    let reaper = Reaper::new();
    tokio::spawn(reaper.clone().run());
    let g = guest(run_dir.clone(), reaper);

    let socket = run_dir.join(SOCKET_NAME);
    let _ = std::fs::remove_file(&socket);
    let listener = match tokio::net::UnixListener::bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("warren-guest: cannot listen on {}: {e}", socket.display());
            std::process::exit(1);
        }
    };
    tokio::spawn(server::serve(g.clone(), listener));

    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
    let mut int =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("SIGINT");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    // Orderly stop: shells and processes get TERM, then whatever is left gets KILL.
    let _ = std::fs::remove_file(&socket);
    g.sessions.kill_all().await;
    g.interpreter.kill_all().await;
    if std::process::id() == 1 {
        // SAFETY: as init of the container's pid namespace, -1 means "every other process here".
        unsafe { libc::kill(-1, libc::SIGTERM) };
        tokio::time::sleep(Duration::from_millis(500)).await;
        // SAFETY: as above.
        unsafe { libc::kill(-1, libc::SIGKILL) };
    }
}
