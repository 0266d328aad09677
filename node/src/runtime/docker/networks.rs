//! Docker networks of containers made before links (`runtime::links`): each such container
//! kept its own bridge network, removed with it. New containers get none.

use super::{docker_err, DockerRuntime, RuntimeError};
use bollard::query_parameters::ListNetworksOptionsBuilder;
use std::collections::HashSet;

impl DockerRuntime {
    /// The names of this node's networks.
    pub(super) async fn node_networks(&self) -> Result<Vec<String>, RuntimeError> {
        let nets = self
            .docker
            .list_networks(Some(
                ListNetworksOptionsBuilder::default()
                    .filters(&self.node_filter("net"))
                    .build(),
            ))
            .await
            .map_err(docker_err)?;
        Ok(nets.into_iter().filter_map(|n| n.name).collect())
    }

    /// Removes this node's networks that no container uses (spares an earlier version
    /// kept ready, or left by a container removed behind the node's back).
    pub(super) async fn remove_unused_networks(&self) -> Result<(), RuntimeError> {
        let used: HashSet<String> = self
            .list_summaries()
            .await?
            .into_iter()
            .filter_map(|c| c.host_config.and_then(|h| h.network_mode))
            .collect();
        for name in self.node_networks().await? {
            if !used.contains(&name) {
                self.remove_network(&name).await;
            }
        }
        Ok(())
    }

    /// Removes a network of this node (one that is gone already is fine).
    pub(super) async fn remove_network(&self, name: &str) {
        match self.docker.remove_network(name).await {
            Ok(()) => {}
            Err(e) if super::status_of(&e) == Some(404) => {}
            Err(e) => tracing::warn!(network = name, error = %e, "cannot remove network"),
        }
    }
}
