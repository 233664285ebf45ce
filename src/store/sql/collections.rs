//! The SQL of the three registry collections, written once: what each collection's table looks like
//! ([`StoredCollection`], beside the [`Collection`] descriptor), and the statements every collection runs
//! the same way, generic over it.
//!
//! Listing and reading an item are the same for all three. Templates and prompts are also created,
//! replaced and deleted the same way ([`WrittenCollection`]): one transaction bumps the agent's event
//! sequence, writes the item, checks the agent's count and byte quotas, writes the audit row and the event
//! row, and announces the change as a list change. Resources store content and announce more precisely, so
//! their writes are their own ([`super::registry`]).

use crate::domain::model::{AuditAction, Prompt, ResourceTemplate};
use crate::domain::time::Timestamp;
use crate::registry::collection::{Collection, Prompts, Resources, Templates};
use crate::store::StoreResult;
use crate::store::rows::{Decode, PromptRow, ResourceRow, TemplateRow, json_string, json_text};
use crate::store::sql::Change;

/// How a collection is stored: the facts its statements need beyond the [`Collection`] descriptor.
pub(in crate::store) trait StoredCollection: Collection {
    /// An item as the database returns it.
    type Row: Decode<Record = Self::Item> + Send + Unpin;
    /// One item of an agent by key: `$1` the agent, `$2` the key.
    const SELECT_ONE: &'static str;
    /// A page of an agent's items, ordered by key: `$1` the agent, `$2` the key to start after, `$3` the limit.
    const SELECT_PAGE: &'static str;
    /// Deletes one item of an agent by key, returning it: `$1` the agent, `$2` the key.
    const DELETE_ONE: &'static str;
    /// How many items an agent holds: `$1` the agent.
    const COUNT: &'static str;
    /// The audit action of a create or replace, and of a delete.
    const PUT_ACTION: AuditAction;
    const DELETE_ACTION: AuditAction;
}

/// A collection whose items are created, replaced and deleted by the generic statements (templates,
/// prompts): each write is a list change.
pub(in crate::store) trait WrittenCollection: StoredCollection {
    /// Creates an item: `$1` the agent, `$2` the key, then [`WrittenCollection::values`] in order, then
    /// `created_at` and `updated_at` (both the time of the write).
    const INSERT: &'static str;
    /// Replaces an item, binding what [`WrittenCollection::INSERT`] binds (`created_at` unused: the item keeps
    /// its creation time).
    const UPDATE: &'static str;

    /// The item stored for `new`, replacing `before` (whose creation time it keeps) at `now`.
    fn stored(new: &Self::New, before: Option<&Self::Item>, now: Timestamp) -> Self::Item;
    /// The item's columns between its key and its times, as text.
    fn values(item: &Self::Item) -> StoreResult<Vec<Option<String>>>;
    /// What any write of the collection tells subscribers.
    fn change() -> Change;
}

/// The read and delete statements of a collection stored in `$table` and keyed by `$key`, whose items are
/// read as the columns `$columns`.
macro_rules! collection_statements {
    ($table:literal, $key:literal, $($columns:tt)+) => {
        const SELECT_ONE: &'static str =
            concat!("select ", $($columns)+, " from ", $table, " where agent_id = $1 and ", $key, " = $2");
        // Every key is non-empty, so `> ''` is the first page.
        const SELECT_PAGE: &'static str = concat!(
            "select ", $($columns)+, " from ", $table, " where agent_id = $1 and ", $key, " > $2 order by ",
            $key, " limit $3"
        );
        const DELETE_ONE: &'static str =
            concat!("delete from ", $table, " where agent_id = $1 and ", $key, " = $2 returning ", $($columns)+);
        const COUNT: &'static str = concat!("select count(*) from ", $table, " where agent_id = $1");
    };
}

