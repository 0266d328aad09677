//! Rendezvous placement: lookup cost, balance and movement on simulated memberships.

use crate::report::Table;
use std::collections::HashMap;
use std::time::Instant;
use warren_consensus::placement::{owner_among, owner_by_full_ranking};
use warren_consensus::NodeRecord;

fn nodes(n: usize, regions: usize) -> Vec<NodeRecord> {
    (1..=n as u64)
        .map(|id| NodeRecord::placeable(id, &format!("r{}", id as usize % regions)))
        .collect()
}

/// Cost of one owner lookup at 10, 100 and 1000 nodes, against the crate's full ranking of
/// the candidates (the baseline, same run); the target is 50 µs at 1000 nodes.
pub fn lookup_cost(table: &mut Table) {
    for n in [10usize, 100, 1000] {
        let ns = nodes(n, 3);
        let iters = (2_000_000 / n).clamp(1000, 200_000);
        let (per, sink) = time_lookups(iters, |id| owner_among(&ns, id));
        let base_iters = (iters / 10).max(200);
        let (base, base_sink) = time_lookups(base_iters, |id| owner_by_full_ranking(&ns, id));
        let agree = (0..base_iters).all(|i| {
            let id = format!("sb-{i}");
            owner_among(&ns, &id) == owner_by_full_ranking(&ns, &id)
        });
        table.note(format!(
            "rendezvous lookup over {n:>4} nodes: {per:8.2} µs per id ({iters} lookups, checksum {sink}); \
             full ranking {base:8.2} µs ({base_sink}): {:.3}x, same owners: {agree}{}",
            per / base,
            if n == 1000 { format!(", target 50 µs: {}", if per <= 50.0 { "met" } else { "MISSED" }) } else { String::new() }
        ));
    }
}

fn time_lookups(iters: usize, owner: impl Fn(&str) -> Option<u64>) -> (f64, u64) {
    let ids: Vec<String> = (0..iters).map(|i| format!("sb-{i}")).collect();
    let t = Instant::now();
    let mut sink = 0u64;
    for id in &ids {
        sink ^= owner(id).unwrap_or(0);
    }
    (t.elapsed().as_secs_f64() * 1e6 / iters as f64, sink)
}

/// 100 nodes in 3 regions, `ids` ids: share per node (vs fair), and ids moved by one join.
pub fn simulate(ids: usize, table: &mut Table) {
    let ns = nodes(100, 3);
    let t = Instant::now();
    let keys: Vec<String> = (0..ids).map(|i| format!("sandbox-{i}")).collect();
    let owners: Vec<u64> = keys.iter().map(|k| owner_among(&ns, k).unwrap()).collect();
    let mut counts: HashMap<u64, usize> = HashMap::new();
    for o in &owners {
        *counts.entry(*o).or_default() += 1;
    }
    let fair = ids as f64 / 100.0;
    let max_dev = counts
        .values()
        .map(|c| (*c as f64 - fair).abs() / fair)
        .fold(0.0, f64::max);
    let mut joined = ns.clone();
    joined.extend(nodes(101, 3).into_iter().skip(100));
    let moved = keys
        .iter()
        .zip(&owners)
        .filter(|(k, o)| owner_among(&joined, k).unwrap() != **o)
        .count();
    table.note(format!(
        "100 nodes / 3 regions / {ids} ids: largest deviation from a fair share {:.1}% (target <= 10%); \
         one join moved {:.3}% of ids (ideal {:.3}%); {:.1}s",
        max_dev * 100.0,
        moved as f64 * 100.0 / ids as f64,
        100.0 / 101.0,
        t.elapsed().as_secs_f64()
    ));
}

