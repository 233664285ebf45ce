//! The writer's task: it takes records off the queue in batches, writes each batch in one transaction
//! (retrying while the database is unreachable, splitting a batch the database refuses a value of), moves
//! on to a fresh stream when the current one holds too many agents or a write's outcome is unknown, and at
//! shutdown writes everything still queued.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};

use super::chain::QueuedRecord;
use super::stream::AuditStream;
use super::writer::{AuditStats, Doorbell};
use crate::domain::time::Timestamp;
use crate::store::Store;

/// The longest wait between two attempts to write a batch while the database is unreachable.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// The task's state: where it writes, and how it batches.
pub(super) struct Batcher {
    pub(super) store: Arc<dyn Store>,
    pub(super) stats: Arc<AuditStats>,
    pub(super) bell: Arc<Doorbell>,
    pub(super) batch_size: usize,
    pub(super) interval: Duration,
    /// The stream the records are chained in; a fresh one after a write of unknown outcome, and once it
    /// holds more than `max_stream_agents` agents' heads.
    pub(super) stream: AuditStream,
    pub(super) max_stream_agents: usize,
}

impl Batcher {
    /// Writes batches until `stop`, then everything still queued.
    pub(super) async fn run(&mut self, mut receiver: mpsc::Receiver<QueuedRecord>, mut stop: oneshot::Receiver<()>) {
        let mut batch = Vec::with_capacity(self.batch_size);
        let mut tick = tokio::time::interval(self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // Rung: full batches are written and the rest waits for more; at the interval, everything.
            let everything = tokio::select! {
                biased;
                _ = &mut stop => break,
                () = self.bell.notify.notified() => false,
                _ = tick.tick() => true,
            };
            // From here on a full queue rings again.
            self.bell.rung.store(false, Ordering::Release);
            if !self.drain(&mut receiver, &mut batch, everything).await {
                break;
            }
        }
        // Shutting down: everything still queued, in batches.
        receiver.close();
        loop {
            let room = self.batch_size - batch.len();
            if receiver.recv_many(&mut batch, room).await == 0 {
                break;
            }
            if batch.len() >= self.batch_size {
                self.write(&mut batch).await;
            }
        }
        if !batch.is_empty() {
            self.write(&mut batch).await;
        }
    }

    /// Takes everything waiting in the queue, writing full batches, and with `everything` the rest too; false
    /// when every sender is gone.
    async fn drain(
        &mut self,
        receiver: &mut mpsc::Receiver<QueuedRecord>,
        batch: &mut Vec<QueuedRecord>,
        everything: bool,
    ) -> bool {
        let open = loop {
            match receiver.try_recv() {
                Ok(record) => {
                    batch.push(record);
                    if batch.len() >= self.batch_size {
                        self.write(batch).await;
                    }
                }
                Err(TryRecvError::Empty) => break true,
                Err(TryRecvError::Disconnected) => break false,
            }
        };
        // Records that came in while full batches were written wait to make a batch: writing them at once
        // would double the transactions of a busy writer. A batch is written from the threshold (by the rows
        // the last one made, within `LEAST_BATCH` and `audit.batch_size`), a full one at once.
        if !batch.is_empty() && (everything || batch.len() >= self.bell.threshold()) {
            self.write(batch).await;
        }
        self.bell.held.store(batch.len(), Ordering::Relaxed);
        open
    }

    /// Writes the batch, retrying with backoff until it is stored; then empties it.
    ///
    /// A batch the database refuses for a value in it (a data exception, which no retry can fix) is split
    /// in halves, each written on its own, down to the records it refuses: those alone are dropped, counted
    /// and logged, so that one bad record cannot hold up every record after it.
    async fn write(&mut self, batch: &mut Vec<QueuedRecord>) {
        if self.write_whole(batch).await {
            // Thousands of records, made on other threads, are freed.
            crate::store::off_the_workers(batch.len(), || batch.clear());
            return;
        }
        let mut pending = vec![batch.split_off(0)];
        while let Some(mut records) = pending.pop() {
            if self.write_whole(&mut records).await {
                continue;
            }
            if records.len() > 1 {
                let second = records.split_off(records.len() / 2);
                pending.push(second);
                pending.push(records);
            } else {
                self.stats.refused.fetch_add(records.len() as u64, Ordering::Relaxed);
                self.stats.dropped.fetch_add(records.len() as u64, Ordering::Relaxed);
                for record in &records {
                    tracing::error!(agent = %record.agent_id(), record = %record.id_text(),
                        "audit record refused by the database: dropped");
                }
            }
        }
    }

    /// Writes `records` in one transaction, retrying with backoff while the database is unavailable;
    /// false when the database refuses a value in them.
    async fn write_whole(&mut self, records: &mut [QueuedRecord]) -> bool {
        let mut backoff = Duration::from_millis(100);
        let oldest = records.iter().map(QueuedRecord::occurred_at).min().unwrap_or_default();
        loop {
            match self.store.append_audit(&mut self.stream, records).await {
                Ok(()) => {
                    let lag = u64::try_from(Timestamp::now().as_micros().saturating_sub(oldest)).unwrap_or(0);
                    self.stats.lag_us.store(lag, Ordering::Relaxed);
                    self.stats.max_lag_us.fetch_max(lag, Ordering::Relaxed);
                    self.stats.written.fetch_add(records.len() as u64, Ordering::Relaxed);
                    self.bell.adapt(self.stream.last_rows());
                    if self.stream.agents() > self.max_stream_agents {
                        self.stream = AuditStream::new();
                    }
                    self.stats.stream_agents.store(self.stream.agents() as u64, Ordering::Relaxed);
                    return true;
                }
                Err(error) => {
                    self.stats.failed_batches.fetch_add(1, Ordering::Relaxed);
                    if error.refuses_a_value() {
                        tracing::warn!(%error, records = records.len(), "audit records refused by the database");
                        return false;
                    }
                    // The batch may have committed before the connection failed: the retry goes to a new
                    // stream, where it cannot collide with (or fork) what was stored.
                    self.stream = AuditStream::new();
                    tracing::warn!(%error, records = records.len(), retry_in_ms = backoff.as_millis() as u64, "could not write audit records");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
            }
        }
    }
}
