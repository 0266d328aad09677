//! Generations of a cluster: a cluster rebuilt from a survivor of a lost majority
//! (`recover`) is the next generation of the one before, and the nodes it left behind must
//! never take part in it, nor run their old one beside it.
//!
//! Every RPC envelope carries its sender's generation (none while the sender has applied
//! nothing: a node joining). An exchange between two generations is refused by the newer
//! side (a node left behind cannot hand a recovered leader its higher term, or entries of a
//! history that was given up), and the older side, once it heard of a newer generation, is
//! superseded: it sends nothing more, answers nothing, holds no lease (its sandboxes stay
//! frozen), until it is wiped and joins again.

use crate::store::StateView;
use std::sync::atomic::{AtomicU64, Ordering};

/// What meeting a peer of generation `theirs` means here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Meeting {
    /// Same generation, or one side has none yet (it is joining): go on.
    Proceed,
    /// The peer was left behind by a recovery of this cluster: refuse it.
    PeerBehind { theirs: u64, mine: u64 },
    /// This node was left behind: refuse, and take part in nothing any more.
    Superseded { mine: u64, newer: u64 },
}

/// The decision (pure): `mine` this node's generation (none before it applied anything),
/// `theirs` the peer's, `heard` the newest generation this node heard of so far (0: none).
pub fn meet(mine: Option<u64>, theirs: Option<u64>, heard: u64) -> Meeting {
    let Some(mine) = mine else {
        // Nothing applied yet: a node joining, or one left behind that was restarted and
        // has not loaded its state yet (it remembers what it heard).
        return match heard {
            0 => Meeting::Proceed,
            newer => Meeting::Superseded { mine: 0, newer },
        };
    };
    let newer = heard.max(theirs.unwrap_or(0));
    if newer > mine {
        return Meeting::Superseded { mine, newer };
    }
    match theirs {
        Some(theirs) if theirs < mine => Meeting::PeerBehind { theirs, mine },
        _ => Meeting::Proceed,
    }
}

impl Meeting {
    /// Why an exchange was refused, for logs and the refused side.
    pub fn refusal(&self) -> Option<String> {
        match *self {
            Meeting::Proceed => None,
            Meeting::PeerBehind { theirs, mine } => Some(format!(
                "the peer is of generation {theirs} of this cluster, which was recovered without \
                 it (generation {mine}): wipe its data dir and join it again"
            )),
            Meeting::Superseded { mine, newer } => Some(superseded_text(mine, newer)),
        }
    }
}

fn superseded_text(mine: u64, newer: u64) -> String {
    format!(
        "this node's cluster was recovered without it (generation {newer}; this node's is \
         {mine}): it takes part in nothing; wipe its data dir and join it again"
    )
}

/// Keeps the newest generation a node heard of across its restarts.
pub type Remember = Box<dyn Fn(u64) + Send + Sync>;

/// This node's generation (from its applied state) and the newest one it heard of.
pub struct Generation {
    view: Option<StateView>,
    heard: AtomicU64,
    remember: Option<Remember>,
}

impl Generation {
    /// `heard`: the newest generation this node heard of before (0: none), kept by
    /// `remember` whenever a newer one is heard: a node left behind stays so when restarted.
    pub fn new(view: StateView, heard: u64, remember: Remember) -> Self {
        Generation {
            view: Some(view),
            heard: AtomicU64::new(heard),
            remember: Some(remember),
        }
    }

    /// For a caller with no cluster state (a tool, a test): always "joining".
    pub fn none() -> Self {
        Generation {
            view: None,
            heard: AtomicU64::new(0),
            remember: None,
        }
    }

    /// This node's generation; none before it applied anything.
    pub fn mine(&self) -> Option<u64> {
        let view = self.view.as_ref()?;
        // Lock-free: callers may hold the state's read lock (`StateView::generation`).
        (view.applied_index() > 0).then(|| view.generation())
    }

    /// Meets a peer's generation (noting a newer one).
    pub fn meet(&self, theirs: Option<u64>) -> Meeting {
        let m = meet(self.mine(), theirs, self.heard.load(Ordering::Relaxed));
        if let Meeting::Superseded { newer, .. } = m {
            if self.heard.fetch_max(newer, Ordering::Relaxed) < newer {
                tracing::error!(
                    "{}",
                    superseded_text(self.mine().unwrap_or_default(), newer)
                );
                if let Some(remember) = &self.remember {
                    remember(newer);
                }
            }
        }
        m
    }

    /// Why this node takes part in nothing, when it was left behind.
    pub fn superseded(&self) -> Option<String> {
        match self.meet(None) {
            Meeting::Superseded { mine, newer } => Some(superseded_text(mine, newer)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StateMachine;
    use crate::types::LogId;
    use openraft::storage::RaftStateMachine;
    use openraft::{CommittedLeaderId, Entry, EntryPayload};
    use std::sync::Arc;
    use std::time::Duration;

    /// Routing and the cluster view ask for the leader (and so for this node's generation)
    /// while they read the applied state; the applier may be waiting for its write lock
    /// then. A second read of the state's lock there is never granted (std's lock lets the
    /// waiting writer go first): a node deadlocked that way forming a cluster of two.
    #[tokio::test]
    async fn the_generation_is_known_inside_a_read_of_the_state_while_the_applier_waits() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(warren_storage::RaftDb::open(dir.path()).unwrap());
        let mut sm = StateMachine::open(db).unwrap();
        let entry = Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Blank,
        };
        sm.apply(vec![entry]).await.unwrap();
        let view = sm.view();
        let generation = Generation::new(view.clone(), 0, Box::new(|_| {}));
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            view.read(|_| {
                // The applier comes for its write lock and waits behind this read.
                let mut applier = sm.clone();
                let writer = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    rt.block_on(applier.apply(Vec::<Entry<crate::types::TypeConfig>>::new()))
                        .unwrap();
                });
                std::thread::sleep(Duration::from_millis(100));
                tx.send(generation.mine()).unwrap();
                writer
            })
        });
        let mine = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the generation was not known within 5 s: a nested read of the state");
        assert_eq!(mine, Some(0));
        reader.join().unwrap().join().unwrap();
    }

    #[test]
    fn a_joining_node_meets_every_generation() {
        assert_eq!(meet(None, Some(3), 0), Meeting::Proceed);
        assert_eq!(meet(None, None, 0), Meeting::Proceed);
        assert_eq!(meet(Some(2), None, 0), Meeting::Proceed);
    }

    #[test]
    fn the_newer_side_refuses_and_the_older_is_superseded() {
        assert_eq!(meet(Some(1), Some(1), 0), Meeting::Proceed);
        assert_eq!(
            meet(Some(1), Some(0), 0),
            Meeting::PeerBehind { theirs: 0, mine: 1 }
        );
        assert_eq!(
            meet(Some(0), Some(1), 0),
            Meeting::Superseded { mine: 0, newer: 1 }
        );
    }

    #[test]
    fn once_superseded_a_node_refuses_its_own_generation_too() {
        // Two nodes left behind together must not run their old cluster between them.
        assert_eq!(
            meet(Some(0), Some(0), 1),
            Meeting::Superseded { mine: 0, newer: 1 }
        );
        assert_eq!(
            meet(Some(0), None, 1),
            Meeting::Superseded { mine: 0, newer: 1 }
        );
        // Restarted, before it loaded its state, it still remembers.
        assert_eq!(
            meet(None, Some(0), 1),
            Meeting::Superseded { mine: 0, newer: 1 }
        );
        // Caught up with what it heard, it proceeds again.
        assert_eq!(meet(Some(1), Some(1), 1), Meeting::Proceed);
    }
}
