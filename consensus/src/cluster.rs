//! A running cluster member.

use crate::authority::{self, Refusal};
use crate::call_deadlines::{member_deadline, MemberDeadlines};
use crate::generation::Generation;
use crate::latency::RaftLatency;
use crate::lease::{FollowerLease, Grant, Grants};
use crate::liveness;
use crate::membership::desired_voters;
use crate::network::Network;
use crate::rpc::{self, Envelope, Reply, Request, RPC_VERSION};
use crate::state::{ClusterState, Command, CommandResult, NodeId, NodeState};
use crate::store::{LogStore, StateMachine, StateView};
use crate::types::{Peer, Raft};
use openraft::error::{ClientWriteError, RaftError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use warren_storage::RaftDb;
use warren_transport::{frame, CaMaterial, PeerId, Peers, RecvStream, SendStream};

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub cluster_name: String,
    pub name: String,
    pub region: String,
    pub api_addr: String,
    /// The address peers use to reach this node's QUIC endpoint.
    pub peer_addr: String,
    pub capacity: u32,
    /// Raft heartbeat: elections start after 4–8 heartbeats of silence. Each Raft call is
    /// given at least this long, more across slow links (`timing::call_deadline`).
    pub heartbeat: Duration,
    /// A node not heard from for this long is marked `down`.
    pub down_after: Duration,
    /// A node that has not heard from a leader (or, as leader, from a quorum) for this long
    /// stops serving its sandboxes. `lease + lease_margin` is shorter than `down_after`, so a
    /// partitioned owner stops before the majority could hand its sandboxes to another node.
    pub lease: Duration,
    /// What the leader adds to a lease before it hands a silent node's sandboxes on (clocks
    /// of different machines run at slightly different rates).
    pub lease_margin: Duration,
    /// How often the leader probes nodes and reconciles membership.
    pub supervise_every: Duration,
    /// The id of the key this node's certificate is issued for (`tls::key_id_of_cert`),
    /// registered at bootstrap.
    pub key_id: String,
    /// How long the node certificates this node signs live (`certs`).
    pub cert_lifetime: Duration,
    /// Raft log entries applied between two snapshots of the state machine; the log is
    /// then deleted up to half of them behind the snapshot (`raft_log_policy`).
    pub raft_snapshot_every: u64,
    /// Largest message a snapshot is sent in, KiB (openraft's chunk size).
    pub raft_snapshot_chunk_kb: u64,
    /// The cluster CA with its key, from this node's CA file: this node signs certificates.
    pub ca: Option<CaMaterial>,
    /// Deadlines the operator fixed for Raft calls to each region's members, instead of
    /// three of their measured round trips (`call_deadlines`).
    pub region_deadlines: crate::call_deadlines::RegionDeadlines,
}

impl ClusterConfig {
    pub fn new(name: &str, region: &str, api_addr: &str, peer_addr: &str) -> Self {
        ClusterConfig {
            cluster_name: "warren".into(),
            name: name.into(),
            region: region.into(),
            api_addr: api_addr.into(),
            peer_addr: peer_addr.into(),
            capacity: 1,
            heartbeat: crate::timing::DEFAULT_HEARTBEAT,
            down_after: Duration::from_secs(8),
            lease: Duration::from_secs(4),
            lease_margin: Duration::from_millis(500),
            supervise_every: Duration::from_millis(500),
            key_id: String::new(),
            cert_lifetime: DEFAULT_CERT_LIFETIME,
            raft_snapshot_every: DEFAULT_RAFT_SNAPSHOT_EVERY,
            raft_snapshot_chunk_kb: DEFAULT_RAFT_SNAPSHOT_CHUNK_KB,
            ca: None,
            region_deadlines: Default::default(),
        }
    }

    /// Refuses lease settings that would let a cut-off node serve after its sandboxes were
    /// handed to another (`lease::validate`).
    pub fn validate(&self) -> Result<(), String> {
        validate_raft_snapshots(self.raft_snapshot_every, self.raft_snapshot_chunk_kb)?;
        if self.cert_lifetime < MIN_CERT_LIFETIME {
            return Err(format!(
                "cert_lifetime_s must be at least {} s",
                MIN_CERT_LIFETIME.as_secs()
            ));
        }
        crate::timing::validate(
            self.heartbeat.as_millis() as u64,
            self.lease.as_millis() as u64,
        )?;
        self.region_deadlines.validate(self.heartbeat, self.lease)?;
        crate::lease::validate(
            self.lease.as_millis() as u64,
            self.lease_margin.as_millis() as u64,
            self.down_after.as_millis() as u64,
        )
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No leader could commit in time (no quorum, or elections in progress): retryable.
    #[error("the cluster cannot commit right now: {0}")]
    NoQuorum(String),
    #[error("rejected: {0}")]
    Rejected(String),
    #[error("storage: {0}")]
    Storage(String),
    #[error("raft: {0}")]
    Fatal(String),
}

/// What a client is answered when the cluster could not do what its request needed.
impl From<ClusterError> for warren_api::ApiError {
    fn from(e: ClusterError) -> Self {
        use warren_api::{ApiError, ErrorCode};
        match e {
            ClusterError::NoQuorum(m) => ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "the cluster cannot commit right now (no quorum or an election in progress): {m}"
                ),
            ),
            ClusterError::Rejected(m) => ApiError::new(ErrorCode::Conflict, m),
            ClusterError::Storage(m) | ClusterError::Fatal(m) => ApiError::internal(m),
        }
    }
}

