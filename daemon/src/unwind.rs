//! What a start that fails part-way has started, and stopping it again: a caller that embeds
//! the node (or retries its start in the same process) must not be left with loops that run
//! on, a Raft that holds the node's rocksdb open, or warm containers nobody will use.
//!
//! `start` records each piece here as it comes up; on an error, `stop` ends them in the
//! order `RunningNode::serve_until` does (loops, warm pools, host work, Raft, the peer
//! endpoint, the fence last). A start that succeeds hands every piece to the `RunningNode`
//! and this record is dropped unused.

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
    pub docker: Option<Arc<DockerRuntime>>,
    pub warm_pool: bool,
    /// The firewall was kept: its redirect to the egress proxy goes with the node.
    pub egress_redirect: Option<warren_node::NodeConfig>,
    pub cluster: Option<Arc<Cluster>>,
    pub peers: Option<Arc<Peers>>,
    /// The API's state, whose router holds it in a cycle until let go of.
    pub state: Option<warren_router::AppState>,
    /// Aborted last, as when a running node stops.
    pub fence: Option<JoinHandle<()>>,
}

impl Started {
    /// Stops everything recorded, in order. Sandboxes are left as they are (as when a
    /// running node stops): the next start adopts them.
    pub async fn stop(self) {
        if let Some(t) = &self.tasks {
            t.cancel();
        }
        for (what, task) in self.loops {
            crate::stop::stop_within(what, task, crate::stop::LOOPS_STOP_WITHIN).await;
        }
        if let Some(cfg) = &self.egress_redirect {
            crate::stop::remove_egress_redirect(cfg).await;
        }
        if let (true, Some(docker)) = (self.warm_pool, &self.docker) {
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
        if let Some(fence) = self.fence {
            fence.abort();
            let _ = fence.await;
        }
    }
}
