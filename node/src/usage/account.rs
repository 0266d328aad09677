//! Pure accounting: from where a sandbox's counters stood (its cursor) and what they read
//! now, what it used in between, and which interval that goes to.

use warren_storage::ledger::{Cursor, UsageRecord};

/// The length of a ledger interval.
pub const INTERVAL_MS: u64 = 60_000;

/// The start of the interval `at_ms` falls in.
pub fn interval_of(at_ms: u64) -> u64 {
    at_ms - at_ms % INTERVAL_MS
}

/// The counters as read now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// The container's main process: a new one is a new container, its counter new.
    pub pid: u32,
    pub cpu_ns: u64,
    /// The proxy's total for the sandbox since this node started.
    pub egress_bytes: u64,
    pub at_ms: u64,
}

/// What was used between two readings.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Used {
    pub cpu_ns: u64,
    pub running_ms: u64,
    pub egress_bytes: u64,
}

/// What was used since `prev` (none: the container was never read before, and its count
/// so far is its own). A counter below its cursor started over (a new cgroup, a node that
/// restarted its proxy): all of it is new. Running time counts within one container:
/// between two readings of it, or from `seen_ms` (when this node saw it running) to its
/// first reading.
pub fn used_since(prev: Option<&Cursor>, now: &Reading, seen_ms: u64) -> Used {
    let since = |new: u64, old: u64| if new >= old { new - old } else { new };
    match prev {
        Some(p) if p.pid == now.pid => Used {
            cpu_ns: since(now.cpu_ns, p.cpu_ns),
            running_ms: now.at_ms.saturating_sub(p.at_ms),
            egress_bytes: since(now.egress_bytes, p.egress_bytes),
        },
        Some(p) => Used {
            cpu_ns: now.cpu_ns,
            running_ms: now.at_ms.saturating_sub(seen_ms),
            egress_bytes: since(now.egress_bytes, p.egress_bytes),
        },
        None => Used {
            cpu_ns: now.cpu_ns,
            running_ms: now.at_ms.saturating_sub(seen_ms),
            egress_bytes: now.egress_bytes,
        },
    }
}

/// The cursor after `now`.
pub fn cursor_at(now: &Reading) -> Cursor {
    Cursor {
        pid: now.pid,
        cpu_ns: now.cpu_ns,
        egress_bytes: now.egress_bytes,
        at_ms: now.at_ms,
    }
}

/// Adds `used` to an interval's record, for a sandbox with `memory_mb` provisioned.
pub fn add(rec: &mut UsageRecord, used: &Used, memory_mb: u64) {
    rec.cpu_ns = rec.cpu_ns.saturating_add(used.cpu_ns);
    rec.running_ms = rec.running_ms.saturating_add(used.running_ms);
    rec.memory_mib_ms = rec
        .memory_mib_ms
        .saturating_add(memory_mb.saturating_mul(used.running_ms));
    rec.egress_bytes = rec.egress_bytes.saturating_add(used.egress_bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pid: u32, cpu_ns: u64, egress_bytes: u64, at_ms: u64) -> Reading {
        Reading {
            pid,
            cpu_ns,
            egress_bytes,
            at_ms,
        }
    }

    #[test]
    fn readings_of_one_container_count_their_differences() {
        let c = cursor_at(&r(7, 1_000, 10, 5_000));
        assert_eq!(
            used_since(Some(&c), &r(7, 3_500, 25, 15_000), 0),
            Used {
                cpu_ns: 2_500,
                running_ms: 10_000,
                egress_bytes: 15
            }
        );
        // Read twice at the same moment: nothing more.
        assert_eq!(
            used_since(Some(&c), &r(7, 1_000, 10, 5_000), 0),
            Used::default()
        );
    }

    #[test]
    fn a_new_container_or_a_restarted_proxy_counts_from_zero() {
        let c = cursor_at(&r(7, 9_000, 500, 5_000));
        // Another container (recovered, woken): its counter is all new, and it runs from
        // when it was seen, not across the gap.
        assert_eq!(
            used_since(Some(&c), &r(8, 300, 520, 9_000), 8_000),
            Used {
                cpu_ns: 300,
                running_ms: 1_000,
                egress_bytes: 20
            }
        );
        // The node restarted (its proxy counts from 0 again), the container ran on.
        assert_eq!(
            used_since(Some(&c), &r(7, 9_400, 30, 65_000), 64_000),
            Used {
                cpu_ns: 400,
                running_ms: 60_000,
                egress_bytes: 30
            }
        );
        assert_eq!(
            used_since(None, &r(7, 50, 0, 1_500), 1_000),
            Used {
                cpu_ns: 50,
                running_ms: 500,
                egress_bytes: 0
            }
        );
    }

    #[test]
    fn intervals_are_whole_minutes_and_memory_is_provisioned_times_running() {
        assert_eq!(interval_of(59_999), 0);
        assert_eq!(interval_of(60_000), 60_000);
        let mut rec = UsageRecord::default();
        let used = Used {
            cpu_ns: 1,
            running_ms: 2_000,
            egress_bytes: 3,
        };
        add(&mut rec, &used, 1024);
        add(&mut rec, &used, 1024);
        assert_eq!(
            (
                rec.cpu_ns,
                rec.running_ms,
                rec.memory_mib_ms,
                rec.egress_bytes
            ),
            (2, 4_000, 4_096_000, 6)
        );
    }
}
