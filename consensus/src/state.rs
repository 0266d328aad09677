//! The replicated state machine: nodes, their regions and liveness, sandbox placements, and
//! the cluster CA. Applying a command is pure and deterministic (no clock, no IO): every
//! node computes the same state from the same log.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use warren_transport::CaMaterial;

/// Version of the serialized state (snapshots).
pub const STATE_FORMAT: u32 = 1;

/// How a refused registration of a member's name starts (the join endpoint answers 409).
pub const NAME_TAKEN: &str = "name taken";

/// How a placement refused by its tenant's quota starts (the API answers 403).
pub use warren_api::tenants::QUOTA_EXCEEDED;

pub type NodeId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Registered, not yet a caught-up Raft member: receives no placements.
    Joining,
    Up,
    Down,
    Draining,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub id: NodeId,
    pub name: String,
    pub region: String,
    pub api_addr: String,
    pub peer_addr: String,
    pub state: NodeState,
    /// Relative weight for placement (e.g. cores); at least 1.
    pub capacity: u32,
    /// The id of the key its certificate was issued for (`tls::key_id_of_csr`): only that
    /// key speaks as this node, and only it may register the name again. Empty in records
    /// made before keys were recorded.
    #[serde(default)]
    pub key_id: String,
    /// The ids of the secrets keys the node holds (its key file), as it last said: a secret
    /// is resealed under a new key only once every member holds that key.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets_keys: Vec<String>,
    /// The most sandboxes the node runs at once, as it last said (none: not said yet, no
    /// bound known): failover and rebalancing skip a node that is full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    /// The node said it cannot start one more sandbox of the default size now (its running
    /// sandboxes' limits or its host's free memory): new placements pass over it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub full: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlacementState {
    /// The named node runs (or creates) the sandbox.
    #[default]
    Active,
    /// The named node is saving the sandbox to hand it to another node: requests wait.
    Migrating,
}

/// What a new owner needs to continue a sandbox: its record (opaque to the cluster), the
/// snapshot its files come back from, and whether it was running (then it is started at
/// once; otherwise it arrives asleep).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub record: String,
    pub snapshot: Option<String>,
    pub resume: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    pub sandbox: String,
    pub node: NodeId,
    /// Grows on every change; fences stale owners.
    pub epoch: u64,
    /// The epoch at which `node` got the sandbox (its placement, or the move to it from
    /// another node; a move that stays on the same node keeps it). A node's local copy made
    /// before this epoch is from an earlier time it owned the sandbox: stale. 0: placed
    /// before this was recorded.
    #[serde(default)]
    pub owner_since: u64,
    #[serde(default)]
    pub state: PlacementState,
    /// The latest handoff: written by a move, and by the owner's periodic checkpoints so that
    /// survivors can bring the sandbox back if its node fails.
    #[serde(default)]
    pub handoff: Option<Handoff>,
    /// The sandbox's egress policy (JSON) as last set through the API: newer than the one
    /// in `handoff`'s record (which is the checkpoint's), and what a new owner applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<String>,
    /// The tenant whose sandbox this is (none: made before tenants, `DEFAULT_TENANT`). Set
    /// by the first placement and never changed after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// What it holds of its tenant's quota (none: placed before quotas, counted as nothing
    /// but one sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<Size>,
}

/// A sandbox's size as its tenant's quota counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    pub millicpus: u64,
    pub memory_mb: u64,
}

/// What a tenant may hold at once, cluster-wide (none: no limit of that kind).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sandboxes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_millicpus: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_memory_mb: Option<u64>,
    /// Checked by the node that takes a snapshot (the catalog is in the object store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_snapshot_bytes: Option<u64>,
}

/// What a tenant holds: its sandboxes, and their sizes summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUse {
    pub sandboxes: u64,
    pub size: Size,
}

