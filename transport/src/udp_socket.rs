//! The UDP socket under a node's QUIC endpoint, with kernel buffers sized for it.
//!
//! One socket carries every connection of the node: Raft's calls and forwarded bulk
//! traffic (uploads, terminals) alike. With the kernel's default receive buffer (208 KiB
//! here), a burst of bulk datagrams fills the buffer before the node's runtime drains it,
//! and the kernel drops what arrives next — Raft's heartbeats and their answers included,
//! which QUIC then resends only after its probe timeout, doubled on each miss. Measured on
//! the raft-under-load test (`cli/tests/e2e/raft_under_load.rs`): thousands of datagrams
//! dropped per run (`RcvbufErrors` in `/proc/net/snmp`), and with the CPU busy besides, a
//! follower that heard its leader 456 ms late, past the election timeout.

use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// What each direction's buffer is asked to hold.
pub const WANTED_BYTES: usize = 8 << 20;

/// Binds `addr` for the endpoint, with receive and send buffers of [`WANTED_BYTES`] where
/// the kernel allows (as root past `net.core.rmem_max`/`wmem_max`; otherwise up to them,
/// with a warning that says which setting to raise). Non-blocking, as async runtimes take it.
pub fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    let recv = grow(&socket, Direction::Receive);
    let send = grow(&socket, Direction::Send);
    // Linux reports twice what was set (its bookkeeping share included).
    if recv < 2 * WANTED_BYTES || send < 2 * WANTED_BYTES {
        tracing::warn!(
            receive_bytes = recv,
            send_bytes = send,
            wanted_bytes = WANTED_BYTES,
            "the QUIC socket's buffers are smaller than wanted: bursts of forwarded traffic may drop Raft's datagrams; raise net.core.rmem_max and net.core.wmem_max, or run the node as root"
        );
    }
    Ok(socket.into())
}

#[derive(Clone, Copy)]
enum Direction {
    Receive,
    Send,
}

/// Asks for [`WANTED_BYTES`] in one direction: forced (root only), or else within the
/// system's maximum. Answers the size the kernel reports now.
fn grow(socket: &Socket, dir: Direction) -> usize {
    let force = match dir {
        Direction::Receive => libc::SO_RCVBUFFORCE,
        Direction::Send => libc::SO_SNDBUFFORCE,
    };
    let want = WANTED_BYTES as libc::c_int;
    // SAFETY: a plain setsockopt on a descriptor `socket` owns, with a c_int value of the
    // size passed.
    let forced = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            force,
            (&want as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    } == 0;
    if !forced {
        let _ = match dir {
            Direction::Receive => socket.set_recv_buffer_size(WANTED_BYTES),
            Direction::Send => socket.set_send_buffer_size(WANTED_BYTES),
        };
    }
    match dir {
        Direction::Receive => socket.recv_buffer_size(),
        Direction::Send => socket.send_buffer_size(),
    }
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receive and send buffer sizes the kernel reports for `socket`.
    fn buffer_sizes(socket: &std::net::UdpSocket) -> io::Result<(usize, usize)> {
        let s = socket2::SockRef::from(socket);
        Ok((s.recv_buffer_size()?, s.send_buffer_size()?))
    }

    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() == 0 }
    }

    /// The endpoint's socket holds a burst: of 2 MiB of datagrams sent while nobody reads,
    /// every one is there to read. With the kernel's default buffer (208 KiB), most were
    /// dropped.
    #[test]
    fn the_endpoints_socket_keeps_a_burst_nobody_read_yet() {
        let rx = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let (recv, send) = buffer_sizes(&rx).unwrap();
        if root() {
            assert!(
                recv >= 2 * WANTED_BYTES && send >= 2 * WANTED_BYTES,
                "{recv} {send}"
            );
        }
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let datagram = [7u8; 1200];
        let sent = (2 << 20) / datagram.len();
        for _ in 0..sent {
            tx.send_to(&datagram, rx.local_addr().unwrap()).unwrap();
        }
        let mut buf = [0u8; 2048];
        let mut got = 0;
        while rx.recv(&mut buf).is_ok() {
            got += 1;
        }
        if root() || recv >= 2 * WANTED_BYTES {
            assert_eq!(got, sent, "datagrams dropped from a burst of {sent}");
        }
    }
}
