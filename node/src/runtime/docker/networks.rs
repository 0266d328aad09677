//! The pool of per-sandbox bridge networks: creating a network costs more than starting a
//! container, so a few are kept ready and a removed sandbox's network goes back to the pool.

use super::{docker_err, short_hash, status_of, DockerRuntime, RuntimeError};
use crate::runtime::firewall;
use crate::runtime::subnets::Cidr;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
use bollard::query_parameters::ListNetworksOptionsBuilder;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Default)]
pub(super) struct NetState {
    pub(super) free: Vec<String>,
    pub(super) next_hint: u32,
}

impl DockerRuntime {
    /// This node's networks, as Docker lists them.
    async fn list_node_networks(&self) -> Result<Vec<bollard::models::Network>, RuntimeError> {
        self.docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&self.node_filter("net"))
                    .build(),
            ))
            .await
            .map_err(docker_err)
    }

    /// The names of this node's networks.
    pub(super) async fn node_networks(&self) -> Result<Vec<String>, RuntimeError> {
        let nets = self.list_node_networks().await?;
        Ok(nets.into_iter().filter_map(|n| n.name).collect())
    }

    /// Finds this node's networks; those no container uses are free. A free one whose
    /// bridge is not named by this node (made by an earlier version) is removed: the
    /// node's rules would not redirect its sandboxes to the proxy.
    pub(super) async fn load_networks(&self) -> Result<(), RuntimeError> {
        let nets = self.list_node_networks().await?;
        let used: HashSet<String> = self
            .list_summaries()
            .await?
            .into_iter()
            .filter_map(|c| c.host_config.and_then(|h| h.network_mode))
            .collect();
        let prefix = firewall::bridge_prefix(&self.node_id);
        let mut free = Vec::new();
        for n in nets {
            let Some(name) = n.name else { continue };
            if used.contains(&name) {
                continue;
            }
            let bridge = n
                .options
                .as_ref()
                .and_then(|o| o.get("com.docker.network.bridge.name"));
            if bridge.is_some_and(|b| b.starts_with(&prefix)) {
                free.push(name);
            } else if let Err(e) = self.docker.remove_network(&name).await {
                tracing::warn!(network = name, error = %e, "cannot remove a network of an earlier version");
            }
        }
        self.nets.lock().await.free = free;
        Ok(())
    }

    /// Subnets of every Docker network on this host (ours and others').
    async fn taken_subnets(&self) -> Result<Vec<Cidr>, RuntimeError> {
        let nets = self.docker.list_networks(None).await.map_err(docker_err)?;
        Ok(nets
            .into_iter()
            .filter_map(|n| n.ipam.and_then(|i| i.config))
            .flatten()
            .filter_map(|c| c.subnet.and_then(|s| Cidr::parse(&s)))
            .collect())
    }

    async fn create_network(&self) -> Result<String, RuntimeError> {
        let mut taken = self.taken_subnets().await?;
        for _attempt in 0..16 {
            let hint = {
                let mut st = self.nets.lock().await;
                let h = st.next_hint;
                st.next_hint = (h + 1) % self.pool.blocks().max(1);
                h
            };
            let (index, cidr) = self.pool.next_free(hint, &taken).ok_or_else(|| {
                RuntimeError::Network(format!("the pool {} is full", self.pool.pool))
            })?;
            let name = format!("wrn-{}-n{index}", self.node_id);
            // Named by node, so that the node's rules redirect its own sandboxes to its own proxy.
            let bridge = format!(
                "{}{}",
                firewall::bridge_prefix(&self.node_id),
                short_hash(&name)
            );
            let mut labels = self.labels("net");
            labels.insert("warren.subnet".into(), cidr.to_string());
            let req = NetworkCreateRequest {
                name: name.clone(),
                driver: Some("bridge".into()),
                internal: Some(false),
                attachable: Some(false),
                ipam: Some(Ipam {
                    driver: Some("default".into()),
                    config: Some(vec![IpamConfig {
                        subnet: Some(cidr.to_string()),
                        gateway: Some(cidr.gateway().to_string()),
                        ..Default::default()
                    }]),
                    options: None,
                }),
                options: Some(HashMap::from([
                    ("com.docker.network.bridge.name".to_string(), bridge),
                    (
                        "com.docker.network.bridge.enable_icc".to_string(),
                        "false".to_string(),
                    ),
                ])),
                labels: Some(labels),
                ..Default::default()
            };
            match self.docker.create_network(req).await {
                Ok(_) => return Ok(name),
                // Another node (or anyone) took that subnet or name meanwhile: try the next.
                Err(e) if matches!(status_of(&e), Some(400) | Some(403) | Some(409)) => {
                    tracing::debug!(subnet = %cidr, error = %e, "network create collided; trying another");
                    taken.push(cidr);
                    let mut st = self.nets.lock().await;
                    st.next_hint = (index + 1) % self.pool.blocks().max(1);
                }
                Err(e) => return Err(docker_err(e)),
            }
        }
        Err(RuntimeError::Network(
            "could not find a free subnet after 16 attempts".into(),
        ))
    }

    /// A network for a new container: a spare one that still exists, else a new one. A
    /// spare removed behind the node's back (`docker network prune`) is dropped, not handed
    /// out for every start to fail on.
    pub(super) async fn take_network(self: &Arc<Self>) -> Result<String, RuntimeError> {
        let name = loop {
            let pooled = self.nets.lock().await.free.pop();
            let Some(n) = pooled else {
                break self.create_network().await?;
            };
            if self.network_exists(&n).await? {
                break n;
            }
            tracing::warn!(
                network = n,
                "a spare sandbox network was removed outside the node; dropped from the pool"
            );
        };
        self.replenish();
        Ok(name)
    }

    async fn network_exists(&self, name: &str) -> Result<bool, RuntimeError> {
        match self.docker.inspect_network(name, None).await {
            Ok(_) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(docker_err(e)),
        }
    }

    /// Back to the pool (or removed, when the pool is full). One that is gone stays gone.
    pub(super) async fn release_network(&self, name: &str) {
        if matches!(self.network_exists(name).await, Ok(false)) {
            return;
        }
        let mut st = self.nets.lock().await;
        if st.free.len() < self.spare.max(1) * 2 {
            st.free.push(name.to_string());
            return;
        }
        drop(st);
        if let Err(e) = self.docker.remove_network(name).await {
            tracing::warn!(network = name, error = %e, "cannot remove network");
        }
    }

    /// Tops the pool of spare networks up, in the background.
    pub fn replenish(self: &Arc<Self>) {
        let rt = self.clone();
        tokio::spawn(async move {
            loop {
                if rt.nets.lock().await.free.len() >= rt.spare {
                    return;
                }
                match rt.create_network().await {
                    Ok(n) => rt.nets.lock().await.free.push(n),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot create a spare sandbox network");
                        return;
                    }
                }
            }
        });
    }
}
