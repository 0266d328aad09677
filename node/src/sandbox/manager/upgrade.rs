//! Streams to a guest that outlive one HTTP exchange (terminals, port tunnels): an HTTP/1.1
//! upgrade on the guest's socket, after which the connection is a plain byte stream.

use super::SandboxManager;
use crate::guest::client::empty;
use hyper::upgrade::Upgraded;
use std::sync::Arc;
use warren_api::{ApiError, ErrorCode};

impl SandboxManager {
    /// Opens `path_and_query` on the guest of sandbox `id` (created or woken as any call
    /// does) and upgrades the connection to `protocol`. The guest's refusal comes back as its
    /// API error.
    pub async fn upgrade(
        self: &Arc<Self>,
        id: &str,
        path_and_query: &str,
        protocol: &str,
    ) -> Result<Upgraded, ApiError> {
        let request = || {
            http::Request::get(path_and_query)
                .header(http::header::CONNECTION, "upgrade")
                .header(http::header::UPGRADE, protocol)
                .body(empty())
                .map_err(|e| ApiError::invalid(format!("bad request: {e}")))
        };
        let key = self.ensure(id).await?;
        let resp = match self.guests.send(&key, request()?).await {
            Ok(r) => r,
            Err(e) if e.is_connect() => {
                tracing::warn!(sandbox_id = %id, error = %e, "guest unreachable; recovering the sandbox");
                self.recover(id).await?;
                let key = self.ensure(id).await?;
                self.guests
                    .send(&key, request()?)
                    .await
                    .map_err(|e| super::guest_error(id, e))?
            }
            Err(e) => return Err(super::guest_error(id, e)),
        };
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(crate::guest::body::error_of(resp).await);
        }
        hyper::upgrade::on(resp).await.map_err(|e| {
            ApiError::new(
                ErrorCode::Unavailable,
                format!("sandbox {id}: the guest's upgraded stream failed: {e}"),
            )
        })
    }
}
