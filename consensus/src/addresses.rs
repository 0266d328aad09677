//! A member that starts on other addresses than it registered (a moved machine, a backup
//! restored on a new one) says so itself, and the leader points Raft at the new peer
//! address. The decisions are pure (`update_for`, `stale_members`); the keeper below
//! carries them out.
//!
//! The node cannot wait for the leader to find it: the leader sends to the old address. So
//! it offers its command to every member it knows until the leader takes it (the leader
//! checks, from the caller's certificate, that a node moves only itself).

use crate::cluster::Cluster;
use crate::rpc::{Reply, Request};
use crate::state::{Command, CommandResult, NodeId, NodeRecord};
use crate::types::Peer;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// How often a node compares its registered addresses with its configured ones.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Cluster {
    /// Starts keeping this node's registered addresses in line with its configuration.
    pub(crate) fn start_address_keeper(self: &Arc<Self>) {
        let me = self.clone();
        self.spawn_owned(async move {
            while !me.is_stopping() {
                tokio::time::sleep(CHECK_EVERY).await;
                if me.superseded().is_some() {
                    continue;
                }
                let record = me.read(|s| s.nodes.get(&me.id).cloned());
                let Some(cmd) =
                    update_for(me.id, record.as_ref(), &me.cfg.api_addr, &me.cfg.peer_addr)
                else {
                    continue;
                };
                match me.offer_own_command(cmd).await {
                    Ok(()) => tracing::info!(
                        api_addr = %me.cfg.api_addr,
                        peer_addr = %me.cfg.peer_addr,
                        "this node's new addresses are committed"
                    ),
                    Err(why) => {
                        tracing::info!(%why, "this node's new addresses are not committed yet")
                    }
                }
            }
        });
    }

    /// Commits a command about this node itself: directly as leader, otherwise through
    /// whichever member leads (each other member is asked in turn; only the leader takes it).
    async fn offer_own_command(&self, cmd: Command) -> Result<(), String> {
        if self.is_leader() {
            return match self.propose(cmd).await {
                Ok(CommandResult::Rejected { reason }) => Err(reason),
                Ok(_) => Ok(()),
                Err(e) => Err(e.to_string()),
            };
        }
        let mut why = Vec::new();
        // Down ones too: this node's view may be older than theirs.
        for (id, name, addr) in self.others_leader_first(|_| false) {
            let req = Request::Propose(cmd.clone());
            match self
                .call_member(&addr, &name, req, Duration::from_secs(5))
                .await
            {
                Ok(Reply::Proposed(Ok(p))) => {
                    return match p.result {
                        CommandResult::Rejected { reason } => Err(reason),
                        _ => Ok(()),
                    }
                }
                Ok(Reply::Proposed(Err(e))) => why.push(format!("node {id}: {e}")),
                Ok(other) => why.push(format!("node {id}: {other:?}")),
                Err(e) => why.push(format!("node {id}: {e}")),
            }
        }
        if why.is_empty() {
            why.push("no other member is known".into());
        }
        Err(why.join("; "))
    }
}

/// The command that brings member `node`'s registered addresses in line with the ones it is
/// configured with now; none when they agree or it is not (or no longer) registered.
pub fn update_for(
    node: NodeId,
    record: Option<&NodeRecord>,
    api_addr: &str,
    peer_addr: &str,
) -> Option<Command> {
    let r = record?;
    (r.api_addr != api_addr || r.peer_addr != peer_addr).then(|| Command::SetAddresses {
        node,
        api_addr: api_addr.to_string(),
        peer_addr: peer_addr.to_string(),
    })
}

/// The Raft member entries that no longer say where their node is: each member whose
/// registered peer address differs from the one Raft sends to, with the entry to set.
/// Members that are not registered (being removed) are left to removal.
pub fn stale_members<'a>(
    members: impl IntoIterator<Item = (&'a NodeId, &'a Peer)>,
    records: &BTreeMap<NodeId, NodeRecord>,
) -> BTreeMap<NodeId, Peer> {
    members
        .into_iter()
        .filter_map(|(id, peer)| {
            let r = records.get(id)?;
            (r.peer_addr != peer.peer_addr).then(|| {
                (
                    *id,
                    Peer {
                        name: r.name.clone(),
                        peer_addr: r.peer_addr.clone(),
                    },
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: NodeId, api: &str, peer: &str) -> NodeRecord {
        NodeRecord {
            api_addr: api.into(),
            peer_addr: peer.into(),
            ..NodeRecord::placeable(id, "r")
        }
    }

    #[test]
    fn a_member_proposes_only_addresses_that_changed() {
        let r = record(2, "a:1", "a:2");
        assert_eq!(update_for(2, Some(&r), "a:1", "a:2"), None);
        assert_eq!(update_for(2, None, "b:1", "b:2"), None, "not a member");
        for (api, peer) in [("b:1", "a:2"), ("a:1", "b:2"), ("b:1", "b:2")] {
            assert_eq!(
                update_for(2, Some(&r), api, peer),
                Some(Command::SetAddresses {
                    node: 2,
                    api_addr: api.into(),
                    peer_addr: peer.into(),
                })
            );
        }
    }

    #[test]
    fn raft_entries_follow_registered_peer_addresses() {
        let records: BTreeMap<NodeId, NodeRecord> = [
            record(1, "a:1", "a:2"),
            record(2, "b:1", "b:9"),
            record(3, "c:9", "c:2"),
        ]
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
        let peer = |id: NodeId, addr: &str| Peer {
            name: format!("n{id}"),
            peer_addr: addr.into(),
        };
        let members = BTreeMap::from([
            (1, peer(1, "a:2")),
            (2, peer(2, "b:2")),
            // Only the API address moved: Raft does not use it.
            (3, peer(3, "c:2")),
            // Being removed: not registered any more.
            (4, peer(4, "d:2")),
        ]);
        assert_eq!(
            stale_members(&members, &records),
            BTreeMap::from([(2, peer(2, "b:9"))])
        );
    }
}
