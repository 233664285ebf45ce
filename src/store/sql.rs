//! The SQL both backends share, and the one implementation of every store trait they both expand.
//!
//! SQLite and PostgreSQL accept the same statements here: `$n` placeholders, `returning`, `on conflict`,
//! row-value comparisons. Ordering is bytewise in both (PostgreSQL's key columns are `collate "C"`). So the
//! whole store is written once, a file per concern, each a macro that implements its trait for a backend's
//! type; [`impl_store!`] (here, with the transaction helpers every change uses) expands them all, and each
//! backend expands it once for its own type, supplying only what really differs: pools, how a write
//! transaction begins, how a commit is announced on the bus, how errors are classified, and the replica
//! table. Pure decisions (what a change announces, error classes, prefix ranges) are plain functions here,
//! tested without a database.

use std::collections::HashSet;

use sqlx::error::{DatabaseError, ErrorKind};

use super::StoreError;
use crate::domain::model::{RateLimit, RateLimitPatch, Resource};

/// Settings and agents: the `AgentStore` implementation.
pub(super) mod agents;
/// The audit log: the `AuditStore` implementation.
pub(super) mod audit;
/// How agents' audit records are cut into segments and chained.
pub(super) mod audit_segment;
/// The three registry collections, generic over their descriptor.
pub(super) mod collections;
/// API keys and subject grants: the `KeyStore` implementation.
pub(super) mod keys;
/// The built-in authorization server's clients, codes and tokens: the `OAuthServerStore` implementation.
pub(super) mod oauth_server;
/// What only resources do: the `RegistryStore` implementation and resources' writes.
pub(super) mod registry;
/// Live replicas, shared rate-limit buckets and the pool: the `ReplicaStore` implementation.
pub(super) mod replicas;
/// Sessions, subscriptions, the event table and retention: the `SessionStore` implementation.
pub(super) mod sessions;

/// `Ok` when `value` is within `max` (0 is unlimited), else the error `over` makes.
pub(super) fn within(value: i64, max: u64, over: impl FnOnce() -> StoreError) -> Result<(), StoreError> {
    if max > 0 && u64::try_from(value).unwrap_or(0) > max {
        return Err(over());
    }
    Ok(())
}

/// An agent's or a key's (`owner`) rate limit after the merge-patch `patch` (`None` leaves it, `Some(None)`
/// removes it); a partial limit with nothing to merge into is invalid.
pub(super) fn merged_rate_limit(
    current: Option<RateLimit>,
    patch: Option<Option<RateLimitPatch>>,
    owner: &str,
) -> Result<Option<RateLimit>, StoreError> {
    match patch {
        None => Ok(current),
        Some(None) => Ok(None),
        Some(Some(limit)) => limit.apply_to(current).map(Some).ok_or_else(|| {
            StoreError::Invalid(format!(
                "the {owner} has no rateLimit to merge into: give both requestsPerSecond and burst"
            ))
        }),
    }
}

/// What one registry change tells subscribers; becomes the change's event row.
#[derive(Debug, Default)]
pub(super) struct Change {
    pub(super) updated_uris: Vec<String>,
    pub(super) resources_list_changed: bool,
    pub(super) prompts_list_changed: bool,
    /// URIs already in `updated_uris`, so a batch names each URI once.
    updated: HashSet<String>,
    /// URIs the change created: a replace of one of them later in the same batch is still a creation.
    created: HashSet<String>,
}

impl Change {
    /// A change of the resource template list (templates are listed, so any change of one is a list change).
    pub(super) fn templates_changed() -> Self {
        Self { resources_list_changed: true, ..Self::default() }
    }

    /// Any prompt change: prompts are only announced as a list change.
    pub(super) fn prompts_changed() -> Self {
        Self { prompts_list_changed: true, ..Self::default() }
    }

    /// A resource was created (`before` is `None`) or replaced.
    pub(super) fn resource_put(&mut self, before: Option<&Resource>, after: &Resource) {
        let uri = after.uri.as_str();
        match before {
            None => {
                self.resources_list_changed = true;
                self.created.insert(uri.to_owned());
            }
            Some(before) => {
                if listed_metadata_changed(before, after) {
                    self.resources_list_changed = true;
                }
                if !self.created.contains(uri) {
                    self.updated(uri);
                }
            }
        }
    }

