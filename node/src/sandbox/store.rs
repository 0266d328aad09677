//! Sandbox records on disk: one JSON file each, replaced atomically. A record this node
//! cannot read (corrupt, or of a format it does not know) is moved aside to `quarantine/`
//! and reported, never dropped: its sandbox's container must not be taken for an orphan.

use super::record::{SandboxRecord, RECORD_FORMAT};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone)]
pub struct RecordStore {
    dir: PathBuf,
}

/// A record set aside by `load_all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The sandbox it was of, from its file name (when that is a valid id).
    pub sandbox_id: Option<String>,
    /// Where the file is now.
    pub moved_to: PathBuf,
    pub reason: String,
}

/// What `load_all` found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub records: Vec<SandboxRecord>,
    pub quarantined: Vec<Quarantined>,
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

    /// Every readable record; the others are moved to `quarantine/` (the record files
    /// there earlier are reported again: their sandboxes are still unaccounted for).
    pub fn load_all(&self) -> std::io::Result<Loaded> {
        let mut out = Loaded::default();
        let quarantine = self.dir.join("quarantine");
        for e in std::fs::read_dir(&self.dir)? {
            let path = e?.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let id = path
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string);
            let problem = match read_record(&path) {
                Ok(r) if r.format == RECORD_FORMAT && Some(&r.id) == id.as_ref() => {
                    out.records.push(r);
                    continue;
                }
                Ok(r) if r.format != RECORD_FORMAT => {
                    format!(
                        "record format {} (this node reads {RECORD_FORMAT})",
                        r.format
                    )
                }
                Ok(r) => format!("the record is of sandbox {}", r.id),
                Err(e) => e,
            };
            std::fs::create_dir_all(&quarantine)?;
            let stamp = warren_api::time::now_rfc3339().replace(':', "");
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let moved_to = quarantine.join(format!("{name}.{stamp}"));
            std::fs::rename(&path, &moved_to)?;
            out.quarantined.push(Quarantined {
                sandbox_id: id.filter(|i| warren_api::ids::validate_sandbox_id(i).is_ok()),
                moved_to,
                reason: problem,
            });
        }
        if let Ok(entries) = std::fs::read_dir(&quarantine) {
            for e in entries.flatten() {
                let moved_to = e.path();
                if out.quarantined.iter().any(|q| q.moved_to == moved_to) {
                    continue;
                }
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.split_once(".json").map(|(id, _)| id.to_string());
                out.quarantined.push(Quarantined {
                    sandbox_id: id.filter(|i| warren_api::ids::validate_sandbox_id(i).is_ok()),
                    moved_to,
                    reason: "quarantined at an earlier start".into(),
                });
            }
        }
        Ok(out)
    }

    /// The record of `id` as last saved, if it is there and readable.
    pub fn load(&self, id: &str) -> Option<SandboxRecord> {
        read_record(&self.path(id)).ok()
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

fn read_record(path: &Path) -> Result<SandboxRecord, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    serde_json::from_slice::<SandboxRecord>(&bytes).map_err(|e| e.to_string())
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
        assert_eq!(store.load_all().unwrap().records, vec![r]);
        store.delete("a").unwrap();
        store.delete("a").unwrap();
        assert!(store.load_all().unwrap().records.is_empty());
    }

    #[test]
    fn unreadable_and_future_records_are_kept_aside_and_reported_again() {
        let d = tempfile::tempdir().unwrap();
        let store = RecordStore::open(d.path()).unwrap();
        let good =
            SandboxRecord::new("a", &CreateSandboxRequest::default(), "n", "r", "i").unwrap();
        store.save(&good).unwrap();
        std::fs::write(d.path().join("broken.json"), b"{").unwrap();
        let mut future = good.clone();
        future.id = "later".into();
        future.format = RECORD_FORMAT + 1;
        std::fs::write(
            d.path().join("later.json"),
            serde_json::to_vec(&future).unwrap(),
        )
        .unwrap();
        let loaded = store.load_all().unwrap();
        assert_eq!(loaded.records, vec![good.clone()]);
        let mut ids: Vec<_> = loaded
            .quarantined
            .iter()
            .map(|q| q.sandbox_id.clone().unwrap())
            .collect();
        ids.sort();
        assert_eq!(ids, vec!["broken", "later"]);
        for q in &loaded.quarantined {
            assert!(q.moved_to.exists(), "kept, not deleted: {q:?}");
        }
        assert!(!d.path().join("broken.json").exists());
        // The next start still knows about them.
        let again = store.load_all().unwrap();
        assert_eq!(again.records, vec![good]);
        assert_eq!(again.quarantined.len(), 2);
    }
}
