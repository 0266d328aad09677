//! The guest's half of the dead-man fence (`warren_api::fence`): as the container's init it
//! reads its node's fence file, and once the time the node vouched for has passed (the node
//! lost its lease, or died and renews nothing), stops every other process of the sandbox
//! with `SIGSTOP` — they keep their memory and files, and make no progress — until the node
//! renews it, when exactly the processes it stopped go on (`SIGCONT`). A process that was
//! stopped before (job control, a debugger) is left as it was.
//!
//! When it looks next is `next_look`: at the time vouched for (so that a dead node's
//! sandboxes stop then, not a look later), within a second while the sandbox runs, every
//! 100 ms for the first 10 s it is stopped (to go on promptly once renewed) and every second
//! after that. Looking every 100 ms whatever the file said made an idle sandbox's guest
//! wake ten times a second, most of its idle CPU (a node with 400 idle sandboxes spent a
//! sixth of a core on them).
//!
//! While stopped, the sandbox's processes are looked over again for one that escaped the
//! stop (forked as the others stopped) 100 ms after the stop, then at gaps that double up to
//! 5 s while none is found (`rescan_gap`): a stopped process starts nothing. Looking them
//! all over at every look made a dead node's guests the busiest processes of their host:
//! 1,000 of them read all of `/proc` ten times a second each, which took the 2 cores of
//! this machine (60% of it in the kernel) from the nodes taking the sandboxes over.
//!
//! A node that is alive and loses its lease freezes its containers itself
//! (`control/src/fence.rs`); the file's "stop now" is for the guests that look while
//! stopped, and otherwise takes effect by the time the node had vouched for.
//!
//! It runs on a thread of its own, not on the runtime that serves the node: a busy runtime
//! must not delay it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_api::fence::{boottime_ns, verdict, Fence, Verdict, FENCE_DIR_IN_CONTAINER, FENCE_FILE};

/// How often the file is read while the sandbox is stopped, at first.
const LOOK_EVERY: Duration = Duration::from_millis(100);
/// Stopped for longer than this, the file is read every `LOOK_AT_MOST_EVERY`.
const LONG_STOPPED: Duration = Duration::from_secs(10);
/// The first look over the processes after a stop (or after one that stopped an escaped
/// process).
const RESCAN_FIRST: Duration = Duration::from_millis(100);
/// The longest gap between two looks over the processes while stopped.
const RESCAN_AT_MOST_EVERY: Duration = Duration::from_secs(5);
/// The longest wait between two looks while the sandbox runs.
const LOOK_AT_MOST_EVERY: Duration = Duration::from_secs(1);
/// The shortest wait: a look just before the time vouched for waits for it, not in a loop.
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_millis(1);

/// The fence file as this container sees it.
pub fn default_path() -> PathBuf {
    Path::new(FENCE_DIR_IN_CONTAINER).join(FENCE_FILE)
}

/// Starts the fence thread, only as init of the container's pid namespace: anywhere else,
/// "every other process" is not the sandbox's.
pub fn spawn(path: PathBuf) -> Option<std::thread::JoinHandle<()>> {
    if std::process::id() != 1 {
        return None;
    }
    std::thread::Builder::new()
        .name("fence".into())
        .spawn(move || {
            let mut fence = FenceState::default();
            loop {
                let content = std::fs::read_to_string(&path).ok();
                let now = boottime_ns();
                fence.apply(verdict(content.as_deref(), now), now, processes);
                let now = boottime_ns();
                std::thread::sleep(next_look(content.as_deref(), now, fence.stopped_for(now)));
            }
        })
        .ok()
}

