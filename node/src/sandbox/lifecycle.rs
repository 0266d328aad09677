//! The sandbox lifecycle as a pure state machine: which event moves which state where.
//! The manager performs the IO and asks this module whether a transition is legal.

use warren_api::sandbox::SandboxState;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The container and guest are up.
    Started,
    /// Creating or starting failed.
    StartFailed,
    /// The container stopped or vanished under a running sandbox; it is being brought back.
    Recovering,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a {from:?} sandbox cannot take {event:?}")]
pub struct InvalidTransition {
    pub from: SandboxState,
    pub event: Event,
}

pub fn next(from: SandboxState, event: Event) -> Result<SandboxState, InvalidTransition> {
    use Event::*;
    use SandboxState::*;
    match (from, event) {
        (Starting, Started) => Ok(Running),
        (Starting, StartFailed) => Ok(Failed),
        (Running | Failed | Starting, Recovering) => Ok(Starting),
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
}
