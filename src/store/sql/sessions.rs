//! The SQL of legacy sessions, their subscriptions, the event head and retention, written once for both
//! backends.
//!
//! Expanded by [`impl_store!`](super::impl_store) as the [`SessionStore`](crate::store::SessionStore)
//! implementation of each backend's store. Writes that other replicas must know of (a session ended, a
//! subscription added or removed) commit with their bus message, like registry changes do.

use crate::domain::AgentId;
use crate::domain::session::{Session, SessionDigest};
use crate::domain::time::Timestamp;
use crate::store::{StoreError, StoreResult};

/// Rows deleted per statement while pruning, so that no prune holds locks (or SQLite's one writer) for long.
pub(in crate::store) const PRUNE_BATCH: i64 = 1000;

/// A session as the database returns it.
#[derive(sqlx::FromRow)]
pub(in crate::store) struct SessionRow {
    session_id: String,
    agent_id: String,
    api_key_id: String,
    protocol_version: String,
    last_seen_at: i64,
    created_at: i64,
}

impl SessionRow {
    pub(in crate::store) fn into_session(self) -> StoreResult<Session> {
        Ok(Session {
            digest: SessionDigest::from_hex(&self.session_id)
                .ok_or_else(|| StoreError::Corrupt(format!("session id {:?} is not a digest", self.session_id)))?,
            agent_id: AgentId::parse(&self.agent_id).map_err(|e| StoreError::Corrupt(e.0))?,
            key_id: self.api_key_id,
            protocol_version: self.protocol_version,
            last_seen_at: Timestamp::from_micros(self.last_seen_at),
            created_at: Timestamp::from_micros(self.created_at),
        })
    }
}

