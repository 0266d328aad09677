//! Each running sandbox container's network: one veth pair the node makes itself right after
//! the engine starts the container with no network of its own. The host's end is named
//! `wrn<4 hex of the node>…` (`firewall::bridge_prefix`), so the sandbox firewall holds it
//! exactly as it held the bridges before: nothing leaves but through the node's egress
//! proxy, reached at the host's end of the link. Each link is a /30 of the node's subnet
//! pool: the host's end its first address, the sandbox's `eth0` its second, the default
//! route through the host's end.
//!
//! Why not the engine's networks: Docker attaching a bridge network to a starting container
//! (its network hook, a veth on a bridge, ~8 iptables rules per network) was a quarter of a
//! start on an empty node and most of it on a full one, and its rules made every later
//! start slower (docs/benchmarks.md). A link costs a few netlink calls (`netlink`) and no
//! rule.
//!
//! A link lives as long as the container's network namespace: the kernel deletes both
//! ends when the container stops, so a stopped container holds no address and a start
//! makes a new link. Addresses are chosen under a lock file shared by every node of the
//! host, among the addresses no interface of the host has.

use super::firewall;
use super::subnets::{Cidr, SubnetPool};
use super::RuntimeError;
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

mod netlink;
use netlink::Netlink;

/// The prefix length of one link's block: network, host end, sandbox end, broadcast.
pub const LINK_PREFIX: u8 = 30;

/// The lock every node of this host takes while it chooses and claims an address.
pub const LOCK_FILE: &str = "/run/warren-links.lock";

/// One container's link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// The host's end.
    pub host_if: String,
    pub block: Cidr,
}

impl Link {
    /// The host's end's address: the sandbox's gateway and egress proxy.
    pub fn host_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.block.base + 1)
    }

    /// The sandbox's `eth0` address.
    pub fn sandbox_addr(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.block.base + 2)
    }
}

/// The name of the host's end of the link of container `container_id` (an engine's id: it
/// stays when the container is renamed) while its main process is `pid`: the node's prefix
/// and 8 hex of a hash of both, the 15 characters an interface name may have. A new start
/// of the same container gets a new name: the kernel may still be deleting the last
/// start's link.
pub fn host_if_name(node_id: &str, container_id: &str, pid: u32) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{container_id}:{pid}").as_bytes());
    format!(
        "{}{}",
        firewall::bridge_prefix(node_id),
        hex::encode(&hash[..4])
    )
}

/// A free /30 of `pool` (`pool.block_prefix` is `LINK_PREFIX`), from block `start` on,
/// that no address of the host falls in or overlaps.
pub fn choose_block(pool: &SubnetPool, start: u32, taken: &[Cidr]) -> Option<Cidr> {
    pool.next_free(start, taken).map(|(_, c)| c)
}

/// Makes and finds the links of one node's containers.
pub struct Links {
    node_id: String,
    pool: SubnetPool,
    lock_file: PathBuf,
    next: std::sync::atomic::AtomicU32,
    /// The sandbox end's address of each container with a link, by engine id and pid.
    known: Mutex<HashMap<String, Ipv4Addr>>,
    /// The netlink connection on the host, made at the first link.
    host: tokio::sync::OnceCell<Netlink>,
}

impl Links {
    /// Links of `node_id`'s containers, from `pool` (its configured block size is for
    /// networks; links take /30s of it).
    pub fn new(node_id: &str, pool: Cidr) -> Self {
        let pool = SubnetPool {
            pool,
            block_prefix: LINK_PREFIX.max(pool.prefix),
        };
        Links {
            node_id: node_id.to_string(),
            next: std::sync::atomic::AtomicU32::new(start_hint(node_id, pool.blocks())),
            pool,
            lock_file: PathBuf::from(LOCK_FILE),
            known: Mutex::new(HashMap::new()),
            host: tokio::sync::OnceCell::new(),
        }
    }

