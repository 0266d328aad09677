//! The runtime a node's QUIC endpoint runs on.
//!
//! quinn's own tokio adapter spawns each connection's driver with `tokio::spawn`, on
//! whichever runtime the code that opened (or accepted) the connection runs: a connection a
//! request handler opens would be driven by the node's request threads, and while those are
//! busy or starved of CPU, nothing on it moves — Raft's heartbeats and lease renewals
//! included. [`Pinned`] keeps every part of the endpoint (its driver, every connection's
//! driver, their timers, the socket's readiness) on the one runtime the endpoint was bound
//! on (`Peers::bind`): a node binds it on its consensus runtime (`warren_daemon`).

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;
use tokio::runtime::Handle;

/// quinn's tokio adapter, with every task and timer on the runtime of `handle`.
#[derive(Debug)]
pub(crate) struct Pinned {
    handle: Handle,
}

impl Pinned {
    pub(crate) fn new(handle: Handle) -> Self {
        Pinned { handle }
    }
}

impl Runtime for Pinned {
    fn new_timer(&self, at: Instant) -> Pin<Box<dyn AsyncTimer>> {
        // A timer belongs to the runtime current where it is made.
        let _on = self.handle.enter();
        TokioRuntime.new_timer(at)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        self.handle.spawn(future);
    }

    fn wrap_udp_socket(&self, socket: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        // The socket's readiness is driven by the reactor current where it is registered.
        let _on = self.handle.enter();
        TokioRuntime.wrap_udp_socket(socket)
    }

    fn now(&self) -> Instant {
        TokioRuntime.now()
    }
}
