//! Whether this node may start sandboxes: every guarantee the sandbox boundary rests on
//! (the firewall in place, root in a sandbox not root on the host) holds, and, in a cluster,
//! this node holds its ownership lease. A node where one does not refuses to start any
//! container, says why in `/healthz` (503) and in its log, and never runs sandboxes open
//! instead; while the firewall or the lease is missing its running sandboxes are frozen
//! (`SandboxManager`'s freezer).

use std::collections::BTreeMap;
use std::sync::RwLock;
use tokio::sync::watch;
use warren_api::{ApiError, ErrorCode};

/// One guarantee, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Guarantee {
    /// The sandbox firewall rules are installed (`runtime::firewall`).
    Firewall,
    /// Sandboxes run in user namespaces (Docker's `userns-remap`).
    UserNamespaces,
    /// This node holds its ownership lease: no other node may be running its sandboxes
    /// (`warren_consensus::lease`). Only in clusters of more than one node.
    Lease,
}

impl Guarantee {
    pub const ALL: [Guarantee; 3] = [
        Guarantee::Firewall,
        Guarantee::UserNamespaces,
        Guarantee::Lease,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Guarantee::Firewall => "firewall",
            Guarantee::UserNamespaces => "user_namespaces",
            Guarantee::Lease => "cluster_lease",
        }
    }

    /// Whether running sandboxes are frozen while it does not hold (their code could do
    /// harm meanwhile: send what the firewall would drop, or write beside another copy).
    pub fn freezes(self) -> bool {
        matches!(self, Guarantee::Firewall | Guarantee::Lease)
    }
}

/// The guarantees that do not hold now, each with why.
#[derive(Debug)]
pub struct Safety {
    broken: RwLock<BTreeMap<Guarantee, String>>,
    /// Bumped whenever a guarantee starts or stops holding.
    changes: watch::Sender<u64>,
}

impl Default for Safety {
    fn default() -> Self {
        Safety {
            broken: RwLock::default(),
            changes: watch::Sender::new(0),
        }
    }
}

impl Safety {
    /// Wakes whenever a guarantee starts or stops holding.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Whether `g` holds now.
    pub fn holds(&self, g: Guarantee) -> bool {
        !self.broken.read().expect("safety lock").contains_key(&g)
    }

    /// Waits up to `timeout` for `g` to hold; whether it does.
    pub async fn wait_holds(&self, g: Guarantee, timeout: std::time::Duration) -> bool {
        let mut rx = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.holds(g) {
                return true;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return self.holds(g);
            }
        }
    }

    /// Why running sandboxes must be frozen now (a guarantee that `freezes` is broken).
    pub fn freeze_reason(&self) -> Option<String> {
        self.broken
            .read()
            .expect("safety lock")
            .iter()
            .find(|(g, _)| g.freezes())
            .map(|(g, why)| format!("{}: {why}", g.name()))
    }

    /// Records that `g` holds (`None`) or does not, and why. Logged when it changes.
    pub fn set(&self, g: Guarantee, problem: Option<String>) {
        let mut broken = self.broken.write().expect("safety lock");
        match problem {
            Some(why) => {
                if broken.get(&g) != Some(&why) {
                    if g == Guarantee::Lease {
                        // Part of a cluster's normal life (starts, elections, partitions).
                        tracing::warn!(guarantee = g.name(), problem = %why, "this node's sandboxes are fenced");
                    } else {
                        tracing::error!(guarantee = g.name(), problem = %why, "this node refuses to start sandboxes");
                    }
                }
                if broken.insert(g, why).is_none() {
                    self.changes.send_modify(|v| *v += 1);
                }
            }
            None => {
                if broken.remove(&g).is_some() {
                    tracing::info!(guarantee = g.name(), "holds again; sandboxes may start");
                    self.changes.send_modify(|v| *v += 1);
                }
            }
        }
    }

    /// What does not hold now, by name.
    pub fn problems(&self) -> BTreeMap<&'static str, String> {
        self.broken
            .read()
            .expect("safety lock")
            .iter()
            .map(|(g, why)| (g.name(), why.clone()))
            .collect()
    }

    /// Ok when a container may be started; otherwise a retryable 503 that says why.
    pub fn check(&self) -> Result<(), ApiError> {
        let problems = self.problems();
        if problems.is_empty() {
            return Ok(());
        }
        let why: Vec<String> = problems.iter().map(|(g, w)| format!("{g}: {w}")).collect();
        Err(ApiError::new(
            ErrorCode::Unavailable,
            format!(
                "this node cannot start sandboxes safely ({})",
                why.join("; ")
            ),
        )
        .with_details(serde_json::json!({ "problems": problems })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_broken_guarantee_refuses_until_it_holds_again() {
        let s = Safety::default();
        assert!(s.check().is_ok());
        s.set(Guarantee::Firewall, Some("iptables: not found".into()));
        let e = s.check().unwrap_err();
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains("firewall: iptables: not found"), "{e:?}");
        assert!(e.retryable);
        s.set(Guarantee::UserNamespaces, Some("off".into()));
        assert_eq!(s.problems().len(), 2);
        s.set(Guarantee::Firewall, None);
        assert_eq!(
            s.problems().keys().copied().collect::<Vec<_>>(),
            vec!["user_namespaces"]
        );
        s.set(Guarantee::UserNamespaces, None);
        assert!(s.check().is_ok());
    }

    #[test]
    fn a_missing_firewall_or_lease_freezes_and_user_namespaces_only_refuse() {
        let s = Safety::default();
        assert_eq!(s.freeze_reason(), None);
        s.set(Guarantee::UserNamespaces, Some("off".into()));
        assert_eq!(
            s.freeze_reason(),
            None,
            "nothing runs unsafely: just no starts"
        );
        s.set(Guarantee::Lease, Some("cut off".into()));
        assert_eq!(s.freeze_reason().as_deref(), Some("cluster_lease: cut off"));
        s.set(Guarantee::Lease, None);
        s.set(Guarantee::Firewall, Some("flushed".into()));
        assert_eq!(s.freeze_reason().as_deref(), Some("firewall: flushed"));
    }

    #[tokio::test]
    async fn waiting_for_a_guarantee_ends_when_it_holds_or_at_the_deadline() {
        let s = std::sync::Arc::new(Safety::default());
        s.set(Guarantee::Lease, Some("not yet".into()));
        let short = std::time::Duration::from_millis(20);
        assert!(!s.wait_holds(Guarantee::Lease, short).await);
        let setter = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            setter.set(Guarantee::Lease, None);
        });
        assert!(
            s.wait_holds(Guarantee::Lease, std::time::Duration::from_secs(10))
                .await
        );
    }

    #[test]
    fn subscribers_see_each_change_of_what_holds() {
        let s = Safety::default();
        let mut rx = s.subscribe();
        s.set(Guarantee::Firewall, Some("gone".into()));
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        assert!(!s.holds(Guarantee::Firewall));
        // The same problem again, or another reason for it: still broken, no change.
        s.set(Guarantee::Firewall, Some("still gone".into()));
        assert!(!rx.has_changed().unwrap());
        s.set(Guarantee::Firewall, None);
        assert!(rx.has_changed().unwrap());
        assert!(s.holds(Guarantee::Firewall));
    }
}