    /// Gives the running container `container_id` (main process `pid` on this host) its
    /// link, unless it has one.
    pub async fn attach(&self, container_id: &str, pid: u32) -> Result<Link, RuntimeError> {
        let host_if = host_if_name(&self.node_id, container_id, pid);
        let start = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % self.pool.blocks().max(1);
        let t = std::time::Instant::now();
        let host = self.host().await?;
        let link = {
            let _lock = lock_host_wide(&self.lock_file).await?;
            if let Some(index) = host.index_of(&host_if).await? {
                match host.ipv4_networks(Some(index)).await?.first() {
                    // Made already (a start that the node saw twice): the same link.
                    Some(block) => {
                        return Ok(self.known(
                            container_id,
                            pid,
                            Link {
                                host_if,
                                block: *block,
                            },
                        ))
                    }
                    // Half made by an attempt that failed: made again.
                    None => host.delete(&host_if).await,
                }
            }
            let taken = host.ipv4_networks(None).await?;
            let block = choose_block(&self.pool, start, &taken).ok_or_else(|| {
                RuntimeError::Network(format!(
                    "the subnet pool {} has no free link",
                    self.pool.pool
                ))
            })?;
            let link = Link { host_if, block };
            if let Err(e) = host.make_host_end(&link, pid).await {
                host.delete(&link.host_if).await;
                return Err(e);
            }
            link
            // The lock goes here: the address is on an interface every other node sees.
        };
        let inside = async { Netlink::inside(pid).await?.make_sandbox_end(&link).await };
        if let Err(e) = inside.await {
            // Its namespace may be gone already (the container died), taking the pair.
            host.delete(&link.host_if).await;
            return Err(e);
        }
        tracing::debug!(container = container_id, pid, addr = %link.sandbox_addr(),
            ms = t.elapsed().as_millis() as u64, "sandbox link made");
        Ok(self.known(container_id, pid, link))
    }

    fn known(&self, container_id: &str, pid: u32, link: Link) -> Link {
        self.known
            .lock()
            .expect("links lock")
            .insert(format!("{container_id}:{pid}"), link.sandbox_addr());
        link
    }

    /// The node's netlink connection on the host.
    async fn host(&self) -> Result<&Netlink, RuntimeError> {
        self.host
            .get_or_try_init(|| async { Netlink::host() })
            .await
    }

    /// The sandbox end's address of the link of the running container `container_id`
    /// (main process `pid`), if it has one.
    pub async fn addr_of(&self, container_id: &str, pid: u32) -> Option<Ipv4Addr> {
        let key = format!("{container_id}:{pid}");
        if let Some(a) = self.known.lock().expect("links lock").get(&key) {
            return Some(*a);
        }
        let host = self.host().await.ok()?;
        let index = host
            .index_of(&host_if_name(&self.node_id, container_id, pid))
            .await
            .ok()??;
        let block = *host.ipv4_networks(Some(index)).await.ok()?.first()?;
        let found = Ipv4Addr::from(block.base + 2);
        self.known.lock().expect("links lock").insert(key, found);
        Some(found)
    }

    /// The container is gone (its links went with it).
    pub fn forget(&self, container_id: &str) {
        let prefix = format!("{container_id}:");
        self.known
            .lock()
            .expect("links lock")
            .retain(|k, _| !k.starts_with(&prefix));
    }
}

fn start_hint(node_id: &str, blocks: u32) -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let node: u32 = node_id
        .bytes()
        .fold(0u32, |h, b| h.rotate_left(5) ^ b as u32);
    (nanos ^ node) % blocks.max(1)
}

/// Takes the lock every node of this host takes while it chooses and claims an address;
/// held until the returned file is dropped.
async fn lock_host_wide(path: &Path) -> Result<std::fs::File, RuntimeError> {
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| RuntimeError::Other(format!("cannot open {}: {e}", path.display())))?;
        file.lock()
            .map_err(|e| RuntimeError::Other(format!("cannot lock {}: {e}", path.display())))?;
        Ok(file)
    })
    .await
    .map_err(|e| RuntimeError::Other(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_links_addresses_are_the_first_two_of_its_block() {
        let link = Link {
            host_if: "wrnabcd12345678".into(),
            block: Cidr::parse("10.200.3.4/30").unwrap(),
        };
        assert_eq!(link.host_addr(), Ipv4Addr::new(10, 200, 3, 5));
        assert_eq!(link.sandbox_addr(), Ipv4Addr::new(10, 200, 3, 6));
    }

    #[test]
    fn the_host_end_is_named_for_the_firewall_and_fits_an_interface_name() {
        let name = host_if_name("node-a", "0123456789abcdef0123", 4242);
        assert!(name.starts_with(&firewall::bridge_prefix("node-a")));
        assert!(name.starts_with(firewall::BRIDGE_PREFIX));
        assert_eq!(name.len(), 15);
        // The next start of the same container: another name.
        assert_ne!(name, host_if_name("node-a", "0123456789abcdef0123", 4243));
    }

    #[test]
    fn a_block_is_chosen_past_every_address_the_host_has() {
        let pool = SubnetPool {
            pool: Cidr::parse("10.200.0.0/16").unwrap(),
            block_prefix: LINK_PREFIX,
        };
        let taken = vec![
            // Another node's link, and a Docker network of someone else's.
            Cidr::parse("10.200.0.0/30").unwrap(),
            Cidr::parse("10.200.0.0/28").unwrap(),
        ];
        assert_eq!(
            choose_block(&pool, 0, &taken).unwrap().to_string(),
            "10.200.0.16/30"
        );
        let full = vec![Cidr::parse("10.0.0.0/8").unwrap()];
        assert!(choose_block(&pool, 7, &full).is_none());
    }
}