pub struct Cluster {
    pub raft: Raft,
    pub id: NodeId,
    pub cfg: ClusterConfig,
    view: StateView,
    /// The node's Raft database (for backups: `checkpoint`).
    db: Arc<RaftDb>,
    peers: Arc<Peers>,
    /// This node's generation of the cluster and the newest it heard of (`generation`).
    generation: Arc<Generation>,
    epoch: Instant,
    /// When the leader's last AppendEntries (a heartbeat or entries) was answered here, in
    /// milliseconds after `epoch` plus one (0: never).
    leader_contact: AtomicU64,
    /// Histograms of log writes and served AppendEntries (`latency`, in `/metrics`).
    pub latency: Arc<RaftLatency>,
    /// This node's lease, as a follower (`lease`).
    lease: Mutex<FollowerLease>,
    /// The leases this node granted, as leader.
    grants: Mutex<Grants>,
    /// The last quorum confirmation of this node's leadership: (when it began, read index).
    /// Lease requests that arrived before a round began wait for it and share its answer.
    confirmed: tokio::sync::Mutex<Option<(u64, u64)>>,
    /// As leader: the nodes not heard from for `down_after` at the last probe.
    silent: Mutex<BTreeSet<NodeId>>,
    /// The deadline of Raft calls to each member, sized every supervisor tick (shared with
    /// the member's network).
    member_deadlines: Arc<MemberDeadlines>,
    /// When the leader last warned of each node's slow link.
    rtt_warned: Mutex<HashMap<NodeId, Instant>>,
    stopping: AtomicBool,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The runtime the cluster was opened on: Raft's tasks, and every task of its own
    /// (`spawn_owned`), run there (`runtime`).
    runtime: tokio::runtime::Handle,
}

/// Where a node keeps the newest generation of its cluster it heard of (`generation`).
const META_HEARD_GENERATION: &[u8] = b"heard_generation";

fn read_heard_generation(db: &RaftDb) -> u64 {
    match db.get_meta(META_HEARD_GENERATION) {
        Ok(Some(b)) => b
            .as_slice()
            .try_into()
            .map(u64::from_be_bytes)
            .unwrap_or_default(),
        Ok(None) => 0,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the newest generation this node heard of");
            0
        }
    }
}

fn remember_heard_generation(db: Arc<RaftDb>) -> crate::generation::Remember {
    Box::new(move |g| {
        if let Err(e) = db.put_meta(META_HEARD_GENERATION, &g.to_be_bytes()) {
            tracing::error!(error = %e, "cannot keep the newest generation this node heard of");
        }
    })
}

/// How long node certificates live unless configured (`certs`): a node may be off for up to
/// this long and still rejoin with its certificate.
pub const DEFAULT_CERT_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest certificate lifetime a node accepts (renewal runs at half of it).
pub const MIN_CERT_LIFETIME: Duration = Duration::from_secs(10);

/// Raft log entries between two snapshots of the state machine, by default.
pub const DEFAULT_RAFT_SNAPSHOT_EVERY: u64 = 2000;
pub const MIN_RAFT_SNAPSHOT_EVERY: u64 = 10;
/// Largest snapshot message by default, KiB (openraft's own default, 3 MiB).
pub const DEFAULT_RAFT_SNAPSHOT_CHUNK_KB: u64 = 3 * 1024;
pub const MAX_RAFT_SNAPSHOT_CHUNK_KB: u64 = 64 * 1024;
pub const MAX_RAFT_SNAPSHOT_EVERY: u64 = 1_000_000;

/// Refuses a snapshot interval or message size out of range (the node's settings and the
/// cluster's configuration are checked by this one function).
pub fn validate_raft_snapshots(every: u64, chunk_kb: u64) -> Result<(), String> {
    if !(MIN_RAFT_SNAPSHOT_EVERY..=MAX_RAFT_SNAPSHOT_EVERY).contains(&every) {
        return Err(format!(
            "raft_snapshot_every must be between {MIN_RAFT_SNAPSHOT_EVERY} and {MAX_RAFT_SNAPSHOT_EVERY}"
        ));
    }
    if !(1..=MAX_RAFT_SNAPSHOT_CHUNK_KB).contains(&chunk_kb) {
        return Err(format!(
            "raft_snapshot_chunk_kb must be between 1 and {MAX_RAFT_SNAPSHOT_CHUNK_KB}"
        ));
    }
    Ok(())
}

/// Entries kept behind a snapshot when the log is cut: half the snapshot interval, so that
/// a follower a little behind catches up from the log, and only one further behind (or a
/// new member) needs the snapshot.
pub fn raft_log_kept(snapshot_every: u64) -> u64 {
    snapshot_every / 2
}

/// Entries the log is cut by at least at once: openraft waits for this many deletable
/// entries; a quarter of the snapshot interval, at most 256.
pub fn raft_purge_batch(snapshot_every: u64) -> u64 {
    (snapshot_every / 4).clamp(1, 256)
}

/// How long a proposal may take before it is answered with NoQuorum.
const PROPOSE_DEADLINE: Duration = Duration::from_secs(10);

