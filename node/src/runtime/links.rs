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
//! start slower (docs/benchmarks.md). A link costs two `ip` calls and no rule.
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
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;

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

    /// `ip -batch` input, run on the host: the pair, its far end made right in the
    /// container's network namespace (of process `pid`) as `eth0`, and the host's end up
    /// with its address.
    pub fn host_script(&self, pid: u32) -> String {
        let host = &self.host_if;
        format!(
            "link add {host} type veth peer name eth0 netns {pid}\n\
             addr add {}/{LINK_PREFIX} dev {host}\n\
             link set {host} up\n",
            self.host_addr()
        )
    }

    /// `ip -batch` input, run in the container's network namespace: `eth0` up with its
    /// address and the default route through the host's end.
    pub fn sandbox_script(&self) -> String {
        format!(
            "addr add {}/{LINK_PREFIX} dev eth0\n\
             link set eth0 up\n\
             route add default via {}\n",
            self.sandbox_addr(),
            self.host_addr()
        )
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

/// The IPv4 networks of the host's interfaces, from `ip -o -4 addr show`: interface name
/// and the network of each address (a peer address's own prefix when one is given).
pub fn parse_addrs(listing: &str) -> Vec<(String, Cidr)> {
    listing
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let _index = words.next()?;
            let name = words.next()?.split('@').next()?.to_string();
            let mut words = words.skip_while(|w| *w != "inet");
            words.next()?;
            let addr = words.next()?;
            let cidr = match addr.contains('/') {
                true => Cidr::parse(addr)?,
                false => Cidr::new(addr.parse().ok()?, 32),
            };
            Some((name, cidr))
        })
        .collect()
}

/// A free /30 of `pool` (`pool.block_prefix` is `LINK_PREFIX`), from block `start` on,
/// that no address of the host falls in or overlaps.
pub fn choose_block(pool: &SubnetPool, start: u32, taken: &[(String, Cidr)]) -> Option<Cidr> {
    let taken: Vec<Cidr> = taken.iter().map(|(_, c)| *c).collect();
    pool.next_free(start, &taken).map(|(_, c)| c)
}

