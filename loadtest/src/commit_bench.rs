//! Placement commit latency on an in-process three-node cluster: real QUIC between the
//! members, real RocksDB with synced writes. Measured twice in one run: first with the
//! followers asking for no ownership leases (as before leases existed), then with their
//! lease keepers running (each follower asks every quarter lease, and the leader confirms
//! its leadership with a quorum round per request): the ratio is what leases cost a commit.

use crate::report::{percentiles, Table};
use std::sync::Arc;
use std::time::{Duration, Instant};
use warren_consensus::{Cluster, ClusterConfig, Command, CommandResult};
use warren_transport::{tls, Peers};

pub async fn commit_latency(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir()?;
    let ca = tls::new_ca("bench")?;
    let mut members: Vec<Arc<Cluster>> = Vec::new();
    for i in 1..=3u64 {
        let mut cfg = |c: &mut ClusterConfig| c.supervise_every = Duration::from_millis(200);
        members.push(member(&ca, dir.path(), i, "r", None, &mut cfg).await?);
    }
    // The first node leads and reconciles membership; the followers' supervisors (and with
    // them their lease keepers) start only for the second half.
    form(&members, ca, false).await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while voters(&members[0]) < 3 {
        anyhow::ensure!(Instant::now() < deadline, "three voters did not form");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let follower = members
        .iter()
        .find(|m| !m.is_leader())
        .expect("a follower")
        .clone();
    let leader = members
        .iter()
        .find(|m| m.is_leader())
        .expect("a leader")
        .clone();
    // Warm-up (connections, RocksDB), not counted.
    commits(&leader, &follower, "w", 50).await?;
    let without = commits(&leader, &follower, "a", n).await?;
    for m in members.iter().filter(|m| !m.is_leader()) {
        m.start_supervisor();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !members.iter().all(|m| m.has_lease()) {
        anyhow::ensure!(Instant::now() < deadline, "the followers got no lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let with = commits(&leader, &follower, "b", n).await?;
    let (a50, a99) = percentiles(&without.0);
    let (b50, b99) = percentiles(&with.0);
    let (fa50, fa99) = percentiles(&without.1);
    let (fb50, fb99) = percentiles(&with.1);
    table.note(format!(
        "placement commit on 3 nodes (QUIC + RocksDB fsync), n={n} on the leader and {} from a follower each: \
         without leases leader p50 {a50:.2} ms p99 {a99:.2} ms, follower p50 {fa50:.2} ms p99 {fa99:.2} ms; \
         with leases leader p50 {b50:.2} ms p99 {b99:.2} ms, follower p50 {fb50:.2} ms p99 {fb99:.2} ms; \
         with/without on the leader: p50 x{:.2}, p99 x{:.2}",
        without.1.len(),
        b50 / a50,
        b99 / a99
    ));
    for m in &members {
        m.shutdown().await;
    }
    Ok(())
}

/// `n` placements committed through the leader, and one in five through a follower: their
/// latencies.
async fn commits(
    leader: &Cluster,
    follower: &Cluster,
    prefix: &str,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let place = |sandbox: String| Command::Place {
        sandbox,
        node: 1,
        expected_epoch: 0,
        tenant: None,
        size: None,
    };
    let (mut on_leader, mut via_follower) = (Vec::with_capacity(n), Vec::new());
    for i in 0..n {
        let t = Instant::now();
        let r = leader.propose(place(format!("{prefix}{i}"))).await;
        on_leader.push(t.elapsed());
        anyhow::ensure!(
            matches!(r, Ok(CommandResult::Placement { applied: true, .. })),
            "commit failed: {r:?}"
        );
        if i % 5 == 0 {
            let t = Instant::now();
            follower
                .propose(place(format!("{prefix}f{i}")))
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            via_follower.push(t.elapsed());
        }
    }
    Ok((on_leader, via_follower))
}

/// Placement commits on three voters in three regions `rtt` apart (each pair), through the
/// user-space WAN relay (`warren_cli::wan`), on default timing with every lease keeper
/// running: for 20, 80 and 150 ms, against the same cluster with the relay in the path but
/// no delay (same run). The target: a commit on the leader takes about one round trip (to
/// the nearest other voter and back), one through a follower about two.
pub async fn wan_commit_latency(n: usize, table: &mut Table) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut base = None;
    for rtt_ms in [0u64, 20, 80, 150] {
        let spec = format!("r1/r2={rtt_ms},r1/r3={rtt_ms},r2/r3={rtt_ms}");
        let relay = warren_cli::wan::WanRelay::new(
            warren_cli::wan::DelayMatrix::parse(&spec).map_err(anyhow::Error::msg)?,
            0.0,
        );
        let dir = tempfile::tempdir()?;
        let members = wan_members(&relay, dir.path()).await?;
        let leader = members.iter().find(|m| m.is_leader()).expect("a leader");
        let follower = members.iter().find(|m| !m.is_leader()).expect("a follower");
        commits(leader, follower, "w", 10).await?;
        // Back to back, then spaced: openraft keeps one AppendEntries in flight per
        // follower, and the one telling followers of the last commit is still out when the
        // next proposal comes at once.
        let back_to_back = commits(leader, follower, &format!("r{rtt_ms}-"), n).await?;
        let gap = Duration::from_millis(2 * rtt_ms + 20);
        let spaced = spaced_commits(leader, &format!("s{rtt_ms}-"), n.min(50), gap).await?;
        let (l50, l99) = percentiles(&back_to_back.0);
        let (f50, f99) = percentiles(&back_to_back.1);
        let (s50, s99) = percentiles(&spaced);
        let (b50, bf50, bs50) = *base.get_or_insert((l50, f50, s50));
        let trips = |v: f64, b: f64| {
            if rtt_ms == 0 {
                0.0
            } else {
                (v - b) / rtt_ms as f64
            }
        };
        table.note(format!(
            "placement commit, 3 voters in 3 regions {rtt_ms:>3} ms apart (n={n}): leader back to back p50 {l50:.1} ms p99 {l99:.1} ms \
             ({:.2} round trips beyond the 0 ms run), spaced p50 {s50:.1} ms p99 {s99:.1} ms ({:.2} round trips); \
             via a follower p50 {f50:.1} ms p99 {f99:.1} ms ({:.2} round trips)",
            trips(l50, b50),
            trips(s50, bs50),
            trips(f50, bf50),
        ));
        for m in &members {
            m.shutdown().await;
        }
    }
    Ok(())
}

/// Three members in regions r1, r2, r3, peers reached through `relay`, leases on.
async fn wan_members(
    relay: &warren_cli::wan::WanRelay,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<Arc<Cluster>>> {
    let ca = tls::new_ca("bench")?;
    let mut members: Vec<Arc<Cluster>> = Vec::new();
    for i in 1..=3u64 {
        let region = format!("r{i}");
        members.push(member(&ca, dir, i, &region, Some(relay), &mut |_| {}).await?);
    }
    form(&members, ca, true).await?;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if voters(&members[0]) == 3 && members.iter().all(|m| m.has_lease()) {
            return Ok(members);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "three voters with leases did not form across the relay"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many voters `m` sees in the membership.
fn voters(m: &Cluster) -> usize {
    m.raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .count()
}

/// Member `i` of region `region`, serving its RPCs; its peers reach it through `relay` when
/// there is one. `tune` adjusts its settings.
async fn member(
    ca: &tls::CaMaterial,
    dir: &std::path::Path,
    i: u64,
    region: &str,
    relay: Option<&warren_cli::wan::WanRelay>,
    tune: &mut dyn FnMut(&mut ClusterConfig),
) -> anyhow::Result<Arc<Cluster>> {
    let name = format!("b{i}");
    let identity = tls::issue(ca, &name, i, Duration::from_secs(86_400))?;
    let peers = Peers::bind("127.0.0.1:0".parse()?, &identity)?;
    let real = peers.local_addr()?;
    let advertised = match relay {
        Some(relay) => relay.add_node(real.ip(), real, region)?,
        None => real,
    };
    let mut cfg = ClusterConfig::new(&name, region, "127.0.0.1:1", &advertised.to_string());
    cfg.key_id = tls::key_id_of_cert(&identity.cert_pem)?;
    tune(&mut cfg);
    let c = Cluster::open(&dir.join(&name), i, cfg, peers.clone())
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    peers.serve(Arc::new(RpcOnly(c.clone())));
    Ok(c)
}

/// The first member bootstraps the cluster and registers the others; its supervisor runs,
/// and the others' too when `supervise_all`.
async fn form(
    members: &[Arc<Cluster>],
    ca: tls::CaMaterial,
    supervise_all: bool,
) -> anyhow::Result<()> {
    members[0]
        .bootstrap(ca)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, m) in members.iter().enumerate() {
        if i == 0 || supervise_all {
            m.start_supervisor();
        }
    }
    for m in &members[1..] {
        let cmd = Command::Register {
            name: m.cfg.name.clone(),
            region: m.cfg.region.clone(),
            api_addr: String::new(),
            peer_addr: m.cfg.peer_addr.clone(),
            capacity: 1,
            key_id: m.cfg.key_id.clone(),
            join_token: None,
        };
        members[0]
            .propose(cmd)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// `n` placements through `leader`, each `gap` after the previous one ended: their latencies.
async fn spaced_commits(
    leader: &Cluster,
    prefix: &str,
    n: usize,
    gap: Duration,
) -> anyhow::Result<Vec<Duration>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        tokio::time::sleep(gap).await;
        let cmd = Command::Place {
            sandbox: format!("{prefix}{i}"),
            node: 1,
            expected_epoch: 0,
            tenant: None,
            size: None,
        };
        let t = Instant::now();
        let r = leader.propose(cmd).await;
        out.push(t.elapsed());
        anyhow::ensure!(
            matches!(r, Ok(CommandResult::Placement { applied: true, .. })),
            "commit failed: {r:?}"
        );
    }
    Ok(out)
}

struct RpcOnly(Arc<Cluster>);

impl warren_transport::Handler for RpcOnly {
    fn handle(
        self: Arc<Self>,
        kind: warren_transport::StreamKind,
        peer: warren_transport::PeerId,
        send: warren_transport::SendStream,
        recv: warren_transport::RecvStream,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            if kind == warren_transport::StreamKind::Rpc {
                self.0.clone().serve_rpc(peer, send, recv).await;
            }
        })
    }
}
