//! Prometheus series of the QUIC endpoint: streams opened and accepted by kind, failed
//! connection attempts, refused peers, and the connections open now and the round trip to
//! each peer (read when scraped).

use crate::peers::{control_rtts, Slots};
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGauge, Opts};
use std::sync::Arc;

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

/// The counters plus the gauges of open connections and round trips, taken from the
/// endpoint and the pooled connections when scraped.
pub(crate) struct PeerCollector {
    pub metrics: PeerMetrics,
    pub endpoint: quinn::Endpoint,
    slots: Arc<Slots>,
    pub connections: IntGauge,
    rtt: GaugeVec,
}

impl PeerCollector {
    pub fn new(metrics: PeerMetrics, endpoint: quinn::Endpoint, slots: Arc<Slots>) -> Self {
        PeerCollector {
            metrics,
            endpoint,
            slots,
            connections: IntGauge::new(
                "warren_peer_connections",
                "QUIC connections this node has open to and from peers",
            )
            .expect("valid gauge"),
            rtt: GaugeVec::new(
                Opts::new(
                    "warren_peer_rtt_seconds",
                    "Round trip to each peer, as QUIC measures it on the connection this node opened for Raft and cluster calls",
                ),
                &["peer"],
            )
            .expect("valid gauge"),
        }
    }

    fn parts(&self) -> [&dyn Collector; 5] {
        [
            &self.metrics.streams,
            &self.metrics.connect_failures,
            &self.metrics.refused,
            &self.connections,
            &self.rtt,
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
        self.rtt.reset();
        for (peer, rtt) in control_rtts(&self.slots) {
            self.rtt.with_label_values(&[&peer]).set(rtt.as_secs_f64());
        }
        self.parts().iter().flat_map(|m| m.collect()).collect()
    }
}
