//! The handshake that opens every node-to-guest connection, before any HTTP.
//!
//! The node creates each container with a secret of its own (`SECRET_ENV`), which the guest
//! reads at start and keeps where the sandbox's processes cannot read it. On every new
//! connection the node sends a hello line with a fresh nonce; the guest answers with its
//! protocol version and an HMAC-SHA256 of the nonce under the secret. The node refuses a
//! connection whose answer is malformed, of another protocol version, or without the proof:
//! whatever answers on a socket path a sandbox could redirect is never taken for its guest.
//!
//! ```text
//! node  → guest   WARREN-GUEST-HELLO <node protocol> <nonce: 32 hex>\n
//! guest → node    WARREN-GUEST <guest protocol> <hmac: 64 hex>\n
//! ```

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The container environment variable that carries the guest's secret (hex).
pub const SECRET_ENV: &str = "WARREN_GUEST_SECRET";
/// Longest line either side sends or accepts.
pub const MAX_LINE: usize = 256;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;

const HELLO: &str = "WARREN-GUEST-HELLO";
const ANSWER: &str = "WARREN-GUEST";
/// Binds the proof to this handshake (a MAC made for anything else never verifies).
const CONTEXT: &[u8] = b"warren guest handshake v2\0";

/// Why a handshake failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthError {
    /// Not a handshake line at all (an old guest answers HTTP, anything else garbage).
    Malformed(String),
    /// The other side speaks another protocol version.
    Protocol { ours: u32, theirs: u32 },
    /// The proof does not verify: the peer does not hold this container's secret.
    BadProof,
}

impl std::fmt::Display for AuthError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AuthError::Malformed(why) => write!(f, "not a guest handshake: {why}"),
            AuthError::Protocol { ours, theirs } => {
                write!(f, "the guest speaks protocol {theirs}, this node {ours}")
            }
            AuthError::BadProof => write!(f, "the peer does not hold this container's secret"),
        }
    }
}

impl std::error::Error for AuthError {}

/// A fresh secret for a new container: 32 random bytes, hex (from the caller's randomness).
pub fn secret_from(bytes: &[u8; 32]) -> String {
    hex::encode(bytes)
}

/// The node's first line on a new connection.
pub fn hello(nonce: &[u8; NONCE_LEN]) -> String {
    format!(
        "{HELLO} {} {}\n",
        crate::GUEST_PROTOCOL_VERSION,
        hex::encode(nonce)
    )
}

/// The guest's reading of a hello line: the node's protocol version and its nonce.
pub fn parse_hello(line: &str) -> Result<(u32, [u8; NONCE_LEN]), AuthError> {
    let mut words = line.trim_end_matches('\n').split(' ');
    if words.next() != Some(HELLO) {
        return Err(AuthError::Malformed("no hello".into()));
    }
    let version = parse_version(words.next())?;
    let nonce = words
        .next()
        .and_then(|n| hex::decode(n).ok())
        .and_then(|n| <[u8; NONCE_LEN]>::try_from(n).ok())
        .ok_or_else(|| AuthError::Malformed("bad nonce".into()))?;
    if words.next().is_some() {
        return Err(AuthError::Malformed("trailing words".into()));
    }
    Ok((version, nonce))
}

/// The guest's answer to a hello with `nonce`, proving it holds `secret`.
pub fn answer(secret: &str, nonce: &[u8; NONCE_LEN]) -> String {
    format!(
        "{ANSWER} {} {}\n",
        crate::GUEST_PROTOCOL_VERSION,
        hex::encode(proof(secret, nonce).finalize().into_bytes())
    )
}

/// The node's check of the guest's answer to its hello with `nonce`.
pub fn check_answer(line: &str, secret: &str, nonce: &[u8; NONCE_LEN]) -> Result<(), AuthError> {
    let mut words = line.trim_end_matches('\n').split(' ');
    if words.next() != Some(ANSWER) {
        let shown: String = line.chars().take(40).collect();
        return Err(AuthError::Malformed(format!("answer began {shown:?}")));
    }
    let theirs = parse_version(words.next())?;
    if theirs != crate::GUEST_PROTOCOL_VERSION {
        return Err(AuthError::Protocol {
            ours: crate::GUEST_PROTOCOL_VERSION,
            theirs,
        });
    }
    let mac = words
        .next()
        .and_then(|m| hex::decode(m).ok())
        .ok_or_else(|| AuthError::Malformed("bad proof".into()))?;
    if words.next().is_some() {
        return Err(AuthError::Malformed("trailing words".into()));
    }
    // Constant-time comparison.
    proof(secret, nonce)
        .verify_slice(&mac)
        .map_err(|_| AuthError::BadProof)
}

