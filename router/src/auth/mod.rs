//! Who is calling: API keys (the node's bootstrap key and the keys of `/v1/keys`, kept in
//! the cluster state as hashes), the principal a key or ticket stands for, and whether it
//! may touch a tenant's resources. The entry node decides; a forwarded request carries its
//! principal to the owner in a header that only peers are believed on.

pub mod keys;
pub mod last_used;
pub mod principal;
pub mod rate;

pub use principal::Principal;

use crate::state::AppState;

/// The token of an `Authorization: Bearer <token>` header (either case of the scheme).
pub fn bearer_of(headers: &http::HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    v.strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .map(str::trim)
}

/// The address a client's connection came from (the public listener records it; none on a
/// peer's forwarded request or an in-process call).
pub fn client_ip(extensions: &http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Who `presented` is by this node's applied state: the bootstrap key or a `/v1/keys` key.
pub fn key_principal(st: &AppState, presented: &str) -> Option<Principal> {
    st.cluster
        .cluster
        .read(|s| keys::resolve(s, &st.api_key, presented))
}
