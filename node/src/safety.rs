//! Whether this node may start sandboxes: every guarantee the sandbox boundary rests on
//! (the firewall in place, root in a sandbox not root on the host) holds. A node where one
//! does not refuses to start any container, says why in `/healthz` (503) and in its log,
//! and never runs sandboxes open instead.

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
}

impl Guarantee {
    pub fn name(self) -> &'static str {
        match self {
            Guarantee::Firewall => "firewall",
            Guarantee::UserNamespaces => "user_namespaces",
        }
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

    /// Records that `g` holds (`None`) or does not, and why. Logged when it changes.
    pub fn set(&self, g: Guarantee, problem: Option<String>) {
        let mut broken = self.broken.write().expect("safety lock");
        match problem {
            Some(why) => {
                if broken.get(&g) != Some(&why) {
                    tracing::error!(guarantee = g.name(), problem = %why, "this node refuses to start sandboxes");
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
