//! Pausing a container whose processes keep starting programs, on cgroup v1.
//!
//! The engine's pause (runc) writes `FROZEN` to the container's freezer cgroup and reads the
//! state back about a thousand times, thawing the cgroup again every fifty tries, and gives
//! up after some 200 ms with 500 "unable to freeze", leaving the container running. A task
//! freezes only once it runs: under the sandbox's CPU quota, with the host busy and new
//! processes appearing, the cgroup stays `FREEZING` past that window. Measured here with
//! `docker pause` on a container of 0.5 CPUs whose sixteen shell loops start programs: 0 of
//! 20 failed on an idle host, 12 of 30 with two busy loops on the host, 12 of 20 with four.
//! Any sandbox's code can do that (to dodge a snapshot, a fork, or the freeze on a lost
//! lease), and a busy host alone did it to an ordinary sandbox in CI.
//!
//! Each try is a fresh chance and the container runs on between tries, so a pause that lost
//! the race is asked for again, up to `PAUSE_TRIES` times with growing waits. (Freezing the
//! cgroup patiently first does not combine with the engine: runc then refuses the pause as
//! "container not running", and a freeze the engine does not know of is one its removal and
//! its listing do not see.)

use backon::ExponentialBuilder;
use std::time::Duration;

/// Tries of one pause in all, the first included. At two failed tries in five (the busy
/// host above) all twelve fail about once in 60,000 pauses.
pub(super) const PAUSE_TRIES: usize = 12;

/// Pure: whether the engine's answer to a pause says the freezer lost the race with the
/// container's tasks (and the container was left running), not that it cannot be paused at
/// all (not running, gone, not ours).
pub(super) fn lost_freeze_race(status: Option<u16>, message: &str) -> bool {
    status == Some(500) && message.contains("unable to freeze")
}

/// The waits between tries: 100 ms doubling up to 1 s (8.5 s in all at most).
pub(super) fn pause_backoff() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(PAUSE_TRIES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_freeze_that_lost_the_race_is_tried_again() {
        let race = "Docker responded with status code 500: Cannot pause container 792a: \
                    OCI runtime pause failed: unable to freeze: unknown";
        assert!(lost_freeze_race(Some(500), race));
        // Not running, already paused, gone: asking again changes nothing.
        assert!(!lost_freeze_race(
            Some(409),
            "Container 792a is not running"
        ));
        assert!(!lost_freeze_race(Some(404), "No such container: wrn-x"));
        // Another failure of the runtime is not a race with the container's tasks.
        assert!(!lost_freeze_race(
            Some(500),
            "OCI runtime pause failed: container not running: unknown"
        ));
        assert!(!lost_freeze_race(None, "unable to freeze"));
    }

    #[test]
    fn the_tries_are_bounded() {
        use backon::BackoffBuilder;
        let waits: Vec<Duration> = pause_backoff().build().collect();
        assert_eq!(waits.len(), PAUSE_TRIES - 1);
        let total = waits.iter().sum::<Duration>().as_secs_f64();
        assert!((8.4..8.6).contains(&total), "{total} s");
    }
}
