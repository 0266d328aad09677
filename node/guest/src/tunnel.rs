//! `GET /tunnel?port=N` with `Upgrade: warren-tunnel`: a byte stream to a TCP port inside the
//! sandbox, for preview URLs. Loopback is tried first (IPv4, then IPv6), so servers bound to
//! `localhost` only are reachable too.

use crate::http::{self, Request, Response};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;
use warren_api::ports::GUEST_TUNNEL_UPGRADE;
use warren_api::{ApiError, ErrorCode};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(serde::Deserialize, Default)]
struct TunnelQuery {
    port: Option<u16>,
}

async fn connect(port: u16) -> Result<TcpStream, ApiError> {
    let mut last = None;
    for addr in [format!("127.0.0.1:{port}"), format!("[::1]:{port}")] {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = Some(e.to_string()),
            Err(_) => last = Some("timed out".into()),
        }
    }
    Err(ApiError::new(
        ErrorCode::PortNotListening,
        format!(
            "nothing listens on port {port} in the sandbox ({})",
            last.unwrap_or_default()
        ),
    ))
}

pub async fn open(mut req: Request) -> Result<Response, ApiError> {
    let upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(GUEST_TUNNEL_UPGRADE));
    if !upgrade {
        return Err(ApiError::new(
            ErrorCode::UpgradeRequired,
            format!("a tunnel is a stream: send Upgrade: {GUEST_TUNNEL_UPGRADE}"),
        ));
    }
    let q: TunnelQuery = http::query(&req)?;
    let port = q
        .port
        .filter(|p| *p > 0)
        .ok_or_else(|| ApiError::invalid("port must be between 1 and 65535"))?;
    let mut target = connect(port).await?;
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            let mut client = TokioIo::new(upgraded);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut target).await;
        }
    });
    Ok(hyper::Response::builder()
        .status(101)
        .header(hyper::header::CONNECTION, "upgrade")
        .header(hyper::header::UPGRADE, GUEST_TUNNEL_UPGRADE)
        .body(http::full(bytes::Bytes::new()))
        .expect("valid response"))
}
