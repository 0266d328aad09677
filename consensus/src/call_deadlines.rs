//! The deadline of each Raft call, per member: three of the round trip measured to that
//! member, never less than the heartbeat (`timing::call_deadline`), or what the operator
//! fixed for the member's region (`raft_call_deadlines = ["REGION=MS", ...]`).
//!
//! openraft bounds a call only through its runtime's timeouts, which do not know the member
//! called: those are raised to the longest of these deadlines (`raft_runtime`), and each
//! call ends itself at its own member's (`network`). So a call to a near member is not given
//! the far member's deadline, and an operator can give a region's links more time than
//! their measured round trip (a link whose delay spikes) or less.

use std::collections::{BTreeMap, HashMap};
use std::sync::RwLock;
use std::time::Duration;

/// Deadlines an operator fixed for the links to a region's members, by region.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionDeadlines(BTreeMap<String, Duration>);

impl RegionDeadlines {
    /// Reads `REGION=MS` items (the setting's form). Each region once.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, String> {
        let mut by_region = BTreeMap::new();
        for item in items {
            let item = item.as_ref().trim();
            let (region, ms) = item.split_once('=').ok_or_else(|| {
                format!("raft_call_deadlines {item:?}: expected REGION=MS, e.g. eu-west=900")
            })?;
            let region = region.trim();
            warren_api::sandbox::validate_region(region).map_err(|_| {
                format!("raft_call_deadlines {item:?}: the region must be a DNS label")
            })?;
            let ms: u64 = ms.trim().parse().map_err(|_| {
                format!("raft_call_deadlines {item:?}: the deadline must be whole milliseconds")
            })?;
            if by_region
                .insert(region.to_string(), Duration::from_millis(ms))
                .is_some()
            {
                return Err(format!("raft_call_deadlines names region {region} twice"));
            }
        }
        Ok(RegionDeadlines(by_region))
    }

    /// Refuses a deadline shorter than the heartbeat (openraft sends the next call at the
    /// next heartbeat) or too long for a lease to be renewed through it: a renewal is two
    /// calls that must end within half the lease (`timing::deadline_misfit`).
    pub fn validate(&self, heartbeat: Duration, lease: Duration) -> Result<(), String> {
        for (region, deadline) in &self.0 {
            if *deadline < heartbeat {
                return Err(format!(
                    "raft_call_deadlines for {region} ({} ms) is shorter than the heartbeat ({} ms)",
                    deadline.as_millis(),
                    heartbeat.as_millis()
                ));
            }
            if *deadline * 4 > lease {
                return Err(format!(
                    "raft_call_deadlines for {region} ({} ms) leaves a lease renewal (two calls) no time to end within half the lease ({} ms): at most {} ms, or raise lease_ms",
                    deadline.as_millis(),
                    lease.as_millis(),
                    (lease / 4).as_millis()
                ));
            }
        }
        Ok(())
    }

    /// What the operator fixed for `region`'s members, if anything.
    pub fn of(&self, region: &str) -> Option<Duration> {
        self.0.get(region).copied()
    }
}

/// Pure: the deadline of calls to one member. Fixed for its region if the operator said
/// so; else three of its measured round trip, at least a heartbeat; else (no round trip
/// measured yet: no connection) `unmeasured`, the deadline of calls to any member.
pub fn member_deadline(
    heartbeat: Duration,
    fixed: Option<Duration>,
    rtt: Option<Duration>,
    unmeasured: Duration,
) -> Duration {
    fixed.unwrap_or_else(|| {
        rtt.map_or(unmeasured, |rtt| {
            crate::timing::call_deadline(heartbeat, Some(rtt))
        })
    })
}

/// The current deadline of calls to each member, by node name, as the supervisor last
/// sized them (shared with the member's network).
#[derive(Debug, Default)]
pub struct MemberDeadlines {
    by_name: RwLock<HashMap<String, Duration>>,
}

