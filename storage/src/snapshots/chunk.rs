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

/// Hashes and compresses a raw chunk: `(hash, stored bytes)`.
pub fn seal(raw: &[u8]) -> std::io::Result<(String, Vec<u8>)> {
    Ok((hash(raw), zstd::bulk::compress(raw, LEVEL)?))
}

/// Decompresses a stored chunk and checks it against its name.
pub fn open(
    snapshot: &str,
    name: &str,
    size: u32,
    stored: &[u8],
) -> Result<Vec<u8>, SnapshotError> {
    let damaged = |why: String| SnapshotError::Damaged {
        id: snapshot.to_string(),
        why,
    };
    let raw = zstd::bulk::decompress(stored, size as usize)
        .map_err(|e| damaged(format!("chunk {name} does not decompress: {e}")))?;
    if raw.len() != size as usize || hash(&raw) != name {
        return Err(damaged(format!("chunk {name} does not match its hash")));
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
    fn seal_then_open_round_trips_and_detects_damage() {
        let raw = vec![7u8; 100_000];
        let (name, stored) = seal(&raw).unwrap();
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
}
