//! A node's cluster identity: its certificate and key, node id and join token, kept in
//! `cluster/identity.json` (format-versioned) — read back on a restart, received by joining
//! through a member, or made with a new CA at bootstrap.

use crate::files::{load_or_create_secret, write_private};
use crate::settings::Settings;
use anyhow::{anyhow, Context};
use backon::{ConstantBuilder, Retryable};
use std::path::{Path, PathBuf};
use warren_consensus::join::{JoinRequest, JoinResponse};
use warren_transport::{tls, CaMaterial, NodeIdentity};

/// An error and every cause under it, as one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

/// Whether a request failed because the server's certificate is not trusted (rustls says
/// so in the error's causes).
fn untrusted_certificate(e: &reqwest::Error) -> bool {
    let chain = error_chain(e);
    chain.contains("invalid peer certificate") || chain.contains("UnknownIssuer")
}

/// The node's cluster identity on disk (format-versioned).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct StoredIdentity {
    pub format: u32,
    pub node_id: u64,
    pub identity: NodeIdentity,
    pub join_token: String,
    /// The CA this node created, kept until the cluster's first entries are committed (so an
    /// interrupted bootstrap resumes with the same CA).
    #[serde(default)]
    pub bootstrap_ca: Option<warren_transport::CaMaterial>,
}

pub const IDENTITY_FORMAT: u32 = 1;

/// The CA (with its key) this node signs with, from its CA file; a bootstrap interrupted
/// before the file was written writes it from the CA it kept. None: this node does not sign.
pub fn read_ca_file(
    path: &Path,
    bootstrap_ca: Option<&warren_transport::CaMaterial>,
) -> anyhow::Result<Option<warren_transport::CaMaterial>> {
    match std::fs::read_to_string(path) {
        Ok(pem) => warren_transport::CaMaterial::parse_file(&pem)
            .map(Some)
            .with_context(|| format!("CA file {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(ca) = bootstrap_ca {
                write_private(path, &ca.file_pem())?;
            }
            Ok(bootstrap_ca.cloned())
        }
        Err(e) => Err(anyhow::anyhow!("CA file {}: {e}", path.display())),
    }
}

/// Says at start when this node's certificate has expired: its peers refuse it, and it
/// cannot renew it over the peer protocol.
pub fn warn_if_expired(identity: &NodeIdentity) {
    if let Ok(v) = tls::validity_of(&identity.cert_pem) {
        if v.not_after <= tls::unix_now() {
            tracing::error!(
                expired_at = v.not_after,
                "this node's certificate has expired (it was off longer than cert_lifetime_s): peers refuse it; admit it again with a fresh data dir, or give it a CA file"
            );
        }
    }
}

/// Asks a member to admit this node; checks that the answer proves the same join token.
async fn join(
    seed: &str,
    token: &str,
    s: &Settings,
    api_addr: &str,
    peer_addr: &str,
    secrets_key_path: &Path,
) -> anyhow::Result<StoredIdentity> {
    let (key_pem, csr) = tls::new_key_and_csr(&s.name)?;
    let req = JoinRequest::new(
        token, &s.name, &s.region, api_addr, peer_addr, s.capacity, &csr,
    );
    let url = format!("{}/internal/v1/join", seed.trim_end_matches('/'));
    let mut http = reqwest::Client::builder();
    if let Some(path) = &s.join_ca_file {
        let pem = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("{}: not a PEM certificate bundle", path.display()))?
        {
            http = http.add_root_certificate(cert);
        }
    }
    let http = http.build()?;
    // The seed may still be starting, or the cluster cannot commit yet: try for a while.
    // A refusal (a wrong token, a member's name) or a seed this node does not trust will not
    // change by waiting: those end the join at once.
    let resp = (|| ask_to_join(&http, &url, &req, seed))
        .retry(
            ConstantBuilder::default()
                .with_delay(JOIN_RETRY_EVERY)
                .with_max_times(JOIN_TRIES - 1),
        )
        .when(|e: &JoinFailure| matches!(e, JoinFailure::Transient(_)))
        .await
        .map_err(|e| match e {
            JoinFailure::Transient(last) => anyhow!("could not join through {seed}: {last}"),
            JoinFailure::Final(e) => e,
        })?;
    anyhow::ensure!(
        resp.verify(token),
        "the answer from {seed} does not prove the join token"
    );
    let sealed = resp
        .secrets_key
        .as_ref()
        .context("the cluster sent no secrets key (a member of an older version?)")?;
    warren_consensus::secrets::SecretsKey::open_from_join(token, sealed)
        .and_then(|k| k.write(secrets_key_path))
        .context("the secrets key from the join answer")?;
    let identity = NodeIdentity {
        name: s.name.clone(),
        cert_pem: resp.cert_pem,
        key_pem,
        ca_pem: resp.ca_pem,
    };
    tracing::info!(node_id = resp.node_id, cluster = %resp.cluster, "joined");
    Ok(StoredIdentity {
        format: IDENTITY_FORMAT,
        node_id: resp.node_id,
        identity,
        // An issued token is spent (or expires): it is not this node's to admit others
        // with. The cluster's own token is.
        join_token: if warren_api::join_tokens::token_id(token).is_some() {
            String::new()
        } else {
            token.to_string()
        },
        bootstrap_ca: None,
    })
}

/// How many times a joining node asks its seed, and how long it waits between tries.
const JOIN_TRIES: usize = 60;
const JOIN_RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

/// Why one join request did not admit this node.
enum JoinFailure {
    /// Worth another try (the seed is starting, or its cluster cannot commit yet).
    Transient(String),
    /// Another try would get the same answer.
    Final(anyhow::Error),
}

