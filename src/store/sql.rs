//! The SQL both backends share, and the one implementation of [`Store`](super::Store) they both expand.
//!
//! SQLite and PostgreSQL accept the same statements here: `$n` placeholders, `returning`, `on conflict`,
//! row-value comparisons. Ordering is bytewise in both (PostgreSQL's key columns are `collate "C"`). So the
//! whole store is written once, in [`impl_store!`] (the transaction helpers, here) and [`methods`] (the
//! `impl Store` block), and each backend expands it for its own type, supplying only what really differs:
//! pools, how a write transaction begins, how a commit is announced on the bus, and how errors are
//! classified. Pure decisions (what a change announces, error classes, prefix ranges) are plain functions
//! here, tested without a database.

use std::collections::HashSet;

use sqlx::error::{DatabaseError, ErrorKind};

use super::StoreError;
use crate::domain::model::{AuditRecord, RateLimit, RateLimitPatch, Resource};

/// The `impl Store` block itself.
pub(super) mod methods;
/// The built-in authorization server's clients, codes and tokens: the `OAuthServerStore` implementation.
pub(super) mod oauth_server;
/// Sessions, subscriptions, the event head and retention: inherent methods the `impl Store` block delegates to.
pub(super) mod sessions;
/// The SQL of subject grants of an external authorization server.
pub(super) mod subjects;

/// The most records one audit segment holds: a listing or a chain walk decodes a segment whole, and a
/// chain page finds the segment holding a position by looking this far back.
pub(super) const AUDIT_SEGMENT_RECORDS: usize = 1_000;

/// The longest stretch of occurrence time (µs) one audit segment spans: the listing looks this far past
/// the newest time a page can show for segments holding records at or before it.
pub(super) const AUDIT_SEGMENT_SPAN: i64 = 60_000_000;

/// Audit segments one `insert` statement carries: 10 values each stays far below both backends' bound
/// parameters (SQLite's 32,766).
pub(super) const AUDIT_SEGMENTS_PER_INSERT: usize = 1_000;

/// Keys one `update` of their last use names.
pub(super) const KEYS_PER_TOUCH: usize = 1_000;

/// Where one audit segment lies in an agent's records: a run of at most [`AUDIT_SEGMENT_RECORDS`] records
/// spanning at most [`AUDIT_SEGMENT_SPAN`] of occurrence time (see the 0008 migration).
pub(super) struct AuditSegment {
    pub(super) records: std::ops::Range<usize>,
    pub(super) first_at: i64,
    pub(super) last_at: i64,
}

/// Cuts one agent's `records`, in chain order, into segments.
pub(super) fn audit_segments(records: &[AuditRecord]) -> Vec<AuditSegment> {
    let mut segments = Vec::new();
    let mut start = 0;
    let (mut first_at, mut last_at) = (0, 0);
    for (i, record) in records.iter().enumerate() {
        let at = record.occurred_at.as_micros();
        let fits = i > start
            && i - start < AUDIT_SEGMENT_RECORDS
            && at.max(last_at).saturating_sub(at.min(first_at)) <= AUDIT_SEGMENT_SPAN;
        if fits {
            first_at = first_at.min(at);
            last_at = last_at.max(at);
            continue;
        }
        if i > start {
            segments.push(AuditSegment { records: start..i, first_at, last_at });
        }
        start = i;
        (first_at, last_at) = (at, at);
    }
    if start < records.len() {
        segments.push(AuditSegment { records: start..records.len(), first_at, last_at });
    }
    segments
}

/// An audit segment as it is inserted.
pub(super) struct AuditSegmentInsert<'a> {
    pub(super) agent_id: &'a str,
    pub(super) first_seq: i64,
    pub(super) last_seq: i64,
    pub(super) first_at: i64,
    pub(super) last_at: i64,
    pub(super) prev_hash: String,
    pub(super) last_hash: String,
    pub(super) records: String,
}

/// Chains one agent's `records` on after position `seq`, whose hash is `hash`, and encodes them in
/// segments; sets each record's position. Returns the segments and the new head's hash.
pub(super) fn chain_audit_segments<'a>(
    agent_id: &'a str,
    records: &mut [AuditRecord],
    mut seq: i64,
    mut hash: String,
) -> Result<(Vec<AuditSegmentInsert<'a>>, String), StoreError> {
    let mut segments = Vec::new();
    for segment in audit_segments(records) {
        let prev_hash = hash.clone();
        let first_seq = seq + 1;
        let mut out = Vec::with_capacity(segment.records.len() * 448 + 2);
        out.push(b'[');
        for record in &mut records[segment.records] {
            seq += 1;
            if out.len() > 1 {
                out.push(b',');
            }
            record.chain_seq = Some(seq);
            hash = crate::domain::audit::append_stored_record(&mut out, &hash, record, seq);
        }
        out.push(b']');
        let records = String::from_utf8(out)
            .map_err(|_| StoreError::Corrupt("an audit segment was not written as UTF-8".to_owned()))?;
        segments.push(AuditSegmentInsert {
            agent_id,
            first_seq,
            last_seq: seq,
            first_at: segment.first_at,
            last_at: segment.last_at,
            prev_hash,
            last_hash: hash.clone(),
            records,
        });
    }
    Ok((segments, hash))
}

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

