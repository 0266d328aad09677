//! What a node's start has started, and stopping it again in order: one sequence for a
//! running node told to stop (`RunningNode::serve_until`) and for a start that fails
//! part-way — a caller that embeds the node (or retries its start in the same process) must
//! not be left with loops that run on, a Raft that holds the node's rocksdb open, or warm
//! containers nobody will use.
//!
//! `start` records each piece here as it comes up; on an error it stops what is recorded so
//! far, and on success the record goes to the `RunningNode`.

use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use warren_consensus::Cluster;
use warren_node::runtime::docker::DockerRuntime;
use warren_node::runtime::host_work::HostWork;
use warren_transport::Peers;

#[derive(Default)]
pub(crate) struct Started {
    /// The token every loop of the node ends on.
    pub tasks: Option<CancellationToken>,
    /// Loops that end on `tasks`, awaited (within `LOOPS_STOP_WITHIN`) after it is cancelled.
    pub loops: Vec<(&'static str, JoinHandle<()>)>,
    /// Serves the peer endpoint: ends once it is closed.
    pub peer_server: Option<JoinHandle<()>>,
    pub host_work: Option<Arc<HostWork>>,
    /// The runtime whose warm pools were started.
    pub warm_pools: Option<Arc<DockerRuntime>>,
    /// The firewall was kept: its redirect to the egress proxy goes with the node.
    pub egress_redirect: Option<warren_node::NodeConfig>,
    pub cluster: Option<Arc<Cluster>>,
    pub peers: Option<Arc<Peers>>,
    /// The API's state, whose router holds it in a cycle until let go of.
    pub state: Option<warren_router::AppState>,
    /// Aborted last, as when a running node stops.
    pub fence: Option<JoinHandle<()>>,
    /// Where Raft, the peer endpoint and the fence run: shut down after everything else.
    pub consensus: Option<crate::consensus_runtime::ConsensusRuntime>,
}

/// What a node that served writes on its way out: the usage its ledger holds since the last
/// export, counted by the egress proxy too (let go of once read).
pub(crate) struct LastExport<'a> {
    pub mgr: &'a warren_node::SandboxManager,
    pub every: std::time::Duration,
    pub proxy: Arc<warren_egress::Proxy>,
}

impl Started {
    /// Stops everything recorded, in order (the last usage export, when given, once nothing
    /// runs that could add to it). Sandboxes are left as they are: the next start adopts
    /// them.
    pub async fn stop(self, last_export: Option<LastExport<'_>>) {
        if let Some(t) = &self.tasks {
            t.cancel();
        }
        for (what, task) in self.loops {
            crate::stop::stop_within(what, task, crate::stop::LOOPS_STOP_WITHIN).await;
        }
        // The manager's own loops (idle sleeper, metering, freezer, ...): none may sleep a
        // sandbox or export usage once the last export and Raft's stop are under way.
        if let Some(state) = &self.state {
            if !state.mgr.stop_loops(crate::stop::LOOPS_STOP_WITHIN).await {
                tracing::warn!(
                    running = state.mgr.loops_running(),
                    "the sandbox manager's loops did not all stop in time"
                );
            }
        }
        if let Some(cfg) = &self.egress_redirect {
            crate::stop::remove_egress_redirect(cfg).await;
        }
        if let Some(e) = last_export {
            crate::stop::export_usage_at_exit(e.mgr, e.every).await;
            drop(e.proxy);
        }
        if let Some(docker) = &self.warm_pools {
            docker.stop_warm_pool().await;
        }
        if let Some(hw) = &self.host_work {
            hw.shutdown().await;
        }
        if let Some(cluster) = &self.cluster {
            cluster.shutdown().await;
        }
        if let Some(peers) = &self.peers {
            peers.close();
        }
        if let Some(task) = self.peer_server {
            crate::stop::stop_within("peer server", task, crate::stop::LOOPS_STOP_WITHIN).await;
        }
        if let Some(state) = &self.state {
            state.let_go_of_router();
        }
        // What the fence file says now stands, as when the process ends.
        if let Some(fence) = self.fence {
            fence.abort();
            let _ = fence.await;
        }
        drop(self.consensus);
    }
}
