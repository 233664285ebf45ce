//! Storage: a trait per concern, one implementation per backend, chosen once by the database URL's scheme.
//!
//! # Map
//!
//! [`Store`] is what the rest of the crate holds (`Arc<dyn Store>`): the supertrait of every concern's
//! trait, plus migrations, the health check and the backend's name. Code that calls a concern's method on
//! a `dyn Store` imports [`prelude`].
//!
//! | trait | holds | SQL |
//! | --- | --- | --- |
//! | [`AgentStore`] | settings, agents | `sql/agents.rs` |
//! | [`KeyStore`] | API keys, their use, OAuth subject grants | `sql/keys.rs` |
//! | [`RegistryStore`] | the three collections ([`CollectionStore`]); resources' content | `sql/registry.rs` |
//! | | the collections' shared statements, generic over the descriptor | `sql/collections.rs` |
//! | [`SessionStore`] | legacy sessions, subscriptions, events, retention, announcements | `sql/sessions.rs` |
//! | [`AuditStore`] | the audit log: listing, writer streams, agents' chains, pruning | `sql/audit.rs` |
//! | [`ReplicaStore`] | live replicas, shared rate-limit buckets, pool levels | `sql/replicas.rs` |
//! | [`oauth_server::OAuthServerStore`] | the built-in authorization server's tables | `sql/oauth_server.rs` |
//!
//! Each trait is implemented once, in SQL both backends accept (`sql`), and expanded for each backend
//! ([`postgres`], [`sqlite`]), which supplies only pools, transactions, commit announcements, error classes
//! and the replica table.
//!
//! Every registry change (resource, template, prompt) commits in one transaction with its event row
//! (per-agent sequence bumped on the agent row, so sequence values commit in order) and its audit row.
//! After commit the change reaches every replica through the event bus.
//!
//! [`Store`]: crate::store::Store
//! [`prelude`]: crate::store::prelude
//! [`AgentStore`]: crate::store::AgentStore
//! [`KeyStore`]: crate::store::KeyStore
//! [`RegistryStore`]: crate::store::RegistryStore
//! [`CollectionStore`]: crate::registry::collection::CollectionStore
//! [`SessionStore`]: crate::store::SessionStore
//! [`AuditStore`]: crate::store::AuditStore
//! [`ReplicaStore`]: crate::store::ReplicaStore
//! [`oauth_server::OAuthServerStore`]: crate::store::oauth_server::OAuthServerStore
//! [`postgres`]: crate::store::postgres
//! [`sqlite`]: crate::store::sqlite

use async_trait::async_trait;

use crate::audit::chain::{ChainHead, QueuedRecord};
use crate::audit::stream::{AuditStream, StreamHead, VerifiedRow};
use crate::domain::model::{
    Actor, Agent, AgentPatch, AuditFilter, AuditPosition, AuditRecord, ChangeEvent, Content, KeyPatch, KeyRecord,
    NewAgent, NewKey, NewResource, Resource,
};
use crate::domain::session::{Pruned, Session, SessionDigest};
use crate::domain::subject::SubjectGrant;
use crate::domain::time::Timestamp;
use crate::domain::{AgentId, KeyDigest, ResourceUri};
use crate::events::BusMessage;
use crate::guard::limiter::{Limit, Outcome};
use crate::registry::collection::{CollectionStore, Prompts, Resources, Templates};

/// The audit log's migration from agents' segments to writer streams, on both backends.
#[cfg(test)]
mod migration_tests;
/// `TCP_NODELAY` on the connections to PostgreSQL, which the driver leaves off.
pub(crate) mod nodelay;
/// The built-in authorization server's clients, codes and tokens: its own trait beside [`Store`].
pub mod oauth_server;
/// The PostgreSQL implementation (several replicas; LISTEN/NOTIFY).
pub mod postgres;
/// Rows as the database returns them, and their conversion into domain records.
mod rows;
/// The SQL both backends share: one implementation of each trait, expanded for each backend.
mod sql;
/// The SQLite implementation (embedded, one replica).
pub mod sqlite;
pub use sql::keys::subject_sort_key;

/// One story run against both backends.
#[cfg(test)]
mod tests;