/// Columns of a resource as lists show it.
macro_rules! resource_columns {
    () => {
        "uri, name, title, description, mime_type, size, annotations, meta, version, created_at, updated_at"
    };
}

/// Columns of a resource with its content.
macro_rules! resource_content_columns {
    () => {
        concat!(resource_columns!(), ", content_text, content_blob")
    };
}

macro_rules! agent_columns {
    () => {
        "agent_id, name, description, rate_limit_rps, rate_limit_burst, rate_limit_shared, cache_ttl_ms, \
         audit_retention_days, epoch, created_at, updated_at"
    };
}

macro_rules! key_columns {
    () => {
        "api_key_id, agent_id, name, prefix, scopes, created_at, expires_at, last_used_at, revoked_at, \
         rate_limit_rps, rate_limit_burst, rate_limit_shared"
    };
}

macro_rules! template_columns {
    () => {
        "uri_template, name, title, description, mime_type, annotations, text, created_at, updated_at"
    };
}

macro_rules! prompt_columns {
    () => {
        "name, title, description, arguments, messages, created_at, updated_at"
    };
}

pub(super) use {
    agent_columns, key_columns, prompt_columns, resource_columns, resource_content_columns, stored_bytes,
    template_columns,
};

/// Expands the [`Store`](super::Store) implementation for a backend: `impl_store!(Type, Database, "name")`.
///
/// The backend's type provides, as inherent items:
/// - `fn reader(&self) -> &sqlx::Pool<Db>` and `fn writer(&self) -> &sqlx::Pool<Db>`, and `fn pools(&self)`
///   listing each distinct pool once (for metrics);
/// - `async fn begin_write(&self) -> StoreResult<sqlx::Transaction<'static, Db>>`;
/// - `async fn replicas(&self) -> StoreResult<Vec<String>>`: the live replicas a change must reach;
/// - `async fn commit(&self, tx, messages: Vec<BusMessage>) -> StoreResult<()>`: commits and makes sure the
///   messages reach every replica's bus exactly when the change is visible;
/// - `async fn run_migrations(&self) -> StoreResult<()>`;
/// - `async fn reserve_audit_positions(tx, counts: &[(String, i64)]) -> StoreResult<Vec<(i64, String)>>`: for
///   each agent (sorted, distinct) and its number of new records, moves its chain head's position on by that
///   many, creating the head when missing, locking the heads in the order given; returns each head's new
///   position and its hash, in the same order;
/// - `async fn store_audit_heads(tx, heads: &[(&str, String)]) -> StoreResult<()>`: sets each agent's head hash;
/// - `fn error(error: sqlx::Error) -> StoreError`.
macro_rules! impl_store {
    ($store:ty, $db:ty, $backend:literal) => {
        const _: () = {
            use $crate::domain::audit::ChainHead;
            use $crate::domain::audit_stream::{
                AuditStream, ROW_SPAN, RowHead, StreamHead, VerifiedRow, bucket_of, heads_pattern,
            };
            use $crate::domain::model::{
                Actor, Agent, AgentPatch, AuditFilter, AuditPosition, AuditRecord, ChangeEvent, Content, KeyPatch,
                KeyRecord, NewAgent, NewKey, NewPrompt, NewResource, NewResourceTemplate, Prompt, Resource,
                ResourceTemplate,
            };
            use $crate::domain::session::{Pruned, Session, SessionDigest};
            use $crate::domain::subject::SubjectGrant;
            use $crate::domain::time::Timestamp;
            use $crate::domain::{AgentId, PromptName, ResourceUri};
            use $crate::events::BusMessage;
            use $crate::store::rows::{
                AgentRow, AuditListRow, AuditSegmentRow, AuditStreamRow, EventRow, KeyRow, PromptRow,
                ResourceContentRow, ResourceRow, TemplateRow, json_string, json_text, record_digest, scopes_text,
                to_i64,
            };
            use $crate::store::sql::sessions::{PRUNE_BATCH, SessionRow};
            use $crate::store::sql::subjects::{SubjectRow, subject_columns};
            use $crate::store::sql::{
                AUDIT_SEGMENT_RECORDS, AUDIT_SEGMENT_SPAN, AUDIT_SEGMENTS_PER_INSERT, Change, KEYS_PER_TOUCH,
                agent_columns, chain_audit_segments, key_columns, merged_rate_limit, prefix_upper_bound,
                prompt_columns, resource_columns, resource_content_columns, stored_bytes, template_columns,
            };
            use $crate::store::{After, BatchOutcome, Store, StoreError, StoreResult, Upserted};

            type Tx = sqlx::Transaction<'static, $db>;

            #[async_trait::async_trait]
            impl $crate::registry::collection::CollectionStore<$crate::registry::collection::Resources> for $store {
                async fn put(
                    &self,
                    agent: &AgentId,
                    new: &NewResource,
                    actor: &Actor,
                ) -> StoreResult<Upserted<Resource>> {
                    self.put_resource(agent, new, actor).await
                }
                async fn list(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<Resource>> {
                    self.list_resources(agent, after, limit).await
                }
                async fn get(&self, agent: &AgentId, key: &ResourceUri) -> StoreResult<Option<Resource>> {
                    Ok(self.get_resource(agent, key.as_str()).await?.map(|(resource, _)| resource))
                }
                async fn delete(&self, agent: &AgentId, key: &ResourceUri, actor: &Actor) -> StoreResult<()> {
                    self.delete_resource(agent, key, actor).await
                }
            }

            #[async_trait::async_trait]
            impl $crate::registry::collection::CollectionStore<$crate::registry::collection::Templates> for $store {
                async fn put(
                    &self,
                    agent: &AgentId,
                    new: &NewResourceTemplate,
                    actor: &Actor,
                ) -> StoreResult<Upserted<ResourceTemplate>> {
                    self.put_template(agent, new, actor).await
                }
                async fn list(
                    &self,
                    agent: &AgentId,
                    after: After<'_>,
                    limit: u32,
                ) -> StoreResult<Vec<ResourceTemplate>> {
                    self.list_templates(agent, after, limit).await
                }
                async fn get(&self, agent: &AgentId, key: &String) -> StoreResult<Option<ResourceTemplate>> {
                    self.get_template(agent, key).await
                }
                async fn delete(&self, agent: &AgentId, key: &String, actor: &Actor) -> StoreResult<()> {
                    self.delete_template(agent, key, actor).await
                }
            }

            #[async_trait::async_trait]
            impl $crate::registry::collection::CollectionStore<$crate::registry::collection::Prompts> for $store {
                async fn put(&self, agent: &AgentId, new: &NewPrompt, actor: &Actor) -> StoreResult<Upserted<Prompt>> {
                    self.put_prompt(agent, new, actor).await
                }
                async fn list(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<Prompt>> {
                    self.list_prompts(agent, after, limit).await
                }
                async fn get(&self, agent: &AgentId, key: &PromptName) -> StoreResult<Option<Prompt>> {
                    self.get_prompt(agent, key).await
                }
                async fn delete(&self, agent: &AgentId, key: &PromptName, actor: &Actor) -> StoreResult<()> {
                    self.delete_prompt(agent, key, actor).await
                }
            }

            /// One audit row of an admin change.
            struct Audit<'a> {
                agent: &'a AgentId,
                actor: &'a Actor,
                action: &'static str,
                target: &'a str,
                before: Option<String>,
                after: Option<String>,
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
                        action: audit.action.into(),
                        target: audit.target.into(),
                        before_digest: audit.before.map(Into::into),
                        after_digest: audit.after.map(Into::into),
                        request_id: audit.actor.request_id.as_deref().map(Into::into),
                        ..AuditRecord::default()
                    };
                    Self::append_audit_in(tx, std::slice::from_mut(&mut record)).await
                }

                /// Appends `records` to their agents' hash chains and stores them as segments (one agent's
                /// run of records in a row; see the 0008 migration), inside `tx`, leaving them sorted by agent
                /// (each agent's in the order they came) with their chain positions set. The statement that
                /// reserves the records' positions locks each agent's head row (agents in sorted order, so
                /// concurrent writers never deadlock); a batch costs the same few statements however many
                /// agents it spans.
                async fn append_audit_in(tx: &mut Tx, records: &mut [AuditRecord]) -> StoreResult<()> {
                    // Stable: each agent's records keep their order, which is their order in its chain.
                    records.sort_by(|a, b| a.agent_id.cmp(&b.agent_id));
                    let mut counts: Vec<(String, i64)> = Vec::new();
                    for record in records.iter() {
                        match counts.last_mut() {
                            Some((agent, count)) if *agent == record.agent_id => *count += 1,
                            _ => counts.push((record.agent_id.to_string(), 1)),
                        }
                    }
                    let reserved = Self::reserve_audit_positions(tx, &counts).await?;
                    // A batch holds thousands of records: hashing and encoding them is milliseconds of work.
                    let chained = $crate::store::off_the_workers(records.len(), || {
                        let mut heads = Vec::with_capacity(counts.len());
                        let mut segments = Vec::new();
                        let mut rest = &mut records[..];
                        for ((agent, count), (last, hash)) in counts.iter().zip(reserved) {
                            let (mine, others) = std::mem::take(&mut rest).split_at_mut(*count as usize);
                            rest = others;
                            let (chained, head) = chain_audit_segments(agent, mine, last - count, hash)?;
                            segments.extend(chained);
                            heads.push((agent.as_str(), head));
                        }
                        Ok::<_, StoreError>((heads, segments))
                    });
                    let (heads, segments) = chained?;
                    Self::store_audit_heads(tx, &heads).await?;
                    let now = Timestamp::now().as_micros();
                    for chunk in segments.chunks(AUDIT_SEGMENTS_PER_INSERT) {
                        let mut insert = sqlx::QueryBuilder::<$db>::new(
                            "insert into audit_segment (agent_id, first_seq, last_seq, first_at, last_at, prev_hash, \
                             last_hash, records, created_at, updated_at) ",
                        );
                        insert.push_values(chunk, |mut row, segment| {
                            row.push_bind(segment.agent_id)
                                .push_bind(segment.first_seq)
                                .push_bind(segment.last_seq)
                                .push_bind(segment.first_at)
                                .push_bind(segment.last_at)
                                .push_bind(segment.prev_hash.as_str())
                                .push_bind(segment.last_hash.as_str())
                                .push_bind(segment.records.as_str())
                                .push_bind(now)
                                .push_bind(now);
                        });
                        // Only the one-row insert (an admin change's, a one-agent batch's) is kept prepared, so
                        // that other row counts do not push the connection's prepared statements out.
                        insert.build().persistent(chunk.len() == 1).execute(&mut **tx).await.map_err(Self::error)?;
                    }
                    Ok(())
                }

                /// After resources changed in `tx`: refuses (rolling back) what takes `agent` over its resource
                /// count, or it or the gateway over the byte quotas.
                async fn check_resource_quotas(&self, tx: &mut Tx, agent: &AgentId) -> StoreResult<()> {
                    let max = self.quotas().max_resources_per_agent;
                    if max > 0 {
                        let count = sqlx::query_scalar::<$db, i64>("select count(*) from resource where agent_id = $1")
                            .bind(agent.as_str())
                            .fetch_one(&mut **tx)
                            .await
                            .map_err(Self::error)?;
                        $crate::store::sql::within(count, max, || {
                            StoreError::TooMany(format!(
                                "agent {agent} would hold {count} resources; at most {max} are allowed \
                                 (limits.max_resources_per_agent)"
                            ))
                        })?;
                    }
                    self.check_byte_quotas(tx, agent).await
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

                /// After a template or prompt was stored in `tx`: refuses (rolling back) what takes `agent` over
                /// its count quota. `table` is `resource_template` or `prompt`.
                async fn check_count_quota(
                    tx: &mut Tx,
                    agent: &AgentId,
                    table: &'static str,
                    max: u64,
                    key: &'static str,
                ) -> StoreResult<()> {
                    if max == 0 {
                        return Ok(());
                    }
                    let query = match table {
                        "resource_template" => "select count(*) from resource_template where agent_id = $1",
                        _ => "select count(*) from prompt where agent_id = $1",
                    };
                    let count = sqlx::query_scalar::<$db, i64>(query)
                        .bind(agent.as_str())
                        .fetch_one(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    let what = if table == "prompt" { "prompts" } else { "resource templates" };
                    $crate::store::sql::within(count, max, || {
                        StoreError::TooMany(format!(
                            "agent {agent} would hold {count} {what}; at most {max} are allowed (limits.{key})"
                        ))
                    })
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

                async fn resource_in(
                    tx: &mut Tx,
                    agent: &AgentId,
                    uri: &str,
                ) -> StoreResult<Option<(Resource, Content)>> {
                    sqlx::query_as::<$db, ResourceContentRow>(concat!(
                        "select ",
                        resource_content_columns!(),
                        " from resource where agent_id = $1 and uri = $2"
                    ))
                    .bind(agent.as_str())
                    .bind(uri)
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(Self::error)?
                    .map(ResourceContentRow::into_parts)
                    .transpose()
                }

                /// Creates or replaces one resource and writes its audit row; returns the stored resource
                /// and the one it replaced.
                async fn upsert_resource_in(
                    tx: &mut Tx,
                    agent: &AgentId,
                    new: &NewResource,
                    actor: &Actor,
                    now: Timestamp,
                ) -> StoreResult<(Option<Resource>, Resource)> {
                    let before = Self::resource_in(tx, agent, new.uri.as_str()).await?;
                    let after = Resource {
                        uri: new.uri.clone(),
                        name: new.name.clone(),
                        title: new.title.clone(),
                        description: new.description.clone(),
                        mime_type: new.mime_type.clone(),
                        size: new.content.size(),
                        annotations: new.annotations.clone(),
                        meta: new.meta.clone(),
                        version: before.as_ref().map_or(1, |(old, _)| old.version + 1),
                        created_at: before.as_ref().map_or(now, |(old, _)| old.created_at),
                        updated_at: now,
                    };
                    let (text, blob) = match &new.content {
                        Content::Text(text) => (Some(text.as_str()), None),
                        Content::Blob(bytes) => (None, Some(bytes.as_slice())),
                    };
                    let statement = if before.is_some() {
                        "update resource set name = $3, title = $4, description = $5, mime_type = $6, \
                         content_text = $7, content_blob = $8, size = $9, annotations = $10, meta = $11, \
                         version = $12, updated_at = $14 where agent_id = $1 and uri = $2"
                    } else {
                        "insert into resource (agent_id, uri, name, title, description, mime_type, content_text, \
                         content_blob, size, annotations, meta, version, created_at, updated_at) \
                         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
                    };
                    sqlx::query::<$db>(statement)
                        .bind(agent.as_str())
                        .bind(after.uri.as_str())
                        .bind(after.name.as_str())
                        .bind(after.title.as_deref())
                        .bind(after.description.as_deref())
                        .bind(after.mime_type.as_deref())
                        .bind(text)
                        .bind(blob)
                        .bind(to_i64(after.size))
                        .bind(json_text(after.annotations.as_ref()))
                        .bind(json_text(after.meta.as_ref()))
                        .bind(after.version)
                        .bind(after.created_at.as_micros())
                        .bind(now.as_micros())
                        .execute(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    let audit = Audit {
                        agent,
                        actor,
                        action: "resource.put",
                        target: after.uri.as_str(),
                        before: before.as_ref().map(|(old, content)| record_digest(old, Some(content))),
                        after: Some(record_digest(&after, Some(&new.content))),
                    };
                    Self::insert_audit(tx, audit, now).await?;
                    Ok((before.map(|(old, _)| old), after))
                }

                /// Deletes one resource and writes its audit row; `NotFound` when it does not exist.
                async fn delete_resource_in(
                    tx: &mut Tx,
                    agent: &AgentId,
                    uri: &ResourceUri,
                    actor: &Actor,
                    now: Timestamp,
                ) -> StoreResult<()> {
                    let (before, content) =
                        Self::resource_in(tx, agent, uri.as_str()).await?.ok_or(StoreError::NotFound)?;
                    sqlx::query::<$db>("delete from resource where agent_id = $1 and uri = $2")
                        .bind(agent.as_str())
                        .bind(uri.as_str())
                        .execute(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    let audit = Audit {
                        agent,
                        actor,
                        action: "resource.delete",
                        target: uri.as_str(),
                        before: Some(record_digest(&before, Some(&content))),
                        after: None,
                    };
                    Self::insert_audit(tx, audit, now).await
                }

                async fn agent_in(tx: &mut Tx, id: &AgentId) -> StoreResult<Option<Agent>> {
                    // A no-op update rather than `select ... for update` (which SQLite lacks): it locks the
                    // row in PostgreSQL, so two concurrent patches cannot lose each other's fields.
                    sqlx::query_as::<$db, AgentRow>(concat!(
                        "update agent set updated_at = updated_at where agent_id = $1 returning ",
                        agent_columns!()
                    ))
                    .bind(id.as_str())
                    .fetch_optional(&mut **tx)
                    .await
                    .map_err(Self::error)?
                    .map(AgentRow::into_agent)
                    .transpose()
                }
            }

            $crate::store::sql::sessions::impl_session_sql!($store, $db);
            $crate::store::sql::subjects::impl_subject_sql!($store, $db);
            $crate::store::sql::oauth_server::impl_oauth_server_sql!($store, $db);
            $crate::store::sql::methods::impl_store_methods!($store, $db, $backend);
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
