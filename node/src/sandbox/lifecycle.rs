//! The sandbox lifecycle as a pure state machine: which event moves which state where.
//! The manager performs the IO and asks this module whether a transition is legal.

use warren_api::sandbox::SandboxState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The container and guest are up.
    Started,
    /// Creating or starting failed.
    StartFailed,
    /// The container stopped or vanished under a running sandbox, or its files are being
    /// replaced by a snapshot's; it is being brought back.
    Recovering,
    /// Its files were saved (per `persist`) and its container removed.
    Slept,
    /// A call arrived for a sleeping sandbox.
    Waking,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {from:?} sandbox cannot take {event:?}")]
pub struct InvalidTransition {
    pub from: SandboxState,
    pub event: Event,
}

impl From<InvalidTransition> for warren_api::ApiError {
    /// A transition the lifecycle forbids is a bug in the manager, never the caller's fault.
    fn from(e: InvalidTransition) -> Self {
        warren_api::ApiError::internal(e.to_string())
    }
}

pub fn next(from: SandboxState, event: Event) -> Result<SandboxState, InvalidTransition> {
    use Event::*;
    use SandboxState::*;
    match (from, event) {
        (Starting, Started) => Ok(Running),
        (Starting, StartFailed) => Ok(Failed),
        (Running | Failed | Starting, Recovering) => Ok(Starting),
        (Running, Slept) => Ok(Sleeping),
        (Sleeping, Waking) => Ok(Starting),
        _ => Err(InvalidTransition { from, event }),
    }
}

/// Whether a container found for a sandbox whose record was saved in `stored` (with a
/// snapshot to restore, or not) may hold only part of its files: a start that restores
/// files (a wake, a failover's or a restore's first start) saves `Starting` before the
/// container exists and `Running` only once every file is in, so a record still `Starting`
/// with a snapshot is a restore that never finished (its node died, or its caller went
/// away mid-way). Such a container is never served: it goes, and the files are restored
/// again. Nothing can have been written into it (no call reaches a starting sandbox).
pub fn restore_unfinished(stored: SandboxState, has_snapshot: bool) -> bool {
    stored == SandboxState::Starting && has_snapshot
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_api::sandbox::SandboxState::*;

    #[test]
    fn only_a_start_from_a_snapshot_that_never_finished_is_restored_again() {
        assert!(restore_unfinished(Starting, true));
        // A new sandbox without files to restore: its container is as good as a new one.
        assert!(!restore_unfinished(Starting, false));
        // A running (or failed) sandbox's container holds its newest files: it is restarted.
        for s in [Running, Failed, Sleeping, Migrating] {
            assert!(!restore_unfinished(s, true), "{s:?}");
        }
    }

    #[test]
    fn create_recover_and_fail() {
        assert_eq!(next(Starting, Event::Started), Ok(Running));
        assert_eq!(next(Running, Event::Recovering), Ok(Starting));
        assert_eq!(next(Starting, Event::StartFailed), Ok(Failed));
        assert_eq!(next(Failed, Event::Recovering), Ok(Starting));
        assert!(next(Running, Event::Started).is_err());
        assert!(next(Sleeping, Event::Started).is_err());
    }

    #[test]
    fn sleep_and_wake() {
        assert_eq!(next(Running, Event::Slept), Ok(Sleeping));
        assert_eq!(next(Sleeping, Event::Waking), Ok(Starting));
        assert!(next(Starting, Event::Slept).is_err());
        assert!(next(Failed, Event::Slept).is_err());
        assert!(next(Running, Event::Waking).is_err());
        assert!(next(Sleeping, Event::Recovering).is_err());
    }
}
