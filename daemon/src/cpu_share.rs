//! The node's share of the CPU against its sandboxes. With the kernel's autogroup
//! scheduling on (Debian's default), processes share the CPU by session first: the node's
//! session weighs as much as the Docker group that holds every sandbox. Under a saturated
//! host (a failover restoring hundreds of sandboxes beside hundreds more) the node's threads
//! then waited on the run queue ~15 times as long as they ran (`/proc/PID/task/*/schedstat`,
//! a 1,000-sandbox failover on this 2-core machine), and their lease renewals missed their
//! deadline: a node without its lease freezes every sandbox it runs. Renicing its threads
//! changes nothing across sessions; its session's nice does.

use std::path::Path;

/// The nice value the node gives its session (-20..19; lower weighs more): -10 weighs
/// about nine times a session at 0.
pub const NODE_SESSION_NICE: i32 = -10;

/// What the node's session nice should become, from the autogroup file's text (`/autogroup-N
/// nice K`): none when it already weighs at least as much.
pub fn raise_to(autogroup: &str, nice: i32) -> Option<i32> {
    let now: i32 = autogroup.split_whitespace().last()?.parse().ok()?;
    (now > nice).then_some(nice)
}

/// Raises this process's session weight (`/proc/self/autogroup`) when autogroup scheduling
/// is on; what it did, or why not. Under systemd on cgroup v2 the unit's `CPUWeight` is the
/// knob instead (deploy/systemd/warren.service sets it).
pub fn raise_own_share() -> Result<Option<String>, String> {
    let file = Path::new("/proc/self/autogroup");
    let enabled = std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled")
        .map(|s| s.trim() == "1")
        .unwrap_or(false);
    if !enabled || !file.exists() {
        return Ok(None);
    }
    let now = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let Some(nice) = raise_to(&now, NODE_SESSION_NICE) else {
        return Ok(None);
    };
    std::fs::write(file, nice.to_string()).map_err(|e| e.to_string())?;
    Ok(Some(format!("{} -> nice {nice}", now.trim())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_raised_and_never_lowered() {
        assert_eq!(raise_to("/autogroup-108421 nice 0\n", -10), Some(-10));
        assert_eq!(raise_to("/autogroup-7 nice 5", -10), Some(-10));
        assert_eq!(raise_to("/autogroup-7 nice -10", -10), None);
        assert_eq!(raise_to("/autogroup-7 nice -15", -10), None);
        assert_eq!(raise_to("garbage", -10), None);
    }
}
