//! The batching writer of MCP request audit records.
//!
//! Admin changes write their audit record in the change's own transaction (see the store). MCP requests are
//! far more frequent, so their records go through a bounded queue to one background task that appends them
//! in batches, one transaction each: a batch is written when `audit.batch_size` records wait, every
//! `audit.flush_interval_ms`, and at shutdown. A record does not wake the task: only the one that makes a
//! full batch wait (or fills half the queue, when a batch is larger) does; a task woken per record would cost
//! every request a wake-up and a poll. While the database is unreachable the task keeps its batch
//! and retries with backoff, and new records wait in the queue. A record is dropped only when the queue is
//! full, or when the database refuses a value in it (which no retry would change; the records around it
//! are written); every drop is counted ([`AuditStats`]) and logged.
//!
//! The task writes to a stream of its own ([`crate::domain::audit_stream`]), opened when it starts: each
//! agent's chain in it is kept in memory, so a batch is a few rows and one update of the stream's head,
//! however many agents it spans. A write whose outcome is unknown (the database went away) is retried on
//! a fresh stream, so that a batch that did commit is never chained twice onto the same heads.
//!
//! With `audit.on_overload = "reject"` a request takes a place in the queue before it is served
//! ([`AuditWriter::reserve`]); when there is none it is refused (503) rather than served unaudited.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{Notify, mpsc, oneshot};

use crate::config::{AuditConfig, OnOverload};
use crate::domain::audit_stream::AuditStream;
use crate::domain::model::AuditRecord;
use crate::domain::time::Timestamp;
use crate::store::Store;

/// `hivegate audit verify`: every agent's records checked against their chains.
pub mod verify;

/// The longest wait between two attempts to write a batch while the database is unreachable.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(5);

/// The agents whose chain heads a stream holds in memory (about 150 bytes each) before the writer moves on
/// to a new stream: the old one stays stored and verifiable, and the writer's memory stays bounded however
/// many agents a long-running replica serves over its life.
const MAX_STREAM_AGENTS: usize = 200_000;

/// Counters of the writer, for metrics and operators.
#[derive(Debug, Default)]
pub struct AuditStats {
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
    sender: Option<mpsc::Sender<AuditRecord>>,
    bell: Arc<Doorbell>,
    stats: Arc<AuditStats>,
    /// Whether requests reserve their record's place before they are served.
    is_rejecting: bool,
}

/// Where a request's record goes: a place in the queue it holds while it is served (`audit.on_overload =
/// "reject"`), or the queue as it is when the record is made.
pub struct Recorder<'a> {
    writer: &'a AuditWriter,
    reserved: Option<mpsc::OwnedPermit<AuditRecord>>,
}

impl Recorder<'_> {
    /// Queues a record of the request: the first in its reserved place, when it holds one (a batch's other
    /// records as any record is).
    pub fn record(&mut self, record: AuditRecord) {
        let Some(permit) = self.reserved.take() else { return self.writer.record(record) };
        let sender = permit.send(record);
        self.writer.stats.queued.fetch_add(1, Ordering::Relaxed);
        self.writer.bell.ring_if_full(sender.max_capacity() - sender.capacity());
    }
}

/// The queue is full: the request is refused rather than served unaudited.
#[derive(Debug)]
pub struct Overloaded;

/// How requests wake the writer task: once a full batch waits in the queue, not for every record.
struct Doorbell {
    notify: Notify,
    /// Rung since the task last looked at the queue: the records after the one that rang need not ring.
    rung: AtomicBool,
    /// A full batch, or half the queue when a batch is larger than that (it could never wait in it whole).
    threshold: usize,
    /// Records the task took from the queue and holds to fill its next batch; they count towards it.
    held: AtomicUsize,
}

