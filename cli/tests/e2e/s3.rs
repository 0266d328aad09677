//! Snapshots in a real S3-compatible server (moto), and what an object-store outage does to
//! a snapshot: it fails cleanly and the previous snapshot stays whole.

use super::harness::{api_err, unique, Node};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use warren_api::snapshot::CreateSnapshotRequest;

#[path = "../../../storage/tests/moto.rs"]
pub mod moto;

/// A TCP proxy in front of the store that can be switched off (connections are then closed
/// at once, as by a store that is down).
struct FaultProxy {
    port: u16,
    up: Arc<AtomicBool>,
}

impl FaultProxy {
    async fn start(target_port: u16) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let flag = up.clone();
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if !flag.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let flag = flag.clone();
                tokio::spawn(async move {
                    let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(("127.0.0.1", target_port)).await
                    else {
                        return;
                    };
                    // Copy in slices so that switching off also cuts open connections.
                    let (mut ri, mut wi) = inbound.split();
                    let (mut ro, mut wo) = outbound.split();
                    let cut = async {
                        while flag.load(Ordering::SeqCst) {
                            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        }
                    };
                    tokio::select! {
                        _ = tokio::io::copy(&mut ri, &mut wo) => {}
                        _ = tokio::io::copy(&mut ro, &mut wi) => {}
                        _ = cut => {}
                    }
                });
            }
        });
        FaultProxy { port, up }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn s3_snapshots_survive_a_store_outage_and_wake_from_s3() {
    moto::set_test_credentials();
    let server = moto::Moto::start().await;
    server.bucket("warren-e2e").await;
    let proxy = FaultProxy::start(server.port).await;
    let location = moto::location(proxy.port, "warren-e2e", "node-a");
    let node = Node::start_with("127.0.0.1:0", &["--object-store", &location]).await;
    let c = &node.client;
    let id = format!("s3-{}", unique());
    c.sh(
        &id,
        "mkdir -p /workspace/d && echo one > /workspace/d/f && head -c 3000000 /dev/urandom > /workspace/d/big && sha256sum /workspace/d/big > /workspace/sum",
    )
    .await
    .unwrap();
    let first = c
        .create_snapshot(&id, &CreateSnapshotRequest::default())
        .await
        .unwrap();

    // The store goes down during the next snapshot: it fails, nothing half-written remains.
    c.sh(
        &id,
        "echo two > /workspace/d/f && echo new > /workspace/d/g",
    )
    .await
    .unwrap();
    proxy.set_up(false);
    let e = c
        .create_snapshot(&id, &CreateSnapshotRequest::default())
        .await
        .unwrap_err();
    let (status, _, _) = api_err(e);
    assert!(
        status >= 500,
        "a store outage is a server-side error: {status}"
    );
    proxy.set_up(true);
    let listed = c.list_snapshots(Some(&id)).await.unwrap().snapshots;
    assert_eq!(
        listed.iter().map(|s| s.id.clone()).collect::<Vec<_>>(),
        vec![first.id.clone()],
        "only the snapshot made before the outage exists"
    );

    // The previous snapshot is whole: restoring it brings its files back.
    c.restore(&id, &first.id).await.unwrap();
    let r = c
        .sh(&id, "cat /workspace/d/f; test -e /workspace/d/g && echo stray; sha256sum -c /workspace/sum >/dev/null && echo intact")
        .await
        .unwrap();
    assert_eq!(r.stdout, "one\nintact\n", "{}", r.stderr);

    // Sleep writes to S3; wake reads from it.
    c.sh(&id, "echo slept > /workspace/d/f").await.unwrap();
    c.sleep(&id).await.unwrap();
    let r = c.sh(&id, "cat /workspace/d/f").await.unwrap();
    assert_eq!(r.stdout, "slept\n");
}