    pub(super) fn resource_deleted(&mut self, uri: &str) {
        self.resources_list_changed = true;
        self.updated(uri);
    }

    fn updated(&mut self, uri: &str) {
        if self.updated.insert(uri.to_owned()) {
            self.updated_uris.push(uri.to_owned());
        }
    }
}

/// Whether what `resources/list` shows of a resource differs.
fn listed_metadata_changed(before: &Resource, after: &Resource) -> bool {
    before.name != after.name
        || before.title != after.title
        || before.description != after.description
        || before.mime_type != after.mime_type
        || before.annotations != after.annotations
        || before.meta != after.meta
        || before.size != after.size
}

/// The smallest string greater than every string that starts with `prefix` (bytewise, which for UTF-8 is
/// code point order), or `None` when there is none (an empty prefix).
pub(super) fn prefix_upper_bound(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Maps a driver error to what the caller can act on. `is_unavailable` is the backend's test for database
/// errors that mean "the database cannot serve right now" (shutting down, overloaded, locked).
pub(super) fn classify(error: sqlx::Error, is_unavailable: fn(&dyn DatabaseError) -> bool) -> StoreError {
    use sqlx::Error as E;
    match &error {
        E::PoolTimedOut | E::PoolClosed | E::Io(_) | E::Tls(_) | E::Protocol(_) | E::WorkerCrashed => {
            StoreError::Unavailable(error)
        }
        E::Database(db) if is_unavailable(db.as_ref()) => StoreError::Unavailable(error),
        E::Database(db) if db.kind() == ErrorKind::UniqueViolation => StoreError::Conflict,
        // Only inserts that name an agent can violate a foreign key: the agent does not exist.
        E::Database(db) if db.kind() == ErrorKind::ForeignKeyViolation => StoreError::NotFound,
        _ => StoreError::Database(error),
    }
}

/// Maps a migration failure: a database error inside it is classified like any other.
pub(super) fn classify_migration(
    error: sqlx::migrate::MigrateError,
    is_unavailable: fn(&dyn DatabaseError) -> bool,
) -> StoreError {
    match error {
        sqlx::migrate::MigrateError::Execute(error) => classify(error, is_unavailable),
        other => StoreError::Database(sqlx::Error::Migrate(Box::new(other))),
    }
}

/// The bytes stored for the agents a `filter` (`where agent_id = $1`, or nothing for every agent) selects,
/// as one `bigint`: every column a key writes, of their resources (the content counted by its `size`),
/// templates and prompts, and of the agents themselves. The byte quotas count these.
macro_rules! stored_bytes {
    ($filter:literal) => {
        concat!(
            "select cast(",
            "coalesce((select sum(size + octet_length(uri) + octet_length(name) + coalesce(octet_length(title), 0) \
             + coalesce(octet_length(description), 0) + coalesce(octet_length(mime_type), 0) \
             + coalesce(octet_length(annotations), 0) + coalesce(octet_length(meta), 0)) from resource ",
            $filter,
            "), 0) + coalesce((select sum(octet_length(uri_template) + octet_length(name) \
             + coalesce(octet_length(title), 0) + coalesce(octet_length(description), 0) \
             + coalesce(octet_length(mime_type), 0) + coalesce(octet_length(annotations), 0) \
             + coalesce(octet_length(text), 0)) from resource_template ",
            $filter,
            "), 0) + coalesce((select sum(octet_length(name) + coalesce(octet_length(title), 0) \
             + coalesce(octet_length(description), 0) + octet_length(arguments) + octet_length(messages)) from prompt ",
            $filter,
            "), 0) + coalesce((select sum(octet_length(name) + coalesce(octet_length(description), 0)) from agent ",
            $filter,
            "), 0) as bigint)"
        )
    };
}

pub(super) use stored_bytes;

/// Expands every store trait's implementation for a backend: `impl_store!(Type, Database, "name")`.
///
/// The backend's type provides, as inherent items:
/// - a field `quotas: Quotas`;
/// - `fn reader(&self) -> &sqlx::Pool<Db>` and `fn writer(&self) -> &sqlx::Pool<Db>`, and `fn pools(&self)`
///   listing each distinct pool once (for metrics);
/// - `async fn begin_write(&self) -> StoreResult<sqlx::Transaction<'static, Db>>`;
/// - `async fn commit(&self, tx, messages: Vec<BusMessage>) -> StoreResult<()>`: commits and makes sure the
///   messages reach every replica's bus exactly when the change is visible;
/// - `async fn run_migrations(&self) -> StoreResult<()>`;
/// - `async fn reserve_audit_positions(tx, counts: &[(String, i64)]) -> StoreResult<Vec<(i64, String)>>`: for
///   each agent (sorted, distinct) and its number of new records, moves its chain head's position on by that
///   many, creating the head when missing, locking the heads in the order given; returns each head's new
///   position and its hash, in the same order;
/// - `async fn store_audit_heads(tx, heads: &[(&str, String)]) -> StoreResult<()>`: sets each agent's head hash;
/// - the replica table: `async fn replicas(&self) -> StoreResult<Vec<String>>` (the live replicas a change
///   must reach), `register`, `refresh` and `deregister` (each `async fn(&self, replica: &str)`);
/// - `fn error(error: sqlx::Error) -> StoreError`.
macro_rules! impl_store {
    ($store:ty, $db:ty, $backend:literal) => {
        const _: () = {
            use $crate::audit::chain::{ChainHead, QueuedRecord};
            use $crate::audit::stream::{
                AuditStream, ROW_SPAN, RowHead, StreamHead, VerifiedRow, bucket_of, heads_pattern,
            };
            use $crate::domain::model::{
                Actor, Agent, AgentPatch, AuditAction, AuditFilter, AuditPosition, AuditRecord, ChangeEvent, Content,
                KeyPatch, KeyRecord, NewAgent, NewKey, NewResource, Resource,
            };
            use $crate::domain::session::{Pruned, Session, SessionDigest};
            use $crate::domain::subject::SubjectGrant;
            use $crate::domain::time::Timestamp;
            use $crate::domain::{AgentId, KeyDigest, ResourceUri};
            use $crate::events::BusMessage;
            use $crate::guard::limiter::{Limit, Outcome};
            use $crate::registry::collection::{CollectionStore, Resources};
            use $crate::store::prelude::*;
            use $crate::store::rows::{
                AgentRow, AuditListRow, AuditSegmentRow, AuditStreamRow, Decode, EventRow, HeadRow, KeyRow,
                ResourceContentRow, ResourceRow, json_string, json_text, record_digest, scopes_text, to_i64,
            };
            use $crate::store::sql::Change;
            use $crate::store::sql::agents::agent_columns;
            use $crate::store::sql::audit_segment::{
                AUDIT_ROW_ENCODING_BYTES, AUDIT_SEGMENT_RECORDS, AUDIT_SEGMENT_SPAN, AUDIT_VALUES_PER_ROW,
                AuditSegmentInsert, chain_audit_segments, statement_rows,
            };
            use $crate::store::sql::collections::{
                StoredCollection, WrittenCollection, resource_columns, resource_content_columns,
            };
            use $crate::store::sql::keys::{KEYS_PER_TOUCH, SubjectRow, key_columns, subject_columns};
            use $crate::store::sql::sessions::{PRUNE_BATCH, SessionRow};
            use $crate::store::sql::{merged_rate_limit, prefix_upper_bound, stored_bytes};
            use $crate::store::{
                After, BatchOutcome, PoolUsage, Quotas, StoreError, StoreResult, StreamRows, Upserted,
            };

            type Tx = sqlx::Transaction<'static, $db>;
            /// A statement of this backend.
            type Statement<'q> = sqlx::query::Query<'q, $db, <$db as sqlx::Database>::Arguments>;
            /// A query of this backend whose rows are `R`s.
            type Query<'q, R> = sqlx::query::QueryAs<'q, $db, R, <$db as sqlx::Database>::Arguments>;

            /// A row this backend reads, and decodes into a record.
            trait Readable: Decode + Send + Unpin + for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row> {}
            impl<R: Decode + Send + Unpin + for<'r> sqlx::FromRow<'r, <$db as sqlx::Database>::Row>> Readable for R {}

            /// Where this backend's statements run: a pool or a transaction's connection.
            trait Executor<'c>: sqlx::Executor<'c, Database = $db> {}
            impl<'c, E: sqlx::Executor<'c, Database = $db>> Executor<'c> for E {}

            /// One audit row of an admin change.
            struct Audit<'a> {
                agent: &'a AgentId,
                actor: &'a Actor,
                action: AuditAction,
                target: &'a str,
                before: Option<String>,
                after: Option<String>,
            }

            impl<'a> Audit<'a> {
                /// The audit row of `action` on `target`, with the digests of the record before and after.
                fn of<T: serde::Serialize>(
                    agent: &'a AgentId,
                    actor: &'a Actor,
                    action: AuditAction,
                    target: &'a str,
                    before: Option<&T>,
                    after: Option<&T>,
                ) -> Self {
                    let digest = |record| record_digest(record, None);
                    Audit { agent, actor, action, target, before: before.map(digest), after: after.map(digest) }
                }

                /// The audit row of a resource's change: its digests cover the content too.
                fn with_content(
                    agent: &'a AgentId,
                    actor: &'a Actor,
                    action: AuditAction,
                    target: &'a str,
                    before: Option<(&Resource, &Content)>,
                    after: Option<(&Resource, &Content)>,
                ) -> Self {
                    let digest = |(record, content)| record_digest(record, Some(content));
                    Audit { agent, actor, action, target, before: before.map(digest), after: after.map(digest) }
                }
            }

            impl $store {
                /// The record of the row `query` finds through `executor`, if any.
                async fn one<'c, R: Readable>(
                    query: Query<'_, R>,
                    executor: impl Executor<'c>,
                ) -> StoreResult<Option<R::Record>> {
                    query.fetch_optional(executor).await.map_err(Self::error)?.map(R::decode).transpose()
                }

                /// The records of every row `query` finds through `executor`, in order.
                async fn all<'c, R: Readable>(
                    query: Query<'_, R>,
                    executor: impl Executor<'c>,
                ) -> StoreResult<Vec<R::Record>> {
                    query.fetch_all(executor).await.map_err(Self::error)?.into_iter().map(R::decode).collect()
                }

                /// Whether `count` (a `select count(*)` binding `first` as `$1` and `second` as `$2`) counts fewer
                /// than `limit` rows in `tx`: the check before an insert that a per-owner limit caps.
                async fn below_limit<'q, T>(
                    tx: &mut Tx,
                    count: &'static str,
                    first: &'q str,
                    second: T,
                    limit: u32,
                ) -> StoreResult<bool>
                where
                    T: 'q + Send + sqlx::Encode<'q, $db> + sqlx::Type<$db>,
                {
                    let counted = sqlx::query_scalar::<$db, i64>(count)
                        .bind(first)
                        .bind(second)
                        .fetch_one(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    Ok(counted < i64::from(limit))
                }

                /// Enforces `quotas` from now on.
                pub fn with_quotas(mut self, quotas: Quotas) -> Self {
                    self.quotas = quotas;
                    self
                }

                fn quotas(&self) -> &Quotas {
                    &self.quotas
                }
            }

            /// Statements used inside write transactions.
            impl $store {
                /// The first statement of every registry change: bumps the agent's event sequence, which
                /// also locks the agent's row (PostgreSQL) so the agent's changes commit in sequence order.
                async fn next_seq(tx: &mut Tx, agent: &AgentId) -> StoreResult<i64> {
                    sqlx::query_scalar::<$db, i64>(
                        "update agent set event_seq = event_seq + 1 where agent_id = $1 returning event_seq",
                    )
                    .bind(agent.as_str())
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(Self::error)?
                    .ok_or(StoreError::NotFound)
                }

                async fn insert_event(
                    tx: &mut Tx,
                    agent: &AgentId,
                    seq: i64,
                    change: &Change,
                    now: Timestamp,
                ) -> StoreResult<()> {
                    sqlx::query(
                        "insert into event (agent_id, seq, updated_uris, resources_list_changed, \
                         prompts_list_changed, created_at, updated_at) values ($1, $2, $3, $4, $5, $6, $6)",
                    )
                    .bind(agent.as_str())
                    .bind(seq)
                    .bind(json_string(&change.updated_uris)?)
                    .bind(change.resources_list_changed)
                    .bind(change.prompts_list_changed)
                    .bind(now.as_micros())
                    .execute(&mut **tx)
                    .await
                    .map_err(Self::error)?;
                    Ok(())
                }

                async fn insert_audit(tx: &mut Tx, audit: Audit<'_>, now: Timestamp) -> StoreResult<()> {
                    let mut record = AuditRecord {
                        id: uuid::Uuid::now_v7().to_string().into(),
                        agent_id: audit.agent.as_str().into(),
                        occurred_at: now,
                        kind: "admin".into(),
                        actor: audit.actor.name.as_str().into(),
                        action: audit.action.as_str().into(),
                        target: audit.target.into(),
                        before_digest: audit.before.map(Into::into),
                        after_digest: audit.after.map(Into::into),
                        request_id: audit.actor.request_id.as_deref().map(Into::into),
                        ..AuditRecord::default()
                    };
                    Self::append_audit_in(tx, std::slice::from_mut(&mut record)).await
                }

                /// After anything of `agent` was stored in `tx`: refuses (rolling back) what takes it or the
                /// gateway over the byte quotas, which count every stored byte (`stored_bytes!`).
                async fn check_byte_quotas(&self, tx: &mut Tx, agent: &AgentId) -> StoreResult<()> {
                    let quotas = *self.quotas();
                    if quotas.max_agent_bytes > 0 {
                        let bytes = sqlx::query_scalar::<$db, i64>(stored_bytes!("where agent_id = $1"))
                            .bind(agent.as_str())
                            .fetch_one(&mut **tx)
                            .await
                            .map_err(Self::error)?;
                        $crate::store::sql::within(bytes, quotas.max_agent_bytes, || {
                            StoreError::TooLarge(format!(
                                "agent {agent} would store {bytes} bytes; at most {} are allowed \
                                 (limits.max_agent_bytes)",
                                quotas.max_agent_bytes
                            ))
                        })?;
                    }
                    if quotas.max_total_bytes > 0 {
                        let bytes = sqlx::query_scalar::<$db, i64>(stored_bytes!(""))
                            .fetch_one(&mut **tx)
                            .await
                            .map_err(Self::error)?;
                        $crate::store::sql::within(bytes, quotas.max_total_bytes, || {
                            StoreError::TooLarge(format!(
                                "the gateway would store {bytes} bytes; at most {} are allowed \
                                 (limits.max_total_bytes)",
                                quotas.max_total_bytes
                            ))
                        })?;
                    }
                    Ok(())
                }

                /// A registry change's bookkeeping: its event row, then the commit that announces it.
                async fn finish_change(
                    &self,
                    mut tx: Tx,
                    agent: &AgentId,
                    seq: i64,
                    change: &Change,
                    now: Timestamp,
                ) -> StoreResult<()> {
                    Self::insert_event(&mut tx, agent, seq, change, now).await?;
                    self.commit(tx, vec![BusMessage::Change { agent: agent.clone(), seq }]).await
                }
            }

            #[async_trait::async_trait]
            impl Store for $store {
                async fn migrate(&self) -> StoreResult<()> {
                    self.run_migrations().await
                }

                async fn ping(&self) -> StoreResult<()> {
                    sqlx::query::<$db>("select 1").execute(self.reader()).await.map_err(Self::error)?;
                    Ok(())
                }

                fn backend(&self) -> &'static str {
                    $backend
                }

                fn oauth_server(&self) -> &dyn $crate::store::oauth_server::OAuthServerStore {
                    self
                }
            }

            $crate::store::sql::agents::impl_agent_store!($store, $db);
            $crate::store::sql::keys::impl_key_store!($store, $db);
            $crate::store::sql::collections::impl_collection_store!($store, $db);
            $crate::store::sql::registry::impl_registry_store!($store, $db);
            $crate::store::sql::sessions::impl_session_store!($store, $db);
            $crate::store::sql::audit::impl_audit_store!($store, $db);
            $crate::store::sql::replicas::impl_replica_store!($store, $db);
            $crate::store::sql::oauth_server::impl_oauth_server_sql!($store, $db);
        };
    };
}

pub(super) use impl_store;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_bounds_are_successors() {
        assert_eq!(prefix_upper_bound("docs://a/").as_deref(), Some("docs://a0"));
        assert_eq!(prefix_upper_bound("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_upper_bound("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_upper_bound(""), None);
        assert_eq!(prefix_upper_bound("\u{10FFFF}"), None);
    }
}
