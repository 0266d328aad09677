//! How a Raft snapshot is stored: a binary frame — magic, format version, the snapshot's
//! metadata (JSON) and the state's bytes as they are — instead of format 1's JSON document,
//! which wrote the state's bytes as an array of numbers (≈3.5× their size). Format 1 is still
//! read, so a node upgraded in place loads the snapshot it wrote before.

use crate::types::Peer;
use openraft::SnapshotMeta;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 4] = b"WRSN";
/// The current frame: MAGIC, u32 BE format, u32 BE meta length, meta JSON, state bytes.
pub const FORMAT: u32 = 2;
/// Format 1: `{"format":1,"meta":…,"data":[…bytes as numbers…]}`.
const FORMAT_JSON: u32 = 1;

type Meta = SnapshotMeta<u64, Peer>;

#[derive(Serialize, Deserialize)]
struct JsonSnapshot {
    format: u32,
    meta: Meta,
    data: Vec<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("snapshot format {0} is not supported")]
    Format(u32),
    #[error("snapshot is truncated")]
    Truncated,
    #[error("snapshot metadata: {0}")]
    Meta(serde_json::Error),
}

/// The stored bytes of a snapshot.
pub fn encode(meta: &Meta, data: &[u8]) -> Vec<u8> {
    let meta = serde_json::to_vec(meta).expect("snapshot metadata serializes");
    let mut out = Vec::with_capacity(12 + meta.len() + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_be_bytes());
    out.extend_from_slice(&(meta.len() as u32).to_be_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(data);
    out
}

/// A stored snapshot's metadata and state bytes, of either format.
pub fn decode(bytes: &[u8]) -> Result<(Meta, Vec<u8>), FrameError> {
    let Some(rest) = bytes.strip_prefix(MAGIC) else {
        let old: JsonSnapshot = serde_json::from_slice(bytes).map_err(FrameError::Meta)?;
        if old.format != FORMAT_JSON {
            return Err(FrameError::Format(old.format));
        }
        return Ok((old.meta, old.data));
    };
    let word = |b: &[u8]| -> Result<u32, FrameError> {
        Ok(u32::from_be_bytes(
            b.get(..4)
                .ok_or(FrameError::Truncated)?
                .try_into()
                .expect("four bytes"),
        ))
    };
    let format = word(rest)?;
    if format != FORMAT {
        return Err(FrameError::Format(format));
    }
    let len = word(&rest[4..])? as usize;
    let meta = rest.get(8..8 + len).ok_or(FrameError::Truncated)?;
    let meta: Meta = serde_json::from_slice(meta).map_err(FrameError::Meta)?;
    Ok((meta, rest[8 + len..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId, StoredMembership};

    fn meta() -> Meta {
        SnapshotMeta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(3, 1), 42)),
            last_membership: StoredMembership::default(),
            snapshot_id: "1-42-7".into(),
        }
    }

    #[test]
    fn round_trips_and_stores_the_state_bytes_as_they_are() {
        let data = br#"{"state":"x"}"#.repeat(1000);
        let bytes = encode(&meta(), &data);
        assert!(
            bytes.len() < data.len() + 512,
            "no blow-up: {}",
            bytes.len()
        );
        let (m, d) = decode(&bytes).unwrap();
        assert_eq!(m, meta());
        assert_eq!(d, data);
    }

    #[test]
    fn reads_the_json_format_written_before() {
        let data = b"{\"a\":1}".to_vec();
        let old = serde_json::to_vec(&JsonSnapshot {
            format: 1,
            meta: meta(),
            data: data.clone(),
        })
        .unwrap();
        let (m, d) = decode(&old).unwrap();
        assert_eq!((m, d), (meta(), data));
    }

    #[test]
    fn refuses_unknown_formats_and_truncation() {
        let mut bytes = encode(&meta(), b"abc");
        bytes[4..8].copy_from_slice(&9u32.to_be_bytes());
        assert!(matches!(decode(&bytes), Err(FrameError::Format(9))));
        let bytes = encode(&meta(), b"abc");
        for cut in [5, 9, 14] {
            assert!(
                decode(&bytes[..cut]).is_err(),
                "cut at {cut} must not decode"
            );
        }
    }
}
