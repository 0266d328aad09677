//! Host work: what the node does on a sandbox's behalf with its own CPU and disk —
//! archiving and unpacking snapshots (`warren-guest pack|unpack --enter` children), hashing
//! and compressing their chunks, walking and copying overlay upper directories for forks —
//! runs in a cgroup of its own with a CPU quota, a low CPU weight and a bandwidth limit on
//! the disks it reads and writes, never in the node's cgroup or a sandbox's. One sandbox's
//! 50 GB snapshot then takes at most that quota, while the node's API and the other
//! sandboxes keep theirs.
//!
//! The work runs on the blocking threads of a small runtime of its own, whose threads move
//! themselves into the cgroup as they start (cgroup v1 places threads one by one), and in
//! child processes that move themselves there before they exec (v1 and v2). On cgroup v2 a
//! thread cannot leave its process's cgroup outside a threaded subtree: there only the
//! children are bounded, and `status` says so.
//!
//! The cgroup is named after the node's data directory (`warren-host-work-<hash>`), so
//! that several nodes on one machine each have their own and a restarted node finds its
//! own again. Empty ones that nodes killed before their shutdown left behind are removed at
//! the next node's start.

pub mod cgroups;

use cgroups::{Layout, Limits, Setting};
use sha2::{Digest, Sha256};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use warren_storage::BlockingPool;

/// Prefix of every host-work cgroup's name.
const NAME_PREFIX: &str = "warren-host-work-";

/// What the node was asked to bound its host work to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostWorkConfig {
    pub limits: Limits,
    /// Threads the work runs on at most at once.
    pub threads: usize,
}

impl HostWorkConfig {
    /// Defaults for a machine with `cpus` CPUs: half of them (at least half a CPU) and
    /// 256 MiB/s per disk.
    pub fn for_cpus(cpus: usize) -> Self {
        let half = (cpus as f64 / 2.0).max(0.5);
        HostWorkConfig {
            limits: Limits {
                cpus: half,
                io_bps: 256 << 20,
            },
            threads: threads_for(half),
        }
    }
}

/// Enough threads to use the quota, never fewer than four: a long fork copy or disk walk
/// must not hold up a snapshot's chunks (the quota, not the thread count, bounds the CPU).
pub fn threads_for(cpus: f64) -> usize {
    (cpus.ceil() as usize).max(4)
}

/// Where host work runs, and how it is bounded.
pub struct HostWork {
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    pool: BlockingPool,
    placement: Arc<Placement>,
    status: HostWorkStatus,
}

/// What an operator reads in `/healthz`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct HostWorkStatus {
    /// The cgroup's name under each hierarchy's root (none: unbounded).
    pub cgroup: Option<String>,
    pub cpus: f64,
    pub io_bytes_per_second: u64,
    /// The devices (`major:minor`) whose bandwidth is limited.
    pub devices: Vec<String>,
    /// Whether the node's own work threads are in the cgroup, not only its children.
    pub threads_bounded: bool,
    /// Why host work is not (fully) bounded, if it is not.
    pub problem: Option<String>,
}

/// How a thread or a child process joins the cgroup.
struct Placement {
    layout: Option<Layout>,
    name: String,
    settings: Vec<Setting>,
    thread_files: Vec<PathBuf>,
    /// NUL-terminated, ready for a child between fork and exec (no allocation there).
    process_files: Vec<CString>,
}

impl Placement {
    /// No cgroup: threads and children stay where they are.
    fn none(name: String) -> Placement {
        Placement {
            layout: None,
            name,
            settings: Vec::new(),
            thread_files: Vec::new(),
            process_files: Vec::new(),
        }
    }

    /// Creates the cgroup (again, if something removed it) and writes its limits. A disk
    /// bandwidth limit the kernel refuses (a device without a request queue) leaves the
    /// CPU limits in force: returned as a problem, not an error.
    fn ensure(&self) -> std::io::Result<Option<String>> {
        let Some(layout) = &self.layout else {
            return Ok(None);
        };
        for d in layout.dirs(&self.name) {
            if !d.is_dir() {
                std::fs::create_dir(&d).or_else(|e| match e.kind() {
                    std::io::ErrorKind::AlreadyExists => Ok(()),
                    _ => Err(e),
                })?;
            }
        }
        let mut bandwidth = None;
        for s in &self.settings {
            if let Err(e) = std::fs::write(s.dir.join(s.file), &s.value) {
                let why = format!("{}/{} = {}: {e}", s.dir.display(), s.file, s.value);
                if s.file.starts_with("blkio.") || s.file.starts_with("io.") {
                    bandwidth = Some(format!("no disk bandwidth limit: {why}"));
                } else {
                    return Err(std::io::Error::new(e.kind(), why));
                }
            }
        }
        Ok(bandwidth)
    }

