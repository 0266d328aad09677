//! Key rotation of secrets, carried out: each node tells the cluster which secrets keys it
//! holds (its key file, read at start), and the leader reseals every secret sealed under
//! another key than its own sealing one once every member holds that key (before, a member
//! without it could not open them). Once no secret is sealed under an old key any more
//! (`GET /v1/secrets` shows `key_id`), its line can leave the key files.

use crate::state::AppState;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use warren_consensus::Command;

/// How often the keys are published (when changed) and secrets resealed.
const EVERY: Duration = Duration::from_secs(5);

/// Runs until `cancel`.
pub fn spawn(st: AppState, cancel: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            round(&st).await;
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = tokio::time::sleep(EVERY) => {}
            }
        }
    })
}

async fn round(st: &AppState) {
    let cl = &st.cluster.cluster;
    let key = &st.cluster.secrets_key;
    let mine = key.ids();
    let said = cl.read(|s| s.nodes.get(&cl.id).map(|n| n.secrets_keys.clone()));
    if said.is_some_and(|k| k != mine) {
        let cmd = Command::SetSecretsKeys {
            node: cl.id,
            keys: mine,
        };
        if let Err(e) = cl.propose(cmd).await {
            tracing::warn!(error = %e, "cannot tell the cluster which secrets keys this node holds");
            return;
        }
    }
    if !cl.is_leader() {
        return;
    }
    let current = key.current_id();
    let due: Vec<(String, warren_consensus::secrets::Sealed)> = cl.read(|s| {
        s.to_reseal(current)
            .into_iter()
            .filter_map(|name| Some((name.clone(), s.secrets.get(&name)?.sealed.clone())))
            .collect()
    });
    for (name, from) in due {
        let value = match key.open(&name, &from) {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(secret = %name, error = %e, "cannot reseal a secret");
                continue;
            }
        };
        let cmd = Command::ResealSecret {
            sealed: key.seal(&name, &value),
            name: name.clone(),
            from,
        };
        match cl.propose(cmd).await {
            Ok(_) => {
                tracing::info!(secret = %name, key = current, "secret resealed under the current key")
            }
            Err(e) => {
                tracing::warn!(secret = %name, error = %e, "cannot reseal a secret");
                return;
            }
        }
    }
}
