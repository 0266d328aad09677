//! How many warm containers to keep, from recent demand: pure decisions, no IO.
//!
//! Every request for a container the pool could have served (taken, or started cold because
//! none was ready) is an arrival. The pool aims at the most arrivals seen within any
//! [`WINDOW`] of the last horizon (ten minutes by default): a burst of 200 sessions makes it
//! keep 200 ready for the next one, and it shrinks back to its floor once no such burst
//! came for a horizon.
//! The target stays between the floor and a ceiling, and the ceiling within a memory budget
//! (an idle warm container holds a few MiB).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A burst: arrivals this close together count together.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Arrivals remembered at most (a flood is remembered as a flood of this size).
const MAX_REMEMBERED: usize = 100_000;

/// The pool's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizing {
    /// Kept ready whatever the demand.
    pub floor: usize,
    /// Kept ready at most, however high the demand.
    pub ceiling: usize,
    /// Memory the ready containers may hold together, MiB.
    pub memory_budget_mb: u64,
    /// What one ready container holds, MiB (for the budget).
    pub idle_mb: u64,
}

impl Sizing {
    /// The most the pool holds: the ceiling, within the memory budget, never below the
    /// floor (an operator's explicit floor wins over the budget).
    pub fn most(&self) -> usize {
        let by_memory = (self.memory_budget_mb / self.idle_mb.max(1)) as usize;
        self.ceiling.min(by_memory).max(self.floor)
    }

    /// How many to keep ready when the recent peak is `peak` arrivals per window.
    pub fn target(&self, peak: usize) -> usize {
        peak.clamp(self.floor, self.most())
    }
}

/// Recent arrivals.
#[derive(Debug, Default)]
pub struct Demand {
    arrivals: VecDeque<Instant>,
}

impl Demand {
    /// Someone wanted a container at `at` (arrivals come in time order).
    pub fn record(&mut self, at: Instant) {
        self.arrivals.push_back(at);
        if self.arrivals.len() > MAX_REMEMBERED {
            self.arrivals.pop_front();
        }
    }

    /// Forgets arrivals older than `horizon`.
    fn forget_before(&mut self, now: Instant, horizon: Duration) {
        while self
            .arrivals
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) > horizon)
        {
            self.arrivals.pop_front();
        }
    }

    /// The most arrivals within any one window of the `horizon` before `now`.
    pub fn peak(&mut self, now: Instant, horizon: Duration) -> usize {
        self.forget_before(now, horizon);
        let a = &self.arrivals;
        let (mut best, mut start) = (0, 0);
        for end in 0..a.len() {
            while a[end].saturating_duration_since(a[start]) >= WINDOW {
                start += 1;
            }
            best = best.max(end - start + 1);
        }
        best
    }
}

/// What the pool does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Start one more.
    Start,
    /// Remove one ready container (the pool holds more than it needs).
    Shrink,
    /// Nothing now.
    Hold,
}

/// The next step towards `target` with `ready` containers waiting.
pub fn next_step(ready: usize, target: usize) -> Step {
    match ready.cmp(&target) {
        std::cmp::Ordering::Less => Step::Start,
        std::cmp::Ordering::Greater => Step::Shrink,
        std::cmp::Ordering::Equal => Step::Hold,
    }
}

/// Whether a refill may start now: the sandboxes left at least `idle_reserve` of the
/// host's CPU time idle just before (`host_idle`; unknown counts as idle, and a reserve of
/// 0 never waits).
pub fn may_refill(host_idle: Option<f64>, idle_reserve: f64) -> bool {
    host_idle.is_none_or(|idle| idle >= idle_reserve)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HORIZON: Duration = Duration::from_secs(600);

    fn sizing(floor: usize, ceiling: usize) -> Sizing {
        Sizing {
            floor,
            ceiling,
            memory_budget_mb: 1 << 20,
            idle_mb: 8,
        }
    }

    #[test]
    fn a_burst_sets_the_target_until_it_ages_out() {
        let t0 = Instant::now();
        let mut d = Demand::default();
        for i in 0..200 {
            d.record(t0 + Duration::from_millis(i * 10));
        }
        let s = sizing(4, 256);
        assert_eq!(s.target(d.peak(t0 + Duration::from_secs(5), HORIZON)), 200);
        // Still remembered just before the horizon, forgotten after it.
        assert_eq!(s.target(d.peak(t0 + HORIZON, HORIZON)), 200);
        assert_eq!(
            s.target(d.peak(t0 + HORIZON + Duration::from_secs(3), HORIZON)),
            4
        );
        assert!(d.arrivals.is_empty());
    }

    #[test]
    fn arrivals_spread_wider_than_a_window_do_not_add_up() {
        let t0 = Instant::now();
        let mut d = Demand::default();
        // One every 20 s for five minutes: three fall within any one minute.
        for i in 0..15 {
            d.record(t0 + Duration::from_secs(i * 20));
        }
        assert_eq!(d.peak(t0 + Duration::from_secs(300), HORIZON), 3);
    }

    #[test]
    fn the_ceiling_and_the_memory_budget_bound_it_and_the_floor_wins() {
        let mut s = sizing(4, 100);
        assert_eq!(s.target(1000), 100);
        s.memory_budget_mb = 400;
        assert_eq!(s.target(1000), 50);
        s.memory_budget_mb = 8;
        assert_eq!(s.target(1000), 4, "the floor is kept whatever the budget");
        assert_eq!(sizing(0, 0).target(50), 0);
    }

    #[test]
    fn refilling_waits_for_an_idle_host_and_shrinking_past_the_target() {
        assert_eq!(next_step(2, 10), Step::Start);
        assert_eq!(next_step(10, 10), Step::Hold);
        assert_eq!(next_step(12, 10), Step::Shrink);
        assert!(may_refill(Some(0.9), 0.5));
        assert!(!may_refill(Some(0.2), 0.5));
        assert!(may_refill(None, 0.5));
        assert!(may_refill(Some(0.0), 0.0));
    }

    proptest! {
        /// The peak is the brute-force count over every window that starts at an arrival.
        #[test]
        fn peak_is_the_largest_window(gaps in proptest::collection::vec(0u64..40_000, 0..200)) {
            let t0 = Instant::now();
            let mut d = Demand::default();
            let mut at = t0;
            let mut times = vec![];
            for g in gaps {
                at += Duration::from_millis(g);
                d.record(at);
                times.push(at);
            }
            let now = at;
            let live: Vec<Instant> = times.into_iter()
                .filter(|t| now.saturating_duration_since(*t) <= HORIZON)
                .collect();
            let brute = live.iter()
                .map(|s| live.iter().filter(|t| **t >= *s && t.saturating_duration_since(*s) < WINDOW).count())
                .max()
                .unwrap_or(0);
            prop_assert_eq!(d.peak(now, HORIZON), brute);
        }

        #[test]
        fn the_target_stays_within_bounds(floor in 0usize..20, ceiling in 0usize..300, budget in 0u64..4000, peak in 0usize..1000) {
            let s = Sizing { floor, ceiling, memory_budget_mb: budget, idle_mb: 8 };
            let t = s.target(peak);
            prop_assert!(t >= floor);
            prop_assert!(t <= floor.max(ceiling));
            prop_assert!(t == floor || t as u64 * 8 <= budget);
        }
    }
}
