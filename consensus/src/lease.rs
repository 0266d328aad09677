//! Ownership leases: the rules that keep a sandbox live on one node at a time.
//!
//! A node serves its sandboxes only while it holds a lease. A follower (or learner) asks the
//! leader for one; the leader answers only after a quorum of voters acknowledged it as leader
//! *after the request was sent* (openraft's read-index round), with its read index. The
//! follower's lease then runs for `lease` from the moment it sent the request — never from
//! when the answer came — and counts only once the follower applied the log up to that
//! index, so it serves from state at least as new as the leader's when it granted the lease.
//! A leader cut off from its quorum cannot answer, so its followers' leases run out within
//! `lease` (today's bug was that any append from a leader, even one cut off from the
//! majority, renewed them). A leader serves its own sandboxes while a quorum acknowledged it
//! within `lease`.
//!
//! The leader, for its part, never hands a node's sandboxes to another before every lease it
//! may have granted that node has run out: it remembers when it last granted each node a
//! lease, and it waits `lease + margin` after it became leader (leases of earlier leaders
//! were all asked for before its election, since the quorum that granted them then voted for
//! it). The margin covers clocks that run at slightly different rates.
//!
//! Pure logic on millisecond timestamps of one monotonic clock per node; the cluster wires
//! it to Raft and the RPCs.

use crate::state::NodeId;
use std::collections::HashMap;

/// A lease answer from the leader, as the asking node saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// When the request was sent (the asking node's clock).
    pub asked_at_ms: u64,
    /// The leader's read index: the lease counts once this much is applied here.
    pub read_index: u64,
}

/// A follower's lease.
#[derive(Debug, Default)]
pub struct FollowerLease {
    /// Served until then (exclusive); 0: never held.
    valid_until_ms: u64,
    /// A grant whose read index is not applied here yet.
    pending: Option<Grant>,
}

impl FollowerLease {
    /// Records an answer. An older grant never replaces a newer pending one.
    pub fn granted(&mut self, g: Grant) {
        if self.pending.is_none_or(|p| p.asked_at_ms <= g.asked_at_ms) {
            self.pending = Some(g);
        }
    }

    /// Whether the lease holds at `now_ms` with `applied` applied here.
    pub fn holds(&mut self, now_ms: u64, applied: u64, lease_ms: u64) -> bool {
        self.left_ms(now_ms, applied, lease_ms) > 0
    }

    /// How long the lease still runs at `now_ms` with `applied` applied here (0: it does
    /// not hold).
    pub fn left_ms(&mut self, now_ms: u64, applied: u64, lease_ms: u64) -> u64 {
        if let Some(p) = self.pending.filter(|p| p.read_index <= applied) {
            self.valid_until_ms = self.valid_until_ms.max(p.asked_at_ms + lease_ms);
            self.pending = None;
        }
        self.valid_until_ms.saturating_sub(now_ms)
    }
}

/// The leader's record of the leases it granted.
#[derive(Debug, Default)]
pub struct Grants {
    /// The term this node leads in, and since when (as first noticed).
    leading: Option<(u64, u64)>,
    /// When each node was last granted a lease in that term.
    last: HashMap<NodeId, u64>,
}

impl Grants {
    /// Notes that this node leads in `term` at `now_ms` (`None`: it does not lead). A new
    /// term starts over: no grants of its own yet, and the wait for earlier leaders' leases.
    pub fn leading(&mut self, term: Option<u64>, now_ms: u64) {
        match term {
            None => {
                self.leading = None;
                self.last.clear();
            }
            Some(t) if self.leading.is_none_or(|(cur, _)| cur != t) => {
                self.leading = Some((t, now_ms));
                self.last.clear();
            }
            Some(_) => {}
        }
    }

    /// Records a lease granted to `node` at `now_ms`.
    pub fn granted(&mut self, node: NodeId, now_ms: u64) {
        self.last.insert(node, now_ms);
    }

    /// When `node` was last granted a lease in this term.
    pub fn last_grant(&self, node: NodeId) -> Option<u64> {
        self.last.get(&node).copied()
    }

