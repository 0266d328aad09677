//! A deterministic simulation of ownership across a fleet: 100 nodes in 3 regions, the
//! cluster's real decision code (the state machine, the leader's liveness judgement, lease
//! grants and expiry, failover planning) driven by a seeded schedule of faults — regions and
//! nodes cut off, processes paused and crashed — on a simulated clock (each node's running at
//! its own slightly different rate).
//!
//! Checked at every step: no sandbox is served by two nodes at once (a node serves a sandbox
//! while it holds a lease and its applied state names it the owner). Checked once the faults
//! end: the cluster converges — every node is up, every view is the committed state, every
//! sandbox is served by exactly one node and a request entering any node reaches it.
//!
//! What is modelled rather than run: Raft itself (a leader commits while it reaches a
//! majority of voters; a new one is elected among the voters that do, after an election
//! timeout), and message delays (a step is 100 ms; what crosses a working link arrives within
//! it). Every failure prints its seed; `WARREN_SIM_SEED=<seed>` reruns that one alone,
//! `WARREN_SIM_SEEDS` sets how many run (default 6) and `WARREN_SIM_IDS` how many sandboxes
//! (default 1,000,000).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use warren_consensus::failover::plan_failover;
use warren_consensus::lease::{FollowerLease, Grant, Grants};
use warren_consensus::liveness::{judge, Observation};
use warren_consensus::placement::{choose_owner, needs_failover};
use warren_consensus::{ClusterState, Command, CommandResult, NodeId, NodeRecord, NodeState};
use warren_consensus::{Placement, PlacementState};

const NODES: u64 = 100;
const REGIONS: u64 = 3;
const STEP_MS: u64 = 100;
const LEASE_MS: u64 = 2000;
const MARGIN_MS: u64 = 500;
const DOWN_AFTER_MS: u64 = 4000;
const ELECTION_MS: u64 = 1500;
/// Steps with faults, then steps after every fault is healed.
const FAULT_STEPS: u64 = 900;
const SETTLE_STEPS: u64 = 900;
const FAILOVER_BATCH: usize = 512;

fn region_of(node: NodeId) -> String {
    format!("r{}", node % REGIONS)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    /// Region cut off from the others, both ways.
    CutRegion(u64),
    /// One node cut off from every other.
    Isolate(NodeId),
    /// The process stopped (SIGSTOP): its clock runs on, it does nothing.
    Pause(NodeId),
    /// The process gone; it restarts with its disk (applied state) but no lease.
    Crash(NodeId),
}

struct Node {
    /// Clock rate error, in parts per million.
    drift_ppm: i64,
    view: ClusterState,
    applied: u64,
    lease: FollowerLease,
    /// As leader: when (its clock) a majority last acknowledged it.
    quorum_at: Option<u64>,
}

struct Sim {
    seed: u64,
    rng: StdRng,
    now: u64,
    nodes: BTreeMap<NodeId, Node>,
    voters: Vec<NodeId>,
    committed: ClusterState,
    index: u64,
    term: u64,
    leader: Option<NodeId>,
    /// When the current leader last reached a majority (global time).
    leader_ok_at: u64,
    grants: Grants,
    heard_at: BTreeMap<NodeId, u64>,
    led_since: u64,
    faults: BTreeMap<Fault, u64>,
    /// Every owner change, by the log index that made it (increasing): views applied at or
    /// past an index agree on what it moved.
    moves: Vec<(u64, String)>,
    stats: Stats,
}

#[derive(Debug, Default)]
struct Stats {
    faults: u64,
    elections: u64,
    failed_over: u64,
    requests: u64,
    served: u64,
}

impl Sim {
    fn new(seed: u64, base: &ClusterState) -> Sim {
        let mut rng = StdRng::seed_from_u64(seed);
        let nodes = (1..=NODES)
            .map(|id| {
                let node = Node {
                    drift_ppm: rng.random_range(-2000..=2000),
                    view: base.clone(),
                    applied: 1,
                    lease: FollowerLease::default(),
                    quorum_at: None,
                };
                (id, node)
            })
            .collect();
        // Five voters over the three regions (2/2/1): losing any one region keeps a quorum.
        let voters = vec![3, 6, 1, 4, 2];
        Sim {
            seed,
            rng,
            now: 0,
            nodes,
            voters,
            committed: base.clone(),
            index: 1,
            term: 0,
            leader: None,
            leader_ok_at: 0,
            grants: Grants::default(),
            heard_at: BTreeMap::new(),
            led_since: 0,
            faults: BTreeMap::new(),
            moves: Vec::new(),
            stats: Stats::default(),
        }
    }

