//! `warren terminal` as a user runs it: in a real pseudo-terminal (raw mode, the local size,
//! a resize), through a connection that is cut and refused for a while (it reconnects and
//! replays only what it missed), detached with Ctrl-], and driven by a pipe.

use super::harness::{sh, unique, Node};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A TCP relay to the node that can cut every open connection and refuse new ones for a
/// while: the network failing under a client.
struct Relay {
    addr: String,
    cut: watch::Sender<u64>,
    refuse_until: Arc<Mutex<Option<Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn to(target: &str) -> Relay {
        let target = target.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (cut, _) = watch::channel(0u64);
        let refuse_until = Arc::new(Mutex::new(None::<Instant>));
        let (cuts, refusing) = (cut.clone(), refuse_until.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    return;
                };
                let refused = refusing.lock().unwrap().is_some_and(|t| Instant::now() < t);
                if refused {
                    drop(client);
                    continue;
                }
                let target = target.clone();
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Relay {
            addr,
            cut,
            refuse_until,
            task,
        }
    }

    /// Drops every open connection and refuses new ones for `refuse_for`.
    fn fail_for(&self, refuse_for: Duration) {
        *self.refuse_until.lock().unwrap() = Some(Instant::now() + refuse_for);
        self.cut.send_modify(|n| *n += 1);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A pseudo-terminal pair: the test holds the master, the command gets the slave.
struct Pty {
    master: std::fs::File,
    slave: OwnedFd,
    /// Everything the command wrote to its terminal.
    screen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn open(cols: u16, rows: u16) -> Pty {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                &size,
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        let master = unsafe { std::fs::File::from_raw_fd(master) };
        let slave = unsafe { OwnedFd::from_raw_fd(slave) };
        let screen = Arc::new(Mutex::new(Vec::new()));
        let (mut reader, sink) = (master.try_clone().unwrap(), screen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            master,
            slave,
            screen,
        }
    }

    /// `warren terminal ARGS` with the slave as its controlling terminal and stdio.
    fn spawn(&self, url: &str, key: &str, args: &[&str]) -> std::process::Child {
        let fd = self.slave.as_raw_fd();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_warren"));
        cmd.arg("terminal")
            .args(args)
            .env("WARREN_URL", url)
            .env("WARREN_API_KEY", key);
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                for target in 0..3 {
                    if libc::dup2(fd, target) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                if libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().unwrap()
    }

    fn type_in(&mut self, keys: &str) {
        self.master.write_all(keys.as_bytes()).unwrap();
    }

    fn resize(&self, cols: u16, rows: u16) {
        let size = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let rc = unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &size) };
        assert_eq!(rc, 0);
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until the screen shows `needle`; panics with the screen after `limit`.
    async fn wait_for(&self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.text().contains(needle) {
            assert!(
                Instant::now() < end,
                "{needle:?} not on the screen within {limit:?}:\n{}",
                self.text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Canonical mode and echo of the terminal the command was given.
    fn line_discipline(&self) -> (bool, bool) {
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        assert_eq!(
            unsafe { libc::tcgetattr(self.slave.as_raw_fd(), &mut t) },
            0
        );
        (t.c_lflag & libc::ICANON != 0, t.c_lflag & libc::ECHO != 0)
    }
}

async fn wait_exit(child: &mut std::process::Child, limit: Duration) -> i32 {
    let end = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("warren terminal did not end within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_terminal_is_raw_follows_resizes_survives_a_cut_connection_and_detaches() {
    let node = Node::start().await;
    let id = format!("term-{}", unique());
    sh(&node.client, &id, "true").await;
    let relay = Relay::to(&node.url).await;
    let mut pty = Pty::open(100, 30);
    assert_eq!(pty.line_discipline(), (true, true), "a fresh pty is cooked");
    let mut cli = pty.spawn(&relay.addr, &node.key, &[&id]);
    pty.wait_for("Ctrl-] detaches", Duration::from_secs(30))
        .await;
    assert_eq!(
        pty.line_discipline(),
        (false, false),
        "the local terminal is raw while attached"
    );

    // The local size reached the shell, and so does a resize.
    pty.type_in("stty size\r");
    pty.wait_for("30 100", Duration::from_secs(10)).await;
    pty.resize(120, 40);
    let end = Instant::now() + Duration::from_secs(10);
    while !pty.text().contains("40 120") {
        assert!(Instant::now() < end, "no resize:\n{}", pty.text());
        pty.type_in("stty size\r");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // Output made while the connection is down arrives after it is made again, once; what
    // was already shown is not shown again.
    pty.type_in("export MARK=kept; echo before-$((1+1))\r");
    pty.wait_for("before-2", Duration::from_secs(10)).await;
    pty.type_in("(sleep 1; echo while-away-$((3*3))) &\r");
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.fail_for(Duration::from_secs(3));
    pty.wait_for("connection lost", Duration::from_secs(10))
        .await;
    pty.wait_for("while-away-9", Duration::from_secs(30)).await;
    pty.wait_for("reconnected", Duration::from_secs(5)).await;
    let screen = pty.text();
    assert_eq!(
        screen.matches("before-2").count(),
        1,
        "replayed from the cursor, not from the start:\n{screen}"
    );
    assert_eq!(screen.matches("while-away-9").count(), 1, "{screen}");

    // Ctrl-] detaches: the command ends with 0 and gives the terminal back cooked.
    pty.type_in("\x1d");
    assert_eq!(wait_exit(&mut cli, Duration::from_secs(10)).await, 0);
    pty.wait_for("detached", Duration::from_secs(5)).await;
    assert_eq!(
        pty.line_discipline(),
        (true, true),
        "the terminal's mode is restored"
    );

    // The shell ran on: a piped client finds its variable, and the shell's exit code
    // becomes the command's.
    let mut piped = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["terminal", &id])
        .env("WARREN_URL", &node.url)
        .env("WARREN_API_KEY", &node.key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    piped
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo mark=$MARK\nexit 7\n")
        .unwrap();
    let out = tokio::task::spawn_blocking(move || piped.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("mark=kept"), "{stdout}");
    assert_eq!(out.status.code(), Some(7), "{stdout}");

    // A refusal is the API's error, and warren's own exit code.
    let bad = Command::new(env!("CARGO_BIN_EXE_warren"))
        .args(["terminal", &id, "--shell", "rm -rf"])
        .env("WARREN_URL", &node.url)
        .env("WARREN_API_KEY", &node.key)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(125));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(stderr.contains("invalid shell"), "{stderr}");
}
