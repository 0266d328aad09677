//! Who is calling: API keys (the node's bootstrap key and the keys of `/v1/keys`, kept in
//! the cluster state as hashes), the principal a key or ticket stands for, and whether it
//! may touch a tenant's resources. The entry node decides; a forwarded request carries its
//! principal to the owner in a header that only peers are believed on.

pub mod keys;
pub mod last_used;
pub mod principal;
pub mod rate;

pub use principal::Principal;
