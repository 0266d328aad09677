//! Sandboxes: the create request, resources and instance types, and the Sandbox resource.

use crate::ApiError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Lifecycle states visible to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    Starting,
    Running,
    Sleeping,
    Migrating,
    Failed,
}

impl SandboxState {
    pub const ALL: [SandboxState; 5] = [
        SandboxState::Starting,
        SandboxState::Running,
        SandboxState::Sleeping,
        SandboxState::Migrating,
        SandboxState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Starting => "starting",
            SandboxState::Running => "running",
            SandboxState::Sleeping => "sleeping",
            SandboxState::Migrating => "migrating",
            SandboxState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ApiError> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            ApiError::invalid(format!(
                "unknown state {s:?}: use starting, running, sleeping, migrating or failed"
            ))
        })
    }
}

/// CPU, memory, disk and process limits of one sandbox.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Resources {
    pub cpus: f64,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub pids: u64,
}

/// Resource overrides in a create request: any subset of [`Resources`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ResourcesRequest {
    pub cpus: Option<f64>,
    pub memory_mb: Option<u64>,
    pub disk_mb: Option<u64>,
    pub pids: Option<u64>,
}

/// The instance types of `api.md`, smallest first.
pub const INSTANCE_TYPES: [(&str, Resources); 6] = [
    (
        "lite",
        Resources {
            cpus: 0.0625,
            memory_mb: 256,
            disk_mb: 2048,
            pids: 256,
        },
    ),
    (
        "basic",
        Resources {
            cpus: 0.25,
            memory_mb: 1024,
            disk_mb: 4096,
            pids: 512,
        },
    ),
    (
        "standard-1",
        Resources {
            cpus: 0.5,
            memory_mb: 4096,
            disk_mb: 8192,
            pids: 1024,
        },
    ),
    (
        "standard-2",
        Resources {
            cpus: 1.0,
            memory_mb: 6144,
            disk_mb: 12288,
            pids: 1024,
        },
    ),
    (
        "standard-3",
        Resources {
            cpus: 2.0,
            memory_mb: 8192,
            disk_mb: 16384,
            pids: 2048,
        },
    ),
    (
        "standard-4",
        Resources {
            cpus: 4.0,
            memory_mb: 12288,
            disk_mb: 20480,
            pids: 4096,
        },
    ),
];

/// The instance type used when a request names none.
pub const DEFAULT_INSTANCE_TYPE: &str = "standard-1";

/// Resources of a named instance type.
pub fn instance_type(name: &str) -> Result<Resources, ApiError> {
    INSTANCE_TYPES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, r)| *r)
        .ok_or_else(|| {
            let names: Vec<&str> = INSTANCE_TYPES.iter().map(|(n, _)| *n).collect();
            ApiError::invalid(format!(
                "unknown instance_type {name:?}: use one of {}",
                names.join(", ")
            ))
        })
}

impl Resources {
    /// Starts from `instance_type` (or the default) and applies explicit overrides.
    pub fn resolve(
        instance: Option<&str>,
        overrides: Option<&ResourcesRequest>,
    ) -> Result<Resources, ApiError> {
        let mut r = instance_type(instance.unwrap_or(DEFAULT_INSTANCE_TYPE))?;
        if let Some(o) = overrides {
            if let Some(c) = o.cpus {
                r.cpus = c;
            }
            if let Some(m) = o.memory_mb {
                r.memory_mb = m;
            }
            if let Some(d) = o.disk_mb {
                r.disk_mb = d;
            }
            if let Some(p) = o.pids {
                r.pids = p;
            }
        }
        r.validate()?;
        Ok(r)
    }

    pub fn validate(&self) -> Result<(), ApiError> {
        if !(self.cpus.is_finite() && self.cpus >= 0.01 && self.cpus <= 64.0) {
            return Err(ApiError::invalid(
                "resources.cpus must be between 0.01 and 64",
            ));
        }
        if !(64..=1_048_576).contains(&self.memory_mb) {
            return Err(ApiError::invalid(
                "resources.memory_mb must be between 64 and 1048576",
            ));
        }
        if !(256..=16_777_216).contains(&self.disk_mb) {
            return Err(ApiError::invalid(
                "resources.disk_mb must be between 256 and 16777216",
            ));
        }
        if !(16..=1_000_000).contains(&self.pids) {
            return Err(ApiError::invalid(
                "resources.pids must be between 16 and 1000000",
            ));
        }
        Ok(())
    }
}

