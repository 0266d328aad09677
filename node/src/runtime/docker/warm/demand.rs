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
}

/// How many each image's pool aims at, the pools sharing one bound (`Sizing::most`): each
/// gets its floor (`floors[i]`: the default image's is the operator's floor, other images'
/// 0), then the room left is shared so that no pool gets more than it wants (its recent
/// peak) and none that wants more gets less than an equal share (max-min fair): one image's
/// burst cannot push the others' pools out, and a lone burst may use all the room.
pub fn targets(sizing: &Sizing, floors: &[usize], peaks: &[usize]) -> Vec<usize> {
    let mut out: Vec<usize> = floors.to_vec();
    let mut room = sizing.most().saturating_sub(floors.iter().sum());
    let wants: Vec<usize> = floors
        .iter()
        .zip(peaks)
        .map(|(f, p)| p.saturating_sub(*f))
        .collect();
    let mut order: Vec<usize> = (0..floors.len()).collect();
    order.sort_by_key(|i| wants[*i]);
    for (k, i) in order.iter().enumerate() {
        let share = room / (order.len() - k);
        let give = wants[*i].min(share);
        out[*i] += give;
        room -= give;
    }
    out
}

/// The next change across the pools (`ready[i]` containers of image `i` waiting, aiming at
/// `targets[i]`), among the images that may start one now (`may_start[i]`): first a pool
/// above its target gives one back (the one furthest above: its memory is another pool's
/// room), then the pool furthest below its target starts one. None: nothing to do now.
pub fn next_move(ready: &[usize], targets: &[usize], may_start: &[bool]) -> Option<(usize, Step)> {
    let over = (0..ready.len())
        .filter(|i| ready[*i] > targets[*i])
        .max_by_key(|i| (ready[*i] - targets[*i], std::cmp::Reverse(*i)));
    if let Some(i) = over {
        return Some((i, Step::Shrink));
    }
    (0..ready.len())
        .filter(|i| ready[*i] < targets[*i] && may_start[*i])
        .max_by_key(|i| (targets[*i] - ready[*i], std::cmp::Reverse(*i)))
        .map(|i| (i, Step::Start))
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
    fn refilling_waits_for_an_idle_host() {
        assert!(may_refill(Some(0.9), 0.5));
        assert!(!may_refill(Some(0.2), 0.5));
        assert!(may_refill(None, 0.5));
        assert!(may_refill(Some(0.0), 0.0));
    }

    #[test]
    fn pools_share_the_room_fairly_and_keep_their_floors() {
        let s = sizing(4, 20);
        // The default image (floor 4) and two others; room for 20 in all.
        assert_eq!(targets(&s, &[4, 0, 0], &[0, 0, 0]), vec![4, 0, 0]);
        assert_eq!(targets(&s, &[4, 0, 0], &[10, 3, 0]), vec![10, 3, 0]);
        // A lone burst may use all the room.
        assert_eq!(targets(&s, &[4, 0, 0], &[0, 100, 0]), vec![4, 16, 0]);
        // Two bursts share it; the small want is met in full.
        assert_eq!(targets(&s, &[4, 0, 0], &[100, 100, 2]), vec![11, 7, 2]);
        // Moves: shrink the one over its target first, then fill the furthest below.
        assert_eq!(
            next_move(&[5, 0, 0], &[4, 3, 0], &[true; 3]),
            Some((0, Step::Shrink))
        );
        assert_eq!(
            next_move(&[4, 0, 1], &[4, 3, 2], &[true; 3]),
            Some((1, Step::Start))
        );
        assert_eq!(
            next_move(&[4, 0, 1], &[4, 3, 2], &[true, false, true]),
            Some((2, Step::Start)),
            "an image waiting out a failure does not hold up the others"
        );
        assert_eq!(next_move(&[4, 3, 2], &[4, 3, 2], &[true; 3]), None);
    }

    proptest! {
        #[test]
        fn pool_targets_keep_floors_bounds_and_fairness(
            floor in 0usize..10, ceiling in 0usize..60,
            peaks in proptest::collection::vec(0usize..80, 1..6),
        ) {
            let s = Sizing { floor, ceiling, memory_budget_mb: 1 << 20, idle_mb: 8 };
            let mut floors = vec![0; peaks.len()];
            floors[0] = floor;
            let t = targets(&s, &floors, &peaks);
            prop_assert!(t.iter().sum::<usize>() <= s.most());
            for i in 0..t.len() {
                prop_assert!(t[i] >= floors[i]);
                prop_assert!(t[i] <= floors[i].max(peaks[i]));
            }
            // Max-min fair: a pool short of its want has at least what any other pool
            // got above its floor, less one (integer shares).
            for i in 0..t.len() {
                if t[i] < floors[i].max(peaks[i]) {
                    for j in 0..t.len() {
                        prop_assert!(t[i] - floors[i] + 1 >= t[j] - floors[j]);
                    }
                }
            }
            // Everyone's want met when it fits.
            let wanted: usize = floors.iter().zip(&peaks).map(|(f, p)| *f.max(p)).sum();
            if wanted <= s.most() {
                let want: Vec<usize> = floors.iter().zip(&peaks).map(|(f, p)| *f.max(p)).collect();
                prop_assert_eq!(t, want);
            }
        }

        #[test]
        fn a_move_heads_for_the_targets(
            pools in proptest::collection::vec((0usize..10, 0usize..10, any::<bool>()), 1..6),
        ) {
            let ready: Vec<usize> = pools.iter().map(|p| p.0).collect();
            let targets: Vec<usize> = pools.iter().map(|p| p.1).collect();
            let may: Vec<bool> = pools.iter().map(|p| p.2).collect();
            match next_move(&ready, &targets, &may) {
                Some((i, Step::Shrink)) => prop_assert!(ready[i] > targets[i]),
                Some((i, Step::Start)) => {
                    prop_assert!(ready[i] < targets[i] && may[i]);
                    prop_assert!(ready.iter().zip(&targets).all(|(r, t)| r <= t), "shrinks come first");
                }
                None => prop_assert!((0..ready.len()).all(|i| ready[i] == targets[i] || (ready[i] < targets[i] && !may[i]))),
            }
        }

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