impl Cluster {
    /// Opens the node's Raft state in `dir` and starts Raft (not yet bootstrapped or joined).
    pub async fn open(
        dir: &Path,
        id: NodeId,
        cfg: ClusterConfig,
        peers: Arc<Peers>,
    ) -> Result<Arc<Cluster>, ClusterError> {
        cfg.validate().map_err(ClusterError::Rejected)?;
        let db = Arc::new(RaftDb::open(dir).map_err(|e| ClusterError::Storage(e.to_string()))?);
        let sm = StateMachine::open(db.clone()).map_err(ClusterError::Storage)?;
        let view = sm.view();
        let generation = Arc::new(Generation::new(
            view.clone(),
            read_heard_generation(&db),
            remember_heard_generation(db.clone()),
        ));
        let timing = crate::timing::raft_timing(cfg.heartbeat);
        crate::raft_runtime::set_call_deadline(crate::timing::call_deadline(cfg.heartbeat, None));
        let latency = Arc::new(RaftLatency::default());
        let member_deadlines = Arc::new(MemberDeadlines::default());
        let raft_cfg = openraft::Config {
            cluster_name: cfg.cluster_name.clone(),
            heartbeat_interval: timing.heartbeat_ms,
            election_timeout_min: timing.election_min_ms,
            election_timeout_max: timing.election_max_ms,
            install_snapshot_timeout: timing.snapshot_ms,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(cfg.raft_snapshot_every),
            max_in_snapshot_log_to_keep: raft_log_kept(cfg.raft_snapshot_every),
            purge_batch_size: raft_purge_batch(cfg.raft_snapshot_every),
            snapshot_max_chunk_size: cfg.raft_snapshot_chunk_kb * 1024,
            ..Default::default()
        }
        .validate()
        .map_err(|e| ClusterError::Fatal(e.to_string()))?;
        let raft = Raft::new(
            id,
            Arc::new(raft_cfg),
            Network {
                id,
                peers: peers.clone(),
                generation: generation.clone(),
                deadlines: member_deadlines.clone(),
            },
            LogStore::new(db.clone(), latency.clone()),
            sm,
        )
        .await
        .map_err(|e| ClusterError::Fatal(e.to_string()))?;
        Ok(Arc::new(Cluster {
            raft,
            id,
            cfg,
            view,
            db,
            peers,
            generation,
            epoch: Instant::now(),
            leader_contact: AtomicU64::new(0),
            latency,
            lease: Mutex::new(FollowerLease::default()),
            grants: Mutex::new(Grants::default()),
            confirmed: tokio::sync::Mutex::new(None),
            silent: Mutex::new(BTreeSet::new()),
            member_deadlines,
            rtt_warned: Mutex::new(HashMap::new()),
            stopping: AtomicBool::new(false),
            tasks: Mutex::new(Vec::new()),
            runtime: tokio::runtime::Handle::current(),
        }))
    }

    pub fn peers(&self) -> &Arc<Peers> {
        &self.peers
    }

    /// A consistent copy of this node's Raft state at `to` (which must not exist), taken
    /// while it runs: a backup to rebuild the cluster from (`recover`). Blocking.
    pub fn checkpoint(&self, to: &Path) -> Result<(), ClusterError> {
        self.db
            .checkpoint(to)
            .map_err(|e| ClusterError::Storage(e.to_string()))
    }

    /// This node's generation of the cluster (`generation`).
    pub fn generation(&self) -> &Generation {
        &self.generation
    }

    /// Why this node takes part in nothing: its cluster was recovered without it.
    pub fn superseded(&self) -> Option<String> {
        self.generation.superseded()
    }

    pub fn view(&self) -> &StateView {
        &self.view
    }

    pub fn read<R>(&self, f: impl FnOnce(&ClusterState) -> R) -> R {
        self.view.read(f)
    }

    pub fn me(&self) -> Peer {
        Peer {
            name: self.cfg.name.clone(),
            peer_addr: self.cfg.peer_addr.clone(),
        }
    }

    /// Whether the Raft log has any state (a node that was bootstrapped or joined before).
    pub async fn is_initialized(&self) -> bool {
        self.raft.is_initialized().await.unwrap_or(false)
    }

    /// Makes this node the first member of a new cluster with the given CA. Only the CA's
    /// certificate enters the replicated state; its key stays in this node's CA file.
    pub async fn bootstrap(&self, ca: CaMaterial) -> Result<(), ClusterError> {
        let ca = ca.public();
        let members = BTreeMap::from([(self.id, self.me())]);
        if let Err(e) = self.raft.initialize(members).await {
            tracing::info!(error = %e, "raft already initialized");
        }
        if self.read(|s| s.ca.is_none()) {
            let r = self
                .propose(Command::Init {
                    cluster: self.cfg.cluster_name.clone(),
                    ca,
                })
                .await?;
            if let CommandResult::Rejected { reason } = r {
                tracing::info!(%reason, "cluster init");
            }
        }
        match self.propose(self.register_command()).await? {
            CommandResult::Registered { node } if node == self.id => Ok(()),
            other => Err(ClusterError::Rejected(format!(
                "bootstrap registration gave {other:?}"
            ))),
        }
    }

    fn register_command(&self) -> Command {
        Command::Register {
            name: self.cfg.name.clone(),
            region: self.cfg.region.clone(),
            api_addr: self.cfg.api_addr.clone(),
            peer_addr: self.cfg.peer_addr.clone(),
            capacity: self.cfg.capacity,
            key_id: self.cfg.key_id.clone(),
            join_token: None,
        }
    }

