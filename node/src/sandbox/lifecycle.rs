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

#[cfg(test)]
mod tests {
    use super::*;
    use warren_api::sandbox::SandboxState::*;

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
