//! The three registry collections, each described once: resources, resource templates and prompts.
//!
//! An agent's registry holds three collections that are stored, listed, paged, cached, audited and announced
//! the same way and differ only in a few facts: what an item is, which field keys it (and orders its lists),
//! which quota bounds its count, what a change tells subscribers, and how MCP lists show it. A
//! [`Collection`] is the descriptor of those facts; the store, the admin handlers and the MCP list methods are
//! written once over it, so a fourth collection is one more descriptor.

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

/// An agent's resources, keyed by URI.
pub struct Resources;
/// An agent's resource templates, keyed by `uriTemplate`.
pub struct Templates;
/// An agent's prompts, keyed by name.
pub struct Prompts;

impl Collection for Resources {
    type Item = Resource;
    type New = NewResource;
    type Key = ResourceUri;
    const NOUN: &'static str = "resource";
    const LIST: ListKind = ListKind::Resources;
    const MCP_KEY: &'static str = "resources";
    const AUDIT_NOUN: &'static str = "resource";

    fn key(item: &Resource) -> &str {
        item.uri.as_str()
    }

    fn new_key(new: &NewResource) -> &str {
        new.uri.as_str()
    }

    fn key_str(key: &ResourceUri) -> &str {
        key.as_str()
    }

    fn max_count(quotas: &Quotas) -> (u64, &'static str) {
        (quotas.max_resources_per_agent, "max_resources_per_agent")
    }

    fn store(store: &dyn Store) -> &dyn CollectionStore<Self> {
        store
    }
}

impl Collection for Templates {
    type Item = ResourceTemplate;
    type New = NewResourceTemplate;
    type Key = String;
    const NOUN: &'static str = "resource template";
    const LIST: ListKind = ListKind::Templates;
    const MCP_KEY: &'static str = "resourceTemplates";
    const AUDIT_NOUN: &'static str = "template";

    fn key(item: &ResourceTemplate) -> &str {
        &item.uri_template
    }

    fn new_key(new: &NewResourceTemplate) -> &str {
        &new.uri_template
    }

    fn key_str(key: &String) -> &str {
        key
    }

    fn max_count(quotas: &Quotas) -> (u64, &'static str) {
        (quotas.max_templates_per_agent, "max_templates_per_agent")
    }

    fn store(store: &dyn Store) -> &dyn CollectionStore<Self> {
        store
    }
}

impl Collection for Prompts {
    type Item = Prompt;
    type New = NewPrompt;
    type Key = PromptName;
    const NOUN: &'static str = "prompt";
    const LIST: ListKind = ListKind::Prompts;
    const MCP_KEY: &'static str = "prompts";
    const AUDIT_NOUN: &'static str = "prompt";

    fn key(item: &Prompt) -> &str {
        item.name.as_str()
    }

    fn new_key(new: &NewPrompt) -> &str {
        new.name.as_str()
    }

    fn key_str(key: &PromptName) -> &str {
        key.as_str()
    }

    fn max_count(quotas: &Quotas) -> (u64, &'static str) {
        (quotas.max_prompts_per_agent, "max_prompts_per_agent")
    }

    fn store(store: &dyn Store) -> &dyn CollectionStore<Self> {
        store
    }
}
