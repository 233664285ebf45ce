//! The PostgreSQL store: the production backend, shared by several replicas.
//!
//! A registry change takes the agent's row lock first (bumping its event sequence), so the agent's changes
//! commit one after the other in sequence order. Its `pg_notify` is issued inside the transaction:
//! PostgreSQL delivers it when, and only when, the change commits, in commit order, to every replica's
//! listener ([`crate::events::postgres::PgBus`]), this replica's included. So this store never publishes
//! to the local bus itself.

use std::str::FromStr;
use std::time::Duration;

use sqlx::error::DatabaseError;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};

use super::sql::{classify, classify_migration, impl_store};
use super::{Quotas, StoreError, StoreResult};
use crate::config::DatabaseConfig;
use crate::events::postgres::REPLICA_TTL_SECS;
use crate::events::{BusMessage, CHANNEL};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// How the store's connections show in `pg_stat_activity`.
const APPLICATION_NAME: &str = "hivegate";

pub struct PgStore {
    pool: PgPool,
    /// Kept to open the migrator's dedicated connection.
    options: PgConnectOptions,
    /// What agents may hold; checked inside each change's transaction.
    quotas: Quotas,
}

/// A pool's options for connections made with `options`: over TCP, each new connection turns on
/// `TCP_NODELAY` ([`super::nodelay`]).
pub(crate) fn pool_options(options: &PgConnectOptions) -> PgPoolOptions {
    let pool = PgPoolOptions::new();
    if options.get_socket().is_some() || options.get_host().starts_with('/') {
        return pool;
    }
    let port = options.get_port();
    pool.after_connect(move |_, _| {
        Box::pin(async move {
            // Reading the process's descriptors takes a few system calls for each: with thousands of
            // clients connected, milliseconds that are not a worker's.
            let _ = tokio::task::spawn_blocking(move || super::nodelay::set_on_connections_to(port)).await;
            Ok(())
        })
    })
}

