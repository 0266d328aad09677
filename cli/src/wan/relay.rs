//! A user-space WAN between nodes on one machine: every node advertises a relay address as
//! its peer address, and each datagram to it waits half the round trip between the sender's
//! region and the node's before it is passed on (and the same on the way back), or is lost
//! with the configured probability. The kernel here has no netem, hence this.
//!
//! A sender is known by the address its QUIC endpoint sends from (its real peer address,
//! registered with [`WanRelay::add_node`]); datagrams from anyone else pass without delay.
//! The delay of a pair is constant, so datagrams of one flow keep their order.

use super::matrix::pair;
use super::DelayMatrix;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const MAX_DATAGRAM: usize = 65_536;

struct Shared {
    delays: DelayMatrix,
    /// The probability that a datagram is dropped (each way, each datagram).
    loss: f64,
    /// Real peer address → region, of every node registered.
    regions: Mutex<HashMap<SocketAddr, String>>,
    /// Region pairs (sorted) whose datagrams are all dropped: a partition.
    cut: Mutex<std::collections::BTreeSet<(String, String)>>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// The relay; its tasks stop when it is dropped.
pub struct WanRelay {
    shared: Arc<Shared>,
}

impl Drop for WanRelay {
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        self.shared.tasks.close();
    }
}

impl WanRelay {
    pub fn new(delays: DelayMatrix, loss: f64) -> WanRelay {
        WanRelay {
            shared: Arc::new(Shared {
                delays,
                loss: loss.clamp(0.0, 1.0),
                regions: Mutex::new(HashMap::new()),
                cut: Mutex::new(Default::default()),
                cancel: CancellationToken::new(),
                tasks: TaskTracker::new(),
            }),
        }
    }

    /// Cuts regions `a` and `b` apart (every datagram between them is dropped, both ways),
    /// or heals the cut.
    pub fn set_cut(&self, a: &str, b: &str, cut: bool) {
        let key = pair(a, b);
        let mut set = self.shared.cut.lock().unwrap();
        if cut {
            set.insert(key);
        } else {
            set.remove(&key);
        }
    }

    /// Registers a node of `region` whose QUIC endpoint is bound at `target`, and returns
    /// the address (on `bind_ip`) it must advertise to its peers. Call from a Tokio runtime.
    pub fn add_node(
        &self,
        bind_ip: IpAddr,
        target: SocketAddr,
        region: &str,
    ) -> std::io::Result<SocketAddr> {
        // The nodes' own socket buffers: a relay that dropped bursts would add loss nobody
        // asked for.
        let std_socket = warren_transport::udp_socket::bind((bind_ip, 0).into())?;
        let front = Arc::new(UdpSocket::from_std(std_socket)?);
        let addr = front.local_addr()?;
        self.shared
            .regions
            .lock()
            .unwrap()
            .insert(target, region.to_string());
        let front_loop = Front {
            shared: self.shared.clone(),
            socket: front,
            target,
            region: region.to_string(),
            flows: HashMap::new(),
        };
        self.shared.tasks.spawn(front_loop.run());
        Ok(addr)
    }
}

impl Shared {
    /// Whether a datagram between these regions is dropped (cut apart, or lost).
    fn drops(&self, a: Option<&str>, b: &str) -> bool {
        if let Some(a) = a {
            if self.cut.lock().unwrap().contains(&pair(a, b)) {
                return true;
            }
        }
        self.loss > 0.0 && rand::random::<f64>() < self.loss
    }
}

/// One node's relay address: datagrams from each sender go to the node through a socket of
/// the sender's own, so the node's answers can be told apart and sent back.
struct Front {
    shared: Arc<Shared>,
    socket: Arc<UdpSocket>,
    target: SocketAddr,
    region: String,
    flows: HashMap<SocketAddr, mpsc::UnboundedSender<(Instant, Vec<u8>)>>,
}

impl Front {
    async fn run(mut self) {
        let mut buf = vec![0u8; MAX_DATAGRAM];
        loop {
            let (n, from) = tokio::select! {
                _ = self.shared.cancel.cancelled() => return,
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok(x) => x,
                    // ICMP errors of earlier sends surface here on Linux: not fatal.
                    Err(_) => continue,
                },
            };
            let sender_region = self.shared.regions.lock().unwrap().get(&from).cloned();
            if self.shared.drops(sender_region.as_deref(), &self.region) {
                continue;
            }
            let delay = match &sender_region {
                Some(r) => self.shared.delays.one_way(r, &self.region),
                None => Duration::ZERO,
            };
            let flow = match self.flows.get(&from) {
                Some(f) if !f.is_closed() => f.clone(),
                _ => match self.open_flow(from, sender_region.clone(), delay).await {
                    Ok(f) => f,
                    Err(e) => {
                        tracing::warn!(%from, error = %e, "wan relay: cannot open a flow");
                        continue;
                    }
                },
            };
            let _ = flow.send((Instant::now() + delay, buf[..n].to_vec()));
        }
    }

    /// A socket towards the node for datagrams from `from`, with a delay line each way.
    async fn open_flow(
        &mut self,
        from: SocketAddr,
        sender_region: Option<String>,
        delay: Duration,
    ) -> std::io::Result<mpsc::UnboundedSender<(Instant, Vec<u8>)>> {
        let bind: SocketAddr = (self.target.ip(), 0).into();
        let up = Arc::new(UdpSocket::from_std(warren_transport::udp_socket::bind(
            bind,
        )?)?);
        up.connect(self.target).await?;
        let (to_node, towards_node) = mpsc::unbounded_channel();
        let (to_sender, towards_sender) = mpsc::unbounded_channel();
        let shared = &self.shared;
        let up_send = up.clone();
        shared.tasks.spawn(deliver(
            towards_node,
            shared.cancel.clone(),
            move |d: Vec<u8>| {
                let s = up_send.clone();
                async move { s.send(&d).await.map(|_| ()) }
            },
        ));
        let front = self.socket.clone();
        shared.tasks.spawn(deliver(
            towards_sender,
            shared.cancel.clone(),
            move |d: Vec<u8>| {
                let s = front.clone();
                async move { s.send_to(&d, from).await.map(|_| ()) }
            },
        ));
        shared.tasks.spawn(answers(
            up,
            to_sender,
            delay,
            (self.region.clone(), sender_region),
            self.shared.clone(),
        ));
        self.flows.insert(from, to_node.clone());
        Ok(to_node)
    }
}

