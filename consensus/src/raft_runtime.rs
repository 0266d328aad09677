//! The async runtime openraft runs on: tokio's, except that the deadline openraft puts on a
//! Raft call is raised to at least this process's call deadline.
//!
//! openraft 0.9 gives every AppendEntries call (log replication, heartbeats, read-index
//! rounds) the heartbeat interval as its deadline, and every vote the shortest election
//! timeout, fixed when the member starts: across a link whose round trip nears the heartbeat,
//! nothing commits. Every deadline openraft sets is a `timeout` of this runtime (its
//! replication, heartbeats, votes and snapshot messages, and `Raft::wait`), so raising them
//! here makes a call's deadline follow the round trips this node measures
//! (`timing::call_deadline`, set by the cluster's supervisor every tick) instead of the
//! heartbeat. Sleeps, spawns and channels are tokio's own.
//!
//! The deadline is one per process: a process runs one Raft member.

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The least deadline of a Raft call, in milliseconds (0 until a member sets it).
static CALL_DEADLINE_MS: AtomicU64 = AtomicU64::new(0);

/// Sets the least deadline of every Raft call this process makes from now on.
pub fn set_call_deadline(deadline: Duration) {
    CALL_DEADLINE_MS.store(deadline.as_millis() as u64, Ordering::Relaxed);
}

/// The least deadline of a Raft call now.
pub fn call_deadline() -> Duration {
    Duration::from_millis(CALL_DEADLINE_MS.load(Ordering::Relaxed))
}

/// openraft's runtime for warren (`types::TypeConfig`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RaftRuntime;

type Tokio = TokioRuntime;

impl AsyncRuntime for RaftRuntime {
    type JoinError = <Tokio as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <Tokio as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <Tokio as AsyncRuntime>::Sleep;
    type Instant = <Tokio as AsyncRuntime>::Instant;
    type TimeoutError = tokio::time::error::Elapsed;
    type Timeout<R, T: Future<Output = R> + OptionalSend> = tokio::time::Timeout<T>;
    type ThreadLocalRng = <Tokio as AsyncRuntime>::ThreadLocalRng;
    type OneshotSender<T: OptionalSend> = <Tokio as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <Tokio as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <Tokio as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        Tokio::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        Tokio::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        Tokio::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        tokio::time::timeout(duration.max(call_deadline()), future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        let least = tokio::time::Instant::now() + call_deadline();
        tokio::time::timeout_at(deadline.max(least), future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        Tokio::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        Tokio::thread_rng()
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        Tokio::oneshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, since the deadline is the process's.
    #[tokio::test]
    async fn a_call_shorter_than_the_deadline_is_given_the_deadline_and_a_longer_one_its_own() {
        let work = || tokio::time::sleep(Duration::from_millis(300));
        let short = Duration::from_millis(20);
        set_call_deadline(Duration::ZERO);
        assert!(RaftRuntime::timeout(short, work()).await.is_err());

        set_call_deadline(Duration::from_secs(2));
        assert!(RaftRuntime::timeout(short, work()).await.is_ok());
        let soon = tokio::time::Instant::now() + short;
        assert!(RaftRuntime::timeout_at(soon, work()).await.is_ok());

        set_call_deadline(Duration::from_millis(50));
        assert!(RaftRuntime::timeout(Duration::from_secs(2), work())
            .await
            .is_ok());
        set_call_deadline(Duration::ZERO);
    }
}
