//! One QUIC endpoint per node: it accepts peers' streams and opens streams to peers over
//! pooled, mutually authenticated connections.

use crate::peer_metrics::{PeerCollector, PeerMetrics};
use crate::tls::{self, NodeIdentity, PeerId};
use crate::TransportError;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Connection, Endpoint, RecvStream, SendStream, TransportConfig, VarInt};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a bidirectional stream carries; its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamKind {
    /// One Raft or cluster RPC: a request frame, a response frame.
    Rpc = 1,
    /// One HTTP/1.1 exchange forwarded from an entry node (with upgrades).
    Http = 2,
}

/// Which of a peer's two connections a stream travels on. Raft and cluster calls have a
/// connection of their own, so forwarded terminals, event streams and uploads (however many,
/// however big) share neither its stream budget nor its flow-control and congestion windows:
/// a busy node's heartbeats are not queued behind its forwarded traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lane {
    Control,
    Bulk,
}

impl StreamKind {
    pub fn lane(self) -> Lane {
        match self {
            StreamKind::Rpc => Lane::Control,
            StreamKind::Http => Lane::Bulk,
        }
    }

    /// Its label on `/metrics`.
    fn label(self) -> &'static str {
        match self {
            StreamKind::Rpc => "rpc",
            StreamKind::Http => "http",
        }
    }

    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(StreamKind::Rpc),
            2 => Some(StreamKind::Http),
            _ => None,
        }
    }
}

/// Serves streams that peers open.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        kind: StreamKind,
        peer: PeerId,
        send: SendStream,
        recv: RecvStream,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// One peer's pooled connection, and the last failed attempt to make one.
#[derive(Default)]
pub(crate) struct SlotState {
    /// The connection, and when the peer's certificate it was opened with expires.
    conn: Option<(Connection, i64)>,
    failed: Option<(std::time::Instant, String)>,
}

pub(crate) type Slot = Arc<tokio::sync::Mutex<SlotState>>;

/// Every peer's pooled connections, by address, name and lane.
pub(crate) type Slots = Mutex<HashMap<(SocketAddr, String, Lane), Slot>>;

/// Each open control connection, by peer name, whose slot is not being connected right now
/// (one being connected is skipped rather than waited for).
fn open_control_connections(slots: &Slots) -> Vec<(String, Connection)> {
    let control: Vec<(String, Slot)> = slots
        .lock()
        .expect("peers lock")
        .iter()
        .filter(|((_, _, lane), _)| *lane == Lane::Control)
        .map(|((_, name, _), slot)| (name.clone(), slot.clone()))
        .collect();
    control
        .into_iter()
        .filter_map(|(name, slot)| {
            let guard = slot.try_lock().ok()?;
            let (conn, _) = guard.conn.as_ref()?;
            conn.close_reason().is_none().then(|| (name, conn.clone()))
        })
        .collect()
}

/// The smoothed round trip of each open control connection, by peer name (what `/metrics`
/// shows).
pub(crate) fn control_rtts(slots: &Slots) -> Vec<(String, Duration)> {
    open_control_connections(slots)
        .into_iter()
        .map(|(name, conn)| (name, conn.rtt()))
        .collect()
}

