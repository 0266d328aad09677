//! `CONNECT host:port`: a byte tunnel to an upstream the guard and the policy allow.

use super::answer::{bad_gateway, bad_request, empty, timeout};
use super::upstream::{self, ConnectError};
use super::{Body, Proxy};
use crate::SandboxEgress;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub(crate) async fn connect(
    proxy: &Arc<Proxy>,
    sandbox: &SandboxEgress,
    peer: std::net::SocketAddr,
    req: Request<hyper::body::Incoming>,
    cancel: CancellationToken,
) -> Response<Body> {
    let Some(auth) = req.uri().authority().cloned() else {
        return bad_request("CONNECT needs host:port");
    };
    let Some(port) = auth.port_u16() else {
        return bad_request("CONNECT needs host:port");
    };
    let host = auth.host().to_ascii_lowercase();
    if sandbox.policy.has_rule_for(&host) {
        return super::intercept::intercept(proxy, sandbox, peer, host, port, req, cancel).await;
    }
    let (mut up, _addr) = match upstream::connect(proxy, sandbox, &host, port).await {
        Ok(c) => c,
        Err(ConnectError::Refused(why)) => return proxy.refused(sandbox, &host, &why),
        Err(ConnectError::Failed(e)) => return bad_gateway(&host, e),
        Err(ConnectError::TimedOut) => return timeout(&host),
    };
    proxy.allowed(sandbox, &host, None, "tunnel");
    let on_upgrade = hyper::upgrade::on(req);
    let (p, id) = (proxy.clone(), sandbox.id.clone());
    proxy.tasks.spawn(async move {
        let client = match on_upgrade.await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(error = %e, "egress tunnel: the client went away before it began");
                return;
            }
        };
        let mut client = TokioIo::new(client);
        tokio::select! {
            r = tokio::io::copy_bidirectional(&mut client, &mut up) => {
                if let Ok((sent, received)) = r {
                    p.count_bytes(&id, sent, received);
                }
            }
            _ = cancel.cancelled() => {}
        }
    });
    Response::new(empty())
}
