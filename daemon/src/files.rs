//! Files a node keeps private in its data dir: secrets made on first start, written
//! atomically with mode 0600.

use crate::settings::Settings;
use std::path::{Path, PathBuf};

/// Reads a secret file, or creates it with a new random value (mode 0600).
pub fn load_or_create_secret(path: &Path, prefix: &str) -> anyhow::Result<String> {
    if let Ok(k) = std::fs::read_to_string(path) {
        let k = k.trim().to_string();
        if !k.is_empty() {
            return Ok(k);
        }
    }
    let value = format!("{prefix}{}", hex::encode(rand::random::<[u8; 24]>()));
    write_private(path, &format!("{value}\n"))?;
    Ok(value)
}

/// Writes `content` to `path` atomically (a synced temporary file renamed over it), mode 0600.
pub fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(content.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// The node's data dir: the setting, or the development default.
pub fn data_dir_of(s: &Settings) -> PathBuf {
    s.data_dir
        .clone()
        .unwrap_or_else(warren_client::dev_data_dir)
}
