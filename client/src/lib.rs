//! Rust client for the warren public API (`docs/api.md`): typed calls, streamed files and
//! SSE event streams. Depends only on `warren-api` and an HTTP client; never on node code.

mod egress;
mod files;
mod interpreter;
mod keys;
mod ports;
mod processes;
mod snapshots;
mod stream;
mod terminals;
mod watch;

pub use snapshots::TransferProgress;
pub use stream::EventStream;
pub use terminals::{TerminalEvent, TerminalSocket};

use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::path::PathBuf;
use warren_api::exec::{ExecEvent, ExecRequest, ExecResponse};
use warren_api::git::{GitCheckoutRequest, GitCheckoutResponse};
use warren_api::sandbox::{CreateSandboxRequest, Sandbox, SandboxList};
use warren_api::session::{CreateSessionRequest, PatchEnvRequest, PatchEnvResponse, SessionInfo};
use warren_api::ApiError;

/// Default address of `warren dev`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:7070";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server answered with an error of the API's model.
    #[error("{status}: {error}")]
    Api { status: u16, error: ApiError },
    #[error("request failed: {0}")]
    Http(#[from] reqwest::Error),
    #[error("unexpected response: {0}")]
    Decode(String),
    #[error("{0}")]
    Config(String),
}

impl Error {
    /// The API error code, when the server sent one.
    pub fn code(&self) -> Option<warren_api::ErrorCode> {
        match self {
            Error::Api { error, .. } => Some(error.code),
            _ => None,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Where `warren dev` keeps its data (and its API key): `$WARREN_DATA_DIR`, else
/// `$XDG_DATA_HOME/warren/dev`, else `~/.local/share/warren/dev` (the home from the
/// password database when `HOME` is unset), else `/var/lib/warren/dev`.
pub fn dev_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("WARREN_DATA_DIR") {
        return PathBuf::from(d);
    }
    // The user's data dir ($XDG_DATA_HOME, else ~/.local/share); /var/lib without a home.
    directories::BaseDirs::new()
        .map(|d| d.data_dir().to_path_buf())
        .unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join("warren/dev")
}

/// The API key file inside a data dir.
pub fn api_key_path(data_dir: &std::path::Path) -> PathBuf {
    data_dir.join("api-key")
}

/// Environment variable naming a PEM file of CAs a client trusts for an `https` node.
pub const CA_FILE_ENV: &str = "WARREN_CA_FILE";

#[derive(Clone)]
pub struct Client {
    base: String,
    key: String,
    http: reqwest::Client,
}

impl Client {
    /// A client of the node at `base_url`. An `https` node whose certificate is not from a
    /// public CA is trusted through `WARREN_CA_FILE` (a PEM bundle).
    pub fn new(base_url: &str, api_key: &str) -> Result<Self> {
        let ca = match std::env::var_os(CA_FILE_ENV) {
            Some(path) if !path.is_empty() => Some(std::fs::read(&path).map_err(|e| {
                Error::Config(format!(
                    "{CA_FILE_ENV}: cannot read {}: {e}",
                    std::path::Path::new(&path).display()
                ))
            })?),
            _ => None,
        };
        Self::with_root_ca(base_url, api_key, ca.as_deref())
    }

    /// Like [`Client::new`], trusting the CAs of `ca_pem` besides the public ones.
    pub fn with_root_ca(base_url: &str, api_key: &str, ca_pem: Option<&[u8]>) -> Result<Self> {
        // Idle connections are dropped well before a node closes them (after its header
        // timeout, 10 s by default): a request sent as the node closes one would fail.
        let mut builder = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .pool_idle_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true);
        if let Some(pem) = ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| Error::Config(format!("not a PEM certificate bundle: {e}")))?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build()?;
        Ok(Client {
            base: base_url.trim_end_matches('/').to_string(),
            key: api_key.to_string(),
            http,
        })
    }

    /// `WARREN_URL` (default the dev node) and `WARREN_API_KEY`, else the dev node's key file.
    pub fn from_env() -> Result<Self> {
        let url = std::env::var("WARREN_URL").unwrap_or_else(|_| DEFAULT_URL.to_string());
        let key = match std::env::var("WARREN_API_KEY") {
            Ok(k) if !k.is_empty() => k,
            _ => {
                let path = api_key_path(&dev_data_dir());
                std::fs::read_to_string(&path).map(|k| k.trim().to_string()).map_err(|_| {
                    Error::Config(format!(
                        "no API key: set WARREN_API_KEY, or start a dev node (`warren dev`) which writes {}",
                        path.display()
                    ))
                })?
            }
        };
        Client::new(&url, &key)
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// A request to `path` (below the base URL) with the bearer token.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.key)
    }

    fn sandbox_path(id: &str, rest: &str) -> String {
        format!("/v1/sandboxes/{id}{rest}")
    }

    /// Turns a non-2xx response into [`Error::Api`].
    pub async fn check(resp: Response) -> Result<Response> {
        if resp.status().is_success() {
            return Ok(resp);
        }
        let status = resp.status().as_u16();
        let body = resp.bytes().await?;
        let error = ApiError::from_response(status, &body);
        Err(Error::Api { status, error })
    }

