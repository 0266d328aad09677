//! Finding the static guest binary and installing it, content-addressed, into the data dir
//! (so that rebuilding it never changes the file under a running container's bind mount).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Candidate locations, in order: an explicit path, `WARREN_GUEST_BIN`, next to the running
/// executable, and the musl build directories of a cargo target dir beside it.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    }
    if let Some(p) = std::env::var_os("WARREN_GUEST_BIN") {
        candidates.push(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            candidates.push(dir.join("warren-guest"));
            // target/<profile>/warren → target/x86_64-unknown-linux-musl/<profile>/warren-guest
            for up in [dir.parent(), dir.parent().and_then(Path::parent)]
                .into_iter()
                .flatten()
            {
                for profile in ["release", "debug"] {
                    candidates.push(
                        up.join("x86_64-unknown-linux-musl")
                            .join(profile)
                            .join("warren-guest"),
                    );
                }
            }
        }
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            format!(
                "the guest agent binary was not found (looked at {}); build it with `make guest` \
                 or set WARREN_GUEST_BIN",
                candidates
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// Copies the binary to `<dir>/warren-guest-<sha256 prefix>` (once) and returns that path.
pub fn install(source: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    let bytes = std::fs::read(source)?;
    let digest = hex::encode(&Sha256::digest(&bytes)[..8]);
    let target = dir.join(format!("warren-guest-{digest}"));
    if !target.exists() {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".warren-guest-{digest}.tmp"));
        std::fs::write(&tmp, &bytes)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))?;
        std::fs::rename(&tmp, &target)?;
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_is_content_addressed_and_idempotent() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("g");
        std::fs::write(&src, b"binary-1").unwrap();
        let a = install(&src, &d.path().join("bin")).unwrap();
        let b = install(&src, &d.path().join("bin")).unwrap();
        assert_eq!(a, b);
        std::fs::write(&src, b"binary-2").unwrap();
        let c = install(&src, &d.path().join("bin")).unwrap();
        assert_ne!(a, c);
        assert_eq!(std::fs::read(&a).unwrap(), b"binary-1");
    }
}