pub struct Peers {
    endpoint: Endpoint,
    slots: Arc<Slots>,
    name: String,
    metrics: PeerMetrics,
    /// This node's identity, and the client side of it, replaced when the certificate is
    /// renewed (`rotate`).
    identity: Mutex<(NodeIdentity, quinn::ClientConfig)>,
    /// The runtime the endpoint was bound on: it drives the endpoint and every connection,
    /// accepts peers' connections and serves their Raft and cluster calls (`serve`).
    runtime: tokio::runtime::Handle,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long opening a stream on an established connection may wait (for the peer to grant
/// stream credit) before the call fails instead of hanging.
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);

/// After a connection attempt failed, further opens to that peer fail at once for this long
/// instead of each waiting out its own attempt: requests queued behind one attempt to a dead
/// node would otherwise pay `CONNECT_TIMEOUT` one after the other.
const FAIL_FAST: Duration = Duration::from_secs(1);

fn transport_config() -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    // A peer that stops answering (crashed, partitioned, SIGSTOPped) fails the streams open
    // to it within seconds instead of leaving them hanging.
    t.keep_alive_interval(Some(Duration::from_secs(1)));
    t.max_idle_timeout(Some(VarInt::from_u32(6_000).into()));
    t.max_concurrent_bidi_streams(VarInt::from_u32(4096));
    // Room for fast bulk transfers (forwarded file bodies) on loopback and LANs.
    t.stream_receive_window(VarInt::from_u32(16 * 1024 * 1024));
    t.receive_window(VarInt::from_u32(64 * 1024 * 1024));
    t.send_window(64 * 1024 * 1024);
    Arc::new(t)
}