/// How long to wait before the next look, from what the file said (`content`; `None`: no
/// file), the time now (`CLOCK_BOOTTIME`, ns) and for how long the sandbox has been stopped
/// (`None`: it runs): never past the time the node vouched for, at most
/// `LOOK_AT_MOST_EVERY` while it runs, `LOOK_EVERY` while it has been stopped for less than
/// `LONG_STOPPED`, `LOOK_AT_MOST_EVERY` after that.
pub fn next_look(content: Option<&str>, now_ns: u64, stopped_for: Option<Duration>) -> Duration {
    match stopped_for {
        Some(d) if d < LONG_STOPPED => return LOOK_EVERY,
        Some(_) => return LOOK_AT_MOST_EVERY,
        None => {}
    }
    match content.map(Fence::parse) {
        Some(Some(Fence::Until(until))) => Duration::from_nanos(until.saturating_sub(now_ns))
            .clamp(LOOK_AT_LEAST_EVERY, LOOK_AT_MOST_EVERY),
        // No file or "off": nothing to stop for; a file that is not a fence stops the sandbox
        // at the look that read it, so it is fenced by the time this is asked.
        Some(Some(Fence::Off)) | None => LOOK_AT_MOST_EVERY,
        Some(None) => LOOK_EVERY,
    }
}

/// Pure: the gap before the next look over a stopped sandbox's processes, after a look that
/// waited `gap` and did (`found`) or did not find a process to stop.
pub(crate) fn rescan_gap(gap: Duration, found: bool) -> Duration {
    if found {
        RESCAN_FIRST
    } else {
        (gap * 2).clamp(RESCAN_FIRST, RESCAN_AT_MOST_EVERY)
    }
}

/// The fence's state: whether (since when) the sandbox is stopped, and when its processes
/// are looked over next.
#[derive(Default)]
struct FenceState {
    stopper: Stopper,
    /// Since when (ns, `CLOCK_BOOTTIME`) the sandbox is stopped; `None`: it runs.
    stopped_since: Option<u64>,
    /// The next look over the processes (ns) and the gap that led to it; `(0, 0)` while
    /// the sandbox runs, so that a stop looks them over at once and starts from the
    /// shortest gap.
    rescan: (u64, Duration),
}

impl FenceState {
    /// Acts on a verdict at `now_ns`; `list` gives the processes to stop (all of the
    /// namespace's), asked for only when they are looked over.
    fn apply(&mut self, v: Verdict, now_ns: u64, list: impl FnOnce() -> Vec<(i32, String)>) {
        match v {
            Verdict::Stop => {
                if self.stopped_since.is_none() {
                    eprintln!("warren-guest: the node's lease ran out: every process of the sandbox is stopped until it is renewed");
                    self.stopped_since = Some(now_ns);
                }
                let (due, gap) = self.rescan;
                if now_ns >= due {
                    let found = self.stopper.stop_all(list()) > 0;
                    let gap = rescan_gap(gap, found);
                    self.rescan = (now_ns + gap.as_nanos() as u64, gap);
                }
            }
            Verdict::Run if self.stopped_since.is_some() => {
                self.stopped_since = None;
                self.rescan = Default::default();
                let n = self.stopper.continue_all();
                eprintln!("warren-guest: the node renewed its lease: {n} stopped processes go on");
            }
            Verdict::Run => {}
        }
    }

    /// How long the sandbox has been stopped at `now_ns` (`None`: it runs).
    fn stopped_for(&self, now_ns: u64) -> Option<Duration> {
        self.stopped_since
            .map(|since| Duration::from_nanos(now_ns.saturating_sub(since)))
    }
}

/// The processes this fence (or a pack hold, `pack_hold`) stopped, by pid, with their start
/// times (a pid used again by another process is not that process).
#[derive(Default)]
pub(crate) struct Stopper {
    stopped: HashMap<i32, u64>,
}

impl Stopper {
    /// Stops every process of `procs` but this one that runs; returns how many it stopped.
    pub(crate) fn stop_all(&mut self, procs: Vec<(i32, String)>) -> usize {
        let before = self.stopped.len();
        let me = std::process::id() as i32;
        for (pid, stat) in procs {
            if pid == me || self.stopped.contains_key(&pid) {
                continue;
            }
            let Some((state, start)) = state_and_start(&stat) else {
                continue;
            };
            if !runs(state) {
                continue;
            }
            // SAFETY: kill with a pid of this pid namespace and a constant signal.
            if unsafe { libc::kill(pid, libc::SIGSTOP) } == 0 {
                self.stopped.insert(pid, start);
            }
        }
        self.stopped.len() - before
    }