    fn clock(&self, n: NodeId) -> u64 {
        let d = self.nodes[&n].drift_ppm;
        (self.now as i64 + self.now as i64 * d / 1_000_000) as u64
    }

    fn has(&self, f: Fault) -> bool {
        self.faults.contains_key(&f)
    }

    /// The process runs (not crashed, not paused).
    fn alive(&self, n: NodeId) -> bool {
        !self.has(Fault::Crash(n)) && !self.has(Fault::Pause(n))
    }

    fn link(&self, a: NodeId, b: NodeId) -> bool {
        if !self.alive(a) || !self.alive(b) {
            return false;
        }
        if a == b {
            return true;
        }
        if self.has(Fault::Isolate(a)) || self.has(Fault::Isolate(b)) {
            return false;
        }
        let (ra, rb) = (a % REGIONS, b % REGIONS);
        ra == rb || !(self.has(Fault::CutRegion(ra)) || self.has(Fault::CutRegion(rb)))
    }

    fn reaches_majority(&self, n: NodeId) -> bool {
        let acks = self.voters.iter().filter(|v| self.link(n, **v)).count();
        acks > self.voters.len() / 2
    }

    fn fail(&self, what: String) -> ! {
        panic!(
            "simulation seed {} failed at {} ms: {what}\nrerun: WARREN_SIM_SEED={} cargo nextest run -p warren-consensus --test simulation",
            self.seed, self.now, self.seed
        );
    }

    fn commit(&mut self, cmd: &Command) -> CommandResult {
        self.index += 1;
        self.committed.apply_entry(cmd, self.term)
    }

    /// Starts, heals or leaves faults; at most two at once, none once `calm`.
    fn nemesis(&mut self, calm: bool) {
        let now = self.now;
        self.faults.retain(|_, until| *until > now);
        if calm {
            self.faults.clear();
            return;
        }
        if self.faults.len() >= 2 || !self.rng.random_bool(0.03) {
            return;
        }
        let node = self.rng.random_range(1..=NODES);
        // A voter now and then, so that leaders fail too.
        let node = if self.rng.random_bool(0.3) {
            self.voters[self.rng.random_range(0..self.voters.len())]
        } else {
            node
        };
        let fault = match self.rng.random_range(0..4) {
            0 => Fault::CutRegion(self.rng.random_range(0..REGIONS)),
            1 => Fault::Isolate(node),
            2 => Fault::Pause(node),
            _ => Fault::Crash(node),
        };
        if self.faults.contains_key(&fault) {
            return;
        }
        let lasting = self.rng.random_range(5..150) * STEP_MS;
        if let Fault::Crash(n) = fault {
            // Restarted later with its disk: no lease, no leadership.
            let node = self.nodes.get_mut(&n).unwrap();
            node.lease = FollowerLease::default();
            node.quorum_at = None;
        }
        self.faults.insert(fault, now + lasting);
        self.stats.faults += 1;
    }

    /// The leader keeps its majority, or one is elected among the voters that reach one.
    fn leadership(&mut self) {
        if let Some(l) = self.leader.filter(|l| self.reaches_majority(*l)) {
            self.leader_ok_at = self.now;
            let at = self.clock(l);
            self.nodes.get_mut(&l).unwrap().quorum_at = Some(at);
            return;
        }
        if self.leader.is_some() && self.now < self.leader_ok_at + ELECTION_MS {
            return;
        }
        let able: Vec<NodeId> = self
            .voters
            .iter()
            .copied()
            .filter(|v| self.reaches_majority(*v))
            .collect();
        if able.is_empty() {
            return;
        }
        let l = able[self.rng.random_range(0..able.len())];
        self.term += 1;
        self.leader = Some(l);
        self.leader_ok_at = self.now;
        self.led_since = self.now;
        self.heard_at.clear();
        let at = self.clock(l);
        self.grants.leading(Some(self.term), at);
        self.nodes.get_mut(&l).unwrap().quorum_at = Some(at);
        self.stats.elections += 1;
    }