impl Doorbell {
    /// Wakes the task when `waiting` records reach the threshold, unless it was already rung.
    fn ring_if_full(&self, waiting: usize) {
        let waiting = waiting + self.held.load(Ordering::Relaxed);
        if waiting >= self.threshold && !self.rung.load(Ordering::Relaxed) && !self.rung.swap(true, Ordering::AcqRel) {
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
        let queue_capacity = config.queue_capacity.max(1);
        let threshold = batch_size.min(queue_capacity.div_ceil(2));
        let bell = Arc::new(Doorbell {
            notify: Notify::new(),
            rung: AtomicBool::new(false),
            threshold,
            held: AtomicUsize::new(0),
        });
        let (stop_tx, stop_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        if !config.mcp_requests {
            let _ = done_tx.send(());
            let writer = AuditWriter { sender: None, bell, stats, is_rejecting: false };
            return (writer, AuditTask { stop: Some(stop_tx), done: Some(done_rx) });
        }
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
    pub fn record(&self, record: AuditRecord) {
        let Some(sender) = &self.sender else { return };
        match sender.try_send(record) {
            Ok(()) => {
                self.stats.queued.fetch_add(1, Ordering::Relaxed);
                self.bell.ring_if_full(sender.max_capacity() - sender.capacity());
            }
            Err(mpsc::error::TrySendError::Full(record)) => {
                let dropped = self.stats.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::error!(dropped, agent = %record.agent_id, "audit queue full: records dropped");
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

struct Batcher {
    store: Arc<dyn Store>,
    stats: Arc<AuditStats>,
    bell: Arc<Doorbell>,
    batch_size: usize,
    interval: Duration,
    /// The stream the records are chained in; a fresh one after a write of unknown outcome, and once it
    /// holds more than `max_stream_agents` agents' heads.
    stream: AuditStream,
    max_stream_agents: usize,
}

impl Batcher {
    async fn run(&mut self, mut receiver: mpsc::Receiver<AuditRecord>, mut stop: oneshot::Receiver<()>) {
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
        receiver: &mut mpsc::Receiver<AuditRecord>,
        batch: &mut Vec<AuditRecord>,
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
        // Records that came in while full batches were written wait to fill one: writing them at once would
        // double the transactions (and chain-head updates) of a busy writer. A batch larger than half the
        // queue is written from the threshold that rang.
        if !batch.is_empty() && (everything || batch.len() >= self.bell.threshold) {
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
    async fn write(&mut self, batch: &mut Vec<AuditRecord>) {
        if self.write_whole(batch).await {
            // Thousands of records, a dozen allocations each, are freed.
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
                    tracing::error!(agent = %record.agent_id, method = ?record.method, target = ?record.target,
                        "audit record refused by the database: dropped");
                }
            }
        }
    }

    /// Writes `records` in one transaction, retrying with backoff while the database is unavailable;
    /// false when the database refuses a value in them.
    async fn write_whole(&mut self, records: &mut [AuditRecord]) -> bool {
        let mut backoff = Duration::from_millis(100);
        let oldest = records.iter().map(|record| record.occurred_at.as_micros()).min().unwrap_or_default();
        loop {
            match self.store.append_audit(&mut self.stream, records).await {
                Ok(()) => {
                    let lag = u64::try_from(Timestamp::now().as_micros().saturating_sub(oldest)).unwrap_or(0);
                    self.stats.lag_us.store(lag, Ordering::Relaxed);
                    self.stats.max_lag_us.fetch_max(lag, Ordering::Relaxed);
                    self.stats.written.fetch_add(records.len() as u64, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DatabaseConfig;
    use crate::domain::model::AuditFilter;
    use crate::domain::time::Timestamp;
    use crate::events::LocalBus;
    use crate::store::sqlite::SqliteStore;
    use sqlx::Connection;

    fn record(n: u32) -> AuditRecord {
        AuditRecord {
            id: uuid::Uuid::now_v7().to_string().into(),
            agent_id: "bot".into(),
            occurred_at: Timestamp::now(),
            kind: "mcp".into(),
            actor: "key:k".into(),
            action: "resources/read".into(),
            target: format!("test://{n}").into(),
            ..AuditRecord::default()
        }
    }

    /// A SQLite file, removed on drop.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn url(&self) -> String {
            format!("sqlite://{}?mode=rwc", self.0.display())
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
            }
        }
    }

    async fn temp_store() -> (Arc<dyn Store>, TempFile) {
        let file = TempFile(std::env::temp_dir().join(format!("hivegate-audit-{}.db", uuid::Uuid::new_v4().simple())));
        let store =
            SqliteStore::connect(&file.url(), &DatabaseConfig::default(), LocalBus::new()).await.expect("sqlite");
        store.migrate().await.expect("migrations");
        (Arc::new(store), file)
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        for _ in 0..400 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for {what}");
    }

    #[tokio::test]
    async fn records_wait_while_writes_fail_and_are_written_after() {
        let (store, file) = temp_store().await;
        let url = file.url();
        let mut admin = sqlx::SqliteConnection::connect(&url).await.expect("connection");
        // The table goes away: every batch fails until it is back.
        sqlx::query("alter table audit_batch rename to audit_away").execute(&mut admin).await.expect("rename");

        let config = AuditConfig { batch_size: 2, flush_interval_ms: 20, ..AuditConfig::default() };
        let (writer, task) = AuditWriter::start(store.clone(), &config);
        for n in 0..3 {
            writer.record(record(n));
        }
        let stats = writer.stats().clone();
        until("a failed batch", || stats.failed_batches.load(Ordering::Relaxed) > 0).await;
        assert_eq!(stats.written.load(Ordering::Relaxed), 0);
        assert_eq!(stats.backlog(), 3);

        sqlx::query("alter table audit_away rename to audit_batch").execute(&mut admin).await.expect("rename back");
        until("every record written", || stats.written.load(Ordering::Relaxed) == 3).await;
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
        let stored = store.list_audit(&AuditFilter::default(), None, 10).await.expect("list");
        let mut targets: Vec<&str> = stored.iter().map(|record| record.target.as_str()).collect();
        targets.sort_unstable();
        assert_eq!(targets, ["test://0", "test://1", "test://2"]);
        task.stop(Duration::from_secs(5)).await;
        let _ = admin.close().await;
    }

    #[tokio::test]
    async fn a_full_batch_is_written_at_once_and_a_partial_one_waits() {
        let (store, _file) = temp_store().await;
        // The interval's first tick is at once, the next an hour away: only a full batch rings.
        let config = AuditConfig { batch_size: 3, flush_interval_ms: 3_600_000, ..AuditConfig::default() };
        let (writer, task) = AuditWriter::start(store.clone(), &config);
        let stats = writer.stats().clone();
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Five records queue before the writer runs: the third rings, a batch of three is written, and the
        // two after it wait to fill the next batch.
        for n in 0..5 {
            writer.record(record(n));
        }
        until("the full batch", || stats.written.load(Ordering::Relaxed) == 3).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(stats.written.load(Ordering::Relaxed), 3, "two records are not a batch: they wait");
        // The two held count: one more makes a batch.
        writer.record(record(5));
        until("the second batch", || stats.written.load(Ordering::Relaxed) == 6).await;
        writer.record(record(6));
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(stats.written.load(Ordering::Relaxed), 6, "one record is not a batch: it waits");
        task.stop(Duration::from_secs(5)).await;
        assert_eq!(stats.written.load(Ordering::Relaxed), 7, "stop writes the last one");
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_half_full_queue_rings_when_a_batch_is_larger_than_the_queue() {
        let (store, _file) = temp_store().await;
        let config =
            AuditConfig { queue_capacity: 8, batch_size: 100, flush_interval_ms: 3_600_000, ..AuditConfig::default() };
        let (writer, task) = AuditWriter::start(store.clone(), &config);
        let stats = writer.stats().clone();
        tokio::time::sleep(Duration::from_millis(50)).await;
        for n in 0..4 {
            writer.record(record(n));
        }
        until("the half-full queue written", || stats.written.load(Ordering::Relaxed) == 4).await;
        assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
        task.stop(Duration::from_secs(5)).await;
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_stop_writes_the_rest() {
        let (store, _file) = temp_store().await;
        // A long interval and a large batch: nothing is written until the writer stops.
        let config =
            AuditConfig { queue_capacity: 4, batch_size: 100, flush_interval_ms: 3_600_000, ..AuditConfig::default() };
        let (writer, task) = AuditWriter::start(store.clone(), &config);
        tokio::task::yield_now().await;
        for n in 0..10 {
            writer.record(record(n));
        }
        let stats = writer.stats().clone();
        // The task may already have taken some into its batch; at most 4 wait in the queue besides those.
        let dropped = stats.dropped.load(Ordering::Relaxed);
        assert!(dropped > 0, "a queue of 4 cannot hold 10 records");
        assert_eq!(stats.queued.load(Ordering::Relaxed) + dropped, 10);
        task.stop(Duration::from_secs(5)).await;
        let written = stats.written.load(Ordering::Relaxed);
        assert_eq!(written, stats.queued.load(Ordering::Relaxed), "stop writes everything accepted");
        let stored = store.list_audit(&AuditFilter::default(), None, 100).await.expect("list");
        assert_eq!(stored.len() as u64, written);
    }

    #[tokio::test]
    async fn a_stream_holding_too_many_agents_gives_way_to_a_new_one_and_both_verify() {
        let (store, _file) = temp_store().await;
        let config = AuditConfig { batch_size: 2, flush_interval_ms: 20, ..AuditConfig::default() };
        let (writer, task) = AuditWriter::start_with(store.clone(), &config, 2);
        let stats = writer.stats().clone();
        // Three agents in the first batch: more than a stream may hold, so the next batch opens a new one.
        for (n, agent) in ["a1", "a2", "a3", "a1", "a2", "a4"].into_iter().enumerate() {
            writer.record(AuditRecord { agent_id: agent.into(), ..record(n as u32) });
            if n == 2 {
                until("the first batch", || stats.written.load(Ordering::Relaxed) == 3).await;
            }
        }
        task.stop(Duration::from_secs(5)).await;
        assert_eq!(stats.written.load(Ordering::Relaxed), 6);
        let streams = store.audit_streams().await.expect("streams");
        assert!(streams.len() >= 2, "the writer moved on to a new stream: {streams:?}");
        assert!(stats.stream_agents.load(Ordering::Relaxed) <= 3);
        let report = verify::verify(store.as_ref(), None).await.expect("verify");
        assert_eq!(report.broken(), 0, "{report:?}");
        let counted: u64 = report.agents.values().map(|outcome| *outcome.as_ref().expect("verified")).sum();
        assert_eq!(counted, 6, "every record is checked: {report:?}");
        let one = verify::verify(store.as_ref(), Some("a1")).await.expect("verify a1");
        assert_eq!(one.agents.get("a1").map(|outcome| outcome.clone().ok()), Some(Some(2)), "{one:?}");
    }
}
