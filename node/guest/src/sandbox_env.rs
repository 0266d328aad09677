//! The environment a sandbox's sessions, terminals and git calls start from: the container's
//! own (the image's, and the sandbox's `env` when the container was made for it), with the
//! sandbox's `env` as the node last sent it (`PUT /config`) over it. A warm container,
//! started before it was known whose it would be, gets its sandbox's environment that way.

use std::collections::BTreeMap;
use std::sync::RwLock;

pub struct SandboxEnv {
    container: BTreeMap<String, String>,
    sandbox: RwLock<BTreeMap<String, String>>,
}

impl SandboxEnv {
    pub fn new(container: BTreeMap<String, String>) -> Self {
        SandboxEnv {
            container,
            sandbox: RwLock::default(),
        }
    }

    /// The sandbox's `env`, as the node sent it (replacing what it sent before).
    pub fn set_sandbox(&self, env: BTreeMap<String, String>) {
        *self.sandbox.write().expect("env lock") = env;
    }

    /// The environment as of now.
    pub fn current(&self) -> BTreeMap<String, String> {
        let mut env = self.container.clone();
        env.extend(
            self.sandbox
                .read()
                .expect("env lock")
                .iter()
                .map(|(k, v)| (k.clone(), v.clone())),
        );
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandboxs_env_goes_over_the_containers() {
        let container = BTreeMap::from([
            ("PATH".to_string(), "/bin".to_string()),
            ("A".to_string(), "image".to_string()),
        ]);
        let env = SandboxEnv::new(container.clone());
        assert_eq!(env.current(), container);
        env.set_sandbox(BTreeMap::from([
            ("A".to_string(), "sandbox".to_string()),
            ("B".to_string(), "2".to_string()),
        ]));
        let now = env.current();
        assert_eq!(now["A"], "sandbox");
        assert_eq!(now["B"], "2");
        assert_eq!(now["PATH"], "/bin");
        env.set_sandbox(BTreeMap::new());
        assert_eq!(env.current(), container, "replaced, not merged");
    }
}
