//! What a node serves to its peers over QUIC: Raft RPCs, and forwarded HTTP requests run
//! through the same API router as public ones (marked as coming from a peer).

use super::FromPeer;
use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tower_service::Service;
use warren_consensus::Cluster;
use warren_transport::peers::Handler;
use warren_transport::{PeerId, RecvStream, SendStream, StreamKind};

pub struct PeerServer {
    pub cluster: Arc<Cluster>,
    pub app: Router,
}

impl Handler for PeerServer {
    fn handle(
        self: Arc<Self>,
        kind: StreamKind,
        peer: PeerId,
        send: SendStream,
        recv: RecvStream,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(async move {
            match kind {
                StreamKind::Rpc => self.cluster.clone().serve_rpc(peer, send, recv).await,
                StreamKind::Http => {
                    // A forwarded request is taken as a member's (served here, one hop,
                    // on the sender's view of the placement): only a current member sends one.
                    if let Err(refusal) = self.cluster.member_of(&peer) {
                        tracing::warn!(peer = %peer.name, node = ?peer.node, %refusal, "forwarded request refused");
                        return;
                    }
                    let peer = peer.name;
                    let app = self.app.clone();
                    let svc = tower::service_fn(
                        move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                            req.extensions_mut().insert(FromPeer { peer: peer.clone() });
                            let mut app = app.clone();
                            async move { app.call(req.map(axum::body::Body::new)).await }
                        },
                    );
                    let io = TokioIo::new(tokio::io::join(recv, send));
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, TowerToHyperService::new(svc))
                        .with_upgrades();
                    if let Err(e) = conn.await {
                        tracing::debug!(error = %e, "forwarded request stream ended");
                    }
                }
            }
        })
    }
}
