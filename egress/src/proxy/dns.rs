//! The sandboxes' name server, on the proxy's port over UDP (the firewall redirects every
//! DNS query a sandbox sends there, whatever server it names). A name is answered per the
//! asking sandbox's policy: a name the policy denies is `REFUSED` (RFC 1035: refused for
//! policy reasons), and of the addresses it resolves to (on the node, by the system's
//! resolver) only those the guard and the policy let the sandbox reach are given; none of
//! them: `REFUSED` too, so that a sandbox learns nothing of the networks it cannot reach.
//! IPv6 is off inside sandboxes: `AAAA` gets no address. Other types are not implemented.

use super::Proxy;
use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

/// Queries answered at once; more are dropped (the client asks again).
const IN_FLIGHT: usize = 256;
/// How long the node's resolver may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an answer may be cached (short: a policy change applies soon after).
const TTL: u32 = 30;
/// The largest query read (EDNS's common payload size).
const QUERY_MAX: usize = 4096;

impl Proxy {
    /// Answers the sandboxes' DNS queries on `socket` until `cancel`.
    pub fn spawn_dns(
        self: &Arc<Self>,
        socket: UdpSocket,
        cancel: CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let proxy = self.clone();
        let socket = Arc::new(socket);
        let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
        tokio::spawn(async move {
            let mut buf = vec![0u8; QUERY_MAX];
            loop {
                let (n, peer) = tokio::select! {
                    _ = cancel.cancelled() => break,
                    r = socket.recv_from(&mut buf) => match r {
                        Ok(r) => r,
                        Err(e) => {
                            tracing::debug!(error = %e, "egress name server: receive failed");
                            continue;
                        }
                    },
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    continue;
                };
                let (p, s, query) = (proxy.clone(), socket.clone(), buf[..n].to_vec());
                proxy.tasks.spawn(async move {
                    if let Some(answer) = p.answer_dns(&query, peer).await {
                        let _ = s.send_to(&answer, peer).await;
                    }
                    drop(permit);
                });
            }
        })
    }

    /// The answer to one query from `peer`; None for what is no query at all.
    async fn answer_dns(&self, query: &[u8], peer: SocketAddr) -> Option<Vec<u8>> {
        let msg = Message::from_vec(query).ok()?;
        if msg.message_type() != MessageType::Query {
            return None;
        }
        let mut reply = Message::new();
        reply
            .set_id(msg.id())
            .set_message_type(MessageType::Response)
            .set_op_code(msg.op_code())
            .set_recursion_desired(msg.recursion_desired())
            .set_recursion_available(true);
        let code = match (msg.op_code(), msg.queries()) {
            (OpCode::Query, [q]) => {
                reply.add_query(q.clone());
                match self.addresses_for(peer, q.name(), q.query_type()).await {
                    Ok(addrs) => {
                        for ip in addrs {
                            reply.add_answer(Record::from_rdata(
                                q.name().clone(),
                                TTL,
                                RData::A(A(ip)),
                            ));
                        }
                        ResponseCode::NoError
                    }
                    Err(code) => code,
                }
            }
            (OpCode::Query, _) => ResponseCode::FormErr,
            _ => ResponseCode::NotImp,
        };
        reply.set_response_code(code);
        reply.to_vec().ok()
    }

    /// The IPv4 addresses to give `peer` for `name`, or the code that refuses it.
    async fn addresses_for(
        &self,
        peer: SocketAddr,
        name: &hickory_proto::rr::Name,
        kind: RecordType,
    ) -> Result<Vec<std::net::Ipv4Addr>, ResponseCode> {
        if !matches!(kind, RecordType::A | RecordType::AAAA) {
            return Err(ResponseCode::NotImp);
        }
        let Some(sandbox) = self.ctx.sandbox_at(peer.ip()) else {
            tracing::warn!(client = %peer, "egress name server: a query from an address that is no sandbox of this node");
            return Err(ResponseCode::Refused);
        };
        let host = name.to_ascii().trim_end_matches('.').to_ascii_lowercase();
        if let Some(why) = sandbox.policy.denied_by_name(&host) {
            let _ = self.refused(&sandbox, &host, &format!("name lookup: {why}"));
            return Err(ResponseCode::Refused);
        }
        if kind == RecordType::AAAA {
            return Ok(Vec::new());
        }
        let resolved: Vec<IpAddr> = match tokio::time::timeout(
            RESOLVE_TIMEOUT,
            tokio::net::lookup_host((host.as_str(), 0)),
        )
        .await
        {
            Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
            Ok(Err(e)) => {
                tracing::debug!(sandbox = %sandbox.id, host, error = %e, "egress name server: no address");
                return Err(ResponseCode::ServFail);
            }
            Err(_) => return Err(ResponseCode::ServFail),
        };
        let mut refused = None;
        let mut given = Vec::new();
        for ip in resolved {
            let IpAddr::V4(v4) = ip else { continue };
            let why = self
                .refuse(SocketAddr::new(ip, 0))
                .or_else(|| sandbox.policy.allows(&host, ip).err());
            match why {
                Some(why) => {
                    refused.get_or_insert(why);
                }
                None if !given.contains(&v4) => given.push(v4),
                None => {}
            }
        }
        if given.is_empty() {
            if let Some(why) = refused {
                let _ = self.refused(&sandbox, &host, &format!("name lookup: {why}"));
                return Err(ResponseCode::Refused);
            }
        }
        tracing::debug!(sandbox = %sandbox.id, host, addresses = given.len(), "egress name server: answered");
        Ok(given)
    }
}