impl Peers {
    /// Binds the node's UDP port with its identity. The endpoint, its connections and the
    /// serving of peers' Raft and cluster calls run on the runtime this is called on,
    /// whatever runtime later opens a stream or serves forwarded requests.
    pub fn bind(addr: SocketAddr, id: &NodeIdentity) -> Result<Arc<Self>, TransportError> {
        let runtime = tokio::runtime::Handle::current();
        let socket = crate::udp_socket::bind(addr)?;
        let endpoint = Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(server_config(id)?),
            socket,
            Arc::new(crate::quinn_runtime::Pinned::new(runtime.clone())),
        )?;
        Ok(Arc::new(Peers {
            endpoint,
            slots: Arc::new(Mutex::new(HashMap::new())),
            name: id.name.clone(),
            metrics: PeerMetrics::default(),
            identity: Mutex::new((id.clone(), client_config(id)?)),
            runtime,
        }))
    }

    /// This node's current identity.
    pub fn identity(&self) -> NodeIdentity {
        self.identity.lock().expect("identity lock").0.clone()
    }

    /// Presents `id` (a renewed certificate for the same name) from now on: to peers that
    /// connect, and on new connections to peers. Pooled connections are let go (streams
    /// open on them finish), so the next request to each peer connects with the new one.
    pub fn rotate(&self, id: &NodeIdentity) -> Result<(), TransportError> {
        if id.name != self.name {
            return Err(TransportError::Tls(format!(
                "a certificate for {} cannot replace {}'s",
                id.name, self.name
            )));
        }
        let (server, client) = (server_config(id)?, client_config(id)?);
        self.endpoint.set_server_config(Some(server));
        *self.identity.lock().expect("identity lock") = (id.clone(), client);
        self.slots.lock().expect("peers lock").clear();
        Ok(())
    }

    /// Adds the endpoint's series (`warren_peer_*`) to `registry`.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        registry.register(Box::new(PeerCollector::new(
            self.metrics.clone(),
            self.endpoint.clone(),
            self.slots.clone(),
        )))
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The pooled connection of `lane` to the peer `name` at `addr`, connecting when there
    /// is none.
    pub async fn connection(
        &self,
        addr: SocketAddr,
        name: &str,
        lane: Lane,
    ) -> Result<Connection, TransportError> {
        let slot = self
            .slots
            .lock()
            .expect("peers lock")
            .entry((addr, name.to_string(), lane))
            .or_default()
            .clone();
        let mut guard = slot.lock().await;
        if let Some((c, expires_at)) = guard.conn.as_ref() {
            // A connection that outlived the peer's certificate is made again: the peer
            // closes it at its next stream anyway.
            if c.close_reason().is_none() && tls::unix_now() < *expires_at {
                return Ok(c.clone());
            }
        }
        let err = |m: String| TransportError::Connect {
            addr: addr.to_string(),
            message: m,
        };
        if let Some((at, why)) = &guard.failed {
            if at.elapsed() < FAIL_FAST {
                return Err(err(format!(
                    "{why} (an attempt {} ms ago)",
                    at.elapsed().as_millis()
                )));
            }
        }
        let attempt = async {
            let client = self.identity.lock().expect("identity lock").1.clone();
            let connecting = self
                .endpoint
                .connect_with(client, addr, name)
                .map_err(|e| e.to_string())?;
            tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                .await
                .map_err(|_| "timed out".to_string())?
                .map_err(|e| e.to_string())
        };
        match attempt.await {
            Ok(conn) => {
                // Read once here, not on every reuse; unreadable: never reused.
                let expires_at = peer_identity(&conn).map_or(i64::MIN, |p| p.expires_at);
                *guard = SlotState {
                    conn: Some((conn.clone(), expires_at)),
                    failed: None,
                };
                Ok(conn)
            }
            Err(why) => {
                self.metrics.connect_failures.inc();
                guard.failed = Some((std::time::Instant::now(), why.clone()));
                Err(err(why))
            }
        }
    }

    /// Forgets the pooled connection of `lane` to a peer (after an error on it).
    pub fn forget(&self, addr: SocketAddr, name: &str, lane: Lane) {
        self.slots
            .lock()
            .expect("peers lock")
            .remove(&(addr, name.to_string(), lane));
    }

    /// The shortest round trip QUIC has measured on the control connection to the peer
    /// `name`, if one is open: the link's own, without the queues of a busy moment.
    pub fn min_rtt(&self, name: &str) -> Option<Duration> {
        open_control_connections(&self.slots)
            .into_iter()
            .find_map(|(n, conn)| (n == name).then(|| conn.stats().path.min_rtt))
    }

    /// Opens a stream of `kind` to a peer. A stale pooled connection is replaced once.
    pub async fn open(
        &self,
        addr: SocketAddr,
        name: &str,
        kind: StreamKind,
    ) -> Result<(SendStream, RecvStream), TransportError> {
        let lane = kind.lane();
        for attempt in 0..2 {
            let conn = self.connection(addr, name, lane).await?;
            let opened = match tokio::time::timeout(OPEN_TIMEOUT, conn.open_bi()).await {
                Ok(r) => r,
                Err(_) => {
                    return Err(TransportError::Stream(format!(
                        "{name} granted no stream within {OPEN_TIMEOUT:?}"
                    )))
                }
            };
            match opened {
                Ok((mut send, recv)) => {
                    send.write_all(&[kind as u8])
                        .await
                        .map_err(|e| TransportError::Stream(e.to_string()))?;
                    self.metrics
                        .streams
                        .with_label_values(&["out", kind.label()])
                        .inc();
                    return Ok((send, recv));
                }
                Err(e) if attempt == 0 => {
                    tracing::debug!(peer = name, error = %e, "pooled connection is gone; reconnecting");
                    self.forget(addr, name, lane);
                }
                Err(e) => return Err(TransportError::Stream(e.to_string())),
            }
        }
        unreachable!("the loop returns")
    }

    /// Accepts peers' connections and hands each stream to `handler`, until closed. The
    /// accepting and the Raft and cluster calls ([`Lane::Control`]) run on the endpoint's
    /// runtime; forwarded requests ([`Lane::Bulk`]) on the runtime this is called on.
    pub fn serve<H: Handler>(self: &Arc<Self>, handler: Arc<H>) -> tokio::task::JoinHandle<()> {
        let endpoint = self.endpoint.clone();
        let metrics = self.metrics.clone();
        let runtime = self.runtime.clone();
        let bulk = tokio::runtime::Handle::current();
        self.runtime.spawn(async move {
            while let Some(incoming) = endpoint.accept().await {
                let handler = handler.clone();
                let metrics = metrics.clone();
                let (control, bulk) = (runtime.clone(), bulk.clone());
                runtime.spawn(async move {
                    let conn = match incoming.await {
                        Ok(c) => c,
                        Err(e) => {
                            metrics.refused.inc();
                            tracing::debug!(error = %e, "peer handshake failed");
                            return;
                        }
                    };
                    let Some(peer) = peer_identity(&conn) else {
                        metrics.refused.inc();
                        conn.close(VarInt::from_u32(1), b"no identity");
                        return;
                    };
                    loop {
                        let (send, mut recv) = match conn.accept_bi().await {
                            Ok(s) => s,
                            Err(_) => return,
                        };
                        // A connection is as good as the certificate it was opened with:
                        // one that outlived it (its node was not renewed, or was removed and
                        // cannot be) is closed, and a reconnect must present a valid one.
                        if peer.expired(tls::unix_now()) {
                            metrics.refused.inc();
                            conn.close(VarInt::from_u32(2), b"certificate expired");
                            return;
                        }
                        let mut kind = [0u8; 1];
                        if recv.read_exact(&mut kind).await.is_err() {
                            continue;
                        }
                        let Some(kind) = StreamKind::from_byte(kind[0]) else {
                            continue;
                        };
                        metrics
                            .streams
                            .with_label_values(&["in", kind.label()])
                            .inc();
                        let serving = handler.clone().handle(kind, peer.clone(), send, recv);
                        match kind.lane() {
                            Lane::Control => control.spawn(serving),
                            Lane::Bulk => bulk.spawn(serving),
                        };
                    }
                });
            }
        })
    }

    /// Closes every connection and stops accepting.
    pub fn close(&self) {
        self.endpoint.close(VarInt::from_u32(0), b"shutting down");
    }
}

