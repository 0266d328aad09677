//! Where CPU-heavy work of this crate runs (hashing, compression, decompression, cache
//! writes): the blocking threads of a runtime the caller chooses. A node hands it the
//! runtime of its bounded host-work threads, so that one sandbox's large snapshot cannot
//! take the CPU the node and the other sandboxes need; by default, the current runtime's.

use tokio::runtime::Handle;
use tokio::task::JoinError;

#[derive(Clone, Debug, Default)]
pub struct BlockingPool {
    runtime: Option<Handle>,
}

impl BlockingPool {
    /// Blocking work on `runtime`'s blocking threads.
    pub fn on(runtime: Handle) -> Self {
        BlockingPool {
            runtime: Some(runtime),
        }
    }

    /// Runs `f` on a blocking thread of the chosen runtime and waits for it.
    pub async fn run<F, R>(&self, f: F) -> Result<R, JoinError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        match &self.runtime {
            Some(h) => h.spawn_blocking(f).await,
            None => tokio::task::spawn_blocking(f).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_the_chosen_runtime() {
        let other = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("chosen-pool")
            .build()
            .unwrap();
        let pool = BlockingPool::on(other.handle().clone());
        let name = pool
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("chosen-pool"));
        let here = BlockingPool::default()
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert_ne!(here.as_deref(), Some("chosen-pool"));
        other.shutdown_background();
    }
}
