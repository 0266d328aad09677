//! `sudo make dev` runs the dev node as root, with root's home: its key lands in root's data
//! dir, which the user's own CLI neither looks in nor may read. The user who ran sudo gets a
//! copy where their CLI looks (`~/.local/share/warren/dev/api-key`), owned by them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The user behind `sudo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SudoUser {
    pub uid: u32,
    pub gid: u32,
    pub home: PathBuf,
}

/// The user who ran sudo, when this process is root started by sudo for another user:
/// `SUDO_UID`/`SUDO_GID` from `env`, the home directory from `passwd` (`/etc/passwd`).
pub fn of(euid: u32, env: impl Fn(&str) -> Option<String>, passwd: &str) -> Option<SudoUser> {
    if euid != 0 {
        return None;
    }
    let uid: u32 = env("SUDO_UID")?.parse().ok()?;
    let gid: u32 = env("SUDO_GID")?.parse().ok()?;
    if uid == 0 {
        return None;
    }
    let home = passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 7 && f[2].parse() == Ok(uid)).then(|| PathBuf::from(f[5]))
    })?;
    home.is_absolute().then_some(SudoUser { uid, gid, home })
}

/// Writes `key` to the user's dev key file (mode 0600), creating the directories below their
/// home as theirs. Returns the file.
pub fn share_key(user: &SudoUser, key: &str) -> std::io::Result<PathBuf> {
    let data = user.home.join(".local/share");
    let dir = data.join("warren/dev");
    // Create each missing level as the user's, so that they own what they did not have.
    let mut level = user.home.clone();
    for part in [".local", "share", "warren", "dev"] {
        level = level.join(part);
        if !level.exists() {
            std::fs::create_dir(&level)?;
            std::os::unix::fs::chown(&level, Some(user.uid), Some(user.gid))?;
        }
    }
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    let file = warren_client::api_key_path(&dir);
    let tmp = dir.join(".api-key.tmp");
    std::fs::write(&tmp, format!("{key}\n"))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::os::unix::fs::chown(&tmp, Some(user.uid), Some(user.gid))?;
    std::fs::rename(&tmp, &file)?;
    Ok(file)
}

/// Shares the dev key with the user behind sudo, if any; says where, or why not.
pub fn share_dev_key(key_file: &Path) {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let Some(user) = of(euid, |k| std::env::var(k).ok(), &passwd) else {
        return;
    };
    let shared = std::fs::read_to_string(key_file).and_then(|k| share_key(&user, k.trim()));
    match shared {
        Ok(f) => println!(
            "  (run with sudo: the key is also in {}, for your own CLI)",
            f.display()
        ),
        Err(e) => eprintln!("could not copy the API key for the user behind sudo: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    const PASSWD: &str =
        "root:x:0:0:root:/root:/bin/bash\nana:x:1000:1000:Ana,,,:/home/ana:/bin/bash\n";

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn only_root_started_by_sudo_for_another_user_shares() {
        let sudo = [("SUDO_UID", "1000"), ("SUDO_GID", "1000")];
        assert_eq!(
            of(0, env(&sudo), PASSWD),
            Some(SudoUser {
                uid: 1000,
                gid: 1000,
                home: "/home/ana".into()
            })
        );
        assert_eq!(of(1000, env(&sudo), PASSWD), None, "not root");
        assert_eq!(of(0, env(&[]), PASSWD), None, "not under sudo");
        let root = [("SUDO_UID", "0"), ("SUDO_GID", "0")];
        assert_eq!(of(0, env(&root), PASSWD), None, "sudo by root");
        let unknown = [("SUDO_UID", "1001"), ("SUDO_GID", "1001")];
        assert_eq!(of(0, env(&unknown), PASSWD), None, "no such user");
    }

    #[test]
    fn the_copy_is_where_the_users_cli_looks_and_is_theirs_alone() {
        let home = tempfile::tempdir().unwrap();
        // SAFETY: no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let (uid, gid) = if root {
            (65534, 65534)
        } else {
            unsafe { (libc::geteuid(), libc::getegid()) }
        };
        let user = SudoUser {
            uid,
            gid,
            home: home.path().to_path_buf(),
        };
        let file = share_key(&user, "wk_secret").unwrap();
        // Where `warren_client::dev_data_dir` looks for that user (HOME=their home).
        assert_eq!(
            file,
            warren_client::api_key_path(&home.path().join(".local/share/warren/dev"))
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "wk_secret\n");
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (uid, gid));
        let dir = std::fs::metadata(home.path().join(".local")).unwrap();
        assert_eq!(dir.uid(), uid);
        assert_eq!(meta.mode() & 0o777, 0o600);
        // Again (the next start): replaced, not appended.
        share_key(&user, "wk_other").unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "wk_other\n");
    }
}
