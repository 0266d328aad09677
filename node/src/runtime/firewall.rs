//! Host firewall rules that leave a sandbox no way out but its node's egress proxy
//! (`rules` says how), installed before the first sandbox starts and kept in place while
//! the node runs (`keep`). When they cannot be installed, or vanish and cannot be put
//! back, the node's `Safety` says so and no container is started until they are.

mod install;
mod rules;

pub use install::{install, remove_egress_chain, verify, FirewallError, Tools};
pub use rules::{
    bridge_prefix, egress_chain, plan, Family, Options, Plan, Table, BRIDGE_PREFIX, CHAIN_FORWARD,
    CHAIN_INPUT, EGRESS_PORTS, TRANSPARENT_PORTS,
};

use crate::safety::{Guarantee, Safety};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// How often the rules are checked while the node runs.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// Installs the rules now (recording the outcome in `safety`), then checks them every
/// `CHECK_EVERY` until `cancel`, putting back what went missing (another program flushed
/// a chain, Docker reordered `DOCKER-USER`) or installing them when the first try failed,
/// and installs them again at once whenever `opts` changes (the proxy's port). It keeps
/// checking after the sender of `opts` is dropped.
/// Returns the checking task and the first installation's outcome.
pub async fn keep(
    tools: Tools,
    mut opts: watch::Receiver<Options>,
    safety: Arc<Safety>,
    cancel: CancellationToken,
) -> (tokio::task::JoinHandle<()>, Result<(), FirewallError>) {
    let first = apply(&tools, opts.borrow_and_update().clone(), false).await;
    safety.set(
        Guarantee::Firewall,
        first.as_ref().err().map(ToString::to_string),
    );
    let task = tokio::spawn(async move {
        // Once whoever set the options is gone they no longer change, but the rules are
        // still checked: only `cancel` ends the keeper.
        let mut may_change = true;
        loop {
            let changed = tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(CHECK_EVERY) => false,
                r = opts.changed(), if may_change => {
                    may_change = r.is_ok();
                    may_change
                }
            };
            let current = opts.borrow_and_update().clone();
            let outcome = apply(&tools, current, changed).await;
            safety.set(Guarantee::Firewall, outcome.err().map(|e| e.to_string()));
        }
    });
    (task, first)
}

/// Installs the rules (`fresh`), or checks them and installs them again if they differ.
async fn apply(tools: &Tools, opts: Options, fresh: bool) -> Result<(), FirewallError> {
    let tools = tools.clone();
    tokio::task::spawn_blocking(move || {
        if !fresh {
            match verify(&tools, &opts) {
                Ok(()) => return Ok(()),
                Err(missing) => {
                    tracing::warn!(problem = %missing, "the sandbox firewall changed; installing it again")
                }
            }
        }
        install(&tools, &opts)
    })
    .await
    .unwrap_or_else(|e| Err(FirewallError(e.to_string())))
}