/// One join request to the seed.
async fn ask_to_join(
    http: &reqwest::Client,
    url: &str,
    req: &JoinRequest,
    seed: &str,
) -> Result<JoinResponse, JoinFailure> {
    match http.post(url).json(req).send().await {
        Ok(r) if r.status().is_success() => r
            .json()
            .await
            .map_err(|e| JoinFailure::Transient(format!("the answer was cut: {e}"))),
        // A wrong token, a name that is already a member's, a request the seed cannot
        // take, a cluster that cannot sign: asking again gets the same answer. Only a seed
        // that is starting or cannot commit (5xx), or one that holds requests off (408,
        // 429), is asked again.
        Ok(r) if final_refusal(r.status()) => Err(JoinFailure::Final(anyhow!(
            "{seed} refused the join: {}",
            r.text().await.unwrap_or_default()
        ))),
        Ok(r) => Err(JoinFailure::Transient(format!(
            "{}: {}",
            r.status(),
            r.text().await.unwrap_or_default()
        ))),
        // join_ca_file names the CA to trust.
        Err(e) if untrusted_certificate(&e) => Err(JoinFailure::Final(anyhow!(
            "{seed}'s certificate is not trusted ({}); set join_ca_file to the CA that issued it",
            error_chain(&e)
        ))),
        Err(e) => Err(JoinFailure::Transient(e.to_string())),
    }
}

/// Whether a join answered with `status` is refused for good.
fn final_refusal(status: reqwest::StatusCode) -> bool {
    status.is_client_error()
        && status != reqwest::StatusCode::REQUEST_TIMEOUT
        && status != reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Where a node's files of the cluster live, under `cluster_dir`.
pub struct IdentityPaths {
    pub identity: PathBuf,
    pub secrets_key: PathBuf,
    pub ca: PathBuf,
}

impl IdentityPaths {
    pub fn of(s: &Settings, cluster_dir: &Path) -> Self {
        IdentityPaths {
            identity: cluster_dir.join("identity.json"),
            secrets_key: s
                .secrets_key_file
                .clone()
                .unwrap_or_else(|| cluster_dir.join("secrets.key")),
            ca: s
                .ca_file
                .clone()
                .unwrap_or_else(|| cluster_dir.join("ca.pem")),
        }
    }
}

/// This node's identity, and at bootstrap the CA it made (kept in the identity file until
/// the cluster's first entries are committed, so that an interrupted bootstrap resumes with
/// the same CA): read back on a restart, received by joining `s.join` (the node's API
/// answers at `api_addr`), or made for node 1 of a new cluster.
pub async fn establish(
    s: &Settings,
    cluster_dir: &Path,
    paths: &IdentityPaths,
    api_addr: &str,
) -> anyhow::Result<(StoredIdentity, Option<CaMaterial>)> {
    let cert_lifetime = std::time::Duration::from_secs(s.cert_lifetime_s);
    let (id_path, ca_path, secrets_key_path) = (&paths.identity, &paths.ca, &paths.secrets_key);
    Ok(if id_path.exists() {
        let stored: StoredIdentity =
            serde_json::from_slice(&std::fs::read(id_path)?).context("identity.json")?;
        anyhow::ensure!(
            stored.format == IDENTITY_FORMAT,
            "identity.json has an unknown format {}",
            stored.format
        );
        anyhow::ensure!(
            stored.identity.name == s.name,
            "this data dir belongs to node {}",
            stored.identity.name
        );
        let ca = stored.bootstrap_ca.clone();
        (stored, ca)
    } else if let Some(seed) = &s.join {
        let token = s.join_token.clone().context("joining needs join_token")?;
        let peer_addr = s.advertise_peer.clone().unwrap_or(s.peer_listen.clone());
        anyhow::ensure!(
            !peer_addr.ends_with(":0"),
            "a joining node needs a fixed peer port (peer_listen)"
        );
        let stored = join(seed, &token, s, api_addr, &peer_addr, secrets_key_path).await?;
        store(id_path, &stored)?;
        (stored, None)
    } else {
        let token = match &s.join_token {
            Some(t) => t.clone(),
            None => load_or_create_secret(&cluster_dir.join("join-token"), "wj_")?,
        };
        let ca = tls::new_ca(&s.name)?;
        // The CA's key is kept here, never in the cluster's replicated state.
        write_private(ca_path, &ca.file_pem())?;
        // The first node of a cluster is node 1.
        let identity = tls::issue(&ca, &s.name, 1, cert_lifetime)?;
        let stored = StoredIdentity {
            format: IDENTITY_FORMAT,
            node_id: 1,
            identity,
            join_token: token,
            bootstrap_ca: Some(ca.clone()),
        };
        store(id_path, &stored)?;
        (stored, Some(ca))
    })
}

/// Stores `stored` as this node's identity (atomically, mode 0600).
pub fn store(path: &Path, stored: &StoredIdentity) -> anyhow::Result<()> {
    write_private(path, &serde_json::to_string(stored)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::StatusCode;

    #[test]
    fn a_join_is_asked_again_only_while_the_seed_may_answer_otherwise() {
        for final_ in [400, 403, 404, 409, 413] {
            assert!(
                final_refusal(StatusCode::from_u16(final_).unwrap()),
                "{final_}"
            );
        }
        for again in [408, 429, 500, 502, 503] {
            assert!(
                !final_refusal(StatusCode::from_u16(again).unwrap()),
                "{again}"
            );
        }
    }
}