/// `$item` with the fields `$field` cloned from `$new`, created when `$before` was (or at `$now` when there
/// was no `$before`) and updated at `$now`.
macro_rules! stored_item {
    ($item:ident { $($field:ident),+ } from $new:ident, $before:ident, $now:ident) => {
        $item {
            $($field: $new.$field.clone(),)+
            created_at: $before.map_or($now, |old| old.created_at),
            updated_at: $now,
        }
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

pub(in crate::store) use {resource_columns, resource_content_columns};

impl StoredCollection for Resources {
    type Row = ResourceRow;
    collection_statements!("resource", "uri", resource_columns!());
    const PUT_ACTION: AuditAction = AuditAction::ResourcePut;
    const DELETE_ACTION: AuditAction = AuditAction::ResourceDelete;
}

impl StoredCollection for Templates {
    type Row = TemplateRow;
    collection_statements!(
        "resource_template",
        "uri_template",
        "uri_template, name, title, description, mime_type, annotations, text, created_at, updated_at"
    );
    const PUT_ACTION: AuditAction = AuditAction::TemplatePut;
    const DELETE_ACTION: AuditAction = AuditAction::TemplateDelete;
}

impl WrittenCollection for Templates {
    const INSERT: &'static str = "insert into resource_template (agent_id, uri_template, name, title, description, \
                                  mime_type, annotations, text, created_at, updated_at) \
                                  values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)";
    const UPDATE: &'static str = "update resource_template set name = $3, title = $4, description = $5, \
                                  mime_type = $6, annotations = $7, text = $8, updated_at = $10 \
                                  where agent_id = $1 and uri_template = $2";

    fn stored(new: &Self::New, before: Option<&ResourceTemplate>, now: Timestamp) -> ResourceTemplate {
        stored_item!(ResourceTemplate { uri_template, name, title, description, mime_type, annotations, text } from new, before, now)
    }

    fn values(item: &ResourceTemplate) -> StoreResult<Vec<Option<String>>> {
        Ok(vec![
            Some(item.name.clone()),
            item.title.clone(),
            item.description.clone(),
            item.mime_type.clone(),
            json_text(item.annotations.as_ref()),
            item.text.clone(),
        ])
    }

    fn change() -> Change {
        Change::templates_changed()
    }
}

impl StoredCollection for Prompts {
    type Row = PromptRow;
    collection_statements!("prompt", "name", "name, title, description, arguments, messages, created_at, updated_at");
    const PUT_ACTION: AuditAction = AuditAction::PromptPut;
    const DELETE_ACTION: AuditAction = AuditAction::PromptDelete;
}

impl WrittenCollection for Prompts {
    const INSERT: &'static str = "insert into prompt (agent_id, name, title, description, arguments, messages, \
                                  created_at, updated_at) values ($1, $2, $3, $4, $5, $6, $7, $8)";
    const UPDATE: &'static str = "update prompt set title = $3, description = $4, arguments = $5, messages = $6, \
                                  updated_at = $8 where agent_id = $1 and name = $2";

    fn stored(new: &Self::New, before: Option<&Prompt>, now: Timestamp) -> Prompt {
        stored_item!(Prompt { name, title, description, arguments, messages } from new, before, now)
    }

    fn values(item: &Prompt) -> StoreResult<Vec<Option<String>>> {
        Ok(vec![
            item.title.clone(),
            item.description.clone(),
            Some(json_string(&item.arguments)?),
            Some(json_string(&item.messages)?),
        ])
    }

    fn change() -> Change {
        Change::prompts_changed()
    }
}

/// Expands the generic collection statements, and the [`CollectionStore`] of every [`WrittenCollection`],
/// for `$store`.
///
/// [`CollectionStore`]: crate::registry::collection::CollectionStore
macro_rules! impl_collection_store {
    ($store:ty, $db:ty) => {
        impl $store {
            /// `agent`'s item of collection `C` with this key, read through `executor`.
            async fn collection_item<'c, C>(
                executor: impl Executor<'c>,
                agent: &AgentId,
                key: &str,
            ) -> StoreResult<Option<C::Item>>
            where
                C: StoredCollection<Row: Readable>,
            {
                let query = sqlx::query_as::<$db, C::Row>(C::SELECT_ONE).bind(agent.as_str()).bind(key);
                Self::one(query, executor).await
            }

            /// A page of `agent`'s items of collection `C`, ordered by key (bytewise).
            #[tracing::instrument(skip_all, fields(agent = %agent, collection = C::NOUN))]
            async fn collection_page<C>(
                &self,
                agent: &AgentId,
                after: After<'_>,
                limit: u32,
            ) -> StoreResult<Vec<C::Item>>
            where
                C: StoredCollection<Row: Readable>,
            {
                let query = sqlx::query_as::<$db, C::Row>(C::SELECT_PAGE)
                    .bind(agent.as_str())
                    .bind(after.unwrap_or(""))
                    .bind(i64::from(limit));
                Self::all(query, self.reader()).await
            }

            /// After items of collection `C` were stored in `tx`: refuses (rolling back) what takes `agent` over
            /// the collection's count quota, or it or the gateway over the byte quotas.
            async fn check_quotas<C: StoredCollection>(&self, tx: &mut Tx, agent: &AgentId) -> StoreResult<()> {
                let (max, key) = C::max_count(self.quotas());
                if max > 0 {
                    let count = sqlx::query_scalar::<$db, i64>(C::COUNT)
                        .bind(agent.as_str())
                        .fetch_one(&mut **tx)
                        .await
                        .map_err(Self::error)?;
                    $crate::store::sql::within(count, max, || {
                        StoreError::TooMany(format!(
                            "agent {agent} would hold {count} {}s; at most {max} are allowed (limits.{key})",
                            C::NOUN
                        ))
                    })?;
                }
                self.check_byte_quotas(tx, agent).await
            }
        }

        #[async_trait::async_trait]
        impl<C> CollectionStore<C> for $store
        where
            C: WrittenCollection<Row: Readable>,
        {
            #[tracing::instrument(skip_all, fields(agent = %agent, collection = C::NOUN, key = C::new_key(new)))]
            async fn put(&self, agent: &AgentId, new: &C::New, actor: &Actor) -> StoreResult<Upserted<C::Item>> {
                let now = Timestamp::now();
                let key = C::new_key(new);
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let before = Self::collection_item::<C>(&mut *tx, agent, key).await?;
                let after = C::stored(new, before.as_ref(), now);
                let mut write = sqlx::query::<$db>(if before.is_some() { C::UPDATE } else { C::INSERT })
                    .bind(agent.as_str())
                    .bind(key);
                for value in C::values(&after)? {
                    write = write.bind(value);
                }
                // A created item's creation time is `now`; a replaced one keeps its own (UPDATE skips `created_at`).
                write.bind(now.as_micros()).bind(now.as_micros()).execute(&mut *tx).await.map_err(Self::error)?;
                self.check_quotas::<C>(&mut tx, agent).await?;
                let audit = Audit::of(agent, actor, C::PUT_ACTION, key, before.as_ref(), Some(&after));
                Self::insert_audit(&mut tx, audit, now).await?;
                self.finish_change(tx, agent, seq, &C::change(), now).await?;
                Ok(Upserted { item: after, created: before.is_none() })
            }

            async fn list(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<C::Item>> {
                self.collection_page::<C>(agent, after, limit).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, collection = C::NOUN, key = C::key_str(key)))]
            async fn get(&self, agent: &AgentId, key: &C::Key) -> StoreResult<Option<C::Item>> {
                Self::collection_item::<C>(self.reader(), agent, C::key_str(key)).await
            }

            #[tracing::instrument(skip_all, fields(agent = %agent, collection = C::NOUN, key = C::key_str(key)))]
            async fn delete(&self, agent: &AgentId, key: &C::Key, actor: &Actor) -> StoreResult<()> {
                let now = Timestamp::now();
                let key = C::key_str(key);
                let mut tx = self.begin_write().await?;
                let seq = Self::next_seq(&mut tx, agent).await?;
                let query = sqlx::query_as::<$db, C::Row>(C::DELETE_ONE).bind(agent.as_str()).bind(key);
                let before = Self::one(query, &mut *tx).await?.ok_or(StoreError::NotFound)?;
                let audit = Audit::of(agent, actor, C::DELETE_ACTION, key, Some(&before), None);
                Self::insert_audit(&mut tx, audit, now).await?;
                self.finish_change(tx, agent, seq, &C::change(), now).await
            }
        }
    };
}

pub(in crate::store) use impl_collection_store;
