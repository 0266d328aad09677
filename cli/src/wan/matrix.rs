//! Round-trip times between regions, for the WAN relay: parsed from
//! `"region-1/region-2=20,region-1/region-3=80"` (milliseconds, symmetric). A pair not named
//! (and a region with itself) has no delay.

use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct DelayMatrix {
    /// Keyed by the pair in sorted order.
    rtt: BTreeMap<(String, String), Duration>,
}

/// A pair of regions in sorted order: the same key whichever way it is named.
pub(super) fn pair(a: &str, b: &str) -> (String, String) {
    if a <= b {
        (a.to_string(), b.to_string())
    } else {
        (b.to_string(), a.to_string())
    }
}

impl DelayMatrix {
    pub fn parse(spec: &str) -> Result<DelayMatrix, String> {
        let mut m = DelayMatrix::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (pair, ms) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?}: expected REGION/REGION=MILLISECONDS"))?;
            let (a, b) = pair
                .split_once('/')
                .ok_or_else(|| format!("{pair:?}: expected REGION/REGION"))?;
            let (a, b) = (a.trim(), b.trim());
            if a.is_empty() || b.is_empty() {
                return Err(format!("{pair:?}: a region name is empty"));
            }
            let ms: f64 = ms
                .trim()
                .parse()
                .map_err(|_| format!("{ms:?}: not a number of milliseconds"))?;
            if !(0.0..=10_000.0).contains(&ms) {
                return Err(format!("{ms} ms: use 0 to 10000"));
            }
            m.set(a, b, Duration::from_secs_f64(ms / 1000.0));
        }
        Ok(m)
    }

    /// Sets the round trip between `a` and `b` (both ways).
    pub fn set(&mut self, a: &str, b: &str, rtt: Duration) {
        self.rtt.insert(pair(a, b), rtt);
    }

    pub fn rtt(&self, a: &str, b: &str) -> Duration {
        self.rtt.get(&pair(a, b)).copied().unwrap_or_default()
    }

    /// What a datagram from `a` to `b` waits: half the round trip.
    pub fn one_way(&self, a: &str, b: &str) -> Duration {
        self.rtt(a, b) / 2
    }

    /// The longest round trip between any two regions named.
    pub fn max_rtt(&self) -> Duration {
        self.rtt.values().copied().max().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_symmetric_and_unnamed_pairs_have_no_delay() {
        let m =
            DelayMatrix::parse("region-1/region-2=20, region-3/region-1=80,r2/r3=150.5").unwrap();
        assert_eq!(m.rtt("region-2", "region-1"), Duration::from_millis(20));
        assert_eq!(m.rtt("region-1", "region-3"), Duration::from_millis(80));
        assert_eq!(m.one_way("region-3", "region-1"), Duration::from_millis(40));
        assert_eq!(m.rtt("r3", "r2"), Duration::from_micros(150_500));
        assert_eq!(m.rtt("region-1", "region-1"), Duration::ZERO);
        assert_eq!(m.rtt("region-2", "region-3"), Duration::ZERO);
        assert_eq!(m.max_rtt(), Duration::from_micros(150_500));
        assert_eq!(DelayMatrix::parse("").unwrap(), DelayMatrix::default());
    }

    #[test]
    fn malformed_specs_say_what_is_wrong() {
        for bad in [
            "r1=20",
            "r1/r2",
            "r1/r2=fast",
            "/r2=1",
            "r1/r2=-5",
            "r1/r2=20000",
        ] {
            assert!(DelayMatrix::parse(bad).is_err(), "{bad}");
        }
    }
}
