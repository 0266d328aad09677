//! Raft timing, derived from one setting (the heartbeat) and checked against the round
//! trips between nodes.
//!
//! openraft 0.9 gives every AppendEntries call (heartbeats and log replication alike) the
//! heartbeat interval as its deadline, fixed when the member starts. A call on a fresh
//! connection needs two round trips (QUIC handshake, then the request) plus the follower's
//! log write, so the heartbeat must stay above twice the longest round trip between voters
//! with room to spare: the default (500 ms) serves nodes up to 150 ms apart with a fresh
//! connection and up to ~400 ms apart on an established one. On one LAN, 150 ms halves the
//! time to elect a new leader. Snapshots (a learner catching up) get a deadline of their
//! own, long enough for a slow link.

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

/// Whether a measured round trip leaves Raft calls room within the heartbeat: a call on a
/// fresh connection takes two round trips. `None` when it fits; else why not.
pub fn rtt_misfit(heartbeat: Duration, rtt: Duration) -> Option<String> {
    (rtt * 2 >= heartbeat).then(|| {
        format!(
            "the round trip ({} ms) is more than half the heartbeat ({} ms): Raft calls may miss their deadline; raise heartbeat_ms above {} ms",
            rtt.as_millis(),
            heartbeat.as_millis(),
            (rtt * 3).as_millis()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_serves_regions_150_ms_apart_on_a_fresh_connection() {
        let t = raft_timing(DEFAULT_HEARTBEAT);
        assert!(Duration::from_millis(t.heartbeat_ms) > Duration::from_millis(2 * 150));
        assert_eq!((t.election_min_ms, t.election_max_ms), (2000, 4000));
        assert!(t.snapshot_ms >= 20_000);
        assert_eq!(
            rtt_misfit(DEFAULT_HEARTBEAT, Duration::from_millis(150)),
            None
        );
        assert!(rtt_misfit(Duration::from_millis(150), Duration::from_millis(120)).is_some());
    }

    #[test]
    fn a_lease_shorter_than_four_heartbeats_is_refused() {
        assert!(validate(500, 4000).is_ok());
        assert!(validate(100, 2000).is_ok());
        assert!(validate(500, 1999).unwrap_err().contains("4 heartbeats"));
        assert!(validate(5, 4000).is_err());
    }
}
