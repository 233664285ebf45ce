//! The batching writer of MCP request audit records.
//!
//! Admin changes write their audit record in the change's own transaction (see the store). MCP requests are
//! far more frequent, so their records go through a bounded queue to one background task that appends them in
//! batches, one transaction each: a batch is written when enough records wait ([`RECORDS_A_ROW`] for each row
//! the last batch made, from [`LEAST_BATCH`] to `audit.batch_size`), every `audit.flush_interval_ms`, and at
//! shutdown. A record does not wake the task: only the one that makes a batch wait (or fills half the queue,
//! when a batch is larger) does; a task woken per record would cost every request a wake-up and a poll.
//! While the database is unreachable the task keeps its batch and retries with backoff, and new records wait
//! in the queue. A record is dropped only when the queue is full, or when the database refuses a value in it
//! (which no retry would change; the records around it are written); every drop is counted ([`AuditStats`])
//! and logged.
//!
//! The task writes to a stream of its own ([`super::stream`]), opened when it starts: each
//! agent's chain in it is kept in memory, so a batch is a few rows and one update of the stream's head,
//! however many agents it spans. A write whose outcome is unknown (the database went away) is retried on
//! a fresh stream, so that a batch that did commit is never chained twice onto the same heads.
//!
//! With `audit.on_overload = "reject"` a request takes a place in the queue before it is served
//! ([`AuditWriter::reserve`]); when there is none it is refused (503) rather than served unaudited.
//!
//! [`super::stream`]: crate::audit::stream

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use super::batcher::Batcher;
use super::chain::QueuedRecord;
use super::stream::AuditStream;
use crate::config::{AuditConfig, OnOverload};
use crate::store::Store;

/// The agents whose chain heads a stream holds in memory (about 150 bytes each) before the writer moves on
/// to a new stream: the old one stays stored and verifiable, and the writer's memory stays bounded however
/// many agents a long-running replica serves over its life.
const MAX_STREAM_AGENTS: usize = 200_000;

/// Counters of the writer, for metrics and operators.
#[derive(Debug, Default)]
pub struct AuditStats {
    /// Records the queue holds at most (`audit.queue_capacity` or its default); 0 while MCP requests are not
    /// audited.
    pub capacity: AtomicU64,
    /// Records accepted into the queue.
    pub queued: AtomicU64,
    /// Records written to the database.
    pub written: AtomicU64,
    /// Records dropped: the queue was full, or the database refused a value in them.
    pub dropped: AtomicU64,
    /// Of those, the records the database refused (they had been queued).
    pub refused: AtomicU64,
    /// Batches that failed to write: retried while the database was unavailable, split when it refused a
    /// value in them.
    pub failed_batches: AtomicU64,
    /// Requests refused because the queue was full (`audit.on_overload = "reject"`).
    pub rejected: AtomicU64,
    /// Agents with a chain in the writer's current stream (heads held in memory).
    pub stream_agents: AtomicU64,
    /// How long the oldest record of the last batch written had waited when it was stored (µs).
    pub lag_us: AtomicU64,
    /// The longest such wait since start-up (µs).
    pub max_lag_us: AtomicU64,
}

impl AuditStats {
    /// Records accepted but not written yet.
    pub fn backlog(&self) -> u64 {
        let done = self.written.load(Ordering::Relaxed) + self.refused.load(Ordering::Relaxed);
        self.queued.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// The handle requests record through; cheap to clone.
#[derive(Clone)]
pub struct AuditWriter {
    sender: Option<mpsc::Sender<QueuedRecord>>,
    bell: Arc<Doorbell>,
    stats: Arc<AuditStats>,
    /// Whether requests reserve their record's place before they are served.
    is_rejecting: bool,
}

/// Where a request's record goes: a place in the queue it holds while it is served (`audit.on_overload =
/// "reject"`), or the queue as it is when the record is made.
pub struct Recorder<'a> {
    writer: &'a AuditWriter,
    reserved: Option<mpsc::OwnedPermit<QueuedRecord>>,
}

impl Recorder<'_> {
    /// Queues a record of the request: the first in its reserved place, when it holds one (a batch's other
    /// records as any record is).
    pub fn record(&mut self, record: QueuedRecord) {
        let Some(permit) = self.reserved.take() else { return self.writer.record(record) };
        let sender = permit.send(record);
        self.writer.stats.queued.fetch_add(1, Ordering::Relaxed);
        self.writer.bell.ring_if_full(sender.max_capacity() - sender.capacity());
    }
}