/// Expands the [`SessionStore`](crate::store::SessionStore) implementation for `$store`.
macro_rules! impl_session_store {
    ($store:ty, $db:ty) => {
        impl $store {
            /// Runs one bounded `delete` statement (`$1` = `value`, `$2` = the batch size) until a batch
            /// deletes less than a full batch; returns how many rows went.
            async fn prune_batches(&self, statement: &'static str, value: i64) -> StoreResult<u64> {
                let mut total = 0;
                loop {
                    let deleted = sqlx::query::<$db>(statement)
                        .bind(value)
                        .bind(PRUNE_BATCH)
                        .execute(self.writer())
                        .await
                        .map_err(Self::error)?
                        .rows_affected();
                    total += deleted;
                    if deleted < PRUNE_BATCH as u64 {
                        return Ok(total);
                    }
                }
            }

            /// Runs `statement` in `tx` and commits, announcing `message` only when the statement changed a row
            /// (a no-op has nothing to tell the other replicas); whether it did.
            async fn commit_announced(
                &self,
                mut tx: Tx,
                statement: Statement<'_>,
                message: Option<BusMessage>,
            ) -> StoreResult<bool> {
                let changed = statement.execute(&mut *tx).await.map_err(Self::error)?.rows_affected() > 0;
                self.commit(tx, message.filter(|_| changed).into_iter().collect()).await?;
                Ok(changed)
            }
        }

        #[async_trait::async_trait]
        impl SessionStore for $store {
            async fn announce(&self, message: BusMessage) -> StoreResult<()> {
                let tx = self.begin_write().await?;
                self.commit(tx, vec![message]).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, after_seq = after_seq))]
            async fn events_after(&self, agent: &AgentId, after_seq: i64, limit: u32) -> StoreResult<Vec<ChangeEvent>> {
                let query = sqlx::query_as::<$db, EventRow>(
                    "select agent_id, seq, updated_uris, resources_list_changed, prompts_list_changed, created_at \
                     from event where agent_id = $1 and seq > $2 order by seq limit $3",
                )
                .bind(agent.as_str())
                .bind(after_seq)
                .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(agent = %session.agent_id, session = %session.digest))]
            async fn create_session(
                &self,
                session: &Session,
                max_per_key: u32,
                live_since: Timestamp,
            ) -> StoreResult<bool> {
                let mut tx = self.begin_write().await?;
                // Sessions of one key are counted and added one transaction at a time, on every replica: a
                // no-op update locks the key's row in PostgreSQL (SQLite's writer is one already), so two
                // `initialize`s of one key cannot both see room for one more.
                sqlx::query::<$db>("update api_key set updated_at = updated_at where api_key_id = $1")
                    .bind(session.key_id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(Self::error)?;
                let live = "select count(*) from session where api_key_id = $1 and last_seen_at >= $2";
                let (key, since) = (session.key_id.as_str(), live_since.as_micros());
                if !Self::below_limit(&mut tx, live, key, since, max_per_key).await? {
                    return Ok(false);
                }
                // An agent or key that no longer exists violates a foreign key: `NotFound`.
                sqlx::query::<$db>(
                    "insert into session (session_id, agent_id, api_key_id, protocol_version, last_seen_at, \
                     created_at, updated_at) values ($1, $2, $3, $4, $5, $6, $6)",
                )
                .bind(session.digest.as_str())
                .bind(session.agent_id.as_str())
                .bind(session.key_id.as_str())
                .bind(session.protocol_version.as_str())
                .bind(session.last_seen_at.as_micros())
                .bind(session.created_at.as_micros())
                .execute(&mut *tx)
                .await
                .map_err(Self::error)?;
                self.commit(tx, Vec::new()).await?;
                Ok(true)
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn get_session(&self, digest: &SessionDigest) -> StoreResult<Option<Session>> {
                let query = sqlx::query_as::<$db, SessionRow>(
                    "select session_id, agent_id, api_key_id, protocol_version, last_seen_at, created_at \
                     from session where session_id = $1",
                )
                .bind(digest.as_str());
                Self::one(query, self.reader()).await
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn touch_session(&self, digest: &SessionDigest, at: Timestamp) -> StoreResult<()> {
                sqlx::query::<$db>(
                    "update session set last_seen_at = $2, updated_at = $2 where session_id = $1 and last_seen_at < $2",
                )
                .bind(digest.as_str())
                .bind(at.as_micros())
                .execute(self.writer())
                .await
                .map_err(Self::error)?;
                Ok(())
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn delete_session(&self, agent: &AgentId, digest: &SessionDigest) -> StoreResult<bool> {
                let tx = self.begin_write().await?;
                let delete = sqlx::query::<$db>("delete from session where session_id = $1 and agent_id = $2")
                    .bind(digest.as_str())
                    .bind(agent.as_str());
                let ended = BusMessage::SessionEnded { agent: agent.clone(), session: digest.clone() };
                self.commit_announced(tx, delete, Some(ended)).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn subscribe(
                &self,
                agent: &AgentId,
                digest: &SessionDigest,
                uri: &ResourceUri,
                limit: u32,
            ) -> StoreResult<bool> {
                let now = Timestamp::now().as_micros();
                let mut tx = self.begin_write().await?;
                let others = "select count(*) from session_subscription where session_id = $1 and uri <> $2";
                if !Self::below_limit(&mut tx, others, digest.as_str(), uri.as_str(), limit).await? {
                    return Ok(false);
                }
                // A session that ended meanwhile violates the foreign key: `NotFound`.
                let add = sqlx::query::<$db>(
                    "insert into session_subscription (session_id, uri, created_at, updated_at) \
                     values ($1, $2, $3, $3) on conflict (session_id, uri) do nothing",
                )
                .bind(digest.as_str())
                .bind(uri.as_str())
                .bind(now);
                let subscribed =
                    BusMessage::Subscribed { agent: agent.clone(), session: digest.clone(), uri: uri.clone() };
                self.commit_announced(tx, add, Some(subscribed)).await?;
                Ok(true)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, session = %digest))]
            async fn unsubscribe(&self, agent: &AgentId, digest: &SessionDigest, uri: &str) -> StoreResult<()> {
                let tx = self.begin_write().await?;
                let remove = sqlx::query::<$db>("delete from session_subscription where session_id = $1 and uri = $2")
                    .bind(digest.as_str())
                    .bind(uri);
                // Only valid URIs are ever subscribed, so a removed one parses.
                let unsubscribed = ResourceUri::parse(uri).ok().map(|uri| BusMessage::Unsubscribed {
                    agent: agent.clone(),
                    session: digest.clone(),
                    uri,
                });
                self.commit_announced(tx, remove, unsubscribed).await?;
                Ok(())
            }

            #[tracing::instrument(skip_all, fields(session = %digest))]
            async fn subscriptions(&self, digest: &SessionDigest) -> StoreResult<Vec<String>> {
                sqlx::query_scalar::<$db, String>(
                    "select uri from session_subscription where session_id = $1 order by uri",
                )
                .bind(digest.as_str())
                .fetch_all(self.reader())
                .await
                .map_err(Self::error)
            }

            #[tracing::instrument(skip_all, fields(agent = %agent))]
            async fn event_head(&self, agent: &AgentId) -> StoreResult<Option<(i64, i64)>> {
                sqlx::query_as::<$db, (i64, i64)>("select epoch, event_seq from agent where agent_id = $1")
                    .bind(agent.as_str())
                    .fetch_optional(self.reader())
                    .await
                    .map_err(Self::error)
            }

            #[tracing::instrument(skip_all)]
            async fn prune(
                &self,
                events_before: Timestamp,
                keep_per_agent: u64,
                sessions_idle_before: Timestamp,
            ) -> StoreResult<Pruned> {
                let by_age = self
                    .prune_batches(
                        "delete from event where (agent_id, seq) in \
                         (select agent_id, seq from event where created_at < $1 limit $2)",
                        events_before.as_micros(),
                    )
                    .await?;
                // Events more than `keep` behind their agent's last one: a range of the primary key per agent.
                let by_count = self
                    .prune_batches(
                        "delete from event where (agent_id, seq) in \
                         (select e.agent_id, e.seq from agent a join event e \
                          on e.agent_id = a.agent_id and e.seq <= a.event_seq - $1 \
                          where a.event_seq > $1 limit $2)",
                        to_i64(keep_per_agent),
                    )
                    .await?;
                let sessions = self
                    .prune_batches(
                        "delete from session where session_id in \
                         (select session_id from session where last_seen_at < $1 limit $2)",
                        sessions_idle_before.as_micros(),
                    )
                    .await?;
                // A shared token bucket whose theoretical arrival time has passed is full: forgetting it changes
                // nothing (the next request starts a full one).
                let rate_buckets = self
                    .prune_batches(
                        "delete from rate_bucket where bucket in \
                         (select bucket from rate_bucket where tat < $1 limit $2)",
                        Timestamp::now().as_micros(),
                    )
                    .await?;
                Ok(Pruned { events: by_age + by_count, sessions, rate_buckets })
            }
        }
    };
}

pub(in crate::store) use impl_session_store;
