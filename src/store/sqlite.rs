//! The SQLite store: the embedded default, for one replica.
//!
//! A WAL database with two pools: one writer connection and a pool of readers. SQLite allows one writer at
//! a time; with a single writer connection, in-process writers queue for the connection instead of racing
//! for the file lock (where a deferred transaction that upgrades to a write lock can fail with
//! `SQLITE_BUSY` without waiting). Write transactions still begin `immediate`, so another process on the
//! same file (say `hivegate migrate` next to a running server) waits for the lock (`busy_timeout`) instead
//! of failing. Readers see the last commit and never block the writer.
//!
//! There is one replica, so commits are announced on the in-process [`LocalBus`] right after they commit.
//!
//! [`LocalBus`]: crate::events::LocalBus

use std::str::FromStr;
use std::time::Duration;

use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, Transaction};
use tokio::sync::Mutex;

use super::sql::{classify, classify_migration, impl_store};
use super::{Quotas, StoreError, StoreResult};
use crate::config::DatabaseConfig;
use crate::events::{BusMessage, LocalBus};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// How long a statement waits for another process's lock on the database file before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SqliteStore {
    /// The only connection that writes: writers queue here, in process order.
    writer: SqlitePool,
    /// Readers; the writer's pool itself for an in-memory database, which exists once per connection set.
    reader: SqlitePool,
    /// Where commits are announced.
    bus: LocalBus,
    /// Held from a commit until its messages are published. The writer connection goes back to its pool
    /// at commit, so without this the next writer could commit and publish first: consumers must see
    /// changes in sequence order.
    announcing: Mutex<()>,
    /// What agents may hold; checked inside each change's transaction.
    quotas: Quotas,
}

impl SqliteStore {
    /// Opens (and with `mode=rwc`, creates) the database at `url`, e.g. `sqlite://hivegate.db?mode=rwc`.
    pub async fn connect(url: &str, config: &DatabaseConfig, bus: LocalBus) -> Result<Self, StoreError> {
        // Opening a new file switches it to WAL, which needs the write lock for a moment: processes that
        // open the same new file at once can see "database is locked" before the busy timeout applies.
        // That is transient, so it is retried for as long as the busy timeout would have waited.
        let give_up = std::time::Instant::now() + BUSY_TIMEOUT;
        loop {
            match Self::open(url, config, bus.clone()).await {
                Err(StoreError::Unavailable(_)) if std::time::Instant::now() < give_up => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                outcome => return outcome,
            }
        }
    }

    async fn open(url: &str, config: &DatabaseConfig, bus: LocalBus) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(Self::error)?
            .journal_mode(SqliteJournalMode::Wal)
            // With WAL, `normal` loses no committed transaction on a process crash, only on power loss.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let acquire_timeout = Duration::from_millis(config.acquire_timeout_ms);
        // An in-memory database lives as long as one of its connections: keep the single one open.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let mut writer = SqlitePoolOptions::new().max_connections(1).acquire_timeout(acquire_timeout);
        if in_memory {
            writer = writer.min_connections(1).idle_timeout(None).max_lifetime(None);
        }
        let writer = writer.connect_with(options.clone()).await.map_err(Self::error)?;
        let reader = if in_memory {
            writer.clone()
        } else {
            SqlitePoolOptions::new()
                .max_connections(config.max_connections)
                .acquire_timeout(acquire_timeout)
                .connect_with(options)
                .await
                .map_err(Self::error)?
        };
        Ok(Self { writer, reader, bus, announcing: Mutex::new(()), quotas: Quotas::default() })
    }

    fn reader(&self) -> &SqlitePool {
        &self.reader
    }

    fn writer(&self) -> &SqlitePool {
        &self.writer
    }

    fn pools(&self) -> [&SqlitePool; 2] {
        [&self.writer, &self.reader]
    }

    /// `begin immediate` takes the write lock at once: a transaction never has to upgrade a read lock
    /// (which another process could make fail without waiting).
    async fn begin_write(&self) -> StoreResult<Transaction<'static, Sqlite>> {
        self.writer.begin_with("begin immediate").await.map_err(Self::error)
    }

    /// SQLite serves one replica, which applies every change before the write returns: none to wait for.
    async fn replicas(&self) -> StoreResult<Vec<String>> {
        Ok(Vec::new())
    }

    /// Nothing waits for replicas: none to deregister.
    async fn deregister(&self, _replica: &str) -> StoreResult<()> {
        Ok(())
    }

    /// Commits, then announces the change in process: SQLite has no other replica to tell.
    async fn commit(&self, tx: Transaction<'static, Sqlite>, messages: Vec<BusMessage>) -> StoreResult<()> {
        let _announcing = self.announcing.lock().await;
        tx.commit().await.map_err(Self::error)?;
        for message in messages {
            self.bus.publish(message);
        }
        Ok(())
    }

    /// Applies the embedded migrations inside one `begin immediate` transaction. sqlx's migrator takes no
    /// lock on SQLite; holding the write lock while it reads what is applied makes a second process that
    /// migrates the same file at once wait (`busy_timeout`), then find nothing left to do.
    async fn run_migrations(&self) -> StoreResult<()> {
        let mut tx = self.begin_write().await?;
        MIGRATOR.run_direct(None, &mut *tx, false).await.map_err(|e| classify_migration(e, is_unavailable))?;
        tx.commit().await.map_err(Self::error)
    }

    fn error(error: sqlx::Error) -> StoreError {
        classify(error, is_unavailable)
    }

    /// Reserves the positions of a batch's records in their agents' chains, a statement per agent: SQLite runs
    /// in the process, so a statement costs no round trip, and its one writer needs no lock order.
    async fn reserve_audit_positions(
        tx: &mut Transaction<'static, Sqlite>,
        counts: &[(String, i64)],
    ) -> StoreResult<Vec<(i64, String)>> {
        let mut reserved = Vec::with_capacity(counts.len());
        for (agent, count) in counts {
            let head = sqlx::query_as::<Sqlite, (i64, String)>(
                "insert into audit_chain (agent_id, seq, head) values ($1, $2, '') \
                 on conflict (agent_id) do update set seq = audit_chain.seq + excluded.seq \
                 returning seq, head",
            )
            .bind(agent.as_str())
            .bind(count)
            .fetch_one(&mut **tx)
            .await
            .map_err(Self::error)?;
            reserved.push(head);
        }
        Ok(reserved)
    }

    /// Sets the head hash of every agent of a batch.
    async fn store_audit_heads(tx: &mut Transaction<'static, Sqlite>, heads: &[(&str, String)]) -> StoreResult<()> {
        for (agent, hash) in heads {
            sqlx::query::<Sqlite>("update audit_chain set head = $2 where agent_id = $1")
                .bind(*agent)
                .bind(hash.as_str())
                .execute(&mut **tx)
                .await
                .map_err(Self::error)?;
        }
        Ok(())
    }
}

/// Busy or locked (another process holds the lock past the timeout), I/O failure, disk full, cannot open.
fn is_unavailable(error: &dyn DatabaseError) -> bool {
    const BUSY: i32 = 5;
    const LOCKED: i32 = 6;
    const IOERR: i32 = 10;
    const FULL: i32 = 13;
    const CANTOPEN: i32 = 14;
    // `code()` is the extended result code; its low byte is the primary code.
    let primary = error.code().and_then(|code| code.parse::<i32>().ok()).map(|code| code & 0xff);
    matches!(primary, Some(BUSY | LOCKED | IOERR | FULL | CANTOPEN))
}

impl_store!(SqliteStore, Sqlite, "sqlite");