/// The queue is full: the request is refused rather than served unaudited.
#[derive(Debug)]
pub struct Overloaded;

/// A batch is written once it holds about this many records for each row it makes (12,800 records over the
/// 64 buckets of [`super::stream`]), from [`LEAST_BATCH`] and at most `audit.batch_size`.
///
/// The database pays for a batch in three parts: its transaction, each row (a tuple, its index entries and
/// its compressed values) and each record's bytes. Records spread over many agents fill a row per bucket
/// whatever the batch's size, so they wait for a large batch, or each row would hold a handful of records
/// and the database would spend most of its time on rows: at 1,000 a batch over 10,000 agents PostgreSQL
/// took 5.1–6.8 µs of CPU a request, at 5,000 (80 records a row) 3.2–4.0, and rows of 200 records saved
/// it and the writer about another microsecond a request, as the rows' heads (two chain hashes for each
/// agent a row holds) fall from 122 bytes a record to 97 (bench/README.md).
pub(super) const RECORDS_A_ROW: usize = 200;

/// The fewest records that make a batch (a fifth of the largest batch when that is fewer). Records of one
/// or a few agents fill few rows, so a batch of them is written from here: the database's work comes in
/// smaller bursts, which is what sets the tail latency of the requests served beside it (W1's p99 4.5–5.5
/// ms at 1,000 against 6.1–6.8 at 5,000, bench/README.md), for a few transactions more a second. (A
/// writer that fell behind takes a whole batch of one agent's records, up to 15 rows of 1,000: the next
/// few batches are larger, until the rows they make fall again.)
pub(super) const LEAST_BATCH: usize = 1_000;

/// How requests wake the writer task: once a batch waits in the queue, not for every record.
pub(super) struct Doorbell {
    pub(super) notify: Notify,
    /// Rung since the task last looked at the queue: the records after the one that rang need not ring.
    pub(super) rung: AtomicBool,
    /// The records that make a batch now: [`RECORDS_A_ROW`] for each row the last batch made, within
    /// `least` and `most` (set by the task after each write).
    pub(super) threshold: AtomicUsize,
    /// [`LEAST_BATCH`], or a fifth of `most` when that is fewer (at least one record).
    pub(super) least: usize,
    /// A full batch, or half the queue when a batch is larger than that (it could never wait in it whole).
    pub(super) most: usize,
    /// Records the task took from the queue and holds to fill its next batch; they count towards it.
    pub(super) held: AtomicUsize,
}

impl Doorbell {
    fn new(most: usize) -> Self {
        Self {
            notify: Notify::new(),
            rung: AtomicBool::new(false),
            threshold: AtomicUsize::new(most),
            least: (most / 5).clamp(1, LEAST_BATCH),
            most,
            held: AtomicUsize::new(0),
        }
    }

    /// The records that make a batch now.
    pub(super) fn threshold(&self) -> usize {
        self.threshold.load(Ordering::Relaxed)
    }

    /// Sets the threshold from the rows the last batch made.
    pub(super) fn adapt(&self, rows: usize) {
        let threshold = rows.saturating_mul(RECORDS_A_ROW).clamp(self.least, self.most);
        self.threshold.store(threshold, Ordering::Relaxed);
    }

