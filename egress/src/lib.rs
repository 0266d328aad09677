//! The egress proxy of a warren node: each sandbox's only way out. It runs in the node,
//! outside every sandbox, and applies the sandbox's policy (`decide`, pure) to every
//! request: hosts allowed or denied by name and by the network they resolve to, per-host
//! rules that set or remove headers (values from secrets, by sandbox id and labels), and
//! the operator's fixed refusals (`guard`: private networks, the node's own endpoints).
//! HTTP is proxied (also keep-alive, streamed bodies and WebSocket upgrades); HTTPS is
//! tunnelled (`CONNECT`), and intercepted for hosts with a rule: the proxy answers as the
//! host with a certificate of the sandbox's own CA (`ca`) and forwards each request over
//! TLS verified against the public roots and the operator's CA file.
//!
//! What the proxy knows of a sandbox comes through one boundary, [`EgressContext`]: which
//! sandbox a connection comes from (by its address on its own network) and secrets' values.

pub mod ca;
pub mod decide;
pub mod guard;
pub mod proxy;
pub mod usage;

pub use decide::Compiled;
pub use guard::Guard;
pub use proxy::{Proxy, ProxyMetrics, ProxyTls};

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

/// What the proxy needs to know of one sandbox, looked up for every request (so that a
/// changed policy applies to the next request, also on a connection already open).
#[derive(Debug, Clone)]
pub struct SandboxEgress {
    pub id: String,
    pub labels: BTreeMap<String, String>,
    pub policy: Arc<Compiled>,
}

/// The node's side of the proxy.
pub trait EgressContext: Send + Sync + 'static {
    /// The sandbox whose container has this address, if any of this node's does.
    fn sandbox_at(&self, addr: IpAddr) -> Option<SandboxEgress>;
    /// The value of the secret `name` of sandbox `sandbox`'s tenant (None: no such secret,
    /// or it cannot be read). Another tenant's secret of that name is never it.
    fn secret(&self, sandbox: &str, name: &str) -> Option<String>;
}
