//! What `warren terminal` decides, without IO: where to resume after a lost connection,
//! when to give up reconnecting, and where the detach key falls in what the user typed.

use std::time::Duration;
use warren_api::terminal::ServerControl;
use warren_api::ErrorCode;

/// Ctrl-] (as telnet has it): leaves the terminal running and ends the command.
pub const DETACH_KEY: u8 = 0x1d;
/// Ctrl-D: what a piped stdin's end becomes, so that the shell reads its end of input too.
pub const END_OF_INPUT: u8 = 0x04;
/// How long a lost connection is retried before the command gives up (a node restarting, a
/// sandbox moving to another node).
pub const RECONNECT_FOR: Duration = Duration::from_secs(60);

/// How far this client has seen the terminal's output: the `ready` cursor plus every live
/// byte after it. Reconnecting with it as `since` replays only what was missed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    cursor: Option<u64>,
}

impl Progress {
    /// Output arrived: it counts only once the replay before `ready` is over (the replay is
    /// already inside the `ready` cursor).
    pub fn output(&mut self, len: usize) {
        if let Some(c) = &mut self.cursor {
            *c += len as u64;
        }
    }

    pub fn ready(&mut self, cursor: u64) {
        self.cursor = Some(cursor);
    }

    /// `since` for the next connection: none before the first `ready` (replay everything
    /// the terminal kept).
    pub fn since(&self) -> Option<u64> {
        self.cursor
    }
}

/// What a control message from the server means for the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAction {
    Continue,
    /// The shell ended: the command ends with its code.
    Exit(i32),
    /// Worth telling the user; the terminal goes on.
    Warn(String),
}

pub fn on_control(progress: &mut Progress, control: ServerControl) -> ControlAction {
    match control {
        ServerControl::Ready { cursor } => {
            progress.ready(cursor);
            ControlAction::Continue
        }
        ServerControl::Exit { code } => ControlAction::Exit(code),
        ServerControl::Error { message } => ControlAction::Warn(message),
    }
}

/// Splits typed input at the detach key: what to send, and whether the user detached.
pub fn split_at_detach(input: &[u8]) -> (&[u8], bool) {
    match input.iter().position(|&b| b == DETACH_KEY) {
        Some(i) => (&input[..i], true),
        None => (input, false),
    }
}

/// The wait before reconnect attempt `attempt` (0-based): 200 ms doubling, at most 2 s.
pub fn retry_delay(attempt: u32) -> Duration {
    Duration::from_millis(200u64.saturating_mul(1 << attempt.min(4)).min(2_000))
}

/// Whether a failed reconnect is worth another try: a connection that could not be made
/// (no answer from the API) or an error the API calls retryable; not a refusal such as a
/// deleted sandbox or a revoked key.
pub fn worth_retrying(code: Option<ErrorCode>) -> bool {
    code.is_none_or(ErrorCode::retryable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replay_before_ready_is_not_counted_twice() {
        let mut p = Progress::default();
        p.output(500);
        assert_eq!(p.since(), None, "no cursor before the first ready");
        on_control(&mut p, ServerControl::Ready { cursor: 500 });
        p.output(10);
        p.output(5);
        assert_eq!(p.since(), Some(515));
        on_control(&mut p, ServerControl::Ready { cursor: 520 });
        assert_eq!(
            p.since(),
            Some(520),
            "a new ready replaces what was counted"
        );
    }

    #[test]
    fn exit_and_error_messages_become_actions() {
        let mut p = Progress::default();
        assert_eq!(
            on_control(&mut p, ServerControl::Exit { code: 3 }),
            ControlAction::Exit(3)
        );
        assert_eq!(
            on_control(
                &mut p,
                ServerControl::Error {
                    message: "lag".into()
                }
            ),
            ControlAction::Warn("lag".into())
        );
    }

    #[test]
    fn input_is_cut_at_the_detach_key() {
        assert_eq!(split_at_detach(b"ls\r"), (&b"ls\r"[..], false));
        assert_eq!(split_at_detach(b"ab\x1dcd"), (&b"ab"[..], true));
        assert_eq!(split_at_detach(b"\x1d"), (&b""[..], true));
    }

    #[test]
    fn only_lost_connections_and_retryable_errors_are_retried() {
        assert!(worth_retrying(None));
        assert!(worth_retrying(Some(ErrorCode::Unavailable)));
        assert!(!worth_retrying(Some(ErrorCode::SandboxNotFound)));
        assert!(!worth_retrying(Some(ErrorCode::Unauthorized)));
    }

    #[test]
    fn retries_back_off_to_two_seconds() {
        assert_eq!(retry_delay(0), Duration::from_millis(200));
        assert_eq!(retry_delay(1), Duration::from_millis(400));
        assert_eq!(retry_delay(3), Duration::from_millis(1600));
        assert_eq!(retry_delay(4), Duration::from_secs(2));
        assert_eq!(retry_delay(40), Duration::from_secs(2));
    }
}