impl MemberDeadlines {
    /// Replaces every member's deadline; returns the longest (what openraft's own timeouts
    /// are raised to), at least `floor`.
    pub fn set(&self, deadlines: HashMap<String, Duration>, floor: Duration) -> Duration {
        let longest = deadlines.values().copied().fold(floor, Duration::max);
        *self.by_name.write().expect("deadlines lock") = deadlines;
        longest
    }

    /// The deadline of calls to the member `name`, if it was sized.
    pub fn of(&self, name: &str) -> Option<Duration> {
        self.by_name
            .read()
            .expect("deadlines lock")
            .get(name)
            .copied()
    }

    /// Every member's, by name.
    pub fn all(&self) -> Vec<(String, Duration)> {
        let mut all: Vec<(String, Duration)> = self
            .by_name
            .read()
            .expect("deadlines lock")
            .iter()
            .map(|(n, d)| (n.clone(), *d))
            .collect();
        all.sort();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_member_gets_its_regions_fixed_deadline_else_three_of_its_own_round_trip() {
        let hb = MS(100);
        // Fixed wins over any measurement, longer or shorter.
        assert_eq!(
            member_deadline(hb, Some(MS(900)), Some(MS(20)), MS(450)),
            MS(900)
        );
        assert_eq!(
            member_deadline(hb, Some(MS(150)), Some(MS(150)), MS(450)),
            MS(150)
        );
        // A near member is not given the far member's deadline.
        assert_eq!(member_deadline(hb, None, Some(MS(20)), MS(450)), MS(100));
        assert_eq!(member_deadline(hb, None, Some(MS(150)), MS(450)), MS(450));
        // Nothing measured yet: the deadline of calls to anyone.
        assert_eq!(member_deadline(hb, None, None, MS(450)), MS(450));
    }

    #[test]
    fn the_setting_reads_region_and_milliseconds_and_refuses_anything_else() {
        let d = RegionDeadlines::parse(&["eu-west=900", " us = 1200 "]).unwrap();
        assert_eq!(d.of("eu-west"), Some(MS(900)));
        assert_eq!(d.of("us"), Some(MS(1200)));
        assert_eq!(d.of("ap"), None);
        assert!(RegionDeadlines::parse::<&str>(&[])
            .unwrap()
            .of("us")
            .is_none());
        for bad in [
            "eu-west",
            "eu-west=",
            "eu-west=9.5",
            "=900",
            "Eu West=900",
            "a=-1",
        ] {
            assert!(RegionDeadlines::parse(&[bad]).is_err(), "{bad} was taken");
        }
        let twice = RegionDeadlines::parse(&["us=900", "us=1000"]).unwrap_err();
        assert!(twice.contains("twice"), "{twice}");
    }

    #[test]
    fn a_fixed_deadline_below_the_heartbeat_or_past_a_quarter_lease_is_refused() {
        let (hb, lease) = (MS(500), MS(4000));
        let ok = RegionDeadlines::parse(&["a=500", "b=1000"]).unwrap();
        assert!(ok.validate(hb, lease).is_ok());
        let short = RegionDeadlines::parse(&["a=499"]).unwrap();
        assert!(short.validate(hb, lease).unwrap_err().contains("heartbeat"));
        let long = RegionDeadlines::parse(&["a=1001"]).unwrap();
        assert!(long.validate(hb, lease).unwrap_err().contains("lease"));
    }

    #[test]
    fn the_longest_member_deadline_bounds_openraft_never_below_the_floor() {
        let d = MemberDeadlines::default();
        let longest = d.set(
            HashMap::from([("n2".to_string(), MS(100)), ("n3".to_string(), MS(900))]),
            MS(500),
        );
        assert_eq!(longest, MS(900));
        assert_eq!(d.of("n2"), Some(MS(100)));
        assert_eq!(d.of("n4"), None);
        assert_eq!(d.set(HashMap::new(), MS(500)), MS(500));
        assert_eq!(d.of("n3"), None, "a member gone is forgotten");
    }
}