    async fn json<T: DeserializeOwned>(&self, rb: RequestBuilder) -> Result<T> {
        let resp = Self::check(rb.send().await?).await?;
        let bytes = resp.bytes().await?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::Decode(format!("{e}: {}", String::from_utf8_lossy(&bytes))))
    }

    async fn call<B: Serialize, T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &B,
    ) -> Result<T> {
        self.json(self.request(method, path).json(body)).await
    }

    pub async fn health(&self) -> Result<serde_json::Value> {
        self.json(self.http.get(format!("{}/healthz", self.base)))
            .await
    }

    /// `PUT /v1/sandboxes/{id}`; true when it was created.
    pub async fn put_sandbox(
        &self,
        id: &str,
        req: &CreateSandboxRequest,
    ) -> Result<(Sandbox, bool)> {
        let resp = Self::check(
            self.request(Method::PUT, &Self::sandbox_path(id, ""))
                .json(req)
                .send()
                .await?,
        )
        .await?;
        let created = resp.status() == StatusCode::CREATED;
        Ok((resp.json().await?, created))
    }

    pub async fn get_sandbox(&self, id: &str) -> Result<Sandbox> {
        self.json(self.request(Method::GET, &Self::sandbox_path(id, "")))
            .await
    }

    /// `GET /v1/sandboxes` with raw query pairs (`state`, `label`, `region`, `limit`, `cursor`).
    pub async fn list_sandboxes(&self, query: &[(&str, &str)]) -> Result<SandboxList> {
        self.json(self.request(Method::GET, "/v1/sandboxes").query(query))
            .await
    }

    /// `GET /v1/usage` with its query (`sandbox`, `label`, `from`, `to`, `group_by`).
    pub async fn usage(&self, query: &[(&str, &str)]) -> Result<warren_api::usage::UsageReport> {
        self.json(self.request(Method::GET, "/v1/usage").query(query))
            .await
    }

    /// `GET /v1/cluster`: leader, term, loss window and members.
    pub async fn cluster(&self) -> Result<serde_json::Value> {
        self.json(self.request(Method::GET, "/v1/cluster")).await
    }

    /// `POST /v1/cluster/nodes/{node}/drain`: every sandbox moves off the node.
    pub async fn drain_node(&self, node: &str) -> Result<serde_json::Value> {
        self.json(self.request(Method::POST, &format!("/v1/cluster/nodes/{node}/drain")))
            .await
    }

    /// `DELETE /v1/cluster/nodes/{node}` (`force`: also a node that is down or not drained).
    pub async fn remove_node(&self, node: &str, force: bool) -> Result<()> {
        let rb = self
            .request(Method::DELETE, &format!("/v1/cluster/nodes/{node}"))
            .query(&[("force", force)]);
        Self::check(rb.send().await?).await?;
        Ok(())
    }

    pub async fn delete_sandbox(&self, id: &str) -> Result<()> {
        Self::check(
            self.request(Method::DELETE, &Self::sandbox_path(id, ""))
                .send()
                .await?,
        )
        .await?;
        Ok(())
    }

    pub async fn exec(&self, id: &str, req: &ExecRequest) -> Result<ExecResponse> {
        self.call(Method::POST, &Self::sandbox_path(id, "/exec"), req)
            .await
    }

    /// Shorthand: run a shell command in the default session.
    pub async fn sh(&self, id: &str, command: &str) -> Result<ExecResponse> {
        self.exec(
            id,
            &ExecRequest {
                command: Some(command.to_string()),
                ..Default::default()
            },
        )
        .await
    }

    /// Exec with SSE: events arrive as the command produces output.
    pub async fn exec_stream(&self, id: &str, req: &ExecRequest) -> Result<EventStream<ExecEvent>> {
        let rb = self
            .request(Method::POST, &Self::sandbox_path(id, "/exec"))
            .json(req);
        EventStream::open(rb).await
    }

    pub async fn create_session(
        &self,
        id: &str,
        req: &CreateSessionRequest,
    ) -> Result<SessionInfo> {
        self.call(Method::POST, &Self::sandbox_path(id, "/sessions"), req)
            .await
    }

    pub async fn delete_session(&self, id: &str, session: &str) -> Result<()> {
        Self::check(
            self.request(
                Method::DELETE,
                &Self::sandbox_path(id, &format!("/sessions/{session}")),
            )
            .send()
            .await?,
        )
        .await?;
        Ok(())
    }

    pub async fn patch_env(&self, id: &str, req: &PatchEnvRequest) -> Result<PatchEnvResponse> {
        self.call(Method::PATCH, &Self::sandbox_path(id, "/env"), req)
            .await
    }

    pub async fn git_checkout(
        &self,
        id: &str,
        req: &GitCheckoutRequest,
    ) -> Result<GitCheckoutResponse> {
        self.call(Method::POST, &Self::sandbox_path(id, "/git/checkout"), req)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test runs in a process of its own under nextest, so the environment is its own.
    #[test]
    fn the_dev_data_dir_is_the_named_one_then_the_users_data_dir() {
        std::env::remove_var("WARREN_DATA_DIR");
        std::env::set_var("XDG_DATA_HOME", "/srv/xdg-data");
        assert_eq!(dev_data_dir(), PathBuf::from("/srv/xdg-data/warren/dev"));
        std::env::remove_var("XDG_DATA_HOME");
        std::env::set_var("HOME", "/home/agent");
        assert_eq!(
            dev_data_dir(),
            PathBuf::from("/home/agent/.local/share/warren/dev")
        );
        std::env::set_var("WARREN_DATA_DIR", "/var/lib/w");
        assert_eq!(dev_data_dir(), PathBuf::from("/var/lib/w"));
    }
}