    /// Whether no lease of `node` can still be running at `now_ms`: none granted by this
    /// leader for `wait_ms` (lease + margin), and this leader has led for that long.
    pub fn expired(&self, node: NodeId, now_ms: u64, wait_ms: u64) -> bool {
        let Some((_, since)) = self.leading else {
            return false;
        };
        now_ms.saturating_sub(since) > wait_ms
            && self
                .last
                .get(&node)
                .is_none_or(|t| now_ms.saturating_sub(*t) > wait_ms)
    }
}

/// Whether lease settings are safe: a node must stop serving (lease) and the margin for
/// clock rates must pass before the leader may call it down and hand its sandboxes on.
pub fn validate(lease_ms: u64, margin_ms: u64, down_after_ms: u64) -> Result<(), String> {
    if lease_ms == 0 {
        return Err("lease_ms must be positive".into());
    }
    if lease_ms + margin_ms >= down_after_ms {
        return Err(format!(
            "lease_ms ({lease_ms}) plus the clock margin ({margin_ms}) must be shorter than down_after_ms ({down_after_ms}): a cut-off node must stop serving before its sandboxes are handed to another"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_runs_from_when_it_was_asked_for_once_applied() {
        let mut l = FollowerLease::default();
        assert!(!l.holds(10, 0, 2000), "never granted");
        l.granted(Grant {
            asked_at_ms: 100,
            read_index: 7,
        });
        assert!(!l.holds(150, 6, 2000), "the read index is not applied yet");
        assert!(l.holds(160, 7, 2000));
        assert!(l.holds(2099, 7, 2000));
        assert_eq!(l.left_ms(1600, 7, 2000), 500, "runs until 2100");
        assert!(!l.holds(2100, 7, 2000), "asked at 100, lease 2000");
        assert_eq!(l.left_ms(2500, 7, 2000), 0);
    }

    #[test]
    fn a_newer_grant_waiting_for_its_index_keeps_the_older_one_valid() {
        let mut l = FollowerLease::default();
        l.granted(Grant {
            asked_at_ms: 100,
            read_index: 5,
        });
        assert!(l.holds(200, 5, 1000));
        l.granted(Grant {
            asked_at_ms: 600,
            read_index: 9,
        });
        assert!(l.holds(1000, 8, 1000), "the first runs until 1100");
        assert!(!l.holds(1100, 8, 1000), "the second is not applied yet");
        assert!(l.holds(1200, 9, 1000), "applied: runs until 1600");
        assert!(!l.holds(1600, 9, 1000));
    }

    #[test]
    fn a_late_answer_to_an_old_request_does_not_replace_a_newer_one() {
        let mut l = FollowerLease::default();
        l.granted(Grant {
            asked_at_ms: 500,
            read_index: 3,
        });
        l.granted(Grant {
            asked_at_ms: 100,
            read_index: 1,
        });
        assert!(l.holds(1400, 3, 1000));
        assert!(!l.holds(1500, 3, 1000));
    }

    #[test]
    fn a_node_is_handed_on_only_after_its_last_lease_and_the_new_leaders_wait() {
        let mut g = Grants::default();
        assert!(!g.expired(2, 10_000, 2500), "not leading: never");
        g.leading(Some(3), 1000);
        assert!(
            !g.expired(2, 3000, 2500),
            "earlier leaders' leases may still run"
        );
        assert!(g.expired(2, 3501, 2500), "never granted by this leader");
        g.granted(2, 4000);
        assert!(!g.expired(2, 6500, 2500));
        assert!(g.expired(2, 6501, 2500));
        assert!(g.expired(3, 6501, 2500), "other nodes have their own");
        // Still the same term: nothing changes.
        g.leading(Some(3), 7000);
        assert_eq!(g.last_grant(2), Some(4000));
        // A new term starts over.
        g.leading(Some(4), 8000);
        assert_eq!(g.last_grant(2), None);
        assert!(!g.expired(2, 10_000, 2500));
        assert!(g.expired(2, 10_501, 2500));
        g.leading(None, 11_000);
        assert!(!g.expired(2, 20_000, 2500));
    }

    #[test]
    fn settings_must_let_a_lease_run_out_before_a_node_is_down() {
        assert!(validate(4000, 500, 8000).is_ok());
        assert!(validate(4000, 500, 4500).is_err());
        assert!(validate(4000, 0, 4000).is_err());
        assert!(validate(0, 0, 4000).is_err());
    }
}
