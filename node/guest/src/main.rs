//! `warren-guest [--run-dir DIR]`: the agent inside a sandbox (see the library docs).
//! `warren-guest pack` / `unpack` / `remove`: writes a snapshot's archive to stdout, its files
//! from stdin, or removes the paths it deleted (run by the node in the sandbox's filesystem).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use warren_guest::{guest, reaper::Reaper, DEFAULT_RUN_DIR, SOCKET_NAME};

fn main() {
    let mut run_dir = PathBuf::from(DEFAULT_RUN_DIR);
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--run-dir" => run_dir = PathBuf::from(args.next().expect("--run-dir needs a value")),
            "pack" | "unpack" | "remove" => {
                // Started by the node on the host: `--enter` (into the sandbox's filesystem
                // first) and `--id-shift U:G:L` (its ids as the host stores them).
                let mut shift = None;
                let mut enter = false;
                while let Some(opt) = args.next() {
                    match opt.as_str() {
                        "--enter" => enter = true,
                        "--id-shift" => {
                            shift = args
                                .next()
                                .as_deref()
                                .and_then(warren_api::snapshot::IdShift::parse);
                            if shift.is_none() {
                                eprintln!("warren-guest {a}: --id-shift needs U:G:L");
                                std::process::exit(2);
                            }
                        }
                        other => {
                            eprintln!("warren-guest {a}: unknown argument {other:?}");
                            std::process::exit(2);
                        }
                    }
                }
                if enter {
                    if let Err(e) = warren_guest::enter::enter_container() {
                        eprintln!("warren-guest {a}: cannot enter the container: {e}");
                        std::process::exit(1);
                    }
                }
                std::process::exit(match a.as_str() {
                    "pack" => warren_guest::archive::pack_stdio(shift),
                    "unpack" => warren_guest::archive::unpack_stdio(shift),
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
    let secret = match take_secret() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("warren-guest: {e}");
            std::process::exit(1);
        }
    };
    point_at_egress_proxy();
    // After the environment is settled (while this process has one thread).
    warren_guest::fence::spawn(warren_guest::fence::default_path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run(run_dir, secret));
}

/// The secret the node made this container with (`warren_api::guest_auth`), taken out of
/// the environment (no child inherits it) while this process has one thread. The process
/// is then made non-dumpable: the sandbox's processes, root in the container but without
/// `CAP_SYS_PTRACE`, can neither read its memory nor its `/proc/1/environ`.
fn take_secret() -> Result<Arc<str>, String> {
    let name = warren_api::guest_auth::SECRET_ENV;
    let secret = std::env::var(name).map_err(|_| format!("{name} is not set"))?;
    if secret.len() < 32 {
        return Err(format!("{name} is too short"));
    }
    std::env::remove_var(name);
    // SAFETY: prctl with PR_SET_DUMPABLE and a constant argument only changes a flag of
    // this process.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot make the guest non-dumpable: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(secret.into())
}

/// How long the guest waits for its link: the node makes it right after the engine
/// started the container (`runtime::links` on the node).
const LINK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Sets `HTTP_PROXY` and its siblings for every process of the sandbox (all descend from
/// this one) when the node named its egress proxy's port: the proxy listens on the
/// container's gateway, the host's end of its link, once the node has made it. Runs while
/// this process has one thread.
fn point_at_egress_proxy() {
    let Some(port) = std::env::var(warren_api::egress::PROXY_PORT_ENV)
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
    else {
        return;
    };
    let waited = std::time::Instant::now();
    let gateway = loop {
        let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
        if let Some(gateway) = warren_guest::net::default_gateway(&routes) {
            break gateway;
        }
        if waited.elapsed() > LINK_WAIT {
            eprintln!("warren-guest: no default route: the egress proxy cannot be named");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    for (k, v) in warren_api::egress::proxy_env(&format!("http://{gateway}:{port}")) {
        std::env::set_var(k, v);
    }
}

async fn run(run_dir: PathBuf, secret: Arc<str>) {
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
    let serving = tokio::spawn(warren_guest::socket::serve(
        g.clone(),
        socket.clone(),
        secret,
    ));

    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM");
    let mut int =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).expect("SIGINT");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        served = serving => {
            // It serves until the process ends: back only when it could not listen.
            eprintln!("warren-guest: cannot listen on {}: {served:?}", socket.display());
            std::process::exit(1);
        }
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