    /// How many processes it holds stopped.
    pub(crate) fn held(&self) -> usize {
        self.stopped.len()
    }

    /// Lets exactly the processes it stopped go on; how many did.
    pub(crate) fn continue_all(&mut self) -> usize {
        let mut n = 0;
        for (pid, start) in self.stopped.drain() {
            let same = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| state_and_start(&s))
                .is_some_and(|(_, s)| s == start);
            // SAFETY: as in stop_all.
            if same && unsafe { libc::kill(pid, libc::SIGCONT) } == 0 {
                n += 1;
            }
        }
        n
    }
}

/// Every process of this pid namespace with its `/proc/<pid>/stat` line.
pub(crate) fn processes() -> Vec<(i32, String)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            Some((
                pid,
                std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?,
            ))
        })
        .collect()
}

/// A process's state letter and start time (clock ticks after boot) from its stat line. The
/// command name is in parentheses and may hold anything, spaces and parentheses included:
/// the fields are counted from its last `)`.
fn state_and_start(stat: &str) -> Option<(char, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // After the name: state (field 3 of the line), ..., starttime (field 22).
    let state = fields.first()?.chars().next()?;
    let start = fields.get(19)?.parse().ok()?;
    Some((state, start))
}

/// Whether a process in `state` is one to stop: not already stopped or traced (left as its
/// owner wants it), not a zombie or dead.
fn runs(state: char) -> bool {
    !matches!(state, 'T' | 't' | 'Z' | 'X' | 'x')
}

/// A process's state, for the tests of the fence and of pack holds.
#[cfg(test)]
pub(crate) mod test_procs {
    use std::time::Duration;

    pub fn state_of(pid: i32) -> char {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        super::state_and_start(&stat).unwrap().0
    }

    /// Its state once `want` holds of it (or after 2 s).
    pub fn wait_state(pid: i32, want: impl Fn(char) -> bool) -> char {
        for _ in 0..200 {
            let s = state_of(pid);
            if want(s) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        state_of(pid)
    }
}

#[cfg(test)]
mod tests {
    use super::test_procs::{state_of, wait_state};
    use super::*;

    #[test]
    fn the_state_and_start_are_read_past_any_name() {
        let line =
            "4242 (a) b) (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(state_and_start(line), Some(('S', 987654)));
        // The thread that reads is running (the process's main thread may be waiting).
        let own = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
        let (state, start) = state_and_start(&own).unwrap();
        assert_eq!(state, 'R');
        assert!(start > 0);
        assert_eq!(state_and_start("12 (x) S 1"), None, "cut short");
        assert_eq!(state_and_start("no name"), None);
    }

    #[test]
    fn the_next_look_is_at_the_time_vouched_for_and_never_later() {
        let ms = |n: u64| n * 1_000_000;
        let now = ms(50_000);
        let until = |t: u64| Fence::Until(t).render();
        // Vouched for 300 ms more: the next look is then, not a second later.
        assert_eq!(
            next_look(Some(&until(now + ms(300))), now, None),
            Duration::from_millis(300)
        );
        // Vouched for long: within a second all the same.
        assert_eq!(
            next_look(Some(&until(now + ms(30_000))), now, None),
            LOOK_AT_MOST_EVERY
        );
        // Right at the time, or past it before the verdict caught up: no busy loop.
        assert_eq!(next_look(Some(&until(now)), now, None), LOOK_AT_LEAST_EVERY);
        // Stopped: every 100 ms, whatever the file says; every second once stopped for long
        // (a dead node's sandboxes: nothing renews their file soon).
        for content in [Some(until(now + ms(30_000))), Some(until(0)), None] {
            let look = |d: u64| next_look(content.as_deref(), now, Some(Duration::from_millis(d)));
            assert_eq!(look(0), LOOK_EVERY);
            assert_eq!(look(9_999), LOOK_EVERY);
            assert_eq!(look(10_000), LOOK_AT_MOST_EVERY);
        }
        // Off, or no file: nothing to stop for.
        assert_eq!(
            next_look(Some(&Fence::Off.render()), now, None),
            LOOK_AT_MOST_EVERY
        );
        assert_eq!(next_look(None, now, None), LOOK_AT_MOST_EVERY);
        // Not a fence: looked at again soon.
        assert_eq!(next_look(Some("garbage"), now, None), LOOK_EVERY);
        // Never past the time vouched for, whatever it is.
        for left in [
            0,
            1,
            999_999,
            ms(1),
            ms(99),
            ms(100),
            ms(999),
            ms(1000),
            ms(5000),
        ] {
            let wait = next_look(Some(&until(now + left)), now, None);
            assert!(
                wait.as_nanos() as u64 <= left.max(ms(1)),
                "{left} ns left, waits {wait:?}"
            );
        }
    }