/// Runs `work` over `items` records, milliseconds of CPU for a batch of thousands (hashing, encoding,
/// freeing), without holding up the requests queued on this worker thread: on the multi-threaded runtime
/// they move to another thread while it runs (`block_in_place`), and the system schedules it beside them.
/// Fewer than [`OFF_THE_WORKERS_FROM`] items, and any work on a single-threaded runtime (a connection's thread,
/// [`crate::http::threads`], or a test's), run in place: a fraction of a millisecond is cheaper to do than to
/// hand the queue over for, and the request path only ever passes a record or two.
pub(crate) fn off_the_workers<R>(items: usize, work: impl FnOnce() -> R) -> R {
    if items < OFF_THE_WORKERS_FROM {
        return work();
    }
    match tokio::runtime::Handle::try_current().map(|runtime| runtime.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// Records from which [`off_the_workers`] moves the worker's queue aside (hashing them takes about 0.4 ms).
const OFF_THE_WORKERS_FROM: usize = 256;

/// Failures of the store, split by what the caller can do about them.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("not found")]
    NotFound,
    /// One item a change names does not exist (e.g. a URI a batch deletes): nothing was changed.
    #[error("{0}")]
    Absent(String),
    #[error("already exists")]
    Conflict,
    /// The database cannot be reached or is overloaded: answer 503 and let the client retry.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The change is invalid given what is stored (e.g. a partial `rateLimit` for an agent without one).
    #[error("{0}")]
    Invalid(String),
    /// The change would take the agent (or the gateway) over a count limit: nothing was changed.
    #[error("{0}")]
    TooMany(String),
    /// The change would take the agent (or the gateway) over a storage limit: nothing was changed.
    #[error("{0}")]
    TooLarge(String),
}

impl StoreError {
    /// The database refused a value of the write, which fails the same way however often it is retried:
    /// PostgreSQL's data exceptions (SQLSTATE class 22, e.g. text it cannot store), or a value too large
    /// to send ([`StoreError::Invalid`]).
    pub fn refuses_a_value(&self) -> bool {
        match self {
            StoreError::Invalid(_) => true,
            StoreError::Database(sqlx::Error::Database(error)) => error
                .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some_and(|error| error.code().starts_with("22")),
            _ => false,
        }
    }
}

/// What one agent, and the gateway as a whole, may hold (from `[limits]`); 0 is unlimited.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quotas {
    pub max_resources_per_agent: u64,
    pub max_templates_per_agent: u64,
    pub max_prompts_per_agent: u64,
    /// Stored bytes of one agent together (every field of its registry, its name and description).
    pub max_agent_bytes: u64,
    /// Stored bytes of every agent together.
    pub max_total_bytes: u64,
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Where a page of a list starts: after the last item of the page before (`None` = the first page).
pub type After<'a> = Option<&'a str>;

/// Which rows of a writer stream [`AuditStore::audit_stream_rows`] reads: those after position `after_seq`,
/// in order, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct StreamRows<'a> {
    pub stream: &'a str,
    pub after_seq: i64,
    pub limit: u32,
    /// Whether the rows come with records: with it, the records of the rows whose heads name `agent` (of
    /// every row when `agent` is `None`); without it, none.
    pub records: bool,
    pub agent: Option<&'a AgentId>,
}

/// The result of a resource upsert: the stored resource and whether it was created (201) or replaced (200).
#[derive(Debug, Clone)]
pub struct Upserted<T> {
    pub item: T,
    pub created: bool,
}

/// What a batch did, in one transaction.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    pub upserted: Vec<Upserted<Resource>>,
    pub deleted: Vec<ResourceUri>,
}

/// Settings kept in the database so that every replica shares them.
pub mod setting {
    /// Hex digest of the generated operator token.
    pub const OPERATOR_TOKEN_DIGEST: &str = "operator_token_digest";
    /// Hex HMAC key that authenticates pagination cursors on every replica.
    pub const CURSOR_KEY: &str = "cursor_key";
}

/// Connection pool levels, for metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct PoolUsage {
    pub size: u32,
    pub idle: usize,
    pub max: u32,
}

/// A pool's idle connections as the metrics count them: at most its size. sqlx counts a returned
/// connection idle only after it is queued, so a connection taken in between makes the count wrap below
/// zero for a moment (`usize::MAX`).
pub(crate) fn idle_of(reported: usize, size: u32) -> usize {
    reported.min(usize::try_from(size).unwrap_or(usize::MAX))
}

