//! Background tasks that end with their owner: [`AbortOnDrop`].
//!
//! [`AbortOnDrop`]: crate::task::AbortOnDrop

use std::future::Future;

use tokio::task::JoinHandle;

/// A spawned task that ends with its owner: dropping this aborts the task (at its next `.await`). What a
/// task's owner keeps so that the task lives exactly as long as it does (the application's timers, the
/// certificate reloader, the pruners).
#[derive(Debug)]
pub struct AbortOnDrop(JoinHandle<()>);

impl AbortOnDrop {
    /// Spawns `task` on the current runtime, to run until this is dropped (or it returns).
    pub fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(task))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
