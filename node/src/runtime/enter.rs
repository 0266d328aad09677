//! Running the guest binary in a container's filesystem but outside its cgroup.
//!
//! Saving a snapshot reads the sandbox's changed files; restoring one writes them. Done by
//! the guest inside the sandbox, that work waits for the sandbox's CPU quota and counts as
//! the sandbox's CPU use. Instead the node runs its own copy of the guest binary (the host's
//! file, never one from inside the container, which the sandbox could have replaced) as
//! `warren-guest pack --enter` (or `unpack`). Handed the container's mount namespace and
//! root directory as open descriptors, it joins them before it touches a file (as
//! `nsenter --mount --root` does): it sees exactly the files the sandbox sees, resolves
//! every path and symlink inside the sandbox's root as the guest would, and stays in the
//! node's own cgroup. This needs root on the container's host; when the child cannot be
//! started the caller falls back to the guest.

use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_api::snapshot::{IdShift, ENTER_NS_FD, ENTER_ROOT_FD};

/// Bytes read from the packer's output at once.
const READ_SIZE: usize = 1 << 20;

/// Capacity asked for the pipes to and from the guest binary.
const PIPE_SIZE: libc::c_int = 1 << 20;

/// A container's mount namespace and root directory, held open, and the host's guest binary
/// to run there. Opened from the container's main pid; the caller checks afterwards that the
/// pid is still the container's (a pid reused by another process in between would otherwise
/// lend its files), and from then on the descriptors cannot change what they refer to.
pub struct Target {
    ns: std::fs::File,
    root: std::fs::File,
    guest_binary: PathBuf,
    /// The container's ids as the host stores them (a sandbox in a user namespace).
    shift: Option<IdShift>,
    /// Moves the child into the node's bounded host-work cgroup before it runs.
    cgroup: Option<super::host_work::ChildJoiner>,
}

impl Target {
    pub fn open(pid: u32, guest_binary: &Path) -> std::io::Result<Target> {
        use std::os::unix::fs::OpenOptionsExt;
        if pid == 0 {
            return Err(std::io::Error::other("the container is not running"));
        }
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt"))?;
        let root = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(format!("/proc/{pid}/root"))?;
        Ok(Target {
            ns,
            root,
            guest_binary: guest_binary.to_path_buf(),
            shift: None,
            cgroup: None,
        })
    }

    /// A container's root filesystem as the engine mounted it on this host, before the
    /// container runs: the node's own mount namespace, and `root` (an open directory of
    /// that mount) as the root the guest binary changes into.
    pub fn host_mount(root: std::fs::File, guest_binary: &Path) -> std::io::Result<Target> {
        Ok(Target {
            ns: std::fs::File::open("/proc/self/ns/mnt")?,
            root,
            guest_binary: guest_binary.to_path_buf(),
            shift: None,
            cgroup: None,
        })
    }

    /// The container's files are owned by shifted ids on the host (its user namespace):
    /// archives are written and read with the ids as the sandbox sees them.
    pub fn with_id_shift(mut self, shift: Option<IdShift>) -> Target {
        self.shift = shift;
        self
    }

    /// The child runs in the host-work cgroup (`host_work`): bounded, and not the node's.
    pub fn in_host_work(mut self, host_work: &super::host_work::HostWork) -> Target {
        self.cgroup = Some(host_work.child_joiner());
        self
    }
}

/// Starts `warren-guest {command} --enter` with the target's descriptors, stdin and stderr
/// piped, and stdout as given.
fn spawn_guest(
    target: &Target,
    command: &str,
    stdout: Stdio,
) -> std::io::Result<tokio::process::Child> {
    use std::os::fd::AsRawFd;
    let (ns, root) = (target.ns.as_raw_fd(), target.root.as_raw_fd());
    let mut cmd = tokio::process::Command::new(&target.guest_binary);
    cmd.args([command, "--enter"]);
    if let Some(s) = target.shift {
        cmd.args(["--id-shift", &s.to_arg()]);
    }
    cmd.env_clear()
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let cgroup = target.cgroup.clone();
    // SAFETY: runs in the forked child before exec; only async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(c) = &cgroup {
                c.join()?;
            }
            hand_over(ns, root)
        });
    }
    let child = cmd.spawn()?;
    if let Some(stdin) = &child.stdin {
        widen_pipe(stdin.as_raw_fd());
    }
    if let Some(stdout) = &child.stdout {
        widen_pipe(stdout.as_raw_fd());
    }
    Ok(child)
}

