//! Secrets at rest: values are sealed (ChaCha20-Poly1305, `ring`) with the cluster's
//! secrets key before they are proposed, so the Raft log, its snapshots and every node's
//! rocksdb hold only ciphertext. The key lives in a file of each node (never in the log):
//! the first node makes it, a joining node receives it sealed under a key derived from
//! the join token (HKDF-SHA256), a restarted node reads it back.
//!
//! The file holds one key per line, `<id> <64 hex>`; the first seals, every one opens, so
//! a key is rotated by putting a new line first on every node; once every member says it
//! holds the new key, the leader reseals the secrets under it (`router::cluster::reseal`),
//! and the old line can go. The
//! secret's name is the AEAD's associated data: a sealed value cannot be moved under
//! another name.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One sealed value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sealed {
    /// Which key sealed it.
    pub key_id: String,
    /// Nonce and ciphertext (with its tag), hex.
    pub nonce: String,
    pub ciphertext: String,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sealed {{ key_id: {:?}, .. }}", self.key_id)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretsError {
    #[error("this node does not have the secrets key {0:?} (see docs/egress.md, rotation)")]
    UnknownKey(String),
    #[error("the sealed value does not open with its key (damaged, or sealed under another name)")]
    Damaged,
    #[error("the secrets key file is invalid: {0}")]
    BadKeyFile(String),
    #[error("cannot read or write the secrets key file: {0}")]
    Io(String),
}

/// The cluster's secrets keys as one node holds them.
#[derive(Clone)]
pub struct SecretsKey {
    keys: Vec<(String, [u8; 32])>,
}

impl std::fmt::Debug for SecretsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|(id, _)| id.as_str()).collect();
        write!(f, "SecretsKey {{ ids: {ids:?} }}")
    }
}

fn random<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    SystemRandom::new()
        .fill(&mut b)
        .expect("the system's random source works");
    b
}

fn aead(key: &[u8; 32]) -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&CHACHA20_POLY1305, key).expect("32-byte key"))
}

impl SecretsKey {
    /// A new key with a random id.
    pub fn generate() -> SecretsKey {
        SecretsKey {
            keys: vec![(hex::encode(random::<4>()), random::<32>())],
        }
    }

    /// Reads the key file format.
    pub fn parse(text: &str) -> Result<SecretsKey, SecretsError> {
        let mut keys = Vec::new();
        for line in text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (id, hexkey) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| SecretsError::BadKeyFile("a line is not `<id> <64 hex>`".into()))?;
            let bytes = hex::decode(hexkey.trim())
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| {
                    SecretsError::BadKeyFile(format!("key {id:?} is not 64 hex digits"))
                })?;
            if id.is_empty() || id.len() > 32 || !id.bytes().all(|c| c.is_ascii_alphanumeric()) {
                return Err(SecretsError::BadKeyFile(format!("invalid key id {id:?}")));
            }
            keys.push((id.to_string(), bytes));
        }
        if keys.is_empty() {
            return Err(SecretsError::BadKeyFile("no key".into()));
        }
        Ok(SecretsKey { keys })
    }

    /// The key file format.
    pub fn to_file(&self) -> String {
        let mut s = String::from(
            "# warren secrets keys: the first seals, every one opens. Keep private.\n",
        );
        for (id, k) in &self.keys {
            s.push_str(&format!("{id} {}\n", hex::encode(k)));
        }
        s
    }

    /// Reads `path`, or (when it does not exist) makes a new key there (mode 0600).
    pub fn load_or_create(path: &Path) -> Result<SecretsKey, SecretsError> {
        match std::fs::read_to_string(path) {
            Ok(t) => SecretsKey::parse(&t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let k = SecretsKey::generate();
                k.write(path)?;
                Ok(k)
            }
            Err(e) => Err(SecretsError::Io(format!("{}: {e}", path.display()))),
        }
    }

    /// Writes the key file (mode 0600, replaced atomically).
    pub fn write(&self, path: &Path) -> Result<(), SecretsError> {
        warren_storage::private_file::write(path, self.to_file().as_bytes())
            .map_err(|e| SecretsError::Io(format!("{}: {e}", path.display())))
    }

    /// The id of the key that seals.
    pub fn current_id(&self) -> &str {
        &self.keys[0].0
    }

    /// The ids of every key held, the sealing one first.
    pub fn ids(&self) -> Vec<String> {
        self.keys.iter().map(|(id, _)| id.clone()).collect()
    }

    pub fn seal(&self, name: &str, value: &str) -> Sealed {
        let (id, key) = &self.keys[0];
        let nonce = random::<NONCE_LEN>();
        let mut buf = value.as_bytes().to_vec();
        aead(key)
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .expect("sealing a bounded value");
        Sealed {
            key_id: id.clone(),
            nonce: hex::encode(nonce),
            ciphertext: hex::encode(buf),
        }
    }

    pub fn open(&self, name: &str, sealed: &Sealed) -> Result<String, SecretsError> {
        let key = self
            .keys
            .iter()
            .find(|(id, _)| *id == sealed.key_id)
            .map(|(_, k)| k)
            .ok_or_else(|| SecretsError::UnknownKey(sealed.key_id.clone()))?;
        let nonce: [u8; NONCE_LEN] = hex::decode(&sealed.nonce)
            .ok()
            .and_then(|n| n.try_into().ok())
            .ok_or(SecretsError::Damaged)?;
        let mut buf = hex::decode(&sealed.ciphertext).map_err(|_| SecretsError::Damaged)?;
        let plain = aead(key)
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut buf,
            )
            .map_err(|_| SecretsError::Damaged)?;
        String::from_utf8(plain.to_vec()).map_err(|_| SecretsError::Damaged)
    }

    /// 32 bytes for another purpose (`label`), derived from the sealing key: the same on
    /// every node that holds the same key file.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        struct Len32;
        impl ring::hkdf::KeyType for Len32 {
            fn len(&self) -> usize {
                32
            }
        }
        let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"warren secrets key")
            .extract(&self.keys[0].1);
        let mut out = [0u8; 32];
        prk.expand(&[label.as_bytes()], Len32)
            .expect("32 bytes are in range")
            .fill(&mut out)
            .expect("32 bytes");
        out
    }

    /// The key file sealed for a joining node that proved `token`.
    pub fn seal_for_join(&self, token: &str) -> Sealed {
        let k = SecretsKey {
            keys: vec![("join".into(), join_key(token))],
        };
        k.seal("warren-secrets-key", &self.to_file())
    }

    /// What `seal_for_join` made, opened by the joining node.
    pub fn open_from_join(token: &str, sealed: &Sealed) -> Result<SecretsKey, SecretsError> {
        let k = SecretsKey {
            keys: vec![("join".into(), join_key(token))],
        };
        SecretsKey::parse(&k.open("warren-secrets-key", sealed)?)
    }
}