/// The traits of every concern: `use crate::store::prelude::*` to call their methods on a `dyn Store`.
pub mod prelude {
    pub use super::oauth_server::OAuthServerStore;
    pub use super::{AgentStore, AuditStore, KeyStore, RegistryStore, ReplicaStore, SessionStore, Store};
    pub use crate::registry::collection::CollectionStore;
}

/// The whole store: every concern's trait, plus what concerns the database as a whole.
#[async_trait]
pub trait Store:
    AgentStore + KeyStore + RegistryStore + SessionStore + AuditStore + ReplicaStore + Send + Sync + 'static
{
    /// Apply pending migrations. Safe when several replicas start at once.
    async fn migrate(&self) -> StoreResult<()>;
    /// A cheap round trip, for `/readyz`.
    async fn ping(&self) -> StoreResult<()>;
    /// Which backend this is, for logs and metrics: `sqlite` or `postgres`.
    fn backend(&self) -> &'static str;
    /// The built-in authorization server's tables.
    fn oauth_server(&self) -> &dyn oauth_server::OAuthServerStore;
}

/// Settings every replica shares, and agents.
#[async_trait]
pub trait AgentStore: Send + Sync {
    async fn get_setting(&self, name: &str) -> StoreResult<Option<String>>;
    /// Store `value` unless the setting exists; returns the value that is stored afterwards.
    async fn init_setting(&self, name: &str, value: &str) -> StoreResult<String>;
    async fn put_setting(&self, name: &str, value: &str) -> StoreResult<()>;

    /// `Conflict` when the id exists.
    async fn create_agent(&self, agent: &NewAgent, actor: &Actor) -> StoreResult<Agent>;
    async fn get_agent(&self, id: &AgentId) -> StoreResult<Option<Agent>>;
    /// Ordered by id; at most `limit` items after `after`.
    async fn list_agents(&self, after: After<'_>, limit: u32) -> StoreResult<Vec<Agent>>;
    async fn update_agent(&self, id: &AgentId, patch: &AgentPatch, actor: &Actor) -> StoreResult<Agent>;
    /// Deletes the agent with its keys, registry, sessions and events (not its audit records).
    async fn delete_agent(&self, id: &AgentId, actor: &Actor) -> StoreResult<()>;
}

/// API keys, their use, and the subject grants that map an external authorization server's users to them.
#[async_trait]
pub trait KeyStore: Send + Sync {
    async fn create_key(&self, key: &NewKey, actor: &Actor) -> StoreResult<KeyRecord>;
    /// Ordered by (created_at, id); `after` is the id of the last key of the page before.
    async fn list_keys(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<KeyRecord>>;
    /// Sets `revoked_at`; `NotFound` if the key does not exist or belongs to another agent.
    async fn revoke_key(&self, agent: &AgentId, key_id: &str, actor: &Actor) -> StoreResult<()>;
    /// Merges `patch` into the key (name, own rate limit); `NotFound` if the key does not exist or belongs to
    /// another agent, `Conflict` if it is revoked.
    async fn update_key(
        &self,
        agent: &AgentId,
        key_id: &str,
        patch: &KeyPatch,
        actor: &Actor,
    ) -> StoreResult<KeyRecord>;
    /// The key stored with this digest, whatever its state.
    async fn find_key(&self, digest: &KeyDigest) -> StoreResult<Option<KeyRecord>>;
    /// The key with this id, whatever its state: the key an access token was granted with.
    async fn find_key_by_id(&self, key_id: &str) -> StoreResult<Option<KeyRecord>>;
    /// Records use of keys now: one statement per thousand keys, however many (callers gather the keys used
    /// on a replica and write them every few seconds, each at most once a minute).
    async fn touch_keys(&self, key_ids: &[String]) -> StoreResult<()>;

    /// Grants `grant.subject` of `grant.issuer` on its agent as `grant.key_id`, a usable key of that agent
    /// (`Invalid` otherwise), replacing the subject's grant; a new one beyond `max_per_agent` is `TooMany`.
    async fn put_oauth_subject(
        &self,
        grant: &SubjectGrant,
        max_per_agent: u64,
        actor: &Actor,
    ) -> StoreResult<Upserted<SubjectGrant>>;
    /// An agent's subject grants by issuer and subject; `after` is [`subject_sort_key`].
    async fn list_oauth_subjects(
        &self,
        agent: &AgentId,
        after: After<'_>,
        limit: u32,
    ) -> StoreResult<Vec<SubjectGrant>>;
    async fn get_oauth_subject(
        &self,
        agent: &AgentId,
        issuer: &str,
        subject: &str,
    ) -> StoreResult<Option<SubjectGrant>>;
    async fn delete_oauth_subject(
        &self,
        agent: &AgentId,
        issuer: &str,
        subject: &str,
        actor: &Actor,
    ) -> StoreResult<()>;
}

/// An agent's registry: its three collections ([`CollectionStore`] of each), and what only resources do.
#[async_trait]
pub trait RegistryStore:
    CollectionStore<Resources> + CollectionStore<Templates> + CollectionStore<Prompts> + Send + Sync
{
    /// All upserts and deletes in one transaction with one event; `NotFound` (nothing changed) if a
    /// deleted URI does not exist.
    async fn batch_resources(
        &self,
        agent: &AgentId,
        upserts: &[NewResource],
        deletes: &[ResourceUri],
        actor: &Actor,
    ) -> StoreResult<BatchOutcome>;
    /// A resource with its content.
    async fn get_resource(&self, agent: &AgentId, uri: &str) -> StoreResult<Option<(Resource, Content)>>;
    /// The resources directly below `prefix` (which ends with `/`): URIs that start with it and have no
    /// further `/`; ordered by URI, at most `limit`, without content (directory reads).
    async fn directory_children(&self, agent: &AgentId, prefix: &str, limit: u32) -> StoreResult<Vec<Resource>>;
}

/// Legacy sessions and their subscriptions, the event table, retention, and announcements on the bus.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Sends `message` on the bus as its own (empty) commit, in commit order with every change.
    async fn announce(&self, message: BusMessage) -> StoreResult<()>;

