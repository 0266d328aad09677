//! A pseudo-terminal with a shell on its slave side, in its own session.

use crate::reaper::{ExitWatch, Reaper};
use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use tokio::io::unix::AsyncFd;

/// The master side, readable and writable without blocking the runtime.
pub struct Master(AsyncFd<OwnedFd>);

pub struct Spawned {
    pub master: Master,
    pub pid: i32,
    pub exit: ExitWatch,
}

fn winsize(cols: u16, rows: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// Starts `shell` on a new pty of `cols`×`rows` with `env`, in `cwd`.
pub fn spawn(
    reaper: &Reaper,
    shell: &Path,
    env: &BTreeMap<String, String>,
    cwd: &Path,
    cols: u16,
    rows: u16,
) -> io::Result<Spawned> {
    let (mut master, mut slave) = (-1, -1);
    let ws = winsize(cols, rows);
    // SAFETY: out-pointers to two ints; no name buffer; default termios; a valid winsize.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &ws,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openpty just returned these descriptors, owned by nobody else.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    for fd in [master.as_raw_fd(), slave.as_raw_fd()] {
        // SAFETY: plain fcntl on descriptors we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    let mut cmd = Command::new(shell);
    cmd.env_clear()
        .envs(env)
        .current_dir(cwd)
        .stdin(Stdio::from(slave.try_clone()?))
        .stdout(Stdio::from(slave.try_clone()?))
        .stderr(Stdio::from(slave));
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            // stdin is the slave by now: make it the controlling terminal of the new session.
            if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (child, exit) = reaper.spawn(&mut cmd)?;
    drop(cmd);
    // SAFETY: fcntl on the master we own.
    unsafe {
        let flags = libc::fcntl(master.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(master.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
    }
    // SAFETY: the OwnedFd is moved into the AsyncFd, which keeps it open while registered.
    let master = unsafe { AsyncFd::register(master) }.map_err(io::Error::from)?;
    Ok(Spawned {
        master: Master(master),
        pid: child.id() as i32,
        exit,
    })
}

impl Master {
    /// Reads some output; `Ok(0)` once no process holds the slave side any more.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.0.readable().await?;
            let r = guard.try_io(|fd| {
                // SAFETY: reading into a valid buffer of the given length.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(Ok(n)) => return Ok(n),
                // Linux answers EIO on the master once the last slave descriptor closes.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Writes all of `data` (keystrokes).
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.0.writable().await?;
            let r = guard.try_io(|fd| {
                // SAFETY: writing from a valid buffer of the given length.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match r {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the window size; the kernel tells the foreground process group with SIGWINCH.
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let ws = winsize(cols, rows);
        // SAFETY: TIOCSWINSZ with a valid winsize on our master descriptor.
        if unsafe { libc::ioctl(self.0.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}
