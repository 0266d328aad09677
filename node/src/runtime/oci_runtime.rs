//! Which OCI runtime the engine runs sandbox containers with (`oci_runtime` setting):
//! the engine's default (`runc` with Docker) unless the operator names another runtime the
//! engine has registered (`crun`, `runsc`, ...). A name the engine does not have keeps the
//! node from starting, rather than failing every sandbox later.
//!
//! Why the default stays the engine's (measured with `WARREN_BENCH_ONLY=startpath make
//! bench`, docs/benchmarks.md "Where a container start spends its time"): `crun` shortens a
//! sandbox container's `docker start` by about a tenth on this project's machine, but on
//! its cgroup v1 host Debian's crun 1.8.1 refuses every container until the controllers
//! left on the v2 hierarchy are moved, and then fails some of the limit updates a taken
//! warm container gets ("writing file `memory.limit_in_bytes`: Device or resource busy",
//! seen in the hardening and snapshot end-to-end tests).

/// The `oci_runtime` setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OciRuntimeSetting {
    /// The engine's default runtime (`default`).
    EngineDefault,
    /// A runtime the engine knows by this name.
    Named(String),
}

impl OciRuntimeSetting {
    pub fn parse(s: &str) -> Result<Self, String> {
        match s.trim() {
            "default" => Ok(Self::EngineDefault),
            "" => Err("oci_runtime must be default or the name of a runtime the engine has".into()),
            name if name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
                && !name.starts_with('.') =>
            {
                Ok(Self::Named(name.to_string()))
            }
            other => Err(format!("oci_runtime {other:?} is not a runtime name")),
        }
    }
}

/// What sandbox containers are created with: `Some(name)` names the runtime, `None` leaves
/// the engine's default. `listed` are the runtimes the engine has (`docker info`).
pub fn choose(setting: &OciRuntimeSetting, listed: &[String]) -> Result<Option<String>, String> {
    match setting {
        OciRuntimeSetting::EngineDefault => Ok(None),
        OciRuntimeSetting::Named(name) if listed.iter().any(|l| l == name) => {
            Ok(Some(name.clone()))
        }
        OciRuntimeSetting::Named(name) => Err(format!(
            "the container engine has no runtime named {name} (it has: {}); register it with dockerd (--add-runtime {name}=/usr/bin/{name}, or \"runtimes\" in /etc/docker/daemon.json) or set oci_runtime = \"default\"",
            listed.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_named_runtime_must_be_one_the_engine_has() {
        let crun = OciRuntimeSetting::Named("crun".into());
        assert_eq!(
            choose(&crun, &listed(&["runc", "crun"])),
            Ok(Some("crun".into()))
        );
        let err = choose(&crun, &listed(&["runc", "io.containerd.runc.v2"])).unwrap_err();
        assert!(
            err.contains("no runtime named crun") && err.contains("runc"),
            "{err}"
        );
        assert!(choose(&crun, &[]).is_err());
    }

    #[test]
    fn the_default_leaves_the_engine_its_own() {
        assert_eq!(
            choose(&OciRuntimeSetting::EngineDefault, &listed(&["crun"])),
            Ok(None)
        );
        assert_eq!(choose(&OciRuntimeSetting::EngineDefault, &[]), Ok(None));
    }

    #[test]
    fn settings_parse() {
        assert_eq!(
            OciRuntimeSetting::parse(" default "),
            Ok(OciRuntimeSetting::EngineDefault)
        );
        assert_eq!(
            OciRuntimeSetting::parse("crun"),
            Ok(OciRuntimeSetting::Named("crun".into()))
        );
        assert_eq!(
            OciRuntimeSetting::parse("io.containerd.runc.v2"),
            Ok(OciRuntimeSetting::Named("io.containerd.runc.v2".into()))
        );
        assert!(OciRuntimeSetting::parse("").is_err());
        assert!(OciRuntimeSetting::parse("crun --debug").is_err());
        assert!(OciRuntimeSetting::parse("../x").is_err());
    }
}
