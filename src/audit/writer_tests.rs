use super::*;
use crate::config::DatabaseConfig;
use crate::domain::model::{AuditFilter, AuditRecord};
use crate::domain::time::Timestamp;
use crate::events::LocalBus;
use crate::store::sqlite::SqliteStore;
use sqlx::Connection;

fn record(n: u32) -> AuditRecord {
    crate::audit::read_record(&uuid::Uuid::now_v7().to_string(), "bot", Timestamp::now(), &format!("test://{n}"))
}

/// Records `record(n)` for each `n` of `numbers`.
fn record_each(writer: &AuditWriter, numbers: std::ops::Range<u32>) {
    for n in numbers {
        writer.record(QueuedRecord::from(&record(n)));
    }
}

/// A writer started on `store` with `config`, and its counters, once its task has had time to start.
async fn started(store: &Arc<dyn Store>, config: &AuditConfig) -> (AuditWriter, AuditTask, Arc<AuditStats>) {
    let (writer, task) = AuditWriter::start(store.clone(), config);
    let stats = writer.stats().clone();
    tokio::time::sleep(Duration::from_millis(50)).await;
    (writer, task, stats)
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
    let store = SqliteStore::connect(&file.url(), &DatabaseConfig::default(), LocalBus::new()).await.expect("sqlite");
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
    record_each(&writer, 0..3);
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
    let (writer, task, stats) = started(&store, &config).await;
    // Five records queue before the writer runs: the third rings, a batch of three is written, and the
    // two after it wait to fill the next batch.
    record_each(&writer, 0..5);
    until("the full batch", || stats.written.load(Ordering::Relaxed) == 3).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stats.written.load(Ordering::Relaxed), 3, "two records are not a batch: they wait");
    // The two held count: one more makes a batch.
    writer.record(QueuedRecord::from(&record(5)));
    until("the second batch", || stats.written.load(Ordering::Relaxed) == 6).await;
    writer.record(QueuedRecord::from(&record(6)));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(stats.written.load(Ordering::Relaxed), 6, "one record is not a batch: it waits");
    task.stop(Duration::from_secs(5)).await;
    assert_eq!(stats.written.load(Ordering::Relaxed), 7, "stop writes the last one");
    assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn records_of_one_agent_make_a_batch_from_200_a_row_and_spread_ones_wait_for_all_of_it() {
    let (store, _file) = temp_store().await;
    let config = AuditConfig { batch_size: 500, flush_interval_ms: 3_600_000, ..AuditConfig::default() };
    let (writer, task, stats) = started(&store, &config).await;
    let written = || stats.written.load(Ordering::Relaxed);
    assert_eq!(writer.bell.threshold(), 500, "until a batch was written, a batch is full");
    // One agent's records fill one row: from then on 200 records (above a fifth of the size) make a batch.
    record_each(&writer, 0..500);
    until("the first batch", || written() == 500).await;
    assert_eq!(writer.bell.threshold(), 200);
    record_each(&writer, 500..699);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(written(), 500, "199 records are not a batch: they wait");
    record_each(&writer, 699..700);
    until("a batch of one row", || written() == 700).await;
    // Records of 100 agents fall in most of the 64 buckets, a row each: the next batch waits to be full.
    let spread = |n: u32| {
        QueuedRecord::from(&AuditRecord { agent_id: compact_str::format_compact!("agent{}", n % 100), ..record(n) })
    };
    for n in 0..200 {
        writer.record(spread(n));
    }
    until("the spread batch", || written() == 900).await;
    assert_eq!(writer.bell.threshold(), 500, "a batch over many rows waits to be full");
    for n in 200..699 {
        writer.record(spread(n));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(written(), 900, "499 spread records are not a batch: they wait");
    writer.record(spread(699));
    until("the full spread batch", || written() == 1_400).await;
    task.stop(Duration::from_secs(5)).await;
    assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
    let report = crate::audit::verify::verify(store.as_ref(), None).await.expect("verify");
    assert_eq!(report.broken(), 0, "{report:?}");
}

#[tokio::test]
async fn a_half_full_queue_rings_when_a_batch_is_larger_than_the_queue() {
    let (store, _file) = temp_store().await;
    let config = AuditConfig {
        queue_capacity: Some(8),
        batch_size: 100,
        flush_interval_ms: 3_600_000,
        ..AuditConfig::default()
    };
    let (writer, task, stats) = started(&store, &config).await;
    record_each(&writer, 0..4);
    until("the half-full queue written", || stats.written.load(Ordering::Relaxed) == 4).await;
    assert_eq!(stats.dropped.load(Ordering::Relaxed), 0);
    task.stop(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn a_full_queue_drops_and_counts_and_stop_writes_the_rest() {
    let (store, _file) = temp_store().await;
    // A long interval and a large batch: nothing is written until the writer stops.
    let config = AuditConfig {
        queue_capacity: Some(4),
        batch_size: 100,
        flush_interval_ms: 3_600_000,
        ..AuditConfig::default()
    };
    let (writer, task) = AuditWriter::start(store.clone(), &config);
    tokio::task::yield_now().await;
    record_each(&writer, 0..10);
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
        writer.record(QueuedRecord::from(&AuditRecord { agent_id: agent.into(), ..record(n as u32) }));
        if n == 2 {
            until("the first batch", || stats.written.load(Ordering::Relaxed) == 3).await;
        }
    }
    task.stop(Duration::from_secs(5)).await;
    assert_eq!(stats.written.load(Ordering::Relaxed), 6);
    let streams = store.audit_streams().await.expect("streams");
    assert!(streams.len() >= 2, "the writer moved on to a new stream: {streams:?}");
    assert!(stats.stream_agents.load(Ordering::Relaxed) <= 3);
    let report = crate::audit::verify::verify(store.as_ref(), None).await.expect("verify");
    assert_eq!(report.broken(), 0, "{report:?}");
    let counted: u64 = report.agents.values().map(|outcome| *outcome.as_ref().expect("verified")).sum();
    assert_eq!(counted, 6, "every record is checked: {report:?}");
    let one = crate::audit::verify::verify(store.as_ref(), Some("a1")).await.expect("verify a1");
    assert_eq!(one.agents.get("a1").map(|outcome| outcome.clone().ok()), Some(Some(2)), "{one:?}");
}

#[test]
fn a_batch_is_made_by_the_rows_it_fills_from_a_thousand_records_to_the_batch_size() {
    let default = AuditConfig::default().batch_size;
    assert_eq!(default, 15_000);
    let bell = Doorbell::new(default);
    assert_eq!(bell.threshold(), 15_000, "until a batch was written, a batch is full");
    // One agent's records fill one row: a batch of 1,000, not a fifth of the default size.
    bell.adapt(1);
    assert_eq!(bell.threshold(), 1_000);
    bell.adapt(10);
    assert_eq!(bell.threshold(), 2_000);
    // Records spread over every bucket wait for rows of 200 records each, within the default size.
    bell.adapt(64);
    assert_eq!(bell.threshold(), 12_800);
    bell.adapt(200);
    assert_eq!(bell.threshold(), 15_000);
    // Smaller configured sizes: a fifth of the size at least, 200 a row, at most the size.
    for (size, one_row, ten_rows) in [(2_000, 400, 2_000), (500, 200, 500), (100, 100, 100), (1, 1, 1)] {
        let small = Doorbell::new(size);
        small.adapt(1);
        assert_eq!(small.threshold(), one_row, "one row of a batch of {size}");
        small.adapt(10);
        assert_eq!(small.threshold(), ten_rows, "ten rows of a batch of {size}");
    }
}