/// What survives sleep: `"disk"` (default), `{"dirs": [...]}`, or `"none"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Persist {
    Mode(PersistMode),
    Dirs { dirs: Vec<String> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum PersistMode {
    Disk,
    None,
}

impl Default for Persist {
    fn default() -> Self {
        Persist::Mode(PersistMode::Disk)
    }
}

impl Persist {
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Persist::Dirs { dirs } = self {
            if dirs.is_empty() {
                return Err(ApiError::invalid(
                    "persist.dirs must name at least one directory",
                ));
            }
            for d in dirs {
                crate::files::validate_path(d)?;
            }
        }
        Ok(())
    }
}

/// `sleep_after`: a duration string (`"30s"`, `"10m"`) or a number of seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum SleepAfter {
    Seconds(u64),
    Text(String),
}

/// Default idle time before a sandbox sleeps.
pub const DEFAULT_SLEEP_AFTER_S: u64 = 600;

impl SleepAfter {
    pub fn seconds(&self) -> Result<u64, ApiError> {
        let secs = match self {
            SleepAfter::Seconds(s) => *s,
            SleepAfter::Text(t) => {
                let t = t.trim();
                if let Ok(n) = t.parse::<u64>() {
                    n
                } else {
                    humantime::parse_duration(t)
                        .map_err(|e| {
                            ApiError::invalid(format!(
                                "invalid sleep_after {t:?} ({e}): use e.g. \"30s\", \"10m\" or seconds"
                            ))
                        })?
                        .as_secs()
                }
            }
        };
        if !(1..=Duration::from_secs(30 * 24 * 3600).as_secs()).contains(&secs) {
            return Err(ApiError::invalid(
                "sleep_after must be between 1 second and 30 days",
            ));
        }
        Ok(secs)
    }
}

/// What stands between a sandbox's code and its host's kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Isolation {
    /// A container: namespaces (user namespace included), cgroups, capabilities, seccomp.
    #[default]
    Container,
    /// A user-space kernel (gVisor) between the sandbox and the host.
    Gvisor,
}

impl Isolation {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolation::Container => "container",
            Isolation::Gvisor => "gvisor",
        }
    }
}

/// Body of `PUT /v1/sandboxes/{id}`; every field is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSandboxRequest {
    pub image: Option<String>,
    pub resources: Option<ResourcesRequest>,
    pub instance_type: Option<String>,
    pub sleep_after: Option<SleepAfter>,
    pub keep_alive: Option<bool>,
    pub env: Option<BTreeMap<String, String>>,
    pub labels: Option<BTreeMap<String, String>>,
    pub region: Option<String>,
    pub persist: Option<Persist>,
    pub from_snapshot: Option<String>,
    pub egress: Option<crate::egress::EgressPolicy>,
    pub isolation: Option<Isolation>,
}

impl CreateSandboxRequest {
    /// Checks every field that can be checked without IO.
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(image) = &self.image {
            validate_image(image)?;
        }
        Resources::resolve(self.instance_type.as_deref(), self.resources.as_ref())?;
        if let Some(s) = &self.sleep_after {
            s.seconds()?;
        }
        if let Some(env) = &self.env {
            validate_env(env.keys())?;
        }
        if let Some(labels) = &self.labels {
            validate_labels(labels)?;
        }
        if let Some(region) = &self.region {
            validate_region(region)?;
        }
        if let Some(p) = &self.persist {
            p.validate()?;
        }
        if let Some(e) = &self.egress {
            e.validate()?;
        }
        Ok(())
    }
}

/// The Sandbox resource.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Sandbox {
    pub id: String,
    pub state: SandboxState,
    pub node: String,
    pub region: String,
    pub image: String,
    pub resources: Resources,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub persist: Persist,
    pub sleep_after_s: u64,
    pub keep_alive: bool,
    #[serde(default)]
    pub isolation: Isolation,
    pub created_at: String,
    pub last_active_at: String,
}

/// `GET /v1/sandboxes` response.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SandboxList {
    pub sandboxes: Vec<Sandbox>,
    pub next_cursor: Option<String>,
}

/// Environment variable names: `[A-Za-z_][A-Za-z0-9_]*`, at most 256 chars.
pub fn validate_env<'a>(keys: impl IntoIterator<Item = &'a String>) -> Result<(), ApiError> {
    for k in keys {
        let b = k.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 256
            && (b[0].is_ascii_alphabetic() || b[0] == b'_')
            && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
        if !ok {
            return Err(ApiError::invalid(format!(
                "invalid environment variable name {k:?}"
            )));
        }
    }
    Ok(())
}

