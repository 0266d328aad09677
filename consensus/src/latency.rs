//! Histograms of where this Raft member spends time on the path a heartbeat takes:
//! its log writes (each synced to disk before openraft counts it) and serving the
//! leader's AppendEntries calls (a follower's side of a heartbeat: the Raft member's answer,
//! its log writes included). A follower that hears its leader late shows here whether the disk or
//! the member held the call up. And the path a lease takes: a follower's requests (their
//! round trip and outcome) and the leader's answers to them.

use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter};

/// From half a millisecond to beyond the slowest election timeout a deployment uses.
const BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2,
];

pub struct RaftLatency {
    /// Raft log and vote writes (`warren_raft_log_write_seconds`).
    pub log_writes: Histogram,
    /// AppendEntries served for the leader (`warren_raft_append_entries_seconds`).
    pub append_entries: Histogram,
    /// A follower's lease requests to the leader, by outcome (`granted`, `refused`: the
    /// leader answered no, `failed`: no answer in time or no leader known)
    /// (`warren_lease_request_seconds`).
    pub lease_requests: HistogramVec,
    /// The leader's answers to lease requests: from arrival to the grant or refusal, its
    /// quorum confirmation included (`warren_lease_grant_seconds`).
    pub lease_grants: Histogram,
    /// Snapshot messages (chunks) this member received from a leader and took
    /// (`warren_raft_snapshot_chunks_received_total`).
    pub snapshot_chunks: IntCounter,
}

fn histogram(name: &str, help: &str) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()))
        .expect("valid histogram")
}

impl Default for RaftLatency {
    fn default() -> Self {
        RaftLatency {
            log_writes: histogram(
                "warren_raft_log_write_seconds",
                "Time of this node's Raft log writes: appends, truncations and votes (synced to disk) and purges",
            ),
            append_entries: histogram(
                "warren_raft_append_entries_seconds",
                "Time this node's Raft member took to answer the leader's AppendEntries calls (heartbeats and entries)",
            ),
            lease_requests: HistogramVec::new(
                HistogramOpts::new(
                    "warren_lease_request_seconds",
                    "A follower's lease requests to the leader, by outcome: granted, refused (the leader said no) or failed (no answer in time, or no leader known)",
                )
                .buckets(BUCKETS.to_vec()),
                &["outcome"],
            )
            .expect("valid histogram"),
            lease_grants: histogram(
                "warren_lease_grant_seconds",
                "On the leader: time from a lease request's arrival to its answer, the quorum's confirmation of the leader included",
            ),
            snapshot_chunks: IntCounter::new(
                "warren_raft_snapshot_chunks_received_total",
                "Raft snapshot messages (chunks) this node received from a leader and took: a member catching up by snapshot",
            )
            .expect("valid counter"),
        }
    }
}
