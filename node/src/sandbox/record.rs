//! The persisted record of one sandbox (versioned format).

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use warren_api::egress::EgressPolicy;
use warren_api::sandbox::{
    CreateSandboxRequest, Isolation, Persist, Resources, Sandbox, SandboxState,
    DEFAULT_SLEEP_AFTER_S,
};
use warren_api::time::now_rfc3339;
use warren_api::ApiError;

/// Version of the on-disk record format.
pub const RECORD_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub format: u32,
    pub id: String,
    pub state: SandboxState,
    pub node: String,
    pub region: String,
    pub image: String,
    pub resources: Resources,
    pub instance_type: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    pub persist: Persist,
    pub sleep_after_s: u64,
    pub keep_alive: bool,
    pub created_at: String,
    pub last_active_at: String,
    /// The snapshot its files come back from when it wakes or its container is lost
    /// (written when it sleeps, restores or starts from a snapshot).
    #[serde(default)]
    pub snapshot: Option<String>,
    /// Grows each time its container (or guest) starts anew, and names the guest's address
    /// in the connection pool, so that a new guest never gets an old guest's connection.
    #[serde(default)]
    pub generation: u64,
    /// Exposed ports and their preview tokens.
    #[serde(default)]
    pub ports: BTreeMap<u16, PortExposure>,
    #[serde(default)]
    pub isolation: Isolation,
    /// What its egress proxy lets through (none: the default policy). Travels with the
    /// record through sleep, moves and forks; holds no secret value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressPolicy>,
    /// The cluster epoch from which this node's copy is the owner's: the placement's
    /// `owner_since` when the copy was made or taken over here. A copy whose epoch is older
    /// than the placement's `owner_since` is left from an earlier time this node owned the
    /// sandbox, and is never served. None: made on a node alone, or before epochs were
    /// recorded (trusted, as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortExposure {
    #[serde(default)]
    pub name: Option<String>,
    pub token: String,
    /// Opened without a token too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub public: bool,
}

impl SandboxRecord {
    /// A new record from a (validated) create request.
    pub fn new(
        id: &str,
        req: &CreateSandboxRequest,
        node: &str,
        region: &str,
        default_image: &str,
    ) -> Result<Self, ApiError> {
        req.validate()?;
        let now = now_rfc3339();
        Ok(SandboxRecord {
            format: RECORD_FORMAT,
            id: id.to_string(),
            state: SandboxState::Starting,
            node: node.to_string(),
            region: req.region.clone().unwrap_or_else(|| region.to_string()),
            image: req
                .image
                .clone()
                .unwrap_or_else(|| default_image.to_string()),
            resources: Resources::resolve(req.instance_type.as_deref(), req.resources.as_ref())?,
            instance_type: req.instance_type.clone(),
            labels: req.labels.clone().unwrap_or_default(),
            env: req.env.clone().unwrap_or_default(),
            persist: req.persist.clone().unwrap_or_default(),
            sleep_after_s: req
                .sleep_after
                .as_ref()
                .map(|s| s.seconds())
                .transpose()?
                .unwrap_or(DEFAULT_SLEEP_AFTER_S),
            keep_alive: req.keep_alive.unwrap_or(false),
            created_at: now.clone(),
            last_active_at: now,
            snapshot: None,
            generation: 0,
            ports: BTreeMap::new(),
            isolation: req.isolation.unwrap_or_default(),
            epoch: None,
            egress: req
                .egress
                .clone()
                .map(EgressPolicy::normalized)
                .transpose()?,
        })
    }

    /// Applies a `PUT` to an existing sandbox: mutable fields change; a different image or
    /// different resources are a conflict (the sandbox would have to be recreated).
    pub fn apply_put(&mut self, req: &CreateSandboxRequest) -> Result<bool, ApiError> {
        req.validate()?;
        if let Some(image) = &req.image {
            if *image != self.image {
                return Err(ApiError::new(
                    warren_api::ErrorCode::Conflict,
                    format!(
                        "sandbox {} exists with image {}; delete it to change the image",
                        self.id, self.image
                    ),
                ));
            }
        }
        if req.isolation.is_some_and(|i| i != self.isolation) {
            return Err(ApiError::new(
                warren_api::ErrorCode::Conflict,
                format!(
                    "sandbox {} exists with isolation {}; delete it to change it",
                    self.id,
                    self.isolation.as_str()
                ),
            ));
        }
        if req.resources.is_some() || req.instance_type.is_some() {
            let wanted = Resources::resolve(req.instance_type.as_deref(), req.resources.as_ref())?;
            if wanted != self.resources {
                return Err(ApiError::new(
                    warren_api::ErrorCode::Conflict,
                    format!(
                        "sandbox {} exists with other resources; delete it to change them",
                        self.id
                    ),
                ));
            }
        }
        let before = self.clone();
        if let Some(l) = &req.labels {
            self.labels = l.clone();
        }
        if let Some(s) = &req.sleep_after {
            self.sleep_after_s = s.seconds()?;
        }
        if let Some(k) = req.keep_alive {
            self.keep_alive = k;
        }
        if let Some(p) = &req.persist {
            self.persist = p.clone();
        }
        if let Some(e) = &req.egress {
            self.egress = Some(e.clone().normalized()?);
        }
        Ok(*self != before)
    }

    pub fn to_api(&self, last_active_at: Option<String>) -> Sandbox {
        Sandbox {
            id: self.id.clone(),
            state: self.state,
            node: self.node.clone(),
            region: self.region.clone(),
            image: self.image.clone(),
            resources: self.resources,
            instance_type: self.instance_type.clone(),
            labels: self.labels.clone(),
            persist: self.persist.clone(),
            sleep_after_s: self.sleep_after_s,
            keep_alive: self.keep_alive,
            isolation: self.isolation,
            created_at: self.created_at.clone(),
            last_active_at: last_active_at.unwrap_or_else(|| self.last_active_at.clone()),
        }
    }

    /// Name of the sandbox's guest run directory: short and fixed-length, because unix
    /// socket paths are limited to 108 bytes and sandbox ids may be 63 characters long.
    pub fn run_key(&self) -> String {
        run_key(&self.id)
    }
}

impl SandboxRecord {
    /// The guest's address for the connection pool: the run key and the generation.
    pub fn guest_key(&self) -> String {
        format!("{}-{}", self.run_key(), self.generation)
    }
}

pub fn run_key(id: &str) -> String {
    hex::encode(&Sha256::digest(id.as_bytes())[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(json: &str) -> CreateSandboxRequest {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn defaults_and_round_trip() {
        let r = SandboxRecord::new("sb", &req("{}"), "n1", "eu", "img:1").unwrap();
        assert_eq!(r.image, "img:1");
        assert_eq!(r.region, "eu");
        assert_eq!(r.sleep_after_s, DEFAULT_SLEEP_AFTER_S);
        assert_eq!(r.run_key().len(), 16);
        let back: SandboxRecord =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn put_changes_mutable_fields_and_refuses_others() {
        let mut r = SandboxRecord::new(
            "sb",
            &req(r#"{"instance_type": "basic"}"#),
            "n1",
            "eu",
            "img:1",
        )
        .unwrap();
        assert!(r
            .apply_put(&req(r#"{"labels": {"a": "b"}, "keep_alive": true}"#))
            .unwrap());
        assert!(r.keep_alive);
        assert!(!r.apply_put(&req(r#"{"instance_type": "basic"}"#)).unwrap());
        assert!(r.apply_put(&req(r#"{"image": "other"}"#)).is_err());
        assert!(r.apply_put(&req(r#"{"instance_type": "lite"}"#)).is_err());
    }
}