    /// The leader's round: liveness, lease grants, failover (as `consensus::cluster` and
    /// `warren_control::migrate` run them, through the same decision functions).
    fn leader_round(&mut self) {
        let Some(l) = self.leader.filter(|l| self.reaches_majority(*l)) else {
            return;
        };
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let mut silent = BTreeSet::new();
        for &n in &ids {
            let heard = self.link(l, n);
            if heard {
                self.heard_at.insert(n, self.now);
            }
            let last = self.heard_at.get(&n).copied().unwrap_or(self.led_since);
            let is_silent = self.now.saturating_sub(last) > DOWN_AFTER_MS;
            if is_silent {
                silent.insert(n);
            }
            let seen = Observation {
                heard,
                silent: is_silent,
                member: true,
                is_self: n == l,
            };
            let state = self.committed.nodes[&n].state;
            if let Some(to) = judge(state, seen) {
                let cmd = Command::Liveness {
                    node: n,
                    from: state,
                    to,
                    term: self.term,
                };
                self.commit(&cmd);
            }
        }
        let leader_now = self.clock(l);
        for &n in &ids {
            if n != l && self.link(l, n) {
                let asked_at_ms = self.clock(n);
                let grant = Grant {
                    asked_at_ms,
                    read_index: self.index,
                };
                self.nodes.get_mut(&n).unwrap().lease.granted(grant);
                self.grants.granted(n, leader_now);
            }
        }
        let wait = LEASE_MS + MARGIN_MS;
        let plan = {
            let state = &self.committed;
            let grants = &self.grants;
            plan_failover(
                state,
                |n| needs_failover(state, &silent, n, l),
                |n| grants.expired(n, leader_now, wait),
                FAILOVER_BATCH,
            )
        };
        for m in plan.moves {
            let cmd = Command::Move {
                sandbox: m.sandbox.clone(),
                expected_epoch: m.epoch,
                node: m.to,
                handoff: None,
            };
            if matches!(
                self.commit(&cmd),
                CommandResult::Placement { applied: true, .. }
            ) {
                self.moves.push((self.index, m.sandbox));
                self.stats.failed_over += 1;
            }
        }
    }

    /// Nodes in touch with the leader apply what it committed.
    fn replicate(&mut self) {
        let Some(l) = self.leader else { return };
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for n in ids {
            if self.link(l, n) && self.nodes[&n].applied != self.index {
                let (view, index) = (self.committed.clone(), self.index);
                let node = self.nodes.get_mut(&n).unwrap();
                node.view = view;
                node.applied = index;
            }
        }
    }

    /// Whether node `n` would serve its sandboxes now.
    fn lease_holds(&mut self, n: NodeId) -> bool {
        if !self.alive(n) {
            return false;
        }
        let now = self.clock(n);
        let node = self.nodes.get_mut(&n).unwrap();
        let as_leader = node
            .quorum_at
            .is_some_and(|at| now.saturating_sub(at) < LEASE_MS);
        let applied = node.applied;
        as_leader || node.lease.holds(now, applied, LEASE_MS)
    }

    fn serves(&self, n: NodeId, holds: &BTreeMap<NodeId, bool>, sandbox: &str) -> bool {
        holds[&n]
            && self.nodes[&n]
                .view
                .placements
                .get(sandbox)
                .is_some_and(|p| p.node == n && p.state == PlacementState::Active)
    }

    /// Single ownership: no sandbox is served by two nodes. Every node that holds a lease
    /// applied at least up to the oldest such node's index; the placements moved after it
    /// are the only ones their views can disagree on, and each of those is checked against
    /// every node. A request entering a random live node goes to the owner its view names.
    fn check_single_owner(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        let holds: BTreeMap<NodeId, bool> = ids.iter().map(|&n| (n, self.lease_holds(n))).collect();
        let oldest = ids
            .iter()
            .filter(|n| holds[*n])
            .map(|n| self.nodes[n].applied)
            .min()
            .unwrap_or(self.index);
        let from = self.moves.partition_point(|(i, _)| *i <= oldest);
        let disputed: BTreeSet<&String> = self.moves[from..].iter().map(|(_, s)| s).collect();
        // Nodes that applied the same index hold the same view: one per index suffices to
        // find, for a sandbox, every node whose view names itself its owner.
        let mut views: BTreeMap<u64, NodeId> = BTreeMap::new();
        for &n in ids.iter().filter(|n| holds[*n]) {
            views.entry(self.nodes[&n].applied).or_insert(n);
        }
        for s in disputed {
            let servers: BTreeSet<NodeId> = views
                .values()
                .filter_map(|v| self.nodes[v].view.placements.get(s.as_str()))
                .map(|p| p.node)
                .filter(|&n| self.nodes.contains_key(&n) && self.serves(n, &holds, s))
                .collect();
            if servers.len() > 1 {
                self.fail(format!("{s} served by {servers:?} at once"));
            }
        }
        for _ in 0..20 {
            let entry = self.rng.random_range(1..=NODES);
            if !self.alive(entry) {
                continue;
            }
            let Some(s) = self.sample_sandbox() else {
                return;
            };
            self.stats.requests += 1;
            let Some(owner) = self.nodes[&entry].view.placements.get(&s).map(|p| p.node) else {
                continue;
            };
            if self.link(entry, owner) && self.serves(owner, &holds, &s) {
                self.stats.served += 1;
            }
        }
    }