/// Adds `byte` to the line being read into `buf`: the whole line once `byte` ends it.
/// Lines are read a byte at a time so that nothing after them (the first HTTP bytes) is
/// taken from the connection; a line longer than `MAX_LINE` or not UTF-8 is malformed.
pub fn take_line(buf: &mut Vec<u8>, byte: u8) -> Result<Option<String>, AuthError> {
    buf.push(byte);
    if byte == b'\n' {
        let line = String::from_utf8(std::mem::take(buf))
            .map_err(|_| AuthError::Malformed("not UTF-8".into()))?;
        return Ok(Some(line));
    }
    if buf.len() >= MAX_LINE {
        return Err(AuthError::Malformed("line too long".into()));
    }
    Ok(None)
}

fn parse_version(word: Option<&str>) -> Result<u32, AuthError> {
    word.and_then(|v| v.parse().ok())
        .ok_or_else(|| AuthError::Malformed("bad protocol version".into()))
}

fn proof(secret: &str, nonce: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(CONTEXT);
    mac.update(nonce);
    mac
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn a_guest_with_the_secret_is_accepted() {
        let nonce = [7u8; NONCE_LEN];
        let (version, got) = parse_hello(&hello(&nonce)).unwrap();
        assert_eq!((version, got), (crate::GUEST_PROTOCOL_VERSION, nonce));
        assert_eq!(
            check_answer(&answer(SECRET, &nonce), SECRET, &nonce),
            Ok(())
        );
        assert!(hello(&nonce).len() <= MAX_LINE && answer(SECRET, &nonce).len() <= MAX_LINE);
    }

    #[test]
    fn another_secret_another_nonce_or_a_replay_is_refused() {
        let nonce = [7u8; NONCE_LEN];
        let other = SECRET.replace('0', "1");
        assert_eq!(
            check_answer(&answer(&other, &nonce), SECRET, &nonce),
            Err(AuthError::BadProof)
        );
        // An answer recorded for one nonce proves nothing for the next.
        let replayed = answer(SECRET, &nonce);
        assert_eq!(
            check_answer(&replayed, SECRET, &[8u8; NONCE_LEN]),
            Err(AuthError::BadProof)
        );
    }

    #[test]
    fn lines_end_at_a_newline_and_are_bounded() {
        let mut buf = Vec::new();
        let mut got = None;
        for b in b"WARREN-GUEST 2 ab\nHTTP" {
            if let Some(line) = take_line(&mut buf, *b).unwrap() {
                got = Some(line);
                break;
            }
        }
        assert_eq!(got.as_deref(), Some("WARREN-GUEST 2 ab\n"));
        assert!(buf.is_empty());
        let long: Result<Vec<_>, _> = (0..MAX_LINE).map(|_| take_line(&mut buf, b'x')).collect();
        assert!(long.is_err());
        assert!(take_line(&mut vec![0xff], b'\n').is_err());
    }

    #[test]
    fn another_protocol_version_is_refused() {
        let nonce = [1u8; NONCE_LEN];
        let v = crate::GUEST_PROTOCOL_VERSION;
        let older = answer(SECRET, &nonce).replacen(&format!(" {v} "), " 1 ", 1);
        assert_eq!(
            check_answer(&older, SECRET, &nonce),
            Err(AuthError::Protocol { ours: v, theirs: 1 })
        );
    }

    #[test]
    fn anything_but_a_handshake_is_malformed() {
        let nonce = [1u8; NONCE_LEN];
        for line in [
            "HTTP/1.1 400 Bad Request\r\n",
            "",
            "WARREN-GUEST",
            "WARREN-GUEST x abc",
            "WARREN-GUEST 2 nothex",
            "WARREN-GUEST 2 00 extra",
        ] {
            assert!(
                matches!(
                    check_answer(line, SECRET, &nonce),
                    Err(AuthError::Malformed(_) | AuthError::Protocol { .. })
                ),
                "{line:?}"
            );
        }
        for line in [
            "GET / HTTP/1.1",
            "WARREN-GUEST-HELLO 2",
            "WARREN-GUEST-HELLO 2 abcd",
            "WARREN-GUEST-HELLO two 00112233445566778899aabbccddeeff",
        ] {
            assert!(parse_hello(line).is_err(), "{line:?}");
        }
    }
}
