//! Prometheus metrics of the HTTP surface.

use prometheus::{HistogramOpts, HistogramVec, Registry};

/// Seconds: from a fast local answer to a slow forwarded one.
const LATENCY_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

#[derive(Clone)]
pub struct RouterMetrics {
    pub requests: HistogramVec,
    /// Requests sent on to their sandbox's owner, by outcome.
    pub forwards: HistogramVec,
}

impl RouterMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "warren_http_request_seconds",
                "Time to the response head, by method, route (ids as placeholders), status and role (entry: the node the client called; owner: the node a request was forwarded to)",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["method", "route", "status", "role"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        let forwards = HistogramVec::new(
            HistogramOpts::new(
                "warren_forward_seconds",
                "Requests forwarded to the node that owns their sandbox, timed to the owner's response head, by outcome (response; unavailable: 503, from the owner or because the exchange broke; unreachable: never sent)",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["outcome"],
        )?;
        registry.register(Box::new(forwards.clone()))?;
        Ok(RouterMetrics { requests, forwards })
    }
}
