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
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};

use super::copy::BinaryRows;
use super::sql::{audit_insert, audit_insert_columns, classify, classify_migration, impl_store};
use super::{Quotas, StoreError, StoreResult};
use crate::config::DatabaseConfig;
use crate::domain::model::AuditRecord;
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

impl PgStore {
    /// Connects a pool of `config.max_connections`; an unreachable server is [`StoreError::Unavailable`].
    pub async fn connect(url: &str, config: &DatabaseConfig) -> Result<Self, StoreError> {
        let options = PgConnectOptions::from_str(url).map_err(Self::error)?.application_name(APPLICATION_NAME);
        let pool = PgPoolOptions::new()
            .max_connections(config.max_connections)
            .acquire_timeout(Duration::from_millis(config.acquire_timeout_ms))
            .connect_with(options.clone())
            .await
            .map_err(Self::error)?;
        Ok(Self { pool, options, quotas: Quotas::default() })
    }

    fn reader(&self) -> &PgPool {
        &self.pool
    }

    fn writer(&self) -> &PgPool {
        &self.pool
    }

    /// Enforces `quotas` from now on.
    pub fn with_quotas(mut self, quotas: Quotas) -> Self {
        self.quotas = quotas;
        self
    }

    fn quotas(&self) -> &Quotas {
        &self.quotas
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

    /// Appends chained audit rows: a batch of [`AUDIT_COPY_FROM`] or more with one `COPY … FROM STDIN` in
    /// binary format, which costs PostgreSQL about a quarter less CPU per row than an `insert … select … from
    /// unnest(…)` of one array per column, which must take apart and re-zip two dozen arrays (bench/README.md).
    ///
    /// Fewer rows, an admin change's one among them, go in one multi-row `insert` instead: the driver sends `COPY`'s end as a write of its own after the data, which without
    /// `TCP_NODELAY` (the driver sets none) waits for the server's delayed acknowledgement of the data, about
    /// 40 ms, while an `insert` goes out in one write.
    async fn insert_audit_rows(tx: &mut Transaction<'static, Postgres>, records: &[AuditRecord]) -> StoreResult<()> {
        const COLUMNS: i16 = 26;
        if records.len() < AUDIT_COPY_FROM {
            let mut insert = audit_insert!(Postgres, records);
            // Each number of rows is a statement of its own: only an admin change's one-row insert is kept
            // prepared, so the others do not push the connection's prepared statements out of its cache.
            insert.build().persistent(records.len() == 1).execute(&mut **tx).await.map_err(Self::error)?;
            return Ok(());
        }
        // Encoding thousands of records is milliseconds of work.
        let data = super::off_the_workers(records.len(), || Self::encode_audit_rows(records, COLUMNS))
            .ok_or_else(|| StoreError::Invalid("an audit record field exceeds 2 GiB".to_owned()))?;
        let mut copy = tx
            .copy_in_raw(concat!("copy audit (", audit_insert_columns!(), ") from stdin (format binary)"))
            .await
            .map_err(Self::error)?;
        if copy.num_columns() != COLUMNS as usize {
            let columns = copy.num_columns();
            copy.abort("column count").await.map_err(Self::error)?;
            return Err(StoreError::Corrupt(format!(
                "the audit COPY names {columns} columns, the encoder writes {COLUMNS}"
            )));
        }
        copy.send(data).await.map_err(Self::error)?;
        copy.finish().await.map_err(Self::error)?;
        Ok(())
    }

    /// The binary `COPY` data of `records`, `columns` fields each; `None` when a field exceeds 2 GiB.
    fn encode_audit_rows(records: &[AuditRecord], columns: i16) -> Option<Vec<u8>> {
        let mut rows = BinaryRows::with_capacity(records.len() * 512);
        for record in records {
            rows.row(columns);
            rows.text(&record.id);
            rows.text(&record.agent_id);
            rows.int8(record.occurred_at.as_micros());
            rows.text(&record.kind);
            rows.text(&record.actor);
            rows.text(&record.action);
            rows.text(&record.target);
            rows.optional_text(record.before_digest.as_deref());
            rows.optional_text(record.after_digest.as_deref());
            rows.optional_text(record.request_id.as_deref());
            rows.optional_text(record.key_id.as_deref());
            rows.optional_text(record.key_prefix.as_deref());
            rows.optional_text(record.session_id.as_deref());
            rows.optional_text(record.method.as_deref());
            rows.optional_text(record.outcome.as_deref());
            rows.optional_int4(record.error_code);
            rows.optional_int8(record.bytes_out);
            rows.optional_int8(record.latency_us);
            rows.optional_text(record.client_ip.as_deref());
            rows.optional_text(record.user_agent.as_deref());
            rows.optional_text(record.trace_id.as_deref());
            rows.optional_int8(record.chain_seq);
            rows.optional_text(record.prev_hash.as_deref());
            rows.optional_text(record.hash.as_deref());
            // created_at, updated_at
            rows.int8(record.occurred_at.as_micros());
            rows.int8(record.occurred_at.as_micros());
        }
        rows.finish()
    }
}

/// Audit rows from which a batch is written by `COPY` rather than by one `insert` (26 values a row stays far
/// below PostgreSQL's 65,535 parameters).
const AUDIT_COPY_FROM: usize = 100;

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