/// Makes and finds the links of one node's containers.
pub struct Links {
    node_id: String,
    pool: SubnetPool,
    lock_file: PathBuf,
    next: std::sync::atomic::AtomicU32,
    /// The sandbox end's address of each container with a link, by engine id and pid.
    known: Mutex<HashMap<String, Ipv4Addr>>,
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
        }
    }

    /// Gives the running container `container_id` (main process `pid` on this host) its
    /// link, unless it has one.
    pub async fn attach(&self, container_id: &str, pid: u32) -> Result<Link, RuntimeError> {
        let host_if = host_if_name(&self.node_id, container_id, pid);
        let (pool, lock_file) = (self.pool, self.lock_file.clone());
        let start =
            self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % pool.blocks().max(1);
        let t = std::time::Instant::now();
        let link = tokio::task::spawn_blocking(move || {
            attach_blocking(&pool, &lock_file, start, &host_if, pid)
        })
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))??;
        let addr = link.sandbox_addr();
        tracing::debug!(container = container_id, pid, %addr, ms = t.elapsed().as_millis() as u64, "sandbox link made");
        self.known
            .lock()
            .expect("links lock")
            .insert(format!("{container_id}:{pid}"), addr);
        Ok(link)
    }

    /// The sandbox end's address of the link of the running container `container_id`
    /// (main process `pid`), if it has one.
    pub async fn addr_of(&self, container_id: &str, pid: u32) -> Option<Ipv4Addr> {
        let key = format!("{container_id}:{pid}");
        if let Some(a) = self.known.lock().expect("links lock").get(&key) {
            return Some(*a);
        }
        let host_if = host_if_name(&self.node_id, container_id, pid);
        let found = tokio::task::spawn_blocking(move || {
            let listing = ip(&["-o", "-4", "addr", "show", "dev", &host_if], None).ok()?;
            parse_addrs(&listing)
                .into_iter()
                .next()
                .map(|(_, c)| Ipv4Addr::from(c.base + 2))
        })
        .await
        .ok()
        .flatten()?;
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

fn attach_blocking(
    pool: &SubnetPool,
    lock_file: &std::path::Path,
    start: u32,
    host_if: &str,
    pid: u32,
) -> Result<Link, RuntimeError> {
    let netns = format!("/proc/{pid}/ns/net");
    if !std::path::Path::new(&netns).exists() {
        return Err(RuntimeError::Network(format!(
            "the container's network namespace ({netns}) is not on this host: sandbox links need the engine on the node's host"
        )));
    }
    let link = {
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_file)
            .map_err(|e| {
                RuntimeError::Network(format!("cannot open {}: {e}", lock_file.display()))
            })?;
        lock.lock().map_err(|e| {
            RuntimeError::Network(format!("cannot lock {}: {e}", lock_file.display()))
        })?;
        let taken = parse_addrs(&ip(&["-o", "-4", "addr", "show"], None)?);
        if let Some((_, block)) = taken.iter().find(|(name, _)| name == host_if) {
            // Made already (a start that the node saw twice): the same link.
            return Ok(Link {
                host_if: host_if.to_string(),
                block: *block,
            });
        }
        let block = choose_block(pool, start, &taken).ok_or_else(|| {
            RuntimeError::Network(format!("the subnet pool {} has no free link", pool.pool))
        })?;
        let link = Link {
            host_if: host_if.to_string(),
            block,
        };
        ip(&["-batch", "-"], Some(&link.host_script(pid)))?;
        link
        // The lock goes here: the address is on an interface every other node sees.
    };
    let inside = Command::new("nsenter")
        .args([&format!("--net={netns}"), "--", "ip", "-batch", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn();
    let done = run_with_input(inside, &link.sandbox_script(), "nsenter ip");
    if let Err(e) = done {
        // Its namespace may be gone already (the container died), taking the pair.
        let _ = ip(&["link", "del", host_if], None);
        return Err(e);
    }
    Ok(link)
}

/// Runs `ip` with `args` (and `input` on its standard input); its output.
fn ip(args: &[&str], input: Option<&str>) -> Result<String, RuntimeError> {
    let child = Command::new("ip")
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    run_with_input(child, input.unwrap_or(""), "ip")
}

fn run_with_input(
    child: std::io::Result<std::process::Child>,
    input: &str,
    what: &str,
) -> Result<String, RuntimeError> {
    use std::io::Write;
    let mut child = child.map_err(|e| RuntimeError::Network(format!("cannot run {what}: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input.as_bytes())
            .map_err(|e| RuntimeError::Network(format!("{what}: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| RuntimeError::Network(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(RuntimeError::Network(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
        assert_eq!(
            link.host_script(42),
            "link add wrnabcd12345678 type veth peer name eth0 netns 42\n\
             addr add 10.200.3.5/30 dev wrnabcd12345678\n\
             link set wrnabcd12345678 up\n"
        );
        assert_eq!(
            link.sandbox_script(),
            "addr add 10.200.3.6/30 dev eth0\nlink set eth0 up\nroute add default via 10.200.3.5\n"
        );
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
    fn the_host_addresses_are_read_from_ip_o() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n\
            4: docker0    inet 172.17.0.1/16 brd 172.17.255.255 scope global docker0\\       valid_lft forever\n\
            9: wrnabcd12345678@if2    inet 10.200.0.5/30 scope global wrnabcd12345678\\       valid_lft forever\n\
            11: pp0    inet 10.9.0.1 peer 10.9.0.2/32 scope global pp0\n";
        let got = parse_addrs(listing);
        assert_eq!(
            got,
            vec![
                ("lo".to_string(), Cidr::parse("127.0.0.0/8").unwrap()),
                ("docker0".to_string(), Cidr::parse("172.17.0.0/16").unwrap()),
                (
                    "wrnabcd12345678".to_string(),
                    Cidr::parse("10.200.0.4/30").unwrap()
                ),
                ("pp0".to_string(), Cidr::parse("10.9.0.1/32").unwrap()),
            ]
        );
    }

    #[test]
    fn a_block_is_chosen_past_every_address_the_host_has() {
        let pool = SubnetPool {
            pool: Cidr::parse("10.200.0.0/16").unwrap(),
            block_prefix: LINK_PREFIX,
        };
        let taken = vec![
            // Another node's link, and a Docker network of someone else's.
            (
                "wrnabcd00000001".to_string(),
                Cidr::parse("10.200.0.0/30").unwrap(),
            ),
            ("br-x".to_string(), Cidr::parse("10.200.0.0/28").unwrap()),
        ];
        assert_eq!(
            choose_block(&pool, 0, &taken).unwrap().to_string(),
            "10.200.0.16/30"
        );
        let full = vec![("x".to_string(), Cidr::parse("10.0.0.0/8").unwrap())];
        assert!(choose_block(&pool, 7, &full).is_none());
    }
}
