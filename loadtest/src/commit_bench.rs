//! Placement commit latency on an in-process three-node cluster: real QUIC between the
//! members, real RocksDB with synced writes.

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
        let name = format!("b{i}");
        let identity = tls::issue(&ca, &name, i, std::time::Duration::from_secs(86_400))?;
        let peers = Peers::bind("127.0.0.1:0".parse()?, &identity)?;
        let addr = peers.local_addr()?.to_string();
        let mut cfg = ClusterConfig::new(&name, "r", "127.0.0.1:1", &addr);
        cfg.key_id = tls::key_id_of_cert(&identity.cert_pem)?;
        cfg.supervise_every = Duration::from_millis(200);
        let c = Cluster::open(&dir.path().join(&name), i, cfg, peers.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        peers.serve(Arc::new(RpcOnly(c.clone())));
        c.start_supervisor();
        members.push(c);
    }
    members[0]
        .bootstrap(ca)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for m in &members[1..] {
        let cmd = Command::Register {
            name: m.cfg.name.clone(),
            region: "r".into(),
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
    let deadline = Instant::now() + Duration::from_secs(30);
    while members[0]
        .raft
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .count()
        < 3
    {
        anyhow::ensure!(Instant::now() < deadline, "three voters did not form");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut samples = Vec::with_capacity(n);
    let follower = members
        .iter()
        .find(|m| !m.is_leader())
        .expect("a follower")
        .clone();
    let mut via_follower = Vec::new();
    for i in 0..n {
        let t = Instant::now();
        let r = members[0]
            .propose(Command::Place {
                sandbox: format!("s{i}"),
                node: 1,
                expected_epoch: 0,
                tenant: None,
                size: None,
            })
            .await;
        samples.push(t.elapsed());
        anyhow::ensure!(
            matches!(r, Ok(CommandResult::Placement { applied: true, .. })),
            "commit failed: {r:?}"
        );
        if i % 5 == 0 {
            let t = Instant::now();
            follower
                .propose(Command::Place {
                    sandbox: format!("f{i}"),
                    node: 1,
                    expected_epoch: 0,
                    tenant: None,
                    size: None,
                })
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            via_follower.push(t.elapsed());
        }
    }
    let (p50, p99) = percentiles(&samples);
    let (f50, f99) = percentiles(&via_follower);
    table.note(format!(
        "placement commit on 3 nodes (QUIC + RocksDB fsync): on the leader p50 {p50:.2} ms p99 {p99:.2} ms (n={n}); \
         from a follower p50 {f50:.2} ms p99 {f99:.2} ms (n={})",
        via_follower.len()
    ));
    for m in &members {
        m.shutdown().await;
    }
    Ok(())
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