/// Archives cross these pipes at hundreds of MiB: a 1 MiB pipe instead of the default
/// 64 KiB means a sixteenth of the reads, writes and wake-ups. Best effort (the kernel may
/// cap it: `/proc/sys/fs/pipe-max-size`).
fn widen_pipe(fd: std::os::fd::RawFd) {
    // SAFETY: fcntl on a pipe descriptor this process owns; it only changes its capacity.
    unsafe {
        libc::fcntl(fd, libc::F_SETPIPE_SZ, PIPE_SIZE);
    }
}

/// Puts the namespace and root descriptors where the guest binary looks for them, open
/// across exec (every other descriptor of the node's stays close-on-exec).
fn hand_over(ns: libc::c_int, root: libc::c_int) -> std::io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(r)
        }
    };
    // SAFETY: plain system calls on descriptors this child inherited open.
    unsafe {
        // Both out of the way of both targets first: either may sit where the other goes,
        // or already where it goes itself, and `dup2` onto the same descriptor changes
        // nothing, so it would stay close-on-exec and be gone in the guest binary (a node
        // with a hundred descriptors open opens them there now and then).
        let ns = check(libc::fcntl(ns, libc::F_DUPFD_CLOEXEC, 200))?;
        let root = check(libc::fcntl(root, libc::F_DUPFD_CLOEXEC, 200))?;
        check(libc::dup2(ns, ENTER_NS_FD))?;
        check(libc::dup2(root, ENTER_ROOT_FD))?;
    }
    Ok(())
}

/// Waits for a guest command; an error with what it printed unless it exited 0.
async fn finished(
    mut child: tokio::process::Child,
    mut stderr: tokio::process::ChildStderr,
    what: &str,
) -> std::io::Result<()> {
    let mut why = String::new();
    let _ = stderr.read_to_string(&mut why).await;
    let status = child.wait().await?;
    if status.success() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{what} failed ({status}): {}",
        why.trim()
    )))
}

/// Starts `warren-guest pack` in the target container, hands it `request` (a JSON
/// `PackRequest`) and returns its archive as a stream. The stream ends with an error unless
/// the packer exited successfully, so a packer that died half-way never yields an archive
/// that looks complete.
pub async fn pack_in_container(
    target: &Target,
    request: Vec<u8>,
) -> std::io::Result<impl Stream<Item = std::io::Result<Bytes>> + Send + 'static> {
    let mut child = spawn_guest(target, "pack", Stdio::piped())?;
    let mut stdin = child.stdin.take().expect("piped");
    // The packer reads its whole request before it writes a byte.
    stdin.write_all(&request).await?;
    drop(stdin);
    let stdout = child.stdout.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let body = tokio_util::io::ReaderStream::with_capacity(stdout, READ_SIZE);
    let outcome = futures_util::stream::once(async move {
        finished(child, stderr, "packing the sandbox's files").await
    })
    .filter_map(|r| async move { r.err().map(Err) });
    Ok(body.chain(outcome))
}

/// Runs `warren-guest remove` in the target container with `request` (a JSON
/// `RemovePathsRequest`): the paths a snapshot deleted, removed before it is unpacked.
pub async fn remove_in_container(target: &Target, request: Vec<u8>) -> std::io::Result<()> {
    let mut child = spawn_guest(target, "remove", Stdio::null())?;
    let mut stdin = child.stdin.take().expect("piped");
    let stderr = child.stderr.take().expect("piped");
    let written = stdin.write_all(&request).await;
    drop(stdin);
    finished(child, stderr, "removing the snapshot's deleted paths").await?;
    written
}

