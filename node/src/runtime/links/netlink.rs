//! A link's kernel calls, over netlink (rtnetlink): the host's addresses, the veth pair with
//! its far end made right in the container's network namespace, and that end's address and
//! default route, set from a netlink socket opened inside that namespace. No process is
//! spawned: with `ip` and `nsenter` a link took ~40 ms of a ~250 ms start.

use super::{Link, LINK_PREFIX};
use crate::runtime::subnets::Cidr;
use crate::runtime::RuntimeError;
use futures_util::TryStreamExt;
use rtnetlink::packet_route::address::AddressAttribute;
use rtnetlink::packet_route::link::{InfoData, InfoKind, InfoVeth};
use rtnetlink::{Handle, LinkMessageBuilder, LinkUnspec, LinkVeth, RouteMessageBuilder};
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;

/// A netlink connection: its handle, and the task that carries its messages (ended when
/// this is dropped).
pub struct Netlink {
    pub handle: Handle,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Netlink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A failed kernel call: the node cannot make links right now (503 `UNAVAILABLE`), unlike a
/// full subnet pool (`RuntimeError::Network`, 503 `CAPACITY_EXHAUSTED`: another node may
/// have room).
fn err(what: &str) -> impl Fn(rtnetlink::Error) -> RuntimeError + '_ {
    move |e| RuntimeError::Other(format!("{what}: {e}"))
}

impl Netlink {
    /// A connection in this process's network namespace.
    pub fn host() -> Result<Netlink, RuntimeError> {
        let (conn, handle, _) = rtnetlink::new_connection()
            .map_err(|e| RuntimeError::Other(format!("cannot open a netlink socket: {e}")))?;
        Ok(Netlink {
            handle,
            task: tokio::spawn(conn),
        })
    }

    /// A connection in the network namespace of process `pid`: its socket is opened by a
    /// thread of its own that enters that namespace and ends right after (a socket stays in
    /// the namespace it was opened in; no thread of the node changes namespace for good).
    pub async fn inside(pid: u32) -> Result<Netlink, RuntimeError> {
        let path = format!("/proc/{pid}/ns/net");
        let ns = std::fs::File::open(&path).map_err(|e| {
            RuntimeError::Other(format!(
                "cannot open {path} (sandbox links need the engine on the node's host): {e}"
            ))
        })?;
        let rt = tokio::runtime::Handle::current();
        let opened = tokio::task::spawn_blocking(move || {
            std::thread::scope(|s| {
                s.spawn(|| {
                    let _in_runtime = rt.enter();
                    // SAFETY: `ns` is an open namespace file; setns changes this thread only,
                    // which ends when this closure returns.
                    if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    rtnetlink::new_connection().map(|(conn, handle, _)| (conn, handle))
                })
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the netlink thread panicked")))
            })
        })
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?
        .map_err(|e| RuntimeError::Other(format!("cannot open a netlink socket in {path}: {e}")))?;
        let (conn, handle) = opened;
        Ok(Netlink {
            handle,
            task: tokio::spawn(conn),
        })
    }

    /// The index of interface `name`, if there is one.
    pub async fn index_of(&self, name: &str) -> Result<Option<u32>, RuntimeError> {
        let mut found = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match found.try_next().await {
            Ok(Some(link)) => Ok(Some(link.header.index)),
            Ok(None) => Ok(None),
            // The kernel answers a name it does not know with ENODEV.
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -libc::ENODEV => Ok(None),
            Err(e) => Err(err("cannot look up an interface")(e)),
        }
    }

    /// The IPv4 networks of the addresses on interface `index`, or on every interface.
    pub async fn ipv4_networks(&self, index: Option<u32>) -> Result<Vec<Cidr>, RuntimeError> {
        let mut get = self.handle.address().get();
        if let Some(i) = index {
            get = get.set_link_index_filter(i);
        }
        let messages: Vec<_> = get
            .execute()
            .try_collect()
            .await
            .map_err(err("cannot list the host's addresses"))?;
        Ok(messages
            .into_iter()
            .filter(|m| index.is_none_or(|i| m.header.index == i))
            .filter_map(|m| {
                let prefix = m.header.prefix_len;
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(IpAddr::V4(v4)) => Some(Cidr::new(*v4, prefix)),
                    _ => None,
                })
            })
            .collect())
    }

    /// Makes `link`: the pair, its host end up with its address, the far end as `eth0` in
    /// the network namespace of process `pid`.
    pub async fn make_host_end(&self, link: &Link, pid: u32) -> Result<(), RuntimeError> {
        let peer = LinkMessageBuilder::<LinkUnspec>::new()
            .name("eth0".to_string())
            .setns_by_pid(pid)
            .build();
        let pair = LinkMessageBuilder::<LinkVeth>::new_with_info_kind(InfoKind::Veth)
            .name(link.host_if.clone())
            .set_info_data(InfoData::Veth(InfoVeth::Peer(peer)))
            .up()
            .build();
        self.handle
            .link()
            .add(pair)
            .execute()
            .await
            .map_err(err("cannot make the link's pair"))?;
        let index = self
            .index_of(&link.host_if)
            .await?
            .ok_or_else(|| RuntimeError::Other(format!("the link {} vanished", link.host_if)))?;
        self.handle
            .address()
            .add(index, IpAddr::V4(link.host_addr()), LINK_PREFIX)
            .execute()
            .await
            .map_err(err("cannot address the link's host end"))
    }

    /// Inside the container (a connection made by `inside`): `eth0` up with the sandbox
    /// end's address, and the default route through the host end.
    pub async fn make_sandbox_end(&self, link: &Link) -> Result<(), RuntimeError> {
        let index = self.index_of("eth0").await?.ok_or_else(|| {
            RuntimeError::Other("the container has no eth0 after its link was made".into())
        })?;
        self.handle
            .address()
            .add(index, IpAddr::V4(link.sandbox_addr()), LINK_PREFIX)
            .execute()
            .await
            .map_err(err("cannot address eth0"))?;
        self.handle
            .link()
            .set(LinkUnspec::new_with_index(index).up().build())
            .execute()
            .await
            .map_err(err("cannot bring eth0 up"))?;
        self.handle
            .route()
            .add(
                RouteMessageBuilder::<Ipv4Addr>::new()
                    .gateway(link.host_addr())
                    .build(),
            )
            .execute()
            .await
            .map_err(err("cannot add the default route"))
    }

    /// Deletes interface `name` (and so its pair); one that is gone is fine.
    pub async fn delete(&self, name: &str) {
        if let Ok(Some(index)) = self.index_of(name).await {
            let _ = self.handle.link().del(index).execute().await;
        }
    }
}
