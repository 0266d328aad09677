//! Holds that make the guest's archive one instant of the sandbox's files. When the node
//! cannot freeze a container and read its files itself (`pack_in_guest`, or its spool is
//! full), the guest packs them — inside the container, so the cgroup freezer would stop the
//! guest too. Instead the node asks for a hold (`POST /archive/hold`): the guest stops every
//! other process with SIGSTOP (again until a round finds none running, so that a process
//! forking meanwhile is caught); the node lists what changed; the pack that claims the hold
//! reads the files, and when its archive is written (or fails) exactly the processes the
//! hold stopped go on (`fence::Stopper`, which leaves a process stopped by its owner as it
//! was). A hold no pack claims within its `max_ms` (the node died, or gave up) ends by
//! itself. Holds overlap: processes go on when the last ends.

use crate::fence::{processes, Stopper};
use std::collections::HashMap;
#[cfg(test)]
use std::collections::HashSet;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

/// The longest a hold may wait for its pack.
pub const MAX_UNCLAIMED: Duration = Duration::from_secs(60);

/// Rounds of stopping before a hold is taken as complete (each finds the processes that a
/// fork made during the one before).
const ROUNDS: usize = 10;

#[derive(Default)]
struct Holds {
    next: u64,
    /// Open holds; `true` once a pack claimed one.
    open: HashMap<u64, bool>,
    stopper: Stopper,
}

static HOLDS: LazyLock<Mutex<Holds>> = LazyLock::new(Default::default);

/// Begins a hold: every other process of the sandbox is stopped. Its id, and how many
/// processes it holds. Only the sandbox's init may: anywhere else, "every other process" is
/// not the sandbox's.
pub fn begin(max_unclaimed: Duration) -> Result<(u64, usize), String> {
    if std::process::id() != 1 {
        return Err("the guest is not the sandbox's init: it cannot hold its processes".into());
    }
    Ok(begin_with(processes, max_unclaimed))
}

/// `begin` over the processes `list` gives.
fn begin_with(list: impl Fn() -> Vec<(i32, String)>, max_unclaimed: Duration) -> (u64, usize) {
    let mut h = HOLDS.lock().expect("holds lock");
    for _ in 0..ROUNDS {
        if h.stopper.stop_all(list()) == 0 {
            break;
        }
    }
    h.next += 1;
    let id = h.next;
    h.open.insert(id, false);
    let held = h.stopper.held();
    drop(h);
    let wait = max_unclaimed.min(MAX_UNCLAIMED);
    std::thread::spawn(move || {
        std::thread::sleep(wait);
        let unclaimed = HOLDS
            .lock()
            .expect("holds lock")
            .open
            .get(&id)
            .is_some_and(|claimed| !claimed);
        if unclaimed {
            eprintln!("warren-guest: hold {id} was not claimed by a pack within {wait:?}: the sandbox goes on");
            end(id);
        }
    });
    (id, held)
}

/// A pack claims hold `id`: it lasts until that pack ends it. False when the hold is not
/// open (it ended, unclaimed, or never was).
pub fn claim(id: u64) -> bool {
    let mut h = HOLDS.lock().expect("holds lock");
    match h.open.get_mut(&id) {
        Some(claimed) if !*claimed => {
            *claimed = true;
            true
        }
        _ => false,
    }
}

/// Ends hold `id`; when no hold is left, the processes go on. How many went on.
pub fn end(id: u64) -> usize {
    let mut h = HOLDS.lock().expect("holds lock");
    if h.open.remove(&id).is_none() || !h.open.is_empty() {
        return 0;
    }
    h.stopper.continue_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::test_procs::{state_of, wait_state};

    fn open() -> HashSet<u64> {
        HOLDS.lock().unwrap().open.keys().copied().collect()
    }

    /// One test: the holds are one per process.
    #[test]
    fn a_hold_stops_the_processes_until_its_pack_ends_or_it_goes_unclaimed() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let list = move || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|s| vec![(pid, s)])
                .unwrap_or_default()
        };
        // Claimed by a pack: stopped until the pack ends it.
        let (a, held) = begin_with(list, Duration::from_secs(60));
        assert_eq!(held, 1);
        assert_eq!(wait_state(pid, |s| s == 'T'), 'T');
        assert!(claim(a));
        assert!(!claim(a), "claimed once");
        // A second hold overlapping the first: the process goes on when the last ends.
        let (b, _) = begin_with(list, Duration::from_secs(60));
        assert!(claim(b));
        assert_eq!(end(a), 0);
        assert_eq!(state_of(pid), 'T', "still held by b");
        assert_eq!(end(b), 1);
        assert_ne!(wait_state(pid, |s| s != 'T'), 'T');
        assert!(open().is_empty());
        // Not claimed in time: it ends by itself, and a late pack cannot claim it.
        let (c, _) = begin_with(list, Duration::from_millis(200));
        assert_eq!(wait_state(pid, |s| s == 'T'), 'T');
        assert_ne!(wait_state(pid, |s| s != 'T'), 'T', "unclaimed holds end");
        assert!(!claim(c));
        assert!(!open().contains(&c));
        // Outside a container's init, no hold.
        assert!(begin(Duration::from_secs(1)).is_err());
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
