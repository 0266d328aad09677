//! The node's consensus runtime: a tokio runtime of its own for what must keep its pace
//! whatever the node's request threads are doing — Raft (its core, log and state machine,
//! replication), the QUIC endpoint and every peer connection, the serving of peers' Raft and
//! cluster calls, the lease keeper, the supervisor and the fence.
//!
//! On the node's one runtime these waited behind request handling, restores and archive
//! work: in a 1,000-sandbox failover on this 2-core machine the surviving follower missed a
//! lease renewal about once a minute ("no reply from the leader within 2s") while the leader
//! answered each request within 100 ms of reaching its handler, and a node without its lease
//! freezes every sandbox it runs (docs/benchmarks.md). Its threads also run at a higher
//! priority than the node's other threads ([`THREAD_NICE`]): within the node's share of the
//! CPU, they run first.

use std::sync::atomic::{AtomicBool, Ordering};

/// The nice value of the runtime's threads, against 0 for the node's other threads: each
/// weighs about nine times as much on the CPU.
pub const THREAD_NICE: i32 = -10;

/// Its worker threads: Raft's work is small and bursty; two let a slow state-machine write
/// and a heartbeat go on side by side.
const WORKERS: usize = 2;

/// What its threads are called (`ps -eLo comm`).
pub const THREAD_NAME: &str = "warren-raft";

/// The runtime; shut down (in the background, without waiting for its tasks) when dropped,
/// which the node does last on its way out.
pub struct ConsensusRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

impl ConsensusRuntime {
    pub fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name(THREAD_NAME)
            .enable_all()
            .on_thread_start(raise_this_thread)
            .build()?;
        Ok(ConsensusRuntime {
            runtime: Some(runtime),
        })
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.as_ref().expect("runs until dropped").handle()
    }
}

impl Drop for ConsensusRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// Whether a thread could not be raised already (warned once).
static WARNED: AtomicBool = AtomicBool::new(false);

/// Gives the calling thread [`THREAD_NICE`] (Linux keeps a nice value per thread). Needs
/// `CAP_SYS_NICE`, as root has; without it the threads stay at the node's priority.
fn raise_this_thread() {
    if let Err(e) = set_thread_nice(THREAD_NICE) {
        if !WARNED.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, nice = THREAD_NICE, "cannot raise the consensus threads' priority: under a busy node, leases may still be renewed late");
        }
    }
}

/// Sets the calling thread's nice value.
fn set_thread_nice(nice: i32) -> std::io::Result<()> {
    // SAFETY: gettid and setpriority have no memory preconditions.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
    // SAFETY: as above.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, nice) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
#[cfg(test)]
fn thread_nice() -> i32 {
    // SAFETY: as above; getpriority returns the value itself (errno tells errors apart,
    // and for the calling thread there are none).
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::getpriority(libc::PRIO_PROCESS, tid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn its_threads_run_above_the_rest_of_the_node_when_allowed() {
        let before = thread_nice();
        let rt = ConsensusRuntime::start().unwrap();
        let (name, nice) = rt
            .handle()
            .block_on(rt.handle().spawn(async {
                (
                    std::thread::current().name().map(String::from),
                    thread_nice(),
                )
            }))
            .unwrap();
        assert_eq!(name.as_deref(), Some(THREAD_NAME));
        // This test's own thread is untouched.
        assert_eq!(thread_nice(), before);
        if warren_node::runtime::running_as_root() {
            assert_eq!(nice, THREAD_NICE);
        } else {
            assert_eq!(nice, before);
        }
    }
}