/// A key for the join answer, derived from the join token.
fn join_key(token: &str) -> [u8; 32] {
    struct Len32;
    impl ring::hkdf::KeyType for Len32 {
        fn len(&self) -> usize {
            32
        }
    }
    let salt = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, b"warren join");
    let prk = salt.extract(token.as_bytes());
    let okm = prk
        .expand(&[b"secrets key"], Len32)
        .expect("32 bytes are in range");
    let mut out = [0u8; 32];
    okm.fill(&mut out).expect("32 bytes");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_opens_only_under_its_name_and_key() {
        let k = SecretsKey::generate();
        let s = k.seal("gh", "ghp_123");
        assert!(!s.ciphertext.contains(&hex::encode("ghp_123")));
        assert!(!format!("{s:?}").contains(&s.ciphertext));
        assert_eq!(k.open("gh", &s).unwrap(), "ghp_123");
        assert_eq!(k.open("other", &s), Err(SecretsError::Damaged));
        let other = SecretsKey::generate();
        assert!(matches!(
            other.open("gh", &s),
            Err(SecretsError::UnknownKey(_))
        ));
        let mut tampered = s.clone();
        tampered.ciphertext.replace_range(
            0..2,
            if &s.ciphertext[0..2] == "00" {
                "01"
            } else {
                "00"
            },
        );
        assert_eq!(k.open("gh", &tampered), Err(SecretsError::Damaged));
    }

    #[test]
    fn the_key_file_reads_back_and_an_older_key_still_opens_after_rotation() {
        let old = SecretsKey::generate();
        let sealed = old.seal("a", "v1");
        let new = SecretsKey::generate();
        let rotated = SecretsKey::parse(&format!("{}{}", new.to_file(), old.to_file())).unwrap();
        assert_eq!(rotated.current_id(), new.current_id());
        assert_eq!(rotated.open("a", &sealed).unwrap(), "v1");
        assert_eq!(rotated.seal("b", "v2").key_id, new.current_id());
        for bad in ["", "k1 00", "k1", "k/1 ".to_string().as_str()] {
            assert!(SecretsKey::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_joiner_opens_the_key_only_with_the_token() {
        let k = SecretsKey::generate();
        let s = k.seal_for_join("wj_token");
        let got = SecretsKey::open_from_join("wj_token", &s).unwrap();
        assert_eq!(got.to_file(), k.to_file());
        assert!(SecretsKey::open_from_join("wj_other", &s).is_err());
    }

    #[test]
    fn a_missing_file_gets_a_private_new_key_and_keeps_it() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("secrets.key");
        let a = SecretsKey::load_or_create(&p).unwrap();
        let b = SecretsKey::load_or_create(&p).unwrap();
        assert_eq!(a.to_file(), b.to_file());
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
}