    /// The leader this node knows of; none while it was left behind by a recovery of its
    /// cluster (its Raft may still believe in an old leader, itself included).
    pub fn leader(&self) -> Option<NodeId> {
        if self.generation.superseded().is_some() {
            return None;
        }
        self.raft.metrics().borrow().current_leader
    }

    /// How long ago the leader's last AppendEntries reached this node (`None` before any,
    /// and on the leader itself).
    pub fn leader_contact_age(&self) -> Option<Duration> {
        if self.raft.metrics().borrow().state == openraft::ServerState::Leader {
            return None;
        }
        match self.leader_contact.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(
                self.epoch
                    .elapsed()
                    .saturating_sub(Duration::from_millis(ms - 1)),
            ),
        }
    }

    pub fn term(&self) -> u64 {
        self.raft.metrics().borrow().current_term
    }

    pub fn is_leader(&self) -> bool {
        self.leader() == Some(self.id)
    }

    /// Commits a command, through the leader wherever it is. Retries across elections until
    /// [`PROPOSE_DEADLINE`]; then answers NoQuorum (a minority can never commit).
    pub async fn propose(&self, cmd: Command) -> Result<CommandResult, ClusterError> {
        let deadline = Instant::now() + PROPOSE_DEADLINE;
        let mut last_err = String::from("no leader");
        while Instant::now() < deadline && !self.stopping.load(Ordering::Relaxed) {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(remaining, self.raft.client_write(cmd.clone())).await {
                Err(_) => return Err(ClusterError::NoQuorum("commit timed out".into())),
                Ok(Ok(resp)) => return Ok(resp.data),
                Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                    if let Some(node) = f.leader_node.filter(|_| f.leader_id != Some(self.id)) {
                        let call = self.call_member(
                            &node.peer_addr,
                            &node.name,
                            Request::Propose(cmd.clone()),
                            remaining,
                        );
                        match call.await {
                            Ok(Reply::Proposed(Ok(p))) => {
                                self.wait_applied_here(p.index, deadline).await;
                                return Ok(p.result);
                            }
                            Ok(Reply::Proposed(Err(e))) => last_err = e,
                            Ok(other) => last_err = format!("unexpected reply {other:?}"),
                            Err(e) => last_err = e.to_string(),
                        }
                    }
                }
                Ok(Err(RaftError::APIError(e))) => {
                    return Err(ClusterError::Rejected(e.to_string()))
                }
                Ok(Err(RaftError::Fatal(e))) => return Err(ClusterError::Fatal(e.to_string())),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(ClusterError::NoQuorum(last_err))
    }

    /// After a proposal the leader committed for this node: waits until this node applied it
    /// too, so that what the caller answers next reads its own write (the leader's quorum need
    /// not include this node, which learns the commit with the leader's next append). Past the
    /// proposal's deadline the commit stands and is reported as such; this node applies it
    /// when it hears from the leader again.
    async fn wait_applied_here(&self, index: u64, deadline: Instant) {
        // At least a few heartbeats, however long the commit took.
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(1));
        if let Err(e) = self
            .raft
            .wait(Some(left))
            .applied_index_at_least(Some(index), "proposal applied here")
            .await
        {
            tracing::warn!(index, error = %e, "a committed proposal is not applied on this node yet");
        }
    }

    /// Whether this node may serve its sandboxes (`lease`): as leader, a quorum acknowledged
    /// it within the lease; otherwise, a lease the leader granted it is running and the
    /// state it was granted at is applied here.
    pub fn has_lease(&self) -> bool {
        self.lease_left().is_some()
    }

    /// How long this node's lease still runs (`has_lease`); None: it holds none. A leader
    /// that is the only voter holds a whole lease at every moment.
    pub fn lease_left(&self) -> Option<Duration> {
        if self.generation.superseded().is_some() {
            return None;
        }
        let m = self.raft.metrics().borrow().clone();
        let lease = self.cfg.lease.as_millis() as u64;
        let left_ms = if m.current_leader == Some(self.id) {
            let voters: BTreeSet<NodeId> = m.membership_config.membership().voter_ids().collect();
            if voters.len() <= 1 {
                lease
            } else {
                m.millis_since_quorum_ack
                    .filter(|ms| *ms <= lease)
                    .map_or(0, |ms| (lease - ms).max(1))
            }
        } else {
            let applied = m.last_applied.map_or(0, |l| l.index);
            self.lease
                .lock()
                .expect("lease lock")
                .left_ms(self.now_ms(), applied, lease)
        };
        (left_ms > 0).then(|| Duration::from_millis(left_ms))
    }

    /// Whether the leader may hand `node`'s sandboxes to another: no lease it may hold is
    /// still running (`lease::Grants::expired`). False on a node that does not lead.
    pub fn may_fail_over(&self, node: NodeId) -> bool {
        self.note_leadership();
        let wait = (self.cfg.lease + self.cfg.lease_margin).as_millis() as u64;
        self.grants
            .lock()
            .expect("grants lock")
            .expired(node, self.now_ms(), wait)
    }

    /// As leader, the nodes not heard from for `down_after` (empty on other nodes).
    pub fn silent_nodes(&self) -> BTreeSet<NodeId> {
        if !self.is_leader() {
            return BTreeSet::new();
        }
        self.silent.lock().expect("silent lock").clone()
    }

    /// Waits until this node applied everything committed when it was called (a read
    /// index from the leader, confirmed by a quorum): reads of the applied state after it
    /// see every write acknowledged before. Also renews this node's lease.
    pub async fn read_barrier(&self, timeout: Duration) -> Result<(), ClusterError> {
        let index = if self.is_leader() {
            self.confirm_leadership(timeout).await
        } else {
            self.request_lease(timeout).await
        }
        .map_err(ClusterError::NoQuorum)?;
        // openraft's wait may be given longer (`raft_runtime`): the caller's timeout holds.
        let wait = self.raft.wait(Some(timeout));
        let applied = wait.applied_index_at_least(Some(index), "read barrier");
        match tokio::time::timeout(timeout, applied).await {
            Ok(r) => r
                .map(|_| ())
                .map_err(|e| ClusterError::NoQuorum(e.to_string())),
            Err(_) => Err(ClusterError::NoQuorum(
                "this node did not apply the read index in time".into(),
            )),
        }
    }

    /// Leader: one read-index round (a quorum acknowledges this node as leader now); the
    /// read index.
    async fn confirm_leadership(&self, timeout: Duration) -> Result<u64, String> {
        match tokio::time::timeout(timeout, self.raft.get_read_log_id()).await {
            Ok(Ok((read, _))) => Ok(read.map_or(0, |l| l.index)),
            Ok(Err(e)) => Err(format!("not confirmed as leader: {e}")),
            Err(_) => Err("no quorum confirmed the leader in time".into()),
        }
    }

    /// Follower: asks the current leader for a lease and records the grant; its read index.
    /// Timed by outcome (`warren_lease_request_seconds`).
    async fn request_lease(&self, timeout: Duration) -> Result<u64, String> {
        let started = Instant::now();
        let (outcome, result) = self.ask_for_lease(timeout).await;
        self.latency
            .lease_requests
            .with_label_values(&[outcome])
            .observe(started.elapsed().as_secs_f64());
        result
    }

    /// One lease request: its outcome (`granted`, `refused`, `failed`) and result.
    async fn ask_for_lease(&self, timeout: Duration) -> (&'static str, Result<u64, String>) {
        let m = self.raft.metrics().borrow().clone();
        let Some(leader) = m
            .current_leader
            .filter(|l| *l != self.id)
            .and_then(|l| m.membership_config.membership().get_node(&l).cloned())
        else {
            return ("failed", Err("no other node is known to lead".into()));
        };
        let asked_at_ms = self.now_ms();
        let reply = self
            .call_member(&leader.peer_addr, &leader.name, Request::Lease, timeout)
            .await;
        match reply {
            Ok(Reply::Lease { read_index }) => {
                self.lease.lock().expect("lease lock").granted(Grant {
                    asked_at_ms,
                    read_index,
                });
                ("granted", Ok(read_index))
            }
            Ok(other) => ("refused", Err(format!("lease not granted: {other:?}"))),
            Err(e) => ("failed", Err(e.to_string())),
        }
    }

    /// Keeps the record of granted leases in step with the term this node leads in.
    fn note_leadership(&self) {
        let m = self.raft.metrics().borrow().clone();
        let term = (m.current_leader == Some(self.id)).then_some(m.current_term);
        self.grants
            .lock()
            .expect("grants lock")
            .leading(term, self.now_ms());
    }

    /// Leader: grants `peer` a lease once a quorum confirmed this node's leadership after the
    /// request arrived; answers with the read index. Timed (`warren_lease_grant_seconds`).
    async fn grant_lease(&self, node: NodeId) -> Reply {
        let timer = self.latency.lease_grants.start_timer();
        let reply = self.answer_lease(node).await;
        timer.observe_duration();
        reply
    }

    async fn answer_lease(&self, node: NodeId) -> Reply {
        if self.read(|s| !s.nodes.contains_key(&node)) {
            return Reply::Refused(format!("node {node} is not a member"));
        }
        self.note_leadership();
        let arrived = self.now_ms();
        let mut confirmed = self.confirmed.lock().await;
        let read_index = match *confirmed {
            Some((began, index)) if began >= arrived => index,
            _ => {
                let began = self.now_ms();
                match self.confirm_leadership(self.cfg.lease / 2).await {
                    Ok(index) => {
                        *confirmed = Some((began, index));
                        index
                    }
                    Err(why) => return Reply::Refused(why),
                }
            }
        };
        drop(confirmed);
        self.grants
            .lock()
            .expect("grants lock")
            .granted(node, self.now_ms());
        Reply::Lease { read_index }
    }

    /// Follower: asks the current leader for a lease, every quarter of a lease.
    fn start_lease_keeper(self: &Arc<Self>) {
        let me = self.clone();
        self.spawn_owned(async move {
            while !me.stopping.load(Ordering::Relaxed) {
                tokio::time::sleep(me.cfg.lease / 4).await;
                if me.is_leader() {
                    continue;
                }
                let asked = Instant::now();
                if let Err(why) = me.request_lease(me.cfg.lease / 2).await {
                    let left_ms = me.lease_left().map_or(0, |d| d.as_millis() as u64);
                    tracing::info!(%why, ms = asked.elapsed().as_millis() as u64, left_ms, "no lease this round");
                }
            }
        });
    }

    /// Waits up to `timeout` for the lease.
    pub async fn wait_lease(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.has_lease() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    /// Waits until `pred` holds on the applied state, or `timeout`.
    pub async fn wait_for(&self, timeout: Duration, pred: impl Fn(&ClusterState) -> bool) -> bool {
        let mut rx = self.view.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.read(&pred) {
                return true;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return self.read(&pred);
            }
        }
    }

    /// The member a peer connection speaks for (`authority::identify` on the applied state).
    pub fn member_of(&self, peer: &PeerId) -> Result<NodeId, Refusal> {
        self.read(|s| authority::identify(s, peer))
    }

    /// Serves one RPC stream from a peer.
    /// `peer` is who the peer's certificate names.
    pub async fn serve_rpc(
        self: Arc<Self>,
        peer: PeerId,
        mut send: SendStream,
        mut recv: RecvStream,
    ) {
        let req: Envelope<Request> = match frame::read(&mut recv).await {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "bad rpc frame");
                return;
            }
        };
        let reply = if req.version != RPC_VERSION {
            Reply::Refused(format!(
                "RPC version {} is not supported (this node speaks {RPC_VERSION})",
                req.version
            ))
        } else if let Some(why) = self.generation.meet(req.generation).refusal() {
            tracing::warn!(peer = %peer.name, %why, "peer request refused");
            Reply::Refused(why)
        } else {
            self.handle(&peer, req.body).await
        };
        let _ = frame::write(
            &mut send,
            &Envelope {
                version: RPC_VERSION,
                generation: self.generation.mine(),
                body: reply,
            },
        )
        .await;
        let _ = send.finish();
    }

    async fn handle(&self, peer: &PeerId, req: Request) -> Reply {
        let caller = match self.authorized(peer, &req).await {
            Ok(id) => id,
            Err(refusal) => {
                tracing::warn!(peer = %peer.name, node = ?peer.node, %refusal, "peer request refused");
                return Reply::Refused(refusal.to_string());
            }
        };
        match req {
            Request::AppendEntries(r) => {
                let timer = self.latency.append_entries.start_timer();
                let reply = self.raft.append_entries(r).await;
                timer.observe_duration();
                // Refused for a higher vote: a deposed leader's call, not the leader's.
                if reply.as_ref().is_ok_and(|r| {
                    !matches!(r, openraft::raft::AppendEntriesResponse::HigherVote(_))
                }) {
                    let ms = self.epoch.elapsed().as_millis() as u64 + 1;
                    self.leader_contact.store(ms, Ordering::Relaxed);
                }
                Reply::AppendEntries(reply)
            }
            Request::Vote(r) => Reply::Vote(self.raft.vote(r).await),
            Request::InstallSnapshot(r) => {
                let reply = self.raft.install_snapshot(r).await;
                if reply.is_ok() {
                    self.latency.snapshot_chunks.inc();
                }
                Reply::InstallSnapshot(reply)
            }
            Request::Ping => Reply::Pong { term: self.term() },
            Request::Propose(cmd) => Reply::Proposed(match self.raft.client_write(cmd).await {
                Ok(r) => Ok(rpc::Proposal {
                    result: r.data,
                    index: r.log_id.index,
                }),
                Err(e) => Err(e.to_string()),
            }),
            Request::Lease => self.grant_lease(caller).await,
            // Signed here or refused: a signing request is never passed on again.
            Request::Sign { node, csr_pem } => Reply::Signed(
                self.sign_here(node, &csr_pem)
                    .await
                    .map_err(|e| e.to_string()),
            ),
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Every other registered member but those `skip` names, as (id, name, peer address),
    /// the leader first: whom to ask, in turn, for what only some member can do.
    pub(crate) fn others_leader_first(
        &self,
        skip: impl Fn(&crate::NodeRecord) -> bool,
    ) -> Vec<(NodeId, String, String)> {
        let leader = self.leader();
        let mut others: Vec<(NodeId, String, String)> = self.read(|s| {
            s.nodes
                .values()
                .filter(|n| n.id != self.id && !skip(n))
                .map(|n| (n.id, n.name.clone(), n.peer_addr.clone()))
                .collect()
        });
        others.sort_by_key(|(id, _, _)| (Some(*id) != leader, *id));
        others
    }

    /// One call to the member at `addr` (named `name`), from this node, within `timeout`.
    pub(crate) async fn call_member(
        &self,
        addr: &str,
        name: &str,
        req: Request,
        timeout: Duration,
    ) -> Result<Reply, warren_transport::TransportError> {
        rpc::call(&self.peers, &self.generation, addr, name, req, timeout).await
    }

    /// Runs `task` on the cluster's runtime and keeps it, to be ended at shutdown.
    pub(crate) fn spawn_owned(&self, task: impl Future<Output = ()> + Send + 'static) {
        let handle = self.runtime.spawn(task);
        self.tasks.lock().expect("tasks lock").push(handle);
    }

    /// The runtime the cluster was opened on, where Raft and the cluster's own loops run.
    /// A node opens it on a runtime of its own (the daemon's consensus runtime), so that
    /// Raft, leases and the fence keep their pace while the node's request threads are busy
    /// or starved: what else must keep that pace runs there too.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// Checks who `peer` is and whether it may send `req`. A sandbox command from a node this
    /// node does not yet see as the owner waits a moment for the applied state (the move to
    /// it may be committed and not applied here yet).
    async fn authorized(&self, peer: &PeerId, req: &Request) -> Result<NodeId, Refusal> {
        let caller = self.member_of(peer)?;
        let check = |s: &ClusterState| authority::authorize(s, caller, req);
        if let Err(Refusal::NotOwner { .. }) = self.read(check) {
            self.wait_for(Duration::from_secs(1), |s| check(s).is_ok())
                .await;
        }
        self.read(check).map(|_| caller)
    }

    /// Starts the supervisor: while this node leads, it probes nodes (marking them down or up)
    /// and reconciles Raft membership with the registered nodes (learners first, then voters
    /// spread over regions). Also starts asking the leader for leases.
    pub fn start_supervisor(self: &Arc<Self>) {
        self.start_lease_keeper();
        self.start_address_keeper();
        let me = self.clone();
        self.spawn_owned(async move {
            let mut last_seen: HashMap<NodeId, Instant> = HashMap::new();
            let mut was_leader = false;
            while !me.stopping.load(Ordering::Relaxed) {
                tokio::time::sleep(me.cfg.supervise_every).await;
                me.size_call_deadline();
                me.note_leadership();
                if !me.is_leader() {
                    was_leader = false;
                    continue;
                }
                if !was_leader {
                    // A new leader gives every node a full grace period.
                    last_seen.clear();
                    was_leader = true;
                }
                let silent = me.probe(&mut last_seen).await;
                *me.silent.lock().expect("silent lock") = silent.clone();
                if let Err(e) = me.reconcile_membership(&silent).await {
                    tracing::debug!(error = %e, "membership reconciliation");
                }
            }
        });
    }

    /// Whether `node` answers a ping now (the applied state may still call a node up that
    /// just died).
    pub async fn reachable(&self, node: NodeId) -> bool {
        match self.read(|s| s.nodes.get(&node).cloned()) {
            Some(n) => self.ping(&n).await,
            None => false,
        }
    }

    /// One ping, answered within a second.
    async fn ping(&self, n: &crate::NodeRecord) -> bool {
        matches!(
            self.call_member(&n.peer_addr, &n.name, Request::Ping, Duration::from_secs(1))
                .await,
            Ok(Reply::Pong { .. })
        )
    }

    /// Pings every node, records liveness changes; returns the nodes silent for longer than
    /// `down_after` (a draining node keeps its state when silent, so this is how the voter
    /// choice knows it is gone).
    async fn probe(&self, last_seen: &mut HashMap<NodeId, Instant>) -> BTreeSet<NodeId> {
        let nodes: Vec<_> = self.read(|s| s.nodes.values().cloned().collect());
        let probes = nodes
            .iter()
            .filter(|n| n.id != self.id)
            .map(|n| async move { (n.id, self.ping(n).await) });
        let answered: Vec<(NodeId, bool)> = futures_util::future::join_all(probes).await;
        self.warn_of_slow_links(&nodes);
        let now = Instant::now();
        let mut heard = BTreeSet::from([self.id]);
        for (id, ok) in answered {
            // A node that asked for a lease lately is alive, whatever one ping said.
            let recent = self.cfg.lease.as_millis() as u64 / 2;
            let leased = self
                .grants
                .lock()
                .expect("grants lock")
                .last_grant(id)
                .is_some_and(|t| self.now_ms().saturating_sub(t) < recent);
            if ok || leased {
                heard.insert(id);
                last_seen.insert(id, now);
            } else {
                last_seen.entry(id).or_insert(now);
            }
        }
        last_seen.insert(self.id, now);
        let members: BTreeSet<NodeId> = self
            .raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        let mut silent_nodes = BTreeSet::new();
        for n in nodes {
            let seen = last_seen.get(&n.id).copied().unwrap_or(now);
            let silent = now.duration_since(seen) > self.cfg.down_after;
            if silent {
                silent_nodes.insert(n.id);
            }
            let observed = liveness::Observation {
                heard: heard.contains(&n.id),
                silent,
                member: members.contains(&n.id),
                is_self: n.id == self.id,
            };
            if let Some(state) = liveness::judge(n.state, observed) {
                tracing::warn!(node = %n.name, ?state, "node liveness changed");
                self.record_liveness(n.id, n.state, state).await;
            }
        }
        silent_nodes
    }

    /// Sizes the deadline of Raft calls to each member (`call_deadlines`): what the operator
    /// fixed for its region, else three of its link's round trip, at least a heartbeat.
    /// The round trip is the shortest QUIC measured on the connection (`Peers::min_rtt`),
    /// not its smoothed one: under a burst of forwarded traffic queues inflate the smoothed
    /// one, and a deadline grown with it lets one stuck call hold up the member's next
    /// heartbeats (openraft sends a member's next call only once the last one ended).
    /// openraft's own timeouts are raised to the longest (`raft_runtime`).
    fn size_call_deadline(&self) {
        let heartbeat = self.cfg.heartbeat;
        let members: Vec<(String, String)> = self.read(|s| {
            (s.nodes.values())
                .filter(|n| n.id != self.id)
                .map(|n| (n.name.clone(), n.region.clone()))
                .collect()
        });
        // The connections are looked at once the applied state is let go.
        let members: Vec<(String, Option<Duration>, Option<Duration>)> = members
            .into_iter()
            .map(|(name, region)| {
                let rtt = self.peers.min_rtt(&name);
                (name, self.cfg.region_deadlines.of(&region), rtt)
            })
            .collect();
        let longest = members.iter().filter_map(|(_, _, rtt)| *rtt).max();
        let unmeasured = crate::timing::call_deadline(heartbeat, longest);
        let deadlines: HashMap<String, Duration> = members
            .into_iter()
            .map(|(name, fixed, rtt)| {
                let deadline = member_deadline(heartbeat, fixed, rtt, unmeasured);
                (name, deadline)
            })
            .collect();
        let longest = self.member_deadlines.set(deadlines, unmeasured);
        crate::raft_runtime::set_call_deadline(longest);
    }

    /// The deadline of Raft calls to each member, by name, as last sized (`/metrics`).
    pub fn member_deadlines(&self) -> Vec<(String, Duration)> {
        self.member_deadlines.all()
    }

    /// Warns (once a minute per node) of a voter or learner whose measured round trip leaves
    /// too little time to renew a lease (`timing::rtt_misfit`).
    fn warn_of_slow_links(&self, nodes: &[crate::NodeRecord]) {
        let mut warned = self.rtt_warned.lock().expect("rtt lock");
        for n in nodes.iter().filter(|n| n.id != self.id) {
            let Some(rtt) = self.peers.min_rtt(&n.name) else {
                continue;
            };
            let fixed = self.cfg.region_deadlines.of(&n.region);
            let Some(why) =
                crate::timing::rtt_misfit(self.cfg.heartbeat, self.cfg.lease, rtt, fixed)
            else {
                continue;
            };
            if warned
                .get(&n.id)
                .is_none_or(|at| at.elapsed() > Duration::from_secs(60))
            {
                tracing::warn!(node = %n.name, "{why}");
                warned.insert(n.id, Instant::now());
            }
        }
    }

    /// Writes this leader's judgement that `node` went from `from` to `to`, in this term
    /// only: never forwarded (a leader that lost its office while the write waited would hand
    /// a judgement made while cut off to its successor), and rejected by the state machine if
    /// it commits in a later term.
    async fn record_liveness(&self, node: NodeId, from: NodeState, to: NodeState) {
        let cmd = Command::Liveness {
            node,
            from,
            to,
            term: self.term(),
        };
        match tokio::time::timeout(PROPOSE_DEADLINE, self.raft.client_write(cmd)).await {
            Ok(Ok(r)) => {
                if let CommandResult::Rejected { reason } = r.data {
                    tracing::info!(%node, %reason, "liveness judgement not applied");
                }
            }
            Ok(Err(e)) => tracing::info!(%node, error = %e, "liveness judgement not written"),
            Err(_) => tracing::info!(%node, "liveness judgement not committed in time"),
        }
    }

    async fn reconcile_membership(&self, silent: &BTreeSet<NodeId>) -> Result<(), ClusterError> {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership().clone();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members: BTreeSet<NodeId> = membership.nodes().map(|(id, _)| *id).collect();
        let nodes: Vec<_> = self.read(|s| s.nodes.values().cloned().collect());
        let registered: BTreeSet<NodeId> = nodes.iter().map(|n| n.id).collect();
        // Registered nodes become learners.
        for n in nodes.iter().filter(|n| {
            !members.contains(&n.id) && matches!(n.state, NodeState::Up | NodeState::Joining)
        }) {
            let peer = Peer {
                name: n.name.clone(),
                peer_addr: n.peer_addr.clone(),
            };
            tracing::info!(node = %n.name, "adding learner");
            self.raft
                .add_learner(n.id, peer, false)
                .await
                .map_err(|e| ClusterError::Rejected(e.to_string()))?;
        }
        // Members that moved: Raft sends to the address they registered last.
        let records: BTreeMap<NodeId, crate::NodeRecord> =
            nodes.iter().map(|n| (n.id, n.clone())).collect();
        let moved = crate::addresses::stale_members(membership.nodes(), &records);
        if !moved.is_empty() {
            tracing::info!(nodes = ?moved, "pointing Raft at members' new addresses");
            self.raft
                .change_membership(openraft::ChangeMembers::SetNodes(moved), false)
                .await
                .map_err(|e| ClusterError::Rejected(e.to_string()))?;
            return Ok(());
        }
        // Removed nodes leave Raft entirely.
        let gone: BTreeSet<NodeId> = members.difference(&registered).copied().collect();
        if !gone.is_empty() {
            let keep: BTreeSet<NodeId> = voters.difference(&gone).copied().collect();
            if keep != voters && !keep.is_empty() {
                self.change_voters(keep).await?;
            }
            self.raft
                .change_membership(openraft::ChangeMembers::RemoveNodes(gone), false)
                .await
                .map_err(|e| ClusterError::Rejected(e.to_string()))?;
            return Ok(());
        }
        // Voters: at most five, spread over regions; only nodes already in Raft qualify, and
        // no draining node that stopped answering.
        let eligible: Vec<_> = nodes
            .into_iter()
            .filter(|n| members.contains(&n.id))
            .filter(|n| !(n.state == NodeState::Draining && silent.contains(&n.id)))
            .collect();
        let want = desired_voters(&eligible, &voters);
        if !want.is_empty() && want != voters {
            self.change_voters(want).await?;
        }
        Ok(())
    }

    async fn change_voters(&self, voters: BTreeSet<NodeId>) -> Result<(), ClusterError> {
        tracing::info!(?voters, "changing voters");
        tokio::time::timeout(
            Duration::from_secs(10),
            self.raft.change_membership(voters, true),
        )
        .await
        .map_err(|_| ClusterError::NoQuorum("membership change timed out".into()))?
        .map_err(|e| ClusterError::Rejected(e.to_string()))?;
        Ok(())
    }

    /// Stops the supervisor and Raft.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        for t in self.tasks.lock().expect("tasks lock").drain(..) {
            t.abort();
        }
        let _ = self.raft.shutdown().await;
    }
}