fn server_config(id: &NodeIdentity) -> Result<quinn::ServerConfig, TransportError> {
    let server_tls = QuicServerConfig::try_from(tls::server_config(id)?)
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(server_tls));
    server.transport_config(transport_config());
    Ok(server)
}

fn client_config(id: &NodeIdentity) -> Result<quinn::ClientConfig, TransportError> {
    let client_tls = QuicClientConfig::try_from(tls::client_config(id)?)
        .map_err(|e| TransportError::Tls(e.to_string()))?;
    let mut client = quinn::ClientConfig::new(Arc::new(client_tls));
    client.transport_config(transport_config());
    Ok(client)
}

/// Who a connection's verified peer certificate names.
pub fn peer_identity(conn: &Connection) -> Option<PeerId> {
    let any = conn.peer_identity()?;
    let certs = any
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    tls::peer_id(certs.first()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls;

    struct Echo;
    impl Handler for Echo {
        fn handle(
            self: Arc<Self>,
            kind: StreamKind,
            peer: PeerId,
            mut send: SendStream,
            mut recv: RecvStream,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            Box::pin(async move {
                let buf = recv.read_to_end(1 << 20).await.unwrap();
                let reply = format!(
                    "{kind:?} from {} ({:?}): {}",
                    peer.name,
                    peer.node,
                    String::from_utf8_lossy(&buf)
                );
                send.write_all(reply.as_bytes()).await.unwrap();
                send.finish().unwrap();
            })
        }
    }

    const DAY: Duration = Duration::from_secs(86_400);

    /// A node's endpoint on loopback, with a day-long certificate from `ca`.
    fn node(ca: &crate::CaMaterial, name: &str, id: u64) -> Arc<Peers> {
        Peers::bind(
            "127.0.0.1:0".parse().unwrap(),
            &tls::issue(ca, name, id, DAY).unwrap(),
        )
        .unwrap()
    }

    /// One request from `from` to `to` over the peer protocol: its echo, or why not.
    async fn ask(from: &Peers, to: &Peers, name: &str) -> Result<String, String> {
        ask_on(from, to, name, StreamKind::Rpc).await
    }

    /// [`ask`] on a stream of `kind`.
    async fn ask_on(
        from: &Peers,
        to: &Peers,
        name: &str,
        kind: StreamKind,
    ) -> Result<String, String> {
        let (mut send, mut recv) = from
            .open(to.local_addr().unwrap(), name, kind)
            .await
            .map_err(|e| e.to_string())?;
        send.write_all(b"hi").await.map_err(|e| e.to_string())?;
        send.finish().map_err(|e| e.to_string())?;
        let out = recv.read_to_end(1 << 20).await.map_err(|e| e.to_string())?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn a_connection_lasts_only_as_long_as_its_certificate_and_a_renewed_one_takes_over() {
        let ca = tls::new_ca("t").unwrap();
        let short = tls::issue(&ca, "a", 1, Duration::from_secs(2)).unwrap();
        let a = Peers::bind("127.0.0.1:0".parse().unwrap(), &short).unwrap();
        let b = node(&ca, "b", 2);
        b.serve(Arc::new(Echo));
        assert_eq!(ask(&a, &b, "b").await.unwrap(), "Rpc from a (Some(1)): hi");
        tokio::time::sleep(Duration::from_millis(3100)).await;
        // The pooled connection outlived a's certificate: b closes it; a new handshake with
        // the expired certificate is refused too.
        for attempt in 0..2 {
            let r = ask(&a, &b, "b").await;
            assert!(
                r.is_err(),
                "attempt {attempt} with an expired certificate: {r:?}"
            );
        }
        // Renewed (same key, new certificate): the next request gets through.
        let csr = tls::csr_for_key("a", &short.key_pem).unwrap();
        let renewed = tls::NodeIdentity {
            cert_pem: tls::sign_csr(&ca, &csr, "a", 1, DAY).unwrap(),
            ..short.clone()
        };
        a.rotate(&renewed).unwrap();
        assert_eq!(a.identity(), renewed);
        assert_eq!(ask(&a, &b, "b").await.unwrap(), "Rpc from a (Some(1)): hi");
        // Another node's certificate is not a's to present.
        let other = tls::issue(&ca, "c", 3, DAY).unwrap();
        assert!(a.rotate(&other).is_err());
    }

    #[tokio::test]
    async fn mutual_tls_streams_between_two_nodes() {
        let ca = tls::new_ca("t").unwrap();
        let a = node(&ca, "a", 1);
        let b = node(&ca, "b", 2);
        b.serve(Arc::new(Echo));
        let (mut send, mut recv) = a
            .open(b.local_addr().unwrap(), "b", StreamKind::Rpc)
            .await
            .unwrap();
        send.write_all(b"hello").await.unwrap();
        send.finish().unwrap();
        let out = recv.read_to_end(1 << 20).await.unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Rpc from a (Some(1)): hello"
        );

        // A node with a certificate from another CA is refused.
        let other_ca = tls::new_ca("other").unwrap();
        let intruder = Peers::bind(
            "127.0.0.1:0".parse().unwrap(),
            &tls::issue(&other_ca, "a", 1, DAY).unwrap(),
        )
        .unwrap();
        let r = async {
            let (mut s, mut r) = intruder
                .open(b.local_addr().unwrap(), "b", StreamKind::Rpc)
                .await?;
            s.write_all(b"x")
                .await
                .map_err(|e| TransportError::Stream(e.to_string()))?;
            s.finish()
                .map_err(|e| TransportError::Stream(e.to_string()))?;
            let out = r
                .read_to_end(1 << 20)
                .await
                .map_err(|e| TransportError::Stream(e.to_string()))?;
            Ok::<_, TransportError>(out)
        }
        .await;
        assert!(r.is_err(), "an intruder must not get an answer: {r:?}");
    }

    #[tokio::test]
    async fn opens_queued_behind_a_failed_attempt_fail_with_it_instead_of_trying_again() {
        let ca = tls::new_ca("t").unwrap();
        let a = node(&ca, "a", 1);
        // Nothing answers there.
        let dead = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let opens = (0..3).map(|_| a.open(dead, "b", StreamKind::Rpc));
        let results = futures_util::future::join_all(opens).await;
        let errors: Vec<String> = results
            .into_iter()
            .map(|r| r.expect_err("nothing answers").to_string())
            .collect();
        let attempts = errors.iter().filter(|e| !e.contains("an attempt")).count();
        assert_eq!(attempts, 1, "one attempt for all three: {errors:?}");
    }

    /// Answers Rpc streams (echo) and holds every Http stream open without reading it, as
    /// forwarded terminals and event streams stay open.
    struct HoldsForwarded;
    impl Handler for HoldsForwarded {
        fn handle(
            self: Arc<Self>,
            kind: StreamKind,
            peer: PeerId,
            send: SendStream,
            recv: RecvStream,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
            match kind {
                StreamKind::Rpc => Arc::new(Echo).handle(kind, peer, send, recv),
                StreamKind::Http => Box::pin(async move {
                    tokio::time::sleep(Duration::from_secs(600)).await;
                    drop((send, recv));
                }),
            }
        }
    }

    /// A peer whose forwarded streams use up all the stream credit it grants still answers
    /// Raft calls at once (they have a connection of their own), and one more forwarded
    /// stream fails after a bounded wait instead of hanging.
    #[tokio::test]
    async fn forwarded_streams_that_use_up_the_stream_budget_do_not_hold_up_raft_calls() {
        let ca = tls::new_ca("t").unwrap();
        let a = node(&ca, "a", 1);
        let b = node(&ca, "b", 2);
        b.serve(Arc::new(HoldsForwarded));
        let to = b.local_addr().unwrap();
        let mut held = Vec::new();
        for _ in 0..4096 {
            held.push(a.open(to, "b", StreamKind::Http).await.unwrap());
        }
        let raft = tokio::time::timeout(Duration::from_secs(2), ask(&a, &b, "b")).await;
        assert_eq!(
            raft.expect("a Raft call waited behind forwarded streams")
                .unwrap(),
            "Rpc from a (Some(1)): hi"
        );
        let more = tokio::time::timeout(
            OPEN_TIMEOUT + Duration::from_secs(5),
            a.open(to, "b", StreamKind::Http),
        )
        .await
        .expect("opening a stream hung past its deadline");
        let err = more.expect_err("no stream credit is left").to_string();
        assert!(err.contains("granted no stream"), "{err}");
    }

    /// A node's request threads can be busy or starved of CPU for seconds; its Raft and
    /// cluster calls (heartbeats, lease renewals) must not wait for them. Here the runtime
    /// that serves forwarded requests is stalled outright (a current-thread runtime that
    /// nobody runs), and a peer's Raft call is still answered, while a forwarded request
    /// waits for that runtime.
    #[test]
    fn raft_calls_are_answered_while_the_runtime_serving_requests_is_stalled() {
        let consensus = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let requests = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ca = tls::new_ca("t").unwrap();
        let (a, b) = {
            let _on = consensus.enter();
            (node(&ca, "a", 1), node(&ca, "b", 2))
        };
        // The node serves its peers from its request runtime, as the router does.
        requests.block_on(async {
            b.serve(Arc::new(Echo));
        });
        // From here on nothing runs the request runtime.
        let raft = consensus.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), ask(&a, &b, "b")).await
        });
        assert_eq!(
            raft.expect("a Raft call waited for the stalled request runtime")
                .unwrap(),
            "Rpc from a (Some(1)): hi"
        );
        let forwarded = consensus.spawn({
            let (a, b) = (a.clone(), b.clone());
            async move { ask_on(&a, &b, "b", StreamKind::Http).await }
        });
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            !forwarded.is_finished(),
            "a forwarded request was served off the request runtime"
        );
        // The request runtime runs again: the forwarded request is served there.
        let answer = requests.block_on(async {
            tokio::time::timeout(Duration::from_secs(5), forwarded)
                .await
                .expect("the forwarded request was not served once its runtime ran")
                .unwrap()
        });
        assert_eq!(answer.unwrap(), "Http from a (Some(1)): hi");
    }
}