    fn sample_sandbox(&mut self) -> Option<String> {
        let n = self.committed.placements.len();
        (n > 0).then(|| format!("sb-{}", self.rng.random_range(0..n)))
    }

    /// After the faults: all up, every view the committed state, one server per sandbox, and
    /// every request entering any node reaches it.
    fn check_converged(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for &n in &ids {
            let state = self.committed.nodes[&n].state;
            if state != NodeState::Up {
                self.fail(format!("node {n} is {state:?} after the faults ended"));
            }
            if self.nodes[&n].applied != self.index {
                self.fail(format!(
                    "node {n} applied {} of {}",
                    self.nodes[&n].applied, self.index
                ));
            }
        }
        let holds: BTreeMap<NodeId, bool> = ids.iter().map(|&n| (n, self.lease_holds(n))).collect();
        let mut served = 0;
        for &n in &ids {
            if !holds[&n] {
                self.fail(format!("node {n} holds no lease after the faults ended"));
            }
            served += self.committed.placements.count_on(n);
        }
        if served != self.committed.placements.len() {
            self.fail(format!(
                "{served} of {} sandboxes have a serving owner",
                self.committed.placements.len()
            ));
        }
        for _ in 0..1000 {
            let entry = self.rng.random_range(1..=NODES);
            let s = self.sample_sandbox().unwrap();
            let owner = self.nodes[&entry].view.placements[s.as_str()].node;
            if !(self.link(entry, owner) && self.serves(owner, &holds, &s)) {
                self.fail(format!(
                    "{s} entering node {entry} does not reach its owner {owner}"
                ));
            }
        }
    }

    fn run(mut self) -> Stats {
        for step in 0..FAULT_STEPS + SETTLE_STEPS {
            self.now = step * STEP_MS;
            self.nemesis(step >= FAULT_STEPS);
            self.leadership();
            self.leader_round();
            self.replicate();
            self.check_single_owner();
        }
        self.check_converged();
        self.stats
    }
}

/// The cluster before any fault: every node up, `ids` sandboxes placed by rendezvous in the
/// region each was created for.
fn placed_cluster(ids: usize) -> ClusterState {
    let mut s = ClusterState::default();
    for id in 1..=NODES {
        s.nodes
            .insert(id, NodeRecord::placeable(id, &region_of(id)));
    }
    s.next_node_id = NODES + 1;
    for i in 0..ids {
        let sandbox = format!("sb-{i}");
        let region = format!("r{}", i as u64 % REGIONS);
        let node = choose_owner(&s, &sandbox, &region).expect("an up node");
        let handoff = warren_consensus::Handoff {
            record: serde_json::json!({ "region": region }).to_string(),
            snapshot: Some(format!("{sandbox}-ckpt")),
            resume: false,
        };
        let p = Placement {
            sandbox: sandbox.clone(),
            node,
            epoch: 1,
            owner_since: 1,
            state: PlacementState::Active,
            handoff: Some(handoff),
            egress: None,
            tenant: None,
            size: None,
        };
        s.placements.insert(sandbox, p);
    }
    s
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

#[test]
fn single_ownership_and_convergence_under_partitions_pauses_and_crashes() {
    let ids = env_u64("WARREN_SIM_IDS").unwrap_or(1_000_000) as usize;
    let seeds: Vec<u64> = match env_u64("WARREN_SIM_SEED") {
        Some(seed) => vec![seed],
        None => {
            let n = env_u64("WARREN_SIM_SEEDS").unwrap_or(6);
            // A fresh set every run (the clock), each printed: a failure is rerun from it.
            let base = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs();
            (0..n)
                .map(|i| base.wrapping_mul(1000).wrapping_add(i))
                .collect()
        }
    };
    let started = std::time::Instant::now();
    let base = placed_cluster(ids);
    eprintln!(
        "simulation: {NODES} nodes, {REGIONS} regions, {ids} sandboxes placed in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    for seed in seeds {
        let t = std::time::Instant::now();
        let stats = Sim::new(seed, &base).run();
        eprintln!(
            "simulation seed {seed}: {:?}, {:.1}s",
            stats,
            t.elapsed().as_secs_f64()
        );
        assert!(stats.faults > 0, "seed {seed}: no fault was injected");
    }
}