    #[test]
    fn a_stopped_sandbox_is_looked_over_less_and_less_often_while_nothing_escapes() {
        let ms = |n: u64| n * 1_000_000;
        let mut f = FenceState::default();
        let mut looked_at = Vec::new();
        // A dead node's sandbox, its file read every 100 ms for a minute: its processes are
        // listed at the stop, then at gaps doubling to 5 s (before: at every look, 600 times).
        for t in (0..60_000).step_by(100) {
            f.apply(Verdict::Stop, ms(t), || {
                looked_at.push(t);
                Vec::new()
            });
        }
        assert_eq!(
            looked_at[..7],
            [0, 100, 300, 700, 1500, 3100, 6300],
            "{looked_at:?}"
        );
        let gaps: Vec<u64> = looked_at.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.iter().all(|g| *g <= 5_000), "{gaps:?}");
        assert!(
            looked_at.len() <= 18,
            "{} looks over a minute",
            looked_at.len()
        );
        assert_eq!(f.stopped_for(ms(60_000)), Some(Duration::from_secs(60)));
    }

    #[test]
    fn an_escaped_process_brings_the_looks_back_to_100_ms() {
        assert_eq!(rescan_gap(Duration::from_secs(5), true), RESCAN_FIRST);
        assert_eq!(
            rescan_gap(Duration::from_millis(100), false),
            Duration::from_millis(200)
        );
        assert_eq!(
            rescan_gap(Duration::from_secs(4), false),
            RESCAN_AT_MOST_EVERY
        );
        assert_eq!(rescan_gap(Duration::ZERO, false), RESCAN_FIRST);
    }

    #[test]
    fn only_running_or_sleeping_processes_are_stopped() {
        for s in ['R', 'S', 'D', 'I'] {
            assert!(runs(s), "{s}");
        }
        for s in ['T', 't', 'Z', 'X'] {
            assert!(!runs(s), "{s}");
        }
    }

    #[test]
    fn a_lapsed_fence_stops_processes_and_a_renewed_one_continues_only_those() {
        let mut a = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut b = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let (pa, pb) = (a.id() as i32, b.id() as i32);
        // b was stopped by someone else before the fence: it stays stopped afterwards.
        // SAFETY: kill of the test's own child.
        unsafe { libc::kill(pb, libc::SIGSTOP) };
        assert_eq!(wait_state(pb, |s| s == 'T'), 'T');
        let list = || {
            [pa, pb]
                .iter()
                .map(|p| {
                    (
                        *p,
                        std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap(),
                    )
                })
                .collect::<Vec<_>>()
        };
        let mut f = FenceState::default();
        let at = |ms: u64| ms * 1_000_000;
        f.apply(Verdict::Run, at(0), list);
        assert_ne!(state_of(pa), 'T', "running while the fence holds");
        f.apply(Verdict::Stop, at(1), list);
        assert_eq!(wait_state(pa, |s| s == 'T'), 'T', "stopped once it lapsed");
        assert_eq!(f.stopper.stopped.len(), 1, "only a: b was stopped already");
        f.apply(Verdict::Stop, at(500), list);
        assert_eq!(f.stopper.stopped.len(), 1, "stopped once");
        f.apply(Verdict::Run, at(600), list);
        assert_ne!(wait_state(pa, |s| s != 'T'), 'T', "goes on once renewed");
        assert_eq!(state_of(pb), 'T', "b is left as its owner wanted it");
        assert!(f.stopper.stopped.is_empty());
        for c in [&mut a, &mut b] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}
