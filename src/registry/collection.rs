//! The three registry collections, each described once: resources, resource templates and prompts.
//!
//! An agent's registry holds three collections that are stored, listed, paged, cached, audited and announced
//! the same way and differ only in a few facts: what an item is, which field keys it (and orders its lists),
//! which quota bounds its count, what a change tells subscribers, and how MCP lists show it. A
//! [`Collection`] is the descriptor of those facts; the store, the admin handlers and the MCP list methods are
//! written once over it, so a fourth collection is one more descriptor.
//!
//! [`Collection`]: crate::registry::collection::Collection

use async_trait::async_trait;
use serde::Serialize;

use crate::domain::model::{Actor, NewPrompt, NewResource, NewResourceTemplate, Prompt, Resource, ResourceTemplate};
use crate::domain::{AgentId, PromptName, ResourceUri};
use crate::registry::cursor::ListKind;
use crate::store::{After, Quotas, Store, StoreResult, Upserted};

/// The facts that set one registry collection apart from the others.
pub trait Collection: Send + Sync + 'static {
    /// An item as it is stored and as the admin API shows it.
    type Item: Serialize + Send + Sync + 'static;
    /// A validated item to store, carrying its key.
    type New: Send + Sync + 'static;
    /// The key of an item, parsed.
    type Key: Send + Sync + 'static;

    /// What one item is called in errors and logs: `resource`, `resource template`, `prompt`.
    const NOUN: &'static str;
    /// The list its cursors belong to.
    const LIST: ListKind;
    /// The field of its MCP list result, and the name of its cached list pages: `resources`,
    /// `resourceTemplates`, `prompts`.
    const MCP_KEY: &'static str;
    /// The first word of its audit actions (`resource.put`, `template.delete`, ...).
    const AUDIT_NOUN: &'static str;

    /// The item's key within its agent, which also orders its lists (bytewise).
    fn key(item: &Self::Item) -> &str;
    /// The key of an item to store.
    fn new_key(new: &Self::New) -> &str;
    /// The key as text.
    fn key_str(key: &Self::Key) -> &str;
    /// How many items one agent may hold (0: unlimited), and the `[limits]` setting that says so.
    fn max_count(quotas: &Quotas) -> (u64, &'static str);
    /// The store's side of this collection.
    fn store(store: &dyn Store) -> &dyn CollectionStore<Self>;
}

/// What the store does with one collection of an agent's registry. Every change commits in one
/// transaction with the agent's next event row and its audit row.
#[async_trait]
pub trait CollectionStore<C: Collection + ?Sized>: Send + Sync {
    /// Creates or replaces the item with `new`'s key; `NotFound` when the agent does not exist, `TooMany` or
    /// `TooLarge` when the agent would go over a quota (nothing is changed then).
    async fn put(&self, agent: &AgentId, new: &C::New, actor: &Actor) -> StoreResult<Upserted<C::Item>>;
    /// Ordered by key (bytewise); at most `limit` items after `after`.
    async fn list(&self, agent: &AgentId, after: After<'_>, limit: u32) -> StoreResult<Vec<C::Item>>;
    async fn get(&self, agent: &AgentId, key: &C::Key) -> StoreResult<Option<C::Item>>;
    /// `NotFound` when there is no such item.
    async fn delete(&self, agent: &AgentId, key: &C::Key, actor: &Actor) -> StoreResult<()>;
}

/// Declares a collection's descriptor type and its [`Collection`] impl from the collection's facts: its item,
/// new-item and key types, its names, the field that keys an item (on both the item and the new item, as
/// text), and the [`Quotas`] field bounding its count (whose name is also the `[limits]` setting).
macro_rules! collection {
    (
        $(#[$doc:meta])*
        $name:ident {
            item: $item:ty,
            new: $new:ty,
            key: $key:ty,
            noun: $noun:literal,
            list: $list:ident,
            mcp_key: $mcp_key:literal,
            audit_noun: $audit_noun:literal,
            key_field: $field:ident,
            key_str: |$k:ident| $key_str:expr,
            quota: $quota:ident $(,)?
        }
    ) => {
        $(#[$doc])*
        pub struct $name;

        impl Collection for $name {
            type Item = $item;
            type New = $new;
            type Key = $key;
            const NOUN: &'static str = $noun;
            const LIST: ListKind = ListKind::$list;
            const MCP_KEY: &'static str = $mcp_key;
            const AUDIT_NOUN: &'static str = $audit_noun;

            fn key(item: &$item) -> &str {
                Self::key_str(&item.$field)
            }

            fn new_key(new: &$new) -> &str {
                Self::key_str(&new.$field)
            }

            fn key_str($k: &$key) -> &str {
                $key_str
            }

            fn max_count(quotas: &Quotas) -> (u64, &'static str) {
                (quotas.$quota, stringify!($quota))
            }

            fn store(store: &dyn Store) -> &dyn CollectionStore<Self> {
                store
            }
        }
    };
}

collection! {
    /// An agent's resources, keyed by URI.
    Resources {
        item: Resource,
        new: NewResource,
        key: ResourceUri,
        noun: "resource",
        list: Resources,
        mcp_key: "resources",
        audit_noun: "resource",
        key_field: uri,
        key_str: |key| key.as_str(),
        quota: max_resources_per_agent,
    }
}

collection! {
    /// An agent's resource templates, keyed by `uriTemplate`.
    Templates {
        item: ResourceTemplate,
        new: NewResourceTemplate,
        key: String,
        noun: "resource template",
        list: Templates,
        mcp_key: "resourceTemplates",
        audit_noun: "template",
        key_field: uri_template,
        key_str: |key| key,
        quota: max_templates_per_agent,
    }
}

collection! {
    /// An agent's prompts, keyed by name.
    Prompts {
        item: Prompt,
        new: NewPrompt,
        key: PromptName,
        noun: "prompt",
        list: Prompts,
        mcp_key: "prompts",
        audit_noun: "prompt",
        key_field: name,
        key_str: |key| key.as_str(),
        quota: max_prompts_per_agent,
    }
}
