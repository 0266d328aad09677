//! Prometheus metrics of the HTTP surface.

use prometheus::{HistogramOpts, HistogramVec, Registry};

#[derive(Clone)]
pub struct RouterMetrics {
    pub requests: HistogramVec,
}

impl RouterMetrics {
    pub fn register(registry: &Registry) -> prometheus::Result<Self> {
        let requests = HistogramVec::new(
            HistogramOpts::new(
                "warren_http_request_seconds",
                "Time to the response head, by method, route (ids as placeholders), status and role (entry: the node the client called; owner: the node a request was forwarded to)",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
            ]),
            &["method", "route", "status", "role"],
        )?;
        registry.register(Box::new(requests.clone()))?;
        Ok(RouterMetrics { requests })
    }
}
