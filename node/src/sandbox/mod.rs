//! Sandboxes on this node: records, their store, the lifecycle, and the manager.

pub mod lifecycle;
pub mod manager;
pub mod record;
pub mod store;
