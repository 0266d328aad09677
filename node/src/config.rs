//! Configuration of one node.

use std::net::Ipv4Addr;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Stable id of this node (DNS-label syntax); names its containers and networks.
    pub node_id: String,
    pub region: String,
    /// Sandbox records, guest run directories and the guest binary live here.
    pub data_dir: PathBuf,
    /// Docker endpoint (`unix:///var/run/docker.sock` when `None`).
    pub docker_host: Option<String>,
    /// Image of sandboxes that name none.
    pub default_image: String,
    /// The static guest agent to mount into every sandbox.
    pub guest_binary: PathBuf,
    /// Sandbox networks are carved out of this IPv4 range…
    pub subnet_pool: (Ipv4Addr, u8),
    /// …in blocks of this prefix length (a /29 holds the gateway and one container).
    pub subnet_prefix: u8,
    /// Networks kept created and unused, so that a new sandbox never waits for one.
    pub spare_networks: usize,
    /// Install host firewall rules that cut sandboxes off from the host and each other.
    pub firewall: bool,
    /// Most sandboxes this node runs at once (CAPACITY_EXHAUSTED beyond).
    pub max_sandboxes: usize,
    /// Container creations in flight at once (protects dockerd from bursts).
    pub create_concurrency: usize,
}

impl NodeConfig {
    /// A configuration with the defaults of `warren dev`.
    pub fn new(
        node_id: impl Into<String>,
        data_dir: impl Into<PathBuf>,
        guest_binary: impl Into<PathBuf>,
    ) -> Self {
        NodeConfig {
            node_id: node_id.into(),
            region: "local".into(),
            data_dir: data_dir.into(),
            docker_host: None,
            default_image: DEFAULT_IMAGE.into(),
            guest_binary: guest_binary.into(),
            subnet_pool: (Ipv4Addr::new(10, 200, 0, 0), 16),
            subnet_prefix: 29,
            spare_networks: 4,
            firewall: true,
            max_sandboxes: 2000,
            create_concurrency: 8,
        }
    }

    pub fn sandboxes_dir(&self) -> PathBuf {
        self.data_dir.join("sandboxes")
    }

    pub fn run_root(&self) -> PathBuf {
        self.data_dir.join("run")
    }
}

/// The base image built by `deploy/image/build-local.sh` (tag = deploy/image/VERSION).
pub const DEFAULT_IMAGE: &str = concat!(
    "warren/sandbox:",
    include_str!("../../deploy/image/VERSION")
);