/// Labels: at most 64; keys 1–63 chars of `[A-Za-z0-9._/-]`; values at most 255 chars.
pub fn validate_labels(labels: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if labels.len() > 64 {
        return Err(ApiError::invalid("at most 64 labels"));
    }
    for (k, v) in labels {
        let ok = !k.is_empty()
            && k.len() <= 63
            && k.bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'/' | b'-'));
        if !ok {
            return Err(ApiError::invalid(format!("invalid label key {k:?}")));
        }
        if v.len() > 255 {
            return Err(ApiError::invalid(format!(
                "label {k:?}: value longer than 255"
            )));
        }
    }
    Ok(())
}

/// Regions are DNS labels, like sandbox ids.
pub fn validate_region(region: &str) -> Result<(), ApiError> {
    crate::ids::validate_sandbox_id(region)
        .map_err(|_| ApiError::invalid(format!("invalid region {region:?}")))
}

/// Image references: printable, no spaces, at most 255 chars.
pub fn validate_image(image: &str) -> Result<(), ApiError> {
    if image.is_empty() || image.len() > 255 || !image.bytes().all(|c| c.is_ascii_graphic()) {
        return Err(ApiError::invalid(format!(
            "invalid image reference {image:?}"
        )));
    }
    Ok(())
}

/// Parses a `label=k=v` filter.
pub fn parse_label_filter(s: &str) -> Result<(String, String), ApiError> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(ApiError::invalid(format!(
            "invalid label filter {s:?}: use key=value"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_type_then_overrides() {
        let r = Resources::resolve(
            Some("basic"),
            Some(&ResourcesRequest {
                memory_mb: Some(2048),
                ..Default::default()
            }),
        )
        .unwrap();
        assert_eq!(r.cpus, 0.25);
        assert_eq!(r.memory_mb, 2048);
        assert!(Resources::resolve(Some("huge"), None).is_err());
        assert!(Resources::resolve(
            None,
            Some(&ResourcesRequest {
                cpus: Some(0.0),
                ..Default::default()
            })
        )
        .is_err());
        assert_eq!(
            Resources::resolve(None, None).unwrap(),
            instance_type(DEFAULT_INSTANCE_TYPE).unwrap()
        );
    }

    #[test]
    fn sleep_after_accepts_strings_and_seconds() {
        assert_eq!(SleepAfter::Text("30s".into()).seconds().unwrap(), 30);
        assert_eq!(SleepAfter::Text("10m".into()).seconds().unwrap(), 600);
        assert_eq!(SleepAfter::Text("90".into()).seconds().unwrap(), 90);
        assert_eq!(SleepAfter::Seconds(45).seconds().unwrap(), 45);
        assert!(SleepAfter::Text("soon".into()).seconds().is_err());
        assert!(SleepAfter::Seconds(0).seconds().is_err());
    }

    #[test]
    fn persist_forms_parse() {
        let p: Persist = serde_json::from_str("\"disk\"").unwrap();
        assert_eq!(p, Persist::Mode(PersistMode::Disk));
        let p: Persist = serde_json::from_str("\"none\"").unwrap();
        assert_eq!(p, Persist::Mode(PersistMode::None));
        let p: Persist = serde_json::from_str(r#"{"dirs": ["/workspace"]}"#).unwrap();
        assert_eq!(
            p,
            Persist::Dirs {
                dirs: vec!["/workspace".into()]
            }
        );
        assert!(serde_json::from_str::<Persist>("\"all\"").is_err());
    }

    #[test]
    fn create_request_rejects_unknown_fields_and_bad_values() {
        assert!(serde_json::from_str::<CreateSandboxRequest>(r#"{"imagee": "x"}"#).is_err());
        let bad_env: CreateSandboxRequest =
            serde_json::from_str(r#"{"env": {"1X": "v"}}"#).unwrap();
        assert!(bad_env.validate().is_err());
        let ok: CreateSandboxRequest = serde_json::from_str(
            r#"{"env": {"X_1": "v"}, "labels": {"team": "a"}, "sleep_after": "5m", "isolation": "gvisor"}"#,
        )
        .unwrap();
        assert!(ok.validate().is_ok());
        assert_eq!(ok.isolation, Some(Isolation::Gvisor));
        assert!(serde_json::from_str::<CreateSandboxRequest>(r#"{"isolation": "vm"}"#).is_err());
    }
}