impl Placement {
    /// The tenant this sandbox belongs to.
    pub fn tenant(&self) -> &str {
        self.tenant
            .as_deref()
            .unwrap_or(warren_api::keys::DEFAULT_TENANT)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// First entry of a cluster: its CA and name.
    Init {
        cluster: String,
        ca: CaMaterial,
    },
    /// Adds a node (or returns the id of the node of that name).
    Register {
        name: String,
        region: String,
        api_addr: String,
        peer_addr: String,
        capacity: u32,
        /// The key the node's certificate is issued for.
        #[serde(default)]
        key_id: String,
        /// The issued join token it was admitted with (spent by this entry), if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        join_token: Option<crate::join_tokens::TokenSpend>,
    },
    /// An operator's setting of a node's state (draining).
    SetNodeState {
        node: NodeId,
        state: NodeState,
    },
    /// The leader's judgement, made in `term`, that `node` went from `from` to `to` (down,
    /// back up, or joined). It counts only in a log entry of that same term, and only while
    /// the node is still in `from`: a judgement proposed by a leader that was deposed before
    /// it committed (a cut-off leader finds everyone silent) cannot be carried into a later
    /// term, and a stale one cannot overwrite an operator's `Draining`.
    Liveness {
        node: NodeId,
        from: NodeState,
        to: NodeState,
        term: u64,
    },
    RemoveNode {
        node: NodeId,
    },
    /// Places `sandbox` on `node` if its current epoch is `expected_epoch` (0: unplaced).
    Place {
        sandbox: String,
        node: NodeId,
        expected_epoch: u64,
        /// The tenant of a new sandbox (a placement that replaces one keeps its tenant).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        /// Its size, for its tenant's quota (a placement that replaces one keeps its size).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        size: Option<Size>,
    },
    /// Forgets a placement if its epoch is still `epoch` (the sandbox was deleted).
    Unplace {
        sandbox: String,
        epoch: u64,
    },
    /// The owner starts moving a sandbox away (epoch must match): state `Migrating`.
    BeginMove {
        sandbox: String,
        epoch: u64,
    },
    /// Hands a sandbox to `node` (epoch must match): state `Active` there, with `handoff`
    /// (the placement keeps its previous handoff when `None`).
    Move {
        sandbox: String,
        expected_epoch: u64,
        node: NodeId,
        handoff: Option<Handoff>,
    },
    /// The sandbox's egress policy changed on its owner (epoch must match; the epoch does
    /// not change): a new owner applies it whatever its handoff's record says.
    SetEgress {
        sandbox: String,
        epoch: u64,
        policy: String,
    },
    /// The owner's latest recovery point (epoch must match; the epoch does not change).
    Checkpoint {
        sandbox: String,
        epoch: u64,
        handoff: Handoff,
    },
    /// Creates or replaces a secret (`at`: when, as the proposer's clock said).
    PutSecret {
        name: String,
        sealed: crate::secrets::Sealed,
        at: String,
    },
    /// Replaces a secret's sealed value by the same value sealed under another key, if it
    /// is still `from` (a value put meanwhile is not undone): timestamps stay.
    ResealSecret {
        name: String,
        from: crate::secrets::Sealed,
        sealed: crate::secrets::Sealed,
    },
    /// The secrets keys `node` holds (only the node itself says so).
    SetSecretsKeys {
        node: NodeId,
        keys: Vec<String>,
    },
    /// The most sandboxes `node` runs at once, and whether it is full now (only the node
    /// itself says so). `full` is absent from commands of nodes that predate it.
    SetNodeLimits {
        node: NodeId,
        max_sandboxes: u64,
        #[serde(default)]
        full: bool,
    },
    /// The addresses `node` is reached at now (only the node itself says so): it restarted
    /// on other addresses (a moved machine, a restored backup). Nodes before it cannot read
    /// this entry: a node moves only once every node runs a version that has it.
    SetAddresses {
        node: NodeId,
        api_addr: String,
        peer_addr: String,
    },
    /// Forgets a secret (nothing when there is none).
    DeleteSecret {
        name: String,
    },
    /// Adds an API key (refused when the id exists).
    CreateKey {
        id: String,
        key: KeyRecord,
    },
    /// Forgets an API key (nothing when there is none).
    RevokeKey {
        id: String,
    },
    /// When keys were last used, as nodes saw them (a later time wins; revoked keys stay gone).
    TouchKeys {
        used: Vec<(String, String)>,
    },
    /// Sets (or, with every limit none, clears) a tenant's quota.
    SetQuota {
        tenant: String,
        quota: Quota,
    },
    /// Adds an issued join token (refused when the id exists), at `now_ms` by the
    /// proposer's clock (long-expired tokens are forgotten then).
    CreateJoinToken {
        id: String,
        token: crate::join_tokens::JoinTokenRecord,
        now_ms: u64,
    },
    /// Forgets an issued join token (nothing when there is none).
    RevokeJoinToken {
        id: String,
    },
    /// Whether the cluster's own join token (the `join_token` setting) still admits new
    /// nodes; when not, only issued join tokens do.
    SetClusterTokenJoins {
        allowed: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandResult {
    /// Entries that carry no command (blank, membership) and commands with nothing to say.
    Done,
    Registered {
        node: NodeId,
    },
    /// The placement after the command; `applied` is false when the epoch did not match.
    Placement {
        placement: Option<Placement>,
        applied: bool,
    },
    Rejected {
        reason: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterState {
    pub format: u32,
    pub cluster: String,
    pub ca: Option<CaMaterial>,
    pub nodes: BTreeMap<NodeId, NodeRecord>,
    pub placements: crate::placements::Placements,
    pub next_node_id: NodeId,
    /// Secrets by name, sealed with the cluster's secrets key (`secrets`).
    #[serde(default)]
    pub secrets: BTreeMap<String, SecretRecord>,
    /// API keys by id, their values only as hashes (`keys`).
    #[serde(default)]
    pub keys: BTreeMap<String, KeyRecord>,
    /// Tenants' quotas (a tenant without one has no limit).
    #[serde(default)]
    pub quotas: BTreeMap<String, Quota>,
    /// Issued join tokens by id, their values sealed (`join_tokens`).
    #[serde(default)]
    pub join_tokens: BTreeMap<String, crate::join_tokens::JoinTokenRecord>,
    /// Set once an admin turned the cluster's own join token off: a registration that
    /// spends no issued token is refused.
    #[serde(default)]
    pub cluster_token_off: bool,
    /// The highest epoch any deleted placement reached. A sandbox placed anew starts above
    /// it, so that a copy some node kept from an earlier incarnation under the same id (cut
    /// off while it was deleted) is always older than the new one's `owner_since`.
    #[serde(default)]
    pub retired_epoch: u64,
    /// How many times the cluster was rebuilt from a survivor of a lost majority
    /// (`recover`); nodes of an older generation are refused (`generation`).
    #[serde(default)]
    pub generation: u64,
}

/// One API key: the SHA-256 of its secret part, whose key it is and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub hash: String,
    pub tenant: String,
    pub scope: warren_api::keys::KeyScope,
    #[serde(default)]
    pub name: Option<String>,
    pub created_at: String,
    #[serde(default)]
    pub last_used_at: Option<String>,
}

/// Where a tenant's secret of this name is kept in `ClusterState::secrets`: the default
/// tenant's under the bare name (as before tenants), any other's under `tenant/name` (a
/// secret name holds no `/`, so the slots never meet).
pub fn secret_slot(tenant: &str, name: &str) -> String {
    if tenant == warren_api::keys::DEFAULT_TENANT {
        name.to_string()
    } else {
        format!("{tenant}/{name}")
    }
}

/// The tenant and name of a slot of `ClusterState::secrets`.
pub fn slot_owner(slot: &str) -> (&str, &str) {
    slot.split_once('/')
        .unwrap_or((warren_api::keys::DEFAULT_TENANT, slot))
}

/// One secret: its sealed value and when it was set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretRecord {
    pub sealed: crate::secrets::Sealed,
    pub created_at: String,
    pub updated_at: String,
}

impl ClusterState {
    /// The secrets to reseal under key `current`: those sealed under another key, once
    /// every member says it holds `current` (before, a member could not open them).
    pub fn to_reseal(&self, current: &str) -> Vec<String> {
        let all_hold = self
            .nodes
            .values()
            .all(|n| n.secrets_keys.iter().any(|k| k == current));
        if !all_hold {
            return Vec::new();
        }
        self.secrets
            .iter()
            .filter(|(_, r)| r.sealed.key_id != current)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// What `tenant` holds now, over every placement.
    pub fn tenant_use(&self, tenant: &str) -> TenantUse {
        self.placements.tenant_use(tenant)
    }

    /// Why one more sandbox of `size` does not fit `tenant`'s quota, if it does not.
    pub fn quota_refusal(&self, tenant: &str, size: Size) -> Option<String> {
        let q = self.quotas.get(tenant)?;
        let u = self.tenant_use(tenant);
        let over = |name: &str, limit: Option<u64>, used: u64, more: u64, unit: &str| {
            limit.filter(|l| used + more > *l).map(|l| {
                format!("{QUOTA_EXCEEDED}: tenant {tenant} may hold {l}{unit} of {name}, holds {used}{unit}, and this sandbox needs {more}{unit} more")
            })
        };
        over("sandboxes", q.max_sandboxes, u.sandboxes, 1, "")
            .or_else(|| {
                over(
                    "CPU",
                    q.max_millicpus,
                    u.size.millicpus,
                    size.millicpus,
                    " millicpus",
                )
            })
            .or_else(|| {
                over(
                    "memory",
                    q.max_memory_mb,
                    u.size.memory_mb,
                    size.memory_mb,
                    " MB",
                )
            })
    }

    pub fn node_by_name(&self, name: &str) -> Option<&NodeRecord> {
        self.nodes.values().find(|n| n.name == name)
    }

    /// Nodes that may receive new placements.
    pub fn placeable(&self) -> impl Iterator<Item = &NodeRecord> {
        self.nodes.values().filter(|n| n.state == NodeState::Up)
    }

    /// Applies `cmd`, committed in a log entry of `entry_term`.
    pub fn apply_entry(&mut self, cmd: &Command, entry_term: u64) -> CommandResult {
        match cmd {
            Command::Liveness {
                node,
                from,
                to,
                term,
            } => {
                self.format = STATE_FORMAT;
                self.apply_liveness(*node, *from, *to, *term, entry_term)
            }
            other => self.apply(other),
        }
    }

    fn apply_liveness(
        &mut self,
        node: NodeId,
        from: NodeState,
        to: NodeState,
        judged_in: u64,
        entry_term: u64,
    ) -> CommandResult {
        if judged_in != entry_term {
            return CommandResult::Rejected {
                reason: format!(
                    "a liveness judgement of term {judged_in} committed in term {entry_term}"
                ),
            };
        }
        match self.nodes.get_mut(&node) {
            Some(n) if n.state == from => {
                n.state = to;
                CommandResult::Done
            }
            Some(n) => CommandResult::Rejected {
                reason: format!("node {node} is {:?}, not {from:?}", n.state),
            },
            None => CommandResult::Rejected {
                reason: format!("no node {node}"),
            },
        }
    }

    /// Applies a command whatever the term of its entry (every command but `Liveness`,
    /// which needs it: see `apply_entry`).
    pub fn apply(&mut self, cmd: &Command) -> CommandResult {
        self.format = STATE_FORMAT;
        match cmd {
            Command::Liveness { .. } => CommandResult::Rejected {
                reason: "a liveness judgement is applied with its entry's term".into(),
            },
            Command::Init { cluster, ca } => {
                if self.ca.is_some() {
                    return CommandResult::Rejected {
                        reason: "the cluster is already initialized".into(),
                    };
                }
                self.cluster = cluster.clone();
                self.ca = Some(ca.clone());
                self.next_node_id = self.next_node_id.max(1);
                CommandResult::Done
            }
            Command::Register {
                name,
                region,
                api_addr,
                peer_addr,
                capacity,
                key_id,
                join_token,
            } => {
                if let Some(existing) = self.node_by_name(name) {
                    // The same key asking again (an answer that got lost) gets the same id;
                    // anyone else — a new node, or the same name from a wiped disk — must
                    // not inherit a member's id, votes or log position.
                    if !key_id.is_empty() && existing.key_id == *key_id {
                        return CommandResult::Registered { node: existing.id };
                    }
                    return CommandResult::Rejected {
                        reason: format!(
                            "{NAME_TAKEN}: {name} is node {}; remove it first (DELETE /v1/cluster/nodes/{name}) to join again under that name",
                            existing.id
                        ),
                    };
                }
                match join_token {
                    Some(spend) => {
                        if let Err(reason) =
                            crate::join_tokens::spend(&mut self.join_tokens, spend, name)
                        {
                            return CommandResult::Rejected { reason };
                        }
                    }
                    // Decided here, in the log: a member that has not applied the switch
                    // yet cannot admit a node with the cluster token meanwhile.
                    None if self.cluster_token_off && !self.nodes.is_empty() => {
                        return CommandResult::Rejected {
                            reason: crate::join_tokens::CLUSTER_TOKEN_OFF.to_string(),
                        };
                    }
                    None => {}
                }
                let id = self.next_node_id.max(1);
                self.next_node_id = id + 1;
                // The first node is the cluster; later ones join until the leader sees them.
                let state = if self.nodes.is_empty() {
                    NodeState::Up
                } else {
                    NodeState::Joining
                };
                self.nodes.insert(
                    id,
                    NodeRecord {
                        id,
                        name: name.clone(),
                        region: region.clone(),
                        api_addr: api_addr.clone(),
                        peer_addr: peer_addr.clone(),
                        state,
                        capacity: (*capacity).max(1),
                        key_id: key_id.clone(),
                        secrets_keys: Vec::new(),
                        max_sandboxes: None,
                        full: false,
                    },
                );
                CommandResult::Registered { node: id }
            }
            Command::SetNodeState { node, state } => match self.nodes.get_mut(node) {
                Some(n) => {
                    n.state = *state;
                    CommandResult::Done
                }
                None => CommandResult::Rejected {
                    reason: format!("no node {node}"),
                },
            },
            Command::RemoveNode { node } => {
                // Without nodes no voter is left to commit anything again, ever.
                if let (1, Some(last)) = (self.nodes.len(), self.nodes.get(node)) {
                    return CommandResult::Rejected {
                        reason: format!("{} is the cluster's last node", last.name),
                    };
                }
                self.nodes.remove(node);
                CommandResult::Done
            }
            Command::Place {
                sandbox,
                node,
                expected_epoch,
                tenant,
                size,
            } => {
                let current = self.placements.get(sandbox).map(|p| p.epoch).unwrap_or(0);
                if current != *expected_epoch {
                    return CommandResult::Placement {
                        placement: self.placements.get(sandbox).cloned(),
                        applied: false,
                    };
                }
                if !self.nodes.contains_key(node) {
                    return CommandResult::Rejected {
                        reason: format!("no node {node}"),
                    };
                }
                let existing = self.placements.get(sandbox);
                // A new sandbox must fit its tenant's quota (decided here, in log order, so
                // that concurrent creators on many nodes never overshoot it together).
                if existing.is_none() {
                    if let Some(t) = tenant {
                        if let Some(reason) = self.quota_refusal(t, size.unwrap_or_default()) {
                            return CommandResult::Rejected { reason };
                        }
                    }
                }
                let existing = self.placements.get(sandbox);
                let size = existing.and_then(|p| p.size).or(*size);
                let tenant = existing
                    .and_then(|p| p.tenant.clone())
                    .or_else(|| tenant.clone());
                // Placed again on the node it was on (its first choice was unreachable and
                // it comes back): that node's copy, if any, is still current.
                // A new incarnation numbers on from every deleted one's epochs.
                let epoch = match existing {
                    Some(_) => current + 1,
                    None => self.retired_epoch + 1,
                };
                let owner_since = match existing {
                    Some(p) if p.node == *node => p.owner_since,
                    _ => epoch,
                };
                let p = Placement {
                    sandbox: sandbox.clone(),
                    node: *node,
                    epoch,
                    owner_since,
                    state: PlacementState::Active,
                    handoff: None,
                    egress: None,
                    tenant,
                    size,
                };
                self.placements.insert(sandbox.clone(), p.clone());
                CommandResult::Placement {
                    placement: Some(p),
                    applied: true,
                }
            }
            Command::Unplace { sandbox, epoch } => {
                if self
                    .placements
                    .get(sandbox)
                    .is_some_and(|p| p.epoch == *epoch)
                {
                    self.placements.remove(sandbox);
                    self.retired_epoch = self.retired_epoch.max(*epoch);
                }
                CommandResult::Done
            }
            Command::BeginMove { sandbox, epoch } => self.change(sandbox, *epoch, |p| {
                p.state = PlacementState::Migrating;
                p.epoch += 1;
            }),
            Command::Move {
                sandbox,
                expected_epoch,
                node,
                handoff,
            } => {
                if !self.nodes.contains_key(node) {
                    return CommandResult::Rejected {
                        reason: format!("no node {node}"),
                    };
                }
                self.change(sandbox, *expected_epoch, |p| {
                    if p.node != *node {
                        p.owner_since = p.epoch + 1;
                    }
                    p.node = *node;
                    p.state = PlacementState::Active;
                    p.epoch += 1;
                    if handoff.is_some() {
                        p.handoff = handoff.clone();
                    }
                })
            }
            Command::Checkpoint {
                sandbox,
                epoch,
                handoff,
            } => self.change(sandbox, *epoch, |p| p.handoff = Some(handoff.clone())),
            Command::SetEgress {
                sandbox,
                epoch,
                policy,
            } => self.change(sandbox, *epoch, |p| p.egress = Some(policy.clone())),
            Command::PutSecret { name, sealed, at } => {
                let created_at = self
                    .secrets
                    .get(name)
                    .map_or_else(|| at.clone(), |r| r.created_at.clone());
                self.secrets.insert(
                    name.clone(),
                    SecretRecord {
                        sealed: sealed.clone(),
                        created_at,
                        updated_at: at.clone(),
                    },
                );
                CommandResult::Done
            }
            Command::ResealSecret { name, from, sealed } => {
                if let Some(r) = self.secrets.get_mut(name).filter(|r| r.sealed == *from) {
                    r.sealed = sealed.clone();
                }
                CommandResult::Done
            }
            Command::SetSecretsKeys { node, keys } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    n.secrets_keys = keys.clone();
                }
                CommandResult::Done
            }
            Command::SetNodeLimits {
                node,
                max_sandboxes,
                full,
            } => {
                if let Some(n) = self.nodes.get_mut(node) {
                    n.max_sandboxes = Some(*max_sandboxes);
                    n.full = *full;
                }
                CommandResult::Done
            }
            Command::SetAddresses {
                node,
                api_addr,
                peer_addr,
            } => match self.nodes.get_mut(node) {
                Some(n) => {
                    n.api_addr = api_addr.clone();
                    n.peer_addr = peer_addr.clone();
                    CommandResult::Done
                }
                None => CommandResult::Rejected {
                    reason: format!("node {node} is not a member"),
                },
            },
            Command::DeleteSecret { name } => {
                self.secrets.remove(name);
                CommandResult::Done
            }
            Command::CreateKey { id, key } => {
                if self.keys.contains_key(id) {
                    return CommandResult::Rejected {
                        reason: format!("key {id} exists"),
                    };
                }
                self.keys.insert(id.clone(), key.clone());
                CommandResult::Done
            }
            Command::RevokeKey { id } => {
                self.keys.remove(id);
                CommandResult::Done
            }
            Command::CreateJoinToken { id, token, now_ms } => {
                match crate::join_tokens::create(&mut self.join_tokens, id, token, *now_ms) {
                    Ok(()) => CommandResult::Done,
                    Err(reason) => CommandResult::Rejected { reason },
                }
            }
            Command::RevokeJoinToken { id } => {
                self.join_tokens.remove(id);
                CommandResult::Done
            }
            Command::SetClusterTokenJoins { allowed } => {
                self.cluster_token_off = !allowed;
                CommandResult::Done
            }
            Command::SetQuota { tenant, quota } => {
                if *quota == Quota::default() {
                    self.quotas.remove(tenant);
                } else {
                    self.quotas.insert(tenant.clone(), quota.clone());
                }
                CommandResult::Done
            }
            Command::TouchKeys { used } => {
                for (id, at) in used {
                    if let Some(k) = self.keys.get_mut(id) {
                        // RFC 3339 in UTC with the same precision: text order is time order.
                        if k.last_used_at.as_ref().is_none_or(|old| old < at) {
                            k.last_used_at = Some(at.clone());
                        }
                    }
                }
                CommandResult::Done
            }
        }
    }

    /// Applies `f` to the placement of `sandbox` if its epoch is `epoch`.
    fn change(
        &mut self,
        sandbox: &str,
        epoch: u64,
        f: impl FnOnce(&mut Placement),
    ) -> CommandResult {
        match self.placements.get(sandbox) {
            Some(p) if p.epoch == epoch => {
                let p = self.placements.update(sandbox, f).cloned();
                CommandResult::Placement {
                    placement: p,
                    applied: true,
                }
            }
            other => CommandResult::Placement {
                placement: other.cloned(),
                applied: false,
            },
        }
    }
}

impl NodeRecord {
    /// An up node `n<id>` of `region` with capacity 1 and no addresses, keys or limit: what
    /// placement decisions read, for tests, benchmarks and simulations of them.
    pub fn placeable(id: NodeId, region: &str) -> NodeRecord {
        NodeRecord {
            id,
            name: format!("n{id}"),
            region: region.into(),
            api_addr: String::new(),
            peer_addr: String::new(),
            state: NodeState::Up,
            capacity: 1,
            key_id: String::new(),
            secrets_keys: Vec::new(),
            max_sandboxes: None,
            full: false,
        }
    }
}

/// A node record for tests.
#[cfg(test)]
pub(crate) fn test_node(id: NodeId, region: &str, state: NodeState) -> NodeRecord {
    NodeRecord {
        state,
        ..NodeRecord::placeable(id, region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg_with(name: &str, key_id: &str) -> Command {
        Command::Register {
            name: name.into(),
            region: "r".into(),
            api_addr: "a".into(),
            peer_addr: "p".into(),
            capacity: 1,
            key_id: key_id.into(),
            join_token: None,
        }
    }

    fn reg(name: &str) -> Command {
        reg_with(name, &format!("key-{name}"))
    }

    /// Places sandbox "x" on `node` if its epoch is `expected_epoch`.
    fn place(node: NodeId, expected_epoch: u64) -> Command {
        Command::Place {
            sandbox: "x".into(),
            node,
            expected_epoch,
            tenant: None,
            size: None,
        }
    }

    fn judged(node: NodeId, from: NodeState, to: NodeState, term: u64) -> Command {
        Command::Liveness {
            node,
            from,
            to,
            term,
        }
    }

    #[test]
    fn a_liveness_judgement_counts_only_in_the_term_it_was_made_in() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Up;
        // A leader of term 3 judged node 1 down, was deposed, and its entry was carried
        // into term 4 (forwarded, or re-proposed): it must not count.
        let stale = judged(1, NodeState::Up, NodeState::Down, 3);
        assert!(matches!(
            s.apply_entry(&stale, 4),
            CommandResult::Rejected { .. }
        ));
        assert_eq!(s.nodes[&1].state, NodeState::Up);
        assert_eq!(s.apply_entry(&stale, 3), CommandResult::Done);
        assert_eq!(s.nodes[&1].state, NodeState::Down);
        // Without its entry's term, a judgement is never applied.
        let back = judged(1, NodeState::Down, NodeState::Up, 5);
        assert!(matches!(s.apply(&back), CommandResult::Rejected { .. }));
        assert_eq!(s.nodes[&1].state, NodeState::Down);
    }

    #[test]
    fn a_liveness_judgement_applies_only_from_the_state_it_was_judged_in() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Down;
        // The operator drains the node while the leader's "back up" is in flight.
        s.apply(&Command::SetNodeState {
            node: 1,
            state: NodeState::Draining,
        });
        let up = judged(1, NodeState::Down, NodeState::Up, 2);
        assert!(matches!(
            s.apply_entry(&up, 2),
            CommandResult::Rejected { .. }
        ));
        assert_eq!(s.nodes[&1].state, NodeState::Draining);
        assert!(matches!(
            s.apply_entry(&judged(9, NodeState::Up, NodeState::Down, 2), 2),
            CommandResult::Rejected { .. }
        ));
    }

    #[test]
    fn the_last_node_is_never_removed() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        assert_eq!(
            s.apply(&Command::RemoveNode { node: 2 }),
            CommandResult::Done
        );
        // A cluster of no nodes has no Raft voter left to commit anything, ever.
        assert!(matches!(
            s.apply(&Command::RemoveNode { node: 1 }),
            CommandResult::Rejected { .. }
        ));
        assert!(s.nodes.contains_key(&1));
        // A node that is not there: nothing to do.
        assert_eq!(
            s.apply(&Command::RemoveNode { node: 7 }),
            CommandResult::Done
        );
    }

    #[test]
    fn a_member_moves_to_other_addresses_and_only_a_member_does() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        let moved = |node| Command::SetAddresses {
            node,
            api_addr: "10.0.0.2:7070".into(),
            peer_addr: "10.0.0.2:7071".into(),
        };
        assert_eq!(s.apply(&moved(2)), CommandResult::Done);
        let b = &s.nodes[&2];
        assert_eq!(
            (b.api_addr.as_str(), b.peer_addr.as_str(), b.state),
            ("10.0.0.2:7070", "10.0.0.2:7071", NodeState::Joining),
            "only its addresses change"
        );
        assert_ne!(s.nodes[&1].peer_addr, "10.0.0.2:7071");
        assert!(matches!(s.apply(&moved(9)), CommandResult::Rejected { .. }));
        assert!(
            !s.nodes.contains_key(&9),
            "no record is made for a stranger"
        );
    }

