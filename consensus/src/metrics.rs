//! Prometheus series of this node's Raft member and of the cluster it sees, read when
//! scraped (`warren_raft_*`, `warren_cluster_nodes`): nothing is sampled in between.

use crate::cluster::Cluster;
use crate::latency::RaftLatency;
use crate::state::NodeState;
use openraft::ServerState;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, IntGaugeVec, Opts, Registry};
use std::sync::{Arc, Weak};

/// Registers the Raft and cluster series of `cluster` (held weakly: the registry does not
/// keep a stopped member alive).
pub fn register(cluster: &Arc<Cluster>, registry: &Registry) -> prometheus::Result<()> {
    registry.register(Box::new(RaftCollector::new(
        Arc::downgrade(cluster),
        cluster.latency.clone(),
    )?))
}

struct RaftCollector {
    cluster: Weak<Cluster>,
    /// The member's histograms (shared with it, collected as they are).
    latency: Arc<RaftLatency>,
    term: IntGauge,
    leader: IntGauge,
    has_leader: IntGauge,
    last_log: IntGauge,
    applied: IntGauge,
    apply_lag: IntGauge,
    snapshot: IntGauge,
    purged: IntGauge,
    voters: IntGauge,
    quorum_ack_age_ms: IntGauge,
    leader_contact_age_ms: IntGauge,
    nodes: IntGaugeVec,
    call_deadline_ms: IntGaugeVec,
    descs: Vec<Desc>,
}

fn gauge(name: &str, help: &str) -> prometheus::Result<IntGauge> {
    IntGauge::with_opts(Opts::new(name, help))
}

impl RaftCollector {
    fn new(cluster: Weak<Cluster>, latency: Arc<RaftLatency>) -> prometheus::Result<Self> {
        let mut c = RaftCollector {
            cluster,
            latency,
            term: gauge("warren_raft_term", "This node's current Raft term")?,
            leader: gauge(
                "warren_raft_is_leader",
                "1 while this node is the Raft leader",
            )?,
            has_leader: gauge(
                "warren_raft_has_leader",
                "1 while this node knows a leader (0: an election, or no quorum it can reach)",
            )?,
            last_log: gauge(
                "warren_raft_last_log_index",
                "Index of the last entry in this node's Raft log",
            )?,
            applied: gauge(
                "warren_raft_applied_index",
                "Index of the last entry this node applied to its state",
            )?,
            apply_lag: gauge(
                "warren_raft_apply_lag_entries",
                "Entries in this node's log not applied yet",
            )?,
            snapshot: gauge(
                "warren_raft_snapshot_index",
                "Index up to which this node's state is in its latest Raft snapshot",
            )?,
            purged: gauge(
                "warren_raft_purged_index",
                "Index up to which this node has deleted its Raft log (a member that lacks \
                 entries up to it catches up by snapshot); -1: none deleted",
            )?,
            voters: gauge(
                "warren_raft_voters",
                "Voters in the membership this node sees",
            )?,
            quorum_ack_age_ms: gauge(
                "warren_raft_quorum_ack_age_ms",
                "On the leader: milliseconds since a quorum last acknowledged it (-1 elsewhere)",
            )?,
            leader_contact_age_ms: gauge(
                "warren_raft_leader_contact_age_ms",
                "On a follower: milliseconds since the leader's last heartbeat or entries reached it (-1 on the leader, and before any)",
            )?,
            nodes: IntGaugeVec::new(
                Opts::new(
                    "warren_cluster_nodes",
                    "Registered nodes by state (joining, up, down, draining), as this node's applied state has them",
                ),
                &["state"],
            )?,
            call_deadline_ms: IntGaugeVec::new(
                Opts::new(
                    "warren_raft_call_deadline_ms",
                    "The deadline of this node's Raft calls to each other member: three of the shortest round trip measured on its link and at least a heartbeat, or what raft_call_deadlines fixes for its region",
                ),
                &["peer"],
            )?,
            descs: Vec::new(),
        };
        c.descs = c.parts().iter().flat_map(|m| m.desc()).cloned().collect();
        Ok(c)
    }

    fn parts(&self) -> [&dyn Collector; 18] {
        [
            &self.term,
            &self.leader,
            &self.has_leader,
            &self.last_log,
            &self.applied,
            &self.apply_lag,
            &self.snapshot,
            &self.purged,
            &self.voters,
            &self.quorum_ack_age_ms,
            &self.leader_contact_age_ms,
            &self.nodes,
            &self.call_deadline_ms,
            &self.latency.log_writes,
            &self.latency.append_entries,
            &self.latency.lease_requests,
            &self.latency.lease_grants,
            &self.latency.snapshot_chunks,
        ]
    }

    fn read(&self, cluster: &Cluster) {
        let m = cluster.raft.metrics().borrow().clone();
        let idx = |i: Option<u64>| i.map_or(-1, |i| i as i64);
        self.term.set(m.current_term as i64);
        self.leader.set(i64::from(m.state == ServerState::Leader));
        self.has_leader.set(i64::from(m.current_leader.is_some()));
        let last = idx(m.last_log_index);
        let applied = idx(m.last_applied.map(|l| l.index));
        self.last_log.set(last);
        self.applied.set(applied);
        self.apply_lag.set((last - applied).max(0));
        self.snapshot.set(idx(m.snapshot.map(|l| l.index)));
        self.purged.set(idx(m.purged.map(|l| l.index)));
        self.voters
            .set(m.membership_config.membership().voter_ids().count() as i64);
        self.quorum_ack_age_ms
            .set(m.millis_since_quorum_ack.map_or(-1, |ms| ms as i64));
        self.leader_contact_age_ms.set(
            cluster
                .leader_contact_age()
                .map_or(-1, |d| d.as_millis() as i64),
        );
        let counts = cluster.read(|s| {
            let mut c = [0i64; 4];
            for n in s.nodes.values() {
                c[state_slot(n.state)] += 1;
            }
            c
        });
        for (state, n) in ["joining", "up", "down", "draining"].iter().zip(counts) {
            self.nodes.with_label_values(&[state]).set(n);
        }
        // Members removed since the last scrape are not shown.
        self.call_deadline_ms.reset();
        for (peer, deadline) in cluster.member_deadlines() {
            self.call_deadline_ms
                .with_label_values(&[&peer])
                .set(deadline.as_millis() as i64);
        }
    }
}

fn state_slot(s: NodeState) -> usize {
    match s {
        NodeState::Joining => 0,
        NodeState::Up => 1,
        NodeState::Down => 2,
        NodeState::Draining => 3,
    }
}

impl Collector for RaftCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(cluster) = self.cluster.upgrade() else {
            return Vec::new();
        };
        self.read(&cluster);
        self.parts().iter().flat_map(|m| m.collect()).collect()
    }
}