    /// Moves the calling thread (alone) into the cgroup.
    fn join_thread(&self) -> std::io::Result<()> {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) };
        let write_all = || {
            self.thread_files
                .iter()
                .try_for_each(|f| std::fs::write(f, tid.to_string()))
        };
        write_all().or_else(|_| {
            // Removed under us (a sweep of another node's start, an operator): once more.
            self.ensure()?;
            write_all()
        })
    }
}

impl HostWork {
    /// Sets up the cgroup for the node whose data lives in `data_dir`, bounding `config`'s
    /// limits on the disks that hold `paths`. Never fails: what cannot be set up leaves the
    /// work unbounded, logged and reported in `status`.
    pub fn start(data_dir: &Path, paths: &[&Path], config: HostWorkConfig) -> Arc<HostWork> {
        let name = format!("{NAME_PREFIX}{}", path_hash(data_dir));
        let layout = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| cgroups::layout(&m));
        let mut problem = None;
        let devices = if config.limits.io_bps > 0 {
            block_devices(paths)
        } else {
            Vec::new()
        };
        let placement = match &layout {
            Some(l) => {
                sweep_stale(l, &name);
                if let (Some(ctl), Layout::V2 { root }) = (l.v2_controllers(), l) {
                    // Best effort: a root that already hands them down keeps doing so.
                    let _ = std::fs::write(root.join("cgroup.subtree_control"), ctl);
                }
                Placement {
                    layout: Some(l.clone()),
                    settings: l.settings(&name, config.limits, &devices),
                    thread_files: l.thread_files(&name),
                    process_files: l
                        .process_files(&name)
                        .iter()
                        .filter_map(|p| CString::new(p.as_os_str().as_encoded_bytes()).ok())
                        .collect(),
                    name: name.clone(),
                }
            }
            None => {
                problem = Some("no cgroup hierarchy with a cpu controller is mounted".into());
                Placement::none(name.clone())
            }
        };
        let mut partial = None;
        match placement.ensure() {
            Ok(p) => partial = p,
            Err(e) => problem = Some(format!("cannot set up the host-work cgroup: {e}")),
        }
        let bounded = placement.layout.is_some() && problem.is_none();
        let placement = Arc::new(if bounded {
            placement
        } else {
            Placement::none(name)
        });
        let threads_bounded = bounded && !placement.thread_files.is_empty();
        problem = problem.or(partial);
        if bounded && !threads_bounded {
            problem = Some(
                "cgroup v2: snapshot archiving and unpacking are bounded, the node's chunk hashing and compression are not"
                    .into(),
            );
        }
        let joiner = placement.clone();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(config.threads.max(1))
            .thread_name("warren-host-work")
            .on_thread_start(move || {
                if joiner.thread_files.is_empty() {
                    return;
                }
                if let Err(e) = joiner.join_thread() {
                    tracing::error!(error = %e, "a host-work thread cannot join its cgroup: its work is not bounded");
                }
            })
            .build();
        let (runtime, pool) = match runtime {
            Ok(rt) => {
                let pool = BlockingPool::on(rt.handle().clone());
                (Some(rt), pool)
            }
            Err(e) => {
                problem = Some(format!("cannot start the host-work threads: {e}"));
                (None, BlockingPool::default())
            }
        };
        let status = HostWorkStatus {
            cgroup: bounded.then(|| placement.name.clone()),
            cpus: config.limits.cpus,
            io_bytes_per_second: config.limits.io_bps,
            devices: if bounded {
                devices.iter().map(|(a, b)| format!("{a}:{b}")).collect()
            } else {
                Vec::new()
            },
            threads_bounded: threads_bounded && runtime.is_some(),
            problem,
        };
        match &status.problem {
            None => tracing::info!(cgroup = %placement.name, cpus = config.limits.cpus,
                io_mib_s = config.limits.io_bps >> 20, devices = ?status.devices,
                "host work (snapshots, fork copies) runs in its own bounded cgroup"),
            Some(p) => tracing::warn!(problem = %p, "host work is not fully bounded"),
        }
        Arc::new(HostWork {
            runtime: Mutex::new(runtime),
            pool,
            placement,
            status,
        })
    }

    /// Host work that is never bounded (tests of other parts, tools).
    pub fn unbounded() -> Arc<HostWork> {
        Arc::new(HostWork {
            runtime: Mutex::new(None),
            pool: BlockingPool::default(),
            placement: Arc::new(Placement::none(String::new())),
            status: HostWorkStatus {
                cgroup: None,
                cpus: 0.0,
                io_bytes_per_second: 0,
                devices: Vec::new(),
                threads_bounded: false,
                problem: Some("not set up".into()),
            },
        })
    }

    /// Where the node's CPU-heavy host work runs.
    pub fn pool(&self) -> BlockingPool {
        self.pool.clone()
    }

    pub fn status(&self) -> &HostWorkStatus {
        &self.status
    }

    /// What a child process runs between fork and exec to move itself into the cgroup
    /// (nothing where there is none). Only async-signal-safe calls, no allocation.
    pub fn child_joiner(&self) -> ChildJoiner {
        let p = &self.placement;
        if let Some(l) = &p.layout {
            // An empty cgroup may have been swept by another node's start: made again.
            if l.dirs(&p.name).iter().any(|d| !d.is_dir()) {
                if let Err(e) = p.ensure() {
                    tracing::warn!(error = %e, "cannot make the host-work cgroup again");
                }
            }
        }
        ChildJoiner {
            placement: self.placement.clone(),
        }
    }

    /// CPU time the cgroup has used, in nanoseconds (none without one).
    pub fn cpu_used_ns(&self) -> Option<u64> {
        let layout = self.placement.layout.as_ref()?;
        let (path, format) = layout.usage(&self.placement.name)?;
        cgroups::parse_usage(format, &std::fs::read_to_string(path).ok()?)
    }

    /// Stops the threads (waiting a moment for work in flight) and removes the cgroup.
    pub async fn shutdown(&self) {
        let rt = self.runtime.lock().expect("host work lock").take();
        if let Some(rt) = rt {
            let _ = tokio::task::spawn_blocking(move || {
                rt.shutdown_timeout(std::time::Duration::from_secs(2))
            })
            .await;
        }
        if let Some(l) = &self.placement.layout {
            // Exited threads leave the cgroup a moment after they are joined.
            for _ in 0..20 {
                let left = l
                    .dirs(&self.placement.name)
                    .iter()
                    .filter(|d| std::fs::remove_dir(d).is_err() && d.exists())
                    .count();
                if left == 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

impl Drop for HostWork {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.get_mut().ok().and_then(Option::take) {
            rt.shutdown_background();
        }
    }
}

/// Moves a child process into the host-work cgroup before it execs.
#[derive(Clone)]
pub struct ChildJoiner {
    placement: Arc<Placement>,
}

impl ChildJoiner {
    /// Runs in the forked child: writes `0` (the writer itself) to each `cgroup.procs`.
    pub fn join(&self) -> std::io::Result<()> {
        for f in &self.placement.process_files {
            // SAFETY: open/write/close on a NUL-terminated path prepared before the fork.
            unsafe {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n != 1 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

/// Removes the host-work cgroup of the node whose data lives in `data_dir`, once that node
/// has stopped (a killed node's is left behind; tests and tools clean up after it). A cgroup
/// still in use stays.
pub fn remove_cgroup_of(data_dir: &Path) {
    let Ok(dir) = data_dir.canonicalize() else {
        return;
    };
    let name = format!("{NAME_PREFIX}{}", path_hash(&dir));
    if let Some(l) = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| cgroups::layout(&m))
    {
        for d in l.dirs(&name) {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// The first 16 hex digits of the SHA-256 of a path.
fn path_hash(p: &Path) -> String {
    let d = Sha256::digest(p.as_os_str().as_encoded_bytes());
    hex::encode(&d[..8])
}

/// Removes the empty host-work cgroups of nodes that are gone (a non-empty one belongs to
/// a running node: the kernel refuses to remove it).
fn sweep_stale(layout: &Layout, mine: &str) {
    for parent in layout
        .dirs("")
        .iter()
        .map(|d| d.components().collect::<PathBuf>())
    {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(NAME_PREFIX) && name != mine {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

/// The whole-disk block devices (`major`, `minor`) that hold `paths` (a partition's disk:
/// bandwidth limits apply to disks), without duplicates. Paths on no block device (tmpfs)
/// are left out.
fn block_devices(paths: &[&Path]) -> Vec<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for p in paths {
        let Ok(m) = std::fs::metadata(p) else {
            continue;
        };
        let dev = m.dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        if major == 0 {
            continue;
        }
        let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
        let disk = if sys.join("partition").exists() {
            std::fs::canonicalize(&sys)
                .ok()
                .and_then(|d| std::fs::read_to_string(d.parent()?.join("dev")).ok())
                .and_then(|s| {
                    let (a, b) = s.trim().split_once(':')?;
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
        } else if sys.exists() {
            Some((major, minor))
        } else {
            None
        };
        if let Some(d) = disk {
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    out
}
