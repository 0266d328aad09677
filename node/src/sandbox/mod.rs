//! Sandboxes on this node: records, their store, the lifecycle, the manager, and progress
//! reports of its long transfers.

pub mod lifecycle;
pub mod manager;
pub mod progress;
pub mod record;
pub mod store;
