//! Raft timing, derived from one setting (the heartbeat) and from the round trips measured
//! between nodes.
//!
//! openraft 0.9 gives every AppendEntries call (heartbeats and log replication alike) the
//! heartbeat interval as its deadline. warren raises each Raft call's deadline to
//! `call_deadline`: three of the round trip of the link to its member, the shortest QUIC
//! measured on it (a call on a fresh connection needs two, QUIC's handshake and the request,
//! plus the follower's log write), never less than the heartbeat (`call_deadlines`,
//! `raft_runtime`). So the heartbeat no longer bounds
//! how far apart nodes may be: it sets how soon a silent leader is replaced (elections after
//! 4–8 silent heartbeats). The default (500 ms) keeps elections calm on a loaded machine;
//! 150 ms halves the time to elect a new leader, on a LAN or across regions alike. What the
//! round trip still bounds is the lease: a follower renews it with two calls (to the leader,
//! and the leader's quorum round) that must end within half of it (`rtt_misfit`). Snapshots
//! (a learner catching up) get a deadline of their own, long enough for a slow link. An
//! operator may fix the deadline of calls to a region's members instead (`call_deadlines`).

use std::time::Duration;

/// The default heartbeat: right for regions up to 150 ms apart.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(500);

/// What openraft is configured with, from the heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTiming {
    pub heartbeat_ms: u64,
    /// Elections start after 4–8 silent heartbeats.
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    /// The deadline of each snapshot message to a learner or lagging follower.
    pub snapshot_ms: u64,
}

pub fn raft_timing(heartbeat: Duration) -> RaftTiming {
    let hb = heartbeat.as_millis() as u64;
    RaftTiming {
        heartbeat_ms: hb,
        election_min_ms: hb * 4,
        election_max_ms: hb * 8,
        snapshot_ms: (hb * 40).max(20_000),
    }
}

/// Refuses a heartbeat too short to be a deadline, or a lease that cannot be renewed in
/// time: a follower renews every quarter of its lease, and a renewal is a call to the leader
/// plus the leader's quorum round, each bounded by the heartbeat.
pub fn validate(heartbeat_ms: u64, lease_ms: u64) -> Result<(), String> {
    if heartbeat_ms < 10 {
        return Err("heartbeat_ms must be at least 10".into());
    }
    if lease_ms < heartbeat_ms * 4 {
        return Err(format!(
            "lease_ms ({lease_ms}) must be at least 4 heartbeats ({} ms): a lease is renewed every quarter of it, and each renewal may take two heartbeat-long calls",
            heartbeat_ms * 4
        ));
    }
    Ok(())
}

/// The deadline of a Raft call (`raft_runtime`): three of `rtt`, the link's round trip (to
/// its member, or the longest measured where the member's is not), and never less than the
/// heartbeat.
pub fn call_deadline(heartbeat: Duration, rtt: Option<Duration>) -> Duration {
    rtt.map_or(heartbeat, |rtt| heartbeat.max(rtt * 3))
}

/// Whether a member's link lets its calls and a lease renewal end in time: a renewal is a
/// call to the leader and the leader's quorum round, each given up to a call deadline, and
/// must end within half the lease; a deadline the operator fixed for the member's region
/// (`fixed`) must leave a call two round trips. `None` when it fits; else why not.
pub fn rtt_misfit(
    heartbeat: Duration,
    lease: Duration,
    rtt: Duration,
    fixed: Option<Duration>,
) -> Option<String> {
    if let Some(fixed) = fixed.filter(|d| *d < rtt * 2) {
        return Some(format!(
            "the Raft call deadline fixed for this node's region ({} ms, raft_call_deadlines) is shorter than two of its round trips ({} ms): calls to it on a new connection cannot end in time",
            fixed.as_millis(),
            (rtt * 2).as_millis()
        ));
    }
    let deadline = fixed.unwrap_or_else(|| call_deadline(heartbeat, Some(rtt)));
    (deadline * 4 > lease).then(|| {
        format!(
            "the round trip ({} ms) gives Raft calls {} ms: a lease renewal (two calls) may not end within half the lease ({} ms); raise lease_ms to at least {} ms, and down_after_ms above it",
            rtt.as_millis(),
            deadline.as_millis(),
            lease.as_millis(),
            (deadline * 4).as_millis()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_serves_regions_150_ms_apart_on_a_fresh_connection() {
        let t = raft_timing(DEFAULT_HEARTBEAT);
        assert_eq!((t.election_min_ms, t.election_max_ms), (2000, 4000));
        assert!(t.snapshot_ms >= 20_000);
        let lease = Duration::from_millis(4000);
        assert_eq!(
            rtt_misfit(DEFAULT_HEARTBEAT, lease, Duration::from_millis(150), None),
            None
        );
        let lan = Duration::from_millis(100);
        assert_eq!(
            rtt_misfit(lan, lease, Duration::from_millis(150), None),
            None
        );
        assert!(rtt_misfit(lan, lease, Duration::from_millis(400), None).is_some());
        // A fixed deadline replaces the measured one, and must leave two round trips.
        let fixed = Some(Duration::from_millis(900));
        assert_eq!(
            rtt_misfit(lan, lease, Duration::from_millis(400), fixed),
            None
        );
        let short = rtt_misfit(lan, lease, Duration::from_millis(500), fixed).unwrap();
        assert!(short.contains("raft_call_deadlines"), "{short}");
    }

    #[test]
    fn a_call_is_given_three_round_trips_and_never_less_than_the_heartbeat() {
        let hb = Duration::from_millis(100);
        assert_eq!(call_deadline(hb, None), hb);
        assert_eq!(call_deadline(hb, Some(Duration::from_millis(1))), hb);
        assert_eq!(
            call_deadline(hb, Some(Duration::from_millis(150))),
            Duration::from_millis(450)
        );
    }

    #[test]
    fn a_lease_shorter_than_four_heartbeats_is_refused() {
        assert!(validate(500, 4000).is_ok());
        assert!(validate(100, 2000).is_ok());
        assert!(validate(500, 1999).unwrap_err().contains("4 heartbeats"));
        assert!(validate(5, 4000).is_err());
    }
}
