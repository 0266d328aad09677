//! One chunk: cut sizes, the hash that names it, compression and verification.

use super::error::SnapshotError;

/// FastCDC bounds. A 1 MiB average keeps the data a small change re-stores to a few MiB
/// while a 200 MiB workspace stays a few hundred objects.
pub const MIN_SIZE: u32 = 256 * 1024;
pub const AVG_SIZE: u32 = 1024 * 1024;
pub const MAX_SIZE: u32 = 4 * 1024 * 1024;

/// zstd level of stored chunks (3 is zstd's default: fast, and most of the gain).
const LEVEL: i32 = 3;

/// A chunk's name: the BLAKE3 hash of its raw bytes, in hex.
pub fn hash(raw: &[u8]) -> String {
    blake3::hash(raw).to_hex().to_string()
}

/// Compresses a raw chunk into its stored form: a zstd frame carrying a checksum of its
/// content, which decompression verifies.
pub fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut c = zstd::bulk::Compressor::new(LEVEL)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    c.compress(raw)
}

/// Whether a stored chunk is a zstd frame that carries a content checksum.
fn has_frame_checksum(stored: &[u8]) -> bool {
    const MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    stored.len() > 4 && stored[..4] == MAGIC && stored[4] & 0x04 != 0
}

/// Decompresses a chunk read from the node's own cache. The cache only holds chunks this
/// node sealed, or fetched and checked against their name (`open`), so what remains to
/// catch is damage on the local disk: the frame checksum does that at a fraction of the
/// cost of hashing again. Chunks sealed without a frame checksum are hashed again.
pub fn open_cached(
    snapshot: &str,
    name: &str,
    size: u32,
    stored: &[u8],
) -> Result<Vec<u8>, SnapshotError> {
    if !has_frame_checksum(stored) {
        return open(snapshot, name, size, stored);
    }
    let raw = zstd::bulk::decompress(stored, size as usize)
        .map_err(|e| damaged(snapshot, format!("cached chunk {name} is damaged: {e}")))?;
    if raw.len() != size as usize {
        return Err(damaged(
            snapshot,
            format!("cached chunk {name} has the wrong size"),
        ));
    }
    Ok(raw)
}

fn damaged(snapshot: &str, why: String) -> SnapshotError {
    SnapshotError::Damaged {
        id: snapshot.to_string(),
        why,
    }
}

/// Decompresses a stored chunk and checks it against its name.
pub fn open(
    snapshot: &str,
    name: &str,
    size: u32,
    stored: &[u8],
) -> Result<Vec<u8>, SnapshotError> {
    let raw = zstd::bulk::decompress(stored, size as usize)
        .map_err(|e| damaged(snapshot, format!("chunk {name} does not decompress: {e}")))?;
    if raw.len() != size as usize || hash(&raw) != name {
        return Err(damaged(
            snapshot,
            format!("chunk {name} does not match its hash"),
        ));
    }
    Ok(raw)
}

/// Where a chunk lives in the object store (fanned out by its first byte).
pub fn key(name: &str) -> object_store::path::Path {
    object_store::path::Path::from(format!("chunks/{}/{name}", &name[..2]))
}

pub fn is_name(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compress_then_open_round_trips_and_detects_damage() {
        let raw = vec![7u8; 100_000];
        let (name, stored) = (hash(&raw), compress(&raw).unwrap());
        assert!(is_name(&name));
        assert!(stored.len() < raw.len());
        assert_eq!(open("s", &name, raw.len() as u32, &stored).unwrap(), raw);
        let mut bad = stored.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        assert!(open("s", &name, raw.len() as u32, &bad).is_err());
        let other = hash(b"other");
        assert!(matches!(
            open("s", &other, raw.len() as u32, &stored),
            Err(SnapshotError::Damaged { .. })
        ));
    }

    #[test]
    fn cached_chunks_are_checked_by_their_frame_checksum() {
        let raw: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let (name, stored) = (hash(&raw), compress(&raw).unwrap());
        assert!(has_frame_checksum(&stored));
        assert_eq!(
            open_cached("s", &name, raw.len() as u32, &stored).unwrap(),
            raw
        );
        // A flipped bit in the last bytes (the checksum, or the data before it) is caught.
        for back in [1, 5, 40] {
            let mut bad = stored.clone();
            let i = bad.len() - back;
            bad[i] ^= 0x01;
            assert!(
                open_cached("s", &name, raw.len() as u32, &bad).is_err(),
                "damage {back} bytes from the end went unnoticed"
            );
        }
        // Frames without a checksum (older chunks) are hashed again.
        let plain = zstd::bulk::compress(&raw, 3).unwrap();
        assert!(!has_frame_checksum(&plain));
        assert!(open_cached("s", &hash(b"other"), raw.len() as u32, &plain).is_err());
        assert_eq!(
            open_cached("s", &name, raw.len() as u32, &plain).unwrap(),
            raw
        );
    }
}
