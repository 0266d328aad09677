//! The environment a sandbox's sessions, terminals and git calls start from: the container's
//! own (the image's, and the sandbox's `env` when the container was made for it), with the
//! sandbox's `env` from the run directory's `env.json` over it when the node wrote one there
//! (`warren_api::session::GUEST_ENV_FILE`: a warm container, started before it was known
//! whose it would be, gets its sandbox's environment that way).

use std::collections::BTreeMap;
use std::path::PathBuf;

pub struct SandboxEnv {
    container: BTreeMap<String, String>,
    file: PathBuf,
}

impl SandboxEnv {
    pub fn new(container: BTreeMap<String, String>, file: PathBuf) -> Self {
        SandboxEnv { container, file }
    }

    /// The environment as of now.
    pub fn current(&self) -> BTreeMap<String, String> {
        let mut env = self.container.clone();
        match std::fs::read(&self.file) {
            Ok(bytes) => match serde_json::from_slice::<BTreeMap<String, String>>(&bytes) {
                Ok(extra) => env.extend(extra),
                Err(e) => eprintln!("warren-guest: ignoring {}: {e}", self.file.display()),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => eprintln!("warren-guest: cannot read {}: {e}", self.file.display()),
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_goes_over_the_containers_env_when_there() {
        let t = tempfile::tempdir().unwrap();
        let file = t.path().join("env.json");
        let container = BTreeMap::from([
            ("PATH".to_string(), "/bin".to_string()),
            ("A".to_string(), "image".to_string()),
        ]);
        let env = SandboxEnv::new(container.clone(), file.clone());
        assert_eq!(env.current(), container);
        std::fs::write(&file, r#"{"A": "sandbox", "B": "2"}"#).unwrap();
        let now = env.current();
        assert_eq!(now["A"], "sandbox");
        assert_eq!(now["B"], "2");
        assert_eq!(now["PATH"], "/bin");
        std::fs::write(&file, "not json").unwrap();
        assert_eq!(env.current(), container, "a broken file is ignored");
    }
}
