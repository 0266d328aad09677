//! The guest's half of the dead-man fence (`warren_api::fence`): as the container's init it
//! reads its node's fence file, and once the time the node vouched for has passed (the node
//! lost its lease, or died and renews nothing), stops every other process of the sandbox
//! with `SIGSTOP` — they keep their memory and files, and make no progress — until the node
//! renews it, when exactly the processes it stopped go on (`SIGCONT`). A process that was
//! stopped before (job control, a debugger) is left as it was.
//!
//! When it looks next is `next_look`: at the time vouched for (so that a dead node's
//! sandboxes stop then, not a look later), within a second while the sandbox runs, and
//! every 100 ms while it is stopped (to catch what forked meanwhile and to go on promptly
//! once renewed). Looking every 100 ms whatever the file said made an idle sandbox's guest
//! wake ten times a second, most of its idle CPU (a node with 400 idle sandboxes spent a
//! sixth of a core on them). A node that is alive and loses its lease freezes its
//! containers itself (`control/src/fence.rs`); the file's "stop now" is for the guests that
//! look while stopped, and otherwise takes effect by the time the node had vouched for.
//!
//! It runs on a thread of its own, not on the runtime that serves the node: a busy runtime
//! must not delay it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warren_api::fence::{boottime_ns, verdict, Fence, Verdict, FENCE_DIR_IN_CONTAINER, FENCE_FILE};

/// How often the file is read while the sandbox is stopped.
const LOOK_EVERY: Duration = Duration::from_millis(100);
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
            let mut fence = Stopper::default();
            loop {
                let content = std::fs::read_to_string(&path).ok();
                fence.apply(verdict(content.as_deref(), boottime_ns()), processes);
                std::thread::sleep(next_look(content.as_deref(), boottime_ns(), fence.fenced));
            }
        })
        .ok()
}

/// How long to wait before the next look, from what the file said (`content`; `None`: no
/// file), the time now (`CLOCK_BOOTTIME`, ns) and whether the sandbox is stopped: never
/// past the time the node vouched for, at most `LOOK_AT_MOST_EVERY` while it runs,
/// `LOOK_EVERY` while it is stopped.
pub fn next_look(content: Option<&str>, now_ns: u64, fenced: bool) -> Duration {
    if fenced {
        return LOOK_EVERY;
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

/// The processes this fence (or a pack hold, `pack_hold`) stopped, by pid, with their start
/// times (a pid used again by another process is not that process).
#[derive(Default)]
pub(crate) struct Stopper {
    stopped: HashMap<i32, u64>,
    fenced: bool,
}

impl Stopper {
    /// Acts on a verdict; `list` gives the processes to stop (all of the namespace's).
    fn apply(&mut self, v: Verdict, list: impl FnOnce() -> Vec<(i32, String)>) {
        match v {
            Verdict::Stop => {
                if !self.fenced {
                    eprintln!("warren-guest: the node's lease ran out: every process of the sandbox is stopped until it is renewed");
                    self.fenced = true;
                }
                // Again on every look: a process that was forking as the others stopped.
                let _ = self.stop_all(list());
            }
            Verdict::Run if self.fenced => {
                self.fenced = false;
                let n = self.continue_all();
                eprintln!("warren-guest: the node renewed its lease: {n} stopped processes go on");
            }
            Verdict::Run => {}
        }
    }

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
            next_look(Some(&until(now + ms(300))), now, false),
            Duration::from_millis(300)
        );
        // Vouched for long: within a second all the same.
        assert_eq!(
            next_look(Some(&until(now + ms(30_000))), now, false),
            LOOK_AT_MOST_EVERY
        );
        // Right at the time, or past it before the verdict caught up: no busy loop.
        assert_eq!(
            next_look(Some(&until(now)), now, false),
            LOOK_AT_LEAST_EVERY
        );
        // Stopped: every 100 ms, whatever the file says.
        for content in [Some(until(now + ms(30_000))), Some(until(0)), None] {
            assert_eq!(next_look(content.as_deref(), now, true), LOOK_EVERY);
        }
        // Off, or no file: nothing to stop for.
        assert_eq!(
            next_look(Some(&Fence::Off.render()), now, false),
            LOOK_AT_MOST_EVERY
        );
        assert_eq!(next_look(None, now, false), LOOK_AT_MOST_EVERY);
        // Not a fence: looked at again soon.
        assert_eq!(next_look(Some("garbage"), now, false), LOOK_EVERY);
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
            let wait = next_look(Some(&until(now + left)), now, false);
            assert!(
                wait.as_nanos() as u64 <= left.max(ms(1)),
                "{left} ns left, waits {wait:?}"
            );
        }
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
        let mut f = Stopper::default();
        f.apply(Verdict::Run, list);
        assert_ne!(state_of(pa), 'T', "running while the fence holds");
        f.apply(Verdict::Stop, list);
        assert_eq!(wait_state(pa, |s| s == 'T'), 'T', "stopped once it lapsed");
        assert_eq!(f.stopped.len(), 1, "only a: b was stopped already");
        f.apply(Verdict::Stop, list);
        assert_eq!(f.stopped.len(), 1, "stopped once");
        f.apply(Verdict::Run, list);
        assert_ne!(wait_state(pa, |s| s != 'T'), 'T', "goes on once renewed");
        assert_eq!(state_of(pb), 'T', "b is left as its owner wanted it");
        assert!(f.stopped.is_empty());
        for c in [&mut a, &mut b] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }
}