    #[test]
    fn registration_is_idempotent_for_the_same_key_and_ids_are_never_reused() {
        let mut s = ClusterState::default();
        assert_eq!(s.apply(&reg("a")), CommandResult::Registered { node: 1 });
        assert_eq!(s.apply(&reg("b")), CommandResult::Registered { node: 2 });
        assert_eq!(
            (s.nodes[&1].state, s.nodes[&2].state),
            (NodeState::Up, NodeState::Joining),
            "joiners get no placements yet"
        );
        assert_eq!(s.apply(&reg("a")), CommandResult::Registered { node: 1 });
        s.apply(&Command::RemoveNode { node: 2 });
        assert_eq!(s.apply(&reg("c")), CommandResult::Registered { node: 3 });
        // A removed name joins again under a new id, never its old one.
        assert_eq!(s.apply(&reg("b")), CommandResult::Registered { node: 4 });
    }

    #[test]
    fn with_the_cluster_token_off_only_members_and_issued_tokens_register() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        assert_eq!(
            s.apply(&Command::SetClusterTokenJoins { allowed: false }),
            CommandResult::Done
        );
        match s.apply(&reg("c")) {
            CommandResult::Rejected { reason } => assert!(
                reason.starts_with(crate::join_tokens::JOIN_TOKEN_REFUSED),
                "{reason}"
            ),
            other => panic!("the cluster token admitted a node after it was turned off: {other:?}"),
        }
        assert!(s.node_by_name("c").is_none());
        // A member asking again with its own key is no new admission.
        assert_eq!(s.apply(&reg("b")), CommandResult::Registered { node: 2 });
        s.apply(&Command::SetClusterTokenJoins { allowed: true });
        assert_eq!(s.apply(&reg("c")), CommandResult::Registered { node: 3 });
    }

    #[test]
    fn a_single_use_join_token_is_spent_by_the_registration_it_admits() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        let token = crate::join_tokens::JoinTokenRecord {
            sealed: crate::secrets::Sealed {
                key_id: "k".into(),
                nonce: String::new(),
                ciphertext: String::new(),
            },
            single_use: true,
            name: None,
            created_at: "t0".into(),
            expires_at: "t1".into(),
            expires_at_ms: 1_000,
            used_by: vec![],
        };
        let create = Command::CreateJoinToken {
            id: "t".into(),
            token,
            now_ms: 0,
        };
        assert_eq!(s.apply(&create), CommandResult::Done);
        let with_token = |name: &str, now_ms: u64| match reg(name) {
            Command::Register {
                name,
                region,
                api_addr,
                peer_addr,
                capacity,
                key_id,
                ..
            } => Command::Register {
                name,
                region,
                api_addr,
                peer_addr,
                capacity,
                key_id,
                join_token: Some(crate::join_tokens::TokenSpend {
                    id: "t".into(),
                    now_ms,
                }),
            },
            _ => unreachable!(),
        };
        assert_eq!(
            s.apply(&with_token("b", 10)),
            CommandResult::Registered { node: 2 }
        );
        // The same node asking again (its answer lost) gets its id back.
        assert_eq!(
            s.apply(&with_token("b", 20)),
            CommandResult::Registered { node: 2 }
        );
        match s.apply(&with_token("c", 20)) {
            CommandResult::Rejected { reason } => assert!(
                reason.starts_with(crate::join_tokens::JOIN_TOKEN_REFUSED),
                "{reason}"
            ),
            other => panic!("a spent token admitted another node: {other:?}"),
        }
        assert!(s.node_by_name("c").is_none());
        assert_eq!(s.next_node_id, 3, "a refused registration takes no id");
        s.apply(&Command::RevokeJoinToken { id: "t".into() });
        assert!(s.join_tokens.is_empty());
    }

    #[test]
    fn a_members_name_cannot_be_registered_with_another_key() {
        let mut s = ClusterState::default();
        s.apply(&reg("leader"));
        for key in ["someone-else", ""] {
            match s.apply(&reg_with("leader", key)) {
                CommandResult::Rejected { reason } => {
                    assert!(reason.starts_with(NAME_TAKEN), "{reason}")
                }
                other => panic!("registered over a member: {other:?}"),
            }
        }
        assert_eq!(s.nodes.len(), 1);
    }

    #[test]
    fn owner_since_moves_with_the_owner_and_not_with_a_move_that_stays() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        s.apply(&Command::Place {
            sandbox: "x".into(),
            node: 1,
            expected_epoch: 0,
            tenant: None,
            size: None,
        });
        assert_eq!(s.placements["x"].owner_since, 1);
        // A move that begins and is taken back stays on node 1: its copy is still current.
        s.apply(&Command::BeginMove {
            sandbox: "x".into(),
            epoch: 1,
        });
        let back = |node, expected_epoch| Command::Move {
            sandbox: "x".into(),
            expected_epoch,
            node,
            handoff: None,
        };
        s.apply(&back(1, 2));
        assert_eq!(
            (s.placements["x"].epoch, s.placements["x"].owner_since),
            (3, 1)
        );
        // Failed over to node 2, then back to 1: a copy 1 kept from epoch 1 is stale.
        s.apply(&back(2, 3));
        assert_eq!(
            (s.placements["x"].epoch, s.placements["x"].owner_since),
            (4, 4)
        );
        s.apply(&back(1, 4));
        assert_eq!(
            (s.placements["x"].epoch, s.placements["x"].owner_since),
            (5, 5)
        );
        // A checkpoint changes neither.
        s.apply(&Command::Checkpoint {
            sandbox: "x".into(),
            epoch: 5,
            handoff: Handoff {
                record: "{}".into(),
                snapshot: None,
                resume: true,
            },
        });
        assert_eq!(
            (s.placements["x"].epoch, s.placements["x"].owner_since),
            (5, 5)
        );
    }

    #[test]
    fn a_sandbox_created_again_after_a_delete_starts_above_every_epoch_it_had_before() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        s.apply(&place(1, 0));
        // Failed over to 2 and back to 1: the first incarnation reached epoch 3.
        for (node, e) in [(2, 1), (1, 2)] {
            s.apply(&Command::Move {
                sandbox: "x".into(),
                expected_epoch: e,
                node,
                handoff: None,
            });
        }
        let old = s.placements["x"].clone();
        assert_eq!((old.epoch, old.owner_since), (3, 3));
        s.apply(&Command::Unplace {
            sandbox: "x".into(),
            epoch: 3,
        });
        // Created again under the same id, on the same node: a copy node 1 kept from the
        // deleted incarnation (stamped 3) must be older than the new owner_since.
        s.apply(&place(1, 0));
        let new = &s.placements["x"];
        assert!(
            new.owner_since > old.epoch && new.epoch > old.epoch,
            "the new incarnation starts at epoch {} (owner since {}), not above the deleted one's {}",
            new.epoch,
            new.owner_since,
            old.epoch
        );
        // The floor survives a snapshot of the state.
        let copy: ClusterState = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(copy, s);
    }

    #[test]
    fn placement_is_compare_and_set_on_the_epoch() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        let first = s.apply(&place(1, 0));
        assert_eq!(
            first,
            CommandResult::Placement {
                placement: Some(Placement {
                    sandbox: "x".into(),
                    node: 1,
                    epoch: 1,
                    owner_since: 1,
                    state: PlacementState::Active,
                    handoff: None,
                    egress: None,
                    tenant: None,
                    size: None,
                }),
                applied: true
            }
        );
        // A concurrent second creator loses and learns the winner.
        let second = s.apply(&place(2, 0));
        assert_eq!(
            second,
            CommandResult::Placement {
                placement: Some(Placement {
                    sandbox: "x".into(),
                    node: 1,
                    epoch: 1,
                    owner_since: 1,
                    state: PlacementState::Active,
                    handoff: None,
                    egress: None,
                    tenant: None,
                    size: None,
                }),
                applied: false
            }
        );
        // A move names the epoch it saw.
        assert!(matches!(
            s.apply(&place(2, 1)),
            CommandResult::Placement { applied: true, .. }
        ));
        assert_eq!(s.placements["x"].epoch, 2);
        s.apply(&Command::Unplace {
            sandbox: "x".into(),
            epoch: 1,
        });
        assert!(s.placements.contains_key("x"), "a stale unplace is ignored");
        s.apply(&Command::Unplace {
            sandbox: "x".into(),
            epoch: 2,
        });
        assert!(!s.placements.contains_key("x"));
        assert!(matches!(
            s.apply(&place(9, 0)),
            CommandResult::Rejected { .. }
        ));
    }

    #[test]
    fn a_placements_tenant_is_set_once_and_survives_replacement() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        let place = |node, expected_epoch, tenant: &str| Command::Place {
            sandbox: "x".into(),
            node,
            expected_epoch,
            tenant: Some(tenant.into()),
            size: None,
        };
        s.apply(&place(1, 0, "acme"));
        assert_eq!(s.placements["x"].tenant(), "acme");
        // Placed elsewhere (its first node was unreachable): still acme's, whoever asks.
        s.apply(&place(2, 1, "mallory"));
        assert_eq!(
            (s.placements["x"].node, s.placements["x"].tenant()),
            (2, "acme")
        );
        let old: Placement = serde_json::from_str(r#"{"sandbox":"y","node":1,"epoch":1}"#).unwrap();
        assert_eq!(old.tenant(), warren_api::keys::DEFAULT_TENANT);
    }

    #[test]
    fn a_tenants_new_sandboxes_are_refused_past_its_quota_in_log_order() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        let size = Size {
            millicpus: 1000,
            memory_mb: 512,
        };
        let place = |id: &str, tenant: &str, expected_epoch| Command::Place {
            sandbox: id.into(),
            node: 1,
            expected_epoch,
            tenant: Some(tenant.into()),
            size: Some(size),
        };
        s.apply(&Command::SetQuota {
            tenant: "acme".into(),
            quota: Quota {
                max_sandboxes: Some(3),
                max_millicpus: Some(2500),
                max_memory_mb: None,
                max_snapshot_bytes: None,
            },
        });
        for id in ["x1", "x2"] {
            assert!(matches!(
                s.apply(&place(id, "acme", 0)),
                CommandResult::Placement { applied: true, .. }
            ));
        }
        // A third of 1 CPU would make 3000 millicpus of 2500.
        match s.apply(&place("x3", "acme", 0)) {
            CommandResult::Rejected { reason } => {
                assert!(
                    reason.starts_with(QUOTA_EXCEEDED) && reason.contains("CPU"),
                    "{reason}"
                )
            }
            other => panic!("placed past the quota: {other:?}"),
        }
        assert!(!s.placements.contains_key("x3"));
        // Another tenant is not held by acme's quota; re-placing a sandbox is not a new one.
        assert!(matches!(
            s.apply(&place("y1", "other", 0)),
            CommandResult::Placement { applied: true, .. }
        ));
        assert!(matches!(
            s.apply(&place("x1", "acme", 1)),
            CommandResult::Placement { applied: true, .. }
        ));
        assert_eq!(s.tenant_use("acme").sandboxes, 2);
        assert_eq!(s.tenant_use("acme").size.millicpus, 2000);
        // A deleted sandbox frees its share; a cleared quota is no limit.
        s.apply(&Command::Unplace {
            sandbox: "x2".into(),
            epoch: 1,
        });
        assert!(matches!(
            s.apply(&place("x3", "acme", 0)),
            CommandResult::Placement { applied: true, .. }
        ));
        s.apply(&Command::SetQuota {
            tenant: "acme".into(),
            quota: Quota::default(),
        });
        assert!(s.quotas.is_empty());
        assert!(matches!(
            s.apply(&place("x4", "acme", 0)),
            CommandResult::Placement { applied: true, .. }
        ));
    }

    #[test]
    fn a_tenants_memory_quota_refuses_the_sandbox_that_would_pass_it() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        let place = |id: &str, memory_mb| Command::Place {
            sandbox: id.into(),
            node: 1,
            expected_epoch: 0,
            tenant: Some("acme".into()),
            size: Some(Size {
                millicpus: 250,
                memory_mb,
            }),
        };
        s.apply(&Command::SetQuota {
            tenant: "acme".into(),
            quota: Quota {
                max_memory_mb: Some(2048),
                ..Quota::default()
            },
        });
        // 1024 + 1024 fills the 2048 MB exactly: allowed.
        for id in ["m1", "m2"] {
            assert!(matches!(
                s.apply(&place(id, 1024)),
                CommandResult::Placement { applied: true, .. }
            ));
        }
        // One more MB is past it, whatever the CPU and the count of sandboxes.
        match s.apply(&place("m3", 1)) {
            CommandResult::Rejected { reason } => assert!(
                reason.starts_with(QUOTA_EXCEEDED)
                    && reason.contains("memory")
                    && reason.contains("2048 MB"),
                "{reason}"
            ),
            other => panic!("placed past the memory quota: {other:?}"),
        }
        assert!(!s.placements.contains_key("m3"));
        assert_eq!(s.tenant_use("acme").size.memory_mb, 2048);
    }

    #[test]
    fn keys_are_created_once_revoked_and_touched_forward_only() {
        let mut s = ClusterState::default();
        let key = KeyRecord {
            hash: "h".into(),
            tenant: "acme".into(),
            scope: warren_api::keys::KeyScope::Tenant,
            name: None,
            created_at: "2026-01-01T00:00:00Z".into(),
            last_used_at: None,
        };
        let create = Command::CreateKey {
            id: "k1".into(),
            key: key.clone(),
        };
        assert_eq!(s.apply(&create), CommandResult::Done);
        assert!(matches!(s.apply(&create), CommandResult::Rejected { .. }));
        let touch = |at: &str| Command::TouchKeys {
            used: vec![("k1".into(), at.into()), ("gone".into(), at.into())],
        };
        s.apply(&touch("2026-01-02T00:00:00Z"));
        s.apply(&touch("2026-01-01T12:00:00Z"));
        assert_eq!(
            s.keys["k1"].last_used_at.as_deref(),
            Some("2026-01-02T00:00:00Z"),
            "an older report does not move it back"
        );
        assert!(!s.keys.contains_key("gone"), "a touch never makes a key");
        s.apply(&Command::RevokeKey { id: "k1".into() });
        assert!(s.keys.is_empty());
        s.apply(&touch("2026-01-03T00:00:00Z"));
        assert!(
            s.keys.is_empty(),
            "a late touch does not bring a revoked key back"
        );
    }

    #[test]
    fn secret_slots_keep_tenants_apart_and_the_default_tenant_where_it_was() {
        assert_eq!(secret_slot("default", "tok"), "tok");
        assert_eq!(secret_slot("acme", "tok"), "acme/tok");
        assert_eq!(slot_owner("acme/tok"), ("acme", "tok"));
        assert_eq!(slot_owner("tok"), ("default", "tok"));
    }

    #[test]
    fn moves_are_fenced_by_the_epoch_and_carry_the_handoff() {
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        s.apply(&Command::Place {
            sandbox: "x".into(),
            node: 1,
            expected_epoch: 0,
            tenant: None,
            size: None,
        });
        let h = Handoff {
            record: "{}".into(),
            snapshot: Some("snap-1".into()),
            resume: true,
        };
        let cp = |epoch| Command::Checkpoint {
            sandbox: "x".into(),
            epoch,
            handoff: h.clone(),
        };
        assert!(matches!(
            s.apply(&cp(7)),
            CommandResult::Placement { applied: false, .. }
        ));
        assert!(matches!(
            s.apply(&cp(1)),
            CommandResult::Placement { applied: true, .. }
        ));
        assert_eq!(s.placements["x"].epoch, 1, "a checkpoint does not fence");
        // The policy set after the checkpoint: by the current owner's epoch only, kept by
        // later checkpoints and moves.
        let egress = |epoch, policy: &str| Command::SetEgress {
            sandbox: "x".into(),
            epoch,
            policy: policy.into(),
        };
        assert!(matches!(
            s.apply(&egress(0, "{}")),
            CommandResult::Placement { applied: false, .. }
        ));
        assert_eq!(s.placements["x"].egress, None);
        s.apply(&egress(1, r#"{"default":"deny"}"#));
        s.apply(&cp(1));
        assert_eq!(
            s.placements["x"].epoch, 1,
            "setting a policy does not fence"
        );
        assert_eq!(
            s.placements["x"].egress.as_deref(),
            Some(r#"{"default":"deny"}"#)
        );
        s.apply(&Command::BeginMove {
            sandbox: "x".into(),
            epoch: 1,
        });
        assert_eq!(s.placements["x"].state, PlacementState::Migrating);
        let mv = |expected_epoch| Command::Move {
            sandbox: "x".into(),
            expected_epoch,
            node: 2,
            handoff: None,
        };
        assert!(matches!(
            s.apply(&mv(1)),
            CommandResult::Placement { applied: false, .. }
        ));
        assert!(matches!(
            s.apply(&mv(2)),
            CommandResult::Placement { applied: true, .. }
        ));
        let p = &s.placements["x"];
        assert_eq!((p.node, p.epoch, p.state), (2, 3, PlacementState::Active));
        assert_eq!(
            p.handoff.as_ref(),
            Some(&h),
            "the last checkpoint travels with it"
        );
    }

    #[test]
    fn a_replaced_secret_keeps_its_creation_time_and_a_delete_is_idempotent() {
        let key = crate::secrets::SecretsKey::generate();
        let mut s = ClusterState::default();
        let put = |v: &str, at: &str| Command::PutSecret {
            name: "gh".into(),
            sealed: key.seal("gh", v),
            at: at.into(),
        };
        s.apply(&put("one", "2026-01-01T00:00:00Z"));
        s.apply(&put("two", "2026-02-01T00:00:00Z"));
        let r = &s.secrets["gh"];
        assert_eq!(r.created_at, "2026-01-01T00:00:00Z");
        assert_eq!(r.updated_at, "2026-02-01T00:00:00Z");
        assert_eq!(key.open("gh", &r.sealed).unwrap(), "two");
        let del = Command::DeleteSecret { name: "gh".into() };
        assert_eq!(s.apply(&del), CommandResult::Done);
        assert_eq!(s.apply(&del), CommandResult::Done);
        assert!(s.secrets.is_empty());
    }

    #[test]
    fn secrets_are_resealed_only_once_every_member_holds_the_new_key_and_only_if_unchanged() {
        let old = crate::secrets::SecretsKey::generate();
        let new = crate::secrets::SecretsKey::generate();
        let mut s = ClusterState::default();
        s.apply(&reg("a"));
        s.apply(&reg("b"));
        s.apply(&Command::PutSecret {
            name: "gh".into(),
            sealed: old.seal("gh", "v1"),
            at: "2026-01-01T00:00:00Z".into(),
        });
        let keys = |node, ids: &[&str]| Command::SetSecretsKeys {
            node,
            keys: ids.iter().map(|s| s.to_string()).collect(),
        };
        s.apply(&keys(1, &[new.current_id(), old.current_id()]));
        assert!(s.to_reseal(new.current_id()).is_empty(), "b lacks the key");
        s.apply(&keys(2, &[new.current_id(), old.current_id()]));
        assert_eq!(s.to_reseal(new.current_id()), vec!["gh".to_string()]);
        assert!(s.to_reseal(old.current_id()).is_empty(), "sealed under it");
        // A reseal made from a value that was replaced meanwhile is not applied.
        let from = s.secrets["gh"].sealed.clone();
        s.apply(&Command::PutSecret {
            name: "gh".into(),
            sealed: old.seal("gh", "v2"),
            at: "2026-02-01T00:00:00Z".into(),
        });
        s.apply(&Command::ResealSecret {
            name: "gh".into(),
            from: from.clone(),
            sealed: new.seal("gh", "v1"),
        });
        assert_eq!(old.open("gh", &s.secrets["gh"].sealed).unwrap(), "v2");
        let from = s.secrets["gh"].sealed.clone();
        s.apply(&Command::ResealSecret {
            name: "gh".into(),
            from,
            sealed: new.seal("gh", "v2"),
        });
        let r = &s.secrets["gh"];
        assert_eq!(r.sealed.key_id, new.current_id());
        assert_eq!(new.open("gh", &r.sealed).unwrap(), "v2");
        assert_eq!(
            r.updated_at, "2026-02-01T00:00:00Z",
            "a reseal is no update"
        );
        assert!(s.to_reseal(new.current_id()).is_empty());
    }
}
