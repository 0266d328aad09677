//! What each sandbox sent and received through the proxy, counted as it passes.

use std::collections::HashMap;
use std::sync::Mutex;

/// Totals of one sandbox since the node started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EgressUsage {
    pub requests: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug, Default)]
pub struct UsageBook {
    by_sandbox: Mutex<HashMap<String, EgressUsage>>,
}

impl UsageBook {
    pub fn add(&self, sandbox: &str, f: impl FnOnce(&mut EgressUsage)) {
        let mut m = self.by_sandbox.lock().expect("usage lock");
        f(m.entry(sandbox.to_string()).or_default());
    }

    pub fn get(&self, sandbox: &str) -> EgressUsage {
        self.by_sandbox
            .lock()
            .expect("usage lock")
            .get(sandbox)
            .copied()
            .unwrap_or_default()
    }
}
