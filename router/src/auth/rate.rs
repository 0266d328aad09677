//! Per-key rate limits on this node (governor's keyed GCRA), and per-address limits of
//! refused guesses (wrong preview tokens). A key over its rate gets 429
//! `RATE_LIMITED` with `retry-after`, while other keys are served. Counted where a request
//! enters the cluster (a forwarded request is not counted again at its owner); each node
//! counts its own, so a client spread over N nodes gets up to N times the rate.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::num::NonZeroU32;
use warren_api::{ApiError, ErrorCode};

/// A key's rate: `per_second` requests on average, `burst` at once. Zero rate: no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRate {
    pub per_second: u32,
    pub burst: u32,
}

pub struct KeyLimiter {
    limiter: Option<DefaultKeyedRateLimiter<String>>,
    clock: DefaultClock,
}

impl KeyLimiter {
    pub fn new(rate: KeyRate) -> Self {
        let limiter = NonZeroU32::new(rate.per_second).map(|per_second| {
            let burst = NonZeroU32::new(rate.burst.max(rate.per_second)).unwrap_or(per_second);
            RateLimiter::keyed(Quota::per_second(per_second).allow_burst(burst))
        });
        KeyLimiter {
            limiter,
            clock: DefaultClock::default(),
        }
    }

    /// One request of key `id`: Ok, or the error that says when to come back.
    pub fn check(&self, id: &str) -> Result<(), ApiError> {
        let Some(l) = &self.limiter else {
            return Ok(());
        };
        // Keys that stopped calling do not stay in memory.
        if l.len() > 10_000 {
            l.retain_recent();
        }
        l.check_key(&id.to_string()).map_err(|not_until| {
            let wait = not_until.wait_time_from(self.clock.now());
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            ApiError::new(
                ErrorCode::RateLimited,
                format!("this key is over its rate limit; retry in {secs} s"),
            )
            .with_details(serde_json::json!({ "retry_after_s": secs.max(1) }))
        })
    }
}

/// Refused guesses per client address (wrong preview tokens): past `per_minute` (with as
/// many at once), the address is refused everything the guard covers until its rate
/// allows one more guess.
pub struct GuessLimiter {
    limiter: Option<governor::DefaultKeyedRateLimiter<std::net::IpAddr>>,
    clock: DefaultClock,
    blocked: std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, std::time::Instant>>,
}

impl GuessLimiter {
    /// Zero: no limit.
    pub fn new(per_minute: u32) -> Self {
        GuessLimiter {
            limiter: NonZeroU32::new(per_minute).map(|n| RateLimiter::keyed(Quota::per_minute(n))),
            clock: DefaultClock::default(),
            blocked: Default::default(),
        }
    }

    /// A refused guess from `ip`.
    pub fn refused(&self, ip: std::net::IpAddr) {
        let Some(l) = &self.limiter else { return };
        if l.len() > 10_000 {
            l.retain_recent();
        }
        if let Err(not_until) = l.check_key(&ip) {
            let until = std::time::Instant::now() + not_until.wait_time_from(self.clock.now());
            let mut b = self.blocked.lock().expect("guess lock");
            if b.len() > 10_000 {
                let now = std::time::Instant::now();
                b.retain(|_, t| *t > now);
            }
            b.insert(ip, until);
        }
    }

    /// Whether `ip` is held off now: the error that says until when.
    pub fn check(&self, ip: std::net::IpAddr) -> Result<(), ApiError> {
        let now = std::time::Instant::now();
        let until = self.blocked.lock().expect("guess lock").get(&ip).copied();
        match until.filter(|t| *t > now) {
            None => Ok(()),
            Some(t) => {
                let secs = (t - now).as_secs() + 1;
                Err(ApiError::new(
                    ErrorCode::RateLimited,
                    format!("too many refused guesses (wrong keys or tokens) from this address; retry in {secs} s"),
                )
                .with_details(serde_json::json!({ "retry_after_s": secs })))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_over_its_burst_waits_while_another_key_is_served() {
        let l = KeyLimiter::new(KeyRate {
            per_second: 1,
            burst: 3,
        });
        for _ in 0..3 {
            l.check("a").unwrap();
        }
        let e = l.check("a").unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
        assert!(e.retryable);
        assert_eq!(e.details.unwrap()["retry_after_s"], 1);
        l.check("b").unwrap();
    }

    #[test]
    fn an_address_guessing_past_its_rate_is_held_off_and_others_are_not() {
        let g = GuessLimiter::new(3);
        let (a, b) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        for _ in 0..3 {
            g.refused(a);
            g.check(a).unwrap();
        }
        g.refused(a);
        let e = g.check(a).unwrap_err();
        assert_eq!(e.code, ErrorCode::RateLimited);
        assert!(e.details.unwrap()["retry_after_s"].as_u64().unwrap() >= 1);
        g.check(b).unwrap();
        let off = GuessLimiter::new(0);
        for _ in 0..100 {
            off.refused(a);
        }
        off.check(a).unwrap();
    }

    #[test]
    fn a_zero_rate_is_no_limit() {
        let l = KeyLimiter::new(KeyRate {
            per_second: 0,
            burst: 0,
        });
        for _ in 0..10_000 {
            l.check("a").unwrap();
        }
    }
}
