//! Validation of the names that appear in paths: sandbox ids (DNS labels), session, process
//! and terminal names.

use crate::ApiError;

/// 1–63 chars of `[a-z0-9]`, inner `-` allowed: a DNS label (sandbox ids, tenants).
pub(crate) fn is_dns_label(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

/// Sandbox ids: 1–63 chars of `[a-z0-9]`, inner `-` allowed (a DNS label).
pub fn validate_sandbox_id(id: &str) -> Result<(), ApiError> {
    if is_dns_label(id) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid sandbox id {:?}: use 1-63 characters of a-z, 0-9 and inner '-'",
            truncate_for_message(id)
        )))
    }
}

/// Names of sessions, processes and terminals: 1–128 chars of `[A-Za-z0-9._-]`, not starting
/// with `.` (they become file names inside the guest).
pub fn validate_name(kind: &str, name: &str) -> Result<(), ApiError> {
    let bytes = name.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= 128
        && bytes[0] != b'.'
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "invalid {kind} name {:?}: use 1-128 characters of A-Z, a-z, 0-9, '.', '_' and '-'",
            truncate_for_message(name)
        )))
    }
}

pub(crate) fn truncate_for_message(s: &str) -> String {
    s.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_ids_are_dns_labels() {
        for good in ["a", "abc", "a-b", "0", "my-sandbox-42", &"x".repeat(63)] {
            assert!(validate_sandbox_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            "é",
            &"x".repeat(64),
        ] {
            assert!(validate_sandbox_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_reject_path_tricks() {
        assert!(validate_name("session", "default").is_ok());
        assert!(validate_name("session", "build.v2_x-1").is_ok());
        for bad in ["", ".", "..", "a/b", ".hidden", "a b", &"x".repeat(129)] {
            assert!(validate_name("session", bad).is_err(), "{bad}");
        }
    }
}