    /// Wakes the task when `waiting` records reach the threshold, unless it was already rung.
    fn ring_if_full(&self, waiting: usize) {
        let waiting = waiting + self.held.load(Ordering::Relaxed);
        if waiting >= self.threshold() && !self.rung.load(Ordering::Relaxed) && !self.rung.swap(true, Ordering::AcqRel)
        {
            self.notify.notify_one();
        }
    }
}

/// Stops the writer: the task writes everything queued, then ends.
pub struct AuditTask {
    stop: Option<oneshot::Sender<()>>,
    done: Option<oneshot::Receiver<()>>,
}

impl AuditWriter {
    /// Starts the writer task (`None` for the handle's sender when MCP auditing is off).
    pub fn start(store: Arc<dyn Store>, config: &AuditConfig) -> (AuditWriter, AuditTask) {
        Self::start_with(store, config, MAX_STREAM_AGENTS)
    }

    fn start_with(store: Arc<dyn Store>, config: &AuditConfig, max_stream_agents: usize) -> (AuditWriter, AuditTask) {
        let stats = Arc::new(AuditStats::default());
        let batch_size = config.batch_size.max(1);
        let queue_capacity = config.queue_records().max(1);
        let bell = Arc::new(Doorbell::new(batch_size.min(queue_capacity.div_ceil(2))));
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        if !config.mcp_requests {
            let _ = done_tx.send(());
            let writer = AuditWriter { sender: None, bell, stats, is_rejecting: false };
            return (writer, AuditTask { stop: Some(stop_tx), done: Some(done_rx) });
        }
        stats.capacity.store(queue_capacity as u64, Ordering::Relaxed);
        let (sender, receiver) = mpsc::channel(queue_capacity);
        let batcher = Batcher {
            store,
            stats: stats.clone(),
            bell: bell.clone(),
            batch_size,
            interval: Duration::from_millis(config.flush_interval_ms.max(1)),
            stream: AuditStream::new(),
            max_stream_agents,
        };
        tokio::spawn(async move {
            let mut batcher = batcher;
            batcher.run(receiver, stop_rx).await;
            let _ = done_tx.send(());
        });
        let is_rejecting = config.on_overload == OnOverload::Reject;
        let writer = AuditWriter { sender: Some(sender), bell, stats, is_rejecting };
        (writer, AuditTask { stop: Some(stop_tx), done: Some(done_rx) })
    }

    /// Queues a record; never waits. A full queue drops the record (counted and logged).
    pub fn record(&self, record: QueuedRecord) {
        let Some(sender) = &self.sender else { return };
        match sender.try_send(record) {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                self.bell.ring_if_full(sender.max_capacity() - sender.capacity());
            }
            Err(mpsc::error::TrySendError::Full(record)) => {
                let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::error!(dropped, agent = %record.agent_id(), "audit queue full: records dropped");
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Where the record of a request about to be served goes. With `audit.on_overload = "reject"` it takes
    /// its place in the queue now, and [`Overloaded`] (counted) says the queue is full.
    pub fn reserve(&self) -> Result<Recorder<'_>, Overloaded> {
        let Some(sender) = self.sender.as_ref().filter(|_| self.is_rejecting) else {
            return Ok(Recorder { writer: self, reserved: None });
        };
        match sender.clone().try_reserve_owned() {
            Ok(permit) => Ok(Recorder { writer: self, reserved: Some(permit) }),
            Err(_) => {
                let rejected = self.stats.rejected.fetch_add(1, Ordering::Relaxed) + 1;
                if rejected.is_power_of_two() {
                    tracing::error!(rejected, "audit queue full: requests refused (audit.on_overload = \"reject\")");
                }
                Err(Overloaded)
            }
        }
    }

    pub fn stats(&self) -> &Arc<AuditStats> {
        &self.stats
    }
}

impl AuditTask {
    /// Writes what is queued and stops, waiting at most `deadline`.
    pub async fn stop(mut self, deadline: Duration) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(done) = self.done.take()
            && tokio::time::timeout(deadline, done).await.is_err()
        {
            tracing::error!("audit records still unwritten at shutdown after {deadline:?}");
        }
    }
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