/// A `warren-guest unpack` started in the target container, ready for a tar.
pub struct Unpacker {
    child: tokio::process::Child,
}

impl Unpacker {
    /// Starts it (an error here means nothing was read from any archive yet).
    pub fn start(target: &Target) -> std::io::Result<Unpacker> {
        Ok(Unpacker {
            child: spawn_guest(target, "unpack", Stdio::null())?,
        })
    }

    /// Feeds `archive` to it and waits until every file is written. An error of the
    /// archive's own stream is returned as it is (the unpacker, cut short, is stopped).
    pub async fn unpack<S>(mut self, archive: S) -> std::io::Result<()>
    where
        S: Stream<Item = std::io::Result<Bytes>> + Send,
    {
        let mut stdin = self.child.stdin.take().expect("piped");
        let stderr = self.child.stderr.take().expect("piped");
        let mut archive = std::pin::pin!(archive);
        while let Some(piece) = archive.next().await {
            let piece = piece?;
            if let Err(e) = stdin.write_all(&piece).await {
                // It stopped reading: its own error says why.
                drop(stdin);
                finished(self.child, stderr, "unpacking the snapshot").await?;
                return Err(e);
            }
        }
        drop(stdin);
        finished(self.child, stderr, "unpacking the snapshot").await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::process::CommandExt;

    /// `path` opened close-on-exec (as `File::open` opens) at descriptor `at`.
    fn open_at(path: &str, at: libc::c_int) -> std::fs::File {
        let f = std::fs::File::open(path).unwrap();
        // SAFETY: `at` is free in this test's own process (nextest runs each test alone
        // in one); the new descriptor is owned by the returned File.
        unsafe {
            assert_eq!(libc::dup2(f.as_raw_fd(), at), at);
            assert_eq!(libc::fcntl(at, libc::F_SETFD, libc::FD_CLOEXEC), 0);
            std::fs::File::from_raw_fd(at)
        }
    }

    /// What descriptor `fd` of a child refers to, as `readlink /proc/self/fd/N` prints it.
    fn link_of_fd(fd: libc::c_int) -> String {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .unwrap()
            .display()
            .to_string()
    }

    /// Wherever the node happened to open the two descriptors — also exactly where the
    /// guest binary looks for them, which a busy node with a hundred open descriptors does
    /// — the child finds the namespace at ENTER_NS_FD and the root at ENTER_ROOT_FD.
    #[test]
    fn the_child_finds_both_descriptors_wherever_the_node_opened_them() {
        let ns_link = link_of_fd(open_at("/proc/self/ns/mnt", 300).as_raw_fd());
        for (ns_at, root_at) in [
            (ENTER_NS_FD, ENTER_ROOT_FD),
            (ENTER_ROOT_FD, ENTER_NS_FD),
            (ENTER_NS_FD, 150),
            (150, ENTER_ROOT_FD),
            (150, 151),
        ] {
            let ns = open_at("/proc/self/ns/mnt", ns_at);
            let root = open_at("/", root_at);
            let (ns_fd, root_fd) = (ns.as_raw_fd(), root.as_raw_fd());
            let script = format!(
                "[ \"$(readlink /proc/self/fd/{ENTER_NS_FD})\" = '{ns_link}' ] && [ \"$(readlink /proc/self/fd/{ENTER_ROOT_FD})\" = / ]"
            );
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.args(["-c", &script]);
            // SAFETY: as in `spawn_guest`.
            unsafe {
                cmd.pre_exec(move || hand_over(ns_fd, root_fd));
            }
            let status = cmd.status().unwrap();
            assert!(
                status.success(),
                "opened at {ns_at} and {root_at}: the child did not get them"
            );
            drop((ns, root));
        }
    }
}
