//! The placements of the state machine, with the indexes the per-node loops and quota checks
//! read: by node, by tenant (use summed) and by recovery snapshot. Every change goes through
//! this type, so the indexes always match the placements.
//!
//! The maps are persistent (`imbl`): cloning the whole set is O(1) and shares structure, so a
//! Raft snapshot takes a copy under the state lock in constant time and serializes it after
//! the lock is released, and a reader never waits for a snapshot being written.

use crate::state::{NodeId, Placement, TenantUse};
use imbl::{OrdMap, OrdSet};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

#[derive(Clone, Default)]
pub struct Placements {
    by_id: OrdMap<String, Placement>,
    by_node: OrdMap<NodeId, OrdSet<String>>,
    by_tenant: OrdMap<String, TenantUse>,
    /// How many placements name each snapshot as their recovery point.
    snapshots: OrdMap<String, u32>,
}

impl Placements {
    pub fn get(&self, sandbox: &str) -> Option<&Placement> {
        self.by_id.get(sandbox)
    }

    pub fn contains_key(&self, sandbox: &str) -> bool {
        self.by_id.contains_key(sandbox)
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// All placements, in id order.
    pub fn values(&self) -> impl Iterator<Item = &Placement> {
        self.by_id.values()
    }

    /// All placements with their ids, in id order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Placement)> {
        self.by_id.iter()
    }

    /// The placements naming `node`, in id order: O(their number), not O(all placements).
    pub fn on_node(&self, node: NodeId) -> impl Iterator<Item = &Placement> {
        self.by_node
            .get(&node)
            .into_iter()
            .flat_map(|ids| ids.iter())
            .filter_map(|id| self.by_id.get(id))
    }

    /// The nodes some placement names (also nodes no longer members).
    pub fn nodes(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.by_node.keys().copied()
    }

    /// How many placements name `node`.
    pub fn count_on(&self, node: NodeId) -> usize {
        self.by_node.get(&node).map_or(0, |ids| ids.len())
    }

    /// What `tenant` holds now, over every placement.
    pub fn tenant_use(&self, tenant: &str) -> TenantUse {
        self.by_tenant.get(tenant).copied().unwrap_or_default()
    }

    /// The tenants that hold at least one placement.
    pub fn tenants(&self) -> impl Iterator<Item = &String> {
        self.by_tenant.keys()
    }

    /// Whether some placement names `snapshot` as its recovery point.
    pub fn snapshot_in_use(&self, snapshot: &str) -> bool {
        self.snapshots.contains_key(snapshot)
    }

    /// Adds or replaces the placement of `sandbox`.
    pub fn insert(&mut self, sandbox: String, placement: Placement) {
        self.remove(&sandbox);
        self.index(&sandbox, &placement);
        self.by_id.insert(sandbox, placement);
    }

    /// Removes the placement of `sandbox`, returning it.
    pub fn remove(&mut self, sandbox: &str) -> Option<Placement> {
        let old = self.by_id.remove(sandbox)?;
        self.unindex(sandbox, &old);
        Some(old)
    }

    /// Changes the placement of `sandbox` with `f` if it exists, keeping the indexes
    /// current; the placement after the change.
    pub fn update(&mut self, sandbox: &str, f: impl FnOnce(&mut Placement)) -> Option<&Placement> {
        let mut p = self.remove(sandbox)?;
        f(&mut p);
        self.insert(sandbox.to_string(), p);
        self.by_id.get(sandbox)
    }

    fn index(&mut self, sandbox: &str, p: &Placement) {
        self.by_node
            .entry(p.node)
            .or_default()
            .insert(sandbox.to_string());
        let u = self.by_tenant.entry(p.tenant().to_string()).or_default();
        let size = p.size.unwrap_or_default();
        u.sandboxes += 1;
        u.size.millicpus += size.millicpus;
        u.size.memory_mb += size.memory_mb;
        if let Some(snap) = recovery_snapshot(p) {
            *self.snapshots.entry(snap.to_string()).or_default() += 1;
        }
    }

    fn unindex(&mut self, sandbox: &str, p: &Placement) {
        if let Some(ids) = self.by_node.get_mut(&p.node) {
            ids.remove(sandbox);
            if ids.is_empty() {
                self.by_node.remove(&p.node);
            }
        }
        let tenant = p.tenant();
        if let Some(u) = self.by_tenant.get_mut(tenant) {
            let size = p.size.unwrap_or_default();
            u.sandboxes -= 1;
            u.size.millicpus -= size.millicpus;
            u.size.memory_mb -= size.memory_mb;
            if u.sandboxes == 0 {
                self.by_tenant.remove(tenant);
            }
        }
        if let Some(snap) = recovery_snapshot(p) {
            if let Some(n) = self.snapshots.get_mut(snap) {
                *n -= 1;
                if *n == 0 {
                    self.snapshots.remove(snap);
                }
            }
        }
    }
}

fn recovery_snapshot(p: &Placement) -> Option<&str> {
    p.handoff.as_ref()?.snapshot.as_deref()
}

impl std::ops::Index<&str> for Placements {
    type Output = Placement;

    fn index(&self, sandbox: &str) -> &Placement {
        self.by_id.get(sandbox).expect("no such placement")
    }
}

impl PartialEq for Placements {
    /// The placements alone: the indexes follow from them.
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

impl Eq for Placements {}

impl std::fmt::Debug for Placements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.by_id.iter()).finish()
    }
}