/// The state machine at `n` placements (100 nodes, each placement with a checkpoint's
/// handoff record of a typical size): memory per placement (resident growth), the time a
/// snapshot holds the state lock now (a clone sharing the placements) against before (the
/// whole serialization), and the stored snapshot's size (compressed) against its plain JSON
/// and format 1's JSON frame.
pub fn state_at_scale(n: usize, table: &mut Table) {
    use warren_consensus::state::{Handoff, Placement, PlacementState};
    use warren_consensus::ClusterState;
    let record = serde_json::json!({
        "id": "sandbox-000000", "node": "n17", "region": "r1", "state": "running",
        "image": "warren/sandbox:1", "created_at": "2026-12-05T10:00:00Z",
        "last_active_at": "2026-12-05T10:05:00Z", "env": {"LANG": "C.UTF-8"},
        "size": {"millicpus": 1000, "memory_mb": 512}, "labels": {"team": "agents"},
        "egress": {"default": "deny", "allow": ["api.example.com"]}, "epoch": 12
    })
    .to_string();
    let before = resident_bytes();
    let mut s = ClusterState::default();
    for node in nodes(100, 3) {
        s.nodes.insert(node.id, node);
    }
    let t = Instant::now();
    for i in 0..n {
        let id = format!("sandbox-{i:07}");
        let p = Placement {
            sandbox: id.clone(),
            node: (i % 100) as u64 + 1,
            epoch: 12,
            owner_since: 10,
            state: PlacementState::Active,
            handoff: Some(Handoff {
                // Each record names its own sandbox and time, as real ones do (identical
                // records would flatter the snapshot's compression).
                record: record.replace("sandbox-000000", &id).replace(
                    "10:05:00",
                    &format!("{:02}:{:02}:{:02}", i / 3600 % 24, i / 60 % 60, i % 60),
                ),
                snapshot: Some(format!("{id}-ckpt-0000000012")),
                resume: true,
            }),
            egress: None,
            tenant: Some(format!("tenant-{}", i % 50)),
            size: None,
        };
        s.placements.insert(id, p);
    }
    let built = t.elapsed();
    let per = resident_bytes().saturating_sub(before) as f64 / n as f64;
    let clones = 100;
    let t = Instant::now();
    for _ in 0..clones {
        std::hint::black_box(s.clone());
    }
    let hold_now = t.elapsed() / clones;
    let t = Instant::now();
    let data = serde_json::to_vec(&s).expect("state serializes");
    let hold_before = t.elapsed();
    let t = Instant::now();
    let back: ClusterState = serde_json::from_slice(&data).expect("state parses");
    let parse = t.elapsed();
    assert_eq!(back.placements.len(), n);
    let old_frame = serde_json::to_vec(&data).expect("bytes serialize").len();
    let new_frame = warren_consensus::snapshot_frame::encode(&Default::default(), &data).len();
    let t = Instant::now();
    let packed = warren_consensus::state_codec::encode(&s).expect("state encodes");
    let pack = t.elapsed();
    let t = Instant::now();
    let unpacked: ClusterState =
        warren_consensus::state_codec::decode(&packed).expect("state decodes");
    let unpack = t.elapsed();
    assert_eq!(unpacked.placements.len(), n);
    let packed_frame = warren_consensus::snapshot_frame::encode(&Default::default(), &packed).len();
    table.note(format!(
        "state machine at {n} placements: {per:.0} B resident per placement (record {} B); built in {:.1}s; \
         snapshot holds the state lock {:.3} ms now vs {:.0} ms before ({:.0}x shorter); \
         snapshot {:.1} MB compressed (zstd JSON in the binary frame, encoded in {:.1}s, decoded in {:.1}s) \
         vs {:.1} MB plain JSON in the binary frame ({:.3}x) vs {:.1} MB format 1 JSON frame ({:.3}x); \
         parse of plain JSON on install {:.1}s",
        record.len(),
        built.as_secs_f64(),
        hold_now.as_secs_f64() * 1e3,
        hold_before.as_secs_f64() * 1e3,
        hold_before.as_secs_f64() / hold_now.as_secs_f64(),
        packed_frame as f64 / 1e6,
        pack.as_secs_f64(),
        unpack.as_secs_f64(),
        new_frame as f64 / 1e6,
        packed_frame as f64 / new_frame as f64,
        old_frame as f64 / 1e6,
        packed_frame as f64 / old_frame as f64,
        parse.as_secs_f64(),
    ));
}

/// This process's resident memory.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}