/// Reads the node's answers to one sender and queues them after `delay`; `regions` are the
/// node's and the sender's.
async fn answers(
    up: Arc<UdpSocket>,
    to_sender: mpsc::UnboundedSender<(Instant, Vec<u8>)>,
    delay: Duration,
    regions: (String, Option<String>),
    shared: Arc<Shared>,
) {
    let mut buf = vec![0u8; MAX_DATAGRAM];
    loop {
        let n = tokio::select! {
            _ = shared.cancel.cancelled() => return,
            r = up.recv(&mut buf) => match r {
                Ok(n) => n,
                Err(_) => continue,
            },
        };
        if shared.drops(regions.1.as_deref(), &regions.0) {
            continue;
        }
        if to_sender
            .send((Instant::now() + delay, buf[..n].to_vec()))
            .is_err()
        {
            return;
        }
    }
}

/// A delay line: sends each datagram when its time comes, in order.
async fn deliver<F, Fut>(
    mut queue: mpsc::UnboundedReceiver<(Instant, Vec<u8>)>,
    cancel: CancellationToken,
    send: F,
) where
    F: Fn(Vec<u8>) -> Fut,
    Fut: std::future::Future<Output = std::io::Result<()>>,
{
    loop {
        let (due, datagram) = tokio::select! {
            _ = cancel.cancelled() => return,
            next = queue.recv() => match next {
                Some(x) => x,
                None => return,
            },
        };
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep_until(due) => {}
        }
        // A full socket buffer or an ICMP error loses the datagram, as a network would.
        let _ = send(datagram).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UDP server that sends every datagram back; its address.
    async fn echo_server() -> SocketAddr {
        let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            while let Ok((n, from)) = echo.recv_from(&mut buf).await {
                let _ = echo.send_to(&buf[..n], from).await;
            }
        });
        addr
    }

    async fn round_trip(s: &UdpSocket, to: SocketAddr) -> Duration {
        let t = std::time::Instant::now();
        s.send_to(b"ping", to).await.unwrap();
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(5), s.recv(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        assert_eq!(&buf[..n], b"ping");
        t.elapsed()
    }

    /// A datagram and its echo each wait half the pair's round trip; an unknown sender's
    /// pass at once.
    #[tokio::test]
    async fn datagrams_wait_half_the_round_trip_each_way() {
        let echo_addr = echo_server().await;
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let relay = WanRelay::new(DelayMatrix::parse("a/b=200").unwrap(), 0.0);
        relay
            .add_node(
                "127.0.0.1".parse().unwrap(),
                client.local_addr().unwrap(),
                "a",
            )
            .unwrap();
        let front = relay
            .add_node("127.0.0.1".parse().unwrap(), echo_addr, "b")
            .unwrap();
        let rtt = round_trip(&client, front).await;
        assert!(
            rtt >= Duration::from_millis(200) && rtt < Duration::from_millis(400),
            "{rtt:?}"
        );
        let direct = round_trip(&stranger, front).await;
        assert!(direct < Duration::from_millis(100), "{direct:?}");
    }

    #[tokio::test]
    async fn a_cut_drops_both_ways_until_healed() {
        let echo_addr = echo_server().await;
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let relay = WanRelay::new(DelayMatrix::default(), 0.0);
        relay
            .add_node(
                "127.0.0.1".parse().unwrap(),
                client.local_addr().unwrap(),
                "a",
            )
            .unwrap();
        let front = relay
            .add_node("127.0.0.1".parse().unwrap(), echo_addr, "b")
            .unwrap();
        relay.set_cut("b", "a", true);
        client.send_to(b"x", front).await.unwrap();
        let mut buf = [0u8; 4];
        let got = tokio::time::timeout(Duration::from_millis(300), client.recv(&mut buf)).await;
        assert!(got.is_err(), "a datagram crossed the cut");
        relay.set_cut("a", "b", false);
        round_trip(&client, front).await;
    }

    #[tokio::test]
    async fn every_datagram_is_lost_at_loss_one() {
        let echo = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let relay = WanRelay::new(DelayMatrix::default(), 1.0);
        let front = relay
            .add_node(
                "127.0.0.1".parse().unwrap(),
                echo.local_addr().unwrap(),
                "a",
            )
            .unwrap();
        let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        client.send_to(b"x", front).await.unwrap();
        let mut buf = [0u8; 4];
        let got = tokio::time::timeout(Duration::from_millis(300), echo.recv(&mut buf)).await;
        assert!(got.is_err(), "the datagram arrived");
    }
}