/// Stored and sent as a map from id to placement, as before the indexes existed: snapshots
/// of either layout read back the same.
impl Serialize for Placements {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.by_id.iter())
    }
}

impl<'de> Deserialize<'de> for Placements {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = BTreeMap::<String, Placement>::deserialize(d)?;
        let mut out = Placements::default();
        for (id, p) in map {
            out.insert(id, p);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{Handoff, PlacementState, Size};
    use proptest::prelude::*;

    fn placement(id: &str, node: NodeId, tenant: Option<&str>, snap: Option<&str>) -> Placement {
        Placement {
            sandbox: id.into(),
            node,
            epoch: 1,
            owner_since: 1,
            state: PlacementState::Active,
            handoff: snap.map(|s| Handoff {
                record: String::new(),
                snapshot: Some(s.into()),
                resume: false,
            }),
            egress: None,
            tenant: tenant.map(str::to_string),
            size: Some(Size {
                millicpus: 500,
                memory_mb: 256,
            }),
        }
    }

    /// Ids by node, use by tenant, placements by snapshot.
    type Indexes = (
        BTreeMap<NodeId, Vec<String>>,
        BTreeMap<String, TenantUse>,
        BTreeMap<String, u32>,
    );

    /// The indexes, recomputed from the placements alone.
    fn expected(ps: &Placements) -> Indexes {
        let (mut nodes, mut tenants, mut snaps) =
            (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        for (id, p) in ps.iter() {
            nodes
                .entry(p.node)
                .or_insert_with(Vec::new)
                .push(id.clone());
            let u: &mut TenantUse = tenants.entry(p.tenant().to_string()).or_default();
            u.sandboxes += 1;
            u.size.millicpus += p.size.unwrap_or_default().millicpus;
            u.size.memory_mb += p.size.unwrap_or_default().memory_mb;
            if let Some(s) = recovery_snapshot(p) {
                *snaps.entry(s.to_string()).or_default() += 1;
            }
        }
        (nodes, tenants, snaps)
    }

    fn actual(
        ps: &Placements,
        nodes: impl Iterator<Item = NodeId>,
        tenants: &[&str],
        snaps: &[&str],
    ) -> Indexes {
        let by_node = nodes
            .map(|n| {
                (
                    n,
                    ps.on_node(n).map(|p| p.sandbox.clone()).collect::<Vec<_>>(),
                )
            })
            .filter(|(_, v)| !v.is_empty())
            .collect();
        let by_tenant = tenants
            .iter()
            .map(|t| (t.to_string(), ps.tenant_use(t)))
            .filter(|(_, u)| u.sandboxes > 0)
            .collect();
        let by_snap = snaps
            .iter()
            .filter(|s| ps.snapshot_in_use(s))
            .map(|s| (s.to_string(), ps.snapshots[*s]))
            .collect();
        (by_node, by_tenant, by_snap)
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, NodeId, u8, Option<u8>),
        Remove(u8),
        Move(u8, NodeId),
        Checkpoint(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 1u64..5, 0u8..3, proptest::option::of(0u8..4))
                .prop_map(|(i, n, t, s)| Op::Insert(i, n, t, s)),
            (0u8..12).prop_map(Op::Remove),
            (0u8..12, 1u64..5).prop_map(|(i, n)| Op::Move(i, n)),
            (0u8..12, 0u8..4).prop_map(|(i, s)| Op::Checkpoint(i, s)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever sequence of changes, the indexes say what a full scan says, also after a
        /// round trip through the stored form.
        #[test]
        fn indexes_match_a_full_scan(ops in proptest::collection::vec(op(), 1..80)) {
            let tenants = ["t0", "t1", "t2", "default"];
            let snaps = ["s0", "s1", "s2", "s3"];
            let mut ps = Placements::default();
            for op in ops {
                match op {
                    Op::Insert(i, n, t, s) => {
                        let id = format!("sb{i}");
                        let tenant = (t > 0).then(|| tenants[t as usize]);
                        let snap = s.map(|s| snaps[s as usize]);
                        ps.insert(id.clone(), placement(&id, n, tenant, snap));
                    }
                    Op::Remove(i) => { ps.remove(&format!("sb{i}")); }
                    Op::Move(i, n) => { ps.update(&format!("sb{i}"), |p| p.node = n); }
                    Op::Checkpoint(i, s) => {
                        ps.update(&format!("sb{i}"), |p| {
                            p.handoff = Some(Handoff { record: String::new(), snapshot: Some(snaps[s as usize].into()), resume: false });
                        });
                    }
                }
                prop_assert_eq!(actual(&ps, 0..6, &tenants, &snaps), expected(&ps));
                let count: usize = (0..6).map(|n| ps.count_on(n)).sum();
                prop_assert_eq!(count, ps.len());
            }
            let back: Placements = serde_json::from_slice(&serde_json::to_vec(&ps).unwrap()).unwrap();
            prop_assert_eq!(&back, &ps);
            prop_assert_eq!(actual(&back, 0..6, &tenants, &snaps), expected(&ps));
        }
    }

    #[test]
    fn stored_as_a_plain_map_of_placements() {
        let mut ps = Placements::default();
        ps.insert("a".into(), placement("a", 1, None, None));
        let json = serde_json::to_value(&ps).unwrap();
        let plain: BTreeMap<String, Placement> = serde_json::from_value(json).unwrap();
        assert_eq!(plain.len(), 1);
        assert_eq!(plain["a"].node, 1);
    }
}
