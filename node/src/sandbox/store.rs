//! Sandbox records on disk: one JSON file each, replaced atomically.

use super::record::{SandboxRecord, RECORD_FORMAT};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone)]
pub struct RecordStore {
    dir: PathBuf,
}

impl RecordStore {
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(RecordStore {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    /// Every readable record; unreadable or future-format files are reported and skipped.
    pub fn load_all(&self) -> std::io::Result<Vec<SandboxRecord>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    serde_json::from_slice::<SandboxRecord>(&b).map_err(|e| e.to_string())
                });
            match parsed {
                Ok(r) if r.format == RECORD_FORMAT => out.push(r),
                Ok(r) => {
                    tracing::error!(path = %path.display(), format = r.format, "sandbox record of an unknown format; skipped")
                }
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "unreadable sandbox record; skipped")
                }
            }
        }
        Ok(out)
    }

    /// Writes the record durably: temp file, fsync, rename.
    pub fn save(&self, rec: &SandboxRecord) -> std::io::Result<()> {
        let path = self.path(&rec.id);
        let tmp = self.dir.join(format!(".{}.json.tmp", rec.id));
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&serde_json::to_vec_pretty(rec).expect("records serialize"))?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)
    }

    pub fn delete(&self, id: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_api::sandbox::CreateSandboxRequest;

    #[test]
    fn save_load_delete() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::open(d.path()).unwrap();
        let r = SandboxRecord::new("a", &CreateSandboxRequest::default(), "n", "r", "i").unwrap();
        store.save(&r).unwrap();
        std::fs::write(d.path().join("junk.json"), b"{").unwrap();
        assert_eq!(store.load_all().unwrap(), vec![r]);
        store.delete("a").unwrap();
        store.delete("a").unwrap();
        assert!(store.load_all().unwrap().is_empty());
    }
}