impl PgStore {
    /// Connects a pool of `config.max_connections`; an unreachable server is [`StoreError::Unavailable`].
    pub async fn connect(url: &str, config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(Self::error)?.application_name(APPLICATION_NAME);
        let pool = pool_options(&options)
            .max_connections(config.max_connections)
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms))
            .connect_with(options.clone())
            .await
            .map_err(Self::error)?;
        Ok(Self { pool, options, quotas: Quotas::default() })
    }

    /// A store of its own for the event listener's side statements (its heartbeat, its replica's
    /// deregistration): one connection at most, opened when first needed, named `application_name` in
    /// `pg_stat_activity`.
    pub(crate) fn side(options: PgConnectOptions, acquire_timeout: Duration) -> Self {
        let pool = pool_options(&options)
            .max_connections(1)
            .min_connections(0)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(options.clone());
        Self { pool, options, quotas: Quotas::default() }
    }

    /// Sends `payload` on the bus channel at once, outside any change (the listener's heartbeat).
    pub(crate) async fn notify(&self, payload: &str) -> StoreResult<()> {
        sqlx::query::<Postgres>("select pg_notify($1, $2)")
            .bind(CHANNEL)
            .bind(payload)
            .execute(&self.pool)
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    /// Closes the store's connections.
    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    fn writer(&self) -> &PgPool {
        &self.pool
    }

    fn pools(&self) -> [&PgPool; 1] {
        [&self.pool]
    }

    async fn begin_write(&self) -> StoreResult<Transaction<'static, Postgres>> {
        self.pool.begin().await.map_err(Self::error)
    }

    /// Replicas whose listener heard its own heartbeat within [`REPLICA_TTL_SECS`].
    async fn replicas(&self) -> StoreResult<Vec<String>> {
        sqlx::query_scalar::<Postgres, String>(
            "select replica_id from replica where heartbeat_at > now() - make_interval(secs => $1)",
        )
        .bind(REPLICA_TTL_SECS as f64)
        .fetch_all(&self.pool)
        .await
        .map_err(Self::error)
    }

    /// Registers `replica` as live on its listener's own connection (so the row says that connection
    /// LISTENs), then forgets the rows of replicas that stopped without deregistering, long dead.
    pub(crate) async fn register_replica_on(listener: &mut PgListener, replica: &str) -> StoreResult<()> {
        sqlx::query::<Postgres>(
            "insert into replica (replica_id) values ($1) \
             on conflict (replica_id) do update set heartbeat_at = now()",
        )
        .bind(replica)
        .execute(&mut *listener)
        .await
        .map_err(Self::error)?;
        sqlx::query::<Postgres>("delete from replica where heartbeat_at < now() - interval '1 day'")
            .execute(&mut *listener)
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    /// The replica's listener heard its own heartbeat: it stays live for [`REPLICA_TTL_SECS`]. Written on the
    /// listener's connection, so that only a listener that can still use it keeps its replica live.
    pub(crate) async fn refresh_replica_on(listener: &mut PgListener, replica: &str) -> StoreResult<()> {
        sqlx::query::<Postgres>("update replica set heartbeat_at = now() where replica_id = $1")
            .bind(replica)
            .execute(&mut *listener)
            .await
            .map_err(Self::error)?;
        Ok(())
    }

    async fn deregister(&self, replica: &str) -> StoreResult<()> {
        self.replica_statement("delete from replica where replica_id = $1", replica).await
    }

    async fn replica_statement(&self, statement: &'static str, replica: &str) -> StoreResult<()> {
        sqlx::query::<Postgres>(statement).bind(replica).execute(&self.pool).await.map_err(Self::error)?;
        Ok(())
    }

    /// Queues the messages as notifications inside the transaction, then commits: PostgreSQL sends them
    /// exactly when the change becomes visible, and never for a change that rolled back.
    async fn commit(&self, mut tx: Transaction<'static, Postgres>, messages: Vec<BusMessage>) -> StoreResult<()> {
        for message in &messages {
            let payload = serde_json::to_string(message)
                .map_err(|e| StoreError::Corrupt(format!("cannot serialise a bus message: {e}")))?;
            sqlx::query("select pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind(payload)
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
        }
        tx.commit().await.map_err(Self::error)
    }

    /// Applies the embedded migrations. sqlx's migrator holds a PostgreSQL advisory lock (keyed by the
    /// database name) from before it creates its bookkeeping table until it is done, so replicas starting
    /// at once apply each migration exactly once. It runs on a dedicated connection: the lock is
    /// session-level, and if a migration fails the lock must go with the connection rather than stay held
    /// by a pooled one.
    async fn run_migrations(&self) -> StoreResult<()> {
        let mut connection = PgConnection::connect_with(&self.options).await.map_err(Self::error)?;
        let outcome = MIGRATOR.run_direct(None, &mut connection, false).await;
        // Closing also releases the advisory lock when the migrator failed before unlocking.
        let _ = connection.close().await;
        outcome.map_err(|e| classify_migration(e, is_unavailable))
    }

    fn error(error: sqlx::Error) -> StoreError {
        store_error(error)
    }

    /// Reserves the positions of a batch's records in their agents' chains with one statement, whatever the
    /// number of agents (a statement per agent cost a round trip each: thousands per batch when requests
    /// spread over thousands of agents). The heads are inserted and locked in the order of the sorted agents.
    async fn reserve_audit_positions(
        tx: &mut Transaction<'static, Postgres>,
        counts: &[(String, i64)],
    ) -> StoreResult<Vec<(i64, String)>> {
        let agents: Vec<&str> = counts.iter().map(|(agent, _)| agent.as_str()).collect();
        let numbers: Vec<i64> = counts.iter().map(|(_, count)| *count).collect();
        let rows = sqlx::query_as::<Postgres, (String, i64, String)>(
            "insert into audit_chain (agent_id, seq, head) \
             select agent_id, count, '' from unnest($1::text[], $2::bigint[]) as batch (agent_id, count) \
             order by agent_id collate \"C\" \
             on conflict (agent_id) do update set seq = audit_chain.seq + excluded.seq \
             returning agent_id, seq, head",
        )
        .bind(&agents)
        .bind(&numbers)
        .fetch_all(&mut **tx)
        .await
        .map_err(Self::error)?;
        let mut heads: std::collections::HashMap<String, (i64, String)> =
            rows.into_iter().map(|(agent, seq, head)| (agent, (seq, head))).collect();
        agents
            .iter()
            .map(|agent| {
                heads
                    .remove(*agent)
                    .ok_or_else(|| StoreError::Corrupt(format!("no audit chain head was returned for agent {agent}")))
            })
            .collect()
    }

    /// Sets the head hash of every agent of a batch with one statement.
    async fn store_audit_heads(tx: &mut Transaction<'static, Postgres>, heads: &[(&str, String)]) -> StoreResult<()> {
        let agents: Vec<&str> = heads.iter().map(|(agent, _)| *agent).collect();
        let hashes: Vec<&str> = heads.iter().map(|(_, hash)| hash.as_str()).collect();
        sqlx::query::<Postgres>(
            "update audit_chain set head = batch.head \
             from unnest($1::text[], $2::text[]) as batch (agent_id, head) \
             where audit_chain.agent_id = batch.agent_id",
        )
        .bind(&agents)
        .bind(&hashes)
        .execute(&mut **tx)
        .await
        .map_err(Self::error)?;
        Ok(())
    }
}

/// A PostgreSQL driver error as a [`StoreError`]; also used by the event listener.
pub(crate) fn store_error(error: sqlx::Error) -> StoreError {
    classify(error, is_unavailable)
}

/// Connection exceptions (class 08), the server shutting down or starting (57P01–57P03), too many
/// connections (53300), and transactions the client should simply retry (serialization failure, deadlock).
fn is_unavailable(error: &dyn DatabaseError) -> bool {
    error.code().is_some_and(|code| {
        code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03" | "53300" | "40001" | "40P01")
    })
}

impl_store!(PgStore, Postgres, "postgres");