    /// Committed events of `agent` with `seq > after_seq`, in order, at most `limit`.
    async fn events_after(&self, agent: &AgentId, after_seq: i64, limit: u32) -> StoreResult<Vec<ChangeEvent>>;
    /// The agent's epoch and the sequence number of its last event (0 before the first); `None` without agent.
    async fn event_head(&self, agent: &AgentId) -> StoreResult<Option<(i64, i64)>>;
    /// Deletes events created before `events_before` or more than `keep_per_agent` behind their agent's last
    /// event, and sessions last seen before `sessions_idle_before` (with their subscriptions), in bounded
    /// batches.
    async fn prune(
        &self,
        events_before: Timestamp,
        keep_per_agent: u64,
        sessions_idle_before: Timestamp,
    ) -> StoreResult<Pruned>;

    /// Stores a new legacy session unless its key already holds `max_per_key` live ones (last seen at or
    /// after `live_since`; expired ones do not count): `false` then, and nothing is stored. Counted and added
    /// in one transaction that concurrent creations for the same key wait on, on every replica. `NotFound`
    /// when its agent or key no longer exists.
    async fn create_session(&self, session: &Session, max_per_key: u32, live_since: Timestamp) -> StoreResult<bool>;
    async fn get_session(&self, digest: &SessionDigest) -> StoreResult<Option<Session>>;
    /// Records use of the session at `at` (callers write it at most once a minute per session).
    async fn touch_session(&self, digest: &SessionDigest, at: Timestamp) -> StoreResult<()>;
    /// Ends the session (and its subscriptions), announcing [`BusMessage::SessionEnded`]; `false` when there
    /// was no such session of that agent.
    async fn delete_session(&self, agent: &AgentId, digest: &SessionDigest) -> StoreResult<bool>;
    /// Adds `uri` to the session's subscriptions (a no-op when it is there), announcing
    /// [`BusMessage::Subscribed`]; `false` (nothing changed) when the session already holds `limit` others;
    /// `NotFound` when the session ended meanwhile.
    async fn subscribe(
        &self,
        agent: &AgentId,
        digest: &SessionDigest,
        uri: &ResourceUri,
        limit: u32,
    ) -> StoreResult<bool>;
    /// Removes `uri` from the session's subscriptions, announcing `Unsubscribed` when it was there.
    async fn unsubscribe(&self, agent: &AgentId, digest: &SessionDigest, uri: &str) -> StoreResult<()>;
    /// The session's subscribed URIs, ordered.
    async fn subscriptions(&self, digest: &SessionDigest) -> StoreResult<Vec<String>>;
}

/// The audit log: admin changes in agents' own chains, MCP requests in writer streams.
#[async_trait]
pub trait AuditStore: Send + Sync {
    /// Audit records matching `filter`, newest first (time desc, id desc); `after` is the position of the
    /// last record of the page before.
    async fn list_audit(
        &self,
        filter: &AuditFilter,
        after: Option<&AuditPosition>,
        limit: u32,
    ) -> StoreResult<Vec<AuditRecord>>;

