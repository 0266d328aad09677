//! Sandboxes on this node: records, their store, the lifecycle, the manager, progress
//! reports of its long transfers, and where recovery points are recorded.

pub mod admission;
pub mod lifecycle;
pub mod manager;
pub mod progress;
pub mod record;
pub mod recovery;
pub mod store;
