//! Whether this node takes on one more running container: a pure decision, no IO.
//!
//! Three bounds, each checked before a container starts (create, wake, restore, fork,
//! take-over):
//! - the CPUs and the memory the running sandboxes' limits add up to, against what the
//!   operator lets this node promise (`max_cpus`, `max_memory_mb`; none by default, since
//!   idle sandboxes use a small part of their limits);
//! - the memory the host still has: below `memory_reserve_mb` available, no container
//!   starts, whatever the limits say (the host and the sandboxes that run come first).
//!
//! A refusal is `CAPACITY_EXHAUSTED` (retryable): the cluster places new sandboxes on the
//! next node while this one says it is full.

use warren_api::sandbox::Resources;

/// What this node lets itself take on.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Capacity {
    /// CPUs the running sandboxes' limits may add up to (None: no bound).
    pub max_cpus: Option<f64>,
    /// Memory the running sandboxes' limits may add up to, MiB (None: no bound).
    pub max_memory_mb: Option<u64>,
    /// No container starts while the host has less memory available than this, MiB.
    pub memory_reserve_mb: u64,
}

/// What runs now: the limits of the running sandboxes, added up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Committed {
    pub cpus: f64,
    pub memory_mb: u64,
}

impl Committed {
    pub fn add(&mut self, r: &Resources) {
        self.cpus += r.cpus;
        self.memory_mb += r.memory_mb;
    }
}

/// Why a container may not start here.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    Cpus { running: f64, asked: f64, max: f64 },
    Memory { running: u64, asked: u64, max: u64 },
    HostMemory { available: u64, reserve: u64 },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Cpus { running, asked, max } => write!(
                f,
                "this node's running sandboxes hold {running} of its {max} CPUs; {asked} more do not fit"
            ),
            Refusal::Memory { running, asked, max } => write!(
                f,
                "this node's running sandboxes hold {running} of its {max} MiB of memory; {asked} MiB more do not fit"
            ),
            Refusal::HostMemory { available, reserve } => write!(
                f,
                "this host has {available} MiB of memory available, less than the {reserve} MiB it keeps in reserve"
            ),
        }
    }
}

/// Whether a container with limits `ask` may start beside the running ones (`committed`),
/// with `host_available_mb` of memory available on the host (None: unknown, not checked).
pub fn admit(
    cap: &Capacity,
    committed: Committed,
    ask: &Resources,
    host_available_mb: Option<u64>,
) -> Result<(), Refusal> {
    if let Some(available) = host_available_mb.filter(|a| *a < cap.memory_reserve_mb) {
        return Err(Refusal::HostMemory {
            available,
            reserve: cap.memory_reserve_mb,
        });
    }
    if let Some(max) = cap.max_cpus {
        // Compared in thousandths: limits are sums of small binary fractions.
        if ((committed.cpus + ask.cpus) * 1000.0).round() > (max * 1000.0).round() {
            return Err(Refusal::Cpus {
                running: committed.cpus,
                asked: ask.cpus,
                max,
            });
        }
    }
    if let Some(max) = cap.max_memory_mb {
        if committed.memory_mb + ask.memory_mb > max {
            return Err(Refusal::Memory {
                running: committed.memory_mb,
                asked: ask.memory_mb,
                max,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn res(cpus: f64, memory_mb: u64) -> Resources {
        Resources {
            cpus,
            memory_mb,
            disk_mb: 1024,
            pids: 256,
        }
    }

    #[test]
    fn limits_add_up_to_the_bounds_and_no_further() {
        let cap = Capacity {
            max_cpus: Some(1.0),
            max_memory_mb: Some(5000),
            memory_reserve_mb: 0,
        };
        let mut c = Committed::default();
        c.add(&res(0.5, 4096));
        assert_eq!(admit(&cap, c, &res(0.25, 256), None), Ok(()));
        assert!(matches!(
            admit(&cap, c, &res(0.5, 4096), None),
            Err(Refusal::Memory { running: 4096, .. })
        ));
        c.add(&res(0.25, 256));
        c.add(&res(0.0625, 256));
        // 0.8125 + 0.25 > 1
        assert!(matches!(
            admit(&cap, c, &res(0.25, 1), None),
            Err(Refusal::Cpus { .. })
        ));
        assert_eq!(admit(&cap, c, &res(0.1875, 1), None), Ok(()));
    }

    #[test]
    fn a_host_short_of_memory_starts_nothing() {
        let cap = Capacity {
            memory_reserve_mb: 1024,
            ..Default::default()
        };
        let c = Committed::default();
        assert_eq!(
            admit(&cap, c, &res(0.0625, 1), Some(1023)),
            Err(Refusal::HostMemory {
                available: 1023,
                reserve: 1024
            })
        );
        assert_eq!(admit(&cap, c, &res(4.0, 1 << 20), Some(1024)), Ok(()));
        assert_eq!(admit(&cap, c, &res(4.0, 1 << 20), None), Ok(()));
    }

    proptest! {
        /// Admitting one at a time never takes the running limits past a bound.
        #[test]
        fn admitted_limits_stay_within_bounds(
            asks in proptest::collection::vec((1u32..64, 1u64..8192), 0..100),
            max_cpus in 1u32..64, max_mem in 1u64..100_000,
        ) {
            let cap = Capacity {
                max_cpus: Some(max_cpus as f64 / 4.0),
                max_memory_mb: Some(max_mem),
                memory_reserve_mb: 0,
            };
            let mut c = Committed::default();
            for (q, m) in asks {
                let r = res(q as f64 / 16.0, m);
                if admit(&cap, c, &r, None).is_ok() {
                    c.add(&r);
                }
                prop_assert!(c.cpus <= max_cpus as f64 / 4.0 + 1e-9);
                prop_assert!(c.memory_mb <= max_mem);
            }
        }
    }
}
