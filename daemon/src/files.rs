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

/// Writes `content` to `path` atomically, mode 0600 (`warren_storage::private_file`).
pub fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    warren_storage::private_file::write(path, content.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// The node's data dir: the setting, or the development default.
pub fn data_dir_of(s: &Settings) -> PathBuf {
    s.data_dir
        .clone()
        .unwrap_or_else(warren_client::dev_data_dir)
}
