//! The dead-man fence between a node and the guests of its sandboxes.
//!
//! A node of a cluster may serve its sandboxes only while it holds an ownership lease: once
//! the lease runs out, the cluster's majority may start another copy of them elsewhere. While
//! the node process lives, it freezes its sandboxes itself when the lease lapses; when the
//! node process is gone (a crash, `kill -9`, an OOM kill), nobody would, and the containers
//! would run on beside the new copies. So the node writes, into a directory every container
//! of it has mounted read-only ([`FENCE_DIR_IN_CONTAINER`]), how long its lease still runs,
//! and renews that while it holds one. The guest, as the container's init, reads it a few
//! times a second and stops every other process of the sandbox (`SIGSTOP`) once that time
//! has passed, and lets them go on (`SIGCONT`) once it is renewed.
//!
//! The time is on `CLOCK_BOOTTIME` in nanoseconds: one clock for the node and all of its
//! containers (they share the host's kernel and no time namespace), which also counts the
//! time the machine was suspended.
//!
//! ```text
//! warren-fence 1 off          this node needs no fence (it is alone in its cluster)
//! warren-fence 1 until <ns>   processes may run while CLOCK_BOOTTIME < ns; 0: stop now
//! ```

/// Where a container sees its node's fence directory (read-only).
pub const FENCE_DIR_IN_CONTAINER: &str = "/.warren/fence";
/// The file in it.
pub const FENCE_FILE: &str = "lease";
/// The first word of every fence file.
const MAGIC: &str = "warren-fence";
/// The format this version writes and reads.
const VERSION: u32 = 1;

/// What the node says about its sandboxes' processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// No fence: the node is alone in its cluster (nobody else can take its sandboxes).
    Off,
    /// Processes may run while `CLOCK_BOOTTIME` reads less than this (nanoseconds).
    Until(u64),
}

/// `CLOCK_BOOTTIME` in nanoseconds: the clock of every fence.
#[cfg(target_os = "linux")]
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the guest makes of the fence file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Stop,
}

impl Fence {
    /// Stop at once.
    pub const STOP: Fence = Fence::Until(0);

    /// The file's content.
    pub fn render(&self) -> String {
        match self {
            Fence::Off => format!("{MAGIC} {VERSION} off\n"),
            Fence::Until(ns) => format!("{MAGIC} {VERSION} until {ns}\n"),
        }
    }

    /// Reads a file's content; `None` when it is not a fence of this format.
    pub fn parse(text: &str) -> Option<Fence> {
        let mut words = text.split_ascii_whitespace();
        if words.next() != Some(MAGIC) || words.next()?.parse::<u32>().ok()? != VERSION {
            return None;
        }
        let fence = match words.next()? {
            "off" => Fence::Off,
            "until" => Fence::Until(words.next()?.parse().ok()?),
            _ => return None,
        };
        words.next().is_none().then_some(fence)
    }

    /// Whether processes may run at `now_ns` (`CLOCK_BOOTTIME`).
    pub fn allows(&self, now_ns: u64) -> bool {
        match self {
            Fence::Off => true,
            Fence::Until(until) => now_ns < *until,
        }
    }
}

/// The guest's verdict on what it read: `None` when there is no fence file at all (a node
/// that fences nothing, or a container made before fences existed), else the file's text.
/// A file that cannot be understood stops the sandbox: only the node writes it, so garbage
/// there means the node is not in a state to vouch for anything.
pub fn verdict(content: Option<&str>, now_ns: u64) -> Verdict {
    match content.map(Fence::parse) {
        None => Verdict::Run,
        Some(Some(f)) if f.allows(now_ns) => Verdict::Run,
        Some(_) => Verdict::Stop,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn boottime_moves_forward() {
        let a = boottime_ns();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = boottime_ns();
        assert!(b >= a + 5_000_000, "{a} {b}");
    }

    #[test]
    fn what_is_written_reads_back() {
        for f in [Fence::Off, Fence::STOP, Fence::Until(123_456_789_000)] {
            assert_eq!(Fence::parse(&f.render()), Some(f));
        }
        assert_eq!(Fence::Off.render(), "warren-fence 1 off\n");
    }

    #[test]
    fn anything_else_is_not_a_fence() {
        for bad in [
            "",
            "warren-fence",
            "warren-fence 2 off",
            "warren-fence 1",
            "warren-fence 1 until",
            "warren-fence 1 until -5",
            "warren-fence 1 until 12x",
            "warren-fence 1 until 5 6",
            "warren-fence 1 maybe",
            "fence 1 off",
        ] {
            assert_eq!(Fence::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn processes_run_until_the_time_written_and_stop_on_what_cannot_be_read() {
        assert_eq!(verdict(None, 10), Verdict::Run, "no fence file: no fence");
        assert_eq!(verdict(Some("warren-fence 1 off\n"), 10), Verdict::Run);
        let until = Fence::Until(100).render();
        assert_eq!(verdict(Some(&until), 99), Verdict::Run);
        assert_eq!(verdict(Some(&until), 100), Verdict::Stop);
        assert_eq!(verdict(Some(&Fence::STOP.render()), 0), Verdict::Stop);
        assert_eq!(verdict(Some(""), 0), Verdict::Stop, "garbage stops");
        assert_eq!(verdict(Some("warren-fence 9 off"), 0), Verdict::Stop);
    }
}
