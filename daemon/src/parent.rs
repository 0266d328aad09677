//! Stopping with the process that started the node (test harnesses and benchmarks).

use anyhow::bail;

/// With this set in its environment, a node stops (SIGTERM) when the process that started
/// it ends, however that ends: test harnesses and benchmarks set it, so that a crashed test
/// leaves no node running.
pub const EXIT_WITH_PARENT_ENV: &str = "WARREN_EXIT_WITH_PARENT";

/// Asks the kernel for a SIGTERM when the parent ends (`EXIT_WITH_PARENT_ENV`).
pub fn exit_with_parent() -> anyhow::Result<()> {
    // SAFETY: getppid and prctl(PR_SET_PDEATHSIG) have no memory effects.
    let parent = unsafe { libc::getppid() };
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) } != 0 {
        bail!(
            "cannot ask to stop with the parent: {}",
            std::io::Error::last_os_error()
        );
    }
    // It may have ended before the request was made.
    // SAFETY: as above.
    if unsafe { libc::getppid() } != parent {
        bail!("the process that started this node has ended");
    }
    Ok(())
}
