//! How the applied state's bytes inside a Raft snapshot are encoded: the state's JSON,
//! compressed with zstd behind a small versioned header. These are the bytes that are stored
//! (inside `snapshot_frame`) and sent to a learner or lagging follower in chunks, so across
//! a slow link fewer chunks have to arrive in time. JSON with no header (what nodes wrote
//! before) is still read, so a node upgraded in place loads its old snapshot and takes one
//! from an older leader.
//!
//! The state is written straight into the compressor and read straight out of it: neither
//! side holds the uncompressed JSON and the compressed bytes at once.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::io::Write;

const MAGIC: &[u8; 4] = b"WRSZ";
/// Codec 1: MAGIC, u32 BE codec, then one zstd frame of the state's JSON.
pub const CODEC: u32 = 1;
/// zstd's level 3 (its default): most of the gain of higher levels on JSON at a fraction of
/// their time; the state is encoded on a blocking thread, off the runtime.
const LEVEL: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("snapshot state codec {0} is not supported")]
    Codec(u32),
    #[error("snapshot state is truncated")]
    Truncated,
    #[error("snapshot state: {0}")]
    Json(#[from] serde_json::Error),
    #[error("snapshot state compression: {0}")]
    Io(#[from] std::io::Error),
}

/// The snapshot bytes of a state.
pub fn encode<T: Serialize>(state: &T) -> Result<Vec<u8>, CodecError> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&CODEC.to_be_bytes());
    let mut z = zstd::Encoder::new(out, LEVEL)?;
    serde_json::to_writer(&mut z, state)?;
    let mut out = z.finish()?;
    out.flush()?;
    Ok(out)
}

/// A state from its snapshot bytes: compressed (codec 1) or plain JSON (older nodes).
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        return Ok(serde_json::from_slice(bytes)?);
    };
    let codec = rest.get(..4).ok_or(CodecError::Truncated)?;
    let codec = u32::from_be_bytes(codec.try_into().expect("four bytes"));
    if codec != CODEC {
        return Err(CodecError::Codec(codec));
    }
    let z = zstd::Decoder::new(&rest[4..])?;
    Ok(serde_json::from_reader(std::io::BufReader::new(z))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ClusterState, Handoff, Placement, PlacementState};

    /// A state shaped like a busy cluster's: many placements with handoffs and tenants.
    fn state(n: usize) -> ClusterState {
        let mut s = ClusterState::default();
        for i in 0..n {
            let id = format!("sb-{i:07}");
            let p = Placement {
                sandbox: id.clone(),
                node: (i % 5) as u64 + 1,
                epoch: 3,
                owner_since: 2,
                state: PlacementState::Active,
                handoff: Some(Handoff {
                    record: format!(
                        "{{\"id\":\"{id}\",\"image\":\"warren/sandbox:1\",\"last_active_at\":{}}}",
                        1_780_000_000_000u64 + i as u64 * 7919
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
        s
    }

    #[test]
    fn round_trips_and_compresses_a_busy_state_several_fold() {
        let s = state(5_000);
        let json = serde_json::to_vec(&s).unwrap();
        let bytes = encode(&s).unwrap();
        assert!(
            bytes.len() * 4 < json.len(),
            "compressed {} B vs JSON {} B",
            bytes.len(),
            json.len()
        );
        let back: ClusterState = decode(&bytes).unwrap();
        assert_eq!(serde_json::to_vec(&back).unwrap(), json);
    }

    #[test]
    fn reads_the_plain_json_older_nodes_wrote_and_sent() {
        let s = state(10);
        let json = serde_json::to_vec(&s).unwrap();
        let back: ClusterState = decode(&json).unwrap();
        assert_eq!(serde_json::to_vec(&back).unwrap(), json);
    }

    #[test]
    fn refuses_unknown_codecs_truncation_and_corruption() {
        let mut bytes = encode(&state(100)).unwrap();
        let good = bytes.clone();
        bytes[4..8].copy_from_slice(&7u32.to_be_bytes());
        assert!(matches!(
            decode::<ClusterState>(&bytes),
            Err(CodecError::Codec(7))
        ));
        for cut in [5, 8, 20, good.len() - 3] {
            assert!(
                decode::<ClusterState>(&good[..cut]).is_err(),
                "cut at {cut} must not decode"
            );
        }
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        assert!(decode::<ClusterState>(&flipped).is_err());
    }
}
