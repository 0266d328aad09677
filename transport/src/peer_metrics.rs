//! Prometheus series of the QUIC endpoint: streams opened and accepted by kind, failed
//! connection attempts, refused peers, and the connections open now (read when scraped).

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};

#[derive(Clone)]
pub(crate) struct PeerMetrics {
    pub streams: IntCounterVec,
    pub connect_failures: IntCounter,
    pub refused: IntCounter,
}

impl Default for PeerMetrics {
    fn default() -> Self {
        PeerMetrics {
            streams: IntCounterVec::new(
                Opts::new(
                    "warren_peer_streams_total",
                    "QUIC streams between nodes by direction (out: opened here, in: accepted) and kind (rpc: Raft and cluster calls, http: forwarded requests)",
                ),
                &["direction", "kind"],
            )
            .expect("valid counter"),
            connect_failures: IntCounter::new(
                "warren_peer_connect_failures_total",
                "Attempts to connect to a peer node that failed (unreachable, timed out, TLS refused)",
            )
            .expect("valid counter"),
            refused: IntCounter::new(
                "warren_peer_handshakes_refused_total",
                "Incoming QUIC connections refused: failed handshake or no verified node identity",
            )
            .expect("valid counter"),
        }
    }
}

/// The counters plus the gauge of open connections, taken from the endpoint when scraped.
pub(crate) struct PeerCollector {
    pub metrics: PeerMetrics,
    pub endpoint: quinn::Endpoint,
    pub connections: IntGauge,
}

impl PeerCollector {
    pub fn new(metrics: PeerMetrics, endpoint: quinn::Endpoint) -> Self {
        PeerCollector {
            metrics,
            endpoint,
            connections: IntGauge::new(
                "warren_peer_connections",
                "QUIC connections this node has open to and from peers",
            )
            .expect("valid gauge"),
        }
    }

    fn parts(&self) -> [&dyn Collector; 4] {
        [
            &self.metrics.streams,
            &self.metrics.connect_failures,
            &self.metrics.refused,
            &self.connections,
        ]
    }
}

impl Collector for PeerCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.parts().into_iter().flat_map(|m| m.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        self.connections
            .set(self.endpoint.open_connections() as i64);
        self.parts().iter().flat_map(|m| m.collect()).collect()
    }
}