    /// Appends records (of MCP requests) to their agents' hash chains in `stream`, in one transaction of a
    /// few statements however many agents they span ([`crate::audit::stream`]); the stream moves on
    /// once they are stored. Sorts the records by bucket and agent (each agent's keep their order); a failed
    /// call may leave them so, and a retry chains them again.
    async fn append_audit(&self, stream: &mut AuditStream, records: &mut [QueuedRecord]) -> StoreResult<()>;
    /// Every writer stream's head, by stream id.
    async fn audit_streams(&self) -> StoreResult<Vec<StreamHead>>;
    /// The rows of a writer stream that `wanted` names, in order.
    async fn audit_stream_rows(&self, wanted: StreamRows<'_>) -> StoreResult<Vec<VerifiedRow>>;
    /// Deletes `stream`'s rows up to position `through_seq` and moves its pruned anchor to that row, so that
    /// the rest still verifies. Returns how many records were deleted.
    async fn prune_audit_stream(&self, stream: &str, through_seq: i64) -> StoreResult<u64>;
    /// The heads of every agent's audit chain, or of `agent`'s, by agent id: admin changes, and MCP records
    /// stored before writer streams.
    async fn audit_heads(&self, agent: Option<&AgentId>) -> StoreResult<Vec<ChainHead>>;
    /// The agents whose own chain holds a record past its retention, with their stored
    /// `auditRetentionDays`: a record older than `before` (the shortest retention in effect) that is also
    /// older than its agent's stored retention or, for an agent without one (or deleted), than
    /// `default_before` (`None`: kept forever). One query over the old records only, however many agents
    /// there are; agents with a configured exception are the caller's to check.
    async fn audit_chains_to_prune(
        &self,
        now: Timestamp,
        before: Timestamp,
        default_before: Option<Timestamp>,
    ) -> StoreResult<Vec<(String, Option<u32>)>>;
    /// The shortest `auditRetentionDays` any agent has stored, 0 (forever) left out.
    async fn shortest_audit_retention(&self) -> StoreResult<Option<u32>>;
    /// Deletes the oldest of `agent`'s audit records written before `before`, at most `max`, always a prefix
    /// of the chain, and moves the chain's pruned anchor to the last one deleted (so the rest still
    /// verifies). Returns how many were deleted.
    async fn prune_audit(&self, agent: &AgentId, before: Timestamp, max: u32) -> StoreResult<u64>;
    /// Records of `agent`'s chain after position `after_seq`, in chain order, at most `limit`.
    async fn audit_chain_page(&self, agent: &AgentId, after_seq: i64, limit: u32) -> StoreResult<Vec<AuditRecord>>;
}

/// What replicas share beyond the registry: who is alive, shared rate-limit buckets, and the pool.
#[async_trait]
pub trait ReplicaStore: Send + Sync {
    /// The replicas whose event listener has proven alive recently (PostgreSQL); empty with SQLite, whose
    /// single replica applies every change before the write returns.
    async fn live_replicas(&self) -> StoreResult<Vec<String>>;
    /// Removes `replica` from the live ones, so that no change waits for it any more. A no-op with SQLite.
    async fn deregister_replica(&self, replica: &str) -> StoreResult<()>;

    /// Takes one token from the shared token bucket `bucket` (every replica's requests together), atomically;
    /// the bucket is created full on first use and pruned once full again.
    async fn take_shared_token(&self, bucket: &str, limit: Limit) -> StoreResult<Outcome>;

    /// How many database connections are open, idle and allowed.
    fn pool_usage(&self) -> PoolUsage;
}
